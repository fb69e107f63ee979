#!/usr/bin/env bash
# Session 12, device call 9: REPLAYSSM_M2V_DOT_PIECES=2 (fp32 output dots from 2 tf32 pieces
# instead of 3; the fold stays exact): spec fuzz twin/teeth with it, and b256 T = 4 / 8 fp32 d | p2.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
SPEC="spec --layer mamba2 --batches 256 --T 4,8 --pairs fp32"
GS="d:- p2:REPLAYSSM_M2V_DOT_PIECES=2"
t0=$(date +%s)
( env REPLAYSSM_M2V_DOT_PIECES=2 timeout 120 $PYT -n 3 tests/test_gpu_spec.py -k "mamba2 and (twin or teeth)" \
    > "$OUT/t_fuzz.log" 2>&1; echo "rc=$?" >> "$OUT/t_fuzz.log" ) &
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 120 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
echo "== t_fuzz"; grep -E "passed|failed|FAIL|rc=|Error" "$OUT/t_fuzz.log" | tail -6
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=40 WARM_S=15 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_*.log)
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/knobs.md"
