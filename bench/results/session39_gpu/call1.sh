#!/usr/bin/env bash
# A ready first device call for the two session-38 patches (bench/results/session39_gpu/s38_snf_*.patch (moved from docs/patches after this call)), run on
# the device from the UNPATCHED tree (`tools/device_slim.sh out` first, carry .device):
#   source .device/gpu_env.sh && bash bench/results/session39_gpu/call1.sh
# It copies the tree to /tmp/base (unpatched), applies both patches in place, then
#  A. the GPU tests of session 38 call 5 on the patched tree (beside the two trees' warm compiles);
#  B. base / patched, back to back, each tree with its own kernel cache: nvfp4/fp16sr, nvfp4/fp8sr,
#     nvfp4/fp32 on Super and Nano-4B, L16, b64 / b256 / b512 with --phases; one merged table.
# Prediction (CPU: 3 -> 4 CTAs/SM for Super's 8-head non-flush build without z, ~7 % fewer of its
# instructions): Super non-flush only 0.93-0.98x, mixed 0.96-0.99x; Nano-4B (6 heads: 4 CTAs/SM
# either way, 54032 -> 52112 B) only the instruction cut, 0.97-1.0x. DRY=1: only the copy / patch
# steps (a CPU check of this script: `DRY=1 OUT=/tmp/x bash bench/results/session39_gpu/call1.sh` in a
# clean clone with an empty .device/gpu_env.sh).
set -u
source .device/gpu_env.sh >/dev/null 2>&1
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n1; rm -rf "$OUT" /tmp/base; mkdir -p "$OUT"
tarball() { (cd "$OUT" && tar czf "$FINAL/next1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
cp -r "$PWD" /tmp/base || exit 1
for p in bench/results/session39_gpu/s38_snf_xz_no_z.patch bench/results/session39_gpu/s38_snf_xring_hoist.patch; do
  patch -p1 --forward < "$p" > /dev/null || { echo "patch $p failed"; exit 1; }
done
grep -q "per_head = (L - 1) \* CX" cute_kernels/mamba2_replay.py && ! grep -q "per_head" /tmp/base/cute_kernels/mamba2_replay.py \
  || { echo "the trees are not base / patched"; exit 1; }
echo "trees ready $(( $(date +%s) - t0 )) s"
[ "${DRY:-0}" = 1 ] && exit 0
E="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 64,256,512 --L 16 --pairs nvfp4/fp16sr,nvfp4/fp8sr,nvfp4/fp32 --phases --no-peers --no-plots --warm-jobs 3"
grid() {  # tree name: one setting of run_knob_grid in that tree, its own kernel cache
  (cd "$1" && PYTHONPATH="$1" REPLAYSSM_KERNEL_CACHE_DIR=/tmp/kc_$2 OUT=$OUT/g SETTINGS="$2:-" \
     BENCH_ARGS="$E" REPLAYS=9 RUN_S=${RUN_S:-90} WARM_S=${WARM_S:-250} WARM_JOBS=${WARM_JOBS:-1} \
     bash tests/gpu_scripts/run_knob_grid.sh > "$OUT/grid_$2_${3:-run}.log" 2>&1)
}
( RUN_S=1 grid /tmp/base base warm ) &
( RUN_S=1 grid "$PWD" new warm ) &
export PYTHONPATH=$PWD:${PYTHONPATH:-}
T="timeout 330 python -m pytest -q -rs -p no:cacheprovider"
( $T -n 4 tests/test_gpu_ops.py -k "fold_pair_bit_identical or flush_v1 or (mamba2 and replay_step_matches_torch_reference) or mamba2_decode_at_256_threads" > "$OUT/t_ops.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops.log" ) &
( $T -n 4 tests/test_gpu_row_order.py -k "mamba2" > "$OUT/t_order.log" 2>&1; echo "rc=$?" >> "$OUT/t_order.log" ) &
( $T -n 3 tests/test_gpu_spec.py -k "mamba2" > "$OUT/t_spec.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec.log" ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
for f in t_ops t_order t_spec; do echo "== $f: $(grep -E "passed|failed" "$OUT/$f.log" | tail -1) $(tail -1 "$OUT/$f.log")"; grep -E "^FAILED|^ERROR" "$OUT/$f.log" | head -8; done
grid /tmp/base base; echo "base $(( $(date +%s) - t0 )) s"
grid "$PWD" new; echo "new $(( $(date +%s) - t0 )) s"; tarball
python - "$OUT/g" <<'PY' | tee "$OUT/merged.md"
import json, os, sys
g = sys.argv[1]
cells = {}
for n in ("base", "new"):
    p = os.path.join(g, n, "sweep.json")
    if os.path.exists(p):
        for c in json.load(open(p))["cells"]:
            cells.setdefault((c["shape"], c["batch"], c["L"], c["name"]), {})[n] = c.get("median_us")
print("| shape | batch | L | kernel | base | new | new/base |\n|---|---:|---:|---|---:|---:|---:|")
for k, v in cells.items():
    b, n = v.get("base"), v.get("new")
    r = f"{n / b:.3f}x" if b and n else "-"
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {b or '-'} | {n or '-'} | {r} |")
PY
tarball
