#!/usr/bin/env bash
# Session 17, device call 3 (landing defaults: decode fp32 whole-row flush, verify fp32 flush
# from the held tile):
#  A. test_gpu_spec -k gdn, test_gpu_ops -k "gdn or cuda_graph", check_gdn.py (5 pairs); warm;
#  B. ceilings; GDN decode sweep (b1..512, our standard and FLA in the run); GDN spec table.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
SW="sweep --layer gdn --shapes qwen3.5-4b --batches 1,32,128,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-plots"
SP="spec --layer gdn --batches 256,512 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --no-plots"
t0=$(date +%s)
( timeout 280 $PYT -n 3 tests/test_gpu_spec.py -k gdn > "$OUT/t_spec_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec_gdn.log" ) &
( timeout 280 $PYT -n 2 tests/test_gpu_ops.py -k "gdn or cuda_graph" > "$OUT/t_ops_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops_gdn.log" ) &
( timeout 280 python tests/gpu_scripts/check_gdn.py --no-bench --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32,nvfp4/fp8sr > "$OUT/chk_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/chk_gdn.log" ) &
( timeout 280 python -m bench $SW --warm-only --out /tmp/w_sw > /tmp/w_sw.log 2>&1 ) &
( timeout 280 python -m bench $SP --warm-only --out /tmp/w_sp > /tmp/w_sp.log 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_spec_gdn t_ops_gdn chk_gdn; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|all checks" "$OUT/$f.log" | cut -c1-200 | tail -4; done
python - > "$OUT/ceiling.txt" 2>&1 <<'PY'
from bench.timing import copy_bandwidth_gbs, read_bandwidth_gbs
c = copy_bandwidth_gbs()
r = read_bandwidth_gbs()
print(f"copy {c:.0f} GB/s (read + write), read-only sum {r['sum']:.0f} GB/s, amax {r['amax']:.0f} GB/s")
PY
cat "$OUT/ceiling.txt"
timeout 150 python -m bench $SW --replays 7 --out "$OUT/sweep" > "$OUT/sweep.log" 2>&1; echo "sweep rc=$? $(( $(date +%s) - t0 )) s"
timeout 110 python -m bench $SP --replays 7 --out "$OUT/spec" > "$OUT/spec.log" 2>&1; echo "spec rc=$? $(( $(date +%s) - t0 )) s"
cp /tmp/w_*.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call3.tgz" . 2>/dev/null)
cp "$OUT/ceiling.txt" "$OUT/t_spec_gdn.log" "$OUT/t_ops_gdn.log" "$OUT/chk_gdn.log" "$FINAL/"
echo "total $(( $(date +%s) - t0 )) s"
grep -E "^\| qwen3.5-4b \| (1|128|256|512) \|" "$OUT/sweep/sweep.md" | cut -c1-170 | head -40
grep -E "^\| gdn \| (256|512) \| (4|8) " "$OUT/spec/spec.md" | cut -c1-160 | head -16
