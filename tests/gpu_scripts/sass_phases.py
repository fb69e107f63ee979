"""Static SASS per profiled phase of the GDN v2 replay / verify kernel (CPU only, no GPU).

Builds the profiling variant (``REPLAYSSM_GDN_PROF=1``: its ``%clock64`` stamps become
``SR_CLOCKLO`` reads that mark the phase boundaries) with the DSL's own cubin kept
(``compile_only(..., dump_dir=...)``), disassembles it with ``nvdisasm`` (``pip download
nvidia-cuda-nvdisasm`` and unzip; its path in ``NVDISASM``) and prints, between consecutive
markers, the instruction count and mix: spill loads / stores, barriers, global loads, mma.

    python tests/gpu_scripts/sass_phases.py nvfp4/fp16sr 4 [first last]   # pair, CTAs per SM;
                                                                         # + a raw listing
    python tests/gpu_scripts/sass_phases.py nvfp4/fp16sr 3 --verify 8 --loops   # the verify kernel
                                                                         # (T = 8), its loops

``--load-spills`` lists the spill stores of a register still waiting for its global load (the
warp stalls there; a heuristic over the listing, see :func:`load_spills`). ``--loops`` lists
every backward branch (a loop: its first and last instruction, the phase it starts in, spill
loads / stores and mma inside), the static view of where spills repeat.
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

from cute_kernels import gdn_replay, gdn_verify  # noqa: E402

NVDISASM = os.environ.get("NVDISASM", "/tmp/cuobj/nvidia/cu13/bin/nvdisasm")
SHOWN = ("LDL", "STL", "BAR", "LDG", "HMMA")


def sass_lines(pair: str, ctas_per_sm: int, verify_T: int = 0):
    """The kernel's SASS instructions (one string each; label lines ``.L_x_N:`` kept, they mark
    branch targets), compiled for ``ctas_per_sm`` (``verify_T``: the verify kernel of T drafts)."""
    d = tempfile.mkdtemp()
    if verify_T:
        gdn_verify.compile_only(pair, T=verify_T, min_blocks_per_mp=ctas_per_sm, dump_dir=d)
    else:
        gdn_replay.compile_only(pair, min_blocks_per_mp=ctas_per_sm, dump_dir=d)
    cubin = sorted(glob.glob(os.path.join(d, "**", "*.cubin"), recursive=True))[-1]
    text = subprocess.run([NVDISASM, "-c", cubin], capture_output=True, text=True,
                          check=True).stdout
    return [ln for ln in text.split("\n")
            if re.search(r"/\*[0-9a-f]{4,}\*/", ln) or re.match(r"\s*\.L_x_\d+:", ln)]


def split_labels(lines):
    """(instructions, {label: index of the instruction it precedes})."""
    ins, labels = [], {}
    for ln in lines:
        m = re.match(r"\s*(\.L_x_\d+):", ln)
        if m:
            labels[m.group(1)] = len(ins)
        else:
            ins.append(ln)
    return ins, labels


def loops(ins, labels, marks):
    """Backward branches: (first, last, phase, Counter of opcodes) per loop."""
    out = []
    for i, ln in enumerate(ins):
        m = re.search(r"BRA\s.*`\((\.L_x_\d+)\)", ln)
        if m and labels.get(m.group(1), i + 1) <= i:
            a = labels[m.group(1)]
            out.append((a, i, sum(1 for k in marks if k <= a),
                        Counter(opcode(x) for x in ins[a:i + 1])))
    return out


def _regs(text: str):
    """The register names (``R<n>``) written in an instruction's text."""
    return set(re.findall(r"\bR\d+\b", text))


def _load_dests(body: str):
    """The registers a global load writes: its first destination and, for a .64 / .128 load,
    the next 1 / 3."""
    m = re.match(r"(?:@!?U?P\w+\s+)?(LDG[\w.]*)\s+R(\d+)", body)
    if not m:
        return set()
    n = 4 if ".128" in m.group(1) else 2 if ".64" in m.group(1) else 1
    return {f"R{int(m.group(2)) + i}" for i in range(n)}


def load_spills(ins, window: int = 400):
    """Spill stores of a register whose value is a global load still in flight: the STL is the
    first instruction after the LDG that touches the register (scanning back at most
    ``window`` instructions, across branch targets too), so the warp waits there for the load.
    [(STL index, LDG index)]."""
    out = []
    for i, ln in enumerate(ins):
        if opcode(ln) != "STL":
            continue
        m = re.search(r"STL[.\w]*\s+\[[^\]]*\],\s*(R\d+)", ln)
        if not m:
            continue
        r = m.group(1)
        for j in range(i - 1, max(-1, i - window), -1):
            body = re.sub(r".*?\*/\s*", "", ins[j], count=1)
            if r not in _regs(body):
                continue
            if r in _load_dests(body):
                out.append((i, j))
            break
    return out


def opcode(line: str) -> str:
    """The base opcode of one SASS line (predicate and modifiers dropped)."""
    words = re.sub(r".*?\*/\s*", "", line, count=1).split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def main():
    args = sys.argv[1:]
    verify_T, show_loops, show_ls = 0, "--loops" in args, "--load-spills" in args
    if "--verify" in args:
        verify_T = int(args[args.index("--verify") + 1])
        del args[args.index("--verify"):args.index("--verify") + 2]
    args = [a for a in args if a not in ("--loops", "--load-spills")]
    pair, ctas = args[0], int(args[1])
    lines, labels = split_labels(sass_lines(pair, ctas, verify_T))
    marks = [i for i, ln in enumerate(lines) if "SR_CLOCKLO" in ln]
    print(f"{pair} at {ctas} CTAs/SM: {len(lines)} instructions, phase markers at {marks}")
    for a, b in zip(marks, marks[1:]):
        mix = Counter(opcode(ln) for ln in lines[a:b])
        shown = " ".join(f"{k}={mix.get(k, 0)}" for k in SHOWN)
        print(f"[{a}:{b}] n={b - a} {shown} top={mix.most_common(8)}")
    if show_loops:
        for a, b, ph, mix in loops(lines, labels, marks):
            print(f"loop [{a}:{b}] from phase {ph} n={b - a + 1} "
                  + " ".join(f"{k}={mix.get(k, 0)}" for k in SHOWN))
    if show_ls:
        found = load_spills(lines)
        print(f"spill stores waiting on an in-flight global load: {len(found)}")
        for i, j in found:
            ph = sum(1 for k in marks if k <= i)
            print(f"  STL at {i} (phase {ph}) <- LDG at {j}: "
                  + re.sub(r"\s+", " ", lines[i].strip())[:90])
    if len(args) > 3:
        for ln in lines[int(args[2]):int(args[3])]:
            print(re.sub(r"\s+", " ", ln.strip())[:110])


if __name__ == "__main__":
    main()
