"""Snapshot speculative verify (vLLM semantics): the baseline ReplaySSM's verify is measured against.

vLLM / SGLang verify T draft tokens by running the standard recurrence over them and storing the
state after *every* draft to its own pool slot (``spec_state_indices``, shape ``[batch, T]``):
one read of the state plus T writes per verify step, and T state slots per request. Rolling back is
choosing which slot the next step reads: after ``n`` accepted drafts the state to continue from is
the one stored after draft ``n − 1``, i.e. slot ``state_indices[row, n − 1]``.

Semantics of one verify step (per batch row ``i``, T = ``x.shape[1]``):

* read slot ``state_indices[i, max(num_accepted_tokens[i] − 1, 0)]`` (column 0 when
  ``num_accepted_tokens`` is None); a row whose read slot equals ``pad_slot_id`` is skipped
  entirely (no state access, its ``out`` rows untouched);
* for t = 0..T−1: one standard decode step in fp32 registers, output ``out[i, t]``, and store the
  running state (rounded to the state dtype, RN) to ``state_indices[i, t]`` unless that entry is
  ``pad_slot_id`` (rows with fewer drafts pad their tail columns). The running state stays fp32
  between drafts (stored copies are rounded, the recurrence is not).

The read slot is usually one of the row's own T columns, so slots must not be shared between rows.
Use :func:`snapshot_accept` after acceptance to learn each row's new current slot.

Mamba-2: ``state [num_slots, H, P, N]`` (fp32 / fp16 / bf16). GDN: ``state [num_slots, HV, V, K]``
(``state_layout="vk"``) or ``[num_slots, HV, K, V]`` (``"kv"``, torch backend only).
"""
from __future__ import annotations

from typing import Optional

import torch

from . import _validate as V
from . import reference as ref
from .backends import register_cute, resolve

__all__ = ["mamba2_snapshot_verify", "gdn_snapshot_verify", "snapshot_accept",
           "mamba2_snapshot_verify_ref", "gdn_snapshot_verify_ref", "snapshot_read_slots"]

_STATE = (torch.float32, torch.float16, torch.bfloat16)
_ACT = (torch.float32, torch.float16, torch.bfloat16)
_is_compiling = torch.compiler.is_compiling   # the same function object: torch.compile folds it


# ----------------------------------------------------------------------------------------------
# slot bookkeeping
# ----------------------------------------------------------------------------------------------
def snapshot_read_slots(state_indices: torch.Tensor, num_accepted_tokens: Optional[torch.Tensor]):
    """The slot each row reads: ``state_indices[i, max(n_i − 1, 0)]`` (column 0 without ``n``)."""
    if num_accepted_tokens is None:
        return state_indices[:, 0]
    col = torch.clamp(num_accepted_tokens.to(torch.int64) - 1, min=0, max=state_indices.shape[1] - 1)
    return torch.gather(state_indices, 1, col[:, None])[:, 0]


def _check_read_column(state_indices, num_accepted_tokens, pad_slot_id):
    """CPU tensors: column 0 and the read column must agree on whether a row is a pad row. A row
    with a slot in column 0 (a real request) must not read a pad entry (``num_accepted_tokens``
    past the drafts the row has: the row would be skipped, as a pad row); a pad row (pad id in
    column 0) must not read a real slot (the kernels would run it and write its slots)."""
    read = snapshot_read_slots(state_indices, num_accepted_tokens)
    pad0, pad_read = state_indices[:, 0] == pad_slot_id, read == pad_slot_id
    bad = ~pad0 & pad_read
    if bool(bad.any()):
        rows = bad.nonzero().squeeze(1).tolist()[:8]
        raise ValueError(f"num_accepted_tokens of rows {rows} ({num_accepted_tokens[bad].tolist()[:8]}) "
                         f"point at pad entries of state_indices: more drafts accepted than the row has")
    bad = pad0 & ~pad_read
    if bool(bad.any()):
        rows = bad.nonzero().squeeze(1).tolist()[:8]
        raise ValueError(f"state_indices rows {rows} are pad rows (pad_slot_id={pad_slot_id} in "
                         f"column 0) but num_accepted_tokens ({num_accepted_tokens[bad].tolist()[:8]}) "
                         f"selects a real slot ({read[bad].tolist()[:8]}): a pad row must hold the "
                         f"pad id in every column")


