#!/usr/bin/env bash
# Session 38, call 5 (run `tools/device_slim.sh out` first, carry .device): the final kernel code --
# call 4's defaults, but the fp32 L16 split only where a group's heads are a multiple of 8
# (Super; Nano-4B's 12 heads a group: 6 per non-flush CTA, 1.014-1.018x slower split in call 4).
#  A. the tests of call 4 at this code.
#  B. fp32 def / nosplit (REPLAYSSM_M2_SPLIT=0): Super / Nano-4B b256 / b512 L16. Prediction:
#     Super 0.97-0.98x (call 4), Nano-4B 1.00x (the same build both ways now).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c5; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call5.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
S1="def:- nosplit:REPLAYSSM_M2_SPLIT=0"
E1="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 256,512 --L 16 --pairs fp32 --no-peers --no-plots"
for n in 1; do
  eval "B=\$E$n; S=\$S$n"
  ( SETTINGS="$S" BENCH_ARGS="$B" WARM_S=250 WARM_JOBS=3 RUN_S=1 OUT=/tmp/c5warm$n \
    bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c5warm$n.log 2>&1 ) &
done
T="timeout 300 python -m pytest -q -rs -p no:cacheprovider"
( $T -n 4 tests/test_gpu_ops.py -k "fold_pair_bit_identical or flush_v1 or (mamba2 and replay_step_matches_torch_reference) or mamba2_decode_at_256_threads" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( $T -n 4 tests/test_gpu_row_order.py -k "mamba2" > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
( $T -n 4 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_ops t_order t_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8; done
for n in 1; do
  eval "B=\$E$n; S=\$S$n"
  OUT=$OUT/g$n SETTINGS="$S" BENCH_ARGS="$B" REPLAYS=9 RUN_S=70 \
    bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g$n.log" 2>&1
  echo "g$n $(( $(date +%s) - t0 )) s"; tarball
done
for n in 1; do grep -v "^|---" "$OUT/g$n/knobs.md" | grep -v "standard bf16" | cut -c1-130; done
