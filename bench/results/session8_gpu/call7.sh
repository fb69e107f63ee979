#!/usr/bin/env bash
# Session 8, device call 7: the GDN verify read dots on the tensor cores (REPLAYSSM_GDN_VERIFY_MMA=1:
# tf32 mma.sync, 2 per k-step for read copies exact in tf32, 3xTF32 for fp32). GPU suites with it
# on (every GDN verify test, the 1000-step fp32 fuzz included), then default / mma / mma + tail
# forced on (nvfp4 past T = 4) timed back to back.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
bg() { local n=$1; shift; ( timeout "${CHECK_S:-300}" "$@" >"$OUT/$n.log" 2>&1; echo "rc=$?" >>"$OUT/$n.log" ) & }
SPEC="spec --layer gdn --batches 32,256 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32"
GS="default:- mma:REPLAYSSM_GDN_VERIFY_MMA=1 mma_tail:REPLAYSSM_GDN_VERIFY_MMA=1,REPLAYSSM_GDN_VERIFY_TAIL=1"
bg t_spec env REPLAYSSM_GDN_VERIFY_MMA=1 $PYT -n 4 tests/test_gpu_spec.py -k gdn
bg t_vchk env REPLAYSSM_GDN_VERIFY_MMA=1 python tests/gpu_scripts/check_gdn_verify.py --quick
for s in $GS; do kv=${s#*:}; [ "$kv" = - ] && kv=; kv=${kv//,/ }
  bg w_${s%%:*} env $kv python -m bench $SPEC --warm-only --no-plots --out /tmp/w_${s%%:*}; done
wait
mkdir -p "$OUT/spec"
OUT="$OUT/spec" SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=100 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/spec.log" 2>&1
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error" "$f" | tail -6; done
for f in "$OUT"/w_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
cat "$OUT"/spec/knobs.md
