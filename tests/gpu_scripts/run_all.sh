#!/usr/bin/env bash
# One device call: every GPU check, the GPU pytest suite, then (optionally) a benchmark.
# Usage on the GPU machine, from the repo root:  bash tests/gpu_scripts/run_all.sh [checks|tests|sweep|all]
source .device/gpu_env.sh
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
what=${1:-all}
rc=0
step() { local name=$1; shift; echo "=== $name"; ( set -o pipefail; timeout "${T:-240}" "$@" 2>&1 | tee "$OUT/$name.log" | tail -${TAIL:-25} ) || { echo "!!! $name failed"; rc=1; }; }
if [[ $what == checks || $what == all ]]; then
  step codec python tests/gpu_scripts/check_state_codec.py
  step m2replay python tests/gpu_scripts/check_mamba2_replay.py
  [[ -f tests/gpu_scripts/check_gdn.py ]] && step gdn python tests/gpu_scripts/check_gdn.py
fi
if [[ $what == tests || $what == all ]]; then
  T=400 step pytest_gpu python -m pytest -q -rs -x tests/test_gpu_ops.py
fi
exit $rc
