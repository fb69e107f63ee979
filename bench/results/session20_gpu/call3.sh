#!/usr/bin/env bash
# Session 20, device call 3: does the Mamba-2 decode split's default lose anywhere, and where does
# batch 1's time go?
#  A. grid, split off / default / forced (REPLAYSSM_M2_SPLIT=0 / - / 1), Nemotron-3-Super b256 /
#     b512 at L = 8 and 32 for nvfp4/fp16sr, fp8/fp32 and bf16/fp32 (bf16 read copies: not split
#     by default; the forced setting shows whether they should be), and b32 L = 16 (below the
#     default's 64 rows) off / forced;
#  B. batch 1 and 8, L = 16, five pairs with our standard and mamba_ssm's Triton kernel, whole step,
#     non-flush only and flush only.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" . 2>/dev/null); }
t0=$(date +%s)
GL="sweep --shapes nemotron3-super --batches 256,512 --L 8,32 --pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers"
G32="sweep --shapes nemotron3-super --batches 32 --L 16 --pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --phases"
S1="sweep --shapes nemotron3-super --batches 1,8 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr,bf16/fp32 --phases"
( timeout 200 python -m bench $S1 --warm-only --no-plots --out /tmp/w1 > "$OUT/w1.log" 2>&1 ) &
OUT=$OUT/gl SETTINGS="s0:REPLAYSSM_M2_SPLIT=0 d:- s1:REPLAYSSM_M2_SPLIT=1" BENCH_ARGS="$GL" \
  REPLAYS=7 RUN_S=90 WARM_S=200 WARM_JOBS=3 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gl.log" 2>&1
echo "grid L8/L32 $(( $(date +%s) - t0 )) s"; tarball
OUT=$OUT/g32 SETTINGS="s0:REPLAYSSM_M2_SPLIT=0 s1:REPLAYSSM_M2_SPLIT=1" BENCH_ARGS="$G32" \
  REPLAYS=7 RUN_S=60 WARM_S=120 WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g32.log" 2>&1
echo "grid b32 $(( $(date +%s) - t0 )) s"; tarball
wait
timeout 120 python -m bench $S1 --replays 9 --no-plots --out "$OUT/b1" > "$OUT/b1.log" 2>&1; echo "b1 rc=$? $(( $(date +%s) - t0 )) s"
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard" "$OUT/gl/knobs.md" | cut -c1-200
grep -v "standard" "$OUT/g32/knobs.md" | cut -c1-200
grep -E "^\| nemotron" "$OUT/b1/sweep.md" | cut -c1-190
