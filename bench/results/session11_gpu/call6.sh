#!/usr/bin/env bash
# Session 11, device call 6: the split launch for the fp32 pair now that its flush kernel
# (rows = 2) has the fragment flush: default (single launch) vs REPLAYSSM_M2V_SPLIT=1, spec fp32
# b256 / b512 T = 6, 8; the split forced on checked against the single launch (same process,
# same inputs; fp32 states within fp32 rounding: the same fragment flush code in both).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SP=REPLAYSSM_M2V_SPLIT
SPEC="spec --layer mamba2 --batches 256,512 --T 6,8 --pairs fp32"
GS="d:- split:$SP=1"
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 200 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
CHK=tests/gpu_scripts/check_mamba2_verify_wide.py
( timeout 150 python $CHK --env $SP --values 0,1 --exact --pairs fp32 > "$OUT/t_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_split.log" ) &
wait
echo "== t_split"; cat "$OUT/t_split.log"
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=90 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_*.log)
cat "$OUT/knobs.md"
