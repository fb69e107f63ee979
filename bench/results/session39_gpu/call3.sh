#!/usr/bin/env bash
# Session 39, call 3 (run `tools/device_slim.sh out` first, carry .device, which holds the
# session-start e8ac835 copies of cute_kernels/mamba2_{replay,verify}.py in .device/base/): the
# final kernel code -- the s38 x-ring hoist and z-only buffer + the non-flush cap at L16 below 256
# rows (call 2) -- against the session start, back to back, each tree its own kernel cache.
#  A. the GPU tests of the final-code set at this code (beside both trees' warm compiles).
#  B. start / final on Super and Nano-4B: L16 b64 / b256 / b512 nvfp4/{fp16sr,fp32} + fp32 (the
#     control: an unchanged build). Prediction (calls 1-2): Super 0.93-0.99x (b64 ~0.97-1.0x,
#     b256 / b512 0.93-0.95x), Nano-4B 0.98-1.0x, fp32 1.00x.
# (A first run of a larger version, with L8 / L32 and b128, lost its machine mid-call: trimmed
# to fit the 600 device-seconds left.)
set -u
source .device/gpu_env.sh >/dev/null 2>&1
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/c3; rm -rf "$OUT" /tmp/base; mkdir -p "$OUT"
tarball() { (cd "$OUT" && tar czf "$FINAL/call3.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
cp -r "$PWD" /tmp/base && cp .device/base/mamba2_replay.py .device/base/mamba2_verify.py /tmp/base/cute_kernels/ || exit 1
! grep -q "SPLIT_NFCAP" /tmp/base/cute_kernels/mamba2_replay.py && grep -q "SPLIT_NFCAP" cute_kernels/mamba2_replay.py || { echo "trees?"; exit 1; }
P="--no-peers --no-plots --warm-jobs 2"
E1="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 64,256,512 --L 16 --pairs nvfp4/fp16sr,nvfp4/fp32,fp32 $P"
grid() {  # tree name n [warm]: grid n in that tree, its own kernel cache
  eval "local B=\$E$3"
  (cd "$1" && PYTHONPATH="$1" REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc_$2 OUT=$OUT/g$3_$2 SETTINGS="$2:-" \
     BENCH_ARGS="$B" REPLAYS=9 RUN_S=${RUN_S:-80} WARM_S=${WARM_S:-240} WARM_JOBS=1 \
     bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/grid$3_$2_${4:-run}.log" 2>&1)
}
for n in 1; do ( RUN_S=1 grid /tmp/base start $n warm ) & ( RUN_S=1 grid "$PWD" final $n warm ) & done
export PYTHONPATH=$PWD:${PYTHONPATH:-}
T="timeout 290 python -m pytest -q -rs -p no:cacheprovider"
( $T -n 4 tests/test_gpu_ops.py -k "fold_pair_bit_identical or flush_v1 or (mamba2 and replay_step_matches_torch_reference) or mamba2_decode_at_256_threads" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( $T -n 4 tests/test_gpu_row_order.py -k "mamba2" > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
( $T -n 3 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_ops t_order t_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8; done
for n in 1; do
  grid /tmp/base start $n; grid "$PWD" final $n; echo "g$n $(( $(date +%s) - t0 )) s"; tarball
done
python - "$OUT" <<'PY' | tee "$OUT/merged.md"
import json, os, sys
o = sys.argv[1]
print("| shape | batch | L | kernel | start | final | final/start |\n|---|---:|---:|---|---:|---:|---:|")
for n in (1,):
    cells = {}
    for s in ("start", "final"):
        p = os.path.join(o, f"g{n}_{s}", s, "sweep.json")
        if os.path.exists(p):
            for c in json.load(open(p))["cells"]:
                cells.setdefault((c["shape"], c["batch"], c["L"], c["name"]), {})[s] = c.get("median_us")
    for k, v in cells.items():
        if k[3].startswith("standard"):
            continue
        a, b = v.get("start"), v.get("final")
        r = f"{b / a:.3f}x" if a and b else "-"
        print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {a and round(a, 1)} | {b and round(b, 1)} | {r} |")
PY
tarball
