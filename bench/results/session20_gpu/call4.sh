#!/usr/bin/env bash
# Session 20, device call 4: landing run of the Mamba-2 split's wider default (from 32 rows, bf16 /
# fp16 read copies too: call 3's forced runs won there).
#  A. tests with the defaults: test_gpu_row_order (the bf16 split case added), test_gpu_ops,
#     test_gpu_spec -k mamba2; warm compiles of everything below;
#  B. grids, split off / default (and bf16 at 6 CTAs/SM: its 7-CTA non-flush build spills 20 B):
#     bf16/fp32 and fp16/fp32 at b32..b512, the other narrow pairs at b32 / b64 (L = 16);
#  C. the landing sweep: Nemotron-3-Super b1..b512 x L 8 / 16 / 32, five pairs, our standard and
#     mamba_ssm's Triton kernel in the same run; Nano-4B b256 / b512 L 16.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c4; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call4.tgz" . 2>/dev/null); }
GB="sweep --shapes nemotron3-super --batches 32,64,256,512 --L 16 --pairs bf16/fp32,fp16/fp32 --no-peers"
GN="sweep --shapes nemotron3-super --batches 32,64 --L 16 --pairs nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr --no-peers"
SN="sweep --shapes nemotron3-super --batches 1,8,32,128,256,512 --L 8,16,32 --pairs fp32,nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr,bf16/fp32"
SB="sweep --shapes nemotron3-nano-4b --batches 256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32"
t0=$(date +%s)
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_spec.py -k mamba2 > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 280 python -m bench $SN --warm-only --no-plots --out /tmp/wn > "$OUT/wn.log" 2>&1 ) &
( timeout 280 python -m bench $SB --warm-only --no-plots --out /tmp/wb > "$OUT/wb.log" 2>&1 ) &
( REPLAYSSM_M2_SPLIT=0 timeout 280 python -m bench $GB --warm-only --no-plots --out /tmp/wg0 > "$OUT/wg0.log" 2>&1;
  REPLAYSSM_M2_SPLIT_MINB1=6 timeout 200 python -m bench $GB --warm-only --no-plots --out /tmp/wg6 > "$OUT/wg6.log" 2>&1 ) &
( timeout 280 python -m bench $GB --warm-only --no-plots --out /tmp/wgd > "$OUT/wgd.log" 2>&1 ) &
( REPLAYSSM_M2_SPLIT=0 timeout 280 python -m bench $GN --warm-only --no-plots --out /tmp/wn0 > "$OUT/wn0.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for t in t_order t_ops t_spec; do echo "== $t"; grep -E "passed|failed|rc=|FAILED" "$OUT/$t.log" | tail -4; done
OUT=$OUT/gb SETTINGS="s0:REPLAYSSM_M2_SPLIT=0 d:- m6:REPLAYSSM_M2_SPLIT_MINB1=6" BENCH_ARGS="$GB" \
  REPLAYS=7 RUN_S=60 WARM_S=60 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gb.log" 2>&1
OUT=$OUT/gn SETTINGS="s0:REPLAYSSM_M2_SPLIT=0 d:-" BENCH_ARGS="$GN" \
  REPLAYS=7 RUN_S=60 WARM_S=120 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gn.log" 2>&1
echo "grids $(( $(date +%s) - t0 )) s"; tarball
timeout 150 python -m bench $SN --replays 9 --out "$OUT/sweep_m2" > "$OUT/sweep_m2.log" 2>&1; echo "nemotron rc=$? $(( $(date +%s) - t0 )) s"
timeout 60 python -m bench $SB --replays 7 --no-plots --out "$OUT/sweep_nano" > "$OUT/sweep_nano.log" 2>&1; echo "nano rc=$? $(( $(date +%s) - t0 )) s"
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard" "$OUT/gb/knobs.md" | cut -c1-200
grep -v "standard" "$OUT/gn/knobs.md" | cut -c1-200
grep -E "^\| nemotron3-super \| (1|32|256|512) \| (16|-) " "$OUT/sweep_m2/sweep.md" | cut -c1-150
