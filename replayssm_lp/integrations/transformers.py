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
(torch 2.13, CPU); the tests also pass on 5.21.1, 5.22.2 and 5.23.0. It needs the
linear-attention ``Cache`` API (``get_conv_state`` / ``get_recurrent_state`` /
``is_recording_past``) that appeared in transformers 5.21; older versions are refused. Newer
versions are accepted when that API and the layer attributes used here are present (a one-time
warning says they are untested). The mixer is called with ``cache=`` (5.24) or ``cache_params=``
(5.21-5.23); both are understood.

accelerate hooks (``device_map=...``, ``cpu_offload``) are honoured: on a hooked mixer the wrapper
sits inside the hook (at ``_old_forward``), and the decode step fires ``conv1d``'s hook like the
HF forward does (checked with accelerate 1.15 ``cpu_offload``/``dispatch_model`` on CPU, patching
before or after the hooks are added).

Not supported: ``torch.compile`` / CUDA-graph capture of the patched model (the wrapper decides
per call in Python; with ``backend="torch"`` the reference ops also synchronise) and so HF's
``cache_implementation="static"`` compile path. For a CUDA-graph decode loop use
:mod:`replayssm_lp.nn` blocks in your own step function. transformers 5.24 refuses
assisted / speculative generation for these stateful models; ``max_draft`` only sizes the ring
for callers that drive ``verify``/``commit`` on the blocks (:meth:`ReplayPatch.blocks`)
themselves. A cache that records its past runs the original mixer (correct, no savings).
"""
from __future__ import annotations

import copy
import sys
import types
import warnings
import weakref
from typing import Dict, List, Optional

import torch

from ..cache import _check_int
from ..nn import GDNDecodeBlock, Mamba2DecodeBlock
from ..pairs import parse_pair

__all__ = ["patch", "unpatch", "ReplayPatch", "SUPPORTED_LAYERS", "TESTED_TRANSFORMERS_VERSION",
           "MIN_TRANSFORMERS_VERSION", "UnsupportedModelError"]

TESTED_TRANSFORMERS_VERSION = "5.24.0"
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
        self.counts = {"prefill": 0, "decode": 0, "fallback": 0, "adopt": 0, "sync": 0}
        self.attr = _forward_attr(mixer)
        self.had_forward = self.attr in mixer.__dict__
        self.orig = getattr(mixer, self.attr)      # what the wrapper calls
        self.wrapper = None
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
                  seed=h.seed + mixer.layer_idx)
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
            self.block = b = self._new_block(batch, dtype, device)
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

    def sync(self):
        """Write the block's state into the owner's HF recurrent state; HF is the truth after."""
        cache = self.owner() if self.owner is not None else None
        if self.live and cache is not None:
            S = cache.get_recurrent_state(self.mixer_ref().layer_idx, state_idx=0)
            if S is not None and S.shape[0] == self.batch:
                with torch.no_grad():
                    if self.family == "mamba2":
                        S.copy_(self.block.materialize(list(range(self.batch))))
                    else:
                        S.copy_(self.block.materialize(list(range(self.batch)), layout="kv"))
                self.counts["sync"] += 1
        self.drop()


# ----------------------------------------------------------------------------------------------
# HF cache instance guards: write replay state back before HF rearranges / crops / resets
# ----------------------------------------------------------------------------------------------
_GUARDED = ("reorder_cache", "batch_select_indices", "batch_repeat_interleave", "crop", "reset")


def _sync_owned_by(cache):
    for st in list(_LIVE):
        if st.owner is not None and st.owner() is cache:
            st.sync()


def _make_guard(name):
    def guarded(self, *args, **kwargs):
        _sync_owned_by(self)
        return getattr(type(self), name)(self, *args, **kwargs)
    guarded.__name__ = name
    return guarded


_GUARDS = {n: _make_guard(n) for n in _GUARDED}


def _guarded_deepcopy(self, memo):
    """copy.deepcopy(cache) (prompt-cache reuse) must copy a current HF state."""
    _sync_owned_by(self)
    cls = type(self)
    if hasattr(cls, "__deepcopy__"):
        return cls.__deepcopy__(self, memo)
    new = cls.__new__(cls)
    memo[id(self)] = new
    for k, v in self.__dict__.items():
        if k != "__deepcopy__":
            new.__dict__[k] = copy.deepcopy(v, memo)   # guards are MethodTypes: rebound to new
    new.__deepcopy__ = types.MethodType(_guarded_deepcopy, new)
    return new


def _guard_cache(cache):
    # Instance attributes, so the class (and other caches) stay untouched; MethodType so that
    # copy.deepcopy rebinds them to the copy.
    if cache.__dict__.get("_replayssm_guarded"):
        return
    for n in _GUARDED:
        if hasattr(type(cache), n) and n not in cache.__dict__:
            setattr(cache, n, types.MethodType(_GUARDS[n], cache))
    if "__deepcopy__" not in cache.__dict__:
        cache.__deepcopy__ = types.MethodType(_guarded_deepcopy, cache)
    cache._replayssm_guarded = True


# ----------------------------------------------------------------------------------------------
# decode steps (the HF mixer's own decode path with the state update swapped)
# ----------------------------------------------------------------------------------------------
def _mask(h, attention_mask):
    if (attention_mask is not None and attention_mask.dim() == 2
            and attention_mask.shape[1] == h.shape[1]):
        return (h * attention_mask[:, :, None]).to(h.dtype)
    return h


def _mamba2_decode(mixer, st, hidden_states, cache, attention_mask):
    bsz, dtype = hidden_states.shape[0], hidden_states.dtype
    H, P, N, G = mixer.num_heads, mixer.head_dim, mixer.ssm_state_size, mixer.n_groups
    conv_state = cache.get_conv_state(mixer.layer_idx, state_idx=0)
    proj = mixer.in_proj(_mask(hidden_states, attention_mask))
    gate, xBC, dt = proj.split([mixer.intermediate_size, mixer.conv_dim, H], dim=-1)
    xBC = st.conv_update(xBC.transpose(1, 2), conv_state, mixer.conv1d.weight.squeeze(1),
                         mixer.conv1d.bias, activation=mixer.activation)
    xBC = _mask(xBC.transpose(1, 2), attention_mask)
    x, B, C = torch.split(xBC, [mixer.intermediate_size, G * N, G * N], dim=-1)
    act = x.dtype
    block = st.ensure(cache, bsz, act, x.device)
    A = -torch.exp(mixer.A_log.float())
    y = block(x.reshape(bsz, H, P).contiguous(), dt.reshape(bsz, H), A,
              B.reshape(bsz, G, N).contiguous(), C.reshape(bsz, G, N).contiguous(),
              D=mixer.D, dt_bias=mixer.dt_bias)
    y = mixer.norm(y.reshape(bsz, 1, H * P), gate)
    return mixer.out_proj(y.to(dtype))


def _gdn_decode(mixer, st, hidden_states, cache, attention_mask):
    bsz = hidden_states.shape[0]
    H, HV, K, V = mixer.num_k_heads, mixer.num_v_heads, mixer.head_k_dim, mixer.head_v_dim
    conv_state = cache.get_conv_state(mixer.layer_idx, state_idx=0)
    hs = _mask(hidden_states, attention_mask)
    if st.family == "gdn_qkvz":   # Qwen3-Next: interleaved qkvz / ba projections
        q, k, v, z, b, a = mixer.fix_query_key_value_ordering(mixer.in_proj_qkvz(hs),
                                                               mixer.in_proj_ba(hs))
        mixed = torch.cat([t.reshape(bsz, 1, -1) for t in (q, k, v)], dim=-1)
    else:                         # Qwen3.5 / Qwen3.5-MoE: separate projections
        mixed = mixer.in_proj_qkv(hs)
        z = mixer.in_proj_z(hs).reshape(bsz, 1, HV, V)
        b, a = mixer.in_proj_b(hs), mixer.in_proj_a(hs)
    mixed = st.conv_update(mixed.transpose(1, 2), conv_state, mixer.conv1d.weight.squeeze(1),
                           mixer.conv1d.bias, mixer.activation).transpose(1, 2)
    q, k, v = torch.split(mixed, [mixer.key_dim, mixer.key_dim, mixer.value_dim], dim=-1)
    block = st.ensure(cache, bsz, q.dtype, q.device)
    o = block(q.reshape(bsz, H, K).contiguous(), k.reshape(bsz, H, K).contiguous(),
              v.reshape(bsz, HV, V).contiguous(), A_log=mixer.A_log,
              a=a.reshape(bsz, HV), dt_bias=mixer.dt_bias, b=b.reshape(bsz, HV))
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


def _make_forward(st: _LayerState, orig_forward):
    decode = _with_conv_hooks(_DECODE[st.family])

    def forward(hidden_states, *args, **kwargs):
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
        if (has_state and hidden_states.shape[1] == 1 and not mixer.training
                and not cache.is_recording_past(li)):
            st.counts["decode"] += 1
            return decode(mixer, st, hidden_states, cache, mask)
        # original mixer: make HF's recurrent state current first (ours may be for another cache)
        st.release()
        st.counts["fallback" if has_state else "prefill"] += 1
        return orig_forward(hidden_states, *args, **kwargs)

    forward.__replayssm__ = True
    return forward


# ----------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------
class ReplayPatch:
    """Handle returned by :func:`patch` (also ``model._replayssm_patch``)."""

    def __init__(self, model, precision, buffer_len, max_draft, backend, seed, version):
        self.model_ref = weakref.ref(model)
        self.precision = parse_pair(precision).name
        self.buffer_len, self.max_draft = buffer_len, max_draft
        self.backend, self.seed = backend, seed
        self.transformers_version = version
        self.layers: List[_LayerState] = []

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

    def __repr__(self):
        fams = sorted({st.family for st in self.layers})
        return (f"ReplayPatch({len(self.layers)} layers {fams}, precision={self.precision!r}, "
                f"buffer_len={self.buffer_len}, max_draft={self.max_draft}, "
                f"backend={self.backend!r}, transformers={self.transformers_version})")


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
          backend: str = "auto", seed: int = 0) -> ReplayPatch:
    """Swap the single-token SSM state update of every supported mixer layer of ``model`` (a
    ``transformers`` model, in place) for the ReplaySSM op with the given precision pair and
    buffer length L. Returns a :class:`ReplayPatch` handle; :func:`unpatch` restores the model.

    Raises :class:`UnsupportedModelError` for a model without supported SSM layers, with SSM
    layers of an unsupported class, or an unsupported transformers version; ``ValueError`` for a
    bad precision pair / L / backend, or nvfp4 with a state dim that is not a multiple of 16.
    """
    version = _check_transformers_version()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if getattr(model, "_replayssm_patch", None) is not None:
        raise RuntimeError("model is already patched; call unpatch(model) first")
    pair = parse_pair(precision)
    _check_int("buffer_len", buffer_len, 1, 64)
    _check_int("max_draft", max_draft, 0, 16)
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
    handle = ReplayPatch(model, pair.name, buffer_len, max_draft, backend, int(seed), version)
    for name, m, fam in supported:
        st = _LayerState(handle, name, m, fam)
        st.wrapper = _make_forward(st, st.orig)
        setattr(m, st.attr, st.wrapper)
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
