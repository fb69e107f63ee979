"""Argument checks shared by the ops: every problem is raised before any work, naming the argument
and what was expected. Nothing here synchronises with the device."""
from __future__ import annotations

import math as _math
import os as _os
import weakref as _weakref
from typing import Optional, Sequence

import torch

BACKENDS = ("auto", "torch", "cute")


def _given(name, t, optional) -> bool:
    """False for an omitted optional argument; raises for a missing required one or a non-tensor."""
    if t is None:
        if optional:
            return False
        raise ValueError(f"{name} is required")
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return True


def tensor(name, t, shape: Sequence[Optional[int]], dtypes=None, device=None, optional=False):
    """Check ``t`` is a tensor of ``shape`` (None = any size) with a dtype in ``dtypes``."""
    if not _given(name, t, optional):
        return None
    if t.dim() != len(shape) or any(s is not None and s != d for s, d in zip(shape, t.shape)):
        exp = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"{name} must have shape {exp}, got {list(t.shape)}")
    if dtypes is not None:
        dts = dtypes if isinstance(dtypes, (tuple, list)) else (dtypes,)
        if t.dtype not in dts:
            raise TypeError(f"{name} must have dtype {' or '.join(str(d) for d in dts)}, got {t.dtype}")
    if device is not None and t.device != device:
        raise ValueError(f"{name} must be on {device}, got {t.device}")
    return t


def untie_dt(dt, lead_rank, headdim, lead_name):
    """vLLM's tied ``dt`` [*lead, H, P] (stride 0 on headdim): its [*lead, H] view; any other
    ``dt`` as given (its own checks follow). ``lead_name`` names the leading dims in the message."""
    if isinstance(dt, torch.Tensor) and dt.dim() == lead_rank + 2:
        if dt.stride(-1) != 0 or dt.shape[-1] != headdim:
            raise ValueError(f"dt given as [{lead_name}, nheads, headdim] must be a tied view "
                             f"(stride 0 on headdim, size {headdim}) of a per-head "
                             f"[{lead_name}, nheads] dt, as vLLM passes it -- Mamba-2 has one dt "
                             f"per head; got size {dt.shape[-1]}, stride {dt.stride(-1)}")
        return dt[..., 0]
    return dt


def flag(name, v) -> bool:
    """A switch argument (``dt_softplus``, ``use_qk_l2norm_in_kernel``): True / False, also
    numpy's bool and the ints 0 / 1; anything else -- a string such as ``"no"``, None, a
    tensor -- raises a TypeError naming ``name`` (truthiness would take ``"no"`` as True)."""
    if v.__class__ is bool:
        return v
    if ((isinstance(v, int) and v in (0, 1))
            or (type(v).__module__ == "numpy" and type(v).__name__ in ("bool", "bool_"))):
        return bool(v)
    raise TypeError(f"{name} must be a bool (True / False), got {v!r} ({type(v).__name__})")


def per_head(name, t, nheads, device, optional=False, trailing=0):
    """A per-head scalar given as [H], or as a vLLM-style expanded view [H, ...] whose trailing
    dims have stride 0 (TIE_HDIM). Returns the [H] view."""
    if not _given(name, t, optional):
        return None
    if t.device != device:
        raise ValueError(f"{name} must be on {device}, got {t.device}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got {t.dtype}")
    if (t.dim() >= 1 and t.shape[0] == nheads and all(s == 0 for s in t.stride()[1:])
            and all(n >= 1 for n in t.shape[1:])):
        return t[(slice(None),) + (0,) * (t.dim() - 1)]
    raise ValueError(f"{name} must have shape [{nheads}] (or [{nheads}, ...] with stride-0 trailing "
                     f"dims), got {list(t.shape)} with strides {list(t.stride())}")


def output(name, t, shape, dtype, device):
    """An ``out`` argument: zeros of ``shape`` / ``dtype`` when None, else checked."""
    if t is None:
        return torch.zeros(shape, dtype=dtype, device=device)
    tensor(name, t, shape, (dtype,), device)
    no_overlap(name, t)
    return t


