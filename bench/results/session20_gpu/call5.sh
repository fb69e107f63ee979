#!/usr/bin/env bash
# Session 20, device call 5: the split's flush launch width. Its default is one wave of flush CTAs
# (b256 / b512: 20 rows at once = 640 CTAs, 5 per SM by shared memory), so at its start it leaves
# no room on an SM for the non-flush launch's CTAs, and the issue-bound flush and the
# latency-bound read do not share SMs. Fewer positions (rows at once) let them share: grid of
# REPLAYSSM_M2_SPLIT_FPOS = 4 / 8 / 12 / 16 / 32 against the default, whole steps, Nemotron-3-Super
# b256 / b512 L16, nvfp4/fp16sr, fp8/fp32, nvfp4/fp8sr.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c5; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call5.tgz" . 2>/dev/null); }
t0=$(date +%s)
GF="sweep --shapes nemotron3-super --batches 256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr --no-peers"
OUT=$OUT/gf SETTINGS="d:- f4:REPLAYSSM_M2_SPLIT_FPOS=4 f8:REPLAYSSM_M2_SPLIT_FPOS=8 f12:REPLAYSSM_M2_SPLIT_FPOS=12 f16:REPLAYSSM_M2_SPLIT_FPOS=16 f32:REPLAYSSM_M2_SPLIT_FPOS=32" \
  BENCH_ARGS="$GF" REPLAYS=7 RUN_S=60 WARM_S=200 WARM_JOBS=6 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gf.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/gf/knobs.md" | cut -c1-200
