#!/usr/bin/env bash
# Session 26, call 3 (at d79d01f, the landed pf_early rules):
#  A. The GPU tests call 2 cut at 240 s, as three processes at once (the compiles are CPU-bound):
#     Mamba-2 twin steps + CUDA graphs + out-of-range slots; GDN twin steps + exact recurrences;
#     the small-batch splits and half blocks.
#  B. Where batch 1 goes now: the in-kernel phase profile (prof_mamba2_replay.py), both layers,
#     rows pinned non-flush / flush, 4 pairs. Prediction: non-flush CTA life ~2-3 us with the
#     prefetches, a flush step 3-4x a non-flush one (session 19: 11.9-17.1 us vs 4.6-5.9).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" . 2>/dev/null); }
t0=$(date +%s)
T="timeout 330 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
( $T -k "(replay_step and mamba2) or cuda_graph or out_of_range" > "$OUT/t_m2.log" 2>&1; echo "rc=$?" >> "$OUT/t_m2.log" ) &
( $T -k "(replay_step and gdn) or exact_recurrence" > "$OUT/t_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_gdn.log" ) &
( $T -k "small_batch or half_block" > "$OUT/t_small.log" 2>&1; echo "rc=$?" >> "$OUT/t_small.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_m2 t_gdn t_small; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|Error" "$OUT/$f.log" | head -5; done
P=fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32
timeout 100 python tests/gpu_scripts/prof_mamba2_replay.py --pairs $P --batches 1 --modes nonflush,flush --out "$OUT/prof_m2" > "$OUT/prof_m2.log" 2>&1; tarball
timeout 100 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --pairs $P --batches 1 --modes nonflush,flush --out "$OUT/prof_gdn" > "$OUT/prof_gdn.log" 2>&1; tarball
echo "total $(( $(date +%s) - t0 )) s"
tail -40 "$OUT/prof_m2.log" | cut -c1-160
tail -40 "$OUT/prof_gdn.log" | cut -c1-160