def snapshot_accept(state_indices: torch.Tensor, num_accepted_tokens: torch.Tensor,
                    pad_slot_id: int = -1) -> torch.Tensor:
    """After a snapshot verify, the slot that holds each row's state past its ``n`` accepted drafts:
    ``state_indices[i, n_i − 1]`` (int32 ``[batch]``; pad rows keep ``pad_slot_id``).

    This is what the next step must read. Pass the same ``num_accepted_tokens`` to the next verify
    (which reads column ``n − 1`` of *its* ``state_indices``), or permute that row's slots so this
    one is column 0. ``n`` must be in ``[1, T]``: in vLLM's scheme the first verified token is the
    one sampled by the previous step and is always accepted, so the pre-verify state is never needed
    again (``n = 0`` is read as 1, as vLLM's kernels do; CPU tensors are checked and refused)."""
    V.tensor("state_indices", state_indices, (None, None), (torch.int32,))
    b, T = state_indices.shape
    V.tensor("num_accepted_tokens", num_accepted_tokens, (b,), (torch.int32,), state_indices.device)
    V.pad_slot(pad_slot_id)
    if num_accepted_tokens.device.type == "cpu" and b:
        bad = (num_accepted_tokens < 1) | (num_accepted_tokens > T)
        if bool(bad.any()):
            raise ValueError(f"num_accepted_tokens must be in [1, {T}] (the first draft is always "
                             f"accepted in snapshot verify), got {num_accepted_tokens[bad].tolist()[:8]}")
        _check_read_column(state_indices, num_accepted_tokens, pad_slot_id)
    # a pad row is one whose read slot is the pad id, as the kernels skip it (CPU tensors have
    # been checked to agree with column 0 above)
    return snapshot_read_slots(state_indices, num_accepted_tokens).to(torch.int32)


def _valid_rows(state_indices, num_accepted_tokens, pad_slot_id):
    """(rows, read slots, write slots [n, T] with -1 where skipped) — torch backend (may sync)."""
    read = snapshot_read_slots(state_indices, num_accepted_tokens)
    rows = (read != pad_slot_id).nonzero().squeeze(1)
    dst = state_indices[rows].to(torch.int64)
    return rows, read[rows].to(torch.int64), torch.where(dst == pad_slot_id, torch.full_like(dst, -1), dst)


# ----------------------------------------------------------------------------------------------
# torch references (the spec the CuTe kernels must match)
# ----------------------------------------------------------------------------------------------
def _snapshot_loop(step, T, state, state_indices, num_accepted_tokens, pad_slot_id, out,
                   compute_dtype, dev):
    """The references' loop over the T drafts: the valid rows' running state (kept in
    ``compute_dtype``) starts from their read slots; ``step(run, rows, t, idx)`` advances it in
    place by draft t and returns the rows' outputs, written to ``out[rows, t]``; the running state
    is then stored to each row's slot of column t (pad entries skipped). Returns ``out``."""
    rows, read, dst = _valid_rows(state_indices, num_accepted_tokens, pad_slot_id)
    n = rows.numel()
    if n == 0:
        return out
    run = state[read].to(compute_dtype)                        # the running state, kept wide
    idx = torch.arange(n, device=dev)
    for t in range(T):
        out[rows, t] = step(run, rows, t, idx).to(out.dtype)
        keep = dst[:, t] >= 0
        state[dst[keep, t]] = run[keep].to(state.dtype)
    return out


