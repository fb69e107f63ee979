#!/usr/bin/env bash
# Session 21, device call 5: Nano-4B (H96 P80 G8: 12 heads per group) takes no 8-head non-flush
# CTAs (8 does not divide 12). Do 6 or 12 heads per non-flush CTA gain there as 8 did on
# Nemotron-3-Super (1-4 %)? A. tests of the split at 6 / 12 heads (H24 P80 G2) next to 8 / 16;
# B. Nano-4B b256 / b512: nvfp4/fp16sr, fp8/fp32 at L16, fp32, bf16/fp32 at L32 (all split by
# default), non-flush heads 4 (default) / 6 / 12, flush heads 4.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c5; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call5.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
G16="sweep --shapes nemotron3-nano-4b --batches 256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32 --no-peers"
G32="sweep --shapes nemotron3-nano-4b --batches 256,512 --L 32 --pairs fp32,bf16/fp32 --no-peers"
S="d:- h6:REPLAYSSM_M2_HEADS_PER_CTA=6,REPLAYSSM_M2_SPLIT_HPC2=4 h12:REPLAYSSM_M2_HEADS_PER_CTA=12,REPLAYSSM_M2_SPLIT_HPC2=4"
( timeout 240 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py -k wide > "$OUT/t_wide.log" 2>&1; echo "rc=$?" >> "$OUT/t_wide.log" ) &
( OUT=$OUT/g16 SETTINGS="$S" BENCH_ARGS="$G16" REPLAYS=7 RUN_S=50 WARM_S=180 WARM_JOBS=3 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g16.log" 2>&1 ) 
echo "g16 $(( $(date +%s) - t0 )) s"; tarball
OUT=$OUT/g32 SETTINGS="$S" BENCH_ARGS="$G32" REPLAYS=7 RUN_S=50 WARM_S=150 WARM_JOBS=3 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g32.log" 2>&1
wait
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -E "passed|failed|rc=" "$OUT/t_wide.log" | tail -3
for g in g16 g32; do grep -v standard "$OUT/$g/knobs.md" | cut -c1-160; done
