"""Argument checks shared by the ops: every problem is raised before any work, naming the argument
and what was expected. Nothing here synchronises with the device."""
from __future__ import annotations

from typing import Optional, Sequence

import torch

BACKENDS = ("auto", "torch", "cute")


def tensor(name, t, shape: Sequence[Optional[int]], dtypes=None, device=None, optional=False):
    """Check ``t`` is a tensor of ``shape`` (None = any size) with a dtype in ``dtypes``."""
    if t is None:
        if optional:
            return None
        raise ValueError(f"{name} is required")
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
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


def per_head(name, t, nheads, device, optional=False, trailing=0):
    """A per-head scalar given as [H], or as a vLLM-style expanded view [H, ...] whose trailing
    dims have stride 0 (TIE_HDIM). Returns the [H] view."""
    if t is None:
        if optional:
            return None
        raise ValueError(f"{name} is required")
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.device != device:
        raise ValueError(f"{name} must be on {device}, got {t.device}")
    if not t.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor, got {t.dtype}")
    if t.dim() >= 1 and t.shape[0] == nheads and all(s == 0 for s in t.stride()[1:]):
        return t[(slice(None),) + (0,) * (t.dim() - 1)]
    raise ValueError(f"{name} must have shape [{nheads}] (or [{nheads}, ...] with stride-0 trailing "
                     f"dims), got {list(t.shape)} with strides {list(t.stride())}")


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
    return t


def backend(name):
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    return name


def pad_slot(pad_slot_id):
    if isinstance(pad_slot_id, bool) or not isinstance(pad_slot_id, int) or pad_slot_id >= 0:
        raise ValueError(f"pad_slot_id must be a negative int, got {pad_slot_id!r}")
    return pad_slot_id