def mamba2_snapshot_verify_ref(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=True,
                               state_indices=None, num_accepted_tokens=None, pad_slot_id=-1, out=None,
                               compute_dtype=torch.float32):
    """Reference of the snapshot verify (module docstring) on any device. x, z [b, T, H, P];
    dt [b, T, H]; B, C [b, T, G, N]; state_indices int32 [b, T]. Writes ``out`` [b, T, H, P]
    (valid rows only) and the T snapshots; returns ``out``."""
    if out is None:
        out = torch.zeros(x.shape, dtype=x.dtype, device=x.device)

    def step(run, rows, t, idx):
        zt = None if z is None else z[rows, t]
        return ref.mamba2_standard_step(run, x[rows, t], dt[rows, t], A, B[rows, t], C[rows, t], D,
                                        zt, dt_bias, dt_softplus, idx, idx, compute_dtype)
    return _snapshot_loop(step, x.shape[1], state, state_indices, num_accepted_tokens,
                          pad_slot_id, out, compute_dtype, x.device)


def gdn_snapshot_verify_ref(state, q, k, v, g, beta, scale=None, use_qk_l2norm=True,
                            state_indices=None, num_accepted_tokens=None, pad_slot_id=-1, out=None,
                            state_layout="vk", compute_dtype=torch.float32):
    """Reference GDN snapshot verify: q, k [b, T, H, K]; v [b, T, HV, V]; g, beta [b, T, HV]
    (processed gates); state_indices int32 [b, T]. Writes ``out`` [b, T, HV, V] and the snapshots."""
    if out is None:
        out = torch.zeros(v.shape, dtype=v.dtype, device=v.device)

    def step(run, rows, t, idx):
        return ref.gdn_standard_step(run, q[rows, t], k[rows, t], v[rows, t], g[rows, t],
                                     beta[rows, t], scale, use_qk_l2norm, idx, idx, state_layout,
                                     compute_dtype)
    return _snapshot_loop(step, q.shape[1], state, state_indices, num_accepted_tokens,
                          pad_slot_id, out, compute_dtype, q.device)


# ----------------------------------------------------------------------------------------------
# public functions (validate, then dispatch)
# ----------------------------------------------------------------------------------------------
def _check_indices(state_indices, num_accepted_tokens, b, T, dev, num_slots, pad_slot_id):
    V.pad_slot(pad_slot_id)
    V.tensor("state_indices", state_indices, (b, T), (torch.int32,), dev)
    V.tensor("num_accepted_tokens", num_accepted_tokens, (b,), (torch.int32,), dev, optional=True)
    if dev.type == "cpu" and state_indices.numel():
        bad = (state_indices >= num_slots) | ((state_indices < 0) & (state_indices != pad_slot_id))
        if bool(bad.any()):
            raise ValueError(f"state_indices must hold slots in [0, {num_slots}) or the pad id, got "
                             f"{state_indices[bad].tolist()[:8]}")
        V.distinct_slots("state_indices", state_indices, pad_slot_id)
        if num_accepted_tokens is not None and b:
            bad = (num_accepted_tokens < 0) | (num_accepted_tokens > T)
            if bool(bad.any()):
                raise ValueError(f"num_accepted_tokens must be in [0, {T}], got "
                                 f"{num_accepted_tokens[bad].tolist()[:8]}")
            _check_read_column(state_indices, num_accepted_tokens, pad_slot_id)


