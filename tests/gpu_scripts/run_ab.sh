#!/usr/bin/env bash
# A/B timing of one implementation switch in ONE device call, then the correctness checks.
#   AB_ENV=REPLAYSSM_M2_EARLY_ARRIVE bash tests/gpu_scripts/run_ab.sh
# 1. timing, alone on the GPU, back to back: `bench sweep $SWEEP_ARGS` with $AB_ENV=0 (A) and
#    $AB_ENV=1 (B) -> $OUT/sweep_A, $OUT/sweep_B and the ratio table $OUT/ab.md;
# 2. correctness with $AB_ENV=1: $CHECKS (';'-separated commands, default the Mamba-2 decode and
#    verify checks, one configuration per pair) -> $OUT/check_<i>.log.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
: "${AB_ENV:?name the environment switch to A/B}"
SWEEP_ARGS=${SWEEP_ARGS:---shapes nemotron3-super --batches 1,8,256,512 --L 16 --pairs fp32,nvfp4/fp16sr,fp8/fp32}
CHECKS=${CHECKS:-"python tests/gpu_scripts/check_mamba2_replay.py --quick;python tests/gpu_scripts/check_mamba2_verify.py --quick"}
for ab in A B; do
  v=0; [ $ab = B ] && v=1
  env "$AB_ENV=$v" timeout "${SWEEP_S:-200}" python -m bench sweep $SWEEP_ARGS --replays 9 \
    --no-plots --no-peers --out "$OUT/sweep_$ab" >"$OUT/sweep_$ab.log" 2>&1
done
python - "$OUT" "$AB_ENV" <<'PY' | tee "$OUT/ab.md"
import json, sys
out, name = sys.argv[1], sys.argv[2]
cells = {m: json.load(open(f"{out}/sweep_{m}/sweep.json"))["cells"] for m in "AB"}
key = lambda c: (c["shape"], c["batch"], c.get("L"), c["name"])
a = {key(c): c["median_us"] for c in cells["A"]}
print(f"| shape | batch | kernel | {name}=0 µs | {name}=1 µs | A/B |\n|---|---:|---|---:|---:|---:|")
for c in cells["B"]:
    k = key(c)
    if k in a:
        print(f"| {c['shape']} | {c['batch']} | {c['name']} | {a[k]:.2f} | {c['median_us']:.2f} | "
              f"{a[k] / c['median_us']:.3f}x |")
PY
i=0
IFS=';' read -ra cmds <<<"$CHECKS"
for c in "${cmds[@]}"; do
  ( env "$AB_ENV=1" timeout "${CHECK_S:-240}" $c >"$OUT/check_$i.log" 2>&1; echo "rc=$?" >>"$OUT/check_$i.log" ) &
  i=$((i + 1))
done
wait
for f in "$OUT"/check_*.log; do echo "== $f"; grep -E "configurations|FAIL|rc=" "$f" | tail -4; done
