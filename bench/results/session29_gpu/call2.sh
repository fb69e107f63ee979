#!/usr/bin/env bash
# Session 29, call 2: the ring_phys default rule (on for the early-wide 16-bit builds at <= 2 rows).
#  A. GPU tests: the early-wide test (rule path against EARLY_READ=0, so now also ring_phys 1
#     against 0), REPLAYSSM_M2_RING_PHYS=1 against 0 (8 cases), and the 16-bit / fp8 reference
#     tests of the decode.
#  B. timing alone: rule (unset) / RING_PHYS=0 / RING_PHYS=1 forced, b1-b4, Super + Nano-4B,
#     L8 / L16, five pairs. Prediction: rule = rp0 at b3 / b4 and for fp8 (same builds), rule
#     0.1-0.4 us under rp0 at b1 / b2 for the four 16-bit pairs (call 1: bf16/fp32).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
T="timeout 240 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
( $T -k "ring_phys or early_wide_read" > "$OUT/t_rp.log" 2>&1; echo "rc=$?" >> "$OUT/t_rp.log" ) &
( $T -k "test_replay_step_matches_torch_reference and mamba2" > "$OUT/t_ref.log" 2>&1; echo "rc=$?" >> "$OUT/t_ref.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_rp t_ref; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
E="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 1,2,3,4 --L 8,16 --pairs bf16/fp32,fp16/fp32,fp16sr,bf16sr,fp8/fp32 --no-peers --no-plots"
OUT=$OUT/rp SETTINGS="rule:- rp0:REPLAYSSM_M2_RING_PHYS=0 rp1:REPLAYSSM_M2_RING_PHYS=1" BENCH_ARGS="$E" \
  REPLAYS=9 RUN_S=200 WARM_S=200 WARM_JOBS=3 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/rp.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/rp/knobs.md" | grep -v standard | cut -c1-110
