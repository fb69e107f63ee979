#!/usr/bin/env bash
# Session 16, device call 7: is the fp32 non-flush row bound by L1 allocation of its whole-row
# tile? (call 6: 64 KB more shared memory per CTA -- a smaller L1 -- made it 24 % slower).
# Grid def / na (ld.global.L1::no_allocate) / cg (ld.global.cg), fp32, b256, row-kind phases.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
FINAL=${OUT:-/tmp/out}; mkdir -p "$FINAL"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
SD="sweep --layer gdn --shapes qwen3.5-4b --batches 256 --L 16 --pairs fp32 --phases --no-peers"
G="def:- na:REPLAYSSM_GDN_TILE_LD=na cg:REPLAYSSM_GDN_TILE_LD=cg"
t0=$(date +%s)
OUT=/tmp/gd SETTINGS="$G" BENCH_ARGS="$SD" REPLAYS=7 RUN_S=60 WARM_S=120 bash tests/gpu_scripts/run_knob_grid.sh > /tmp/gd.log 2>&1
echo "grid $(( $(date +%s) - t0 )) s"
(cd /tmp && tar czf "$FINAL/call7.tgz" gd gd.log 2>/dev/null)
grep -v "standard bf16" /tmp/gd/knobs.md | cut -c1-200
