"""Static SASS per profiled phase of the GDN v2 replay kernel (CPU only, no GPU).

Builds the profiling variant (``REPLAYSSM_GDN_PROF=1``: its ``%clock64`` stamps become
``SR_CLOCKLO`` reads that mark the phase boundaries) with the DSL's own cubin kept
(``compile_only(..., dump_dir=...)``), disassembles it with ``nvdisasm`` (``pip download
nvidia-cuda-nvdisasm`` and unzip; its path in ``NVDISASM``) and prints, between consecutive
markers, the instruction count and mix: spill loads / stores, barriers, global loads, mma.

    python tests/gpu_scripts/sass_phases.py nvfp4/fp16sr 4 [first last]   # pair, CTAs per SM;
                                                                         # + a raw listing
"""
import glob
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ["REPLAYSSM_PDL"] = "0"
os.environ["REPLAYSSM_GDN_PROF"] = "1"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from cute_kernels import gdn_replay  # noqa: E402

NVDISASM = os.environ.get("NVDISASM", "/tmp/cuobj/nvidia/cu13/bin/nvdisasm")
SHOWN = ("LDL", "STL", "BAR", "LDG", "HMMA")


def sass_lines(pair: str, ctas_per_sm: int):
    """The kernel's SASS instructions (one string each), compiled for ``ctas_per_sm``."""
    d = tempfile.mkdtemp()
    gdn_replay.compile_only(pair, min_blocks_per_mp=ctas_per_sm, dump_dir=d)
    cubin = sorted(glob.glob(os.path.join(d, "**", "*.cubin"), recursive=True))[-1]
    text = subprocess.run([NVDISASM, "-c", cubin], capture_output=True, text=True,
                          check=True).stdout
    return [ln for ln in text.split("\n") if re.search(r"/\*[0-9a-f]{4,}\*/", ln)]


def opcode(line: str) -> str:
    """The base opcode of one SASS line (predicate and modifiers dropped)."""
    words = re.sub(r".*?\*/\s*", "", line, count=1).split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def main():
    pair, ctas = sys.argv[1], int(sys.argv[2])
    lines = sass_lines(pair, ctas)
    marks = [i for i, ln in enumerate(lines) if "SR_CLOCKLO" in ln]
    print(f"{pair} at {ctas} CTAs/SM: {len(lines)} instructions, phase markers at {marks}")
    for a, b in zip(marks, marks[1:]):
        mix = Counter(opcode(ln) for ln in lines[a:b])
        shown = " ".join(f"{k}={mix.get(k, 0)}" for k in SHOWN)
        print(f"[{a}:{b}] n={b - a} {shown} top={mix.most_common(8)}")
    if len(sys.argv) > 4:
        for ln in lines[int(sys.argv[3]):int(sys.argv[4])]:
            print(re.sub(r"\s+", " ", ln.strip())[:110])


if __name__ == "__main__":
    main()
