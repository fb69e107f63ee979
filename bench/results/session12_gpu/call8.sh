#!/usr/bin/env bash
# Session 12, device call 8 (main 1b5d003, the landing kernels): spec fuzz twin/teeth on every
# Mamba-2 pair and the bf16 / fp16 hoist (new default) against the old build, bit-identical.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PYT="python -m pytest -q -rs -p no:cacheprovider"
( timeout 200 $PYT -n 3 tests/test_gpu_spec.py -k "mamba2 and (twin or teeth)" > "$OUT/t_fuzz.log" 2>&1; echo "rc=$?" >> "$OUT/t_fuzz.log" ) &
( env REPLAYSSM_M2_HEADS_PER_CTA=4 timeout 150 python tests/gpu_scripts/check_mamba2_verify_wide.py \
    --env REPLAYSSM_M2V_PRE_HOIST --values 0,1 --exact --pairs fp16/fp32,bf16/fp32 > "$OUT/t_wide.log" 2>&1; echo "rc=$?" >> "$OUT/t_wide.log" ) &
wait
for f in t_fuzz t_wide; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|Error| ok" "$OUT/$f.log" | tail -6; done
