#!/usr/bin/env bash
# Session 38, call 6 (timing only, no kernel change; run `tools/device_slim.sh out` first, carry
# .device): the last device minutes on two open questions.
#  g1: Nano-4B fp32 L16 b256 / b512: def (unsplit, 4 heads per CTA) / split6 (REPLAYSSM_M2_SPLIT=1:
#      6 heads per non-flush CTA, call 4's 1.014-1.018x slower) / split4 (+ REPLAYSSM_M2_HEADS_PER_CTA=4,
#      both halves at 4). Prediction: split4 0.97-0.99x def (Super's split gain with 4-head CTAs).
#  g2: Super b4 L16 fp16rn / fp16sr: def (pair) / off (REPLAYSSM_M2_FOLD_PAIR=0): call 2's fp16rn
#      1.032x again? Prediction: fp16rn 0.95-1.0x (fp16sr, the same build shape, 0.949x in call 1).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c6; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call6.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
S1="def:- split6:REPLAYSSM_M2_SPLIT=1 split4:REPLAYSSM_M2_SPLIT=1,REPLAYSSM_M2_HEADS_PER_CTA=4"
E1="sweep --layer mamba2 --shapes nemotron3-nano-4b --batches 256,512 --L 16 --pairs fp32 --no-peers --no-plots"
S2="def:- off:REPLAYSSM_M2_FOLD_PAIR=0"
E2="sweep --layer mamba2 --shapes nemotron3-super --batches 4 --L 16 --pairs fp16rn,fp16sr --no-peers --no-plots"
for n in 1 2; do
  eval "B=\$E$n; S=\$S$n"
  ( SETTINGS="$S" BENCH_ARGS="$B" WARM_S=90 WARM_JOBS=3 RUN_S=1 OUT=/tmp/c6warm$n \
    bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c6warm$n.log 2>&1 ) &
done
wait
echo "warm $(( $(date +%s) - t0 )) s"
for n in 1 2; do
  eval "B=\$E$n; S=\$S$n"
  OUT=$OUT/g$n SETTINGS="$S" BENCH_ARGS="$B" REPLAYS=9 RUN_S=40 \
    bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g$n.log" 2>&1
  echo "g$n $(( $(date +%s) - t0 )) s"; tarball
done
for n in 1 2; do grep -v "^|---" "$OUT/g$n/knobs.md" | grep -v "standard bf16" | cut -c1-130; done
