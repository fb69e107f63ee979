#!/usr/bin/env bash
# Session 23 call 6 (landing of the small-batch split, use_small_split: narrow read copies at
# L <= 8 from 8 rows below the order's 32 take the order + split launch).
#  A. GPU tests: test_gpu_ops -k "small_batch_split or split_pair_half_block".
#  B. New default vs REPLAYSSM_GDN_ORDER=0 (= the old default below 32 rows: one launch), L8,
#     b8 (call 5: 1.04-1.25x) and b16 (not timed before). Prediction: b8 as call 5, b16 gains
#     as much or more (more flush rows per step).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c6; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call6.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
( timeout 150 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "small_batch_split or split_pair_half_block" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
G="sweep --layer gdn --batches 8,16 --L 8 --pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots"
( timeout 140 python -m bench $G --warm-only --out /tmp/w1 > "$OUT/w1.log" 2>&1 ) &
( REPLAYSSM_GDN_ORDER=0 timeout 140 python -m bench $G --warm-only --out /tmp/w2 > "$OUT/w2.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
echo "== t_ops"; grep -E "passed|failed|rc=|FAILED" "$OUT/t_ops.log" | tail -4
OUT=$OUT/ss SETTINGS="new:- old:REPLAYSSM_GDN_ORDER=0" BENCH_ARGS="$G" \
  REPLAYS=7 RUN_S=60 WARM_S=20 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/ss.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard" "$OUT/ss/knobs.md" | cut -c1-160
