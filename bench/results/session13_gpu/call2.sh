#!/usr/bin/env bash
# Session 13, device call 2: fp32 T = 8 split launch whose flush launch gets more registers
# (REPLAYSSM_M2V_MINBLOCKS=3 / 2 -> 168 / up to 255, no spills) and a deeper hi prefetch
# (FRAG_PD 12 / 16; the cap was 8). The non-flush launch keeps 5 CTAs/SM.
#  A. bit-identity: split + MINBLOCKS=3 + FRAG_PD=16 vs merged; warm compiles.
#  B. b256 / b512 T = 8 grid.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
V=REPLAYSSM_M2V
SPEC="spec --layer mamba2 --batches 256,512 --T 8 --pairs fp32"
GS="d:- sp:${V}_SPLIT=1 sp3:${V}_SPLIT=1,${V}_MINBLOCKS=3 sp3p12:${V}_SPLIT=1,${V}_MINBLOCKS=3,${V}_FRAG_PD=12 sp3p16:${V}_SPLIT=1,${V}_MINBLOCKS=3,${V}_FRAG_PD=16 sp2p16:${V}_SPLIT=1,${V}_MINBLOCKS=2,${V}_FRAG_PD=16 sp3p16r:${V}_SPLIT=1,${V}_MINBLOCKS=3,${V}_FRAG_PD=16,${V}_READ_L2PF=1 m3p16:${V}_MINBLOCKS=3,${V}_FRAG_PD=16"
t0=$(date +%s)
( env REPLAYSSM_M2_HEADS_PER_CTA=4 ${V}_MINBLOCKS=3 ${V}_FRAG_PD=16 timeout 200 python tests/gpu_scripts/check_mamba2_verify_wide.py \
    --env ${V}_SPLIT --values 0,1 --exact --pairs fp32 > "$OUT/t_wide.log" 2>&1; echo "rc=$?" >> "$OUT/t_wide.log" ) &
i=0
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 220 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
  i=$((i+1)); [ $((i % 5)) -eq 0 ] && wait
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
echo "== t_wide"; grep -E "FAIL|rc=|Error| ok" "$OUT/t_wide.log" | tail -4
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=70 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_*.log)
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/knobs.md"
