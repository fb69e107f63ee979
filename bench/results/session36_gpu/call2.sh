#!/usr/bin/env bash
# Session 36, call 2 (run `tools/device_slim.sh out` first, carry .device).
#  A. tests of the fp16 SR chunk check (lowprec.pack_f16_sr: a chunk of 16 values all in the fp16
#     normal range rounds by bits + (w & 0x1FFF), cvt.rz; else round_f16_sr per element):
#     check_state_codec.py (the init encoder, now on it, bit-exact on special inputs), the new
#     bit-identical tests (chunk 0 vs default, wide-magnitude states), the reference twin checks
#     of every pair, the spec tests of the fp16 SR pairs (the Mamba-2 verify flush takes it).
#  B. default vs REPLAYSSM_F16_SR_CHUNK=0. Predictions (call 1's ncu: the M2 nvfp4/fp16sr flush
#     half issues 0.61 per scheduler cycle, 97 instructions per element; the CPU SASS of the new
#     build: 336 instead of 557 per 16-element chunk for the fp16 SR encode, -14 % of the flush):
#     M2 Super L16 flush-only nvfp4/fp16sr / fp16sr b256 0.86-0.90x, mixed b256 / b512
#     0.94-0.98x; M2 verify T8 b256 nvfp4/fp16sr 0.93-0.97x; GDN 4B b512 L16 nvfp4/fp16sr
#     0.97-0.99x, b1 0.98-1.00x (encode hi 2.15 of an 11.5 us flush).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
SB="def:- c0:REPLAYSSM_F16_SR_CHUNK=0"
EM="sweep --layer mamba2 --shapes nemotron3-super --batches 256,512 --L 16 --pairs nvfp4/fp16sr,fp16sr --phases --no-peers --no-plots"
EG="sweep --layer gdn --shapes qwen3.5-4b --batches 1,512 --L 8,16 --pairs nvfp4/fp16sr,fp16sr --no-peers --no-plots"
EV="spec --layer mamba2 --shapes nemotron3-super --pairs nvfp4/fp16sr --batches 256 --T 8 --L 16 --no-plots"
for n in m g v; do
  eval "B=\$E$(echo $n | tr a-z A-Z)"
  ( SETTINGS="$SB" BENCH_ARGS="$B" WARM_S=280 WARM_JOBS=2 RUN_S=1 OUT=/tmp/c2warm$n \
    bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c2warm$n.log 2>&1 ) &
done
T="timeout 300 python -m pytest -q -rs -p no:cacheprovider"
( $T -n 4 tests/test_gpu_ops.py -k "f16_sr_chunk or replay_step_matches_torch_reference" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( $T -n 2 tests/test_gpu_spec.py -k "fp16sr" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 300 python tests/gpu_scripts/check_state_codec.py > "$OUT/t_codec.log" 2>&1; echo "rc=$?" >> "$OUT/t_codec.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_ops t_spec t_codec; do echo "== $f: $(grep -E "passed|failed|ok|FAIL" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR|mismatch" "$OUT/$f.log" | head -8; done
for n in m g v; do
  eval "B=\$E$(echo $n | tr a-z A-Z)"
  OUT=$OUT/g$n SETTINGS="$SB" BENCH_ARGS="$B" REPLAYS=9 RUN_S=100 \
    bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g$n.log" 2>&1
  echo "g$n $(( $(date +%s) - t0 )) s"; tarball
done
for n in m g v; do grep -v "^|---" "$OUT/g$n/knobs.md" | grep -v "standard\|snapshot\|FLA" | cut -c1-120; done
