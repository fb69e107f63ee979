#!/usr/bin/env python
"""GPU check of the Mamba-2 ReplaySSM decode kernel (cute_kernels/mamba2_replay.py) against the torch
reference (replayssm_lp.reference.mamba2_replay via ``R.mamba2_decode(backend="torch")``), for every
precision pair.

Per configuration, two Mamba2ReplayCache objects with identical init (``init_from_state`` with the
same seed and state) sit in a pool larger than the batch (scattered slots); each step feeds both the
same inputs with ~25 % pad rows (random per step, so rows drift to different buffer positions and
flush at different steps), runs the reference on one cache and the kernel (called directly through
``mamba2_replay_decode_cute``) on the other, then checks:

* outputs of valid rows: fp32 acts -> relative L2 error per (row, head) <= 1e-5 and max |diff| /
  max |ref| <= 1e-4; 16-bit acts -> every element within 1 unit in the last place of the act dtype
  (the two fp32 values round to neighbouring act values at worst);
* pad rows of ``out`` stay NaN; cache slots not addressed by a valid row are byte-identical;
* hi / lo of the valid slots: in ``exact`` mode (A = 0, dt' = 1, small-integer x and B: every fold is
  exact in fp32) the bytes, scales and global scales must be bit-identical; in ``random`` mode the
  fp32 folds may differ in the last bits, so the decoded values must agree within 1 unit of the
  target format (fp8: of the e4m3 grid times the row scale, nvfp4: of the e2m1 grid times the
  block scale) beyond 2e-6 of the matrix's magnitude (what the fold's fp32 summation order can
  move an element that results from cancellation, as in tests/test_gpu_ops.py), and the fraction
  of differing bytes is reported (fp32 copies: relative error);
* buffers: x_buf / B_buf bit-exact, dt_buf / dA_buf within 4 ulp (dt' = log1p(exp(.)) of two libms); cursors (write_pos, ring_origin,
  flush_count, pending) exact, ``arrive`` back to 0.

After the checks the reference cache is overwritten with the kernel cache, so every step starts from
identical bytes (one step's last-bit differences do not accumulate).

Usage (on the GPU machine, from the repository root)::

    python tests/gpu_scripts/check_mamba2_replay.py               # every pair, default configs
    python tests/gpu_scripts/check_mamba2_replay.py --pairs nvfp4/fp16sr,fp32 --quick
    python tests/gpu_scripts/check_mamba2_replay.py --full        # every config for every pair
    python tests/gpu_scripts/check_mamba2_replay.py --pairs fp8/fp32,fp16/fp32,fp32 --headdim 80
    python tests/gpu_scripts/check_mamba2_replay.py --self-test   # CPU: the checker vs itself

Prints one table row per configuration and exits 1 if any check fails.
"""
from __future__ import annotations

import math
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.abspath(os.path.join(_HERE, "..", ".."))
for _p in (_ROOT, _HERE):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import torch  # noqa: E402

import replayssm_lp as R  # noqa: E402
from replayssm_lp import formats as F  # noqa: E402
from replayssm_lp.pairs import precision_pairs  # noqa: E402

from check_common import (  # noqa: E402
    ACT_NAME, arg_parser, copy_frac, copy_units, draw_rows, level, no_cuda, run_table,
    stop_on_fail, timed)

_ACT = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


# ----------------------------------------------------------------------------------------------
# comparisons
# ----------------------------------------------------------------------------------------------
def _ulp(v: torch.Tensor, mant_bits: int, emin: int) -> torch.Tensor:
    """Spacing of a float grid (mant_bits, min normal exponent emin) at |v| (fp64)."""
    a = v.abs().double()
    e = torch.floor(torch.log2(torch.clamp(a, min=2.0 ** emin)))
    return torch.pow(2.0, e - mant_bits)


def _bytes(t):
    return t.contiguous().view(torch.uint8) if t.dtype != torch.uint8 else t.contiguous()


def _decode(enc, fmt, slots):
    sub = F.EncodedState(enc.data[slots], None if enc.scale is None else enc.scale[slots],
                         None if enc.global_scale is None else enc.global_scale[slots])
    return F.decode(sub, fmt).double()


