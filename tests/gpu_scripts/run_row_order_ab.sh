#!/usr/bin/env bash
# The flush-first row order in ONE device call:
#   1. (concurrent) tests/test_gpu_row_order.py, the Mamba-2 GPU suites with the order forced on
#      (REPLAYSSM_M2_ORDER=1: every batch size goes through it), and the compile-only warm-up of
#      the timing runs for both settings;
#   2. (alone) the staggered decode sweep and the verify timing with the order off / on
#      (run_knob_grid.sh: $OUT/sweep/knobs.md, $OUT/spec/knobs.md).
# Knobs: CHECK_S, SWEEP_ARGS, SPEC_ARGS, RUN_S.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=${REPLAYSSM_KERNEL_CACHE_DIR:-/tmp/replayssm_kernels}
CHECK_S=${CHECK_S:-220}
SWEEP_ARGS=${SWEEP_ARGS:-sweep --shapes nemotron3-super --batches 32,256,512 --L 16 --pairs nvfp4/fp16sr,fp32 --no-peers}
SPEC_ARGS=${SPEC_ARGS:-spec --layer mamba2 --batches 256 --T 8 --pairs fp32,nvfp4/fp16sr}
SETTINGS="off:REPLAYSSM_M2_ORDER=0 on:REPLAYSSM_M2_ORDER=1"
bg() { local name=$1; shift; ( timeout "$CHECK_S" "$@" >"$OUT/$name.log" 2>&1; echo "rc=$?" >>"$OUT/$name.log" ) & }
bg row_order python -m pytest -q -rs -p no:cacheprovider -n 3 tests/test_gpu_row_order.py
bg ops_order env REPLAYSSM_M2_ORDER=1 python -m pytest -q -rs -p no:cacheprovider -n 2 tests/test_gpu_ops.py -k "mamba2 or graph"
bg spec_order env REPLAYSSM_M2_ORDER=1 python -m pytest -q -rs -p no:cacheprovider -n 3 tests/test_gpu_spec.py -k mamba2
for o in 0 1; do
  bg warm_sweep_$o env REPLAYSSM_M2_ORDER=$o python -m bench $SWEEP_ARGS --warm-only --no-plots --out /tmp/w1
  bg warm_spec_$o env REPLAYSSM_M2_ORDER=$o python -m bench $SPEC_ARGS --warm-only --no-plots --out /tmp/w2
done
wait
for n in sweep spec; do
  a=SWEEP_ARGS; [ $n = spec ] && a=SPEC_ARGS
  mkdir -p "$OUT/$n"
  OUT="$OUT/$n" SETTINGS="$SETTINGS" BENCH_ARGS="${!a}" REPLAYS=${REPLAYS:-7} RUN_S=${RUN_S:-100} \
    WARM_S=60 bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/$n.log" 2>&1
done
for f in row_order ops_order spec_order; do echo "=== $f"; grep -E "passed|failed|rc=" "$OUT/$f.log" | tail -3; done
for f in "$OUT"/warm_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
cat "$OUT/sweep/knobs.md" "$OUT/spec/knobs.md"
