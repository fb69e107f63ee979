#!/usr/bin/env bash
# Session 11, device call 5: GPU tests of the landing version (the fragment flush the default
# for the fp32 pair at T >= 6: PD 4, L2 prefetch one head ahead), its off/on check at 2 and 4
# heads per CTA, then the spec bench fp32 b128 / b256 / b512, T = 5..8: default vs
# REPLAYSSM_M2V_FRAG_FLUSH=0 (session 10's flush), alone on the GPU.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
FF=REPLAYSSM_M2V_FRAG_FLUSH
SPEC="spec --layer mamba2 --batches 128,256,512 --T 5,6,7,8 --pairs fp32"
GS="d:- off:$FF=0"
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 230 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
CHK=tests/gpu_scripts/check_mamba2_verify_wide.py
( timeout 230 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 230 $PYT -n 2 tests/test_gpu_ops.py tests/test_gpu_row_order.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( timeout 200 python tests/gpu_scripts/check_mamba2_verify.py --quick > "$OUT/t_chk.log" 2>&1; echo "rc=$?" >> "$OUT/t_chk.log"
  for hpc in 2 4; do echo "hpc=$hpc"; env REPLAYSSM_M2_HEADS_PER_CTA=$hpc timeout 60 python $CHK --env $FF --values 0,1 --state-tol 1e-5 --pairs fp32; echo "rc=$?"; done > "$OUT/t_wide.log" 2>&1 ) &
wait
for f in t_spec t_ops t_chk; do echo "== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error| ok " "$OUT/$f.log" | tail -6; done
echo "== t_wide"; cat "$OUT/t_wide.log"
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=110 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_*.log)
cat "$OUT/knobs.md"
