"""replayssm-lp: ReplaySSM decode for Mamba-2 and Gated DeltaNet with a split-precision state.

Math: :mod:`replayssm_lp.reference`. Byte formats and SR random bits: :mod:`replayssm_lp.formats`.
Precision pairs: :mod:`replayssm_lp.pairs`. Caches: :mod:`replayssm_lp.cache`. Ops: :mod:`replayssm_lp.ops`.
The snapshot-per-draft verify baseline (vLLM semantics): :mod:`replayssm_lp.snapshot`.
"""
from . import library  # noqa: F401  (registers the torch.library ops)
from .cache import GDNReplayCache, Mamba2ReplayCache
from .ops import (commit, gdn_decode, gdn_standard_decode, gdn_verify, mamba2_decode,
                  mamba2_standard_decode, mamba2_verify)
from .pairs import PrecisionPair, parse_pair, precision_pairs
from .snapshot import gdn_snapshot_verify, mamba2_snapshot_verify, snapshot_accept

__version__ = "0.1.0"

__all__ = [
    "Mamba2ReplayCache", "GDNReplayCache", "PrecisionPair", "parse_pair", "precision_pairs",
    "mamba2_decode", "mamba2_verify", "gdn_decode", "gdn_verify", "commit",
    "mamba2_standard_decode", "gdn_standard_decode",
    "mamba2_snapshot_verify", "gdn_snapshot_verify", "snapshot_accept",
]
