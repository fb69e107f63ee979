#!/usr/bin/env bash
# Session 21, device call 2. Call 1 (next_call1.sh) timed 8 heads per non-flush CTA in the split
# (fp8/fp32 b512 343.6 -> 332.3 µs, b256 178.8 -> 175.9) but its tests could not run it (the test
# layer has H / G = 4). And its forced fp32 split at L32 left the non-flush rows unchanged
# (384.5 both): fp32 non-flush rows are not bound by CTAs per SM. Session 13: fp32 non-flush-only
# b256 L16 327.6 µs = 81 % of copy BW for 4.41 MB/row. Question: do more heads per non-flush CTA
# (the per-CTA preamble shared) lift fp32 / 16-bit read copies too?
#  A. tests: the split with 8 / 16 heads per non-flush CTA on an H=32 G=2 layer (new test);
#  B. fp32 at L16 / L32, b256 / b512: default vs forced split at 4 / 8 / 16 non-flush heads;
#  C. fp8/fp32 at b64 / b128 (where the 8-head default would start): default vs 8 heads;
#  D. bf16/fp32 and fp16/fp32 at L16 / L32 b256 / b512: default vs split at 4 / 8 heads.
# Predictions: B fp32 L16 b256 non-flush 8 heads 5-10 % faster (preamble ~930 SASS / thread per
# CTA is ~20 % of a 4-head CTA's instructions, shared over 2x the heads); whole step 331 -> ~310.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
timeout 200 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py -k "wide_nonflush" > "$OUT/t_wide.log" 2>&1; echo "rc=$?" >> "$OUT/t_wide.log"
echo "phase A $(( $(date +%s) - t0 )) s"; tail -3 "$OUT/t_wide.log"; tarball
H8="REPLAYSSM_M2_SPLIT=1,REPLAYSSM_M2_SPLIT_HPC2=4,REPLAYSSM_M2_HEADS_PER_CTA"
OUT=$OUT/gB SETTINGS="d:- s4:REPLAYSSM_M2_SPLIT=1 s8:$H8=8 s16:$H8=16" \
  BENCH_ARGS="sweep --shapes nemotron3-super --batches 256,512 --L 16,32 --pairs fp32 --no-peers --phases" \
  REPLAYS=7 RUN_S=70 WARM_S=200 WARM_JOBS=4 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gB.log" 2>&1
tarball; echo "phase B $(( $(date +%s) - t0 )) s"
OUT=$OUT/gC SETTINGS="d:- h8:REPLAYSSM_M2_HEADS_PER_CTA=8,REPLAYSSM_M2_SPLIT_HPC2=4" \
  BENCH_ARGS="sweep --shapes nemotron3-super --batches 64,128 --L 16 --pairs fp8/fp32,nvfp4/fp16sr --no-peers" \
  REPLAYS=7 RUN_S=50 WARM_S=150 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gC.log" 2>&1
tarball; echo "phase C $(( $(date +%s) - t0 )) s"
OUT=$OUT/gD SETTINGS="d:- s4:REPLAYSSM_M2_SPLIT=1 s8:$H8=8" \
  BENCH_ARGS="sweep --shapes nemotron3-super --batches 256,512 --L 16,32 --pairs bf16/fp32,fp16/fp32 --no-peers" \
  REPLAYS=7 RUN_S=70 WARM_S=200 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gD.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
for g in gB gC gD; do grep -v standard "$OUT/$g/knobs.md" | cut -c1-150; done