def no_overlap(name, t):
    """A tensor an op writes must not have elements that share memory (an ``expand``-ed view, a
    stride-0 dim, an ``as_strided`` / ``unfold`` view whose rows overlap): its rows would
    overwrite each other -- and, for a state pool, unowned slots."""
    flag = torch._debug_has_internal_overlap(t)     # 0 no, 1 yes, 2 torch cannot tell
    if flag == 1 or (flag == 2 and _strides_overlap(t.shape, t.stride())):
        raise ValueError(f"{name} is written by this op, so its elements must not share memory "
                         f"(got strides {list(t.stride())} for shape {list(t.shape)})")


def _strides_overlap(shape, stride) -> bool:
    """Whether two indices of a strided layout reach one element. Sufficient test first: with the
    dims of size > 1 sorted by stride, each stride passes the span of the dims inside it (a
    non-dense slice such as ``[..., ::2]`` passes); layouts it cannot clear (interleaved strides)
    are decided exactly from their offsets, up to 2^24 elements (beyond that: refused)."""
    dims = sorted((st, n) for n, st in zip(shape, stride) if n > 1)
    span = 0
    for st, n in dims:
        if st <= span:
            break
        span += (n - 1) * st
    else:
        return False
    numel = 1
    for n in shape:
        numel *= n
    if numel > 1 << 24:
        return True
    off = torch.zeros((), dtype=torch.int64)
    for n, st in zip(shape, stride):
        off = off[..., None] + torch.arange(n, dtype=torch.int64) * st
    return off.unique().numel() != numel


def indices(name, t, batch, device, num_slots=None, pad_slot_id=-1):
    if t is None:
        if num_slots is not None and batch > num_slots:
            raise ValueError(f"{name}=None maps row i to slot i, but batch {batch} > num_slots "
                             f"{num_slots}")
        return None
    tensor(name, t, (batch,), (torch.int32,), device)
    if device.type == "cpu" and num_slots is not None and t.numel():
        bad = (t >= num_slots) | ((t < 0) & (t != pad_slot_id))
        if bool(bad.any()):
            raise ValueError(f"{name} must hold slots in [0, {num_slots}) or the pad id, got "
                             f"{t[bad].tolist()[:8]}")
        distinct_slots(name, t, pad_slot_id)
    return t


def distinct_slots(name, t, pad_slot_id):
    """CPU ``t`` (slot per row, or per row and draft): no slot twice except the pad id. Two rows
    on one slot would both update it (a race in the kernels); on CUDA tensors that is the
    caller's contract, as in vLLM (checking it there would need a host sync)."""
    uniq, counts = t[t != pad_slot_id].unique(return_counts=True)
    if bool((counts > 1).any()):
        dup = int(uniq[counts > 1][0])
        where = (t == dup).nonzero().tolist()
        where = [w[0] for w in where] if t.dim() == 1 else where
        raise ValueError(f"{name} must give each row its own slot, but slot {dup} is at "
                         f"{'rows' if t.dim() == 1 else 'entries'} {where[:8]}")


def gdn_state(state, layout):
    """A standard GDN state ``[num_slots, HV, V, K]`` (``layout="vk"``) or ``[num_slots, HV, K, V]``
    (``"kv"``), fp32/fp16/bf16: (num_slots, HV, V, K)."""
    tensor("state", state, (None, None, None, None), (torch.float32, torch.float16, torch.bfloat16))
    no_overlap("state", state)
    if layout not in ("vk", "kv"):
        raise ValueError(f"state_layout must be 'vk' or 'kv', got {layout!r}")
    slots_n, HV = state.shape[:2]
    Vd, K = state.shape[2:] if layout == "vk" else state.shape[2:][::-1]
    return slots_n, HV, Vd, K


