#!/usr/bin/env bash
# Session 15, device call 2:
#  A. check_gdn_verify at its default level in three processes (call 1's single run hit its
#     280 s limit after 20 configurations, all ok); warm compiles of the grid;
#  B. decode grid, fp32 and bf16/fp32 read copies: default, 3 CTAs/SM (MINB=3: does the fp32
#     non-flush row gain from occupancy? the flush then spills), preamble 3, both.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs fp32,bf16/fp32 --phases --no-peers"
GD="def:- m3:REPLAYSSM_GDN_REPLAY_MINB=3 p3:REPLAYSSM_GDN_PREAMBLE=3 m3p3:REPLAYSSM_GDN_REPLAY_MINB=3,REPLAYSSM_GDN_PREAMBLE=3"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
C=tests/gpu_scripts/check_gdn_verify.py
t0=$(date +%s)
i=0
for ps in fp32,nvfp4/fp16sr,fp16sr,fp8rn nvfp4/fp8sr,fp8/fp32,bf16/fp32,bf16sr,nvfp4rn nvfp4/fp32,fp8/fp16sr,fp16/fp32,fp8sr,nvfp4sr,fp16rn,nvfp4sr/fp16sr,fp8sr/fp32; do
  i=$((i+1))
  ( timeout 330 python $C --pairs $ps > "$OUT/chk_verify_$i.log" 2>&1; echo "rc=$?" >> "$OUT/chk_verify_$i.log" ) &
done
for s in $GD; do
  ( env $(envs "$s") timeout 300 python -m bench $SD --warm-only --no-plots --out /tmp/w_d${s%%:*} > /tmp/w_d${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for i in 1 2 3; do echo "== chk_verify_$i"; grep -E "FAIL|rc=|configurations|wall" "$OUT/chk_verify_$i.log" | cut -c1-220 | tail -5; done
mkdir -p /tmp/gd
OUT=/tmp/gd SETTINGS="$GD" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=100 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
(cd /tmp && tar czf "$OUT/call2.tgz" gd gd.log w_*.log 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
cat /tmp/gd/knobs.md | cut -c1-200
