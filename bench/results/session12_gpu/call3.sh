#!/usr/bin/env bash
# Session 12, device call 3: the Mamba-2 verify's preamble loads hoisted (REPLAYSSM_M2V_PRE_HOIST)
# and the read-copy L2 prefetch after the cursors for non-flush rows only (READ_L2PF_LATE).
#  A. bit-identity of PRE_HOIST 0 / 1 (4 pairs at 4 heads per CTA, fp32 at 2), spec fuzz with it,
#     warm compiles;  B. spec b256 T = 4 / 8: d | h | hl | l;  C. phase profile fp32 T = 8, d / h.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
V=REPLAYSSM_M2V
SPEC="spec --layer mamba2 --batches 256 --T 4,8 --pairs fp32,fp8/fp32,nvfp4/fp16sr"
GS="d:- h:${V}_PRE_HOIST=1 hl:${V}_PRE_HOIST=1,${V}_READ_L2PF=1,${V}_READ_L2PF_LATE=1 l:${V}_READ_L2PF=1,${V}_READ_L2PF_LATE=1"
t0=$(date +%s)
( env REPLAYSSM_M2_HEADS_PER_CTA=4 timeout 200 python tests/gpu_scripts/check_mamba2_verify_wide.py \
    --env ${V}_PRE_HOIST --values 0,1 --exact --pairs fp32,fp8/fp32,nvfp4/fp16sr,bf16/fp32 \
    > "$OUT/t_wide.log" 2>&1; echo "rc=$?" >> "$OUT/t_wide.log"
  env REPLAYSSM_M2_HEADS_PER_CTA=2 timeout 100 python tests/gpu_scripts/check_mamba2_verify_wide.py \
    --env ${V}_PRE_HOIST --values 0,1 --exact --pairs fp32 \
    >> "$OUT/t_wide.log" 2>&1; echo "rc=$?" >> "$OUT/t_wide.log" ) &
( env ${V}_PRE_HOIST=1 timeout 200 $PYT -n 3 tests/test_gpu_spec.py -k "mamba2 and (twin or teeth)" \
    > "$OUT/t_fuzz.log" 2>&1; echo "rc=$?" >> "$OUT/t_fuzz.log" ) &
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env ${kv//,/ } timeout 200 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_wide t_fuzz; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|Error| ok" "$OUT/$f.log" | tail -8; done
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=75 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
mkdir -p "$OUT/prof_d" "$OUT/prof_h"
timeout 90 python tests/gpu_scripts/prof_mamba2_replay.py --verify-T 8 --pairs fp32 --batches 256 \
  --modes nonflush,flush --out "$OUT/prof_d" > "$OUT/prof_d.log" 2>&1
env ${V}_PRE_HOIST=1 timeout 90 python tests/gpu_scripts/prof_mamba2_replay.py --verify-T 8 --pairs fp32 \
  --batches 256 --modes nonflush,flush --out "$OUT/prof_h" > "$OUT/prof_h.log" 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_*.log)
echo "total $(( $(date +%s) - t0 )) s"
for f in prof_d prof_h; do echo "== $f"; grep -E "^\||per " "$OUT/$f.log" | grep -v "^|---" || tail -5 "$OUT/$f.log"; done
cat "$OUT/knobs.md"
