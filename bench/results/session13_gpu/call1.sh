#!/usr/bin/env bash
# Session 13, device call 1: the GPU tests of main's head (06abf3c), then the in-kernel profile of
# the fp32 T = 8 verify at b256, merged kernel vs the split launch (REPLAYSSM_M2V_SPLIT=1).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PYT="python -m pytest -q -rs -p no:cacheprovider"
( timeout 220 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 220 $PYT -n 3 tests/test_gpu_ops.py tests/test_gpu_row_order.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
wait
for v in merged split; do
  if [ $v = split ]; then export REPLAYSSM_M2V_SPLIT=1; fi
  timeout 150 python tests/gpu_scripts/prof_mamba2_replay.py --verify-T 8 --pairs fp32 --batches 256 \
    --modes nonflush,staggered,flush --out "$OUT/prof_$v" > "$OUT/prof_$v.log" 2>&1; echo "rc=$?" >> "$OUT/prof_$v.log"
done
unset REPLAYSSM_M2V_SPLIT
for f in t_spec t_ops; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|Error" "$OUT/$f.log" | tail -6; done
for v in merged split; do echo "== prof $v"; tail -45 "$OUT/prof_$v.log"; done