def gdn_gates(g, beta, A_log, a, dt_bias, b, lead, nv, device, dtypes, lead_name="batch"):
    """The gate arguments of a GDN op: either ``g`` [*lead, HV] (log decay) or the raw inputs
    ``A_log`` [HV], ``a`` [*lead, HV], ``dt_bias`` [HV] (optional); either ``beta`` [*lead, HV] or
    the raw ``b`` [*lead, HV]. ``lead_name`` names the leading dims in the messages."""
    if g is not None:
        if A_log is not None or a is not None or dt_bias is not None:
            raise ValueError("give either g (log decay) or the raw gate inputs A_log, a, dt_bias, not both")
        tensor("g", g, lead + (nv,), dtypes, device)
    else:
        if A_log is None or a is None:
            raise ValueError(f"g is None: the raw gate inputs A_log [HV] and a [{lead_name}, HV] are "
                             f"required")
        tensor("A_log", A_log, (nv,), dtypes, device)
        tensor("a", a, lead + (nv,), dtypes, device)
        tensor("dt_bias", dt_bias, (nv,), dtypes, device, optional=True)
    if beta is not None:
        if b is not None:
            raise ValueError("give either beta or the raw b, not both")
        tensor("beta", beta, lead + (nv,), dtypes, device)
    else:
        if b is None:
            raise ValueError(f"beta is None: the raw b [{lead_name}, HV] is required")
        tensor("b", b, lead + (nv,), dtypes, device)


def scale_ok(scale) -> bool:
    """``scale`` (GDN's query scale): None (K^-1/2) or a finite real number, not a bool."""
    return scale is None or (isinstance(scale, (int, float)) and not isinstance(scale, bool)
                             and _math.isfinite(scale))


def scale(value):
    if not scale_ok(value):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            raise ValueError(f"scale must be finite, got {value}")
        raise TypeError(f"scale must be a float or None, got {type(value).__name__}")
    return value


def compiled_flag(name, value, pad_slot_id):
    """On the torch.compile path, before tracing into an op's custom op (which validates its
    tensors when it runs): its switch as a bool, and its pad_slot_id, which the schema's int
    would take from a NumPy int too."""
    pad_slot(pad_slot_id)
    return flag(name, value)


def compiled_scale(value):
    """``scale`` on the torch.compile path, where the custom op's schema takes a Python float
    (dynamo traces a NumPy float as a tensor, so eager's isinstance check cannot run there): no
    bool or string made into one; the op checks the float it gets (finite) when it runs."""
    if value is None:
        return None
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(f"scale must be a float or None, got {type(value).__name__}")
    return float(value)


def draft_count(name, T, max_draft):
    """A verify's ``T`` draft tokens (``name``: the input that carries them; None: a decode):
    1 .. max(max_draft, 1), what the cache's ring holds."""
    if T is not None and not (1 <= T <= max(max_draft, 1)):
        raise ValueError(f"{name} has T={T} draft tokens but the cache holds at most "
                         f"{max(max_draft, 1)} (max_draft={max_draft})")


def backend(name):
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    return name


def pad_slot(pad_slot_id):
    if isinstance(pad_slot_id, bool) or not isinstance(pad_slot_id, int) or pad_slot_id >= 0:
        raise ValueError(f"pad_slot_id must be a negative int (a Python int), got {pad_slot_id!r} "
                         f"({type(pad_slot_id).__name__})")
    return pad_slot_id


# ------------------------------------------------------------------------------------------------
# Host fast path helpers (``python -m bench.host_overhead`` measures them): cheap environment reads
# and per-cache launch plans. Nothing here weakens a check: a plan only memoises facts derived from
# a cache's own tensors, and it is dropped as soon as any of them is replaced.
# ------------------------------------------------------------------------------------------------
_ENV_DATA = getattr(_os.environ, "_data", None) if _os.name == "posix" else None
_ENV_KEYS: dict = {}


def getenv(name: str, default=None):
    """``os.environ.get(name, default)`` at dict-lookup cost (os.environ.get costs ~0.7 µs)."""
    data = getattr(_os.environ, "_data", None)
    if data is None or data is not _ENV_DATA:
        return _os.environ.get(name, default)
    k = _ENV_KEYS.get(name)
    if k is None:
        k = _ENV_KEYS[name] = _os.fsencode(name)
    v = data.get(k)
    return default if v is None else _os.fsdecode(v)


_ENV_TUPLES: dict = {}


def env_fingerprint(names: tuple) -> tuple:
    """The raw values of the environment variables ``names`` (a tuple), for cache keys of
    launch decisions that read them (``None`` for an unset variable); see :func:`env_reader`."""
    r = _ENV_TUPLES.get(names)
    if r is None:
        r = _ENV_TUPLES[names] = env_reader(names)
    return r()


