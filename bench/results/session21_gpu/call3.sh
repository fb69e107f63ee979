#!/usr/bin/env bash
# Session 21, device call 3: landing run of the split's new defaults (host side only: builds
# already timed / tested env-forced in calls 1-2): 8 heads per non-flush CTA (nvfp4 from 64 rows,
# fp8 from 256, others from 128; flush CTAs stay at choose_heads_per_cta's 4), and the split for
# fp32 / 16-bit read copies from L = 32 and 128 rows.
#  A. GPU tests: test_gpu_row_order (new: default dispatch at H / G = 16, wide non-flush CTAs),
#     test_gpu_ops, test_gpu_spec -k mamba2; warm compiles of B and C;
#  B. grids: wide pairs at L32 b64..b512 single launch / default / split forced; fp8 / nvfp4 at
#     L16 b64..b512 4 heads (the old split) / default;
#  C. the landing sweep (as session 20 call 4): Nemotron-3-Super b1..b512 x L 8 / 16 / 32, five
#     pairs, our standard and mamba_ssm's Triton kernel in the same run.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" --exclude='warm_*' . 2>/dev/null); }
GW="sweep --shapes nemotron3-super --batches 64,128,256,512 --L 32 --pairs fp32,bf16/fp32 --no-peers"
GN="sweep --shapes nemotron3-super --batches 64,128,256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32 --no-peers"
SN="sweep --shapes nemotron3-super --batches 1,8,32,128,256,512 --L 8,16,32 --pairs fp32,nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr,bf16/fp32"
t0=$(date +%s)
( timeout 330 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_spec.py -k mamba2 > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 280 python -m bench $SN --warm-only --no-plots --out /tmp/wn > "$OUT/wn.log" 2>&1 ) &
( REPLAYSSM_M2_SPLIT=0 timeout 250 python -m bench $GW --warm-only --no-plots --out /tmp/w1 > "$OUT/w1.log" 2>&1 ) &
( REPLAYSSM_M2_SPLIT=1 timeout 250 python -m bench $GW --warm-only --no-plots --out /tmp/w2 > "$OUT/w2.log" 2>&1 ) &
( REPLAYSSM_M2_HEADS_PER_CTA=4 timeout 250 python -m bench $GN --warm-only --no-plots --out /tmp/w3 > "$OUT/w3.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for t in t_order t_ops t_spec; do echo "== $t"; grep -E "passed|failed|rc=|FAILED" "$OUT/$t.log" | tail -4; done
OUT=$OUT/gw SETTINGS="s0:REPLAYSSM_M2_SPLIT=0 d:- s1:REPLAYSSM_M2_SPLIT=1" BENCH_ARGS="$GW" \
  REPLAYS=7 RUN_S=50 WARM_S=60 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gw.log" 2>&1
OUT=$OUT/gn SETTINGS="h4:REPLAYSSM_M2_HEADS_PER_CTA=4 d:-" BENCH_ARGS="$GN" \
  REPLAYS=7 RUN_S=50 WARM_S=60 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gn.log" 2>&1
echo "grids $(( $(date +%s) - t0 )) s"; tarball
timeout 150 python -m bench $SN --replays 9 --out "$OUT/sweep_m2" > "$OUT/sweep_m2.log" 2>&1; echo "nemotron rc=$? $(( $(date +%s) - t0 )) s"
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard" "$OUT/gw/knobs.md" | cut -c1-200
grep -v "standard" "$OUT/gn/knobs.md" | cut -c1-200
grep -E "^\| nemotron3-super \| (1|32|256|512) \| (16|32|-) " "$OUT/sweep_m2/sweep.md" | cut -c1-150
