"""Run the SSM decode steps of a Hugging Face ``transformers`` model with ReplaySSM.

>>> from replayssm_lp.integrations.transformers import patch, unpatch
>>> handle = patch(model, precision="nvfp4/fp16sr", buffer_len=16)
>>> out = model.generate(input_ids, max_new_tokens=256)     # decode steps use the replay ops
>>> unpatch(model)                                           # original behaviour again

What changes
------------
Each supported mixer layer gets an instance-level ``forward`` wrapper (the class is untouched):

* **prefill** (any multi-token forward, or the first forward on a fresh cache) runs the
  *original* mixer; the final SSM state it leaves in the HF cache is quantized into the layer's
  replay cache (``init_from_state``) right before the first decode step;
* **single-token decode** with a cache runs the mixer's own projections, HF's
  ``causal_conv1d_update`` on HF's conv state (the conv state handling stays HF's), then the replay
  op (:class:`~replayssm_lp.nn.Mamba2DecodeBlock` / :class:`~replayssm_lp.nn.GDNDecodeBlock`)
  instead of ``selective_state_update`` / ``fused_recurrent_gated_delta_rule``, then the mixer's
  own gated norm and output projection. HF's recurrent-state tensor is *not* updated on these
  steps (that write is what ReplaySSM saves);
* anything else on a cache that has state (multi-token continuation, chunked prefill, a cache that
  records its past for assisted decoding, training mode) first writes the replay state back into
  HF's recurrent state (``materialize``) and then runs the original mixer, so results stay right;
  the replay cache re-reads HF's state before the next decode step. ``reorder_cache`` (beam
  search), ``batch_select_indices``, ``batch_repeat_interleave``, ``crop``, ``reset`` and
  ``copy.deepcopy`` (prompt-cache reuse) of a cache the replay state belongs to do the same
  write-back first (these are wrapped on the cache *instance*, the class stays untouched). Beam
  search is therefore correct but saves nothing (every reorder writes the state back).
* One replay cache per layer serves one HF cache at a time: decoding on another HF cache (two
  generations interleaved) writes the state back to the first and adopts the second's.
* :meth:`ReplayPatch.sync` writes the replay state back into the HF cache on demand (e.g. to
  inspect ``past_key_values`` after ``generate``); :func:`unpatch` does it for every live layer.

Rows of the HF batch map to replay-cache slots ``0..batch-1``; a layer's replay cache is
(re)allocated on the first decode step with ``num_slots = batch`` (reused while batch, device and
activation dtype allow). Inference only: the replay step runs under ``torch.no_grad()``.

Supported: the layer classes in :data:`SUPPORTED_LAYERS` from ``transformers.models.*`` (not
``trust_remote_code`` copies, whose cache API differs). Written against **transformers 5.24.0**
(torch 2.13, CPU); the CPU tests also pass on 5.21.1, 5.22.2, 5.23.0 and 5.25.0 (the GPU
integration tests ran with 5.24.0). It needs the
linear-attention ``Cache`` API (``get_conv_state`` / ``get_recurrent_state`` /
``is_recording_past``) that appeared in transformers 5.21; older versions are refused. Newer
versions are accepted when that API and the layer attributes used here are present (a one-time
warning says they are untested). The mixer is called with ``cache=`` (5.24) or ``cache_params=``
(5.21-5.23); both are understood.

accelerate hooks (``device_map=...``, ``cpu_offload``) are honoured: on a hooked mixer the wrapper
sits inside the hook (at ``_old_forward``), and the decode step fires ``conv1d``'s hook like the
HF forward does (checked with accelerate 1.15 ``cpu_offload``/``dispatch_model`` on CPU, patching
before or after the hooks are added).

CUDA graphs: a single-token decode step of the patched model can be captured once and replayed
for every later step (:meth:`ReplayPatch.graph_decode_step`, :class:`GraphDecodeStep`,
:func:`graph_generate`). Requirements (checked by :meth:`ReplayPatch.prepare_capture`, and inside
a capture with a clear error): one eager decode step on the cache first (it allocates the replay
caches, quantizes HF's prefill state into them, compiles the kernels); the CuTe backend (the
torch reference synchronises); a cache with static shapes (``transformers.StaticCache`` for
models with attention layers; HF's conv states are updated in place, positions and the causal
mask come from the StaticCache's device-side length); no ``attention_mask``. In the steady state
the wrapper's decode path issues no host synchronisation and the same ops with the same shapes
every step (tests/test_transformers_integration.py checks this op by op on the CPU; the capture
itself is tested in tests/test_gpu_integration.py).

Not supported: ``torch.compile`` of the patched model (the wrapper decides per call in Python) and
so HF's ``cache_implementation="static"`` compile path of ``generate``. transformers 5.24 refuses
assisted / speculative generation for these stateful models; 5.25 accepts it (prompt lookup) with
a cache that records its past, and such a cache runs the original mixer (correct, no savings; a
one-time warning says so). ``max_draft`` only sizes the ring for callers that drive
``verify``/``commit`` on the blocks (:meth:`ReplayPatch.blocks`) themselves.
"""
from __future__ import annotations

import copy
import inspect
import os
import sys
import types
import warnings
import weakref
from typing import Dict, List, Optional

import torch

from .. import formats as F
from ..cache import _check_int
from ..nn import GDNDecodeBlock, Mamba2DecodeBlock
from ..pairs import parse_pair

__all__ = ["patch", "unpatch", "ReplayPatch", "GraphDecodeStep", "graph_generate",
           "SUPPORTED_LAYERS", "TESTED_TRANSFORMERS_VERSION", "MIN_TRANSFORMERS_VERSION",
           "UnsupportedModelError"]

TESTED_TRANSFORMERS_VERSION = "5.25.0"   # CPU tests; the GPU tests ran 5.24.0
MIN_TRANSFORMERS_VERSION = "5.21.0"

