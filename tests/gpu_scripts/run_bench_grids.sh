#!/usr/bin/env bash
# Benchmark grids in ONE device call: warm-up compiles (every variant into the disk kernel cache,
# several processes at once, next to the disk-cache GPU test), then the timing alone on the GPU
# under a run-wide budget (TOTAL_S): the full `bench spec` grid, the Qwen3.5-122B GDN sweep over
# L 8/16/32, the Nemotron-3-Nano-4B Mamba-2 sweep (P = 80), the host overhead (--interleave 3).
# Usage (repo root, .device staged): bash tests/gpu_scripts/run_bench_grids.sh
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=${REPLAYSSM_KERNEL_CACHE_DIR:-/tmp/replayssm_kernels}
t0=$(date +%s); T_END=$(( t0 + ${TOTAL_S:-290} ))
SPEC="spec --batches 1,8,32,128,256,512 --T 1,2,4,8 --pairs fp32,nvfp4/fp16sr,nvfp4/fp8sr,fp8/fp32 --replays 9"
GDN="sweep --layer gdn --shapes qwen3.5-122b --batches 1,8,32,128,256,512 --L 8,16,32 --pairs fp32,nvfp4/fp16sr,nvfp4/fp8sr,fp8/fp16sr,fp8/fp32,bf16/fp32,nvfp4sr --replays 7"
NANO="sweep --layer mamba2 --shapes nemotron3-nano-4b --batches 1,8,32,128,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,nvfp4/fp8sr,nvfp4/fp32,fp8/fp16sr,fp8/fp32,bf16/fp32,nvfp4sr --replays 7"
bg() { local name=$1; shift; ( timeout "${CHECK_S:-170}" "$@" >"$OUT/$name.log" 2>&1; echo "rc=$?" >>"$OUT/$name.log" ) & }
bg cache_test python -m pytest -q -rs -p no:cacheprovider tests/test_kernel_cache.py
for p in fp32 nvfp4/fp16sr nvfp4/fp8sr fp8/fp32; do bg "warm_spec_${p//\//_}" python -m bench $SPEC --layer both --pairs "$p" --warm-only --no-plots --out /tmp/w; done
for p in fp32,nvfp4sr nvfp4/fp16sr,bf16/fp32 nvfp4/fp8sr,fp8/fp32 fp8/fp16sr; do bg "warm_gdn_${p//[\/,]/_}" python -m bench $GDN --pairs "$p" --warm-only --no-plots --out /tmp/w; done
for p in fp32,nvfp4sr,fp8/fp16sr nvfp4/fp16sr,bf16/fp32,nvfp4/fp32 nvfp4/fp8sr,fp8/fp32; do bg "warm_nano_${p//[\/,]/_}" python -m bench $NANO --pairs "$p" --warm-only --no-plots --out /tmp/w; done
wait
echo "phase 1 done after $(( $(date +%s) - t0 )) s"
left() { local b=$1 r=$(( T_END - $(date +%s) - 8 )); [ $r -lt $b ] && b=$r; [ $b -lt 5 ] && b=5; echo $b; }
run() { local name=$1 budget=$2; shift 2; local s; s=$(left "$budget")
  timeout $((s + 15)) python -m bench "$@" --deadline "$s" --out "$OUT/$name" >"$OUT/$name.log" 2>&1; echo "rc=$?" >>"$OUT/$name.log"; }
run spec_full 60 $SPEC --layer both --no-plots
run sweep_gdn_122b 50 $GDN
run sweep_nano 40 $NANO
s=$(left 45); timeout "$s" python -m bench.host_overhead --interleave 3 >"$OUT/host_overhead.log" 2>&1; echo "rc=$?" >>"$OUT/host_overhead.log"
echo "all done after $(( $(date +%s) - t0 )) s"
tar czf "$OUT/results.tgz" -C "$OUT" $(cd "$OUT" && ls -d spec_full sweep_gdn_122b sweep_nano *.log 2>/dev/null)
{ echo "=== cache_test"; grep -E "passed|failed|rc=" "$OUT/cache_test.log" | tail -3
  for f in "$OUT"/warm_*.log; do echo "$(basename "$f") $(tail -c 60 "$f" | tr '\r\n' '  ')"; done
  for f in spec_full sweep_gdn_122b sweep_nano; do echo "=== $f: $(grep -E "deadline|rc=" "$OUT/$f.log" | tr '\n' ' ')"; done
  echo "=== host overhead"; tail -22 "$OUT/host_overhead.log"; } | tee "$OUT/summary.txt"
rm -rf "$OUT"/spec_full "$OUT"/sweep_* "$OUT"/*.log
