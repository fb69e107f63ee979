"""Replay caches: everything a ReplaySSM decode step needs, as device tensors.

A cache is a pool of ``num_slots`` sequences (rows of a batch address them through
``state_batch_indices``). Per slot it holds

* the **recurrence checkpoint** ``hi`` (format ``pair.rec_fmt``) and its scales,
* the **read copy** ``lo`` (format ``pair.read_fmt``) and its scales — ``None`` for shared pairs,
  where ``hi`` plays both roles,
* a **ring buffer** of the inputs since the checkpoint, capacity
  ``R = max(buffer_len, max_draft) + max(max_draft, 1)`` (= L + T when T <= L), logical entry ``j`` at
  physical index ``(ring_origin + j) % R``; a step's new entries never land on a committed entry
  that the same step's flush still reads, so kernels need no ordering between the fold and the append,
* **cursors** (int32 ``[num_slots]``): ``write_pos`` (entries held since the checkpoint, h),
  ``ring_origin``, ``flush_count`` (writes of the checkpoint so far; the SR generation counter),
  ``pending`` (drafts appended by the last verify and not yet committed), and ``arrive``, a kernel
  scratch counter (0 between launches) that lets the last CTA of a row move the cursors,
* ``row_order`` (int32 ``[2, num_slots]``), kernel scratch: the flush-first order of a launch's
  rows (row, slot), written by ``cute_kernels.row_order`` right before the step that reads it;
  a view of ``row_order_ext`` (``[5, num_slots]``: with the rows' cursors, for the kernels that
  take them from the order: the Mamba-2 decode, ``REPLAYSSM_M2_ORDER_CURSORS``),
* the SR ``seed`` (int64 ``[1]``) and ``philox_rounds`` (a Python int, 10 by default: the rounds
  of the Philox generator of the SR words, baked into the kernels; ``formats`` module docstring).

Nothing a step needs lives on the host, so a decode loop captures in a CUDA graph.

Mamba-2 (state ``[P, N]`` per head): ``x_buf [S, H, R, P]`` (activation dtype), ``B_buf [S, G, R, N]``
(activation dtype), ``dt_buf [S, H, R]`` fp32 (post-softplus dt'), ``dA_buf [S, H, R]`` fp32 (log decay
A·dt', so folding and ``materialize`` need no A).

GDN (state ``[V, K]`` per value head, K-last): ``k_buf [S, H, R, K]`` raw k (activation dtype),
``kinv_buf [S, H, R]`` fp32 (the l2-norm factor, 1 when q/k are not normalised in kernel),
``g_buf [S, HV, R]`` fp32 log decay, ``u_buf [S, HV, R, V]`` fp32 (the delta-rule update
u = β(v − α S k), fp32 so the fp32 pair's recurrence sees no extra rounding); split pairs also keep
``v_buf [S, HV, R, V]`` raw v (activation dtype) and ``beta_buf [S, HV, R]`` fp32, because their
flush recomputes u from the hi checkpoint (the u in ``u_buf`` came from the read copy).
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Optional

import torch

from . import formats as F
from . import _validate as V
from .pairs import PrecisionPair, parse_pair

__all__ = ["Mamba2ReplayCache", "GDNReplayCache", "ReplayCache"]

_ACT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _check_int(name, v, lo, hi=None) -> int:
    """``v`` as a Python int (numpy's integers too) in ``[lo, hi]``; a bool, float or tensor
    raises (a tensor would sync a CUDA device)."""
    if isinstance(v, (bool, torch.Tensor)) or v.__class__.__name__ == "bool_":
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    try:
        v = operator.index(v)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {type(v).__name__}") from None
    if v < lo or (hi is not None and v > hi):
        rng = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be {rng}, got {v}")
    return v


class _Float8Bytes:
    """A float8 tensor in a pickle: its bytes as a uint8 view and the dtype's name."""

    def __init__(self, data: torch.Tensor, dtype: str):
        self.data, self.dtype = data, dtype

    @staticmethod
    def wrap(t):
        if isinstance(t, torch.Tensor) and t.dtype.is_floating_point and t.element_size() == 1:
            return _Float8Bytes(t.view(torch.uint8), str(t.dtype).removeprefix("torch."))
        return t

    @staticmethod
    def unwrap(t):
        return t.data.view(getattr(torch, t.dtype)) if isinstance(t, _Float8Bytes) else t


def _map_tensors(enc: F.EncodedState, fn) -> F.EncodedState:
    """``enc`` with ``fn`` applied to each of its fields."""
    return dataclasses.replace(enc, **{f.name: fn(getattr(enc, f.name))
                                       for f in dataclasses.fields(enc)})


class ReplayCache:
    """Shared machinery of the Mamba-2 and GDN caches (see module docstring)."""

    kind = "?"

    def _init_common(self, num_slots, nheads_state, rows, cols, precision, buffer_len, max_draft,
                     act_dtype, device, seed, philox_rounds=F.PHILOX_ROUNDS):
        num_slots = _check_int("num_slots", num_slots, 1)
        # (read-only: the kernels a cache's launches memoise bake it in)
        self._philox_rounds = _check_int("philox_rounds", philox_rounds, *F.PHILOX_ROUNDS_RANGE)
        buffer_len = _check_int("buffer_len", buffer_len, 1, 64)
        max_draft = _check_int("max_draft", max_draft, 0, 16)
        if not isinstance(act_dtype, torch.dtype):
            raise TypeError(f"act_dtype must be a torch.dtype (torch.float32, torch.float16 or "
                            f"torch.bfloat16), got {type(act_dtype).__name__} {act_dtype!r}")
        if act_dtype not in _ACT_DTYPES:
            raise ValueError(f"act_dtype must be one of float32/float16/bfloat16, got {act_dtype}")
        self.pair: PrecisionPair = parse_pair(precision)
        if "nvfp4" in (self.pair.read_fmt, self.pair.rec_fmt) and cols % F.NVFP4_BLOCK:
            raise ValueError(f"nvfp4 needs the contiguous state dim to be a multiple of 16, got {cols}")
        self.num_slots, self.rows, self.cols = num_slots, rows, cols
        self.state_heads = nheads_state
        self.buffer_len, self.max_draft = buffer_len, max_draft
        self.ring = max(buffer_len, max_draft) + max(max_draft, 1)
        self.act_dtype = act_dtype
        try:                                                 # 'cuda' -> 'cuda:0', as tensors report
            self.device = torch.empty(0, device=device).device
        except TypeError:
            raise TypeError(f"device must be a torch.device, str or int, got "
                            f"{type(device).__name__}") from None
        except (RuntimeError, AssertionError) as e:          # (no such device / no CUDA build)
            raise ValueError(f"device must be a torch device this machine has, got {device!r}: "
                             f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        dev = self.device
        self.hi = self._alloc_copy(self.pair.rec_fmt)
        self.lo = None if self.pair.shared else self._alloc_copy(self.pair.read_fmt)
        z = lambda: torch.zeros(num_slots, dtype=torch.int32, device=dev)  # noqa: E731
        self.write_pos, self.ring_origin, self.flush_count, self.pending = z(), z(), z(), z()
        self.arrive = z()
        self.row_order_ext = torch.zeros(5, num_slots, dtype=torch.int32, device=dev)
        self.row_order = self.row_order_ext[:2]
        seed = _check_int("seed", seed, -(1 << 63), (1 << 63) - 1)   # (an int64 on the device)
        self.seed = torch.tensor([seed], dtype=torch.int64, device=dev)
        from .library import register_cache
        self._handle = register_cache(self)

    def _alloc_copy(self, fmt) -> F.EncodedState:
        S, H, R, C, dev = self.num_slots, self.state_heads, self.rows, self.cols, self.device
        if fmt == "nvfp4":
            return F.EncodedState(torch.zeros(S, H, R, C // 2, dtype=torch.uint8, device=dev),
                                  torch.zeros(S, H, R, C // F.NVFP4_BLOCK, dtype=torch.float8_e4m3fn,
                                              device=dev),
                                  torch.zeros(S, H, dtype=torch.float32, device=dev))
        data = torch.zeros(S, H, R, C, dtype=F.FORMATS[fmt].storage, device=dev)
        scale = torch.zeros(S, H, R, dtype=torch.float32, device=dev) if fmt == "fp8" else None
        return F.EncodedState(data, scale)

    @property
    def philox_rounds(self) -> int:
        """Rounds of the Philox generator of the SR words (fixed at construction)."""
        return self._philox_rounds

    @property
    def handle(self) -> int:
        """Integer handle of this cache for the torch.library ops (replayssm_lp.library)."""
        return self._handle

    def __deepcopy__(self, memo):
        import copy
        from .library import register_cache
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            setattr(new, k, copy.deepcopy(v, memo))
        new._handle = register_cache(new)  # a copy is a different cache
        return new

    def __getstate__(self):
        """Pickled state: the stored copies' float8 tensors (fp8 values, nvfp4 block scales) go
        as uint8 views of the same bytes (:class:`_Float8Bytes`) -- a plain ``pickle`` of a float8
        tensor does not load back (torch 2.13: ``pickle.loads`` fails in the storage's
        persistent load, "UntypedStorage has no attribute 'dtype'"); ``torch.save``, which
        handles float8, goes through this too."""
        state = dict(self.__dict__)
        for name in ("hi", "lo"):
            if state.get(name) is not None:
                state[name] = _map_tensors(state[name], _Float8Bytes.wrap)
        return state

    def __setstate__(self, state):
        """Unpickled (``pickle`` / ``torch.save`` of a cache or a block holding one): a new cache
        with a handle of its own -- the pickled one named another cache, or none, here."""
        from .library import register_cache
        state.setdefault("_philox_rounds", F.PHILOX_ROUNDS)   # (pickled before the option)
        for name in ("hi", "lo"):
            if state.get(name) is not None:
                state[name] = _map_tensors(state[name], _Float8Bytes.unwrap)
        if state.get("row_order_ext") is not None:
            # a view again (plain pickle stores the two as separate tensors; same values)
            state["row_order"] = state["row_order_ext"][:2]
        self.__dict__.update(state)
        self._handle = register_cache(self)

    # -- the read copy the non-flush steps use
    @property
    def read(self) -> F.EncodedState:
        return self.hi if self.lo is None else self.lo

    def _slots(self, slots) -> torch.Tensor:
        if isinstance(slots, int) and not isinstance(slots, bool):
            slots = [slots]
        if isinstance(slots, (list, tuple)) and any(isinstance(s, bool) for s in slots):
            raise TypeError(f"slots must be integers, got a bool in {list(slots)}")
        try:
            t = torch.as_tensor(slots, device=self.device)
        except (TypeError, ValueError, RuntimeError) as e:
            raise TypeError(f"slots must be an int, a sequence of ints or an integer tensor, got "
                            f"{type(slots).__name__}") from e
        if t.numel() == 0 and not isinstance(slots, torch.Tensor):
            t = t.to(torch.int64)       # ([] is float32 to torch: an empty list is no slots)
        if t.dtype == torch.bool or t.is_floating_point() or t.is_complex():
            raise TypeError(f"slots must be integers, got {t.dtype}")
        t = t.to(torch.int64).reshape(-1)
        if t.numel() and (int(t.min()) < 0 or int(t.max()) >= self.num_slots):
            raise ValueError(f"slots must be in [0, {self.num_slots}), got {t.tolist()}")
        if t.unique().numel() != t.numel():
            raise ValueError("slots must not repeat")
        return t

    # -- writing both copies (init and flush share this): generation = flush_count, then += 1
    # (the cache holds no autograd history: a prefill state that requires grad is read, never
    # linked into the copies -- under no_grad, as every state write here)
    @torch.no_grad()
    def write_state(self, slots: torch.Tensor, S: torch.Tensor, backend: str = "auto") -> None:
        """Encode fp32 ``S [n, H, R, C]`` into hi (rec rounding) and lo (read rounding) for ``slots``,
        using the slots' current ``flush_count`` as SR generation, then bump it. On sm_90+ GPUs
        (``backend="auto"``) the CuTe encoder writes the same bytes as the torch encoder."""
        from .backends import cute_available
        if backend != "torch" and self.device.type == "cuda" and cute_available(self.device):
            from cute_kernels.state_codec import encode_state_cute
            s32 = slots.to(torch.int32).contiguous()
            Sc = S.to(torch.float32).contiguous()
            for enc, fmt, rnd, stream in self._copies():
                encode_state_cute(Sc, s32, self.flush_count, self.seed, fmt, rnd, stream, enc.data,
                                  enc.scale, enc.global_scale, philox_rounds=self.philox_rounds)
            self.flush_count[slots] += 1
            return
        per_slot = self.state_heads * self.rows * self.cols
        chunk = max(1, (1 << 24) // per_slot)  # bound the int64 temporaries of the torch encoder
        for i in range(0, slots.numel(), chunk):
            self._write_chunk(slots[i:i + chunk], S[i:i + chunk])
        self.flush_count[slots] += 1

    def _write_chunk(self, slots, S):
        gen = self.flush_count[slots].to(torch.int64)
        for enc, fmt, rnd, stream in self._copies():
            words = (F.sr_words(self.seed, slots, self.state_heads, self.rows, self.cols, gen, stream,
                                self.philox_rounds) if rnd == "sr" else None)
            new = F.encode(S, fmt, rnd, words)
            enc.data[slots] = new.data
            if enc.scale is not None:
                enc.scale[slots] = new.scale
            if enc.global_scale is not None:
                enc.global_scale[slots] = new.global_scale

    def _copies(self):
        p = self.pair
        yield self.hi, p.rec_fmt, p.rec_rounding, 0
        if self.lo is not None:
            yield self.lo, p.read_fmt, p.read_rounding, 1

    @staticmethod
    def _decode_rows(enc: F.EncodedState, fmt: str, slots: torch.Tensor) -> torch.Tensor:
        sub = F.EncodedState(enc.data[slots],
                             None if enc.scale is None else enc.scale[slots],
                             None if enc.global_scale is None else enc.global_scale[slots])
        return F.decode(sub, fmt)

    def decode_hi(self, slots) -> torch.Tensor:
        return self._decode_rows(self.hi, self.pair.rec_fmt, slots)

    def decode_read(self, slots) -> torch.Tensor:
        fmt = self.pair.rec_fmt if self.lo is None else self.pair.read_fmt
        return self._decode_rows(self.read, fmt, slots)

    # -- public cache management
    @torch.no_grad()
    def reset(self, slots) -> None:
        """Forget ``slots``: zero state, empty buffer, cursors and SR generation back to 0."""
        s = self._slots(slots)
        for enc, _, _, _ in self._copies():
            for t in (enc.data, enc.scale, enc.global_scale):
                if t is not None:
                    t[s] = 0
        for t in self._buffers():
            t[s] = 0
        for c in (self.write_pos, self.ring_origin, self.flush_count, self.pending):
            c[s] = 0

    def init_from_state(self, slots, S: torch.Tensor, layout: str = "default", backend: str = "auto") -> None:
        """Quantize a prefill state ``S [n, heads, R, C]`` (any float dtype) into both copies of
        ``slots`` and empty their buffers (generation 0 for SR)."""
        s = self._slots(slots)
        if not isinstance(S, torch.Tensor):
            raise TypeError(f"S must be a torch.Tensor, got {type(S).__name__}")
        self._require_cute(V.backend(backend), "init_from_state")
        exp = self._layout_shape((s.numel(), self.state_heads, self.rows, self.cols), layout)
        if tuple(S.shape) != exp:
            raise ValueError(f"S must have shape {list(exp)}{self._layout_note(layout)}, got "
                             f"{list(S.shape)}")
        S = self._to_internal(S, layout)
        if not S.is_floating_point():
            raise TypeError(f"S must be a floating tensor, got {S.dtype}")
        S = S.detach().to(device=self.device, dtype=torch.float32)   # (before the slots are reset:
        if any(S.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()   # a failed copy
               for t in self._state_tensors()):                       # leaves them as they were;
            S = S.clone()                                             # S may view the cache itself)
        self.reset(s)
        self.write_state(s, S, backend)

    def _state_tensors(self):
        """Every tensor of the stored copies (data, scales)."""
        return [t for enc, _, _, _ in self._copies()
                for t in (enc.data, enc.scale, enc.global_scale) if t is not None]

    def _require_cute(self, backend, op):
        """``backend="cute"`` where the CuTe encoder cannot run raises, as every op does."""
        if backend == "cute":
            from .backends import cute_unavailable_reason
            reason = cute_unavailable_reason(self.device)
            if reason is not None:
                raise RuntimeError(f"backend='cute' requested for {op}, but {reason}")

    def _layout_shape(self, shape, layout):
        """``shape`` (internal layout) as the caller gives it in ``layout`` (checks ``layout``)."""
        if layout != "default":
            raise ValueError(f"layout must be 'default' (Mamba-2 states are [.., headdim, dstate]), "
                             f"got {layout!r}")
        return tuple(shape)

    def _layout_note(self, layout) -> str:
        return ""

    def _to_internal(self, S, layout):
        self._layout_shape(S.shape, layout)
        return S

    def bytes_per_slot(self) -> int:
        """Device bytes one slot occupies (both copies, scales, ring buffers, cursors)."""
        total = 0
        for enc, _, _, _ in self._copies():
            for t in (enc.data, enc.scale, enc.global_scale):
                if t is not None:
                    total += t[0].numel() * t.element_size()
        for t in self._buffers():
            total += t[0].numel() * t.element_size()
        # the int32 cursors and the row-order scratch (5 per slot each)
        cursors = (self.write_pos, self.ring_origin, self.flush_count, self.pending, self.arrive)
        return total + sum(t.element_size() for t in cursors) + 5 * self.row_order_ext.element_size()

    def __repr__(self):
        return (f"{type(self).__name__}(precision={self.pair.name!r}, num_slots={self.num_slots}, "
                f"heads={self.state_heads}, state=[{self.rows}, {self.cols}], L={self.buffer_len}, "
                f"max_draft={self.max_draft}, act_dtype={self.act_dtype}, device={self.device}"
                + (f", philox_rounds={self.philox_rounds}" if self.philox_rounds != F.PHILOX_ROUNDS
                   else "") + ")")


class Mamba2ReplayCache(ReplayCache):
    """Mamba-2 replay cache. State per (slot, head) is ``[headdim, dstate]``."""

    kind = "mamba2"

    def __init__(self, num_slots: int, nheads: int, headdim: int, dstate: int, ngroups: int = 1, *,
                 precision="fp32", buffer_len: int = 16, max_draft: int = 0,
                 act_dtype: torch.dtype = torch.bfloat16, device="cpu", seed: int = 0,
                 philox_rounds: int = F.PHILOX_ROUNDS):
        nheads, headdim, dstate, ngroups = (_check_int(n, v, 1) for n, v in (
            ("nheads", nheads), ("headdim", headdim), ("dstate", dstate), ("ngroups", ngroups)))
        if nheads % ngroups:
            raise ValueError(f"nheads ({nheads}) must be a multiple of ngroups ({ngroups})")
        self.nheads, self.headdim, self.dstate, self.ngroups = nheads, headdim, dstate, ngroups
        self._init_common(num_slots, nheads, headdim, dstate, precision, buffer_len, max_draft,
                          act_dtype, device, seed, philox_rounds)
        S, R, dev = num_slots, self.ring, self.device
        self.x_buf = torch.zeros(S, nheads, R, headdim, dtype=act_dtype, device=dev)
        self.B_buf = torch.zeros(S, ngroups, R, dstate, dtype=act_dtype, device=dev)
        self.dt_buf = torch.zeros(S, nheads, R, dtype=torch.float32, device=dev)
        self.dA_buf = torch.zeros(S, nheads, R, dtype=torch.float32, device=dev)

    _BUFFERS = ("x_buf", "B_buf", "dt_buf", "dA_buf")

    def _buffers(self):
        return tuple(getattr(self, n) for n in self._BUFFERS)

    def materialize(self, slots) -> torch.Tensor:
        """The current fp32 state ``[n, H, P, N]`` of ``slots`` (checkpoint + committed buffer)."""
        from .reference import mamba2_fold
        s = self._slots(slots)
        return mamba2_fold(self, s, self.write_pos[s].to(torch.int64))


class GDNReplayCache(ReplayCache):
    """Gated DeltaNet replay cache. State per (slot, value head) is ``[V, K]`` (K-last);
    ``init_from_state``/``materialize`` accept/return ``layout="kv"`` (FLA / vLLM ``[.., K, V]``)."""

    kind = "gdn"

    def __init__(self, num_slots: int, num_k_heads: int, num_v_heads: int, head_k_dim: int,
                 head_v_dim: int, *, precision="fp32", buffer_len: int = 16, max_draft: int = 0,
                 act_dtype: torch.dtype = torch.bfloat16, device="cpu", seed: int = 0,
                 philox_rounds: int = F.PHILOX_ROUNDS):
        num_k_heads, num_v_heads, head_k_dim, head_v_dim = (_check_int(n, v, 1) for n, v in (
            ("num_k_heads", num_k_heads), ("num_v_heads", num_v_heads),
            ("head_k_dim", head_k_dim), ("head_v_dim", head_v_dim)))
        if num_v_heads % num_k_heads:
            raise ValueError(f"num_v_heads ({num_v_heads}) must be a multiple of num_k_heads "
                             f"({num_k_heads})")
        self.H, self.HV, self.K, self.V = num_k_heads, num_v_heads, head_k_dim, head_v_dim
        self._init_common(num_slots, num_v_heads, head_v_dim, head_k_dim, precision, buffer_len,
                          max_draft, act_dtype, device, seed, philox_rounds)
        S, R, dev = num_slots, self.ring, self.device
        f32 = torch.float32
        self.k_buf = torch.zeros(S, num_k_heads, R, head_k_dim, dtype=act_dtype, device=dev)
        self.kinv_buf = torch.zeros(S, num_k_heads, R, dtype=f32, device=dev)
        self.g_buf = torch.zeros(S, num_v_heads, R, dtype=f32, device=dev)
        self.u_buf = torch.zeros(S, num_v_heads, R, head_v_dim, dtype=f32, device=dev)
        if self.pair.split:
            self.v_buf = torch.zeros(S, num_v_heads, R, head_v_dim, dtype=act_dtype, device=dev)
            self.beta_buf = torch.zeros(S, num_v_heads, R, dtype=f32, device=dev)
        else:
            self.v_buf = self.beta_buf = None

    _BUFFERS = ("k_buf", "kinv_buf", "g_buf", "u_buf", "v_buf", "beta_buf")

    def _buffers(self):
        return tuple(t for t in (getattr(self, n) for n in self._BUFFERS) if t is not None)

    def _layout_shape(self, shape, layout):
        if layout in ("default", "vk"):
            return tuple(shape)
        if layout == "kv":
            return (*shape[:-2], shape[-1], shape[-2])
        raise ValueError(f"layout must be 'vk' or 'kv', got {layout!r}")

    def _layout_note(self, layout) -> str:
        return (" ([n, HV, K, V] for layout='kv')" if layout == "kv"
                else f" ([n, HV, V, K] for layout={layout!r}; pass layout='kv' for [n, HV, K, V])")

    def _to_internal(self, S, layout):
        self._layout_shape(S.shape, layout)
        return S.transpose(-1, -2) if layout == "kv" else S

    def materialize(self, slots, layout: str = "vk") -> torch.Tensor:
        """The current fp32 state ``[n, HV, V, K]`` (or ``[n, HV, K, V]`` with layout="kv")."""
        from .reference import gdn_fold
        self._layout_shape((0, 0), layout)
        s = self._slots(slots)
        S = gdn_fold(self, s, self.write_pos[s].to(torch.int64))
        return self._to_internal(S, layout).contiguous() if layout != "vk" else S
