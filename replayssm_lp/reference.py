"""The math, in torch: standard decode recurrences and the ReplaySSM steps (the spec every kernel
must match). Runs on any device; the standard steps can run in fp64 for exactness checks.

Notation (DESIGN §1). Mamba-2, per head: dt' = softplus(dt + dt_bias) (bypass above 20), log decay
l = A·dt', v = dt'·x, k = B (group), q = C (group); ``S ← e^l S + v kᵀ``, ``y = S q + D x``
(then ``y *= silu(z)``). GDN, per value head: q, k L2-normalised (eps 1e-6), q·scale; g log decay,
α = e^g, β; ``u = β (v − α S k)``, ``S ← α S + u kᵀ``, ``o = S q``.

ReplaySSM, with checkpoint S₀ and buffered entries p = 0..h−1 (cumulative log decay Λ_p = Σ_{i≤p} l_i):
``S_h = e^{Λ_{h−1}} S₀ + Σ_p e^{Λ_{h−1} − Λ_p} v_p k_pᵀ``. A step with T new inputs at logical
positions h..h+T−1 first flushes when ``h + T > L`` (fold the h committed entries into the
checkpoint, write hi and lo, empty the buffer), then appends the inputs and computes every output
from S₀ (the read copy; the fresh fp32 fold on a flush step) plus the buffer — no state write.
"""
from __future__ import annotations

from typing import Optional

import torch

__all__ = [
    "softplus_bypass", "mamba2_process_dt", "gdn_gates", "l2norm_inv",
    "mamba2_standard_step", "gdn_standard_step",
    "mamba2_fold", "gdn_fold", "mamba2_replay", "gdn_replay", "commit_cursors",
]

L2NORM_EPS = 1e-6
SOFTPLUS_BYPASS = 20.0


def softplus_bypass(x: torch.Tensor) -> torch.Tensor:
    """softplus(x), returning x itself above 20 (as vLLM / mamba_ssm / FLA do)."""
    return torch.where(x > SOFTPLUS_BYPASS, x, torch.log1p(torch.exp(torch.clamp(x, max=SOFTPLUS_BYPASS))))


def mamba2_process_dt(dt, dt_bias=None, dt_softplus=True, dtype=torch.float32):
    """dt [..., H] -> dt' in ``dtype``."""
    d = dt.to(dtype)
    if dt_bias is not None:
        d = d + dt_bias.to(dtype)
    return softplus_bypass(d) if dt_softplus else d


def gdn_gates(g=None, beta=None, A_log=None, a=None, dt_bias=None, b=None, dtype=torch.float32):
    """(g, beta) in ``dtype`` from either given ``g, beta`` or raw ``A_log, a, dt_bias, b``:
    g = −exp(A_log)·softplus(a + dt_bias), beta = sigmoid(b)."""
    if g is None:
        x = a.to(dtype) + (dt_bias.to(dtype) if dt_bias is not None else 0)
        g = -torch.exp(A_log.to(dtype)) * softplus_bypass(x)
    else:
        g = g.to(dtype)
    beta = torch.sigmoid(b.to(dtype)) if beta is None else beta.to(dtype)
    return g, beta


def l2norm_inv(x: torch.Tensor) -> torch.Tensor:
    """1 / sqrt(Σ x² + 1e-6) over the last dim (fp32 or wider)."""
    return torch.rsqrt((x * x).sum(-1) + L2NORM_EPS)


def _silu(z):
    return z * torch.sigmoid(z)


def _group_of_head(nheads, ngroups, device):
    return torch.arange(nheads, device=device) // (nheads // ngroups)


