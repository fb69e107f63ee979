#!/usr/bin/env bash
# Session 19, device call 1: the Mamba-2 decode's split launch (REPLAYSSM_M2_SPLIT).
#  A. test_gpu_row_order -k "mamba2 or gdn or split" (the split forced at small batches, 1-3 flush
#     positions, 1 / 2 / 4 heads per flush CTA, capture), test_gpu_ops -k "mamba2 or cuda_graph
#     or split" with the decode split forced (also the verify's split capture test: its host
#     launch shares the decode class's __call__ and row_order.ConcurrentHalves); warm compiles;
#  B. grid at Nemotron-3-Super b256 / b512 L16, nvfp4/fp16sr + fp8/fp32 + nvfp4/fp8sr: no split,
#     the default split (non-flush 6 CTAs/SM nvfp4, 7 fp8 without prefetch; flush heads per CTA
#     = 4), 7 CTAs/SM (nvfp4: 40 B spills), flush CTAs of 2 / 1 heads, fp8's prefetch on,
#     the flush fold unrolled by 2 (with and without the split: the flush is issue-bound).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=$FINAL  # written in place: a timed-out call still returns what finished
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --shapes nemotron3-super --batches 256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr --no-peers --phases"
GD="s0:REPLAYSSM_M2_SPLIT=0 d:- u2:REPLAYSSM_M2_FOLD_UNROLL=2 s0u2:REPLAYSSM_M2_SPLIT=0,REPLAYSSM_M2_FOLD_UNROLL=2 h2:REPLAYSSM_M2_SPLIT_HPC2=2 pf1:REPLAYSSM_M2_PREFETCH=1 m7:REPLAYSSM_M2_SPLIT_MINB1=7 h1:REPLAYSSM_M2_SPLIT_HPC2=1"
FORCE="REPLAYSSM_M2_ORDER=1 REPLAYSSM_M2_SPLIT=1 REPLAYSSM_M2_SPLIT_FPOS=2"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py -k "mamba2 or gdn or split" > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
( env $FORCE timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "mamba2 or cuda_graph or split or out_of_range" > "$OUT/t_ops_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops_split.log" ) &
i=0
for s in $GD; do
  ( env $(envs "$s") timeout 240 python -m bench $SD --warm-only --no-plots --out /tmp/wd_${s%%:*} > /tmp/wd_${s%%:*}.log 2>&1 ) &
  i=$((i + 1)); [ $((i % 3)) -eq 0 ] && sleep 1
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
echo "== t_order"; grep -E "passed|failed|rc=|FAILED|Error" "$OUT/t_order.log" | tail -8
echo "== t_ops_split"; grep -E "passed|failed|rc=|FAILED|Error" "$OUT/t_ops_split.log" | tail -8
OUT=$FINAL/gd SETTINGS="$GD" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=70 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > $FINAL/gd.log 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
cp /tmp/wd_*.log "$OUT/" 2>/dev/null
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard" $FINAL/gd/knobs.md | cut -c1-220
