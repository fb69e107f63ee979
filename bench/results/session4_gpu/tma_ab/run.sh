source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc
O=$OUT; t0=$(date +%s)
SW="sweep --shapes nemotron3-super --batches 1,256,512 --L 16 --pairs nvfp4/fp16sr --phases --no-peers --no-plots --replays 7"
( REPLAYSSM_M2_TMA=1 timeout 110 python tests/gpu_scripts/check_mamba2_replay.py --pairs nvfp4/fp16sr > $O/check_tma.log 2>&1; echo rc=$? >> $O/check_tma.log ) &
REPLAYSSM_M2_TMA=0 python -m bench $SW --warm-only --out /tmp/w0 > /dev/null 2>&1 &
REPLAYSSM_M2_TMA=1 python -m bench $SW --warm-only --out /tmp/w1 > /dev/null 2>&1 &
wait; echo "phase1 $(( $(date +%s) - t0 ))s"; grep -E "configurations|FAIL|rc=" $O/check_tma.log | tail -4
for v in 0 1; do REPLAYSSM_M2_TMA=$v timeout 40 python -m bench $SW --out $O/sw$v > $O/sw$v.log 2>&1; done
echo "timing $(( $(date +%s) - t0 ))s"
python - $O <<'PY'
import json, sys
o = sys.argv[1]
a = {(c["batch"], c["name"]): c["median_us"] for c in json.load(open(f"{o}/sw0/sweep.json"))["cells"]}
for c in json.load(open(f"{o}/sw1/sweep.json"))["cells"]:
    k = (c["batch"], c["name"])
    if k in a: print(f"| {k[0]} | {k[1]} | {a[k]:.1f} | {c['median_us']:.1f} | {a[k]/c['median_us']:.3f}x |")
PY
REPLAYSSM_M2_TMA=1 timeout 30 python tests/gpu_scripts/prof_mamba2_replay.py --pairs nvfp4/fp16sr --batches 1,256 --modes nonflush,staggered --out $O 2>&1 | grep "^|"
echo "done $(( $(date +%s) - t0 ))s"
