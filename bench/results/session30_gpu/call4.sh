#!/usr/bin/env bash
# Session 30, call 4 (run `tools/device_slim.sh out` first, carry .device).
#  A. test_gdn_nvfp4_few_ctas_full_register_cap rewritten after call 3 (its b1 case at L8 met 2
#     flushes in 27 random-pad steps: now the reference test's 9 rows x 4 value heads at L4).
#  B. the rule's unmeasured part: Qwen3.5-4B b3 / b4 (96 / 128 CTAs, still <= 1 per SM) for the
#     nvfp4 pairs, default (cap 1) vs MINB=2. Prediction: as b1 / b2, 1.02-1.10x.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c4; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call4.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
E="sweep --layer gdn --shapes qwen3.5-4b --batches 3,4 --L 8,16 --pairs nvfp4/fp16sr,nvfp4/fp8sr --no-peers --no-plots"
( OUT=$OUT/gn SETTINGS="def:- mb2:REPLAYSSM_GDN_REPLAY_MINB=2" BENCH_ARGS="$E --warm-only" WARM_S=100 WARM_JOBS=2 \
    bash -c 'for s in $SETTINGS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""; env $kv timeout 100 python -m bench $BENCH_ARGS --no-plots --out /tmp/warm_$n > /dev/null 2>&1 & done; wait' ) &
timeout 200 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "few_ctas_full_register_cap" > "$OUT/t_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_gdn.log"
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
echo "== t_gdn: $(grep -E "passed|failed" "$OUT/t_gdn.log" | tail -1) $(tail -1 "$OUT/t_gdn.log")"; grep -E "^FAILED|^ERROR" "$OUT/t_gdn.log" | head -5
OUT=$OUT/gn SETTINGS="def:- mb2:REPLAYSSM_GDN_REPLAY_MINB=2" BENCH_ARGS="$E" REPLAYS=9 RUN_S=60 \
  WARM_S=60 WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gn.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/gn/knobs.md" | cut -c1-110
