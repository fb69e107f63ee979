#!/usr/bin/env bash
# End-of-session device call: the GPU test suites on this tree AND the benchmark grids, in ONE call.
#   1. (concurrent) GPU pytest suites, the Mamba-2 decode/verify checks, the transformers
#      integration tests -- and, on the same GPU, the warm-up processes that compile every kernel
#      variant phase 2 needs into the on-disk kernel cache ($REPLAYSSM_KERNEL_CACHE_DIR);
#   2. (alone on the GPU) timing, every kernel loaded from the disk cache: `bench spec` (T x batch x
#      pairs, both layers), `bench sweep --layer gdn` (Qwen3.5-4B, L 8/16/32), then the host
#      overhead -- each under its own deadline so a slow cell costs cells, not the whole run.
# Usage (repo root, .device staged): bash tests/gpu_scripts/run_final_check.sh
# Knobs: CHECK_S (phase-1 limit), TOTAL_S (whole run), SPEC_ARGS, SPEC_WARM (the spec's pairs, one
# warm-up process each), SPEC_S (per layer), GDN_ARGS (empty: no GDN sweep), GDN_S, M2_ARGS (a
# Mamba-2 `bench sweep`; empty: none), M2_S, HOST_S, SKIP_TESTS=1.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=${REPLAYSSM_KERNEL_CACHE_DIR:-/tmp/replayssm_kernels}
CHECK_S=${CHECK_S:-240}
SPEC_ARGS=${SPEC_ARGS:---batches 1,32,256,512 --T 1,2,4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --replays 5}
GDN_ARGS=${GDN_ARGS-"--layer gdn --shapes qwen3.5-4b --batches 1,8,32,128,256,512 --L 8,16,32 --pairs fp32,nvfp4/fp16sr,nvfp4/fp8sr,fp8/fp16sr,fp8/fp32,bf16/fp32,nvfp4sr --replays 7"}
t0=$(date +%s)
if [ -f .device/hf/transformers.tar.xz ]; then mkdir -p /tmp/hf && tar xJf .device/hf/transformers.tar.xz -C /tmp/hf; fi
bg() {  # name, command...: background job with the phase-1 limit, log under $OUT
  local name=$1; shift
  ( timeout "$CHECK_S" "$@" >"$OUT/$name.log" 2>&1; echo "rc=$?" >>"$OUT/$name.log" ) &
}
warm() {  # name, pairs, bench args...: compile-only run of a benchmark for some pairs
  local name=$1 pairs=$2; shift 2
  bg "warm_$name" python -m bench "$@" --pairs "$pairs" --warm-only --no-plots --out /tmp/warm_out
}
# ---- phase 1
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  bg gpu_ops python -m pytest -q -rs -p no:cacheprovider -n 3 tests/test_gpu_ops.py tests/test_kernel_cache.py tests/test_gpu_row_order.py
  bg gpu_spec python -m pytest -q -rs -p no:cacheprovider -n 3 tests/test_gpu_spec.py
  bg m2_checks bash -c "python tests/gpu_scripts/check_mamba2_replay.py --quick && python tests/gpu_scripts/check_mamba2_verify.py --quick"
  bg integration env PYTHONPATH="/tmp/hf:$PYTHONPATH" REPLAYSSM_TEST_BUDGET_S=$((CHECK_S - 40)) \
    python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_integration.py
fi
for p in ${SPEC_WARM:-fp32 nvfp4/fp16sr fp8/fp32}; do warm "spec_${p//\//_}" "$p" spec $SPEC_ARGS --layer both; done
if [ -n "${M2_ARGS:-}" ]; then bg warm_m2 python -m bench sweep $M2_ARGS --warm-only --no-plots --out /tmp/warm_m2; fi
if [ -n "$GDN_ARGS" ]; then
  for p in fp32,nvfp4sr nvfp4/fp16sr,bf16/fp32 nvfp4/fp8sr,fp8/fp32 fp8/fp16sr; do
    warm "gdn_${p//[\/,]/_}" "$p" sweep $GDN_ARGS
  done
fi
wait
echo "phase 1 done after $(( $(date +%s) - t0 )) s"
# ---- phase 2: timing alone; every command gets min(its budget, what is left of TOTAL_S)
T_END=$(( t0 + ${TOTAL_S:-570} ))
left() { local b=$1 r=$(( T_END - $(date +%s) - 10 )); [ $r -lt $b ] && b=$r; [ $b -lt 5 ] && b=5; echo $b; }
for L in mamba2 gdn; do
  s=$(left "${SPEC_S:-110}")
  timeout $((s + 20)) python -m bench spec $SPEC_ARGS --layer $L --deadline "$s" --no-plots \
    --out "$OUT/spec_$L" >"$OUT/spec_$L.log" 2>&1; echo "rc=$?" >>"$OUT/spec_$L.log"
done
if [ -n "$GDN_ARGS" ]; then
  s=$(left "${GDN_S:-90}")
  timeout $((s + 20)) python -m bench sweep $GDN_ARGS --deadline "$s" --no-plots \
    --out "$OUT/sweep_gdn_4b" >"$OUT/sweep_gdn.log" 2>&1; echo "rc=$?" >>"$OUT/sweep_gdn.log"
fi
if [ -n "${M2_ARGS:-}" ]; then
  s=$(left "${M2_S:-90}")
  timeout $((s + 20)) python -m bench sweep $M2_ARGS --deadline "$s" --no-plots \
    --out "$OUT/sweep_m2" >"$OUT/sweep_m2.log" 2>&1; echo "rc=$?" >>"$OUT/sweep_m2.log"
fi
s=$(left "${HOST_S:-30}")
timeout "$s" python -m bench.host_overhead >"$OUT/host_overhead.log" 2>&1; echo "rc=$?" >>"$OUT/host_overhead.log"
echo "all done after $(( $(date +%s) - t0 )) s"
tar czf "$OUT/results.tgz" -C "$OUT" $(cd "$OUT" && ls -d spec_* sweep_gdn_4b sweep_m2 *.log 2>/dev/null)
{
for f in gpu_ops gpu_spec m2_checks integration; do
  [ -f "$OUT/$f.log" ] && { echo "=== $f"; grep -E "passed|failed|error|configurations|rc=" "$OUT/$f.log" | tail -4; }
done
for f in "$OUT"/warm_*.log; do echo "$(basename "$f"): $(tail -1 "$f")"; done
for L in mamba2 gdn; do echo "=== spec $L"; grep -E "deadline|rc=" "$OUT/spec_$L.log" | tail -3; done
echo "=== gdn sweep"; grep -E "deadline|rc=|cells" "$OUT/sweep_gdn.log" 2>/dev/null | tail -4
echo "=== m2 sweep"; grep -E "deadline|rc=|cells" "$OUT/sweep_m2.log" 2>/dev/null | tail -4
echo "=== host overhead"; tail -14 "$OUT/host_overhead.log"
} | tee "$OUT/summary.txt"
rm -rf "$OUT"/spec_* "$OUT/sweep_gdn_4b" "$OUT/sweep_m2" "$OUT"/*.log
