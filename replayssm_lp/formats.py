"""State formats: the byte-level contract shared by the CPU reference and the GPU kernels.

Every encoder here works on CPU and CUDA tensors with plain integer / float32 torch ops, so a GPU
kernel can reproduce the same bytes for the same fp32 input and seed. Nothing relies on torch's cast
overflow behaviour (which differs between torch versions): values are clamped and rounded onto the
target grid *in fp32 bit arithmetic* first; the final cast to the storage dtype is then exact.

Formats (per state matrix ``[R, C]``: Mamba-2 ``[headdim P, dstate N]``, GDN ``[V, K]``; C is the
contiguous / reduction dim):

* ``fp32`` — plain.
* ``fp16`` / ``bf16`` — plain, values saturate at the format's max finite value (never inf).
* ``fp8``  — E4M3FN values + one fp32 scale per row (per (slot, head, row)):
  ``scale = amax_row / 448``; ``q = round_e4m3(clamp(x / scale, ±448))`` (q = ±0 when scale == 0);
  decode ``q * scale``.
* ``nvfp4`` — E2M1 values, two per uint8 (**even index in the low nibble**), blocks of 16 along C with
  an E4M3 block scale, and one fp32 global scale per matrix (per (slot, head)):
  ``s_glob = amax / 2688`` (2688 = 6·448);
  ``s_blk = RN_e4m3(min((amax_blk / 6) / s_glob, 448))`` (0 when s_glob == 0);
  ``d = s_blk * s_glob`` (fp32 multiply); ``q = round_e2m1(clamp(x / d, ±6))`` dividing by the
  *rounded* scale (q = ±0 when d == 0); decode ``e2m1 * d``. Block scales are always RN; the element
  rounding is RN or SR. The sign bit is taken from the fp32 pattern, so −0 encodes as 0x8.

All divisions above are single IEEE fp32 divisions (``div.rn.f32`` on the GPU), never reciprocals.

Rounding onto a grid with ``m`` mantissa bits, minimum normal exponent ``emin`` and max ``vmax``
(fp16: 10, −14, 65504; bf16: 7, −126, max bf16; e4m3: 3, −6, 448; e2m1: 1, 0, 6), applied to the fp32
bit pattern (``mag`` = |x| bits, ``sig`` = mantissa | implicit bit, ``e`` = max(expfield, 1) − 127):

* NaN stays NaN; x is clamped to ±vmax first (so ±inf → ±vmax and nothing rounds past vmax).
* ``k = 23 − m + max(0, emin − e)`` low bits are dropped (more in the target's subnormal range).
* k ≤ 23: RN adds ``2^(k−1) − 1 + ((sig >> k) & 1)`` (ties to even); SR adds the low k bits of the
  random word; then the low k bits are cleared. A carry into the exponent is the round-up into the
  next binade.
* k > 23 (|x| below the smallest subnormal s = 2^(emin−m)): RN gives s iff |x|/s > 1/2 (the tie goes
  to 0); SR gives s iff ``float(word >> 8) < (|x|/s)·2^24``, else 0. The sign is kept.

Random bits for SR: Philox-4x32 with **10 rounds** by default (Salmon et al., SC'11; Random123's
default, with its safety margin; a cache's ``philox_rounds`` picks 1-16 -- fewer rounds, cheaper
flushes -- as SGLang's ``--mamba-cache-philox-rounds`` and FlashInfer's SSU do; round constants
0xD2511F53 / 0xCD9E8D57, key increments 0x9E3779B9 / 0xBB67AE85, Random123 ordering), key =
``(seed & 0xFFFFFFFF, (seed >> 32) & 0xFFFFFFFF)`` with ``seed`` the cache's int64 SR seed, and for
element ``e = r * C + c`` of the matrix of (slot, head):

    counter = (e >> 2, head, slot, (stream << 31) | (generation & 0x7FFFFFFF))
    word    = philox(counter, key)[e & 3]

``generation`` is the slot's write count (``flush_count`` cursor before the write: 0 for
``init_from_state``, then 1, 2, ... for each flush), so no element reuses bits across the writes
of one sequence (``reset`` / ``init_from_state`` of a reused slot start again at 0: the next
sequence in that slot draws the same words, which correlates the rounding of the two
sequences, not the writes of either; pass another ``seed`` to the cache to change them);
``stream`` is 0 for the recurrence checkpoint (hi) and 1 for the read copy (lo). One Philox call
feeds four consecutive elements.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

__all__ = [
    "FORMATS", "FormatSpec", "philox4x32", "sr_words", "round_to_grid", "e2m1_codes_to_float",
    "float_to_e2m1_codes", "pack_nibbles", "unpack_nibbles", "encode", "decode", "EncodedState",
    "bytes_per_element", "E4M3_MAX", "E2M1_MAX", "NVFP4_BLOCK", "PHILOX_ROUNDS",
]

PHILOX_ROUNDS = 10
#: the round counts a cache may ask for (``philox_rounds``)
PHILOX_ROUNDS_RANGE = (1, 16)
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
MASK32 = 0xFFFFFFFF

E4M3_MAX = 448.0
E2M1_MAX = 6.0
NVFP4_BLOCK = 16
NVFP4_GLOBAL_DIV = 6.0 * 448.0  # 2688, exact in fp32
BF16_MAX = float.fromhex("0x1.fep127")
FP16_MAX = 65504.0


@dataclass(frozen=True)
class FormatSpec:
    name: str
    mant_bits: int      # m
    emin: int           # minimum normal exponent
    vmax: float         # largest finite value
    storage: torch.dtype
    bits: int           # storage bits per element (excluding scales)


FORMATS = {
    "fp32": FormatSpec("fp32", 23, -126, float.fromhex("0x1.fffffep127"), torch.float32, 32),
    "fp16": FormatSpec("fp16", 10, -14, FP16_MAX, torch.float16, 16),
    "bf16": FormatSpec("bf16", 7, -126, BF16_MAX, torch.bfloat16, 16),
    "fp8": FormatSpec("fp8", 3, -6, E4M3_MAX, torch.float8_e4m3fn, 8),
    "nvfp4": FormatSpec("nvfp4", 1, 0, E2M1_MAX, torch.uint8, 4),
}


def bytes_per_element(fmt: str, row_len: int) -> float:
    """Bytes per state element of a copy in ``fmt``, scales included (row_len = C)."""
    if fmt == "fp8":
        return 1.0 + 4.0 / row_len
    if fmt == "nvfp4":
        return 0.5 + 1.0 / NVFP4_BLOCK  # global scale per matrix is negligible
    return FORMATS[fmt].bits / 8.0


# ----------------------------------------------------------------------------------------------
# Philox-4x32 on int64 tensors holding uint32 values (no overflow: 16-bit split multiplies).
# ----------------------------------------------------------------------------------------------
def _mulhilo(a: torch.Tensor, m: int) -> Tuple[torch.Tensor, torch.Tensor]:
    m_lo, m_hi = m & 0xFFFF, m >> 16
    t = a * m_lo                       # < 2^48
    u = a * m_hi + (t >> 16)           # < 2^48 + 2^32
    lo = ((u & 0xFFFF) << 16) | (t & 0xFFFF)
    hi = u >> 16
    return hi, lo


def philox4x32(counter: torch.Tensor, key0, key1, rounds: int = PHILOX_ROUNDS) -> torch.Tensor:
    """Philox-4x32-``rounds``. ``counter``: int64 [..., 4] of uint32 values; ``key0/key1``: ints or
    int64 tensors broadcastable to ``counter[..., 0]``. Returns int64 [..., 4] of uint32 values."""
    c0, c1, c2, c3 = (counter[..., i] & MASK32 for i in range(4))
    k0 = torch.as_tensor(key0, dtype=torch.int64, device=counter.device) & MASK32
    k1 = torch.as_tensor(key1, dtype=torch.int64, device=counter.device) & MASK32
    for r in range(rounds):
        if r:
            k0 = (k0 + PHILOX_W0) & MASK32
            k1 = (k1 + PHILOX_W1) & MASK32
        hi0, lo0 = _mulhilo(c0, PHILOX_M0)
        hi1, lo1 = _mulhilo(c2, PHILOX_M1)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return torch.stack((c0, c1, c2, c3), dim=-1)


def sr_words(seed, slots: torch.Tensor, heads: int, rows: int, cols: int,
             generation: torch.Tensor, stream: int, rounds: int = PHILOX_ROUNDS) -> torch.Tensor:
    """The uint32 random word of every element of the matrices ``[len(slots), heads, rows, cols]``.

    ``seed``: int or int64 tensor (0-dim or [1]); ``slots``: int64 [n] pool slot ids;
    ``generation``: int64 [n] write count per slot; ``rounds``: Philox rounds (the cache's
    ``philox_rounds``). Returns int64 [n, heads, rows, cols]."""
    dev = slots.device
    n = slots.shape[0]
    seed = torch.as_tensor(seed, dtype=torch.int64, device=dev).reshape(())
    k0, k1 = seed & MASK32, (seed >> 32) & MASK32
    elem = torch.arange(rows * cols, device=dev, dtype=torch.int64)
    quad = torch.arange((rows * cols + 3) // 4, device=dev, dtype=torch.int64)
    ctr = torch.empty(n, heads, quad.numel(), 4, dtype=torch.int64, device=dev)
    ctr[..., 0] = quad.view(1, 1, -1)
    ctr[..., 1] = torch.arange(heads, device=dev, dtype=torch.int64).view(1, -1, 1)
    ctr[..., 2] = slots.to(torch.int64).view(-1, 1, 1) & MASK32
    ctr[..., 3] = ((stream & 1) << 31) | (generation.to(torch.int64).view(-1, 1, 1) & 0x7FFFFFFF)
    out = philox4x32(ctr, k0, k1, rounds)              # [n, heads, quads, 4]
    words = out.reshape(n, heads, -1)[:, :, : rows * cols]
    return words.reshape(n, heads, rows, cols)
    # (elem is documented above; element e takes word (e >> 2, lane e & 3))


# ----------------------------------------------------------------------------------------------
# Rounding onto a float grid, in fp32 bit arithmetic.
# ----------------------------------------------------------------------------------------------
def round_to_grid(x: torch.Tensor, fmt: str, mode: str = "rn",
                  words: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Round fp32 ``x`` onto ``fmt``'s value grid (RN ties-to-even or SR with ``words``), with
    explicit saturation to ±vmax. Returns fp32 values that are exactly representable in ``fmt``."""
    spec = FORMATS[fmt]
    x = x.to(torch.float32)
    if fmt == "fp32":
        return x.clone()
    if mode not in ("rn", "sr"):
        raise ValueError(f"mode must be 'rn' or 'sr', got {mode!r}")
    if mode == "sr" and words is None:
        raise ValueError("stochastic rounding needs `words` (uint32 random bits per element)")
    m, emin, vmax = spec.mant_bits, spec.emin, spec.vmax
    isnan = torch.isnan(x)
    xc = torch.clamp(torch.where(isnan, torch.zeros_like(x), x), -vmax, vmax)
    bits = xc.view(torch.int32).to(torch.int64) & MASK32
    sign = bits & 0x80000000
    mag = bits & 0x7FFFFFFF
    expf = mag >> 23
    e = torch.clamp(expf, min=1) - 127
    sig = (mag & 0x7FFFFF) | torch.where(expf > 0, 0x800000, 0)
    k = 23 - m + torch.clamp(emin - e, min=0)
    kk = torch.clamp(k, max=23)
    low = (torch.ones_like(kk) << kk) - 1
    if mode == "rn":
        add = (low >> 1) + ((sig >> kk) & 1)
    else:
        add = words.to(torch.int64) & low
    normal = (mag + add) & ~low
    # below the smallest subnormal s: {0, s}
    s = 2.0 ** (emin - m)
    ratio = xc.abs() / s                                # exact (power-of-two scaling)
    if mode == "rn":
        up = ratio > 0.5
    else:
        up = ((words.to(torch.int64) >> 8) & 0xFFFFFF).to(torch.float32) < ratio * 16777216.0
    s_bits = torch.tensor(s, dtype=torch.float32).view(torch.int32).item()
    tiny = torch.where(up, s_bits, 0)
    out_mag = torch.where(k > 23, tiny, normal)
    out = ((out_mag | sign) & MASK32)
    out = torch.where(out >= 0x80000000, out - (1 << 32), out).to(torch.int32).view(torch.float32)
    return torch.where(isnan, x, out)


