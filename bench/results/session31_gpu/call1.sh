#!/usr/bin/env bash
# Session 31, call 1 (run `tools/device_slim.sh out` first, carry .device).
#  A. tests of the GDN flush column halves (two warps per row tile, each a 64-column half of the
#     flush; default at <= 1 CTA per SM for mma-path read copies): every such pair at L4, four at
#     L16, against the torch reference; the GDN tests whose launches now take them by default.
#  B. timing, halves (default) against REPLAYSSM_GDN_FLUSH_HALVES=0 (the one-warp-per-tile
#     kernel), Qwen3.5-4B b1 / b2, L8 / L16, the five mma-path main pairs, FLA in the run.
#     Prediction: the split pairs' b1 flush ~16.6 -> ~11.5 us (hi tile + P, fold, hook, encodes
#     halve; Gram / solve / stage stay), i.e. ~0.6 us a step at L8, ~0.3 at L16 (1.07-1.15x);
#     nvfp4 at 512 threads (128 registers, 28 B spill) less sure; non-flush steps unchanged
#     (+-2 %: the second warp of a tile reads nothing there).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
E="sweep --layer gdn --shapes qwen3.5-4b --batches 1,2 --L 8,16 --pairs fp8/fp32,bf16/fp32,fp16sr,nvfp4/fp16sr,nvfp4/fp8sr --no-plots"
# the timing's compiles beside the tests (CPU only)
( SETTINGS="def:- off:REPLAYSSM_GDN_FLUSH_HALVES=0" BENCH_ARGS="$E" WARM_S=200 WARM_JOBS=2 \
  RUN_S=1 OUT=/tmp/c1warm bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c1warm.log 2>&1 ) &
T="timeout 230 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
( $T -k "flush_halves and nvfp4" > "$OUT/t_h1.log" 2>&1; echo "rc=$?" >> "$OUT/t_h1.log" ) &
( $T -k "flush_halves and not nvfp4" > "$OUT/t_h2.log" 2>&1; echo "rc=$?" >> "$OUT/t_h2.log" ) &
( $T -k "few_ctas_full_register_cap or split_pair_half_block or out_of_range_slots" > "$OUT/t_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_gdn.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_h1 t_h2 t_gdn; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8; done
OUT=$OUT/h SETTINGS="def:- off:REPLAYSSM_GDN_FLUSH_HALVES=0" BENCH_ARGS="$E" REPLAYS=9 RUN_S=110 \
  WARM_S=60 WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/h.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/h/knobs.md" | cut -c1-110