# ----------------------------------------------------------------------------------------------
# Standard decode (read + write the whole state every step), vLLM semantics, in place.
# ----------------------------------------------------------------------------------------------
def mamba2_standard_step(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=True,
                         rows=None, slots=None, compute_dtype=torch.float32):
    """One token for the rows ``rows`` (indices into the batch) whose states sit at ``slots``.
    Updates ``state`` in place (stored back in its dtype, RN); returns y [n, H, P] in compute dtype."""
    cd = compute_dtype
    if rows is None:
        rows = torch.arange(x.shape[0], device=x.device)
        slots = rows
    H, P, N = state.shape[1:]
    G = B.shape[1]
    grp = _group_of_head(H, G, x.device)
    S = state[slots].to(cd)
    xr = x[rows].to(cd)
    d = mamba2_process_dt(dt[rows], dt_bias, dt_softplus, cd)               # [n, H]
    dA = torch.exp(A.to(cd) * d)
    Bh, Ch = B[rows].to(cd)[:, grp], C[rows].to(cd)[:, grp]                 # [n, H, N]
    S = dA[..., None, None] * S + (d[..., None] * xr)[..., None] * Bh[:, :, None, :]
    y = torch.einsum("nhpd,nhd->nhp", S, Ch)
    if D is not None:
        y = y + D.to(cd)[:, None] * xr
    if z is not None:
        y = y * _silu(z[rows].to(cd))
    state[slots] = S.to(state.dtype)
    return y


def gdn_standard_step(state, q, k, v, g, beta, scale=None, use_qk_l2norm=True, rows=None,
                      slots=None, layout="vk", compute_dtype=torch.float32):
    """One GDN token. ``state [slots, HV, V, K]`` (layout "vk") or ``[slots, HV, K, V]`` ("kv");
    q, k [b, H, K]; v [b, HV, V]; g, beta [b, HV] (already processed). In place; returns o [n, HV, V]."""
    cd = compute_dtype
    if rows is None:
        rows = torch.arange(q.shape[0], device=q.device)
        slots = rows
    H, K = q.shape[1:]
    HV = v.shape[1]
    hmap = torch.arange(HV, device=q.device) // (HV // H)
    S = state[slots].to(cd)
    if layout == "kv":
        S = S.transpose(-1, -2)
    qr, kr = q[rows].to(cd), k[rows].to(cd)
    if use_qk_l2norm:
        qr = qr * l2norm_inv(qr)[..., None]
        kr = kr * l2norm_inv(kr)[..., None]
    qr = qr * (K ** -0.5 if scale is None else scale)
    qh, kh = qr[:, hmap], kr[:, hmap]                                         # [n, HV, K]
    alpha = torch.exp(g[rows].to(cd))[..., None, None]
    S = alpha * S
    u = beta[rows].to(cd)[..., None] * (v[rows].to(cd) - torch.einsum("nhvk,nhk->nhv", S, kh))
    S = S + u[..., None] * kh[:, :, None, :]
    o = torch.einsum("nhvk,nhk->nhv", S, qh)
    if layout == "kv":
        S = S.transpose(-1, -2)
    state[slots] = S.to(state.dtype)
    return o


# ----------------------------------------------------------------------------------------------
# Ring-buffer helpers
# ----------------------------------------------------------------------------------------------
def _logical_phys(cache, slots, npos):
    """Physical ring index of logical entries 0..npos-1 of each slot: [n, npos]."""
    o = cache.ring_origin[slots].to(torch.int64)
    return (o[:, None] + torch.arange(npos, device=slots.device)) % cache.ring


def _gather(buf, slots, phys):
    """buf [S, Hh, R, ...] at (slots, phys [n, J]) -> [n, J, Hh, ...]."""
    return buf[slots[:, None], :, phys]


def _scatter(buf, slots, phys, val):
    buf[slots[:, None], :, phys] = val.to(buf.dtype)


def _mask(t, valid):
    """Zero entries of t [n, J, ...] where valid [n, J] is False (garbage may be NaN)."""
    v = valid.reshape(valid.shape + (1,) * (t.dim() - 2))
    return torch.where(v, t, torch.zeros((), dtype=t.dtype, device=t.device))


