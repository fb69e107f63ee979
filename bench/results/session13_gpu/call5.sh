#!/usr/bin/env bash
# Session 13, device call 5 (main e7f786c):
#  A. the GPU tests of the landing version (test_gpu_spec -k mamba2, test_gpu_ops,
#     test_gpu_row_order) alongside the warm compiles;
#  B. fp32 b256 / b512 T = 8 around the concurrent split: non-flush launch at 4 / 6 CTAs/SM
#     (SPLIT_MINB), flush launch hi 12 deep (FRAG_PD);
#  C. b128 T = 4 / 8, fp32, nvfp4/fp16sr, fp8/fp32: single launch vs concurrent split (the split
#     is on by default from 256 rows).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
V=REPLAYSSM_M2V
PYT="python -m pytest -q -rs -p no:cacheprovider"
S1="spec --layer mamba2 --batches 256,512 --T 8 --pairs fp32"
S2="spec --layer mamba2 --batches 128 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32"
G1="conc:- mb4:${V}_SPLIT_MINB=4 mb6:${V}_SPLIT_MINB=6 pd12:${V}_FRAG_PD=12"
G2="single:${V}_SPLIT=0 split:${V}_SPLIT=1"
t0=$(date +%s)
( timeout 260 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 260 $PYT -n 3 tests/test_gpu_ops.py tests/test_gpu_row_order.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
for s in $G1; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 260 python -m bench $S1 --warm-only --no-plots --out /tmp/w1_$n > /tmp/w1_$n.log 2>&1 ) &
done
for s in $G2; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 260 python -m bench $S2 --warm-only --no-plots --out /tmp/w2_$n > /tmp/w2_$n.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_spec t_ops; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|Error" "$OUT/$f.log" | tail -6; done
mkdir -p /tmp/ab1 /tmp/ab2
OUT=/tmp/ab1 SETTINGS="$G1" BENCH_ARGS="$S1" REPLAYS=5 RUN_S=90 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab1.log 2>&1
OUT=/tmp/ab2 SETTINGS="$G2" BENCH_ARGS="$S2" REPLAYS=5 RUN_S=90 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab2.log 2>&1
cp /tmp/ab1/knobs.md "$OUT/knobs_fp32.md"; cp /tmp/ab2/knobs.md "$OUT/knobs_b128.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab1 ab2 ab1.log ab2.log w1_*.log w2_*.log)
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/knobs_fp32.md" "$OUT/knobs_b128.md"
