#!/usr/bin/env bash
# Session 12, device call 2 (main fa8f03f): the read copy's L2 bulk prefetch knobs.
#  A. correctness, concurrently with the warm compiles: the verify with REPLAYSSM_M2V_READ_L2PF
#     0 / 2 (bit-identical required), test_gpu_ops -k mamba2 with both knobs at 2, and
#     test_gpu_spec -k mamba2 on the defaults (the fragment flush now from 2 heads per CTA);
#  B. timing alone on the GPU: verify b256 T = 4 / 8 d | v1 | v2; decode b256 / b512 d | r1 | r2.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
SPEC="spec --layer mamba2 --batches 256 --T 4,8 --pairs fp32,fp8/fp32,nvfp4/fp16sr"
GS="d:- v1:REPLAYSSM_M2V_READ_L2PF=1 v2:REPLAYSSM_M2V_READ_L2PF=2"
SW="sweep --shapes nemotron3-super --batches 256,512 --L 16 --pairs fp32,fp8/fp32,nvfp4/fp16sr --phases --no-peers"
GD="d:- r1:REPLAYSSM_M2_READ_L2PF=1 r2:REPLAYSSM_M2_READ_L2PF=2"
t0=$(date +%s)
( env REPLAYSSM_M2_HEADS_PER_CTA=4 timeout 200 python tests/gpu_scripts/check_mamba2_verify_wide.py \
    --env REPLAYSSM_M2V_READ_L2PF --values 0,2 --exact --pairs fp32,fp8/fp32,nvfp4/fp16sr \
    > "$OUT/t_wide.log" 2>&1; echo "rc=$?" >> "$OUT/t_wide.log" ) &
( env REPLAYSSM_M2_READ_L2PF=2 REPLAYSSM_M2V_READ_L2PF=2 timeout 220 $PYT -n 3 tests/test_gpu_ops.py -k mamba2 \
    > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( timeout 220 $PYT -n 3 tests/test_gpu_spec.py -k mamba2 > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 220 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
for s in $GD; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 220 python -m bench $SW --warm-only --no-plots --out /tmp/wd_$n > /tmp/wd_$n.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_wide t_ops t_spec; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|Error| ok" "$OUT/$f.log" | tail -6; done
mkdir -p /tmp/ab /tmp/abd
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=75 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
echo "grid V $(( $(date +%s) - t0 )) s"
OUT=/tmp/abd SETTINGS="$GD" BENCH_ARGS="$SW" REPLAYS=5 RUN_S=75 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/abd.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs_verify.md"; cp /tmp/abd/knobs.md "$OUT/knobs_decode.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab abd ab.log abd.log w_*.log wd_*.log)
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/knobs_verify.md" "$OUT/knobs_decode.md"
