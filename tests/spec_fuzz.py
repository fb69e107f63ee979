"""Speculative-decoding fuzz (issue 5): random verify / commit sequences on a replay cache, checked
every step against two oracles.

* **Twin** (every pair): a CPU cache running the torch reference on identical bytes. After each
  verify + commit the cursors must be equal, the ring buffers equal (bit for bit where the kernel
  only copies inputs; computed fp32 entries within ``buffer_ulps`` fp32 units — GDN's u, the result
  of a cancellation, within ``u_ulps`` units of its row's largest entry — when the cache under test
  runs kernels, exactly when it runs the torch reference), the stored copies likewise bit for bit
  under the torch reference and, under kernels, equal up to the fold's fp32 summation order
  (:func:`fold_tolerance`: fp32 copies within it, low-precision copies within one unit of their
  format beyond it, fp32 scales within 4 fp32 ulps plus what it moves an amax, e4m3 block scales
  within one e4m3 unit beyond that), and outputs equal up to the activation dtype's rounding.
  Then the twin is re-synced to the tested bytes, so every step is checked from identical state
  (one last-bit difference in a fold flips an SR decision and the two trajectories would
  otherwise drift apart).
* **Accepted stream** (fp32 pair): an fp64 state per slot advanced token by token
  (``reference.mamba2_standard_step`` / ``gdn_standard_step``) over the *accepted* drafts only.
  Draft j's output must equal the standard decode output of that token given every previously
  accepted token, within fp32 rounding; the final materialised state must equal the fp64 state.

Each step: a random draft count T in 1..max_draft (or from ``drafts``), a random row order over a
fixed set of slots (scattered in a larger pool), ~20% pad rows (their NaN-poisoned outputs must
stay NaN), random acceptance 0..T per row; rows start at random (staggered) buffer positions, so
flushes happen at their natural rate. Slots no row owns must never change.

A check that fails raises :class:`FuzzMismatch` naming the step, the tensor and the error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

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


EPS32 = 2.0 ** -23


def fold_tolerance(decay_abs_sum, fold_ulps=32.0, lam_ulps=4.0):
    """How far (relative to the largest |element| of its (slot, head) matrix) two fp32 folds of the
    same buffered entries may differ when they only sum in different orders.

    * ``fold_ulps``: the summation order of the weighted sum itself (test_gpu_ops' one-step decode
      criterion is 2e-6 ≈ 17 fp32 units of the matrix's magnitude for folds of <= 4 entries; a verify
      fold covers up to max(L, max_draft) entries);
    * ``lam_ulps`` per unit of Λ: each weight is exp(Λ_h − Λ_j) of two prefix sums of the log decays
      (torch: a sequential cumsum, the kernel: a warp scan); each prefix sum carries an absolute
      error of a few fp32 units of |Λ|, i.e. a relative error of a few·|Λ| units on every weight.
      ``decay_abs_sum`` [..., heads] = Σ|log decay| over the slot's ring bounds every |Λ| of the fold.

    Returns the relative tolerance [..., heads, 1, 1]."""
    return (EPS32 * (fold_ulps + lam_ulps * decay_abs_sum))[..., None, None]


def _ulp_at(m, fmt):
    """Spacing of ``fmt``'s grid (mantissa, min normal exponent) at |m| (fp64)."""
    spec = F.FORMATS[fmt]
    return 2.0 ** (torch.floor(torch.log2(m.clamp(min=2.0 ** spec.emin))) - spec.mant_bits)


def _sub(enc, slots):
    g = lambda t: None if t is None else t[slots]  # noqa: E731
    return F.EncodedState(enc.data[slots], g(enc.scale), g(enc.global_scale))


