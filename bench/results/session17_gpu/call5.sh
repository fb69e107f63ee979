#!/usr/bin/env bash
# Session 17, device call 5 (final defaults: decode flush-first order for narrow read copies from
# 32 rows, the verify's fp32 flush staging no key past hf, the whole-row flush only at L <= 16):
#  A. test_gpu_spec -k gdn, test_gpu_ops -k "gdn or cuda_graph", check_gdn.py --pairs fp32
#     --Ls 24 (the (g, t) flush past 16), check_gdn_verify.py --pairs fp32 (with an L = 24
#     config); warm compiles;
#  B. ceilings; GDN decode sweep (our standard and FLA in the run); GDN spec table.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c5; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
SW="sweep --layer gdn --shapes qwen3.5-4b --batches 1,32,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-plots"
SP="spec --layer gdn --batches 256 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --no-plots"
t0=$(date +%s)
( timeout 220 $PYT -n 3 tests/test_gpu_spec.py -k gdn > "$OUT/t_spec_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec_gdn.log" ) &
( timeout 220 $PYT -n 2 tests/test_gpu_ops.py -k "gdn or cuda_graph" > "$OUT/t_ops_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops_gdn.log" ) &
( timeout 220 python tests/gpu_scripts/check_gdn.py --no-bench --pairs fp32 --Ls 24 > "$OUT/chk_l24.log" 2>&1; echo "rc=$?" >> "$OUT/chk_l24.log" ) &
( timeout 220 python tests/gpu_scripts/check_gdn_verify.py --pairs fp32 > "$OUT/chkv.log" 2>&1; echo "rc=$?" >> "$OUT/chkv.log" ) &
( timeout 220 python -m bench $SW --warm-only --out /tmp/w_sw > /tmp/w_sw.log 2>&1 ) &
( timeout 220 python -m bench $SP --warm-only --out /tmp/w_sp > /tmp/w_sp.log 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_spec_gdn t_ops_gdn chk_l24 chkv; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|all checks" "$OUT/$f.log" | cut -c1-200 | tail -4; done
grep -E " ok | FAIL" "$OUT/chkv.log" | cut -c1-120 | tail -8
python - > "$OUT/ceiling.txt" 2>&1 <<'PY'
from bench.timing import copy_bandwidth_gbs, read_bandwidth_gbs
c = copy_bandwidth_gbs()
r = read_bandwidth_gbs()
print(f"copy {c:.0f} GB/s (read + write), read-only sum {r['sum']:.0f} GB/s, amax {r['amax']:.0f} GB/s")
PY
cat "$OUT/ceiling.txt"
timeout 130 python -m bench $SW --replays 7 --out "$OUT/sweep" > "$OUT/sweep.log" 2>&1; echo "sweep rc=$? $(( $(date +%s) - t0 )) s"
timeout 80 python -m bench $SP --replays 7 --out "$OUT/spec" > "$OUT/spec.log" 2>&1; echo "spec rc=$? $(( $(date +%s) - t0 )) s"
cp /tmp/w_*.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call5.tgz" . 2>/dev/null)
cp "$OUT/ceiling.txt" "$OUT/t_spec_gdn.log" "$OUT/t_ops_gdn.log" "$OUT/chk_l24.log" "$OUT/chkv.log" "$FINAL/"
echo "total $(( $(date +%s) - t0 )) s"
grep -E "^\| qwen3.5-4b \| (1|32|256|512) \|" "$OUT/sweep/sweep.md" | cut -c1-170 | head -40
grep -E "^\| gdn \| 256 \| (4|8) " "$OUT/spec/spec.md" | cut -c1-160 | head -10
