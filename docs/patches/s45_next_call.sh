#!/usr/bin/env bash
# Ready for session 46 (~5.5 min, meant for an H200; not run in session 45: its H200 start was
# refused): session 45's call 2 (bench/results/session45_gpu/call2.sh, run on an H100) again on
# the committed final code -- the M2 kernel test set + the roll's tests, then the
# landing sweeps: Nemotron-3-Super L16 (five pairs, our standard + mamba_ssm) and, if time is
# left, Qwen3.5-4B L16 (five pairs, our standard + FLA; no GDN kernel changed in session 45).
#   source .device/gpu_env.sh && bash docs/patches/s45_next_call.sh
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:${PYTHONPATH:-}
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; rm -rf "$OUT"; mkdir -p "$OUT"
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
source tests/gpu_scripts/ab_call_lib.sh
SN="sweep --shapes nemotron3-super --batches 1,8,32,128,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr,bf16/fp32"
S4="sweep --layer gdn --shapes qwen3.5-4b --batches 1,32,64,128,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32,nvfp4/fp8sr"
T="timeout 300 python -m pytest -q -rs -p no:cacheprovider"
( $T -n 3 tests/test_gpu_ops.py -k "pair_roll" > "$OUT/t_roll_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_roll_ops.log" ) &
( $T -n 2 tests/test_gpu_spec.py -k "pair_roll" > "$OUT/t_roll_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_roll_spec.log" ) &
TEST_S=300 m2_test_set
( REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc timeout 300 python -m bench $SN --warm-only --no-plots --warm-jobs 2 --out /tmp/wn > "$OUT/wn.log" 2>&1 ) &
( REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc4 timeout 300 python -m bench $S4 --warm-only --no-plots --warm-jobs 2 --out /tmp/w4 > "$OUT/w4.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
test_summary
for f in t_roll_ops t_roll_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
tarball
REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc timeout 60 python -m bench $SN --replays 9 --out "$OUT/sweep_m2" > "$OUT/sweep_m2.log" 2>&1; echo "super rc=$? $(( $(date +%s) - t0 )) s"
tarball
left=$(( 330 - ($(date +%s) - t0) ))
[ $left -gt 20 ] && { REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc4 timeout $left python -m bench $S4 --replays 9 --out "$OUT/sweep4b" > "$OUT/sweep4b.log" 2>&1; echo "4b rc=$? $(( $(date +%s) - t0 )) s"; }
tarball
grep -E "\| (128|256|512) \|" "$OUT/sweep_m2/sweep.md" 2>/dev/null | cut -c1-110
grep -E "\| (1|256|512) \|" "$OUT/sweep4b/sweep.md" 2>/dev/null | cut -c1-110
echo "total $(( $(date +%s) - t0 )) s"
