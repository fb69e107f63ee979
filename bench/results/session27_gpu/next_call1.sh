#!/usr/bin/env bash
# First device call of the next session (written in session 27 at its final tree; not run yet).
# Run `tools/device_slim.sh out` first, carry .device; `tools/device_slim.sh in` after.
#  A. The GPU tests session 27 did not reach, alone on the machine: test_gpu_spec.py's
#     verify-variant tests (cut by the time limit in sessions 26 and 27, no failure so far) and
#     the host-side row-split checks landed after session 27's last call (8ba42ce: profiling
#     builds keep one CTA per head; the split needs heads_per_cta = 1) through the Mamba-2
#     twin / graph tests at the defaults.
#  B. Re-time the default row split (off / default, Nemotron-3-Super b4 / b6, L8 / L16) as a
#     drift check before changing pf_early's x_buf span under the split (docs/NOTES.md).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/next_call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
( timeout 420 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_spec.py -k "verify_tail or l32 or p80 or drafts_buffer or fold_round" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "(replay_step and mamba2) or cuda_graph or default_row_split" > "$OUT/t_m2.log" 2>&1; echo "rc=$?" >> "$OUT/t_m2.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_spec t_m2; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
M="sweep --layer mamba2 --shapes nemotron3-super --batches 4,6 --L 8,16 --pairs fp32,fp8/fp32,bf16/fp32 --no-peers --no-plots"
OUT=$OUT/m SETTINGS="off:REPLAYSSM_M2_ROW_SPLIT=1 new:-" BENCH_ARGS="$M" REPLAYS=7 RUN_S=60 WARM_S=90 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/m.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/m/knobs.md" | grep -v standard | cut -c1-100
