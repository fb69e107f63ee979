#!/usr/bin/env bash
# Tuning grid in ONE device call: the same `python -m bench $BENCH_ARGS` under several settings of
# implementation / tuning environment switches, back to back and alone on the GPU, then one table
# of every cell's median per setting.
#   SETTINGS="A:REPLAYSSM_M2_MINBLOCKS=3 B:REPLAYSSM_M2_MINBLOCKS=5" \
#   BENCH_ARGS="sweep --shapes nemotron3-super --batches 256 --L 16 --pairs nvfp4/fp16sr --phases" \
#   bash tests/gpu_scripts/run_knob_grid.sh
# A setting is NAME:VAR=V[,VAR=V...] (NAME:- = no override). Compiles go first, WARM_JOBS settings
# at a time, into one disk kernel cache (the env switches are part of its key); then each setting
# is timed alone. Output: $OUT/<NAME>/ (the bench JSON), $OUT/<NAME>.log, $OUT/knobs.md (with two
# settings also their ratio).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=${REPLAYSSM_KERNEL_CACHE_DIR:-/tmp/replayssm_kernels}
: "${SETTINGS:?name the settings}" "${BENCH_ARGS:?name the bench command}"
envs() { local kv=${1#*:}; [ "$kv" = "-" ] && return; echo "${kv//,/ }"; }
i=0
for s in $SETTINGS; do
  ( env $(envs "$s") timeout "${WARM_S:-240}" python -m bench $BENCH_ARGS --warm-only --no-plots \
      --out "/tmp/warm_${s%%:*}" >"$OUT/warm_${s%%:*}.log" 2>&1 ) &
  i=$((i + 1)); [ $((i % ${WARM_JOBS:-4})) -eq 0 ] && wait
done
wait
for s in $SETTINGS; do
  n=${s%%:*}
  env $(envs "$s") timeout "${RUN_S:-120}" python -m bench $BENCH_ARGS --replays "${REPLAYS:-9}" \
    --no-plots --out "$OUT/$n" >"$OUT/$n.log" 2>&1 || echo "$n rc=$?" >>"$OUT/$n.log"
done
python - "$OUT" $SETTINGS <<'PY' | tee "$OUT/knobs.md"
import json, os, sys
out, settings = sys.argv[1], sys.argv[2:]
names = [s.split(":", 1)[0] for s in settings]
res, order = {}, []
for n in names:
    for f in ("sweep.json", "spec.json"):
        p = os.path.join(out, n, f)
        if os.path.exists(p):
            for c in json.load(open(p))["cells"]:
                k = (c.get("layer", c.get("shape")), c["batch"], c.get("T", c.get("L")), c["name"])
                if k not in res:
                    res[k] = {}
                    order.append(k)
                res[k][n] = c.get("median_us")     # (None: the cell failed, see its log)
print("settings: " + "; ".join(settings))
ab = len(names) == 2                       # two settings: their ratio too
print("| layer/shape | batch | T/L | kernel | " + " | ".join(names)
      + (f" | {names[0]}/{names[1]}" if ab else "") + " |")
print("|---|---:|---:|---|" + "---:|" * (len(names) + ab))
for k in order:
    v = [res[k].get(n) for n in names]
    r = (" | " + (f"{v[0] / v[1]:.3f}x" if None not in v else "-")) if ab else ""
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | "
          + " | ".join(f"{x:.1f}" if x is not None else "-" for x in v) + r + " |")
PY
