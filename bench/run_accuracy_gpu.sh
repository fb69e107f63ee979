#!/usr/bin/env bash
# The accuracy study (issue 6) on the GPU machine: both layer kinds, every precision pair (RN
# variants and SR read copies included), 128K tokens, CUDA graphs, plus the GPU-vs-torch-reference
# agreement on a shorter shared horizon. Run from the repository root after
#   source .device/gpu_env.sh && export PYTHONPATH=$PWD:$PYTHONPATH
# Writes $OUT/accuracy_<layer>_cute/{accuracy.json,accuracy.md,kl_vs_length.png,
# state_err_vs_length.png} and prints a short table last.
#
# CuTe JIT compiles every kernel variant on first use (seconds each, one lock per process), so the
# pairs are split over NGROUPS processes per layer that compile and run concurrently; each part
# holds the fp32 reference arm, and the parts are merged (same inputs, SR seeds and readout) into
# one result per layer. They share one on-disk kernel cache (REPLAYSSM_KERNEL_CACHE_DIR, default
# below), so a variant two parts need is compiled once, and a rerun loads every kernel.
#
# Knobs (environment): LAYERS="mamba2 gdn", MAX_LEN=131072, SEEDS=0,1,2, ROWS=1 (sequences per
# regime: dense + bursty), NGROUPS=5, AGREE_LEN=1024 (0: skip the agreement), CHUNK=512,
# PART_TIMEOUT=540 (s), EXTRA="" (more args for every part, e.g. "--no-graph"), GRAPH_CHECK=1,
# MAMBA2_SHAPE=nemotron3-super, GDN_SHAPE=qwen3.5-4b.
set -u
OUT=${OUT:-bench/results/gpu_run}
LAYERS=${LAYERS:-"mamba2 gdn"}
MAX_LEN=${MAX_LEN:-131072}
SEEDS=${SEEDS:-0,1,2}
ROWS=${ROWS:-1}
NGROUPS=${NGROUPS:-5}
AGREE_LEN=${AGREE_LEN:-1024}
CHUNK=${CHUNK:-512}
PART_TIMEOUT=${PART_TIMEOUT:-540}
EXTRA=${EXTRA:-}
MAMBA2_SHAPE=${MAMBA2_SHAPE:-nemotron3-super}
GDN_SHAPE=${GDN_SHAPE:-qwen3.5-4b}
BACKEND=${BACKEND:-cute}      # BACKEND=torch (+ SHAPE_ARGS) dry-runs the script on a CPU
SHAPE_ARGS=${SHAPE_ARGS:-}    # e.g. "--shape small --device cpu": overrides the shapes below
PY=${PY:-python3}
export REPLAYSSM_KERNEL_CACHE_DIR=${REPLAYSSM_KERNEL_CACHE_DIR:-${TMPDIR:-/tmp}/replayssm_kernel_cache}
mkdir -p "$OUT/parts"
t0=$(date +%s)
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>/dev/null | head -1

# pair groups: round robin over every pair of precision_pairs(include_extra=True) but fp32;
# group 0 also carries the fp32-vs-fp32 control (standard fp32 recurrence), group 1 the
# fp32-replay determinism control
mapfile -t PAIR_GROUPS < <($PY - "$NGROUPS" <<'PY'
import sys
from replayssm_lp import precision_pairs
n = int(sys.argv[1])
pairs = [p for p in precision_pairs(include_extra=True) if p != "fp32"]
for i in range(n):
    g = pairs[i::n]
    if g:
        print(",".join(g))
PY
)
if [ ${#PAIR_GROUPS[@]} -eq 0 ]; then echo "run_accuracy_gpu: could not list the pairs" >&2; exit 1; fi

# graph-vs-eager check (small config, its own process): the study's numbers come from CUDA-graph
# replays, this shows they equal an eager run's
GC_PID=""
if [ "$BACKEND" = cute ] && [ "${GRAPH_CHECK:-1}" = 1 ]; then
  timeout "$PART_TIMEOUT" $PY -m bench accuracy --graph-check --layer mamba2 --shape "$MAMBA2_SHAPE" \
    >"$OUT/graph_check.txt" 2>&1 &
  GC_PID=$!
fi

pids=()
for L in $LAYERS; do
  SHAPE=$MAMBA2_SHAPE; [ "$L" = gdn ] && SHAPE=$GDN_SHAPE
  for i in "${!PAIR_GROUPS[@]}"; do
    CTRL=""
    [ "$i" = 0 ] && CTRL="ctrl:std-fp32"
    [ "$i" = 1 ] && CTRL="ctrl:fp32-replay"
    d="$OUT/parts/$L/$i"; mkdir -p "$d"
    SA="--shape $SHAPE"; [ -n "$SHAPE_ARGS" ] && SA="$SHAPE_ARGS"
    timeout "$PART_TIMEOUT" $PY -m bench accuracy --layer "$L" --backend "$BACKEND" $SA \
      --max-len "$MAX_LEN" --seeds "$SEEDS" --rows "$ROWS" --chunk "$CHUNK" \
      --pairs "${PAIR_GROUPS[$i]}" --controls "$CTRL" --agree-len "$AGREE_LEN" \
      --no-plots --no-progress --quiet --out "$d" $EXTRA >"$d/log.txt" 2>&1 &
    pids+=("$!:$L/$i")
  done
done
echo "run_accuracy_gpu: ${#pids[@]} parts started (${#PAIR_GROUPS[@]} per layer; logs in $OUT/parts/*/*/log.txt)"
fail=0
for pl in "${pids[@]}"; do
  pid=${pl%%:*}; name=${pl#*:}
  if wait "$pid"; then
    echo "  part $name done after $(( $(date +%s) - t0 )) s"
  else
    rc=$?; fail=1
    echo "  part $name FAILED (rc $rc); last lines of its log:"; tail -n 25 "$OUT/parts/$name/log.txt"
  fi
done

if [ -n "$GC_PID" ]; then
  wait "$GC_PID" || fail=1
  tail -n 1 "$OUT/graph_check.txt"
fi

for L in $LAYERS; do
  js=$(ls "$OUT"/parts/"$L"/*/accuracy.json 2>/dev/null)
  [ -z "$js" ] && { echo "no results for $L"; continue; }
  $PY -m bench accuracy --merge $js --out "$OUT/accuracy_${L}_${BACKEND}" --quiet \
    >"$OUT/parts/merge_$L.log" 2>&1 || { fail=1; tail -n 20 "$OUT/parts/merge_$L.log"; }
done
# keep only the part logs (the merged JSON holds every number)
rm -f "$OUT"/parts/*/*/accuracy.json "$OUT"/parts/*/*/accuracy.md
echo "run_accuracy_gpu: wall $(( $(date +%s) - t0 )) s"
[ -f "$OUT/graph_check.txt" ] && tail -n 1 "$OUT/graph_check.txt"
$PY -m bench accuracy --summary "$OUT"/accuracy_*_"$BACKEND"/accuracy.json
exit $fail
