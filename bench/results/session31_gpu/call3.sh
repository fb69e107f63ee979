#!/usr/bin/env bash
# Session 31, call 3 (run `tools/device_slim.sh out` first, carry .device).
#  A. tests of the flush column halves, both modes (1: two warps per row tile, the default for
#     fp8 / 16-bit reads at <= 1 CTA per SM; 2: a 2-CTA cluster, REPLAYSSM_GDN_FLUSH_HALVES=2):
#     every mma-path pair at L4, four at L16, against the torch reference.
#  B. timing: default vs =2 (cluster pair) vs =0 (no halves), Qwen3.5-4B b1 / b2 and 122B b1,
#     L8 / L16, FLA in the run. Prediction (call 2's profile: the per-row phases are throughput-
#     bound per SM, so two SMs halve them; 4 cluster barriers ~1.4 us): the split pairs' flush
#     ~16 -> ~11-12 us, ~0.45 us a step at L8 (fp8/fp32 4.1 -> ~3.65, nvfp4/fp16sr 4.7 ->
#     ~4.25), ~0.2 at L16; fp16sr (2 barriers, encode 4.5 -> 2.3) ~0.25 at L8. Where the doubled
#     grid exceeds the SMs (4B b2 at 64 rows, 122B b1 at 64 rows) =2 falls back to no halves.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
E="sweep --layer gdn --shapes qwen3.5-4b,qwen3.5-122b --batches 1,2 --L 8,16 --pairs fp8/fp32,bf16/fp32,fp16sr,nvfp4/fp16sr,nvfp4/fp8sr --no-plots"
S="def:- pair:REPLAYSSM_GDN_FLUSH_HALVES=2 off:REPLAYSSM_GDN_FLUSH_HALVES=0"
( SETTINGS="$S" BENCH_ARGS="$E" WARM_S=230 WARM_JOBS=3 RUN_S=1 OUT=/tmp/c3warm \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c3warm.log 2>&1 ) &
T="timeout 240 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
( $T -k "flush_halves and nvfp4" > "$OUT/t_h1.log" 2>&1; echo "rc=$?" >> "$OUT/t_h1.log" ) &
( $T -k "flush_halves and fp8 and not nvfp4" > "$OUT/t_h2.log" 2>&1; echo "rc=$?" >> "$OUT/t_h2.log" ) &
( $T -k "flush_halves and not fp8 and not nvfp4" > "$OUT/t_h3.log" 2>&1; echo "rc=$?" >> "$OUT/t_h3.log" ) &
( $T -k "few_ctas_full_register_cap or split_pair_half_block" > "$OUT/t_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_gdn.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_h1 t_h2 t_h3 t_gdn; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -6; done
OUT=$OUT/h SETTINGS="$S" BENCH_ARGS="$E" REPLAYS=9 RUN_S=100 WARM_S=60 WARM_JOBS=3 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/h.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/h/knobs.md" | grep -v standard | cut -c1-110