# class name -> (modeling module it must come from, family)
SUPPORTED_LAYERS: Dict[str, tuple] = {
    "Mamba2Mixer": ("transformers.models.mamba2.modeling_mamba2", "mamba2"),
    "NemotronHMamba2Mixer": ("transformers.models.nemotron_h.modeling_nemotron_h", "mamba2"),
    "Qwen3NextGatedDeltaNet": ("transformers.models.qwen3_next.modeling_qwen3_next", "gdn_qkvz"),
    "Qwen3_5GatedDeltaNet": ("transformers.models.qwen3_5.modeling_qwen3_5", "gdn_qkv"),
    "Qwen3_5MoeGatedDeltaNet": ("transformers.models.qwen3_5_moe.modeling_qwen3_5_moe", "gdn_qkv"),
}

_FAMILY_ATTRS = {
    "mamba2": ("in_proj", "conv1d", "norm", "out_proj", "A_log", "D", "dt_bias", "num_heads",
               "head_dim", "ssm_state_size", "n_groups", "intermediate_size", "conv_dim",
               "activation", "layer_idx"),
    "gdn_qkv": ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "conv1d", "norm", "out_proj",
                "A_log", "dt_bias", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim",
                "key_dim", "value_dim", "activation", "layer_idx"),
    "gdn_qkvz": ("in_proj_qkvz", "in_proj_ba", "fix_query_key_value_ordering", "conv1d", "norm",
                 "out_proj", "A_log", "dt_bias", "num_k_heads", "num_v_heads", "head_k_dim",
                 "head_v_dim", "key_dim", "value_dim", "activation", "layer_idx"),
}
_CACHE_API = ("get_conv_state", "get_recurrent_state", "is_recording_past")
_ACT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class UnsupportedModelError(TypeError):
    """The model (or the installed transformers) is not one :func:`patch` supports."""


def _supported_text() -> str:
    return ", ".join(f"{k} ({v[0].rsplit('.', 2)[1]})" for k, v in SUPPORTED_LAYERS.items())


def _import_transformers():
    try:
        import transformers  # noqa: F401
        from transformers import cache_utils
    except ImportError as e:  # pragma: no cover - exercised only without transformers
        raise ImportError("replayssm_lp.integrations.transformers needs Hugging Face transformers "
                          f">={MIN_TRANSFORMERS_VERSION} (tested {TESTED_TRANSFORMERS_VERSION}): "
                          "pip install 'replayssm-lp[transformers]'") from e
    return transformers, cache_utils


_warned_untested = False


def _check_transformers_version():
    global _warned_untested
    transformers, cache_utils = _import_transformers()
    from packaging.version import Version
    v = Version(transformers.__version__)
    if v < Version(MIN_TRANSFORMERS_VERSION):
        raise UnsupportedModelError(
            f"transformers {transformers.__version__} is not supported: patch() needs the "
            f"linear-attention Cache API (Cache.get_conv_state/get_recurrent_state/"
            f"is_recording_past) of transformers >= {MIN_TRANSFORMERS_VERSION}; it was written "
            f"against and tested with transformers {TESTED_TRANSFORMERS_VERSION}")
    missing = [a for a in _CACHE_API if not hasattr(cache_utils.Cache, a)]
    if missing:
        raise UnsupportedModelError(
            f"transformers {transformers.__version__}: transformers.cache_utils.Cache lacks "
            f"{missing}; patch() was written against transformers {TESTED_TRANSFORMERS_VERSION} "
            f"(supported: >= {MIN_TRANSFORMERS_VERSION} with that API)")
    if v.release[:2] > Version(TESTED_TRANSFORMERS_VERSION).release[:2] and not _warned_untested:
        _warned_untested = True
        warnings.warn(f"replayssm_lp.integrations.transformers was tested with transformers "
                      f"{TESTED_TRANSFORMERS_VERSION}; {transformers.__version__} is newer and "
                      f"untested (the API it needs is present)", stacklevel=3)
    return transformers.__version__


# ----------------------------------------------------------------------------------------------
# per-layer state
# ----------------------------------------------------------------------------------------------
# layers whose replay cache is ahead of HF's recurrent state
_LIVE: "weakref.WeakSet[_LayerState]" = weakref.WeakSet()


