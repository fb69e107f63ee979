#!/usr/bin/env bash
# Session 28, call 2 (run with carry .device after tools/device_slim.sh out).
#  A. timing alone on the GPU, two knob grids:
#     xs: pf_early's x_buf prefetch span under the row split: old (R*P/k contiguous from the
#         part's first row; TMP_XSPAN_OLD=1 = HEAD's PTX) vs new ((R-1)*P_full + P/k), Super
#         b4 / b6 L8 (k = 2) and fp32 b4 / b8 L16;
#     er: the first head's 16-bit / fp32 read copy issued before the preamble (EARLY_READ=1)
#         with the occupancy hint 4 (110 registers, no spills; 72 + 160 B spills at the
#         default 7), against the hint alone and the default, b1 / b2 (one or two CTAs per SM).
#  B. GPU tests: the new bit-identical early-read test, the row-split bit-identical test through
#     the refactored helper, the Mamba-2 twin tests under EARLY_READ=1 + MINBLOCKS=4, and the
#     two verify-variant spec tests call 1 did not reach.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
X="sweep --layer mamba2 --shapes nemotron3-super --batches 4,6,8 --L 8,16 --pairs fp32,fp8/fp32,bf16/fp32 --no-peers --no-plots"
OUT=$OUT/xs SETTINGS="old:TMP_XSPAN_OLD=1 new:-" BENCH_ARGS="$X" REPLAYS=7 RUN_S=80 WARM_S=100 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/xs.log" 2>&1
echo "xs $(( $(date +%s) - t0 )) s"; tarball
E="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 1,2 --L 8,16 --pairs fp32,bf16/fp32,fp16sr --no-peers --no-plots"
OUT=$OUT/er SETTINGS="def:- mb4:REPLAYSSM_M2_MINBLOCKS=4 er4:REPLAYSSM_M2_EARLY_READ=1,REPLAYSSM_M2_MINBLOCKS=4" \
  BENCH_ARGS="$E" REPLAYS=9 RUN_S=90 WARM_S=120 WARM_JOBS=3 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/er.log" 2>&1
echo "er $(( $(date +%s) - t0 )) s"; tarball
( timeout 200 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "early_wide_read or (row_split_bit_identical and fp32)" > "$OUT/t_bit.log" 2>&1; echo "rc=$?" >> "$OUT/t_bit.log" ) &
( REPLAYSSM_M2_EARLY_READ=1 REPLAYSSM_M2_MINBLOCKS=4 timeout 200 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py -k "(replay_step and mamba2) or default_row_split or row_split_matches" > "$OUT/t_er.log" 2>&1; echo "rc=$?" >> "$OUT/t_er.log" ) &
( timeout 200 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_spec.py -k "gdn_verify_l32 and (fp8 or bf16)" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
wait
tarball
echo "total $(( $(date +%s) - t0 )) s"
for f in t_bit t_er t_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
for g in xs er; do grep -v "^|---" "$OUT/$g/knobs.md" | grep -v standard | cut -c1-110; done
