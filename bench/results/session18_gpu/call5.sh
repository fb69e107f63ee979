#!/usr/bin/env bash
# Session 18, device call 5: four row tiles per warp in the split's non-flush half (64 threads per
# head; lanes finish two value rows each) -- REPLAYSSM_GDN_SPLIT_TPW=4 at 8 / 10 CTAs per SM.
#  A. test_gpu_row_order -k gdn with each setting; check_gdn Qwen trace b96 with t4m8;
#  B. grid: default (two tiles, 6 CTAs/SM) / t4m8 / t4m10, b64 / b256 / b512, three pairs.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c5; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 64,256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers"
GD="d:- t4m8:REPLAYSSM_GDN_SPLIT_TPW=4,REPLAYSSM_GDN_SPLIT_MINB1=8 t4m10:REPLAYSSM_GDN_SPLIT_TPW=4,REPLAYSSM_GDN_SPLIT_MINB1=10"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
for m in 8 10; do
  ( env REPLAYSSM_GDN_SPLIT_TPW=4 REPLAYSSM_GDN_SPLIT_MINB1=$m timeout 250 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py -k gdn > "$OUT/t_split_t4m$m.log" 2>&1; echo "rc=$?" >> "$OUT/t_split_t4m$m.log" ) &
done
( env REPLAYSSM_GDN_SPLIT_TPW=4 REPLAYSSM_GDN_SPLIT_MINB1=8 timeout 250 python tests/gpu_scripts/check_gdn.py --no-bench --quick --pairs nvfp4/fp16sr --Ls 4 --qwen-batch 96 --qwen-pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32 > "$OUT/chk_t4.log" 2>&1; echo "rc=$?" >> "$OUT/chk_t4.log" ) &
for s in $GD; do
  ( env $(envs "$s") timeout 200 python -m bench $SD --warm-only --no-plots --out /tmp/wd_${s%%:*} > /tmp/wd_${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for m in 8 10; do echo "== t_split_t4m$m"; grep -E "passed|failed|rc=" "$OUT/t_split_t4m$m.log" | tail -3; done
echo "== chk_t4"; grep -E "qwen .* b96|FAIL|rc=|all checks|exception|Error" "$OUT/chk_t4.log" | cut -c1-200 | tail -6
OUT=/tmp/gd SETTINGS="$GD" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=60 WARM_S=20 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
cp -r /tmp/gd "$OUT/"; cp /tmp/wd_*.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call5.tgz" . 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard" /tmp/gd/knobs.md | cut -c1-200
