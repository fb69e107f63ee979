"""PTX fingerprint of GDN verify builds (CPU only): md5 of the PTX with the kernel name masked,
plus ptxas' registers / spills (a local ptxas older than the DSL's PTX gets ``.version 9.0``).

    python tests/gpu_scripts/gdn_verify_md5.py fp32:8 nvfp4/fp16sr:4 fp8/fp32:8:64 decode:fp32 std:g

(arguments: pair:T[:block_v[:g]] for the verify (g: given g / beta; block_v may be empty); decode:pair for the decode step (raw gates),
decode:pair:g with given g / beta; ordered:pair the decode with the flush-first order; split1:pair /
split2:pair the split launch's non-flush / flush half; std:raw or std:g for the fp32 standard kernel)

Compare a default build with an env-forced one (same tree) to show a default is what was timed.
``GDN_MD5_ROUNDS``: the SR builds' Philox rounds (a cache's ``philox_rounds``; default 10).
"""
import hashlib
import os
import re
import sys

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ.setdefault("REPLAYSSM_PDL", "0")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from cute_kernels import common  # noqa: E402
from cute_kernels import gdn_replay as GR  # noqa: E402
from cute_kernels import gdn_standard as GS  # noqa: E402
from cute_kernels import gdn_verify as GV  # noqa: E402

GIVEN = dict(g_dtype="float32", beta_dtype="bfloat16")
ROUNDS = dict(philox_rounds=int(os.environ.get("GDN_MD5_ROUNDS", "10")))

for spec in sys.argv[1:]:
    parts = spec.split(":")
    if parts[0] == "decode":
        kw = GIVEN if parts[2:] == ["g"] else {}
        k, ptx = GR.compile_only(parts[1], keep_ptx=True, **kw, **ROUNDS)
    elif parts[0] in ("ordered", "split1", "split2"):
        # the decode with the flush-first order / one half of the split launch
        rows = 0 if parts[0] == "ordered" else int(parts[0][-1])
        k, ptx = GR.compile_only(parts[1], keep_ptx=True, row_order=True, rows=rows, **ROUNDS)
    elif parts[0] == "std":
        k, ptx = GS.compile_only(keep_ptx=True, **(GIVEN if parts[1] == "g" else {}))
    else:
        pair, T = parts[0], int(parts[1])
        bv = int(parts[2]) if len(parts) > 2 and parts[2] else None
        kw = GIVEN if parts[3:] == ["g"] else {}
        k, ptx = GV.compile_only(pair, T=T, keep_ptx=True, block_v=bv, **kw, **ROUNDS)
    md5 = hashlib.md5(re.sub(r"kernel_\w+", "K", ptx).encode()).hexdigest()[:10]
    info = common.ptxas_info(re.sub(r"\.version 9\.\d", ".version 9.0", ptx)) or ""
    regs = re.findall(r"Used (\d+) registers", info)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", info)
    print(f"{spec}: md5 {md5} registers {regs} spills {spills} {k.meta.get('tile', '')}", flush=True)
