#!/usr/bin/env bash
# Session 10, device call 9: the flush's fold on the tensor cores (session 5's REPLAYSSM_M2_MMA_FOLD,
# off in the verify) now that call 4 found the CUDA-core fold at 34 of a fp32 flush CTA's 103 µs:
# the spec fuzz with it forced, the A-B alone on the GPU (b256 T = 8).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
MF=REPLAYSSM_M2_MMA_FOLD
SPEC="spec --layer mamba2 --batches 256 --T 8 --pairs fp32,fp8/fp32"
GS="d:- mf:$MF=1"
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 120 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
( env $MF=1 timeout 120 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2 and (twin or teeth)" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
wait
echo "== t_spec"; grep -E "passed|failed|rc=" "$OUT/t_spec.log" | tail -3
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=45 WARM_S=15 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log)
cat "$OUT/knobs.md"
