#!/usr/bin/env bash
# Session 18, device call 4: landing run of the split defaults (from 64 rows; non-flush half at
# 6 CTAs/SM for nvfp4 / fp8 read copies, 5 else).
#  A. tests: test_gpu_row_order -k gdn, test_gpu_ops -k "gdn or cuda_graph" (defaults),
#     check_gdn.py Qwen-shaped trace at 96 rows (default split); warm compiles;
#  B. grid on the flush half: default / 1 CTA per SM (no spills) / 4 positions;
#  C. landing sweeps: Qwen3.5-4B b1..b512 five pairs with our standard and FLA; 122B b256 / b512.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c4; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32 --no-peers"
GD="d:- f1:REPLAYSSM_GDN_SPLIT_MINB2=1 p4:REPLAYSSM_GDN_SPLIT_FPOS=4"
S4="sweep --layer gdn --shapes qwen3.5-4b --batches 1,32,64,128,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32,nvfp4/fp8sr"
SB="sweep --layer gdn --shapes qwen3.5-122b --batches 256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
( timeout 250 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py -k gdn > "$OUT/t_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_split.log" ) &
( timeout 250 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "gdn or cuda_graph" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( timeout 250 python tests/gpu_scripts/check_gdn.py --no-bench --quick --pairs nvfp4/fp16sr --Ls 4 --qwen-batch 96 --qwen-pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32 > "$OUT/chk_b96.log" 2>&1; echo "rc=$?" >> "$OUT/chk_b96.log" ) &
for s in $GD; do
  ( env $(envs "$s") timeout 200 python -m bench $SD --warm-only --no-plots --out /tmp/wd_${s%%:*} > /tmp/wd_${s%%:*}.log 2>&1 ) &
done
( timeout 240 python -m bench $S4 --warm-only --no-plots --out /tmp/w4 > /tmp/w4.log 2>&1 ) &
( timeout 240 python -m bench $SB --warm-only --no-plots --out /tmp/wb > /tmp/wb.log 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
echo "== t_split"; grep -E "passed|failed|rc=" "$OUT/t_split.log" | tail -3
echo "== t_ops"; grep -E "passed|failed|rc=" "$OUT/t_ops.log" | tail -3
echo "== chk_b96"; grep -E "qwen .* b96|FAIL|rc=|all checks|exception|Error" "$OUT/chk_b96.log" | cut -c1-200 | tail -6
OUT=/tmp/gd SETTINGS="$GD" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=60 WARM_S=20 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
timeout 150 python -m bench $S4 --replays 9 --out "$OUT/sweep4b" > "$OUT/sweep4b.log" 2>&1; echo "4b rc=$? $(( $(date +%s) - t0 )) s"
timeout 80 python -m bench $SB --replays 7 --no-plots --out "$OUT/sweep122b" > "$OUT/sweep122b.log" 2>&1; echo "122b rc=$? $(( $(date +%s) - t0 )) s"
cp -r /tmp/gd "$OUT/"; cp /tmp/wd_*.log /tmp/w4.log /tmp/wb.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call4.tgz" . 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard" /tmp/gd/knobs.md | cut -c1-200
grep -E "^\| qwen3.5" "$OUT/sweep4b/sweep.md" | cut -c1-190
grep -E "^\| qwen3.5-122b" "$OUT/sweep122b/sweep.md" | cut -c1-190
