#!/usr/bin/env bash
# Session 18, device call 3: the split launch after call 2 (fp32 read copies excluded, non-flush
# half at 5 CTAs/SM by default).
#  A. tests: test_gpu_row_order -k gdn (split forced inside), test_gpu_ops -k "gdn or cuda_graph"
#     with the split forced, check_gdn.py Qwen-shaped trace at 160 rows (the default split: 8
#     flush positions, every row flushing at once at step 16 -> 20 rows per flush CTA);
#  B. grid: no split / split (default) / non-flush 6 CTAs/SM / 16 flush positions, b32..b512,
#     four narrow pairs (the split forced at b32 / b64 to see where it starts paying).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 32,64,128,256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32,nvfp4/fp8sr --no-peers"
GD="s0:REPLAYSSM_GDN_SPLIT=0 f5:REPLAYSSM_GDN_SPLIT=1 f6:REPLAYSSM_GDN_SPLIT=1,REPLAYSSM_GDN_SPLIT_MINB1=6 p16:REPLAYSSM_GDN_SPLIT=1,REPLAYSSM_GDN_SPLIT_FPOS=16"
FORCE="REPLAYSSM_GDN_ORDER=1 REPLAYSSM_GDN_SPLIT=1 REPLAYSSM_GDN_SPLIT_FPOS=2"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
( timeout 250 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py -k gdn > "$OUT/t_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_split.log" ) &
( env $FORCE timeout 250 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "gdn or cuda_graph" > "$OUT/t_ops_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops_split.log" ) &
( timeout 250 python tests/gpu_scripts/check_gdn.py --no-bench --quick --pairs nvfp4/fp16sr --Ls 4 --qwen-batch 160 --qwen-pairs nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr,bf16/fp32 > "$OUT/chk_b160.log" 2>&1; echo "rc=$?" >> "$OUT/chk_b160.log" ) &
for s in $GD; do
  ( env $(envs "$s") timeout 200 python -m bench $SD --warm-only --no-plots --out /tmp/wd_${s%%:*} > /tmp/wd_${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
echo "== t_split"; grep -E "passed|failed|rc=" "$OUT/t_split.log" | tail -3
echo "== t_ops_split"; grep -E "passed|failed|rc=" "$OUT/t_ops_split.log" | tail -3
echo "== chk_b160"; grep -E "qwen|FAIL|rc=|all checks|exception|Error" "$OUT/chk_b160.log" | cut -c1-200 | tail -8
OUT=/tmp/gd SETTINGS="$GD" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=100 WARM_S=20 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
cp -r /tmp/gd "$OUT/"; cp /tmp/wd_*.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call3.tgz" . 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard" /tmp/gd/knobs.md | cut -c1-200
