#!/usr/bin/env bash
# Session 9, device call 1: (a) the GDN flush split into sub-phases (REPLAYSSM_GDN_PROF=1 now also
# stamps inside _flush and records whether warp 0's encode went to the generic per-element path),
# decode and verify T = 8, all rows flushing, b256; (b) the Mamba-2 verify phase profile
# (branch wip/m2v-prof, merged), T = 8 b256 non-flush / flush.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
P=tests/gpu_scripts/prof_mamba2_replay.py
timeout 170 python $P --layer gdn --pairs fp32,nvfp4/fp16sr,nvfp4/fp32,fp8/fp32 --batches 256 \
  --modes flush --out "$OUT" > "$OUT/gdn_decode.log" 2>&1
timeout 170 python $P --layer gdn --verify-T 8 --pairs fp32,nvfp4/fp16sr,nvfp4/fp32,fp8/fp32 \
  --batches 256 --modes flush --out "$OUT" > "$OUT/gdn_verify8.log" 2>&1
timeout 150 python $P --verify-T 8 --pairs fp32,nvfp4/fp16sr --batches 256 --modes nonflush,flush \
  --out "$OUT" > "$OUT/m2_verify8.log" 2>&1
for f in gdn_decode gdn_verify8 m2_verify8; do echo "== $f"; grep "^|" "$OUT/$f.log" || tail -15 "$OUT/$f.log"; done
