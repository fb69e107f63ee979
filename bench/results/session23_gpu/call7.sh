#!/usr/bin/env bash
# Session 23 call 7 (the last ~5 device minutes, timing only): GDN b16 at L16, default (one
# launch) vs the split forced (ORDER=1, SPLIT=1): does the small-batch split rule (L <= 8 now)
# extend to L16 at b16? (call 5: L16 b8 lost on the 4B, 0.85-0.93x; call 6: L8 b16 won 1.1-1.5x)
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c7; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call7.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
G="sweep --layer gdn --batches 16 --L 16 --pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots"
OUT=$OUT/s16 SETTINGS="d:- sp:REPLAYSSM_GDN_ORDER=1,REPLAYSSM_GDN_SPLIT=1" BENCH_ARGS="$G" \
  REPLAYS=7 RUN_S=50 WARM_S=90 WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/s16.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard" "$OUT/s16/knobs.md" | cut -c1-160
