#!/usr/bin/env bash
# Session 33, call 1 (run `tools/device_slim.sh out` first, carry .device).
#  A. tests: the step-tail bit-identical test (default REPLAYSSM_GDN_TAIL = 3 vs 0), the GDN
#     reference twin test and the flush halves tests.
#  B. timing: default (publish check after the last barrier + key append from the q / k warp's
#     registers) vs REPLAYSSM_GDN_TAIL=0, Qwen3.5-4B / 122B b1 / b2, L8 / L16, six pairs.
#     Prediction: warp 0 no longer waits out the row atomic before barrier 1, the 8 serialized
#     LDG/STG.U16 pairs of the key append are gone: ~0.1-0.3 us a step at b1 (3-8 %), less at b2.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
E="sweep --layer gdn --shapes qwen3.5-4b,qwen3.5-122b --batches 1,2 --L 8,16 --pairs fp32,fp8/fp32,bf16/fp32,fp16sr,nvfp4/fp16sr,nvfp4/fp8sr --no-plots"
S="def:- t0:REPLAYSSM_GDN_TAIL=0"
( SETTINGS="$S" BENCH_ARGS="$E" WARM_S=230 WARM_JOBS=2 RUN_S=1 OUT=/tmp/c1warm \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c1warm.log 2>&1 ) &
T="timeout 230 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
( $T -k "tail_bit_identical and (fp32 or bf16)" > "$OUT/t_tl1.log" 2>&1; echo "rc=$?" >> "$OUT/t_tl1.log" ) &
( $T -k "tail_bit_identical and not fp32 and not bf16" > "$OUT/t_tl2.log" 2>&1; echo "rc=$?" >> "$OUT/t_tl2.log" ) &
( $T -k "test_replay_step_matches_torch_reference and gdn" > "$OUT/t_ref.log" 2>&1; echo "rc=$?" >> "$OUT/t_ref.log" ) &
( $T -k "flush_halves and nvfp4" > "$OUT/t_h1.log" 2>&1; echo "rc=$?" >> "$OUT/t_h1.log" ) &
( $T -k "flush_halves and not nvfp4" > "$OUT/t_h2.log" 2>&1; echo "rc=$?" >> "$OUT/t_h2.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_tl1 t_tl2 t_ref t_h1 t_h2; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -6; done
OUT=$OUT/tail SETTINGS="$S" BENCH_ARGS="$E" REPLAYS=9 RUN_S=110 WARM_S=40 WARM_JOBS=2 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/tail.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/tail/knobs.md" | grep -v standard | cut -c1-110
