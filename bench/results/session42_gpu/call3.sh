#!/usr/bin/env bash
# Session 42, device call 3: the landing sweeps on the final kernel code (0961e6e), to refresh the
# README's headline tables (sessions 21 / 18 until now), peers timed in the same run:
#  A. the Mamba-2 GPU test set again (on whichever card this call gets) beside the warm compiles;
#  B. Nemotron-3-Super b1..b512 x L 8 / 16 / 32, five pairs, our standard and mamba_ssm's Triton
#     selective_state_update; Qwen3.5-4B b1..b512 L16, five pairs, our standard and FLA's
#     fused_recurrent_gated_delta_rule; Qwen3.5-122B b256 / b512 three pairs.
#   source .device/gpu_env.sh && bash bench/results/session42_gpu/call3.sh
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; rm -rf "$OUT"; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
source tests/gpu_scripts/ab_call_lib.sh
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" . 2>/dev/null); }
SN="sweep --shapes nemotron3-super --batches 1,8,32,128,256,512 --L 8,16,32 --pairs fp32,nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr,bf16/fp32"
S4="sweep --layer gdn --shapes qwen3.5-4b --batches 1,32,64,128,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32,nvfp4/fp8sr"
SB="sweep --layer gdn --shapes qwen3.5-122b --batches 256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32"
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
TEST_S=330 m2_test_set
( timeout 330 python -m bench $SN --warm-only --no-plots --warm-jobs 3 --out /tmp/wn > "$OUT/wn.log" 2>&1 ) &
( timeout 330 python -m bench $S4 --warm-only --no-plots --warm-jobs 2 --out /tmp/w4 > "$OUT/w4.log" 2>&1 ) &
( timeout 330 python -m bench $SB --warm-only --no-plots --out /tmp/wb > "$OUT/wb.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; test_summary; tarball
timeout 120 python -m bench $SN --replays 9 --out "$OUT/sweep_m2" > "$OUT/sweep_m2.log" 2>&1; echo "super rc=$? $(( $(date +%s) - t0 )) s"; tarball
timeout 90 python -m bench $S4 --replays 9 --out "$OUT/sweep4b" > "$OUT/sweep4b.log" 2>&1; echo "4b rc=$? $(( $(date +%s) - t0 )) s"; tarball
timeout 60 python -m bench $SB --replays 7 --no-plots --out "$OUT/sweep122b" > "$OUT/sweep122b.log" 2>&1; echo "122b rc=$? $(( $(date +%s) - t0 )) s"; tarball
grep -h "Copy bandwidth" "$OUT"/sweep*/sweep.md
grep -E "^\| nemotron3-super \| (1|256|512) \| (16|-) " "$OUT/sweep_m2/sweep.md" | cut -c1-120
grep -E "^\| qwen3.5-4b \| (1|256|512) \|" "$OUT/sweep4b/sweep.md" | cut -c1-120
echo "total $(( $(date +%s) - t0 )) s"
