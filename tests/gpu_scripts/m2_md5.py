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
builds (default Nemotron-3-Super); ``M2_MD5_ROUNDS``: the SR builds' Philox rounds (a cache's
``philox_rounds``; default 10).

``--loops`` also disassembles each build (ptxas on PATH, ``nvdisasm`` from ``pip download
nvidia-cuda-nvdisasm``, unzipped; its path in ``NVDISASM``) and prints its static SASS count and
every loop (a backward branch) of more than 100 instructions with its size in KB: the static view
of the hot loops (instruction-cache size questions, e.g. the pair fold's chunk loop).
"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

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


ROUNDS = int(os.environ.get("M2_MD5_ROUNDS", "10"))


def decode(pair, hpc, **kw):
    L = int(os.environ.get("M2_MD5_L", "16"))
    args = (pair, *SHAPE, L, L + 1, True, False, True, True, hpc)
    with common.dump_ptx() as d:
        k = MR.compile_mamba2_replay(*args, dump=d, philox_rounds=ROUNDS, **kw)
        ptx = d.read()
        d.cleanup()
    return k, ptx


NVDISASM = os.environ.get("NVDISASM", "/tmp/cuobj/nvidia/cu13/bin/nvdisasm")
_INSTR = re.compile(r"\s*/\*[0-9a-f]+\*/\s")


def sass_loops(ptx, min_len=100):
    """(static SASS count, [(first line, last line, instructions)] of every backward branch)."""
    with tempfile.TemporaryDirectory() as d:
        with open(f"{d}/k.ptx", "w") as fh:
            fh.write(ptx)
        subprocess.run([shutil.which("ptxas") or "ptxas", "-arch=sm_90a", f"{d}/k.ptx", "-o",
                        f"{d}/k.cubin"], check=True)
        lines = subprocess.run([NVDISASM, "-c", f"{d}/k.cubin"], capture_output=True, text=True,
                               check=True).stdout.splitlines()
    label = {m.group(1): i for i, l in enumerate(lines) if (m := re.match(r"^(\.L_x_\d+):", l))}
    count = [0]
    for l in lines:
        count.append(count[-1] + bool(_INSTR.match(l)))
    loops = []
    for i, l in enumerate(lines):
        m = re.search(r"BRA `\((\.L_x_\d+)\)", l)
        if m and label.get(m.group(1), i) < i:
            n = count[i + 1] - count[label[m.group(1)]]
            if n > min_len:
                loops.append((label[m.group(1)], i, n))
    return count[-1], loops


want_loops = "--loops" in sys.argv[1:]
for spec in [a for a in sys.argv[1:] if a != "--loops"]:
    parts = spec.split(":")
    kind, pair = parts[0], parts[1]
    if kind == "verify":
        rows = int(parts[3]) if len(parts) > 3 else 0
        d = dict(zip("HPNG", SHAPE[2:]))
        k, ptx = MV.compile_only(pair, T=int(parts[2]), heads_per_cta=4, keep_ptx=True, rows=rows,
                                 order_cursors=bool(rows), L=int(os.environ.get("M2_MD5_L", "16")),
                                 philox_rounds=ROUNDS, **d)
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
    if want_loops:
        total, loops = sass_loops(re.sub(r"\.version 9\.\d", ".version 9.0", ptx))
        print(f"  static SASS {total} ({16 * total / 1024:.1f} KB)")
        for a, b, n in loops:
            print(f"  loop lines {a}-{b}: {n} instructions, {16 * n / 1024:.1f} KB")
