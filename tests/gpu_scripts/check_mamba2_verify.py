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

import math
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
from replayssm_lp.pairs import precision_pairs  # noqa: E402

from check_common import (  # noqa: E402
    ACT_NAME, arg_parser, bench_header, bench_row, check_commit, copy_frac, copy_units,
    cute_commit, draw_rows, draw_T, level, no_cuda, poison_unowned, run_table, stop_on_fail,
    t_range, timed, torch_commit)
from check_mamba2_replay import (  # noqa: E402
    cache_tensors, check_unowned, compare_caches, compare_out, layer_params, prefill_state,
    resync, snapshot_unowned, step_inputs)

HEADLINE = ("fp32", "nvfp4/fp16sr", "nvfp4/fp8sr", "fp8/fp16sr", "nvfp4sr")


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
    ck.init_from_state(slots.tolist(), prefill_state(batch, H, P, N, gen).to(device))
    poison_unowned(ck, slots, gen, cache_tensors)
    resync(cr, ck)
    slots_d = slots.to(device)
    A_d, D_d, bias_d, softplus = layer_params(H, mode, D, gen, device)
    t_ker = 0.0
    for step in range(steps):
        T = draw_T(gen, max_draft, fixed_T)
        res["Ts"].add(T)
        pad, sbi, rows = draw_rows(gen, batch, slots, use_idx, device)
        x, dt, B, C, zz = step_inputs(gen, (batch, T), dims, mode, z, device, act)
        args = (x, dt, A_d, B, C, D_d, zz, bias_d)
        out_r = torch.full((batch, T, H, P), float("nan"), dtype=act, device=device)
        out_k = torch.full((batch, T, H, P), float("nan"), dtype=act, device=device)
        owned = slots_d[rows.to(device)]
        snap = snapshot_unowned(ck, owned)
        res["flush_rows"] += int((cr.write_pos[owned] + T > L).sum())
        R.mamba2_verify(cr, *args, dt_softplus=softplus, state_batch_indices=sbi, out=out_r,
                        backend="torch")
        t_ker += timed(lambda: verify(ck, *args, dt_softplus=softplus, state_batch_indices=sbi,
                                      pad_slot_id=-1, out=out_k, heads_per_cta=hpc,
                                      **(impl or {})), device)
        if bool(pad.any()) and not bool(out_k[pad.to(device)].isnan().all()):
            res["fail"].append("a pad row of out was written")
        compare_out(out_r, out_k, rows.to(device), act, res)
        compare_caches(cr, ck, owned, mode == "exact", res)
        check_unowned(ck, snap, res)
        check_commit(cr, ck, T, batch, gen, sbi, commit, res, device)
        check_unowned(ck, snap, res)
        if stop_on_fail(res, f"step {step} (T={T})"):
            break
        resync(cr, ck)
    res["ms_per_step"] = 1e3 * t_ker / max(1, steps)
    return res


def default_configs(pairs, level="default"):
    """(pair, L, act, heads_per_cta, mode, dims, pool, batch, max_draft, fixed_T, use_idx, impl).

    quick: one random-mode config per pair (L = 4, max_draft = 4, T fixed per pair and rotating
    over 1..4 so every T meets several formats: one compile per pair; 16-bit acts for nvfp4 read
    copies and every other pair: the tensor-core dots; fp32 acts for the rest).
    default: plus per pair T random in 1..2 (L = 8, bf16 acts, 1 or 4 heads per CTA), T random in
    1..8 at L = 16 for fp32 (fp32 acts) and nvfp4/fp16sr (bf16 acts, tensor-core dot), exact mode
    (bit-exact hi / lo) for a few pairs, P = 80 without state_batch_indices, the CUDA-core
    fallback of the nvfp4 tensor-core dot (``use_mma=False``) and the Nemotron-3-Super shape with
    the launch heuristic (~80 compiles: several minutes; split with --pairs).
    full: the per-pair extras for every pair."""
    small = (8, 64, 128, 2)
    out = []
    for i, name in enumerate(pairs):
        # 16-bit acts take the tensor-core dots (nvfp4: f16 mma; the other read formats: tf32,
        # every other pair) -- cover them here too; fp32 acts the CUDA-core dots
        act = (torch.float16 if i % 2 else torch.bfloat16) if name.startswith("nvfp4") \
            else (torch.bfloat16 if i % 2 else torch.float32)
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
    del state
    bench_header(std["median_us"])
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

            def verify(x=x, dt=dt, B=B, C=C, z=z, out=out):
                mamba2_verify_cute(cache, x, dt, A, B, C, Dv, z, dt_bias, True, sbi, -1, out)
            bench_row(pair, cache, verify, T, L, batch, sbi, g, std["median_us"])
        del cache


