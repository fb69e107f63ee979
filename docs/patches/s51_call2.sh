#!/usr/bin/env bash
# Session 51, device call 2 (~7 min on an H100 / H200): the final code's GPU tests, then the
# T > 8 dots' new defaults (REPLAYSSM_M2V_MMA_MAX_T = 16, B fragments in smem) against the old
# (MAX_T = 8: CUDA-core non-flush dots above 8 drafts) where call 1 did not time them:
#  1. m2_test_set (background, capped at TEST_S): the replay-step / fold-pair / philox ops set,
#     M2 row order, the M2 spec set (its T > 8 fuzz now draws the default builds);
#  2. grid old / new: Super L16 T12, fp8/fp32 (untimed so far; its single-launch T12 build
#     spills 52 B at 128 registers) and fp32 / nvfp4/fp16sr at b32 (single launch below the
#     split's 128 rows) and b256 (call 1's cells, a repeat). Prediction: non-flush only cells
#     2-3x faster as in call 1 (fp32 1806.6 -> 620.3 at b256), fp8/fp32 likewise; b32 mixed
#     cells 1.1-1.3x (flush rows take a larger share there).
#   source .device/gpu_env.sh && bash docs/patches/s51_call2.sh
source .device/gpu_env.sh >/dev/null 2>&1
source tests/gpu_scripts/ab_call_lib.sh
call_setup call2
TEST_S=${TEST_S:-300}
m2_test_set
A1="spec --layer mamba2 --shapes nemotron3-super --pairs fp8/fp32,fp32,nvfp4/fp16sr --batches 32,256 --T 12 --L 16 --deadline 60"
S1="old:REPLAYSSM_M2V_MMA_MAX_T=8 new:-"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
for s in $S1; do
  ( env $(envs "$s") timeout 240 python -m bench $A1 --warm-only --no-plots --out /tmp/w1_${s%%:*} > "$OUT/warm1_${s%%:*}.log" 2>&1 ) &
done
wait
echo "phase 1 $(( $(date +%s) - t0 )) s"
test_summary
tarball
SETTINGS="$S1" ROUNDS=1 RUN_S=60 WARM_S=60 OUT=$OUT/g1 BENCH_ARGS="$A1" \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g1.log" 2>&1
tarball
echo "grid $(( $(date +%s) - t0 )) s"
cut -c1-170 "$OUT/g1/knobs.md" 2>/dev/null | head -40
