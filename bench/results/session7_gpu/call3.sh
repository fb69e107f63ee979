#!/usr/bin/env bash
# Session 7, device call 3 (repo root, .device staged): the new defaults (PDL mode 2 on the decode
# kernels; GDN preamble 2 = q / k and the mma B fragments in the last warp) under the GPU suites;
# GDN preamble 1 vs 2 timed back to back (decode with phases); the phase profile of preamble 2.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
bg() { local n=$1; shift; ( timeout "${CHECK_S:-230}" "$@" >"$OUT/$n.log" 2>&1; echo "rc=$?" >>"$OUT/$n.log" ) & }
GDN="sweep --layer gdn --shapes qwen3.5-4b --batches 1,32,256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32 --phases --no-peers"
bg t_ops $PYT -n 3 tests/test_gpu_ops.py tests/test_gpu_row_order.py
bg t_spec $PYT -n 3 tests/test_gpu_spec.py
bg t_chk python tests/gpu_scripts/check_gdn.py --quick --no-bench
bg t_vchk python tests/gpu_scripts/check_gdn_verify.py --quick
bg t_m2 python tests/gpu_scripts/check_mamba2_replay.py --quick
for e in 1 2; do
  bg w_gdn_$e env REPLAYSSM_GDN_PREAMBLE=$e python -m bench $GDN --warm-only --no-plots --out /tmp/w_gdn_$e
done
wait
grid() { local n=$1 s=$2; shift 2; mkdir -p "$OUT/$n"
  OUT="$OUT/$n" SETTINGS="$s" BENCH_ARGS="$*" REPLAYS=${REPLAYS:-5} RUN_S=${RUN_S:-90} WARM_S=30 \
    bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/$n.log" 2>&1; }
grid gdn "pre1:REPLAYSSM_GDN_PREAMBLE=1 pre2:REPLAYSSM_GDN_PREAMBLE=2" $GDN
timeout 100 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --pairs nvfp4/fp16sr,fp8/fp32 \
  --batches 512 --modes nonflush --out "$OUT" > "$OUT/prof.log" 2>&1
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|rc=" "$f" | tail -4; done
for f in "$OUT"/w_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
grep "^|" "$OUT/prof.log"
cat "$OUT"/gdn/knobs.md 2>/dev/null
