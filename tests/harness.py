"""Shared test drivers: run a replay cache against the exact fp64 recurrence with staggered rows,
pad rows, scattered slots, random draft counts and acceptance."""
import os

import torch

import replayssm_lp as R
from replayssm_lp.library import cache_tensors
from replayssm_lp import reference as ref

MAMBA2_SMALL = dict(H=4, P=8, N=32, G=2)
GDN_SMALL = dict(H=2, HV=4, K=32, V=16)


def gpu_script(name: str):
    """A module of tests/gpu_scripts/ (device-call tools with CPU-testable parts), loaded by path
    (the folder is not a package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(os.path.dirname(__file__), "gpu_scripts", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compile_workers(jobs: int) -> int:
    """Processes for a module's batch of kernel compiles (single-threaded, seconds each): up to
    2 on a machine with the cores, 1 inside a pytest-xdist worker (the workers hold the cores)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return 1
    return max(1, min(2, os.cpu_count() or 1, jobs))


def _bytes(t):
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def _snapshot_unowned(cache, owned):
    """Copies of every cache tensor's rows for the slots no row owns (they must never change)."""
    mask = torch.ones(cache.num_slots, dtype=torch.bool)
    mask[list(owned)] = False
    return [_bytes(t)[mask.to(t.device)].clone() for t in cache_tensors(cache)], mask


def _check_unowned(cache, snap):
    before, mask = snap
    for t, b in zip(cache_tensors(cache), before):
        assert torch.equal(_bytes(t)[mask.to(t.device)], b)


def as_seen(t, act):
    """fp64 ``t`` as an op with ``act`` activations receives it: 16-bit dtypes round it (the
    exact recurrence then measures the kernel, not the input rounding); fp32 keeps it."""
    return t if act == torch.float32 else t.to(act).double()


def mamba2_trace(L, T, steps, precision="fp32", batch=5, pool=13, act=torch.float32, backend="torch",
                 device="cpu", dims=MAMBA2_SMALL, z=True):
    """Returns (max output rel err vs fp64, final state rel err, cache)."""
    H, P, N, G = dims["H"], dims["P"], dims["N"], dims["G"]
    cache = R.Mamba2ReplayCache(pool, H, P, N, G, precision=precision, buffer_len=L, max_draft=T,
                                act_dtype=act, device=device, seed=int(torch.randint(0, 2**31, ())))
    slots = torch.randperm(pool)[:batch]
    S = torch.randn(pool, H, P, N, dtype=torch.float64) * 0.5
    cache.init_from_state(slots.tolist(), S[slots].float().to(device))
    S_exact = S.clone()
    A = -torch.exp(torch.rand(H) * 2 - 1).double()
    D, bias = torch.randn(H).double(), (torch.randn(H) * 0.5).double()
    snap = _snapshot_unowned(cache, slots.tolist())
    worst = 0.0
    for step in range(steps):
        pad = torch.rand(batch) < 0.25
        sbi = torch.where(pad, torch.tensor(-1), slots).to(torch.int32)
        Tc = int(torch.randint(1, T + 1, ())) if T > 0 else 1
        lead = (batch,) if T == 0 else (batch, Tc)
        x = torch.randn(*lead, H, P, dtype=torch.float64)
        dt = torch.randn(*lead, H, dtype=torch.float64)
        B = torch.randn(*lead, G, N, dtype=torch.float64)
        C = torch.randn(*lead, G, N, dtype=torch.float64)
        zz = torch.randn(*lead, H, P, dtype=torch.float64) if z else None
        out = torch.full((*lead, H, P), float("nan"), dtype=act, device=device)
        dv = lambda t: None if t is None else t.to(device=device, dtype=act)  # noqa: E731
        args = (dv(x), dt.float().to(device), A.float().to(device), dv(B), dv(C), D.float().to(device),
                dv(zz), bias.float().to(device))
        fn = R.mamba2_decode if T == 0 else R.mamba2_verify
        fn(cache, *args, state_batch_indices=sbi.to(device), out=out, backend=backend)
        out = out.cpu()
        assert torch.isnan(out[pad]).all(), "pad rows must stay untouched"
        rows = (~pad).nonzero().squeeze(1)
        # the exact recurrence, token by token, from each row's committed state, on the inputs
        # as the op saw them (16-bit activations: rounded)
        xs = lambda t: t if T > 0 else t.unsqueeze(1)  # noqa: E731
        Xs, DTs = xs(as_seen(x, act)), xs(dt)
        Bs, Cs = xs(as_seen(B, act)), xs(as_seen(C, act))
        Zs = xs(as_seen(zz, act)) if z else None
        Stmp = S_exact.clone()
        n_acc = torch.randint(0, Tc + 1, (batch,)).to(torch.int32) if T > 0 else None
        outs = out if T > 0 else out.unsqueeze(1)
        for t in range(Tc):
            y = ref.mamba2_standard_step(Stmp, Xs[:, t], DTs[:, t], A, Bs[:, t], Cs[:, t], D,
                                         None if Zs is None else Zs[:, t], bias, True, rows,
                                         slots[rows], torch.float64)
            err = ((outs[rows, t].double() - y).norm() / y.norm()).item()
            worst = max(worst, err)
            for r in rows.tolist():
                if T == 0 or t < int(n_acc[r]):
                    S_exact[slots[r]] = Stmp[slots[r]]
        if T > 0:
            R.commit(cache, n_acc.to(device), sbi.to(device), backend=backend)
    _check_unowned(cache, snap)
    m = cache.materialize(slots.tolist()).double().cpu()
    ref_s = S_exact[slots]
    return worst, ((m - ref_s).norm() / ref_s.norm()).item(), cache


