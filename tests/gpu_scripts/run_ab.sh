#!/usr/bin/env bash
# A/B timing of one implementation switch in ONE device call, then the correctness checks.
#   AB_ENV=REPLAYSSM_M2_EARLY_ARRIVE bash tests/gpu_scripts/run_ab.sh
# 1. timing, alone on the GPU: `bench sweep $SWEEP_ARGS` with $AB_ENV=0 (A) and $AB_ENV=1 (B),
#    through run_knob_grid.sh -> $OUT/A, $OUT/B and the table with the A/B ratio $OUT/knobs.md;
# 2. correctness with $AB_ENV=1: $CHECKS (';'-separated commands, default the Mamba-2 decode and
#    verify checks, one configuration per pair) -> $OUT/check_<i>.log.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
export OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
: "${AB_ENV:?name the environment switch to A/B}"
SWEEP_ARGS=${SWEEP_ARGS:---shapes nemotron3-super --batches 1,8,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32}
CHECKS=${CHECKS:-"python tests/gpu_scripts/check_mamba2_replay.py --quick;python tests/gpu_scripts/check_mamba2_verify.py --quick"}
SETTINGS="A:$AB_ENV=0 B:$AB_ENV=1" BENCH_ARGS="sweep $SWEEP_ARGS --no-peers" RUN_S=${SWEEP_S:-200} \
  bash "$(dirname "$0")/run_knob_grid.sh"
i=0
IFS=';' read -ra cmds <<<"$CHECKS"
for c in "${cmds[@]}"; do
  ( env "$AB_ENV=1" timeout "${CHECK_S:-240}" $c >"$OUT/check_$i.log" 2>&1; echo "rc=$?" >>"$OUT/check_$i.log" ) &
  i=$((i + 1))
done
wait
for f in "$OUT"/check_*.log; do echo "== $f"; grep -E "configurations|FAIL|rc=" "$f" | tail -4; done
