#!/usr/bin/env bash
# Session 36, call 1 (run `tools/device_slim.sh out` first, carry .device).
# Nsight Compute over the Mamba-2 decode (Nemotron-3-Super L16 b256, split launch) with every row
# pinned flush (the split's flush half: CPU SASS counts ~1500 instructions per 16-element chunk,
# 94 per element -> ~785 us of issue at 100 % against 1348 us measured in s20) and pinned
# non-flush (nvfp4 non-flush rows at ~46 % of copy bandwidth): issue-slot use and stall reasons
# per region, nvfp4/fp16sr and fp8/fp32.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c1; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
t0=$(date +%s)
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
S="tests/gpu_scripts/ncu_gdn_step.py --layer mamba2 --batch 256"
for p in nvfp4/fp16sr fp8/fp32; do
  for m in flush nonflush; do
    ( timeout 200 python $S --pair $p --mode $m --steps 1 > "$OUT/warm_${p//\//_}_$m.log" 2>&1 ) &
  done
done
wait
echo "warm $(( $(date +%s) - t0 )) s"; tail -1 "$OUT"/warm_*.log
for p in nvfp4/fp16sr fp8/fp32; do
  for m in flush nonflush; do
    n=m2_$(echo "$p" | tr '/' '_')_$m
    timeout 150 $NCU --profile-from-start off --clock-control none --cache-control none \
      --kernel-name regex:Mamba2ReplayDecode --warp-sampling-interval 0 \
      --section SourceCounters --section WarpStateStats --section SchedulerStats \
      --section LaunchStats --section Occupancy --section SpeedOfLight \
      --import-source no -f -o "$OUT/$n" python $S --pair $p --mode $m --steps 1 > "$OUT/$n.log" 2>&1
    echo "== $n rc=$? $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/$n.log"
    if [ -f "$OUT/$n.ncu-rep" ]; then
      $NCU -i "$OUT/$n.ncu-rep" --page source --csv --print-source sass > "$OUT/${n}_sass.csv" 2> "$OUT/${n}_sass.err"
      $NCU -i "$OUT/$n.ncu-rep" --page details --csv > "$OUT/${n}_details.csv" 2>&1
      python tests/gpu_scripts/ncu_stalls.py "$OUT/${n}_sass.csv" --top 30 > "$OUT/${n}_stalls.txt" 2>&1
      gzip -f "$OUT/${n}_sass.csv"
      grep -E '"(Duration|Issue Slots Busy|Issued Warp Per Scheduler|No Eligible|Active Warps Per Scheduler|Eligible Warps Per Scheduler|Achieved Occupancy|Registers Per Thread|Block Limit Shared Mem|Block Limit Registers|Memory Throughput|DRAM Throughput|Compute \(SM\) Throughput|Grid Size|Block Size)"' "$OUT/${n}_details.csv" | awk -F'","' '{print $(NF-2)": "$NF}' | tr -d '"' | head -40
      head -16 "$OUT/${n}_stalls.txt"
    fi
  done
done
(cd "$OUT" && tar czf "$FINAL/call1.tgz" --exclude='*.ncu-rep' . 2>/dev/null)
du -sh "$FINAL"/call1.tgz
echo "total $(( $(date +%s) - t0 )) s"
