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
from ._validate import env_is_one, env_reader, plan_entry
from .backends import resolve
from .cache import GDNReplayCache, Mamba2ReplayCache, ReplayCache

__all__ = ["mamba2_decode", "mamba2_verify", "gdn_decode", "gdn_verify", "commit",
           "mamba2_standard_decode", "gdn_standard_decode", "prepare_mamba2_decode",
           "prepare_gdn_decode"]

_ACT = (torch.float32, torch.float16, torch.bfloat16)
_FLOAT = _ACT


def _rows_and_slots(sbi, batch, pad_slot_id, device, num_slots):
    """(valid row indices, their slots) as int64 — torch backend only (may synchronise). Pad
    rows: ``pad_slot_id`` or a slot outside ``[0, num_slots)`` (as the kernels; on CPU tensors
    the latter is an error already)."""
    if sbi is None:
        r = torch.arange(batch, device=device)
        return r, r
    rows = ((sbi != pad_slot_id) & (sbi >= 0) & (sbi < num_slots)).nonzero().squeeze(1)
    return rows, sbi[rows].to(torch.int64)


# ----------------------------------------------------------------------------------------------
# Fast path (host overhead per eager call; ``python -m bench.host_overhead`` measures it). Each
# public op first tries a cheap *accept* check: one pass over the arguments' class / dtype /
# shape / device / contiguity against facts memoised per cache (the cache's plan,
# :func:`replayssm_lp._validate.cache_plan`) or per state layout. Accepted calls go straight to
# the kernel: the launch for the call's signature (compiled function, views of the stored
# copies, the launch heuristics' choices: ``make_launch`` of the kernel module) is memoised in
# the plan, keyed by what the signature is made of and by the raw values of the environment
# variables the launch decisions read (re-read on every call, ~25 ns each: switches still take
# effect at the next call). Accepted too, as the general path takes them: vLLM's tied views (dt
# ``[.., H, P]`` and per-head ``[H, ...]`` with stride-0 trailing dims: their ``[.., H]`` /
# ``[H]`` views are launched) and ``out=None`` (zeros allocated, as the general path does).
# Anything the check does not positively accept -- a mismatch, an unusual but valid form
# (non-contiguous inputs, other dtypes), the torch backend, ``REPLAYSSM_FORCE_TORCH=1`` with
# ``backend="auto"`` -- goes through the general path below, which validates everything as
# before and raises the documented errors. No tensor op, no ``.item()``, no allocation (given
# ``out``): CUDA-graph capturable once every call signature has been warmed up.
# ----------------------------------------------------------------------------------------------
_T = torch.Tensor
_F32, _I32 = torch.float32, torch.int32
_MISS = object()
#: (op, backend, state dtype/shape/contiguity/device) -> [make_launch, env reader, launches] or
#: None (no CuTe kernel: the general path)
_STD_MEMO = V.STD_MEMO
_FORCE = "REPLAYSSM_FORCE_TORCH"
_force_env = env_reader((_FORCE,))
_is_compiling = torch.compiler.is_compiling   # the same function object: torch.compile folds it


def _compiling(eager: bool) -> bool:
    """Inside torch.compile, go through the registered custom ops (see replayssm_lp.library)."""
    return not eager and _is_compiling()


def _fast_impl(op, target):
    """``(make_launch, env_names)`` of the CuTe implementation of ``op`` for ``target`` (see
    :func:`replayssm_lp.cute_ops._fast`), or None: no CuTe kernel (unavailable device, declined
    configuration, no launcher) -- the general path then decides (torch, or the error of
    ``backend="cute"``). ``REPLAYSSM_FORCE_TORCH`` is not consulted here: the fast path reads it
    per call (so the memoised decision does not depend on it)."""
    try:
        impl = resolve("cute", op, target)
    except Exception:  # noqa: BLE001  (the general path raises it with its message)
        return None
    fast = getattr(impl, "fast", None)
    return None if fast is None else fast()


def _envs(names):
    """A reader of ``REPLAYSSM_FORCE_TORCH`` (first) and a launcher's environment variables."""
    return env_reader((_FORCE,) + tuple(names))


def _fast_call(pad_slot_id, backend) -> bool:
    """A negative int ``pad_slot_id`` and a backend that may be CuTe (the fast path's premise)."""
    return (pad_slot_id.__class__ is int and pad_slot_id < 0
            and (backend == "cute" or backend == "auto"))


def _forced_torch(fp, backend) -> bool:
    """``backend="auto"`` and ``REPLAYSSM_FORCE_TORCH=1`` (``fp[0]``: its raw value)."""
    return fp[0] is not None and backend == "auto" and env_is_one(fp[0])


def _ok(t, shape, dtype, dev):
    """``t`` is a tensor of exactly ``shape`` and ``dtype`` on ``dev``, contiguous."""
    return (isinstance(t, _T) and t.shape == shape and t.dtype is dtype and t.device == dev
            and t.is_contiguous())


def _ok_gate(t, shape, dev):
    """A float tensor (fp32/fp16/bf16) of exactly ``shape`` on ``dev``, contiguous."""
    return (isinstance(t, _T) and t.shape == shape and t.dtype in _FLOAT and t.device == dev
            and t.is_contiguous())


def _gate_dt(t, shape, dev):
    """``t.dtype`` when ``t`` is as :func:`_ok_gate` accepts, else None."""
    if isinstance(t, _T) and t.shape == shape and t.device == dev and t.is_contiguous():
        d = t.dtype
        if d in _FLOAT:
            return d
    return None


def _ok_rows(sbi, b, nslots, dev, out=None, shape=None, dtype=None) -> bool:
    """state_batch_indices None (row i -> slot i, b <= nslots) or int32 [b] on ``dev``, and
    ``out`` (when given) as :func:`_ok`, contiguous."""
    if sbi is None:
        if b > nslots:
            return False
    elif not (isinstance(sbi, _T) and sbi.shape == (b,) and sbi.dtype is _I32
              and sbi.device == dev and sbi.is_contiguous()):
        return False
    return out is None or (isinstance(out, _T) and out.shape == shape and out.dtype is dtype
                           and out.device == dev and out.is_contiguous())


