"""One GDN (``--layer mamba2``: Mamba-2) decode configuration under Nsight Compute: the launches
to profile run between ``cudaProfilerStart`` / ``Stop`` (run ncu with ``--profile-from-start
off``), every row's cursor
pinned non-flush (h = L // 2) or flush (h = L), one slot set per step from a pool larger than L2
(as ``prof_mamba2_replay.py``), the release build (no in-kernel stamps).

    ncu --profile-from-start off --clock-control none --kernel-name regex:GDNReplayDecodeV2 \\
        --section SourceCounters --section WarpStateStats -o rep \\
        python tests/gpu_scripts/ncu_gdn_step.py --pair fp8/fp32 --batch 1 --mode nonflush

Mamba-2: ``--kernel-name regex:Mamba2ReplayDecode`` (``--verify T``: ``regex:Mamba2Verify``), ``--shape nemotron3-super`` (the default
there); at >= 32 rows the decode runs its row order, and fp8 / nvfp4 read copies the split launch
(``--mode flush`` then profiles the split's flush half: every row flushes).

Per-instruction stall samples: ``ncu -i rep.ncu-rep --page source --csv --print-source sass``;
``tests/gpu_scripts/ncu_stalls.py`` sums them per code region.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import torch  # noqa: E402

from bench import traffic  # noqa: E402
from bench.sweep import _gdn_inputs  # noqa: E402
from bench.timing import pool_rotation  # noqa: E402
from replayssm_lp import GDNReplayCache, Mamba2ReplayCache, ops  # noqa: E402


def _slot_sets(a, tb, dev):
    """(rot, one slot set per step): ``rot`` sets of ``a.batch`` slots, a pool larger than L2
    (``tb``: the layer's traffic model)."""
    rot = max(pool_rotation(tb.amortized, a.batch), a.steps + 2)
    return rot, [torch.arange(r * a.batch, (r + 1) * a.batch, device=dev, dtype=torch.int32)
                 for r in range(rot)]


def _mamba2_step(a, dev, act):
    """(cache, step, rot) of a Mamba-2 decode (``--verify T``: a verify of T drafts) over a pool
    larger than L2 (``rot`` slot sets)."""
    from bench.sweep import _mamba2_inputs
    d = traffic.SHAPES[a.shape]
    H, P, N, G = d["H"], d["P"], d["N"], d["G"]
    T = a.verify
    rot, sets = _slot_sets(a, traffic.mamba2_bytes(a.pair, H, P, N, G, a.L), dev)
    cache = Mamba2ReplayCache(rot * a.batch, H, P, N, G, precision=a.pair, buffer_len=a.L,
                              max_draft=T, act_dtype=act, device=dev, seed=1234)
    cache.init_from_state(list(range(cache.num_slots)),
                          torch.randn(cache.num_slots, H, P, N, device=dev) * 0.1)
    inp = _mamba2_inputs(a.batch * max(T, 1), H, P, N, G, act, dev)
    if T:
        inp = {k: (v.reshape(a.batch, T, *v.shape[1:]) if k in ("x", "dt", "B", "C") else v)
               for k, v in inp.items()}
        out = torch.empty(a.batch, T, H, P, dtype=act, device=dev)
    else:
        out = torch.empty(a.batch, H, P, dtype=act, device=dev)
    op = ops.mamba2_verify if T else ops.mamba2_decode

    def step(i):
        op(cache, inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], inp["D"], None,
           inp["dt_bias"], True, sets[i % rot], out=out, backend="cute")
    return cache, step, rot


