#!/usr/bin/env bash
# Session 11, device call 7: the fragment flush folds 2 k-steps, not 3 (h <= R - T = 16: the
# third was always zero; 12 registers freed). GPU tests of that build (the candidate landing
# version, PD 4), off/on checks at PD 4 / 6 / 8, then spec fp32 b256 T = 6, 7, 8 at PD 4 / 6 / 8.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
FF=REPLAYSSM_M2V_FRAG_FLUSH; PD=REPLAYSSM_M2V_FRAG_PD
SPEC="spec --layer mamba2 --batches 256 --T 6,7,8 --pairs fp32"
GS="d:- p6:$PD=6 p8:$PD=8"
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 230 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
CHK=tests/gpu_scripts/check_mamba2_verify_wide.py
( timeout 230 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 230 $PYT -n 2 tests/test_gpu_ops.py tests/test_gpu_row_order.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( timeout 200 python tests/gpu_scripts/check_mamba2_verify.py --quick > "$OUT/t_chk.log" 2>&1; echo "rc=$?" >> "$OUT/t_chk.log" ) &
( for pd in 4 6 8; do for hpc in 2 4; do echo "PD=$pd hpc=$hpc"; env $PD=$pd REPLAYSSM_M2_HEADS_PER_CTA=$hpc timeout 60 python $CHK --env $FF --values 0,1 --state-tol 1e-5 --pairs fp32; echo "rc=$?"; done; done > "$OUT/t_wide.log" 2>&1 ) &
wait
for f in t_spec t_ops t_chk; do echo "== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error| ok " "$OUT/$f.log" | tail -6; done
echo "== t_wide"; grep -E "PD=|ok|FAIL|rc=" "$OUT/t_wide.log"
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=80 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_*.log)
cat "$OUT/knobs.md"