def mamba2_snapshot_verify(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=True,
                           state_indices=None, pad_slot_id=-1, out=None, backend="auto", *,
                           num_accepted_tokens=None, _eager=False):
    """Snapshot verify of T Mamba-2 drafts per row (module docstring): ``state [num_slots, H, P, N]``
    fp32/fp16/bf16; x, z, out [batch, T, H, P]; dt [batch, T, H]; A, D, dt_bias [H] fp32 (or
    stride-0 expanded views); B, C [batch, T, G, N]; ``state_indices`` int32 [batch, T] (vLLM's
    ``spec_state_indices``); ``num_accepted_tokens`` int32 [batch] from the previous step selects the
    read column (None: column 0). Returns ``out``. Inside torch.compile it runs as the custom op
    ``torch.ops.replayssm.mamba2_snapshot_verify`` (validated when it runs)."""
    if not _eager and _is_compiling():
        dt_softplus = V.compiled_flag("dt_softplus", dt_softplus, pad_slot_id)
        if out is None:
            out = torch.zeros(x.shape, dtype=x.dtype, device=x.device)
        torch.ops.replayssm.mamba2_snapshot_verify(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus,
                                                   state_indices, num_accepted_tokens, pad_slot_id,
                                                   out, backend)
        return out
    V.tensor("state", state, (None, None, None, None), _STATE)
    V.no_overlap("state", state)
    dev = state.device
    slots_n, H, P, N = state.shape
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"x must be a tensor of shape [batch, T, {H}, {P}], got "
                         f"{list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}")
    V.tensor("x", x, (None, None, H, P), _ACT, dev)
    b, T = x.shape[:2]
    if T < 1:
        raise ValueError("x must hold T >= 1 draft tokens")
    act = x.dtype
    dt = V.untie_dt(dt, 2, P, "batch, T")
    V.tensor("dt", dt, (b, T, H), _ACT, dev)
    A = V.per_head("A", A, H, dev)
    V.tensor("B", B, (b, T, None, N), (act,), dev)
    G = B.shape[2]
    if G < 1 or H % G:
        raise ValueError(f"B's ngroups ({G}) must divide nheads ({H})")
    V.tensor("C", C, (b, T, G, N), (act,), dev)
    D = V.per_head("D", D, H, dev, optional=True)
    dt_bias = V.per_head("dt_bias", dt_bias, H, dev, optional=True)
    V.tensor("z", z, (b, T, H, P), (act,), dev, optional=True)
    _check_indices(state_indices, num_accepted_tokens, b, T, dev, slots_n, pad_slot_id)
    out = V.output("out", out, (b, T, H, P), act, dev)
    V.backend(backend)
    dt_softplus = V.flag("dt_softplus", dt_softplus)
    impl = resolve(backend, "mamba2_snapshot_verify", state)
    if impl is not None:
        return impl(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_indices,
                    num_accepted_tokens, pad_slot_id, out)
    return mamba2_snapshot_verify_ref(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_indices,
                                      num_accepted_tokens, pad_slot_id, out)


