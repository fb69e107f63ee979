#!/usr/bin/env bash
# Session 21, device call 7 (the last ~4 device minutes): call 6's Nano-4B sweep showed L32 far
# slower than L16 (nvfp4/fp16sr b512 622.2 vs 329.6 µs): at P = 80, L = 32 the fold's 32 entries
# need 26 KiB of staging, over the 24 KiB budget, so the decode fell back to the two-pass flush
# (flush_impl 1). The decode's budget is now 32 KiB (one round; the verify keeps 24). CPU builds
# at Nano L32: nvfp4/fp16sr flush half 164 registers, 70 KB smem (was 80 / 14.6 KB).
# A. twin-step tests at P = 80, L = 32; B. Nano-4B L32: the two-pass flush forced
# (REPLAYSSM_M2_FLUSH=1, one round of 32 now) vs default. Prediction: b512 nvfp4 ~622 -> ~400.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
t0=$(date +%s)
( timeout 150 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py -k single_round > "$FINAL/t_round.log" 2>&1; echo "rc=$?" >> "$FINAL/t_round.log" ) &
OUT=$FINAL/g SETTINGS="f1:REPLAYSSM_M2_FLUSH=1 d:-" \
  BENCH_ARGS="sweep --shapes nemotron3-nano-4b --batches 1,32,256,512 --L 32 --pairs nvfp4/fp16sr,fp8/fp32,fp32 --no-peers" \
  REPLAYS=5 RUN_S=35 WARM_S=90 bash tests/gpu_scripts/run_knob_grid.sh > "$FINAL/g.log" 2>&1
wait
rm -f $FINAL/g/warm_*
echo "total $(( $(date +%s) - t0 )) s"
grep -E "passed|failed|rc=" "$FINAL/t_round.log" | tail -3
grep -v standard "$FINAL/g/knobs.md" | cut -c1-150
