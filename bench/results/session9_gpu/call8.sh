#!/usr/bin/env bash
# Session 9, device call 8: the Mamba-2 verify's fp32 / fp16 / bf16 / fp8 read dots on tf32
# tensor cores (REPLAYSSM_M2V_MMA_WIDE=1; call7: the dots + x staging are 38 of a fp32 non-flush
# CTA's 45 µs of read + outputs). Direct check against the CUDA-core dots first, then the A-B
# (alone on the GPU), then the GPU suites with it forced.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
W=REPLAYSSM_M2V_MMA_WIDE
SPEC="spec --layer mamba2 --batches 256 --T 8 --pairs fp32,fp8/fp32,bf16/fp32"
GS="d:- wide:$W=1"
( timeout 150 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_d > /tmp/w_d.log 2>&1 ) &
( env $W=1 timeout 150 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_w > /tmp/w_w.log 2>&1 ) &
timeout 150 python tests/gpu_scripts/check_mamba2_verify_wide.py > "$OUT/t_wide.log" 2>&1; echo "rc=$?" >> "$OUT/t_wide.log"
wait
cat "$OUT/t_wide.log"
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=60 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"; cat "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log)
( env $W=1 timeout 130 python tests/gpu_scripts/check_mamba2_verify.py --quick > "$OUT/t_chk.log" 2>&1; echo "rc=$?" >> "$OUT/t_chk.log" ) &
env $W=1 timeout 140 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2 and (twin or teeth)" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log"
wait
for f in t_chk t_spec; do echo "== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error" "$OUT/$f.log" | tail -4; done
