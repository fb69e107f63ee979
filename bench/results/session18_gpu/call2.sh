#!/usr/bin/env bash
# Session 18, device call 2: the GDN decode's split launch (REPLAYSSM_GDN_SPLIT).
#  A. correctness with it forced (order + split at small batches, 2 flush grid positions):
#     test_gpu_row_order -k gdn (twin vs torch every step, capture), test_gpu_ops -k "gdn or
#     cuda_graph", check_gdn.py (4 narrow pairs); warm compiles;
#  B. grid: no split / split (default tuning) / non-flush 5 CTAs/SM / flush 3 CTAs/SM,
#     b128 / b256 / b512, nvfp4/fp16sr + fp8/fp32, with the phases.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 128,256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32 --phases --no-peers"
GD="s0:REPLAYSSM_GDN_SPLIT=0 s1:- s1m5:REPLAYSSM_GDN_SPLIT_MINB1=5 s1f3:REPLAYSSM_GDN_SPLIT_MINB2=3"
FORCE="REPLAYSSM_GDN_ORDER=1 REPLAYSSM_GDN_SPLIT=1 REPLAYSSM_GDN_SPLIT_FPOS=2"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
( timeout 250 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py -k gdn > "$OUT/t_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_split.log" ) &
( env $FORCE timeout 250 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "gdn or cuda_graph" > "$OUT/t_ops_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops_split.log" ) &
( env $FORCE timeout 250 python tests/gpu_scripts/check_gdn.py --no-bench --pairs nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr,bf16/fp32 > "$OUT/chk_split.log" 2>&1; echo "rc=$?" >> "$OUT/chk_split.log" ) &
for s in $GD; do
  ( env $(envs "$s") timeout 200 python -m bench $SD --warm-only --no-plots --out /tmp/wd_${s%%:*} > /tmp/wd_${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
echo "== t_split"; grep -E "passed|failed|rc=|Error" "$OUT/t_split.log" | tail -4
echo "== t_ops_split"; grep -E "passed|failed|rc=" "$OUT/t_ops_split.log" | tail -3
echo "== chk_split"; grep -E "FAIL|rc=|all checks|exception|Error" "$OUT/chk_split.log" | cut -c1-200 | tail -6
OUT=/tmp/gd SETTINGS="$GD" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=100 WARM_S=20 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
cp -r /tmp/gd "$OUT/"; cp /tmp/wd_*.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call2.tgz" . 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard" /tmp/gd/knobs.md | cut -c1-200
grep -B2 -A12 "Error\|Traceback" "$OUT/t_split.log" | head -40
