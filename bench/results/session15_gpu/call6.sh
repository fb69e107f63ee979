#!/usr/bin/env bash
# Session 15, device call 6 (call 5 was a 13 s bench.timing check):
#  A. check_gdn.py (decode, default level): fp32 with REPLAYSSM_GDN_WHOLE_ROWS=1 (each warp
#     instruction reads a whole 512-byte row of the fp32 read copy); the default build of three
#     preamble-3 pairs (gate inputs now loaded as raw bits, converted after the tile's issue);
#     warm compiles;
#  B. decode grid: default / whole rows / whole rows + preamble 3, b256 / b512, row-kind phases.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --phases --no-peers"
GD="def:- wr:REPLAYSSM_GDN_WHOLE_ROWS=1 wrp3:REPLAYSSM_GDN_WHOLE_ROWS=1,REPLAYSSM_GDN_PREAMBLE=3"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
C=tests/gpu_scripts/check_gdn.py
t0=$(date +%s)
( env REPLAYSSM_GDN_WHOLE_ROWS=1 timeout 240 python $C --no-bench --pairs fp32 > "$OUT/chk_wr.log" 2>&1; echo "rc=$?" >> "$OUT/chk_wr.log" ) &
( timeout 240 python $C --no-bench --pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32 > "$OUT/chk_p3.log" 2>&1; echo "rc=$?" >> "$OUT/chk_p3.log" ) &
for s in $GD; do
  ( env $(envs "$s") timeout 240 python -m bench $SD --warm-only --no-plots --out /tmp/w_d${s%%:*} > /tmp/w_d${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in chk_wr chk_p3; do echo "== $f"; grep -E "FAIL|rc=|all checks|exception" "$OUT/$f.log" | cut -c1-220 | tail -5; done
mkdir -p /tmp/gd
OUT=/tmp/gd SETTINGS="$GD" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=100 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
(cd /tmp && tar czf "$OUT/call6.tgz" gd gd.log w_*.log 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
cat /tmp/gd/knobs.md | cut -c1-200