def compare_copy(name, fmt, er, ek, slots, exact, res):
    """Compare one stored copy (EncodedState) on ``slots``; updates ``res`` (dict of stats)."""
    br, bk = _bytes(er.data[slots]), _bytes(ek.data[slots])
    ndiff = int((br != bk).sum())
    res[f"{name}_bytes_diff"] = res.get(f"{name}_bytes_diff", 0) + ndiff
    res[f"{name}_bytes"] = res.get(f"{name}_bytes", 0) + br.numel()
    sc_diff = 0
    for t_r, t_k in ((er.scale, ek.scale), (er.global_scale, ek.global_scale)):
        if t_r is not None:
            sc_diff += int((_bytes(t_r[slots]) != _bytes(t_k[slots])).sum())
    res[f"{name}_scale_diff"] = res.get(f"{name}_scale_diff", 0) + sc_diff
    if exact:
        if ndiff or sc_diff:
            res["fail"].append(f"{name}: {ndiff} data bytes / {sc_diff} scale bytes differ in exact mode")
        return
    if ndiff == 0 and sc_diff == 0:
        return
    a, b = _decode(er, fmt, slots), _decode(ek, fmt, slots)
    bad = ~(torch.isfinite(a) & torch.isfinite(b))
    if bool(bad.any()) and not bool((a[bad].isnan() & b[bad].isnan()).all()):
        if not torch.equal(a[bad], b[bad]):
            res["fail"].append(f"{name}: non-finite values differ")
    d = (a - b).abs()
    m = torch.maximum(a.abs(), b.abs())
    if fmt == "fp32":
        # per (slot, head) relative error (the fp32 fold itself is what differs)
        num = (a - b).flatten(2).norm(dim=-1)
        den = a.flatten(2).norm(dim=-1).clamp_min(1e-30)
        rel = float((num / den).max())
        res[f"{name}_max_rel"] = max(res.get(f"{name}_max_rel", 0.0), rel)
        if rel > 1e-5:
            res["fail"].append(f"{name}: fp32 copy relative error {rel:.2e} > 1e-5")
        return
    if fmt in ("fp16", "bf16"):
        spec = F.FORMATS[fmt]
        unit = _ulp(m, spec.mant_bits, spec.emin)
    elif fmt == "fp8":
        s = torch.maximum(er.scale[slots].double(), ek.scale[slots].double()).unsqueeze(-1)
        unit = _ulp(m / s.clamp_min(1e-300), 3, -6) * s
    else:  # nvfp4
        n, H = a.shape[:2]
        dr = (er.scale[slots].float().double() * er.global_scale[slots].double().view(n, H, 1, 1))
        dk = (ek.scale[slots].float().double() * ek.global_scale[slots].double().view(n, H, 1, 1))
        dd = torch.maximum(dr, dk).repeat_interleave(F.NVFP4_BLOCK, dim=-1)
        v = m / dd.clamp_min(1e-300)
        unit = torch.where(v < 2, 0.5, torch.where(v < 4, 1.0, 2.0)) * dd
    # one unit of the target format beyond what the fp32 fold's summation order can move an
    # element that results from cancellation (2e-6 of its matrix's magnitude; as test_gpu_ops)
    amat = torch.maximum(a.abs(), b.abs())
    amat = torch.where(torch.isfinite(amat), amat, torch.zeros_like(amat)).amax(dim=(-1, -2),
                                                                                 keepdim=True)
    d = (d - 2e-6 * amat).clamp_min(0)
    units = torch.where(d == 0, torch.zeros_like(d), d / unit.clamp_min(1e-300))
    mu = float(units[torch.isfinite(units)].max()) if bool(torch.isfinite(units).any()) else 0.0
    res[f"{name}_max_units"] = max(res.get(f"{name}_max_units", 0.0), mu)
    if mu > 1.0 + 1e-6:  # one unit, up to the double-precision rounding of this measure
        res["fail"].append(f"{name}: decoded values differ by {mu:.3f} units of {fmt} (> 1)")


