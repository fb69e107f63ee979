#!/usr/bin/env bash
# Session 47 call 1 (~8 min): the split pairs' fragment flush of the M2 verify (f508ab4,
# REPLAYSSM_M2V_FRAG_SPLIT, off by default).
#  A. (together) its GPU fuzz against the twin (6 pairs, T 3 / 8, split launch forced), the M2
#     kernel test set of the committed defaults (m2_test_set), the grid's compiles;
#  B. alone: A/B spec grid, FRAG_SPLIT 0 / 1, two rounds A B A B, Super b256 T4 / T8 L16.
#   source .device/gpu_env.sh && bash docs/patches/s47_call1.sh
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:${PYTHONPATH:-}
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; rm -rf "$OUT"; mkdir -p "$OUT"
tarball() { (cd "$OUT" && tar czf "$FINAL/call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
source tests/gpu_scripts/ab_call_lib.sh
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc
ARGS="spec --layer mamba2 --shapes nemotron3-super --pairs nvfp4/fp16sr,fp8/fp32,nvfp4/fp32,fp8/fp16sr --batches 256 --T 4,8 --L 16"
( timeout ${TEST_S:-240} python -m pytest -q -rs -p no:cacheprovider -n 3 tests/test_gpu_spec.py -k "frag_split" > "$OUT/t_frag_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_frag_split.log" ) &
[ -n "${SKIP_SET:-}" ] || TEST_S=${TEST_S:-240} m2_test_set
for v in 0 1; do
  ( REPLAYSSM_M2V_FRAG_SPLIT=$v timeout 240 python -m bench $ARGS --warm-only --no-plots --out /tmp/w$v > "$OUT/warm$v.log" 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
echo "== t_frag_split: $(grep -E "passed|failed" "$OUT/t_frag_split.log" | tail -1) $(tail -1 "$OUT/t_frag_split.log")"
grep -E "^FAILED|^ERROR" "$OUT/t_frag_split.log" | head -8
[ -n "${SKIP_SET:-}" ] || test_summary
tarball
SETTINGS="A:REPLAYSSM_M2V_FRAG_SPLIT=0 B:REPLAYSSM_M2V_FRAG_SPLIT=1" ROUNDS=2 RUN_S=${RUN_S:-100} \
  WARM_S=120 WARM_JOBS=2 OUT=$OUT/ab BENCH_ARGS="$ARGS" \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/ab.log" 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
tarball
cut -c1-170 "$OUT/ab/knobs.md"
for d in A B; do grep -E "\| 256 \| (4|8) \|" "$OUT/ab/$d/spec.md" 2>/dev/null | cut -c1-150; done
echo "total $(( $(date +%s) - t0 )) s"
