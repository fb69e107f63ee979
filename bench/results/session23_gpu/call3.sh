#!/usr/bin/env bash
# Session 23 call 3: GDN split pairs (fp8 / bf16 read copies, fp32 checkpoint) at small batches,
# 64 value rows per CTA (REPLAYSSM_GDN_BLOCK_V=64: a flushing head's fold, u recompute and
# encode split over two CTAs) vs the default 128.
#  A. GPU test: the split pairs at 64 rows, b8, L8 / 16 (test_gpu_ops -k split_pair_half_block).
#  B. Qwen3.5-4B b1 / 8 and Qwen3.5-122B b1 / 4 (<= 256 (row, value head) pairs), L8 / 16,
#     fp8/fp32, bf16/fp32, fp8sr, bf16sr. Prediction: 5-12 % faster where a step's flush CTA
#     sets the time (session 22 call 3: 4B b8 L16 fp8/fp32 15.8 -> 14.0, bf16/fp32 17.3 -> 15.6;
#     the call 1 profile: fp8/fp32 flush CTA 28 µs vs fp32 14), within +-3 % at b1.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
( timeout 200 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "split_pair_half_block" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
G4="sweep --layer gdn --shapes qwen3.5-4b --batches 1,8 --L 8,16 --pairs fp8/fp32,bf16/fp32,fp8sr,bf16sr,fp32 --no-peers --no-plots"
G122="sweep --layer gdn --shapes qwen3.5-122b --batches 1,4 --L 8,16 --pairs fp8/fp32,bf16/fp32,fp8sr,bf16sr --no-peers --no-plots"
( timeout 200 python -m bench $G4 --warm-only --out /tmp/w1 > "$OUT/w1.log" 2>&1 ) &
( REPLAYSSM_GDN_BLOCK_V=64 timeout 200 python -m bench $G4 --warm-only --out /tmp/w2 > "$OUT/w2.log" 2>&1 ) &
( timeout 200 python -m bench $G122 --warm-only --out /tmp/w3 > "$OUT/w3.log" 2>&1 ) &
( REPLAYSSM_GDN_BLOCK_V=64 timeout 200 python -m bench $G122 --warm-only --out /tmp/w4 > "$OUT/w4.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
echo "== t_ops"; grep -E "passed|failed|rc=|FAILED" "$OUT/t_ops.log" | tail -4
OUT=$OUT/g4 SETTINGS="d:- v64:REPLAYSSM_GDN_BLOCK_V=64" BENCH_ARGS="$G4" \
  REPLAYS=7 RUN_S=70 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g4.log" 2>&1
tarball
OUT=$OUT/g122 SETTINGS="d:- v64:REPLAYSSM_GDN_BLOCK_V=64" BENCH_ARGS="$G122" \
  REPLAYS=7 RUN_S=60 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g122.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard\|fla" "$OUT/g4/knobs.md" | cut -c1-160
grep -v "standard\|fla" "$OUT/g122/knobs.md" | cut -c1-160
