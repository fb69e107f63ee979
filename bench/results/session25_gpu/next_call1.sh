#!/usr/bin/env bash
# First device call of the next session (written in session 26, at 465cae4; not run yet).
# Run `tools/device_slim.sh out` first, carry .device; `tools/device_slim.sh in` after.
#  A. GPU tests at the defaults (the fenceless Mamba-2 arrive was GPU-run only for the six
#     fp32-recurrence pairs' twin steps and the graph test): test_gpu_ops replay / graph /
#     slot / split / half-block selection in three processes, and the 9 verify-variant spec
#     tests session 26's call 6 did not reach.
#  B. A-B REPLAYSSM_M2_DEP_ARRIVE=0 vs default at b1 / b2 / b4 / b8 / b16, L8 / L16, both
#     shapes, 4 pairs (session 26 timed b1 L16 on the Super shape only: 1.03-1.05x).
#     Prediction: b1-b4 1.02-1.06x, b8 / b16 (small split at L <= 8 / 16: ordered) 1.00x.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/next_call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
T="timeout 300 python -m pytest -q -rs -p no:cacheprovider"
M="sweep --layer mamba2 --batches 1,2,4,8,16 --L 8,16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots --deadline 90"
( $T tests/test_gpu_ops.py -k "(replay_step and mamba2) or cuda_graph or out_of_range" > "$OUT/t_m2.log" 2>&1; echo "rc=$?" >> "$OUT/t_m2.log" ) &
( $T tests/test_gpu_ops.py -k "(replay_step and gdn) or exact_recurrence or small_batch or half_block" > "$OUT/t_rest.log" 2>&1; echo "rc=$?" >> "$OUT/t_rest.log" ) &
( $T tests/test_gpu_spec.py -k "verify_tail or l32 or p80 or drafts_buffer or fold_round" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( REPLAYSSM_M2_DEP_ARRIVE=0 timeout 250 python -m bench ${M% --deadline*} --warm-only --out /tmp/w0 > "$OUT/w0.log" 2>&1 ) &
( timeout 250 python -m bench ${M% --deadline*} --warm-only --out /tmp/w1 > "$OUT/w1.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_m2 t_rest t_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
OUT=$OUT/m SETTINGS="off:REPLAYSSM_M2_DEP_ARRIVE=0 new:-" BENCH_ARGS="$M" REPLAYS=7 RUN_S=100 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/m.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/m/knobs.md" | cut -c1-100
