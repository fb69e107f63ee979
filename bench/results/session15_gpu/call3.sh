#!/usr/bin/env bash
# Session 15, device call 3 (the landing defaults: decode preamble 3 for non-fp32 read copies,
# verify COEF_VEC 1):
#  A. test_gpu_spec -k gdn, test_gpu_ops -k "gdn or cuda_graph"; warm compiles;
#  B. the read-only ceiling next to the copy bandwidth (torch reductions, 2 GiB);
#  C. GDN decode sweep (with our standard and FLA in the same run) and the GDN spec table;
#  D. the in-kernel phase profile of the fp32 non-flush decode CTA, preamble 1 (default) vs 3
#     (why the earlier tile loses for fp32: call 2).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"     # everything here, one tarball to $FINAL at the end
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
SW="sweep --layer gdn --shapes qwen3.5-4b --batches 1,32,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-plots"
SP="spec --layer gdn --batches 1,32,256,512 --T 1,2,4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --no-plots"
t0=$(date +%s)
( timeout 260 $PYT -n 4 tests/test_gpu_spec.py -k gdn > "$OUT/t_spec_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec_gdn.log" ) &
( timeout 260 $PYT -n 2 tests/test_gpu_ops.py -k "gdn or cuda_graph" > "$OUT/t_ops_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops_gdn.log" ) &
( timeout 260 python -m bench $SW --warm-only --out /tmp/w_sw > /tmp/w_sw.log 2>&1 ) &
( timeout 260 python -m bench $SP --warm-only --out /tmp/w_sp > /tmp/w_sp.log 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_spec_gdn t_ops_gdn; do echo "== $f"; grep -E "passed|failed|FAIL|rc=" "$OUT/$f.log" | cut -c1-200 | tail -4; done
python - > "$OUT/ceiling.txt" 2>&1 <<'PY'
from bench.timing import copy_bandwidth_gbs, read_bandwidth_gbs
for i in range(2):
    c = copy_bandwidth_gbs()
    r = read_bandwidth_gbs()
    print(f"run {i}: copy {c:.0f} GB/s (read + write), read-only sum {r['sum']:.0f} GB/s, amax {r['amax']:.0f} GB/s")
PY
cat "$OUT/ceiling.txt"
timeout 150 python -m bench $SW --replays 7 --out "$OUT/sweep" > "$OUT/sweep.log" 2>&1; echo "sweep rc=$?"
timeout 170 python -m bench $SP --replays 7 --out "$OUT/spec" > "$OUT/spec.log" 2>&1; echo "spec rc=$?"
for p in 1 3; do
  env REPLAYSSM_GDN_PREAMBLE=$p timeout 100 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --pairs fp32 --batches 256 --modes nonflush --out "$OUT/prof_p$p" > "$OUT/prof_p$p.log" 2>&1; echo "prof p$p rc=$?"
done
(cd "$OUT" && tar czf "$FINAL/call3.tgz" . 2>/dev/null)
cp "$OUT/ceiling.txt" "$OUT/t_spec_gdn.log" "$OUT/t_ops_gdn.log" "$FINAL/"
echo "total $(( $(date +%s) - t0 )) s"
tail -12 "$OUT/prof_p1.log"; tail -12 "$OUT/prof_p3.log"
grep -E "^\| qwen3.5-4b \| (256|512) \|" "$OUT/sweep/sweep.md" | cut -c1-200 | head -24
grep -E "^\| gdn \| (256) \| 8 " "$OUT/spec/spec.md" | head -12
