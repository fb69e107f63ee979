#!/usr/bin/env bash
# Session 10, device call 7: the split launch with the final defaults (x staging, drafts staged
# for flush rows of fp8 / nvfp4 reads, fold unroll 2) forced on -- bit-identical to the single
# launch (one process, same inputs, 2 and 4 heads per CTA), the spec fuzz with it forced -- and
# b512 T = 8 of the default (auto: split for fp8 / nvfp4 from 256 rows) vs forced off.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
SP=REPLAYSSM_M2V_SPLIT
SPEC="spec --layer mamba2 --batches 512 --T 8 --pairs fp8/fp32,nvfp4/fp16sr"
GS="d:- single:$SP=0"
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 200 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
CHK=tests/gpu_scripts/check_mamba2_verify_wide.py
( timeout 200 python $CHK --env $SP --values 0,1 --exact --pairs fp32,fp8/fp32,bf16/fp32,nvfp4/fp16sr,fp16sr > "$OUT/t_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_split.log"
  env REPLAYSSM_M2_HEADS_PER_CTA=4 timeout 150 python $CHK --env $SP --values 0,1 --exact --pairs fp32,nvfp4/fp16sr,fp8/fp32 >> "$OUT/t_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_split.log" ) &
( env $SP=1 timeout 200 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2 and (twin or teeth)" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
wait
cat "$OUT/t_split.log"; echo "== t_spec"; grep -E "passed|failed|rc=" "$OUT/t_spec.log" | tail -3
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=90 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log)
cat "$OUT/knobs.md"
