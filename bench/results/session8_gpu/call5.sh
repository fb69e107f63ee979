#!/usr/bin/env bash
# Session 8, device call 5: why nvfp4/fp16sr verify flush rows lose with the tail at T = 8
# (call4: flush-only b256 1523 -> 1821 µs): the verify phase profile of pinned flush rows,
# tail off / on, nvfp4/fp16sr and fp8/fp32.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
for e in 0 1; do
  mkdir -p "$OUT/tail$e"
  REPLAYSSM_GDN_VERIFY_TAIL=$e timeout 200 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn \
    --verify-T 8 --pairs nvfp4/fp16sr,fp8/fp32 --batches 256 --modes flush --out "$OUT/tail$e" \
    > "$OUT/prof_tail$e.log" 2>&1
  echo "tail=$e"; grep "^|" "$OUT/prof_tail$e.log" || tail -20 "$OUT/prof_tail$e.log"
done
