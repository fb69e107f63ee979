#!/usr/bin/env bash
# Session 48 call 2 (~7 min): the fp32 pair's fragment flush at T 9-16 (two n8 query tiles in its
# dots; until now T <= 8, the CUDA-core flush above).
#  A. (together) the GPU tests of it (T 9 / 12 / 16 fuzz at 4 heads, single and split launch, the
#     fp32 builds asserted fragment flushes; the other fragment-flush fuzz tests), compiles;
#  B. alone: spec grid Super b256 L16 fp32 T 8 (control: identical builds) / 12 / 16, two rounds:
#     A = FRAG_FLUSH=0 (the CUDA-core flush), B = the new default, C = hi lead 4 n-tiles.
#   source .device/gpu_env.sh && bash docs/patches/s48_call2.sh
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:${PYTHONPATH:-}
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; rm -rf "$OUT"; mkdir -p "$OUT"
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc
ARGS="spec --layer mamba2 --shapes nemotron3-super --pairs fp32 --batches 256 --T 8,12,16 --L 16"
SET="A:REPLAYSSM_M2V_FRAG_FLUSH=0 B:- C:REPLAYSSM_M2V_FRAG_PD=4"
T="timeout ${TEST_S:-170} python -m pytest -q -rs -p no:cacheprovider"
( $T -n 4 tests/test_gpu_spec.py -k "more_than_8 or (frag and mamba2)" > "$OUT/t_frag.log" 2>&1; echo "rc=$?" >> "$OUT/t_frag.log" ) &
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
for s in $SET; do
  ( env $(envs "$s") timeout 170 python -m bench $ARGS --warm-only --no-plots --out /tmp/w_${s%%:*} > "$OUT/warm_${s%%:*}.log" 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_frag; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8; done
tarball
SETTINGS="$SET" ROUNDS=${ROUNDS:-2} RUN_S=${RUN_S:-60} WARM_S=100 WARM_JOBS=3 OUT=$OUT/ab BENCH_ARGS="$ARGS" \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/ab.log" 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
tarball
cut -c1-170 "$OUT/ab/knobs.md"
echo "total $(( $(date +%s) - t0 )) s"
