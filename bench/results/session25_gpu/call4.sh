#!/usr/bin/env bash
# Session 26, call 4: Mamba-2 cursors loaded at the slot hinted before the PDL wait
# (REPLAYSSM_M2_SPEC_CURSORS, default on with pf_early and state_batch_indices).
#  A. GPU tests: test_mamba2_spec_cursors (off, and every hint skewed: the reload path), the
#     Mamba-2 twin steps (spec on by default), CUDA graphs, out-of-range slots -- two processes.
#  B. A-B spec off / on, b1 / b2 / b4 / b8, L8 / L16, both shapes, 4 pairs (standard kernels =
#     drift control). Prediction (call 3 profile: slot+cursors 1.05-1.16 us of a 3.1-4.1 us
#     non-flush CTA, two dependent L2 round trips): b1 0.3-0.5 us faster per step, b8 <= 0.3.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c4; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call4.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
T="timeout 250 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
M="sweep --layer mamba2 --batches 1,2,4,8 --L 8,16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots --deadline 70"
( $T -k "spec_cursors or (replay_step and mamba2 and (fp32 or fp16sr))" > "$OUT/t_a.log" 2>&1; echo "rc=$?" >> "$OUT/t_a.log" ) &
( $T -k "(replay_step and mamba2 and not fp32 and not fp16sr) or cuda_graph or out_of_range" > "$OUT/t_b.log" 2>&1; echo "rc=$?" >> "$OUT/t_b.log" ) &
( REPLAYSSM_M2_SPEC_CURSORS=0 timeout 220 python -m bench ${M% --deadline*} --warm-only --out /tmp/w0 > "$OUT/w0.log" 2>&1 ) &
( timeout 220 python -m bench ${M% --deadline*} --warm-only --out /tmp/w1 > "$OUT/w1.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_a t_b; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|Error" "$OUT/$f.log" | head -5; done
OUT=$OUT/m SETTINGS="off:REPLAYSSM_M2_SPEC_CURSORS=0 on:-" BENCH_ARGS="$M" REPLAYS=7 RUN_S=80 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/m.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/m/knobs.md" | grep -v standard | cut -c1-100
grep standard "$OUT/m/knobs.md" | cut -c1-100
