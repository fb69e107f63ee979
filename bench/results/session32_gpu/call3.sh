#!/usr/bin/env bash
# Session 32, call 3 (run `tools/device_slim.sh out` first, carry .device).
#  A. tests: the new ring_phys bit-identical test (default = physical ring copies at <= 1 CTA/SM
#     vs REPLAYSSM_GDN_RING_PHYS=0), the GDN reference twin test and the flush halves tests (both
#     now take the physical copies by default).
#  B. timing: default (ring_phys on at <= 1 CTA/SM) vs REPLAYSSM_GDN_RING_PHYS=0, Qwen3.5-4B b1 /
#     b2 and 122B b1, L8 / L16, six pairs. Prediction: the non-flush step's ring reads leave the
#     chain slot -> cursors -> ring (phase "ring issue + B frags" 0.6 us, fp32's 0.42): ~0.2-0.4 us
#     a step at b1 (5-10 %), less at b2.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
E="sweep --layer gdn --shapes qwen3.5-4b,qwen3.5-122b --batches 1,2 --L 8,16 --pairs fp32,fp8/fp32,bf16/fp32,fp16sr,nvfp4/fp16sr,nvfp4/fp8sr --no-plots"
S="def:- rp0:REPLAYSSM_GDN_RING_PHYS=0"
( SETTINGS="$S" BENCH_ARGS="$E" WARM_S=230 WARM_JOBS=2 RUN_S=1 OUT=/tmp/c3warm \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c3warm.log 2>&1 ) &
T="timeout 230 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
( $T -k "ring_phys_bit_identical and (fp32 or bf16)" > "$OUT/t_rp1.log" 2>&1; echo "rc=$?" >> "$OUT/t_rp1.log" ) &
( $T -k "ring_phys_bit_identical and not fp32 and not bf16" > "$OUT/t_rp2.log" 2>&1; echo "rc=$?" >> "$OUT/t_rp2.log" ) &
( $T -k "test_replay_step_matches_torch_reference and gdn" > "$OUT/t_ref.log" 2>&1; echo "rc=$?" >> "$OUT/t_ref.log" ) &
( $T -k "flush_halves and nvfp4" > "$OUT/t_h1.log" 2>&1; echo "rc=$?" >> "$OUT/t_h1.log" ) &
( $T -k "flush_halves and not nvfp4" > "$OUT/t_h2.log" 2>&1; echo "rc=$?" >> "$OUT/t_h2.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_rp1 t_rp2 t_ref t_h1 t_h2; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -6; done
OUT=$OUT/rp SETTINGS="$S" BENCH_ARGS="$E" REPLAYS=9 RUN_S=110 WARM_S=40 WARM_JOBS=2 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/rp.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/rp/knobs.md" | grep -v standard | cut -c1-110
