"""Byte-level format contract (replayssm_lp.formats)."""
import math

import pytest
import torch

from replayssm_lp import formats as F


def _kat(ctr, key):
    out = F.philox4x32(torch.tensor(ctr, dtype=torch.int64), key[0], key[1])
    return [int(v) for v in out.tolist()]


def test_philox_known_answers():
    # Random123 philox4x32-10 known-answer vectors
    assert _kat([0, 0, 0, 0], [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert _kat([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]
    assert _kat([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344], [0xA4093822, 0x299F31D0]) == \
        [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]


def test_sr_words_counter_mapping(seed):
    seed_v = int(torch.randint(0, 2**62, (1,)))
    slots = torch.tensor([3, 7])
    gen = torch.tensor([0, 5])
    w = F.sr_words(seed_v, slots, 2, 4, 8, gen, stream=1)
    # element e of (slot 7, head 1) uses philox((e>>2, 1, 7, 1<<31 | 5), key)[e & 3]
    e = 13
    ctr = [e >> 2, 1, 7, (1 << 31) | 5]
    ref = _kat(ctr, [seed_v & 0xFFFFFFFF, seed_v >> 32])[e & 3]
    assert int(w[1, 1, e // 8, e % 8]) == ref
    # deterministic, and every counter component changes the bits
    assert torch.equal(w, F.sr_words(seed_v, slots, 2, 4, 8, gen, stream=1))
    for other in (F.sr_words(seed_v + 1, slots, 2, 4, 8, gen, 1), F.sr_words(seed_v, slots + 1, 2, 4, 8, gen, 1),
                  F.sr_words(seed_v, slots, 2, 4, 8, gen + 1, 1), F.sr_words(seed_v, slots, 2, 4, 8, gen, 0)):
        assert (other != w).float().mean() > 0.99
    assert (w[:, 0] != w[:, 1]).float().mean() > 0.99


@pytest.mark.parametrize("fmt,dtype", [("fp16", torch.float16), ("bf16", torch.bfloat16),
                                       ("fp8", torch.float8_e4m3fn)])
def test_rn_matches_cast_inside_range(fmt, dtype, seed):
    x = torch.randn(200_000) * torch.exp(torch.randn(200_000) * 6)
    r = F.round_to_grid(x, fmt, "rn")
    vmax = F.FORMATS[fmt].vmax
    assert torch.equal(r, x.clamp(-vmax, vmax).to(dtype).float())
    assert torch.equal(r.to(dtype).float(), r)  # on the grid: the cast is exact


def test_saturation_nan_inf_and_neg_zero():
    x = torch.tensor([465.0, 1000.0, float("inf"), -float("inf"), float("nan"), -0.0, 1e-30, -1e-30])
    r = F.round_to_grid(x, "fp8", "rn")
    assert r[:4].tolist() == [448.0, 448.0, 448.0, -448.0]
    assert math.isnan(r[4])
    assert r[5] == 0 and math.copysign(1, r[5]) < 0
    assert r[6] == 0 and math.copysign(1, r[6]) > 0 and math.copysign(1, r[7]) < 0
    h = F.round_to_grid(torch.tensor([70000.0, 65519.0, -1e9]), "fp16", "rn")
    assert h.tolist() == [65504.0, 65504.0, -65504.0]


def test_e2m1_rn_ties_to_even():
    x = torch.tensor([0.25, 0.26, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.01, 7.0, -0.75, -5.0])
    assert F.round_to_grid(x, "nvfp4", "rn").tolist() == [0.0, 0.5, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0,
                                                          6.0, 6.0, -1.0, -4.0]


def test_nvfp4_known_bytes():
    # one matrix [1, 16]: global amax 6 -> s_glob = 6/2688; block scale = RN_e4m3((6/6)/s_glob) = 448
    x = torch.tensor([[0.5, 1.0, -1.5, 2.0, 3.0, 4.0, 6.0, -0.0, 0.0, 0.25, 0.75, -6.0, 5.0, 1.25, 1.75, 2.5]])
    enc = F.encode(x.view(1, 1, 1, 16), "nvfp4")
    s_glob = torch.tensor(6.0) / 2688.0
    assert enc.global_scale.item() == s_glob.item()
    assert enc.scale.float().item() == 448.0
    d = (torch.tensor(448.0) * s_glob)
    codes = F.float_to_e2m1_codes(F.round_to_grid(x / d, "nvfp4"))
    # low nibble = even index
    packed = enc.data.view(-1).tolist()
    assert packed[0] == (codes[0, 0] | (codes[0, 1] << 4)).item()
    assert packed == [int(codes[0, 2 * i] | (codes[0, 2 * i + 1] << 4)) for i in range(8)]
    # x/d is not exactly x (d != 1): check the first element's code explicitly: 0.5 -> code 1
    assert packed[0] & 0xF == 1 and packed[0] >> 4 == 2      # 0.5 -> 1, 1.0 -> 2
    assert packed[3] == 0x87 and packed[4] & 0xF == 0        # 6.0 -> 7, -0.0 keeps its sign -> 0x8, +0 -> 0
    dec = F.decode(enc, "nvfp4")
    assert torch.allclose(dec.view(-1), x.view(-1).clamp(-6, 6), rtol=0.3, atol=0.3)


def test_nvfp4_zero_blocks_and_extremes(seed):
    S = torch.randn(2, 3, 4, 32)
    S[0, 0] = 0.0                            # a whole zero matrix (s_glob = 0)
    S[0, 1, 1, :16] = 0.0                    # a zero block
    S[1, 0] *= 1e30                          # huge
    S[1, 1] *= 1e-30                         # tiny
    S[1, 2, 0, 0] = -0.0
    enc = F.encode(S, "nvfp4")
    dec = F.decode(enc, "nvfp4")
    assert torch.isfinite(dec).all()
    assert (dec[0, 0] == 0).all() and (dec[0, 1, 1, :16] == 0).all()
    err = (dec - S).abs().amax(dim=(-1, -2)) / S.abs().amax(dim=(-1, -2)).clamp(min=1e-38)
    assert (err[1] < 0.2).all()
    # each element within half a step of its block's grid (dividing by the rounded scale)
    codes = F.unpack_nibbles(enc.data)
    assert (codes[1, 2, 0, 0] == 0x8)


def test_fp8_row_scales_known_bytes(seed):
    S = torch.randn(2, 2, 3, 16)
    S[0, 0, 1] = 0.0
    enc = F.encode(S, "fp8")
    amax = S.abs().amax(-1)
    assert torch.equal(enc.scale, amax / 448.0)
    q = enc.data.float()
    assert (q.abs() <= 448).all() and torch.isfinite(q).all()
    # the row max maps to +-448 exactly (or one e4m3 step below from the scale's rounding)
    rowmax = q.abs().amax(-1)
    assert ((rowmax[rowmax > 0] >= 416)).all()
    assert (q[0, 0, 1] == 0).all() and enc.scale[0, 0, 1] == 0
    dec = F.decode(enc, "fp8")
    assert ((dec - S).abs() <= amax[..., None] * 2 ** -4 + 1e-30).all()


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8", "nvfp4"])
@pytest.mark.parametrize("mode", ["rn", "sr"])
def test_no_nan_from_finite(fmt, mode, seed):
    S = torch.randn(3, 2, 8, 32) * torch.exp(torch.randn(3, 2, 8, 32) * 30).clamp(max=3e38)
    words = F.sr_words(seed, torch.arange(3), 2, 8, 32, torch.zeros(3, dtype=torch.int64), 0)
    dec = F.decode(F.encode(S, fmt, mode, words if mode == "sr" else None), fmt)
    assert torch.isfinite(dec).all()


def _neighbours(x, fmt):
    """The two grid points around x (lo toward zero, hi away), via RN-toward-zero by bit masks."""
    dn = F.round_to_grid(x, fmt, "sr", torch.zeros_like(x, dtype=torch.int64))           # truncation
    up = F.round_to_grid(x, fmt, "sr", torch.full_like(x, 0xFFFFFFFF, dtype=torch.int64))  # ceil (mag)
    return dn, up


@pytest.mark.parametrize("fmt", ["fp16", "bf16", "fp8", "nvfp4"])
def test_sr_two_neighbours_and_unbiased_per_binade(fmt, seed):
    spec = F.FORMATS[fmt]
    # one value per binade from below the smallest subnormal to just under vmax, plus near max
    lo_e = spec.emin - spec.mant_bits - 2
    hi_e = int(math.floor(math.log2(spec.vmax)))
    es = list(range(lo_e, hi_e + 1, max(1, (hi_e - lo_e) // 24)))
    vals = [(1.0 + float(torch.rand(1)) * 0.999) * 2.0 ** e for e in es]
    vals += [spec.vmax * 0.999, -spec.vmax * 0.9995, 2.0 ** (spec.emin - spec.mant_bits) * 0.3]
    x0 = torch.tensor(vals, dtype=torch.float32).clamp(-spec.vmax, spec.vmax)
    n = 40_000
    x = x0[:, None].expand(-1, n).contiguous()
    words = torch.randint(0, 2**32, x.shape, dtype=torch.int64)
    r = F.round_to_grid(x, fmt, "sr", words)
    dn, up = _neighbours(x0, fmt)
    for i in range(len(vals)):
        ri = r[i]
        assert ((ri == dn[i]) | (ri == up[i])).all(), (fmt, vals[i])
        if dn[i] == up[i]:
            assert (ri == x0[i]).all()
            continue
        p = float((x0[i] - dn[i]) / (up[i] - dn[i]))
        phat = float((ri == up[i]).double().mean())
        z = (phat - p) / math.sqrt(max(p * (1 - p), 1e-12) / n)
        assert abs(z) < 5, (fmt, vals[i], p, phat, z)
    # grid points are returned unchanged
    g = F.round_to_grid(x0, fmt, "rn")
    gw = torch.randint(0, 2**32, g.shape, dtype=torch.int64)
    assert torch.equal(F.round_to_grid(g, fmt, "sr", gw), g)


def test_sr_mean_over_random_values(seed):
    x = torch.randn(500_000) * 3
    w = torch.randint(0, 2**32, x.shape, dtype=torch.int64)
    r = F.round_to_grid(x, "bf16", "sr", w)
    dn, up = _neighbours(x, "bf16")
    ulp = (up - dn).abs()
    m = ulp > 0
    rel = ((r - x)[m] / ulp[m]).double()
    assert abs(rel.mean().item()) < 5 / math.sqrt(6 * m.sum().item())
    assert abs(rel.var().item() - 1 / 6) < 0.01


def test_sr_does_not_stagnate(seed):
    chains = 4096
    delta = 2.0 ** -12  # < half a bf16 ulp at 1.0: RN never moves
    rn = torch.ones(chains)
    sr = torch.ones(chains)
    for i in range(500):
        rn = F.round_to_grid(rn + delta, "bf16", "rn")
        sr = F.round_to_grid(sr + delta, "bf16", "sr", torch.randint(0, 2**32, (chains,), dtype=torch.int64))
    assert (rn == 1.0).all()
    # each step is unbiased: the mean over chains tracks 1 + 500 delta (std of the mean ~ 1e-3)
    assert abs(sr.double().mean().item() - (1.0 + 500 * delta)) < 6e-3


def test_encode_decode_roundtrip_all_formats(seed):
    S = torch.randn(2, 3, 16, 64)
    for fmt, tol in (("fp32", 0), ("fp16", 1e-3), ("bf16", 8e-3), ("fp8", 0.07), ("nvfp4", 0.2)):
        dec = F.decode(F.encode(S, fmt), fmt)
        rel = (dec - S).norm() / S.norm()
        assert rel <= tol + 1e-7, (fmt, rel)
    with pytest.raises(ValueError, match="multiple of 16"):
        F.encode(torch.randn(1, 1, 2, 24), "nvfp4")
    with pytest.raises(ValueError, match="unknown format"):
        F.encode(S, "fp6")
    with pytest.raises(ValueError, match="needs `words`"):
        F.round_to_grid(S, "fp16", "sr")


class _CudaScalarDivision(torch.overrides.TorchFunctionMode):
    """CPU emulation of how PyTorch divides a *CUDA* fp32 tensor by a CPU scalar (a Python number
    or a 0-dim CPU tensor): ``a * fp32(1 / b)`` (aten/src/ATen/native/cuda/BinaryDivTrueKernel.cu,
    the ``is_cpu_scalar(2)`` fast path), not the IEEE division the format spec (and the kernels'
    ``div.rn.f32``) uses. Counts the divisions it rewrote in ``hits``."""

    def __init__(self):
        super().__init__()
        self.hits = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if (name in ("div", "divide", "true_divide", "__truediv__", "div_") and len(args) == 2
                and kwargs.get("rounding_mode") is None and isinstance(args[0], torch.Tensor)
                and args[0].dtype == torch.float32):
            b = args[1]
            if isinstance(b, (int, float)) or (isinstance(b, torch.Tensor) and b.dim() == 0
                                               and b.device.type == "cpu"):
                self.hits += 1
                inv = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(float(b),
                                                                            dtype=torch.float32)
                return args[0] * inv
        return func(*args, **kwargs)


def _enc_bytes(enc):
    ts = [enc.scale, enc.global_scale, enc.data]
    return [None if t is None else t.contiguous().view(torch.uint8) for t in ts]


def test_encoders_divide_exactly_on_cuda_too():
    """The torch encoder runs on CUDA tensors too (``cache.write_state(backend="torch")``: the
    reference of the GPU checks) and must write the bytes it writes on CPU, which are the spec's
    (IEEE divisions, = the kernels' div.rn.f32). ``amax / 448`` on a CUDA tensor is
    ``amax * fp32(1/448)``: about half of the fp8 row scales were one ulp off while the e4m3 bytes
    still matched (check_mamba2_replay.py exact mode, fp8/fp32 P=80: 0 data / 891 scale bytes
    differed); likewise the nvfp4 global (/2688) and block (/6) scales."""
    g = torch.Generator().manual_seed(0)
    S = torch.randn(5, 4, 80, 128, generator=g) * torch.exp2(
        torch.randint(-4, 5, (1, 4, 1, 1), generator=g).float())
    S[:, 0, 0, :] = 0.0
    # the emulation has teeth: the reciprocal product is off for about half of these row maxima
    amax = S.abs().amax(-1)
    with _CudaScalarDivision() as m:
        recip = amax / F.E4M3_MAX
    assert m.hits == 1 and (recip != (amax.double() / 448).float()).float().mean() > 0.3
    # every byte (scales first) equal to the CPU encoder's
    for fmt in ("fp8", "nvfp4"):
        for mode in ("rn", "sr"):
            words = torch.randint(0, 2 ** 32, S.shape, generator=g) if mode == "sr" else None
            cpu = F.encode(S, fmt, mode, words)
            with _CudaScalarDivision():
                cuda = F.encode(S, fmt, mode, words)
            for a, b, what in zip(_enc_bytes(cpu), _enc_bytes(cuda), ("scale", "gscale", "data")):
                assert (a is None) == (b is None)
                if a is not None:
                    assert torch.equal(a, b), (fmt, mode, what, int((a != b).sum()))
    # ... which are the correctly rounded quotients (an fp64 quotient rounded once to fp32 is the
    # IEEE fp32 quotient)
    enc = F.encode(S, "fp8")
    assert torch.equal(enc.scale, (amax.double() / 448).float())
    enc = F.encode(S, "nvfp4")
    assert torch.equal(enc.global_scale, (amax.amax(-1).double() / 2688).float())
