#!/usr/bin/env bash
# Session 17, device call 6 (last of the budget): the flush-first order for the GDN verify
# (REPLAYSSM_GDN_VERIFY_ORDER=1, off by default).
#  A. check_gdn_verify.py --quick (every pair) with it; warm compiles;
#  B. grid v0 / v1: verify T = 8 b256, nvfp4/fp16sr, fp8/fp32, fp32.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c6; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SV="spec --layer gdn --batches 256 --T 8 --pairs nvfp4/fp16sr,fp8/fp32,fp32"
GV="v0:- v1:REPLAYSSM_GDN_VERIFY_ORDER=1"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
( env REPLAYSSM_GDN_VERIFY_ORDER=1 timeout 130 python tests/gpu_scripts/check_gdn_verify.py --quick > "$OUT/chkv_o1.log" 2>&1; echo "rc=$?" >> "$OUT/chkv_o1.log" ) &
for s in $GV; do
  ( env $(envs "$s") timeout 130 python -m bench $SV --warm-only --no-plots --out /tmp/wv_${s%%:*} > /tmp/wv_${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
echo "== chkv_o1"; grep -E "FAIL|rc=|configurations passed|Error" "$OUT/chkv_o1.log" | cut -c1-200 | tail -6
OUT=/tmp/gv SETTINGS="$GV" BENCH_ARGS="$SV" REPLAYS=7 RUN_S=60 WARM_S=20 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gv.log 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
cp -r /tmp/gv "$OUT/"; cp /tmp/wv_*.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call6.tgz" . 2>/dev/null)
cp "$OUT/chkv_o1.log" "$FINAL/"
cat /tmp/gv/knobs.md | cut -c1-200
