#!/usr/bin/env bash
# Session 8, device call 2: where a GDN verify CTA (T = 8, b256, Qwen3.5-4B) spends its time --
# the profiling build (REPLAYSSM_GDN_PROF=1: one CTA per (row, value head), %clock64 at the phase
# boundaries), pinned non-flush (h = L - T) and flush rows, fp32 and nvfp4/fp16sr; then T = 4.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
for T in 8 4; do
  timeout 200 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --verify-T $T \
    --pairs fp32,nvfp4/fp16sr --batches 256 --modes nonflush,flush --out "$OUT" > "$OUT/prof_T$T.log" 2>&1
  grep "^|" "$OUT/prof_T$T.log" || tail -20 "$OUT/prof_T$T.log"
done
