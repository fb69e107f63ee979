#!/usr/bin/env bash
# Session 22 call 4: the GDN decode's fp32 read copy at 64 value rows per CTA up to 2048
# (row, value head) pairs (launch_block_v; call 3: 1-7 % faster at b8-b64). A. its GPU test
# (test_gpu_ops -k half_block: L16 / L32 at b30, the torch reference). B. new default vs 128 rows
# (REPLAYSSM_GDN_BLOCK_V=128, the old default there), Qwen3.5-4B b8-b128 and 122B (64 value
# heads: the rule stops at b32), L 16 / 32. Prediction: 4B as call 3 (b8-b64 1-7 %), b128
# identical (128 rows both), 122B b8-b32 a similar 1-7 %.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n4; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call4.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
( timeout 200 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "half_block" > "$OUT/t_half.log" 2>&1; echo "rc=$?" >> "$OUT/t_half.log" ) &
GDN="sweep --layer gdn --shapes qwen3.5-4b,qwen3.5-122b --batches 8,32,64,128 --L 16,32 --pairs fp32 --no-plots"
for v in "" 128; do
  ( REPLAYSSM_GDN_BLOCK_V=$v timeout 200 python -m bench $GDN --warm-only --out /tmp/w$v > "$OUT/w$v.log" 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
echo "== t_half"; grep -E "passed|failed|rc=|FAILED" "$OUT/t_half.log" | tail -4
OUT=$OUT/bv SETTINGS="new:- old:REPLAYSSM_GDN_BLOCK_V=128" BENCH_ARGS="$GDN" \
  REPLAYS=7 RUN_S=70 WARM_S=100 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/bv.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard\|fla\|FLA" "$OUT/bv/knobs.md" | cut -c1-160
