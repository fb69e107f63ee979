#!/usr/bin/env bash
# Session 12, device call 6 (main 84cc213): the fp32 split launch with a flush launch that does
# not spill (local ptxas, 128-register cap: rows=2 default 68 B of spills, with XDRAFT=1 0 B at
# 126 registers, with FRAG_PD=4 0 B) and the non-flush launch's L2 prefetch.
#  A. fp32 split (+ XDRAFT, READ_L2PF) vs merged, bit-identical; warm compiles;
#  B. b256 / b512 T = 6 / 8: d | spx (split, XDRAFT=1, READ_L2PF=1) | spx4 (+ FRAG_PD=4) |
#     spp4 (split, FRAG_PD=4, READ_L2PF=1).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
V=REPLAYSSM_M2V
SPEC="spec --layer mamba2 --batches 256,512 --T 6,8 --pairs fp32"
GS="d:- spx:${V}_SPLIT=1,${V}_XDRAFT=1,${V}_READ_L2PF=1 spx4:${V}_SPLIT=1,${V}_XDRAFT=1,${V}_READ_L2PF=1,${V}_FRAG_PD=4 spp4:${V}_SPLIT=1,${V}_FRAG_PD=4,${V}_READ_L2PF=1"
t0=$(date +%s)
( env REPLAYSSM_M2_HEADS_PER_CTA=4 ${V}_XDRAFT=1 ${V}_READ_L2PF=1 timeout 150 python tests/gpu_scripts/check_mamba2_verify_wide.py \
    --env ${V}_SPLIT --values 0,1 --exact --pairs fp32 > "$OUT/t_wide.log" 2>&1; echo "rc=$?" >> "$OUT/t_wide.log" ) &
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 200 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
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
