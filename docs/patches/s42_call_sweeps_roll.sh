#!/usr/bin/env bash
# Session 42, device call 3 -- NOT RUN (seven machine starts refused); ready for the next session
# (~9 min of device time; docs/patches/s42_next_call.sh is its ~5-min cut), one machine start:
#  1. the landing sweeps on the final kernel code (0961e6e, GPU-tested in call 1) to refresh the
#     README's headline tables (sessions 21 / 18 until now), peers in the same run:
#     Nemotron-3-Super b1..b512 L16, five pairs, our standard + mamba_ssm's Triton
#     selective_state_update; Qwen3.5-4B b1..b512 L16, five pairs, our standard + FLA's
#     fused_recurrent_gated_delta_rule; Qwen3.5-122B b256 / b512, three pairs;
#  2. docs/patches/s42_pair_roll.patch in a copy (/tmp/new): its GPU tests (decode bit-identical
#     to the inline pair, the verify against the twin) and env-switch grids in that one tree:
#     verify Super b256 T4 / T8 fp8/fp16sr + bf16/fp32 (d = default: pair off for fp8, on for
#     bf16; p1 = pair on; r1 = pair on + rolled encodes); decode Super L16 b32 / b256 / b512
#     fp8/fp16sr + fp16sr with --phases (d = pair on inline; r1 = rolled). Static (CPU): the
#     verify fp8/fp16sr pair chunk loop 53.9 -> 33.2 KB (12 / 16 B spills), the decode
#     ordered:fp8/fp16sr:4 one 48.6 -> 27.7 KB. Prediction: verify fp8/fp16sr r1 flush-only
#     ~0.95x of d (the pair's shared B loads without the fetch stalls), mixed T8 ~0.98x; decode
#     fp8/fp16sr flush-only 0.90-0.97x of d; fp16sr and bf16/fp32 (loops < 25 KB) ~1.0x;
#     nvfp4 targets (every chunk in sS, +8 KB smem): verify nvfp4/fp16sr flush-only 0.95-0.98x,
#     decode nvfp4/fp16sr ~0.97x, nvfp4/fp8sr 0.90-1.02x (5 -> 4 CTAs/SM, 76 B of spills);
#  3. ncu of the decode split's flush half (Super b512 L16, every row flushes): nvfp4/fp16sr and
#     nvfp4/fp8sr with the pair fold (default, 'd'), nvfp4/fp8sr without. Static: its chunk loop
#     is 37.7 KB for nvfp4/fp8sr against 24.7 KB for nvfp4/fp16sr (`m2_md5.py --loops
#     split2:...`); flush-only b512 2987 vs 2150 us (call 1, H100). Prediction: no_inst well above
#     nvfp4/fp16sr's for nvfp4/fp8sr with the pair (the verify's 29.4 KB loop had 9.1 %).
#   source .device/gpu_env.sh && bash docs/patches/s42_call_sweeps_roll.sh
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; rm -rf "$OUT"; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" --exclude='warm_*' --exclude='*.ncu-rep' . 2>/dev/null); }
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
source tests/gpu_scripts/ab_call_lib.sh
new_copy docs/patches/s42_pair_roll.patch && grep -q PAIR_ROLL_ENV /tmp/new/cute_kernels/mamba2_replay.py \
  || echo "PATCH FAILED"
SN="sweep --shapes nemotron3-super --batches 1,8,32,128,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,nvfp4/fp8sr,bf16/fp32"
S4="sweep --layer gdn --shapes qwen3.5-4b --batches 1,32,64,128,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32,nvfp4/fp8sr"
SB="sweep --layer gdn --shapes qwen3.5-122b --batches 256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32"
RG1="spec --layer mamba2 --shapes nemotron3-super --pairs fp8/fp16sr,bf16/fp32,nvfp4/fp16sr --batches 256 --T 4,8 --L 16 --no-plots"
RS1="d:- p1:REPLAYSSM_M2_FOLD_PAIR=1 r1:REPLAYSSM_M2_FOLD_PAIR=1,REPLAYSSM_M2_PAIR_ROLL=1"
RG2="sweep --shapes nemotron3-super --batches 32,256,512 --L 16 --pairs fp8/fp16sr,fp16sr,nvfp4/fp8sr,nvfp4/fp16sr --no-peers --phases"
RS2="d:- r1:REPLAYSSM_M2_PAIR_ROLL=1"
T="timeout 300 python -m pytest -q -rs -p no:cacheprovider"
( cd /tmp/new && PYTHONPATH=/tmp/new:$PYTHONPATH $T -n 4 tests/test_gpu_ops.py -k "pair_roll" \
    > "$OUT/t_roll_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_roll_ops.log" ) &
( cd /tmp/new && PYTHONPATH=/tmp/new:$PYTHONPATH $T -n 3 tests/test_gpu_spec.py -k "pair_roll" \
    > "$OUT/t_roll_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_roll_spec.log" ) &
( timeout 280 python -m bench $SN --warm-only --no-plots --warm-jobs 2 --out /tmp/wn > "$OUT/wn.log" 2>&1 ) &
( timeout 280 python -m bench $S4 --warm-only --no-plots --warm-jobs 2 --out /tmp/w4 > "$OUT/w4.log" 2>&1 ) &
( timeout 280 python -m bench $SB --warm-only --no-plots --out /tmp/wb > "$OUT/wb.log" 2>&1 ) &
( RUN_S=1 new_grid warm_r1 "$RS1" "$RG1" 1; RUN_S=1 new_grid warm_r2 "$RS2" "$RG2" 1 ) &
NS="tests/gpu_scripts/ncu_gdn_step.py --layer mamba2 --batch 512 --mode flush --steps 1"
( REPLAYSSM_M2_FOLD_PAIR=0 timeout 280 python $NS --pair nvfp4/fp8sr > "$OUT/warm_ncu0.log" 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_roll_ops t_roll_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -5; done
tarball
timeout 100 python -m bench $SN --replays 9 --out "$OUT/sweep_m2" > "$OUT/sweep_m2.log" 2>&1; echo "super rc=$? $(( $(date +%s) - t0 )) s"; tarball
timeout 80 python -m bench $S4 --replays 9 --out "$OUT/sweep4b" > "$OUT/sweep4b.log" 2>&1; echo "4b rc=$? $(( $(date +%s) - t0 )) s"; tarball
timeout 50 python -m bench $SB --replays 7 --no-plots --out "$OUT/sweep122b" > "$OUT/sweep122b.log" 2>&1; echo "122b rc=$? $(( $(date +%s) - t0 )) s"; tarball
new_grid roll_verify "$RS1" "$RG1" 60; echo "roll verify $(( $(date +%s) - t0 )) s"; tarball
new_grid roll_decode "$RS2" "$RG2" 60; echo "roll decode $(( $(date +%s) - t0 )) s"; tarball
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
grep -v "standard\|snapshot" "$OUT/roll_verify/knobs.md" | cut -c1-160
cat "$OUT/roll_decode/knobs.md" | cut -c1-160
echo "total $(( $(date +%s) - t0 )) s"
