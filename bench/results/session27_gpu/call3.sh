#!/usr/bin/env bash
# Session 27, call 3: the Mamba-2 decode's row split (REPLAYSSM_M2_ROW_SPLIT=k: each head's P rows
# over k CTAs as virtual heads of P / k rows; written this session, not yet run).
#  A. GPU tests: the row split bit-identical to the one-CTA-per-head launch (11 pairs x (P, k) in
#     (64, 2), (64, 4), (80, 5)) and against the torch reference (4 pairs); the 256-thread twin
#     test at 6 rows (at 9 rows the small split took its steps: it never ran the 256-thread build).
#  B. Grid base / rs2 / rs4 / rs5 at b1 / b2 / b4 / b8, L8 / L16, both shapes (Super: P64 -> k 2,
#     4; Nano-4B: P80 -> k 5; the other settings fall back to k = 1 there, and nvfp4 always: drift
#     controls). Prediction (session27_gpu/call2's b1 profile): b1 non-flush span 4.1 -> ~3.3 us,
#     flush 10 -> ~4-6 (fp32), so b1 L16 fp32 5.2 -> ~4.3, fp8/fp32 and bf16/fp32 4.5-4.6 -> ~4.0;
#     b4 / b8: more CTAs than SM slots -- likely neutral or worse.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
T="timeout 210 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_ops.py"
M="sweep --layer mamba2 --batches 1,2,4,8 --L 8,16 --pairs fp32,fp8/fp32,bf16/fp32,nvfp4/fp16sr --no-peers --no-plots"
( $T -k "row_split_bit_identical and (fp16sr or bf16sr or fp8sr or fp8rn)" > "$OUT/t_bit1.log" 2>&1; echo "rc=$?" >> "$OUT/t_bit1.log" ) &
( $T -k "row_split_bit_identical and not (fp16sr or bf16sr or fp8sr or fp8rn)" > "$OUT/t_bit2.log" 2>&1; echo "rc=$?" >> "$OUT/t_bit2.log" ) &
( $T -k "row_split_matches_reference or 256_threads" > "$OUT/t_ref.log" 2>&1; echo "rc=$?" >> "$OUT/t_ref.log" ) &
for s in base:- rs2:REPLAYSSM_M2_ROW_SPLIT=2 rs4:REPLAYSSM_M2_ROW_SPLIT=4 rs5:REPLAYSSM_M2_ROW_SPLIT=5; do
  kv=${s#*:}; [ "$kv" = "-" ] && kv=
  ( env $kv timeout 200 python -m bench $M --warm-only --out /tmp/w_${s%%:*} > "$OUT/w_${s%%:*}.log" 2>&1 ) &
done 2>/dev/null
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_bit1 t_bit2 t_ref; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR|Error" "$OUT/$f.log" | head -5; done
OUT=$OUT/m SETTINGS="base:- rs2:REPLAYSSM_M2_ROW_SPLIT=2 rs4:REPLAYSSM_M2_ROW_SPLIT=4 rs5:REPLAYSSM_M2_ROW_SPLIT=5" BENCH_ARGS="$M" REPLAYS=7 RUN_S=80 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/m.log" 2>&1
tarball
echo "total $(( $(date +%s) - t0 )) s"
grep -v "^|---" "$OUT/m/knobs.md" | grep -v "standard" | cut -c1-110
