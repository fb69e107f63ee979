#!/usr/bin/env bash
# Session 27, call 4: where the row split at k = 2 wins on Nemotron-3-Super (call 3: b4 1.01-1.25x,
# b2 0.86-0.94x, b1 0.98-1.05x): base / rs2 at b3-b7, L8 / L16, five pairs (fp16sr and fp8/fp16sr:
# SR targets). Prediction: b4-b7 >= 1.05x for fp32 / fp8 / 16-bit reads, b3 mixed.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c4; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
M="sweep --layer mamba2 --shapes nemotron3-super --batches 3,4,5,6,7 --L 8,16 --pairs fp32,fp8/fp32,bf16/fp32,fp16sr,fp8/fp16sr --no-peers --no-plots"
OUT=$OUT/m SETTINGS="base:- rs2:REPLAYSSM_M2_ROW_SPLIT=2" BENCH_ARGS="$M" REPLAYS=7 RUN_S=80 WARM_S=120 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/m.log" 2>&1
(cd "$OUT" && tar czf "$FINAL/call4.tgz" --exclude='warm_*' . 2>/dev/null)
grep -v "^|---" "$OUT/m/knobs.md" | grep -v "standard" | cut -c1-110
