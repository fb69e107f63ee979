#!/usr/bin/env bash
# Session 43, device call 3 (ready; ~6 min, one machine start): s42_call_sweeps_roll.sh (in git
# history, 899ef82) without its roll part (s43_call2.sh times the roll). Run it on the final
# kernel code (after the roll rule lands, or on the tree as committed):
#  1. the landing sweeps to refresh the README's headline tables (sessions 21 / 18 until now),
#     peers in the same run: Nemotron-3-Super b1..b512 L16, five pairs, our standard + mamba_ssm's
#     Triton selective_state_update; Qwen3.5-4B b1..b512 L16, five pairs, our standard + FLA's
#     fused_recurrent_gated_delta_rule; Qwen3.5-122B b256 / b512, three pairs;
#  2. ncu of the decode split's flush half (Super b512 L16, every row flushes): nvfp4/fp16sr and
#     nvfp4/fp8sr with the pair fold (default, 'd'), nvfp4/fp8sr without. Static: its chunk loop
#     is 37.7 KB for nvfp4/fp8sr against 24.7 KB for nvfp4/fp16sr (`m2_md5.py --loops
#     split2:...`); flush-only b512 3099.7 vs 2144.3 us (session 43 call 1, H100). Prediction:
#     no_inst well above nvfp4/fp16sr's for nvfp4/fp8sr with the pair.
#   source .device/gpu_env.sh && bash docs/patches/s43_call3_sweeps.sh
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; rm -rf "$OUT"; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3s.tgz" --exclude='warm_*' --exclude='*.ncu-rep' . 2>/dev/null); }
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
SN="sweep --shapes nemotron3-super --batches 1,8,32,128,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr,bf16/fp32"
S4="sweep --layer gdn --shapes qwen3.5-4b --batches 1,32,64,128,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32,nvfp4/fp8sr"
SB="sweep --layer gdn --shapes qwen3.5-122b --batches 256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32"
( timeout 280 python -m bench $SN --warm-only --no-plots --warm-jobs 2 --out /tmp/wn > "$OUT/wn.log" 2>&1 ) &
( timeout 280 python -m bench $S4 --warm-only --no-plots --warm-jobs 2 --out /tmp/w4 > "$OUT/w4.log" 2>&1 ) &
( timeout 280 python -m bench $SB --warm-only --no-plots --out /tmp/wb > "$OUT/wb.log" 2>&1 ) &
NS="tests/gpu_scripts/ncu_gdn_step.py --layer mamba2 --batch 512 --mode flush --steps 1"
( REPLAYSSM_M2_FOLD_PAIR=0 timeout 280 python $NS --pair nvfp4/fp8sr > "$OUT/warm_ncu0.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
tarball
timeout 100 python -m bench $SN --replays 9 --out "$OUT/sweep_m2" > "$OUT/sweep_m2.log" 2>&1; echo "super rc=$? $(( $(date +%s) - t0 )) s"; tarball
timeout 80 python -m bench $S4 --replays 9 --out "$OUT/sweep4b" > "$OUT/sweep4b.log" 2>&1; echo "4b rc=$? $(( $(date +%s) - t0 )) s"; tarball
timeout 50 python -m bench $SB --replays 7 --no-plots --out "$OUT/sweep122b" > "$OUT/sweep122b.log" 2>&1; echo "122b rc=$? $(( $(date +%s) - t0 )) s"; tarball
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for v in nvfp4/fp16sr:d nvfp4/fp8sr:d nvfp4/fp8sr:0; do
  p=${v%:*}; fp=${v#*:}; n=d512_$(echo "$p" | tr '/' '_')_fp$fp
  E=(); [ "$fp" != d ] && E=(REPLAYSSM_M2_FOLD_PAIR=$fp)   # d: the default build (pair on)
  env "${E[@]}" timeout 60 $NCU --profile-from-start off --clock-control none \
    --cache-control none --kernel-name regex:Mamba2ReplayDecode --warp-sampling-interval 0 \
    --section SourceCounters --section WarpStateStats --section LaunchStats --section SpeedOfLight \
    --import-source no -f -o "$OUT/$n" python $NS --pair $p > "$OUT/$n.log" 2>&1
  echo "== $n rc=$? $(( $(date +%s) - t0 )) s"
  if [ -f "$OUT/$n.ncu-rep" ]; then
    $NCU -i "$OUT/$n.ncu-rep" --page source --csv --print-source sass > "$OUT/${n}_sass.csv" 2> /dev/null
    $NCU -i "$OUT/$n.ncu-rep" --page details --csv > "$OUT/${n}_details.csv" 2>&1
    python tests/gpu_scripts/ncu_stalls.py "$OUT/${n}_sass.csv" --top 20 > "$OUT/${n}_stalls.txt" 2>&1
    gzip -f "$OUT/${n}_sass.csv"
    grep -E '"(Duration|Registers Per Thread|Grid Size)"' "$OUT/${n}_details.csv" | awk -F'","' '{print $(NF-2)": "$NF}' | tr -d '"' | tr '\n' ' '; echo
    sed -n 2p "$OUT/${n}_stalls.txt"
  fi
  tarball
done
grep -h "Copy bandwidth" "$OUT"/sweep*/sweep.md 2>/dev/null | head -3
grep -E "^\| nemotron3-super \| (1|256|512) \| (16|-) " "$OUT/sweep_m2/sweep.md" | cut -c1-110
grep -E "^\| qwen3.5-4b \| (256|512) \|" "$OUT/sweep4b/sweep.md" | cut -c1-110
echo "total $(( $(date +%s) - t0 )) s"
