"""Compile-only checks of the CuTe state encode / decode kernels (CPU, no GPU needed).

Every (fmt, rounding, stream) encoder and every decoder is compiled for Hopper
(``CUTE_DSL_ARCH=sm_90a``) at the state shapes R x C in {64x128, 80x128, 128x128}; the PTX is
grepped for IEEE division (``div.rn.f32`` only: no ``div.approx`` / ``div.full`` / ``rcp.approx``),
no flush-to-zero, the Philox multiplies in SR variants, the hardware e4m3 / f16 converts and 128-bit
global accesses. Bit-exactness against replayssm_lp.formats is checked on the GPU by
``tests/gpu_scripts/check_state_codec.py``.
"""
import os
import re
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")   # before cutlass is imported anywhere

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed: CuTe kernels not compiled")
pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi is not installed: the state codec needs TVM-FFI")

from replayssm_lp import formats as F  # noqa: E402
from cute_kernels import lowprec as lp  # noqa: E402
from cute_kernels import state_codec as sc  # noqa: E402

SHAPES = [(64, 128), (80, 128), (128, 128)]
ENC_VARIANTS = [(fmt, rnd, stream) for fmt in sc.FMTS for rnd in sc.ROUNDINGS for stream in (0, 1)]
_COMPILE_TIMES = {}


def _ptx_of(kind, fmt, R, C, rounding="rn", stream=0):
    t0 = time.perf_counter()
    k, ptx = sc.compile_only(kind, fmt, R, C, rounding=rounding, stream_id=stream)
    _COMPILE_TIMES[(kind, fmt, rounding, stream, R, C)] = time.perf_counter() - t0
    assert ptx, "no PTX was dumped"
    body = ptx[ptx.index(".entry"):]
    return k, body


def _count(pat, text):
    return len(re.findall(pat, text))


# ------------------------------------------------------------------------------------------------
# host-side facts
# ------------------------------------------------------------------------------------------------
def test_constants_match_formats():
    for name, grid in (("fp16", "fp16"), ("bf16", "bf16"), ("fp8", "e4m3"), ("nvfp4", "e2m1")):
        spec = F.FORMATS[name]
        assert lp.GRIDS[grid] == (spec.mant_bits, spec.emin, spec.vmax), name
    assert (lp.PHILOX_M0, lp.PHILOX_M1, lp.PHILOX_W0, lp.PHILOX_W1) == \
        (F.PHILOX_M0, F.PHILOX_M1, F.PHILOX_W0, F.PHILOX_W1)
    assert lp.PHILOX_ROUNDS == F.PHILOX_ROUNDS == 10
    assert lp.E4M3_MAX == F.E4M3_MAX and lp.E2M1_MAX == F.E2M1_MAX
    assert lp.NVFP4_GLOBAL_DIV == F.NVFP4_GLOBAL_DIV and lp.NVFP4_BLOCK == F.NVFP4_BLOCK


def _bits(x):
    return x.view(torch.int32).to(torch.int64) & 0xFFFFFFFF


def test_f16_sr_normal_range_shortcut_is_the_reference():
    """lp.pack_f16_sr's fast path: for every |x| in [2^-14, 65504] SR to fp16 is x's bits plus the
    word's low 13 bits, truncated (what its cvt.rz does), the reference's SR bit for bit; and
    lp.f16_normal_span admits exactly that range (zero, -0, the fp16 subnormal range, NaN, inf
    and everything past 65504 send a chunk to the per-element round_f16_sr)."""
    g = torch.Generator().manual_seed(36)
    n = 200_000
    e = torch.randint(-14, 16, (n,), generator=g).to(torch.float32)
    x = (1.0 + torch.rand(n, generator=g)) * torch.exp2(e)
    x = torch.where(torch.rand(n, generator=g) < 0.5, -x, x).clamp(-65504.0, 65504.0)
    lo, hi = 2.0 ** -14, 65504.0
    up = lambda v, d: torch.nextafter(torch.tensor([v]), torch.tensor([d]))  # noqa: E731
    edges = torch.cat([torch.tensor([lo, -lo, hi, -hi, 1.0, 2048.0, 2049.0]), up(lo, 1.0),
                       up(hi, 0.0), -up(hi, 0.0)])
    x = torch.cat([x, edges.repeat_interleave(64)])
    w = torch.randint(0, 2 ** 32, x.shape, generator=g, dtype=torch.int64)
    ref = F.round_to_grid(x, "fp16", "sr", words=w)
    fast = (_bits(x) + (w & 0x1FFF)) & 0xFFFFE000
    assert torch.equal(fast, _bits(ref))

    def admitted(v):
        d = ((_bits(torch.tensor(v, dtype=torch.float32)) & 0x7FFFFFFF)
             - lp.F16_NORMAL_LO_BITS) & 0xFFFFFFFF
        return (d <= lp.F16_NORMAL_SPAN).tolist()
    inside = [lo, -lo, hi, -hi, 1.0, -3.5, up(lo, 1.0).item(), up(hi, 0.0).item()]
    outside = [0.0, -0.0, up(lo, 0.0).item(), -up(lo, 0.0).item(), 2.0 ** -24, 2.0 ** -130,
               up(hi, 1e9).item(), 65520.0, float("inf"), -float("inf"), float("nan"), 3e38]
    assert all(admitted(inside)) and not any(admitted(outside))