def _m2_entry(cache, op, backend):
    f = _fast_impl(op, cache)
    if f is None:
        return None
    H, P, N, G = cache.nheads, cache.headdim, cache.dstate, cache.ngroups
    return (f[0], _envs(f[1]), H, P, (H,), G, N, cache.act_dtype, cache.device, cache.num_slots,
            max(cache.max_draft, 1), {})


def _mamba2_fast(op, cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus, sbi, pad_slot_id, out,
                 backend, verify, params_checked=False):
    """Fast accept for mamba2_decode / mamba2_verify: launches and returns ``out``, or returns
    ``_MISS`` (nothing done) for the general path. ``params_checked``: A, D, dt_bias were
    accepted already (a prepared step's bound tensors). The checks are those of
    :func:`_gate_dt` (inlined for dt), :func:`_ok` and :func:`_ok_rows` (the per-call cost is
    ~0.3 µs per tensor of attribute reads plus ~60 ns per Python call)."""
    if (not isinstance(cache, Mamba2ReplayCache)
            or pad_slot_id.__class__ is not int or pad_slot_id >= 0
            or dt_softplus.__class__ is not bool
            or not (backend == "cute" or backend == "auto")):
        return _MISS
    ent = plan_entry(cache, (op, backend), _m2_entry)[1]
    if ent is None:
        return _MISS
    make, env, H, P, hs, G, N, act, dev, nslots, tmax, launches = ent
    fp = env()
    if fp[0] is not None and _forced_torch(fp, backend):
        return _MISS
    # x: [b, H, P] (decode) or [b, T, H, P] with 1 <= T <= max(max_draft, 1) (verify)
    lead = _lead_of(x, act, dev, H, P, verify, tmax)
    if lead is None:
        return _MISS
    xs = x.shape
    b = lead[0]
    # dt: a float tensor [*lead, H] (or vLLM's tied [*lead, H, P] view: its [*lead, H] view)
    dts = lead + (H,)
    if not (isinstance(dt, _T) and dt.shape == dts and dt.device == dev and dt.is_contiguous()):
        dt = _tied_dt(dt, dts, P)
        if dt is None or not (dt.device == dev and dt.is_contiguous()):
            return _MISS
    dtd = dt.dtype
    if dtd not in _FLOAT:
        return _MISS
    if not (params_checked or _m2_params_fast(A, D, dt_bias, hs, dev)):
        r = _tied_params(A, D, dt_bias, hs, dev)     # vLLM's expanded per-head views
        if r is None:
            return _MISS
        A, D, dt_bias = r
    # B, C: act [*lead, G, N]; z (optional), out (optional: zeros): act like x; indices: None
    # or int32 [b]
    gn = lead + (G, N)
    if not (_ok(B, gn, act, dev) and _ok(C, gn, act, dev)
            and (z is None or _ok(z, xs, act, dev)) and _ok_rows(sbi, b, nslots, dev, out, xs, act)):
        return _MISS
    if out is None:                                   # as the general path: zeros (pad rows)
        out = torch.zeros(xs, dtype=act, device=dev)
    if not b:
        return out
    key = (lead, dtd, D is None, z is None, dt_bias is None, dt_softplus, sbi is None, fp)
    launch = launches.get(key)
    if launch is None:
        launch = launches[key] = make(cache, x, dt, B, D, z, dt_bias, dt_softplus, sbi)
    launch(cache, x, dt, A, B, C, D, z, dt_bias, sbi, out, pad_slot_id)
    return out


def _m2_params_fast(A, D, dt_bias, hs, dev) -> bool:
    """Per-head A (required), D, dt_bias (optional): fp32 [H] on ``dev``, contiguous."""
    return (isinstance(A, _T) and A.shape == hs and A.dtype is _F32 and A.device == dev
            and A.is_contiguous()
            and (D is None or (isinstance(D, _T) and D.shape == hs and D.dtype is _F32
                               and D.device == dev and D.is_contiguous()))
            and (dt_bias is None or (isinstance(dt_bias, _T) and dt_bias.shape == hs
                                     and dt_bias.dtype is _F32 and dt_bias.device == dev
                                     and dt_bias.is_contiguous())))


def _untie(t, shape, k):
    """``t[..., 0, ..., 0]`` (the last ``k`` dims, of stride 0, indexed at 0): the expanded
    tensor's contiguous base itself when it is exactly that (same dtype, shape, start and
    strides: ~0.2 µs), else a new view (~1.5 µs); either is the general path's view, element for
    element and address for address."""
    b = t._base
    if (b is not None and b.dtype is t.dtype and b.shape == shape and b.is_contiguous()
            and t.stride()[:-k] == b.stride() and b.data_ptr() == t.data_ptr()):
        return b
    return t[(Ellipsis,) + (0,) * k]


def _tied_dt(dt, dts, P):
    """vLLM's tied dt ``[*lead, H, P]`` (stride 0 on the last dim): its ``[*lead, H]`` view (as
    the general path takes it); None otherwise (the general path decides, or raises)."""
    if (isinstance(dt, _T) and dt.dim() == len(dts) + 1 and dt.shape[-1] == P
            and dt.stride(-1) == 0 and dt.shape[:-1] == dts):
        return _untie(dt, dts, 1)
    return None


def _per_head_view(t, hs, dev):
    """A per-head parameter as :func:`replayssm_lp._validate.per_head` takes it -- ``[H]``, or
    ``[H, ...]`` with stride-0 trailing dims (vLLM) -- when it is fp32 on ``dev`` with a
    contiguous ``[H]`` view: that view; else None (the general path decides)."""
    if not (isinstance(t, _T) and t.dtype is _F32 and t.device == dev):
        return None
    n = t.dim()
    if n < 1 or t.shape[0] != hs[0] or any(t.stride()[1:]):
        return None
    v = _untie(t, hs, n - 1) if n > 1 else t
    return v if v.is_contiguous() else None


