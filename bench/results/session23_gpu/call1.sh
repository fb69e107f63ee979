#!/usr/bin/env bash
# Session 23 call 1: the Mamba-2 fold sized for max(L, T) entries (fold_entries_max; was R - 1;
# redone this session, the session-22 branch did not survive).
#  A. GPU tests: test_gpu_spec -k mamba2 (the every-pair fuzz at L4 with T up to 8 > L holds rows
#     of max(L, T) committed entries: the new bound's edge; the fold-round tests at 16 / 32 KiB)
#     and test_gpu_row_order -k "draft_ring or single_round" (the decode on 8-draft rings).
#  B. A-B default (max) vs REPLAYSSM_M2_FOLD_ENTRIES=ring: the verify L16 T4 / 8 b256 / 512
#     (CPU builds at T8: smem fp32 46.8 -> 40.4 KB, nvfp4 71.3 -> 65.0 KB, registers unchanged)
#     and the decode on 8-draft caches L16 / 32 b32 / 256 (nvfp4 L16 shared build 4 -> 5
#     CTAs/SM). Prediction: verify within +-2 % (registers bind: 167 for nvfp4), the 8-draft
#     decode nvfp4 L16 a few % faster where the shared build runs (b32), the rest unchanged.
#  C. Nano-4B's verify at L32 (never timed; `spec --shapes`).
#  D. the GDN profiling build's first GPU run: b8 staggered / flush, fp32 vs fp8/fp32 (the split
#     pair's small-batch flush latency, session 22's open question).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_spec.py -k mamba2 > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
( timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py -k "draft_ring or single_round" > "$OUT/t_round.log" 2>&1; echo "rc=$?" >> "$OUT/t_round.log" ) &
SPEC="spec --layer mamba2 --L 16 --batches 256,512 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --no-plots"
DEC="sweep --layer mamba2 --shapes nemotron3-super --batches 32,256 --L 16,32 --max-draft 8 --pairs nvfp4/fp16sr,fp32 --no-peers --no-plots"
NANO="spec --layer mamba2 --shapes nemotron3-nano-4b --L 32 --batches 256 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --no-plots"
( timeout 250 python -m bench $SPEC --warm-only --out /tmp/w1 > "$OUT/w1.log" 2>&1;
  timeout 120 python -m bench $DEC --warm-only --out /tmp/w3 > "$OUT/w3.log" 2>&1 ) &
( REPLAYSSM_M2_FOLD_ENTRIES=ring timeout 250 python -m bench $SPEC --warm-only --out /tmp/w2 > "$OUT/w2.log" 2>&1;
  REPLAYSSM_M2_FOLD_ENTRIES=ring timeout 120 python -m bench $DEC --warm-only --out /tmp/w4 > "$OUT/w4.log" 2>&1 ) &
( timeout 250 python -m bench $NANO --warm-only --out /tmp/w5 > "$OUT/w5.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for t in t_spec t_round; do echo "== $t"; grep -E "passed|failed|rc=|FAILED" "$OUT/$t.log" | tail -4; done
OUT=$OUT/gv SETTINGS="mx:- rg:REPLAYSSM_M2_FOLD_ENTRIES=ring" BENCH_ARGS="$SPEC" \
  REPLAYS=7 RUN_S=80 WARM_S=40 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gv.log" 2>&1
tarball
OUT=$OUT/gd SETTINGS="mx:- rg:REPLAYSSM_M2_FOLD_ENTRIES=ring" BENCH_ARGS="$DEC" \
  REPLAYS=5 RUN_S=50 WARM_S=30 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gd.log" 2>&1
tarball
timeout 70 python -m bench $NANO --replays 7 --out "$OUT/nano" > "$OUT/nano.log" 2>&1
tarball
( timeout 90 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --pairs fp32,fp8/fp32 \
    --batches 8 --modes staggered,flush --out "$OUT/prof" > "$OUT/prof.log" 2>&1 )
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "snapshot\|standard" "$OUT/gv/knobs.md" | cut -c1-160
grep -v "standard" "$OUT/gd/knobs.md" | cut -c1-160
grep -E "^\|" "$OUT/nano/spec.md" 2>/dev/null | grep -v snapshot | head -20 | cut -c1-160
tail -30 "$OUT/prof.log" | cut -c1-160