def test_e2m1_magic_addition_is_the_reference_rn():
    """lp.e2m1_pack8_rn's rounding: a = min(|q|, 6) (NaN -> 0 with nan_to_zero) in units of
    2^-14, (a + m) - m with m = 256 / 512 / 1024 below 2 / 4 / above (fp32 RN-even: spacings
    0.5 / 1 / 2 e2m1 units), the code at fp16 bits [11:9] | the sign: the reference's RN code
    for every midpoint of the e2m1 grid, its fp32 neighbours, values past 6, zeros and NaN."""
    grid = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    mids = [(a + b) / 2 for a, b in zip(grid, grid[1:])] + [6.5, 7.0, 9.6, 1e30]
    base = torch.tensor(grid + mids, dtype=torch.float32)
    near = torch.cat([base, torch.nextafter(base, base + 1), torch.nextafter(base, base - 1),
                      torch.rand(20_000, generator=torch.Generator().manual_seed(7)) * 7])
    q = torch.cat([near, -near, torch.tensor([float("nan"), -float("nan"), -0.0])])
    a = torch.nan_to_num((q * 2.0 ** -14).abs(), nan=0.0).clamp(max=6.0 * 2.0 ** -14)
    m = torch.where(a < 2.0 ** -13, 256.0, torch.where(a < 2.0 ** -12, 512.0, 1024.0))
    r = (a + m) - m                                   # fp32 adds: IEEE RN-even
    h = r.to(torch.float16).view(torch.int16).to(torch.int64)
    code = ((h >> 9) & 7) | ((q.view(torch.int32) < 0).to(torch.int64) << 3)
    ref = F.float_to_e2m1_codes(F.round_to_grid(torch.nan_to_num(q, nan=0.0), "nvfp4", "rn"))
    ref = (ref & 7) | ((q.view(torch.int32) < 0).to(torch.int64) << 3)   # NaN: 0 | its sign
    assert torch.equal(code, ref)


def test_reference_philox_known_answer():
    # Random123 kat_vectors: philox4x32 10 rounds, counter 0, key 0
    out = F.philox4x32(torch.zeros(1, 4, dtype=torch.int64), 0, 0)[0].tolist()
    assert out == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]


def test_cache_key_normalisation():
    # RN ignores the stream id, fp32 ignores the rounding: they share one compiled kernel
    assert sc._enc_key("fp16", "rn", 0, 64, 128) == sc._enc_key("fp16", "rn", 1, 64, 128)
    assert sc._enc_key("fp32", "sr", 1, 64, 128) == sc._enc_key("fp32", "rn", 0, 64, 128)
    assert sc._enc_key("fp16", "sr", 0, 64, 128) != sc._enc_key("fp16", "sr", 1, 64, 128)


def test_bad_static_params():
    with pytest.raises(ValueError):
        sc.StateEncode("int4", "rn", 0, 64, 128)
    with pytest.raises(ValueError):
        sc.StateEncode("fp16", "rz", 0, 64, 128)
    with pytest.raises(ValueError):
        sc.StateEncode("nvfp4", "rn", 0, 64, 120)     # C % 16
    with pytest.raises(ValueError):
        sc.StateEncode("fp8", "sr", 2, 64, 128)       # stream id


# ------------------------------------------------------------------------------------------------
# encoders
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("R,C", SHAPES, ids=[f"{r}x{c}" for r, c in SHAPES])
@pytest.mark.parametrize("fmt,rounding,stream", ENC_VARIANTS,
                         ids=[f"{f}-{r}-s{s}" for f, r, s in ENC_VARIANTS])
