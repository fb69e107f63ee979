#!/usr/bin/env python
"""GPU check of the GDN speculative-verify kernel (cute_kernels/gdn_verify.py) against the torch
reference (``R.gdn_verify(backend="torch")`` = ``reference.gdn_replay(commit_all=False)``) for every
precision pair, plus an optional CUDA-graph benchmark (``--bench``).

Per configuration, two GDNReplayCache objects with identical init sit in a pool larger than the
batch (scattered slots; the slots no row owns are filled with random bytes). The reference cache
encodes with the torch encoder (``formats.encode``). Each step is one verify + one commit with

* T drawn per call from 1..max_draft (or fixed), acceptance drawn per row from 0..T,
* ~25 % pad rows (random per step, so rows drift to different buffer positions and flush at
  different steps); ``out`` is poisoned with NaN and pad rows must stay NaN; every slot no valid
  row addresses in the step (pool slots and pad rows' slots) must stay byte-identical,

running the reference on one cache and the kernel (``gdn_verify_cute`` directly; the commit through
the CuTe commit kernel) on the other, then checks: outputs of valid rows within fp32 rounding
(bf16 / fp16 acts: 2 units of the act dtype or 1e-4 of the rms; fp32 acts 1e-5), raw k / v
buffers bit-exact, kinv / g / beta within 8 ulp, u within fp32 rounding, cursors exact after the
verify (write_pos = h or 0 on flush rows, pending = T, ring_origin, flush_count) and after the
commit, ``arrive`` back to 0, stored hi / lo within one unit of the target format (or, where the
fold's last fp32 bits differ after cancellation, within 4e-6 of the matrix rms). After the checks
the reference cache is overwritten with the kernel cache (one last-bit fold difference flips SR
decisions, which would then accumulate).

Usage (on the GPU machine, from the repository root)::

    python tests/gpu_scripts/check_gdn_verify.py --quick       # one config per pair (< 90 s)
    python tests/gpu_scripts/check_gdn_verify.py               # + random T, fp32 acts, Qwen shape
    python tests/gpu_scripts/check_gdn_verify.py --pairs fp32,nvfp4/fp16sr --full
    python tests/gpu_scripts/check_gdn_verify.py --bench       # verify T in 1,2,4,8 vs standard
    python tests/gpu_scripts/check_gdn_verify.py --self-test   # CPU: the checker vs itself

Prints one table row per configuration, then ``N/N configurations passed``; exits 1 on failure.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.abspath(os.path.join(_HERE, "..", ".."))
for _p in (_ROOT, _HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import torch  # noqa: E402

import replayssm_lp as R  # noqa: E402
from replayssm_lp import GDNReplayCache  # noqa: E402
from replayssm_lp.pairs import precision_pairs  # noqa: E402

from check_gdn import (  # noqa: E402
    _bits, _init, _torch_write_state, cache_tensors, close, decoded, gdn_inputs, ordinals,
    unit_diff)

SMALL = (2, 4, 128, 128)          # H, HV, K, V
QWEN = (16, 32, 128, 128)
HEADLINE = ("fp32", "nvfp4/fp16sr", "nvfp4/fp8sr", "fp8/fp16sr", "nvfp4sr")
_ACTN = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


# ----------------------------------------------------------------------------------------------
# cache helpers
# ----------------------------------------------------------------------------------------------
def poison_unowned(c, owned, gen):
    """Random bytes in every cache tensor of the slots no row owns (stray writes become visible)."""
    mask = torch.ones(c.num_slots, dtype=torch.bool)
    mask[owned.cpu()] = False
    idx = mask.nonzero().squeeze(1).to(c.device)
    if idx.numel() == 0:
        return
    for t in cache_tensors(c).values():
        sub = t[idx].contiguous()
        b = _bits(sub).view(torch.uint8)
        b.copy_(torch.randint(0, 256, b.shape, generator=gen, dtype=torch.uint8).to(c.device))
        t[idx] = sub


def snapshot_unowned(c, owned):
    mask = torch.ones(c.num_slots, dtype=torch.bool, device=c.device)
    if owned.numel():
        mask[owned] = False
    return mask, {k: v[mask].clone() for k, v in cache_tensors(c).items()}


def _raw(t):
    """Bytes of a tensor (poisoned slots hold NaN patterns: compare bytes, not values)."""
    return _bits(t).contiguous().view(torch.uint8)


def check_unowned(c, snap, res):
    mask, before = snap
    for k, v in cache_tensors(c).items():
        if k == "arrive":
            continue
        if not torch.equal(_raw(v[mask]), _raw(before[k])):
            res["fail"].append(f"{k}: a slot no valid row addresses was modified")


def resync(cr, ck):
    for (_, vr), (_, vk) in zip(cache_tensors(cr).items(), cache_tensors(ck).items()):
        vr.copy_(vk)


def compare_caches(cr, ck, s, act, res):
    """Everything the step wrote for the owned slots ``s`` (see the module docstring)."""
    tr, tc = cache_tensors(cr), cache_tensors(ck)
    for n in ("write_pos", "ring_origin", "flush_count", "pending"):
        if not torch.equal(tc[n][s], tr[n][s]):
            res["fail"].append(f"{n} {tc[n][s].tolist()} != ref {tr[n][s].tolist()}")
    if int(tc["arrive"][s].abs().sum()) != 0:
        res["fail"].append("arrive counter not reset")
    for n in ("k_buf", "v_buf"):
        if n in tc and not torch.equal(tc[n][s], tr[n][s]):
            res["fail"].append(f"{n} differs (raw copy must be exact)")
    for n in ("kinv_buf", "g_buf", "beta_buf"):
        if n in tc:
            du, _ = unit_diff(tc[n][s], tr[n][s], "fp32")
            res["ulp"] = max(res.get("ulp", 0), du)
            if du > 8:
                res["fail"].append(f"{n} differs by {du} ulp")
    o, e, nb = close(tc["u_buf"][s], tr["u_buf"][s], torch.float32,
                     rtol=1e-5 if act == torch.float32 else 1e-4, abs_frac=1e-5)
    res["u_err"] = max(res.get("u_err", 0.0), e)
    if not o:
        res["fail"].append(f"u_buf err/rms={e:.1e} bad={nb}")
    rf, cf = ck.pair.read_fmt, ck.pair.rec_fmt
    for side, fmt in (("hi", cf), ("lo", rf)):
        if f"{side}.data" not in tc:
            continue
        d = (ordinals(tc[f"{side}.data"][s], fmt) - ordinals(tr[f"{side}.data"][s], fmt)).abs()
        vc, vr = decoded(ck, side, s), decoded(cr, side, s)
        rms = vr.pow(2).mean(dim=(-1, -2), keepdim=True).sqrt()
        dv = (vc - vr).abs()
        bad = (d > 1) & (dv.reshape(d.shape) > 4e-6 * rms.expand_as(vr).reshape(d.shape))
        fr = float((d != 0).float().mean()) if d.numel() else 0.0
        du = int(d.max()) if d.numel() else 0
        res[f"{side}_frac"] = max(res.get(f"{side}_frac", 0.0), fr)
        res[f"{side}_units"] = max(res.get(f"{side}_units", 0), du)
        if bad.any():
            res["fail"].append(f"{side}.data: {int(bad.sum())} element(s) off by > 1 unit and "
                               f"> 4e-6 rms (max {du} units; {fr:.2%} of elements differ)")
        if f"{side}.scale" in tc:
            sfmt = "fp32" if fmt == "fp8" else "e4m3"
            ds, _ = unit_diff(tc[f"{side}.scale"][s], tr[f"{side}.scale"][s], sfmt)
            if ds > (16 if sfmt == "fp32" else 1):
                res["fail"].append(f"{side}.scale differs by {ds} units")
        if f"{side}.gscale" in tc:
            ds, _ = unit_diff(tc[f"{side}.gscale"][s], tr[f"{side}.gscale"][s], "fp32")
            if ds > 16:
                res["fail"].append(f"{side}.gscale differs by {ds} ulp")


# ----------------------------------------------------------------------------------------------
# one configuration
# ----------------------------------------------------------------------------------------------
def run_config(pair, L, act, dims, pool, batch, steps, seed, device, verify, commit, max_draft,
               fixed_T=None, gates="raw", l2=True, use_idx=True):
    H, HV, K, V = dims
    dev = torch.device(device)
    gen = torch.Generator().manual_seed(seed)
    dgen = torch.Generator(device=dev).manual_seed(seed)
    res = {"fail": [], "flush_rows": 0, "steps": steps, "Ts": set()}
    mk = lambda: GDNReplayCache(pool, H, HV, K, V, precision=pair, buffer_len=L,  # noqa: E731
                                max_draft=max_draft, act_dtype=act, device=dev, seed=1000 + seed)
    cr, ck = mk(), mk()
    _torch_write_state(cr)
    slots = torch.randperm(pool, generator=gen)[:batch] if use_idx else torch.arange(batch)
    S0 = torch.randn(batch, HV, V, K, generator=gen) * 0.5
    _init(cr, slots.tolist(), S0.to(dev))
    poison_unowned(cr, slots, gen)
    resync(ck, cr)                                   # identical starting bytes
    slots_d = slots.to(dev)
    scale = None if l2 else 0.25
    t_ker = 0.0
    for step in range(steps):
        T = fixed_T if fixed_T else int(torch.randint(1, max_draft + 1, (1,), generator=gen))
        res["Ts"].add(T)
        pad = torch.rand(batch, generator=gen) < 0.25
        if bool(pad.all()):
            pad[0] = False
        if not use_idx:
            pad[:] = False
        sbi = (torch.where(pad, torch.tensor(-1), slots).to(torch.int32).to(dev)
               if use_idx else None)
        rows = (~pad).nonzero().squeeze(1).to(dev)
        kw = gdn_inputs(batch, dict(H=H, HV=HV, K=K, V=V), act, gates, dev, dgen, T=T)
        out_r = torch.full((batch, T, HV, V), float("nan"), dtype=act, device=dev)
        out_k = torch.full((batch, T, HV, V), float("nan"), dtype=act, device=dev)
        owned = slots_d[rows]
        snap = snapshot_unowned(ck, owned)
        res["flush_rows"] += int((cr.write_pos[owned] + T > L).sum())
        R.gdn_verify(cr, **kw, scale=scale, use_qk_l2norm_in_kernel=l2, state_batch_indices=sbi,
                     out=out_r, backend="torch")
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        verify(ck, kw, scale, l2, sbi, out_k)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t_ker += time.perf_counter() - t0
        padd = pad.to(dev)
        if bool(pad.any()) and not bool(out_k[padd].float().isnan().all()):
            res["fail"].append("a pad row of out was written")
        o, e, nb = close(out_k[rows], out_r[rows], act)
        res["out_err"] = max(res.get("out_err", 0.0), e)
        if not o:
            res["fail"].append(f"out err/rms={e:.1e} bad={nb}")
        compare_caches(cr, ck, owned, act, res)
        check_unowned(ck, snap, res)
        # commit a random accepted prefix (0..T) per row: torch on the reference, CuTe on ours
        acc = torch.randint(0, T + 1, (batch,), generator=gen).to(torch.int32).to(dev)
        R.commit(cr, acc, sbi, -1, backend="torch")
        commit(ck, acc, sbi)
        for name in ("write_pos", "pending"):
            if not torch.equal(getattr(cr, name), getattr(ck, name)):
                res["fail"].append(f"cursor {name} differs after commit")
        check_unowned(ck, snap, res)
        if res["fail"]:
            res["fail"] = [f"step {step} (T={T}): {m}" for m in res["fail"][:4]]
            break
        resync(cr, ck)
    res["ms_per_step"] = 1e3 * t_ker / max(1, steps)
    return res


def default_configs(pairs, level="default"):
    """(pair, L, act, dims, pool, batch, max_draft, fixed_T, gates, l2, use_idx).

    quick: one config per pair (L = 4, max_draft = 4, bf16 acts, T fixed per pair rotating over
    1..4: one compile per pair; small batch: non-nvfp4 pairs split V over 16-row CTAs, nvfp4
    pairs use whole-head CTAs).
    default: plus T random in 1..8 at L = 16 for the headline pairs (bf16 and fp32 acts), given
    gates / l2 off, no state_batch_indices, the Qwen3.5-4B shape (H16 HV32) with whole-head CTAs.
    full: the per-pair extras for every pair."""
    out = []
    for i, name in enumerate(pairs):
        out.append((name, 4, torch.bfloat16, SMALL, 23, 7, 4, 1 + i % 4,
                    "raw" if i % 2 else "given", True, True))
    if level == "quick":
        return out
    head = pairs if level == "full" else [p for p in pairs if p in HEADLINE]
    for i, name in enumerate(head):
        out.append((name, 16, torch.bfloat16, SMALL, 19, 6, 8, None, "raw", True, True))
        out.append((name, 16, torch.float32, SMALL, 19, 6, 8, None, "given", i % 2 == 0, True))
    if pairs:
        p0 = [p for p in pairs if p == "nvfp4/fp16sr"] or pairs[:1]
        out.append((p0[0], 8, torch.float16, SMALL, 5, 5, 2, None, "given", False, False))
        out.append((p0[0], 16, torch.bfloat16, QWEN, 40, 12, 8, None, "raw", True, True))
        out.append(("fp32" if "fp32" in pairs else pairs[0], 16, torch.bfloat16, QWEN, 40, 12, 4,
                    None, "raw", True, True))
    return out


# ----------------------------------------------------------------------------------------------
# benchmark
# ----------------------------------------------------------------------------------------------
def bench(pairs, batch=256, L=16, md=8, Ts=(1, 2, 4, 8)):
    """CUDA-graph timings at the Qwen3.5-4B GDN layer (H16 HV32 K=V=128, bf16 acts): one fp32
    standard decode step (the reference cost), then per pair and T: verify-only with every row
    non-flush (staggered h, h + T <= L, cursors pinned) and whole cycles of verify + commit (all T
    accepted, rows staggered: the flush amortised)."""
    from bench.timing import graph_time_us
    from cute_kernels.gdn_standard import gdn_standard_decode_cute
    from cute_kernels.gdn_verify import gdn_verify_cute
    from cute_kernels.replay_commit import replay_commit_cute

    H, HV, K, V = QWEN
    dev, act = torch.device("cuda"), torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    kw1 = gdn_inputs(batch, dict(H=H, HV=HV, K=K, V=V), act, "raw", dev, g)
    state = torch.randn(batch, HV, V, K, device=dev, generator=g) * 0.1
    out1 = torch.empty_like(kw1["v"])
    std = graph_time_us(lambda i: gdn_standard_decode_cute(
        state, kw1["q"], kw1["k"], kw1["v"], None, None, kw1["A_log"], kw1["a"], kw1["dt_bias"],
        kw1["b"], None, True, None, -1, out1, "vk"), 8)
    print(f"\nbench: GDN H{H} HV{HV} K=V={K} batch {batch}, L={L}, bf16 acts, CUDA graphs, "
          f"median us")
    print(f"standard decode fp32 (one token): {std['median_us']:8.1f} us")
    del state
    print(f"{'pair':16s} {'T':>2s} {'verify nonflush':>16s} {'verify+commit cycle':>20s} "
          f"{'x std':>6s} {'per token':>10s}")
    S0 = torch.randn(batch, HV, V, K, device=dev, generator=g) * 0.1
    sbi = torch.arange(batch, device=dev, dtype=torch.int32)
    for pair in pairs:
        cache = GDNReplayCache(batch, H, HV, K, V, precision=pair, buffer_len=L, max_draft=md,
                               act_dtype=act, device=dev)
        cache.init_from_state(list(range(batch)), S0)
        for T in Ts:
            kw = gdn_inputs(batch, dict(H=H, HV=HV, K=K, V=V), act, "raw", dev, g, T=T)
            out = torch.empty_like(kw["v"])
            acc = torch.full((batch,), T, dtype=torch.int32, device=dev)

            def verify(kw=kw, out=out):
                gdn_verify_cute(cache, kw["q"], kw["k"], kw["v"], None, None, kw["A_log"],
                                kw["a"], kw["dt_bias"], kw["b"], None, True, sbi, -1, out)

            cache.write_pos.copy_(torch.randint(0, L - T + 1, (batch,), device=dev,
                                                generator=g).to(torch.int32))
            cache.pending.zero_()
            nf = graph_time_us(lambda i: verify(), 8)
            cache.write_pos.copy_(torch.randint(0, L, (batch,), device=dev,
                                                generator=g).to(torch.int32))
            cache.pending.zero_()
            steps = max(1, -(-L // T)) * 2

            def cycle(i, acc=acc):
                verify()
                replay_commit_cute(cache.write_pos, cache.pending, acc, sbi, -1)
            cy = graph_time_us(cycle, steps)
            ratio = cy["median_us"] / std["median_us"]
            print(f"{pair:16s} {T:2d} {nf['median_us']:13.1f} us {cy['median_us']:17.1f} us "
                  f"{ratio:6.2f} {cy['median_us'] / T:7.1f} us", flush=True)
        del cache
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", default=None, help="comma-separated pair names (default: all, extras too)")
    ap.add_argument("--quick", action="store_true", help="one configuration per pair")
    ap.add_argument("--full", action="store_true", help="every configuration for every pair")
    ap.add_argument("--steps-factor", type=int, default=3, help="steps = factor * L + 5 (>= 3L)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bench", action="store_true", help="CUDA-graph timings instead of the checks")
    ap.add_argument("--bench-pairs", default="fp32,nvfp4/fp16sr,nvfp4/fp8sr")
    ap.add_argument("--bench-batch", type=int, default=256)
    ap.add_argument("--self-test", action="store_true",
                    help="CPU: compare the torch reference with itself (checks this script)")
    a = ap.parse_args(argv)
    names = a.pairs.split(",") if a.pairs else list(precision_pairs(include_extra=True))
    if a.bench:
        if not torch.cuda.is_available():
            print("no CUDA device")
            return 2
        bench(a.bench_pairs.split(","), batch=a.bench_batch)
        return 0
    if a.self_test:
        device = "cpu"

        def verify(cache, kw, scale, l2, sbi, out):
            R.gdn_verify(cache, **kw, scale=scale, use_qk_l2norm_in_kernel=l2,
                         state_batch_indices=sbi, out=out, backend="torch")

        def commit(cache, acc, sbi):
            R.commit(cache, acc, sbi, -1, backend="torch")
    else:
        if not torch.cuda.is_available():
            print("no CUDA device: run on the GPU machine (or --self-test on CPU)")
            return 2
        device = "cuda"
        from cute_kernels.gdn_verify import gdn_verify_cute
        from cute_kernels.replay_commit import replay_commit_cute

        def verify(cache, kw, scale, l2, sbi, out):
            gdn_verify_cute(cache, kw["q"], kw["k"], kw["v"], kw.get("g"), kw.get("beta"),
                            kw.get("A_log"), kw.get("a"), kw.get("dt_bias"), kw.get("b"), scale,
                            l2, sbi, -1, out)

        def commit(cache, acc, sbi):
            replay_commit_cute(cache.write_pos, cache.pending, acc, sbi, -1)
    cfgs = default_configs(names, "quick" if a.quick else ("full" if a.full else "default"))
    if a.self_test:
        cfgs = [c for c in cfgs if c[3] == SMALL][: 2 * len(names)]
    hdr = (f"{'pair':16s} {'L':>2s} {'act':>4s} {'H,HV,K,V':>13s} {'T':>5s} {'gates':5s} "
           f"{'l2':>2s} {'flush':>5s} {'out_err':>8s} {'u_err':>8s} {'hi_diff':>9s} {'hi_u':>4s} "
           f"{'lo_diff':>9s} {'lo_u':>4s} {'ulp':>4s} {'ms':>7s}  result")
    print(hdr)
    print("-" * len(hdr))
    nfail = 0
    t_start = time.perf_counter()
    for i, (pair, L, act, dims, pool, batch, md, fT, gates, l2, use_idx) in enumerate(cfgs):
        steps = a.steps_factor * L + 5
        try:
            res = run_config(pair, L, act, dims, pool, batch, steps, a.seed + i, device, verify,
                             commit, md, fixed_T=fT, gates=gates, l2=l2, use_idx=use_idx)
        except Exception as e:  # noqa: BLE001
            res = {"fail": [f"exception: {e!r}"], "flush_rows": 0, "Ts": set()}
            traceback.print_exc()
        ok = not res["fail"]
        nfail += not ok
        ts = sorted(res.get("Ts", ()))
        tstr = (f"{ts[0]}..{ts[-1]}" if len(ts) > 1 else (str(ts[0]) if ts else "-"))
        lo = f"{res.get('lo_frac', 0.0):9.2e}" if "lo_frac" in res else f"{'-':>9s}"
        print(f"{pair:16s} {L:2d} {_ACTN[act]:>4s} {','.join(map(str, dims)):>13s} {tstr:>5s} "
              f"{gates:5s} {int(l2):2d} {res.get('flush_rows', 0):5d} "
              f"{res.get('out_err', 0.0):8.1e} {res.get('u_err', 0.0):8.1e} "
              f"{res.get('hi_frac', 0.0):9.2e} {res.get('hi_units', 0):4d} {lo} "
              f"{res.get('lo_units', 0):4d} {res.get('ulp', 0):4d} "
              f"{res.get('ms_per_step', 0.0):7.2f}  "
              f"{'ok' if ok else 'FAIL: ' + ' | '.join(res['fail'])}", flush=True)
    print(f"(wall {time.perf_counter() - t_start:.0f} s, compiles included)")
    if a.self_test:
        # teeth: a one-ulp-scale corruption of one output / one u entry / one cursor must fail
        for what in ("out", "u", "cursor"):
            def bad_verify(cache, kw, scale, l2, sbi, out, _w=what):
                verify(cache, kw, scale, l2, sbi, out)
                if _w == "out":
                    v = out.view(-1)
                    i = int((~v.isnan()).nonzero()[0])
                    v[i] = v[i] * 1.01 + 0.01
                elif _w == "u":
                    cache.u_buf.view(-1)[7] += 1.0
                else:
                    cache.pending += 1
            res = run_config("fp32", 4, torch.float32, SMALL, 5, 3, 2, 0, device, bad_verify,
                             commit, 2, fixed_T=2, use_idx=False)
            caught = bool(res["fail"])
            nfail += not caught
            print(f"self-test: a corrupted {what} is {'caught' if caught else 'MISSED'}")
        cfgs = cfgs + [None] * 3
    print(f"\n{len(cfgs) - nfail}/{len(cfgs)} configurations passed")
    return 1 if nfail else 0


if __name__ == "__main__":
    sys.exit(main())
