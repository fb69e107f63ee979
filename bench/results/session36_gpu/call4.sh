#!/usr/bin/env bash
# Session 36, call 4 (run `tools/device_slim.sh out` first, carry .device): this session's two
# flush encoder changes together against session 35's Mamba-2 kernels in one run:
# "s35" = REPLAYSSM_F16_SR_CHUNK=0 + REPLAYSSM_M2_E2M1=code, whose builds have session 35's PTX
# (md5 on the CPU: split2 5fa8a996e3, decode b1 2c97827d9d, verify T8 ba2e63f2d6).
# Predictions (calls 2 and 3 multiplied): nvfp4/fp16sr flush only 0.85x, mixed b256 / b512
# 0.95x; fp16sr 0.94x; fp32 1.00x (anchor); verify T8 b256 nvfp4/fp16sr 0.96-0.97x.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c4; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call4.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
SB="def:- s35:REPLAYSSM_F16_SR_CHUNK=0,REPLAYSSM_M2_E2M1=code"
EM="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 256,512 --L 16 --pairs nvfp4/fp16sr,fp16sr,fp32 --phases --no-peers --no-plots"
EV="spec --layer mamba2 --shapes nemotron3-super --pairs nvfp4/fp16sr --batches 256 --T 4,8 --L 16 --no-plots"
for n in m v; do
  eval "B=\$E$(echo $n | tr a-z A-Z)"
  ( SETTINGS="$SB" BENCH_ARGS="$B" WARM_S=250 WARM_JOBS=2 RUN_S=1 OUT=/tmp/c4warm$n \
    bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c4warm$n.log 2>&1 ) &
done
wait
echo "warm $(( $(date +%s) - t0 )) s"
for n in m v; do
  eval "B=\$E$(echo $n | tr a-z A-Z)"
  OUT=$OUT/g$n SETTINGS="$SB" BENCH_ARGS="$B" REPLAYS=9 RUN_S=150 \
    bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g$n.log" 2>&1
  echo "g$n $(( $(date +%s) - t0 )) s"; tarball
done
for n in m v; do grep -v "^|---" "$OUT/g$n/knobs.md" | grep -v "standard bf16\|snapshot bf16" | cut -c1-120; done