class _LayerState:
    """What one patched mixer needs: its family, the block (allocated on first decode), which HF
    cache the block's state belongs to, and counters."""

    def __init__(self, handle: "ReplayPatch", name: str, mixer, family: str):
        self.handle_ref = weakref.ref(handle)
        self.name, self.family = name, family
        self.mixer_ref = weakref.ref(mixer)
        self.block: Optional[torch.nn.Module] = None
        self.owner = None          # weakref to the HF cache whose state the block holds
        self.batch = 0
        self.live = False          # block state is ahead of HF's recurrent state
        self.conv_update = getattr(sys.modules[type(mixer).__module__], "causal_conv1d_update")
        self.counts = {"prefill": 0, "decode": 0, "fallback": 0, "adopt": 0, "sync": 0,
                       "captured": 0}
        self.attr = _forward_attr(mixer)
        self.had_forward = self.attr in mixer.__dict__
        self.orig = getattr(mixer, self.attr)      # what the wrapper calls
        self.wrapper = None
        self.hooks = {}            # the mixer's instance hooks we set (:func:`_mixer_hooks`)
        self.disabled = False

    # -- bookkeeping
    def _set_live(self, cache, batch):
        self.owner, self.batch, self.live = weakref.ref(cache), batch, True
        _LIVE.add(self)

    def drop(self):
        self.live = False
        _LIVE.discard(self)

    def owns(self, cache) -> bool:
        return self.live and self.owner is not None and self.owner() is cache

    # -- replay cache <-> HF cache
    def _layout(self):
        return "default" if self.family == "mamba2" else "kv"

    def _new_block(self, batch, dtype, device):
        h, mixer = self.handle_ref(), self.mixer_ref()
        kw = dict(precision=h.precision, buffer_len=h.buffer_len, max_draft=h.max_draft,
                  num_slots=batch, act_dtype=dtype, device=device, backend=h.backend,
                  seed=h.seed + mixer.layer_idx,
                  philox_rounds=h.philox_rounds)
        if self.family == "mamba2":
            return Mamba2DecodeBlock(mixer.num_heads, mixer.head_dim, mixer.ssm_state_size,
                                     mixer.n_groups, dt_softplus=True, **kw)
        return GDNDecodeBlock(mixer.num_k_heads, mixer.num_v_heads, mixer.head_k_dim,
                              mixer.head_v_dim, use_qk_l2norm_in_kernel=True, **kw)

    def ensure(self, cache, batch, dtype, device):
        """Make the block hold this cache's current state (adopting HF's recurrent state)."""
        if self.owns(cache) and self.batch == batch:
            return self.block
        self.release()     # the block held another cache's state: hand it back first
        if dtype not in _ACT_DTYPES:
            raise TypeError(f"{self.name}: ReplaySSM decode needs float32/float16/bfloat16 "
                            f"activations, got {dtype}")
        b = self.block
        if (b is None or b.cache.num_slots < batch or b.cache.device != torch.device(device)
                or b.cache.act_dtype != dtype):
            # normal tensors even when the first decode runs under torch.inference_mode: the
            # block is reused by later calls outside it, which write its state in place
            with torch.inference_mode(False):
                self.block = b = self._new_block(batch, dtype, device)
        if b.backend == "cute":      # the step's own op would refuse it: say so before any work
            from ..backends import resolve
            resolve("cute", "mamba2_decode" if self.family == "mamba2" else "gdn_decode",
                    b.cache)
        S = cache.get_recurrent_state(self.mixer_ref().layer_idx, state_idx=0)
        if S is None or S.shape[0] != batch:
            raise RuntimeError(f"{self.name}: the HF cache holds no recurrent state for a batch of "
                               f"{batch} (got {None if S is None else list(S.shape)})")
        b.prefill(list(range(batch)), S, layout=self._layout())
        self.counts["adopt"] += 1
        self._set_live(cache, batch)
        _guard_cache(cache)
        return b

    def release(self):
        """Give the state back to HF (if the block holds one) so the block can be reused."""
        if self.live:
            self.sync()

    def write_back(self):
        """Write the block's state into the owner's HF recurrent state; the block stays live (a
        copy or pickle of the cache takes a current state without perturbing the decode)."""
        cache = self.owner() if self.owner is not None else None
        if self.live and cache is not None:
            S = cache.get_recurrent_state(self.mixer_ref().layer_idx, state_idx=0)
            if S is not None and S.shape[0] == self.batch:
                # HF's state made under torch.inference_mode is an inference tensor: it can be
                # written in place only inside that mode
                mode = torch.inference_mode() if S.is_inference() else torch.no_grad()
                with mode:
                    if self.family == "mamba2":
                        S.copy_(self.block.materialize(list(range(self.batch))))
                    else:
                        S.copy_(self.block.materialize(list(range(self.batch)), layout="kv"))
                self.counts["sync"] += 1

    def sync(self):
        """Write the block's state into the owner's HF recurrent state; HF is the truth after."""
        try:
            self.write_back()
        finally:
            self.drop()     # (a failed write-back must not leave the layer marked live)


# ----------------------------------------------------------------------------------------------
# HF cache instance guards: write replay state back before HF rearranges / crops / resets
# ----------------------------------------------------------------------------------------------
_GUARDED = ("reorder_cache", "batch_select_indices", "batch_repeat_interleave", "crop", "reset")


def _sync_owned_by(cache, keep_live=False):
    """Write the replay states ahead of ``cache`` back into it; ``keep_live``: the blocks go on
    from their own state (a copy / pickle), else HF's is the truth after (HF is about to change
    it)."""
    for st in list(_LIVE):
        if st.owner is not None and st.owner() is cache:
            st.write_back() if keep_live else st.sync()


def _make_guard(name):
    def guarded(self, *args, **kwargs):
        _sync_owned_by(self)
        return getattr(type(self), name)(self, *args, **kwargs)
    guarded.__name__ = name
    return guarded


_GUARDS = {n: _make_guard(n) for n in _GUARDED}


class _InstanceHook:
    """An instance ``__deepcopy__`` / ``__reduce_ex__`` / ``__getstate__`` (an HF cache's guard,
    a patched mixer's hooks): calls ``func(obj, *args)``. The hooks keep themselves out of the
    copies and pickles they make; one that a class's own copy or reduce carries along copies and
    pickles as None (a bound method pickles by its function's name, which the loaded object
    lacks: pickle.loads raised AttributeError)."""

    __slots__ = ("func", "obj")

    def __init__(self, func, obj):
        self.func, self.obj = func, obj

    def __call__(self, *args):
        return self.func(self.obj, *args)

    def __reduce__(self):
        return (type(None), ())

    def __deepcopy__(self, memo):
        return None


_HOOKS = ("__deepcopy__", "__reduce_ex__", "__getstate__")


def _is_guard(name, value):
    return ((name in _HOOKS and isinstance(value, _InstanceHook))
            or (name in _GUARDS and getattr(value, "__func__", None) is _GUARDS[name]))


def _is_ours(name, value):
    """A guard, or the None a class's own copy left where a hook was."""
    return _is_guard(name, value) or (name in _HOOKS and value is None)


def _without_guards(state):
    """An object's pickled state (a ``__dict__``, or ``(__dict__, slots)``) less :func:`_is_ours`."""
    def clean(d):
        return {k: v for k, v in d.items() if not _is_ours(k, v)}
    if isinstance(state, dict):
        return clean(state)
    if isinstance(state, tuple) and len(state) == 2 and isinstance(state[0], dict):
        return (clean(state[0]), state[1])
    return state


def _guarded_deepcopy(self, memo):
    """copy.deepcopy(cache) (prompt-cache reuse) must copy a current HF state; the copy is
    guarded as the original."""
    _sync_owned_by(self, keep_live=True)
    cls = type(self)
    if hasattr(cls, "__deepcopy__"):
        new = cls.__deepcopy__(self, memo)
        d = getattr(new, "__dict__", None)
        if isinstance(d, dict):          # its own copy of our guards (Nones, or bound to new)
            for k in [k for k, v in d.items() if _is_ours(k, v)]:
                del d[k]
    else:
        new = cls.__new__(cls)
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            if not _is_guard(k, v):
                new.__dict__[k] = copy.deepcopy(v, memo)
    _guard_cache(new)
    return new