def compare_out(out_r, out_k, rows, act, res):
    a = out_r[rows].double()
    b = out_k[rows].double()
    if not bool(torch.isfinite(b).all()):
        res["fail"].append("kernel output has non-finite values on valid rows")
        return
    if act == torch.float32:
        num = (a - b).norm(dim=-1)
        den = a.norm(dim=-1).clamp_min(1e-30)
        rel = float((num / den).max()) if num.numel() else 0.0
        mx = float((a - b).abs().max() / a.abs().max().clamp_min(1e-30)) if a.numel() else 0.0
        res["out_rel"] = max(res.get("out_rel", 0.0), rel)
        res["out_maxscaled"] = max(res.get("out_maxscaled", 0.0), mx)
        if rel > 1e-5 or mx > 1e-4:
            res["fail"].append(f"outputs: rel L2 {rel:.2e} (tol 1e-5), max|d|/max|ref| {mx:.2e} (tol 1e-4)")
    else:
        mant = 7 if act == torch.bfloat16 else 10
        emin = -126 if act == torch.bfloat16 else -14
        unit = _ulp(torch.maximum(a.abs(), b.abs()), mant, emin)
        floor = 1e-6 * float(a.abs().max()) if a.numel() else 0.0
        units = ((a - b).abs() - floor).clamp_min(0) / unit
        mu = float(units.max()) if units.numel() else 0.0
        res["out_units"] = max(res.get("out_units", 0.0), mu)
        rel = float(((a - b).norm() / a.norm().clamp_min(1e-30))) if a.numel() else 0.0
        res["out_rel"] = max(res.get("out_rel", 0.0), rel)
        if mu > 1.0 + 1e-6:  # one unit, up to the double-precision rounding of this measure
            res["fail"].append(f"outputs: {mu:.2f} units of the act dtype apart (> 1)")


def _ulp_dist(a, b):
    """Largest |a - b| in fp32 ulps of max(|a|, |b|)."""
    if a.numel() == 0:
        return 0.0
    a, b = a.double(), b.double()
    u = _ulp(torch.maximum(a.abs(), b.abs()), 23, -126)
    return float(((a - b).abs() / u).max())


def cache_tensors(c):
    ts = {"hi.data": c.hi.data, "hi.scale": c.hi.scale, "hi.global_scale": c.hi.global_scale}
    if c.lo is not None:
        ts.update({"lo.data": c.lo.data, "lo.scale": c.lo.scale, "lo.global_scale": c.lo.global_scale})
    ts.update({"x_buf": c.x_buf, "B_buf": c.B_buf, "dt_buf": c.dt_buf, "dA_buf": c.dA_buf,
               "write_pos": c.write_pos, "ring_origin": c.ring_origin,
               "flush_count": c.flush_count, "pending": c.pending})
    return {k: v for k, v in ts.items() if v is not None}


def compare_caches(cr, ck, slots, exact, res):
    p = cr.pair
    compare_copy("hi", p.rec_fmt, cr.hi, ck.hi, slots, exact, res)
    if cr.lo is not None:
        compare_copy("lo", p.read_fmt, cr.lo, ck.lo, slots, exact, res)
    for name in ("x_buf", "B_buf"):
        if not torch.equal(_bytes(getattr(cr, name)[slots]), _bytes(getattr(ck, name)[slots])):
            res["fail"].append(f"{name} differs")
    for name in ("dt_buf", "dA_buf"):
        u = _ulp_dist(getattr(cr, name)[slots], getattr(ck, name)[slots])
        res[f"{name}_ulp"] = max(res.get(f"{name}_ulp", 0.0), u)
        if u > 4:
            res["fail"].append(f"{name} differs by {u:.1f} ulp (> 4: dt' = log1p(exp()) of two libms)")
    for name in ("write_pos", "ring_origin", "flush_count", "pending"):
        if not torch.equal(getattr(cr, name), getattr(ck, name)):
            res["fail"].append(f"cursor {name} differs")
    arrive = getattr(ck, "arrive", None)
    if arrive is not None and bool((arrive != 0).any()):
        res["fail"].append("arrive counter not reset to 0")


