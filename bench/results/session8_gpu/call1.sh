#!/usr/bin/env bash
# Session 8, device call 1 (repo root, .device staged): the three switches written in session 7
# and never run on a GPU -- REPLAYSSM_GDN_GATHER (slot + cursors gathered into one entry before
# the GDN step), REPLAYSSM_GDN_RING_SMEM (non-flush rows stage buffered u via cp.async),
# REPLAYSSM_M2_ORDER_CURSORS (the Mamba-2 flush-first order entry carries the cursors).
# GPU suites with the switches on (concurrently, with the compile warm-up), then the settings
# timed back to back and alone (run_knob_grid.sh), then the GDN phase profile with both on.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
bg() { local n=$1; shift; ( timeout "${CHECK_S:-220}" "$@" >"$OUT/$n.log" 2>&1; echo "rc=$?" >>"$OUT/$n.log" ) & }
ON="REPLAYSSM_GDN_GATHER=1 REPLAYSSM_GDN_RING_SMEM=1"
GDN="sweep --layer gdn --shapes qwen3.5-4b --batches 1,32,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --phases --no-peers"
M2="sweep --shapes nemotron3-super --batches 32,256,512 --L 16 --pairs nvfp4/fp16sr,fp32,fp8/fp32 --phases --no-peers"
GS="base:- gather:REPLAYSSM_GDN_GATHER=1 ring:REPLAYSSM_GDN_RING_SMEM=1 both:REPLAYSSM_GDN_GATHER=1,REPLAYSSM_GDN_RING_SMEM=1"
MS="off:REPLAYSSM_M2_ORDER_CURSORS=0 on:REPLAYSSM_M2_ORDER_CURSORS=1"
bg t_order $PYT -n 3 tests/test_gpu_row_order.py
bg t_ops env $ON $PYT -n 3 tests/test_gpu_ops.py -k gdn
bg t_chk env $ON python tests/gpu_scripts/check_gdn.py --quick --no-bench
bg t_m2chk env REPLAYSSM_M2_ORDER_CURSORS=1 REPLAYSSM_M2_ORDER=1 python tests/gpu_scripts/check_mamba2_replay.py --quick
for s in $GS; do kv=${s#*:}; [ "$kv" = - ] && kv=; kv=${kv//,/ }
  bg w_gdn_${s%%:*} env $kv python -m bench $GDN --warm-only --no-plots --out /tmp/w_gdn_${s%%:*}; done
for o in 0 1; do bg w_m2_$o env REPLAYSSM_M2_ORDER_CURSORS=$o python -m bench $M2 --warm-only --no-plots --out /tmp/w_m2_$o; done
wait
grid() { local n=$1 s=$2; shift 2; mkdir -p "$OUT/$n"
  OUT="$OUT/$n" SETTINGS="$s" BENCH_ARGS="$*" REPLAYS=${REPLAYS:-5} RUN_S=${RUN_S:-80} WARM_S=30 \
    bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/$n.log" 2>&1; }
grid gdn "$GS" $GDN
grid m2 "$MS" $M2
env $ON timeout 60 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --pairs fp32,nvfp4/fp16sr \
  --batches 512 --modes nonflush --out "$OUT" > "$OUT/prof.log" 2>&1
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|rc=" "$f" | tail -4; done
for f in "$OUT"/w_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
grep "^|" "$OUT/prof.log"
cat "$OUT"/gdn/knobs.md "$OUT"/m2/knobs.md 2>/dev/null
