#!/usr/bin/env bash
# Session 45, device call 3 (run as docs/patches/s45_call4.sh; ~3 min, asked for an H200 with
# ~180 device-s left -- an H100 came): the M2 kernel test set alone (m2_test_set) on the final
# code (f6d0a80 + the verify's import order).
#   source .device/gpu_env.sh && bash docs/patches/s45_call4.sh
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:${PYTHONPATH:-}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
source tests/gpu_scripts/ab_call_lib.sh
TEST_S=${TEST_S:-170} m2_test_set
wait
test_summary
echo "total $(( $(date +%s) - t0 )) s"
