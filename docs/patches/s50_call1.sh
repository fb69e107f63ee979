#!/usr/bin/env bash
# Session 50, device call 1 (~8 min on an H200):
#  1. tests, in the background while the grids compile: a cache's philox_rounds through every SR
#     encoder (test_replay_step_with_philox_rounds_matches_reference, 10), session 49's T > 8
#     tensor-core dots fuzz (test_fuzz_mamba2_verify_more_than_8_drafts_at_4_heads, 12), the M2
#     row-order tests;
#  2. A-B-C of the T > 8 dots (session 49): default / REPLAYSSM_M2V_MMA_MAX_T=16 / + BSMEM=1,
#     Super b256 L16 T 12 / 16, fp32 and nvfp4/fp16sr, one round;
#  3. Philox rounds 10 / 7 / 4 (REPLAYSSM_BENCH_PHILOX_ROUNDS = the caches' philox_rounds):
#     Super decode b512 L16, nvfp4/fp16sr and nvfp4/fp8sr (VERIFY=1: also the verify T8 b256
#     nvfp4/fp16sr). Prediction: the split's flush half and the verify's flush rows are encode-
#     bound; 7 rounds take ~50 of ~575 SASS out of the decode flush's chunk loop (static), so
#     b512 ~2-4 % faster at 7, ~5-8 % at 4; fp32 cells none (no SR);
#  4. the GDN verify on the card (4B b256 T8 fp32 / nvfp4/fp16sr with snapshot and standard).
#  LEAN=1 (~5 min): steps 1 and 3 only (no row-order tests, no grid 2, no GDN); with TESTS=1
#  (~3 min) step 1 only.
#   source .device/gpu_env.sh && [LEAN=1] bash docs/patches/s50_call1.sh
source .device/gpu_env.sh >/dev/null 2>&1
source tests/gpu_scripts/ab_call_lib.sh
call_setup call1
TEST_S=${TEST_S:-150}
bg_pytest t_ops 4 tests/test_gpu_ops.py "philox_rounds"
bg_pytest t_spec 6 tests/test_gpu_spec.py "more_than_8"
LEANV=${LEAN:-0}
[ "$LEANV" = 1 ] && : > "$OUT/t_order.log" || bg_pytest t_order 3 tests/test_gpu_row_order.py "mamba2"
A1="spec --layer mamba2 --shapes nemotron3-super --pairs fp32,nvfp4/fp16sr --batches 256 --T 12,16 --L 16 --deadline 45"
S1="A:- B:REPLAYSSM_M2V_MMA_MAX_T=16 C:REPLAYSSM_M2V_MMA_MAX_T=16,REPLAYSSM_M2V_MMA_BSMEM=1"
A2="sweep --shapes nemotron3-super --batches 512 --L 16 --pairs nvfp4/fp16sr,nvfp4/fp8sr --no-peers"
A3="spec --layer mamba2 --shapes nemotron3-super --pairs nvfp4/fp16sr --batches 256 --T 8 --L 16"
S2="R10:- R7:REPLAYSSM_BENCH_PHILOX_ROUNDS=7 R4:REPLAYSSM_BENCH_PHILOX_ROUNDS=4"
GARGS="spec --layer gdn --shapes qwen3.5-4b --pairs fp32,nvfp4/fp16sr --batches 256 --T 8 --L 16"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
[ "$LEANV" = 1 ] && S1=""
for s in $S1; do
  ( env $(envs "$s") timeout 200 python -m bench $A1 --warm-only --no-plots --out /tmp/w1_${s%%:*} > "$OUT/warm1_${s%%:*}.log" 2>&1 ) &
done
[ "${TESTS:-0}" = 1 ] && S2=""
for s in $S2; do
  ( env $(envs "$s") timeout 200 python -m bench $A2 --warm-only --no-plots --out /tmp/w2_${s%%:*} > "$OUT/warm2_${s%%:*}.log" 2>&1
    [ "${VERIFY:-0}" = 1 ] && env $(envs "$s") timeout 150 python -m bench $A3 --warm-only --no-plots --out /tmp/w3_${s%%:*} > "$OUT/warm3_${s%%:*}.log" 2>&1 ) &
done
[ "$LEANV" = 1 ] || ( timeout 200 python -m bench $GARGS --warm-only --no-plots --out /tmp/w_gdn > "$OUT/warm_gdn.log" 2>&1 ) &
wait
echo "phase 1 $(( $(date +%s) - t0 )) s"
test_summary
tarball
[ "${TESTS:-0}" = 1 ] && exit 0
[ "$LEANV" = 1 ] || SETTINGS="$S1" ROUNDS=1 RUN_S=60 WARM_S=60 OUT=$OUT/g1 BENCH_ARGS="$A1" \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g1.log" 2>&1
tarball
echo "grid 1 $(( $(date +%s) - t0 )) s"
SETTINGS="$S2" ROUNDS=1 RUN_S=40 WARM_S=60 OUT=$OUT/g2 BENCH_ARGS="$A2" \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g2.log" 2>&1
[ "${VERIFY:-0}" = 1 ] && SETTINGS="$S2" ROUNDS=1 RUN_S=45 WARM_S=60 OUT=$OUT/g3 BENCH_ARGS="$A3" \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g3.log" 2>&1
tarball
echo "grids 2-3 $(( $(date +%s) - t0 )) s"
[ "$LEANV" = 1 ] || timeout 70 python -m bench $GARGS --no-plots --out "$OUT/spec_gdn" > "$OUT/spec_gdn.log" 2>&1
tarball
for g in g1 g2 g3; do cut -c1-170 "$OUT/$g/knobs.md" 2>/dev/null | head -24; done
cut -c1-200 "$OUT/spec_gdn/spec.md" 2>/dev/null | head -16
echo "total $(( $(date +%s) - t0 )) s"
