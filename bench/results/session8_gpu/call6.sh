#!/usr/bin/env bash
# Session 8, device call 6: the final defaults (Mamba-2 order entries carry the cursors; GDN
# verify tail on except nvfp4 read copies past T = 4). GPU suites with nothing forced; the
# low-precision verify at 2 CTAs/SM with the tail (the flush then has 128 registers); the GDN
# verify table of the defaults (spec, one run: standard step, snapshot, every phase).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
bg() { local n=$1; shift; ( timeout "${CHECK_S:-280}" "$@" >"$OUT/$n.log" 2>&1; echo "rc=$?" >>"$OUT/$n.log" ) & }
LP="spec --layer gdn --batches 32,256 --T 4,8 --pairs nvfp4/fp16sr,fp8/fp32"
GS="default:- tail_minb2:REPLAYSSM_GDN_VERIFY_TAIL=1,REPLAYSSM_GDN_VERIFY_MINB=2 tail_minb3:REPLAYSSM_GDN_VERIFY_TAIL=1"
FINAL="spec --layer gdn --batches 1,32,256 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32"
bg t_ops $PYT -n 3 tests/test_gpu_ops.py tests/test_gpu_row_order.py
bg t_spec $PYT -n 3 tests/test_gpu_spec.py
bg t_vchk python tests/gpu_scripts/check_gdn_verify.py --quick
bg t_m2chk python tests/gpu_scripts/check_mamba2_replay.py --quick
for s in $GS; do kv=${s#*:}; [ "$kv" = - ] && kv=; kv=${kv//,/ }
  bg w_lp_${s%%:*} env $kv python -m bench $LP --warm-only --no-plots --out /tmp/w_lp_${s%%:*}; done
wait
mkdir -p "$OUT/lp"
OUT="$OUT/lp" SETTINGS="$GS" BENCH_ARGS="$LP" REPLAYS=5 RUN_S=100 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/lp.log" 2>&1
timeout 200 python -m bench $FINAL --replays 7 --out "$OUT/final" > "$OUT/final.log" 2>&1
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|configurations|rc=" "$f" | tail -4; done
for f in "$OUT"/w_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
cat "$OUT"/lp/knobs.md
grep -A60 "^| layer" "$OUT/final/spec.md" | head -70
