#!/usr/bin/env bash
# Run in session 45 as docs/patches/s43_call2.sh on 69cc6a0 (call 1, H100; the patch it applies,
# docs/patches/s43_pair_roll_rule.patch, is in git history at 69cc6a0 and landed in session 45).
# Session 43, device call 2 -- NOT RUN (refused machine starts took ~1200 device-s); ready for
# the next session, ~8 min, one machine start. docs/patches/s43_pair_roll_rule.patch (s42's rolled
# pair encodes + a default rule: on for nvfp4/fp16sr at L16 in a decode split's flush half and
# the verify's flush launch) applied to this tree (new; /tmp/base = the tree as committed):
#  1. the final-code M2 GPU test set on the patched tree (its defaults now roll those builds) +
#     the roll's own GPU tests (decode / verify bit-identical to the inline pair, verify fuzz);
#  2. A/B base / new twice (ABAB: the second round shows the noise): decode Super L16 b1-b512
#     nvfp4/fp16sr + nvfp4/fp8sr --phases (nvfp4/fp8sr and b1 / b8 are identical builds:
#     controls); verify Super b256 T4 / T8 nvfp4/fp16sr + fp8/fp16sr (fp8: a control);
#  3. the roll forced in the shared kernel (b1 / b8 / b16 L16, b1 / b2 L8: ordered:nvfp4/fp16sr
#     loses its 80 / 84 B of spills rolled, 96 -> 128 registers, +8 KB smem; at b1 (hint 4, no
#     spills either way) the chunk loop 23.6 -> 15.4 KB, nvfp4/fp8sr 35.7 -> 22.0 KB) and
#     Nano-4B b256 / b512.
# Call 1 (H100, d / r1 back to back): Super L16 nvfp4/fp16sr mixed b256 159.8 -> 154.0, b512
# 299.7 -> 290.6 us (but identical non-flush halves moved 1-4 % the same way: order bias);
# verify T8 nvfp4/fp16sr 701.9 -> 680.2. Predictions: decode nvfp4/fp16sr flush only 0.95-1.0x,
# mixed 0.98-1.0x (controls within 1 %); verify T8 0.97x, T4 0.97-1.0x; shared kernel rolled
# b1-b16: 0.97-1.03x.
#   source .device/gpu_env.sh && bash docs/patches/s43_call2.sh
source .device/gpu_env.sh >/dev/null 2>&1
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; rm -rf "$OUT"; mkdir -p "$OUT"
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$OUT/gpu.txt"
source tests/gpu_scripts/ab_call_lib.sh
ab_trees docs/patches/s43_pair_roll_rule.patch || { echo "PATCH FAILED"; exit 1; }
grep -q _pair_roll_default cute_kernels/mamba2_replay.py || echo "PATCH NOT APPLIED"
E1="sweep --shapes nemotron3-super --batches 1,8,32,256,512 --L 16 --pairs nvfp4/fp16sr,nvfp4/fp8sr --no-peers --phases"
E2="spec --layer mamba2 --shapes nemotron3-super --pairs nvfp4/fp16sr,fp8/fp16sr --batches 256 --T 4,8 --L 16 --no-plots"
E3="sweep --shapes nemotron3-nano-4b --batches 256,512 --L 16 --pairs nvfp4/fp16sr --no-peers --phases"
RS="d:- r1:REPLAYSSM_M2_PAIR_ROLL=1"
RF="sweep --shapes nemotron3-super,nemotron3-nano-4b --batches 1,8,16 --L 16 --pairs nvfp4/fp16sr,nvfp4/fp8sr --no-peers --phases"
RF8="sweep --shapes nemotron3-super,nemotron3-nano-4b --batches 1,2 --L 8 --pairs nvfp4/fp16sr,nvfp4/fp8sr --no-peers --phases"
T="timeout 280 python -m pytest -q -rs -p no:cacheprovider"
( PYTHONPATH=$PWD:${PYTHONPATH:-} $T -n 3 tests/test_gpu_ops.py -k "pair_roll" > "$OUT/t_roll_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_roll_ops.log" ) &
( PYTHONPATH=$PWD:${PYTHONPATH:-} $T -n 2 tests/test_gpu_spec.py -k "pair_roll" > "$OUT/t_roll_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_roll_spec.log" ) &
TEST_S=280 m2_test_set
export WARM_S=250
ab_warm 1 2 3
( cd "$PWD" && REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc_new OUT=$OUT/force_warm SETTINGS="$RS" BENCH_ARGS="$RF" \
    RUN_S=1 WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/force_warm.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
test_summary
for f in t_roll_ops t_roll_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
tarball
export RUN_S=45
ab_run 1 2; tarball
( OUT=$OUT/r2; mkdir -p "$OUT"; ab_run 1 2 ); tarball
ab_run 3; tarball
( REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc_new OUT=$OUT/force SETTINGS="$RS" BENCH_ARGS="$RF" REPLAYS=9 \
    RUN_S=45 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/force.log" 2>&1 ); echo "force $(( $(date +%s) - t0 )) s"
( REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc_new OUT=$OUT/force8 SETTINGS="$RS" BENCH_ARGS="$RF8" REPLAYS=9 ROUNDS=2 \
    RUN_S=45 WARM_S=120 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/force8.log" 2>&1 ); echo "force8 $(( $(date +%s) - t0 )) s"
tarball
echo "== round 1"; python tests/gpu_scripts/ab_merge.py "$OUT" base new 1 2 3 | tee "$OUT/merged.md" | cut -c1-120
echo "== round 2"; python tests/gpu_scripts/ab_merge.py "$OUT/r2" base new 1 2 | tee "$OUT/r2/merged.md" | cut -c1-120
echo "== forced in the shared kernel"; cut -c1-120 "$OUT/force/knobs.md"; cut -c1-120 "$OUT/force8/knobs.md"
tarball
echo "total $(( $(date +%s) - t0 )) s"