# ----------------------------------------------------------------------------------------------
# Mamba-2 ReplaySSM
# ----------------------------------------------------------------------------------------------
def mamba2_fold(cache, slots, h):
    """fp32 state after folding the first ``h [n]`` buffered entries into the hi checkpoint."""
    S0 = cache.decode_hi(slots)
    R = cache.ring
    phys = _logical_phys(cache, slots, R)
    valid = torch.arange(R, device=slots.device)[None] < h[:, None]            # [n, R]
    grp = _group_of_head(cache.nheads, cache.ngroups, slots.device)
    xs = _mask(_gather(cache.x_buf, slots, phys).float(), valid)               # [n, R, H, P]
    Bs = _mask(_gather(cache.B_buf, slots, phys).float(), valid)[:, :, grp]    # [n, R, H, N]
    dts = _mask(_gather(cache.dt_buf, slots, phys), valid)                     # [n, R, H]
    lam = torch.cumsum(_mask(_gather(cache.dA_buf, slots, phys), valid), dim=1)
    tot = lam[:, -1]                                                           # [n, H]
    w = _mask(torch.exp(tot[:, None] - lam) * dts, valid)
    return torch.exp(tot)[..., None, None] * S0 + torch.einsum("nrhp,nrhd->nhpd", w[..., None] * xs, Bs)


def _flush_rows(cache, slots, h, T, fold):
    """Flush the rows with h + T > L: fold, write hi/lo, move the ring origin, empty the buffer.
    Returns (flush mask [n], fp32 folded states of the flushed rows or None)."""
    flush = (h + T) > cache.buffer_len
    fl = flush.nonzero().squeeze(1)
    if fl.numel() == 0:
        return flush, None
    fs = slots[fl]
    Snew = fold(cache, fs, h[fl])
    cache.write_state(fs, Snew, backend="torch")  # the spec encoder, also on GPU
    cache.ring_origin[fs] = ((cache.ring_origin[fs].to(torch.int64) + h[fl]) % cache.ring).to(torch.int32)
    cache.write_pos[fs] = 0
    h[fl] = 0
    return flush, Snew


def _start_state(cache, slots, flush, Snew):
    """S₀ for the outputs: the read copy, or the fresh fp32 fold on flushed rows."""
    S0 = cache.decode_read(slots)
    if Snew is not None:
        S0[flush.nonzero().squeeze(1)] = Snew
    return S0


def commit_cursors(cache, slots, h, T, commit_all):
    """After a step that appended T entries at h: decode commits all; verify leaves them pending."""
    if commit_all:
        cache.write_pos[slots] = (h + T).to(torch.int32)
        cache.pending[slots] = 0
    else:
        cache.write_pos[slots] = h.to(torch.int32)
        cache.pending[slots] = T


