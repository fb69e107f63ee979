#!/usr/bin/env bash
# Session 20, device call 7: the GPU tests on the landing commit (16-bit read copies back on the
# single launch after call 4): test_gpu_row_order, test_gpu_ops, test_gpu_spec -k mamba2.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
t0=$(date +%s)
( timeout 320 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py > "$FINAL/t_order.log" 2>&1; echo "rc=$?" >> "$FINAL/t_order.log" ) &
( timeout 320 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py > "$FINAL/t_ops.log" 2>&1; echo "rc=$?" >> "$FINAL/t_ops.log" ) &
( timeout 320 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_spec.py -k mamba2 > "$FINAL/t_spec.log" 2>&1; echo "rc=$?" >> "$FINAL/t_spec.log" ) &
wait
echo "total $(( $(date +%s) - t0 )) s"
for t in t_order t_ops t_spec; do echo "== $t"; grep -E "passed|failed|rc=|FAILED" "$FINAL/$t.log" | tail -4; done
