#!/usr/bin/env bash
# A ready second device call (session 40 wrote it; no device was lent that session). Run from the
# tree as committed, after `tools/device_slim.sh out`, with .device carried and transformers 5.24
# staged into .device/hf (5.25 does not import there: it needs huggingface-hub >= 2.4):
#   pip download --no-deps transformers==5.24.0 -d /tmp/tf && (cd /tmp/tf && unzip -q \
#     transformers-5.24.0-py3-none-any.whl 'transformers/*') && \
#     TRANSFORMERS_SRC=/tmp/tf/transformers tools/stage_transformers.sh --test
#   source .device/gpu_env.sh && bash docs/patches/s40_call2.sh
#  A. tests/test_gpu_integration.py on the H200 (session 40 changed the transformers wrapper:
#     a method of the mixer, the replay block before HF's conv update; CPU-tested only);
#  B. ncu of the Mamba-2 verify's flush rows (Super b256 T8 L16, every row at h = L) with the pair
#     fold off / on, fp8/fp16sr and nvfp4/fp16sr: session 38 measured the pair 1.07x slower for
#     fp8/fp16sr (default off there); session 40's CPU SASS (`m2_md5.py --loops`) puts its chunk
#     loop at 27.9 -> 53.9 KB with the pair, nvfp4/fp16sr's at 15.6 -> 29.4 KB (where the pair
#     wins). Prediction, if instruction fetch is the cause: "No Instruction" stalls several times
#     higher for fp8/fp16sr with the pair, and about flat for nvfp4/fp16sr.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c2; rm -rf "$OUT"; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
t0=$(date +%s)
tarball() { (cd "$OUT" && tar czf "$FINAL/call2.tgz" --exclude='*.ncu-rep' . 2>/dev/null); }
S="tests/gpu_scripts/ncu_gdn_step.py --layer mamba2 --batch 256 --verify 8 --mode flush"
for p in fp8/fp16sr nvfp4/fp16sr; do          # warm the four builds beside the tests
  for fp in 0 1; do
    ( REPLAYSSM_M2_FOLD_PAIR=$fp timeout 240 python $S --pair $p --steps 1 \
        > "$OUT/warm_${p//\//_}_fp$fp.log" 2>&1 ) &
  done
done
if [ -f .device/hf/transformers.tar.xz ]; then
  mkdir -p /tmp/hf && tar xJf .device/hf/transformers.tar.xz -C /tmp/hf
  PYTHONPATH=/tmp/hf:$PYTHONPATH timeout 300 python -m pytest -q -rs -x tests/test_gpu_integration.py \
    > "$OUT/gpu_integration.log" 2>&1
  echo "A. gpu integration rc=$? $(( $(date +%s) - t0 )) s: $(tail -1 "$OUT/gpu_integration.log")"
else
  echo "A. skipped: no .device/hf/transformers.tar.xz (stage 5.24 first, see the header)"
fi
wait
echo "warm $(( $(date +%s) - t0 )) s"; tail -qn1 "$OUT"/warm_*.log; tarball
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for p in fp8/fp16sr nvfp4/fp16sr; do
  for fp in 0 1; do
    n=v8_$(echo "$p" | tr '/' '_')_fp$fp
    REPLAYSSM_M2_FOLD_PAIR=$fp timeout 150 $NCU --profile-from-start off --clock-control none \
      --cache-control none --kernel-name regex:Mamba2Verify --warp-sampling-interval 0 \
      --section SourceCounters --section WarpStateStats --section SchedulerStats \
      --section LaunchStats --section Occupancy --section SpeedOfLight \
      --import-source no -f -o "$OUT/$n" python $S --pair $p --steps 1 > "$OUT/$n.log" 2>&1
    echo "== $n rc=$? $(( $(date +%s) - t0 )) s"; tail -1 "$OUT/$n.log"
    if [ -f "$OUT/$n.ncu-rep" ]; then
      $NCU -i "$OUT/$n.ncu-rep" --page source --csv --print-source sass > "$OUT/${n}_sass.csv" 2> "$OUT/${n}_sass.err"
      $NCU -i "$OUT/$n.ncu-rep" --page details --csv > "$OUT/${n}_details.csv" 2>&1
      python tests/gpu_scripts/ncu_stalls.py "$OUT/${n}_sass.csv" --top 20 > "$OUT/${n}_stalls.txt" 2>&1
      gzip -f "$OUT/${n}_sass.csv"
      grep -E '"(Duration|Issued Warp Per Scheduler|No Eligible|Registers Per Thread|Grid Size|Stall No Instruction|Warp Cycles Per Issued Instruction)"' \
        "$OUT/${n}_details.csv" | awk -F'","' '{print $(NF-2)": "$NF}' | tr -d '"' | head -20
      head -12 "$OUT/${n}_stalls.txt"
    fi
    tarball
  done
done
du -sh "$FINAL"/call2.tgz
echo "total $(( $(date +%s) - t0 )) s"
