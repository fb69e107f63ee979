#!/usr/bin/env bash
# Session 31, call 4 (run `tools/device_slim.sh out` first, carry .device).
#  A. the flush halves tests again at the final kernel code (mode 2: two cluster barriers,
#     the first exchange pulls from the peer, the rest push; mode 2 is the nvfp4 default now).
#  B. timing: default (nvfp4 over a CTA pair, fp8 / 16-bit over two warps) vs =2 vs =0, fp32
#     too (unaffected: the b1 table). Prediction: two of the four cluster barriers gone, the
#     pair mode ~0.35 us a flush faster than in call 3 (<= 0.1 us a step): nvfp4 pair cells
#     equal or 0.1 lower; fp8/fp32 / bf16/fp32 pair cells 0.0-0.1 lower (still ~ def).
#  C. the in-kernel profile, b1 flush steps (one CTA per head: 128 rows), nvfp4/fp16sr and
#     fp8/fp32 at =2 and =0 (pair: CTA 0's record).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c4; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call4.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
E="sweep --layer gdn --shapes qwen3.5-4b,qwen3.5-122b --batches 1,2 --L 8,16 --pairs fp32,fp8/fp32,bf16/fp32,fp16sr,nvfp4/fp16sr,nvfp4/fp8sr --no-plots"
S="def:- pair:REPLAYSSM_GDN_FLUSH_HALVES=2 off:REPLAYSSM_GDN_FLUSH_HALVES=0"
( SETTINGS="$S" BENCH_ARGS="$E" WARM_S=230 WARM_JOBS=3 RUN_S=1 OUT=/tmp/c4warm \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/c4warm.log 2>&1 ) &
T="timeout 240 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
( $T -k "flush_halves and nvfp4" > "$OUT/t_h1.log" 2>&1; echo "rc=$?" >> "$OUT/t_h1.log" ) &
( $T -k "flush_halves and fp8 and not nvfp4" > "$OUT/t_h2.log" 2>&1; echo "rc=$?" >> "$OUT/t_h2.log" ) &
( $T -k "flush_halves and not fp8 and not nvfp4" > "$OUT/t_h3.log" 2>&1; echo "rc=$?" >> "$OUT/t_h3.log" ) &
( $T -k "few_ctas_full_register_cap or split_pair_half_block" > "$OUT/t_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_gdn.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_h1 t_h2 t_h3 t_gdn; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -6; done
OUT=$OUT/h SETTINGS="$S" BENCH_ARGS="$E" REPLAYS=9 RUN_S=100 WARM_S=60 WARM_JOBS=3 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/h.log" 2>&1
tarball
for h in 2 0; do REPLAYSSM_GDN_FLUSH_HALVES=$h timeout 100 python tests/gpu_scripts/prof_mamba2_replay.py \
  --layer gdn --pairs nvfp4/fp16sr,fp8/fp32 --batches 1 --modes flush,nonflush --out $OUT/p$h > $OUT/p$h.log 2>&1; done
tarball
echo "total $(( $(date +%s) - t0 )) s"
for h in 2 0; do echo "== prof halves=$h"; grep "^|" $OUT/p$h.log | grep -v "^|---" | cut -c1-180; done
grep -v "^|---" "$OUT/h/knobs.md" | grep -v standard | cut -c1-110
