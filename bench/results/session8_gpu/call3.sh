#!/usr/bin/env bash
# Session 8, device call 3: the GDN verify tail (REPLAYSSM_GDN_VERIFY_TAIL=1: committed keys by
# cp.async right after the cursors, ring u / drafts' v / draft keys issued after the read dots,
# the committed ring terms added by the row-owner thread in the finish). GPU suites with it on,
# old / new timed back to back (spec, GDN), then the verify phase profile with it on.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
bg() { local n=$1; shift; ( timeout "${CHECK_S:-240}" "$@" >"$OUT/$n.log" 2>&1; echo "rc=$?" >>"$OUT/$n.log" ) & }
SPEC="spec --layer gdn --batches 1,32,256 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32"
bg t_spec env REPLAYSSM_GDN_VERIFY_TAIL=1 $PYT -n 4 tests/test_gpu_spec.py -k gdn
bg t_vchk env REPLAYSSM_GDN_VERIFY_TAIL=1 python tests/gpu_scripts/check_gdn_verify.py --quick
for e in 0 1; do
  bg w_spec_$e env REPLAYSSM_GDN_VERIFY_TAIL=$e python -m bench $SPEC --warm-only --no-plots --out /tmp/w_spec_$e
done
wait
mkdir -p "$OUT/spec"
OUT="$OUT/spec" SETTINGS="old:REPLAYSSM_GDN_VERIFY_TAIL=0 new:REPLAYSSM_GDN_VERIFY_TAIL=1" \
  BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=120 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/spec.log" 2>&1
REPLAYSSM_GDN_VERIFY_TAIL=1 timeout 90 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --verify-T 8 \
  --pairs fp32,nvfp4/fp16sr --batches 256 --modes nonflush --out "$OUT" > "$OUT/prof.log" 2>&1
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|configurations|rc=" "$f" | tail -4; done
for f in "$OUT"/w_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
grep "^|" "$OUT/prof.log"
cat "$OUT"/spec/knobs.md
