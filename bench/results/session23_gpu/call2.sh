#!/usr/bin/env bash
# Session 23 call 2 (commit 06c8653 + tests):
#  A. GPU tests of call 1's follow-ups: the verify's drafts buffer at 4 heads per CTA, T <= 4
#     (on since the rule counts the register hint's 4 CTAs/SM), the P80 outputs (one p per
#     thread, 80 threads), the fold-round tests (now 16 / 32 KiB).
#  B. Nano-4B verify L32 T4 / 8 b256: outputs by p (default) vs REPLAYSSM_M2V_OUT_ILP=0 (one
#     dependent entry loop per output, the old P80 path). Prediction: non-flush rows 10-25 %
#     faster at T8 (their outputs loop is ~1/3 of the CTA at L32), flush rows a few %.
#  C. Nemotron-3-Super verify L16 T2 / 4 b256 / 512, fp8/fp32 and bf16/fp32: the drafts buffer
#     on (default now) vs REPLAYSSM_M2V_XDRAFT=0 (what the old rule chose with the max(L, T)
#     fold sizing). Prediction from call 1 (fp8 T4: 313.3 on vs 322.7 off): 2-4 % for both.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
( timeout 230 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_spec.py -k "drafts_buffer or p80 or fold_round" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
NANO="spec --layer mamba2 --shapes nemotron3-nano-4b --L 32 --batches 256 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --no-plots"
XD="spec --layer mamba2 --L 16 --batches 256,512 --T 2,4 --pairs fp8/fp32,bf16/fp32 --no-plots"
( REPLAYSSM_M2V_OUT_ILP=0 timeout 240 python -m bench $NANO --warm-only --out /tmp/w1 > "$OUT/w1.log" 2>&1 ) &
( timeout 240 python -m bench $NANO --warm-only --out /tmp/w2 > "$OUT/w2.log" 2>&1 ) &
( timeout 240 python -m bench $XD --warm-only --out /tmp/w3 > "$OUT/w3.log" 2>&1 ) &
( REPLAYSSM_M2V_XDRAFT=0 timeout 240 python -m bench $XD --warm-only --out /tmp/w4 > "$OUT/w4.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
echo "== t_spec"; grep -E "passed|failed|rc=|FAILED" "$OUT/t_spec.log" | tail -4
OUT=$OUT/nano SETTINGS="ilp:- loop:REPLAYSSM_M2V_OUT_ILP=0" BENCH_ARGS="$NANO" \
  REPLAYS=7 RUN_S=70 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/nano.log" 2>&1
tarball
OUT=$OUT/xd SETTINGS="on:- off:REPLAYSSM_M2V_XDRAFT=0" BENCH_ARGS="$XD" \
  REPLAYS=7 RUN_S=70 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/xd.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "snapshot\|standard" "$OUT/nano/knobs.md" | cut -c1-160
grep -v "snapshot\|standard" "$OUT/xd/knobs.md" | cut -c1-160
