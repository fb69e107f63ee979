#!/usr/bin/env bash
# Session 10, device call 4: the Mamba-2 verify flush's sub-phase sums (profiling build, new
# stamps in _flush2: head start, fold, hi wait + add, dots, encode + store + issue), T = 8
# b256, then the fold loop unrolled (REPLAYSSM_M2_FOLD_UNROLL 2 / 4) A-B alone on the GPU.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
FU=REPLAYSSM_M2_FOLD_UNROLL
SPEC="spec --layer mamba2 --batches 256 --T 8 --pairs fp32,nvfp4/fp16sr"
GS="d:- u2:$FU=2 u4:$FU=4"
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 200 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
wait
timeout 200 python tests/gpu_scripts/prof_mamba2_replay.py --verify-T 8 --pairs fp32,nvfp4/fp16sr \
  --batches 256 --modes nonflush,flush --out "$OUT" > "$OUT/m2_verify8.log" 2>&1
grep -E "^\||per " "$OUT/m2_verify8.log" || tail -20 "$OUT/m2_verify8.log"
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=50 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_d.log w_u2.log w_u4.log)
cat "$OUT/knobs.md"
