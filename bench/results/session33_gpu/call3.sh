#!/usr/bin/env bash
# Session 33, call 3 (run `tools/device_slim.sh out` first, carry .device): the GPU test files
# at the final code, 8 xdist workers (call 2 ran the GDN subset).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
t0=$(date +%s)
timeout 560 python -m pytest -q -rs -p no:cacheprovider -n 8 tests/test_gpu_ops.py \
  tests/test_gpu_integration.py tests/test_gpu_row_order.py tests/test_gpu_spec.py \
  -k "not (test_gpu_ops and (gdn or (bit_identical and fp16sr)))" > "$FINAL/t_gpu.log" 2>&1
echo "rc=$?" >> "$FINAL/t_gpu.log"
echo "total $(( $(date +%s) - t0 )) s"
echo "== $(grep -E "passed|failed" "$FINAL/t_gpu.log" | tail -1) $(tail -1 "$FINAL/t_gpu.log")"; grep -E "^FAILED|^ERROR" "$FINAL/t_gpu.log" | head -10
