#!/usr/bin/env bash
# Session 7, device call 2 (repo root, .device staged): the GDN q / k normalisation moved off
# warp 0 (REPLAYSSM_GDN_QK_WARP=last, new default; =0 the previous order). GPU suites of the GDN
# kernels with the new default, then old / new timed back to back (decode sweep with phases,
# verify), and the in-kernel phase profile of the new default.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
bg() { local n=$1; shift; ( timeout "${CHECK_S:-200}" "$@" >"$OUT/$n.log" 2>&1; echo "rc=$?" >>"$OUT/$n.log" ) & }
GDN="sweep --layer gdn --shapes qwen3.5-4b --batches 1,32,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --phases --no-peers"
SPEC="spec --layer gdn --batches 1,256 --T 4,8 --pairs fp32,nvfp4/fp16sr"
bg t_ops $PYT -n 3 tests/test_gpu_ops.py -k gdn
bg t_spec $PYT -n 3 tests/test_gpu_spec.py -k gdn
bg t_chk python tests/gpu_scripts/check_gdn.py --quick --no-bench
bg t_vchk python tests/gpu_scripts/check_gdn_verify.py --quick
for e in 0 last; do
  bg w_gdn_$e env REPLAYSSM_GDN_QK_WARP=$e python -m bench $GDN --warm-only --no-plots --out /tmp/w_gdn_$e
  bg w_spec_$e env REPLAYSSM_GDN_QK_WARP=$e python -m bench $SPEC --warm-only --no-plots --out /tmp/w_spec_$e
done
wait
grid() { local n=$1 s=$2; shift 2; mkdir -p "$OUT/$n"
  OUT="$OUT/$n" SETTINGS="$s" BENCH_ARGS="$*" REPLAYS=${REPLAYS:-5} RUN_S=${RUN_S:-90} WARM_S=30 \
    bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/$n.log" 2>&1; }
grid gdn "old:REPLAYSSM_GDN_QK_WARP=0 new:REPLAYSSM_GDN_QK_WARP=last" $GDN
grid spec "old:REPLAYSSM_GDN_QK_WARP=0 new:REPLAYSSM_GDN_QK_WARP=last" $SPEC
timeout 100 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --pairs fp32,nvfp4/fp16sr,fp8/fp32 \
  --batches 512 --modes nonflush --out "$OUT" > "$OUT/prof.log" 2>&1
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|rc=" "$f" | tail -4; done
for f in "$OUT"/w_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
grep "^|" "$OUT/prof.log"
cat "$OUT"/gdn/knobs.md "$OUT"/spec/knobs.md 2>/dev/null
