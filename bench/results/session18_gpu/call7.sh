#!/usr/bin/env bash
# Session 18, device call 7 (call 6 ran no split: the mend compared the occupancy the heuristics had filled in -- fixed): a split half's CTAs of the other half's
# rows end right after the order entry (no read tile, cursors or preamble); the split is not used
# where its builds would ignore a requested thread count / occupancy / profiling build / preamble.
#  A. test_gpu_row_order -k gdn, test_gpu_ops -k "gdn or cuda_graph" with the split forced,
#     check_gdn.py Qwen trace b160 (default split); warm compiles;
#  B. grid no split / split with phases (b256 / b512, nvfp4/fp16sr + fp8/fp32), then the default
#     for four narrow pairs at b64 / b128 / b256 / b512.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c7; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32 --no-peers"
GD="s0:REPLAYSSM_GDN_SPLIT=0 d:-"
SW="sweep --layer gdn --shapes qwen3.5-4b --batches 64,128,256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32,nvfp4/fp8sr --no-peers --no-plots"
FORCE="REPLAYSSM_GDN_ORDER=1 REPLAYSSM_GDN_SPLIT=1 REPLAYSSM_GDN_SPLIT_FPOS=2"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
( timeout 250 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py -k gdn > "$OUT/t_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_split.log" ) &
( env $FORCE timeout 250 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "gdn or cuda_graph" > "$OUT/t_ops_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops_split.log" ) &
( timeout 250 python tests/gpu_scripts/check_gdn.py --no-bench --quick --pairs nvfp4/fp16sr --Ls 4 --qwen-batch 160 --qwen-pairs nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr,bf16/fp32 > "$OUT/chk_b160.log" 2>&1; echo "rc=$?" >> "$OUT/chk_b160.log" ) &
for s in $GD; do
  ( env $(envs "$s") timeout 200 python -m bench $SD --warm-only --no-plots --out /tmp/wd_${s%%:*} > /tmp/wd_${s%%:*}.log 2>&1 ) &
done
( timeout 200 python -m bench $SW --warm-only --out /tmp/ws > /tmp/ws.log 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
echo "== t_split"; grep -E "passed|failed|rc=" "$OUT/t_split.log" | tail -3
echo "== t_ops_split"; grep -E "passed|failed|rc=" "$OUT/t_ops_split.log" | tail -3
echo "== chk_b160"; grep -E "qwen .* b160|FAIL|rc=|all checks|exception|Error" "$OUT/chk_b160.log" | cut -c1-200 | tail -6
OUT=/tmp/gd SETTINGS="$GD" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=80 WARM_S=20 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
timeout 80 python -m bench $SW --replays 7 --out "$OUT/sweep" > "$OUT/sweep.log" 2>&1; echo "sweep rc=$? $(( $(date +%s) - t0 )) s"
cp -r /tmp/gd "$OUT/"; cp /tmp/wd_*.log /tmp/ws.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call7.tgz" . 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard" /tmp/gd/knobs.md | cut -c1-200
head -1 "$OUT/sweep/sweep.md"; grep -E "^\| qwen3.5" "$OUT/sweep/sweep.md" | grep -v standard | cut -c1-150
