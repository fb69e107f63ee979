#!/usr/bin/env bash
# Session 22 call 5 (the last ~290 device seconds): the decode on a draft-capable cache
# (max_draft 8: ring of 40, 39 fold entries at L32), the 32 KiB round (default since this session,
# GPU-tested in call 2, single-pass flush, fewer CTAs/SM for the shared build: nvfp4 6 -> 3) vs 24
# (REPLAYSSM_M2_FOLD_SMEM=24: two rounds, the two-pass flush, the old default), Nemotron-3-Super
# L32 b32 / b256. Prediction (from session 21's R = L + 1 case at P80): nvfp4 much faster at
# 32 KiB, fp32 within a few %.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n5; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call5.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
M2="sweep --layer mamba2 --shapes nemotron3-super --batches 32,256 --L 32 --max-draft 8 --pairs nvfp4/fp16sr,fp32 --no-peers --no-plots"
OUT=$OUT/fd SETTINGS="f32:- f24:REPLAYSSM_M2_FOLD_SMEM=24" BENCH_ARGS="$M2" \
  REPLAYS=5 RUN_S=50 WARM_S=110 WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/fd.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/fd/knobs.md" | cut -c1-160
