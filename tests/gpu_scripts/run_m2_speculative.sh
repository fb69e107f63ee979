#!/usr/bin/env bash
# The Mamba-2 tiny-batch ("speculative") decode variant on the GPU machine, one device call:
#   1. timing, A/B in one run: the Nemotron-3-Super sweep at batch 1..8 (phases too) with the
#      variant off (REPLAYSSM_M2_SPECULATIVE=0) and with the launcher's choice (batch <= 4: on);
#   2. correctness: check_mamba2_replay.py (CHECK_ARGS, default --quick: one configuration per
#      pair) with every configuration forced through the variant (REPLAYSSM_M2_SPECULATIVE=1).
# Usage (repo root, .device staged): bash tests/gpu_scripts/run_m2_speculative.sh
# Writes under $OUT: check.log, sweep_off/, sweep_auto/ (JSON + md), ab.md (the A/B table).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PAIRS=${PAIRS:-fp32,nvfp4/fp16sr,fp8/fp32,bf16/fp32}
# timing first, alone on the GPU (A/B back to back)
for mode in off auto; do
  env $([ $mode = off ] && echo REPLAYSSM_M2_SPECULATIVE=0) timeout "${SWEEP_S:-200}" \
    python -m bench sweep --shapes nemotron3-super --batches 1,2,4,8 --L 16 --pairs "$PAIRS" \
    --phases --replays 9 --no-plots --no-peers --out "$OUT/sweep_$mode" >"$OUT/sweep_$mode.log" 2>&1
done
# then the correctness check (one configuration per pair, every pair)
REPLAYSSM_M2_SPECULATIVE=1 timeout "${CHECK_S:-240}" python tests/gpu_scripts/check_mamba2_replay.py \
  ${CHECK_ARGS:---quick} >"$OUT/check.log" 2>&1; echo "rc=$?" >>"$OUT/check.log"
python - "$OUT" <<'PY' | tee "$OUT/ab.md"
import json, sys
out = sys.argv[1]
cells = {m: json.load(open(f"{out}/sweep_{m}/sweep.json"))["cells"] for m in ("off", "auto")}
key = lambda c: (c["batch"], c.get("L"), c["name"])
off = {key(c): c["median_us"] for c in cells["off"]}
print("| batch | kernel | off µs | auto µs | off/auto |\n|---:|---|---:|---:|---:|")
for c in cells["auto"]:
    k = key(c)
    if k in off:
        print(f"| {c['batch']} | {c['name']} | {off[k]:.2f} | {c['median_us']:.2f} | "
              f"{off[k] / c['median_us']:.3f}x |")
PY
grep -E "configurations|FAIL|rc=" "$OUT/check.log" | tail -5
