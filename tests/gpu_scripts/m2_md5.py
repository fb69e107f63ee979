"""PTX fingerprint of Mamba-2 builds (CPU only): md5 of the PTX with the kernel name masked, plus
ptxas' registers / spills (Nemotron-3-Super layer, bf16 acts, L = 16, ``REPLAYSSM_PDL=0``).

    python tests/gpu_scripts/m2_md5.py decode:fp32 decode:nvfp4/fp16sr:1 ordered:nvfp4/fp16sr \
        split1:nvfp4/fp16sr split2:nvfp4/fp16sr:2 verify:fp32:8 verify:nvfp4/fp16sr:4:1

(``decode:PAIR[:hpc]`` the decode step without the flush-first order, heads per CTA ``hpc``
(default 4, b256's choice); ``ordered:PAIR[:hpc]`` with the order and its cursors (b256's build);
``split1:PAIR[:hpc[:cap]]`` / ``split2:PAIR[:hpc]`` the decode split launch's non-flush half (at
most ``cap`` CTAs per SM: ``smem_ctas_cap``) / flush half;
``verify:PAIR:T[:rows]`` the verify at 4 heads per CTA, ``rows`` 1 / 2 a split launch's half
with the order's cursors.) Compare a default build with an env-forced one (same tree) to show a
default is what was timed, or a refactor's builds with the GPU-tested ones. ``M2_MD5_L``: the
buffer length (default 16); ``M2_MD5_SHAPE``: a `replayssm-bench traffic` Mamba-2 shape of all
builds (default Nemotron-3-Super).
"""
import hashlib
import os
import re
import sys

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ.setdefault("REPLAYSSM_PDL", "0")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from cute_kernels import common  # noqa: E402
from cute_kernels import mamba2_replay as MR  # noqa: E402
from cute_kernels import mamba2_verify as MV  # noqa: E402

SHAPE = ("bfloat16", "float32", 128, 64, 128, 8)      # acts, dt, H, P, N, G
if os.environ.get("M2_MD5_SHAPE"):
    from bench import traffic
    SHAPE = SHAPE[:2] + tuple(traffic.SHAPES[os.environ["M2_MD5_SHAPE"]][n] for n in "HPNG")


def decode(pair, hpc, **kw):
    L = int(os.environ.get("M2_MD5_L", "16"))
    args = (pair, *SHAPE, L, L + 1, True, False, True, True, hpc)
    with common.dump_ptx() as d:
        k = MR.compile_mamba2_replay(*args, dump=d, **kw)
        ptx = d.read()
        d.cleanup()
    return k, ptx


for spec in sys.argv[1:]:
    parts = spec.split(":")
    kind, pair = parts[0], parts[1]
    if kind == "verify":
        rows = int(parts[3]) if len(parts) > 3 else 0
        d = dict(zip("HPNG", SHAPE[2:]))
        k, ptx = MV.compile_only(pair, T=int(parts[2]), heads_per_cta=4, keep_ptx=True, rows=rows,
                                 order_cursors=bool(rows), L=int(os.environ.get("M2_MD5_L", "16")),
                                 **d)
    else:
        hpc = int(parts[2]) if len(parts) > 2 else 4
        kw = {}
        if kind != "decode":
            kw["row_order"] = True
        if kind.startswith("split"):
            kw["rows"] = int(kind[-1])
            kw["flush_positions"] = 20 if kw["rows"] == 2 else 0
            if kw["rows"] == 1 and len(parts) > 3:
                kw["smem_ctas_cap"] = int(parts[3])
        k, ptx = decode(pair, hpc, **kw)
    md5 = hashlib.md5(re.sub(r"kernel_\w+", "K", ptx).encode()).hexdigest()[:10]
    info = common.ptxas_info(re.sub(r"\.version 9\.\d", ".version 9.0", ptx)) or ""
    regs = re.findall(r"Used (\d+) registers", info)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", info)
    smem = k.meta["op"].smem_bytes() if "op" in k.meta else ""
    print(f"{spec}: md5 {md5} registers {regs} spills {spills} smem {smem}", flush=True)