# ----------------------------------------------------------------------------------------------
# E2M1 codes and nibble packing
# ----------------------------------------------------------------------------------------------
_E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def float_to_e2m1_codes(v: torch.Tensor) -> torch.Tensor:
    """Map fp32 values already on the E2M1 grid (|v| in {0,.5,...,6}) to 4-bit codes (int64);
    the sign comes from the fp32 sign bit (so −0 → 0x8)."""
    a = v.abs()
    code = ((a >= 0.5).long() + (a >= 1.0).long() + (a >= 1.5).long() + (a >= 2.0).long()
            + (a >= 3.0).long() + (a >= 4.0).long() + (a >= 6.0).long())
    neg = (v.view(torch.int32) < 0).long()
    return code | (neg << 3)


def e2m1_codes_to_float(codes: torch.Tensor) -> torch.Tensor:
    lut = torch.tensor(_E2M1_VALUES + tuple(-x for x in _E2M1_VALUES), dtype=torch.float32,
                       device=codes.device)
    return lut[codes.long() & 0xF]


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """[..., C] 4-bit codes -> [..., C/2] uint8, even index in the low nibble."""
    c = codes.to(torch.int64)
    return (c[..., 0::2] | (c[..., 1::2] << 4)).to(torch.uint8)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    p = packed.to(torch.int64)
    return torch.stack((p & 0xF, p >> 4), dim=-1).flatten(-2)


