#!/usr/bin/env bash
# Session 42, device call 3b (NOT RUN: no machine started; ready for the next session; also runs
# m2_test_set on the committed tree, owed on the H200 for 0961e6e): s42_call_sweeps_roll.sh cut to ~7 device-min (seven refused machine starts took the
# rest): docs/patches/s42_pair_roll.patch in a copy (/tmp/new), its GPU tests, and env-switch
# grids in that tree: verify Super b256 T8 fp8/fp16sr + nvfp4/fp16sr (d = default: pair off for
# fp8, on for nvfp4; p1 = pair on; r1 = pair on + rolled encodes); decode Super L16 b256 / b512
# fp8/fp16sr, nvfp4/fp8sr, nvfp4/fp16sr --phases (d = pair on inline, the default; r1 = rolled).
# Predictions (flush-only cells): verify fp8/fp16sr r1 ~0.95x of d, nvfp4/fp16sr 0.95-0.98x;
# decode fp8/fp16sr 0.90-0.97x, nvfp4/fp16sr ~0.97x, nvfp4/fp8sr 0.90-1.02x (a shorter loop, but
# 5 -> 4 CTAs/SM and 76 B of spills); mixed cells a third to a half of that.
#   source .device/gpu_env.sh && bash docs/patches/s42_next_call.sh
source .device/gpu_env.sh >/dev/null 2>&1
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; rm -rf "$OUT"; mkdir -p "$OUT"
tarball() { (cd "$OUT" && tar czf "$FINAL/call3b.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
export REPLAYS=7 WARM_S=250
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
source tests/gpu_scripts/ab_call_lib.sh
new_copy docs/patches/s42_pair_roll.patch && grep -q PAIR_ROLL_ENV /tmp/new/cute_kernels/mamba2_replay.py \
  || echo "PATCH FAILED"
RG1="spec --layer mamba2 --shapes nemotron3-super --pairs fp8/fp16sr,nvfp4/fp16sr --batches 256 --T 8 --L 16 --no-plots"
RS1="d:- p1:REPLAYSSM_M2_FOLD_PAIR=1 r1:REPLAYSSM_M2_FOLD_PAIR=1,REPLAYSSM_M2_PAIR_ROLL=1"
RG2="sweep --shapes nemotron3-super --batches 256,512 --L 16 --pairs fp8/fp16sr,nvfp4/fp8sr,nvfp4/fp16sr --no-peers --phases"
RS2="d:- r1:REPLAYSSM_M2_PAIR_ROLL=1"
T="timeout 260 python -m pytest -q -rs -p no:cacheprovider"
( cd /tmp/new && PYTHONPATH=/tmp/new:$PYTHONPATH $T -n 4 tests/test_gpu_ops.py -k "pair_roll" \
    > "$OUT/t_roll_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_roll_ops.log" ) &
( cd /tmp/new && PYTHONPATH=/tmp/new:$PYTHONPATH $T -n 3 tests/test_gpu_spec.py -k "pair_roll" \
    > "$OUT/t_roll_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_roll_spec.log" ) &
TEST_S=300 m2_test_set   # the final-code M2 kernel set on this (committed) tree: owed on the H200
( new_grid warm_r1 "$RS1" "$RG1" 1 ) &
( new_grid warm_r2 "$RS2" "$RG2" 1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
test_summary
for f in t_roll_ops t_roll_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
tarball
new_grid roll_verify "$RS1" "$RG1" 45; echo "roll verify $(( $(date +%s) - t0 )) s"; tarball
new_grid roll_decode "$RS2" "$RG2" 60; echo "roll decode $(( $(date +%s) - t0 )) s"; tarball
grep -v "standard\|snapshot" "$OUT/roll_verify/knobs.md" | cut -c1-160
cat "$OUT/roll_decode/knobs.md" | cut -c1-160
echo "total $(( $(date +%s) - t0 )) s"