def mamba2_replay(cache, slots, x, dtp, A, B, C, D=None, z=None, commit_all=True):
    """ReplaySSM step for rows at ``slots [n]`` with T inputs each: x [n, T, H, P], dtp [n, T, H]
    fp32 (processed dt'), A [H], B/C [n, T, G, N], z [n, T, H, P]. Returns y [n, T, H, P] fp32."""
    n, T = x.shape[:2]
    dev = x.device
    h = cache.write_pos[slots].to(torch.int64)
    flush, Snew = _flush_rows(cache, slots, h, T, mamba2_fold)
    S0 = _start_state(cache, slots, flush, Snew)
    # append the T inputs at logical h..h+T-1
    phys_new = (cache.ring_origin[slots].to(torch.int64)[:, None] + h[:, None]
                + torch.arange(T, device=dev)) % cache.ring
    _scatter(cache.x_buf, slots, phys_new, x)
    _scatter(cache.B_buf, slots, phys_new, B)
    _scatter(cache.dt_buf, slots, phys_new, dtp)
    _scatter(cache.dA_buf, slots, phys_new, A.float()[None, None] * dtp)
    # outputs from S₀ + every entry up to the query's own position
    R = cache.ring
    phys = _logical_phys(cache, slots, R)
    pos = torch.arange(R, device=dev)
    valid = pos[None] < (h + T)[:, None]
    grp = _group_of_head(cache.nheads, cache.ngroups, dev)
    xs = _mask(_gather(cache.x_buf, slots, phys).float(), valid)               # [n, R, H, P]
    Bs = _mask(_gather(cache.B_buf, slots, phys).float(), valid)               # [n, R, G, N]
    dts = _mask(_gather(cache.dt_buf, slots, phys), valid)                     # [n, R, H]
    lam = torch.cumsum(_mask(_gather(cache.dA_buf, slots, phys), valid), dim=1)
    qpos = h[:, None] + torch.arange(T, device=dev)                            # [n, T]
    lam_q = torch.gather(lam, 1, qpos[:, :, None].expand(n, T, lam.shape[2]))  # [n, T, H]
    causal = pos[None, None, :] <= qpos[:, :, None]                            # [n, T, R]
    diff = torch.where(causal[..., None], lam_q[:, :, None] - lam[:, None], torch.zeros((), device=dev))
    w = torch.where(causal[..., None], torch.exp(diff) * dts[:, None], torch.zeros((), device=dev))
    Cf = C.float()
    cb = torch.einsum("nrgd,ntgd->ntrg", Bs, Cf)[..., grp]                     # [n, T, R, H]
    y = torch.einsum("ntrh,nrhp->nthp", w * cb, xs)
    y = y + torch.exp(lam_q)[..., None] * torch.einsum("nhpd,nthd->nthp", S0, Cf[:, :, grp])
    if D is not None:
        y = y + D.float()[None, None, :, None] * x.float()
    if z is not None:
        y = y * _silu(z.float())
    commit_cursors(cache, slots, h, T, commit_all)
    return y


# ----------------------------------------------------------------------------------------------
# GDN ReplaySSM
# ----------------------------------------------------------------------------------------------
def _gdn_ring(cache, slots, phys, valid):
    hmap = torch.arange(cache.HV, device=slots.device) // (cache.HV // cache.H)
    kn = (_gather(cache.k_buf, slots, phys).float() * _gather(cache.kinv_buf, slots, phys)[..., None])
    kn = _mask(kn, valid)[:, :, hmap]                                          # [n, R, HV, K]
    g = _mask(_gather(cache.g_buf, slots, phys), valid)                        # [n, R, HV]
    return kn, g


def gdn_fold(cache, slots, h):
    """fp32 state after folding the first ``h`` buffered entries into the hi checkpoint. Split
    pairs recompute every u from the hi checkpoint (the buffered u came from the read copy)."""
    S = cache.decode_hi(slots)
    R = cache.ring
    phys = _logical_phys(cache, slots, R)
    valid = torch.arange(R, device=slots.device)[None] < h[:, None]
    kn, g = _gdn_ring(cache, slots, phys, valid)
    if cache.pair.split:
        v = _mask(_gather(cache.v_buf, slots, phys).float(), valid)
        beta = _mask(_gather(cache.beta_buf, slots, phys), valid)
        for j in range(int(h.max()) if h.numel() else 0):
            alpha = torch.exp(g[:, j])[..., None, None]
            Sk = torch.einsum("nhvk,nhk->nhv", alpha * S, kn[:, j])
            u = beta[:, j, :, None] * (v[:, j] - Sk)
            Snext = alpha * S + u[..., None] * kn[:, j, :, None, :]
            S = torch.where(valid[:, j, None, None, None], Snext, S)
        return S
    u = _mask(_gather(cache.u_buf, slots, phys), valid)                         # [n, R, HV, V]
    G = torch.cumsum(g, dim=1)
    tot = G[:, -1]
    w = _mask(torch.exp(tot[:, None] - G), valid)
    return torch.exp(tot)[..., None, None] * S + torch.einsum("nrh,nrhv,nrhk->nhvk", w, u, kn)