def env_reader(names) -> "callable":
    """``read()`` -> the raw values of the environment variables ``names`` as a tuple (bytes on
    POSIX, ``None`` for an unset variable): the same values ``os.environ`` holds at the call, at
    ~25 ns per name (a generated function of unrolled ``dict.get`` calls on ``os.environ``'s
    backing dict; ``tuple(map(...))`` costs twice as much). Falls back to ``os.environ.get`` (str
    values) when ``os.environ`` is not the startup mapping (e.g. monkeypatched). Only compare
    fingerprints with each other: a value's type may differ between the two paths."""
    names = tuple(names)
    if _ENV_DATA is None:
        return lambda: tuple(_os.environ.get(n) for n in names)
    ns = {"_os": _os, "_data0": _ENV_DATA, "_names": names}
    ns.update((f"_k{i}", _os.fsencode(n)) for i, n in enumerate(names))
    gets = "".join(f"g(_k{i}), " for i in range(len(names)))
    src = ("def read():\n"
           "    data = getattr(_os.environ, '_data', None)\n"
           "    if data is not _data0:\n"
           "        return tuple(_os.environ.get(n) for n in _names)\n"
           "    g = data.get\n"
           f"    return ({gets})\n")
    exec(compile(src, f"<env_reader {names}>", "exec"), ns)  # noqa: S102  (no user text in src)
    return ns["read"]


def env_is_one(v) -> bool:
    """A raw value of :func:`env_reader` equals ``"1"`` (the value of a set boolean switch)."""
    return v is not None and (v == b"1" or v == "1")


_PLAN_ATTR = "_replayssm_plan"
#: bumped by :func:`clear_plans`: plans of an older generation are rebuilt
_GEN = [0]


def _no_plan():
    return None


class CachePlan:
    """Host-side facts about one replay cache, valid while the cache holds the same tensor objects.

    Stored on the cache itself (attribute ``_replayssm_plan``; copies and pickles of the cache
    drop it), so it lives and dies with the cache. ``memo`` is a free dict for consumers (backend
    decisions, kernel-ready views of the stored copies, ...). Validity is checked per call by
    comparing the cache's attribute dicts (and those of its ``hi`` / ``lo`` copies) against
    snapshots taken at construction: identical objects compare equal without touching the data,
    so a replaced attribute (a reallocated tensor, a different dtype, a swapped EncodedState)
    invalidates the plan. One loophole of ``==``: a one-element tensor replaced by an equal-valued
    one on the same device compares equal, so consumers must not memoise the tensors themselves
    -- the launchers read cursors, seed and ring buffers from the cache on every call -- and
    memoised *views* of the stored copies are guarded by their data pointers as well (``ptrs``;
    also catches in-place ``set_``/``resize_``). After replacing a cache tensor, make one eager
    call before capturing a CUDA graph (the first comparison of a replaced tensor is
    elementwise)."""

    __slots__ = ("ref", "gen", "snap", "hsnap", "lsnap", "memo", "ptrs", "__weakref__")

    def __init__(self, cache):
        check_index_range(cache)
        self.ref = _weakref.ref(cache)
        self.gen = _GEN[0]
        self.memo: dict = {}
        cache.__dict__[_PLAN_ATTR] = self
        self.snap = dict(cache.__dict__)
        # compares equal to this plan without a reference cycle (a cache must be freed by
        # reference counting, not wait for the cyclic GC, to release its device memory at once)
        self.snap[_PLAN_ATTR] = _weakref.proxy(self)
        hi, lo = cache.hi, cache.lo
        self.hsnap = dict(hi.__dict__)
        self.lsnap = None if lo is None else dict(lo.__dict__)
        # data pointers of the stored copies (views of them are memoised): an in-place storage
        # swap (``set_``/``resize_``) keeps the tensor object but must drop the views too
        self.ptrs = _copy_ptrs(hi, lo)

    def valid(self, cache) -> bool:
        return _fresh(self, cache)

    # a copy of a cache is another cache: it builds its own plan
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return None

    def __reduce__(self):
        return (_no_plan, ())


