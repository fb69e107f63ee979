#!/usr/bin/env bash
# Session 29, call 3: where else ring_phys wins. Call 2 found Super b4 L16 16-bit reads 12.4 ->
# 9.6-11.3 us with RING_PHYS=1 forced (Nano-4B b4 L16: 1.00x; b3: <= 1.02x), fp8/fp32 Super b2 /
# b3 1.06-1.07x but Nano b1 L16 0.96x.
#  B. rp0 / rp1 forced, b3-b8, Super + Nano-4B, L8 / L16, five pairs (fp32, nvfp4 included).
#  D. fp32 b1 / b2: the early read (0.95-1.00x alone, session28_gpu/call2) with ring_phys.
#  C. phase profile, Super b4 L16 bf16/fp32 staggered, rp0 / rp1 (what the 3 us are).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
for s in rp0:0 rp1:1; do
  n=${s%%:*}; v=${s#*:}
  REPLAYSSM_M2_RING_PHYS=$v timeout 60 python tests/gpu_scripts/prof_mamba2_replay.py --pairs bf16/fp32,fp16sr --batches 4 --modes staggered,nonflush,flush --out "$OUT/prof_$n" > "$OUT/prof_$n.log" 2>&1
done
echo "prof $(( $(date +%s) - t0 )) s"; tarball
for n in rp0 rp1; do echo "== prof $n"; grep "^| " "$OUT/prof_$n.log" | grep -v "^| pair" | cut -c1-170; done
E="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 3,4,5,6,8 --L 8,16 --pairs fp32,bf16/fp32,fp16sr,fp8/fp32,nvfp4/fp16sr --no-peers --no-plots"
OUT=$OUT/rp SETTINGS="rp0:REPLAYSSM_M2_RING_PHYS=0 rp1:REPLAYSSM_M2_RING_PHYS=1" BENCH_ARGS="$E" \
  REPLAYS=9 RUN_S=200 WARM_S=220 WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/rp.log" 2>&1
tarball
E="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 1,2 --L 8,16 --pairs fp32 --no-peers --no-plots"
OUT=$OUT/f32 SETTINGS="rp0:- er_rp1:REPLAYSSM_M2_EARLY_READ=1,REPLAYSSM_M2_RING_PHYS=1" BENCH_ARGS="$E" \
  REPLAYS=9 RUN_S=90 WARM_S=120 WARM_JOBS=2 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/f32.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/rp/knobs.md" | grep -v standard | cut -c1-110
grep -v "^|---" "$OUT/f32/knobs.md" | grep -v standard | cut -c1-110
