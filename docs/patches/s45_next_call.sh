#!/usr/bin/env bash
# Ready for session 46 (~6 min, meant for an H200; not run in session 45: its H200 start was
# refused) on the committed final code:
#  1. GPU tests: the M2 kernel test set (m2_test_set) + the pair roll's tests -- the H200 run owed
#     since session 42 (every run so far on an H100);
#  2. re-measures after session 45's bench audit (the bench now draws the verify's acceptance in
#     1..T as the snapshot's, was 0..T; up to 1024 slot sets, was 64 -- b1 nvfp4 pools sat in L2):
#     the verify targets (spec, b256 T4 / T8, Mamba-2 Super and GDN Qwen3.5-4B, with the standard
#     step and the snapshot baseline) and the Super L16 sweep b1..b512 (five pairs, our standard +
#     mamba_ssm) for the README's headline table and the b1 target.
#   source .device/gpu_env.sh && bash docs/patches/s45_next_call.sh
# (TEST_S=s caps each test log, SKIP_SWEEP=1 drops step 2's Super sweep: a short budget)
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:${PYTHONPATH:-}
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; rm -rf "$OUT"; mkdir -p "$OUT"
tarball() { (cd "$OUT" && tar czf "$FINAL/call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
source tests/gpu_scripts/ab_call_lib.sh
SN="sweep --shapes nemotron3-super --batches 1,8,32,128,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr,bf16/fp32"
VM="spec --layer mamba2 --shapes nemotron3-super --pairs fp32,nvfp4/fp16sr,fp8/fp32 --batches 256 --T 4,8 --L 16 --no-plots"
VG="spec --layer gdn --shapes qwen3.5-4b --pairs fp32,nvfp4/fp16sr,fp8/fp32 --batches 256 --T 4,8 --L 16 --no-plots"
T="timeout 300 python -m pytest -q -rs -p no:cacheprovider"
( $T -n 3 tests/test_gpu_ops.py -k "pair_roll" > "$OUT/t_roll_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_roll_ops.log" ) &
( $T -n 2 tests/test_gpu_spec.py -k "pair_roll" > "$OUT/t_roll_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_roll_spec.log" ) &
TEST_S=${TEST_S:-300} m2_test_set
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc
[ -n "${SKIP_SWEEP:-}" ] || ( timeout 300 python -m bench $SN --warm-only --no-plots --warm-jobs 2 --out /tmp/wn > "$OUT/wn.log" 2>&1 ) &
( timeout 300 python -m bench $VM --warm-only --out /tmp/wvm > "$OUT/wvm.log" 2>&1 ) &
( timeout 300 python -m bench $VG --warm-only --out /tmp/wvg > "$OUT/wvg.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
test_summary
for f in t_roll_ops t_roll_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
tarball
timeout 60 python -m bench $VM --replays 9 --out "$OUT/spec_m2" > "$OUT/spec_m2.log" 2>&1; echo "spec m2 rc=$? $(( $(date +%s) - t0 )) s"; tarball
timeout 60 python -m bench $VG --replays 9 --out "$OUT/spec_gdn" > "$OUT/spec_gdn.log" 2>&1; echo "spec gdn rc=$? $(( $(date +%s) - t0 )) s"; tarball
[ -n "${SKIP_SWEEP:-}" ] || timeout 90 python -m bench $SN --replays 9 --out "$OUT/sweep_m2" > "$OUT/sweep_m2.log" 2>&1; echo "super rc=$? $(( $(date +%s) - t0 )) s"; tarball
grep -E "^- |\| (256) \| (4|8) \|" "$OUT/spec_m2/spec.md" "$OUT/spec_gdn/spec.md" 2>/dev/null | cut -c1-150
grep -E "\| (1|256|512) \|" "$OUT/sweep_m2/sweep.md" 2>/dev/null | cut -c1-110
echo "total $(( $(date +%s) - t0 )) s"
