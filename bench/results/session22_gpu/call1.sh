#!/usr/bin/env bash
# Session 22 call 1 (written in session 21 as next_call1.sh; run as is).
#  A. GPU tests never run on the landing code: the P80 L32 single fold round in the split's flush
#     launch (test_gpu_row_order -k single_round: 8 cases, 4 passed in call 7 for the single
#     launch), test_gpu_ops (the fp32 bound tightened to (L + 1) / 8), and the verify at L32 with
#     REPLAYSSM_M2V_FOLD_SMEM 24 / 32 (test_gpu_spec -k fold_round: 6 cases);
#  B. the verify at L32 (Nemotron-3-Super, T 4 / 8, b256 / b512), fold round 24 (default, the
#     two-pass flush) vs 32 KiB (one round, single-pass flush; CPU builds at T8: fp32 168
#     registers, 88 B of spills, 64 KB smem; nvfp4/fp16sr 206 registers, 88 KB -- 2 CTAs/SM).
#     Prediction: one round faster for nvfp4 (the decode's Nano L32: 1.24-1.63x), fp32 unclear.
#  C. GDN at L32 has not been swept since session 17 (its split stops at L16; session 21 found
#     Mamba-2 Nano-4B at L32 on a 1.6x slower fallback): Qwen3.5-4B b32 / 256 / 512, L 16 / 32,
#     default vs the split forced (CPU builds at L32: the shared ordered build spills 1.5-2.2 KB
#     for narrow copies at 64-80 registers, the split's non-flush half 116-200 B; the forced
#     split's GPU test at L32 runs in A).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/next_call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
# (whole files: session 21's last cute_kernels/ commits -- host side -- were never GPU-run)
( timeout 330 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py > "$OUT/t_round.log" 2>&1; echo "rc=$?" >> "$OUT/t_round.log" ) &
( timeout 330 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( timeout 330 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_spec.py -k "mamba2 or fold_round" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
# compiles of B and C beside the tests (one disk kernel cache; the env switch is in the key)
SPEC="spec --layer mamba2 --L 32 --batches 256,512 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --no-plots"
GDN="sweep --layer gdn --shapes qwen3.5-4b --batches 32,256,512 --L 16,32 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-plots"
( timeout 240 python -m bench $SPEC --warm-only --out /tmp/w1 > "$OUT/w1.log" 2>&1 ) &
( REPLAYSSM_M2V_FOLD_SMEM=32 timeout 240 python -m bench $SPEC --warm-only --out /tmp/w2 > "$OUT/w2.log" 2>&1 ) &
( timeout 240 python -m bench $GDN --warm-only --out /tmp/w3 > "$OUT/w3.log" 2>&1;
  REPLAYSSM_GDN_SPLIT=1 timeout 200 python -m bench $GDN --warm-only --out /tmp/w4 > "$OUT/w4.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for t in t_round t_ops t_spec; do echo "== $t"; grep -E "passed|failed|rc=|FAILED" "$OUT/$t.log" | tail -4; done
OUT=$OUT/gv SETTINGS="f24:- f32:REPLAYSSM_M2V_FOLD_SMEM=32" BENCH_ARGS="$SPEC" \
  REPLAYS=7 RUN_S=90 WARM_S=60 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gv.log" 2>&1
tarball
OUT=$OUT/gg SETTINGS="d:- s1:REPLAYSSM_GDN_SPLIT=1" BENCH_ARGS="$GDN" \
  REPLAYS=7 RUN_S=60 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gg.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "snapshot\|standard" "$OUT/gv/knobs.md" | cut -c1-160
grep -v "standard\|fla" "$OUT/gg/knobs.md" | cut -c1-160
