#!/usr/bin/env bash
# Session 7, device call 1 (repo root, .device staged): GPU suites with PDL mode 2 and with the
# per-run GDN flush, then PDL mode 2 timed at every batch for both layers and the verify, and the
# per-run GDN flush timed (settings back to back, alone on the GPU; run_knob_grid.sh tables).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
bg() { local n=$1; shift; ( timeout "${CHECK_S:-210}" "$@" >"$OUT/$n.log" 2>&1; echo "rc=$?" >>"$OUT/$n.log" ) & }
M2="sweep --shapes nemotron3-super --batches 1,32,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --no-peers"
GDN="sweep --layer gdn --shapes qwen3.5-4b --batches 1,32,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --no-peers"
SPEC="spec --layer both --batches 1,256 --T 8 --pairs fp32,nvfp4/fp16sr"
bg t_pdl_ops env REPLAYSSM_PDL=2 $PYT -n 3 tests/test_gpu_ops.py tests/test_gpu_row_order.py
bg t_pdl_spec env REPLAYSSM_PDL=2 $PYT -n 3 tests/test_gpu_spec.py
bg t_runs bash -c "REPLAYSSM_GDN_FLUSH_RUNS=1 $PYT -n 2 tests/test_gpu_ops.py -k gdn; REPLAYSSM_GDN_FLUSH_RUNS=1 python tests/gpu_scripts/check_gdn.py --quick --no-bench"
for e in REPLAYSSM_PDL=0 REPLAYSSM_PDL=2; do
  bg w_m2_$e env $e python -m bench $M2 --warm-only --no-plots --out /tmp/w_m2_$e
  bg w_gdn_$e env $e python -m bench $GDN --warm-only --no-plots --out /tmp/w_gdn_$e
  bg w_spec_$e env $e python -m bench $SPEC --warm-only --no-plots --out /tmp/w_spec_$e
done
bg w_gdn_runs env REPLAYSSM_GDN_FLUSH_RUNS=1 python -m bench $GDN --warm-only --no-plots --out /tmp/w_gdn_runs
wait
grid() { local n=$1 s=$2; shift 2; mkdir -p "$OUT/$n"
  OUT="$OUT/$n" SETTINGS="$s" BENCH_ARGS="$*" REPLAYS=${REPLAYS:-5} RUN_S=${RUN_S:-65} WARM_S=30 \
    bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/$n.log" 2>&1; }
grid gdn "p0:REPLAYSSM_PDL=0 p2:REPLAYSSM_PDL=2 runs:REPLAYSSM_GDN_FLUSH_RUNS=1" $GDN
grid m2 "p0:REPLAYSSM_PDL=0 p2:REPLAYSSM_PDL=2" $M2
grid spec "p0:REPLAYSSM_PDL=0 p2:REPLAYSSM_PDL=2" $SPEC
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|rc=" "$f" | tail -4; done
for f in "$OUT"/w_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
cat "$OUT"/gdn/knobs.md "$OUT"/m2/knobs.md "$OUT"/spec/knobs.md 2>/dev/null
