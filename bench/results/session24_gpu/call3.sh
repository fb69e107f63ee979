#!/usr/bin/env bash
# Session 24, call 3 (the landed defaults: small splits up to 64 rows).
#  A. GPU tests: test_gpu_ops -k small_batch_split (Mamba-2 b8 L8 / b16 L16 / b40 L16, GDN b8 L8
#     / b16 L16 / b48 L16) and the part of test_gpu_row_order call 2's timeout cut off.
#  B. A-B of the new defaults against the old ones in one run: Mamba-2 fp32 / bf16 at b32 / 48,
#     L8 / 16 (old: order, one launch = REPLAYSSM_M2_SPLIT=0 there); GDN narrow pairs at b32 / 48
#     (old: order, one launch = REPLAYSSM_GDN_SPLIT=0 there). Prediction: call 2's sp / new.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
M="sweep --layer mamba2 --batches 32,48 --L 8,16 --pairs fp32,bf16/fp32 --no-peers --no-plots"
G="sweep --layer gdn --batches 32,48 --L 8,16 --pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots"
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "small_batch_split" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py -k "split or p80 or draft_ring or capture" > "$OUT/t_ro.log" 2>&1; echo "rc=$?" >> "$OUT/t_ro.log" ) &
for s in "new:" "old:REPLAYSSM_M2_SPLIT=0"; do
  ( env ${s#*:} timeout 200 python -m bench $M --warm-only --out /tmp/wm_${s%%:*} > "$OUT/wm_${s%%:*}.log" 2>&1 ) &
done
for s in "new:" "old:REPLAYSSM_GDN_SPLIT=0"; do
  ( env ${s#*:} timeout 200 python -m bench $G --warm-only --out /tmp/wg_${s%%:*} > "$OUT/wg_${s%%:*}.log" 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for t in t_ops t_ro; do echo "== $t"; grep -E "passed|failed|rc=|FAILED|Error" "$OUT/$t.log" | tail -5; done
OUT=$OUT/ms SETTINGS="new:- old:REPLAYSSM_M2_SPLIT=0" BENCH_ARGS="$M" \
  REPLAYS=7 RUN_S=60 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/ms.log" 2>&1
tarball
OUT=$OUT/gs SETTINGS="new:- old:REPLAYSSM_GDN_SPLIT=0" BENCH_ARGS="$G" \
  REPLAYS=7 RUN_S=60 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gs.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard\|^|---" "$OUT/ms/knobs.md" | cut -c1-120
grep -v "standard\|^|---" "$OUT/gs/knobs.md" | cut -c1-120
