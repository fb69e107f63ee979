#!/usr/bin/env bash
# Session 10, device call 1: (a) session 9's void check (tf32 dots off / on, one process);
# (b) REPLAYSSM_M2V_PREFETCH (non-flush read-copy loads one head ahead, 2 = head 0 during the
# preamble): bit-identical outputs and caches vs 0, then the A-B (alone on the GPU), then the
# spec fuzz with it forced.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
PF=REPLAYSSM_M2V_PREFETCH
SPEC="spec --layer mamba2 --batches 256 --T 8 --pairs fp32,fp8/fp32,nvfp4/fp16sr"
GS="d:- pf1:$PF=1 pf2:$PF=2"
for s in $GS; do n=${s%%:*}; kv=${s#*:}; [ "$kv" = "-" ] && kv=""
  ( env $kv timeout 170 python -m bench $SPEC --warm-only --no-plots --out /tmp/w_$n > /tmp/w_$n.log 2>&1 ) &
done
( timeout 170 python tests/gpu_scripts/check_mamba2_verify_wide.py > "$OUT/t_wide.log" 2>&1; echo "rc=$?" >> "$OUT/t_wide.log" ) &
( timeout 170 python tests/gpu_scripts/check_mamba2_verify_wide.py --env $PF --values 0,2 --exact --pairs fp32,fp8/fp32,bf16/fp32,nvfp4/fp16sr,fp16sr > "$OUT/t_pf.log" 2>&1; echo "rc=$?" >> "$OUT/t_pf.log"
  env REPLAYSSM_M2_HEADS_PER_CTA=4 timeout 120 python tests/gpu_scripts/check_mamba2_verify_wide.py --env $PF --values 0,1 --exact --pairs fp32,nvfp4/fp16sr >> "$OUT/t_pf.log" 2>&1; echo "rc=$?" >> "$OUT/t_pf.log" ) &
wait
cat "$OUT/t_wide.log" "$OUT/t_pf.log"
mkdir -p /tmp/ab
OUT=/tmp/ab SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=70 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/ab.log 2>&1
cp /tmp/ab/knobs.md "$OUT/knobs.md"
(cd /tmp && tar czf "$OUT/ab.tgz" ab ab.log w_d.log w_pf2.log)
( timeout 130 python tests/gpu_scripts/check_mamba2_verify.py --quick > "$OUT/t_chk.log" 2>&1; echo "rc=$?" >> "$OUT/t_chk.log" ) &
env $PF=2 timeout 140 $PYT -n 4 tests/test_gpu_spec.py -k "mamba2 and (twin or teeth)" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log"
wait
for f in t_chk t_spec; do echo "== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error" "$OUT/$f.log" | tail -4; done
cat "$OUT/knobs.md"
