#!/usr/bin/env bash
# Session 12, device call 5 (main 84cc213):
#  A. bf16 / fp16 drafts staging (new default): XDRAFT 0 / 1 bit-identical, spec fuzz twin/teeth;
#  B. fp32 b256 T = 6 / 7 / 8 with the hoisted preamble: d | pd6 | l2 (READ_L2PF=2) |
#     sp (split launch) | spl (split + READ_L2PF=1 in its non-flush launch) | fl0 (FRAG_L2PF=0).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
V=REPLAYSSM_M2V
SPEC="spec --layer mamba2 --batches 256 --T 6,7,8 --pairs fp32"
GS="d:- pd6:${V}_FRAG_PD=6 l2:${V}_READ_L2PF=2 sp:${V}_SPLIT=1 spl:${V}_SPLIT=1,${V}_READ_L2PF=1 fl0:${V}_FRAG_L2PF=0"
t0=$(date +%s)
( env REPLAYSSM_M2_HEADS_PER_CTA=4 timeout 150 python tests/gpu_scripts/check_mamba2_verify_wide.py \
    --env ${V}_XDRAFT --values 0,1 --exact --pairs bf16/fp32,fp16/fp32 \
    > "$OUT/t_wide.log" 2>&1; echo "rc=$?" >> "$OUT/t_wide.log" ) &
( timeout 200 $PYT -n 3 tests/test_gpu_spec.py -k "mamba2 and (twin or teeth)" \
    > "$OUT/t_fuzz.log" 2>&1; echo "rc=$?" >> "$OUT/t_fuzz.log" ) &
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 200 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_wide t_fuzz; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|Error| ok" "$OUT/$f.log" | tail -6; done
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=60 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_*.log)
echo "total $(( $(date +%s) - t0 )) s"
cat "$OUT/knobs.md"
