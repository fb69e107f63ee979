#!/usr/bin/env bash
# Session 7, device call 5 (repo root, .device staged): the final tree's defaults (PDL mode 2 on
# the decode kernels, GDN preamble by read format) under every GPU suite and check script.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
bg() { local n=$1; shift; ( timeout "${CHECK_S:-330}" "$@" >"$OUT/$n.log" 2>&1; echo "rc=$?" >>"$OUT/$n.log" ) & }
bg t_ops $PYT -n 3 tests/test_gpu_ops.py tests/test_gpu_row_order.py
bg t_spec $PYT -n 3 tests/test_gpu_spec.py
bg t_gdn python tests/gpu_scripts/check_gdn.py --quick --no-bench
bg t_gdnv python tests/gpu_scripts/check_gdn_verify.py --quick
bg t_m2 python tests/gpu_scripts/check_mamba2_replay.py --quick
bg t_m2v python tests/gpu_scripts/check_mamba2_verify.py --quick
wait
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|rc=" "$f" | tail -4; done
