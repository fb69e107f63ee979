# session 4 exp 3: verify dot mapping A/B (REPLAYSSM_M2V_DOT_TN 32 vs 8), full spec grid, then every GPU check
source .device/gpu_env.sh >/dev/null 2>&1
ROOT=$PWD; O=$OUT; export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc
export PYTHONPATH=$ROOT:$PYTHONPATH
t0=$(date +%s)
AB="spec --layer mamba2 --batches 32,256 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32 --no-plots --replays 9"
SPEC="spec --batches 1,8,32,128,256,512 --T 1,2,4,8 --pairs fp32,nvfp4/fp16sr,nvfp4/fp8sr,fp8/fp32 --replays 9"
REPLAYSSM_M2V_DOT_TN=32 python -m bench $AB --warm-only --out /tmp/w >$O/wA.log 2>&1 &
REPLAYSSM_M2V_DOT_TN=8 python -m bench $AB --warm-only --out /tmp/w >$O/wB.log 2>&1 &
for p in fp32 nvfp4/fp16sr nvfp4/fp8sr fp8/fp32; do python -m bench $SPEC --layer both --pairs "$p" --warm-only --no-plots --out /tmp/w >$O/w_${p//\//_}.log 2>&1 & done
wait; echo "warm $(( $(date +%s) - t0 )) s"
REPLAYSSM_M2V_DOT_TN=32 timeout 120 python -m bench $AB --out $O/abA >$O/abA.log 2>&1
REPLAYSSM_M2V_DOT_TN=8 timeout 120 python -m bench $AB --out $O/abB >$O/abB.log 2>&1
timeout 200 python -m bench $SPEC --layer both --deadline 180 --out $O/spec_full >$O/spec_full.log 2>&1
echo "timing $(( $(date +%s) - t0 )) s"
mkdir -p /tmp/hf && tar xJf .device/hf/transformers.tar.xz -C /tmp/hf
bg() { local n=$1; shift; ( timeout 300 "$@" >$O/$n.log 2>&1; echo rc=$? >>$O/$n.log ) & }
bg chk_verify python tests/gpu_scripts/check_mamba2_verify.py --quick
bg chk_replay python tests/gpu_scripts/check_mamba2_replay.py --quick
bg gpu_spec python -m pytest -q -rs -n 3 tests/test_gpu_spec.py
bg gpu_ops python -m pytest -q -rs -n 3 tests/test_gpu_ops.py tests/test_kernel_cache.py
bg integration env PYTHONPATH=/tmp/hf:$PYTHONPATH python -m pytest -q -rs tests/test_gpu_integration.py
wait; echo "checks $(( $(date +%s) - t0 )) s"
python - $O <<'PY'
import json, os, sys
o = sys.argv[1]
res, order = {}, []
for n in ("abA", "abB"):
    p = os.path.join(o, n, "spec.json")
    for c in (json.load(open(p))["cells"] if os.path.exists(p) else []):
        k = (c["batch"], c["T"], c["name"])
        if k not in res: res[k] = {}; order.append(k)
        res[k][n] = c["median_us"]
print("| batch T kernel | DOT_TN=32 | DOT_TN=8 |")
for k in order:
    print(f"| {k} | " + " | ".join(f"{res[k][n]:.1f}" if n in res[k] else "-" for n in ("abA", "abB")) + " |")
PY
grep -E "deadline|rc=|Error" $O/spec_full.log | tail -3
for f in $O/chk_*.log $O/gpu_*.log $O/integration.log; do echo "== $f"; grep -E "configurations|FAIL|passed|failed|rc=" $f | tail -3; done
cd $O && tar czf /tmp/r.tgz . && rm -rf ./* && mv /tmp/r.tgz results.tgz
