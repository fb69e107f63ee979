#!/usr/bin/env bash
# Session 24, call 2.
#  A. GPU tests of the Mamba-2 small-batch split (new default: order + split below 32 rows at
#     SPLIT_SMALL_RULE's (L8, b8) / (L16, b16)) and of the GDN one, plus test_gpu_row_order.
#  B. Mamba-2 grid, b4..48 at L8 / 16, every read copy: new default vs one launch below 32 rows
#     (REPLAYSSM_M2_SPLIT=0) vs order + split everywhere (ORDER=1, SPLIT=1): the rule's edges
#     (b4 L8, b8 L16, b24) and whether fp32 / bf16 at b32 / 48 (order, no split) should split.
#     Prediction: new = sp below 32 rows; sp 0-10 % faster than new at b32 / 48 fp32 / bf16 L8.
#  C. GDN grid, b32 / 48 at L8 / 16 narrow pairs: default (order, one launch) vs the split
#     (REPLAYSSM_GDN_SPLIT=1). Prediction: the 122B 15-30 % faster split (b24 split 32 µs vs
#     b32 one launch 52 µs in call 1), the 4B within +-5 % at L16 (session18 call3: 28.1 / 28.6).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
M="sweep --layer mamba2 --batches 4,8,16,24,32,48 --L 8,16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots"
G="sweep --layer gdn --batches 32,48 --L 8,16 --pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots"
( timeout 280 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "small_batch_split" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( timeout 280 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py > "$OUT/t_ro.log" 2>&1; echo "rc=$?" >> "$OUT/t_ro.log" ) &
for s in "new:" "one:REPLAYSSM_M2_SPLIT=0" "sp:REPLAYSSM_M2_ORDER=1 REPLAYSSM_M2_SPLIT=1"; do
  ( env ${s#*:} timeout 200 python -m bench $M --warm-only --out /tmp/wm_${s%%:*} > "$OUT/wm_${s%%:*}.log" 2>&1 ) &
done
for s in "new:" "sp:REPLAYSSM_GDN_SPLIT=1"; do
  ( env ${s#*:} timeout 200 python -m bench $G --warm-only --out /tmp/wg_${s%%:*} > "$OUT/wg_${s%%:*}.log" 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for t in t_ops t_ro; do echo "== $t"; grep -E "passed|failed|rc=|FAILED|Error" "$OUT/$t.log" | tail -5; done
OUT=$OUT/ms SETTINGS="new:- one:REPLAYSSM_M2_SPLIT=0 sp:REPLAYSSM_M2_ORDER=1,REPLAYSSM_M2_SPLIT=1" BENCH_ARGS="$M" \
  REPLAYS=7 RUN_S=100 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/ms.log" 2>&1
tarball
OUT=$OUT/gs SETTINGS="new:- sp:REPLAYSSM_GDN_SPLIT=1" BENCH_ARGS="$G" \
  REPLAYS=7 RUN_S=80 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gs.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
cut -c1-120 "$OUT/ms/knobs.md" | grep -v "^| layer\|^|---"
cut -c1-120 "$OUT/gs/knobs.md" | grep -v "^| layer\|^|---"
