#!/usr/bin/env bash
# Session 38, call 1 (run `tools/device_slim.sh out` first, carry .device): the M2 pair fold on
# by default except for the fp32 shared kernel (read copy fp32 outside a split's flush half);
# v1 flush now on the v2 helpers (_fold_cc, _hi_load, _hi_decode_add).
#  A. tests at the default: the Mamba-2 decode twin checks (every pair), the pair-fold bit-identical
#     checks, the v1 flush (new test), the 256-thread launches; the Mamba-2 row-order / split tests;
#     every Mamba-2 verify spec test.
#  B. def / off (REPLAYSSM_M2_FOLD_PAIR=0): cells the new default changes and session 37 did not
#     time. CPU (ptxas, shared decode build at 4 heads per CTA): nvfp4/fp16sr 0 -> 92 B spills,
#     nvfp4/fp32 0 -> 52, fp8/fp16sr 28 -> 0, bf16/fp32 16 -> 16, bf16sr 76 -> 56.
#     Prediction: b256 / b512 split pairs (nvfp4/*, fp8/*: flush half only) 0.97-0.99x; the
#     shared kernel at b1-b16 (nvfp4: spills) 0.98-1.03x, unclear; bf16/fp32, bf16sr 0.97-0.99x;
#     Nano-4B (NIT 5: two pairs + one) 0.97-0.99x; Super L32 fp32 (split flush half) 0.97-0.99x.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
SB="def:- off:REPLAYSSM_M2_FOLD_PAIR=0"
EM="sweep --layer mamba2 --shapes nemotron3-super --batches 1,4,16,256 --L 16 --pairs nvfp4/fp16sr,nvfp4/fp32,fp8/fp16sr,bf16/fp32,fp16sr,bf16sr --no-peers --no-plots --warm-jobs 3"
EN="sweep --layer mamba2 --shapes nemotron3-nano-4b --batches 256,512 --L 16 --pairs nvfp4/fp16sr,fp16sr --phases --no-peers --no-plots"
EW="sweep --layer mamba2 --shapes nemotron3-super --batches 256 --L 32 --pairs fp32,nvfp4/fp16sr --phases --no-peers --no-plots"
EV="spec --layer mamba2 --shapes nemotron3-super --pairs fp8/fp16sr,bf16/fp32 --batches 256 --T 8 --L 16 --no-plots"
for n in m n w v; do
  eval "B=\$E$(echo $n | tr a-z A-Z)"
  ( SETTINGS="$SB" BENCH_ARGS="$B" WARM_S=280 WARM_JOBS=2 RUN_S=1 OUT=/tmp/c1warm$n \
    bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c1warm$n.log 2>&1 ) &
done
T="timeout 360 python -m pytest -q -rs -p no:cacheprovider"
( $T -n 4 tests/test_gpu_ops.py -k "fold_pair_bit_identical or flush_v1 or (mamba2 and replay_step_matches_torch_reference) or mamba2_decode_at_256_threads" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( $T -n 3 tests/test_gpu_row_order.py -k "mamba2" > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
( $T -n 4 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_ops t_order t_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8; done
for n in m n w v; do
  eval "B=\$E$(echo $n | tr a-z A-Z)"
  OUT=$OUT/g$n SETTINGS="$SB" BENCH_ARGS="$B" REPLAYS=9 RUN_S=60 \
    bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g$n.log" 2>&1
  echo "g$n $(( $(date +%s) - t0 )) s"; tarball
done
for n in m n w v; do grep -v "^|---" "$OUT/g$n/knobs.md" | grep -v "standard bf16\|snapshot bf16" | cut -c1-120; done
