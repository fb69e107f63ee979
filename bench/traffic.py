"""Bytes each decode step must move through device memory (the traffic model behind every GB/s
figure). |S| below is one state copy; entry bytes are one ring-buffer entry of one sequence."""
from __future__ import annotations

from dataclasses import dataclass

from replayssm_lp.pairs import parse_pair

# Layer shapes from DESIGN §4.
SHAPES = {
    "nemotron3-super": dict(kind="mamba2", H=128, P=64, N=128, G=8),
    "nemotron3-nano-4b": dict(kind="mamba2", H=96, P=80, N=128, G=8),
    "qwen3.5-4b": dict(kind="gdn", H=16, HV=32, K=128, V=128),
    "qwen3.5-122b": dict(kind="gdn", H=16, HV=64, K=128, V=128),
}


@dataclass
class StepBytes:
    nonflush: float     # mean over the L-1 non-flush steps of a cycle
    flush: float
    L: int

    @property
    def amortized(self) -> float:
        return ((self.L - 1) * self.nonflush + self.flush) / self.L


def mamba2_bytes(pair, H, P, N, G, L, act_bytes=2, has_z=False):
    """Per sequence per step. Cycle (DESIGN §1, flush rule h + 1 > L): one flush step (read hi +
    L entries, write hi + lo, output from the fresh fold, append) and L-1 non-flush steps at
    h = 1..L-1 (read the read copy + h entries, append one)."""
    p = parse_pair(pair)
    elems = H * P * N
    io = H * P * act_bytes * (2 + (1 if has_z else 0)) + 2 * G * N * act_bytes + H * 4
    entry = H * P * act_bytes + G * N * act_bytes + 2 * H * 4
    read = elems * p.read_bytes_per_element(N)
    hi = elems * p.rec_bytes_per_element(N)
    lo = 0 if p.shared else read
    mean_h = L / 2.0  # h = 1..L-1 -> mean L/2
    nonflush = read + mean_h * entry + entry + io
    flush = hi + L * entry + hi + lo + entry + io
    return StepBytes(nonflush, flush, L)


def mamba2_standard_bytes(H, P, N, G, state_bytes=4, act_bytes=2, has_z=False):
    io = H * P * act_bytes * (2 + (1 if has_z else 0)) + 2 * G * N * act_bytes + H * 4
    return 2 * H * P * N * state_bytes + io


def gdn_bytes(pair, H, HV, K, V, L, act_bytes=2):
    """Per sequence per step (GDN): the read copy once (S₀k and S₀q from one pass), ring entries
    (k per key head, u fp32 + g per value head; split pairs also raw v + beta, read at flush
    instead of u: their flush recomputes u from the checkpoint)."""
    p = parse_pair(pair)
    elems = HV * V * K
    io = 2 * H * K * act_bytes + 2 * HV * V * act_bytes + 2 * HV * 4
    entry = H * K * act_bytes + H * 4 + HV * V * 4 + HV * 4
    split_extra = (HV * V * act_bytes + HV * 4) if p.split else 0
    read = elems * p.read_bytes_per_element(K)
    hi = elems * p.rec_bytes_per_element(K)
    lo = 0 if p.shared else read
    mean_h = L / 2.0
    nonflush = read + mean_h * entry + entry + split_extra + io
    flush_entry = entry - HV * V * 4 + split_extra if p.split else entry
    flush = hi + L * flush_entry + hi + lo + entry + split_extra + io
    return StepBytes(nonflush, flush, L)


def gdn_standard_bytes(H, HV, K, V, state_bytes=4, act_bytes=2):
    return 2 * HV * V * K * state_bytes + 2 * H * K * act_bytes + 2 * HV * V * act_bytes + 2 * HV * 4
