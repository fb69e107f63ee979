#!/usr/bin/env bash
# Session 11, device call 1: GPU tests of the landing version (session 10's final defaults; the
# tree here differs only by the default-off REPLAYSSM_M2V_FRAG_FLUSH, PTX md5-identical for every
# default build), the fragment-layout fp32 verify flush forced on (spec fuzz + off/on comparison),
# then its A-B: spec b256 T = 4, 8 fp32, alone on the GPU.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
FF=REPLAYSSM_M2V_FRAG_FLUSH
SPEC="spec --layer mamba2 --batches 256 --T 4,8 --pairs fp32"
GS="d:- frag:$FF=1"
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 230 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
CHK=tests/gpu_scripts/check_mamba2_verify_wide.py
( timeout 230 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 230 $PYT -n 2 tests/test_gpu_ops.py tests/test_gpu_row_order.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( timeout 200 python tests/gpu_scripts/check_mamba2_verify.py --quick > "$OUT/t_chk.log" 2>&1; echo "rc=$?" >> "$OUT/t_chk.log"
  timeout 100 python $CHK --env REPLAYSSM_M2V_SPLIT --values 0,1 --exact --pairs fp8/fp32,nvfp4/fp16sr > "$OUT/t_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_split.log" ) &
( env $FF=1 timeout 230 $PYT -n 2 tests/test_gpu_spec.py -k "mamba2 and (twin or teeth)" > "$OUT/t_frag_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_frag_spec.log"
  timeout 100 python $CHK --env $FF --values 0,1 --state-tol 1e-5 --pairs fp32 > "$OUT/t_frag_wide.log" 2>&1; echo "rc=$?" >> "$OUT/t_frag_wide.log"
  env REPLAYSSM_M2_HEADS_PER_CTA=4 timeout 100 python $CHK --env $FF --values 0,1 --state-tol 1e-5 --pairs fp32 >> "$OUT/t_frag_wide.log" 2>&1; echo "rc=$?" >> "$OUT/t_frag_wide.log" ) &
wait
for f in t_spec t_ops t_chk t_split t_frag_spec; do echo "== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error| ok " "$OUT/$f.log" | tail -6; done
echo "== t_frag_wide"; tail -12 "$OUT/t_frag_wide.log"
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=100 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_d.log w_frag.log)
cat "$OUT/knobs.md"
