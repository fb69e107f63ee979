#!/usr/bin/env bash
# Session 16, device call 6 (call 5 again after its fix: the fold-layout read took chunk 16 q + 4 c4 + 4 t instead of 16 q + 4 t + c4 -- out of the row, an illegal address): fp32 flush rows fold the read tile they already hold
# (REPLAYSSM_GDN_FLUSH_FROM_TILE=1: parked in shared memory at the flush's start, 2: right
# before the fold) instead of loading hi again.
#  A. check_gdn.py --pairs fp32 with 1 and with 2 forced; warm compiles;
#  B. grid def / f1 / f2, fp32, b256 / b512, row-kind phases, our standard and FLA in each run.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c6; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs fp32 --phases"
G="def:- f1:REPLAYSSM_GDN_FLUSH_FROM_TILE=1 f2:REPLAYSSM_GDN_FLUSH_FROM_TILE=2"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
for v in 1 2; do
  ( env REPLAYSSM_GDN_FLUSH_FROM_TILE=$v timeout 170 python tests/gpu_scripts/check_gdn.py --no-bench --pairs fp32 > "$OUT/chk_f$v.log" 2>&1; echo "rc=$?" >> "$OUT/chk_f$v.log" ) &
done
( env REPLAYSSM_GDN_FLUSH_FROM_TILE=2 timeout 170 python -m pytest -q -rs -p no:cacheprovider -n 2 tests/test_gpu_ops.py -k "gdn or cuda_graph" > "$OUT/t_ops_f2.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops_f2.log" ) &
for s in $G; do
  ( env $(envs "$s") timeout 170 python -m bench $SD --warm-only --no-plots --out /tmp/w_${s%%:*} > /tmp/w_${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
echo "== t_ops_f2"; grep -E "passed|failed|rc=" "$OUT/t_ops_f2.log" | tail -3
for v in 1 2; do echo "== chk_f$v"; grep -E "FAIL|rc=|all checks|exception|Error" "$OUT/chk_f$v.log" | cut -c1-220 | tail -5; done
OUT=/tmp/gd SETTINGS="$G" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=80 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
cp -r /tmp/gd "$OUT/"; cp /tmp/w_*.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call6.tgz" . 2>/dev/null)
cp "$OUT"/chk_f*.log "$OUT/t_ops_f2.log" "$FINAL/"
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard bf16" /tmp/gd/knobs.md | cut -c1-200
