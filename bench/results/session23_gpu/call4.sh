#!/usr/bin/env bash
# Session 23 call 4: landing run of e57a41c (GDN decode value rows per CTA: never below 64 for
# 128-row heads; fp8 / bf16 / fp16 read copies at 64 up to 256 (row, value head) pairs, L <= 16).
#  A. test_gpu_ops.py whole (its GDN twin checks at small batches now take 64 rows for the
#     narrow read copies; the M2 decode on draft rings).
#  B. GDN sweep b1 / 8, L 8 / 16, both shapes, with our standard step and FLA in the same run:
#     the new defaults' table (the A-B is call 3).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c4; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call4.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
G="sweep --layer gdn --batches 1,8 --L 8,16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-plots"
( timeout 200 python -m bench $G --warm-only --out /tmp/w1 > "$OUT/w1.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
echo "== t_ops"; grep -E "passed|failed|rc=|FAILED" "$OUT/t_ops.log" | tail -6
timeout 150 python -m bench $G --replays 9 --out "$OUT/gdn" > "$OUT/gdn.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -E "^\|" "$OUT/gdn/sweep.md" | head -60 | cut -c1-170
