#!/usr/bin/env bash
# Ready for session 48's first device call (~8 min):
#  1. the GPU tests written after session 47's last call (the fragment flush's T <= 8 guard:
#     T 9 / 12 / 16 at 4 heads per CTA, single and split launch; the frag-split fuzz at 4 heads;
#     the frag-split encodes bit-identical to the CUDA-core flush at a zero fold, test_gpu_ops);
#  2. session 45's call on the final code (M2 test set, the verify re-measures; SKIP_SWEEP=1
#     drops the Super sweep -- run it in a second call when the budget allows).
#   source .device/gpu_env.sh && bash docs/patches/s48_call1.sh
source .device/gpu_env.sh >/dev/null 2>&1
export PYTHONPATH=$PWD:${PYTHONPATH:-}
mkdir -p "${OUT:-/tmp/out}"
t0=$(date +%s)
timeout ${NEW_S:-170} python -m pytest -q -rs -p no:cacheprovider -n 6 tests/test_gpu_spec.py tests/test_gpu_ops.py \
  -k "more_than_8 or frag_split" > "${OUT:-/tmp/out}/t_new.log" 2>&1; echo "rc=$?" >> "${OUT:-/tmp/out}/t_new.log"
echo "== t_new: $(grep -E "passed|failed" "${OUT:-/tmp/out}/t_new.log" | tail -1) $(tail -1 "${OUT:-/tmp/out}/t_new.log") $(( $(date +%s) - t0 )) s"
grep -E "^FAILED|^ERROR" "${OUT:-/tmp/out}/t_new.log" | head -8
TEST_S=${TEST_S:-200} SKIP_SWEEP=${SKIP_SWEEP-1} bash docs/patches/s45_next_call.sh
