#!/usr/bin/env bash
# Session 43, device call 3 (~2.5 min; 260 device-s were left after refused starts): the GPU tests
# of docs/patches/s43_pair_roll_rule.patch's final code, applied here: the M2 kernel test set
# (m2_test_set: its defaults now roll nvfp4/fp16sr's split flush half and verify) and the roll's
# own tests (decode / verify bit-identical to the inline pair, the verify fuzz).
#   source .device/gpu_env.sh && bash docs/patches/s43_call3_tests.sh
source .device/gpu_env.sh >/dev/null 2>&1
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=$FINAL
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
patch -p1 --forward < docs/patches/s43_pair_roll_rule.patch > /dev/null || { echo "PATCH FAILED"; exit 1; }
source tests/gpu_scripts/ab_call_lib.sh
T="timeout 150 python -m pytest -q -rs -p no:cacheprovider"
( PYTHONPATH=$PWD:${PYTHONPATH:-} $T -n 3 tests/test_gpu_ops.py -k "pair_roll" > "$OUT/t_roll_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_roll_ops.log" ) &
( PYTHONPATH=$PWD:${PYTHONPATH:-} $T -n 2 tests/test_gpu_spec.py -k "pair_roll" > "$OUT/t_roll_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_roll_spec.log" ) &
TEST_S=150 m2_test_set
wait
test_summary
for f in t_roll_ops t_roll_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
echo "total $(( $(date +%s) - t0 )) s"
