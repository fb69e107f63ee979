#!/usr/bin/env python
"""GPU check of the Mamba-2 speculative-verify kernel (cute_kernels/mamba2_verify.py) against the
torch reference (``R.mamba2_verify(backend="torch")`` = ``reference.mamba2_replay(commit_all=False)``)
for every precision pair, plus an optional CUDA-graph benchmark (``--bench``).

Per configuration, two Mamba2ReplayCache objects with identical init sit in a pool larger than the
batch (scattered slots; the slots no row owns are filled with random bytes and must stay
byte-identical). Each step is one verify + one commit with

* T drawn per call from 1..max_draft (or fixed, in quick mode), acceptance drawn per row from 0..T,
* ~25 % pad rows (random per step, so rows drift to different buffer positions and flush at
  different steps); ``out`` is poisoned with NaN and pad rows must stay NaN,

running the reference on one cache and the kernel (``mamba2_verify_cute`` directly; the commit
through the CuTe commit kernel) on the other, then checks (helpers of check_mamba2_replay.py):
outputs of valid rows within fp32 rounding (fp32 acts: relative L2 per (row, t, head) <= 1e-5;
16-bit acts: 1 unit of the act dtype), x_buf / B_buf bit-exact, dt_buf / dA_buf within 4 ulp,
cursors exact (after verify and after commit), ``arrive`` back to 0, stored hi / lo bit-exact in
``exact`` mode (A = 0, dt' = 1, small-integer x and B) and within one unit of the target format in
``random`` mode. After the checks the reference cache is overwritten with the kernel cache, so a
last-bit fold difference (which flips SR decisions) does not accumulate.

Usage (on the GPU machine, from the repository root, package on PYTHONPATH)::

    python tests/gpu_scripts/check_mamba2_verify.py --quick       # one config per pair (< 90 s)
    python tests/gpu_scripts/check_mamba2_verify.py               # + random T, exact mode, big shape
    python tests/gpu_scripts/check_mamba2_verify.py --pairs fp32,nvfp4/fp16sr --full
    python tests/gpu_scripts/check_mamba2_verify.py --bench       # verify T in 1,2,4,8 vs standard
    python tests/gpu_scripts/check_mamba2_verify.py --self-test   # CPU: the checker vs itself

Prints one table row per configuration, then ``N/N configurations passed``; exits 1 on failure.
"""
from __future__ import annotations

import argparse
import math
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
from replayssm_lp.pairs import precision_pairs  # noqa: E402

from check_mamba2_replay import (  # noqa: E402
    cache_tensors, check_unowned, compare_caches, compare_out, resync, snapshot_unowned)

HEADLINE = ("fp32", "nvfp4/fp16sr", "nvfp4/fp8sr", "fp8/fp16sr", "nvfp4sr")
_ACTN = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def poison_unowned(c, owned, gen):
    """Random bytes in every cache tensor of the slots no row owns (stray writes become visible)."""
    mask = torch.ones(c.num_slots, dtype=torch.bool)
    mask[owned.cpu()] = False
    idx = mask.nonzero().squeeze(1).to(c.device)
    if idx.numel() == 0:
        return
    for t in cache_tensors(c).values():
        sub = t[idx].contiguous()
        b = sub.view(torch.uint8)
        b.copy_(torch.randint(0, 256, b.shape, generator=gen, dtype=torch.uint8).to(c.device))
        t[idx] = sub


