#!/usr/bin/env bash
# Session 12, device call 4 (main 1095f0c: preamble hoist + read L2 prefetch defaults):
#  A. GPU tests of the new defaults (test_gpu_spec -k mamba2, test_gpu_ops + row_order) with warm compiles;
#  B. new defaults vs the old ones (PRE_HOIST=0 READ_L2PF=0) at b32 / b512, T = 2 / 4 / 8;
#  C. REPLAYSSM_M2V_XDRAFT=1 for bf16 / fp16 read copies, b256 / b512 T = 8.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
V=REPLAYSSM_M2V
SPEC="spec --layer mamba2 --batches 32,512 --T 2,4,8 --pairs fp32,fp8/fp32,nvfp4/fp16sr"
GS="d:- old:${V}_PRE_HOIST=0,${V}_READ_L2PF=0"
SPX="spec --layer mamba2 --batches 256,512 --T 8 --pairs bf16/fp32,fp16/fp32"
GX="d:- xd:${V}_XDRAFT=1"
t0=$(date +%s)
( timeout 230 $PYT -n 3 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 230 $PYT -n 3 tests/test_gpu_ops.py tests/test_gpu_row_order.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 230 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
for s in $GX; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 230 python -m bench $SPX --warm-only --no-plots --out /tmp/wx_$n > /tmp/wx_$n.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_spec t_ops; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|Error" "$OUT/$f.log" | tail -6; done
mkdir -p /tmp/ab /tmp/abx
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=100 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
OUT=/tmp/abx SETTINGS="$GX" BENCH_ARGS="$SPX" REPLAYS=5 RUN_S=60 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/abx.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"; cp /tmp/abx/knobs.md "$OUT/knobs_xd.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab abx ab.log abx.log w_*.log wx_*.log)
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/knobs.md" "$OUT/knobs_xd.md"
