#!/usr/bin/env bash
# Session 16, device call 1 (main 8ddb748: branch wip/gdn-verify-pre3 merged, its switch off):
#  A. the verify's early small loads (REPLAYSSM_GDN_VERIFY_EARLY=1): exact A-B against 0 on
#     identical caches, and check_gdn_verify.py with it forced; warm compiles;
#  B. verify grid e0 / e1, b256 T = 4 / 8, three pairs;
#  C. in-kernel phase profile of the GDN decode (landing defaults), b256: fp32 non-flush and
#     flush, nvfp4/fp16sr non-flush.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
P="fp32,nvfp4/fp16sr,fp8/fp32"
SV="spec --layer gdn --batches 256 --T 4,8 --pairs $P"
GV="e0:- e1:REPLAYSSM_GDN_VERIFY_EARLY=1"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
( timeout 250 python tests/gpu_scripts/check_mamba2_verify_wide.py --layer gdn --env REPLAYSSM_GDN_VERIFY_EARLY --values 0,1 --exact --pairs fp32,fp8/fp32,nvfp4/fp16sr,bf16/fp32 > "$OUT/ab_early.log" 2>&1; echo "rc=$?" >> "$OUT/ab_early.log" ) &
( env REPLAYSSM_GDN_VERIFY_EARLY=1 timeout 250 python tests/gpu_scripts/check_gdn_verify.py > "$OUT/chk_verify_e1.log" 2>&1; echo "rc=$?" >> "$OUT/chk_verify_e1.log" ) &
for s in $GV; do
  ( env $(envs "$s") timeout 250 python -m bench $SV --warm-only --no-plots --out /tmp/w_v${s%%:*} > /tmp/w_v${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in ab_early chk_verify_e1; do echo "== $f"; grep -E "FAIL|rc=|configurations|exception|differ" "$OUT/$f.log" | cut -c1-220 | tail -8; done
OUT=/tmp/gv SETTINGS="$GV" BENCH_ARGS="$SV" REPLAYS=7 RUN_S=100 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gv.log 2>&1
echo "verify grid $(( $(date +%s) - t0 )) s"
timeout 120 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --pairs fp32 --batches 256 --modes nonflush,flush --out "$OUT/prof_fp32" > "$OUT/prof_fp32.log" 2>&1; echo "prof fp32 rc=$?"
timeout 100 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --pairs nvfp4/fp16sr --batches 256 --modes nonflush --out "$OUT/prof_nvfp4" > "$OUT/prof_nvfp4.log" 2>&1; echo "prof nvfp4 rc=$?"
cp -r /tmp/gv "$OUT/gv"; cp /tmp/w_v*.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call1.tgz" . 2>/dev/null)
cp "$OUT/ab_early.log" "$OUT/chk_verify_e1.log" "$FINAL/"
echo "total $(( $(date +%s) - t0 )) s"
tail -14 "$OUT/prof_fp32.log"; tail -8 "$OUT/prof_nvfp4.log"
cat /tmp/gv/knobs.md | cut -c1-200
