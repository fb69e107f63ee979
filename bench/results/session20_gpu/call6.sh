#!/usr/bin/env bash
# Session 20, device call 6: heads per flush CTA with every flush row at once (call 5: FPOS 32 best).
# b256 / b512 L16, nvfp4/fp16sr, fp8/fp32, nvfp4/fp8sr.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c6; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call6.tgz" . 2>/dev/null); }
t0=$(date +%s)
GF="sweep --shapes nemotron3-super --batches 256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr --no-peers"
OUT=$OUT/gf SETTINGS="d:- f32:REPLAYSSM_M2_SPLIT_FPOS=32 h2f32:REPLAYSSM_M2_SPLIT_FPOS=32,REPLAYSSM_M2_SPLIT_HPC2=2 h1f32:REPLAYSSM_M2_SPLIT_FPOS=32,REPLAYSSM_M2_SPLIT_HPC2=1" \
  BENCH_ARGS="$GF" REPLAYS=7 RUN_S=60 WARM_S=200 WARM_JOBS=4 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gf.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/gf/knobs.md" | cut -c1-200
