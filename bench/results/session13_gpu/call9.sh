#!/usr/bin/env bash
# Session 13, device call 9: after the review fixes (events created once for the fork / join; the
# capture test with 2 heads per CTA so that the fragment flush runs, and the arrive counters
# checked): the capture tests.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
timeout 200 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "concurrent or cuda_graph" > "$OUT/t_conc.log" 2>&1; echo "rc=$?" >> "$OUT/t_conc.log"
grep -E "passed|failed|FAIL|rc=|Error" "$OUT/t_conc.log" | tail -6
