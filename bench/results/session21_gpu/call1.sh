#!/usr/bin/env bash
# Planned for the next session's first device call (written in session 20, not yet run).
# With the split, the non-flush launch holds no flush CTAs, so its heads per CTA are no longer
# capped by the flush tail (choose_heads_per_cta's reason for 4): more heads per CTA share the
# per-CTA fixed work (cursors, C, the cb_j dots, the decay scan: ~930 SASS per thread). CPU builds
# (m2_md5.py split1:PAIR:HPC): fp8 at 8 / 16 heads 72 registers, no spills, 1.3 / 2.0 KB smem
# (7 CTAs/SM); nvfp4 staged at 8 heads 128 registers, 57.7 KB (3 CTAs/SM), so also unstaged.
# Flush CTAs stay at 4 heads (REPLAYSSM_M2_SPLIT_HPC2=4; it defaults to the non-flush's).
#  A. correctness at 8 heads per CTA: test_gpu_row_order -k "mamba2 and split" (split forced at
#     small batches), staged and unstaged; warm compiles;
#  B. grid at Nemotron-3-Super b256 / b512 L16 (with --phases): default, 8 / 16 heads per
#     non-flush CTA, 8 unstaged, every flush row at once (FPOS 32, session 20 call 5: 1.3-1.7 %).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/next_call1.tgz" . 2>/dev/null); }
t0=$(date +%s)
( REPLAYSSM_M2_HEADS_PER_CTA=8 REPLAYSSM_M2_SPLIT_HPC2=4 timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py -k "mamba2 and split" > "$OUT/t_h8.log" 2>&1; echo "rc=$?" >> "$OUT/t_h8.log" ) &
( REPLAYSSM_M2_HEADS_PER_CTA=8 REPLAYSSM_M2_SPLIT_HPC2=4 REPLAYSSM_M2_STAGED=0 timeout 300 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_row_order.py -k "mamba2 and split" > "$OUT/t_h8s0.log" 2>&1; echo "rc=$?" >> "$OUT/t_h8s0.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for t in t_h8 t_h8s0; do echo "== $t"; grep -E "passed|failed|rc=|FAILED" "$OUT/$t.log" | tail -4; done
GH="sweep --shapes nemotron3-super --batches 256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr --no-peers --phases"
OUT=$OUT/gh SETTINGS="d:- h8:REPLAYSSM_M2_HEADS_PER_CTA=8,REPLAYSSM_M2_SPLIT_HPC2=4 h8s0:REPLAYSSM_M2_HEADS_PER_CTA=8,REPLAYSSM_M2_SPLIT_HPC2=4,REPLAYSSM_M2_STAGED=0 h16:REPLAYSSM_M2_HEADS_PER_CTA=16,REPLAYSSM_M2_SPLIT_HPC2=4 f32:REPLAYSSM_M2_SPLIT_FPOS=32" \
  BENCH_ARGS="$GH" REPLAYS=7 RUN_S=80 WARM_S=240 WARM_JOBS=5 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/gh.log" 2>&1
tarball
# C. the fp32 pair at L = 32: its shared build needs 38.7 KB of smem and 96 registers there (5
#    CTAs/SM; L16: 24 KB, 72 registers, 7), and it reads at 68-70 % of copy bandwidth (session 20
#    call 4: b256 417.5 µs vs 331.1 at L16). The split's non-flush build at L32: 72 registers,
#    1.3 KB (7 CTAs/SM). Prediction: forced split b256 L32 fp32 ~350-370 µs.
G32="sweep --shapes nemotron3-super --batches 256,512 --L 32 --pairs fp32,bf16/fp32 --no-peers --phases"
OUT=$OUT/g32 SETTINGS="s0:REPLAYSSM_M2_SPLIT=0 s1:REPLAYSSM_M2_SPLIT=1" BENCH_ARGS="$G32" REPLAYS=7 \
  RUN_S=80 WARM_S=200 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/g32.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v standard "$OUT/gh/knobs.md" | cut -c1-200
grep -v standard "$OUT/g32/knobs.md" | cut -c1-200
