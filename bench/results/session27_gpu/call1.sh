#!/usr/bin/env bash
# Session 27, call 1 (written in session 26 as session25_gpu/next_call1.sh; run at 99f7960).
# Run `tools/device_slim.sh out` first, carry .device; `tools/device_slim.sh in` after.
#  A. GPU tests at the defaults (the fenceless Mamba-2 arrive was GPU-run only for the six
#     fp32-recurrence pairs' twin steps and the graph test): test_gpu_ops replay / graph /
#     slot / split / half-block selection in three processes, and the 9 verify-variant spec
#     tests session 26's call 6 did not reach.
#     Also the 256-thread decode (REPLAYSSM_M2_THREADS=256, written in session 26, never run):
#     test_mamba2_decode_at_256_threads (6 pairs x P 64 / 80).
#  B. One grid, three settings, b1 / b2 / b4 / b8, L8 / L16, both shapes, 4 pairs:
#     fence = REPLAYSSM_M2_DEP_ARRIVE=0, new = the defaults, t256 = REPLAYSSM_M2_THREADS=256.
#     Predictions: new vs fence b1-b4 1.02-1.06x (session 26 timed b1 L16 Super only:
#     1.03-1.05x), b8 where ordered / split 1.00x; t256 vs new: the b1 flush step (10-15 us,
#     4 flush chunks per thread -> 2 at P = 64) ~0.6x, so b1 -0.3..0.6 us per step at L8 / L16;
#     non-flush steps +-0.1 us (the same read per CTA over twice the warps).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/next_call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
T="timeout 300 python -m pytest -q -rs -p no:cacheprovider"
M="sweep --layer mamba2 --batches 1,2,4,8 --L 8,16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots --deadline 90"
( $T tests/test_gpu_ops.py -k "(replay_step and mamba2) or cuda_graph or out_of_range or 256_threads" > "$OUT/t_m2.log" 2>&1; echo "rc=$?" >> "$OUT/t_m2.log" ) &
( $T tests/test_gpu_ops.py -k "(replay_step and gdn) or exact_recurrence or small_batch or half_block" > "$OUT/t_rest.log" 2>&1; echo "rc=$?" >> "$OUT/t_rest.log" ) &
( $T tests/test_gpu_spec.py -k "verify_tail or l32 or p80 or drafts_buffer or fold_round" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( REPLAYSSM_M2_DEP_ARRIVE=0 timeout 250 python -m bench ${M% --deadline*} --warm-only --out /tmp/w0 > "$OUT/w0.log" 2>&1 ) &
( timeout 250 python -m bench ${M% --deadline*} --warm-only --out /tmp/w1 > "$OUT/w1.log" 2>&1 ) &
( REPLAYSSM_M2_THREADS=256 timeout 250 python -m bench ${M% --deadline*} --warm-only --out /tmp/w2 > "$OUT/w2.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_m2 t_rest t_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
OUT=$OUT/m SETTINGS="fence:REPLAYSSM_M2_DEP_ARRIVE=0 new:- t256:REPLAYSSM_M2_THREADS=256" BENCH_ARGS="$M" REPLAYS=7 RUN_S=80 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/m.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/m/knobs.md" | cut -c1-100
