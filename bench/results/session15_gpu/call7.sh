#!/usr/bin/env bash
# Session 15, device call 7 (main with fp32 whole rows + preamble 3 as the default):
#  A. check_gdn.py (decode, default level) for fp32 with the landing default; test_gpu_ops -k
#     "gdn or cuda_graph"; warm compile;
#  B. GDN decode sweep b256 / b512, fp32, with our standard and FLA in the same run.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
SW="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs fp32,nvfp4/fp16sr --no-plots"
t0=$(date +%s)
( timeout 200 python tests/gpu_scripts/check_gdn.py --no-bench --pairs fp32 > "$OUT/chk_fp32.log" 2>&1; echo "rc=$?" >> "$OUT/chk_fp32.log" ) &
( timeout 200 $PYT -n 2 tests/test_gpu_ops.py -k "gdn or cuda_graph" > "$OUT/t_ops_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops_gdn.log" ) &
( timeout 200 python -m bench $SW --warm-only --out /tmp/w_sw > /tmp/w_sw.log 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in chk_fp32 t_ops_gdn; do echo "== $f"; grep -E "FAIL|rc=|all checks|passed|failed" "$OUT/$f.log" | cut -c1-200 | tail -4; done
timeout 90 python -m bench $SW --replays 7 --out /tmp/sweep > /tmp/sweep.log 2>&1; echo "sweep rc=$?"
(cd /tmp && tar czf "$OUT/call7.tgz" sweep sweep.log 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
grep -E "^\| qwen3.5-4b \| (256|512) \|" /tmp/sweep/sweep.md | cut -c1-200
