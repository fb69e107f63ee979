#!/usr/bin/env bash
# Session 16, device call 3: GDN decode A-B around the new defaults (warp 0's ring g / kinv by
# cp.async, REPLAYSSM_GDN_RING_GATES_ASYNC, now on):
#   def (ga on) / ga0 (=0) / vl (REPLAYSSM_GDN_V_LATE=1: v as raw bits, one per finishing lane,
#   behind the tile) / p4 (REPLAYSSM_GDN_PREAMBLE=4: gate inputs, q / k, v issued before the
#   slot is known);
#  A. check_gdn.py with vl and with p4 forced (all three acts dtypes, pad rows, scattered slots,
#     >= 3L steps); warm compiles;
#  B. grid b256 / b512 with row-kind phases, fp32 / nvfp4/fp16sr / fp8/fp32.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --phases --no-peers"
G="def:- ga0:REPLAYSSM_GDN_RING_GATES_ASYNC=0 vl:REPLAYSSM_GDN_V_LATE=1 p4:REPLAYSSM_GDN_PREAMBLE=4"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
( env REPLAYSSM_GDN_V_LATE=1 timeout 230 python tests/gpu_scripts/check_gdn.py --no-bench --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 > "$OUT/chk_vl.log" 2>&1; echo "rc=$?" >> "$OUT/chk_vl.log" ) &
( env REPLAYSSM_GDN_PREAMBLE=4 timeout 230 python tests/gpu_scripts/check_gdn.py --no-bench --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 > "$OUT/chk_p4.log" 2>&1; echo "rc=$?" >> "$OUT/chk_p4.log" ) &
for s in $G; do
  ( env $(envs "$s") timeout 230 python -m bench $SD --warm-only --no-plots --out /tmp/w_${s%%:*} > /tmp/w_${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in chk_vl chk_p4; do echo "== $f"; grep -E "FAIL|rc=|all checks|exception|Error" "$OUT/$f.log" | cut -c1-220 | tail -6; done
OUT=/tmp/gd SETTINGS="$G" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=70 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
cp -r /tmp/gd "$OUT/"; cp /tmp/w_*.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call3.tgz" . 2>/dev/null)
cp "$OUT/chk_vl.log" "$OUT/chk_p4.log" "$FINAL/"
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard bf16" /tmp/gd/knobs.md | cut -c1-200
