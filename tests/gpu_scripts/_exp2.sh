# session 4 exp 2: verify flush rows from S_new (A = .snap_old = HEAD before, B = tree), decode knobs, checks
source .device/gpu_env.sh >/dev/null 2>&1
ROOT=$PWD; O=$OUT; export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc
SPEC="spec --layer mamba2 --batches 256 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --no-plots --replays 9"
DEC="sweep --shapes nemotron3-super --L 16 --phases --no-peers --no-plots --replays 9"
DEC_D="$DEC --batches 8,32,256,512 --pairs fp32,nvfp4/fp16sr,fp8/fp32,fp8/fp16sr"
DEC_F="$DEC --batches 8,32,256,512 --pairs fp8/fp32,fp8/fp16sr"
DEC_H="$DEC --batches 256,512 --pairs nvfp4/fp16sr,fp8/fp32"
t0=$(date +%s)
(cd .snap_old && PYTHONPATH=$ROOT/.snap_old:$PYTHONPATH python -m bench $SPEC --warm-only --out /tmp/w1 >$O/w1.log 2>&1) &
PYTHONPATH=$ROOT:$PYTHONPATH python -m bench $SPEC --warm-only --out /tmp/w2 >$O/w2.log 2>&1 &
PYTHONPATH=$ROOT:$PYTHONPATH python -m bench $DEC_D --warm-only --out /tmp/w3 >$O/w3.log 2>&1 &
REPLAYSSM_M2_MINBLOCKS=6 PYTHONPATH=$ROOT:$PYTHONPATH python -m bench $DEC_F --warm-only --out /tmp/w4 >$O/w4.log 2>&1 &
REPLAYSSM_M2_HEADS_PER_CTA=8 PYTHONPATH=$ROOT:$PYTHONPATH python -m bench $DEC_H --warm-only --out /tmp/w5 >$O/w5.log 2>&1 &
wait; echo "warm $(( $(date +%s) - t0 )) s"
(cd .snap_old && PYTHONPATH=$ROOT/.snap_old:$PYTHONPATH timeout 150 python -m bench $SPEC --out $O/specA >$O/specA.log 2>&1)
PYTHONPATH=$ROOT:$PYTHONPATH timeout 150 python -m bench $SPEC --out $O/specB >$O/specB.log 2>&1
PYTHONPATH=$ROOT:$PYTHONPATH timeout 150 python -m bench $DEC_D --out $O/decD >$O/decD.log 2>&1
REPLAYSSM_M2_MINBLOCKS=6 PYTHONPATH=$ROOT:$PYTHONPATH timeout 100 python -m bench $DEC_F --out $O/decMB6 >$O/decMB6.log 2>&1
REPLAYSSM_M2_HEADS_PER_CTA=8 PYTHONPATH=$ROOT:$PYTHONPATH timeout 100 python -m bench $DEC_H --out $O/decH8 >$O/decH8.log 2>&1
echo "timing done $(( $(date +%s) - t0 )) s"
python - $O <<'PY'
import json, os, sys
o = sys.argv[1]
def cells(d, f):
    p = os.path.join(o, d, f)
    return json.load(open(p))["cells"] if os.path.exists(p) else []
def key(c): return (c.get("layer", c.get("shape")), c["batch"], c.get("T", c.get("L")), c["name"])
for title, cols in (("verify spec A=before / B=after", [("A", "specA", "spec.json"), ("B", "specB", "spec.json")]),
                    ("decode D / fp8 minblocks 6 / hpc 8", [("D", "decD", "sweep.json"), ("MB6", "decMB6", "sweep.json"), ("H8", "decH8", "sweep.json")])):
    res, order = {}, []
    for n, d, f in cols:
        for c in cells(d, f):
            k = key(c)
            if k not in res: res[k] = {}; order.append(k)
            res[k][n] = c["median_us"]
    print("##", title); print("| k | " + " | ".join(n for n, _, _ in cols) + " |")
    for k in order:
        print(f"| {k[1]} {k[2]} {k[3]} | " + " | ".join(f"{res[k][n]:.1f}" if n in res[k] else "-" for n, _, _ in cols) + " |")
PY
cd $O && tar czf /tmp/r.tgz . && rm -rf ./* && mv /tmp/r.tgz results.tgz
