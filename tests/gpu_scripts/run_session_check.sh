#!/usr/bin/env bash
# Everything GPU-side in ONE device call, in two phases:
#   1. correctness, concurrently (the GPU is shared, CuTe JIT compiles overlap on the 16 cores):
#      GPU pytest suites, the verify-kernel checks, the transformers integration tests, the P=80
#      decode check, the accuracy study (128K tokens, CUDA graphs);
#   2. timing, alone on the GPU: `replayssm-bench spec` (reduced grid) and the host overhead.
# Usage (repo root, .device staged; transformers 5.24 staged by tools/stage_transformers.sh):
#   bash tests/gpu_scripts/run_session_check.sh
# Knobs: CHECK_S (phase-1 wall limit, s), SPEC_BATCHES, SPEC_T, SPEC_PAIRS, ACC_MAX_LEN, P80_CMD,
# INTEGRATION_ARGS, SKIP_{TIMING,ACCURACY,GPU_OPS,VERIFY_CHECKS}=1, DEVICE_DIR, DECODE_CHECKS=1 (phase 1
# also runs the decode-kernel checks check_state_codec.py, check_mamba2_replay.py, check_gdn.py).
DEV=${DEVICE_DIR:-.device}    # the staged bundle (another checkout's when run from a snapshot)
(cd "$DEV/.." && source .device/gpu_env.sh >/dev/null)
source "$DEV/../.device/gpu_env.sh" 2>/dev/null || true
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
CHECK_S=${CHECK_S:-270}
t0=$(date +%s)
if [ -f "$DEV/hf/transformers.tar.xz" ]; then
  mkdir -p /tmp/hf && tar xJf "$DEV/hf/transformers.tar.xz" -C /tmp/hf
fi
bg() {  # name, command...: run in the background with the phase-1 limit, log under $OUT
  local name=$1; shift
  ( timeout "$CHECK_S" "$@" >"$OUT/$name.log" 2>&1; echo "rc=$?" >>"$OUT/$name.log" ) &
}
# ---- phase 1: correctness
[ "${SKIP_GPU_OPS:-0}" = 1 ] || bg gpu_ops python -m pytest -q -rs -p no:cacheprovider -n 3 tests/test_gpu_ops.py
bg gpu_spec python -m pytest -q -rs -p no:cacheprovider -n 3 tests/test_gpu_spec.py
[ "${SKIP_VERIFY_CHECKS:-0}" = 1 ] || bg m2_verify python tests/gpu_scripts/check_mamba2_verify.py --quick
[ "${SKIP_VERIFY_CHECKS:-0}" = 1 ] || bg gdn_verify python tests/gpu_scripts/check_gdn_verify.py --quick
[ -n "${P80_CMD:-}" ] && bg m2_p80 bash -c "$P80_CMD"
if [ "${DECODE_CHECKS:-0}" = 1 ]; then
  bg codec python tests/gpu_scripts/check_state_codec.py
  bg m2replay python tests/gpu_scripts/check_mamba2_replay.py
  bg gdn python tests/gpu_scripts/check_gdn.py
fi
bg integration env PYTHONPATH="/tmp/hf:$PYTHONPATH" REPLAYSSM_TEST_BUDGET_S=$((CHECK_S - 40)) \
  python -m pytest -q -rs -p no:cacheprovider ${INTEGRATION_ARGS:-} tests/test_gpu_integration.py
# ACC_GPU=<index> (a 2-GPU machine): the accuracy study runs on that GPU for ACC_S seconds and
# overlaps phase 2 (the timing runs on the other GPU); otherwise it is part of phase 1
acc_env=(); acc_s=$((CHECK_S - 10))
acc_s=${ACC_S:-$acc_s}   # the accuracy study may run longer than the other phase-1 jobs
if [ -n "${ACC_GPU:-}" ]; then acc_env=(CUDA_VISIBLE_DEVICES="$ACC_GPU"); fi
if [ "${SKIP_ACCURACY:-0}" != 1 ]; then
  ( env "${acc_env[@]}" OUT="$OUT/acc" MAX_LEN="${ACC_MAX_LEN:-131072}" PART_TIMEOUT="$acc_s" \
      timeout $((acc_s + 20)) bash bench/run_accuracy_gpu.sh >"$OUT/accuracy.log" 2>&1
    echo "rc=$?" >>"$OUT/accuracy.log" ) &
  acc_pid=$!
fi
if [ -n "${ACC_GPU:-}" ]; then
  # wait for the phase-1 jobs only
  for p in $(jobs -p); do [ "$p" = "${acc_pid:-}" ] || wait "$p"; done
else
  wait
fi
echo "phase 1 done after $(( $(date +%s) - t0 )) s"
[ "${SKIP_TIMING:-0}" = 1 ] && SKIP2=1 || SKIP2=0
# ---- phase 2: timing (nothing else on the GPU)
if [ $SKIP2 = 0 ]; then
timeout "${SPEC_S:-150}" python -m bench spec --layer both --pairs "${SPEC_PAIRS:-fp32,nvfp4/fp16sr}" \
  --batches "${SPEC_BATCHES:-1,256}" --T "${SPEC_T:-1,8}" --replays 8 --out "$OUT/spec" \
  >"$OUT/spec.log" 2>&1; echo "rc=$?" >>"$OUT/spec.log"
timeout "${HOST_S:-60}" python -m bench.host_overhead ${HOST_ARGS:-} >"$OUT/host_overhead.log" 2>&1; echo "rc=$?" >>"$OUT/host_overhead.log"
fi
wait
# the device returns at most 8 files: pack the result folders and every log into one archive
tar czf "$OUT/results.tgz" -C "$OUT" $(cd "$OUT" && ls -d acc/accuracy_*_cute acc/parts/*/*/log.txt acc/graph_check.txt spec *.log 2>/dev/null) 2>/dev/null
echo "all done after $(( $(date +%s) - t0 )) s"
{
for f in gpu_ops gpu_spec m2_verify gdn_verify m2_p80 codec m2replay gdn integration; do
  [ -f "$OUT/$f.log" ] && { echo "=== $f"; grep -E "passed|failed|error|configurations|rc=" "$OUT/$f.log" | tail -4; }
done
[ -f "$OUT/accuracy.log" ] && { echo "=== accuracy"; tail -15 "$OUT/accuracy.log"; }
[ $SKIP2 = 0 ] && echo "=== spec" && grep -E "^\||target|rc=" "$OUT/spec.log" | tail -30
[ $SKIP2 = 0 ] && echo "=== host overhead" && tail -15 "$OUT/host_overhead.log"
} | tee "$OUT/summary.txt"
rm -rf "$OUT/acc" "$OUT/spec" "$OUT"/*.log
