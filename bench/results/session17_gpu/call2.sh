#!/usr/bin/env bash
# Session 17, device call 2: REPLAYSSM_GDN_VERIFY_FLUSH_TILE=1 (the fp32 verify's flush rows fold
# the read tile they hold on the CUDA cores, then take the draft dots as a non-flush row).
#  A. check_gdn_verify.py --pairs fp32 (random T, acceptance, pad rows) and test_gpu_spec -k
#     "gdn or fuzz" with it; the decode's new default: check_gdn.py --pairs fp32 (default build);
#     warm compiles.
#  B. verify grid def / ft, fp32, T = 4 / 8, b256 / b512 (standard and snapshot in the run).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SV="spec --layer gdn --batches 256,512 --T 4,8 --pairs fp32"
GV="def:- ft:REPLAYSSM_GDN_VERIFY_FLUSH_TILE=1"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
( env REPLAYSSM_GDN_VERIFY_FLUSH_TILE=1 timeout 230 python tests/gpu_scripts/check_gdn_verify.py --pairs fp32 > "$OUT/chkv_ft.log" 2>&1; echo "rc=$?" >> "$OUT/chkv_ft.log" ) &
( env REPLAYSSM_GDN_VERIFY_FLUSH_TILE=1 timeout 230 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_spec.py -k "gdn and fp32" > "$OUT/t_spec_ft.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec_ft.log" ) &
( timeout 230 python tests/gpu_scripts/check_gdn.py --no-bench --pairs fp32 > "$OUT/chk_def.log" 2>&1; echo "rc=$?" >> "$OUT/chk_def.log" ) &
for s in $GV; do
  ( env $(envs "$s") timeout 230 python -m bench $SV --warm-only --no-plots --out /tmp/wv_${s%%:*} > /tmp/wv_${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
echo "== t_spec_ft"; grep -E "passed|failed|rc=" "$OUT/t_spec_ft.log" | tail -3
echo "== chkv_ft"; grep -E "FAIL|rc=|all checks|ok|exception|Error" "$OUT/chkv_ft.log" | cut -c1-200 | tail -8
echo "== chk_def"; grep -E "FAIL|rc=|all checks|exception|Error" "$OUT/chk_def.log" | cut -c1-200 | tail -4
OUT=/tmp/gv SETTINGS="$GV" BENCH_ARGS="$SV" REPLAYS=7 RUN_S=100 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gv.log 2>&1
echo "verify grid $(( $(date +%s) - t0 )) s"
cp -r /tmp/gv "$OUT/"; cp /tmp/wv_*.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call2.tgz" . 2>/dev/null)
cp "$OUT"/chkv_ft.log "$OUT/t_spec_ft.log" "$OUT/chk_def.log" "$FINAL/"
echo "total $(( $(date +%s) - t0 )) s"
cat /tmp/gv/knobs.md | cut -c1-200
