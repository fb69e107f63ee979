"""Speculative-decoding fuzz (issue 5): random verify / commit sequences on a replay cache, checked
every step against two oracles.

* **Twin** (every pair): a CPU cache running the torch reference on identical bytes. After each
  verify + commit the cursors must be equal, the ring buffers equal (bit for bit where the kernel
  only copies inputs; computed fp32 entries within ``buffer_ulps`` fp32 units — GDN's u, the result
  of a cancellation, within ``u_ulps`` units of its row's largest entry — when the cache under test
  runs kernels, exactly when it runs the torch reference), stored copies within one unit of
  their format (fp32 copies: within fp32 rounding of the fold), and outputs equal up to the
  activation dtype's rounding. Then the twin is re-synced to the tested bytes, so every step is
  checked from identical state (one last-bit difference in a fold flips an SR decision and the two
  trajectories would otherwise drift apart).
* **Accepted stream** (fp32 pair): an fp64 state per slot advanced token by token
  (``reference.mamba2_standard_step`` / ``gdn_standard_step``) over the *accepted* drafts only.
  Draft j's output must equal the standard decode output of that token given every previously
  accepted token, within fp32 rounding; the final materialised state must equal the fp64 state.

Each step: a random draft count T in 1..max_draft, a random row order over a fixed set of slots
(scattered in a larger pool), ~20% pad rows (their NaN-poisoned outputs must stay NaN), random
acceptance 0..T per row; rows start at random (staggered) buffer positions, so flushes happen at
their natural rate. Slots no row owns must never change.

A check that fails raises :class:`FuzzMismatch` naming the step, the tensor and the error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import torch

import replayssm_lp as R
from replayssm_lp import formats as F
from replayssm_lp import reference as ref
from replayssm_lp.library import cache_tensors

M2_TINY = dict(H=4, P=8, N=32, G=2)
GDN_TINY = dict(H=2, HV=4, K=32, V=16)
_CURSORS = ("write_pos", "ring_origin", "flush_count", "pending")
# buffers the step fills by copying its inputs (no arithmetic): always bit-exact
_COPIED = {"x_buf", "B_buf", "k_buf", "v_buf"}


class FuzzMismatch(AssertionError):
    """A fuzz oracle found a difference."""


@dataclass
class FuzzReport:
    steps: int = 0
    flush_rows: int = 0
    verified_tokens: int = 0
    accepted_tokens: int = 0
    worst_exact_rel: float = 0.0           # fp32 pair: outputs vs the fp64 accepted stream
    worst_twin_rel: float = 0.0            # outputs vs the twin
    worst_buffer_ulps: float = 0.0         # computed fp32 buffer entries vs the twin
    worst_units: Dict[str, float] = field(default_factory=dict)   # stored copies vs the twin
    final_state_rel: Optional[float] = None


def _bytes(t):
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


def _buffer_names(cache) -> List[str]:
    return [n for n in type(cache)._BUFFERS if getattr(cache, n) is not None]


def _units(a, b, fmt):
    """|a − b| in units of the format's spacing at max(|a|, |b|)."""
    if fmt == "fp32":
        return (a - b).abs() / (torch.maximum(a.abs(), b.abs()) * 2.0 ** -23).clamp(min=1e-45)
    spec = F.FORMATS[fmt]
    mag = torch.maximum(a.abs(), b.abs()).clamp(min=2.0 ** spec.emin)
    return (a - b).abs() / 2.0 ** (torch.floor(torch.log2(mag)) - spec.mant_bits)


def _stored_values(enc, fmt):
    """Stored values in their format's own units (before scales)."""
    if fmt == "nvfp4":
        return F.e2m1_codes_to_float(F.unpack_nibbles(enc.data))
    return enc.data.float()


