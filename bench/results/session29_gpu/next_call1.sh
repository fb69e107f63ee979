#!/usr/bin/env bash
# First device call of the next session (written in session 29; not run yet).
# Run `tools/device_slim.sh out` first, carry .device; `tools/device_slim.sh in` after.
#  A. the GPU test session 29 wrote after its device time was spent:
#     test_mamba2_decode_few_rows_hint_bit_identical (the fp8 / nvfp4 few-rows hint 4 against
#     the default hint, b1 / b2, 4 pairs), beside the early-wide / ring_phys tests and the
#     decode's reference tests at the final tree.
#  B. the batch-1 / batch-2 table at the final tree, every Mamba-2 pair (default builds only).
#  C. the Super b4 L16 16-bit cell, rp0 / rp1, twice each (session 29 found rp0 bimodal).
#  D. the row split's 16-bit builds (Super b4-b6 L8) take the early-wide hint 4 since session 28
#     (the kernel's own early rule: a 16-register read set); the default 7 against it.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/next_call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
T="timeout 240 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
( $T -k "few_rows_hint or early_wide_read or ring_phys" > "$OUT/t_new.log" 2>&1; echo "rc=$?" >> "$OUT/t_new.log" ) &
( $T -k "test_replay_step_matches_torch_reference and mamba2" > "$OUT/t_ref.log" 2>&1; echo "rc=$?" >> "$OUT/t_ref.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_new t_ref; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
E="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 1,2 --L 8,16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32,fp16/fp32,fp16sr,bf16sr --no-peers --no-plots"
OUT=$OUT/b1 SETTINGS="def:-" BENCH_ARGS="$E" REPLAYS=9 RUN_S=120 WARM_S=150 WARM_JOBS=1 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/b1.log" 2>&1
tarball
E="sweep --layer mamba2 --shapes nemotron3-super --batches 4 --L 16 --pairs bf16/fp32,fp16sr --no-peers --no-plots"
OUT=$OUT/b4 SETTINGS="rp0a:REPLAYSSM_M2_RING_PHYS=0 rp1a:REPLAYSSM_M2_RING_PHYS=1 rp0b:REPLAYSSM_M2_RING_PHYS=0 rp1b:REPLAYSSM_M2_RING_PHYS=1" \
  BENCH_ARGS="$E" REPLAYS=15 RUN_S=60 WARM_S=90 WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/b4.log" 2>&1
tarball
E="sweep --layer mamba2 --shapes nemotron3-super --batches 4,5,6 --L 8 --pairs bf16/fp32,fp16sr,bf16sr --no-peers --no-plots"
OUT=$OUT/rs SETTINGS="def:- mb7:REPLAYSSM_M2_MINBLOCKS=7" BENCH_ARGS="$E" REPLAYS=9 RUN_S=60 WARM_S=90 \
  WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/rs.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/b1/knobs.md" | grep -v standard | cut -c1-110
grep -v "^|---" "$OUT/b4/knobs.md" | grep -v standard | cut -c1-110
grep -v "^|---" "$OUT/rs/knobs.md" | grep -v standard | cut -c1-110
