#!/usr/bin/env bash
# Session 10, device call 2: REPLAYSSM_M2V_XSTAGE=1 (non-flush rows stage every head's x in smem
# right after the cursors: no global round trip per head) alone and with
# REPLAYSSM_M2V_PREFETCH=2 -- results bit-identical to the default (one process, same inputs),
# the A-B alone on the GPU, then the spec fuzz with both forced.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
PF=REPLAYSSM_M2V_PREFETCH; XS=REPLAYSSM_M2V_XSTAGE
SPEC="spec --layer mamba2 --batches 256 --T 8 --pairs fp32,fp8/fp32,nvfp4/fp16sr"
GS="d:- xs:$XS=1 xspf2:$XS=1,$PF=2"
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 170 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
CHK=tests/gpu_scripts/check_mamba2_verify_wide.py
PAIRS=fp32,fp8/fp32,bf16/fp32,nvfp4/fp16sr,fp16sr
( timeout 170 python $CHK --env $XS --values 0,1 --exact --pairs $PAIRS > "$OUT/t_xs.log" 2>&1; echo "rc=$?" >> "$OUT/t_xs.log"
  env REPLAYSSM_M2_HEADS_PER_CTA=4 $PF=2 timeout 120 python $CHK --env $XS --values 0,1 --exact --pairs fp32,nvfp4/fp16sr,fp8/fp32 >> "$OUT/t_xs.log" 2>&1; echo "rc=$?" >> "$OUT/t_xs.log" ) &
wait
cat "$OUT/t_xs.log"
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=60 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_d.log w_xs.log w_xspf2.log)
env $XS=1 $PF=2 timeout 140 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2 and (twin or teeth)" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log"
for f in t_spec; do echo "== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error" "$OUT/$f.log" | tail -4; done
cat "$OUT/knobs.md"
