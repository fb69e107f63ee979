#!/usr/bin/env bash
# Session 32, call 1 (run `tools/device_slim.sh out` first, carry .device).
# Nsight Compute on the GDN b1 step (Qwen3.5-4B, L16, release builds): warp-stall samples per
# SASS instruction of a non-flush step (fp8/fp32, nvfp4/fp16sr, fp32) and a flush step (fp8/fp32),
# to place the non-flush span's 2.8-3.3 us (the in-kernel clocks only give 5 phases).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
t0=$(date +%s)
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)
echo "ncu: $NCU"; $NCU --version | tail -2
S=tests/gpu_scripts/ncu_gdn_step.py
CFGS="fp8/fp32:nonflush nvfp4/fp16sr:nonflush fp32:nonflush fp8/fp32:flush"
# compiles first, in parallel (the kernel cache dir), without ncu
for c in fp8/fp32:nonflush nvfp4/fp16sr:nonflush fp32:nonflush; do
  ( timeout 240 python $S --pair ${c%%:*} --mode ${c##*:} --steps 1 > "$OUT/warm_${c//\//_}.log" 2>&1 ) &
done
wait
echo "warm $(( $(date +%s) - t0 )) s"; tail -2 "$OUT"/warm_*.log
for c in $CFGS; do
  n=$(echo "${c}" | tr '/:' '__')
  timeout 150 $NCU --profile-from-start off --clock-control none --kernel-name regex:GDNReplayDecodeV2 \
    --warp-sampling-interval 0 --section SourceCounters --section WarpStateStats --section LaunchStats \
    --section SpeedOfLight --section SchedulerStats --import-source no -f -o "$OUT/$n" \
    python $S --pair ${c%%:*} --mode ${c##*:} --steps 3 > "$OUT/$n.log" 2>&1
  echo "== $n rc=$? $(( $(date +%s) - t0 )) s"; tail -3 "$OUT/$n.log"
  if [ -f "$OUT/$n.ncu-rep" ]; then
    $NCU -i "$OUT/$n.ncu-rep" --page source --csv --print-source sass > "$OUT/${n}_sass.csv" 2> "$OUT/${n}_sass.err"
    $NCU -i "$OUT/$n.ncu-rep" --page details --csv > "$OUT/${n}_details.csv" 2>&1
    $NCU -i "$OUT/$n.ncu-rep" --page raw --csv > "$OUT/${n}_raw.csv" 2>&1
    ls -la "$OUT/$n"* | awk '{print $5, $9}'
    head -c 600 "$OUT/${n}_sass.csv"; echo; head -3 "$OUT/${n}_sass.err"
  fi
done
(cd "$OUT" && tar czf "$FINAL/call1.tgz" --exclude='*.ncu-rep' . 2>/dev/null)
du -sh "$FINAL"/call1.tgz
echo "total $(( $(date +%s) - t0 )) s"
grep -h "Duration\|Warp Cycles Per Issued\|Issued Warp Per Scheduler\|No Eligible" "$OUT"/*_details.csv | cut -c1-200 | head -24
