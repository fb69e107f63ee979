#!/usr/bin/env bash
# Session 11, device call 4: the L1 was not it (call 3). Memory-level parallelism? each head's hi rows prefetched into L2 one head ahead (REPLAYSSM_M2V_FRAG_L2PF=1) at PD 2 and 4 vs PD 4 alone; spec b256 T = 4, 6, 8 fp32.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
FF=REPLAYSSM_M2V_FRAG_FLUSH; PD=REPLAYSSM_M2V_FRAG_PD
SPEC="spec --layer mamba2 --batches 256 --T 4,6,8 --pairs fp32"
PF=REPLAYSSM_M2V_FRAG_L2PF
GS="d:- f4:$FF=1,$PD=4 p2:$FF=1,$PD=2,$PF=1 p4:$FF=1,$PD=4,$PF=1"
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 200 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
CHK=tests/gpu_scripts/check_mamba2_verify_wide.py
( for pd in 2 4; do for hpc in 2 4; do echo "PD=$pd L2PF hpc=$hpc"; env $PF=1 $PD=$pd REPLAYSSM_M2_HEADS_PER_CTA=$hpc timeout 60 python $CHK --env $FF --values 0,1 --state-tol 1e-5 --pairs fp32; echo "rc=$?"; done; done > "$OUT/t_wide.log" 2>&1 ) &
wait
echo "== t_wide"; cat "$OUT/t_wide.log"
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=60 WARM_S=20 WARM_JOBS=4 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_*.log)
cat "$OUT/knobs.md"
