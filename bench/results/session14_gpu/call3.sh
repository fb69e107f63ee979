#!/usr/bin/env bash
# Session 14, device call 3: the GDN verify's mma dots with B pre-split once per CTA and A split by
# integer rounding, the flush rows' output dots on the same mma path (REPLAYSSM_GDN_VERIFY_BSPLIT=1).
#  A. correctness of the bsplit builds (check_gdn_verify full; spec fuzz / teeth for gdn and the
#     tail-variant fuzz) alongside the warm compiles;
#  B. default vs bsplit, GDN verify b1 / b32 / b256 / b512, T = 4 / 8, three pairs;
#  C. phase profile of the fp32 T = 8 verify CTA with bsplit.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
V=REPLAYSSM_GDN_VERIFY
PYT="python -m pytest -q -rs -p no:cacheprovider"
SG="def:- bs:${V}_BSPLIT=1"
SA="spec --layer gdn --batches 1,32,256,512 --T 4,8 --pairs fp32,fp8/fp32,nvfp4/fp16sr"
t0=$(date +%s)
( env ${V}_BSPLIT=1 timeout 330 python tests/gpu_scripts/check_gdn_verify.py > "$OUT/chk_bs.log" 2>&1; echo "rc=$?" >> "$OUT/chk_bs.log" ) &
( env ${V}_BSPLIT=1 timeout 330 $PYT -n 3 tests/test_gpu_spec.py -k "gdn and (fuzz or teeth or tail)" > "$OUT/t_fuzz_bs.log" 2>&1; echo "rc=$?" >> "$OUT/t_fuzz_bs.log" ) &
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
for s in $SG; do
  ( env $(envs "$s") timeout 330 python -m bench $SA --warm-only --no-plots --out /tmp/w_${s%%:*} > /tmp/w_${s%%:*}.log 2>&1 ) &
done
( env REPLAYSSM_GDN_PROF=1 ${V}_BSPLIT=1 timeout 330 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --verify-T 8 \
    --pairs fp32 --batches 8 --modes nonflush --out /tmp/prof_warm > /tmp/w_prof.log 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in chk_bs t_fuzz_bs; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|Error|configurations" "$OUT/$f.log" | tail -5; done
mkdir -p /tmp/g1
OUT=/tmp/g1 SETTINGS="$SG" BENCH_ARGS="$SA" REPLAYS=7 RUN_S=150 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh > /tmp/g1.log 2>&1
echo "grid done $(( $(date +%s) - t0 )) s"
env ${V}_BSPLIT=1 timeout 150 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --verify-T 8 \
    --pairs fp32 --batches 256 --modes nonflush,flush --out /tmp/prof_bs > "$OUT/prof_bs.log" 2>&1
(cd /tmp && tar czf "$OUT/call3.tgz" g1 g1.log w_*.log prof_bs 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
python - /tmp/g1 <<'PY'
import json, sys, os
d = sys.argv[1]; names = ["def", "bs"]; res = {}; order = []
for n in names:
    p = os.path.join(d, n, "spec.json")
    if not os.path.exists(p): continue
    for c in json.load(open(p))["cells"]:
        k = (c["batch"], c.get("T"), c["name"])
        if k not in res: res[k] = {}; order.append(k)
        res[k][n] = c.get("median_us")
print("| b | T | kernel | def | bs | def/bs |")
for k in order:
    v = [res[k].get(n) for n in names]
    r = f"{v[0] / v[1]:.3f}" if v[0] and v[1] else "-"
    print(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(f"{x:.1f}" if x else "-" for x in v) + f" | {r} |")
PY
grep "^|" "$OUT/prof_bs.log" | tail -6