def _gdn_step(a, dev, act):
    """(cache, step, rot) of a GDN decode over a pool larger than L2 (``rot`` slot sets)."""
    d = traffic.SHAPES[a.shape]
    H, HV, K, V = d["H"], d["HV"], d["K"], d["V"]
    rot, sets = _slot_sets(a, traffic.gdn_bytes(a.pair, H, HV, K, V, a.L), dev)
    cache = GDNReplayCache(rot * a.batch, H, HV, K, V, precision=a.pair, buffer_len=a.L,
                           act_dtype=act, device=dev, seed=1234)
    cache.init_from_state(list(range(cache.num_slots)),
                          torch.randn(cache.num_slots, HV, V, K, device=dev) * 0.1)
    inp = _gdn_inputs(a.batch, H, HV, K, V, act, dev)
    gates = dict(A_log=inp["A_log"], a=inp["a"], dt_bias=inp["dt_bias"], b=inp["b"])
    out = torch.empty(a.batch, HV, V, dtype=act, device=dev)

    def step(i):
        ops.gdn_decode(cache, inp["q"], inp["k"], inp["v"], **gates,
                       state_batch_indices=sets[i % rot], out=out, backend="cute")
    return cache, step, rot


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pair", default="fp8/fp32")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--mode", default="nonflush", choices=("nonflush", "flush", "graph"),
                    help="graph: the sweep's timed graph (rows staggered over the L-cycle, rot x L "
                         "steps), one replay profiled (ncu --graph-profiling graph)")
    ap.add_argument("--L", type=int, default=16)
    ap.add_argument("--layer", default="gdn", choices=("gdn", "mamba2"))
    ap.add_argument("--shape", default=None, help="default: qwen3.5-4b / nemotron3-super")
    ap.add_argument("--steps", type=int, default=4, help="profiled launches")
    ap.add_argument("--verify", type=int, default=0, metavar="T",
                    help="Mamba-2 only: profile the verify of T drafts (kernel names "
                         "Mamba2VerifyKernel*); flush: every row at h = L (h + T > L), nonflush: "
                         "h = L - T; the cursors are reset before each launch")
    a = ap.parse_args()
    if a.verify and (a.layer != "mamba2" or a.mode == "graph" or not 1 <= a.verify <= 8):
        ap.error("--verify T (1..8) is for --layer mamba2 and the nonflush / flush modes")
    a.shape = a.shape or ("qwen3.5-4b" if a.layer == "gdn" else "nemotron3-super")
    dev, act = torch.device("cuda"), torch.bfloat16
    if a.layer == "mamba2":
        cache, step, rot = _mamba2_step(a, dev, act)
    else:
        cache, step, rot = _gdn_step(a, dev, act)
    h = {"nonflush": a.L // 2, "flush": a.L}.get(a.mode)
    if a.verify and a.mode == "nonflush":
        h = max(a.L - a.verify, 0)
    if a.mode == "graph":
        from bench.sweep import _stagger
        _stagger(cache, a.L)
        g = torch.cuda.CUDAGraph()
        for i in range(rot * a.L):          # compile + warm outside the capture
            step(i)
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            for i in range(rot * a.L):
                step(i)
        for _ in range(3):
            g.replay()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        g.replay()
        torch.cuda.profiler.stop()
        torch.cuda.synchronize()
        print(f"profiled one replay of {rot * a.L} steps: {a.pair} b{a.batch} L{a.L}", flush=True)
        return
    held = torch.full_like(cache.write_pos, h)   # (the ring's entries: zeros, as the prof script)
    cache.write_pos.copy_(held)
    step(0)                                 # the profiled build compiled and warm
    torch.cuda.synchronize()
    cache.write_pos.copy_(held)
    cache.pending.zero_()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for i in range(1, a.steps + 1):
        if a.verify:                        # a verify's flush moves the cursors: put them back
            cache.write_pos.copy_(held)
            cache.pending.zero_()
        step(i)
    torch.cuda.profiler.stop()
    torch.cuda.synchronize()
    print(f"profiled {a.steps} launches: {a.pair} b{a.batch} L{a.L} {a.mode} (h = {h}), "
          f"{cache.num_slots} slots", flush=True)


if __name__ == "__main__":
    main()