def snapshot_unowned(c, owned):
    mask = torch.ones(c.num_slots, dtype=torch.bool, device=c.device)
    if len(owned):
        mask[owned] = False
    return mask, {k: v[mask].clone() for k, v in cache_tensors(c).items()}


def check_unowned(c, snap, res):
    mask, before = snap
    for k, v in cache_tensors(c).items():
        if not torch.equal(_bytes(v[mask]), _bytes(before[k])):
            res["fail"].append(f"{k}: a slot no valid row addresses was modified")


def resync(cr, ck):
    for (k, vr), (_, vk) in zip(cache_tensors(cr).items(), cache_tensors(ck).items()):
        vr.copy_(vk)


# ----------------------------------------------------------------------------------------------
# one configuration
# ----------------------------------------------------------------------------------------------
def prefill_state(batch, H, P, N, gen):
    """Prefill state: per-head magnitudes spread over 2^-4 .. 2^4, plus a zero head row."""
    S = torch.randn(batch, H, P, N, generator=gen) * torch.exp2(
        torch.randint(-4, 5, (1, H, 1, 1), generator=gen).float())
    S[:, 0, 0, :] = 0.0
    return S


def layer_params(H, mode, D, gen, device):
    """(A, D, dt_bias on ``device``, dt_softplus): ``exact`` mode A = 0 and dt' = dt (no bias, no
    softplus); ``random`` mode A = -U[1, 16] (log-uniform) and dt_bias = softplus^-1 of a
    log-uniform value in [1e-3, 0.1]. D random when ``D``."""
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
    return (A.to(device), None if Dv is None else Dv.to(device),
            None if dt_bias is None else dt_bias.to(device), softplus)


def step_inputs(gen, lead, dims, mode, z, device, act):
    """(x, dt, B, C, z) of one step, leading dims ``lead`` ((batch,) or (batch, T)): ``exact`` mode
    small-integer x and B, dt = 1; ``random`` mode Gaussian (dt * 0.5)."""
    H, P, N, G = dims
    if mode == "exact":
        x = torch.randint(-2, 3, lead + (H, P), generator=gen).float()
        B = torch.randint(-2, 3, lead + (G, N), generator=gen).float()
        dt = torch.ones(lead + (H,))
    else:
        x = torch.randn(lead + (H, P), generator=gen)
        B = torch.randn(lead + (G, N), generator=gen)
        dt = torch.randn(lead + (H,), generator=gen) * 0.5
    C = torch.randn(lead + (G, N), generator=gen)
    zz = torch.randn(lead + (H, P), generator=gen) if z else None
    dv = lambda t: None if t is None else t.to(device=device, dtype=act)  # noqa: E731
    return dv(x), dt.to(device), dv(B), dv(C), dv(zz)


def run_config(pair, L, act, hpc, mode, dims, pool, batch, steps, seed, device, kernel,
               use_idx=True, z=True, D=True, max_draft=0, impl=None):
    H, P, N, G = dims
    gen = torch.Generator().manual_seed(seed)
    res = {"fail": [], "flush_rows": 0, "steps": steps}
    kw = dict(precision=pair, buffer_len=L, max_draft=max_draft, act_dtype=act, device=device,
              seed=1000 + seed)
    cr = R.Mamba2ReplayCache(pool, H, P, N, G, **kw)
    ck = R.Mamba2ReplayCache(pool, H, P, N, G, **kw)
    slots = torch.randperm(pool, generator=gen)[:batch] if use_idx else torch.arange(batch)
    S = prefill_state(batch, H, P, N, gen)
    cr.init_from_state(slots.tolist(), S.to(device))
    ck.init_from_state(slots.tolist(), S.to(device))
    resync(cr, ck)          # identical bytes even if the init encoders differed (they must not)
    slots_d = slots.to(device)
    A_d, D_d, bias_d, softplus = layer_params(H, mode, D, gen, device)
    t_ker = 0.0
    for step in range(steps):
        pad, sbi, rows = draw_rows(gen, batch, slots, use_idx, device)
        x, dt, B, C, zz = step_inputs(gen, (batch,), dims, mode, z, device, act)
        args = (x, dt, A_d, B, C, D_d, zz, bias_d)
        out_r = torch.full((batch, H, P), float("nan"), dtype=act, device=device)
        out_k = torch.full((batch, H, P), float("nan"), dtype=act, device=device)
        owned = slots_d[rows.to(device)]
        snap = snapshot_unowned(ck, owned)
        res["flush_rows"] += int((cr.write_pos[owned] >= L).sum())
        R.mamba2_decode(cr, *args, dt_softplus=softplus, state_batch_indices=sbi, out=out_r,
                        backend="torch")
        t_ker += timed(lambda: kernel(ck, *args, dt_softplus=softplus, state_batch_indices=sbi,
                                      pad_slot_id=-1, out=out_k, heads_per_cta=hpc,
                                      **(impl or {})), device)
        if bool(pad.any()) and not bool(out_k[pad.to(device)].isnan().all()):
            res["fail"].append("a pad row of out was written")
        compare_out(out_r, out_k, rows.to(device), act, res)
        compare_caches(cr, ck, owned, mode == "exact", res)
        check_unowned(ck, snap, res)
        if stop_on_fail(res, f"step {step}"):
            break
        resync(cr, ck)
    res["ms_per_step"] = 1e3 * t_ker / max(1, steps)
    return res


