#!/usr/bin/env bash
# Session 45, device call 2 (~8.5 min): the final code of the pair-roll rule as landed (the s43
# patch applied, the verify's roll now at T8 only: call 1 timed T4 rolled 1.034 / 1.045x slower)
#  1. GPU tests: the M2 kernel test set (m2_test_set) + the roll's own tests (decode / verify
#     bit-identical to the inline pair, the verify fuzz); the Super sweep's kernels compile
#     beside them;
#  2. the landing sweep of Nemotron-3-Super L16 (five pairs, our standard + mamba_ssm's SSU).
#   source .device/gpu_env.sh && bash docs/patches/s45_call2.sh  (run as that, now here)
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:${PYTHONPATH:-}
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; rm -rf "$OUT"; mkdir -p "$OUT"
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
grep -q "self.T >= 8" cute_kernels/mamba2_verify.py || echo "RULE NOT IN TREE"
source tests/gpu_scripts/ab_call_lib.sh
SN="sweep --shapes nemotron3-super --batches 1,8,32,128,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr,bf16/fp32"
T="timeout 330 python -m pytest -q -rs -p no:cacheprovider"
( $T -n 3 tests/test_gpu_ops.py -k "pair_roll" > "$OUT/t_roll_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_roll_ops.log" ) &
( $T -n 2 tests/test_gpu_spec.py -k "pair_roll" > "$OUT/t_roll_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_roll_spec.log" ) &
TEST_S=330 m2_test_set
( REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc timeout 330 python -m bench $SN --warm-only --no-plots --warm-jobs 2 --out /tmp/wn > "$OUT/wn.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
test_summary
for f in t_roll_ops t_roll_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
tarball
left=$(( 560 - ($(date +%s) - t0) ))
REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc timeout $left python -m bench $SN --replays 9 --out "$OUT/sweep_m2" > "$OUT/sweep_m2.log" 2>&1; echo "super rc=$? $(( $(date +%s) - t0 )) s"
tarball
cut -c1-150 "$OUT/sweep_m2/sweep.md" 2>/dev/null | head -60
echo "total $(( $(date +%s) - t0 )) s"