def _guarded_reduce_ex(self, protocol):
    """pickle / torch.save / copy.copy of a cache must take a current HF state, and none of the
    guards: the loaded cache is a plain HF cache (guarded again once a patched model decodes
    with it). An instance ``__reduce_ex__`` (not ``__getstate__``): a class's own ``__reduce__``
    would bypass that one."""
    _sync_owned_by(self, keep_live=True)
    rv = type(self).__reduce_ex__(self, protocol)
    if isinstance(rv, tuple) and len(rv) > 2:
        rv = rv[:2] + (_without_guards(rv[2]),) + rv[3:]
    return rv


def _guard_cache(cache):
    # Instance attributes, so the class (and other caches) stay untouched.
    d = cache.__dict__
    for n in _GUARDED:
        if hasattr(type(cache), n) and n not in d:
            setattr(cache, n, types.MethodType(_GUARDS[n], cache))
    if not _is_guard("__deepcopy__", d.get("__deepcopy__")):
        cache.__deepcopy__ = _InstanceHook(_guarded_deepcopy, cache)
    if not _is_guard("__reduce_ex__", d.get("__reduce_ex__")):
        cache.__reduce_ex__ = _InstanceHook(_guarded_reduce_ex, cache)


# ----------------------------------------------------------------------------------------------
# decode steps (the HF mixer's own decode path with the state update swapped)
# ----------------------------------------------------------------------------------------------
def _mask(h, attention_mask):
    if (attention_mask is not None and attention_mask.dim() == 2
            and attention_mask.shape[1] == h.shape[1]):
        return (h * attention_mask[:, :, None]).to(h.dtype)
    return h


def _conv_state(cache, layer_idx):
    """The layer's conv state for a single-token step, counted as HF's own step counts it
    (transformers >= 5.25 keeps a linear-attention layer's token count, ``get_seq_length``, by
    ``Cache.increase_count`` where the conv state is updated in place)."""
    if hasattr(cache, "increase_count"):
        cache.increase_count(layer_idx, 0)
    return cache.get_conv_state(layer_idx, state_idx=0)


def _mamba2_decode(mixer, st, hidden_states, cache, attention_mask):
    bsz, dtype = hidden_states.shape[0], hidden_states.dtype
    H, P, N, G = mixer.num_heads, mixer.head_dim, mixer.ssm_state_size, mixer.n_groups
    proj = mixer.in_proj(_mask(hidden_states, attention_mask))
    # the block first: a step it refuses (activation dtype, backend, batch) leaves HF's cache --
    # its token count and conv state -- as it was, so the caller can retry unpatched
    act = proj.dtype
    block = st.ensure(cache, bsz, act, proj.device)
    conv_state = _conv_state(cache, mixer.layer_idx)
    gate, xBC, dt = proj.split([mixer.intermediate_size, mixer.conv_dim, H], dim=-1)
    xBC = st.conv_update(xBC.transpose(1, 2), conv_state, mixer.conv1d.weight.squeeze(1),
                         mixer.conv1d.bias, activation=mixer.activation)
    xBC = _mask(xBC.transpose(1, 2), attention_mask).to(act)
    x, B, C = torch.split(xBC, [mixer.intermediate_size, G * N, G * N], dim=-1)
    A = -torch.exp(mixer.A_log.float())
    # per-head parameters in fp32 (a bf16 model stores them in bf16; the kernels read fp32)
    y = block(x.reshape(bsz, H, P).contiguous(), dt.reshape(bsz, H), A,
              B.reshape(bsz, G, N).contiguous(), C.reshape(bsz, G, N).contiguous(),
              D=mixer.D.float(), dt_bias=mixer.dt_bias.float())
    y = mixer.norm(y.reshape(bsz, 1, H * P), gate)
    return mixer.out_proj(y.to(dtype))


def _gdn_decode(mixer, st, hidden_states, cache, attention_mask):
    bsz = hidden_states.shape[0]
    H, HV, K, V = mixer.num_k_heads, mixer.num_v_heads, mixer.head_k_dim, mixer.head_v_dim
    hs = _mask(hidden_states, attention_mask)
    if st.family == "gdn_qkvz":   # Qwen3-Next: interleaved qkvz / ba projections
        q, k, v, z, b, a = mixer.fix_query_key_value_ordering(mixer.in_proj_qkvz(hs),
                                                               mixer.in_proj_ba(hs))
        mixed = torch.cat([t.reshape(bsz, 1, -1) for t in (q, k, v)], dim=-1)
    else:                         # Qwen3.5 / Qwen3.5-MoE: separate projections
        mixed = mixer.in_proj_qkv(hs)
        z = mixer.in_proj_z(hs).reshape(bsz, 1, HV, V)
        b, a = mixer.in_proj_b(hs), mixer.in_proj_a(hs)
    act = mixed.dtype                # the block before HF's cache is touched (see Mamba-2's)
    block = st.ensure(cache, bsz, act, mixed.device)
    conv_state = _conv_state(cache, mixer.layer_idx)
    mixed = st.conv_update(mixed.transpose(1, 2), conv_state, mixer.conv1d.weight.squeeze(1),
                           mixer.conv1d.bias, mixer.activation).transpose(1, 2).to(act)
    q, k, v = torch.split(mixed, [mixer.key_dim, mixer.key_dim, mixer.value_dim], dim=-1)
    o = block(q.reshape(bsz, H, K).contiguous(), k.reshape(bsz, H, K).contiguous(),
              v.reshape(bsz, HV, V).contiguous(), A_log=mixer.A_log.float(),
              a=a.reshape(bsz, HV), dt_bias=mixer.dt_bias.float(), b=b.reshape(bsz, HV))
    o = mixer.norm(o.reshape(-1, V), z.reshape(-1, V))
    return mixer.out_proj(o.reshape(bsz, 1, HV * V))


_DECODE = {"mamba2": _mamba2_decode, "gdn_qkv": _gdn_decode, "gdn_qkvz": _gdn_decode}


def _with_conv_hooks(decode):
    """Fire accelerate's hook of ``mixer.conv1d`` around a decode step, as the HF forward does
    (its weight is used directly, not through ``conv1d.forward``)."""
    try:
        from transformers.integrations.accelerate import force_accelerate_hooks
    except ImportError:   # pragma: no cover - older layouts
        return decode
    return force_accelerate_hooks("conv1d")(decode)


