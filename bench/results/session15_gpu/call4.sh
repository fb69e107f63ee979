#!/usr/bin/env bash
# Session 15, device call 4: the GDN decode read tile bulk-prefetched into L2 at the slot
# (REPLAYSSM_GDN_READ_L2PF=1) -- call 3's profile has the fp32 non-flush CTA at 4.9 µs with
# 1.77 resident per SM (3.1 TB/s, the read-only ceiling being 4.3 TB/s) and its tile loads
# touching half lines per warp instruction; does a whole-line DRAM stream ahead of them help?
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs fp32,bf16/fp32 --phases --no-peers"
GD="def:- pf:REPLAYSSM_GDN_READ_L2PF=1 pfp3:REPLAYSSM_GDN_READ_L2PF=1,REPLAYSSM_GDN_PREAMBLE=3"
t0=$(date +%s)
mkdir -p /tmp/gd
OUT=/tmp/gd SETTINGS="$GD" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=100 WARM_S=200 WARM_JOBS=3 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
(cd /tmp && tar czf "$OUT/call4.tgz" gd gd.log 2>/dev/null)
echo "total $(( $(date +%s) - t0 )) s"
cat /tmp/gd/knobs.md | cut -c1-200