def compare_stored(et, er, fmt, tol_rel):
    """One stored copy of the cache under test (``et``) vs the twin's (``er``), EncodedStates of the
    same slots, decoded to their values (scales applied). ``tol_rel`` [n, heads, 1, 1]: the fold
    tolerance relative to each matrix's magnitude (:func:`fold_tolerance`).

    * fp32: |a − b| <= tol_rel · max|S|;
    * fp16 / bf16 / fp8 / nvfp4: within one unit of the target format beyond that (an fp32
      difference across a rounding boundary moves the stored element by one unit; fp8: the e4m3
      spacing times the larger row scale, nvfp4: the e2m1 spacing times the larger block scale);
    * fp8 row scales and the nvfp4 global scales (fp32, = amax / 448, amax / 2688): within 4 fp32
      ulps plus tol_rel · max|S| / 448 (/ 2688) — a fold difference moves the amax by that much;
      nvfp4 block scales (e4m3) within one e4m3 unit beyond what it moves a block's amax.

    Returns (problem or None, worst |a − b| in the measure of the format: fp32 units of the matrix
    magnitude for fp32, units of the format beyond the fold tolerance otherwise)."""
    a, b = F.decode(et, fmt).double(), F.decode(er, fmt).double()
    fa, fb = torch.isfinite(a), torch.isfinite(b)
    if not torch.equal(fa, fb) or not torch.equal(a[~fa].nan_to_num(1.0), b[~fb].nan_to_num(1.0)):
        return "non-finite values differ", float("inf")
    a, b = a.nan_to_num(0.0), b.nan_to_num(0.0)
    amat = torch.maximum(a.abs(), b.abs()).amax(dim=(-1, -2), keepdim=True)
    tol = tol_rel.double() * amat                                          # [n, heads, 1, 1]
    d = (a - b).abs()
    # ---- scales
    n, H = a.shape[:2]
    for part, div in (("scale", F.E4M3_MAX), ("global_scale", F.NVFP4_GLOBAL_DIV)):
        x, y = getattr(et, part), getattr(er, part)
        if y is None:
            continue
        if y.dtype == torch.float8_e4m3fn:                                  # nvfp4 block scales
            # = RN_e4m3((amax_blk / 6) / s_glob): one e4m3 unit beyond what the fold moves amax_blk
            xs, ys = x.double(), y.double()
            gs = torch.maximum(et.global_scale.double(), er.global_scale.double()).view(n, H, 1, 1)
            fold = tol / (6.0 * gs.clamp(min=1e-300))
            ex = ((xs - ys).abs() - fold).clamp(min=0)
            u = ex / _ulp_at(torch.maximum(xs.abs(), ys.abs()), "fp8")
            worst = u.max().item() if u.numel() else 0.0
            if not worst <= 1.0:
                return f"{part} (e4m3 block scales) {worst:.1f} e4m3 units from the twin", worst
            continue
        xs, ys = x.double(), y.double()
        t = tol.view(n, H, *([1] * (ys.dim() - 2)))
        allowed = 4 * EPS32 * torch.maximum(xs.abs(), ys.abs()) + t / div
        if not bool(((xs - ys).abs() <= allowed).all()):
            r = ((xs - ys).abs() / allowed.clamp(min=1e-300)).max().item()
            return f"{part} differs from the twin by {r:.2f}x the allowed (4 ulps + fold / {div:g})", r
    # ---- values
    if fmt == "fp32":
        worst = (d / amat.clamp(min=1e-300)).max().item() / EPS32 if d.numel() else 0.0
        if not bool((d <= tol).all()):
            r = (d / tol.clamp(min=1e-300)).max().item()
            return (f"{worst:.2f} fp32 units of the matrix magnitude from the twin ({r:.2f}x the fold "
                    f"tolerance)"), worst
        return None, worst
    m = torch.maximum(a.abs(), b.abs())
    if fmt in ("fp16", "bf16"):
        unit = _ulp_at(m, fmt)
    elif fmt == "fp8":
        sc = torch.maximum(et.scale.double(), er.scale.double()).unsqueeze(-1)
        unit = _ulp_at(m / sc.clamp(min=1e-300), "fp8") * sc
    elif fmt == "nvfp4":
        da = et.scale.double() * et.global_scale.double().view(n, H, 1, 1)
        db = er.scale.double() * er.global_scale.double().view(n, H, 1, 1)
        dd = torch.maximum(da, db).repeat_interleave(F.NVFP4_BLOCK, dim=-1)
        v = m / dd.clamp(min=1e-300)
        unit = torch.where(v < 2, 0.5, torch.where(v < 4, 1.0, 2.0)) * dd   # e2m1 grid spacing
    else:
        raise ValueError(fmt)
    excess = (d - tol).clamp(min=0)
    units = torch.where(excess == 0, torch.zeros_like(excess), excess / unit.clamp(min=1e-300))
    worst = units.max().item() if units.numel() else 0.0
    if not worst <= 1.0 + 1e-6:          # one unit, up to the fp64 rounding of this measure
        return f"{worst:.2f} units of {fmt} from the twin beyond the fold tolerance", worst
    return None, worst


