"""``torch.library`` registration of the ops (namespace ``replayssm``), with fake implementations,
so the ops work inside ``torch.compile`` graphs.

Eager calls skip the dispatcher (a custom-op dispatch costs tens of µs, more than a decode step at
small batch): :mod:`replayssm_lp.ops` routes through ``torch.ops.replayssm.*`` only while
``torch.compiler.is_compiling()``. A replay cache is not a tensor, so the ops take the cache's
integer handle (``cache.handle``) plus every cache tensor the step may write, declared as mutated
(that list is what orders cache updates correctly in a compiled graph).
"""
from __future__ import annotations

import itertools
import weakref
from typing import List, Optional

import torch

_CACHES: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()
_NEXT = itertools.count(1)


def register_cache(cache) -> int:
    h = next(_NEXT)
    _CACHES[h] = cache
    return h


_CURSORS = ("write_pos", "ring_origin", "flush_count", "pending", "arrive")


def cache_tensors(cache) -> List[torch.Tensor]:
    """Every tensor a step may write (copies, scales, ring buffers, cursors)."""
    ts = []
    for enc in (cache.hi, cache.lo):
        if enc is not None:
            ts += [t for t in (enc.data, enc.scale, enc.global_scale) if t is not None]
    ts += list(cache._buffers())
    ts += [getattr(cache, n) for n in _CURSORS]
    return ts


def _cache(h, tensors: List[torch.Tensor]):
    """A view of cache ``h`` whose tensors are ``tensors`` (same order as :func:`cache_tensors`):
    under torch.compile the op must write the tensors it was given, which functionalization may
    have replaced by copies of the cache's own."""
    import copy
    from .formats import EncodedState
    c = _CACHES.get(h)
    if c is None:
        raise RuntimeError(f"replay cache handle {h} is not alive")
    if all(a is b for a, b in zip(tensors, cache_tensors(c))):
        return c
    v = copy.copy(c)
    it = iter(tensors)
    for name in ("hi", "lo"):
        enc = getattr(c, name)
        if enc is not None:
            setattr(v, name, EncodedState(*(None if t is None else next(it)
                                              for t in (enc.data, enc.scale, enc.global_scale))))
    for n in type(c)._BUFFERS:
        if getattr(c, n) is not None:
            setattr(v, n, next(it))
    for n in _CURSORS:
        setattr(v, n, next(it))
    return v


# ------------------------------------------------------------------------------------------------
@torch.library.custom_op("replayssm::mamba2_step", mutates_args=("out", "cache_state"))
def _mamba2_step(handle: int, verify: bool, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor,
                 B: torch.Tensor, C: torch.Tensor, D: Optional[torch.Tensor], z: Optional[torch.Tensor],
                 dt_bias: Optional[torch.Tensor], dt_softplus: bool,
                 state_batch_indices: Optional[torch.Tensor], pad_slot_id: int, out: torch.Tensor,
                 cache_state: List[torch.Tensor], backend: str) -> None:
    from . import ops
    fn = ops.mamba2_verify if verify else ops.mamba2_decode
    fn(_cache(handle, cache_state), x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices, pad_slot_id,
       out, backend, _eager=True)


@_mamba2_step.register_fake
def _(handle, verify, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices, pad_slot_id,
      out, cache_state, backend):
    return None


@torch.library.custom_op("replayssm::gdn_step", mutates_args=("out", "cache_state"))
def _gdn_step(handle: int, verify: bool, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              g: Optional[torch.Tensor], beta: Optional[torch.Tensor], A_log: Optional[torch.Tensor],
              a: Optional[torch.Tensor], dt_bias: Optional[torch.Tensor], b: Optional[torch.Tensor],
              scale: Optional[float], use_qk_l2norm_in_kernel: bool,
              state_batch_indices: Optional[torch.Tensor], pad_slot_id: int, out: torch.Tensor,
              cache_state: List[torch.Tensor], backend: str) -> None:
    from . import ops
    fn = ops.gdn_verify if verify else ops.gdn_decode
    fn(_cache(handle, cache_state), q, k, v, g, beta, A_log=A_log, a=a, dt_bias=dt_bias, b=b, scale=scale,
       use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel, state_batch_indices=state_batch_indices,
       pad_slot_id=pad_slot_id, out=out, backend=backend, _eager=True)


@_gdn_step.register_fake
def _(handle, verify, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_qk_l2norm_in_kernel,
      state_batch_indices, pad_slot_id, out, cache_state, backend):
    return None


