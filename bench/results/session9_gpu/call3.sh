#!/usr/bin/env bash
# Session 9, device call 3: GDN verify flush hook with 2 / 4 draft vectors per iteration
# (REPLAYSSM_GDN_VERIFY_HOOK_VPI), the tail for nvfp4 past T = 4 at 3 and 2 CTAs/SM now that the
# fp16-SR encode is exact (call2), the decode at 3 CTAs/SM; GPU checks with VPI 4 / 2 forced;
# verify flush sub-phases with VPI 4.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
bg() { local n=$1; shift; ( timeout "${CHECK_S:-280}" "$@" >"$OUT/$n.log" 2>&1; echo "rc=$?" >>"$OUT/$n.log" ) & }
V=REPLAYSSM_GDN_VERIFY_HOOK_VPI
VER="spec --layer gdn --batches 256 --T 8 --pairs fp32,nvfp4/fp16sr,fp8/fp32"
GV="d:- v2:$V=2 v4:$V=4 t3:REPLAYSSM_GDN_VERIFY_TAIL=1 t2:REPLAYSSM_GDN_VERIFY_TAIL=1,REPLAYSSM_GDN_VERIFY_MINB=2"
DEC="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs nvfp4/fp16sr,fp8/fp32 --phases --no-peers"
GD="d:- m3:REPLAYSSM_GDN_REPLAY_MINB=3"
bg t_v4 env $V=4 python tests/gpu_scripts/check_gdn_verify.py --quick
bg t_v2 env $V=2 python tests/gpu_scripts/check_gdn_verify.py --quick
bg t_spec env $V=4 $PYT -n 4 tests/test_gpu_spec.py -k gdn
for s in $GV; do kv=${s#*:}; [ "$kv" = - ] && kv=; kv=${kv//,/ }
  bg w_v_${s%%:*} env $kv python -m bench $VER --warm-only --no-plots --out /tmp/w_v_${s%%:*}; done
for s in $GD; do kv=${s#*:}; [ "$kv" = - ] && kv=; kv=${kv//,/ }
  bg w_d_${s%%:*} env $kv python -m bench $DEC --warm-only --no-plots --out /tmp/w_d_${s%%:*}; done
wait
mkdir -p "$OUT/ver" "$OUT/dec"
OUT="$OUT/ver" SETTINGS="$GV" BENCH_ARGS="$VER" REPLAYS=5 RUN_S=100 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/ver.log" 2>&1
OUT="$OUT/dec" SETTINGS="$GD" BENCH_ARGS="$DEC" REPLAYS=5 RUN_S=100 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/dec.log" 2>&1
env $V=4 timeout 120 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --verify-T 8 \
  --pairs nvfp4/fp16sr,fp8/fp32 --batches 256 --modes flush --out "$OUT" > "$OUT/prof.log" 2>&1
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|configurations|rc=|Error" "$f" | tail -4; done
for f in "$OUT"/w_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
cat "$OUT"/ver/knobs.md "$OUT"/dec/knobs.md
grep -A5 "flush sub-phases" "$OUT/prof.log"
cd "$OUT" && tar czf logs.tgz *.log dec ver prof_*.json 2>/dev/null && rm -rf dec ver *.log prof_*.json
