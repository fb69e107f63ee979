#!/usr/bin/env bash
# Session 9, device call 6: the Mamba-2 verify (fp32 non-flush CTA 58.6 µs at 3.8 CTAs/SM, call1
# profile) at 5 / 6 CTAs/SM (REPLAYSSM_M2V_MINBLOCKS) and 8 heads per CTA
# (REPLAYSSM_M2_HEADS_PER_CTA, exploratory), T = 8 b256; GPU checks with 5 and 6 forced.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
bg() { local n=$1; shift; ( timeout "${CHECK_S:-250}" "$@" >"$OUT/$n.log" 2>&1; echo "rc=$?" >>"$OUT/$n.log" ) & }
M=REPLAYSSM_M2V_MINBLOCKS
SPEC="spec --layer mamba2 --batches 256 --T 8 --pairs fp32,nvfp4/fp16sr,fp8/fp32"
GS="d:- m5:$M=5 m6:$M=6 h8:REPLAYSSM_M2_HEADS_PER_CTA=8"
for v in 5 6; do
  bg t_chk$v env $M=$v python tests/gpu_scripts/check_mamba2_verify.py --quick
  bg t_spec$v env $M=$v $PYT -n 2 tests/test_gpu_spec.py -k mamba2
done
for s in $GS; do kv=${s#*:}; [ "$kv" = - ] && kv=; kv=${kv//,/ }
  bg w_${s%%:*} env $kv python -m bench $SPEC --warm-only --no-plots --out /tmp/w_${s%%:*}; done
wait
mkdir -p "$OUT/ab"
OUT="$OUT/ab" SETTINGS="$GS" BENCH_ARGS="$SPEC" REPLAYS=5 RUN_S=90 WARM_S=20 \
  bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/ab.log" 2>&1
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error" "$f" | tail -4; done
for f in "$OUT"/w_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
cat "$OUT"/ab/knobs.md
cd "$OUT" && tar czf logs.tgz *.log ab 2>/dev/null && rm -rf ab *.log
