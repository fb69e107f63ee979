#!/usr/bin/env bash
# Session 14, device call 6 (main 824e065): the flush's pre-split keys (REPLAYSSM_GDN_VERIFY_KSPLIT=1)
# for fp32 read copies, now that the verify CTA is issue-bound (session 9 measured it lose at
# 550.3 -> 559.9 before the tail / mma / bsplit): same split, done once per CTA -> same numbers.
#  A. spec fuzz / teeth for gdn with KSPLIT=1, alongside the warm compiles;
#  B. default vs KSPLIT=1, GDN verify fp32 b32 / b256 / b512, T = 4 / 8.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
V=REPLAYSSM_GDN_VERIFY
PYT="python -m pytest -q -rs -p no:cacheprovider"
SG="def:- ks1:${V}_KSPLIT=1"
SA="spec --layer gdn --batches 32,256,512 --T 4,8 --pairs fp32"
t0=$(date +%s)
( env ${V}_KSPLIT=1 timeout 120 $PYT -n 3 tests/test_gpu_spec.py -k "gdn and (fuzz or teeth)" > "$OUT/t_fuzz_ks1.log" 2>&1; echo "rc=$?" >> "$OUT/t_fuzz_ks1.log" ) &
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
for s in $SG; do
  ( env $(envs "$s") timeout 120 python -m bench $SA --warm-only --no-plots --out /tmp/w_${s%%:*} > /tmp/w_${s%%:*}.log 2>&1 ) &
done
wait
echo "phase A $(( $(date +%s) - t0 )) s"
grep -E "passed|failed|FAIL|rc=" "$OUT/t_fuzz_ks1.log" | tail -3
mkdir -p /tmp/g1
OUT=/tmp/g1 SETTINGS="$SG" BENCH_ARGS="$SA" REPLAYS=7 RUN_S=50 WARM_S=15 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/g1.log 2>&1
(cd /tmp && tar czf "$OUT/call6.tgz" g1 g1.log 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
python - /tmp/g1 <<'PY'
import json, sys, os
d = sys.argv[1]; names = ["def", "ks1"]; res = {}; order = []
for n in names:
    p = os.path.join(d, n, "spec.json")
    if not os.path.exists(p): continue
    for c in json.load(open(p))["cells"]:
        k = (c["batch"], c.get("T"), c["name"])
        if k not in res: res[k] = {}; order.append(k)
        res[k][n] = c.get("median_us")
print("| b | T | kernel | def | ks1 | def/ks1 |")
for k in order:
    v = [res[k].get(n) for n in names]
    r = f"{v[0] / v[1]:.3f}" if v[0] and v[1] else "-"
    print(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(f"{x:.1f}" if x else "-" for x in v) + f" | {r} |")
PY
