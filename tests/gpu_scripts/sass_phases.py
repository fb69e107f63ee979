"""Static SASS per phase of the GDN v2 replay kernel (CPU only): builds the profiling variant
(``REPLAYSSM_GDN_PROF=1``, whose ``%clock64`` reads become ``SR_CLOCKLO`` markers), assembles its
PTX with a local ``ptxas`` (the DSL's ``.version`` lowered to 9.0) and disassembles it with
``nvdisasm`` (``pip download nvidia-cuda-nvdisasm``, unzip; path in ``NVDISASM``); prints the
instruction mix between consecutive markers (spill loads / stores, barriers, global loads).

    python tests/gpu_scripts/sass_phases.py nvfp4/fp16sr 4 [first last]   # pair, CTAs per SM
"""
import os, sys, re, subprocess, tempfile
sys.path.insert(0, os.getcwd())
os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
os.environ["REPLAYSSM_PDL"] = "0"
os.environ["REPLAYSSM_GDN_PROF"] = "1"
from cute_kernels import gdn_replay as g
pair, mb = sys.argv[1], int(sys.argv[2])
k, ptx = g.compile_only(pair, min_blocks_per_mp=mb, keep_ptx=True)
ptx = re.sub(r"^\.version \S+", ".version 9.0", ptx, count=1, flags=re.M)
d = tempfile.mkdtemp()
open(d + "/k.ptx", "w").write(ptx)
r = subprocess.run(["ptxas", "-arch=sm_90a", "-v", d + "/k.ptx", "-o", d + "/k.cubin"], capture_output=True, text=True)
print(re.findall(r"Used \d+ registers.*", r.stdout + r.stderr))
sass = subprocess.run([os.environ.get("NVDISASM", "/tmp/cuobj/nvidia/cu13/bin/nvdisasm"), "-c", d + "/k.cubin"], capture_output=True, text=True).stdout
lines = [l for l in sass.split("\n") if re.search(r"/\*[0-9a-f]{4,}\*/", l)]
marks = [i for i, l in enumerate(lines) if "SR_CLOCKLO" in l]
print("instructions", len(lines), "clock reads at", marks)
for a, b in zip(marks, marks[1:]):
    seg = lines[a:b]
    ops = [re.sub(r".*\*/\s*", "", l).split()[0] if re.sub(r".*\*/\s*", "", l).split() else "" for l in seg]
    ops = [o if not o.startswith("@") else (re.sub(r".*\*/\s*", "", l).split()[1]) for o, l in zip(ops, seg)]
    cnt = {}
    for o in ops:
        base = o.split(".")[0]
        cnt[base] = cnt.get(base, 0) + 1
    top = sorted(cnt.items(), key=lambda x: -x[1])[:10]
    print(f"[{a}:{b}] n={b-a} LDL={cnt.get('LDL',0)} STL={cnt.get('STL',0)} BAR={cnt.get('BAR',0)} LDG={cnt.get('LDG',0)} HMMA={cnt.get('HMMA',0)} top={top}")
if len(sys.argv) > 3:
    a, b = int(sys.argv[3]), int(sys.argv[4])
    for l in lines[a:b]:
        print(re.sub(r"\s+", " ", l.strip())[:110])
