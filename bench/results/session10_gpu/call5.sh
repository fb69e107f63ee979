#!/usr/bin/env bash
# Session 10, device call 5: from call 4's flush sub-phases -- REPLAYSSM_M2V_XDRAFT (flush rows'
# drafts x staged at the start: no round trip per head in their outputs, none in the append),
# REPLAYSSM_M2V_CB_BATCH (cb dots: all B loads first), REPLAYSSM_M2_FOLD_UNROLL=2: each
# bit-identical to the default (one process, same inputs), the A-B alone on the GPU, the spec
# fuzz with all three forced.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
XD=REPLAYSSM_M2V_XDRAFT; CB=REPLAYSSM_M2V_CB_BATCH; FU=REPLAYSSM_M2_FOLD_UNROLL
SPEC="spec --layer mamba2 --batches 256 --T 8 --pairs fp32,fp8/fp32,nvfp4/fp16sr"
GS="d:- xd:$XD=1 cb:$CB=1 all:$XD=1,$CB=1,$FU=2"
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 200 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
CHK=tests/gpu_scripts/check_mamba2_verify_wide.py
PAIRS=fp32,fp8/fp32,nvfp4/fp16sr,fp16sr
for vv in $XD:0,1 $CB:0,1 $FU:1,2; do v=${vv%%:*}
  ( env REPLAYSSM_M2_HEADS_PER_CTA=4 timeout 200 python $CHK --env $v --values ${vv#*:} --exact --pairs $PAIRS > "$OUT/t_$v.log" 2>&1; echo "rc=$?" >> "$OUT/t_$v.log" ) &
done
wait
for v in $XD $CB $FU; do echo "== $v"; cat "$OUT/t_$v.log"; done
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=50 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_d.log w_all.log)
env $XD=1 $CB=1 $FU=2 timeout 150 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2 and (twin or teeth)" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log"
for f in t_spec; do echo "== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error" "$OUT/$f.log" | tail -4; done
cat "$OUT/knobs.md"
