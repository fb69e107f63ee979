#!/usr/bin/env bash
# Session 49, device call 1, lean (~5 min; s49_call1.sh less the whole M2 test set, for a short
# device budget): the T > 8 fuzz of the tensor-core dots (12 tests: three pairs, single / split
# launch, B in registers / smem) and the M2 row-order tests beside the compiles, then the A-B-C
# grid of s49_call1.sh, ROUNDS rounds (default 1).
#   source .device/gpu_env.sh && bash docs/patches/s49_call1b.sh
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:${PYTHONPATH:-}
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; rm -rf "$OUT"; mkdir -p "$OUT"
tarball() { (cd "$OUT" && tar czf "$FINAL/call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc
ARGS="spec --layer mamba2 --shapes nemotron3-super --pairs fp32,nvfp4/fp16sr,fp8/fp32 --batches 256 --T 12,16 --L 16"
SET="A:- B:REPLAYSSM_M2V_MMA_MAX_T=16 C:REPLAYSSM_M2V_MMA_MAX_T=16,REPLAYSSM_M2V_MMA_BSMEM=1"
PT="timeout ${TEST_S:-170} python -m pytest -q -rs -p no:cacheprovider"
( $PT -n 6 tests/test_gpu_spec.py -k "more_than_8" > "$OUT/t_spec8.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec8.log" ) &
( $PT -n 3 tests/test_gpu_row_order.py -k "mamba2" > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
for s in $SET; do
  ( env $(envs "$s") timeout 170 python -m bench $ARGS --warm-only --no-plots --out /tmp/w_${s%%:*} > "$OUT/warm_${s%%:*}.log" 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_spec8 t_order; do
  echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"
  grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8
done
tarball
SETTINGS="$SET" ROUNDS=${ROUNDS:-1} RUN_S=90 WARM_S=100 OUT=$OUT/ab BENCH_ARGS="$ARGS" \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/ab.log" 2>&1
tarball
cut -c1-170 "$OUT/ab/knobs.md"
echo "total $(( $(date +%s) - t0 )) s"
