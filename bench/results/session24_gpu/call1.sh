#!/usr/bin/env bash
# Written in session 23 for the next session's first device call (not run yet).
#  A. The GPU tests session 23 could not run: test_gpu_ops -k small_batch_split (the GDN split
#     by default at b16 L16; b8 L8 passed in call 6), and, for the host-side edits after call 7
#     (the Mamba-2 kernels refuse rings not of the cache's form; the small split's env
#     semantics), test_gpu_spec -k mamba2 and test_gpu_ops -k "mamba2 or gdn_split".
#  B. The GDN sweep at b16 / 24 / 32, L8 / 16 with FLA and our standard step in the same run,
#     default vs REPLAYSSM_GDN_ORDER=0 (one launch, no order: the old default below 32 rows; at
#     b32 the default is the one launch with the order): the small-batch split's range (b24
#     untimed) and whether b32 at L <= 16 should split too.
#  C. Mamba-2 at b8 / 16 (below its order's 32 rows): default (one launch) vs the order + split
#     forced (REPLAYSSM_M2_ORDER=1,REPLAYSSM_M2_SPLIT=1), the GDN finding's analogue (session 20
#     call 3: a b8 flush step is 45-57 µs, b8 fp32 / nvfp4 ReplaySSM no faster than the standard
#     step). Prediction: 5-20 % at b16, mixed at b8 (the order's extra launch, ~2-3 µs).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/next_call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "small_batch_split or mamba2 or gdn_split" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_spec.py -k mamba2 > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
G="sweep --layer gdn --batches 16,24,32 --L 8,16 --pairs nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-plots"
M="sweep --layer mamba2 --batches 8,16 --L 8,16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-peers --no-plots"
( timeout 250 python -m bench $G --warm-only --out /tmp/w1 > "$OUT/w1.log" 2>&1 ) &
( REPLAYSSM_GDN_ORDER=0 timeout 250 python -m bench $G --warm-only --out /tmp/w2 > "$OUT/w2.log" 2>&1 ) &
( timeout 250 python -m bench $M --warm-only --out /tmp/w3 > "$OUT/w3.log" 2>&1 ) &
( REPLAYSSM_M2_ORDER=1 REPLAYSSM_M2_SPLIT=1 timeout 250 python -m bench $M --warm-only --out /tmp/w4 > "$OUT/w4.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for t in t_ops t_spec; do echo "== $t"; grep -E "passed|failed|rc=|FAILED" "$OUT/$t.log" | tail -4; done
OUT=$OUT/gs SETTINGS="new:- one:REPLAYSSM_GDN_ORDER=0" BENCH_ARGS="$G" \
  REPLAYS=7 RUN_S=90 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gs.log" 2>&1
tarball
OUT=$OUT/ms SETTINGS="one:- sp:REPLAYSSM_M2_ORDER=1,REPLAYSSM_M2_SPLIT=1" BENCH_ARGS="$M" \
  REPLAYS=7 RUN_S=80 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/ms.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "standard\|FLA" "$OUT/gs/knobs.md" | cut -c1-160
grep -v "standard" "$OUT/ms/knobs.md" | cut -c1-160
