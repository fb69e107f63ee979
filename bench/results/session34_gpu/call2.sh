#!/usr/bin/env bash
# Session 34, call 2 (run `tools/device_slim.sh out` first, carry .device). At the rule
# LATE_CHECK_READ_FMTS (unset REPLAYSSM_M2_LATE_CHECK: on for fp32 / nvfp4 read copies).
#  A. tests: every Mamba-2 decode test of test_gpu_ops.py (128, the late check bit-identical one
#     at the default builds among them), 6 xdist workers, beside the warm compiles of B.
#  B. Mamba-2 timing, default vs REPLAYSSM_M2_LATE_CHECK=0, Super / Nano-4B b1 / b4 / b8, L8 / L16,
#     fp32 and nvfp4/fp16sr: does call 1's b1 / b2 gain hold where the row split runs (b4-b8)?
#     Prediction: 0.97-1.00x there (more CTAs per SM, the atomic's wait partly hidden).
#  C. GDN b1 in-kernel profile (REPLAYSSM_GDN_PROF), Qwen3.5-4B L16, flush + non-flush steps,
#     fp8/fp32, bf16/fp32, nvfp4/fp16sr, fp16sr: the flush sub-phases of the split pairs, whose
#     flush-only step is 11.9-13.6 us (call 1) against 5.2-6.3 for fp32 / fp16sr.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
E="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 1,4,8 --L 8,16 --pairs fp32,nvfp4/fp16sr --no-peers --no-plots"
S="def:- l0:REPLAYSSM_M2_LATE_CHECK=0"
( SETTINGS="$S" BENCH_ARGS="$E" WARM_S=250 WARM_JOBS=2 RUN_S=1 OUT=/tmp/c2warm \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c2warm.log 2>&1 ) &
( timeout 280 python -m pytest -q -rs -p no:cacheprovider -n 6 tests/test_gpu_ops.py -k "mamba2 and not verify" \
  > "$OUT/t_m2.log" 2>&1; echo "rc=$?" >> "$OUT/t_m2.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
echo "== t_m2: $(grep -E "passed|failed" "$OUT/t_m2.log" | tail -1) $(tail -1 "$OUT/t_m2.log")"; grep -E "^FAILED|^ERROR" "$OUT/t_m2.log" | head -8
OUT=$OUT/lc SETTINGS="$S" BENCH_ARGS="$E" REPLAYS=9 RUN_S=100 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/lc.log" 2>&1
echo "B $(( $(date +%s) - t0 )) s"; tarball
timeout 150 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --pairs fp8/fp32,bf16/fp32,nvfp4/fp16sr,fp16sr \
  --batches 1 --modes nonflush,flush --out "$OUT/prof_gdn" > "$OUT/prof_gdn.log" 2>&1
echo "C $(( $(date +%s) - t0 )) s"; tarball
grep -v "^|---" "$OUT/lc/knobs.md" | grep -v standard | cut -c1-110
grep -E "^\|" "$OUT/prof_gdn.log" | cut -c1-220