# ----------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    a = arg_parser(__doc__, bench_pairs="fp32,nvfp4/fp16sr").parse_args(argv)
    names = a.pairs.split(",") if a.pairs else list(precision_pairs(include_extra=True))
    if a.bench:
        if no_cuda(self_test=False):
            return 2
        bench(a.bench_pairs.split(","), batch=a.bench_batch)
        return 0
    if a.self_test:
        device, commit = "cpu", torch_commit

        def verify(cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices,
                   pad_slot_id, out, heads_per_cta=None, **impl):
            return R.mamba2_verify(cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                                   state_batch_indices, pad_slot_id, out, backend="torch")
    else:
        if no_cuda():
            return 2
        device, commit = "cuda", cute_commit
        from cute_kernels.mamba2_verify import mamba2_verify_cute as verify
    cfgs = default_configs(names, level(a))
    if a.self_test:
        cfgs = [c for c in cfgs if c[5][0] <= 8][: 2 * len(names)]
    hdr = (f"{'pair':16s} {'L':>2s} {'act':>4s} {'hpc':>4s} {'mode':6s} {'H,P,N,G':>13s} {'T':>7s} "
           f"{'flush':>5s} {'out_rel':>8s} {'out_u':>5s} {'hi_diff':>9s} {'hi_u':>6s} "
           f"{'lo_diff':>9s} {'lo_u':>6s} {'dt_ulp':>6s} {'ms':>7s}  result")

    def run_one(i, cfg):
        pair, L, act, hpc, mode, dims, pool, batch, md, fT, use_idx, impl = cfg
        return run_config(pair, L, act, hpc, mode, dims, pool, batch, a.steps_factor * L + 5,
                          a.seed + i, device, verify, commit, md, fixed_T=fT, use_idx=use_idx,
                          impl=impl)

    def row(cfg, res):
        pair, L, act, hpc, mode, dims, pool, batch, md, fT, use_idx, impl = cfg
        return (f"{pair:16s} {L:2d} {ACT_NAME[act]:>4s} "
                f"{('auto' if hpc is None else str(hpc)):>4s} "
                f"{mode + ('*' if impl else ''):6s} {','.join(map(str, dims)):>13s} "
                f"{t_range(res):>7s} {res.get('flush_rows', 0):5d} "
                f"{res.get('out_rel', 0.0):8.1e} {res.get('out_units', 0.0):5.2f} "
                f"{copy_frac(res, 'hi'):>9s} {copy_units(res, 'hi'):>6s} "
                f"{copy_frac(res, 'lo'):>9s} {copy_units(res, 'lo'):>6s} "
                f"{max(res.get('dt_buf_ulp', 0.0), res.get('dA_buf_ulp', 0.0)):6.1f} "
                f"{res.get('ms_per_step', 0.0):7.2f}")
    t_start = time.perf_counter()
    nfail = run_table(cfgs, hdr, run_one, row)
    print(f"(wall {time.perf_counter() - t_start:.0f} s, compiles included)")
    print(f"\n{len(cfgs) - nfail}/{len(cfgs)} configurations passed")
    return 1 if nfail else 0


if __name__ == "__main__":
    sys.exit(main())
