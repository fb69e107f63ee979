#!/usr/bin/env bash
# Session 23 call 5: GDN narrow read copies at small batches, default (one launch, no order
# below 32 rows) vs the split forced (REPLAYSSM_GDN_ORDER=1 + SPLIT=1: the order kernel, then the
# flush rows' 256-thread persistent launch on a side stream beside the non-flush launch). At b8 a
# step is set by one flushing head's CTA (call 1's profile: fp8/fp32 flush CTA 28 µs at 128
# threads); the split's flush CTA has 8 warps per head. Prediction: nvfp4/fp16sr (whole-head
# CTAs) 10-25 % faster at 4B b8 / 122B b4-b8, fp8 / bf16 (64 rows now) within +-5 %, the order
# launch costing ~2 µs.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c5; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call5.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
G="sweep --layer gdn --batches 4,8 --L 8,16 --pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots"
OUT=$OUT/sp SETTINGS="d:- sp:REPLAYSSM_GDN_ORDER=1,REPLAYSSM_GDN_SPLIT=1" BENCH_ARGS="$G" \
  REPLAYS=7 RUN_S=80 WARM_S=150 WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/sp.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard" "$OUT/sp/knobs.md" | cut -c1-160
grep -h "Error\|error" "$OUT"/sp/*.log | head -5
