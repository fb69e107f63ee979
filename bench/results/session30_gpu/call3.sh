#!/usr/bin/env bash
# Session 30, call 3 (run `tools/device_slim.sh out` first, carry .device).
#  A. tests of the two rules adopted from calls 1-2: the GDN nvfp4 full register cap at <= 1 CTA
#     per SM (new test + the GDN reference tests, whose nvfp4 cases now take it) and the Mamba-2
#     row split's 16-bit builds back at hint 7 (row-split reference / bit-identical tests).
#  B. the new defaults against the old ones in one run: GDN nvfp4 b1 / b2 default vs MINB=2;
#     Mamba-2 Super b4-b7 L8 row split default vs MINBLOCKS=4.
#  C. exploration: GDN b1 / b2 non-nvfp4 pairs at whole-head CTAs (REPLAYSSM_GDN_BLOCK_V=128)
#     and at 32 rows against the default (64 rows at b1 / b2), FLA in the run. Prediction: the
#     split pairs' b1 step is set by a ~14 us flush CTA whose Gram / solve repeat per CTA and
#     whose P dots / fold / encodes scale with the rows: 32 rows shortens it (~-3 us a flush,
#     ~-0.3 us a step at L8) if the non-flush steps do not lose more; 128 rows the opposite.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
T="timeout 200 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
( $T -k "few_ctas_full_register_cap or (test_replay_step_matches_torch_reference and gdn)" > "$OUT/t_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_gdn.log" ) &
( $T -k "default_row_split or row_split_bit_identical or early_wide_read" > "$OUT/t_rs.log" 2>&1; echo "rc=$?" >> "$OUT/t_rs.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_gdn t_rs; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
E="sweep --layer gdn --shapes qwen3.5-4b,qwen3.5-122b --batches 1,2 --L 8,16 --pairs nvfp4/fp16sr,nvfp4/fp8sr --no-peers --no-plots"
OUT=$OUT/gn SETTINGS="def:- mb2:REPLAYSSM_GDN_REPLAY_MINB=2" BENCH_ARGS="$E" REPLAYS=9 RUN_S=60 \
  WARM_S=120 WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gn.log" 2>&1
tarball
E="sweep --layer mamba2 --shapes nemotron3-super --batches 4,5,6,7 --L 8 --pairs bf16/fp32,fp16/fp32,fp16sr,bf16sr --no-peers --no-plots"
OUT=$OUT/rs SETTINGS="def:- mb4:REPLAYSSM_M2_MINBLOCKS=4" BENCH_ARGS="$E" REPLAYS=9 RUN_S=60 \
  WARM_S=90 WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/rs.log" 2>&1
tarball
E="sweep --layer gdn --shapes qwen3.5-4b,qwen3.5-122b --batches 1,2 --L 8,16 --pairs fp32,fp8/fp32,bf16/fp32,fp16sr --no-plots"
OUT=$OUT/bv SETTINGS="def:- bv128:REPLAYSSM_GDN_BLOCK_V=128 bv32:REPLAYSSM_GDN_BLOCK_V=32" BENCH_ARGS="$E" \
  REPLAYS=9 RUN_S=100 WARM_S=150 WARM_JOBS=3 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/bv.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/gn/knobs.md" | cut -c1-110
grep -v "^|---" "$OUT/rs/knobs.md" | grep -v standard | cut -c1-110
grep -v "^|---" "$OUT/bv/knobs.md" | cut -c1-110
