"""Device-side low-precision primitives (CuTe DSL), bit-exact with ``replayssm_lp/formats.py``.

Every function here but :func:`pack_f16_sr` is a plain Python function over CuTe DSL scalars
(``Float32`` / ``Uint32`` / ``Int32``). Call them from inside any ``@cute.kernel`` / ``@cute.jit``
body; they trace straight-line, branch-free code (selects, no ``if``), so they are safe in divergent
code and need no AST rewrite. :func:`pack_f16_sr` is ``@cute.jit`` (one branch per chunk; both ways
give the same bytes, so divergence is safe too).

Contract (see the formats.py docstring; everything below reproduces it bit for bit):

* :func:`philox4x32` — Philox-4x32, ``rounds`` rounds (a compile-time constant: the cache's
  ``philox_rounds``, default 10), Random123 ordering (known answer, 10 rounds: counter 0, key 0
  -> ``6627e8d5 e169c58d bc57ac4c 9b00dbd8``). One ``mul.wide.u32`` per multiply.
* :func:`sr_counter_word3` / :func:`sr_key_from_seed` — the SR counter / key mapping.
* :func:`round_to_grid` — RN (ties-even) or SR (given the uint32 word) onto the fp16 / bf16 / e4m3 /
  e2m1 grid, in fp32 bit arithmetic: NaN passes, clamp to +-vmax first, ``k`` dropped bits (more in
  the target's subnormal range), the ``k > 23`` tiny branch (RN: ``|x|/s > 1/2``; SR:
  ``float(word >> 8) < (|x|/s) * 2^24``).
* fp8: :func:`fp8_row_scale`, :func:`fp8_quantize`, :func:`pack_e4m3x4` / :func:`e4m3_byte`
  (hardware ``cvt.rn.satfinite.e4m3x2.f32``, exact for on-grid values), :func:`unpack_e4m3x4` /
  :func:`e4m3_byte_to_f32` (``cvt.rn.f16x2.e4m3x2``).
* nvfp4: :func:`nvfp4_global_scale`, :func:`nvfp4_block_scale`, :func:`nvfp4_quantize`,
  :func:`e2m1_code`, :func:`e2m1_code_to_f32` (fp16 bit trick), :func:`pack_nibbles8`.
* fp16/bf16 packing: :func:`pack_f16x2`, :func:`pack_bf16x2` (exact for on-grid values),
  :func:`pack_f16x2_rz`, :func:`f16x2_to_f32`, :func:`bf16x2_to_f32`.
* fp16 SR of a chunk: :func:`pack_f16_sr` (``@cute.jit``: the one function here that branches, on
  :func:`f16_normal_span`'s check of the whole chunk, warp-divergent safely: both ways give the
  same bytes).

Every division that defines a stored byte is an explicit ``div.rn.f32`` (pure inline PTX) or its
fast-path sequence where that is exact, and every multiply that defines a stored byte is an explicit
``mul.rn.f32`` (the ``.rn`` modifier forbids FMA contraction) or feeds only inline-asm fmas (the
quotient estimate of :func:`e2m1_pack8_rn`: nothing to contract into) — the DSL's ``/`` also
lowers to ``div.rn.f32`` in 4.8.1 and it does contract ``a*b+c`` into ``fma``, so we do not rely
on either behaviour.

Hopper note: there is no ``cvt.rs.*`` and no e2m1 cvt on sm_90a; SR and e2m1 are done in software.

NaN inputs (never produced from finite input): NaN-ness is kept everywhere, but the stored NaN *bytes*
follow the hardware converts (fp16 0x7FFF, bf16 0x7FFF, e4m3 0x7F whatever the sign), whereas torch's
casts give 0x7E00|sign, 0x7FC0, 0x7F|sign. fp32 copies and nvfp4 codes (NaN -> 0|sign) match exactly.

DSL pitfall seen while writing this: the DSL uniques float constants by Python value, so a literal
``Float32(-0.0)`` can come out as +0.0 (``-0.0 == 0.0``); build -0 from bits
(``bits_f32(Uint32(0x80000000))``) when the sign of a zero constant matters.

Verification (CPU, no GPU): the PTX of every primitive was run through a small numpy PTX interpreter
against formats.py on ~25k inputs (all specials, grid neighbours, ties, subnormals, saturation) and
was bit-identical, as were the whole state_codec kernels (tests/gpu_scripts/check_state_codec.py
with ``--emu``). Not so for :func:`pack_f16_sr` / :func:`e2m1_pack8_rn` (session 36: CPU tests of
their arithmetic in torch, tests/test_state_codec_compile.py, and GPU bit-identical tests; the
emulator would need ``cvt.rz.f16x2.f32`` and branches for the fp16 SR init encoder now).
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Float32, Int32, Int64, Uint16, Uint32
from cutlass._mlir.dialects import llvm
from cutlass._mlir_helpers.arith import bitcast as _bitcast
from cutlass.cutlass_dsl import T

__all__ = [
    "GRIDS", "PHILOX_ROUNDS", "PHILOX_M0", "PHILOX_M1", "PHILOX_W0", "PHILOX_W1",
    "E4M3_MAX", "E2M1_MAX", "NVFP4_BLOCK", "NVFP4_GLOBAL_DIV", "FLT_MAX",
    "f32_bits", "bits_f32", "split_tf32_fast", "sel_u32", "sel_f32", "div_rn", "mul_rn",
    "fmax_nq", "fmin_nq", "add_rn", "sub_rn", "fma_rn", "e2m1_pack8_rn",
    "abs_nan0_inf_sat", "mulhilo32", "philox4x32", "sr_key_from_seed", "sr_counter_word3",
    "round_to_grid", "round_f16_sr", "F16_NORMAL_SPAN", "F16_SR_CHUNK_ENV", "f16_sr_chunk",
    "f16_normal_span", "f16_sr_chunk_fast", "pack_f16_sr",
    "pack_f16x2", "pack_f16x2_rz", "pack_bf16x2", "f16x2_to_f32", "bf16x2_to_f32",
    "fp8_row_scale", "fp8_quantize", "pack_e4m3x4", "unpack_e4m3x4", "nvfp4_global_scale",
    "nvfp4_block_scale", "nvfp4_quantize", "e2m1_code", "pack_nibbles8", "e2m1_code_to_f32",
    "e4m3_byte", "e4m3_byte_to_f32",
]

# ----------------------------------------------------------------------------------------------
# Constants (identical to replayssm_lp.formats; tests assert the equality)
# ----------------------------------------------------------------------------------------------
PHILOX_ROUNDS = 10
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85

E4M3_MAX = 448.0
E2M1_MAX = 6.0
NVFP4_BLOCK = 16
NVFP4_GLOBAL_DIV = 6.0 * 448.0          # 2688, exact in fp32
FLT_MAX = float.fromhex("0x1.fffffep127")
BF16_MAX = float.fromhex("0x1.fep127")
FP16_MAX = 65504.0

# grid name -> (mantissa bits m, minimum normal exponent emin, largest finite vmax)
GRIDS = {
    "fp16": (10, -14, FP16_MAX),
    "bf16": (7, -126, BF16_MAX),
    "e4m3": (3, -6, E4M3_MAX),
    "e2m1": (1, 0, E2M1_MAX),
}
_GRID_ALIASES = {"fp8": "e4m3", "nvfp4": "e2m1"}


def _grid(fmt: str):
    name = _GRID_ALIASES.get(fmt, fmt)
    if name not in GRIDS:
        raise ValueError(f"round_to_grid: unknown grid {fmt!r}; expected one of {sorted(GRIDS)}")
    return GRIDS[name]


# ----------------------------------------------------------------------------------------------
# Scalar plumbing
# ----------------------------------------------------------------------------------------------
def _asm(res_type, ptx: str, constraints: str, args):
    """Pure (side-effect-free) inline PTX: LLVM may CSE / DCE / schedule it."""
    return llvm.inline_asm(res_type, args, ptx, constraints, has_side_effects=False,
                           is_align_stack=False)


def f32_bits(x) -> Uint32:
    """fp32 -> its uint32 bit pattern (no instruction)."""
    return Uint32(_bitcast(Float32(x).ir_value(), T.i32()))


def bits_f32(u) -> Float32:
    """uint32 bit pattern -> fp32 (no instruction)."""
    return Float32(_bitcast(Uint32(u).ir_value(), T.f32()))


def sel_u32(cond, a, b) -> Uint32:
    return Uint32(cutlass.select_(cond, Uint32(a), Uint32(b)))


def sel_f32(cond, a, b) -> Float32:
    return Float32(cutlass.select_(cond, Float32(a), Float32(b)))


def div_rn(a, b) -> Float32:
    """IEEE-754 fp32 division, round to nearest even (``div.rn.f32``; subnormals kept)."""
    return Float32(_asm(T.f32(), "div.rn.f32 $0, $1, $2;", "=f,f,f",
                        [Float32(a).ir_value(), Float32(b).ir_value()]))


def mul_rn(a, b) -> Float32:
    """IEEE-754 fp32 multiply (``mul.rn.f32``: never contracted into an fma)."""
    return Float32(_asm(T.f32(), "mul.rn.f32 $0, $1, $2;", "=f,f,f",
                        [Float32(a).ir_value(), Float32(b).ir_value()]))


def add_rn(a, b) -> Float32:
    """IEEE-754 fp32 add (``add.rn.f32``: never contracted into an fma)."""
    return Float32(_asm(T.f32(), "add.rn.f32 $0, $1, $2;", "=f,f,f",
                        [Float32(a).ir_value(), Float32(b).ir_value()]))


def sub_rn(a, b) -> Float32:
    """IEEE-754 fp32 subtract (``sub.rn.f32``)."""
    return Float32(_asm(T.f32(), "sub.rn.f32 $0, $1, $2;", "=f,f,f",
                        [Float32(a).ir_value(), Float32(b).ir_value()]))


def fma_rn(a, b, c) -> Float32:
    """a * b + c, one rounding (``fma.rn.f32``)."""
    return Float32(_asm(T.f32(), "fma.rn.f32 $0, $1, $2, $3;", "=f,f,f,f",
                        [Float32(a).ir_value(), Float32(b).ir_value(), Float32(c).ir_value()]))


def fmax_nq(a, b) -> Float32:
    """max that ignores a NaN operand (IEEE maxNum, ``max.f32``)."""
    return cute.arch.fmax(Float32(a), Float32(b))


def fmin_nq(a, b) -> Float32:
    """min that ignores a NaN operand (IEEE minNum, ``min.f32``)."""
    return cute.arch.fmin(Float32(a), Float32(b))


def abs_nan0_inf_sat(x) -> Float32:
    """``torch.nan_to_num(|x|, nan=0)`` element: NaN -> 0, inf -> FLT_MAX, else |x|."""
    a = bits_f32(f32_bits(x) & Uint32(0x7FFFFFFF))
    return fmin_nq(fmax_nq(a, Float32(0.0)), Float32(FLT_MAX))


# ----------------------------------------------------------------------------------------------
# Philox-4x32-10
# ----------------------------------------------------------------------------------------------
def mulhilo32(a, m: int) -> Tuple[Uint32, Uint32]:
    """(hi, lo) of the 64-bit product a * m (one ``mul.wide.u32``)."""
    p = cute.arch.mul_wide(Uint32(a), Uint32(m))
    return (p >> 32).to(Uint32), p.to(Uint32)


def philox4x32(c0, c1, c2, c3, k0, k1, rounds: int = PHILOX_ROUNDS):
    """Philox-4x32 (Random123 ordering, ``rounds`` rounds, default 10). Returns 4 Uint32 words,
    exactly ``formats.philox4x32([c0, c1, c2, c3], k0, k1, rounds)``."""
    c0, c1, c2, c3 = Uint32(c0), Uint32(c1), Uint32(c2), Uint32(c3)
    k0, k1 = Uint32(k0), Uint32(k1)
    for r in range(rounds):                      # trace-time unrolled
        if r:
            k0 = k0 + Uint32(PHILOX_W0)
            k1 = k1 + Uint32(PHILOX_W1)
        hi0, lo0 = mulhilo32(c0, PHILOX_M0)
        hi1, lo1 = mulhilo32(c2, PHILOX_M1)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def sr_key_from_seed(seed) -> Tuple[Uint32, Uint32]:
    """int64 SR seed -> Philox key (low 32 bits, high 32 bits)."""
    s = Int64(seed)
    return s.to(Uint32), (s >> 32).to(Uint32)


def sr_counter_word3(stream: int, generation) -> Uint32:
    """Counter word 3: ``(stream << 31) | (generation & 0x7FFFFFFF)`` (stream is compile-time)."""
    g = Uint32(generation) & Uint32(0x7FFFFFFF)
    if stream & 1:
        g = g | Uint32(0x80000000)
    return g


# ----------------------------------------------------------------------------------------------
# Rounding onto a float grid (fp32 bit arithmetic)
# ----------------------------------------------------------------------------------------------
def round_to_grid(x, fmt: str, sr: bool = False, word=None) -> Float32:
    """Round fp32 ``x`` onto ``fmt``'s grid (``fmt`` in fp16 / bf16 / e4m3|fp8 / e2m1|nvfp4;
    fp32 returns ``x``), RN ties-to-even, or SR with the uint32 random ``word``. Clamps to +-vmax
    first, NaN passes. Returns an fp32 value exactly representable in ``fmt``
    (formats.round_to_grid, bit for bit). ``fmt`` and ``sr`` are trace-time constants."""
    if fmt == "fp32":
        return Float32(x)
    m, emin, vmax = _grid(fmt)
    if sr and word is None:
        raise ValueError("round_to_grid: SR needs the uint32 random word")
    x = Float32(x)
    xb = f32_bits(x)
    is_nan = (xb & Uint32(0x7FFFFFFF)) > Uint32(0x7F800000)
    xc = fmin_nq(fmax_nq(x, Float32(-vmax)), Float32(vmax))   # +-inf -> +-vmax (NaN fixed below)
    b = f32_bits(xc)
    sign = b & Uint32(0x80000000)
    mag = b & Uint32(0x7FFFFFFF)
    expf = mag >> Uint32(23)
    sig = (mag & Uint32(0x7FFFFF)) | sel_u32(expf > Uint32(0), 0x800000, 0)
    ebias = emin + 127                   # biased exponent of the target's min normal
    if ebias <= 1:
        # the target's subnormal range is inside fp32's (bf16): k is a constant, no tiny branch
        kk = Uint32(23 - m)
        low = Uint32((1 << (23 - m)) - 1)
        tiny = None
    else:
        ef1 = sel_u32(expf > Uint32(1), expf, 1)                   # max(expfield, 1)
        deficit = sel_u32(ef1 < Uint32(ebias), Uint32(ebias) - ef1, 0)   # max(0, emin - e)
        k = Uint32(23 - m) + deficit
        tiny = k > Uint32(23)
        kk = sel_u32(tiny, 23, k)
        low = (Uint32(1) << kk) - Uint32(1)
    if sr:
        w = Uint32(word)
        add = w & low
    else:
        add = (low >> Uint32(1)) + ((sig >> kk) & Uint32(1))
    out_mag = (mag + add) & ~low
    if tiny is not None:
        s_bits = (emin - m + 127) << 23 if emin - m >= -126 else 1 << (emin - m + 149)
        axc = bits_f32(mag)
        if sr:
            # float(word >> 8) < (|x| / s) * 2^24 ; (|x|/s)*2^24 = |x| * 2^(m - emin + 24), exact
            thr = mul_rn(axc, Float32(2.0 ** (m - emin + 24)))
            up = (w >> Uint32(8)).to(Float32) < thr
        else:
            # |x| / s > 1/2  <=>  |x| > 2^(emin - m - 1)   (exact comparison)
            up = axc > Float32(2.0 ** (emin - m - 1))
        out_mag = sel_u32(tiny, sel_u32(up, s_bits, 0), out_mag)
    out = bits_f32(out_mag | sign)
    return sel_f32(is_nan, x, out)


def round_f16_sr(x, w) -> Float32:
    """``round_to_grid(x, 'fp16', sr=True, word=w)`` bit for bit, in fewer operations:
    the clamp to +-65504 on the magnitude bits (an unsigned min; NaN is restored at the end, inf
    becomes 65504 as in the reference), ``k = max(126 - expfield, 13)`` dropped bits (the fp16
    subnormal range widens it), |x| < 2^-24 (``expfield < 103``) by the reference's tiny rule
    (2^-24 iff ``float(w >> 8) < |x|·2^48``)."""
    xb = f32_bits(x)
    mag0 = xb & Uint32(0x7FFFFFFF)
    mag = sel_u32(mag0 < Uint32(0x477FE000), mag0, Uint32(0x477FE000))
    expf = Int32(mag >> Uint32(23))
    kk = cutlass.max(Int32(126) - expf, Int32(13))
    low = (Uint32(1) << Uint32(cutlass.min(kk, Int32(31)))) - Uint32(1)
    out_mag = (mag + (Uint32(w) & low)) & ~low
    thr = mul_rn(bits_f32(mag), Float32(2.0 ** 48))
    up = (Uint32(w) >> Uint32(8)).to(Float32) < thr
    out_mag = sel_u32(expf < Int32(103), sel_u32(up, Uint32(0x33800000), Uint32(0)), out_mag)
    out = bits_f32(out_mag | (xb & Uint32(0x80000000)))
    return sel_f32(mag0 > Uint32(0x7F800000), x, out)


#: bits of 2^-14 (the smallest fp16 normal) and the span of |x| bits from there to 65504: where
#: every |x| of a chunk lies in [2^-14, 65504], SR to fp16 drops exactly 13 mantissa bits (no
#: clamp, no subnormal widening, no tiny rule, no NaN)
F16_NORMAL_LO_BITS = 0x38800000
F16_NORMAL_SPAN = 0x477FE000 - F16_NORMAL_LO_BITS
#: A-B switch of that fast path (read while tracing: part of every key that encodes fp16 SR):
#: 0 = every element by round_f16_sr, 1 = the chunk check; unset = the kernel's default
F16_SR_CHUNK_ENV = "REPLAYSSM_F16_SR_CHUNK"


def f16_sr_chunk(default: bool = True) -> bool:
    """Whether fp16 SR encoders check each chunk for :func:`pack_f16_sr`'s fast path."""
    v = os.environ.get(F16_SR_CHUNK_ENV, "")
    return default if v not in ("0", "1") else v == "1"


