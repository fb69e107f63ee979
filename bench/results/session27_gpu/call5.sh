#!/usr/bin/env bash
# Session 27, call 5 (the last device minutes): the default row split (k = 2 at 4-7 rows for L <= 8,
# fp32 read copies 4-8 rows at any L; P / 2 a multiple of 16).
#  A. GPU tests at the defaults: the default rule's twin check (3 pairs), the bit-identical A-B of
#     k = 2 against the forced one-CTA launch (REPLAYSSM_M2_ROW_SPLIT=1 now, 11 pairs at P64), the
#     small-batch / CUDA-graph / out-of-range tests.
#  B. off (REPLAYSSM_M2_ROW_SPLIT=1) / default at b1, b4, b6, b8, L8 / L16, both shapes, 4 pairs.
#     Prediction: Super b4-b6 as call 4 (1.07-1.32x at L8; fp32 at L16), b1 / b8 L8 / Nano 1.00x.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c5; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call5.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
T="timeout 140 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
M="sweep --layer mamba2 --batches 1,4,6,8 --L 8,16 --pairs fp32,fp8/fp32,bf16/fp32,nvfp4/fp16sr --no-peers --no-plots"
( $T -k "default_row_split or (row_split_bit_identical and 64-2)" > "$OUT/t_rs.log" 2>&1; echo "rc=$?" >> "$OUT/t_rs.log" ) &
( $T -k "cuda_graph or out_of_range or mamba2_small_batch" > "$OUT/t_def.log" 2>&1; echo "rc=$?" >> "$OUT/t_def.log" ) &
( REPLAYSSM_M2_ROW_SPLIT=1 timeout 130 python -m bench $M --warm-only --out /tmp/w_off > "$OUT/w_off.log" 2>&1 ) &
( timeout 130 python -m bench $M --warm-only --out /tmp/w_new > "$OUT/w_new.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_rs t_def; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
OUT=$OUT/m SETTINGS="off:REPLAYSSM_M2_ROW_SPLIT=1 new:-" BENCH_ARGS="$M" REPLAYS=7 RUN_S=60 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/m.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/m/knobs.md" | grep -v standard | cut -c1-100
