#!/usr/bin/env bash
# Session 35, call 4 (run `tools/device_slim.sh out` first, carry .device): the GPU tests at the
# final code after the last read of the diff (the Gram flag off for the split's non-flush half,
# a shared build recorder in the tests): every GDN decode test and the Mamba-2 bit-identical tests.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"; OUT=/tmp/c4; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
t0=$(date +%s)
T="timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
( $T -n 8 -k "gdn and not verify" > "$OUT/t_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_gdn.log" ) &
( $T -n 6 -k "mamba2 and bit_identical" > "$OUT/t_m2.log" 2>&1; echo "rc=$?" >> "$OUT/t_m2.log" ) &
wait
(cd "$OUT" && tar czf "$FINAL/call4.tgz" .)
echo "total $(( $(date +%s) - t0 )) s"
for f in t_gdn t_m2; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8; done
