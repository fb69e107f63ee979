#!/usr/bin/env bash
# Session 35, call 1 (session 34 call 2, hi_ahead now opt-in) (run `tools/device_slim.sh out` first, carry .device). At the rules
# LATE_CHECK_READ_FMTS (unset REPLAYSSM_M2_LATE_CHECK: on for fp32 / nvfp4 read copies) and
# hi_ahead_for (unset REPLAYSSM_M2_HI_AHEAD: a one-head flush at <= 2 rows issues all its hi
# chunks at its start).
#  A. tests: every Mamba-2 decode test of test_gpu_ops.py (the late-check and hi-ahead
#     bit-identical ones at the default builds among them), 8 xdist workers, beside the warm
#     compiles of B and C.
#  B. REPLAYSSM_M2_HI_AHEAD=1 vs 0: Super / Nano-4B b1 / b2, L8 / L16, fp32,
#     nvfp4/fp16sr, fp8/fp32, bf16/fp32. Prediction: a b1 flush CTA waits out NIT - 1 = 3-4
#     fewer round trips for its hi chunks (~0.5 us each after the fold) and 3 fewer for the B
#     entries (16 loads per thread, unrolled by 4 before): flush step -2..-3 us, so
#     -0.25..-0.4 us a step at L8, half at L16 (fp32 Super L8 4.9 -> ~4.6).
#  C. default vs REPLAYSSM_M2_LATE_CHECK=0 at b4 / b8 (the row split), fp32 and nvfp4/fp16sr.
#     Prediction: 0.97-1.00x (several CTAs per SM hide part of the atomic's wait).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
EB="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 1,2 --L 8,16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots"
SB="h1:REPLAYSSM_M2_HI_AHEAD=1 h0:REPLAYSSM_M2_HI_AHEAD=0"
EC="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 4,8 --L 8,16 --pairs fp32,nvfp4/fp16sr --no-peers --no-plots"
SC="def:- l0:REPLAYSSM_M2_LATE_CHECK=0"
( SETTINGS="$SB" BENCH_ARGS="$EB" WARM_S=240 WARM_JOBS=2 RUN_S=1 OUT=/tmp/c2warmb \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c2warmb.log 2>&1 ) &
( timeout 250 python -m pytest -q -rs -p no:cacheprovider -n 8 tests/test_gpu_ops.py -k "mamba2 and not verify" \
  > "$OUT/t_m2.log" 2>&1; echo "rc=$?" >> "$OUT/t_m2.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
echo "== t_m2: $(grep -E "passed|failed" "$OUT/t_m2.log" | tail -1) $(tail -1 "$OUT/t_m2.log")"; grep -E "^FAILED|^ERROR" "$OUT/t_m2.log" | head -8
OUT=$OUT/ha SETTINGS="$SB" BENCH_ARGS="$EB" REPLAYS=9 RUN_S=100 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/ha.log" 2>&1
echo "B $(( $(date +%s) - t0 )) s"; tarball
# (C is skipped when the call has run past 300 s: the session's device minutes are short)
if [ $(( $(date +%s) - t0 )) -lt 300 ]; then
  OUT=$OUT/lc SETTINGS="$SC" BENCH_ARGS="$EC" REPLAYS=9 RUN_S=60 WARM_S=60 WARM_JOBS=2 \
    bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/lc.log" 2>&1
  echo "C $(( $(date +%s) - t0 )) s"; tarball
fi
grep -v "^|---" "$OUT/ha/knobs.md" | grep -v standard | cut -c1-110
[ -f "$OUT/lc/knobs.md" ] && grep -v "^|---" "$OUT/lc/knobs.md" | grep -v standard | cut -c1-110
