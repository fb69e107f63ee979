#!/usr/bin/env bash
# Session 32, call 2 (run `tools/device_slim.sh out` first, carry .device).
# Nsight Compute over one replay of the sweep's timed graph (GDN b1 Qwen3.5-4B L16: rows staggered
# over the L-cycle, rot x L steps, PDL as in the sweep), --graph-profiling graph, caches not
# flushed (--cache-control none): warp-stall samples per SASS instruction of the warm steady state
# (call 1's isolated, cache-flushed launches ran 6.0-6.5 us against ~3.3 in the graph).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
t0=$(date +%s)
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
S=tests/gpu_scripts/ncu_gdn_step.py
for p in fp8/fp32 nvfp4/fp16sr fp32 bf16/fp32; do
  ( timeout 240 python $S --pair $p --mode nonflush --steps 1 > "$OUT/warm_${p//\//_}.log" 2>&1 ) &
done
wait
echo "warm $(( $(date +%s) - t0 )) s"
for p in fp8/fp32 nvfp4/fp16sr fp32 bf16/fp32; do
  n=g_$(echo "$p" | tr '/' '_')
  timeout 150 $NCU --profile-from-start off --clock-control none --cache-control none \
    --graph-profiling graph --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats \
    --import-source no -f -o "$OUT/$n" python $S --pair $p --mode graph > "$OUT/$n.log" 2>&1
  echo "== $n rc=$? $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/$n.log"
  if [ -f "$OUT/$n.ncu-rep" ]; then
    $NCU -i "$OUT/$n.ncu-rep" --page source --csv --print-source sass > "$OUT/${n}_sass.csv" 2> "$OUT/${n}_sass.err"
    $NCU -i "$OUT/$n.ncu-rep" --page details --csv > "$OUT/${n}_details.csv" 2>&1
    python tests/gpu_scripts/ncu_stalls.py "$OUT/${n}_sass.csv" --top 30 > "$OUT/${n}_stalls.txt" 2>&1
    gzip -f "$OUT/${n}_sass.csv"
    head -14 "$OUT/${n}_stalls.txt"
  fi
done
(cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='*.ncu-rep' . 2>/dev/null)
du -sh "$FINAL"/call2.tgz
echo "total $(( $(date +%s) - t0 )) s"
