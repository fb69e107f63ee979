#!/usr/bin/env bash
# Session 38, call 4 (run `tools/device_slim.sh out` first, carry .device): call 3's wins as
# defaults -- fp32 read copies split from L16 at >= 256 rows (SPLIT_WIDE_MIN_L["fp32"] = 16) and
# the split flush half's hint by pair (SPLIT_FLUSH_MINB: fp32 5, nvfp4/fp16sr 4; the builds are
# call 3's env-forced ones by PTX md5).
#  A. tests at this code: the Mamba-2 row-order / split tests (a new default-split case: fp32 L16
#     b256), the decode twin / pair-fold / v1 / 256-thread tests, the Mamba-2 verify spec tests.
#  B. fp32 def / m7 (flush-half hint 7 as before) / nosplit (REPLAYSSM_M2_SPLIT=0, the old b256
#     launch): Super b16 (small split) / b256 / b512 L16, Nano-4B b256 / b512 L16. Prediction:
#     Super b256 / b512 0.97-0.98x nosplit (call 3), b16 0.99-1.0x m7, Nano-4B 0.97-1.0x.
#     nvfp4/fp16sr def / m5 (hint 5 as before): Super b16 / b32 / b64 / b128 / b512, Nano-4B b256
#     L16, Super b8 L8. Prediction 0.99x at b >= 128, unclear below (fewer flush CTAs per SM).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c4; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call4.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
S1="def:- m7:REPLAYSSM_M2_SPLIT_MINB2=7 nosplit:REPLAYSSM_M2_SPLIT=0"
E1="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 16,256,512 --L 16 --pairs fp32 --phases --no-peers --no-plots"
S2="def:- m5:REPLAYSSM_M2_SPLIT_MINB2=5"
E2="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 16,32,64,128,256,512 --L 16 --pairs nvfp4/fp16sr --no-peers --no-plots"
S3="def:- m5:REPLAYSSM_M2_SPLIT_MINB2=5"
E3="sweep --layer mamba2 --shapes nemotron3-super --batches 8 --L 8 --pairs nvfp4/fp16sr,fp32 --no-peers --no-plots"
for n in 1 2 3; do
  eval "B=\$E$n; S=\$S$n"
  ( SETTINGS="$S" BENCH_ARGS="$B" WARM_S=250 WARM_JOBS=3 RUN_S=1 OUT=/tmp/c4warm$n \
    bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c4warm$n.log 2>&1 ) &
done
T="timeout 330 python -m pytest -q -rs -p no:cacheprovider"
( $T -n 4 tests/test_gpu_ops.py -k "fold_pair_bit_identical or flush_v1 or (mamba2 and replay_step_matches_torch_reference) or mamba2_decode_at_256_threads" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( $T -n 4 tests/test_gpu_row_order.py -k "mamba2" > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
( $T -n 3 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_ops t_order t_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8; done
for n in 1 2 3; do
  eval "B=\$E$n; S=\$S$n"
  OUT=$OUT/g$n SETTINGS="$S" BENCH_ARGS="$B" REPLAYS=9 RUN_S=70 \
    bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g$n.log" 2>&1
  echo "g$n $(( $(date +%s) - t0 )) s"; tarball
done
for n in 1 2 3; do grep -v "^|---" "$OUT/g$n/knobs.md" | grep -v "standard bf16" | cut -c1-130; done
