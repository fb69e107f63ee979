#!/usr/bin/env bash
# Session 9, device call 5: the final defaults (exact fp16-SR flush encode; verify pre-split keys
# for narrow read copies; fp8 read copies at 2 CTAs/SM from T = 4). GPU suites with nothing
# forced; nvfp4 read copies past T = 4 with the tail (A-B); the GDN verify table (spec, one run)
# and the GDN decode sweep of the defaults.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
bg() { local n=$1; shift; ( timeout "${CHECK_S:-280}" "$@" >"$OUT/$n.log" 2>&1; echo "rc=$?" >>"$OUT/$n.log" ) & }
AB="spec --layer gdn --batches 32,256 --T 8 --pairs nvfp4/fp16sr"
GS="d:- tail:REPLAYSSM_GDN_VERIFY_TAIL=1"
FINAL="spec --layer gdn --batches 1,32,256 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32"
DEC="sweep --layer gdn --shapes qwen3.5-4b --batches 1,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --phases --no-peers"
bg t_ops $PYT -n 3 tests/test_gpu_ops.py tests/test_gpu_row_order.py
bg t_spec $PYT -n 4 tests/test_gpu_spec.py -k gdn
bg t_vchk python tests/gpu_scripts/check_gdn_verify.py --quick
bg t_gchk python tests/gpu_scripts/check_gdn.py --quick --no-bench
bg w_tail env REPLAYSSM_GDN_VERIFY_TAIL=1 python -m bench $AB --warm-only --no-plots --out /tmp/w_tail
bg w_final python -m bench $FINAL --warm-only --no-plots --out /tmp/w_final
bg w_dec python -m bench $DEC --warm-only --no-plots --out /tmp/w_dec
wait
mkdir -p "$OUT/ab"
OUT="$OUT/ab" SETTINGS="$GS" BENCH_ARGS="$AB" REPLAYS=5 RUN_S=80 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/ab.log" 2>&1
timeout 150 python -m bench $FINAL --replays 7 --no-plots --out "$OUT/final" > "$OUT/final.log" 2>&1
timeout 120 python -m bench $DEC --replays 7 --no-plots --out "$OUT/dec" > "$OUT/dec.log" 2>&1
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error" "$f" | tail -4; done
for f in "$OUT"/w_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
cat "$OUT"/ab/knobs.md
grep "^| gdn" "$OUT/final/spec.md" | head -40
grep "^| qwen" "$OUT/dec/sweep.md" | head -40
cd "$OUT" && tar czf logs.tgz *.log ab final dec 2>/dev/null && rm -rf ab final dec *.log
