#!/usr/bin/env bash
# Session 14, device call 1 (main 02475a5):
#  A. GPU tests of main's head (never GPU-run: 3f6c62f docstring, 02475a5 host-side split launch
#     order + helpers): test_gpu_spec -k mamba2, test_gpu_ops + test_gpu_row_order, the spec fuzz /
#     teeth with the split forced at small batch; GDN kernels warm-compiled alongside;
#  B. GDN baseline phases: decode sweep b256 / b512 (non-flush only, flush only, host flush-first
#     permutation) and verify b256 T = 4 / 8 (non-flush only, flush only), three pairs.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
P="fp32,nvfp4/fp16sr,fp8/fp32"
SW="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs $P --phases --flush-first --no-peers --no-plots"
SP="spec --layer gdn --batches 256 --T 4,8 --pairs $P --no-plots"
t0=$(date +%s)
( timeout 300 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 300 $PYT -n 3 tests/test_gpu_ops.py tests/test_gpu_row_order.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( REPLAYSSM_M2V_SPLIT=1 REPLAYSSM_M2_ORDER=1 timeout 300 $PYT -n 2 tests/test_gpu_spec.py -k "mamba2 and (fuzz or teeth)" > "$OUT/t_fuzz_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_fuzz_split.log" ) &
( timeout 300 python -m bench $SW --warm-only --out /tmp/w_sw > /tmp/w_sw.log 2>&1 ) &
( timeout 300 python -m bench $SP --warm-only --out /tmp/w_sp > /tmp/w_sp.log 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_spec t_ops t_fuzz_split; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|Error" "$OUT/$f.log" | tail -6; done
timeout 150 python -m bench $SW --replays 7 --out "$OUT/sweep" > "$OUT/sweep.log" 2>&1; echo "sweep rc=$?"
timeout 150 python -m bench $SP --replays 7 --out "$OUT/spec" > "$OUT/spec.log" 2>&1; echo "spec rc=$?"
cp /tmp/w_sw.log /tmp/w_sp.log "$OUT/" 2>/dev/null
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT"/sweep/*.md 2>/dev/null | head -60
cat "$OUT"/spec/*.md 2>/dev/null | head -60