# ----------------------------------------------------------------------------------------------
# Whole-state encoders: S [n, heads, R, C] fp32 -> stored tensors
# ----------------------------------------------------------------------------------------------
@dataclass
class EncodedState:
    """Stored form of ``n`` state matrices. ``data``: fp32/fp16/bf16/e4m3 [n, H, R, C] or uint8
    [n, H, R, C/2] (nvfp4); ``scale``: fp8 row scales fp32 [n, H, R] or nvfp4 block scales e4m3
    [n, H, R, C/16]; ``global_scale``: nvfp4 fp32 [n, H]."""
    data: torch.Tensor
    scale: Optional[torch.Tensor] = None
    global_scale: Optional[torch.Tensor] = None


def _div_const(x: torch.Tensor, c: float) -> torch.Tensor:
    """``x / c`` for a Python number ``c``: one IEEE fp32 division per element on every device.
    Not ``x / c``: PyTorch's CUDA kernel divides a tensor by a CPU scalar (a Python number or a
    0-dim CPU tensor) as ``x * fp32(1/c)`` (BinaryDivTrueKernel.cu, "may lose one bit of
    precision"), which differs from ``div.rn.f32`` in the last bit for c = 448 / 2688 / 6 (about
    half of all fp8 row scales). A divisor tensor on x's device takes the true-division path on
    CPU and CUDA alike. (Dividing by a power of two, as ``round_to_grid`` does, is exact either
    way: its reciprocal only overflows for bf16, whose k > 23 branch never runs.)"""
    return x / torch.full_like(x, c)