@torch.library.custom_op("replayssm::commit", mutates_args=("cache_state",))
def _commit(handle: int, num_accepted_tokens: torch.Tensor, state_batch_indices: Optional[torch.Tensor],
            pad_slot_id: int, cache_state: List[torch.Tensor], backend: str) -> None:
    from . import ops
    ops.commit(_cache(handle, cache_state), num_accepted_tokens, state_batch_indices, pad_slot_id, backend,
               _eager=True)


@_commit.register_fake
def _(handle, num_accepted_tokens, state_batch_indices, pad_slot_id, cache_state, backend):
    return None


@torch.library.custom_op("replayssm::mamba2_standard_decode", mutates_args=("state", "out"))
def _m2_std(state: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
            C: torch.Tensor, D: Optional[torch.Tensor], z: Optional[torch.Tensor],
            dt_bias: Optional[torch.Tensor], dt_softplus: bool,
            state_batch_indices: Optional[torch.Tensor], pad_slot_id: int, out: torch.Tensor,
            backend: str) -> None:
    from . import ops
    ops.mamba2_standard_decode(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices,
                               pad_slot_id, out, backend, _eager=True)


@_m2_std.register_fake
def _(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices, pad_slot_id, out, backend):
    return None


@torch.library.custom_op("replayssm::gdn_standard_decode", mutates_args=("state", "out"))
def _gdn_std(state: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
             g: Optional[torch.Tensor], beta: Optional[torch.Tensor], A_log: Optional[torch.Tensor],
             a: Optional[torch.Tensor], dt_bias: Optional[torch.Tensor], b: Optional[torch.Tensor],
             scale: Optional[float], use_qk_l2norm_in_kernel: bool,
             state_batch_indices: Optional[torch.Tensor], pad_slot_id: int, out: torch.Tensor,
             state_layout: str, backend: str) -> None:
    from . import ops
    ops.gdn_standard_decode(state, q, k, v, g, beta, A_log=A_log, a=a, dt_bias=dt_bias, b=b,
                            scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                            state_batch_indices=state_batch_indices, pad_slot_id=pad_slot_id,
                            out=out, state_layout=state_layout, backend=backend, _eager=True)


@_gdn_std.register_fake
def _(state, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_qk_l2norm_in_kernel,
      state_batch_indices, pad_slot_id, out, state_layout, backend):
    return None


@torch.library.custom_op("replayssm::mamba2_snapshot_verify", mutates_args=("state", "out"))
def _m2_snap(state: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor,
             B: torch.Tensor, C: torch.Tensor, D: Optional[torch.Tensor], z: Optional[torch.Tensor],
             dt_bias: Optional[torch.Tensor], dt_softplus: bool,
             state_indices: Optional[torch.Tensor], num_accepted_tokens: Optional[torch.Tensor],
             pad_slot_id: int, out: torch.Tensor, backend: str) -> None:
    from . import snapshot
    snapshot.mamba2_snapshot_verify(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_indices,
                                    pad_slot_id, out, backend,
                                    num_accepted_tokens=num_accepted_tokens, _eager=True)


@_m2_snap.register_fake
def _(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_indices, num_accepted_tokens,
      pad_slot_id, out, backend):
    return None


@torch.library.custom_op("replayssm::gdn_snapshot_verify", mutates_args=("state", "out"))
def _gdn_snap(state: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              g: Optional[torch.Tensor], beta: Optional[torch.Tensor], A_log: Optional[torch.Tensor],
              a: Optional[torch.Tensor], dt_bias: Optional[torch.Tensor], b: Optional[torch.Tensor],
              scale: Optional[float], use_qk_l2norm_in_kernel: bool,
              state_indices: Optional[torch.Tensor], num_accepted_tokens: Optional[torch.Tensor],
              pad_slot_id: int, out: torch.Tensor, state_layout: str, backend: str) -> None:
    from . import snapshot
    snapshot.gdn_snapshot_verify(state, q, k, v, g, beta, A_log=A_log, a=a, dt_bias=dt_bias, b=b,
                                 scale=scale, use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                                 state_indices=state_indices,
                                 num_accepted_tokens=num_accepted_tokens, pad_slot_id=pad_slot_id,
                                 out=out, state_layout=state_layout, backend=backend, _eager=True)


@_gdn_snap.register_fake
def _(state, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_qk_l2norm_in_kernel, state_indices,
      num_accepted_tokens, pad_slot_id, out, state_layout, backend):
    return None
