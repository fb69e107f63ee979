#!/usr/bin/env bash
# Session 35, call 2 (run `tools/device_slim.sh out` first, carry .device).
#  A. tests: the split pairs' tensor-core Gram (REPLAYSSM_GDN_GRAM_MMA=1) against the torch
#     reference (test_gdn_decode_gram_mma: L4 / L16 / L32, b4 plain grid / CTA pair, b9 small
#     split) and the GDN decode tests at the default (0), beside the warm compiles of B.
#  B. timing g1 vs g0: Qwen3.5-4B / 122B b1 / b2, L8 / L16, the four split pairs; 4B b512 L16.
#     Prediction: the b1 flush's Gram sub-phase 1.8 -> ~0.4 us at L16 (~0.9 -> ~0.3 at L8):
#     b1 / b2 steps 0.97-0.99x (-0.05..-0.15 us); b512 within +-1 %.
#  C. the in-kernel profile at b1 (flush steps), nvfp4/fp16sr and fp8/fp32, g1 and g0.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
EB="sweep --layer gdn --shapes qwen3.5-4b,qwen3.5-122b --batches 1,2 --L 8,16 --pairs nvfp4/fp16sr,nvfp4/fp8sr,fp8/fp32,bf16/fp32 --no-peers --no-plots"
EL="sweep --layer gdn --shapes qwen3.5-4b --batches 512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32 --no-peers --no-plots"
SB="g1:REPLAYSSM_GDN_GRAM_MMA=1 g0:REPLAYSSM_GDN_GRAM_MMA=0"
( SETTINGS="$SB" BENCH_ARGS="$EB" WARM_S=240 WARM_JOBS=2 RUN_S=1 OUT=/tmp/c2warmb \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c2warmb.log 2>&1 ) &
T="timeout 250 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
( $T -n 4 -k "gram_mma" > "$OUT/t_gram.log" 2>&1; echo "rc=$?" >> "$OUT/t_gram.log" ) &
( $T -n 4 -k "gdn and not verify and not gram_mma" > "$OUT/t_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_gdn.log" ) &
( $T -n 2 -k "late_check_bit_identical" > "$OUT/t_lc.log" 2>&1; echo "rc=$?" >> "$OUT/t_lc.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_gram t_gdn t_lc; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8; done
OUT=$OUT/gb SETTINGS="$SB" BENCH_ARGS="$EB" REPLAYS=9 RUN_S=100 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gb.log" 2>&1
echo "B $(( $(date +%s) - t0 )) s"; tarball
for g in 1 0; do REPLAYSSM_GDN_GRAM_MMA=$g timeout 60 python tests/gpu_scripts/prof_mamba2_replay.py \
  --layer gdn --pairs nvfp4/fp16sr,fp8/fp32 --batches 1 --modes flush --out $OUT/p$g > $OUT/p$g.log 2>&1; done
echo "C $(( $(date +%s) - t0 )) s"; tarball
if [ $(( $(date +%s) - t0 )) -lt 400 ]; then
  OUT=$OUT/gl SETTINGS="$SB" BENCH_ARGS="$EL" REPLAYS=9 RUN_S=60 WARM_S=90 WARM_JOBS=2 \
    bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gl.log" 2>&1
  echo "B2 $(( $(date +%s) - t0 )) s"; tarball
fi
for g in 1 0; do echo "== prof gram=$g"; grep "^|" $OUT/p$g.log | grep -v "^|---" | cut -c1-200; done
grep -v "^|---" "$OUT/gb/knobs.md" | grep -v standard | cut -c1-110
[ -f "$OUT/gl/knobs.md" ] && grep -v "^|---" "$OUT/gl/knobs.md" | grep -v standard | cut -c1-110
