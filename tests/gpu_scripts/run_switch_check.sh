#!/usr/bin/env bash
# One implementation switch, checked and timed in ONE device call:
#   1. (concurrent) $TESTS (';'-separated commands, the switch at its default) and the compile-only
#      warm-up of the timing runs for both settings;
#   2. (alone) the staggered decode sweep ($SWEEP_ARGS) and the verify timing ($SPEC_ARGS) with
#      $AB_ENV=0 / 1 (run_knob_grid.sh: $OUT/sweep/knobs.md, $OUT/spec/knobs.md, ratio column).
#   AB_ENV=REPLAYSSM_M2_ORDER bash tests/gpu_scripts/run_switch_check.sh
# Knobs: CHECK_S (phase-1 limit), TESTS, SWEEP_ARGS, SPEC_ARGS (empty: skip), RUN_S, REPLAYS,
# AB_ON (the "on" value of the switch, default 1; e.g. AB_ENV=REPLAYSSM_PDL AB_ON=2).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=${REPLAYSSM_KERNEL_CACHE_DIR:-/tmp/replayssm_kernels}
: "${AB_ENV:?name the environment switch}"
CHECK_S=${CHECK_S:-220}
PYT="python -m pytest -q -rs -p no:cacheprovider"
TESTS=${TESTS:-"$PYT -n 3 tests/test_gpu_row_order.py;$PYT -n 3 tests/test_gpu_ops.py;$PYT -n 3 tests/test_gpu_spec.py -k mamba2;python tests/gpu_scripts/check_mamba2_replay.py --quick;python tests/gpu_scripts/check_mamba2_verify.py --quick"}
SWEEP_ARGS=${SWEEP_ARGS-sweep --shapes nemotron3-super --batches 32,256,512 --L 16 --pairs nvfp4/fp16sr,fp32 --no-peers}
SPEC_ARGS=${SPEC_ARGS-spec --layer mamba2 --batches 256 --T 8 --pairs fp32,nvfp4/fp16sr}
AB_ON=${AB_ON:-1}
SETTINGS="off:$AB_ENV=0 on:$AB_ENV=$AB_ON"
bg() { local name=$1; shift; ( timeout "$CHECK_S" "$@" >"$OUT/$name.log" 2>&1; echo "rc=$?" >>"$OUT/$name.log" ) & }
i=0
IFS=';' read -ra cmds <<<"$TESTS"
for c in "${cmds[@]}"; do bg "test_$i" bash -c "$c"; i=$((i + 1)); done
for o in 0 "$AB_ON"; do
  [ -n "$SWEEP_ARGS" ] && bg warm_sweep_$o env "$AB_ENV=$o" python -m bench $SWEEP_ARGS --warm-only --no-plots --out /tmp/w1_$o
  [ -n "$SPEC_ARGS" ] && bg warm_spec_$o env "$AB_ENV=$o" python -m bench $SPEC_ARGS --warm-only --no-plots --out /tmp/w2_$o
done
wait
for n in sweep spec; do
  a=SWEEP_ARGS; [ $n = spec ] && a=SPEC_ARGS
  [ -z "${!a}" ] && continue
  mkdir -p "$OUT/$n"
  OUT="$OUT/$n" SETTINGS="$SETTINGS" BENCH_ARGS="${!a}" REPLAYS=${REPLAYS:-7} RUN_S=${RUN_S:-100} \
    WARM_S=60 bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/$n.log" 2>&1
done
for f in "$OUT"/test_*.log; do echo "=== $f"; grep -E "passed|failed|configurations|FAIL|rc=" "$f" | tail -4; done
for f in "$OUT"/warm_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
cat "$OUT"/sweep/knobs.md "$OUT"/spec/knobs.md 2>/dev/null
