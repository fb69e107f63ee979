#!/usr/bin/env bash
# Session 31, call 6 (run `tools/device_slim.sh out` first, carry .device).
#  A. the flush halves tests at the final kernel code: the flush's L2 prefetch of the hi rows
#     (flush_pf_for: on at <= 1 CTA per SM, so in every one of these tests' launches).
#  B. timing: default (prefetch on) vs REPLAYSSM_GDN_FLUSH_PF=0, 4B b1 / b2 and 122B b1, L8 /
#     L16. Prediction: the hi tile + P sub-phase (1.8 us nvfp4 pair, 2.4 fp8/fp32, call 4) waits
#     on DRAM; issued ~3-4 us earlier it hits L2: ~0.5-1 us a flush, 0.05-0.1 us a step at L8
#     (1-3 %), half that at L16.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c6; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call6.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
E="sweep --layer gdn --shapes qwen3.5-4b,qwen3.5-122b --batches 1,2 --L 8,16 --pairs fp8/fp32,bf16/fp32,fp16sr,nvfp4/fp16sr,nvfp4/fp8sr --no-plots"
S="def:- nopf:REPLAYSSM_GDN_FLUSH_PF=0"
( SETTINGS="$S" BENCH_ARGS="$E" WARM_S=200 WARM_JOBS=2 RUN_S=1 OUT=/tmp/c6warm \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c6warm.log 2>&1 ) &
T="timeout 200 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
( $T -k "flush_halves and nvfp4" > "$OUT/t_h1.log" 2>&1; echo "rc=$?" >> "$OUT/t_h1.log" ) &
( $T -k "flush_halves and fp8 and not nvfp4" > "$OUT/t_h2.log" 2>&1; echo "rc=$?" >> "$OUT/t_h2.log" ) &
( $T -k "flush_halves and not fp8 and not nvfp4" > "$OUT/t_h3.log" 2>&1; echo "rc=$?" >> "$OUT/t_h3.log" ) &
( $T -k "few_ctas_full_register_cap or split_pair_half_block" > "$OUT/t_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_gdn.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_h1 t_h2 t_h3 t_gdn; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -6; done
OUT=$OUT/pf SETTINGS="$S" BENCH_ARGS="$E" REPLAYS=9 RUN_S=80 WARM_S=40 WARM_JOBS=2 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/pf.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/pf/knobs.md" | grep -v standard | cut -c1-110
