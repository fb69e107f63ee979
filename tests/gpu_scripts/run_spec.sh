#!/usr/bin/env bash
# Issue 5 on the GPU machine, one device call (< 5 min once kernels are compiled; first compiles add
# ~1-2 s per kernel variant): snapshot-kernel tests, the CuTe speculative fuzz (skips, saying so,
# until CuTe verify kernels are registered), then a reduced `replayssm-bench spec`.
# Usage from the repo root:  bash tests/gpu_scripts/run_spec.sh [tests|fuzz|bench|all]
# Results under $OUT (spec bench: $OUT/spec/spec.{md,json,png}).
source .device/gpu_env.sh
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
what=${1:-all}
rc=0
step() { local name=$1; shift; echo "=== $name"; ( set -o pipefail; timeout "${T:-240}" "$@" 2>&1 | tee "$OUT/$name.log" | tail -${TAIL:-30} ) || { echo "!!! $name failed"; rc=1; }; }
if [[ $what == tests || $what == all ]]; then
  T=150 step spec_snapshot_tests python -m pytest -q -rs -x tests/test_gpu_spec.py -k "snapshot"
fi
if [[ $what == fuzz || $what == all ]]; then
  # every pair x both layer kinds (REPLAYSSM_FUZZ_STEPS per pair, default 60) + the 1000-step fp32 runs
  T=240 step spec_fuzz python -m pytest -q -rs -s tests/test_gpu_spec.py -k "fuzz"
fi
if [[ $what == bench || $what == all ]]; then
  T=300 step spec_bench python -m bench spec --layer both --pairs "${PAIRS:-fp32,nvfp4/fp16sr}" \
    --batches "${BATCHES:-1,32,256,512}" --T 1,2,4,8 --replays 10 --out "$OUT/spec"
fi
exit $rc
