#!/usr/bin/env bash
# Session 28, call 4: the final tree (early_read_for's default rule in the launcher).
#  A. timing alone: off (REPLAYSSM_M2_EARLY_READ=0) / default, 16-bit read-copy pairs at b1 / b2
#     (Super, Nano-4B; L8 / L16): the rule's builds are the call-2 er4 builds by PTX md5.
#  B. GPU tests at the defaults: early-read bit-identical, Mamba-2 twin / graph / default row
#     split; the last verify-variant spec test (GDN L32 bf16/fp32) that calls 1-2 did not reach.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c4; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call4.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
E="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 1,2 --L 8,16 --pairs bf16/fp32,fp16/fp32,fp16sr,bf16sr --no-peers --no-plots"
OUT=$OUT/er SETTINGS="off:REPLAYSSM_M2_EARLY_READ=0 def:-" BENCH_ARGS="$E" REPLAYS=9 RUN_S=90 WARM_S=100 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/er.log" 2>&1
echo "er $(( $(date +%s) - t0 )) s"; tarball
( timeout 200 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "early_wide_read or default_row_split or (replay_step and mamba2) or cuda_graph" > "$OUT/t_m2.log" 2>&1; echo "rc=$?" >> "$OUT/t_m2.log" ) &
( timeout 200 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_spec.py -k "gdn_verify_l32 and bf16" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
wait
tarball
echo "total $(( $(date +%s) - t0 )) s"
for f in t_m2 t_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
grep -v "^|---" "$OUT/er/knobs.md" | grep -v standard | cut -c1-110
