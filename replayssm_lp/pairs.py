"""Precision pairs: which format the read copy (lo) and the recurrence checkpoint (hi) use.

Names are ``read/recurrence``; each side is a format (fp32, fp16, bf16, fp8, nvfp4) with an optional
rounding suffix ``sr`` (stochastic) or ``rn`` (nearest). The read side defaults to RN; a
low-precision recurrence side must state its rounding (``rn`` exists only to show why SR matters).
A single name (``fp32``, ``fp16sr``, ``nvfp4sr`` ...) means one shared copy used for both roles.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Dict, List, Tuple

from .formats import bytes_per_element

__all__ = ["PrecisionPair", "precision_pairs", "parse_pair", "CANONICAL_PAIRS", "EXTRA_PAIRS"]

# DESIGN §2: every name users may ask for by default.
CANONICAL_PAIRS: Tuple[str, ...] = (
    "fp32",
    "nvfp4/fp16sr", "nvfp4/fp8sr", "nvfp4/fp32",
    "fp8/fp16sr", "fp8/fp32",
    "fp16/fp32", "bf16/fp32",
    "fp16sr", "bf16sr", "fp8sr", "nvfp4sr",
    "fp8rn", "nvfp4rn", "fp16rn",
)
# Read-copy rounding study (SR read copy), used by the accuracy benchmark.
EXTRA_PAIRS: Tuple[str, ...] = ("nvfp4sr/fp16sr", "fp8sr/fp32")

_FMT = ("fp32", "fp16", "bf16", "fp8", "nvfp4")
_SIDE = re.compile(r"^(fp32|fp16|bf16|fp8|nvfp4)(sr|rn)?$")


@dataclass(frozen=True)
class PrecisionPair:
    """read_fmt/read_rounding: the read-only copy every non-flush step reads;
    rec_fmt/rec_rounding: the checkpoint the flush folds into. ``shared``: one copy for both."""
    read_fmt: str
    read_rounding: str
    rec_fmt: str
    rec_rounding: str
    shared: bool

    @property
    def name(self) -> str:
        def side(f, r, default):
            return f if (f == "fp32" or r == default) else f + r
        if self.shared:
            return self.rec_fmt if self.rec_fmt == "fp32" else self.rec_fmt + self.rec_rounding
        return f"{side(self.read_fmt, self.read_rounding, 'rn')}/{self.rec_fmt}" + (
            "" if self.rec_fmt == "fp32" else self.rec_rounding)

    @property
    def split(self) -> bool:
        """Two distinct copies (a read copy of lower precision than the checkpoint)."""
        return not self.shared

    def read_bytes_per_element(self, row_len: int) -> float:
        return bytes_per_element(self.read_fmt, row_len)

    def rec_bytes_per_element(self, row_len: int) -> float:
        return bytes_per_element(self.rec_fmt, row_len)

    def state_bytes_per_element(self, row_len: int) -> float:
        """Bytes held per state element (both copies when split)."""
        b = self.rec_bytes_per_element(row_len)
        return b if self.shared else b + self.read_bytes_per_element(row_len)

    def __str__(self) -> str:
        return self.name


def _valid_names() -> List[str]:
    return list(CANONICAL_PAIRS) + list(EXTRA_PAIRS)


def parse_pair(name) -> PrecisionPair:
    """Parse ``"nvfp4/fp16sr"``-style names (or pass a PrecisionPair through). A name must spell
    one of :data:`CANONICAL_PAIRS` / :data:`EXTRA_PAIRS` (explicit default roundings such as
    ``"nvfp4rn/fp16sr"`` are the same pair); any other, well formed or not, is a ValueError
    listing them -- those are the pairs the kernels are built and tested for."""
    if isinstance(name, PrecisionPair):
        # built by hand: it must be the listed pair its name spells (not e.g. an unknown
        # rounding, which would only fail at the first flush, after the checkpoint was written)
        if not _spells_listed(name):
            raise ValueError(f"precision {name!r} is not one of the pairs the kernels are built "
                             f"for; valid pairs: {', '.join(_valid_names())}")
        return name
    if not isinstance(name, str):
        raise TypeError(f"precision must be a str or PrecisionPair, got {type(name).__name__}")
    err = ValueError(f"unknown precision pair {name!r}; valid pairs: {', '.join(_valid_names())}")
    parts = name.strip().lower().split("/")
    if len(parts) == 1:
        m = _SIDE.match(parts[0])
        if not m:
            raise err
        fmt, rnd = m.group(1), m.group(2)
        if fmt == "fp32":
            if rnd:
                raise err
            return PrecisionPair("fp32", "rn", "fp32", "rn", True)
        if rnd is None:  # a shared low-precision copy is a recurrence: it must state its rounding
            raise err
        return _listed(PrecisionPair(fmt, rnd, fmt, rnd, True), err)   # (bf16rn is not)
    if len(parts) != 2:
        raise err
    mr, mc = _SIDE.match(parts[0]), _SIDE.match(parts[1])
    if not mr or not mc:
        raise err
    rf, rr = mr.group(1), mr.group(2) or "rn"
    cf, cr = mc.group(1), mc.group(2)
    if cf == "fp32":
        if cr:
            raise err
        cr = "rn"
    elif cr is None or cf == "nvfp4":  # nvfp4 recurrence exists only as the shared study config
        raise err
    if rf == "fp32" or (rf == cf):     # same format twice: that is a shared copy, spell it so
        raise err
    return _listed(PrecisionPair(rf, rr, cf, cr, False), err)


@functools.lru_cache(maxsize=None)
def _spells_listed(pair: PrecisionPair) -> bool:
    """Whether ``pair`` is the listed pair its name spells (memoised: kernels' dispatch passes
    the cache's pair on every call)."""
    try:
        return parse_pair(pair.name) == pair
    except ValueError:
        return False


def _listed(pair: PrecisionPair, err: ValueError) -> PrecisionPair:
    """``pair`` if it is one of DESIGN §2's; a well-formed other one (e.g. a read copy as wide as
    its checkpoint) raises ``err``: no kernel is built or tested for it."""
    if pair.name not in _valid_names():
        raise err
    return pair


def precision_pairs(include_extra: bool = False) -> Dict[str, PrecisionPair]:
    """Every named pair of DESIGN §2 (plus the SR read-copy variants when ``include_extra``)."""
    names = _valid_names() if include_extra else list(CANONICAL_PAIRS)
    return {n: parse_pair(n) for n in names}
