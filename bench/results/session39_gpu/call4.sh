#!/usr/bin/env bash
# Session 39, call 4 (exploratory, the last ~250 device-seconds; not a landing run): the ready
# patch docs/patches/s39_mma_block_scales.patch applied in place on the device, beside an
# unpatched copy in /tmp/base.
#  A. a correctness probe on the patched tree: the split nvfp4 twin checks against the torch
#     reference (test_gpu_row_order -k "nonflush_cap or split_defaults"), beside both warm compiles;
#  B. base / patched: Super L16 b256 / b512 nvfp4/fp16sr with --phases.
# Prediction: non-flush only 0.95-0.98x, mixed 0.97-0.99x.
set -u
source .device/gpu_env.sh >/dev/null 2>&1
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c4; rm -rf "$OUT" /tmp/base; mkdir -p "$OUT"
tarball() { (cd "$OUT" && tar czf "$FINAL/call4.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
cp -r "$PWD" /tmp/base && patch -p1 --forward < docs/patches/s39_mma_block_scales.patch > /dev/null || exit 1
grep -q "_mma_nvfp4_blocks" cute_kernels/mamba2_replay.py && ! grep -q "_mma_nvfp4_blocks" /tmp/base/cute_kernels/mamba2_replay.py || exit 1
E1="sweep --layer mamba2 --shapes nemotron3-super --batches 256,512 --L 16 --pairs nvfp4/fp16sr --phases --no-peers --no-plots --warm-jobs 3"
grid() {
  (cd "$1" && PYTHONPATH="$1" REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc_$2 OUT=$OUT/g1_$2 SETTINGS="$2:-" \
     BENCH_ARGS="$E1" REPLAYS=9 RUN_S=${RUN_S:-30} WARM_S=${WARM_S:-100} WARM_JOBS=1 \
     bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/grid1_$2_${3:-run}.log" 2>&1)
}
( RUN_S=1 grid /tmp/base base warm ) & ( RUN_S=1 grid "$PWD" new warm ) &
( PYTHONPATH=$PWD timeout 110 python -m pytest -q -rs -p no:cacheprovider -n 3 tests/test_gpu_row_order.py -k "nonflush_cap or split_defaults" > "$OUT/t_probe.log" 2>&1; echo "rc=$?" >> "$OUT/t_probe.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s: $(grep -E "passed|failed" "$OUT/t_probe.log" | tail -1)"; grep -E "^FAILED" "$OUT/t_probe.log" | head; tarball
grid /tmp/base base; grid "$PWD" new; echo "g1 $(( $(date +%s) - t0 )) s"; tarball
for s in base new; do grep -E "nvfp4" "$OUT/g1_$s/knobs.md" | sed "s/^/$s /" | cut -c1-120; done