class _Checker:
    def __init__(self, exact_buffers: bool, buffer_ulps: float, u_ulps: float, out_rel: float,
                 report: FuzzReport):
        self.exact_buffers, self.buffer_ulps, self.u_ulps = exact_buffers, buffer_ulps, u_ulps
        self.out_rel = out_rel
        self.report = report
        self.step = -1

    def fail(self, what):
        raise FuzzMismatch(f"step {self.step}: {what}")

    def cursors(self, test, twin):
        for n in _CURSORS:
            a, b = getattr(test, n).cpu(), getattr(twin, n)
            if not torch.equal(a, b):
                bad = (a != b).nonzero().squeeze(1)[:6].tolist()
                self.fail(f"cursor {n} differs at slots {bad}: {a[bad].tolist()} vs twin {b[bad].tolist()}")
        if int(test.arrive.abs().sum()) != 0:
            self.fail("the kernel scratch counter 'arrive' is not back to 0")

    def buffers(self, test, twin):
        for n in _buffer_names(twin):
            a, b = getattr(test, n).cpu(), getattr(twin, n)
            if n in _COPIED or self.exact_buffers:
                if not torch.equal(_bytes(a), _bytes(b)):
                    bad = (_bytes(a) != _bytes(b)).nonzero()[0].tolist()
                    self.fail(f"buffer {n} differs at {bad}: {a[tuple(bad)].item()} vs twin "
                              f"{b[tuple(bad)].item()}")
                continue
            # computed fp32 entries: the kernel's exp / log1p / rsqrt / dot order vs torch's; u
            # (GDN) results from a cancellation, so it is measured against its row's magnitude
            if n == "u_buf":
                scale = b.abs().amax(dim=-1, keepdim=True).clamp(min=1e-30)
                allowed = self.u_ulps
            else:
                scale = b.abs().clamp(min=1e-30)
                allowed = self.buffer_ulps
            ulps = ((a - b).abs() / (scale * 2.0 ** -23)).max().item() if a.numel() else 0.0
            if not ulps <= allowed:       # also catches NaN
                self.fail(f"buffer {n}: {ulps:.1f} fp32 units from the twin (allowed {allowed})")
            self.report.worst_buffer_ulps = max(self.report.worst_buffer_ulps, ulps)

    def stored(self, test, twin):
        p = twin.pair
        for name, fmt in (("hi", p.rec_fmt), ("lo", p.read_fmt)):
            et, er = getattr(test, name), getattr(twin, name)
            if er is None:
                continue
            for part in ("scale", "global_scale"):
                x, y = getattr(et, part), getattr(er, part)
                if y is None:
                    continue
                x, y = x.cpu().float(), y.float()
                if getattr(et, part).dtype == torch.float8_e4m3fn:   # nvfp4 block scales
                    bad = _units(x, y, "fp8").max().item() > 1.0 if x.numel() else False
                else:
                    bad = not torch.allclose(x, y, rtol=4e-6, atol=0)
                if bad:
                    self.fail(f"{name} {part} ({fmt}) differs from the twin")
            a, b = _stored_values(et, fmt).cpu(), _stored_values(er, fmt)
            if torch.equal(a, b):
                continue
            amax = b.abs().amax(dim=(-1, -2), keepdim=True).clamp(min=1e-30)
            if fmt == "fp32":
                err = ((a - b).abs() / amax).max().item()
                units = err / 2.0 ** -23
                ok = err <= 2e-6
            else:
                # one unit, beyond what the fold's fp32 summation order moves a cancelled element
                excess = ((a - b).abs() - 2e-6 * amax).clamp(min=0)
                units = _units(b + excess * torch.sign(a - b), b, fmt).max().item()
                ok = units <= 1.0 + 1e-6
            if not ok:
                self.fail(f"stored {name} copy ({fmt}) is {units:.2f} units from the twin")
            key = f"{name}:{fmt}"
            self.report.worst_units[key] = max(self.report.worst_units.get(key, 0.0), units)

    def outputs(self, a, b, rows):
        """a (tested) vs b (twin) [b, T, heads, dim] on the valid rows."""
        a, b = a[rows].double(), b[rows].double()
        den = b.flatten(2).norm(dim=-1).clamp(min=1e-30)
        rel = ((a - b).flatten(2).norm(dim=-1) / den).max().item() if rows.numel() else 0.0
        if not rel <= self.out_rel:
            self.fail(f"outputs differ from the twin by {rel:.2e} (relative, allowed {self.out_rel})")
        self.report.worst_twin_rel = max(self.report.worst_twin_rel, rel)


def _sync(dst, src):
    """Copy every cache tensor of ``src`` (any device) into ``dst``."""
    for a, b in zip(cache_tensors(dst), cache_tensors(src)):
        a.copy_(b.to(a.device))


def _make_cache(kind, dims, pool, precision, L, max_draft, act, device, seed):
    if kind == "mamba2":
        return R.Mamba2ReplayCache(pool, dims["H"], dims["P"], dims["N"], dims["G"], precision=precision,
                                   buffer_len=L, max_draft=max_draft, act_dtype=act, device=device,
                                   seed=seed)
    return R.GDNReplayCache(pool, dims["H"], dims["HV"], dims["K"], dims["V"], precision=precision,
                            buffer_len=L, max_draft=max_draft, act_dtype=act, device=device, seed=seed)


