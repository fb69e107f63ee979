#!/usr/bin/env bash
# Session 13, device call 3: around call 2's best fp32 setting (split launch, flush launch at 3
# CTAs/SM with FRAG_PD=16, non-flush launch with READ_L2PF=1): b256 / b512 at T = 6, 7, 8.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
V=REPLAYSSM_M2V
SPEC="spec --layer mamba2 --batches 256,512 --T 6,7,8 --pairs fp32"
B="${V}_SPLIT=1,${V}_MINBLOCKS=3,${V}_FRAG_PD=16,${V}_READ_L2PF=1"
GS="d:- b:$B mb6:$B,${V}_SPLIT_MINB=6 r2:${B/READ_L2PF=1/READ_L2PF=2} nol2:$B,${V}_FRAG_L2PF=0 pd12:${B/FRAG_PD=16/FRAG_PD=12} hpc2:$B,REPLAYSSM_M2_HEADS_PER_CTA=2"
t0=$(date +%s)
i=0
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 240 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
  i=$((i+1)); [ $((i % 7)) -eq 0 ] && wait
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=90 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_*.log)
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/knobs.md"
