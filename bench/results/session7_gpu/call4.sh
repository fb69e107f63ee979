#!/usr/bin/env bash
# Session 7, device call 4 (repo root, .device staged): GDN preamble 2 (read tile issued before
# the cursors and the gates; the arrive ordered by a data dependency, no fence) under the GDN GPU
# suites; preamble 1 (default) vs 2 timed back to back with FLA in the same runs.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
bg() { local n=$1; shift; ( timeout "${CHECK_S:-200}" "$@" >"$OUT/$n.log" 2>&1; echo "rc=$?" >>"$OUT/$n.log" ) & }
GDN="sweep --layer gdn --shapes qwen3.5-4b --batches 1,32,128,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --phases"
bg t_ops env REPLAYSSM_GDN_PREAMBLE=2 $PYT -n 3 tests/test_gpu_ops.py -k gdn
bg t_spec env REPLAYSSM_GDN_PREAMBLE=2 $PYT -n 3 tests/test_gpu_spec.py -k gdn
bg t_chk env REPLAYSSM_GDN_PREAMBLE=2 python tests/gpu_scripts/check_gdn.py --quick --no-bench
for e in 1 2; do
  bg w_gdn_$e env REPLAYSSM_GDN_PREAMBLE=$e python -m bench $GDN --warm-only --no-plots --out /tmp/w_gdn_$e
done
wait
mkdir -p "$OUT/gdn"
OUT="$OUT/gdn" SETTINGS="pre1:REPLAYSSM_GDN_PREAMBLE=1 pre2:REPLAYSSM_GDN_PREAMBLE=2" BENCH_ARGS="$GDN" \
  REPLAYS=5 RUN_S=110 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gdn.log" 2>&1
REPLAYSSM_GDN_PREAMBLE=2 timeout 60 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn \
  --pairs fp32,nvfp4/fp16sr --batches 512 --modes nonflush --out "$OUT" > "$OUT/prof.log" 2>&1
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|rc=" "$f" | tail -4; done
for f in "$OUT"/w_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
grep "^|" "$OUT/prof.log"
cat "$OUT"/gdn/knobs.md