def spec_fuzz(kind: str, precision: str = "fp32", steps: int = 1000, *, backend: str = "torch",
              device="cpu", dims: Optional[dict] = None, L: int = 4, max_draft: int = 4,
              batch: int = 6, pool: int = 17, act=torch.float32, seed: int = 0,
              exact_oracle: Optional[bool] = None, exact_rel: float = 5e-5,
              out_rel: Optional[float] = None, exact_buffers: Optional[bool] = None,
              buffer_ulps: float = 8.0, u_ulps: float = 256.0, pad_prob: float = 0.2,
              corrupt: Optional[Callable] = None) -> FuzzReport:
    """Run the fuzz (module docstring); returns a :class:`FuzzReport`, raises :class:`FuzzMismatch`.

    ``corrupt(step, test_cache, twin_cache, slots)``, if given, runs after each step's checks and
    re-sync (the teeth tests use it to damage one entry)."""
    dims = dict(dims or (M2_TINY if kind == "mamba2" else GDN_TINY))
    device = torch.device(device)
    exact_oracle = (precision == "fp32") if exact_oracle is None else exact_oracle
    exact_buffers = (backend == "torch") if exact_buffers is None else exact_buffers
    if out_rel is None:
        out_rel = 1e-5 if (act == torch.float32 and backend == "torch") else (
            1e-4 if act == torch.float32 else 2e-2)
    gen = torch.Generator().manual_seed(seed)
    rnd = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    uni = lambda *s: torch.rand(*s, generator=gen, dtype=torch.float64)  # noqa: E731
    report = FuzzReport()
    chk = _Checker(exact_buffers, buffer_ulps, u_ulps, out_rel, report)

    test = _make_cache(kind, dims, pool, precision, L, max_draft, act, device, seed + 1)
    twin = _make_cache(kind, dims, pool, precision, L, max_draft, act, "cpu", seed + 1)
    # one device-to-host copy of the tested cache per step; every check reads this CPU shadow
    shadow = _make_cache(kind, dims, pool, precision, L, max_draft, act, "cpu", seed + 1)
    slots = torch.randperm(pool, generator=gen)[:batch]
    heads, rows_, cols = test.state_heads, test.rows, test.cols
    S = rnd(pool, heads, rows_, cols) * (0.5 if kind == "mamba2" else 0.3)
    test.init_from_state(slots.tolist(), S[slots].float().to(device))
    # staggered rows: each starts at a random buffer position holding no-op entries (zero input,
    # zero log decay), so the exact state is still S
    start = torch.randint(0, L + 1, (batch,), generator=gen).to(torch.int32)
    test.write_pos[slots.to(device)] = start.to(device)
    _sync(twin, test)
    S_exact = S.clone()

    owned = torch.zeros(pool, dtype=torch.bool)
    owned[slots] = True
    unowned_before = [_bytes(t).cpu()[~owned].clone() for t in cache_tensors(test)]

    if kind == "mamba2":
        H, P, N, G = dims["H"], dims["P"], dims["N"], dims["G"]
        A = -torch.exp(uni(H) * 2 - 1)
        D, dt_bias = rnd(H), rnd(H) * 0.5
    else:
        H, HV, K, Vd = dims["H"], dims["HV"], dims["K"], dims["V"]
        A_log, dt_bias = uni(HV) * 2 - 1, rnd(HV) * 0.5

    for step in range(steps):
        chk.step = step
        T = int(torch.randint(1, max_draft + 1, (), generator=gen))
        order = torch.randperm(batch, generator=gen)
        row_slots = slots[order]
        pad = uni(batch) < pad_prob
        sbi = torch.where(pad, torch.tensor(-1), row_slots).to(torch.int32)
        valid = (~pad).nonzero().squeeze(1)
        h_before = twin.write_pos[row_slots].clone()
        report.flush_rows += int(((h_before + T) > L)[valid].sum())
        if kind == "mamba2":
            inp = dict(x=rnd(batch, T, H, P), dt=rnd(batch, T, H), B=rnd(batch, T, G, N),
                       C=rnd(batch, T, G, N), z=rnd(batch, T, H, P))
            inp = {k: v.to(act) if k != "dt" else v.float() for k, v in inp.items()}
            shape = (batch, T, H, P)
        else:
            inp = dict(q=rnd(batch, T, H, K), k=rnd(batch, T, H, K), v=rnd(batch, T, HV, Vd))
            inp = {k: v.to(act) for k, v in inp.items()}
            inp.update(a=rnd(batch, T, HV).float(), b=rnd(batch, T, HV).float())
            shape = (batch, T, HV, Vd)
        outs = []
        for cache, be, dev in ((test, backend, device), (twin, "torch", torch.device("cpu"))):
            o = torch.full(shape, float("nan"), dtype=act, device=dev)
            d = {k: v.to(dev) for k, v in inp.items()}
            if kind == "mamba2":
                R.mamba2_verify(cache, d["x"], d["dt"], A.float().to(dev), d["B"], d["C"], D.float().to(dev),
                                d["z"], dt_bias.float().to(dev), True, sbi.to(dev), out=o, backend=be)
            else:
                R.gdn_verify(cache, d["q"], d["k"], d["v"], A_log=A_log.float().to(dev), a=d["a"],
                             dt_bias=dt_bias.float().to(dev), b=d["b"], state_batch_indices=sbi.to(dev),
                             out=o, backend=be)
            outs.append(o.cpu())
        out, out_twin = outs
        if not torch.isnan(out[pad]).all():
            chk.fail("a pad row's output was written")
        n_acc = torch.randint(0, T + 1, (batch,), generator=gen).to(torch.int32)
        R.commit(test, n_acc.to(device), sbi.to(device), backend=backend)
        R.commit(twin, n_acc, sbi, backend="torch")
        report.verified_tokens += T * valid.numel()
        report.accepted_tokens += int(n_acc[valid].sum())

        # ---- twin oracle
        _sync(shadow, test)
        chk.cursors(shadow, twin)
        chk.buffers(shadow, twin)
        chk.stored(shadow, twin)
        chk.outputs(out, out_twin, valid)
        # ---- accepted-stream oracle
        if exact_oracle and valid.numel():
            vs = row_slots[valid]
            run = S_exact.clone()
            for t in range(T):
                if kind == "mamba2":
                    y = ref.mamba2_standard_step(run, inp["x"][:, t].double(), inp["dt"][:, t].double(), A,
                                                 inp["B"][:, t].double(), inp["C"][:, t].double(), D,
                                                 inp["z"][:, t].double(), dt_bias, True, valid, vs,
                                                 torch.float64)
                else:
                    g, beta = ref.gdn_gates(None, None, A_log, inp["a"][:, t].double(), dt_bias,
                                            inp["b"][:, t].double(), dtype=torch.float64)
                    y = ref.gdn_standard_step(run, inp["q"][:, t].double(), inp["k"][:, t].double(),
                                              inp["v"][:, t].double(), g, beta, None, True, valid, vs,
                                              "vk", torch.float64)
                got = out[valid, t].double()
                rel = ((got - y).flatten(1).norm(dim=-1) / y.flatten(1).norm(dim=-1).clamp(min=1e-30))
                worst = rel.max().item()
                if not worst <= exact_rel:
                    r = int(valid[rel.argmax()])
                    chk.fail(f"draft {t} of row {r} (slot {int(row_slots[r])}, {int(n_acc[r])} of {T} "
                             f"accepted): output {worst:.2e} from the standard decode of the accepted "
                             f"stream (allowed {exact_rel})")
                report.worst_exact_rel = max(report.worst_exact_rel, worst)
                acc_now = n_acc[valid] > t
                S_exact[vs[acc_now]] = run[vs[acc_now]]
        # ---- unowned slots never change
        for i, t in enumerate(cache_tensors(shadow)):
            if not torch.equal(_bytes(t)[~owned], unowned_before[i]):
                chk.fail(f"cache tensor #{i} changed on a slot no row owns")
        _sync(twin, shadow)
        if corrupt is not None:
            corrupt(step, test, twin, slots)
        report.steps += 1

    if exact_oracle:
        m = test.materialize(slots.tolist()).double().cpu()
        ref_s = S_exact[slots]
        report.final_state_rel = ((m - ref_s).norm() / ref_s.norm()).item()
        if not report.final_state_rel <= 10 * exact_rel:
            chk.fail(f"final materialised state {report.final_state_rel:.2e} from the fp64 accepted stream")
    return report