#: the CuTe kernels form element (or 32-bit word) offsets into a cache tensor in 32-bit integers
MAX_KERNEL_ELEMENTS = 2**31 - 1


def check_index_range(cache) -> None:
    """Raise when a tensor of ``cache`` (its own, or its stored copies') has more elements than
    the CuTe kernels' 32-bit offsets reach (:data:`MAX_KERNEL_ELEMENTS`): a larger pool would be
    addressed modulo 2^32, i.e. read and written at the wrong slots. Split such a pool."""
    owners = [("cache", cache.__dict__), ("cache.hi", cache.hi.__dict__)]
    if cache.lo is not None:
        owners.append(("cache.lo", cache.lo.__dict__))
    for owner, attrs in owners:
        for name, t in attrs.items():
            if isinstance(t, torch.Tensor) and t.numel() > MAX_KERNEL_ELEMENTS:
                raise ValueError(
                    f"{owner}.{name} has {t.numel()} elements; the CuTe kernels address at most "
                    f"{MAX_KERNEL_ELEMENTS} per tensor (32-bit offsets): give the cache fewer "
                    f"slots (num_slots)")


def _copy_ptrs(hi, lo):
    hs = hi.scale
    p = (hi.data.data_ptr(), 0 if hs is None else hs.data_ptr())
    if lo is None:
        return p
    ls = lo.scale
    return p + (lo.data.data_ptr(), 0 if ls is None else ls.data_ptr())


def _fresh(p, cache) -> bool:
    """``p`` (a :class:`CachePlan`) is ``cache``'s plan and still valid: same generation, the
    cache's and its stored copies' attribute dicts equal to the snapshots (identical objects:
    no data is touched), the stored copies' data pointers unchanged (:func:`_copy_ptrs`,
    unrolled). ~0.8 µs; the ops' fast path pays it once per call."""
    try:
        if p.ref() is not cache or p.gen != _GEN[0] or cache.__dict__ != p.snap:
            return False
        hi, lo = cache.hi, cache.lo
        if hi.__dict__ != p.hsnap:
            return False
        ptrs, hs = p.ptrs, hi.scale
        if hi.data.data_ptr() != ptrs[0] or (hs is not None and hs.data_ptr() != ptrs[1]):
            return False
        if lo is None:
            return p.lsnap is None
        if p.lsnap is None or lo.__dict__ != p.lsnap:
            return False
        ls = lo.scale
        return lo.data.data_ptr() == ptrs[2] and (ls is None or ls.data_ptr() == ptrs[3])
    except Exception:  # noqa: BLE001  (a replaced tensor compared elementwise: not the same)
        return False


#: memo of the ops' fast path for ops without a cache: (op, backend, state dtype / shape /
#: contiguity / device) -> (make_launch, env reader, launches) or None
STD_MEMO: dict = {}


def cache_plan(cache) -> CachePlan:
    """The current :class:`CachePlan` of ``cache`` (rebuilt when the cache's tensors changed)."""
    p = cache.__dict__.get(_PLAN_ATTR)
    if p is not None and _fresh(p, cache):
        return p
    return CachePlan(cache)


def plan_entry(cache, key, make):
    """(memo of the cache's current plan, ``memo[key]``: ``make(cache, *key)`` on first use) --
    :func:`cache_plan` and the memo lookup in one call (the ops' fast path)."""
    p = cache.__dict__.get(_PLAN_ATTR)
    if p is None or not _fresh(p, cache):
        p = CachePlan(cache)
    memo = p.memo
    ent = memo.get(key, memo)
    if ent is memo:
        gen = _GEN[0]
        ent = memo[key] = make(cache, *key)
        if _GEN[0] != gen:
            # the kernels registered while ``make`` decided (a process's first CuTe call): that
            # outdated this plan, so decide again on a fresh one instead of rebuilding next call
            p = CachePlan(cache)
            memo = p.memo
            ent = memo[key] = make(cache, *key)
    return memo, ent


def clear_plans() -> None:
    """Forget every cache plan (after a backend registration or an environment change)."""
    _GEN[0] += 1
    STD_MEMO.clear()
