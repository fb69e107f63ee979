#!/usr/bin/env bash
# Written in session 24 for the next session's first device call (not run yet).
#  A. Mamba-2 fp32 / bf16 read copies at L8 from 64 rows: default (order, one launch below
#     SPLIT_WIDE_MIN_L = 32) vs the split (REPLAYSSM_M2_SPLIT=1). Session 24 call 3: Nano-4B fp32
#     L8 b32 / b48 1.19x with the split; larger batches at L8 never timed. Prediction: Nano-4B
#     fp32 1.1-1.2x at b64-b256, Nemotron-3-Super within +-3 %.
#  B. GDN Qwen3.5-4B at L16, b24..56: default (split since session 24) vs REPLAYSSM_GDN_SPLIT=0,
#     to see whether b32's 1.01-1.07x loss is a one-cell dip (wave quantisation) or a band.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/next_call1.tgz" --exclude='warm_*' . 2>/dev/null); }
M="sweep --layer mamba2 --batches 64,128,256 --L 8 --pairs fp32,bf16/fp32 --no-peers --no-plots"
G="sweep --layer gdn --shapes qwen3.5-4b --batches 24,32,40,56 --L 16 --pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots"
OUT=$OUT/ms SETTINGS="new:- sp:REPLAYSSM_M2_SPLIT=1" BENCH_ARGS="$M" \
  REPLAYS=7 RUN_S=120 WARM_S=200 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/ms.log" 2>&1
tarball
OUT=$OUT/gs SETTINGS="new:- one:REPLAYSSM_GDN_SPLIT=0" BENCH_ARGS="$G" \
  REPLAYS=7 RUN_S=90 WARM_S=200 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gs.log" 2>&1
tarball
grep -v "standard\|^|---" "$OUT/ms/knobs.md" | cut -c1-120
grep -v "standard\|^|---" "$OUT/gs/knobs.md" | cut -c1-120
