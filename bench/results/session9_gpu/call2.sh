#!/usr/bin/env bash
# Session 9, device call 2: GDN flush encoders of SR formats (REPLAYSSM_GDN_ENCODE: 0 = session 8,
# fp16 SR generic for any warp with a value in (0, 2^-14), fp8 SR always generic; 1 = fp16 SR
# exact everywhere (lowprec.round_f16_sr); 2 = also fp8 SR exact, unrolled). GPU checks with 2
# forced (both new paths) + the state codec (now rounding fp16 SR with round_f16_sr, bit-exact
# check); decode sweep (phases) and verify T = 8 timed under 0 / 1 / 2; flush sub-phase profile.
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
PYT="python -m pytest -q -rs -p no:cacheprovider"
bg() { local n=$1; shift; ( timeout "${CHECK_S:-280}" "$@" >"$OUT/$n.log" 2>&1; echo "rc=$?" >>"$OUT/$n.log" ) & }
DEC="sweep --layer gdn --shapes qwen3.5-4b --batches 256,512 --L 16 --pairs nvfp4/fp16sr,nvfp4/fp8sr --phases --no-peers"
VER="spec --layer gdn --batches 256 --T 8 --pairs nvfp4/fp16sr,nvfp4/fp8sr"
GS="e0:REPLAYSSM_GDN_ENCODE=0 e1:REPLAYSSM_GDN_ENCODE=1 e2:REPLAYSSM_GDN_ENCODE=2"
bg t_codec python tests/gpu_scripts/check_state_codec.py
bg t_ops env REPLAYSSM_GDN_ENCODE=2 $PYT -n 2 tests/test_gpu_ops.py -k gdn
bg t_gchk env REPLAYSSM_GDN_ENCODE=2 python tests/gpu_scripts/check_gdn.py --quick --no-bench
bg t_vchk env REPLAYSSM_GDN_ENCODE=2 python tests/gpu_scripts/check_gdn_verify.py --quick
for s in $GS; do kv=${s#*:}; kv=${kv//,/ }
  bg w_d_${s%%:*} env $kv python -m bench $DEC --warm-only --no-plots --out /tmp/w_d_${s%%:*}
  bg w_v_${s%%:*} env $kv python -m bench $VER --warm-only --no-plots --out /tmp/w_v_${s%%:*}; done
bg t_spec env REPLAYSSM_GDN_ENCODE=2 $PYT -n 4 tests/test_gpu_spec.py -k gdn
wait
mkdir -p "$OUT/dec" "$OUT/ver"
OUT="$OUT/dec" SETTINGS="$GS" BENCH_ARGS="$DEC" REPLAYS=5 RUN_S=100 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/dec.log" 2>&1
OUT="$OUT/ver" SETTINGS="$GS" BENCH_ARGS="$VER" REPLAYS=5 RUN_S=100 WARM_S=30 \
  bash tests/gpu_scripts/run_knob_grid.sh >"$OUT/ver.log" 2>&1
REPLAYSSM_GDN_ENCODE=2 timeout 120 python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn \
  --pairs nvfp4/fp16sr,nvfp4/fp8sr --batches 256 --modes flush --out "$OUT" > "$OUT/prof.log" 2>&1
for f in "$OUT"/t_*.log; do echo "=== $f"; grep -E "passed|failed|FAIL|ok|differ|rc=|Error" "$f" | tail -5; done
for f in "$OUT"/w_*.log; do echo "$(basename "$f"): $(tail -1 "$f" | tr '\r' '\n' | tail -1)"; done
cat "$OUT"/dec/knobs.md "$OUT"/ver/knobs.md
grep -A6 "flush sub-phases" "$OUT/prof.log"
cd "$OUT" && tar czf logs.tgz *.log dec ver prof_*.json 2>/dev/null && rm -rf dec ver *.log prof_*.json
