#!/usr/bin/env bash
# Session 37, call 1 (run `tools/device_slim.sh out` first, carry .device): the Mamba-2 v2
# flush's pair fold (REPLAYSSM_M2_FOLD_PAIR=1: two of a thread's chunks share B_j, so one
# 16-value B_j load feeds 32 FMAs; with nvfp4 targets every encode after the matrix amax).
#  A. tests, pair forced: bit-identical to the one-chunk fold (small split L4 / L16, shared
#     kernel, P = 80's odd chunk count; 4 pairs); the Mamba-2 row-order / split tests and the
#     Mamba-2 verify spec tests of the nvfp4 pairs with REPLAYSSM_M2_FOLD_PAIR=1 for the whole run.
#     Default builds: PTX md5 equal to session 36's (CPU).
#  B. def / pair / pair with fold unroll 1 (CPU: split flush half 94 regs 0 spills / 96 regs
#     36-40 B / 96 regs 20 B; the shared fp32 kernel 0 / 48 B at 72 regs), Nemotron-3-Super L16
#     b256 / b512, nvfp4/fp16sr, nvfp4/fp8sr, fp32, --phases. Prediction (the fold ~30 % of the
#     nvfp4 flush, shared-load-bound; B_j loads halved): nvfp4 flush only 0.85-0.92x, mixed
#     0.95-0.98x; fp32 (shared kernel, spills) flat or slower.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
SB="def:- pair:REPLAYSSM_M2_FOLD_PAIR=1 pairu1:REPLAYSSM_M2_FOLD_PAIR=1,REPLAYSSM_M2_FOLD_UNROLL=1"
EM="sweep --layer mamba2 --shapes nemotron3-super --batches 256,512 --L 16 --pairs nvfp4/fp16sr,nvfp4/fp8sr,fp32 --phases --no-peers --no-plots"
( SETTINGS="$SB" BENCH_ARGS="$EM" WARM_S=270 WARM_JOBS=3 RUN_S=1 OUT=/tmp/c1warm \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c1warm.log 2>&1 ) &
T="timeout 270 python -m pytest -q -rs -p no:cacheprovider"
( $T -n 4 tests/test_gpu_ops.py -k "fold_pair_bit_identical" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( REPLAYSSM_M2_FOLD_PAIR=1 $T -n 4 tests/test_gpu_row_order.py -k "mamba2" > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
( REPLAYSSM_M2_FOLD_PAIR=1 $T -n 2 tests/test_gpu_spec.py -k "mamba2 and nvfp4" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_ops t_order t_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8; done
OUT=$OUT/gm SETTINGS="$SB" BENCH_ARGS="$EM" REPLAYS=9 RUN_S=90 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gm.log" 2>&1
echo "gm $(( $(date +%s) - t0 )) s"; tarball
grep -v "^|---" "$OUT/gm/knobs.md" | grep -v "standard" | cut -c1-120
