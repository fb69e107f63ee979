#!/usr/bin/env bash
# Session 39, call 2 (run `tools/device_slim.sh out` first, carry .device): the s38 patches applied
# (call 1: Super non-flush half 0.83-0.89x, but b64 mixed 1.05-1.11x slower: its 8-head build now
# fits 4 CTAs / SM and leaves no room for a flush CTA) + the non-flush cap (split_nonflush_cap:
# smem padded to 3 CTAs below SPLIT_NFCAP_BELOW = 256 rows).
#  A. the GPU tests of the final-code set (with the new cap test) at this code.
#  B. nocap / cap (REPLAYSSM_M2_SPLIT_NFCAP=0 / 1) on Super and Nano-4B, nvfp4/{fp16sr,fp8sr,fp32}:
#     L16 b32-b512, L8 and L32 b32-b256. Prediction: b64 / b128 cap 0.90-0.97x (Super b64 back to
#     call 1's base ~62-64 us; Nano-4B, whose flush CTA never fitted, gains too); b256 / b512 cap
#     1.02-1.05x slower (the non-flush half at 3 CTAs all along).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
S="nocap:REPLAYSSM_M2_SPLIT_NFCAP=0 cap:REPLAYSSM_M2_SPLIT_NFCAP=1"
P="--pairs nvfp4/fp16sr,nvfp4/fp8sr,nvfp4/fp32 --no-peers --no-plots --warm-jobs 2"
E1="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 32,64,128,256,512 --L 16 $P"
E2="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 32,64,128,256 --L 8 $P"
E3="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 32,64,128,256 --L 32 $P"
for n in 1 2 3; do
  eval "B=\$E$n"
  ( SETTINGS="$S" BENCH_ARGS="$B" WARM_S=300 WARM_JOBS=2 RUN_S=1 OUT=/tmp/c2warm$n \
    bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c2warm$n.log 2>&1 ) &
done
T="timeout 330 python -m pytest -q -rs -p no:cacheprovider"
( $T -n 4 tests/test_gpu_ops.py -k "fold_pair_bit_identical or flush_v1 or (mamba2 and replay_step_matches_torch_reference) or mamba2_decode_at_256_threads" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( $T -n 4 tests/test_gpu_row_order.py -k "mamba2" > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
( $T -n 3 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_ops t_order t_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8; done
for n in 1 2 3; do
  eval "B=\$E$n"
  OUT=$OUT/g$n SETTINGS="$S" BENCH_ARGS="$B" REPLAYS=9 RUN_S=80 \
    bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g$n.log" 2>&1
  echo "g$n $(( $(date +%s) - t0 )) s"; tarball
done
for n in 1 2 3; do grep -v "^|---" "$OUT/g$n/knobs.md" | grep -v "standard" | cut -c1-130; done
