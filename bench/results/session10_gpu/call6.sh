#!/usr/bin/env bash
# Session 10, device call 6: GPU tests of the final defaults (x staging on; fp8 / nvfp4 read
# copies also stage the flush rows' drafts; fold unrolled by 2 in the verify), then the spec
# bench b256 T = 4, 8 of the defaults and of the split launch (REPLAYSSM_M2V_SPLIT=1), alone on
# the GPU.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
SP=REPLAYSSM_M2V_SPLIT
SPEC="spec --layer mamba2 --batches 256 --T 4,8 --pairs fp32,fp8/fp32,nvfp4/fp16sr"
GS="d:- split:$SP=1"
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 230 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
( timeout 230 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 230 $PYT -n 2 tests/test_gpu_ops.py tests/test_gpu_row_order.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( timeout 230 python tests/gpu_scripts/check_mamba2_verify.py --quick > "$OUT/t_chk.log" 2>&1; echo "rc=$?" >> "$OUT/t_chk.log"
  timeout 100 python tests/gpu_scripts/check_mamba2_verify_wide.py > "$OUT/t_wide.log" 2>&1; echo "rc=$?" >> "$OUT/t_wide.log" ) &
wait
for f in t_spec t_ops t_chk t_wide; do echo "== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error| ok " "$OUT/$f.log" | tail -6; done
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=110 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_d.log w_split.log)
cat "$OUT/knobs.md"
