"""CuTe implementations of the ops, registered with :mod:`replayssm_lp.backends`.

Imported lazily (first op on a CUDA tensor), so importing :mod:`replayssm_lp` never needs
cutlass. Each implementation receives validated arguments (see :mod:`replayssm_lp.ops`), makes the
small per-token inputs contiguous (a no-op in the usual case), and launches one kernel on the
current torch stream: no allocation (given ``out``), no host sync, CUDA-graph capturable once the
kernel variant has been compiled (first call).
"""
from __future__ import annotations

import importlib

import torch

from ._validate import cache_plan
from .backends import register_cute


def _c(t):
    return t if t is None or t.is_contiguous() else t.contiguous()


_MODULES: dict = {}


def _module(name):
    m = _MODULES.get(name)
    if m is None:
        m = _MODULES[name] = importlib.import_module(f"cute_kernels.{name}")
    return m


def _contig_cache(cache) -> bool:
    """Every tensor of the cache contiguous (memoised on the cache's plan: re-checked whenever a
    cache tensor is replaced)."""
    memo = cache_plan(cache).memo
    ok = memo.get("contig")
    if ok is None:
        ts = [cache.hi.data, cache.write_pos] + list(cache._buffers())
        if cache.lo is not None:
            ts.append(cache.lo.data)
        ok = memo["contig"] = all(t.is_contiguous() for t in ts)
    return ok


def _fast(module):
    """Mark an implementation whose launcher module ``cute_kernels.<module>`` offers
    ``make_launch`` (the kernel call for one validated call signature, see e.g.
    :func:`cute_kernels.mamba2_replay.make_launch`) and ``_ENV_NAMES`` (the environment variables
    its launch decisions read): the ops' fast path, which has checked every input (contiguous,
    exact shapes and dtypes), memoises that launch per signature and calls it directly
    (``impl.fast()`` returns ``(make_launch, env_names)``)."""
    def deco(impl):
        def fast():
            m = _module(module)
            return m.make_launch, tuple(getattr(m, "_ENV_NAMES", ()))
        impl.fast = fast
        return impl
    return deco


_HAS: dict = {}


def _has(name) -> bool:
    ok = _HAS.get(name)
    if ok is not None:
        return ok
    try:
        _module(name)
        ok = True
    except ModuleNotFoundError as e:
        if e.name != f"cute_kernels.{name}":
            raise
        ok = False
    _HAS[name] = ok
    return ok


# ---------------------------------------------------------------------------------------------
# commit: a pointer move
# ---------------------------------------------------------------------------------------------
@register_cute("commit")
@_fast("replay_commit")
def _commit(cache, num_accepted_tokens, state_batch_indices, pad_slot_id):
    _module("replay_commit").replay_commit_cute(cache.write_pos, cache.pending, _c(num_accepted_tokens),
                                                _c(state_batch_indices), pad_slot_id)


# ---------------------------------------------------------------------------------------------
# Mamba-2
# ---------------------------------------------------------------------------------------------
def _std_ok(state):
    return state.is_contiguous() and state.shape[-1] % 8 == 0 and _has("mamba2_standard")


@register_cute("mamba2_standard_decode", supports=_std_ok)
@_fast("mamba2_standard")
def _mamba2_standard(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, sbi, pad_slot_id, out):
    return _module("mamba2_standard").mamba2_standard_decode_cute(
        state, _c(x), _c(dt), _c(A), _c(B), _c(C), _c(D), _c(z), _c(dt_bias), dt_softplus, _c(sbi),
        pad_slot_id, out)


def _m2_replay_ok(cache):
    return _contig_cache(cache) and cache.dstate % 32 == 0 and _has("mamba2_replay")


@register_cute("mamba2_decode", supports=_m2_replay_ok)
@_fast("mamba2_replay")
def _mamba2_decode(cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus, sbi, pad_slot_id, out):
    return _module("mamba2_replay").mamba2_replay_decode_cute(
        cache, _c(x), _c(dt), _c(A), _c(B), _c(C), _c(D), _c(z), _c(dt_bias), dt_softplus, _c(sbi),
        pad_slot_id, out)


# ---------------------------------------------------------------------------------------------
# GDN
# ---------------------------------------------------------------------------------------------
def _gdn_std_ok(state):
    if not (state.is_contiguous() and _has("gdn_standard")):
        return False
    m = _module("gdn_standard")
    V, K = state.shape[2:]
    # the layout is only known at call time: require both orientations to have a tiling
    return m.supports(state.dtype, "vk", K, V) and m.supports(state.dtype, "kv", V, K)


@register_cute("gdn_standard_decode", supports=_gdn_std_ok)
@_fast("gdn_standard")
def _gdn_standard(state, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_l2, sbi, pad_slot_id,
                  out, layout):
    return _module("gdn_standard").gdn_standard_decode_cute(
        state, _c(q), _c(k), _c(v), _c(g), _c(beta), _c(A_log), _c(a), _c(dt_bias), _c(b), scale,
        use_l2, _c(sbi), pad_slot_id, out, layout)


def _gdn_replay_ok(cache):
    return _contig_cache(cache) and _has("gdn_replay") and _module("gdn_replay").supports_cache(cache)


@register_cute("gdn_decode", supports=_gdn_replay_ok)
@_fast("gdn_replay")
def _gdn_decode(cache, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_l2, sbi, pad_slot_id, out):
    return _module("gdn_replay").gdn_replay_decode_cute(
        cache, _c(q), _c(k), _c(v), _c(g), _c(beta), _c(A_log), _c(a), _c(dt_bias), _c(b), scale,
        use_l2, _c(sbi), pad_slot_id, out)


# ---------------------------------------------------------------------------------------------
# speculative verify: T drafts appended, cursors left pending until commit
# ---------------------------------------------------------------------------------------------
def _m2_verify_ok(cache):
    return (_contig_cache(cache) and _has("mamba2_verify")
            and _module("mamba2_verify").supports_cache(cache))


@register_cute("mamba2_verify", supports=_m2_verify_ok)
@_fast("mamba2_verify")
def _mamba2_verify(cache, x, dt, A, B, C, D, z, dt_bias, dt_softplus, sbi, pad_slot_id, out):
    return _module("mamba2_verify").mamba2_verify_cute(
        cache, _c(x), _c(dt), _c(A), _c(B), _c(C), _c(D), _c(z), _c(dt_bias), dt_softplus, _c(sbi),
        pad_slot_id, out)


def _gdn_verify_ok(cache):
    # the kernel covers K = 128, L <= 32, max_draft <= min(L, 8); other caches run the reference
    return (_contig_cache(cache) and _has("gdn_verify")
            and _module("gdn_verify").supports_cache(cache))


@register_cute("gdn_verify", supports=_gdn_verify_ok)
@_fast("gdn_verify")
def _gdn_verify(cache, q, k, v, g, beta, A_log, a, dt_bias, b, scale, use_l2, sbi, pad_slot_id, out):
    return _module("gdn_verify").gdn_verify_cute(
        cache, _c(q), _c(k), _c(v), _c(g), _c(beta), _c(A_log), _c(a), _c(dt_bias), _c(b), scale,
        use_l2, _c(sbi), pad_slot_id, out)
