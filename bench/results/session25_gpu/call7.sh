#!/usr/bin/env bash
# Session 26, call 7 (the last ~4 device minutes): the Mamba-2 decode's row arrive without its
# fence (REPLAYSSM_M2_DEP_ARRIVE=1, default off), as the GDN decode does.
#  A. Twin steps vs the torch reference with it on (the fp32-recurrence pairs) + CUDA graphs.
#  B. A-B off / on at b1 and b32, L16, Nemotron-3-Super. Prediction: thread 0's fence.acq_rel
#     before the arrive waits for all its loads ahead of the CTA's first barrier; without it
#     0.1-0.4 us per step at b1, <= 1 % at b32.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c7; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call7.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
M="sweep --layer mamba2 --shapes nemotron3-super --batches 1,32 --L 16 --pairs fp32,fp8/fp32,bf16/fp32 --no-peers --no-plots --deadline 28"
( REPLAYSSM_M2_DEP_ARRIVE=1 timeout 95 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "(replay_step and mamba2 and fp32) or cuda_graph" > "$OUT/t.log" 2>&1; echo "rc=$?" >> "$OUT/t.log" ) &
( REPLAYSSM_M2_DEP_ARRIVE=1 timeout 85 python -m bench ${M% --deadline*} --warm-only --out /tmp/w1 > "$OUT/w1.log" 2>&1 ) &
( timeout 85 python -m bench ${M% --deadline*} --warm-only --out /tmp/w0 > "$OUT/w0.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
echo "== t: $(grep -E "passed|failed" "$OUT/t.log" | tail -1) $(tail -1 "$OUT/t.log")"; grep -E "^FAILED" "$OUT/t.log" | head -5
OUT=$OUT/m SETTINGS="off:- on:REPLAYSSM_M2_DEP_ARRIVE=1" BENCH_ARGS="$M" REPLAYS=7 RUN_S=32 WARM_S=15 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/m.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/m/knobs.md" | cut -c1-100
