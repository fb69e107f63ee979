#!/usr/bin/env bash
# Tuning grid in ONE device call: the same `python -m bench $BENCH_ARGS` under several settings of
# implementation / tuning environment switches, back to back and alone on the GPU, then one table
# of every cell's median per setting.
#   SETTINGS="A:REPLAYSSM_M2_MINBLOCKS=3 B:REPLAYSSM_M2_MINBLOCKS=5" \
#   BENCH_ARGS="sweep --shapes nemotron3-super --batches 256 --L 16 --pairs nvfp4/fp16sr --phases" \
#   bash tests/gpu_scripts/run_knob_grid.sh
# A setting is NAME:VAR=V[,VAR=V...] (NAME:- = no override). Compiles go first, WARM_JOBS settings
# at a time, into one disk kernel cache (the env switches are part of its key); then each setting
# is timed alone. Output: $OUT/<NAME>/ (the bench JSON), $OUT/<NAME>.log, $OUT/knobs.md (with two
# settings also their ratio). ROUNDS=k times every setting k times in turn (A B A B ...: the
# table's round spread column shows the back-to-back drift; rounds 2.. go to $OUT/<NAME>.r<k>/).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=${REPLAYSSM_KERNEL_CACHE_DIR:-/tmp/replayssm_kernels}
: "${SETTINGS:?name the settings}" "${BENCH_ARGS:?name the bench command}"
source "$(dirname "${BASH_SOURCE[0]}")/ab_call_lib.sh"      # setting_env
i=0
for s in $SETTINGS; do
  ( env $(setting_env "$s") timeout "${WARM_S:-240}" python -m bench $BENCH_ARGS --warm-only --no-plots \
      --out "/tmp/warm_${s%%:*}" >"$OUT/warm_${s%%:*}.log" 2>&1 ) &
  i=$((i + 1)); [ $((i % ${WARM_JOBS:-4})) -eq 0 ] && wait
done
wait
for r in $(seq 1 "${ROUNDS:-1}"); do     # ROUNDS > 1: every setting again, in the same order
  for s in $SETTINGS; do
    n=${s%%:*}; d=$n; [ "$r" -gt 1 ] && d=$n.r$r
    env $(setting_env "$s") timeout "${RUN_S:-120}" python -m bench $BENCH_ARGS --replays "${REPLAYS:-9}" \
      --no-plots --out "$OUT/$d" >"$OUT/$d.log" 2>&1 || echo "$d rc=$?" >>"$OUT/$d.log"
  done
done
python "$(dirname "$0")/knob_table.py" "$OUT" "${ROUNDS:-1}" $SETTINGS | tee "$OUT/knobs.md"
