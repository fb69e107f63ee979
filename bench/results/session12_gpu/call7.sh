#!/usr/bin/env bash
# Session 12, device call 7 (main 84cc213 + results): GPU tests of the landing version, and the
# new verify defaults on the untimed bf16 / fp16 read copies: b256 T = 4 / 8,
# d | h (REPLAYSSM_M2V_PRE_HOIST=1) | nopf (REPLAYSSM_M2V_READ_L2PF=0).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
V=REPLAYSSM_M2V
SPEC="spec --layer mamba2 --batches 256 --T 4,8 --pairs bf16/fp32,fp16/fp32"
GS="d:- h:${V}_PRE_HOIST=1 nopf:${V}_READ_L2PF=0"
t0=$(date +%s)
( timeout 230 $PYT -n 3 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 230 $PYT -n 3 tests/test_gpu_ops.py tests/test_gpu_row_order.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 230 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_spec t_ops; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|Error" "$OUT/$f.log" | tail -6; done
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=60 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_*.log)
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/knobs.md"
