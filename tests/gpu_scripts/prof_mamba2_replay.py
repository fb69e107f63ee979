"""Where a ReplaySSM decode CTA (Mamba-2, or GDN v2 with ``--layer gdn``) spends its time, measured
inside the kernel.

Builds the decode kernel with ``REPLAYSSM_M2_PROF=1`` / ``REPLAYSSM_GDN_PROF=1`` (thread 0 of every
CTA stamps ``%clock64`` at
the phase boundaries, ``%globaltimer`` at its start and end, and its ``%smid``, over the first
words of its output row -- see ``cute_kernels.mamba2_replay._prof_default``), runs CUDA graphs of
back-to-back steps (state pools larger than L2, one output buffer per step) with every row pinned
non-flush, pinned flush, or staggered over 0..L (h = L flushes), and reports per configuration: the kernel span, CTA
lifetimes, the average number of resident CTAs per SM, and the median time of each phase.

    python tests/gpu_scripts/prof_mamba2_replay.py [--layer gdn] [--pairs ...] [--batches 1,256]
    python tests/gpu_scripts/prof_mamba2_replay.py --layer gdn --verify-T 8   # the GDN verify

With ``--verify-T T`` the verify kernel of T drafts is profiled instead (its record sits over
draft 0's output; pinned non-flush rows hold h = L - T, flush rows h = L); Mamba-2's needs
``REPLAYSSM_M2_PROF=1`` as well, which this script sets.
"""
import argparse
import json
import os
import sys

os.environ["REPLAYSSM_M2_PROF"] = "1"
os.environ["REPLAYSSM_GDN_PROF"] = "1"
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import torch  # noqa: E402

from bench import traffic  # noqa: E402
from bench.sweep import _gdn_inputs, _mamba2_inputs  # noqa: E402
from bench.timing import pool_rotation  # noqa: E402
from replayssm_lp import GDNReplayCache, Mamba2ReplayCache, ops  # noqa: E402

PHASES = ["slot+cursors", "preamble issue", "cb dots", "scan", "read+dot / flush", "append",
          "publish"]
GDN_PHASES = ["slot+cursors+qk", "ring issue+B frags", "read+S0 dots / flush", "coef dots",
              "u,o+appends", "publish"]
M2_VERIFY_PHASES = ["cursors+C", "cb dots", "decay scans", "read+outputs / flush+outputs",
                    "append", "publish"]
M2_VERIFY_EXTRA = 5        # cute_kernels.mamba2_verify.PROF_EXTRA
M2_VERIFY_HEAD_SUMS = ["dots+x", "outputs"]
M2_VERIFY_FLUSH_SUMS = ["head start", "fold", "hi wait+add", "dots", "encode+store+issue"]
GDN_VERIFY_PHASES = ["slot+cursors+qk", "decays+ring u", "read dots / flush", "stage keys",
                     "coef dots", "ring terms", "solve+outputs+appends", "publish"]