def gdn_snapshot_verify(state, q, k, v, g=None, beta=None, *, A_log=None, a=None, dt_bias=None, b=None,
                        scale=None, use_qk_l2norm_in_kernel=True, state_indices=None,
                        num_accepted_tokens=None, pad_slot_id=-1, out=None, state_layout="vk",
                        backend="auto", _eager=False):
    """Snapshot verify of T GDN drafts per row: ``state [num_slots, HV, V, K]`` ("vk") or
    ``[num_slots, HV, K, V]`` ("kv"); q, k [batch, T, H, K]; v, out [batch, T, HV, V]; either
    g, beta [batch, T, HV] or raw A_log [HV], a [batch, T, HV], dt_bias [HV], b [batch, T, HV];
    ``state_indices`` int32 [batch, T]. Returns ``out``. Inside torch.compile it runs as the
    custom op ``torch.ops.replayssm.gdn_snapshot_verify``."""
    if not _eager and _is_compiling():
        use_qk_l2norm_in_kernel = V.compiled_flag("use_qk_l2norm_in_kernel",
                                                  use_qk_l2norm_in_kernel, pad_slot_id)
        scale = V.compiled_scale(scale)
        if out is None:
            out = torch.zeros(v.shape, dtype=v.dtype, device=v.device)
        torch.ops.replayssm.gdn_snapshot_verify(state, q, k, v, g, beta, A_log, a, dt_bias, b, scale,
                                                use_qk_l2norm_in_kernel, state_indices,
                                                num_accepted_tokens, pad_slot_id, out, state_layout,
                                                backend)
        return out
    slots_n, HV, Vd, K = V.gdn_state(state, state_layout)
    dev = state.device
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise ValueError("q must be a tensor of shape [batch, T, H, K]")
    bsz, T, H = q.shape[:3]
    if T < 1:
        raise ValueError("q must hold T >= 1 draft tokens")
    if H < 1 or HV % H:
        raise ValueError(f"q's head count ({H}) must divide the state's value heads ({HV})")
    act = q.dtype
    if act not in _ACT:
        raise TypeError(f"q must be float32/float16/bfloat16, got {act}")
    lead = (bsz, T)
    V.tensor("q", q, lead + (H, K), (act,), dev)
    V.tensor("k", k, lead + (H, K), (act,), dev)
    V.tensor("v", v, lead + (HV, Vd), (act,), dev)
    V.gdn_gates(g, beta, A_log, a, dt_bias, b, lead, HV, dev, _ACT, "batch, T")
    V.scale(scale)
    _check_indices(state_indices, num_accepted_tokens, bsz, T, dev, slots_n, pad_slot_id)
    out = V.output("out", out, lead + (HV, Vd), act, dev)
    V.backend(backend)
    use_qk_l2norm_in_kernel = V.flag("use_qk_l2norm_in_kernel", use_qk_l2norm_in_kernel)
    impl = resolve(backend, "gdn_snapshot_verify", _GDNTarget(state, state_layout))
    if impl is not None:
        return impl(state, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_qk_l2norm_in_kernel,
                    state_indices, num_accepted_tokens, pad_slot_id, out)
    gg, bb = ref.gdn_gates(g, beta, A_log, a, dt_bias, b)
    return gdn_snapshot_verify_ref(state, q, k, v, gg, bb, scale, use_qk_l2norm_in_kernel, state_indices,
                                   num_accepted_tokens, pad_slot_id, out, state_layout)


# ----------------------------------------------------------------------------------------------
# CuTe implementations (kernels in cute_kernels/snapshot_verify.py, imported on first use)
# ----------------------------------------------------------------------------------------------
def _kernels():
    import importlib
    return importlib.import_module("cute_kernels.snapshot_verify")


def _c(t):
    return None if t is None else t.contiguous()


def _m2_ok(state):
    return state.is_contiguous() and state.shape[-1] % 8 == 0


@register_cute("mamba2_snapshot_verify", supports=_m2_ok)
def _mamba2_cute(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_indices, num_accepted_tokens,
                 pad_slot_id, out):
    return _kernels().mamba2_snapshot_verify_cute(
        state, _c(x), _c(dt), _c(A), _c(B), _c(C), _c(D), _c(z), _c(dt_bias), dt_softplus,
        _c(state_indices), _c(num_accepted_tokens), pad_slot_id, out)


class _GDNTarget:
    """What ``resolve`` sees for GDN: the state's device plus the layout the kernel must support."""

    def __init__(self, state, layout):
        self.state, self.layout, self.device = state, layout, state.device


def _gdn_ok(target):
    state, layout = target.state, target.layout
    return (layout == "vk" and state.is_contiguous()
            and _kernels().gdn_supports(state.dtype, state.shape[3], state.shape[2]))


@register_cute("gdn_snapshot_verify", supports=_gdn_ok)
def _gdn_cute(state, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_l2, state_indices,
              num_accepted_tokens, pad_slot_id, out):
    return _kernels().gdn_snapshot_verify_cute(
        state, _c(q), _c(k), _c(v), _c(g), _c(beta), _c(A_log), _c(a), _c(dt_bias), _c(b), scale, use_l2,
        _c(state_indices), _c(num_accepted_tokens), pad_slot_id, out)
