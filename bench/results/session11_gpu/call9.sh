#!/usr/bin/env bash
# Session 11, device call 9: the GPU tests of the landing version (PD 8 from T = 7) that call 8
# did not re-run: the whole test_gpu_spec -k mamba2, test_gpu_ops, test_gpu_row_order.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PYT="python -m pytest -q -rs -p no:cacheprovider"
( timeout 200 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 200 $PYT -n 3 tests/test_gpu_ops.py tests/test_gpu_row_order.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
wait
for f in t_spec t_ops; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|Error" "$OUT/$f.log" | tail -6; done