# ------------------------------------------------------------------------------------------------
# corruptions for the teeth tests
# ------------------------------------------------------------------------------------------------
def corrupt_live_entry(at_step: int, both: bool):
    """A ``corrupt`` hook: at ``at_step`` (or the first later step where some owned slot holds a
    committed entry) damage the newest committed ring entry of one slot in the cache under test —
    and in the twin too when ``both``, so that only the accepted-stream oracle can see it.
    Twin-only: +3 on an input copy (x_buf / k_buf); both: +1 on the entry's log decay (dA_buf /
    g_buf), which changes the state even when the entry is one of the no-op staggering entries."""
    state = {"done": False}

    def hook(step, test, twin, slots):
        if state["done"] or step < at_step:
            return
        wp = test.write_pos.cpu()[slots]
        cand = (wp > 0).nonzero().squeeze(1)
        if cand.numel() == 0:
            return
        s = int(slots[int(cand[0])])
        phys = (int(test.ring_origin[s]) + int(wp[int(cand[0])]) - 1) % test.ring
        if both:
            name, delta = ("dA_buf" if test.kind == "mamba2" else "g_buf"), 1.0
        else:
            name, delta = ("x_buf" if test.kind == "mamba2" else "k_buf"), 3.0
        for c in ((test, twin) if both else (test,)):
            getattr(c, name)[s, 0, phys] += delta
        state["done"] = True
        state["where"] = (name, s, phys)

    hook.state = state
    return hook
