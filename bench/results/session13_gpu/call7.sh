#!/usr/bin/env bash
# Session 13, device call 7 (the landing version): the concurrent-split capture test and the
# spec fuzz / teeth (-k mamba2) alongside the warm compiles; b128 T = 4, 5 fp32 single launch vs
# the (default) split with the fragment flush; the Mamba-2 spec table, one run (-> $OUT/final/).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
V=REPLAYSSM_M2V
PYT="python -m pytest -q -rs -p no:cacheprovider"
S1="spec --layer mamba2 --batches 128 --T 4,5 --pairs fp32"
G1="single:${V}_SPLIT=0 d:-"
FINAL="spec --layer mamba2 --batches 1,32,128,256,512 --T 1,2,4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32"
t0=$(date +%s)
( timeout 200 $PYT -n 3 tests/test_gpu_spec.py -k "mamba2 and (fuzz or teeth)" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 200 $PYT tests/test_gpu_ops.py -k "concurrent" > "$OUT/t_conc.log" 2>&1; echo "rc=$?" >> "$OUT/t_conc.log" ) &
for s in $G1; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 200 python -m bench $S1 --warm-only --no-plots --out /tmp/w1_$n > /tmp/w1_$n.log 2>&1 ) &
done
for pr in fp32 nvfp4/fp16sr fp8/fp32; do n=${pr//\//_}
  ( timeout 200 python -m bench $FINAL --pairs $pr --warm-only --no-plots --out /tmp/wf_$n > /tmp/wf_$n.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_spec t_conc; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|Error" "$OUT/$f.log" | tail -4; done
mkdir -p /tmp/ab1
OUT=/tmp/ab1 SETTINGS="$G1" BENCH_ARGS="$S1" REPLAYS=5 RUN_S=60 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab1.log 2>&1
cp /tmp/ab1/knobs.md "$OUT/knobs_b128_t45.md"
timeout 150 python -m bench $FINAL --deadline 140 --out "$OUT/final" > "$OUT/final.log" 2>&1
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/knobs_b128_t45.md"; grep "^| mamba2" "$OUT/final/spec.md" | grep -E "\| (128|256|512) \| (4|8) \|" | grep -v snapshot
