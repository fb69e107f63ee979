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
# OUT: where the logs and grids go (set by the caller before sourcing, or by call_setup).
# A call script's header and background tests:
#   call_setup call1                              # PYTHONPATH, FINAL, OUT=/tmp/call1, t0, the card
#   bg_pytest t_ops 4 tests/test_gpu_ops.py "expr"   # $OUT/t_ops.log, its last line rc=
#   tarball                                       # $OUT (less warm-up logs) -> $FINAL/call1.tgz
#   bg_warm 1 "$SETTINGS" "$ARGS" 240             # compiles of a knob grid's settings, background

call_setup() {  # NAME: FINAL = the fetched folder ($OUT as the device gives it), OUT = /tmp/NAME
  export PYTHONPATH=$PWD:${PYTHONPATH:-}
  FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
  CALL_NAME=$1; OUT=/tmp/$1; rm -rf "$OUT"; mkdir -p "$OUT"
  export REPLAYSSM_KERNEL_CACHE_DIR=${REPLAYSSM_KERNEL_CACHE_DIR:-/tmp/kc}
  t0=$(date +%s)
  nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
  # (defined here, not at the top level: older call scripts source this file after their own)
  tarball() {  # what $OUT holds so far (less warm-up logs) into $FINAL/$CALL_NAME.tgz
    (cd "$OUT" && tar czf "$FINAL/$CALL_NAME.tgz" --exclude='warm_*' . 2>/dev/null)
  }
}

bg_pytest() {  # LOG N FILE EXPR: pytest -n N FILE -k EXPR in the background, capped at $TEST_S
  ( PYTHONPATH=$PWD:${PYTHONPATH:-} timeout "${TEST_S:-300}" python -m pytest -q -rs \
      -p no:cacheprovider -n "$2" "$3" -k "$4" > "$OUT/$1.log" 2>&1; echo "rc=$?" >> "$OUT/$1.log" ) &
}

setting_env() {  # NAME:VAR=V,VAR2=V2 (or NAME:-) -> "VAR=V VAR2=V2" (run_knob_grid.sh's SETTINGS)
  local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"
}

bg_warm() {  # TAG SETTINGS ARGS TIMEOUT: compile each setting's bench cells (--warm-only) into the
  # kernel cache in the background, so a knob grid started after `wait` times loaded kernels;
  # logs $OUT/warmTAG_NAME.log
  local s
  for s in $2; do
    ( env $(setting_env "$s") timeout "$4" python -m bench $3 --warm-only --no-plots \
        --out /tmp/w$1_${s%%:*} > "$OUT/warm$1_${s%%:*}.log" 2>&1 ) &
  done
}

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
  bg_pytest t_ops 4 tests/test_gpu_ops.py "fold_pair_bit_identical or flush_v1 or (mamba2 and replay_step_matches_torch_reference) or mamba2_decode_at_256_threads or philox_rounds"
  bg_pytest t_order 4 tests/test_gpu_row_order.py "mamba2"
  bg_pytest t_spec 3 tests/test_gpu_spec.py "mamba2"
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
