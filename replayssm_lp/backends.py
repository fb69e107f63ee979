"""Backend selection. Kernel modules register a CuTe implementation per op with
:func:`register_cute`; an implementation may decline a configuration (``supports``), in which case
``backend="auto"`` falls back to the torch reference and ``backend="cute"`` raises."""
from __future__ import annotations

import functools
import importlib
from typing import Callable, Dict, Optional, Tuple

import torch

from ._validate import getenv

__all__ = ["register_cute", "resolve", "cute_available", "cute_unavailable_reason"]

_CUTE: Dict[str, Tuple[Callable, Callable]] = {}
#: device -> cute_unavailable_reason(device), memoised for resolve() (CUDA availability, the
#: compute capability and the importability of the kernel modules do not change in a process)
_DEV_REASON: Dict[torch.device, Optional[str]] = {}


def clear_memo() -> None:
    """Forget memoised backend decisions (per-device availability, per-cache plans)."""
    from ._validate import clear_plans
    _DEV_REASON.clear()
    clear_plans()


_KERNEL_MODULES = ("cutlass", "cute_kernels.common", "replayssm_lp.cute_ops")


def register_cute(op: str, supports: Optional[Callable] = None):
    """Decorator: ``impl`` runs ``op`` with CuTe kernels when ``supports(target) -> bool``."""
    def deco(impl):
        _CUTE[op] = (impl, supports or (lambda target: True))
        clear_memo()  # decisions memoised before this registration may change
        return impl
    return deco


@functools.lru_cache(maxsize=None)
def _load_kernel_modules() -> Optional[str]:
    for m in _KERNEL_MODULES:
        try:
            importlib.import_module(m)
        except ModuleNotFoundError as e:
            if e.name in (m, "cutlass", "cuda", "tvm_ffi") or (e.name or "").startswith("cuda"):
                return f"{e.name} is not importable ({e})"
            raise
    return None


def cute_unavailable_reason(device: torch.device) -> Optional[str]:
    """None when CuTe kernels can run on ``device``, else why not."""
    if device.type != "cuda":
        return f"tensors are on {device.type}, CuTe kernels need CUDA"
    if not torch.cuda.is_available():
        return "CUDA is not available"
    major, minor = torch.cuda.get_device_capability(device)
    if major < 9:
        return f"CuTe kernels need sm_90+, this GPU is sm_{major}{minor}"
    return _load_kernel_modules()


def cute_available(device) -> bool:
    return cute_unavailable_reason(torch.device(device)) is None


def _device_of(target):
    return target.device if hasattr(target, "device") else torch.device("cpu")


def _device_reason(dev: torch.device) -> Optional[str]:
    try:
        return _DEV_REASON[dev]
    except KeyError:
        pass
    reason = _DEV_REASON[dev] = cute_unavailable_reason(dev)
    return reason


def resolve(backend: str, op: str, target) -> Optional[Callable]:
    """The CuTe implementation to call, or None for the torch reference."""
    if backend == "torch" or backend == "auto" and getenv("REPLAYSSM_FORCE_TORCH") == "1":
        return None
    dev = _device_of(target)
    if dev.__class__ is not torch.device:
        dev = torch.device(dev)
    reason = _device_reason(dev)
    entry = _CUTE.get(op) if reason is None else None
    if entry is not None and not entry[1](target):
        reason, entry = f"the CuTe {op} kernel does not support this configuration", None
    elif entry is None and reason is None:
        reason = f"no CuTe kernel is registered for {op}"
    if entry is not None:
        return entry[0]
    if backend == "cute":
        raise RuntimeError(f"backend='cute' requested for {op}, but {reason}")
    return None
