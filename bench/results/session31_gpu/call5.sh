#!/usr/bin/env bash
# Session 31, call 5 (run `tools/device_slim.sh out` first, carry .device).
# The fp8 / 16-bit read pairs over a CTA pair at whole-head CTAs (REPLAYSSM_GDN_BLOCK_V=128,
# REPLAYSSM_GDN_FLUSH_HALVES=2: 4B b1 32 -> 64 CTAs) against the default (64 rows, halves over
# two warps). Call 4's profile (128 rows): the pair's flush 16.4 -> 12.5 us for fp8/fp32; at 64
# rows the pair did not gain (call 4). Prediction: the non-flush steps at 128 rows lose ~0.2-0.4
# us (session 30 call3/bv: 0.87-1.04x), the flush gains ~4 us / L: at L8 about even, L16 worse.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c5; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
t0=$(date +%s)
E="sweep --layer gdn --shapes qwen3.5-4b,qwen3.5-122b --batches 1,2 --L 8,16 --pairs fp8/fp32,bf16/fp32,fp16sr --no-plots"
OUT=$OUT/bv SETTINGS="def:- p128:REPLAYSSM_GDN_BLOCK_V=128,REPLAYSSM_GDN_FLUSH_HALVES=2" BENCH_ARGS="$E" \
  REPLAYS=9 RUN_S=90 WARM_S=150 WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/bv.log" 2>&1
(cd "$OUT" && tar czf "$FINAL/call5.tgz" --exclude='warm_*' . 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/bv/knobs.md" | grep -v standard | cut -c1-110
