#!/usr/bin/env bash
# Session 8, device call 8: the final tree after the review fixes (fp16 read copies take the
# 2-mma path of the verify read dots -- exact in tf32; no tail for one-warp CTAs at L = 32; the
# verify profiling build refuses partial heads): every GDN verify GPU test, defaults.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
( timeout 230 $PYT -n 6 tests/test_gpu_spec.py -k gdn > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 230 python tests/gpu_scripts/check_gdn_verify.py --quick > "$OUT/t_vchk.log" 2>&1; echo "rc=$?" >> "$OUT/t_vchk.log" ) &
wait
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error" "$f" | tail -6; done