HEADLINE = ("fp32", "nvfp4/fp16sr", "nvfp4/fp8sr", "fp8/fp16sr", "nvfp4sr")
# P = 80 with a non-nvfp4 read copy (N = 128): RPT = 5 / 10 / 20 rows over TN = 8 / 16 / 32
# lanes, odd splits at inner levels of the non-flush transposed row reduction
P80_READ = ("fp8/fp32", "fp16/fp32", "fp32")


def default_configs(pairs, level="default"):
    """(pair, L, act, heads_per_cta, mode, dims, pool, batch, use_idx, max_draft, impl);
    heads_per_cta None = the launch heuristic; impl: implementation switches of the kernel
    (flush_impl / staged / nonflush_mma; {} = the defaults).

    quick: one random-mode config per pair (L=4, fp32 acts, one head per CTA). default: plus an
    exact-mode config per pair (bf16 acts, 2 heads per CTA), L=16 with 4 heads per CTA for the
    headline pairs, P=80 with a ring larger than L+1 (and P=80 for the fp8 / fp16 / fp32 read
    copies of ``P80_READ``), no state_batch_indices, L=32 (the largest
    fold staging), fp16 acts at P=64 (tensor-core dot without C scaling), the fallback
    implementations (flush v1, register non-flush, CUDA-core dot: ``impl`` v1) in exact and
    random mode, and the real Nemotron-3-Super layer shape (whole groups per CTA and the launch
    heuristic). full: every extra config for every pair."""
    out = []
    small = (8, 64, 128, 2)
    for name in pairs:
        out.append((name, 4, torch.float32, 1, "random", small, 23, 7, True, 0, {}))
        if level != "quick":
            out.append((name, 4, torch.bfloat16, 2, "exact", small, 19, 6, True, 0, {}))
        if level == "full" or (level == "default" and name in HEADLINE):
            out.append((name, 16, torch.bfloat16, 4, "random", small, 23, 9, True, 0, {}))
    if level != "quick":
        extra = pairs if level == "full" else [p for p in pairs if p in HEADLINE[1:3]] or pairs[:1]
        for name in extra:
            # P = 80 (row tails), a ring larger than L + 1 (max_draft), no state_batch_indices
            out.append((name, 8, torch.bfloat16, 2, "random", (4, 80, 128, 1), 11, 5, True, 3,
                        {}))
            out.append((name, 4, torch.float16, 1, "exact", (4, 80, 128, 1), 5, 5, False, 0, {}))
            # L = 32 (JB = 32: the largest smem footprint), fp16 acts at P = 64
            out.append((name, 32, torch.bfloat16, 1, "random", small, 13, 5, True, 0, {}))
            out.append((name, 8, torch.float16, 4, "random", small, 13, 6, True, 0, {}))
        for name in [p for p in pairs if p in P80_READ and p not in extra]:
            out.append((name, 8, torch.bfloat16, 2, "random", (4, 80, 128, 1), 11, 5, True, 3,
                        {}))
        fb = [p for p in pairs if p in ("nvfp4/fp16sr", "fp32", "fp8/fp16sr")]
        if level == "full":
            fb = pairs
        v1 = dict(flush_impl=1, staged=False, nonflush_mma=False)
        for name in fb:
            out.append((name, 4, torch.bfloat16, 2, "exact", small, 19, 6, True, 0, v1))
            out.append((name, 16, torch.bfloat16, 4, "random", small, 23, 9, True, 0, v1))
        if pairs:
            # the real layer shape (Nemotron-3-Super Mamba-2): whole groups per CTA, and the
            # launch heuristic (heads_per_cta=None)
            big = [p for p in pairs if p in HEADLINE[1:2]] or pairs[:1]
            out.append((big[0], 16, torch.bfloat16, 16, "random", (128, 64, 128, 8), 40, 16,
                        True, 0, {}))
            out.append((big[0], 16, torch.bfloat16, None, "random", (128, 64, 128, 8), 40, 16,
                        True, 0, {}))
    return out


