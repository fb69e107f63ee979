#!/usr/bin/env bash
# Session 14, device call 5 (the landing defaults: bsplit on at a 128-register budget):
#  A. test_gpu_spec -k gdn and the gdn tests of test_gpu_ops; check_gdn_verify of the pairs that
#     now take bsplit (fp32, fp8/fp32, bf16/fp32); the l2-off fp32-acts failure of call 4 with
#     the previous build (BSPLIT=0) to see whether it predates this change; warm compiles;
#  B. the GDN spec table (b1 / 32 / 256 / 512, T = 1 / 2 / 4 / 8, three pairs).
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:$PYTHONPATH
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export REPLAYSSM_KERNEL_CACHE_DIR=/tmp/replayssm_kernels
V=REPLAYSSM_GDN_VERIFY
C=tests/gpu_scripts/check_gdn_verify.py
PYT="python -m pytest -q -rs -p no:cacheprovider"
SA="spec --layer gdn --batches 1,32,256,512 --T 1,2,4,8 --pairs fp32,nvfp4/fp16sr,fp8/fp32 --no-plots"
t0=$(date +%s)
( timeout 230 $PYT -n 4 tests/test_gpu_spec.py -k gdn > "$OUT/t_spec_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_spec_gdn.log" ) &
( timeout 230 $PYT -n 2 tests/test_gpu_ops.py -k "gdn or cuda_graph" > "$OUT/t_ops_gdn.log" 2>&1; echo "rc=$?" >> "$OUT/t_ops_gdn.log" ) &
( timeout 230 python $C --pairs fp32,fp8/fp32,bf16/fp32 > "$OUT/chk_new.log" 2>&1; echo "rc=$?" >> "$OUT/chk_new.log" ) &
( env ${V}_BSPLIT=0 timeout 230 python $C --pairs fp32,nvfp4/fp8sr > "$OUT/chk_old.log" 2>&1; echo "rc=$?" >> "$OUT/chk_old.log" ) &
( timeout 230 python -m bench $SA --warm-only --out /tmp/w_spec > /tmp/w_spec.log 2>&1 ) &
wait
echo "phase A $(( $(date +%s) - t0 )) s"
for f in t_spec_gdn t_ops_gdn chk_new chk_old; do echo "== $f"; grep -E "passed|failed|FAIL|rc=|configurations" "$OUT/$f.log" | cut -c1-200 | tail -4; done
timeout 160 python -m bench $SA --replays 7 --out "$OUT/spec" > "$OUT/spec.log" 2>&1; echo "spec rc=$?"
echo "total $(( $(date +%s) - t0 )) s"
grep -E "^\| gdn \| (256|512) \| 8 " "$OUT/spec/spec.md" | head -20
