#!/usr/bin/env bash
# Session 11, device call 8: the landing defaults (fragment flush for fp32 from T = 6, 2 fold
# k-steps, PD 4 below T = 7 and 8 from it, L2 prefetch): spec fuzz and the quick verify check,
# then spec fp32 b256 / b512 T = 6, 7, 8: default vs REPLAYSSM_M2V_FRAG_FLUSH=0, alone on the GPU.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
FF=REPLAYSSM_M2V_FRAG_FLUSH
SPEC="spec --layer mamba2 --batches 256,512 --T 6,7,8 --pairs fp32"
GS="d:- off:$FF=0"
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 200 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
( timeout 200 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2 and (twin or teeth)" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 200 python tests/gpu_scripts/check_mamba2_verify.py --quick > "$OUT/t_chk.log" 2>&1; echo "rc=$?" >> "$OUT/t_chk.log" ) &
wait
for f in t_spec t_chk; do echo "== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error| ok " "$OUT/$f.log" | tail -6; done
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=80 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_*.log)
cat "$OUT/knobs.md"
