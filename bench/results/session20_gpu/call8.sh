#!/usr/bin/env bash
# Session 20, device call 8 (the last ~4 minutes of the budget; timing only, no tests): heads per
# non-flush CTA in the split (see next_call1.sh): b512 L16 fp8/fp32 and nvfp4/fp16sr, default vs
# 8 heads per non-flush CTA (flush CTAs at 4), nvfp4 also unstaged. Static SASS of the non-flush
# build (CPU): fp8 1016 / 1264 / 1680 instructions at 4 / 8 / 16 heads, nvfp4 staged 1304 / 1672,
# unstaged 1160 / 1352 -- most of a 4-head CTA is per-CTA work if those counts hold dynamically.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
t0=$(date +%s)
G8="sweep --shapes nemotron3-super --batches 512 --L 16 --pairs fp8/fp32,nvfp4/fp16sr --no-peers"
OUT=$FINAL/g8 SETTINGS="d:- h8:REPLAYSSM_M2_HEADS_PER_CTA=8,REPLAYSSM_M2_SPLIT_HPC2=4 h8u:REPLAYSSM_M2_HEADS_PER_CTA=8,REPLAYSSM_M2_SPLIT_HPC2=4,REPLAYSSM_M2_STAGED=0" \
  BENCH_ARGS="$G8" REPLAYS=5 RUN_S=40 WARM_S=100 WARM_JOBS=3 bash tests/gpu_scripts/run_knob_grid.sh > "$FINAL/g8.log" 2>&1
echo "total $(( $(date +%s) - t0 )) s"
cat "$FINAL/g8/knobs.md" | cut -c1-160
