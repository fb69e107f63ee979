#!/usr/bin/env bash
# Session 27, call 2: why Nemotron-3-Super b4 is slow (L8 fp32 16.0 us vs Nano-4B 11.5, standard
# 11.6; 256 threads 12.9) and what 256 threads changes in the b1 flush (call 1: b1 fp32 5.2 either way).
#  A. In-kernel phase profile (prof_mamba2_replay.py), 128 / 256 threads: Super b1 + b4, Nano b4;
#     fp32, fp8/fp32, nvfp4/fp16sr; rows pinned non-flush / flush and staggered.
#     Prediction: b1 flush phase (7.1 us fp32) ~0.6x at 256 threads; the Super b4 staggered span
#     set by a flush CTA sharing its SM (life > b1 flush life).
#  B. The GPU tests call 1 cut at 300 s (GDN twin steps etc.; the 9 verify-variant spec tests).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" . 2>/dev/null); }
t0=$(date +%s)
PR="timeout 100 python tests/gpu_scripts/prof_mamba2_replay.py --pairs fp32,fp8/fp32,nvfp4/fp16sr --modes nonflush,flush,staggered"
for t in 128 256; do
  REPLAYSSM_M2_THREADS=$t $PR --batches 1,4 --out "$OUT/prof_super_t$t" > "$OUT/prof_super_t$t.log" 2>&1
  REPLAYSSM_M2_THREADS=$t $PR --batches 4 --shape nemotron3-nano-4b --out "$OUT/prof_nano_t$t" > "$OUT/prof_nano_t$t.log" 2>&1; tarball
done
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
left=$(( 570 - ($(date +%s) - t0) )); echo "tests get $left s"
T="timeout $left python -m pytest -q -rs -p no:cacheprovider"
( $T tests/test_gpu_ops.py -k "(replay_step and gdn) or exact_recurrence" > "$OUT/t_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_gdn.log" ) &
( $T tests/test_gpu_ops.py -k "small_batch or half_block" > "$OUT/t_small.log" 2>&1; echo "rc=$?" >> "$OUT/t_small.log" ) &
( $T tests/test_gpu_spec.py -k "verify_tail or l32 or p80 or drafts_buffer or fold_round" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
wait
tarball
for f in t_gdn t_small t_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
echo "total $(( $(date +%s) - t0 )) s"
for f in "$OUT"/prof_*.log; do echo "== $f"; grep -E "^\|" "$f" | grep -v "^|---" | cut -c1-170; grep "per flush CTA" "$f" | cut -c1-250; done