def gdn_replay(cache, slots, q, k, v, g, beta, scale=None, use_qk_l2norm=True, commit_all=True):
    """GDN ReplaySSM step for rows at ``slots`` with T inputs each: q, k [n, T, H, K];
    v [n, T, HV, V]; g, beta [n, T, HV] fp32 (processed). Returns o [n, T, HV, V] fp32."""
    n, T = q.shape[:2]
    dev = q.device
    K = cache.K
    scale = K ** -0.5 if scale is None else scale
    hmap = torch.arange(cache.HV, device=dev) // (cache.HV // cache.H)
    h = cache.write_pos[slots].to(torch.int64)
    flush, Snew = _flush_rows(cache, slots, h, T, gdn_fold)
    S0 = _start_state(cache, slots, flush, Snew)
    qf, kf = q.float(), k.float()
    if use_qk_l2norm:
        qinv, kinv = l2norm_inv(qf), l2norm_inv(kf)
    else:
        qinv = kinv = torch.ones(qf.shape[:-1], device=dev)
    qn = (qf * qinv[..., None] * scale)[:, :, hmap]                            # [n, T, HV, K]
    kn_new = (kf * kinv[..., None])[:, :, hmap]
    o_pos = cache.ring_origin[slots].to(torch.int64)
    phys_new = (o_pos[:, None] + h[:, None] + torch.arange(T, device=dev)) % cache.ring
    _scatter(cache.k_buf, slots, phys_new, k)
    _scatter(cache.kinv_buf, slots, phys_new, kinv)
    _scatter(cache.g_buf, slots, phys_new, g)
    if cache.pair.split:
        _scatter(cache.v_buf, slots, phys_new, v)
        _scatter(cache.beta_buf, slots, phys_new, beta)
    R = cache.ring
    phys = _logical_phys(cache, slots, R)
    pos = torch.arange(R, device=dev)
    S0k_all = torch.einsum("nhvk,nthk->nthv", S0, kn_new)                      # [n, T, HV, V]
    S0q_all = torch.einsum("nhvk,nthk->nthv", S0, qn)
    outs = []
    for t in range(T):
        m = h + t                                                              # position of token t
        valid = pos[None] < m[:, None]                                         # entries before it
        kn, gr = _gdn_ring(cache, slots, phys, valid)
        u = _mask(_gather(cache.u_buf, slots, phys), valid)
        G = torch.cumsum(gr, dim=1)                                            # [n, R, HV]
        Gm = torch.gather(torch.cat([torch.zeros_like(G[:, :1]), G], 1), 1,
                          m[:, None, None].expand(n, 1, G.shape[2]))[:, 0]     # Λ_{m-1}
        w = _mask(torch.exp(Gm[:, None] - G), valid)                           # [n, R, HV]
        kk = torch.einsum("nrhk,nhk->nrh", kn, kn_new[:, t]) * w
        kq = torch.einsum("nrhk,nhk->nrh", kn, qn[:, t]) * w
        eG = torch.exp(Gm)[..., None]
        Sk = eG * S0k_all[:, t] + torch.einsum("nrh,nrhv->nhv", kk, u)
        Sq = eG * S0q_all[:, t] + torch.einsum("nrh,nrhv->nhv", kq, u)
        alpha = torch.exp(g[:, t].float())[..., None]
        ut = beta[:, t].float()[..., None] * (v[:, t].float() - alpha * Sk)
        o = alpha * Sq + (kn_new[:, t] * qn[:, t]).sum(-1)[..., None] * ut
        _scatter(cache.u_buf, slots, phys_new[:, t:t + 1], ut[:, None])
        outs.append(o)
    commit_cursors(cache, slots, h, T, commit_all)
    return torch.stack(outs, dim=1)
