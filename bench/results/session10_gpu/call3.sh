#!/usr/bin/env bash
# Session 10, device call 3: REPLAYSSM_M2V_SPLIT=1 (a verify call = a non-flush launch at its own
# occupancy, no flush code / buffers, then a flush launch), with REPLAYSSM_M2V_XSTAGE=1 (call 2's
# win) in every setting: bit-identical to the single launch (one process, same inputs), the A-B
# alone on the GPU (non-flush launch at 5 and 6 CTAs/SM), the spec fuzz with it forced.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
XS=REPLAYSSM_M2V_XSTAGE; SP=REPLAYSSM_M2V_SPLIT; SPM=REPLAYSSM_M2V_SPLIT_MINB
export $XS=1
SPEC="spec --layer mamba2 --batches 256 --T 8 --pairs fp32,fp8/fp32,nvfp4/fp16sr"
GS="xs:- split5:$SP=1 split6:$SP=1,$SPM=6"
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 200 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
CHK=tests/gpu_scripts/check_mamba2_verify_wide.py
( timeout 200 python $CHK --env $SP --values 0,1 --exact --pairs fp32,fp8/fp32,bf16/fp32,nvfp4/fp16sr,fp16sr > "$OUT/t_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_split.log"
  env REPLAYSSM_M2_HEADS_PER_CTA=4 timeout 150 python $CHK --env $SP --values 0,1 --exact --pairs fp32,nvfp4/fp16sr,fp8/fp32 >> "$OUT/t_split.log" 2>&1; echo "rc=$?" >> "$OUT/t_split.log" ) &
wait
cat "$OUT/t_split.log"
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=60 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_xs.log w_split5.log w_split6.log)
env $SP=1 timeout 150 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2 and (twin or teeth)" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log"
for f in t_spec; do echo "== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error" "$OUT/$f.log" | tail -4; done
cat "$OUT/knobs.md"
