#!/usr/bin/env bash
# Session 25, call 1: L2 prefetches before the PDL wait (REPLAYSSM_M2_PF_EARLY /
# REPLAYSSM_GDN_PF_EARLY, single launches without a row order, i.e. small batches).
#  A. GPU tests with both switches on: twin steps vs the torch reference (every pair, both
#     layers), CUDA-graph capture, out-of-range slots, the fp32 exact recurrences.
#  B. A-B off / on, b1 / b4 / b8, L8 / L16, both layers and shapes (the standard kernels in the
#     same runs are the drift control: they have no prefetch). Prediction: b1 0.3-0.8 us
#     faster per step (Mamba-2 fp32 the most: 32 KiB read per CTA), b8 0-0.5, standard +-2 %.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
PF="REPLAYSSM_M2_PF_EARLY=1 REPLAYSSM_GDN_PF_EARLY=1"
M="sweep --layer mamba2 --batches 1,4,8 --L 8,16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots --deadline 65"
G="sweep --layer gdn --batches 1,4,8 --L 8,16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots --deadline 65"
( env $PF timeout 250 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "replay_step or cuda_graph or out_of_range or exact_recurrence" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
for s in "off:" "on:$PF"; do
  ( env ${s#*:} timeout 220 python -m bench ${M% --deadline*} --warm-only --out /tmp/wm_${s%%:*} > "$OUT/wm_${s%%:*}.log" 2>&1 ) &
  ( env ${s#*:} timeout 220 python -m bench ${G% --deadline*} --warm-only --out /tmp/wg_${s%%:*} > "$OUT/wg_${s%%:*}.log" 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
echo "== t_ops"; grep -E "passed|failed|rc=|FAILED|Error" "$OUT/t_ops.log" | tail -8
S="off:- on:REPLAYSSM_M2_PF_EARLY=1,REPLAYSSM_GDN_PF_EARLY=1"
OUT=$OUT/m SETTINGS="$S" BENCH_ARGS="$M" REPLAYS=7 RUN_S=75 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/m.log" 2>&1
tarball
OUT=$OUT/g SETTINGS="$S" BENCH_ARGS="$G" REPLAYS=7 RUN_S=75 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/m/knobs.md" | cut -c1-110
grep -v "^|---" "$OUT/g/knobs.md" | cut -c1-110