def _forward_attr(mixer) -> str:
    """Where the wrapper goes: accelerate's ``add_hook_to_module`` replaces ``forward`` on the
    instance and calls ``_old_forward`` after moving inputs / loading weights, so a hooked mixer
    is wrapped at ``_old_forward`` (inside its hooks), any other at ``forward``."""
    return "_old_forward" if "_old_forward" in mixer.__dict__ and "_hf_hook" in mixer.__dict__ \
        else "forward"


def _capturing(t: torch.Tensor) -> bool:
    """Is the current CUDA stream capturing a graph (False for CPU tensors / CPU-only torch)?"""
    return t.is_cuda and torch.cuda.is_current_stream_capturing()


def _backend_of(block) -> Optional[str]:
    """'cute' when the block's decode step runs a CuTe kernel, else why not (str)."""
    from ..backends import cute_unavailable_reason, resolve
    op = "mamba2_decode" if isinstance(block, Mamba2DecodeBlock) else "gdn_decode"
    if block.backend == "torch":
        return "backend='torch' (the torch reference synchronises with the host)"
    if os.environ.get("REPLAYSSM_FORCE_TORCH") == "1" and block.backend == "auto":
        return "REPLAYSSM_FORCE_TORCH=1 selects the torch reference"
    try:
        impl = resolve(block.backend, op, block.cache)
    except RuntimeError as e:
        return str(e)
    if impl is None:
        why = cute_unavailable_reason(block.cache.device)
        return why or f"the CuTe {op} kernel does not support this configuration ({block.cache!r})"
    return None


def _check_capture(st: "_LayerState", cache, batch: int) -> None:
    """Refuse, with the reason, a decode step that cannot be recorded into a CUDA graph."""
    if st.block is None or not st.owns(cache) or st.batch != batch:
        raise RuntimeError(
            f"{st.name}: CUDA-graph capture of a decode step needs one eager decode step on this "
            f"cache first (it allocates the replay cache, quantizes HF's prefill state into it and "
            f"compiles the kernels); see ReplayPatch.graph_decode_step")
    why = _backend_of(st.block)
    if why is not None:
        raise RuntimeError(f"{st.name}: a CUDA graph can only capture the CuTe replay kernels, "
                           f"but {why}")


def _rebound(fn, obj):
    """``fn`` (a mixer's forward as patch() found it) for the mixer ``obj`` instead."""
    if isinstance(fn, types.MethodType):
        return types.MethodType(fn.__func__, obj)
    return type(obj).forward.__get__(obj)


def _unpatched_state(st: "_LayerState", mixer):
    """A patched mixer's ``__dict__`` as it was before :func:`patch` where the wrapper sits -- no
    instance forward, or the original one -- and without the instance hooks."""
    state = {}
    for k, v in mixer.__dict__.items():
        if _is_guard(k, v):
            continue
        if v is st.wrapper:                      # at st.attr, or accelerate's _old_forward
            if k == st.attr and not st.had_forward:
                continue
            v = st.orig
        state[k] = v
    return state


def _mixer_hooks(st: "_LayerState"):
    """A patched mixer's instance ``__deepcopy__`` and ``__getstate__`` (as for HF caches),
    unbound so that ``st`` keeps no mixer alive: a deep copy or a pickled (``torch.save``) mixer
    gets :func:`_unpatched_state`, so it holds no reference to this layer's replay state nor to
    the original mixer (deep-copying the wrapper kept both alive) and runs its own forward."""
    def deepcopy_(self, memo):
        cls = type(self)
        new = cls.__new__(cls)
        memo[id(self)] = new
        # (a bound method rebinds to ``new`` via memo)
        new.__setstate__({k: copy.deepcopy(v, memo)
                          for k, v in _unpatched_state(st, self).items()})
        return new

    def getstate_(self):
        state = type(self).__getstate__(self)
        if not isinstance(state, dict):
            return state
        kept = _unpatched_state(st, self)
        return {k: kept.get(k, v) for k, v in state.items() if k in kept or k not in self.__dict__}

    return {"__deepcopy__": deepcopy_, "__getstate__": getstate_}


def _make_forward(st: _LayerState, orig_forward, mixer):
    """The patched forward, a method of ``mixer``: ``copy.deepcopy`` of the model rebinds it to
    the copy's mixer, which then runs its own original forward (a copy is not patched:
    ``ReplayPatch.__deepcopy__``)."""
    decode = _with_conv_hooks(_DECODE[st.family])

    def forward(self, hidden_states, *args, **kwargs):
        if self is not st.mixer_ref():   # a deep copy's mixer: its own weights, unpatched
            return _rebound(orig_forward, self)(hidden_states, *args, **kwargs)
        if st.disabled:                  # unpatched, but someone re-wrapped us meanwhile
            return orig_forward(hidden_states, *args, **kwargs)
        cache = kwargs.get("cache", kwargs.get("cache_params", None))
        if cache is None and args:
            cache = args[0]
        mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        mixer = st.mixer_ref()
        if cache is None or not all(hasattr(cache, a) for a in _CACHE_API):
            return orig_forward(hidden_states, *args, **kwargs)
        li = mixer.layer_idx
        has_state = (cache.get_recurrent_state(li, state_idx=0) is not None
                     and cache.get_conv_state(li, state_idx=0) is not None)
        capturing = _capturing(hidden_states)
        if (has_state and hidden_states.shape[1] == 1 and not mixer.training
                and not cache.is_recording_past(li)):
            if capturing:
                _check_capture(st, cache, hidden_states.shape[0])
                st.counts["captured"] += 1
            else:
                st.counts["decode"] += 1
            return decode(mixer, st, hidden_states, cache, mask)
        if capturing and st.live:
            raise RuntimeError(
                f"{st.name}: this forward would write the replay state back into the HF cache "
                f"(a host-synchronising step) while a CUDA graph is being captured; only "
                f"single-token decode steps with a cache can be captured")
        if has_state and cache.is_recording_past(li):   # (assisted steps are 1 + candidates long)
            h = st.handle_ref()
            if h is not None and not h.warned_recording:
                h.warned_recording = True
                warnings.warn(f"{st.name}: a decode step on an HF cache that records its past "
                              f"(e.g. assisted generation) runs the original mixer: correct, but "
                              f"without ReplaySSM (see ReplayPatch.stats()['fallback'])",
                              stacklevel=2)
        # original mixer: make HF's recurrent state current first (ours may be for another cache)
        st.release()
        st.counts["fallback" if has_state else "prefill"] += 1
        return orig_forward(hidden_states, *args, **kwargs)

    forward.__replayssm__ = True
    return types.MethodType(forward, mixer)


