"""Functional API with the names serving engines use (vLLM / FlashInfer / FLA conventions).

Every op validates all arguments before doing any work, then dispatches: ``backend="torch"`` runs the
reference (:mod:`replayssm_lp.reference`) on any device, ``"cute"`` the CuTe DSL kernels, ``"auto"``
picks cute on sm_90+ CUDA tensors when a kernel for the op and configuration exists, else torch.

Rows whose ``state_batch_indices`` entry equals ``pad_slot_id`` are skipped: their ``out`` rows and
every cache slot they would address are left untouched. ``state_batch_indices=None`` maps row i to
slot i.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _validate as V
from . import reference as ref
from .backends import resolve
from .cache import GDNReplayCache, Mamba2ReplayCache, ReplayCache

__all__ = ["mamba2_decode", "mamba2_verify", "gdn_decode", "gdn_verify", "commit",
           "mamba2_standard_decode", "gdn_standard_decode"]

_ACT = (torch.float32, torch.float16, torch.bfloat16)
_FLOAT = _ACT


def _compiling(eager: bool) -> bool:
    """Inside torch.compile, go through the registered custom ops (see replayssm_lp.library)."""
    return not eager and torch.compiler.is_compiling()


def _rows_and_slots(sbi, batch, pad_slot_id, device):
    """(valid row indices, their slots) as int64 — torch backend only (may synchronise)."""
    if sbi is None:
        r = torch.arange(batch, device=device)
        return r, r
    rows = (sbi != pad_slot_id).nonzero().squeeze(1)
    return rows, sbi[rows].to(torch.int64)


def _out(name, out, shape, dtype, device):
    if out is None:
        return torch.zeros(shape, dtype=dtype, device=device)
    V.tensor(name, out, shape, (dtype,), device)
    return out


# ----------------------------------------------------------------------------------------------
# Mamba-2
# ----------------------------------------------------------------------------------------------
def _mamba2_check(cache, x, dt, A, B, C, D, z, dt_bias, sbi, pad_slot_id, out, backend, T):
    if not isinstance(cache, Mamba2ReplayCache):
        raise TypeError(f"cache must be a Mamba2ReplayCache, got {type(cache).__name__}")
    dev, act = cache.device, cache.act_dtype
    H, P, N, G = cache.nheads, cache.headdim, cache.dstate, cache.ngroups
    lead = (None,) if T is None else (None, T)
    V.tensor("x", x, lead + (H, P), (act,), dev)
    b = x.shape[0]
    lead = (b,) if T is None else (b, T)
    if dt is not None and dt.dim() == len(lead) + 2:   # vLLM's tied [.., H, P] view
        if dt.stride(-1) != 0:
            raise ValueError("dt given as [..., nheads, headdim] must have stride 0 on headdim")
        dt = dt[..., 0]
    V.tensor("dt", dt, lead + (H,), _FLOAT, dev)
    A = V.per_head("A", A, H, dev)
    V.tensor("B", B, lead + (G, N), (act,), dev)
    V.tensor("C", C, lead + (G, N), (act,), dev)
    D = V.per_head("D", D, H, dev, optional=True)
    dt_bias = V.per_head("dt_bias", dt_bias, H, dev, optional=True)
    V.tensor("z", z, lead + (H, P), (act,), dev, optional=True)
    V.pad_slot(pad_slot_id)
    V.indices("state_batch_indices", sbi, b, dev, cache.num_slots, pad_slot_id)
    out = _out("out", out, lead + (H, P), act, dev)
    V.backend(backend)
    if T is not None and not (1 <= T <= max(cache.max_draft, 1)):
        raise ValueError(f"x has T={T} draft tokens but the cache holds at most max_draft="
                         f"{cache.max_draft}")
    return dt, A, D, dt_bias, out


def _lib_mamba2(cache, verify, x, dt, A, B, C, D, z, dt_bias, dt_softplus, sbi, pad_slot_id, out,
                backend):
    from .library import cache_tensors
    if out is None:
        out = torch.zeros(x.shape, dtype=cache.act_dtype, device=cache.device)
    torch.ops.replayssm.mamba2_step(cache.handle, verify, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                                    sbi, pad_slot_id, out, cache_tensors(cache), backend)
    return out


def _mamba2_step(op, cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus, sbi, pad_slot_id, out,
                 backend, T):
    dt, A, D, dt_bias, out = _mamba2_check(cache, x, dt, A, B, C, D, z, dt_bias, sbi, pad_slot_id,
                                           out, backend, T)
    impl = resolve(backend, op, cache)
    if impl is not None:
        return impl(cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus, sbi, pad_slot_id, out)
    unsq = (lambda t: t if t is None else t.unsqueeze(1)) if T is None else (lambda t: t)
    xs, dts, Bs, Cs, zs = map(unsq, (x, dt, B, C, z))
    rows, slots = _rows_and_slots(sbi, x.shape[0], pad_slot_id, x.device)
    dtp = ref.mamba2_process_dt(dts[rows], dt_bias, dt_softplus)
    y = ref.mamba2_replay(cache, slots, xs[rows], dtp, A, Bs[rows], Cs[rows], D,
                          None if zs is None else zs[rows], commit_all=(T is None))
    out[rows] = (y[:, 0] if T is None else y).to(out.dtype)
    return out


def mamba2_decode(cache: Mamba2ReplayCache, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                  dt_softplus=True, state_batch_indices=None, pad_slot_id=-1, out=None,
                  backend="auto", _eager=False):
    """One decode token per row. x, z, out [batch, nheads, headdim]; dt [batch, nheads];
    A, D, dt_bias [nheads] fp32; B, C [batch, ngroups, dstate]. Non-flush rows read the read copy
    and write only ``out`` and their buffer entry; rows whose buffer is full flush first."""
    if _compiling(_eager):
        return _lib_mamba2(cache, False, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                           state_batch_indices, pad_slot_id, out, backend)
    return _mamba2_step("mamba2_decode", cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                        state_batch_indices, pad_slot_id, out, backend, None)


def mamba2_verify(cache: Mamba2ReplayCache, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                  dt_softplus=True, state_batch_indices=None, pad_slot_id=-1, out=None,
                  backend="auto", _eager=False):
    """Speculative verify of T inputs per row: x [batch, T, nheads, headdim], dt [batch, T, nheads],
    B, C [batch, T, ngroups, dstate]. Outputs of all T by output-only evaluation; the inputs stay
    pending in the ring until :func:`commit` keeps the accepted prefix."""
    if _compiling(_eager):
        return _lib_mamba2(cache, True, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                           state_batch_indices, pad_slot_id, out, backend)
    T = x.shape[1] if isinstance(x, torch.Tensor) and x.dim() == 4 else -1
    if T < 1:
        raise ValueError(f"x must have shape [batch, T, nheads, headdim] with T >= 1, got "
                         f"{list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    return _mamba2_step("mamba2_verify", cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                        state_batch_indices, pad_slot_id, out, backend, T)


# ----------------------------------------------------------------------------------------------
# GDN
# ----------------------------------------------------------------------------------------------
def _gdn_inputs(cache_or_dims, q, k, v, g, beta, A_log, a, dt_bias, b, dev, act, T):
    H, HV, K, Vd = cache_or_dims
    lead = (None,) if T is None else (None, T)
    V.tensor("q", q, lead + (H, K), (act,), dev)
    bsz = q.shape[0]
    lead = (bsz,) if T is None else (bsz, T)
    V.tensor("k", k, lead + (H, K), (act,), dev)
    V.tensor("v", v, lead + (HV, Vd), (act,), dev)
    if g is not None:
        if A_log is not None or a is not None:
            raise ValueError("give either g (log decay) or the raw gate inputs A_log, a, dt_bias, not both")
        V.tensor("g", g, lead + (HV,), _FLOAT, dev)
    else:
        if A_log is None or a is None:
            raise ValueError("g is None: the raw gate inputs A_log [HV] and a [batch, HV] are required")
        V.tensor("A_log", A_log, (HV,), _FLOAT, dev)
        V.tensor("a", a, lead + (HV,), _FLOAT, dev)
        V.tensor("dt_bias", dt_bias, (HV,), _FLOAT, dev, optional=True)
    if beta is not None:
        if b is not None:
            raise ValueError("give either beta or the raw b, not both")
        V.tensor("beta", beta, lead + (HV,), _FLOAT, dev)
    else:
        V.tensor("b", b, lead + (HV,), _FLOAT, dev)
    return bsz, lead


def _lib_gdn(cache, verify, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_l2, sbi, pad_slot_id,
             out, backend):
    from .library import cache_tensors
    if out is None:
        out = torch.zeros(v.shape, dtype=cache.act_dtype, device=cache.device)
    torch.ops.replayssm.gdn_step(cache.handle, verify, q, k, v, g, beta, A_log, a, dt_bias, b, scale,
                                 use_l2, sbi, pad_slot_id, out, cache_tensors(cache), backend)
    return out


def _gdn_step(op, cache, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_qk_l2norm_in_kernel,
              sbi, pad_slot_id, out, backend, T):
    if not isinstance(cache, GDNReplayCache):
        raise TypeError(f"cache must be a GDNReplayCache, got {type(cache).__name__}")
    dev, act = cache.device, cache.act_dtype
    bsz, lead = _gdn_inputs((cache.H, cache.HV, cache.K, cache.V), q, k, v, g, beta, A_log, a,
                            dt_bias, b, dev, act, T)
    if scale is not None and not isinstance(scale, (int, float)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    V.pad_slot(pad_slot_id)
    V.indices("state_batch_indices", sbi, bsz, dev, cache.num_slots, pad_slot_id)
    out = _out("out", out, lead + (cache.HV, cache.V), act, dev)
    V.backend(backend)
    if T is not None and not (1 <= T <= max(cache.max_draft, 1)):
        raise ValueError(f"q has T={T} draft tokens but the cache holds at most max_draft="
                         f"{cache.max_draft}")
    impl = resolve(backend, op, cache)
    if impl is not None:
        return impl(cache, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_qk_l2norm_in_kernel,
                    sbi, pad_slot_id, out)
    unsq = (lambda t: t if t is None else t.unsqueeze(1)) if T is None else (lambda t: t)
    q, k, v, g, beta, a, b = map(unsq, (q, k, v, g, beta, a, b))
    rows, slots = _rows_and_slots(sbi, bsz, pad_slot_id, dev)
    sel = lambda t: None if t is None else t[rows]  # noqa: E731
    gg, bb = ref.gdn_gates(sel(g), sel(beta), A_log, sel(a), dt_bias, sel(b))
    o = ref.gdn_replay(cache, slots, q[rows], k[rows], v[rows], gg, bb, scale,
                       use_qk_l2norm_in_kernel, commit_all=(T is None))
    out[rows] = (o[:, 0] if T is None else o).to(out.dtype)
    return out


def gdn_decode(cache: GDNReplayCache, q, k, v, g=None, beta=None, *, A_log=None, a=None,
               dt_bias=None, b=None, scale=None, use_qk_l2norm_in_kernel=True,
               state_batch_indices=None, pad_slot_id=-1, out=None, backend="auto", _eager=False):
    """One GDN decode token per row: q, k [batch, H, K]; v [batch, HV, V]; either g, beta
    [batch, HV] or raw A_log [HV], a [batch, HV], dt_bias [HV], b [batch, HV]. Returns o [batch, HV, V]."""
    if _compiling(_eager):
        return _lib_gdn(cache, False, q, k, v, g, beta, A_log, a, dt_bias, b, scale,
                        use_qk_l2norm_in_kernel, state_batch_indices, pad_slot_id, out, backend)
    return _gdn_step("gdn_decode", cache, q, k, v, g, beta, A_log, a, dt_bias, b, scale,
                     use_qk_l2norm_in_kernel, state_batch_indices, pad_slot_id, out, backend, None)


def gdn_verify(cache: GDNReplayCache, q, k, v, g=None, beta=None, *, A_log=None, a=None,
               dt_bias=None, b=None, scale=None, use_qk_l2norm_in_kernel=True,
               state_batch_indices=None, pad_slot_id=-1, out=None, backend="auto", _eager=False):
    """Speculative verify of T GDN inputs per row ([batch, T, ...] inputs); see :func:`commit`."""
    if _compiling(_eager):
        return _lib_gdn(cache, True, q, k, v, g, beta, A_log, a, dt_bias, b, scale,
                        use_qk_l2norm_in_kernel, state_batch_indices, pad_slot_id, out, backend)
    T = q.shape[1] if isinstance(q, torch.Tensor) and q.dim() == 4 else -1
    if T < 1:
        raise ValueError(f"q must have shape [batch, T, H, K] with T >= 1, got "
                         f"{list(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__}")
    return _gdn_step("gdn_verify", cache, q, k, v, g, beta, A_log, a, dt_bias, b, scale,
                     use_qk_l2norm_in_kernel, state_batch_indices, pad_slot_id, out, backend, T)


# ----------------------------------------------------------------------------------------------
# Commit (pointer move)
# ----------------------------------------------------------------------------------------------
def commit(cache: ReplayCache, num_accepted_tokens, state_batch_indices=None, pad_slot_id=-1,
           backend="auto", _eager=False):
    """Keep the first ``num_accepted_tokens[i]`` (int32 [batch], 0..T) of the inputs the last verify
    appended for row i: ``write_pos += n``. Rejected entries are simply overwritten later. Values
    outside [0, pending] are clamped on the device (checked and refused for CPU tensors)."""
    if _compiling(_eager):
        from .library import cache_tensors
        torch.ops.replayssm.commit(cache.handle, num_accepted_tokens, state_batch_indices,
                                   pad_slot_id, cache_tensors(cache), backend)
        return None
    if not isinstance(cache, ReplayCache):
        raise TypeError(f"cache must be a Mamba2ReplayCache or GDNReplayCache, got {type(cache).__name__}")
    dev = cache.device
    if not isinstance(num_accepted_tokens, torch.Tensor) or num_accepted_tokens.dim() != 1:
        raise ValueError("num_accepted_tokens must be an int32 tensor of shape [batch]")
    bsz = num_accepted_tokens.shape[0]
    V.tensor("num_accepted_tokens", num_accepted_tokens, (bsz,), (torch.int32,), dev)
    V.pad_slot(pad_slot_id)
    V.indices("state_batch_indices", state_batch_indices, bsz, dev, cache.num_slots, pad_slot_id)
    V.backend(backend)
    if dev.type == "cpu" and bsz:
        bad = (num_accepted_tokens < 0) | (num_accepted_tokens > max(cache.max_draft, 1))
        if bool(bad.any()):
            raise ValueError(f"num_accepted_tokens must be in [0, {max(cache.max_draft, 1)}], got "
                             f"{num_accepted_tokens[bad].tolist()[:8]}")
    impl = resolve(backend, "commit", cache)
    if impl is not None:
        return impl(cache, num_accepted_tokens, state_batch_indices, pad_slot_id)
    rows, slots = _rows_and_slots(state_batch_indices, bsz, pad_slot_id, dev)
    pend = cache.pending[slots]
    n = torch.minimum(torch.clamp(num_accepted_tokens[rows], min=0), pend)
    cache.write_pos[slots] += n
    cache.pending[slots] = 0
    return None


# ----------------------------------------------------------------------------------------------
# Standard decode baselines (in place, vLLM semantics)
# ----------------------------------------------------------------------------------------------
def mamba2_standard_decode(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=True,
                           state_batch_indices=None, pad_slot_id=-1, out=None, backend="auto",
                           _eager=False):
    """Standard Mamba-2 decode (``selective_state_update``): reads and writes ``state
    [num_slots, nheads, headdim, dstate]`` (fp32/fp16/bf16) in place every step."""
    if _compiling(_eager):
        if out is None:
            out = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
        torch.ops.replayssm.mamba2_standard_decode(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                                                   state_batch_indices, pad_slot_id, out, backend)
        return out
    V.tensor("state", state, (None, None, None, None), (torch.float32, torch.float16, torch.bfloat16))
    dev = state.device
    slots_n, H, P, N = state.shape
    V.tensor("x", x, (None, H, P), _ACT, dev)
    act, bsz = x.dtype, x.shape[0]
    if dt is not None and dt.dim() == 3:
        if dt.stride(-1) != 0:
            raise ValueError("dt given as [batch, nheads, headdim] must have stride 0 on headdim")
        dt = dt[..., 0]
    V.tensor("dt", dt, (bsz, H), _FLOAT, dev)
    A = V.per_head("A", A, H, dev)
    V.tensor("B", B, (bsz, None, N), (act,), dev)
    G = B.shape[1]
    if G < 1 or H % G:
        raise ValueError(f"B's ngroups ({G}) must divide nheads ({H})")
    V.tensor("C", C, (bsz, G, N), (act,), dev)
    D = V.per_head("D", D, H, dev, optional=True)
    dt_bias = V.per_head("dt_bias", dt_bias, H, dev, optional=True)
    V.tensor("z", z, (bsz, H, P), (act,), dev, optional=True)
    V.pad_slot(pad_slot_id)
    V.indices("state_batch_indices", state_batch_indices, bsz, dev, slots_n, pad_slot_id)
    out = _out("out", out, (bsz, H, P), act, dev)
    V.backend(backend)
    impl = resolve(backend, "mamba2_standard_decode", state)
    if impl is not None:
        return impl(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices,
                    pad_slot_id, out)
    rows, slots = _rows_and_slots(state_batch_indices, bsz, pad_slot_id, dev)
    y = ref.mamba2_standard_step(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, rows, slots)
    out[rows] = y.to(out.dtype)
    return out


def gdn_standard_decode(state, q, k, v, g=None, beta=None, *, A_log=None, a=None, dt_bias=None,
                        b=None, scale=None, use_qk_l2norm_in_kernel=True, state_batch_indices=None,
                        pad_slot_id=-1, out=None, state_layout="vk", backend="auto", _eager=False):
    """Standard GDN decode, in place on ``state [num_slots, HV, V, K]`` (``state_layout="vk"``) or
    ``[num_slots, HV, K, V]`` (``"kv"``, FLA / vLLM Triton layout); fp32/fp16/bf16 state."""
    if _compiling(_eager):
        if out is None:
            out = torch.zeros(v.shape, dtype=v.dtype, device=v.device)
        torch.ops.replayssm.gdn_standard_decode(state, q, k, v, g, beta, A_log, a, dt_bias, b, scale,
                                                use_qk_l2norm_in_kernel, state_batch_indices,
                                                pad_slot_id, out, state_layout, backend)
        return out
    V.tensor("state", state, (None, None, None, None), (torch.float32, torch.float16, torch.bfloat16))
    if state_layout not in ("vk", "kv"):
        raise ValueError(f"state_layout must be 'vk' or 'kv', got {state_layout!r}")
    dev = state.device
    slots_n, HV = state.shape[:2]
    Vd, K = state.shape[2:] if state_layout == "vk" else state.shape[2:][::-1]
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        raise ValueError("q must be a tensor of shape [batch, H, K]")
    H = q.shape[1]
    if H < 1 or HV % H:
        raise ValueError(f"q's head count ({H}) must divide the state's value heads ({HV})")
    act = q.dtype
    if act not in _ACT:
        raise TypeError(f"q must be float32/float16/bfloat16, got {act}")
    bsz, _ = _gdn_inputs((H, HV, K, Vd), q, k, v, g, beta, A_log, a, dt_bias, b, dev, act, None)
    V.pad_slot(pad_slot_id)
    V.indices("state_batch_indices", state_batch_indices, bsz, dev, slots_n, pad_slot_id)
    out = _out("out", out, (bsz, HV, Vd), act, dev)
    V.backend(backend)
    impl = resolve(backend, "gdn_standard_decode", state)
    if impl is not None:
        return impl(state, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_qk_l2norm_in_kernel,
                    state_batch_indices, pad_slot_id, out, state_layout)
    rows, slots = _rows_and_slots(state_batch_indices, bsz, pad_slot_id, dev)
    sel = lambda t: None if t is None else t[rows]  # noqa: E731
    gg, bb = ref.gdn_gates(sel(g), sel(beta), A_log, sel(a), dt_bias, sel(b))
    gfull = torch.zeros(bsz, HV, device=dev); bfull = torch.zeros(bsz, HV, device=dev)
    gfull[rows], bfull[rows] = gg, bb
    o = ref.gdn_standard_step(state, q, k, v, gfull, bfull, scale, use_qk_l2norm_in_kernel, rows,
                              slots, state_layout)
    out[rows] = o.to(out.dtype)
    return out
