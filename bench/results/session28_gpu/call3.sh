#!/usr/bin/env bash
# Session 28, call 3 (carry .device; tools/device_slim.sh out first).
#  Why batch 1 is not faster when the fp32 read goes out earlier (call 2): is the read copy in
#  L2 when the CTA reads it? pf_early's read-copy prefetch is one 32 KiB cp.async.bulk
#  (TMA) prefetch per head; TMP_PF_LINES=1 (experiment) issues it as 128-byte line prefetches
#  from warp 0's 32 lanes (LSU) instead.
#  A. timing alone: def / lines (b1, b2; Super + Nano-4B; L8 / L16; four pairs).
#  B. in-kernel profile at b1, rows pinned non-flush: default / PF_EARLY=0 / lines.
#     Prediction: if the bulk prefetch lands, the read+dot phase is ~0.5 us (fp32, 4 MiB from
#     L2) with it and ~1.4 without; if it is ~1.4 in both, the data comes from DRAM anyway.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
E="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 1,2 --L 8,16 --pairs fp32,bf16/fp32,nvfp4/fp16sr,fp8/fp32 --no-peers --no-plots"
OUT=$OUT/pl SETTINGS="def:- lines:TMP_PF_LINES=1" BENCH_ARGS="$E" REPLAYS=9 RUN_S=100 WARM_S=120 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/pl.log" 2>&1
echo "pl $(( $(date +%s) - t0 )) s"; tarball
P=fp32,bf16/fp32,nvfp4/fp16sr
for s in def:- nopf:REPLAYSSM_M2_PF_EARLY=0 lines:TMP_PF_LINES=1; do
  n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  env $kv timeout 80 python tests/gpu_scripts/prof_mamba2_replay.py --pairs $P --batches 1 --modes nonflush --out "$OUT/prof_$n" > "$OUT/prof_$n.log" 2>&1
done
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/pl/knobs.md" | grep -v standard | cut -c1-110
for n in def nopf lines; do echo "== prof $n"; grep "^| " "$OUT/prof_$n.log" | grep -v "^| pair" | cut -c1-170; done
