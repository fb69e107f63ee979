#!/usr/bin/env bash
# Session 49, device call 1 (~8 min; LEAN=1 ~5 min for a short device budget):
# (Superseded by s50_call1.sh, which runs its tests, its A-B-C grid and the GDN verify.)
#  1. the M2 kernel test set (ab_call_lib.sh m2_test_set: t_ops, t_order, t_spec) on this tree:
#     owed on an H200 since session 48, and it holds the T > 8 fuzz of the non-flush state dots
#     on the tensor cores with two n8 query tiles (this session; test_fuzz_mamba2_verify_more_
#     than_8_drafts_at_4_heads: fp32 / nvfp4/fp16sr / fp8/fp32, single and split launch, B in
#     registers / smem). LEAN=1: only that fuzz (12 tests) and the M2 row-order tests;
#  2. A-B-C of those dots, ROUNDS rounds (default 2; LEAN=1: 1): the default (MMA_MAX_T_DEFAULT
#     = 8: the CUDA-core dots above 8 drafts, as until now), REPLAYSSM_M2V_MMA_MAX_T=16 (B
#     fragments in registers: the nvfp4 split's non-flush build spills 120 B), and with
#     REPLAYSSM_M2V_MMA_BSMEM=1 (B in smem between heads: 0 B), Super b256 L16 T 12 / 16, three
#     pairs.
#   source .device/gpu_env.sh && [LEAN=1] bash docs/patches/s49_call1.sh
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:${PYTHONPATH:-}
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; rm -rf "$OUT"; mkdir -p "$OUT"
tarball() { (cd "$OUT" && tar czf "$FINAL/call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
source tests/gpu_scripts/ab_call_lib.sh
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc
ARGS="spec --layer mamba2 --shapes nemotron3-super --pairs fp32,nvfp4/fp16sr,fp8/fp32 --batches 256 --T 12,16 --L 16"
SET="A:- B:REPLAYSSM_M2V_MMA_MAX_T=16 C:REPLAYSSM_M2V_MMA_MAX_T=16,REPLAYSSM_M2V_MMA_BSMEM=1"
if [ "${LEAN:-0}" = 1 ]; then
  PT="timeout ${TEST_S:-170} python -m pytest -q -rs -p no:cacheprovider"
  ( $PT -n 6 tests/test_gpu_spec.py -k "more_than_8" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
  ( $PT -n 3 tests/test_gpu_row_order.py -k "mamba2" > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
  : > "$OUT/t_ops.log"
else
  TEST_S=${TEST_S:-240} m2_test_set
fi
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
for s in $SET; do
  ( env $(envs "$s") timeout 200 python -m bench $ARGS --warm-only --no-plots --out /tmp/w_${s%%:*} > "$OUT/warm_${s%%:*}.log" 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
test_summary
tarball
SETTINGS="$SET" ROUNDS=${ROUNDS:-$([ "${LEAN:-0}" = 1 ] && echo 1 || echo 2)} RUN_S=90 WARM_S=100 \
  OUT=$OUT/ab BENCH_ARGS="$ARGS" bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/ab.log" 2>&1
tarball
cut -c1-170 "$OUT/ab/knobs.md"
echo "total $(( $(date +%s) - t0 )) s"