def _safe_div(x: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """x / d, and ±0 (sign of x) where d == 0."""
    nz = d != 0
    q = x / torch.where(nz, d, torch.ones_like(d))
    return torch.where(nz, q, x * 0.0)


def encode(S: torch.Tensor, fmt: str, mode: str = "rn",
           words: Optional[torch.Tensor] = None) -> EncodedState:
    """Encode fp32 states ``S [n, H, R, C]`` into ``fmt`` (rounding ``mode``; SR needs ``words``,
    int64 uint32 values shaped like S — see :func:`sr_words`)."""
    S = S.to(torch.float32)
    if fmt == "fp32":
        return EncodedState(S.clone())
    if fmt in ("fp16", "bf16"):
        return EncodedState(round_to_grid(S, fmt, mode, words).to(FORMATS[fmt].storage))
    if fmt == "fp8":
        amax = torch.nan_to_num(S.abs(), nan=0.0).amax(dim=-1)       # [n, H, R]
        scale = _div_const(amax, E4M3_MAX)
        q = torch.clamp(_safe_div(S, scale.unsqueeze(-1)), -E4M3_MAX, E4M3_MAX)
        q = round_to_grid(q, "fp8", mode, words)
        return EncodedState(q.to(torch.float8_e4m3fn), scale)
    if fmt == "nvfp4":
        n, H, R, C = S.shape
        if C % NVFP4_BLOCK:
            raise ValueError(f"nvfp4 needs the contiguous dim to be a multiple of 16, got {C}")
        a = torch.nan_to_num(S.abs(), nan=0.0)
        s_glob = _div_const(a.amax(dim=(-1, -2)), NVFP4_GLOBAL_DIV)       # [n, H]
        amax_blk = a.view(n, H, R, C // NVFP4_BLOCK, NVFP4_BLOCK).amax(-1)  # [n, H, R, C/16]
        sg = s_glob.view(n, H, 1, 1)
        s_blk_f = torch.clamp(_safe_div(_div_const(amax_blk, 6.0), sg.expand_as(amax_blk)),
                              max=E4M3_MAX)
        s_blk = round_to_grid(s_blk_f, "fp8", "rn")                        # exact e4m3 values
        d = (s_blk * sg).repeat_interleave(NVFP4_BLOCK, dim=-1)           # [n, H, R, C]
        q = torch.clamp(_safe_div(S, d), -E2M1_MAX, E2M1_MAX)
        q = round_to_grid(q, "nvfp4", mode, words)
        packed = pack_nibbles(float_to_e2m1_codes(q))
        return EncodedState(packed, s_blk.to(torch.float8_e4m3fn), s_glob)
    raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(FORMATS)}")


def decode(enc: EncodedState, fmt: str) -> torch.Tensor:
    """Stored tensors -> fp32 [n, H, R, C]."""
    if fmt in ("fp32", "fp16", "bf16"):
        return enc.data.to(torch.float32)
    if fmt == "fp8":
        return enc.data.to(torch.float32) * enc.scale.to(torch.float32).unsqueeze(-1)
    if fmt == "nvfp4":
        vals = e2m1_codes_to_float(unpack_nibbles(enc.data))
        n, H = vals.shape[:2]
        d = enc.scale.to(torch.float32) * enc.global_scale.view(n, H, 1, 1)
        return vals * d.repeat_interleave(NVFP4_BLOCK, dim=-1)
    raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(FORMATS)}")
