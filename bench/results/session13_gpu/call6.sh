#!/usr/bin/env bash
# Session 13, device call 6 (main after call 5's defaults: split from 128 rows):
#  A. warm compiles; the spec fuzz / teeth with the fp32 fragment flush forced into a forced split
#     (SPLIT=1, FRAG_FLUSH=1, ORDER=1: the T < 6 flush launches too);
#  B. fp32 b256 / b512 T = 4, 5: default (single launch, CUDA-core flush) vs split with the
#     fragment flush (FRAG_FLUSH=1, SPLIT=1);
#  C. the Mamba-2 spec table of the landing defaults, one run: batches 1, 32, 128, 256, 512,
#     T = 1, 2, 4, 8, fp32 / nvfp4/fp16sr / fp8/fp32 (-> $OUT/final/).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
V=REPLAYSSM_M2V
PYT="python -m pytest -q -rs -p no:cacheprovider"
S1="spec --layer mamba2 --batches 256,512 --T 4,5 --pairs fp32"
G1="d:- fs:${V}_SPLIT=1,${V}_FRAG_FLUSH=1"
FINAL="spec --layer mamba2 --batches 1,32,128,256,512 --T 1,2,4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32"
t0=$(date +%s)
( env ${V}_SPLIT=1 ${V}_FRAG_FLUSH=1 REPLAYSSM_M2_ORDER=1 timeout 240 $PYT -n 3 tests/test_gpu_spec.py -k "mamba2 and (fuzz or teeth)" > "$OUT/t_spec_fs.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec_fs.log" ) &
for s in $G1; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 240 python -m bench $S1 --warm-only --no-plots --out /tmp/w1_$n > /tmp/w1_$n.log 2>&1 ) &
done
for pr in fp32 nvfp4/fp16sr fp8/fp32; do n=${pr//\//_}
  ( timeout 280 python -m bench $FINAL --pairs $pr --warm-only --no-plots --out /tmp/wf_$n > /tmp/wf_$n.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
echo "== t_spec_fs"; grep -E "passed|failed|FAIL|rc=|Error" "$OUT/t_spec_fs.log" | tail -4
mkdir -p /tmp/ab1
OUT=/tmp/ab1 SETTINGS="$G1" BENCH_ARGS="$S1" REPLAYS=5 RUN_S=90 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab1.log 2>&1
cp /tmp/ab1/knobs.md "$OUT/knobs_t45.md"
echo "phase B $(( $(date +%s) - t0 )) s"
timeout 300 python -m bench $FINAL --deadline 280 --out "$OUT/final" > "$OUT/final.log" 2>&1
(cd /tmp && tar czf "$OUT/ab.tgz" ab1 ab1.log w1_*.log wf_*.log)
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/knobs_t45.md"; grep "^| mamba2" "$OUT/final/spec.md" | grep -v snapshot | head -80
