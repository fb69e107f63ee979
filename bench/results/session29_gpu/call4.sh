#!/usr/bin/env bash
# Session 29, call 4 (final tree): the transformers integration on the GPU (not run since
# session 26: needs tools/stage_transformers.sh's bundle in .device/hf), and the decode's graph /
# split / row-split GPU tests beside it. Then the occupancy hint 4 (128 registers, no spills; the
# default hint caps the one-head fp8/fp32 build at 80 registers and nvfp4/fp16sr at 96: 32-36 B of
# spills at L16, nvfp4 68 / 116 B at L8, m2_md5) for the fp8 / nvfp4 read pairs at b1 / b2, where
# an SM holds at most 2 CTAs. Prediction: <= 0.1 us.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c4; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call4.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
mkdir -p /tmp/hf && tar xJf .device/hf/transformers.tar.xz -C /tmp/hf
( PYTHONPATH=/tmp/hf:$PYTHONPATH timeout 280 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_integration.py > "$OUT/t_int.log" 2>&1; echo "rc=$?" >> "$OUT/t_int.log" ) &
( timeout 280 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "cuda_graph or default_row_split or small_batch_split or early_wide_read" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
wait
tarball
E="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 1,2 --L 8,16 --pairs fp8/fp32,nvfp4/fp16sr --no-peers --no-plots"
OUT=$OUT/mb SETTINGS="def:- mb4:REPLAYSSM_M2_MINBLOCKS=4" BENCH_ARGS="$E" \
  REPLAYS=9 RUN_S=80 WARM_S=100 WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/mb.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
for f in t_int t_ops; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR|^SKIPPED" "$OUT/$f.log" | head -8; done
grep -v "^|---" "$OUT/mb/knobs.md" | grep -v standard | cut -c1-110
