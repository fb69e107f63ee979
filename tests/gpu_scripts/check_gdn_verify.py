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

import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.abspath(os.path.join(_HERE, "..", ".."))
for _p in (_ROOT, _HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import torch  # noqa: E402

import replayssm_lp as R  # noqa: E402
from replayssm_lp import GDNReplayCache  # noqa: E402
from replayssm_lp.pairs import precision_pairs  # noqa: E402

from check_common import (  # noqa: E402
    ACT_NAME, arg_parser, bench_header, bench_row, check_commit, cute_commit, draw_rows, draw_T,
    level, no_cuda, poison_unowned, run_table, stop_on_fail, t_range, timed, torch_commit)
from check_gdn import (  # noqa: E402
    _bits, _init, _torch_write_state, cache_tensors, close, compare_caches, gdn_inputs)

SMALL = (2, 4, 128, 128)          # H, HV, K, V
QWEN = (16, 32, 128, 128)
HEADLINE = ("fp32", "nvfp4/fp16sr", "nvfp4/fp8sr", "fp8/fp16sr", "nvfp4sr")


# ----------------------------------------------------------------------------------------------
# cache helpers
# ----------------------------------------------------------------------------------------------
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
    poison_unowned(cr, slots, gen, cache_tensors)
    resync(ck, cr)                                   # identical starting bytes
    slots_d = slots.to(dev)
    scale = None if l2 else 0.25
    t_ker = 0.0
    for step in range(steps):
        T = draw_T(gen, max_draft, fixed_T)
        res["Ts"].add(T)
        pad, sbi, rows = draw_rows(gen, batch, slots, use_idx, dev)
        rows = rows.to(dev)
        kw = gdn_inputs(batch, dict(H=H, HV=HV, K=K, V=V), act, gates, dev, dgen, T=T,
                        unit_qk=not l2)
        out_r = torch.full((batch, T, HV, V), float("nan"), dtype=act, device=dev)
        out_k = torch.full((batch, T, HV, V), float("nan"), dtype=act, device=dev)
        owned = slots_d[rows]
        snap = snapshot_unowned(ck, owned)
        res["flush_rows"] += int((cr.write_pos[owned] + T > L).sum())
        R.gdn_verify(cr, **kw, scale=scale, use_qk_l2norm_in_kernel=l2, state_batch_indices=sbi,
                     out=out_r, backend="torch")
        t_ker += timed(lambda: verify(ck, kw, scale, l2, sbi, out_k), dev)
        padd = pad.to(dev)
        if bool(pad.any()) and not bool(out_k[padd].float().isnan().all()):
            res["fail"].append("a pad row of out was written")
        o, e, nb = close(out_k[rows], out_r[rows], act)
        res["out_err"] = max(res.get("out_err", 0.0), e)
        if not o:
            res["fail"].append(f"out err/rms={e:.1e} bad={nb}")
        compare_caches(cr, ck, owned, act, res, res["fail"])
        check_unowned(ck, snap, res)
        check_commit(cr, ck, T, batch, gen, sbi, commit, res, dev)
        check_unowned(ck, snap, res)
        if stop_on_fail(res, f"step {step} (T={T})"):
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
    full: the per-pair extras for every pair. With fp32: one L = 24 config."""
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
    if "fp32" in pairs:
        # past two key tiles (L > 16): the fp32 flush's staging at three
        out.append(("fp32", 24, torch.bfloat16, SMALL, 19, 6, 8, None, "raw", True, True))
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
    del state
    bench_header(std["median_us"])
    S0 = torch.randn(batch, HV, V, K, device=dev, generator=g) * 0.1
    sbi = torch.arange(batch, device=dev, dtype=torch.int32)
    for pair in pairs:
        cache = GDNReplayCache(batch, H, HV, K, V, precision=pair, buffer_len=L, max_draft=md,
                               act_dtype=act, device=dev)
        cache.init_from_state(list(range(batch)), S0)
        for T in Ts:
            kw = gdn_inputs(batch, dict(H=H, HV=HV, K=K, V=V), act, "raw", dev, g, T=T)
            out = torch.empty_like(kw["v"])

            def verify(kw=kw, out=out):
                gdn_verify_cute(cache, kw["q"], kw["k"], kw["v"], None, None, kw["A_log"],
                                kw["a"], kw["dt_bias"], kw["b"], None, True, sbi, -1, out)
            bench_row(pair, cache, verify, T, L, batch, sbi, g, std["median_us"])
        del cache
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    a = arg_parser(__doc__, bench_pairs="fp32,nvfp4/fp16sr,nvfp4/fp8sr").parse_args(argv)
    names = a.pairs.split(",") if a.pairs else list(precision_pairs(include_extra=True))
    if a.bench:
        if no_cuda(self_test=False):
            return 2
        bench(a.bench_pairs.split(","), batch=a.bench_batch)
        return 0
    if a.self_test:
        device, commit = "cpu", torch_commit

        def verify(cache, kw, scale, l2, sbi, out):
            R.gdn_verify(cache, **kw, scale=scale, use_qk_l2norm_in_kernel=l2,
                         state_batch_indices=sbi, out=out, backend="torch")
    else:
        if no_cuda():
            return 2
        device, commit = "cuda", cute_commit
        from cute_kernels.gdn_verify import gdn_verify_cute

        def verify(cache, kw, scale, l2, sbi, out):
            gdn_verify_cute(cache, kw["q"], kw["k"], kw["v"], kw.get("g"), kw.get("beta"),
                            kw.get("A_log"), kw.get("a"), kw.get("dt_bias"), kw.get("b"), scale,
                            l2, sbi, -1, out)
    cfgs = default_configs(names, level(a))
    if a.self_test:
        cfgs = [c for c in cfgs if c[3] == SMALL][: 2 * len(names)]
    hdr = (f"{'pair':16s} {'L':>2s} {'act':>4s} {'H,HV,K,V':>13s} {'T':>5s} {'gates':5s} "
           f"{'l2':>2s} {'flush':>5s} {'out_err':>8s} {'u_err':>8s} {'hi_diff':>9s} {'hi_u':>4s} "
           f"{'lo_diff':>9s} {'lo_u':>4s} {'ulp':>4s} {'ms':>7s}  result")

    def run_one(i, cfg):
        pair, L, act, dims, pool, batch, md, fT, gates, l2, use_idx = cfg
        return run_config(pair, L, act, dims, pool, batch, a.steps_factor * L + 5, a.seed + i,
                          device, verify, commit, md, fixed_T=fT, gates=gates, l2=l2,
                          use_idx=use_idx)

    def row(cfg, res):
        pair, L, act, dims, pool, batch, md, fT, gates, l2, use_idx = cfg
        lo = f"{res.get('lo_frac', 0.0):9.2e}" if "lo_frac" in res else f"{'-':>9s}"
        return (f"{pair:16s} {L:2d} {ACT_NAME[act]:>4s} {','.join(map(str, dims)):>13s} "
                f"{t_range(res):>5s} {gates:5s} {int(l2):2d} {res.get('flush_rows', 0):5d} "
                f"{res.get('out_err', 0.0):8.1e} {res.get('u_err', 0.0):8.1e} "
                f"{res.get('hi_frac', 0.0):9.2e} {res.get('hi_units', 0):4d} {lo} "
                f"{res.get('lo_units', 0):4d} {res.get('ulp', 0):4d} "
                f"{res.get('ms_per_step', 0.0):7.2f}")
    t_start = time.perf_counter()
    nfail = run_table(cfgs, hdr, run_one, row)
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
