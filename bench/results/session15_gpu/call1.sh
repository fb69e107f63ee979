#!/usr/bin/env bash
# Session 15, device call 1:
#  A. checks: check_gdn.py (decode, default level) with the new preamble 3 forced; the default
#     check_gdn_verify (unit q / k when the norm is off: session 14's harness change; the merged
#     COEF_VEC=1 coefficient dots); the COEF_VEC 0 / 1 A-B on identical caches (--exact);
#     warm compiles of both grids;
#  B. decode grid: preamble default (1 fp32 / fp8, 2 nvfp4) vs 3, b256 / b512, row-kind phases;
#  C. verify grid: COEF_VEC 0 vs 1, b256 / b512 T = 8.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
P="fp32,nvfp4/fp16sr,fp8/fp32"
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs $P --phases --no-peers"
SV="spec --layer gdn --batches 256,512 --T 8 --pairs $P"
GD="def:- p3:REPLAYSSM_GDN_PREAMBLE=3"
GV="c0:REPLAYSSM_GDN_VERIFY_COEF_VEC=0 c1:-"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
( env REPLAYSSM_GDN_PREAMBLE=3 timeout 280 python tests/gpu_scripts/check_gdn.py --no-bench --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32,nvfp4/fp8sr > "$OUT/chk_decode_p3.log" 2>&1; echo "rc=$?" >> "$OUT/chk_decode_p3.log" ) &
( timeout 280 python tests/gpu_scripts/check_gdn_verify.py > "$OUT/chk_verify.log" 2>&1; echo "rc=$?" >> "$OUT/chk_verify.log" ) &
( timeout 280 python tests/gpu_scripts/check_mamba2_verify_wide.py --layer gdn --env REPLAYSSM_GDN_VERIFY_COEF_VEC --values 0,1 --exact --pairs fp32,fp8/fp32,nvfp4/fp16sr,bf16/fp32 > "$OUT/ab_coefvec.log" 2>&1; echo "rc=$?" >> "$OUT/ab_coefvec.log" ) &
for s in $GD; do
  ( env $(envs "$s") timeout 280 python -m bench $SD --warm-only --no-plots --out /tmp/w_d${s%%:*} > /tmp/w_d${s%%:*}.log 2>&1 ) &
done
for s in $GV; do
  ( env $(envs "$s") timeout 280 python -m bench $SV --warm-only --no-plots --out /tmp/w_v${s%%:*} > /tmp/w_v${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in chk_decode_p3 chk_verify ab_coefvec; do echo "== $f"; grep -E "FAIL|rc=|configurations|exception" "$OUT/$f.log" | cut -c1-220 | tail -6; done
mkdir -p /tmp/gd /tmp/gv
OUT=/tmp/gd SETTINGS="$GD" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=100 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
echo "decode grid $(( $(date +%s) - t0 )) s"
OUT=/tmp/gv SETTINGS="$GV" BENCH_ARGS="$SV" REPLAYS=7 RUN_S=100 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gv.log 2>&1
(cd /tmp && tar czf "$OUT/call1.tgz" gd gv gd.log gv.log w_*.log 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
cat /tmp/gd/knobs.md | cut -c1-200; cat /tmp/gv/knobs.md | cut -c1-200
