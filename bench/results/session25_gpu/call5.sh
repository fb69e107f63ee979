#!/usr/bin/env bash
# Session 26, call 5 (at e22c1f5, the landing tree): the GPU suites the pf_early rules can reach
# beyond calls 2-3 -- verify / spec fuzz (decode steps between verifies at small batches), the
# model integrations, and the rest of test_gpu_ops -- four processes at once, 300 s each.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c5; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
t0=$(date +%s)
T="timeout 300 python -m pytest -q -rs -p no:cacheprovider"
( $T tests/test_gpu_spec.py -k mamba2 > "$OUT/t_spec_m2.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec_m2.log" ) &
( $T tests/test_gpu_spec.py -k "not mamba2" > "$OUT/t_spec_other.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec_other.log" ) &
( $T tests/test_gpu_integration.py > "$OUT/t_integ.log" 2>&1; echo "rc=$?" >> "$OUT/t_integ.log" ) &
( $T tests/test_gpu_ops.py -k "not (replay_step or cuda_graph or out_of_range or exact_recurrence or small_batch or half_block)" > "$OUT/t_ops_rest.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops_rest.log" ) &
wait
(cd "$OUT" && tar czf "$FINAL/call5.tgz" .)
echo "total $(( $(date +%s) - t0 )) s"
for f in t_spec_m2 t_spec_other t_integ t_ops_rest; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