def gdn_trace(L, T, steps, precision="fp32", batch=5, pool=13, act=torch.float32, backend="torch",
              device="cpu", dims=GDN_SMALL, raw_gates=True):
    H, HV, K, Vd = dims["H"], dims["HV"], dims["K"], dims["V"]
    cache = R.GDNReplayCache(pool, H, HV, K, Vd, precision=precision, buffer_len=L, max_draft=T,
                             act_dtype=act, device=device, seed=int(torch.randint(0, 2**31, ())))
    slots = torch.randperm(pool)[:batch]
    S = torch.randn(pool, HV, Vd, K, dtype=torch.float64) * 0.3
    cache.init_from_state(slots.tolist(), S[slots].float().to(device))
    S_exact = S.clone()
    A_log = (torch.rand(HV) * 2 - 1).double()
    bias = (torch.randn(HV) * 0.5).double()
    snap = _snapshot_unowned(cache, slots.tolist())
    worst = 0.0
    for step in range(steps):
        pad = torch.rand(batch) < 0.25
        sbi = torch.where(pad, torch.tensor(-1), slots).to(torch.int32)
        Tc = int(torch.randint(1, T + 1, ())) if T > 0 else 1
        lead = (batch,) if T == 0 else (batch, Tc)
        q = torch.randn(*lead, H, K, dtype=torch.float64)
        k = torch.randn(*lead, H, K, dtype=torch.float64)
        v = torch.randn(*lead, HV, Vd, dtype=torch.float64)
        a = torch.randn(*lead, HV, dtype=torch.float64)
        b = torch.randn(*lead, HV, dtype=torch.float64)
        out = torch.full((*lead, HV, Vd), float("nan"), dtype=act, device=device)
        dv = lambda t: t.to(device=device, dtype=act)  # noqa: E731
        f32 = lambda t: t.float().to(device)  # noqa: E731
        fn = R.gdn_decode if T == 0 else R.gdn_verify
        if raw_gates:
            fn(cache, dv(q), dv(k), dv(v), A_log=f32(A_log), a=f32(a), dt_bias=f32(bias), b=f32(b),
               state_batch_indices=sbi.to(device), out=out, backend=backend)
        else:
            g, beta = ref.gdn_gates(None, None, A_log, a, bias, b, dtype=torch.float64)
            fn(cache, dv(q), dv(k), dv(v), f32(g), f32(beta), state_batch_indices=sbi.to(device),
               out=out, backend=backend)
        out = out.cpu()
        assert torch.isnan(out[pad]).all(), "pad rows must stay untouched"
        rows = (~pad).nonzero().squeeze(1)
        xs = lambda t: t if T > 0 else t.unsqueeze(1)  # noqa: E731
        Q, Kk, Vv = (xs(as_seen(t, act)) for t in (q, k, v))   # as the op saw them
        Aa, Bb = xs(a), xs(b)
        outs = out if T > 0 else out.unsqueeze(1)
        Stmp = S_exact.clone()
        n_acc = torch.randint(0, Tc + 1, (batch,)).to(torch.int32) if T > 0 else None
        for t in range(Tc):
            g, beta = ref.gdn_gates(None, None, A_log, Aa[:, t], bias, Bb[:, t], dtype=torch.float64)
            o = ref.gdn_standard_step(Stmp, Q[:, t], Kk[:, t], Vv[:, t], g, beta, None, True, rows,
                                      slots[rows], "vk", torch.float64)
            worst = max(worst, ((outs[rows, t].double() - o).norm() / o.norm()).item())
            for r in rows.tolist():
                if T == 0 or t < int(n_acc[r]):
                    S_exact[slots[r]] = Stmp[slots[r]]
        if T > 0:
            R.commit(cache, n_acc.to(device), sbi.to(device), backend=backend)
    _check_unowned(cache, snap)
    m = cache.materialize(slots.tolist()).double().cpu()
    ref_s = S_exact[slots]
    return worst, ((m - ref_s).norm() / ref_s.norm()).item(), cache
