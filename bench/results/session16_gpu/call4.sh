#!/usr/bin/env bash
# Session 16, device call 4 (landing defaults: decode ring g / kinv by cp.async, v behind the
# tile for fp32 read copies, preamble 4 for nvfp4 read copies; verify early loads):
#  A. test_gpu_ops -k "gdn or cuda_graph", test_gpu_spec -k gdn, check_gdn.py (5 pairs);
#     warm compiles;
#  B. ceilings; GDN decode sweep with our standard and FLA in the same run; GDN spec table.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c4; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
SW="sweep --layer gdn --shapes qwen3.5-4b --batches 1,32,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-plots"
SP="spec --layer gdn --batches 256,512 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --no-plots"
t0=$(date +%s)
( timeout 215 $PYT -n 3 tests/test_gpu_spec.py -k gdn > "$OUT/t_spec_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec_gdn.log" ) &
( timeout 215 $PYT -n 2 tests/test_gpu_ops.py -k "gdn or cuda_graph" > "$OUT/t_ops_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops_gdn.log" ) &
( timeout 215 python tests/gpu_scripts/check_gdn.py --no-bench --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32,nvfp4/fp8sr > "$OUT/chk_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/chk_gdn.log" ) &
( timeout 215 python -m bench $SW --warm-only --out /tmp/w_sw > /tmp/w_sw.log 2>&1 ) &
( timeout 215 python -m bench $SP --warm-only --out /tmp/w_sp > /tmp/w_sp.log 2>&1 ) &
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
timeout 170 python -m bench $SW --replays 7 --out "$OUT/sweep" > "$OUT/sweep.log" 2>&1; echo "sweep rc=$? $(( $(date +%s) - t0 )) s"
timeout 130 python -m bench $SP --replays 7 --out "$OUT/spec" > "$OUT/spec.log" 2>&1; echo "spec rc=$? $(( $(date +%s) - t0 )) s"
cp /tmp/w_*.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call4.tgz" . 2>/dev/null)
cp "$OUT/ceiling.txt" "$OUT/t_spec_gdn.log" "$OUT/t_ops_gdn.log" "$OUT/chk_gdn.log" "$FINAL/"
echo "total $(( $(date +%s) - t0 )) s"
grep -E "^\| qwen3.5-4b \| (1|256|512) \|" "$OUT/sweep/sweep.md" | cut -c1-160 | head -30
grep -E "^\| gdn \| (256|512) \| (4|8) " "$OUT/spec/spec.md" | cut -c1-160 | head -16
