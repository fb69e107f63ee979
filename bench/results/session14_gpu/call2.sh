#!/usr/bin/env bash
# Session 14, device call 2: the GDN verify's coefficient dots before the read dots
# (REPLAYSSM_GDN_VERIFY_COEF_FIRST=1) and two occupancy knobs (block_v 64, 3 CTAs/SM).
#  A. correctness of the coef-first builds (check_gdn_verify full + quick at block_v 64; spec fuzz /
#     teeth for gdn) alongside the warm compiles of the grid;
#  B. knob grid, GDN verify b256 T = 4 / 8 (natural mix, non-flush only, flush only);
#  C. phase profile of the fp32 T = 8 verify CTA, default vs coef-first.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
V=REPLAYSSM_GDN_VERIFY
PYT="python -m pytest -q -rs -p no:cacheprovider"
SG="def:- cf:${V}_COEF_FIRST=1 bv64:${V}_BV=64 cfbv64:${V}_COEF_FIRST=1,${V}_BV=64 mb3:${V}_MINB=3"
SA="spec --layer gdn --batches 256 --T 4,8 --pairs fp32,fp8/fp32,nvfp4/fp16sr"
t0=$(date +%s)
( ${V}_COEF_FIRST=1 timeout 330 python tests/gpu_scripts/check_gdn_verify.py > "$OUT/chk_cf.log" 2>&1; echo "rc=$?" >> "$OUT/chk_cf.log" ) &
( ${V}_COEF_FIRST=1 ${V}_BV=64 timeout 330 python tests/gpu_scripts/check_gdn_verify.py --quick > "$OUT/chk_cfbv64.log" 2>&1; echo "rc=$?" >> "$OUT/chk_cfbv64.log" ) &
( ${V}_COEF_FIRST=1 timeout 330 $PYT -n 2 tests/test_gpu_spec.py -k "gdn and (fuzz or teeth)" > "$OUT/t_fuzz_cf.log" 2>&1; echo "rc=$?" >> "$OUT/t_fuzz_cf.log" ) &
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
for s in $SG; do
  ( env $(envs "$s") timeout 330 python -m bench $SA --warm-only --no-plots --out /tmp/w_${s%%:*} > /tmp/w_${s%%:*}.log 2>&1 ) &
done
for x in 0 1; do
  ( env REPLAYSSM_GDN_PROF=1 ${V}_COEF_FIRST=$x timeout 330 python -c "
import os, sys; sys.path.insert(0, '.')
from cute_kernels import gdn_verify as GV
GV.compile_gdn_verify('fp32', 'bfloat16', 16, 32, 128, 128, 16, 24, 8, None, None, 'float32', 'bfloat16', 'float32', 'bfloat16', True, True, 128)
" > /tmp/w_prof$x.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in chk_cf chk_cfbv64 t_fuzz_cf; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|Error|configurations" "$OUT/$f.log" | tail -5; done
mkdir -p /tmp/g1
OUT=/tmp/g1 SETTINGS="$SG" BENCH_ARGS="$SA" REPLAYS=7 RUN_S=100 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/g1.log 2>&1
cp /tmp/g1/knobs.md "$OUT/knobs.md"
echo "grid done $(( $(date +%s) - t0 )) s"
for x in 0 1; do
  env ${V}_COEF_FIRST=$x timeout 150 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --verify-T 8 \
    --pairs fp32 --batches 256 --modes nonflush,flush --out /tmp/prof$x > "$OUT/prof$x.log" 2>&1
done
(cd /tmp && tar czf "$OUT/call2.tgz" g1 g1.log w_*.log prof0 prof1 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/knobs.md"
for x in 0 1; do echo "== prof coef_first=$x"; tail -12 "$OUT/prof$x.log"; done
