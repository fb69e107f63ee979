#!/usr/bin/env bash
# Session 8, device call 9: the GDN verify phase profile of the final defaults (tail + tensor-core
# read dots; nvfp4 past T = 4 without the tail), T = 8 b256, pinned non-flush and flush rows --
# the starting point of the next session.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
timeout 150 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --verify-T 8 \
  --pairs fp32,nvfp4/fp16sr,fp8/fp32 --batches 256 --modes nonflush,flush --out "$OUT" > "$OUT/prof.log" 2>&1
grep "^|" "$OUT/prof.log" || tail -20 "$OUT/prof.log"
