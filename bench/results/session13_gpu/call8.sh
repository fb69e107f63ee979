#!/usr/bin/env bash
# Session 13, device call 8: fp32 b256 / b512 T = 1, 2, 3: default (single launch, CUDA-core
# flush) vs the split with the fragment flush forced (SPLIT=1, FRAG_FLUSH=1; its correctness at
# every T: call6's forced spec fuzz).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
V=REPLAYSSM_M2V
S1="spec --layer mamba2 --batches 256,512 --T 1,2,3 --pairs fp32"
G1="d:- fs:${V}_SPLIT=1,${V}_FRAG_FLUSH=1"
t0=$(date +%s)
for s in $G1; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 150 python -m bench $S1 --warm-only --no-plots --out /tmp/w1_$n > /tmp/w1_$n.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
mkdir -p /tmp/ab1
OUT=/tmp/ab1 SETTINGS="$G1" BENCH_ARGS="$S1" REPLAYS=5 RUN_S=60 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab1.log 2>&1
cp /tmp/ab1/knobs.md "$OUT/knobs_t123.md"
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/knobs_t123.md"
