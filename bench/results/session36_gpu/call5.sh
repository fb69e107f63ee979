#!/usr/bin/env bash
# Session 36, call 5 (run `tools/device_slim.sh out` first, carry .device): GPU tests at the final
# cute_kernels version (7863019: after call 3 only Python keys and docstrings changed; PTX md5s
# equal). Mamba-2 + GDN tests of the flush encoders, twin checks of every pair, the M2 split /
# row-order tests, the M2 verify spec tests of the nvfp4 pairs, (GDN PTX md5s equal the builds tested in call 3 and session 35).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c5; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
t0=$(date +%s)
T="timeout 270 python -m pytest -q -rs -p no:cacheprovider"
( $T -n 6 tests/test_gpu_ops.py -k "e2m1_magic or f16_sr_chunk or replay_step_matches_torch_reference" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( $T -n 4 tests/test_gpu_row_order.py -k "mamba2" > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
( $T -n 3 tests/test_gpu_spec.py -k "nvfp4" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
wait
echo "tests $(( $(date +%s) - t0 )) s"
(cd "$OUT" && tar czf "$FINAL/call5.tgz" . 2>/dev/null)
for f in t_ops t_order t_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8; done
