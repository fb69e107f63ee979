#!/usr/bin/env bash
# Session 22 call 2: A. GPU tests of this session's change (the 32 KiB fold round for every ring
# and the verify) and the tests call 1 left unrun (its row-order file hit the 330 s limit after
# 92 of 97): the decode on draft-capable rings at L32 (new, 6), the verify at L32 with 24 / 32 KiB
# (6), the GDN split at L32 and the two capture tests (5), the GDN verify at L32 (new, 4).
# B. Timing: the GDN verify at L = 16 vs 32 (never timed at 32), the Mamba-2 verify at L32 b1 / b32.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
PT="python -m pytest -q -rs -p no:cacheprovider"
( timeout 300 $PT tests/test_gpu_row_order.py -k "draft_ring or gdn_split_at_l32 or capture" > "$OUT/t_round.log" 2>&1; echo "rc=$?" >> "$OUT/t_round.log" ) &
( timeout 300 $PT tests/test_gpu_spec.py -k "fold_round" > "$OUT/t_fold.log" 2>&1; echo "rc=$?" >> "$OUT/t_fold.log" ) &
( timeout 300 $PT tests/test_gpu_spec.py -k "gdn_verify_l32" > "$OUT/t_gdn32.log" 2>&1; echo "rc=$?" >> "$OUT/t_gdn32.log" ) &
G16="spec --layer gdn --L 16 --batches 32,256,512 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-plots"
G32="spec --layer gdn --L 32 --batches 32,256,512 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-plots"
M32="spec --layer mamba2 --L 32 --batches 1,32 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --no-plots"
( timeout 280 python -m bench $G16 --warm-only --out /tmp/w1 > "$OUT/w1.log" 2>&1 ) &
( timeout 280 python -m bench $G32 --warm-only --out /tmp/w2 > "$OUT/w2.log" 2>&1 ) &
( timeout 280 python -m bench $M32 --warm-only --out /tmp/w3 > "$OUT/w3.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for t in t_round t_fold t_gdn32; do echo "== $t"; grep -E "passed|failed|rc=|FAILED" "$OUT/$t.log" | tail -4; done
timeout 100 python -m bench $G16 --replays 7 --out "$OUT/g16" > "$OUT/g16.log" 2>&1; tarball
timeout 100 python -m bench $G32 --replays 7 --out "$OUT/g32" > "$OUT/g32.log" 2>&1; tarball
timeout 60 python -m bench $M32 --replays 7 --out "$OUT/m32" > "$OUT/m32.log" 2>&1; tarball
echo "total $(( $(date +%s) - t0 )) s"
for d in g16 g32 m32; do echo "== $d"; grep -v "snapshot" "$OUT/$d/spec.md" | grep "|" | cut -c1-150; done
