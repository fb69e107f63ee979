#!/usr/bin/env bash
# Session 19's plan, device call 2: landing run of the Mamba-2 decode split -- run it only if
# call1's grid shows the split ahead (set its defaults from that grid first: SPLIT_NONFLUSH_MINB,
# the fold unroll, SPLIT_MIN_BATCH), on the branch merged into main.
#  A. tests with the defaults: test_gpu_row_order (both layers), test_gpu_ops (everything),
#     test_gpu_spec -k mamba2 (the verify split's host path moved to ConcurrentHalves); warm;
#  B. landing sweep: Nemotron-3-Super b1..b512 L16, five pairs, our standard and mamba_ssm's
#     Triton kernel in the same run; Nano-4B b256 / b512.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SN="sweep --shapes nemotron3-super --batches 1,32,128,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr,bf16/fp32"
SB="sweep --shapes nemotron3-nano-4b --batches 256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32"
t0=$(date +%s)
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_spec.py -k mamba2 > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 280 python -m bench $SN --warm-only --no-plots --out /tmp/wn > /tmp/wn.log 2>&1 ) &
( timeout 280 python -m bench $SB --warm-only --no-plots --out /tmp/wb > /tmp/wb.log 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for t in t_order t_ops t_spec; do echo "== $t"; grep -E "passed|failed|rc=|FAILED" "$OUT/$t.log" | tail -4; done
timeout 180 python -m bench $SN --replays 9 --out "$OUT/sweep_m2" > "$OUT/sweep_m2.log" 2>&1; echo "nemotron rc=$? $(( $(date +%s) - t0 )) s"
timeout 80 python -m bench $SB --replays 7 --no-plots --out "$OUT/sweep_nano" > "$OUT/sweep_nano.log" 2>&1; echo "nano rc=$? $(( $(date +%s) - t0 )) s"
cp /tmp/wn.log /tmp/wb.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call2.tgz" . 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
grep -E "^\| nemotron" "$OUT/sweep_m2/sweep.md" | cut -c1-190
grep -E "^\| nemotron3-nano" "$OUT/sweep_nano/sweep.md" | cut -c1-190