def _tied_params(A, D, dt_bias, hs, dev):
    """(A, D, dt_bias) as ``[H]`` tensors through :func:`_per_head_view` (the slow form of
    :func:`_m2_params_fast`: vLLM's expanded views); None when one is not accepted."""
    A = _per_head_view(A, hs, dev)
    if A is None:
        return None
    if D is not None:
        D = _per_head_view(D, hs, dev)
        if D is None:
            return None
    if dt_bias is not None:
        dt_bias = _per_head_view(dt_bias, hs, dev)
        if dt_bias is None:
            return None
    return A, D, dt_bias


def _gdn_entry(cache, op, backend):
    f = _fast_impl(op, cache)
    if f is None:
        return None
    H, HV = cache.H, cache.HV
    return (f[0], _envs(f[1]), H, cache.K, HV, cache.V, (HV,), cache.act_dtype, cache.device,
            cache.num_slots, max(cache.max_draft, 1), cache.K ** -0.5, {})


def _gdn_gates_fast(g, beta, A_log, a, dt_bias, b, bhv, hv, dev, raw_checked=False):
    """The gate arguments in one of the accepted forms (exactly the general path's rules): their
    dtypes as the kernel sees them (g, beta, A_log, a, dt_bias, b; the raw gates' None where g /
    beta are given), else None. ``raw_checked``: A_log, dt_bias were accepted already (a
    prepared step's bound tensors)."""
    if g is not None:
        if A_log is not None or a is not None or dt_bias is not None:
            return None                  # (the general path refuses g with any raw gate input)
        gd = _gate_dt(g, bhv, dev)
        if gd is None:
            return None
        ld = ad = dd = None
    else:
        if A_log is None or a is None:
            return None
        gd = None
        if raw_checked:
            ld, dd = A_log.dtype, None if dt_bias is None else dt_bias.dtype
        else:
            ld = _gate_dt(A_log, hv, dev)
            dd = None if dt_bias is None else _gate_dt(dt_bias, hv, dev)
            if ld is None or (dd is None and dt_bias is not None):
                return None
        ad = _gate_dt(a, bhv, dev)
        if ad is None:
            return None
    if beta is not None:
        if b is not None:
            return None
        bd, xd = _gate_dt(beta, bhv, dev), None
        if bd is None:
            return None
    else:
        bd, xd = None, _gate_dt(b, bhv, dev)
        if xd is None:
            return None
    return gd, bd, ld, ad, dd, xd


def _lead_of(t, act, dev, d1: int, d2: int, verify: bool, tmax: int):
    """The leading dims of a fast-path activation: ``(b,)`` for a decode ``[b, d1, d2]``, ``(b, T)``
    for a verify ``[b, T, d1, d2]`` with 1 <= T <= tmax; None when ``t`` is anything else (wrong
    dtype / device / layout: the general path then validates and explains)."""
    if not (isinstance(t, _T) and t.dtype is act and t.device == dev and t.is_contiguous()):
        return None
    s = t.shape
    if verify:
        if len(s) != 4 or s[2] != d1 or s[3] != d2 or not 1 <= s[1] <= tmax:
            return None
        return (s[0], s[1])
    if len(s) != 3 or s[1] != d1 or s[2] != d2:
        return None
    return (s[0],)


def _gdn_fast(op, cache, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_l2, sbi, pad_slot_id,
              out, backend, verify, raw_checked=False):
    """Fast accept for gdn_decode / gdn_verify (see :func:`_mamba2_fast`; the tensor checks
    through :func:`_ok` / :func:`_ok_rows`). ``raw_checked``: see :func:`_gdn_gates_fast`."""
    if (not isinstance(cache, GDNReplayCache)
            or pad_slot_id.__class__ is not int or pad_slot_id >= 0
            or use_l2.__class__ is not bool
            or not (backend == "cute" or backend == "auto")
            or not V.scale_ok(scale)):
        return _MISS
    ent = plan_entry(cache, (op, backend), _gdn_entry)[1]
    if ent is None:
        return _MISS
    make, env, H, K, HV, Vd, hv, act, dev, nslots, tmax, dscale, launches = ent
    fp = env()
    if fp[0] is not None and _forced_torch(fp, backend):
        return _MISS
    # q, k: act [*lead, H, K] (lead: (b,) decode, (b, T) verify); v, out: act [*lead, HV, V]
    lead = _lead_of(q, act, dev, H, K, verify, tmax)
    if lead is None:
        return _MISS
    qs = q.shape
    b0 = lead[0]
    vs = lead + (HV, Vd)
    if not (_ok(k, qs, act, dev) and _ok(v, vs, act, dev)
            and _ok_rows(sbi, b0, nslots, dev, out, vs, act)):
        return _MISS
    gd = _gdn_gates_fast(g, beta, A_log, a, dt_bias, b, lead + (HV,), hv, dev, raw_checked)
    if gd is None:
        return _MISS
    if out is None:                                   # as the general path: zeros (pad rows)
        out = torch.zeros(vs, dtype=act, device=dev)
    if not b0:
        return out
    key = (lead, gd, use_l2, sbi is None, fp)
    launch = launches.get(key)
    if launch is None:
        launch = launches[key] = make(cache, q, v, gd, use_l2, sbi)
    launch(cache, q, k, v, g, beta, A_log, a, dt_bias, b, sbi, out,
           dscale if scale is None else scale, pad_slot_id)
    return out


