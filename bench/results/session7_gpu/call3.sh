#!/usr/bin/env bash
# Session 7, device call 3 (repo root, .device staged): the new defaults (PDL mode 2 on the decode
# kernels; GDN preamble 3 = q / k and the mma B fragments in the last warp, the read tile issued
# before the cursor fence and the gates) under the GPU suites; GDN preamble 2 vs 3 timed back to
# back (decode with phases, verify); the phase profile of preamble 3.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
bg() { local n=$1; shift; ( timeout "${CHECK_S:-230}" "$@" >"$OUT/$n.log" 2>&1; echo "rc=$?" >>"$OUT/$n.log" ) & }
GDN="sweep --layer gdn --shapes qwen3.5-4b --batches 1,32,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --phases --no-peers"
bg t_ops $PYT -n 3 tests/test_gpu_ops.py tests/test_gpu_row_order.py
bg t_spec $PYT -n 3 tests/test_gpu_spec.py
bg t_chk python tests/gpu_scripts/check_gdn.py --quick --no-bench
bg t_vchk python tests/gpu_scripts/check_gdn_verify.py --quick
bg t_m2 python tests/gpu_scripts/check_mamba2_replay.py --quick
SPEC="spec --layer gdn --batches 256 --T 4,8 --pairs fp32,nvfp4/fp16sr"
for e in 2 3; do
  bg w_gdn_$e env REPLAYSSM_GDN_PREAMBLE=$e python -m bench $GDN --warm-only --no-plots --out /tmp/w_gdn_$e
  bg w_spec_$e env REPLAYSSM_GDN_PREAMBLE=$e python -m bench $SPEC --warm-only --no-plots --out /tmp/w_spec_$e
done
wait
grid() { local n=$1 s=$2; shift 2; mkdir -p "$OUT/$n"
  OUT="$OUT/$n" SETTINGS="$s" BENCH_ARGS="$*" REPLAYS=${REPLAYS:-5} RUN_S=${RUN_S:-90} WARM_S=30 \
    bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/$n.log" 2>&1; }
grid gdn "pre2:REPLAYSSM_GDN_PREAMBLE=2 pre3:REPLAYSSM_GDN_PREAMBLE=3" $GDN
RUN_S=60 grid spec "pre2:REPLAYSSM_GDN_PREAMBLE=2 pre3:REPLAYSSM_GDN_PREAMBLE=3" $SPEC
timeout 100 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --pairs fp32,nvfp4/fp16sr,fp8/fp32 \
  --batches 512 --modes nonflush --out "$OUT" > "$OUT/prof.log" 2>&1
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|rc=" "$f" | tail -4; done
for f in "$OUT"/w_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
grep "^|" "$OUT/prof.log"
cat "$OUT"/gdn/knobs.md "$OUT"/spec/knobs.md 2>/dev/null
