#!/usr/bin/env bash
# Session 18, device call 1: is the nvfp4 / fp8 GDN non-flush row issue-bound?
#  A. warm compiles;
#  B. decode grid (phases): default vs two row tiles per warp (128 threads per head) at 4 and 8
#     CTAs / SM -- half the warps per head, the per-warp preamble paid half as often;
#  C. verify flush-first order (off / on) at T = 1 / 2 / 4, b32 / b256 / b512 (session 17 timed T = 8 b256 only);
#  D. in-kernel phase profile of the nvfp4 non-flush CTA, tpw 1 / 2.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32 --phases --no-peers"
GD="t1:- t2m4:REPLAYSSM_GDN_REPLAY_TPW=2,REPLAYSSM_GDN_REPLAY_MINB=4 t2m8:REPLAYSSM_GDN_REPLAY_TPW=2,REPLAYSSM_GDN_REPLAY_MINB=8"
SV="spec --layer gdn --batches 32,256,512 --T 1,2,4 --pairs nvfp4/fp16sr,fp8/fp32"
GV="v0:- v1:REPLAYSSM_GDN_VERIFY_ORDER=1"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
for s in $GD; do
  ( env $(envs "$s") timeout 200 python -m bench $SD --warm-only --no-plots --out /tmp/wd_${s%%:*} > /tmp/wd_${s%%:*}.log 2>&1 ) &
done
for s in $GV; do
  ( env $(envs "$s") timeout 200 python -m bench $SV --warm-only --no-plots --out /tmp/wv_${s%%:*} > /tmp/wv_${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
OUT=/tmp/gd SETTINGS="$GD" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=80 WARM_S=20 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
echo "decode grid $(( $(date +%s) - t0 )) s"
OUT=/tmp/gv SETTINGS="$GV" BENCH_ARGS="$SV" REPLAYS=7 RUN_S=90 WARM_S=20 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gv.log 2>&1
echo "verify grid $(( $(date +%s) - t0 )) s"
for t in 1 2; do
  env REPLAYSSM_GDN_REPLAY_TPW=$t REPLAYSSM_GDN_REPLAY_MINB=$((4 * t)) timeout 60 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --pairs nvfp4/fp16sr --batches 256 --modes nonflush --out /tmp/prof_t$t > "$OUT/prof_t$t.log" 2>&1
done
echo "prof $(( $(date +%s) - t0 )) s"
cp -r /tmp/gd /tmp/gv /tmp/prof_t* "$OUT/" 2>/dev/null; cp /tmp/wd_*.log /tmp/wv_*.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call1.tgz" . 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
cut -c1-200 /tmp/gd/knobs.md
cut -c1-200 /tmp/gv/knobs.md | grep -v "standard\|snapshot"
for t in 1 2; do echo "== prof tpw $t"; grep -v "^#" "$OUT/prof_t$t.log" | tail -14 | cut -c1-200; done