def _std_entry(op, backend, state):
    """[make_launch, env reader, launches] for (op, backend) on ``state``'s dtype / shape /
    contiguity / device, or None (no CuTe kernel); memoised in :data:`_STD_MEMO`."""
    key = (op, backend, state.dtype, state.shape, state.is_contiguous(), state.device)
    ent = _STD_MEMO.get(key, _MISS)
    if ent is _MISS:
        f = _fast_impl(op, state) if state.dtype in _ACT else None
        ent = None if f is None else (f[0], _envs(f[1]), {})
        if len(_STD_MEMO) > 4096:
            _STD_MEMO.clear()
        _STD_MEMO[key] = ent
    return ent


def _std_launch_entry(op, backend, state):
    """``(make, launches, env fingerprint)`` of a standard-decode fast path, or None (no CuTe entry
    for this state, or ``REPLAYSSM_FORCE_TORCH`` with ``backend="auto"``)."""
    ent = _std_entry(op, backend, state)
    if ent is None:
        return None
    make, env, launches = ent
    fp = env()
    if fp[0] is not None and _forced_torch(fp, backend):
        return None
    return make, launches, fp


def _m2_standard_fast(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, sbi, pad_slot_id, out,
                      backend):
    """Fast accept for mamba2_standard_decode (see :func:`_mamba2_fast`)."""
    if (not isinstance(state, _T) or dt_softplus.__class__ is not bool
            or not _fast_call(pad_slot_id, backend)):
        return _MISS
    ent = _std_launch_entry("mamba2_standard_decode", backend, state)
    if ent is None:
        return _MISS
    make, launches, fp = ent
    ss = state.shape
    if len(ss) != 4:
        return _MISS
    nslots, H, P, N = ss
    dev = state.device
    if not (isinstance(x, _T) and x.device == dev and x.is_contiguous()):
        return _MISS
    act, xs = x.dtype, x.shape
    if act not in _ACT or len(xs) != 3 or xs[1] != H or xs[2] != P:
        return _MISS
    b = xs[0]
    if not (isinstance(B, _T) and B.dtype is act and B.device == dev and B.is_contiguous()):
        return _MISS
    bs = B.shape
    if len(bs) != 3 or bs[0] != b or bs[2] != N or bs[1] < 1 or H % bs[1]:
        return _MISS
    dtd = _gate_dt(dt, (b, H), dev)
    if dtd is None:
        dt = _tied_dt(dt, (b, H), P)                  # vLLM's tied [b, H, P] view
        dtd = None if dt is None else _gate_dt(dt, (b, H), dev)
        if dtd is None:
            return _MISS
    if not _m2_params_fast(A, D, dt_bias, (H,), dev):
        r = _tied_params(A, D, dt_bias, (H,), dev)   # vLLM's expanded per-head views
        if r is None:
            return _MISS
        A, D, dt_bias = r
    if not (_ok(C, bs, act, dev) and (z is None or _ok(z, xs, act, dev))
            and _ok_rows(sbi, b, nslots, dev, out, xs, act)):
        return _MISS
    if out is None:                                   # as the general path: zeros
        out = torch.zeros(xs, dtype=act, device=dev)
    if not b:
        return out
    key = (b, act, dtd, bs[1], D is None, z is None, dt_bias is None, dt_softplus, sbi is None, fp)
    launch = launches.get(key)
    if launch is None:
        launch = launches[key] = make(state, x, dt, B, D, z, dt_bias, dt_softplus, sbi)
    launch(state, x, dt, A, B, C, D, z, dt_bias, sbi, out, pad_slot_id)
    return out


def _gdn_standard_fast(state, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_l2, sbi,
                       pad_slot_id, out, state_layout, backend):
    """Fast accept for gdn_standard_decode (see :func:`_mamba2_fast`)."""
    if (not isinstance(state, _T) or use_l2.__class__ is not bool
            or not (state_layout == "vk" or state_layout == "kv")
            or not V.scale_ok(scale)
            or not _fast_call(pad_slot_id, backend)):
        return _MISS
    ent = _std_launch_entry("gdn_standard_decode", backend, state)
    if ent is None:
        return _MISS
    make, launches, fp = ent
    ss = state.shape
    if len(ss) != 4:
        return _MISS
    nslots, HV = ss[0], ss[1]
    Vd, K = (ss[2], ss[3]) if state_layout == "vk" else (ss[3], ss[2])
    dev = state.device
    if not (isinstance(q, _T) and q.device == dev and q.is_contiguous()):
        return _MISS
    act, qs = q.dtype, q.shape
    if act not in _ACT or len(qs) != 3 or qs[2] != K:
        return _MISS
    bsz, H = qs[0], qs[1]
    if H < 1 or HV % H:
        return _MISS
    vs = (bsz, HV, Vd)
    if not (_ok(k, qs, act, dev) and _ok(v, vs, act, dev)):
        return _MISS
    gd = _gdn_gates_fast(g, beta, A_log, a, dt_bias, b, (bsz, HV), (HV,), dev)
    if gd is None or not _ok_rows(sbi, bsz, nslots, dev, out, vs, act):
        return _MISS
    if out is None:                                   # as the general path: zeros
        out = torch.zeros(vs, dtype=act, device=dev)
    if not bsz:
        return out
    key = (qs, act, gd, use_l2, sbi is None, state_layout, fp)
    launch = launches.get(key)
    if launch is None:
        launch = launches[key] = make(state, q, v, gd, use_l2, sbi, state_layout)
    launch(state, q, k, v, g, beta, A_log, a, dt_bias, b, sbi, out,
           K ** -0.5 if scale is None else scale, pad_slot_id)
    return out


def _commit_entry(cache, op, backend):
    f = None if cache.device.type == "cpu" else _fast_impl(op, cache)
    return None if f is None else (f[0], _envs(f[1]), cache.device, cache.num_slots, {})


