#!/usr/bin/env bash
# Session 13, device call 4: the split verify's two launches at once (REPLAYSSM_M2V_SPLIT_CONCURRENT,
# flush rows on a side stream, cursors from the flush-first order).
#  A. tests: the new capture test; the spec fuzz / teeth with the concurrent split forced at small
#     batches (SPLIT=1, ORDER=1); split vs single launch bit-identity at batch 24 (ORDER=1);
#     warm compiles alongside.
#  B. fp32 b256 / b512 T = 6, 7, 8: single | split one after the other | split at once;
#     nvfp4/fp16sr, fp8/fp32 b256 T = 4, 8: split one after the other | at once.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
V=REPLAYSSM_M2V
PYT="python -m pytest -q -rs -p no:cacheprovider"
S1="spec --layer mamba2 --batches 256,512 --T 6,7,8 --pairs fp32"
S2="spec --layer mamba2 --batches 256 --T 4,8 --pairs nvfp4/fp16sr,fp8/fp32"
G1="single:${V}_SPLIT=0 seq:${V}_SPLIT_CONCURRENT=0 conc:-"
G2="seq:${V}_SPLIT_CONCURRENT=0 conc:-"
t0=$(date +%s)
( timeout 240 $PYT tests/test_gpu_ops.py -k "concurrent or cuda_graph" > "$OUT/t_conc.log" 2>&1; echo "rc=$?" >> "$OUT/t_conc.log" ) &
( env ${V}_SPLIT=1 REPLAYSSM_M2_ORDER=1 timeout 240 $PYT -n 3 tests/test_gpu_spec.py -k "mamba2 and (fuzz or teeth)" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( env REPLAYSSM_M2_ORDER=1 timeout 240 python tests/gpu_scripts/check_mamba2_verify_wide.py \
    --env ${V}_SPLIT --values 0,1 --exact --pairs fp32,fp8/fp32,bf16/fp32 > "$OUT/t_wide.log" 2>&1; echo "rc=$?" >> "$OUT/t_wide.log" ) &
for s in $G1; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 240 python -m bench $S1 --warm-only --no-plots --out /tmp/w1_$n > /tmp/w1_$n.log 2>&1 ) &
done
for s in $G2; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 240 python -m bench $S2 --warm-only --no-plots --out /tmp/w2_$n > /tmp/w2_$n.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_conc t_spec t_wide; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|Error| ok|differ" "$OUT/$f.log" | tail -6; done
mkdir -p /tmp/ab1 /tmp/ab2
OUT=/tmp/ab1 SETTINGS="$G1" BENCH_ARGS="$S1" REPLAYS=5 RUN_S=90 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab1.log 2>&1
OUT=/tmp/ab2 SETTINGS="$G2" BENCH_ARGS="$S2" REPLAYS=5 RUN_S=90 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab2.log 2>&1
cp /tmp/ab1/knobs.md "$OUT/knobs_fp32.md"; cp /tmp/ab2/knobs.md "$OUT/knobs_split_pairs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab1 ab2 ab1.log ab2.log w1_*.log w2_*.log)
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/knobs_fp32.md" "$OUT/knobs_split_pairs.md"
