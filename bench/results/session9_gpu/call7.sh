#!/usr/bin/env bash
# Session 9, device call 7: the Mamba-2 verify's non-flush head loop split (dots + x staged vs
# outputs, summed over the CTA's heads; REPLAYSSM_M2_PROF=1), T = 8 b256; the Mamba-2 decode
# profile through the refactored script (non-flush nvfp4/fp16sr b256).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
P=tests/gpu_scripts/prof_mamba2_replay.py
timeout 150 python $P --verify-T 8 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --batches 256 --modes nonflush \
  --out "$OUT" > "$OUT/m2_verify8.log" 2>&1 &
timeout 150 python $P --pairs nvfp4/fp16sr --batches 256 --modes nonflush --out "$OUT/dec" \
  > "$OUT/m2_decode.log" 2>&1
wait
for f in m2_verify8 m2_decode; do echo "== $f"; grep -E "^\||per CTA" "$OUT/$f.log" || tail -15 "$OUT/$f.log"; done
