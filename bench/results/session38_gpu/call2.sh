#!/usr/bin/env bash
# Session 38, call 2 (run `tools/device_slim.sh out` first, carry .device): the pair-fold default
# refined after call 1 -- off for 16-bit read copies over an fp32 checkpoint below 4 heads per CTA
# (b4 1.055x, b16 1.02x slower there) and in the verify for fp8 read copies (T8 1.074x slower).
#  A. the tests of call 1 at this code, beside the warm compiles.
#  B. def / off (REPLAYSSM_M2_FOLD_PAIR=0): pairs call 1 did not time (b4 / b16 / b256), bf16/fp32
#     and fp16/fp32 at b4 / b16 (now the off build: 1.00x expected), the b512 headline cells with
#     phases, verify T4 / T8 b256 of fp8/fp16sr (now off: 1.00x), nvfp4/fp32, fp16sr, bf16sr.
#     Prediction: new pairs 0.90-0.98x (call 1's b4-b256 cells of the same read formats), b512
#     nvfp4/fp16sr 0.97-0.98x, fp32 1.00x; verify nvfp4/fp32 / fp16sr 0.95-0.98x.
#  C. batch 1, Super L8 / L16, every pair with the peers (mamba_ssm SSU, our standard decode).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
SB="def:- off:REPLAYSSM_M2_FOLD_PAIR=0"
EM="sweep --layer mamba2 --shapes nemotron3-super --batches 4,16,256 --L 16 --pairs bf16/fp32,fp16/fp32,nvfp4/fp8sr,fp8sr,nvfp4sr,fp8rn,nvfp4rn,fp16rn --no-peers --no-plots --warm-jobs 3"
EH="sweep --layer mamba2 --shapes nemotron3-super --batches 512 --L 16 --pairs fp32,nvfp4/fp16sr --phases --no-peers --no-plots"
EV="spec --layer mamba2 --shapes nemotron3-super --pairs fp8/fp16sr,nvfp4/fp32,fp16sr,bf16sr --batches 256 --T 4,8 --L 16 --no-plots"
B1="sweep --layer mamba2 --shapes nemotron3-super --batches 1 --L 8,16 --pairs fp32,nvfp4/fp16sr,nvfp4/fp8sr,nvfp4/fp32,fp8/fp16sr,fp8/fp32,fp16/fp32,bf16/fp32,fp16sr,bf16sr,fp8sr,nvfp4sr,fp8rn,nvfp4rn,fp16rn --no-plots"
( timeout 300 python -m bench $B1 --warm-only --warm-jobs 3 --out /tmp/c2warmb1 > /tmp/c2warmb1.log 2>&1 ) &
for n in m h v; do
  eval "B=\$E$(echo $n | tr a-z A-Z)"
  ( SETTINGS="$SB" BENCH_ARGS="$B" WARM_S=280 WARM_JOBS=2 RUN_S=1 OUT=/tmp/c2warm$n \
    bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c2warm$n.log 2>&1 ) &
done
T="timeout 360 python -m pytest -q -rs -p no:cacheprovider"
( $T -n 4 tests/test_gpu_ops.py -k "fold_pair_bit_identical or flush_v1 or (mamba2 and replay_step_matches_torch_reference) or mamba2_decode_at_256_threads" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( $T -n 3 tests/test_gpu_row_order.py -k "mamba2" > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
( $T -n 4 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_ops t_order t_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8; done
for n in m h v; do
  eval "B=\$E$(echo $n | tr a-z A-Z)"
  OUT=$OUT/g$n SETTINGS="$SB" BENCH_ARGS="$B" REPLAYS=9 RUN_S=60 \
    bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g$n.log" 2>&1
  echo "g$n $(( $(date +%s) - t0 )) s"; tarball
done
timeout 100 python -m bench $B1 --replays 9 --out "$OUT/b1" > "$OUT/b1.log" 2>&1
echo "b1 $(( $(date +%s) - t0 )) s"; tarball
for n in m h v; do grep -v "^|---" "$OUT/g$n/knobs.md" | grep -v "standard bf16\|snapshot bf16" | cut -c1-120; done
grep -E "^\| (nemotron|mamba|layer|shape)" "$OUT/b1/sweep.md" | cut -c1-140
