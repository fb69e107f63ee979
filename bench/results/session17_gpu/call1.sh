#!/usr/bin/env bash
# Session 17, device call 1:
#  A. REPLAYSSM_GDN_FLUSH_WHOLE=1 (fp32 flush rows fold the whole-row tile they hold on the CUDA
#     cores, no second hi read): check_gdn.py --pairs fp32, test_gpu_ops -k "gdn or cuda_graph";
#     the merged wip/gdn-verify-ring-async switch: check_mamba2_verify_wide --exact;
#     warm compiles of both grids.
#  B. decode grid def / fw, fp32, b256 / b512, row-kind phases (our standard and FLA in the run);
#  C. verify grid def / ra, nvfp4/fp16sr + nvfp4/fp8sr, T = 8, b256 / b512.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs fp32 --phases"
GD="def:- fw:REPLAYSSM_GDN_FLUSH_WHOLE=1"
SV="spec --layer gdn --batches 256,512 --T 8 --pairs nvfp4/fp16sr,nvfp4/fp8sr"
GV="def:- ra:REPLAYSSM_GDN_VERIFY_RING_ASYNC=1"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
t0=$(date +%s)
( env REPLAYSSM_GDN_FLUSH_WHOLE=1 timeout 200 python tests/gpu_scripts/check_gdn.py --no-bench --pairs fp32 > "$OUT/chk_fw.log" 2>&1; echo "rc=$?" >> "$OUT/chk_fw.log" ) &
( env REPLAYSSM_GDN_FLUSH_WHOLE=1 timeout 200 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "gdn or cuda_graph" > "$OUT/t_ops_fw.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops_fw.log" ) &
( timeout 200 python tests/gpu_scripts/check_mamba2_verify_wide.py --layer gdn --env REPLAYSSM_GDN_VERIFY_RING_ASYNC --values 0,1 --exact --pairs nvfp4/fp16sr,nvfp4/fp8sr > "$OUT/ab_ra.log" 2>&1; echo "rc=$?" >> "$OUT/ab_ra.log" ) &
for s in $GD; do
  ( env $(envs "$s") timeout 200 python -m bench $SD --warm-only --no-plots --out /tmp/wd_${s%%:*} > /tmp/wd_${s%%:*}.log 2>&1 ) &
done
for s in $GV; do
  ( env $(envs "$s") timeout 200 python -m bench $SV --warm-only --no-plots --out /tmp/wv_${s%%:*} > /tmp/wv_${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
echo "== t_ops_fw"; grep -E "passed|failed|rc=" "$OUT/t_ops_fw.log" | tail -3
echo "== chk_fw"; grep -E "FAIL|rc=|all checks|exception|Error" "$OUT/chk_fw.log" | cut -c1-220 | tail -6
echo "== ab_ra"; tail -8 "$OUT/ab_ra.log" | cut -c1-220
OUT=/tmp/gd SETTINGS="$GD" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=80 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
echo "decode grid $(( $(date +%s) - t0 )) s"
OUT=/tmp/gv SETTINGS="$GV" BENCH_ARGS="$SV" REPLAYS=7 RUN_S=80 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gv.log 2>&1
echo "verify grid $(( $(date +%s) - t0 )) s"
cp -r /tmp/gd /tmp/gv "$OUT/"; cp /tmp/wd_*.log /tmp/wv_*.log "$OUT/" 2>/dev/null
(cd "$OUT" && tar czf "$FINAL/call1.tgz" . 2>/dev/null)
cp "$OUT"/chk_fw.log "$OUT/t_ops_fw.log" "$OUT/ab_ra.log" "$FINAL/"
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard bf16" /tmp/gd/knobs.md | cut -c1-200
cat /tmp/gv/knobs.md | cut -c1-200