def _mamba2_setup(pair, batch, mode, L, shape, steps, T=0):
    """A Mamba-2 cache over a pool larger than L2 (``rot`` batches of slots) with every slot's
    cursor held non-flush (h = L // 2, or L - T for a verify of T drafts), flush (h = L) or
    staggered over 0..L (slot mod L + 1), and the sweep's single-token inputs."""
    d = traffic.SHAPES[shape]
    H, P, N, G = d["H"], d["P"], d["N"], d["G"]
    dev, act = torch.device("cuda"), torch.bfloat16
    tb = traffic.mamba2_bytes(pair, H, P, N, G, L)
    rot = max(pool_rotation(tb.amortized, batch), steps)
    cache = Mamba2ReplayCache(rot * batch, H, P, N, G, precision=pair, buffer_len=L,
                              act_dtype=act, device=dev, seed=1234,
                              **({"max_draft": T} if T else {}))
    cache.init_from_state(list(range(cache.num_slots)),
                          torch.randn(cache.num_slots, H, P, N, device=dev) * 0.1)
    s = torch.arange(cache.num_slots, device=dev, dtype=torch.int32)
    held = {"nonflush": torch.full_like(s, L - T if T else L // 2), "flush": torch.full_like(s, L),
            "staggered": s % (L + 1)}[mode]           # h = L: flushes (1 row in L + 1)
    cache.write_pos.copy_(held)
    return cache, held, _mamba2_inputs(batch, H, P, N, G, act, dev), rot, (H, P, N, G), dev, act


def run(pair, batch, mode, L=16, shape="nemotron3-super", steps=8, verify_T=0):
    if traffic.SHAPES[shape]["kind"] == "gdn":
        return run_gdn(pair, batch, mode, L, shape, steps, verify_T)
    if verify_T:
        return run_mamba2_verify(pair, batch, mode, L, shape, steps, verify_T)
    cache, held, inp, rot, (H, P, N, G), dev, act = _mamba2_setup(pair, batch, mode, L, shape,
                                                                  steps)
    sets = sets_of(rot, batch, dev)
    outs = [torch.empty(batch, H, P, dtype=act, device=dev) for _ in range(steps)]

    def step(i):
        ops.mamba2_decode(cache, inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], inp["D"],
                          None, inp["dt_bias"], True, sets[i % rot], out=outs[i], backend="cute")
    hpc = _hpc(batch, H, G)
    res = _records(cache, held, step, outs, steps,
                   lambda o: o.view(torch.int32).view(batch, H, P // 2)[:, ::hpc], 8)
    return summarize(res, pair, batch, mode, hpc, PHASES)


def run_mamba2_verify(pair, batch, mode, L, shape, steps, T):
    """The Mamba-2 verify kernel of T drafts (no commit: non-flush rows keep h); the single-token
    inputs repeated over the drafts; one record per CTA (its first head)."""
    cache, held, inp, rot, (H, P, N, G), dev, act = _mamba2_setup(pair, batch, mode, L, shape,
                                                                  steps, T)
    rep = lambda x: x.unsqueeze(1).expand(x.shape[0], T, *x.shape[1:]).contiguous()  # noqa: E731
    x, dt, B, C = (rep(inp[n]) for n in ("x", "dt", "B", "C"))
    sets = sets_of(rot, batch, dev)
    outs = [torch.empty(batch, T, H, P, dtype=act, device=dev) for _ in range(steps)]

    def step(i):
        ops.mamba2_verify(cache, x, dt, inp["A"], B, C, inp["D"], None, inp["dt_bias"], True,
                          sets[i % rot], out=outs[i], backend="cute")
    hpc = _hpc(batch, H, G)
    res = _records(cache, held, step, outs, steps,
                   lambda o: o[:, 0].contiguous().view(torch.int32).view(batch, H, P // 2)[:, ::hpc],
                   7, nextra=M2_VERIFY_EXTRA)
    r = summarize(res, pair, batch, mode, hpc, M2_VERIFY_PHASES)
    r["T"] = T
    # thread 0's clocks summed over the CTA: non-flush CTAs per head (dots + x staged, outputs),
    # flush CTAs over the flush's heads and chunks (sub-phases)
    for key, want, names in (("heads_med_us", 0, M2_VERIFY_HEAD_SUMS),
                             ("flush_sub_med_us", 1, M2_VERIFY_FLUSH_SUMS)):
        ex = [q["extra"][q["flush"] == want].double() / _clock_rate(q) / 1e3
              for q in res[1:] if (q["flush"] == want).any()]
        if ex:
            e = torch.cat(ex)
            r[key] = {n: e[:, i].median().item() for i, n in enumerate(names)}
    return r


def run_gdn(pair, batch, mode, L, shape, steps, verify_T=0):
    """The GDN v2 replay kernel (or, ``verify_T`` > 0, the verify kernel of that many drafts):
    one record per (row, value head) CTA (whole heads)."""
    T = verify_T
    d = traffic.SHAPES[shape]
    H, HV, K, V = d["H"], d["HV"], d["K"], d["V"]
    dev, act = torch.device("cuda"), torch.bfloat16
    tb = traffic.gdn_bytes(pair, H, HV, K, V, L)
    rot = max(pool_rotation(tb.amortized, batch), steps)
    cache = GDNReplayCache(rot * batch, H, HV, K, V, precision=pair, buffer_len=L, act_dtype=act,
                           device=dev, seed=1234, **({"max_draft": T} if T else {}))
    cache.init_from_state(list(range(cache.num_slots)),
                          torch.randn(cache.num_slots, HV, V, K, device=dev) * 0.1)
    s = torch.arange(cache.num_slots, device=dev, dtype=torch.int32)
    held = {"nonflush": torch.full_like(s, L - T if T else L // 2), "flush": torch.full_like(s, L),
            "staggered": s % (L + 1)}[mode]
    cache.write_pos.copy_(held)
    inp = _gdn_inputs(batch, H, HV, K, V, act, dev)
    if T:
        return _run_gdn_verify(cache, held, inp, T, sets_of(rot, batch, dev), steps, pair, batch,
                               mode)
    gates = dict(A_log=inp["A_log"], a=inp["a"], dt_bias=inp["dt_bias"], b=inp["b"])
    sets = [torch.arange(r * batch, (r + 1) * batch, device=dev, dtype=torch.int32)
            for r in range(rot)]
    outs = [torch.empty(batch, HV, V, dtype=act, device=dev) for _ in range(steps)]

    def step(i):
        ops.gdn_decode(cache, inp["q"], inp["k"], inp["v"], **gates, state_batch_indices=sets[i % rot],
                       out=outs[i], backend="cute")
    res = _records(cache, held, step, outs, steps, lambda o: o.view(torch.int32), 7)
    return summarize(res, pair, batch, mode, 1, GDN_PHASES)


def sets_of(rot, batch, dev):
    return [torch.arange(r * batch, (r + 1) * batch, device=dev, dtype=torch.int32)
            for r in range(rot)]


def _run_gdn_verify(cache, held, inp, T, sets, steps, pair, batch, mode):
    """Verify calls (no commit: non-flush rows keep h, pending is overwritten) of T drafts; the
    single-token inputs repeated over the drafts."""
    HV, V = cache.HV, cache.V
    rep = lambda x: x.unsqueeze(1).expand(x.shape[0], T, *x.shape[1:]).contiguous()  # noqa: E731
    q, k, v, a, b = (rep(inp[n]) for n in ("q", "k", "v", "a", "b"))
    outs = [torch.empty(batch, T, HV, V, dtype=v.dtype, device=v.device) for _ in range(steps)]

    def step(i):
        ops.gdn_verify(cache, q, k, v, A_log=inp["A_log"], a=a, dt_bias=inp["dt_bias"], b=b,
                       state_batch_indices=sets[i % len(sets)], out=outs[i], backend="cute")
    res = _records(cache, held, step, outs, steps, lambda o: o[:, 0].contiguous().view(torch.int32),
                   9)
    r = summarize(res, pair, batch, mode, 1, GDN_VERIFY_PHASES)
    r["T"] = T
    return r


def _records(cache, held, step, outs, steps, per_cta, nclk, nextra=0):
    """Graph of ``steps`` steps with the cursors pinned to ``held``; the profiling record of every
    CTA of every step (``per_cta(out)``: [.., words], one CTA per leading index)."""
    step(0)                                          # compile + warm
    torch.cuda.synchronize()
    cache.write_pos.copy_(held)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(steps):
            step(i)
    for _ in range(2):                               # clocks up; the last replay is read
        cache.write_pos.copy_(held)
        g.replay()
    torch.cuda.synchronize()
    nw = 2 + 2 * (2 + nclk + nextra)
    res = []
    for o in outs:
        w = per_cta(o)
        full = w.shape[-1]
        w = w[..., :nw].reshape(-1, nw).cpu().long() & 0xFFFFFFFF
        q = (w[:, 2::2] | (w[:, 3::2] << 32))        # g0, g1, c0..c(nclk-1)
        r = dict(sm=w[:, 0], flush=w[:, 1], g0=q[:, 0], g1=q[:, 1], c=q[:, 2:2 + nclk],
                 extra=q[:, 2 + nclk:])
        if full >= 32 + 2 + 2 * len(FLUSH_SUB):
            # GDN: the flush sub-phase record over words 32.. (stamps 0..9, generic votes 10, 11)
            ws = per_cta(o)[..., 32:32 + 2 + 2 * 12].reshape(-1, 26).cpu().long() & 0xFFFFFFFF
            r["sub"] = ws[:, 2::2] | (ws[:, 3::2] << 32)
        res.append(r)
    return res


FLUSH_SUB = ["stage ring+keys+gates", "Gram", "hi tile+P dots", "solve", "fold", "output hook",
             "CTA amax", "encode hi", "encode lo"]


def flush_sub(res):
    """Median µs of each flush sub-phase over the flush CTAs (missing stamps = 0 length) and the
    fraction of flush CTAs whose warp 0 took the generic encode path per copy."""
    durs, votes = [], []
    for r in res[1:]:
        if "sub" not in r:
            return None
        fl = r["flush"] == 1
        if not fl.any():
            continue
        rate = _clock_rate(r)
        st = r["sub"][fl, :10].clone()
        for i in range(1, 10):                       # a phase not compiled in: zero length
            st[:, i] = torch.where(st[:, i] == 0, st[:, i - 1], st[:, i])
        durs.append((st[:, 1:] - st[:, :-1]).double() / rate / 1e3)
        votes.append(r["sub"][fl, 10:12].double())
    if not durs:
        return None
    d, v = torch.cat(durs), torch.cat(votes)
    return dict(sub_med_us={n: d[:, i].median().item() for i, n in enumerate(FLUSH_SUB)},
                generic_frac_hi=v[:, 0].mean().item(), generic_frac_lo=v[:, 1].mean().item())


def _hpc(batch, H, G):
    from cute_kernels.mamba2_replay import choose_heads_per_cta
    return choose_heads_per_cta(batch, H, G)


def _clock_rate(r):
    """%clock64 cycles per %globaltimer ns over the CTAs of one step's records."""
    c = r["c"].double()
    return ((c[:, -1] - c[:, 0]).sum() / (r["g1"] - r["g0"]).double().sum()).item()


def summarize(res, pair, batch, mode, hpc, names):
    spans, life, resident, ph, flushfrac = [], [], [], [], []
    for r in res[1:]:                                # step 0 follows the pinning copy
        g0, g1, c = r["g0"].double(), r["g1"].double(), r["c"].double()
        span = (g1.max() - g0.min()).item()
        spans.append(span / 1e3)
        lt = (g1 - g0)
        life.append(lt)
        nsm = int(r["sm"].max().item()) + 1
        resident.append((lt.sum() / (span * nsm)).item())
        rate = _clock_rate(r)
        ph.append((c[:, 1:] - c[:, :-1]) / rate / 1e3)  # µs per phase per CTA
        flushfrac.append(r["flush"].double().mean().item())
    life = torch.cat(life) / 1e3
    ph = torch.cat(ph)
    med = lambda t: t.median().item()  # noqa: E731
    return dict(pair=pair, batch=batch, mode=mode, heads_per_cta=hpc, ctas=len(res[0]["g0"]),
                span_us=sorted(spans)[len(spans) // 2], life_med_us=med(life),
                life_p90_us=life.quantile(0.9).item(), resident_per_sm=sorted(resident)[len(resident) // 2],
                flush_frac=sum(flushfrac) / len(flushfrac),
                phases_med_us={n: med(ph[:, i]) for i, n in enumerate(names)},
                phases_mean_us={n: ph[:, i].mean().item() for i, n in enumerate(names)},
                flush_sub=flush_sub(res))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layer", default="mamba2", choices=("mamba2", "gdn"))
    ap.add_argument("--shape", default=None, help="default: nemotron3-super / qwen3.5-4b")
    ap.add_argument("--pairs", default="nvfp4/fp16sr,fp32,fp8/fp32")
    ap.add_argument("--batches", default="1,256")
    ap.add_argument("--modes", default="nonflush,staggered,flush")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp/out"))
    ap.add_argument("--verify-T", type=int, default=0, help="profile the verify of T drafts")
    a = ap.parse_args()
    shape = a.shape or ("qwen3.5-4b" if a.layer == "gdn" else "nemotron3-super")
    names = GDN_PHASES if a.layer == "gdn" else PHASES
    if a.verify_T:
        names = GDN_VERIFY_PHASES if a.layer == "gdn" else M2_VERIFY_PHASES
    rows = []
    for batch in [int(b) for b in a.batches.split(",")]:
        for pair in a.pairs.split(","):
            for mode in a.modes.split(","):
                rows.append(run(pair, batch, mode, shape=shape, verify_T=a.verify_T))
                print(json.dumps(rows[-1]), flush=True)
    os.makedirs(a.out, exist_ok=True)
    tag = f"{a.layer}_verify{a.verify_T}" if a.verify_T else f"{a.layer}_replay"
    json.dump(rows, open(os.path.join(a.out, f"prof_{tag}.json"), "w"), indent=1)
    print("| pair | batch | mode | CTAs | span µs | CTA life med / p90 µs | resident/SM | "
          + " | ".join(names) + " |")
    print("|---|---:|---|---:|---:|---:|---:|" + "---:|" * len(names))
    for r in rows:
        print(f"| {r['pair']} | {r['batch']} | {r['mode']} | {r['ctas']} | {r['span_us']:.1f} | "
              f"{r['life_med_us']:.2f} / {r['life_p90_us']:.2f} | {r['resident_per_sm']:.2f} | "
              + " | ".join(f"{r['phases_med_us'][n]:.2f}" for n in names) + " |")
    for r in rows:
        if r.get("heads_med_us"):
            print(f"{r['pair']} b{r['batch']} {r['mode']}: per CTA, summed over its heads: "
                  + ", ".join(f"{k} {v:.2f} µs" for k, v in r["heads_med_us"].items()))
        if r.get("flush_sub_med_us"):
            print(f"{r['pair']} b{r['batch']} {r['mode']}: per flush CTA, summed over its heads "
                  "and chunks: " + ", ".join(f"{k} {v:.2f} µs"
                                            for k, v in r["flush_sub_med_us"].items()))
    subs = [r for r in rows if r.get("flush_sub")]
    if subs:
        print("\nflush sub-phases (median µs over flush CTAs; generic = warp 0 took the exact "
              "per-element encode)\n")
        print("| pair | batch | mode | " + " | ".join(FLUSH_SUB) + " | generic hi / lo |")
        print("|---|---:|---|" + "---:|" * (len(FLUSH_SUB) + 1))
        for r in subs:
            f = r["flush_sub"]
            print(f"| {r['pair']} | {r['batch']} | {r['mode']} | "
                  + " | ".join(f"{f['sub_med_us'][n]:.2f}" for n in FLUSH_SUB)
                  + f" | {f['generic_frac_hi']:.2f} / {f['generic_frac_lo']:.2f} |")


if __name__ == "__main__":
    main()
