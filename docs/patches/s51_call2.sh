#!/usr/bin/env bash
# Session 51, device call 2 (~9 min on an H100 / H200): the final code's GPU tests, then the
# T > 8 dots' new defaults (REPLAYSSM_M2V_MMA_MAX_T = 16, B fragments by _mma_bsmem_default) against the old
# (MAX_T = 8: CUDA-core non-flush dots above 8 drafts) where call 1 did not time them:
#  1. m2_test_set (background, capped at TEST_S): the replay-step / fold-pair / philox ops set,
#     M2 row order, the M2 spec set (its T > 8 fuzz now draws the default builds);
#  2. grid old / new / bs1 (new with every B fragment set in smem, against the rule's registers
#     in the single launch): Super L16 T12, fp8/fp32 (untimed so far) and fp32 /
#     nvfp4/fp16sr at b32 (single launch below the split's 128 rows, 2 heads per CTA) and b256
#     (call 1's cells, a repeat). Prediction: non-flush only cells 2-3x faster as in call 1
#     (fp32 1806.6 -> 620.3 at b256), fp8/fp32 likewise; b32 mixed cells 1.1-1.3x (flush rows
#     take a larger share there); bs1 at b32 no faster than new (ptxas spills 64 B for fp32
#     there with B in smem, 0 without);
#  3. Philox rounds 10 / 7 on the verify (Super b256 L16 T8 nvfp4/fp16sr): its flush rows are
#     5.5x its non-flush rows and sit on the critical path, unlike the decode split's (call 1:
#     b512 decode flat). Prediction: flush-only cell 2-4 % faster at 7, natural 1-2 %.
#   source .device/gpu_env.sh && bash docs/patches/s51_call2.sh
source .device/gpu_env.sh >/dev/null 2>&1
source tests/gpu_scripts/ab_call_lib.sh
call_setup call2
TEST_S=${TEST_S:-240}
m2_test_set
A1="spec --layer mamba2 --shapes nemotron3-super --pairs fp8/fp32,fp32,nvfp4/fp16sr --batches 32,256 --T 12 --L 16 --deadline 60"
S1="old:REPLAYSSM_M2V_MMA_MAX_T=8 new:- bs1:REPLAYSSM_M2V_MMA_BSMEM=1"
A2="spec --layer mamba2 --shapes nemotron3-super --pairs nvfp4/fp16sr --batches 256 --T 8 --L 16"
S2="R10:- R7:REPLAYSSM_BENCH_PHILOX_ROUNDS=7"
bg_warm 1 "$S1" "$A1" 240
bg_warm 2 "$S2" "$A2" 200
wait
echo "phase 1 $(( $(date +%s) - t0 )) s"
test_summary
tarball
SETTINGS="$S1" ROUNDS=1 RUN_S=60 WARM_S=60 OUT=$OUT/g1 BENCH_ARGS="$A1" \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g1.log" 2>&1
tarball
echo "grid 1 $(( $(date +%s) - t0 )) s"
SETTINGS="$S2" ROUNDS=1 RUN_S=45 WARM_S=60 OUT=$OUT/g2 BENCH_ARGS="$A2" \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g2.log" 2>&1
tarball
echo "grid 2 $(( $(date +%s) - t0 )) s"
for g in g1 g2; do cut -c1-170 "$OUT/$g/knobs.md" 2>/dev/null | head -40; done