def main(argv=None) -> int:
    ap = arg_parser(__doc__, steps_help="steps = factor * L + 5")
    ap.add_argument("--headdim", type=int, default=None,
                    help="only the configurations with this head dim P (e.g. 80)")
    a = ap.parse_args(argv)
    names = a.pairs.split(",") if a.pairs else list(precision_pairs(include_extra=True))
    if a.self_test:
        device = "cpu"

        def kernel(cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices,
                   pad_slot_id, out, heads_per_cta=None, **impl):
            return R.mamba2_decode(cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                                   state_batch_indices, pad_slot_id, out, backend="torch")
    else:
        if no_cuda():
            return 2
        device = "cuda"
        from cute_kernels.mamba2_replay import mamba2_replay_decode_cute as kernel
    cfgs = default_configs(names, level(a))
    if a.headdim is not None:
        cfgs = [c for c in cfgs if c[5][1] == a.headdim]
    if a.self_test:
        cfgs = [c for c in cfgs if c[5][0] <= 8][: 2 * len(names)]
    hdr = (f"{'pair':16s} {'L':>2s} {'act':>4s} {'hpc':>3s} {'mode':6s} {'impl':4s} {'H,P,N,G':>13s} "
           f"{'flush':>5s} {'out_rel':>8s} {'out_u':>5s} {'hi_diff':>9s} {'hi_u':>6s} "
           f"{'lo_diff':>9s} {'lo_u':>6s} {'dt_ulp':>6s} {'ms':>7s}  result")

    def run_one(i, cfg):
        pair, L, act, hpc, mode, dims, pool, batch, use_idx, md, impl = cfg
        return run_config(pair, L, act, hpc, mode, dims, pool, batch, a.steps_factor * L + 5,
                          a.seed + i, device, kernel, use_idx=use_idx, max_draft=md, impl=impl)

    def row(cfg, res):
        pair, L, act, hpc, mode, dims, pool, batch, use_idx, md, impl = cfg
        hpcs = "auto" if hpc is None else str(hpc)
        return (f"{pair:16s} {L:2d} {ACT_NAME[act]:>4s} {hpcs:>3s} {mode:6s} "
                f"{'v1' if impl else 'v2':4s} {','.join(map(str, dims)):>13s} "
                f"{res.get('flush_rows', 0):5d} {res.get('out_rel', 0.0):8.1e} "
                f"{res.get('out_units', 0.0):5.2f} {copy_frac(res, 'hi'):>9s} "
                f"{copy_units(res, 'hi'):>6s} {copy_frac(res, 'lo'):>9s} "
                f"{copy_units(res, 'lo'):>6s} "
                f"{max(res.get('dt_buf_ulp', 0.0), res.get('dA_buf_ulp', 0.0)):6.1f} "
                f"{res.get('ms_per_step', 0.0):7.2f}")
    nfail = run_table(cfgs, hdr, run_one, row)
    print(f"\n{len(cfgs) - nfail}/{len(cfgs)} configurations passed")
    return 1 if nfail else 0


if __name__ == "__main__":
    sys.exit(main())
