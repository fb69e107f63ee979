#!/usr/bin/env bash
# Session 18, device call 8 (last of the budget): the split's non-flush half at 7 / 8 CTAs/SM
# (72 / 64 registers, 44-84 B of spills) against the default 6, with the split tests for each.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c8; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr --no-peers"
GD="d:- m7:REPLAYSSM_GDN_SPLIT_MINB1=7 m8:REPLAYSSM_GDN_SPLIT_MINB1=8"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
for m in 7 8; do
  ( env REPLAYSSM_GDN_SPLIT_MINB1=$m timeout 150 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py -k gdn > "$OUT/t_split_m$m.log" 2>&1; echo "rc=$?" >> "$OUT/t_split_m$m.log" ) &
done
for s in $GD; do
  ( env $(envs "$s") timeout 150 python -m bench $SD --warm-only --no-plots --out /tmp/wd_${s%%:*} > /tmp/wd_${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for m in 7 8; do echo "== t_split_m$m"; grep -E "passed|failed|rc=" "$OUT/t_split_m$m.log" | tail -2; done
OUT=/tmp/gd SETTINGS="$GD" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=50 WARM_S=20 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
cp -r /tmp/gd "$OUT/"; cp /tmp/wd_*.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call8.tgz" . 2>/dev/null)
grep -v "standard" /tmp/gd/knobs.md | cut -c1-200
