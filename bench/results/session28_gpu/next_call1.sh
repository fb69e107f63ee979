#!/usr/bin/env bash
# First device call of the next session (written in session 28; not run yet).
# Run `tools/device_slim.sh out` first, carry .device; `tools/device_slim.sh in` after.
#  A. GPU tests of what session 28 left un-run: REPLAYSSM_M2_RING_PHYS=1/2 bit-identical to the
#     default (16 tests), the early-read test in its final form (the rule path, unset switches,
#     against EARLY_READ=0) and the row-split bit-identical test through the changed helper.
#  B. timing alone, rp0 / rp1 / rp2, b1 / b2 / b4, Super + Nano-4B, L8 / L16, four pairs.
#     Prediction: at b1 the non-flush CTA's preamble issue + cb + scan (1.07 us fp32, 1.26
#     bf16/fp32 in session28_gpu/call3) shrink by one L2 round trip (~0.3 us): steps
#     -0.15..0.35 us at b1 / b2, neutral at b4 (several CTAs per SM hide it).
#  C. the b1 non-flush phase profile for rp0 / rp2 (fp32, bf16/fp32, nvfp4/fp16sr).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/next_call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
T="timeout 240 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
( $T -k "ring_phys" > "$OUT/t_rp.log" 2>&1; echo "rc=$?" >> "$OUT/t_rp.log" ) &
( $T -k "early_wide_read or (row_split_bit_identical and fp8)" > "$OUT/t_bit.log" 2>&1; echo "rc=$?" >> "$OUT/t_bit.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_rp t_bit; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
E="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 1,2,4 --L 8,16 --pairs fp32,bf16/fp32,nvfp4/fp16sr,fp8/fp32 --no-peers --no-plots"
OUT=$OUT/rp SETTINGS="rp0:- rp1:REPLAYSSM_M2_RING_PHYS=1 rp2:REPLAYSSM_M2_RING_PHYS=2" BENCH_ARGS="$E" \
  REPLAYS=9 RUN_S=120 WARM_S=150 WARM_JOBS=3 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/rp.log" 2>&1
echo "rp $(( $(date +%s) - t0 )) s"; tarball
for s in rp0:- rp2:REPLAYSSM_M2_RING_PHYS=2; do
  n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  env $kv timeout 80 python tests/gpu_scripts/prof_mamba2_replay.py --pairs fp32,bf16/fp32,nvfp4/fp16sr --batches 1 --modes nonflush --out "$OUT/prof_$n" > "$OUT/prof_$n.log" 2>&1
done
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/rp/knobs.md" | grep -v standard | cut -c1-110
for n in rp0 rp2; do echo "== prof $n"; grep "^| " "$OUT/prof_$n.log" | grep -v "^| pair" | cut -c1-170; done
