#!/usr/bin/env bash
# Ready for session 49's first device call (~7 min):
#  1. the M2 kernel test set (ab_call_lib.sh m2_test_set: t_ops 51, t_order 62, t_spec) on the
#     final code -- session 48 ran the spec part on an H200 (13 + 43 passed) but its ops run
#     (-k mamba2, 206 tests) stopped at its cap after 118, and t_order did not run there;
#  2. session 48's one-round grid again, two rounds A B A B (fp32 T 8 / 12 / 16, the CUDA-core
#     flush against the fragment flush at T 9-16), for the round spread it did not measure.
#   source .device/gpu_env.sh && bash docs/patches/s49_call1.sh
# (then docs/patches/s43_call3_sweeps.sh for the README's headline tables, on an H200 if lent)
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:${PYTHONPATH:-}
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; rm -rf "$OUT"; mkdir -p "$OUT"
tarball() { (cd "$OUT" && tar czf "$FINAL/call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
source tests/gpu_scripts/ab_call_lib.sh
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc
ARGS="spec --layer mamba2 --shapes nemotron3-super --pairs fp32 --batches 256 --T 8,12,16 --L 16"
SET="A:REPLAYSSM_M2V_FRAG_FLUSH=0 B:-"
TEST_S=${TEST_S:-240} m2_test_set
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
for s in $SET; do
  ( env $(envs "$s") timeout 170 python -m bench $ARGS --warm-only --no-plots --out /tmp/w_${s%%:*} > "$OUT/warm_${s%%:*}.log" 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
test_summary
tarball
SETTINGS="$SET" ROUNDS=2 RUN_S=60 WARM_S=100 OUT=$OUT/ab BENCH_ARGS="$ARGS" \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/ab.log" 2>&1
tarball
cut -c1-170 "$OUT/ab/knobs.md"
echo "total $(( $(date +%s) - t0 )) s"