# ----------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------
class ReplayPatch:
    """Handle returned by :func:`patch` (also ``model._replayssm_patch``)."""

    def __init__(self, model, precision, buffer_len, max_draft, backend, seed, version,
                 philox_rounds=F.PHILOX_ROUNDS):
        self.model_ref = weakref.ref(model)
        self.precision = parse_pair(precision).name
        self.buffer_len, self.max_draft = buffer_len, max_draft
        self.backend, self.seed = backend, seed
        self.philox_rounds = philox_rounds
        self.transformers_version = version
        self.warned_recording = False
        self.layers: List[_LayerState] = []

    def __deepcopy__(self, memo):
        """A deep copy of a patched model is not patched (its mixers run their own forwards;
        ``patch`` it to get its own handle): its ``_replayssm_patch`` is None."""
        return None

    def __reduce__(self):
        """Pickled (``torch.save(model)``) likewise: the loaded model's ``_replayssm_patch`` is
        None and its mixers run their own forwards (the wrappers load as the class's)."""
        return (type(None), ())

    def blocks(self) -> Dict[str, Optional[torch.nn.Module]]:
        """Layer name -> its decode block (None before the layer's first decode step)."""
        return {st.name: st.block for st in self.layers}

    def stats(self) -> Dict[str, Dict[str, int]]:
        """Per layer: prefill / decode / fallback forwards, adopt (HF state -> replay cache) and
        sync (replay cache -> HF state) counts."""
        return {st.name: dict(st.counts) for st in self.layers}

    def sync(self, cache=None) -> None:
        """Write the replay state of every live layer (or those of ``cache``) back into the HF
        cache's recurrent states. Decoding continues correctly afterwards."""
        for st in self.layers:
            if st.live and (cache is None or st.owns(cache)):
                st.sync()

    def prepare_capture(self, cache) -> None:
        """Check that a single-token decode step of the model on ``cache`` can be captured in a
        CUDA graph now, and raise ``RuntimeError`` naming every problem otherwise. Call it after
        one eager decode step on ``cache`` (which allocates the replay caches, quantizes the
        prefill state into them and compiles the kernels); :meth:`graph_decode_step` does all of
        this for you.

        Capturable means: every patched layer holds ``cache``'s state; its decode step runs the
        CuTe kernels (``backend="cute"``, or ``"auto"`` on an sm_90+ GPU for a supported
        configuration); ``cache`` has static shapes (``cache.is_compileable``: a
        ``transformers.StaticCache`` for models with attention layers; the default cache of a
        pure SSM model such as ``Mamba2ForCausalLM`` is fine) and does not record its past."""
        problems = []
        for st in self.layers:
            if st.block is None or not st.owns(cache):
                problems.append(f"{st.name}: no eager decode step on this cache yet")
                continue
            why = _backend_of(st.block)
            if why is not None:
                problems.append(f"{st.name}: {why}")
            if st.block.cache.device.type != "cuda":
                problems.append(f"{st.name}: the replay cache is on {st.block.cache.device}")
        if not getattr(cache, "is_compileable", False):
            kinds = sorted({type(l).__name__ for l in getattr(cache, "layers", [])
                            if not getattr(l, "is_compileable", True)})
            problems.append(
                f"the HF cache ({type(cache).__name__}) has layers whose shapes grow or that "
                f"record their past ({', '.join(kinds) or 'unknown'}); use "
                f"transformers.StaticCache(config=model.config, max_cache_len=...) ")
        if problems:
            raise RuntimeError("the decode step cannot be captured in a CUDA graph:\n  "
                               + "\n  ".join(problems))

    def graph_decode_step(self, cache, **model_kwargs) -> "GraphDecodeStep":
        """A callable ``step(input_ids) -> logits`` that runs one single-token decode step of the
        patched model on ``cache`` (a prefilled HF cache; ``transformers.StaticCache`` for models
        with attention layers) through a CUDA graph. Its first call runs eagerly (the warm-up:
        replay caches, kernel compilation) and captures the graph; later calls copy ``input_ids``
        into the graph's static input and replay it. See :class:`GraphDecodeStep`."""
        model = self.model_ref()
        if model is None:
            raise RuntimeError("the patched model no longer exists")
        return GraphDecodeStep(model, cache, handle=self, **model_kwargs)

    def __repr__(self):
        fams = sorted({st.family for st in self.layers})
        return (f"ReplayPatch({len(self.layers)} layers {fams}, precision={self.precision!r}, "
                f"buffer_len={self.buffer_len}, max_draft={self.max_draft}, "
                f"backend={self.backend!r}, transformers={self.transformers_version})")


