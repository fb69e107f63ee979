#!/usr/bin/env bash
# Session 17, device call 4: the GDN decode's flush-first row order (REPLAYSSM_GDN_ORDER=1).
#  A. check_gdn.py (4 pairs) and test_gpu_ops -k "gdn or cuda_graph" with it; warm compiles;
#  B. grid o0 / o1: GDN decode b32 / b256 / b512, 4 pairs; then the 122B shape (HV64) at
#     b256 / b512, fp32 + nvfp4/fp16sr, default build, with our standard and FLA.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c4; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 32,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32"
GD="o0:- o1:REPLAYSSM_GDN_ORDER=1"
SB="sweep --layer gdn --shapes qwen3.5-122b --batches 256,512 --L 16 --pairs fp32,nvfp4/fp16sr --no-plots"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
( env REPLAYSSM_GDN_ORDER=1 timeout 200 python tests/gpu_scripts/check_gdn.py --no-bench --pairs fp32,nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr > "$OUT/chk_o1.log" 2>&1; echo "rc=$?" >> "$OUT/chk_o1.log" ) &
( env REPLAYSSM_GDN_ORDER=1 timeout 200 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "gdn or cuda_graph" > "$OUT/t_ops_o1.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops_o1.log" ) &
for s in $GD; do
  ( env $(envs "$s") timeout 200 python -m bench $SD --warm-only --no-plots --out /tmp/wd_${s%%:*} > /tmp/wd_${s%%:*}.log 2>&1 ) &
done
( timeout 200 python -m bench $SB --warm-only --out /tmp/wb > /tmp/wb.log 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
echo "== t_ops_o1"; grep -E "passed|failed|rc=" "$OUT/t_ops_o1.log" | tail -3
echo "== chk_o1"; grep -E "FAIL|rc=|all checks|exception|Error" "$OUT/chk_o1.log" | cut -c1-200 | tail -6
OUT=/tmp/gd SETTINGS="$GD" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=100 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
echo "order grid $(( $(date +%s) - t0 )) s"
timeout 90 python -m bench $SB --replays 7 --out "$OUT/sweep122b" > "$OUT/sweep122b.log" 2>&1; echo "122b rc=$? $(( $(date +%s) - t0 )) s"
cp -r /tmp/gd "$OUT/"; cp /tmp/wd_*.log /tmp/wb.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call4.tgz" . 2>/dev/null)
cp "$OUT"/chk_o1.log "$OUT/t_ops_o1.log" "$FINAL/"
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard bf16" /tmp/gd/knobs.md | cut -c1-200
grep -E "^\| qwen3.5-122b" "$OUT/sweep122b/sweep.md" | cut -c1-170