def f16_sr_chunk_fast(xs, default: bool = True) -> Optional[Boolean]:
    """The ``fast`` argument of :func:`pack_f16_sr` for the values ``xs`` (None where
    :func:`f16_sr_chunk` is off)."""
    if not f16_sr_chunk(default):
        return None
    span = Uint32(0)
    for x in xs:
        span = f16_normal_span(span, x)
    return span <= Uint32(F16_NORMAL_SPAN)


def f16_normal_span(span, x) -> Uint32:
    """``max(span, bits(|x|) - bits(2^-14))`` unsigned (zero and |x| < 2^-14 wrap high, NaN / inf
    land above the span): a chunk folded from ``span = 0`` stays ``<= F16_NORMAL_SPAN`` iff every
    value lies in the fp16 normal range."""
    d = (f32_bits(x) & Uint32(0x7FFFFFFF)) - Uint32(F16_NORMAL_LO_BITS)
    return sel_u32(d > Uint32(span), d, Uint32(span))


@cute.jit
def pack_f16_sr(xs: cute.Tensor, ws: cute.Tensor, out: cute.Tensor, fast: Boolean,
                n: cutlass.Constexpr):
    """``out[i]`` = the fp16x2 word of ``round_f16_sr(xs[2i], ws[2i])``, ``round_f16_sr(xs[2i+1],
    ws[2i+1])`` for i < n / 2 (bit for bit). ``fast`` (every ``xs`` in the fp16 normal range, by
    :func:`f16_normal_span`): 13 bits dropped by adding ``ws & 0x1FFF`` to the bits (no carry
    reaches the sign: |x| <= 65504) and converting toward zero (at 65504 + the carry: 65504), 2
    ops an element instead of ~19."""
    if fast:
        for i in cutlass.range_constexpr(n // 2):
            a = bits_f32(f32_bits(xs[2 * i]) + (Uint32(ws[2 * i]) & Uint32(0x1FFF)))
            b = bits_f32(f32_bits(xs[2 * i + 1]) + (Uint32(ws[2 * i + 1]) & Uint32(0x1FFF)))
            out[i] = pack_f16x2_rz(a, b).to(out.element_type)
    else:
        for i in cutlass.range_constexpr(n // 2):
            out[i] = pack_f16x2(round_f16_sr(xs[2 * i], ws[2 * i]),
                                round_f16_sr(xs[2 * i + 1], ws[2 * i + 1])).to(out.element_type)


# ----------------------------------------------------------------------------------------------
# fp16 / bf16 packing (inputs must already be on the grid: the RN cvt is then exact)
# ----------------------------------------------------------------------------------------------
def pack_f16x2(a0, a1) -> Uint32:
    """Two on-grid fp32 -> fp16x2 word (a0 in the low half = lower address)."""
    return Uint32(_asm(T.i32(), "cvt.rn.f16x2.f32 $0, $2, $1;", "=r,f,f",
                       [Float32(a0).ir_value(), Float32(a1).ir_value()]))


def pack_f16x2_rz(a0, a1) -> Uint32:
    """Two fp32 -> fp16x2 word rounded toward zero (a0 in the low half)."""
    return Uint32(_asm(T.i32(), "cvt.rz.f16x2.f32 $0, $2, $1;", "=r,f,f",
                       [Float32(a0).ir_value(), Float32(a1).ir_value()]))


def pack_bf16x2(a0, a1) -> Uint32:
    """Two on-grid fp32 -> bf16x2 word (a0 in the low half)."""
    return Uint32(_asm(T.i32(), "cvt.rn.bf16x2.f32 $0, $2, $1;", "=r,f,f",
                       [Float32(a0).ir_value(), Float32(a1).ir_value()]))


def _f16_half_to_f32(w, hi: bool) -> Float32:
    ptx = ("{ .reg .b16 l, h; mov.b32 {l, h}, $1; cvt.f32.f16 $0, %s; }" % ("h" if hi else "l"))
    return Float32(_asm(T.f32(), ptx, "=f,r", [Uint32(w).ir_value()]))


def bf16_lo_to_f32(w) -> Float32:
    """The low bf16 half of a word -> fp32, as inline PTX: LLVM does not move it into the
    branch that loaded the word (as it would a plain shift), so a caller can issue a load early
    and convert where it needs the value."""
    return bits_f32(Uint32(_asm(T.i32(), "shl.b32 $0, $1, 16;", "=r,r", [Uint32(w).ir_value()])))


def load_bits_u32(t, idx) -> Uint32:
    """Element ``t[idx]`` of a 16- or 32-bit tensor as its raw bits in a 32-bit register (16-bit:
    zero-extended, which the load does for free) -- for loads issued early and converted by
    :func:`bits_u32_to_f32` where the value is needed: LLVM would move a 16-bit value's
    conversion into the branch that loaded it, and the warp would wait there."""
    return Uint32(cute.recast_tensor(t, Uint32 if t.element_type.width == 32 else Uint16)[idx])


def bits_u32_to_f32(w, dtype) -> Float32:
    """fp32 value of :func:`load_bits_u32`'s word for an element of ``dtype`` (fp32 / bf16 /
    fp16), converted by inline PTX where a conversion is needed (kept where written)."""
    if dtype.width == 32:
        return bits_f32(w)
    if dtype == cutlass.BFloat16:
        return bf16_lo_to_f32(w)
    return _f16_half_to_f32(w, False)


def f16x2_to_f32(w) -> Tuple[Float32, Float32]:
    """fp16x2 word -> (low, high) as fp32 (exact)."""
    return _f16_half_to_f32(w, False), _f16_half_to_f32(w, True)


def bf16x2_to_f32(w) -> Tuple[Float32, Float32]:
    """bf16x2 word -> (low, high) as fp32 (exact: bf16 is the top half of fp32)."""
    w = Uint32(w)
    return bits_f32(w << Uint32(16)), bits_f32(w & Uint32(0xFFFF0000))


# ----------------------------------------------------------------------------------------------
# FP8 E4M3 with a per-row fp32 scale
# ----------------------------------------------------------------------------------------------
def fp8_row_scale(amax) -> Float32:
    """``scale = amax / 448`` (amax already NaN->0, inf->FLT_MAX; IEEE division)."""
    return div_rn(amax, Float32(E4M3_MAX))


def _safe_div(x, d) -> Float32:
    """formats._safe_div: ``x / d``, or ``x * 0.0`` (signed zero; NaN stays NaN) when d == 0."""
    x, d = Float32(x), Float32(d)
    return sel_f32(d != Float32(0.0), div_rn(x, d), mul_rn(x, Float32(0.0)))


def fp8_quantize(x, scale, sr: bool = False, word=None) -> Float32:
    """``round_e4m3(clamp(x / scale, +-448))`` (``x * 0`` when scale == 0) as an on-grid fp32."""
    return round_to_grid(_safe_div(x, scale), "e4m3", sr, word)


def pack_e4m3x4(a0, a1, a2, a3) -> Uint32:
    """Four on-grid fp32 -> four e4m3 bytes (a0 in the lowest byte), via the hardware
    ``cvt.rn.satfinite.e4m3x2.f32`` (exact for on-grid values; -0 -> 0x80)."""
    ptx = ("{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, $2, $1; "
           "cvt.rn.satfinite.e4m3x2.f32 hi, $4, $3; mov.b32 $0, {lo, hi}; }")
    return Uint32(_asm(T.i32(), ptx, "=r,f,f,f,f",
                       [Float32(v).ir_value() for v in (a0, a1, a2, a3)]))


def e4m3_byte(a) -> Uint32:
    """One on-grid fp32 -> its e4m3 byte (low 8 bits of the result; one hardware cvt)."""
    ptx = ("{ .reg .b16 t; cvt.rn.satfinite.e4m3x2.f32 t, 0f00000000, $1; "
           "cvt.u32.u16 $0, t; and.b32 $0, $0, 255; }")
    return Uint32(_asm(T.i32(), ptx, "=r,f", [Float32(a).ir_value()]))


def _e4m3x2_to_f16x2(w, hi: bool) -> Uint32:
    ptx = ("{ .reg .b16 l, h; mov.b32 {l, h}, $1; cvt.rn.f16x2.e4m3x2 $0, %s; }"
           % ("h" if hi else "l"))
    return Uint32(_asm(T.i32(), ptx, "=r,r", [Uint32(w).ir_value()]))


def unpack_e4m3x4(w):
    """Word of four e4m3 bytes -> four fp32 (byte 0 first), exact (``cvt.rn.f16x2.e4m3x2``)."""
    lo = _e4m3x2_to_f16x2(w, False)
    hi = _e4m3x2_to_f16x2(w, True)
    v0, v1 = f16x2_to_f32(lo)
    v2, v3 = f16x2_to_f32(hi)
    return v0, v1, v2, v3


def e4m3_byte_to_f32(b) -> Float32:
    """One e4m3 byte (low 8 bits of ``b``) -> fp32 (exact)."""
    return unpack_e4m3x4(Uint32(b) & Uint32(0xFF))[0]


# ----------------------------------------------------------------------------------------------
# NVFP4: E2M1 values in blocks of 16 with an E4M3 block scale and an fp32 global scale
# ----------------------------------------------------------------------------------------------
def nvfp4_global_scale(amax) -> Float32:
    """``s_glob = amax / 2688`` (amax over the whole matrix, NaN->0, inf->FLT_MAX)."""
    return div_rn(amax, Float32(NVFP4_GLOBAL_DIV))


def nvfp4_block_scale(amax_blk, s_glob) -> Float32:
    """``s_blk = RN_e4m3(min((amax_blk / 6) / s_glob, 448))`` (0 when s_glob == 0), as an
    on-grid (e4m3-representable, >= 0) fp32."""
    t = _safe_div(div_rn(amax_blk, Float32(E2M1_MAX)), s_glob)
    t = fmin_nq(t, Float32(E4M3_MAX))            # torch.clamp(max=448); t is never NaN here
    return round_to_grid(t, "e4m3", False)


def nvfp4_quantize(x, d, sr: bool = False, word=None) -> Float32:
    """``round_e2m1(clamp(x / d, +-6))`` (``x * 0`` when d == 0) as an on-grid fp32;
    ``d = mul_rn(s_blk, s_glob)``."""
    return round_to_grid(_safe_div(x, d), "e2m1", sr, word)


def e2m1_code(q) -> Uint32:
    """On-grid fp32 e2m1 value -> 4-bit code; sign from the fp32 sign bit (-0 -> 0x8); NaN -> 0
    (| sign), exactly like formats.float_to_e2m1_codes (compare chain, ties impossible)."""
    q = Float32(q)
    b = f32_bits(q)
    a = bits_f32(b & Uint32(0x7FFFFFFF))
    code = Uint32(0)
    for t in (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0):
        code = code + sel_u32(a >= Float32(t), 1, 0)
    return code | ((b >> Uint32(28)) & Uint32(8))


def pack_nibbles8(codes) -> Uint32:
    """Eight 4-bit codes -> one word; code j at bits [4j, 4j+4) (even index in the low nibble of
    each little-endian byte)."""
    w = Uint32(codes[0])
    for j in range(1, 8):
        w = w | (Uint32(codes[j]) << Uint32(4 * j))
    return w


def e2m1_pack8_rn(xs, d14, rcp, sign_src, nan_to_zero: bool = False) -> Uint32:
    """8 fp32 x -> 8 packed e2m1 codes (element i at bits [4i, 4i+4)), RN, for a block with
    d14 = d * 2^14 > 0 in the fast-division range: q = x / d14 (IEEE, Markstein with the
    refined reciprocal rcp), |q| clamped to 6 * 2^-14, rounded by magic addition, codes via
    the fp16 bit layout (value * 2^-14 has the e2m1 magnitude code at bits [11:9]); the signs
    from ``sign_src``. ``nan_to_zero``: a NaN x gets magnitude 0 (the reference's code; one
    maxNum more an element), else the block must hold no NaN (it would get magnitude 6)."""
    out = Uint32(0)
    hs = []
    for i in range(8):
        x = Float32(xs[i])
        q0 = x * rcp
        rem = fma_rn(-q0, d14, x)
        q = fma_rn(rem, rcp, q0)
        a = bits_f32(f32_bits(q) & Uint32(0x7FFFFFFF))
        if nan_to_zero:
            a = fmax_nq(a, Float32(0.0))
        a = cute.arch.fmin(a, Float32(6.0 * 2.0 ** -14))
        m = sel_f32(a < Float32(2.0 ** -13), Float32(256.0),
                    sel_f32(a < Float32(2.0 ** -12), Float32(512.0), Float32(1024.0)))
        r = sub_rn(add_rn(a, m), m)
        rs = f32_bits(r) | (f32_bits(sign_src[i]) & Uint32(0x80000000))
        hs.append(bits_f32(rs))
    for i in range(4):
        h = pack_f16x2(hs[i], hs[i + 4])       # element i low, element i + 4 high
        mag = h & Uint32(0x0E000E00)
        sgn = h & Uint32(0x80008000)
        if 9 - 4 * i >= 0:
            mag = mag >> Uint32(9 - 4 * i)
        else:
            mag = mag << Uint32(4 * i - 9)
        sgn = sgn >> Uint32(12 - 4 * i)
        out = out | mag | sgn
    return out


def e2m1_code_to_f32(code) -> Float32:
    """4-bit e2m1 code (low 4 bits of ``code``) -> fp32 value, exact. fp16 bit trick: magnitude
    bits at fp16 [11:9], sign at bit 15 give e2m1 * 2^-14; ``* 2^14`` is exact."""
    c = Uint32(code)
    h = ((c & Uint32(7)) << Uint32(9)) | ((c & Uint32(8)) << Uint32(12))
    v, _ = f16x2_to_f32(h)
    return mul_rn(v, Float32(16384.0))


# ----------------------------------------------------------------------------------------------
# tensor cores (mma.sync, fp32 accumulate) and tf32 operand splits
# ----------------------------------------------------------------------------------------------
MMA_OPS = {
    "f16": "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
    "bf16": "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
    "tf32": "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32",
}


def tf32_bits(x) -> Uint32:
    """``cvt.rna.tf32.f32``: x rounded to tf32 (10 mantissa bits), as b32 bits."""
    return Uint32(_asm(T.i32(), "cvt.rna.tf32.f32 $0, $1;", "=r,f", [Float32(x).ir_value()]))


def split_tf32(x):
    """x = hi + lo with hi, lo tf32 (3xTF32 operands, ~2^-22 relative)."""
    h = tf32_bits(x)
    r = Float32(_asm(T.f32(), "sub.rn.f32 $0, $1, $2;", "=f,f,f",
                     [Float32(x).ir_value(), bits_f32(h).ir_value()]))
    return h, tf32_bits(r)


def split_tf32_fast(x):
    """x ~ hi + lo for 3xTF32 in 4 integer / float ops (``split_tf32`` guards each cvt.rna for
    inf / NaN: 9): hi = x rounded to nearest tf32, ties away (cvt.rna's bits for finite x and
    inf), lo = x - hi (exact) truncated to tf32 (|error| < 2^-21 |x|; at most 2^-136 where lo
    falls below the normal range, |x| < ~2^-115). A NaN x gives a NaN lo (truncation keeps a NaN
    a NaN), so NaN still reaches the product; so does an infinite x, and |x| >= 0x7F7FF000
    rounds hi to inf as cvt.rna does. CPU check of the integer steps:
    tests/test_gdn_verify_compile.py::test_split_tf32_fast_arithmetic."""
    xb = f32_bits(x)
    h = (xb + Uint32(0x1000)) & Uint32(0xFFFFE000)
    r = Float32(_asm(T.f32(), "sub.rn.f32 $0, $1, $2;", "=f,f,f",
                     [Float32(x).ir_value(), bits_f32(h).ir_value()]))
    return h, f32_bits(r) & Uint32(0xFFFFE000)


def mma_sync(kind, a, b, c, volatile: bool = False):
    """One warp-level ``mma.sync`` (m16n8k16 f16/bf16 or m16n8k8 tf32), fp32 accumulate.
    a: 4 x b32, b: 2 x b32, c: 4 x f32 -> 4 x f32 (PTX fragment layouts). ``volatile``: keep the
    compiler from sinking the warp-collective op into a lane-divergent branch."""
    st = llvm.StructType.get_literal([T.f32()] * 4)
    r = llvm.inline_asm(
        st, [Uint32(x).ir_value() for x in a] + [Uint32(x).ir_value() for x in b]
        + [Float32(x).ir_value() for x in c],
        MMA_OPS[kind] + " {$0,$1,$2,$3}, {$4,$5,$6,$7}, {$8,$9}, {$10,$11,$12,$13};",
        "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", has_side_effects=bool(volatile),
        is_align_stack=False)
    return [Float32(llvm.extractvalue(T.f32(), r, [i])) for i in range(4)]
