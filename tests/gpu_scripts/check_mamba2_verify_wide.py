#!/usr/bin/env python
"""GPU check: the Mamba-2 verify with ``REPLAYSSM_M2V_MMA_WIDE=1`` (fp32 / fp16 / bf16 / fp8 read
copies' state dots on tf32 tensor cores) against the same kernel with the CUDA-core dots, on
identical caches and inputs (bf16 acts, T = 8, rows staggered over 0..L so some flush), several
calls with commits in between. Both must agree to the bf16 rounding of the outputs (the dots
differ only in fp32 summation order); stored copies and cursors must be bit-identical (the
switch touches only the non-flush dots). Prints one line per pair; exit status 1 on a mismatch.

``--env NAME --values A,B --exact``: the same A-B for another switch that must not change any
result bit (e.g. ``REPLAYSSM_M2V_XSTAGE``, where the x comes from): outputs bit-identical too.
``--state-tol TOL``: for a switch that changes the fold's summation order
(``REPLAYSSM_M2V_FRAG_FLUSH``): fp32 states may differ up to TOL relative to their max; every
other cache tensor stays bit-exact.

    python tests/gpu_scripts/check_mamba2_verify_wide.py [--pairs fp32,fp8/fp32,bf16/fp32]
        [--env REPLAYSSM_M2V_XSTAGE --values 0,1 --exact] [--state-tol 1e-5]

``--layer gdn``: the same A-B on the GDN verify (Qwen3.5-4B-like heads H2 HV4 K = V = 128,
unit-length q / k with the kernel's L2 norm on, raw gates), e.g. ``--env
REPLAYSSM_GDN_VERIFY_KSPLIT --values 0,1 --exact`` (the same split, done once) or ``--env
REPLAYSSM_GDN_VERIFY_BSPLIT --values 0,1 --state-tol 1e-5`` (rounding of the mma operands).
``--backend torch`` runs the plumbing on a CPU (both settings then agree trivially).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import torch  # noqa: E402

import replayssm_lp as R  # noqa: E402
from replayssm_lp.library import cache_tensors  # noqa: E402

ENV = "REPLAYSSM_M2V_MMA_WIDE"


def _mamba2_setup(pair, dev, act, g, r, L, T, pool, H=16, P=64, N=128, G=2):
    """Two identical Mamba-2 caches and a per-call ``step(cache, batch, slots)`` drawing the
    same inputs for both (the draw happens once per call: ``draw(batch)`` first)."""
    caches = [R.Mamba2ReplayCache(pool, H, P, N, G, precision=pair, buffer_len=L, max_draft=T,
                                  act_dtype=act, device=dev, seed=7) for _ in range(2)]
    S0 = r(pool, H, P, N) * 0.3
    for c in caches:
        c.init_from_state(list(range(pool)), S0)

    def draw(batch):
        x, z = r(batch, T, H, P).to(act), r(batch, T, H, P).to(act)
        dt = r(batch, T, H)
        B, C = r(batch, T, G, N).to(act), r(batch, T, G, N).to(act)
        A, D, dtb = -torch.rand(H, device=dev, generator=g) - 0.1, r(H), r(H) * 0.3
        return lambda c, slots, out, backend: R.mamba2_verify(
            c, x, dt, A, B, C, D, z, dtb, True, slots, out=out, backend=backend)
    return caches, draw, (H, P)


def _gdn_setup(pair, dev, act, g, r, L, T, pool, H=2, HV=4, K=128, V=128):
    """The same for two GDN caches (unit-length q / k, kernel L2 norm on, raw gates)."""
    caches = [R.GDNReplayCache(pool, H, HV, K, V, precision=pair, buffer_len=L, max_draft=T,
                               act_dtype=act, device=dev, seed=7) for _ in range(2)]
    S0 = r(pool, HV, V, K) * 0.3
    for c in caches:
        c.init_from_state(list(range(pool)), S0)

    def draw(batch):
        unit = lambda x: (x / x.norm(dim=-1, keepdim=True)).to(act)  # noqa: E731
        q, k, v = unit(r(batch, T, H, K)), unit(r(batch, T, H, K)), r(batch, T, HV, V).to(act)
        A_log = torch.log(torch.rand(HV, device=dev, generator=g) * 15 + 1)
        a, b, dtb = r(batch, T, HV).to(act), r(batch, T, HV).to(act), r(HV) * 0.5
        return lambda c, slots, out, backend: R.gdn_verify(
            c, q, k, v, A_log=A_log, a=a, dt_bias=dtb, b=b, state_batch_indices=slots, out=out,
            backend=backend)
    return caches, draw, (HV, V)


def run(pair, L=16, T=8, batch=24, pool=40, calls=6, seed=0, env=ENV, values=("0", "1"),
        exact=False, state_tol=0.0, layer="mamba2", backend="cute"):
    dev = "cuda" if backend == "cute" else "cpu"
    act = torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(seed)
    r = lambda *s: torch.randn(*s, device=dev, generator=g)  # noqa: E731
    setup = _gdn_setup if layer == "gdn" else _mamba2_setup
    caches, draw, out_dims = setup(pair, dev, act, g, r, L, T, pool)
    slots = torch.randperm(pool, device=dev, generator=g)[:batch].to(torch.int32)
    worst, frac, sworst = 0.0, 0.0, 0.0
    for call in range(calls):
        step = draw(batch)
        acc = torch.randint(0, T + 1, (batch,), device=dev, generator=g, dtype=torch.int32)
        outs = []
        for c, val in zip(caches, values):
            os.environ[env] = val
            out = torch.full((batch, T, *out_dims), float("nan"), device=dev, dtype=act)
            step(c, slots, out, backend)
            R.commit(c, acc, slots, backend=backend)
            outs.append(out.float())
        if dev == "cuda":
            torch.cuda.synchronize()
        a, b = outs
        if torch.isnan(a).any() or torch.isnan(b).any():
            return False, f"NaN in the outputs (call {call})"
        d = (a - b).abs()
        worst = max(worst, (d.max() / a.abs().max()).item())
        frac = max(frac, (d > 0).float().mean().item())
        for ta, tb in zip(cache_tensors(caches[0]), cache_tensors(caches[1])):
            if torch.equal(ta, tb):
                continue
            # fp32 states (dim 4) may differ by summation order when state_tol > 0; buffers,
            # scales, cursors and every other cache tensor stay bit-exact
            if not (state_tol > 0 and ta.dtype == torch.float32 and ta.dim() == 4):
                return False, f"cache tensors differ after call {call}"
            sworst = max(sworst, ((ta - tb).abs().max() / ta.abs().max()).item())
    ok = (worst == 0.0 if exact else worst < 2 ** -7) and sworst <= state_tol
    return ok, (f"outputs: max |diff| / max |out| {worst:.2e}, elements differing {frac:.4f}"
                + (f"; fp32 states max |diff| / max |S| {sworst:.2e}" if state_tol > 0 else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", default="fp32,fp8/fp32,bf16/fp32,fp16/fp32")
    ap.add_argument("--layer", default="mamba2", choices=("mamba2", "gdn"))
    ap.add_argument("--backend", default="cute", choices=("cute", "torch"))
    ap.add_argument("--env", default=ENV)
    ap.add_argument("--values", default="0,1")
    ap.add_argument("--exact", action="store_true", help="outputs must be bit-identical too")
    ap.add_argument("--state-tol", type=float, default=0.0,
                    help="fp32 states may differ by this relative max (summation order)")
    a = ap.parse_args()
    bad = 0
    for pair in a.pairs.split(","):
        ok, msg = run(pair, env=a.env, values=tuple(a.values.split(",")), exact=a.exact,
                      state_tol=a.state_tol, layer=a.layer, backend=a.backend)
        print(f"{pair:12s} {'ok ' if ok else 'FAIL'} {msg}", flush=True)
        bad += not ok
    os.environ.pop(a.env, None)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
