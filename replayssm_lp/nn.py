"""``torch.nn.Module`` blocks that own a replay cache and run the ReplaySSM ops.

A block replaces the *state update* of an SSM mixer's decode step, nothing else: the mixer keeps its
projections, convolution, gated norm and output projection, and hands the block the per-token inputs
it already has (the same ones ``selective_state_update`` / ``fused_recurrent_gated_delta_rule``
take). The block owns one replay cache (a pool of ``num_slots`` sequences) and forwards to
:mod:`replayssm_lp.ops`:

=====================  =====================================================================
``forward``            one decode token per row (:func:`~replayssm_lp.ops.mamba2_decode` /
                       :func:`~replayssm_lp.ops.gdn_decode`)
``prefill``            put a prefill's final state into ``slots`` (``cache.init_from_state``)
``verify``/``commit``  speculative decoding: T draft tokens output-only, then keep the accepted
                       prefix (a pointer move)
``materialize``        the current fp32 state of ``slots`` (checks, prefix caching, hand-back)
``reset``              forget ``slots``
=====================  =====================================================================

Rows address cache slots through ``state_batch_indices`` (int32 ``[batch]``, ``pad_slot_id`` rows
skipped; ``None`` maps row i to slot i), as in vLLM / SGLang.

The blocks hold no parameters: A, D, dt_bias (Mamba-2) and A_log, dt_bias (GDN) stay in the mixer
that owns them and are passed per call. They are inference-only: every method runs under
``torch.no_grad()`` (the replay state is not differentiable). The cache lives on the ``device``
given at construction; ``.to()`` / ``.cuda()`` / ``.half()`` refuse to move or cast it (build a new
block instead).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from . import _validate as V
from .formats import PHILOX_ROUNDS
from . import ops
from .cache import GDNReplayCache, Mamba2ReplayCache

__all__ = ["Mamba2DecodeBlock", "GDNDecodeBlock"]


class _ReplayBlock(nn.Module):
    """Shared cache management of the two blocks."""

    cache: "Mamba2ReplayCache | GDNReplayCache"

    @torch.no_grad()
    def prefill(self, slots, final_state: torch.Tensor, layout: str = "default") -> None:
        """Quantize a prefill's final state ``[len(slots), heads, rows, cols]`` (any float dtype)
        into ``slots`` and empty their buffers (``cache.init_from_state``)."""
        self.cache.init_from_state(slots, final_state, layout=layout)

    @torch.no_grad()
    def commit(self, num_accepted_tokens: torch.Tensor, state_batch_indices=None,
               pad_slot_id: int = -1) -> None:
        """Keep the first ``num_accepted_tokens[i]`` (int32 ``[batch]``) of the drafts the last
        :meth:`verify` appended for row i."""
        ops.commit(self.cache, num_accepted_tokens, state_batch_indices, pad_slot_id,
                   backend=self.backend)

    def reset(self, slots) -> None:
        """Forget ``slots``: zero state, empty buffer, cursors and SR generation back to 0."""
        self.cache.reset(slots)

    @property
    def precision(self) -> str:
        return self.cache.pair.name

    @property
    def num_slots(self) -> int:
        return self.cache.num_slots

    def extra_repr(self) -> str:
        return f"{self.cache!r}, backend={self.backend!r}"

    def _apply(self, fn, recurse=True):
        # The cache is not a parameter/buffer: nn.Module.to/.half/.cuda would silently leave it
        # where it is (or, worse, convert its encoded bytes). Refuse clearly instead.
        probe = fn(torch.zeros((), dtype=torch.float32, device=self.cache.device))
        if probe.device != self.cache.device or probe.dtype != torch.float32:
            raise RuntimeError(f"{type(self).__name__} owns a replay cache on {self.cache.device}; "
                               f"it cannot be moved or cast with .to()/.cuda()/.half(): build a "
                               f"new block with device=/act_dtype= instead")
        return super()._apply(fn, recurse)


class Mamba2DecodeBlock(_ReplayBlock):
    """ReplaySSM state update of a Mamba-2 mixer (state ``[num_slots, nheads, headdim, dstate]``).

    ``forward(x, dt, A, B, C, D=None, z=None, dt_bias=None, ...)`` takes what a Mamba-2 mixer has
    after its convolution: x, z ``[batch, nheads, headdim]``; dt ``[batch, nheads]`` (raw, before
    ``+ dt_bias`` and softplus when ``dt_softplus``); A ``[nheads]`` fp32 (negative, i.e.
    ``-exp(A_log)``); B, C ``[batch, ngroups, dstate]``; D, dt_bias ``[nheads]``. Returns y
    ``[batch, nheads, headdim]`` in ``act_dtype`` (``y = S q + D x``, then ``y *= silu(z)`` when z
    is given). x, B, C, z must be ``act_dtype``.
    """

    def __init__(self, nheads: int, headdim: int, dstate: int, ngroups: int = 1, *,
                 precision="fp32", buffer_len: int = 16, max_draft: int = 0, num_slots: int = 1,
                 act_dtype: torch.dtype = torch.bfloat16, device="cpu", backend: str = "auto",
                 dt_softplus: bool = True, seed: int = 0, philox_rounds: int = PHILOX_ROUNDS):
        super().__init__()
        V.backend(backend)
        self.cache = Mamba2ReplayCache(num_slots, nheads, headdim, dstate, ngroups,
                                       precision=precision, buffer_len=buffer_len,
                                       max_draft=max_draft, act_dtype=act_dtype, device=device,
                                       seed=seed, philox_rounds=philox_rounds)
        self.backend = backend
        self.dt_softplus = V.flag("dt_softplus", dt_softplus)

    @torch.no_grad()
    def forward(self, x, dt, A, B, C, D=None, z=None, dt_bias=None, *, state_batch_indices=None,
                pad_slot_id: int = -1, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self._step(ops.mamba2_decode, x, dt, A, B, C, D, z, dt_bias, state_batch_indices,
                          pad_slot_id, out)

    @torch.no_grad()
    def verify(self, x, dt, A, B, C, D=None, z=None, dt_bias=None, *, state_batch_indices=None,
               pad_slot_id: int = -1, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """T draft tokens per row (``[batch, T, ...]`` inputs, T <= max_draft): outputs of all T,
        output-only; the drafts stay pending until :meth:`commit`."""
        return self._step(ops.mamba2_verify, x, dt, A, B, C, D, z, dt_bias, state_batch_indices,
                          pad_slot_id, out)

    def _step(self, op, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, pad_slot_id, out):
        return op(self.cache, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias,
                  dt_softplus=self.dt_softplus, state_batch_indices=state_batch_indices,
                  pad_slot_id=pad_slot_id, out=out, backend=self.backend)

    def materialize(self, slots) -> torch.Tensor:
        """fp32 state ``[len(slots), nheads, headdim, dstate]`` (checkpoint + committed buffer)."""
        return self.cache.materialize(slots)


class GDNDecodeBlock(_ReplayBlock):
    """ReplaySSM state update of a Gated DeltaNet layer (state ``[num_slots, HV, V, K]``, K-last;
    ``layout="kv"`` in :meth:`prefill` / :meth:`materialize` for FLA / HF ``[.., K, V]`` states).

    ``forward(q, k, v, g=None, beta=None, *, A_log=None, a=None, dt_bias=None, b=None, ...)``:
    q, k ``[batch, H, K]``; v ``[batch, HV, V]`` (all ``act_dtype``); the gates either processed
    (``g`` log decay and ``beta``, ``[batch, HV]``) or raw (``A_log [HV]``, ``a [batch, HV]``,
    ``dt_bias [HV]``, ``b [batch, HV]``: g = -exp(A_log)·softplus(a + dt_bias), beta = sigmoid(b)).
    q and k are L2-normalised inside when ``use_qk_l2norm_in_kernel`` and q is scaled by ``scale``
    (default K^-1/2). Returns o ``[batch, HV, V]`` in ``act_dtype``.
    """

    def __init__(self, num_k_heads: int, num_v_heads: int, head_k_dim: int, head_v_dim: int, *,
                 precision="fp32", buffer_len: int = 16, max_draft: int = 0, num_slots: int = 1,
                 act_dtype: torch.dtype = torch.bfloat16, device="cpu", backend: str = "auto",
                 use_qk_l2norm_in_kernel: bool = True, scale: Optional[float] = None,
                 seed: int = 0, philox_rounds: int = PHILOX_ROUNDS):
        super().__init__()
        V.backend(backend)
        self.cache = GDNReplayCache(num_slots, num_k_heads, num_v_heads, head_k_dim, head_v_dim,
                                    precision=precision, buffer_len=buffer_len,
                                    max_draft=max_draft, act_dtype=act_dtype, device=device,
                                    seed=seed, philox_rounds=philox_rounds)
        self.backend = backend
        self.use_qk_l2norm_in_kernel = V.flag("use_qk_l2norm_in_kernel",
                                              use_qk_l2norm_in_kernel)
        self.scale = V.scale(scale)

    @torch.no_grad()
    def forward(self, q, k, v, g=None, beta=None, *, A_log=None, a=None, dt_bias=None, b=None,
                state_batch_indices=None, pad_slot_id: int = -1,
                out: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self._step(ops.gdn_decode, q, k, v, g, beta, A_log, a, dt_bias, b,
                          state_batch_indices, pad_slot_id, out)

    @torch.no_grad()
    def verify(self, q, k, v, g=None, beta=None, *, A_log=None, a=None, dt_bias=None, b=None,
               state_batch_indices=None, pad_slot_id: int = -1,
               out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """T draft tokens per row (``[batch, T, ...]`` inputs, T <= max_draft), output-only; the
        drafts stay pending until :meth:`commit`."""
        return self._step(ops.gdn_verify, q, k, v, g, beta, A_log, a, dt_bias, b,
                          state_batch_indices, pad_slot_id, out)

    def _step(self, op, q, k, v, g, beta, A_log, a, dt_bias, b, state_batch_indices, pad_slot_id,
              out):
        return op(self.cache, q, k, v, g, beta, A_log=A_log, a=a, dt_bias=dt_bias, b=b,
                  scale=self.scale, use_qk_l2norm_in_kernel=self.use_qk_l2norm_in_kernel,
                  state_batch_indices=state_batch_indices, pad_slot_id=pad_slot_id, out=out,
                  backend=self.backend)

    @torch.no_grad()
    def prefill(self, slots, final_state: torch.Tensor, layout: str = "vk") -> None:
        """Quantize a prefill's final state into ``slots``: ``[n, HV, V, K]`` (``layout="vk"``) or
        ``[n, HV, K, V]`` (``layout="kv"``, FLA / HF transformers)."""
        self.cache.init_from_state(slots, final_state, layout=layout)

    def materialize(self, slots, layout: str = "vk") -> torch.Tensor:
        """fp32 state ``[n, HV, V, K]`` (or ``[n, HV, K, V]`` with ``layout="kv"``)."""
        return self.cache.materialize(slots, layout=layout)
