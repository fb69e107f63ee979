#!/usr/bin/env bash
# Session 25, call 2 (run in session 26): the pf_early defaults (GDN: on without a row order;
# Mamba-2: up to 8 MiB of read copy per launch).
#  A. GPU tests at the defaults: twin steps vs the torch reference, CUDA-graph capture,
#     out-of-range slots, exact recurrences, the small-batch splits and half blocks.
#  B. GDN fp32 read copies never take the row order, so pf_early is on at every batch there:
#     off vs default at b16 / b64 / b256 L16, both shapes (bf16/fp32 takes the order from 32
#     rows: its b64 / b256 cells are the same build, a drift control). Prediction: b16 1.0-1.1x,
#     b64 / b256 0.95-1.0x (session 15: a bulk L2 prefetch of the fp32 tile at the slot cost
#     non-flush b256 173.6 -> 200.5 us, the same queueing the Mamba-2 rule avoids).
#  C. Landing sweeps at b1 / b8, L8 / L16, with the peers in the same run (FLA, mamba_ssm).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
G="sweep --layer gdn --batches 16,64,256 --L 16 --pairs fp32,bf16/fp32 --no-peers --no-plots --deadline 50"
SM="sweep --layer mamba2 --batches 1,8 --L 8,16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-plots"
SG="sweep --layer gdn --batches 1,8 --L 8,16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-plots"
( timeout 240 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "replay_step or cuda_graph or out_of_range or exact_recurrence or small_batch or half_block" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( REPLAYSSM_GDN_PF_EARLY=0 timeout 200 python -m bench ${G% --deadline*} --warm-only --out /tmp/wg0 > "$OUT/wg0.log" 2>&1 ) &
( timeout 200 python -m bench ${G% --deadline*} --warm-only --out /tmp/wg1 > "$OUT/wg1.log" 2>&1 ) &
( timeout 220 python -m bench $SM --warm-only --out /tmp/wsm > "$OUT/wsm.log" 2>&1 ) &
( timeout 220 python -m bench $SG --warm-only --out /tmp/wsg > "$OUT/wsg.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
echo "== t_ops"; grep -E "passed|failed|rc=|FAILED|Error" "$OUT/t_ops.log" | tail -8
OUT=$OUT/g SETTINGS="off:REPLAYSSM_GDN_PF_EARLY=0 new:-" BENCH_ARGS="$G" REPLAYS=7 RUN_S=55 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g.log" 2>&1
tarball
timeout 90 python -m bench $SM --replays 7 --deadline 80 --out "$OUT/sm" > "$OUT/sm.log" 2>&1; tarball
timeout 90 python -m bench $SG --replays 7 --deadline 80 --out "$OUT/sg" > "$OUT/sg.log" 2>&1; tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/g/knobs.md" | cut -c1-110
grep -E "^Copy|^\| [a-z]" "$OUT/sm/sweep.md" | cut -c1-100
grep -E "^Copy|^\| [a-z]" "$OUT/sg/sweep.md" | cut -c1-100
