#!/usr/bin/env bash
# Session 34, call 1 (run `tools/device_slim.sh out` first, carry .device).
#  A. tests: the Mamba-2 late publish check (REPLAYSSM_M2_LATE_CHECK=1 vs 0, bit-identical), beside
#     the warm compiles of B and C.
#  B. Mamba-2 timing, REPLAYSSM_M2_LATE_CHECK=1 vs 0: Nemotron-3-Super / Nano-4B b1 / b2, L8 / L16,
#     fp32, nvfp4/fp16sr, fp8/fp32, bf16/fp32. Prediction (the GDN tail's bit 1 gave 4-8 % at b1):
#     warp 0 no longer waits out the arrive's round trip before barrier 1 -- 0.1-0.3 us a step at
#     b1 (fp32 5.2 -> ~4.9), less at b2.
#  C. Diagnosis: where the GDN 4B b1 split pairs' extra ~0.5 us a step goes (fp8/fp32, bf16/fp32,
#     nvfp4 pairs 3.6-3.9 us vs fp32 / fp16sr 3.2-3.3): the pinned non-flush-only / flush-only
#     graph steps (--phases). Prediction: non-flush-only equal (~3.1-3.2 us for every pair), the
#     flush-only steps 8-12 us for split pairs vs ~5 for fp32 / fp16sr.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
E="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 1,2 --L 8,16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots"
S="lc:REPLAYSSM_M2_LATE_CHECK=1 l0:REPLAYSSM_M2_LATE_CHECK=0"
G="sweep --layer gdn --shapes qwen3.5-4b --batches 1 --L 8,16 --pairs fp32,fp16sr,fp8/fp32,bf16/fp32,nvfp4/fp16sr,nvfp4/fp8sr --no-peers --no-plots --phases"
( SETTINGS="$S" BENCH_ARGS="$E" WARM_S=280 WARM_JOBS=2 RUN_S=1 OUT=/tmp/c1warm \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c1warm.log 2>&1 ) &
( timeout 280 python -m bench $G --warm-only --out /tmp/warm_g > /tmp/c1warm_g.log 2>&1 ) &
T="timeout 280 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
( $T -k "late_check_bit_identical" > "$OUT/t_lc.log" 2>&1; echo "rc=$?" >> "$OUT/t_lc.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
echo "== t_lc: $(grep -E "passed|failed" "$OUT/t_lc.log" | tail -1) $(tail -1 "$OUT/t_lc.log")"; grep -E "^FAILED|^ERROR" "$OUT/t_lc.log" | head -8
OUT=$OUT/lc SETTINGS="$S" BENCH_ARGS="$E" REPLAYS=9 RUN_S=100 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/lc.log" 2>&1
echo "B $(( $(date +%s) - t0 )) s"; tarball
timeout 100 python -m bench $G --replays 9 --out "$OUT/gph" > "$OUT/gph.log" 2>&1
echo "C $(( $(date +%s) - t0 )) s"; tarball
grep -v "^|---" "$OUT/lc/knobs.md" | cut -c1-110
grep -E "^\|" "$OUT/gph/sweep.md" | grep -v -- "---" | cut -d'|' -f3-6