def _cache_kwarg(model) -> str:
    """The name under which the model's forward takes the cache (``cache`` from 5.24,
    ``past_key_values`` before)."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):   # pragma: no cover
        return "cache"
    return next((k for k in ("cache", "past_key_values", "cache_params") if k in params), "cache")


class GraphDecodeStep:
    """One single-token decode step of a patched ``transformers`` model, recorded in a
    ``torch.cuda.CUDAGraph`` (from :meth:`ReplayPatch.graph_decode_step`).

    ``step(input_ids)`` takes int64 ``[batch, 1]`` token ids on the model's CUDA device and
    returns the next-token logits ``[batch, vocab]``:

    * first call: runs the step **eagerly** on a side stream (the warm-up: each patched layer
      allocates its replay cache, quantizes the prefill state HF left in ``cache`` into it and
      compiles its kernels; cuBLAS initialises on that stream), checks
      :meth:`ReplayPatch.prepare_capture`, then **captures** the same call on that stream
      (capturing records, it does not run: the state advances once) and returns the eager logits
      (if the check fails it raises after the eager step: the cache has advanced by that token);
    * later calls: copy ``input_ids`` into the static input and **replay** the graph. The
      returned tensor is the graph's static output, overwritten by the next call: clone it to keep
      it.

    Everything a step changes lives in device tensors that the graph updates in place: HF's conv
    states and static KV cache (with its device-side length, from which positions and the causal
    mask are computed), the replay cache's buffers, checkpoint and cursors. Flush vs non-flush is
    decided per row on the device, so the one graph serves every step of the L-cycle, and a replay
    does exactly what the eager step would (same kernels, same inputs; SR bits come from the
    seed and the device-side flush counters, so they are the same too).

    ``model_kwargs`` are passed to every call of the model (e.g. ``logits_to_keep=1``); do not
    pass an ``attention_mask`` (it would be baked into the graph). Rules while the graph is in
    use: decode only through it (an eager forward on ``cache`` in between is fine, but anything
    that writes the replay state back — ``handle.sync()``, a multi-token forward, ``unpatch`` —
    followed by more replays makes the replay cache re-read HF's state, which the graph does not
    do: capture a new step after such calls); don't exceed the StaticCache's ``max_cache_len``;
    one graph per (cache, batch). ``handle.stats()`` counts the capture as ``captured``, not the
    replays; :attr:`replays` counts them.
    """

    def __init__(self, model, cache, handle: Optional[ReplayPatch] = None, stream=None, pool=None,
                 **model_kwargs):
        self.model = model
        self.cache = cache
        self.handle = handle if handle is not None else getattr(model, "_replayssm_patch", None)
        if self.handle is None:
            raise RuntimeError("GraphDecodeStep needs a model patched by "
                               "replayssm_lp.integrations.transformers.patch")
        if "attention_mask" in model_kwargs:
            raise ValueError("attention_mask would be frozen into the CUDA graph; decode without it "
                             "(the StaticCache's device-side length gives the causal mask)")
        self.model_kwargs = dict(model_kwargs)
        self.model_kwargs[_cache_kwarg(model)] = cache
        self.model_kwargs["use_cache"] = True
        self.stream, self.pool = stream, pool
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.static_ids: Optional[torch.Tensor] = None
        self.static_logits: Optional[torch.Tensor] = None
        self._blocks: list = []
        self.replays = 0

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def _check_ids(self, input_ids):
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 \
                or input_ids.shape[1] != 1:
            raise ValueError(f"input_ids must be a [batch, 1] tensor, got "
                             f"{getattr(input_ids, 'shape', type(input_ids).__name__)}")
        if not input_ids.is_cuda:
            raise ValueError(f"input_ids must be on the model's CUDA device, got "
                             f"{input_ids.device}")
        if self.static_ids is not None and (input_ids.shape != self.static_ids.shape
                                            or input_ids.device != self.static_ids.device):
            raise ValueError(f"this graph was captured for input_ids {list(self.static_ids.shape)}"
                             f" on {self.static_ids.device}, got {list(input_ids.shape)} on "
                             f"{input_ids.device}")

    @torch.no_grad()
    def __call__(self, input_ids: torch.Tensor) -> torch.Tensor:
        self._check_ids(input_ids)
        if self.graph is not None:
            self.static_ids.copy_(input_ids)
            self.graph.replay()
            self.replays += 1
            return self.static_logits
        return self._warm_up_and_capture(input_ids)

    def _warm_up_and_capture(self, input_ids):
        self.static_ids = input_ids.to(torch.long).clone()
        s = self.stream if self.stream is not None else torch.cuda.Stream(input_ids.device)
        s.wait_stream(torch.cuda.current_stream(input_ids.device))
        cur = torch.cuda.current_stream(input_ids.device)
        with torch.cuda.stream(s):
            eager = self.model(input_ids=self.static_ids, **self.model_kwargs).logits[:, -1].clone()
        cur.wait_stream(s)
        eager.record_stream(cur)
        self.handle.prepare_capture(self.cache)      # raises (state advanced by the eager step)
        graph = torch.cuda.CUDAGraph()
        s.wait_stream(cur)
        with torch.cuda.graph(graph, pool=self.pool, stream=s):
            out = self.model(input_ids=self.static_ids, **self.model_kwargs)
            self.static_logits = out.logits[:, -1]
        cur.wait_stream(s)
        # the graph writes the replay caches in place: keep them alive while it exists
        self._blocks = [st.block for st in self.handle.layers]
        self.graph = graph
        return eager


@torch.no_grad()
def graph_generate(model, input_ids: torch.Tensor, max_new_tokens: int, *, cache=None,
                   cuda_graph: bool = True, **model_kwargs):
    """Greedy decoding of a patched model with a ``transformers.StaticCache`` and, with
    ``cuda_graph=True``, every decode step after the first replayed from one CUDA graph
    (:class:`GraphDecodeStep`). Prefill runs eagerly (the original mixers). ``input_ids``
    ``[batch, prompt]`` without padding. Returns ``(sequences [batch, prompt + max_new_tokens],
    logits [max_new_tokens, batch, vocab])``, the layout of ``generate(...,
    output_logits=True)``: ``logits[i]`` produced token ``i``. ``cuda_graph=False`` runs the same
    loop eagerly (the reference a graph run reproduces)."""
    import transformers
    _check_int("max_new_tokens", max_new_tokens, 1)
    bsz, plen = input_ids.shape
    if cache is None:
        cache = transformers.StaticCache(config=model.config, max_cache_len=plen + max_new_tokens)
    kw = dict(model_kwargs)
    kw[_cache_kwarg(model)] = cache
    out = model(input_ids=input_ids, use_cache=True, **kw)
    logits = [out.logits[:, -1].float().clone()]
    tokens = [logits[0].argmax(-1, keepdim=True)]
    step = None
    if max_new_tokens > 1 and cuda_graph:
        step = GraphDecodeStep(model, cache, **model_kwargs)
    for _ in range(max_new_tokens - 1):
        ids = tokens[-1]
        if step is not None:
            lg = step(ids).float().clone()
        else:
            lg = model(input_ids=ids, use_cache=True, **kw).logits[:, -1].float().clone()
        logits.append(lg)
        tokens.append(lg.argmax(-1, keepdim=True))
    return torch.cat([input_ids] + tokens, dim=1), torch.stack(logits)


def _find_layers(model):
    supported, unsupported = [], []
    for name, m in model.named_modules():
        cls = type(m)
        spec = SUPPORTED_LAYERS.get(cls.__name__)
        if spec is not None and cls.__module__ == spec[0]:
            supported.append((name, m, spec[1]))
        elif isinstance(getattr(m, "A_log", None), torch.nn.Parameter) and "A_log" in m._parameters:
            unsupported.append(f"{name or '<root>'} ({cls.__module__}.{cls.__name__})")
    return supported, unsupported


def patch(model, precision="nvfp4/fp16sr", buffer_len: int = 16, max_draft: int = 0,
          backend: str = "auto", seed: int = 0, philox_rounds: int = F.PHILOX_ROUNDS) -> ReplayPatch:
    """Swap the single-token SSM state update of every supported mixer layer of ``model`` (a
    ``transformers`` model, in place) for the ReplaySSM op with the given precision pair and
    buffer length L. Returns a :class:`ReplayPatch` handle; :func:`unpatch` restores the model.

    Raises :class:`UnsupportedModelError` for a model without supported SSM layers, with SSM
    layers of an unsupported class, or an unsupported transformers version; ``ValueError`` for a
    bad precision pair / L / backend / ``philox_rounds`` (the SR generator's rounds, 1-16:
    :mod:`replayssm_lp.formats`), or nvfp4 with a state dim that is not a multiple of 16.
    """
    version = _check_transformers_version()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if getattr(model, "_replayssm_patch", None) is not None:
        raise RuntimeError("model is already patched; call unpatch(model) first")
    pair = parse_pair(precision)
    buffer_len = _check_int("buffer_len", buffer_len, 1, 64)
    max_draft = _check_int("max_draft", max_draft, 0, 16)
    seed = _check_int("seed", seed, -(1 << 63), (1 << 63) - 1 - 4096)  # (+ layer_idx per block)
    philox_rounds = _check_int("philox_rounds", philox_rounds, *F.PHILOX_ROUNDS_RANGE)
    if backend not in ("auto", "torch", "cute"):
        raise ValueError(f"backend must be one of ('auto', 'torch', 'cute'), got {backend!r}")
    supported, unsupported = _find_layers(model)
    if unsupported:
        raise UnsupportedModelError(
            f"{type(model).__name__} has SSM layers patch() does not support: "
            f"{', '.join(unsupported[:4])}{' ...' if len(unsupported) > 4 else ''}. Supported "
            f"layer classes (from transformers.models, transformers >= {MIN_TRANSFORMERS_VERSION}, "
            f"tested {TESTED_TRANSFORMERS_VERSION}): {_supported_text()}")
    if not supported:
        raise UnsupportedModelError(
            f"{type(model).__name__} has no SSM layer patch() supports. Supported layer classes "
            f"(from transformers.models, transformers >= {MIN_TRANSFORMERS_VERSION}, tested "
            f"{TESTED_TRANSFORMERS_VERSION}): {_supported_text()}")
    nvfp4 = "nvfp4" in (pair.read_fmt, pair.rec_fmt)
    for name, m, fam in supported:
        missing = [a for a in _FAMILY_ATTRS[fam] if not hasattr(m, a)]
        if not hasattr(sys.modules[type(m).__module__], "causal_conv1d_update"):
            missing.append(f"{type(m).__module__}.causal_conv1d_update")
        if missing:
            raise UnsupportedModelError(
                f"{name} ({type(m).__name__}) in transformers {version} lacks {missing}; patch() "
                f"was written against transformers {TESTED_TRANSFORMERS_VERSION}")
        cols = m.ssm_state_size if fam == "mamba2" else m.head_k_dim
        if nvfp4 and cols % 16:
            raise ValueError(f"precision {pair.name!r} uses nvfp4, which needs the contiguous "
                             f"state dim to be a multiple of 16; {name} has "
                             f"{'dstate' if fam == 'mamba2' else 'head_k_dim'}={cols}")
    handle = ReplayPatch(model, pair.name, buffer_len, max_draft, backend, seed, version,
                         philox_rounds)
    for name, m, fam in supported:
        st = _LayerState(handle, name, m, fam)
        st.wrapper = _make_forward(st, st.orig, m)
        setattr(m, st.attr, st.wrapper)
        for hook, func in _mixer_hooks(st).items():
            if hook not in m.__dict__ and (hook == "__getstate__"
                                           or not hasattr(type(m), hook)):
                st.hooks[hook] = func
                setattr(m, hook, _InstanceHook(func, m))
        handle.layers.append(st)
    model._replayssm_patch = handle
    return handle


def unpatch(model) -> None:
    """Restore the original mixer forwards of a model patched by :func:`patch`. Live replay states
    are written back into their HF caches first, so a generation can continue unpatched."""
    handle = getattr(model, "_replayssm_patch", None)
    if handle is None:
        raise RuntimeError("model is not patched by replayssm_lp.integrations.transformers.patch")
    handle.sync()
    for st in handle.layers:
        st.drop()
        st.disabled = True
        st.block = None
        mixer = st.mixer_ref()
        if mixer is None:
            continue
        for hook, func in st.hooks.items():
            if getattr(mixer.__dict__.get(hook), "func", None) is func:
                del mixer.__dict__[hook]
        # accelerate may have hooked the mixer after patch(): our wrapper then sits in
        # ``_old_forward`` under accelerate's ``forward``; put the original back where we are.
        for attr in (st.attr, "forward", "_old_forward"):
            if mixer.__dict__.get(attr) is st.wrapper:
                if attr == st.attr and not st.had_forward:
                    del mixer.__dict__[attr]
                else:
                    setattr(mixer, attr, st.orig)
                break
        else:
            warnings.warn(f"{st.name}: its forward was wrapped again after patch(); the ReplaySSM "
                          f"wrapper stays in that chain but now passes every call through",
                          stacklevel=2)
    handle.layers = []
    del model._replayssm_patch
