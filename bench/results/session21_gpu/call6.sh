#!/usr/bin/env bash
# Session 21, device call 6: landing run of the 6-heads rule (Nano-4B: the first of 8 / 6 that
# divides H / G; host side only, the builds were tested env-forced in call 5): test_gpu_row_order
# whole (a default-dispatch case at 12 heads per group added), then the Nano-4B sweep b1..b512
# L 16 / 32 with our standard and mamba_ssm in the same run.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c6; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call6.tgz" . 2>/dev/null); }
SB="sweep --shapes nemotron3-nano-4b --batches 1,8,32,128,256,512 --L 16,32 --pairs fp32,nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr,bf16/fp32"
t0=$(date +%s)
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
( timeout 250 python -m bench $SB --warm-only --no-plots --out /tmp/wb > "$OUT/wb.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
grep -E "passed|failed|rc=|FAILED" "$OUT/t_order.log" | tail -4
timeout 150 python -m bench $SB --replays 9 --out "$OUT/sweep_nano" > "$OUT/sweep_nano.log" 2>&1; echo "nano rc=$? $(( $(date +%s) - t0 )) s"
tarball
grep -E "^\| nemotron3-nano-4b \| (1|32|256|512) \|" "$OUT/sweep_nano/sweep.md" | cut -c1-150