# ----------------------------------------------------------------------------------------------
# one configuration
# ----------------------------------------------------------------------------------------------
def run_config(pair, L, act, hpc, mode, dims, pool, batch, steps, seed, device, verify, commit,
               max_draft, fixed_T=None, use_idx=True, z=True, D=True, impl=None):
    H, P, N, G = dims
    gen = torch.Generator().manual_seed(seed)
    res = {"fail": [], "flush_rows": 0, "steps": steps, "Ts": set()}
    kw = dict(precision=pair, buffer_len=L, max_draft=max_draft, act_dtype=act, device=device,
              seed=1000 + seed)
    cr = R.Mamba2ReplayCache(pool, H, P, N, G, **kw)
    ck = R.Mamba2ReplayCache(pool, H, P, N, G, **kw)
    slots = torch.randperm(pool, generator=gen)[:batch] if use_idx else torch.arange(batch)
    S = torch.randn(batch, H, P, N, generator=gen) * torch.exp2(
        torch.randint(-4, 5, (1, H, 1, 1), generator=gen).float())
    S[:, 0, 0, :] = 0.0
    ck.init_from_state(slots.tolist(), S.to(device))
    poison_unowned(ck, slots, gen)
    resync(cr, ck)
    slots_d = slots.to(device)
    if mode == "exact":
        A = torch.zeros(H)
        dt_bias, softplus = None, False
    else:
        A = -torch.exp(torch.rand(H, generator=gen) * math.log(16.0))          # A_log = log U[1,16]
        lo_, hi_ = math.log(1e-3), math.log(0.1)
        dtb = torch.exp(torch.rand(H, generator=gen) * (hi_ - lo_) + lo_)
        dt_bias = torch.log(torch.expm1(dtb))                                    # softplus^-1
        softplus = True
    Dv = torch.randn(H, generator=gen) if D else None
    A_d = A.to(device)
    D_d = None if Dv is None else Dv.to(device)
    bias_d = None if dt_bias is None else dt_bias.to(device)
    t_ker = 0.0
    for step in range(steps):
        T = fixed_T if fixed_T else int(torch.randint(1, max_draft + 1, (1,), generator=gen))
        res["Ts"].add(T)
        pad = torch.rand(batch, generator=gen) < 0.25
        if bool(pad.all()):
            pad[0] = False
        if not use_idx:
            pad[:] = False
        sbi = torch.where(pad, torch.tensor(-1), slots).to(torch.int32).to(device) if use_idx else None
        rows = (~pad).nonzero().squeeze(1)
        if mode == "exact":
            x = torch.randint(-2, 3, (batch, T, H, P), generator=gen).float()
            B = torch.randint(-2, 3, (batch, T, G, N), generator=gen).float()
            dt = torch.ones(batch, T, H)
        else:
            x = torch.randn(batch, T, H, P, generator=gen)
            B = torch.randn(batch, T, G, N, generator=gen)
            dt = torch.randn(batch, T, H, generator=gen) * 0.5
        C = torch.randn(batch, T, G, N, generator=gen)
        zz = torch.randn(batch, T, H, P, generator=gen) if z else None
        dv = lambda t: None if t is None else t.to(device=device, dtype=act)  # noqa: E731
        args = (dv(x), dt.to(device), A_d, dv(B), dv(C), D_d, dv(zz), bias_d)
        out_r = torch.full((batch, T, H, P), float("nan"), dtype=act, device=device)
        out_k = torch.full((batch, T, H, P), float("nan"), dtype=act, device=device)
        owned = slots_d[rows.to(device)]
        snap = snapshot_unowned(ck, owned)
        res["flush_rows"] += int((cr.write_pos[owned] + T > L).sum())
        R.mamba2_verify(cr, *args, dt_softplus=softplus, state_batch_indices=sbi, out=out_r,
                        backend="torch")
        if device != "cpu":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        verify(ck, *args, dt_softplus=softplus, state_batch_indices=sbi, pad_slot_id=-1,
               out=out_k, heads_per_cta=hpc, **(impl or {}))
        if device != "cpu":
            torch.cuda.synchronize()
        t_ker += time.perf_counter() - t0
        if bool(pad.any()) and not bool(out_k[pad.to(device)].isnan().all()):
            res["fail"].append("a pad row of out was written")
        compare_out(out_r, out_k, rows.to(device), act, res)
        compare_caches(cr, ck, owned, mode == "exact", res)
        check_unowned(ck, snap, res)
        # commit a random accepted prefix (0..T) per row: torch on the reference, CuTe on ours
        acc = torch.randint(0, T + 1, (batch,), generator=gen).to(torch.int32).to(device)
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
    """(pair, L, act, heads_per_cta, mode, dims, pool, batch, max_draft, fixed_T, use_idx, impl).

    quick: one random-mode config per pair (L = 4, max_draft = 4, T fixed per pair and rotating
    over 1..4 so every T meets several formats: one compile per pair; fp32 acts, 16-bit acts for
    nvfp4 read copies: the tensor-core dot).
    default: plus per pair T random in 1..2 (L = 8, bf16 acts, 1 or 4 heads per CTA), T random in
    1..8 at L = 16 for fp32 (fp32 acts) and nvfp4/fp16sr (bf16 acts, tensor-core dot), exact mode
    (bit-exact hi / lo) for a few pairs, P = 80 without state_batch_indices, the CUDA-core
    fallback of the nvfp4 tensor-core dot (``use_mma=False``) and the Nemotron-3-Super shape with
    the launch heuristic (~80 compiles: several minutes; split with --pairs).
    full: the per-pair extras for every pair."""
    small = (8, 64, 128, 2)
    out = []
    for i, name in enumerate(pairs):
        # nvfp4 read copies with 16-bit acts take the tensor-core dot: cover it here too
        act = (torch.float16 if i % 2 else torch.bfloat16) if name.startswith("nvfp4") \
            else torch.float32
        out.append((name, 4, act, 1 + (i % 2), "random", small, 23, 7, 4, 1 + i % 4, True, {}))
    if level == "quick":
        return out
    for i, name in enumerate(pairs):
        out.append((name, 8, torch.bfloat16, 1 if i % 2 else 4, "random", small, 23, 9,
                    3 if level == "full" else 2, None, True, {}))
    head = pairs if level == "full" else [p for p in pairs if p in ("fp32", "nvfp4/fp16sr")]
    for name in head:
        # T random in 1..8 at L = 16 (flushes with up to 15 committed entries, T > L - h)
        act16 = name.startswith("nvfp4")        # 16-bit acts: the tensor-core dot
        out.append((name, 16, torch.bfloat16 if act16 else torch.float32, 4 if act16 else 2,
                    "random", small, 19, 6, 8, None, True, {}))
    ex = pairs if level == "full" else [p for p in pairs if p in ("fp32", "nvfp4/fp16sr",
                                                                  "fp8/fp16sr", "nvfp4sr")]
    for name in ex:
        out.append((name, 4, torch.bfloat16, 2, "exact", small, 19, 6, 2, None, True, {}))
    if pairs:
        big = [p for p in pairs if p == "nvfp4/fp16sr"] or pairs[:1]
        out.append((big[0], 8, torch.float16, 2, "random", (4, 80, 128, 1), 5, 5, 2, None, False,
                    {}))
        out.append((big[0], 8, torch.bfloat16, 2, "random", small, 13, 6, 2, None, True,
                    {"use_mma": False}))
        out.append((big[0], 16, torch.bfloat16, None, "random", (128, 64, 128, 8), 40, 16, 8, 8,
                    True, {}))
    return out