def _commit_fast(cache, nacc, sbi, pad_slot_id, backend):
    """Fast accept for commit (see :func:`_mamba2_fast`)."""
    if not isinstance(cache, ReplayCache) or not _fast_call(pad_slot_id, backend):
        return _MISS
    ent = plan_entry(cache, ("commit", backend), _commit_entry)[1]
    if ent is None:
        return _MISS
    make, env, dev, nslots, launches = ent
    fp = env()
    if fp[0] is not None and _forced_torch(fp, backend):
        return _MISS
    if not (isinstance(nacc, _T) and nacc.dtype is _I32 and nacc.device == dev
            and nacc.is_contiguous()):
        return _MISS
    ns = nacc.shape
    if len(ns) != 1 or not _ok_rows(sbi, ns[0], nslots, dev):
        return _MISS
    if ns[0]:
        key = (sbi is None, fp)
        launch = launches.get(key)
        if launch is None:
            launch = launches[key] = make(sbi is not None)
        launch(nacc, sbi, cache.write_pos, cache.pending, pad_slot_id)
    return None


# ----------------------------------------------------------------------------------------------
# Prepared calls (engines): bind the per-layer arguments once, call per step with the per-token
# tensors only.
# ----------------------------------------------------------------------------------------------
class PreparedMamba2Decode:
    """``step(x, dt, B, C, z=None, state_batch_indices=None, out=None) -> out``: one
    :func:`mamba2_decode` on the bound cache and per-layer arguments (see
    :func:`prepare_mamba2_decode`)."""

    __slots__ = ("cache", "A", "D", "dt_bias", "dt_softplus", "pad_slot_id", "backend", "_fast")

    def __init__(self, cache, A, D=None, dt_bias=None, dt_softplus=True, pad_slot_id=-1,
                 backend="auto"):
        if not isinstance(cache, Mamba2ReplayCache):
            raise TypeError(f"cache must be a Mamba2ReplayCache, got {type(cache).__name__}")
        H, dev = cache.nheads, cache.device
        self.A = V.per_head("A", A, H, dev)
        self.D = V.per_head("D", D, H, dev, optional=True)
        self.dt_bias = V.per_head("dt_bias", dt_bias, H, dev, optional=True)
        V.pad_slot(pad_slot_id)
        V.backend(backend)
        self.cache, self.dt_softplus = cache, V.flag("dt_softplus", dt_softplus)
        self.pad_slot_id, self.backend = pad_slot_id, backend
        # the per-call fast path skips re-checking the bound per-head tensors when they are in
        # the form it accepts (fp32, contiguous); otherwise every call takes the general path
        self._fast = _m2_params_fast(self.A, self.D, self.dt_bias, (H,), dev)

    def __call__(self, x, dt, B, C, z=None, state_batch_indices=None, out=None):
        if self._fast and not _is_compiling():
            r = _mamba2_fast("mamba2_decode", self.cache, x, dt, self.A, B, C, self.D, z,
                             self.dt_bias, self.dt_softplus, state_batch_indices,
                             self.pad_slot_id, out, self.backend, False, True)
            if r is not _MISS:
                return r
        return mamba2_decode(self.cache, x, dt, self.A, B, C, self.D, z, self.dt_bias,
                             self.dt_softplus, state_batch_indices, self.pad_slot_id, out,
                             self.backend)


def prepare_mamba2_decode(cache: Mamba2ReplayCache, A, D=None, dt_bias=None, dt_softplus=True,
                          pad_slot_id=-1, backend="auto") -> PreparedMamba2Decode:
    """Bind a layer's cache and per-head parameters (A, D, dt_bias: validated here, once) and
    return ``step(x, dt, B, C, z=None, state_batch_indices=None, out=None)``, which validates
    the per-token tensors on every call (the same checks and errors as :func:`mamba2_decode`) and
    launches. The bound tensors are used by reference: update them in place, or prepare again
    after replacing them."""
    return PreparedMamba2Decode(cache, A, D, dt_bias, dt_softplus, pad_slot_id, backend)


