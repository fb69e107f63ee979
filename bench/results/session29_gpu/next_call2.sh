#!/usr/bin/env bash
# A device call for the next session (written in session 29; not run yet).
# GDN batch 1 / 2 at the register cap of 1 CTA per SM (REPLAYSSM_GDN_REPLAY_MINB=1) against
# the default. At b1 / b2 a GDN launch has 32-128 CTAs on 132 SMs, so occupancy is not what
# the default cap of 128 registers buys there; the cap makes the b1 builds spill (ptxas,
# Qwen3.5-4B, session 29 on the CPU): nvfp4/fp16sr 108-128 B (254 registers at cap 1: 24-48 B),
# nvfp4/fp8sr 64 B (228: 0), fp16sr 8-28 B (243-246: 0), fp8/fp32 L16 16 B (196: 0); fp32 /
# bf16/fp32 / fp8 L8 do not spill. The split pairs' b1 step is set by their flush
# (15.6-17.4 us, session25_gpu/call3); whether the spills sit there was not checked.
# Prediction: nvfp4 pairs b1 / b2 1.02-1.10x, the others ~1.00x. FLA timed in the same run
# (the GDN b1 target is >= 1.2x FLA).
# Second grid: Mamba-2 b1 / b2 at hints 2 and 1 (fp32's one-head build runs at 72 registers,
# the few-rows fp8 / nvfp4 and early-wide 16-bit builds at ~128): the b1 flush step (10-15 us,
# one head per CTA, < 1 CTA per SM) may use more registers for its loads in flight.
# Run `tools/device_slim.sh out` first, carry .device; `tools/device_slim.sh in` after.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/next_call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
E="sweep --layer gdn --shapes qwen3.5-4b,qwen3.5-122b --batches 1,2 --L 8,16 --pairs fp32,fp8/fp32,bf16/fp32,fp16sr,nvfp4/fp16sr,nvfp4/fp8sr --no-plots"
OUT=$OUT/mb SETTINGS="def:- mb1:REPLAYSSM_GDN_REPLAY_MINB=1" BENCH_ARGS="$E" REPLAYS=9 RUN_S=150 \
  WARM_S=200 WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/mb.log" 2>&1
tarball
E="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 1,2 --L 8,16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots"
OUT=$OUT/m2 SETTINGS="def:- mb2:REPLAYSSM_M2_MINBLOCKS=2 mb1:REPLAYSSM_M2_MINBLOCKS=1" BENCH_ARGS="$E" \
  REPLAYS=9 RUN_S=100 WARM_S=150 WARM_JOBS=3 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/m2.log" 2>&1
tarball
# correctness of the cap-1 builds: the GDN reference / twin tests at b1-scale launches
( REPLAYSSM_GDN_REPLAY_MINB=1 timeout 200 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "test_replay_step_matches_torch_reference and gdn" > "$OUT/t_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_gdn.log" )
tarball
echo "total $(( $(date +%s) - t0 )) s"
echo "== t_gdn: $(grep -E "passed|failed" "$OUT/t_gdn.log" | tail -1) $(tail -1 "$OUT/t_gdn.log")"
grep -v "^|---" "$OUT/mb/knobs.md" | cut -c1-110
grep -v "^|---" "$OUT/m2/knobs.md" | grep -v standard | cut -c1-110
