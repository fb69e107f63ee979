#!/usr/bin/env bash
# Session 16, device call 2 (two new A-B switches in the GDN decode, both off by default):
#  REPLAYSSM_GDN_TILE_EARLY_ROWS=n (fp32 whole-row tile: n of each warp's 16 rows issued ahead
#  of the cursors, the rest after the non-flush row's ring loads) and
#  REPLAYSSM_GDN_RING_GATES_ASYNC=1 (warp 0's ring g / kinv by cp.async into shared memory).
#  A. checks with the switches forced (check_gdn.py); the GDN spec fuzz with the verify's early
#     loads forced (REPLAYSSM_GDN_VERIFY_EARLY=1, validated bit-exact in call 1); warm compiles;
#  B. decode grids b256 / b512 with row-kind phases: fp32 (rows 16 / 4 / 8 / 12, 8 + async),
#     nvfp4/fp16sr + fp8/fp32 (default / async).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
S32="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs fp32 --phases --no-peers"
SLP="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32 --phases --no-peers"
G32="def:- r4:REPLAYSSM_GDN_TILE_EARLY_ROWS=4 r8:REPLAYSSM_GDN_TILE_EARLY_ROWS=8 r12:REPLAYSSM_GDN_TILE_EARLY_ROWS=12 r8ga:REPLAYSSM_GDN_TILE_EARLY_ROWS=8,REPLAYSSM_GDN_RING_GATES_ASYNC=1"
GLP="def:- ga:REPLAYSSM_GDN_RING_GATES_ASYNC=1"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
( env REPLAYSSM_GDN_TILE_EARLY_ROWS=8 REPLAYSSM_GDN_RING_GATES_ASYNC=1 timeout 240 python tests/gpu_scripts/check_gdn.py --no-bench --pairs fp32,nvfp4/fp16sr,fp8/fp32 > "$OUT/chk_decode.log" 2>&1; echo "rc=$?" >> "$OUT/chk_decode.log" ) &
( env REPLAYSSM_GDN_VERIFY_EARLY=1 timeout 240 $PYT -n 3 tests/test_gpu_spec.py -k gdn > "$OUT/t_spec_gdn_e1.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec_gdn_e1.log" ) &
for s in $G32; do
  ( env $(envs "$s") timeout 240 python -m bench $S32 --warm-only --no-plots --out /tmp/w_a${s%%:*} > /tmp/w_a${s%%:*}.log 2>&1 ) &
done
for s in $GLP; do
  ( env $(envs "$s") timeout 240 python -m bench $SLP --warm-only --no-plots --out /tmp/w_b${s%%:*} > /tmp/w_b${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in chk_decode t_spec_gdn_e1; do echo "== $f"; grep -E "FAIL|rc=|passed|failed|exception|all checks" "$OUT/$f.log" | cut -c1-220 | tail -6; done
OUT=/tmp/g32 SETTINGS="$G32" BENCH_ARGS="$S32" REPLAYS=7 RUN_S=60 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/g32.log 2>&1
echo "fp32 grid $(( $(date +%s) - t0 )) s"
OUT=/tmp/glp SETTINGS="$GLP" BENCH_ARGS="$SLP" REPLAYS=7 RUN_S=60 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/glp.log 2>&1
echo "narrow grid $(( $(date +%s) - t0 )) s"
cp -r /tmp/g32 /tmp/glp "$OUT/"; cp /tmp/w_*.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call2.tgz" . 2>/dev/null)
cp "$OUT/chk_decode.log" "$OUT/t_spec_gdn_e1.log" "$FINAL/"
echo "total $(( $(date +%s) - t0 )) s"
cut -c1-200 /tmp/g32/knobs.md; cut -c1-200 /tmp/glp/knobs.md