class PreparedGDNDecode:
    """``step(q, k, v, g=None, beta=None, *, a=None, b=None, state_batch_indices=None,
    out=None) -> out``: one :func:`gdn_decode` on the bound cache and per-layer arguments (see
    :func:`prepare_gdn_decode`)."""

    __slots__ = ("cache", "A_log", "dt_bias", "scale", "use_l2", "pad_slot_id", "backend",
                 "_raw_ok")

    def __init__(self, cache, A_log=None, dt_bias=None, scale=None, use_qk_l2norm_in_kernel=True,
                 pad_slot_id=-1, backend="auto"):
        if not isinstance(cache, GDNReplayCache):
            raise TypeError(f"cache must be a GDNReplayCache, got {type(cache).__name__}")
        HV, dev = cache.HV, cache.device
        V.tensor("A_log", A_log, (HV,), _FLOAT, dev, optional=True)
        V.tensor("dt_bias", dt_bias, (HV,), _FLOAT, dev, optional=True)
        if dt_bias is not None and A_log is None:
            raise ValueError("dt_bias is used only with A_log (the raw gate form: g = -exp(A_log) "
                             "* softplus(a + dt_bias)); bind A_log too, or neither")
        V.scale(scale)
        V.pad_slot(pad_slot_id)
        V.backend(backend)
        self.cache, self.A_log, self.dt_bias, self.scale = cache, A_log, dt_bias, scale
        self.use_l2 = V.flag("use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel)
        self.pad_slot_id, self.backend = pad_slot_id, backend
        # the bound raw-gate tensors in the form the fast path accepts (contiguous): not
        # re-checked per call
        self._raw_ok = (A_log is not None and _ok_gate(A_log, (HV,), dev)
                        and (dt_bias is None or _ok_gate(dt_bias, (HV,), dev)))

    def __call__(self, q, k, v, g=None, beta=None, *, a=None, b=None, state_batch_indices=None,
                 out=None):
        # raw gates use the bound A_log / dt_bias; a given g uses neither
        A_log, dt_bias = (None, None) if g is not None else (self.A_log, self.dt_bias)
        if not _is_compiling():
            r = _gdn_fast("gdn_decode", self.cache, q, k, v, g, beta, A_log, a, dt_bias, b,
                          self.scale, self.use_l2, state_batch_indices, self.pad_slot_id, out,
                          self.backend, False, self._raw_ok)
            if r is not _MISS:
                return r
        return gdn_decode(self.cache, q, k, v, g, beta, A_log=A_log, a=a, dt_bias=dt_bias, b=b,
                          scale=self.scale, use_qk_l2norm_in_kernel=self.use_l2,
                          state_batch_indices=state_batch_indices, pad_slot_id=self.pad_slot_id,
                          out=out, backend=self.backend)


def prepare_gdn_decode(cache: GDNReplayCache, A_log=None, dt_bias=None, scale=None,
                       use_qk_l2norm_in_kernel=True, pad_slot_id=-1,
                       backend="auto") -> PreparedGDNDecode:
    """Bind a GDN layer's cache and per-head gate parameters (``A_log``, ``dt_bias`` [HV] for the
    raw gate form; validated here) and return ``step(q, k, v, g=None, beta=None, *, a=None,
    b=None, state_batch_indices=None, out=None)`` (per-token checks as :func:`gdn_decode`)."""
    return PreparedGDNDecode(cache, A_log, dt_bias, scale, use_qk_l2norm_in_kernel, pad_slot_id,
                             backend)


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
    dt = V.untie_dt(dt, len(lead), P, "...")
    V.tensor("dt", dt, lead + (H,), _FLOAT, dev)
    A = V.per_head("A", A, H, dev)
    V.tensor("B", B, lead + (G, N), (act,), dev)
    V.tensor("C", C, lead + (G, N), (act,), dev)
    D = V.per_head("D", D, H, dev, optional=True)
    dt_bias = V.per_head("dt_bias", dt_bias, H, dev, optional=True)
    V.tensor("z", z, lead + (H, P), (act,), dev, optional=True)
    V.pad_slot(pad_slot_id)
    V.indices("state_batch_indices", sbi, b, dev, cache.num_slots, pad_slot_id)
    out = V.output("out", out, lead + (H, P), act, dev)
    V.backend(backend)
    V.draft_count("x", T, cache.max_draft)
    return dt, A, D, dt_bias, out


def _lib_mamba2(cache, verify, x, dt, A, B, C, D, z, dt_bias, dt_softplus, sbi, pad_slot_id, out,
                backend):
    from .library import cache_tensors
    dt_softplus = V.compiled_flag("dt_softplus", dt_softplus, pad_slot_id)
    if out is None:
        out = torch.zeros(x.shape, dtype=cache.act_dtype, device=cache.device)
    torch.ops.replayssm.mamba2_step(cache.handle, verify, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                                    sbi, pad_slot_id, out, cache_tensors(cache), backend)
    return out


def _fp32_params(*ts):
    """Per-head parameters (A, D, dt_bias) as the CuTe kernels take them: fp32 (a bf16 / fp16
    ``dt_bias``, as vLLM's Mamba-2 mixers hold it, is converted exactly; the reference computes in
    fp32 anyway)."""
    return tuple(t if t is None or t.dtype is _F32 else t.float() for t in ts)


def _mamba2_step(op, cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus, sbi, pad_slot_id, out,
                 backend, T):
    dt, A, D, dt_bias, out = _mamba2_check(cache, x, dt, A, B, C, D, z, dt_bias, sbi, pad_slot_id,
                                           out, backend, T)
    dt_softplus = V.flag("dt_softplus", dt_softplus)
    impl = resolve(backend, op, cache)
    if impl is not None:
        A, D, dt_bias = _fp32_params(A, D, dt_bias)
        return impl(cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus, sbi, pad_slot_id, out)
    with torch.no_grad():       # the replay state is not differentiable: no graph in the cache
        unsq = (lambda t: t if t is None else t.unsqueeze(1)) if T is None else (lambda t: t)
        xs, dts, Bs, Cs, zs = map(unsq, (x, dt, B, C, z))
        rows, slots = _rows_and_slots(sbi, x.shape[0], pad_slot_id, x.device, cache.num_slots)
        dtp = ref.mamba2_process_dt(dts[rows], dt_bias, dt_softplus)
        y = ref.mamba2_replay(cache, slots, xs[rows], dtp, A, Bs[rows], Cs[rows], D,
                              None if zs is None else zs[rows], commit_all=(T is None))
        out[rows] = (y[:, 0] if T is None else y).to(out.dtype)
    return out


def mamba2_decode(cache: Mamba2ReplayCache, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                  dt_softplus=True, state_batch_indices=None, pad_slot_id=-1, out=None,
                  backend="auto", _eager=False):
    """One decode token per row. x, z, out [batch, nheads, headdim]; dt [batch, nheads];
    A, D, dt_bias [nheads] (fp32; other float dtypes are converted for the kernels); B, C
    [batch, ngroups, dstate]. Non-flush rows read the read copy and write only ``out`` and their
    buffer entry; rows whose buffer is full flush first."""
    if not _eager and _is_compiling():
        return _lib_mamba2(cache, False, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                           state_batch_indices, pad_slot_id, out, backend)
    done = _mamba2_fast("mamba2_decode", cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                        state_batch_indices, pad_slot_id, out, backend, False)
    if done is not _MISS:
        return done
    return _mamba2_step("mamba2_decode", cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                        state_batch_indices, pad_slot_id, out, backend, None)


def mamba2_verify(cache: Mamba2ReplayCache, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                  dt_softplus=True, state_batch_indices=None, pad_slot_id=-1, out=None,
                  backend="auto", _eager=False):
    """Speculative verify of T inputs per row: x [batch, T, nheads, headdim], dt [batch, T, nheads],
    B, C [batch, T, ngroups, dstate]. Outputs of all T by output-only evaluation; the inputs stay
    pending in the ring until :func:`commit` keeps the accepted prefix."""
    if not _eager and _is_compiling():
        return _lib_mamba2(cache, True, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                           state_batch_indices, pad_slot_id, out, backend)
    done = _mamba2_fast("mamba2_verify", cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                        state_batch_indices, pad_slot_id, out, backend, True)
    if done is not _MISS:
        return done
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
    V.gdn_gates(g, beta, A_log, a, dt_bias, b, lead, HV, dev, _FLOAT)
    return bsz, lead


def _lib_gdn(cache, verify, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_l2, sbi, pad_slot_id,
             out, backend):
    from .library import cache_tensors
    use_l2 = V.compiled_flag("use_qk_l2norm_in_kernel", use_l2, pad_slot_id)
    scale = V.compiled_scale(scale)
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
    V.scale(scale)
    V.pad_slot(pad_slot_id)
    V.indices("state_batch_indices", sbi, bsz, dev, cache.num_slots, pad_slot_id)
    out = V.output("out", out, lead + (cache.HV, cache.V), act, dev)
    V.backend(backend)
    V.draft_count("q", T, cache.max_draft)
    use_qk_l2norm_in_kernel = V.flag("use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel)
    impl = resolve(backend, op, cache)
    if impl is not None:
        return impl(cache, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_qk_l2norm_in_kernel,
                    sbi, pad_slot_id, out)
    with torch.no_grad():       # the replay state is not differentiable: no graph in the cache
        unsq = (lambda t: t if t is None else t.unsqueeze(1)) if T is None else (lambda t: t)
        q, k, v, g, beta, a, b = map(unsq, (q, k, v, g, beta, a, b))
        rows, slots = _rows_and_slots(sbi, bsz, pad_slot_id, dev, cache.num_slots)
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
    if not _eager and _is_compiling():
        return _lib_gdn(cache, False, q, k, v, g, beta, A_log, a, dt_bias, b, scale,
                        use_qk_l2norm_in_kernel, state_batch_indices, pad_slot_id, out, backend)
    done = _gdn_fast("gdn_decode", cache, q, k, v, g, beta, A_log, a, dt_bias, b, scale,
                     use_qk_l2norm_in_kernel, state_batch_indices, pad_slot_id, out, backend, False)
    if done is not _MISS:
        return done
    return _gdn_step("gdn_decode", cache, q, k, v, g, beta, A_log, a, dt_bias, b, scale,
                     use_qk_l2norm_in_kernel, state_batch_indices, pad_slot_id, out, backend, None)


def gdn_verify(cache: GDNReplayCache, q, k, v, g=None, beta=None, *, A_log=None, a=None,
               dt_bias=None, b=None, scale=None, use_qk_l2norm_in_kernel=True,
               state_batch_indices=None, pad_slot_id=-1, out=None, backend="auto", _eager=False):
    """Speculative verify of T GDN inputs per row ([batch, T, ...] inputs); see :func:`commit`."""
    if not _eager and _is_compiling():
        return _lib_gdn(cache, True, q, k, v, g, beta, A_log, a, dt_bias, b, scale,
                        use_qk_l2norm_in_kernel, state_batch_indices, pad_slot_id, out, backend)
    done = _gdn_fast("gdn_verify", cache, q, k, v, g, beta, A_log, a, dt_bias, b, scale,
                     use_qk_l2norm_in_kernel, state_batch_indices, pad_slot_id, out, backend, True)
    if done is not _MISS:
        return done
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
    if not _eager and _is_compiling():
        from .library import cache_tensors
        V.pad_slot(pad_slot_id)
        torch.ops.replayssm.commit(cache.handle, num_accepted_tokens, state_batch_indices,
                                   pad_slot_id, cache_tensors(cache), backend)
        return None
    done = _commit_fast(cache, num_accepted_tokens, state_batch_indices, pad_slot_id, backend)
    if done is not _MISS:
        return done
    if not isinstance(cache, ReplayCache):
        raise TypeError(f"cache must be a Mamba2ReplayCache or GDNReplayCache, got {type(cache).__name__}")
    dev = cache.device
    if not isinstance(num_accepted_tokens, torch.Tensor):
        raise TypeError(f"num_accepted_tokens must be an int32 tensor of shape [batch], got "
                        f"{type(num_accepted_tokens).__name__}")
    if num_accepted_tokens.dim() != 1:
        raise ValueError(f"num_accepted_tokens must be an int32 tensor of shape [batch], got "
                         f"shape {list(num_accepted_tokens.shape)}")
    bsz = num_accepted_tokens.shape[0]
    V.tensor("num_accepted_tokens", num_accepted_tokens, (bsz,), (torch.int32,), dev)
    if (isinstance(state_batch_indices, torch.Tensor) and state_batch_indices.dim() == 1
            and state_batch_indices.shape[0] != bsz):
        raise ValueError(f"state_batch_indices has {state_batch_indices.shape[0]} rows but "
                         f"num_accepted_tokens has {bsz}: one count per row")
    V.pad_slot(pad_slot_id)
    V.indices("state_batch_indices", state_batch_indices, bsz, dev, cache.num_slots, pad_slot_id)
    V.backend(backend)
    if dev.type == "cpu" and bsz:
        bad = (num_accepted_tokens < 0) | (num_accepted_tokens > max(cache.max_draft, 1))
        if state_batch_indices is not None:          # pad rows' counts are ignored, as on the device
            bad &= state_batch_indices != pad_slot_id
        if bool(bad.any()):
            raise ValueError(f"num_accepted_tokens must be in [0, {max(cache.max_draft, 1)}], got "
                             f"{num_accepted_tokens[bad].tolist()[:8]}")
    impl = resolve(backend, "commit", cache)
    if impl is not None:
        return impl(cache, num_accepted_tokens, state_batch_indices, pad_slot_id)
    rows, slots = _rows_and_slots(state_batch_indices, bsz, pad_slot_id, dev, cache.num_slots)
    pend, acc = cache.pending[slots], num_accepted_tokens[rows]
    if dev.type == "cpu" and bool((acc > pend).any()):     # (on the device: clamped, no sync)
        over = acc > pend
        raise ValueError(f"num_accepted_tokens of rows {rows[over].tolist()[:8]} "
                         f"({acc[over].tolist()[:8]}) exceed the drafts the last verify appended "
                         f"for their slots ({pend[over].tolist()[:8]})")
    n = torch.minimum(torch.clamp(acc, min=0), pend)
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
    if not _eager and _is_compiling():
        dt_softplus = V.compiled_flag("dt_softplus", dt_softplus, pad_slot_id)
        if out is None:
            out = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
        torch.ops.replayssm.mamba2_standard_decode(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                                                   state_batch_indices, pad_slot_id, out, backend)
        return out
    done = _m2_standard_fast(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                             state_batch_indices, pad_slot_id, out, backend)
    if done is not _MISS:
        return done
    V.tensor("state", state, (None, None, None, None), (torch.float32, torch.float16, torch.bfloat16))
    V.no_overlap("state", state)
    dev = state.device
    slots_n, H, P, N = state.shape
    V.tensor("x", x, (None, H, P), _ACT, dev)
    act, bsz = x.dtype, x.shape[0]
    dt = V.untie_dt(dt, 1, P, "batch")
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
    out = V.output("out", out, (bsz, H, P), act, dev)
    V.backend(backend)
    dt_softplus = V.flag("dt_softplus", dt_softplus)
    impl = resolve(backend, "mamba2_standard_decode", state)
    if impl is not None:
        A, D, dt_bias = _fp32_params(A, D, dt_bias)
        return impl(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices,
                    pad_slot_id, out)
    rows, slots = _rows_and_slots(state_batch_indices, bsz, pad_slot_id, dev, slots_n)
    y = ref.mamba2_standard_step(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, rows, slots)
    out[rows] = y.to(out.dtype)
    return out


def gdn_standard_decode(state, q, k, v, g=None, beta=None, *, A_log=None, a=None, dt_bias=None,
                        b=None, scale=None, use_qk_l2norm_in_kernel=True, state_batch_indices=None,
                        pad_slot_id=-1, out=None, state_layout="vk", backend="auto", _eager=False):
    """Standard GDN decode, in place on ``state [num_slots, HV, V, K]`` (``state_layout="vk"``) or
    ``[num_slots, HV, K, V]`` (``"kv"``, FLA / vLLM Triton layout); fp32/fp16/bf16 state.
    Where K == V (Qwen3.5's 128 / 128) the two layouts have the same shape, so a state passed
    with the wrong ``state_layout`` cannot be detected: it is read and written transposed."""
    if not _eager and _is_compiling():
        use_qk_l2norm_in_kernel = V.compiled_flag("use_qk_l2norm_in_kernel",
                                                  use_qk_l2norm_in_kernel, pad_slot_id)
        scale = V.compiled_scale(scale)
        if out is None:
            out = torch.zeros(v.shape, dtype=v.dtype, device=v.device)
        torch.ops.replayssm.gdn_standard_decode(state, q, k, v, g, beta, A_log, a, dt_bias, b, scale,
                                                use_qk_l2norm_in_kernel, state_batch_indices,
                                                pad_slot_id, out, state_layout, backend)
        return out
    done = _gdn_standard_fast(state, q, k, v, g, beta, A_log, a, dt_bias, b, scale,
                              use_qk_l2norm_in_kernel, state_batch_indices, pad_slot_id, out,
                              state_layout, backend)
    if done is not _MISS:
        return done
    slots_n, HV, Vd, K = V.gdn_state(state, state_layout)
    dev = state.device
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        raise ValueError("q must be a tensor of shape [batch, H, K]")
    H = q.shape[1]
    if H < 1 or HV % H:
        raise ValueError(f"q's head count ({H}) must divide the state's value heads ({HV})")
    act = q.dtype
    if act not in _ACT:
        raise TypeError(f"q must be float32/float16/bfloat16, got {act}")
    if q.shape[2] != K and q.shape[2] == Vd and K != Vd:   # most likely the other layout
        raise ValueError(f"q's head dim ({q.shape[2]}) is the state's V, not its K, under "
                         f"state_layout={state_layout!r} (state {list(state.shape)}: "
                         f"{'[slots, HV, K, V]' if state_layout == 'kv' else '[slots, HV, V, K]'}); "
                         f"is the state in the other layout?")
    bsz, _ = _gdn_inputs((H, HV, K, Vd), q, k, v, g, beta, A_log, a, dt_bias, b, dev, act, None)
    V.scale(scale)
    V.pad_slot(pad_slot_id)
    V.indices("state_batch_indices", state_batch_indices, bsz, dev, slots_n, pad_slot_id)
    out = V.output("out", out, (bsz, HV, Vd), act, dev)
    V.backend(backend)
    use_qk_l2norm_in_kernel = V.flag("use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel)
    impl = resolve(backend, "gdn_standard_decode", state)
    if impl is not None:
        return impl(state, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_qk_l2norm_in_kernel,
                    state_batch_indices, pad_slot_id, out, state_layout)
    rows, slots = _rows_and_slots(state_batch_indices, bsz, pad_slot_id, dev, slots_n)
    sel = lambda t: None if t is None else t[rows]  # noqa: E731
    gg, bb = ref.gdn_gates(sel(g), sel(beta), A_log, sel(a), dt_bias, sel(b))
    gfull = torch.zeros(bsz, HV, device=dev); bfull = torch.zeros(bsz, HV, device=dev)
    gfull[rows], bfull[rows] = gg, bb
    o = ref.gdn_standard_step(state, q, k, v, gfull, bfull, scale, use_qk_l2norm_in_kernel, rows,
                              slots, state_layout)
    out[rows] = o.to(out.dtype)
    return out
