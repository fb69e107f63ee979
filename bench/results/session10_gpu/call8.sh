#!/usr/bin/env bash
# Session 10, device call 8: small batches -- the final defaults vs session 9's (x staging,
# drafts staging, fold unroll 2 and the split all off), b1 / b32 / b128, T = 2 and 8, alone on
# the GPU.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SPEC="spec --layer mamba2 --batches 1,32,128 --T 2,8 --pairs fp32,nvfp4/fp16sr"
GS="d:- s9:REPLAYSSM_M2V_XSTAGE=0,REPLAYSSM_M2V_XDRAFT=0,REPLAYSSM_M2_FOLD_UNROLL=1,REPLAYSSM_M2V_SPLIT=0"
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=80 WARM_S=130 WARM_JOBS=2 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log)
cat "$OUT/knobs.md"
