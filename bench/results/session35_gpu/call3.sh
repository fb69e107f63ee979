#!/usr/bin/env bash
# Session 35, call 3 (run `tools/device_slim.sh out` first, carry .device): landing check.
#  A. tests at the final kernel code: every GDN decode test (gram_mma_default now on for the
#     nvfp4 pairs and the split's flush half; the forced test too) and the Mamba-2
#     bit-identical tests (their helper's pad rows at <= 2 rows: one pad step, 3 flushes).
#  B. default vs REPLAYSSM_GDN_GRAM_MMA=0 where call 2 timed nothing: 4B b512 L16 bf16/fp32
#     (split flush half), nvfp4/fp16sr b32 L16. Prediction: 0.97-1.00x.
#  C. the GDN b1 table against FLA in one run (Qwen3.5-4B b1 L8 / L16, six pairs, peers on).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
EB="sweep --layer gdn --shapes qwen3.5-4b --batches 32,512 --L 16 --pairs nvfp4/fp16sr,bf16/fp32 --no-peers --no-plots"
SB="def:- g0:REPLAYSSM_GDN_GRAM_MMA=0"
EC="sweep --layer gdn --shapes qwen3.5-4b --batches 1 --L 8,16 --pairs fp32,fp16sr,fp8/fp32,bf16/fp32,nvfp4/fp16sr,nvfp4/fp8sr --no-plots"
( timeout 200 python -m bench $EC --warm-only --out /tmp/c3warmc > /tmp/c3warmc.log 2>&1 ) &
( SETTINGS="$SB" BENCH_ARGS="$EB" WARM_S=200 WARM_JOBS=2 RUN_S=1 OUT=/tmp/c3warmb \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c3warmb.log 2>&1 ) &
T="timeout 290 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
( $T -n 6 -k "gdn and not verify" > "$OUT/t_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_gdn.log" ) &
( $T -n 4 -k "mamba2 and bit_identical" > "$OUT/t_m2.log" 2>&1; echo "rc=$?" >> "$OUT/t_m2.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_gdn t_m2; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8; done
OUT=$OUT/gd SETTINGS="$SB" BENCH_ARGS="$EB" REPLAYS=9 RUN_S=80 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gd.log" 2>&1
echo "B $(( $(date +%s) - t0 )) s"; tarball
timeout 120 python -m bench $EC --replays 9 --out "$OUT/b1" > "$OUT/b1.log" 2>&1
echo "C $(( $(date +%s) - t0 )) s"; tarball
grep -v "^|---" "$OUT/gd/knobs.md" | grep -v standard | cut -c1-110
grep "^|" "$OUT/b1/sweep.md" | grep -v "^|---" | cut -c1-150 | head -30
