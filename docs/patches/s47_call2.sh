#!/usr/bin/env bash
# Session 47 call 2 (~7 min): the fragment flush of split pairs by its measured rule, and the
# next head's hi preloaded before the encode pass (REPLAYSSM_M2V_FRAG_PRELOAD).
#  A. (together) the frag-split fuzz (preload builds; WITH_SPEC=1: the M2 spec GPU tests too), compiles;
#  B. alone: spec grid Super b256 T4 / T8 L16: A old default (no frag split), B the rule without
#     preload, C the rule with it, D frag split forced for every pair, with preload.
#   source .device/gpu_env.sh && bash docs/patches/s47_call2.sh
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:${PYTHONPATH:-}
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; rm -rf "$OUT"; mkdir -p "$OUT"
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc
ARGS="spec --layer mamba2 --shapes nemotron3-super --pairs nvfp4/fp16sr,fp8/fp32,nvfp4/fp32,fp8/fp16sr --batches 256 --T 4,8 --L 16"
SET="A:REPLAYSSM_M2V_FRAG_SPLIT=0 B:REPLAYSSM_M2V_FRAG_PRELOAD=0 C:REPLAYSSM_M2V_FRAG_PRELOAD=1 D:REPLAYSSM_M2V_FRAG_SPLIT=1,REPLAYSSM_M2V_FRAG_PRELOAD=1"
T="timeout ${TEST_S:-150} python -m pytest -q -rs -p no:cacheprovider"
( $T -n 3 tests/test_gpu_spec.py -k "frag_split" > "$OUT/t_frag_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_frag_split.log" ) &
[ -n "${WITH_SPEC:-}" ] && ( $T -n 5 tests/test_gpu_spec.py -k "mamba2 and not frag_split" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
for s in $SET; do
  ( env $(envs "$s") timeout 150 python -m bench $ARGS --warm-only --no-plots --out /tmp/w_${s%%:*} > "$OUT/warm_${s%%:*}.log" 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_frag_split ${WITH_SPEC:+t_spec}; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8; done
tarball
SETTINGS="$SET" ROUNDS=1 RUN_S=${RUN_S:-70} WARM_S=100 WARM_JOBS=4 OUT=$OUT/ab BENCH_ARGS="$ARGS" \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/ab.log" 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
tarball
grep -v "snapshot\|standard" "$OUT/ab/knobs.md" | cut -c1-170
echo "total $(( $(date +%s) - t0 )) s"
