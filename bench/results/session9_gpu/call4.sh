#!/usr/bin/env bash
# Session 9, device call 4: GDN verify flush with the pre-split tf32 key copies past the 47 KB
# budget (REPLAYSSM_GDN_VERIFY_KSPLIT=1; at T = 8 every pair, at T = 4 fp8 / fp32 / bf16 reads,
# used to split every key operand again inside the P dots and the fold), alone and with fp8 read
# copies at 2 CTAs/SM; GPU checks with it forced; verify flush sub-phases with it.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
bg() { local n=$1; shift; ( timeout "${CHECK_S:-280}" "$@" >"$OUT/$n.log" 2>&1; echo "rc=$?" >>"$OUT/$n.log" ) & }
K=REPLAYSSM_GDN_VERIFY_KSPLIT
VER="spec --layer gdn --batches 32,256 --T 4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32"
GV="d:- ks:$K=1 ks_m2:$K=1,REPLAYSSM_GDN_VERIFY_MINB=2"
bg t_vchk env $K=1 python tests/gpu_scripts/check_gdn_verify.py --quick
bg t_spec env $K=1 $PYT -n 4 tests/test_gpu_spec.py -k gdn
for s in $GV; do kv=${s#*:}; [ "$kv" = - ] && kv=; kv=${kv//,/ }
  bg w_v_${s%%:*} env $kv python -m bench $VER --warm-only --no-plots --out /tmp/w_v_${s%%:*}; done
wait
mkdir -p "$OUT/ver"
OUT="$OUT/ver" SETTINGS="$GV" BENCH_ARGS="$VER" REPLAYS=5 RUN_S=150 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/ver.log" 2>&1
env $K=1 timeout 120 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --verify-T 8 \
  --pairs fp32,nvfp4/fp16sr,fp8/fp32 --batches 256 --modes flush --out "$OUT" > "$OUT/prof.log" 2>&1
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error" "$f" | tail -4; done
for f in "$OUT"/w_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
cat "$OUT"/ver/knobs.md
grep -B3 -A5 "flush sub-phases" "$OUT/prof.log" | grep "^|"
cd "$OUT" && tar czf logs.tgz *.log ver prof_*.json 2>/dev/null && rm -rf ver *.log prof_*.json
