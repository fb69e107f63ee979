#!/usr/bin/env bash
# Session 38, call 3 (run `tools/device_slim.sh out` first, carry .device): with the pair fold the
# split's flush half got cheaper (fp32 L32 b256 flush only 0.655x), so revisit two split rules.
#  g1: the fp32 / bf16/fp32 decode at L16 (shared kernel today; session 21: split within +-2 %)
#      def / split (REPLAYSSM_M2_SPLIT=1) / split + flush-half hint 5 (96 registers: fp32 0 spills,
#      bf16/fp32 4 B; the default hint 7 -> 72 registers, 48 / 40 B spills). Prediction: split
#      b256 fp32 0.97-1.00x (non-flush half as today's non-flush-only 306 us; flush cheaper),
#      split5 a further 0.98-0.99x.
#  g2: nvfp4 flush half hint 4 (128 registers: nvfp4/fp16sr 60 -> 0 B spills; nvfp4/fp8sr
#      0 -> 56 B) vs the default 5. Prediction: nvfp4/fp16sr flush only 0.95-1.0x (fewer CTAs),
#      mixed 0.99-1.0x; nvfp4/fp8sr slower.
#  g3: L32 b256 (split already): flush-half hint 5 vs 7. Prediction: flush only 0.9-0.95x.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
S1="def:- split:REPLAYSSM_M2_SPLIT=1 split5:REPLAYSSM_M2_SPLIT=1,REPLAYSSM_M2_SPLIT_MINB2=5"
E1="sweep --layer mamba2 --shapes nemotron3-super --batches 128,256,512 --L 16 --pairs fp32,bf16/fp32 --phases --no-peers --no-plots"
S2="def:- m4:REPLAYSSM_M2_SPLIT_MINB2=4"
E2="sweep --layer mamba2 --shapes nemotron3-super --batches 256,512 --L 16 --pairs nvfp4/fp16sr,nvfp4/fp8sr --phases --no-peers --no-plots"
S3="def:- m5:REPLAYSSM_M2_SPLIT_MINB2=5"
E3="sweep --layer mamba2 --shapes nemotron3-super --batches 256,512 --L 32 --pairs fp32,bf16/fp32 --phases --no-peers --no-plots"
for n in 1 2 3; do
  eval "B=\$E$n; S=\$S$n"
  ( SETTINGS="$S" BENCH_ARGS="$B" WARM_S=200 WARM_JOBS=3 RUN_S=1 OUT=/tmp/c3warm$n \
    bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c3warm$n.log 2>&1 ) &
done
wait
echo "warm $(( $(date +%s) - t0 )) s"
for n in 1 2 3; do
  eval "B=\$E$n; S=\$S$n"
  OUT=$OUT/g$n SETTINGS="$S" BENCH_ARGS="$B" REPLAYS=9 RUN_S=80 \
    bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g$n.log" 2>&1
  echo "g$n $(( $(date +%s) - t0 )) s"; tarball
done
for n in 1 2 3; do grep -v "^|---" "$OUT/g$n/knobs.md" | grep -v "standard bf16" | cut -c1-130; done
