#!/usr/bin/env bash
# Session 12, device call 1 (tree = main 8925c3f + the cherry-picked wip/m2v-frag-lo commit,
# default-off and PTX md5-identical by default):
#  A. GPU tests of the landing version (session 11's call 9 set) and, concurrently, the
#     REPLAYSSM_M2V_FRAG_LO=1 off/on check + spec fuzz with it forced, and the warm compiles;
#  B. one knob grid at b256 T = 6 / 8 (fp32, fp8/fp32, bf16/fp32), alone on the GPU:
#     d | xd: REPLAYSSM_M2V_XDRAFT=1 | sp3: SPLIT=1 MINBLOCKS=3 | lo: FRAG_LO=1 | lo4: + FRAG_PD=4;
#  C. fp32 b32 / b64 T = 6 / 8: default vs the fragment flush forced.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
V=REPLAYSSM_M2V
SPEC="spec --layer mamba2 --batches 256 --T 6,8 --pairs fp32,fp8/fp32,bf16/fp32"
GS="d:- xd:${V}_XDRAFT=1 sp3:${V}_SPLIT=1,${V}_MINBLOCKS=3 lo:${V}_FRAG_LO=1 lo4:${V}_FRAG_LO=1,${V}_FRAG_PD=4"
SPEC2="spec --layer mamba2 --batches 32,64 --T 6,8 --pairs fp32"
GS2="d:- ff:${V}_FRAG_FLUSH=1"
t0=$(date +%s)
( timeout 230 $PYT -n 3 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 230 $PYT -n 3 tests/test_gpu_ops.py tests/test_gpu_row_order.py > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( env REPLAYSSM_M2_HEADS_PER_CTA=4 timeout 230 python tests/gpu_scripts/check_mamba2_verify_wide.py \
    --env ${V}_FRAG_LO --values 0,1 --state-tol 1e-5 --lo-frac 1e-3 --pairs fp8/fp32,bf16/fp32,fp16/fp32 \
    > "$OUT/t_lo.log" 2>&1; echo "rc=$?" >> "$OUT/t_lo.log"
  env ${V}_FRAG_LO=1 ${V}_FRAG_FLUSH=1 timeout 150 $PYT -n 2 tests/test_gpu_spec.py -k "mamba2 and (twin or teeth)" \
    > "$OUT/t_lofuzz.log" 2>&1; echo "rc=$?" >> "$OUT/t_lofuzz.log" ) &
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 230 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
for s in $GS2; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 230 python -m bench $SPEC2 --warm-only --no-plots --out /tmp/w2_$n > /tmp/w2_$n.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_spec t_ops t_lo t_lofuzz; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|Error|mismatch| ok|max" "$OUT/$f.log" | tail -8; done
mkdir -p /tmp/ab /tmp/ab2
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=70 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
OUT=/tmp/ab2 SETTINGS="$GS2" BENCH_ARGS="$SPEC2" REPLAYS=5 RUN_S=50 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab2.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"; cp /tmp/ab2/knobs.md "$OUT/knobs2.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab2 ab.log ab2.log w_*.log w2_*.log)
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/knobs.md" "$OUT/knobs2.md"