def test_encode_compiles_and_ptx(fmt, rounding, stream, R, C):
    sr = rounding == "sr" and fmt != "fp32"
    if not sr and (stream == 1 or rounding == "sr"):
        # RN ignores the stream id and fp32 ignores the rounding: one kernel serves them all
        assert sc._enc_key(fmt, rounding, stream, R, C) == sc._enc_key(fmt, "rn", 0, R, C)
        pytest.skip("same kernel as the fp32/RN stream-0 variant (stream only feeds the SR counter)")
    k, ptx = _ptx_of("encode", fmt, R, C, rounding, stream)
    assert k.ffi is not None
    # The per-thread chunk loop (16 elements per chunk, R*C/16/128 chunks per thread) is a runtime
    # loop (unroll=1), so every count below is per chunk = per loop body.

    # IEEE division only, no flush-to-zero, no approximations
    assert _count(r"\bdiv\.(approx|full)", ptx) == 0
    assert _count(r"\brcp\.approx", ptx) == 0
    assert _count(r"\.ftz\b", ptx) == 0
    n_div = _count(r"\bdiv\.rn\.f32\b", ptx)
    if fmt == "fp8":
        assert n_div == 16 + 1                  # 16 elements + the row scale
    elif fmt == "nvfp4":
        assert n_div == 1 + 16 + 2              # s_glob; 16 elements + amax_blk/6, /s_glob
    else:
        assert n_div == 0
    assert _count(r"\bmul\.rn\.f32\b", ptx) >= (1 if fmt in ("fp8", "nvfp4") else 0)

    # Philox-4x32-10: 20 mul.wide.u32 per call, 4 calls per chunk = 80, minus the rounds-1/2
    # multiplies that only see the uniform counter words (slot), CSE'd across the 4 calls -> 74
    n_philox_mul = _count(r"mul\.wide\.u32 %rd", ptx)   # inline-asm form (with a space)
    if sr:
        assert 4 * 18 <= n_philox_mul <= 4 * 20
        # SR tiny branch: float(word >> 8) per element (bf16 has no tiny branch)
        assert _count(r"\bcvt\.rn\.f32\.u32\b", ptx) == (16 if fmt != "bf16" else 0)
    else:
        assert n_philox_mul == 0

    # storage converts
    if fmt == "fp16":
        assert _count(r"cvt\.rn\.f16x2\.f32", ptx) == 8
        # SR: lp.pack_f16_sr's fast branch (normal-range chunks) converts toward zero
        assert _count(r"cvt\.rz\.f16x2\.f32", ptx) == (8 if rounding == "sr" else 0)
    if fmt == "bf16":
        assert _count(r"cvt\.rn\.bf16x2\.f32", ptx) == 8
    if fmt == "fp8":
        assert _count(r"cvt\.rn\.satfinite\.e4m3x2\.f32", ptx) == 8
        assert _count(r"shfl\.sync\.bfly", ptx) == 3          # 8 lanes per row (C=128)
    if fmt == "nvfp4":
        assert _count(r"cvt\.rn\.satfinite\.e4m3x2\.f32", ptx) == 1     # block-scale byte
        assert _count(r"shfl\.sync\.bfly", ptx) == 5          # matrix amax, warp level
        assert _count(r"bar\.sync", ptx) == 1

    # vectorised fp32 loads (nvfp4 reads the matrix twice), vector stores of the packed words
    n_ld4 = _count(r"ld\.global(\.\w+)*\.v4\.b32", ptx)
    assert n_ld4 == 4 * (2 if fmt == "nvfp4" else 1)
    st_words = {"fp32": 16, "fp16": 8, "bf16": 8, "fp8": 4, "nvfp4": 2}[fmt]
    if st_words >= 4:
        assert _count(r"st\.global(\.\w+)*\.v4\.b32", ptx) == st_words // 4
    else:
        assert _count(r"st\.global(\.\w+)*\.v2\.b32", ptx) == 1
    assert _count(r"\b(ld|st)\.local\b", ptx) == 0


# ------------------------------------------------------------------------------------------------
# decoders
# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("R,C", SHAPES, ids=[f"{r}x{c}" for r, c in SHAPES])
@pytest.mark.parametrize("fmt", sc.FMTS)
def test_decode_compiles_and_ptx(fmt, R, C):
    k, ptx = _ptx_of("decode", fmt, R, C)
    assert k.ffi is not None
    assert _count(r"\bdiv\.", ptx) == 0
    assert _count(r"\.ftz\b", ptx) == 0
    assert _count(r"\bfma\.", ptx) == 0                  # products are single mul.rn
    assert _count(r"st\.global(\.\w+)*\.v4\.b32", ptx) == 4       # 16 fp32 per chunk
    n_ld = {"fp32": (4, 0), "fp16": (2, 0), "bf16": (2, 0), "fp8": (1, 0), "nvfp4": (0, 1)}[fmt]
    assert _count(r"ld\.global(\.\w+)*\.v4\.b32", ptx) == n_ld[0]
    assert _count(r"ld\.global(\.\w+)*\.v2\.b32", ptx) == n_ld[1]
    if fmt == "fp8":
        assert _count(r"cvt\.rn\.f16x2\.e4m3x2", ptx) == 8
        assert _count(r"\bmul\.rn\.f32\b", ptx) == 16
    if fmt == "nvfp4":
        # d = s_blk * s_glob, then per element (e2m1 * 2^-14 as f16) * 2^14 and * d
        assert _count(r"\bmul\.rn\.f32\b", ptx) == 1 + 2 * 16


def test_report_compile_times():
    """Not a check: prints the per-variant compile times gathered above (run with -s)."""
    if not _COMPILE_TIMES:
        pytest.skip("no compile ran in this session")
    tot = sum(_COMPILE_TIMES.values())
    print(f"\n{len(_COMPILE_TIMES)} state-codec compiles, {tot:.1f} s total, "
          f"max {max(_COMPILE_TIMES.values()):.2f} s")
    for key, t in sorted(_COMPILE_TIMES.items(), key=lambda kv: -kv[1])[:8]:
        print(f"   {t:6.2f} s  {key}")
