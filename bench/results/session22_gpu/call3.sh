#!/usr/bin/env bash
# Session 22 call 3: A. the GDN verify L32 test's last case (bf16/fp32; call 2 hit its 300 s limit
# after the other three passed). B. GDN decode at small batches, L 16 / 32: value rows per CTA
# (REPLAYSSM_GDN_BLOCK_V, new tuning switch; default choose_block_v_v2: 128 from 4 rows).
# Prediction: at b32 L32 the split pairs' step (fp8 / bf16 58.5-58.8 µs vs fp32 38.8, call 1)
# is one flush CTA's latency (u recomputed from the hi checkpoint: an L x L solve, S0 K over 32
# keys); 64 rows per CTA halve the per-CTA fold and S0 K work: 10-20 % faster there, L16 flat.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
( timeout 280 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_spec.py -k "gdn_verify_l32 and bf16" > "$OUT/t_gdn32.log" 2>&1; echo "rc=$?" >> "$OUT/t_gdn32.log" ) &
GDN="sweep --layer gdn --shapes qwen3.5-4b --batches 8,32,64 --L 16,32 --pairs fp32,fp8/fp32,bf16/fp32 --no-plots"
# compiles beside the test (one disk kernel cache; the switch is in the key), timing after both
for v in "" 64 32; do
  ( REPLAYSSM_GDN_BLOCK_V=$v timeout 240 python -m bench $GDN --warm-only --out /tmp/w$v > "$OUT/w$v.log" 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
OUT=$OUT/bv SETTINGS="d:- v64:REPLAYSSM_GDN_BLOCK_V=64 v32:REPLAYSSM_GDN_BLOCK_V=32" BENCH_ARGS="$GDN" \
  REPLAYS=7 RUN_S=60 WARM_S=200 WARM_JOBS=3 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/bv.log" 2>&1
tarball
echo "== t_gdn32"; grep -E "passed|failed|rc=|FAILED" "$OUT/t_gdn32.log" | tail -4
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard\|fla\|FLA" "$OUT/bv/knobs.md" | cut -c1-160
