#!/usr/bin/env bash
# Session 29, call 4 (final tree): the transformers integration on the GPU (not run since
# session 26: needs tools/stage_transformers.sh's bundle in .device/hf), and the decode's graph /
# split / row-split GPU tests beside it.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c4; mkdir -p "$OUT"
tarball() { (cd "$OUT" && tar czf "$FINAL/call4.tgz" . 2>/dev/null); }
t0=$(date +%s)
mkdir -p /tmp/hf && tar xJf .device/hf/transformers.tar.xz -C /tmp/hf
( PYTHONPATH=/tmp/hf:$PYTHONPATH timeout 280 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_integration.py > "$OUT/t_int.log" 2>&1; echo "rc=$?" >> "$OUT/t_int.log" ) &
( timeout 280 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "cuda_graph or default_row_split or small_batch_split or early_wide_read" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
wait
tarball
echo "total $(( $(date +%s) - t0 )) s"
for f in t_int t_ops; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR|^SKIPPED" "$OUT/$f.log" | head -8; done
