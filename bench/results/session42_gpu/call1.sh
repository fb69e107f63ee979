#!/usr/bin/env bash
# A ready first device call for docs/patches/s39_mma_block_scales.patch,
# docs/patches/s39_verify_xring_hoist.patch (the verify's non-flush x-ring cp.async copies: (j,
# chunk) and ring index once per thread, through the decode's loop, now one method
# `_cpa_xring_heads` for both -- the decode's PTX unchanged by md5; static SASS of
# verify:nvfp4/fp16sr:8:1 2440 -> 2384, fp8/fp16sr 2240 -> 2176, fp32 2648 -> 2536; no spills,
# fp32's non-flush half 96 -> 104 registers) and docs/patches/s39_review_mends.patch (session 39's
# review: REPLAYSSM_M2_SPLIT_NFCAP in the launch memo's env names, the register check in
# 8-register units, a verify assert, the cap GPU test asserting the launched builds and the
# split tests' env setup in one helper, `nz` once instead of four `2 if has_z else 1`, the cap
# comment's L8 / L32 figures as measured, a docstring; PTX unchanged by md5). Apply in this
# order. The first patch: the decode's nvfp4
# tensor-core dot with the block scales on the block sums: B column c holds C' only at block c's
# k positions, so D[row][c] is block c's partial; no per-element mul.rn.f16x2 of A; the row
# reduction over the 4 lanes already there sums the blocks). Run on the device from the UNPATCHED
# tree (`tools/device_slim.sh out` first, carry .device):
#   source .device/gpu_env.sh && bash docs/patches/s39_next_call.sh
# It copies the tree to /tmp/base (unpatched), applies the patch in place, then
#  A. the final-code GPU test set on the patched tree (beside both trees' warm compiles);
#  B. base / patched back to back, each tree its own kernel cache: nvfp4/{fp16sr,fp8sr,fp32},
#     Super + Nano-4B, L16 b64 / b256 / b512 with --phases; L16 b1 / b4 / b16 (the shared kernel's
#     mma path); the verify (spec) Super b256 T4 / T8 nvfp4/fp16sr, fp8/fp16sr, fp32; one merged
#     table (predicted verify 0.98-1.0x).
# CPU facts (session 39): split1:nvfp4/fp16sr:8 per-head loop 318 -> 281 SASS lines (HMUL2 34 -> 0),
# 128 -> 114 registers, 0 spills; Nano-4B's 6-head build 128 -> 112; the shared decode builds keep
# 96 registers (ordered:nvfp4/fp8sr spills 72/156 -> 76/164 B); a numpy emulation of the fragment
# layout reproduced the dot to 1.7e-16. Prediction: Super non-flush only 0.95-0.98x, mixed
# 0.97-0.99x; Nano-4B the same; b1-b16 0.98-1.01x. If the tests pass and it wins: `git apply` the
# patch, commit, and quote this call's GPU tests (the final kernel code must be what they ran).
# DRY=1: only the copy / patch steps.
set -u
source .device/gpu_env.sh >/dev/null 2>&1
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
OUT=/tmp/n1; rm -rf "$OUT"; mkdir -p "$OUT"
source tests/gpu_scripts/ab_call_lib.sh
tarball() { (cd "$OUT" && tar czf "$FINAL/next1.tgz" --exclude='warm_*' . 2>/dev/null); }
t0=$(date +%s)
ab_trees docs/patches/s39_mma_block_scales.patch docs/patches/s39_verify_xring_hoist.patch \
         docs/patches/s39_review_mends.patch || exit 1
grep -q "_mma_nvfp4_blocks" cute_kernels/mamba2_replay.py && ! grep -q "_mma_nvfp4_blocks" /tmp/base/cute_kernels/mamba2_replay.py \
  || { echo "the trees are not base / patched"; exit 1; }
echo "trees ready $(( $(date +%s) - t0 )) s"
[ "${DRY:-0}" = 1 ] && exit 0
P="--pairs nvfp4/fp16sr,nvfp4/fp8sr,nvfp4/fp32 --no-peers --no-plots --warm-jobs 2"
E1="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 64,256,512 --L 16 --phases $P"
E2="sweep --layer mamba2 --shapes nemotron3-super,nemotron3-nano-4b --batches 1,4,16 --L 16 $P"
E3="spec --layer mamba2 --shapes nemotron3-super --pairs nvfp4/fp16sr,fp8/fp16sr,fp32 --batches 256 --T 4,8 --L 16 --no-plots"
ab_warm 1 2 3
m2_test_set
wait
echo "phase A $(( $(date +%s) - t0 )) s"; tarball
test_summary
ab_run 1 2 3; tarball
python tests/gpu_scripts/ab_merge.py "$OUT" base new 1 2 3 | tee "$OUT/merged.md"
tarball
