#!/usr/bin/env bash
# Session 33, call 2 (run `tools/device_slim.sh out` first, carry .device): the landing check of
# the final code -- the GDN tests of test_gpu_ops.py and the fp16sr bit-identical tests of Mamba-2
# (the env switch helper they now share), 6 xdist workers where xdist is there.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
t0=$(date +%s)
K="gdn or (bit_identical and fp16sr)"
if python -c "import xdist" 2>/dev/null; then
  timeout 540 python -m pytest -q -rs -p no:cacheprovider -n 6 tests/test_gpu_ops.py -k "$K" > "$FINAL/t_all.log" 2>&1
else
  timeout 540 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "$K" > "$FINAL/t_all.log" 2>&1
fi
echo "rc=$?" >> "$FINAL/t_all.log"
echo "total $(( $(date +%s) - t0 )) s"
echo "== $(grep -E "passed|failed" "$FINAL/t_all.log" | tail -1) $(tail -1 "$FINAL/t_all.log")"; grep -E "^FAILED|^ERROR|xdist" "$FINAL/t_all.log" | head -10
