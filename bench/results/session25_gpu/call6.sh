#!/usr/bin/env bash
# Session 26, call 6 (at 1aa1c4f): test_gpu_spec.py whole (call 5 ran 62 of its 83 tests before
# its 300 s limits), four processes at once.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c6; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
t0=$(date +%s)
T="timeout 290 python -m pytest -q -rs -p no:cacheprovider tests/test_gpu_spec.py"
( $T -k "fuzz_cute_every_pair and mamba2" > "$OUT/t_a.log" 2>&1; echo "rc=$?" >> "$OUT/t_a.log" ) &
( $T -k "fuzz_cute_every_pair and not mamba2" > "$OUT/t_b.log" 2>&1; echo "rc=$?" >> "$OUT/t_b.log" ) &
( $T -k "teeth or accepted_stream or snapshot" > "$OUT/t_c.log" 2>&1; echo "rc=$?" >> "$OUT/t_c.log" ) &
( $T -k "verify_tail or l32 or p80 or drafts_buffer or fold_round" > "$OUT/t_d.log" 2>&1; echo "rc=$?" >> "$OUT/t_d.log" ) &
wait
(cd "$OUT" && tar czf "$FINAL/call6.tgz" .)
echo "total $(( $(date +%s) - t0 )) s"
for f in t_a t_b t_c t_d; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