# ----------------------------------------------------------------------------------------------
# benchmark
# ----------------------------------------------------------------------------------------------
def bench(pairs, batch=256, L=16, md=8, Ts=(1, 2, 4, 8)):
    """CUDA-graph timings at the Nemotron-3-Super Mamba-2 layer (H128 P64 N128 G8, bf16 acts):
    one fp32 standard decode step (the reference cost), then per pair and T: verify-only with
    every row non-flush (staggered h, h + T <= L, no commit: cursors never move) and whole
    cycles of verify + commit (all T accepted, rows staggered: the flush amortised)."""
    from bench.timing import graph_time_us
    from cute_kernels.mamba2_verify import mamba2_verify_cute
    from cute_kernels.replay_commit import replay_commit_cute

    H, P, N, G = 128, 64, 128, 8
    dev, act = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    A = -torch.exp(torch.rand(H, device=dev, generator=g) * math.log(16.0))
    dt_bias = torch.log(torch.expm1(torch.exp(torch.rand(H, device=dev, generator=g)
                                              * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))))
    Dv = torch.randn(H, device=dev, generator=g)
    rnd = lambda *s: torch.randn(*s, device=dev, generator=g).to(act)  # noqa: E731
    # the standard decode anchor (fp32 state, read + write every step)
    state = torch.randn(batch, H, P, N, device=dev, generator=g) * 0.1
    x1, z1, B1, C1 = rnd(batch, H, P), rnd(batch, H, P), rnd(batch, G, N), rnd(batch, G, N)
    dt1 = torch.randn(batch, H, device=dev, generator=g) * 0.5
    out1 = torch.empty_like(x1)
    std = graph_time_us(lambda i: R.mamba2_standard_decode(state, x1, dt1, A, B1, C1, Dv, z1,
                                                           dt_bias, out=out1, backend="cute"), 8)
    print(f"\nbench: H{H} P{P} N{N} G{G} batch {batch}, L={L}, bf16 acts, CUDA graphs, median us")
    print(f"standard decode fp32 (one token): {std['median_us']:8.1f} us")
    del state
    print(f"{'pair':16s} {'T':>2s} {'verify nonflush':>16s} {'verify+commit cycle':>20s} "
          f"{'x std':>6s} {'per token':>10s}")
    S0 = torch.randn(batch, H, P, N, device=dev, generator=g) * 0.1
    sbi = torch.arange(batch, device=dev, dtype=torch.int32)
    for pair in pairs:
        cache = R.Mamba2ReplayCache(batch, H, P, N, G, precision=pair, buffer_len=L,
                                    max_draft=md, act_dtype=act, device=dev)
        cache.init_from_state(list(range(batch)), S0)
        for T in Ts:
            x, z = rnd(batch, T, H, P), rnd(batch, T, H, P)
            B, C = rnd(batch, T, G, N), rnd(batch, T, G, N)
            dt = torch.randn(batch, T, H, device=dev, generator=g) * 0.5
            out = torch.empty_like(x)
            acc = torch.full((batch,), T, dtype=torch.int32, device=dev)

            def verify():
                mamba2_verify_cute(cache, x, dt, A, B, C, Dv, z, dt_bias, True, sbi, -1, out)

            # non-flush only: staggered h with h + T <= L, cursors pinned (no commit)
            cache.write_pos.copy_(torch.randint(0, L - T + 1, (batch,), device=dev,
                                                generator=g).to(torch.int32))
            cache.pending.zero_()
            nf = graph_time_us(lambda i: verify(), 8)
            # whole cycles: verify + commit of all T, rows staggered over 0..L-1
            cache.write_pos.copy_(torch.randint(0, L, (batch,), device=dev,
                                                generator=g).to(torch.int32))
            cache.pending.zero_()
            steps = max(1, -(-L // T)) * 2

            def cycle(i):
                verify()
                replay_commit_cute(cache.write_pos, cache.pending, acc, sbi, -1)
            cy = graph_time_us(cycle, steps)
            ratio = cy["median_us"] / std["median_us"]
            print(f"{pair:16s} {T:2d} {nf['median_us']:13.1f} us {cy['median_us']:17.1f} us "
                  f"{ratio:6.2f} {cy['median_us'] / T:7.1f} us", flush=True)
        del cache


# ----------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", default=None, help="comma-separated pair names (default: all, extras too)")
    ap.add_argument("--quick", action="store_true", help="one configuration per pair")
    ap.add_argument("--full", action="store_true", help="every configuration for every pair")
    ap.add_argument("--steps-factor", type=int, default=3, help="steps = factor * L + 5 (>= 3L)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bench", action="store_true", help="CUDA-graph timings instead of the checks")
    ap.add_argument("--bench-pairs", default="fp32,nvfp4/fp16sr")
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

        def verify(cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices,
                   pad_slot_id, out, heads_per_cta=None, **impl):
            return R.mamba2_verify(cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                                   state_batch_indices, pad_slot_id, out, backend="torch")

        def commit(cache, acc, sbi):
            R.commit(cache, acc, sbi, -1, backend="torch")
    else:
        if not torch.cuda.is_available():
            print("no CUDA device: run on the GPU machine (or --self-test on CPU)")
            return 2
        device = "cuda"
        from cute_kernels.mamba2_verify import mamba2_verify_cute
        from cute_kernels.replay_commit import replay_commit_cute

        def verify(cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices,
                   pad_slot_id, out, heads_per_cta=None, **impl):
            return mamba2_verify_cute(cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                                      state_batch_indices, pad_slot_id, out,
                                      heads_per_cta=heads_per_cta, **impl)

        def commit(cache, acc, sbi):
            replay_commit_cute(cache.write_pos, cache.pending, acc, sbi, -1)
    cfgs = default_configs(names, "quick" if a.quick else ("full" if a.full else "default"))
    if a.self_test:
        cfgs = [c for c in cfgs if c[5][0] <= 8][: 2 * len(names)]
    hdr = (f"{'pair':16s} {'L':>2s} {'act':>4s} {'hpc':>4s} {'mode':6s} {'H,P,N,G':>13s} {'T':>7s} "
           f"{'flush':>5s} {'out_rel':>8s} {'out_u':>5s} {'hi_diff':>9s} {'hi_u':>6s} "
           f"{'lo_diff':>9s} {'lo_u':>6s} {'dt_ulp':>6s} {'ms':>7s}  result")
    print(hdr)
    print("-" * len(hdr))
    nfail = 0
    t_start = time.perf_counter()
    for i, (pair, L, act, hpc, mode, dims, pool, batch, md, fT, use_idx, impl) in enumerate(cfgs):
        steps = a.steps_factor * L + 5
        try:
            res = run_config(pair, L, act, hpc, mode, dims, pool, batch, steps, a.seed + i,
                             device, verify, commit, md, fixed_T=fT, use_idx=use_idx,
                             impl=impl)
        except Exception as e:  # noqa: BLE001
            res = {"fail": [f"exception: {e!r}"], "flush_rows": 0, "Ts": set()}
            traceback.print_exc()

        def frac(k):
            n = res.get(f"{k}_bytes", 0)
            return f"{res.get(f'{k}_bytes_diff', 0) / n:.2e}" if n else "-"

        def units(k):
            if f"{k}_max_rel" in res:
                return f"{res[f'{k}_max_rel']:.0e}"
            return f"{res.get(f'{k}_max_units', 0.0):.2f}" if f"{k}_bytes" in res else "-"
        ok = not res["fail"]
        nfail += not ok
        ts = sorted(res.get("Ts", ()))
        tstr = (f"{ts[0]}..{ts[-1]}" if len(ts) > 1 else (str(ts[0]) if ts else "-"))
        print(f"{pair:16s} {L:2d} {_ACTN[act]:>4s} {('auto' if hpc is None else str(hpc)):>4s} "
              f"{mode + ('*' if impl else ''):6s} {','.join(map(str, dims)):>13s} {tstr:>7s} "
              f"{res.get('flush_rows', 0):5d} {res.get('out_rel', 0.0):8.1e} "
              f"{res.get('out_units', 0.0):5.2f} {frac('hi'):>9s} {units('hi'):>6s} "
              f"{frac('lo'):>9s} {units('lo'):>6s} "
              f"{max(res.get('dt_buf_ulp', 0.0), res.get('dA_buf_ulp', 0.0)):6.1f} "
              f"{res.get('ms_per_step', 0.0):7.2f}  "
              f"{'ok' if ok else 'FAIL: ' + ' | '.join(res['fail'])}", flush=True)
    print(f"(wall {time.perf_counter() - t_start:.0f} s, compiles included)")
    print(f"\n{len(cfgs) - nfail}/{len(cfgs)} configurations passed")
    return 1 if nfail else 0


if __name__ == "__main__":
    sys.exit(main())