class _Checker:
    def __init__(self, exact_buffers: bool, buffer_ulps: float, u_ulps: float, out_rel: float,
                 fold_ulps: float, lam_ulps: float, report: FuzzReport):
        self.exact_buffers, self.buffer_ulps, self.u_ulps = exact_buffers, buffer_ulps, u_ulps
        self.out_rel = out_rel
        self.fold_ulps, self.lam_ulps = fold_ulps, lam_ulps
        self.decay_abs = None        # Σ|log decay| over each (slot, head)'s ring before the step
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

    def note_decays(self, twin):
        """Before the step (twin == cache under test): Σ|log decay| per (slot, head) of the ring,
        which bounds every prefix sum Λ of the step's folds (:func:`fold_tolerance`)."""
        self.decay_abs = (twin.dA_buf if twin.kind == "mamba2" else twin.g_buf).abs().sum(-1)

    def stored(self, test, twin, slots):
        p = twin.pair
        tol_rel = fold_tolerance(self.decay_abs[slots], self.fold_ulps, self.lam_ulps)
        for name, fmt in (("hi", p.rec_fmt), ("lo", p.read_fmt)):
            et, er = getattr(test, name), getattr(twin, name)
            if er is None:
                continue
            et, er = _sub(et, slots), _sub(er, slots)
            if all(torch.equal(_bytes(x), _bytes(y)) for x, y in
                   zip((et.data, et.scale, et.global_scale), (er.data, er.scale, er.global_scale))
                   if y is not None):
                continue
            if self.exact_buffers:      # torch reference on both sides: the same bytes
                self.fail(f"stored {name} copy ({fmt}) differs from the twin (exact run)")
            problem, worst = compare_stored(et, er, fmt, tol_rel)
            if problem is not None:
                self.fail(f"stored {name} copy ({fmt}): {problem}")
            key = f"{name}:{fmt}"
            self.report.worst_units[key] = max(self.report.worst_units.get(key, 0.0), worst)

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
              buffer_ulps: float = 8.0, u_ulps: float = 256.0, fold_ulps: float = 32.0,
              lam_ulps: float = 4.0, pad_prob: float = 0.2, corrupt: Optional[Callable] = None,
              setup: Optional[Callable] = None, drafts: Optional[Sequence[int]] = None) -> FuzzReport:
    """Run the fuzz (module docstring); returns a :class:`FuzzReport`, raises :class:`FuzzMismatch`.

    ``corrupt(step, test_cache, twin_cache, slots)``, if given, runs after each step's checks and
    re-sync (the teeth tests use it to damage one entry). ``setup(test_cache, twin_cache)``, if
    given, runs once after the caches are made (tests that perturb only the cache under test use
    it to know which one that is). ``fold_ulps`` / ``lam_ulps``: :func:`fold_tolerance`.
    ``drafts``: the draft counts T is drawn from (default 1..max_draft; the CuTe verify kernels
    compile one variant per T, so GPU runs over many pairs give each pair a few)."""
    drafts = list(range(1, max_draft + 1)) if drafts is None else [int(t) for t in drafts]
    if not drafts or not all(1 <= t <= max_draft for t in drafts):
        raise ValueError(f"drafts {drafts} must be non-empty values in 1..max_draft={max_draft}")
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
    chk = _Checker(exact_buffers, buffer_ulps, u_ulps, out_rel, fold_ulps, lam_ulps, report)

    test = _make_cache(kind, dims, pool, precision, L, max_draft, act, device, seed + 1)
    twin = _make_cache(kind, dims, pool, precision, L, max_draft, act, "cpu", seed + 1)
    # one device-to-host copy of the tested cache per step; every check reads this CPU shadow
    shadow = _make_cache(kind, dims, pool, precision, L, max_draft, act, "cpu", seed + 1)
    if setup is not None:
        setup(test, twin)
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
        T = drafts[int(torch.randint(0, len(drafts), (), generator=gen))]
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
        chk.note_decays(twin)
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
        chk.stored(shadow, twin, slots)
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
    Twin-only: +3 on head 0 of an input copy (x_buf / k_buf); both: +1 on every head's log decay
    (dA_buf / g_buf), which changes the state even when the entry is one of the no-op staggering
    entries. The damaged decay multiplies the state before the entry by e, so a decay near -8 would
    leave almost nothing to see: of the candidate entries, the one with the largest decay is damaged."""
    state = {"done": False}

    def hook(step, test, twin, slots):
        if state["done"] or step < at_step:
            return
        wp = test.write_pos.cpu()[slots]
        cand = (wp > 0).nonzero().squeeze(1)
        if cand.numel() == 0:
            return
        name = (("dA_buf" if test.kind == "mamba2" else "g_buf") if both
                else ("x_buf" if test.kind == "mamba2" else "k_buf"))
        where = [(int(slots[i]), (int(test.ring_origin[int(slots[i])]) + int(wp[i]) - 1) % test.ring)
                 for i in cand.tolist()]
        if both:
            decay = test.dA_buf if test.kind == "mamba2" else test.g_buf
            s, phys = max(where, key=lambda w: float(decay[w[0], :, w[1]].float().max()))
        else:
            s, phys = where[0]
        for c in ((test, twin) if both else (test,)):
            if both:
                getattr(c, name)[s, :, phys] += 1.0
            else:
                getattr(c, name)[s, 0, phys] += 3.0
        state["done"] = True
        state["where"] = (name, s, phys)

    hook.state = state
    return hook
