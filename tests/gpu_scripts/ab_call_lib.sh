# Shared steps of an A/B device call (source it from a call script run in the repository root on
# the device, with .device carried): an unpatched copy of the tree beside the patched one, the
# final-code Mamba-2 GPU test set, one bench grid per tree with its own kernel cache, one table.
#   source tests/gpu_scripts/ab_call_lib.sh
#   ab_trees P1.patch [P2.patch ...] || exit 1   # /tmp/base = this tree; patches applied here
#   E1="sweep ..."; E2="spec ..."                 # the grids' bench arguments
#   ab_warm 1 2                                   # (background) compiles of both trees
#   m2_test_set; wait; test_summary               # the GPU tests on this (patched) tree
#   ab_run 1 2                                    # base then new, grid by grid
#   python tests/gpu_scripts/ab_merge.py "$OUT" base new 1 2
# Or, for env-switch grids of a patch in one tree while this tree stays as committed:
#   new_copy P.patch || exit 1                    # /tmp/new = this tree + the patch
#   new_grid NAME "d:- r1:VAR=1" "$ARGS" RUN_S     # a knob grid in /tmp/new ($OUT/NAME)
# OUT: where the logs and grids go (set by the caller before sourcing).

ab_trees() {  # copy the tree to /tmp/base, then apply the patches here, in order
  rm -rf /tmp/base && cp -r "$PWD" /tmp/base || return 1
  local p
  for p in "$@"; do
    patch -p1 --forward < "$p" > /dev/null || { echo "patch $p failed"; return 1; }
  done
}

ab_grid() {  # TREE NAME N [warm]: grid N (bench arguments in $EN) in TREE, its own kernel cache
  local B
  eval "B=\$E$3"
  (cd "$1" && PYTHONPATH="$1:${PYTHONPATH:-}" REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc_$2 OUT=$OUT/g$3_$2 SETTINGS="$2:-" \
     BENCH_ARGS="$B" REPLAYS=9 RUN_S=${RUN_S:-80} WARM_S=${WARM_S:-240} WARM_JOBS=1 \
     bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/grid$3_$2_${4:-run}.log" 2>&1)
}

ab_warm() {  # N ...: both trees' compiles of those grids, in the background
  local n
  for n in "$@"; do
    ( RUN_S=1 ab_grid /tmp/base base "$n" warm ) &
    ( RUN_S=1 ab_grid "$PWD" new "$n" warm ) &
  done
}

ab_run() {  # N ...: base then new, grid by grid
  local n
  for n in "$@"; do
    ab_grid /tmp/base base "$n"; ab_grid "$PWD" new "$n"
    echo "g$n $(( $(date +%s) - ${t0:-0} )) s"
  done
}

m2_test_set() {  # the final-code Mamba-2 GPU test set on this tree, in the background
  local T="timeout ${TEST_S:-300} python -m pytest -q -rs -p no:cacheprovider"
  ( PYTHONPATH=$PWD:${PYTHONPATH:-} $T -n 4 tests/test_gpu_ops.py -k "fold_pair_bit_identical or flush_v1 or (mamba2 and replay_step_matches_torch_reference) or mamba2_decode_at_256_threads or philox_rounds" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
  ( PYTHONPATH=$PWD:${PYTHONPATH:-} $T -n 4 tests/test_gpu_row_order.py -k "mamba2" > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
  ( PYTHONPATH=$PWD:${PYTHONPATH:-} $T -n 3 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
}

test_summary() {  # one line per test log of m2_test_set, and its failures
  local f
  for f in t_ops t_order t_spec; do
    echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"
    grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8
  done
}

new_copy() {  # P.patch ...: /tmp/new = this tree with the patches applied (this tree unchanged)
  rm -rf /tmp/new && cp -r "$PWD" /tmp/new || return 1
  local p
  for p in "$@"; do
    (cd /tmp/new && patch -p1 --forward < "$p" > /dev/null) || { echo "patch $p failed"; return 1; }
  done
}

new_grid() {  # NAME SETTINGS ARGS RUN_S: a knob grid (run_knob_grid.sh) in /tmp/new, its own cache
  (cd /tmp/new && PYTHONPATH=/tmp/new:${PYTHONPATH:-} REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc_new OUT=$OUT/$1 \
     SETTINGS="$2" BENCH_ARGS="$3" REPLAYS=${REPLAYS:-9} RUN_S=${4:-80} WARM_S=${WARM_S:-240} \
     WARM_JOBS=3 bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/$1.log" 2>&1)
}
