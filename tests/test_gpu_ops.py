"""GPU tests (skipped without an sm_90+ GPU): CuTe kernels against the torch reference and the exact
recurrence, every precision pair, CUDA-graph capture. Run on the H200 before resolving kernel issues."""
import copy

import pytest
import torch

import replayssm_lp as R
from replayssm_lp import formats as F
from replayssm_lp import precision_pairs
from replayssm_lp.library import cache_tensors

from .conftest import requires_sm90
from .harness import gdn_trace, mamba2_trace

pytestmark = requires_sm90
ALL_PAIRS = list(precision_pairs(include_extra=True))
M2 = dict(H=8, P=64, N=128, G=2)
GDN = dict(H=2, HV=4, K=128, V=128)


def _units(a, b, fmt):
    """|a - b| in units of the target format's spacing at max(|a|, |b|) (fp32 inputs on its grid)."""
    if fmt == "fp32":
        return (a - b).abs() / (torch.maximum(a.abs(), b.abs()) * 2.0 ** -23).clamp(min=1e-45)
    m = F.FORMATS[fmt].mant_bits
    emin = F.FORMATS[fmt].emin
    mag = torch.maximum(a.abs(), b.abs()).clamp(min=2.0 ** emin)
    ulp = 2.0 ** (torch.floor(torch.log2(mag)) - m)
    return (a - b).abs() / ulp


def _stored(enc, fmt):
    """Stored values in target units: e4m3 / e2m1 / fp16 values (before scales) as fp32."""
    if fmt == "nvfp4":
        return F.e2m1_codes_to_float(F.unpack_nibbles(enc.data))
    return enc.data.float()


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_mamba2_standard_decode_matches_reference(state_dtype, seed):
    H, P, N, G = M2["H"], M2["P"], M2["N"], M2["G"]
    dev = "cuda"
    S = (torch.randn(20, H, P, N, device=dev) * 0.5).to(state_dtype)
    S_ref = S.clone()
    b = 7
    sbi = torch.tensor([3, -1, 19, 0, 7, -1, 11], dtype=torch.int32, device=dev)
    x, z = torch.randn(b, H, P, device=dev, dtype=torch.bfloat16), torch.randn(b, H, P, device=dev, dtype=torch.bfloat16)
    B, C = torch.randn(b, G, N, device=dev, dtype=torch.bfloat16), torch.randn(b, G, N, device=dev, dtype=torch.bfloat16)
    dt, A, D, bias = torch.randn(b, H, device=dev), -torch.rand(H, device=dev), torch.randn(H, device=dev), torch.randn(H, device=dev)
    out = torch.full((b, H, P), float("nan"), device=dev, dtype=torch.bfloat16)
    out_ref = out.clone()
    R.mamba2_standard_decode(S, x, dt, A, B, C, D, z, bias, True, sbi, out=out, backend="cute")
    R.mamba2_standard_decode(S_ref, x, dt, A, B, C, D, z, bias, True, sbi, out=out_ref, backend="torch")
    assert torch.isnan(out[[1, 5]]).all()
    v = [0, 2, 3, 4, 6]
    torch.testing.assert_close(out[v].float(), out_ref[v].float(), rtol=1e-2, atol=1e-2)
    tol = 1e-6 if state_dtype == torch.float32 else 1e-2
    torch.testing.assert_close(S.float(), S_ref.float(), rtol=tol, atol=tol)
    untouched = [i for i in range(20) if i not in (3, 19, 0, 7, 11)]
    assert torch.equal(S[untouched], S_ref[untouched])


@pytest.mark.parametrize("L", [4, 16])
def test_mamba2_replay_fp32_pair_equals_exact_recurrence(L, seed):
    out_err, state_err, _ = mamba2_trace(L, 0, 3 * L + 4, backend="cute", device="cuda", dims=M2)
    assert out_err < 1e-5 and state_err < 1e-5, (out_err, state_err)


@pytest.mark.parametrize("L", [4, 16])
def test_gdn_replay_fp32_pair_equals_exact_recurrence(L, seed):
    out_err, state_err, _ = gdn_trace(L, 0, 3 * L + 4, backend="cute", device="cuda", dims=GDN)
    assert out_err < 1e-5 and state_err < 1e-5, (out_err, state_err)


@pytest.mark.parametrize("L", [16, 32])
def test_gdn_fp32_small_batch_half_block(L, seed):
    """The GDN decode's fp32 read copy at 64 value rows per CTA (the default up to 2048 (row,
    value head) pairs where the heuristics would take 128: b30 here) against the torch
    reference over 3L + 3 staggered steps."""
    from cute_kernels import gdn_replay as GR
    assert GR.launch_block_v(30, GDN["HV"], GDN["K"], GDN["V"], "fp32", "fp32", L, "v2") == 64
    _twin_check("gdn", "fp32", L, pool=40, batch=30)


@pytest.mark.parametrize("L", [8, 16])
@pytest.mark.parametrize("pair", ["fp8/fp32", "bf16/fp32"])
def test_gdn_split_pair_half_block(pair, L, seed, monkeypatch):
    """The GDN decode's split pairs (fp8 / bf16 read copy, fp32 checkpoint: u recomputed from hi
    at the flush) at 64 value rows per CTA (REPLAYSSM_GDN_BLOCK_V=64: two CTAs per flushing head)
    against the torch reference over 3L + 3 staggered steps, b8."""
    from cute_kernels import gdn_replay as GR
    monkeypatch.setenv(GR.BLOCK_V_ENV, "64")
    assert GR.launch_block_v(8, GDN["HV"], GDN["K"], GDN["V"], pair.split("/")[0], "fp32", L,
                             "v2") == 64
    _twin_check("gdn", pair, L, pool=16, batch=8)


@pytest.mark.parametrize("L,batch", [(8, 8), (16, 16), (16, 48)])
@pytest.mark.parametrize("pair", ["nvfp4/fp16sr", "fp8/fp32", "bf16/fp32"])
def test_gdn_small_batch_split(pair, L, batch, seed):
    """The GDN decode's split launch by default below the split's own batch (b8 at L8, b16 at
    L16, also below the order's: order + 256-thread flush launch on a side stream + non-flush
    launch; fp8 / bf16 at 64 value rows at b8) against the torch reference over 3L + 3
    staggered steps."""
    from cute_kernels import gdn_replay as GR
    import replayssm_lp as R
    c = R.GDNReplayCache(2 * batch, GDN["H"], GDN["HV"], GDN["K"], GDN["V"], precision=pair,
                         buffer_len=L, device="cuda")
    assert GR.use_small_split(c, batch) and GR._split_honours(None, None)
    _twin_check("gdn", pair, L, pool=2 * batch, batch=batch)


@pytest.mark.parametrize("L,batch", [(8, 8), (16, 16), (16, 40)])
@pytest.mark.parametrize("pair", ["fp32", "nvfp4/fp16sr", "fp8/fp32", "bf16/fp32"])
def test_mamba2_small_batch_split(pair, L, batch, seed):
    """The Mamba-2 decode's split launch by default below the order's own batch (b8 at L8, b16
    at L16: order + flush rows' persistent launch on a side stream + non-flush launch) and, for
    fp32 / bf16 read copies, from it to SPLIT_SMALL_BELOW rows, against the torch reference
    over 3L + 3 staggered steps."""
    from cute_kernels import mamba2_replay as MR
    c = R.Mamba2ReplayCache(2 * batch, M2["H"], M2["P"], M2["N"], M2["G"], precision=pair,
                            buffer_len=L, device="cuda")
    assert MR.use_small_split(c, batch) and MR._split_honours()
    _twin_check("mamba2", pair, L, pool=2 * batch, batch=batch)


def _compare_stored(ct, cc, stats):
    """Stored copies of the kernel cache vs the reference cache after one step from identical bytes:
    low-precision formats within one unit; fp32 within fp32 rounding of the fold (relative to the
    matrix's magnitude, since the fold's summation order differs: its L + 1 terms each round,
    so the bound grows with L: ~2x the largest seen, 3.9e-6 at L = 32 / batch 256, 2.1e-6 at
    L = 16 / batch 256)."""
    p = cc.pair
    fold_tol = 2e-6 * max(1.0, (cc.buffer_len + 1) / 8)
    for enc_t, enc_c, fmt in ((ct.hi, cc.hi, p.rec_fmt), (ct.lo, cc.lo, p.read_fmt)):
        if enc_t is None:
            continue
        a, b = _stored(enc_c, fmt), _stored(enc_t, fmt)
        if fmt == "fp32":
            amax = b.abs().amax(dim=(-1, -2), keepdim=True).clamp(min=1e-30)
            err = ((a - b).abs() / amax).max().item()
            assert err <= fold_tol, (fmt, err)
        else:
            # one unit of the target format, beyond what the fp32 fold's summation order can move
            # an element that results from cancellation (fold_tol of the matrix's magnitude)
            amax = b.abs().amax(dim=(-1, -2), keepdim=True)
            excess = ((a - b).abs() - fold_tol * amax).clamp(min=0)
            u = _units(b + excess * torch.sign(a - b), b, fmt)
            assert u.max().item() <= 1.0 + 1e-6, (fmt, u.max().item())
        key = f"{'hi' if enc_t is ct.hi else 'lo'}:{fmt}"
        stats[key] = max(stats.get(key, 0.0), (a != b).float().mean().item())


def _twin_steps(kind, pair, L, steps, act=torch.bfloat16, dims=None, pool=24, batch=9,
                max_draft=0, has_z=True, philox_rounds=10, init_exact=False):
    """Run identical steps on a torch-backend cache and a cute-backend cache (same GPU, same seed;
    ``dims``: the layer's shape, default :data:`M2` / :data:`GDN`; ``max_draft``: the caches'
    draft capacity, which sizes their rings; ``has_z``: Mamba-2 steps with the gate z;
    ``philox_rounds``: the caches' SR generator rounds; ``init_exact``: the init's stored bytes
    compared bitwise, not within one unit).
    After every step the stored copies are compared and the reference is re-synced to the kernel's
    bytes, so each step is checked from identical state (an SR decision flipped by a last-bit fp32
    difference would otherwise make the two trajectories drift apart)."""
    dev = "cuda"
    if kind == "mamba2":
        d = dims or M2
        H, P, N, G = d["H"], d["P"], d["N"], d["G"]
        mk = lambda: R.Mamba2ReplayCache(pool, H, P, N, G, precision=pair, buffer_len=L,  # noqa: E731
                                         max_draft=max_draft, act_dtype=act, device=dev, seed=777,
                                         philox_rounds=philox_rounds)
        S0 = torch.randn(pool, H, P, N, device=dev) * 0.5
    else:
        d = dims or GDN
        H, HV, K, Vd = d["H"], d["HV"], d["K"], d["V"]
        mk = lambda: R.GDNReplayCache(pool, H, HV, K, Vd, precision=pair, buffer_len=L,  # noqa: E731
                                      max_draft=max_draft, act_dtype=act, device=dev, seed=777,
                                      philox_rounds=philox_rounds)
        S0 = torch.randn(pool, HV, Vd, K, device=dev) * 0.3
    ct, cc = mk(), mk()
    slots = torch.randperm(pool, device=dev)[:batch]
    ct.init_from_state(slots.tolist(), S0[slots], backend="torch")
    cc.init_from_state(slots.tolist(), S0[slots])
    outs, stats = [], {}
    _compare_stored(ct, cc, stats)  # the CuTe init encoder writes the torch encoder's bytes
    if init_exact:                  # ... bit for bit, SR words included
        for a, b in zip(cache_tensors(ct), cache_tensors(cc)):
            assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), "init bytes"
    for step in range(steps):
        pad = torch.rand(batch, device=dev) < 0.3
        sbi = torch.where(pad, torch.full_like(slots, -1), slots).to(torch.int32)
        res = []
        for cache, be in ((ct, "torch"), (cc, "cute")):
            g = torch.Generator(device=dev).manual_seed(step)
            r = lambda *s: torch.randn(*s, device=dev, generator=g)  # noqa: E731
            if kind == "mamba2":
                out = torch.full((batch, H, P), float("nan"), device=dev, dtype=act)
                R.mamba2_decode(cache, r(batch, H, P).to(act), r(batch, H), -torch.rand(H, device=dev, generator=g) - 0.1,
                                r(batch, G, N).to(act), r(batch, G, N).to(act), r(H),
                                r(batch, H, P).to(act) if has_z else None, r(H) * 0.3,
                                True, sbi, out=out, backend=be)
            else:
                out = torch.full((batch, HV, Vd), float("nan"), device=dev, dtype=act)
                R.gdn_decode(cache, r(batch, H, K).to(act), r(batch, H, K).to(act), r(batch, HV, Vd).to(act),
                             A_log=r(HV) * 0.5, a=r(batch, HV), dt_bias=r(HV) * 0.3, b=r(batch, HV),
                             state_batch_indices=sbi, out=out, backend=be)
            res.append(out)
        assert torch.isnan(res[1][pad]).all(), "pad rows must stay untouched"
        outs.append((res[0][~pad].float(), res[1][~pad].float()))
        for name in ("write_pos", "ring_origin", "flush_count", "pending"):
            assert torch.equal(getattr(ct, name), getattr(cc, name)), name
        assert int(cc.arrive.abs().sum()) == 0
        _compare_stored(ct, cc, stats)
        for a, b in zip(cache_tensors(ct), cache_tensors(cc)):
            a.copy_(b)
    return ct, cc, outs, stats


def _twin_check(kind, pair, L, steps=None, **kw):
    """:func:`_twin_steps` over ``steps`` (default 3L + 3) steps: the outputs within bf16 rounding
    of the reference's (the same fp32 math: equal up to an occasional bf16 rounding flip) and at
    least 3 flushes. Returns ``(kernel cache, worst output rel, stored-copy stats)``."""
    ct, cc, outs, stats = _twin_steps(kind, pair, L, 3 * L + 3 if steps is None else steps, **kw)
    worst = max(((a - b).norm() / b.norm().clamp(min=1e-30)).item() for b, a in outs)
    assert worst < 1e-2, worst
    assert int(cc.flush_count.max()) >= 3
    return cc, worst, stats


@pytest.mark.parametrize("pair", ALL_PAIRS)
@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_replay_step_matches_torch_reference(kind, pair, seed):
    cc, worst, stats = _twin_check(kind, pair, 4)
    print(f"{kind} {pair}: worst output rel {worst:.2e}; fraction of stored elements differing {stats}")


@pytest.mark.parametrize("pair,rounds", [("nvfp4/fp16sr", 7), ("nvfp4/fp16sr", 4), ("fp16sr", 7),
                                         ("nvfp4/fp8sr", 7), ("fp8/fp16sr", 6)])
@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_replay_step_with_philox_rounds_matches_reference(kind, pair, rounds, seed):
    """A cache's ``philox_rounds`` reaches every SR encoder: the init bytes equal the reference's
    (bitwise), and after each of 3L + 3 flushing steps the kernel's stored copies are within one
    unit of the reference's with almost none differing (an SR word drawn with other rounds moves
    about half of the rounded elements; a last-bit fold difference flips ~2^-13 of them)."""
    cc, worst, stats = _twin_check(kind, pair, 4, philox_rounds=rounds, init_exact=True)
    for key, frac in stats.items():
        assert frac < 1e-2, (key, frac)
    print(f"{kind} {pair} rounds {rounds}: worst output rel {worst:.2e}; differing {stats}")


@pytest.mark.parametrize("P", [64, 80])
@pytest.mark.parametrize("pair", ["fp32", "nvfp4/fp16sr", "fp8/fp32", "bf16/fp32", "nvfp4/fp8sr",
                                  "fp16sr"])
def test_mamba2_decode_at_256_threads(pair, P, seed, monkeypatch):
    """REPLAYSSM_M2_THREADS=256 (launches without the row order or the small-batch split: 6
    rows -- at 9 rows and L = 4 the small split takes the step, whose launches keep 128 threads):
    a head over 8 warps -- the twin check against the torch reference over 3L + 3 staggered
    steps, at P = 64 (each thread 2 flush chunks) and P = 80 (the last pass half duplicate rows)."""
    monkeypatch.setenv("REPLAYSSM_M2_THREADS", "256")
    _twin_check("mamba2", pair, 4, dims=dict(M2, P=P), batch=6)


ROW_SPLITS = [(64, 2), (64, 4), (80, 5)]          # (P, CTAs per head): P / k rows = 32 / 16 / 16


def _assert_row_split_engages(pair, P, k, L=4, batch=6):
    from cute_kernels import mamba2_replay as MR
    c = R.Mamba2ReplayCache(batch, M2["H"], P, M2["N"], M2["G"], precision=pair, buffer_len=L,
                            device="cuda")
    assert not MR.use_row_order(c, batch) and not MR.use_small_split(c, batch)
    assert MR.row_split_for(c, batch, MR.NUM_THREADS) == k


@pytest.mark.parametrize("P,k", ROW_SPLITS)
@pytest.mark.parametrize("pair", ["fp32", "fp8/fp32", "bf16/fp32", "fp16sr"])
def test_mamba2_decode_row_split_matches_reference(pair, P, k, seed, monkeypatch):
    """REPLAYSSM_M2_ROW_SPLIT=k: each head's rows over k CTAs (virtual heads of P / k rows):
    the twin check against the torch reference over 3L + 3 staggered steps with pad rows."""
    monkeypatch.setenv("REPLAYSSM_M2_ROW_SPLIT", str(k))
    _assert_row_split_engages(pair, P, k)
    _twin_check("mamba2", pair, 4, dims=dict(M2, P=P), batch=6)


@pytest.mark.parametrize("pair", ["nvfp4/fp16sr", "nvfp4/fp8sr"])
def test_gdn_nvfp4_few_ctas_full_register_cap(pair, seed, monkeypatch):
    """An nvfp4 GDN decode of at most one CTA per SM (here 4 rows x 4 value heads, below the
    small split's 8 rows; Qwen3.5 at b1-b4; unset switches) is built for one CTA per SM
    (``few_ctas_full_cap``: 255 registers) and matches the torch reference over 30 steps with
    random pad rows (>= 3 flushes)."""
    import inspect
    from cute_kernels import gdn_replay as GR
    monkeypatch.delenv(GR.MINB_ENV, raising=False)
    seen, real = [], GR.compile_gdn_replay

    def spy(*a, **kw):
        seen.append(inspect.signature(real).bind(*a, **kw).arguments.get("min_blocks_per_mp"))
        return real(*a, **kw)

    monkeypatch.setattr(GR, "compile_gdn_replay", spy)
    c = R.GDNReplayCache(8, GDN["H"], GDN["HV"], GDN["K"], GDN["V"], precision=pair, buffer_len=4,
                         device="cuda")
    assert not GR.use_small_split(c, 4)
    _twin_check("gdn", pair, 4, steps=30, pool=8, batch=4)
    assert seen and set(seen) == {1}, seen


#: GDN pairs whose read copy takes the mma path (the flush halves apply to them)
GDN_MMA_PAIRS = [p for p in ALL_PAIRS if not p.startswith("fp32")]


@pytest.mark.parametrize("mode", [1, 2])
@pytest.mark.parametrize("L", [4, 16])
@pytest.mark.parametrize("pair", GDN_MMA_PAIRS)
def test_gdn_decode_flush_halves(pair, L, mode, seed, monkeypatch):
    """A GDN decode of at most one CTA per SM (4 rows x 4 value heads, below the small split)
    with the flush column halves (``flush_halves_for``) -- mode 1: two warps per row tile (the
    default for fp8 / 16-bit reads), mode 2: the two CTAs of a cluster (the default for nvfp4
    reads); the other mode by REPLAYSSM_GDN_FLUSH_HALVES -- matches the torch reference over
    3L + 3 steps with random pad rows (>= 3 flushes): the P partials, output partials, fp8 row
    amaxes and the nvfp4 matrix amax summed / maxed over the two halves; L = 16 (two key
    tiles) on four pairs."""
    import inspect
    from cute_kernels import gdn_replay as GR
    if L == 16 and pair not in ("nvfp4/fp16sr", "nvfp4/fp8sr", "fp8/fp32", "fp16sr"):
        pytest.skip("L = 16 runs on four pairs (the exchange code is per key tile, not per pair)")
    for e in (GR.FLUSH_HALVES_ENV, GR.MINB_ENV, GR.TPW_ENV):
        monkeypatch.delenv(e, raising=False)
    if mode != (2 if pair.startswith("nvfp4") else 1):      # (not the pair's default)
        monkeypatch.setenv(GR.FLUSH_HALVES_ENV, str(mode))
    seen, real = [], GR.compile_gdn_replay

    def spy(*a, **kw):
        seen.append(int(inspect.signature(real).bind(*a, **kw).arguments.get("flush_halves", 0)))
        return real(*a, **kw)

    monkeypatch.setattr(GR, "compile_gdn_replay", spy)
    c = R.GDNReplayCache(8, GDN["H"], GDN["HV"], GDN["K"], GDN["V"], precision=pair, buffer_len=L,
                         device="cuda")
    assert not GR.use_small_split(c, 4) and not GR.use_row_order(c, 4)
    _twin_check("gdn", pair, L, pool=8, batch=4)
    assert seen and set(seen) == {mode}, seen


def _record_builds(monkeypatch, module, name):
    """The kernels ``module.name`` (a compile entry the launcher looks up through the module)
    returns from now on, in a list: what this test's own launches built or took from a cache."""
    built, real = [], getattr(module, name)

    def record(*a, **kw):
        k = real(*a, **kw)
        built.append(k)
        return k

    monkeypatch.setattr(module, name, record)
    return built


@pytest.mark.parametrize("L,batch,block_v", [(4, 4, None), (16, 4, None), (32, 4, None),
                                             (4, 9, None), (24, 4, 16), (32, 4, 16)])
@pytest.mark.parametrize("pair", ["nvfp4/fp16sr", "nvfp4/fp8sr", "fp8/fp32", "bf16/fp32",
                                  "fp8/fp16sr"])
def test_gdn_decode_gram_mma(pair, L, batch, block_v, seed, monkeypatch):
    """REPLAYSSM_GDN_GRAM_MMA=1: a split pair's flush Gram on the tensor cores (3xTF32, one warp
    per 16 keys) -- the twin check against the torch reference over 3L + 3 steps with random
    pad rows (>= 3 flushes): L = 4 / 16 (one 16-key tile, pre-split keys), L = 32 (two, keys
    split on the fly); b4 the plain grid (nvfp4: the CTA pair), b9 at L = 4 the small split's
    flush launch; 16 value rows per CTA (REPLAYSSM_GDN_BLOCK_V=16, not nvfp4: one warp per CTA)
    at L = 24 / 32, where the one warp takes both 16-key m-tiles."""
    from cute_kernels import gdn_replay as GR
    if block_v is not None and "nvfp4" in pair:
        pytest.skip("REPLAYSSM_GDN_BLOCK_V does not apply to nvfp4 pairs")
    monkeypatch.setenv(GR.GRAM_MMA_ENV, "1")
    if block_v is not None:
        monkeypatch.setenv(GR.BLOCK_V_ENV, str(block_v))
    built = _record_builds(monkeypatch, GR, "compile_gdn_replay")
    _twin_check("gdn", pair, L, pool=max(8, batch + 3), batch=batch)
    assert any(k.meta["gram_mma"] for k in built), (pair, [k.meta["gram_mma"] for k in built])


def _switch_env(monkeypatch, envs, env):
    """Set the switches of ``env`` (one dict of ``envs``), unset the other dicts' switches."""
    for name in set().union(*envs) - set(env):
        monkeypatch.delenv(name, raising=False)
    for name, val in env.items():
        monkeypatch.setenv(name, val)


def _wide_rows(*shape, dev="cuda"):
    """N(0, 1) matrices whose rows (dim -2) are scaled by 2^-30 .. 2^8: with inputs scaled by
    2^-20 (:data:`WIDE_INPUT`) the flushed states keep values in every fp16 regime (normal,
    subnormal, below 2^-24, zero-free) side by side, row by row."""
    s = torch.randint(-30, 9, (*shape[:-1], 1), device=dev).to(torch.float32)
    return torch.randn(*shape, device=dev) * torch.exp2(s)


WIDE_INPUT = 2.0 ** -20


def _assert_twins_equal(outs, pad, caches, step):
    """Two caches run under two switch settings: pad rows' (poisoned) outputs untouched, outputs
    and every cache tensor bit-identical."""
    assert torch.isnan(outs[1][pad]).all(), "pad rows must stay untouched"
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16)), step
    for a, b in zip(cache_tensors(caches[0]), cache_tensors(caches[1])):
        assert torch.equal(a, b), step


def _gdn_bit_identical_steps(pair, envs, monkeypatch, batch=4, L=4, max_draft=0, pool=8,
                             wide=False):
    """Two GDN caches through the same 3L + 3 steps with random pad rows (poisoned outputs), one
    under each environment of ``envs`` (two dicts of switches): outputs, stored copies, scales,
    ring buffers and cursors bit-identical after every step; at least 3 flushes (``wide``: the
    states of :func:`_wide_rows`, v scaled by :data:`WIDE_INPUT`). Returns the second cache."""
    H, HV, K, Vd, dev = GDN["H"], GDN["HV"], GDN["K"], GDN["V"], "cuda"
    caches = [R.GDNReplayCache(pool, H, HV, K, Vd, precision=pair, buffer_len=L,
                               max_draft=max_draft, act_dtype=torch.bfloat16, device=dev, seed=99)
              for _ in range(2)]
    slots = torch.randperm(pool, device=dev)[:batch]
    S0 = _wide_rows(batch, HV, Vd, K) if wide else torch.randn(batch, HV, Vd, K, device=dev) * 0.3
    for c in caches:
        c.init_from_state(slots.tolist(), S0)
    for step in range(3 * L + 3):
        pad = torch.rand(batch, device=dev) < 0.3
        sbi = torch.where(pad, torch.full_like(slots, -1), slots).to(torch.int32)
        g = torch.Generator(device=dev).manual_seed(2000 + step)
        r = lambda *s: torch.randn(*s, device=dev, generator=g)  # noqa: E731
        q, k, v = (r(batch, H, K).to(torch.bfloat16), r(batch, H, K).to(torch.bfloat16),
                   (r(batch, HV, Vd) * (WIDE_INPUT if wide else 1.0)).to(torch.bfloat16))
        gates = dict(A_log=r(HV) * 0.5, a=r(batch, HV), dt_bias=r(HV) * 0.3, b=r(batch, HV))
        outs = []
        for c, env in zip(caches, envs):
            _switch_env(monkeypatch, envs, env)
            out = torch.full((batch, HV, Vd), float("nan"), device=dev, dtype=torch.bfloat16)
            R.gdn_decode(c, q, k, v, **gates, state_batch_indices=sbi, out=out, backend="cute")
            outs.append(out)
        _assert_twins_equal(outs, pad, caches, step)
    assert int(caches[1].flush_count.max()) >= 3
    return caches[1]


@pytest.mark.parametrize("L,batch,max_draft", [(4, 4, 0), (16, 4, 0), (4, 4, 3), (8, 8, 0)])
@pytest.mark.parametrize("pair", ["fp32", "fp8/fp32", "bf16/fp32", "fp16sr", "nvfp4/fp16sr",
                                  "nvfp4/fp8sr"])
def test_gdn_decode_tail_bit_identical(pair, L, batch, max_draft, seed, monkeypatch):
    """The v2 decode's step tail (unset REPLAYSSM_GDN_TAIL = 3: the publish check after the
    CTA's last barrier, the key append from the q / k warp's bits, a split pair's v from the
    finishing lane's) gives the bytes of the build without it (0): outputs and every cache
    tensor over 3 flushes, for one-CTA rows (batch 4), a cache with draft capacity and, for the
    narrow read copies, the small split of 8 rows at L = 8 (``use_small_split``)."""
    from cute_kernels import gdn_replay as GR
    monkeypatch.delenv(GR.TAIL_ENV, raising=False)
    c = R.GDNReplayCache(2 * batch, GDN["H"], GDN["HV"], GDN["K"], GDN["V"], precision=pair,
                         buffer_len=L, max_draft=max_draft, device="cuda")
    assert GR.use_small_split(c, batch) == (batch == 8 and pair != "fp32"), (pair, batch)
    _gdn_bit_identical_steps(pair, ({GR.TAIL_ENV: "0"}, {}), monkeypatch, batch=batch, L=L,
                             max_draft=max_draft, pool=2 * batch)


@pytest.mark.parametrize("pair", ["fp32", "fp8/fp32", "fp16sr"])
def test_mamba2_decode_default_row_split(pair, seed, monkeypatch):
    """Unset REPLAYSSM_M2_ROW_SPLIT: 6 rows at L = 4 (P = 64) take the default k = 2
    (:data:`cute_kernels.mamba2_replay.ROW_SPLIT_ROWS`); the twin check against the reference."""
    monkeypatch.delenv("REPLAYSSM_M2_ROW_SPLIT", raising=False)
    _assert_row_split_engages(pair, 64, 2)
    _twin_check("mamba2", pair, 4, dims=M2, batch=6)


def _bit_identical_steps(pair, P, envs, monkeypatch, batch=6, L=4, wide=False):
    """Two caches through the same 3L + 3 staggered steps with pad rows (poisoned outputs), one
    under each environment of ``envs`` (two dicts of switches): outputs, stored copies, scales,
    buffers and cursors bit-identical after every step; at least 3 flushes (``wide``: the states
    of :func:`_wide_rows`, x scaled by :data:`WIDE_INPUT`)."""
    H, N, G, pool, dev = M2["H"], M2["N"], M2["G"], 16, "cuda"
    caches = [R.Mamba2ReplayCache(pool, H, P, N, G, precision=pair, buffer_len=L,
                                  act_dtype=torch.bfloat16, device=dev, seed=99) for _ in range(2)]
    slots = torch.randperm(pool, device=dev)[:batch]
    S0 = _wide_rows(batch, H, P, N) if wide else torch.randn(batch, H, P, N, device=dev) * 0.5
    for c in caches:
        c.init_from_state(slots.tolist(), S0)
    for step in range(3 * L + 3):
        pad = torch.rand(batch, device=dev) < 0.3
        if batch <= 2:                  # (one pad step: >= 3L + 2 steps a row, 3 flushes)
            pad[:] = False
            pad[step % batch] = step == 2
        sbi = torch.where(pad, torch.full_like(slots, -1), slots).to(torch.int32)
        g = torch.Generator(device=dev).manual_seed(1000 + step)
        r = lambda *s: torch.randn(*s, device=dev, generator=g)  # noqa: E731
        inp = ((r(batch, H, P) * (WIDE_INPUT if wide else 1.0)).to(torch.bfloat16), r(batch, H),
               -torch.rand(H, device=dev, generator=g) - 0.1,
               r(batch, G, N).to(torch.bfloat16), r(batch, G, N).to(torch.bfloat16), r(H),
               r(batch, H, P).to(torch.bfloat16), r(H) * 0.3)
        outs = []
        for c, env in zip(caches, envs):
            _switch_env(monkeypatch, envs, env)
            out = torch.full((batch, H, P), float("nan"), device=dev, dtype=torch.bfloat16)
            R.mamba2_decode(c, *inp, True, sbi, out=out, backend="cute")
            outs.append(out)
        _assert_twins_equal(outs, pad, caches, step)
    assert int(caches[1].flush_count.max()) >= 3


@pytest.mark.parametrize("P,k", ROW_SPLITS)
@pytest.mark.parametrize("pair", ["fp32", "fp8/fp32", "bf16/fp32", "fp16/fp32", "fp16sr", "bf16sr",
                                  "fp8sr", "fp8/fp16sr", "fp8sr/fp32", "fp8rn", "fp16rn"])
def test_mamba2_decode_row_split_bit_identical(pair, P, k, seed, monkeypatch):
    """The row split computes every element as the one-CTA-per-head launch does (same fold
    order, same per-row dots, SR counters of the real head and element)."""
    _bit_identical_steps(pair, P, ({"REPLAYSSM_M2_ROW_SPLIT": "1"},      # one CTA per head
                                   {"REPLAYSSM_M2_ROW_SPLIT": str(k)}), monkeypatch)
    _assert_row_split_engages(pair, P, k)


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("pair", ["bf16/fp32", "fp16/fp32", "fp16sr", "bf16sr", "fp16rn"])
def test_mamba2_decode_early_wide_read_bit_identical(pair, batch, seed, monkeypatch):
    """The 16-bit read copy issued before the preamble at <= 2 rows (``early_read_for``'s
    default: unset switches, 4 CTAs/SM, ring entries at their physical index) gives the bytes
    of the build that loads it at the head start (forced off, 7 CTAs/SM, logical ring loads):
    outputs and every cache tensor."""
    from cute_kernels import mamba2_replay as MR
    c = R.Mamba2ReplayCache(4, M2["H"], 64, M2["N"], M2["G"], precision=pair, buffer_len=4,
                            device="cuda")
    assert MR.early_read_for(c, batch, 1, 1, False) is True
    _bit_identical_steps(pair, 64, ({"REPLAYSSM_M2_EARLY_READ": "0"}, {}), monkeypatch,
                         batch=batch)


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("pair", ["fp8/fp32", "nvfp4/fp16sr", "fp8sr", "nvfp4/fp8sr"])
def test_mamba2_decode_few_rows_hint_bit_identical(pair, batch, seed, monkeypatch):
    """The fp8 / nvfp4 one-head build of a launch of <= 2 rows at 4 CTAs/SM (``few_rows_hint_for``:
    unset switches) gives the bytes of the build at the default hint (forced): outputs and every
    cache tensor."""
    from cute_kernels import mamba2_replay as MR
    c = R.Mamba2ReplayCache(4, M2["H"], 64, M2["N"], M2["G"], precision=pair, buffer_len=4,
                            device="cuda")
    assert MR.few_rows_hint_for(c, batch, 1, 1, False)
    base = MR.Mamba2ReplayDecode(pair, "bfloat16", "float32", M2["H"], 64, M2["N"], M2["G"], 4, 5,
                                 True, True, True, True).min_blocks_per_mp
    assert base != MR.EARLY_WIDE_MINB
    _bit_identical_steps(pair, 64, ({"REPLAYSSM_M2_MINBLOCKS": str(base)}, {}), monkeypatch,
                         batch=batch)
    # the unset side's launch compiled the few-rows build, at 4 CTAs/SM
    ops = [k.meta["op"] for k in MR._CACHE._d.values()]
    assert any(op.few_rows and op.pair.name == c.pair.name and op.H == M2["H"]
               and op.min_blocks_per_mp == MR.EARLY_WIDE_MINB for op in ops)


@pytest.mark.parametrize("pair,batch,L,hpc", [("fp32", 1, 4, 1), ("bf16/fp32", 2, 4, 1),
                                              ("nvfp4/fp16sr", 1, 4, 1), ("fp8/fp32", 6, 4, 1),
                                              ("fp16sr", 6, 4, 1), ("nvfp4/fp8sr", 2, 16, 1),
                                              ("fp32", 2, 16, 1), ("fp8/fp32", 3, 16, 2)])
def test_mamba2_decode_ring_phys_bit_identical(pair, batch, L, hpc, seed, monkeypatch):
    """REPLAYSSM_M2_RING_PHYS=1 (ring entries loaded at their physical index before the
    cursors, put in logical order after them) gives the bytes of the build without it: outputs
    and every cache tensor, over a ring origin that wraps (6 rows at L = 4 take the default row
    split; hpc 2: two heads per CTA, forced). The default rule's builds (early 16-bit read at
    <= 2 rows) are covered by the early-wide test against EARLY_READ=0."""
    h = {"REPLAYSSM_M2_HEADS_PER_CTA": str(hpc)}
    _bit_identical_steps(pair, 64, ({"REPLAYSSM_M2_RING_PHYS": "0", **h},
                                    {"REPLAYSSM_M2_RING_PHYS": "1", **h}), monkeypatch,
                         batch=batch, L=L)


@pytest.mark.parametrize("pair,batch,L", [("fp32", 1, 4), ("nvfp4/fp16sr", 1, 4),
                                          ("fp8/fp32", 2, 4), ("bf16/fp32", 1, 16),
                                          ("fp16sr", 6, 4), ("nvfp4/fp8sr", 2, 16),
                                          ("fp32", 6, 16)])
def test_mamba2_decode_late_check_bit_identical(pair, batch, L, seed, monkeypatch):
    """The late publish check (the check after the CTA's last barrier, the arrive as an
    ``atom.inc``: unset REPLAYSSM_M2_LATE_CHECK for fp32 / nvfp4 read copies, forced = 1 for
    the others) gives the bytes of the build without it (0): outputs and every cache tensor
    over 3 flushes, at one and two rows (one CTA per head) and six (the default row split: two
    CTAs per head); the cursors it publishes are the ones the next step reads."""
    from cute_kernels import mamba2_replay as MR
    on = {} if R.parse_pair(pair).read_fmt in MR.LATE_CHECK_READ_FMTS else {MR.LATE_CHECK_ENV: "1"}
    monkeypatch.delenv(MR.LATE_CHECK_ENV, raising=False)
    built = _record_builds(monkeypatch, MR, "compile_mamba2_replay")
    _bit_identical_steps(pair, 64, ({MR.LATE_CHECK_ENV: "0"}, on), monkeypatch, batch=batch, L=L)
    # this case's own launches took the late check, at its L and row split
    assert any(op.late_arrive_check and op.pair.name == pair and op.L == L
               and op.row_split == (2 if batch == 6 else 1)
               for op in (k.meta["op"] for k in built)), pair


F16_SR_PAIRS = [p for p in ALL_PAIRS if p.endswith("fp16sr")]


@pytest.mark.parametrize("L", [4, 16])
@pytest.mark.parametrize("pair", F16_SR_PAIRS)
def test_mamba2_f16_sr_chunk_bit_identical(pair, L, seed, monkeypatch):
    """The fp16 SR encode's chunk check (lowprec.pack_f16_sr; unset REPLAYSSM_F16_SR_CHUNK = 1)
    gives the bytes of round_f16_sr element by element (0), on states whose rows span 2^-30 ..
    2^8 (chunks of the fast path beside chunks with fp16 subnormals, values below 2^-24)."""
    from cute_kernels import lowprec as lp
    _bit_identical_steps(pair, 64, ({lp.F16_SR_CHUNK_ENV: "0"}, {}), monkeypatch, L=L, wide=True)


@pytest.mark.parametrize("L", [4, 16])
@pytest.mark.parametrize("pair", ["nvfp4/fp16sr", "nvfp4/fp8sr"])
def test_mamba2_e2m1_magic_bit_identical(pair, L, seed, monkeypatch):
    """The flush's nvfp4 RN fast path by magic addition (lowprec.e2m1_pack8_rn, unset
    REPLAYSSM_M2_E2M1) gives the bytes of the per-element codes from x/d (``code``), on states
    whose rows span 2^-30 .. 2^8 (blocks far below the matrix amax get a zero block scale and
    the slow path; the ties: tests/test_state_codec_compile.py)."""
    from cute_kernels import mamba2_replay as MR
    _bit_identical_steps(pair, 64, ({MR.E2M1_ENV: "code"}, {}), monkeypatch, L=L, wide=True)


@pytest.mark.parametrize("P,batch,L", [(64, 8, 4), (80, 8, 4), (64, 6, 4), (64, 16, 16)])
@pytest.mark.parametrize("pair", ["nvfp4/fp16sr", "nvfp4/fp8sr", "fp16sr", "fp32"])
def test_mamba2_fold_pair_bit_identical(pair, P, batch, L, seed, monkeypatch):
    """REPLAYSSM_M2_FOLD_PAIR=1 (two of a thread's chunks folded at once; with nvfp4 targets
    the pair's second chunk waits in smem during the first's encode) gives the bytes of the
    one-chunk fold (=0; for the default see Mamba2ReplayDecode._fold_pair_default): the small split
    (8 rows at L4, 16 at L16: its flush half), the shared kernel (6 rows), P = 80 (five chunks a
    thread: two pairs and a single one)."""
    from cute_kernels import mamba2_replay as MR
    c = R.Mamba2ReplayCache(batch, M2["H"], P, M2["N"], M2["G"], precision=pair, buffer_len=L,
                            device="cuda")
    assert MR.use_small_split(c, batch) is (batch >= 8), (pair, batch)
    monkeypatch.setenv(MR.FOLD_PAIR_ENV, "1")
    op = MR.Mamba2ReplayDecode(pair, "bfloat16", "float32", M2["H"], P, M2["N"], M2["G"], L,
                               L + 1, True, False, True, True, 4, True)
    assert op.fold_pair and op.fold_pairs == op.cfg.nit // 2, pair
    _bit_identical_steps(pair, P, ({MR.FOLD_PAIR_ENV: "0"}, {MR.FOLD_PAIR_ENV: "1"}),
                         monkeypatch, batch=batch, L=L, wide=True)


@pytest.mark.parametrize("P,batch,L", [(64, 8, 4), (80, 8, 4), (72, 8, 4), (64, 6, 4),
                                       (64, 16, 16)])
@pytest.mark.parametrize("pair", ["fp16sr", "fp8/fp16sr", "bf16sr", "nvfp4/fp16sr", "nvfp4/fp8sr",
                                  "fp32"])
def test_mamba2_pair_roll_bit_identical(pair, P, batch, L, seed, monkeypatch):
    """REPLAYSSM_M2_PAIR_ROLL=1 (a fold pair's two chunk encodes as one rolled loop, the second
    chunk waiting in smem; with nvfp4 targets every chunk kept in sS, none deferred to pass 2)
    gives the bytes of the inline pair (=0), both with the pair fold on: the small split's flush
    half, the shared kernel, P = 80 (a single chunk after two pairs), P = 72 (the same with
    clamped rows), fp32 (whose pair is the default in the split's flush half only)."""
    from cute_kernels import mamba2_replay as MR
    c = R.Mamba2ReplayCache(batch, M2["H"], P, M2["N"], M2["G"], precision=pair, buffer_len=L,
                            device="cuda")
    assert MR.use_small_split(c, batch) is (batch >= 8), (pair, batch)
    monkeypatch.setenv(MR.FOLD_PAIR_ENV, "1")
    monkeypatch.setenv(MR.PAIR_ROLL_ENV, "1")
    op = MR.Mamba2ReplayDecode(pair, "bfloat16", "float32", M2["H"], P, M2["N"], M2["G"], L,
                               L + 1, True, False, True, True, 4, True)
    assert op.pair_roll, pair
    _bit_identical_steps(pair, P, ({MR.FOLD_PAIR_ENV: "1", MR.PAIR_ROLL_ENV: "0"},
                                   {MR.FOLD_PAIR_ENV: "1", MR.PAIR_ROLL_ENV: "1"}),
                         monkeypatch, batch=batch, L=L, wide=True)


def _verify_twin_calls(pair, envs, monkeypatch, *, L, drafts, seed_base, x_scale=WIDE_INPUT,
                       min_accept=0, outputs_equal=True):
    """Two caches through the same 3L verify + commit calls, one under each environment of
    ``envs``: T = ``drafts[step % len(drafts)]``, acceptance in ``min_accept``..T, pad rows
    (poisoned outputs stay untouched), states of :func:`_wide_rows`, x scaled by ``x_scale``
    (0: exact zeros, every fold exactly zero); every cache tensor bit-identical after every call,
    the outputs too (``outputs_equal``; else only: every valid row's outputs written); at least 3
    flushes. Returns the second cache."""
    H, P, N, G, pool, batch, dev = M2["H"], 64, M2["N"], M2["G"], 16, 6, "cuda"
    caches = [R.Mamba2ReplayCache(pool, H, P, N, G, precision=pair, buffer_len=L,
                                  max_draft=max(drafts), act_dtype=torch.bfloat16, device=dev,
                                  seed=99) for _ in range(2)]
    slots = torch.randperm(pool, device=dev)[:batch]
    S0 = _wide_rows(batch, H, P, N)
    for c in caches:
        c.init_from_state(slots.tolist(), S0)
    for step in range(3 * L):
        g = torch.Generator(device=dev).manual_seed(seed_base + step)
        r = lambda *s: torch.randn(*s, device=dev, generator=g)  # noqa: E731
        t = drafts[step % len(drafts)]
        pad = torch.rand(batch, device=dev, generator=g) < 0.25
        sbi = torch.where(pad, torch.full_like(slots, -1), slots).to(torch.int32)
        xr = r(batch, t, H, P)
        x = (xr * x_scale).to(torch.bfloat16) if x_scale else torch.zeros_like(xr).to(
            torch.bfloat16)
        inp = (x, r(batch, t, H), -torch.rand(H, device=dev, generator=g) - 0.1,
               r(batch, t, G, N).to(torch.bfloat16), r(batch, t, G, N).to(torch.bfloat16))
        D, dt_bias = r(H), r(H) * 0.3
        acc = torch.randint(min_accept, t + 1, (batch,), device=dev, generator=g,
                            dtype=torch.int32)
        outs = []
        for c, env in zip(caches, envs):
            _switch_env(monkeypatch, envs, env)
            out = torch.full((batch, t, H, P), float("nan"), device=dev, dtype=torch.bfloat16)
            R.mamba2_verify(c, *inp, D=D, dt_bias=dt_bias, dt_softplus=True,
                            state_batch_indices=sbi, out=out, backend="cute")
            R.commit(c, acc, sbi, backend="cute")
            outs.append(out)
        if outputs_equal:
            _assert_twins_equal(outs, pad, caches, step)
        else:
            for o in outs:
                assert torch.isnan(o[pad]).all() and not torch.isnan(o[~pad]).any(), step
            for a, b in zip(cache_tensors(caches[0]), cache_tensors(caches[1])):
                assert torch.equal(a, b), (pair, step)
    assert int(caches[1].flush_count.max()) >= 3
    return caches[1]


@pytest.mark.parametrize("split", ["0", "1"])
@pytest.mark.parametrize("pair", ["fp8/fp16sr", "bf16/fp32", "nvfp4/fp16sr", "nvfp4/fp8sr"])
def test_mamba2_verify_pair_roll_bit_identical(pair, split, seed, monkeypatch):
    """The verify with the rolled pair encodes (REPLAYSSM_M2_PAIR_ROLL=1) gives the bytes of the
    inline pair (=0), both with the pair fold on, as one launch or split (REPLAYSSM_M2V_SPLIT=1:
    the flush rows' own launch): 3L verify + commit calls of T = 1..4 drafts with random
    acceptance, pad rows (poisoned outputs), flushed states in every fp16 regime; outputs,
    stored copies, scales, rings and cursors bit-identical after every call."""
    from cute_kernels import mamba2_replay as MR
    envs = tuple({MR.FOLD_PAIR_ENV: "1", "REPLAYSSM_M2V_SPLIT": split, MR.PAIR_ROLL_ENV: v}
                 for v in ("0", "1"))
    _verify_twin_calls(pair, envs, monkeypatch, L=4, drafts=(1, 2, 3, 4), seed_base=2000)


@pytest.mark.parametrize("pair", ["nvfp4/fp16sr", "nvfp4/fp32", "fp8/fp32", "fp8/fp16sr",
                                  "bf16/fp32", "nvfp4sr/fp16sr"])
def test_mamba2_verify_frag_split_encodes_bit_identical(pair, seed, monkeypatch):
    """The split pairs' fragment flush (REPLAYSSM_M2V_FRAG_SPLIT=1) stores the bytes of the
    CUDA-core flush (=0) when both fold exactly zero (x = 0 in every entry: S_new = fl(gf·hi) in
    both, whatever the summation order): every hi / lo word, block / row / global scale, SR word
    (both streams' counters), ring and cursor bit-identical after each of 3L verify + commit
    calls (split launch, 4 heads per CTA, T 3 / 8, L16, states in every fp16 regime); pad rows'
    outputs untouched. (The outputs are not compared: their dots differ by summation order.)"""
    from cute_kernels import mamba2_verify as MV
    envs = tuple({MV.SPLIT_ENV: "1", "REPLAYSSM_M2_HEADS_PER_CTA": "4", MV.FRAG_SPLIT_ENV: v}
                 for v in ("0", "1"))
    _verify_twin_calls(pair, envs, monkeypatch, L=16, drafts=(3, 8), seed_base=3000, x_scale=0.0,
                       min_accept=1, outputs_equal=False)
    ops = [MV._CACHE.get(k).meta["op"] for k in MV._CACHE.keys()]
    assert any(o.frag_split and o.hpc == 4 and o.pair.name == MV.parse_pair(pair).name
               for o in ops), pair


@pytest.mark.parametrize("fold_kib", [None, 4])
@pytest.mark.parametrize("pair", ["fp32", "nvfp4/fp16sr", "fp8/fp16sr"])
def test_mamba2_flush_v1_matches_torch_reference(pair, fold_kib, seed, monkeypatch):
    """The fallback flush (v1: REPLAYSSM_M2_FLUSH=1 forced, and the one a fold past one staging
    round takes -- REPLAYSSM_M2_FOLD_SMEM=4 KiB: 5 entries a round at P = 64, N = 128, so L = 8
    folds in two): the twin check against the torch reference over 3L + 3 staggered steps, 6
    rows (the shared kernel; at L = 8 fp32 and fp8/fp16sr take its row split, k = 2, also v1 --
    the build asserted here is the unsplit one)."""
    from cute_kernels import mamba2_replay as MR
    L = 8
    if fold_kib is None:
        monkeypatch.setenv("REPLAYSSM_M2_FLUSH", "1")
    else:
        monkeypatch.setenv(MR.FOLD_SMEM_ENV, str(fold_kib))
    op = MR.Mamba2ReplayDecode(pair, "bfloat16", "float32", M2["H"], M2["P"], M2["N"], M2["G"],
                               L, L + 1, True, False, True, True, 2, True)
    assert op.flush_impl == 1 and op.cfg.njb == (1 if fold_kib is None else 2), op.cfg
    _twin_check("mamba2", pair, L, batch=6)


@pytest.mark.parametrize("L,batch", [(4, 4), (16, 4), (8, 8)])
@pytest.mark.parametrize("pair", F16_SR_PAIRS)
def test_gdn_f16_sr_chunk_bit_identical(pair, L, batch, seed, monkeypatch):
    """As the Mamba-2 test for the GDN decode, the chunk check forced (its default is off: see
    ``GDNReplayDecodeV2.F16_SR_CHUNK``): one-CTA rows, the cluster pair of the nvfp4 copies at
    batch 4, the small split at batch 8 L = 8."""
    from cute_kernels import lowprec as lp
    _gdn_bit_identical_steps(pair, ({lp.F16_SR_CHUNK_ENV: "0"}, {lp.F16_SR_CHUNK_ENV: "1"}),
                             monkeypatch, batch=batch,
                             L=L, pool=2 * batch, wide=True)


@pytest.mark.parametrize("order,pair", [("0", "nvfp4/fp16sr"), ("1", "nvfp4/fp16sr"),
                                        ("cursors", "nvfp4/fp16sr"), ("0", "fp32")])
def test_cuda_graph_capture_replay(order, pair, seed, monkeypatch):
    # 1: each step through the flush-first order; cursors: its entries carry the cursors too;
    # fp32 at 6 rows: the default row split (two CTAs per head)
    monkeypatch.setenv("REPLAYSSM_M2_ORDER", "0" if order == "0" else "1")
    monkeypatch.setenv("REPLAYSSM_M2_ORDER_CURSORS", "1" if order == "cursors" else "0")
    H, P, N, G = M2["H"], M2["P"], M2["N"], M2["G"]
    dev, L, b = "cuda", 4, 6
    cache = R.Mamba2ReplayCache(8, H, P, N, G, precision=pair, buffer_len=L,
                                act_dtype=torch.bfloat16, device=dev, seed=5)
    cache.init_from_state(list(range(8)), torch.randn(8, H, P, N, device=dev))
    cache.write_pos.copy_(torch.tensor([0, 1, 2, 3, 0, 1, 2, 3], dtype=torch.int32))  # staggered
    sbi = torch.tensor([0, 2, -1, 5, 7, 1], dtype=torch.int32, device=dev)
    x = torch.randn(b, H, P, device=dev, dtype=torch.bfloat16)
    dt, A, Bm = torch.randn(b, H, device=dev), -torch.rand(H, device=dev), torch.randn(b, G, N, device=dev, dtype=torch.bfloat16)
    Cm, out = torch.randn(b, G, N, device=dev, dtype=torch.bfloat16), torch.zeros(b, H, P, device=dev, dtype=torch.bfloat16)
    twin = copy.deepcopy(cache)
    step = lambda c, o: R.mamba2_decode(c, x, dt, A, Bm, Cm, None, None, None, True, sbi, out=o, backend="cute")  # noqa: E731
    step(cache, out)  # compile + warm up outside capture
    step(twin, out.clone())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(2 * L):
            step(cache, out)
    ref_out = out.clone()
    for _ in range(3):
        g.replay()
        for _ in range(2 * L):
            step(twin, ref_out)
    torch.cuda.synchronize()
    assert torch.equal(out, ref_out)
    assert torch.equal(cache.write_pos, twin.write_pos) and torch.equal(cache.flush_count, twin.flush_count)
    assert torch.equal(cache.hi.data, twin.hi.data)
    assert cache.lo is None or torch.equal(cache.lo.data, twin.lo.data)


def test_verify_split_concurrent_capture_matches_single_launch(seed, monkeypatch):
    """The split verify (fp32 pair, fragment flush, T = 8) with its two launches at once -- flush
    rows on a side stream, cursors from the flush-first order -- captured with commits in a CUDA
    graph: outputs, checkpoint, ring and cursors bit-identical to the single launch, run eagerly;
    pad rows and unowned slots untouched, every row's arrive counter back to 0."""
    monkeypatch.setenv("REPLAYSSM_M2_ORDER", "1")
    monkeypatch.setenv("REPLAYSSM_M2_HEADS_PER_CTA", "2")     # the fragment flush: >= 2 heads
    monkeypatch.setenv("REPLAYSSM_M2V_SPLIT_CONCURRENT", "1")
    H, P, N, G = M2["H"], M2["P"], M2["N"], M2["G"]
    dev, L, T, b, slots = "cuda", 16, 8, 12, 20
    g = torch.Generator(device=dev).manual_seed(1000 + seed)
    r = lambda *s: torch.randn(*s, device=dev, generator=g)  # noqa: E731
    cache = R.Mamba2ReplayCache(slots, H, P, N, G, precision="fp32", buffer_len=L, max_draft=T,
                                act_dtype=torch.bfloat16, device=dev, seed=5)
    cache.init_from_state(list(range(slots)), r(slots, H, P, N))
    cache.write_pos.copy_(torch.arange(slots, dtype=torch.int32, device=dev) % (L + 1))
    sbi = torch.randperm(slots, device=dev, generator=g)[:b].to(torch.int32)
    sbi[3] = -1
    sbi[8] = -1
    x, z = r(b, T, H, P).to(torch.bfloat16), r(b, T, H, P).to(torch.bfloat16)
    dt, A, D = r(b, T, H), -torch.rand(H, device=dev, generator=g), r(H)
    Bm, Cm = r(b, T, G, N).to(torch.bfloat16), r(b, T, G, N).to(torch.bfloat16)
    acc = torch.randint(0, T + 1, (b,), device=dev, generator=g, dtype=torch.int32)
    twin = copy.deepcopy(cache)
    hi0, wp0 = cache.hi.data.clone(), cache.write_pos.clone()
    out = torch.full((b, T, H, P), float("nan"), device=dev, dtype=torch.bfloat16)
    ref = out.clone()

    def step(c, o):
        R.mamba2_verify(c, x, dt, A, Bm, Cm, D, z, None, True, sbi, out=o, backend="cute")
        R.commit(c, acc, sbi, backend="cute")

    monkeypatch.setenv("REPLAYSSM_M2V_SPLIT", "1")
    step(cache, out)                     # compile + warm up outside capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(3):
            step(cache, out)
    monkeypatch.setenv("REPLAYSSM_M2V_SPLIT", "0")
    step(twin, ref)
    for _ in range(2):
        graph.replay()
        for _ in range(3):
            step(twin, ref)
    torch.cuda.synchronize()
    assert int(twin.flush_count.max()) >= 2
    valid = sbi >= 0
    assert torch.equal(out[valid], ref[valid]) and out[~valid].isnan().all()
    unowned = torch.ones(slots, dtype=torch.bool, device=dev)
    unowned[sbi[valid].long()] = False
    assert torch.equal(cache.hi.data[unowned], hi0[unowned])
    assert torch.equal(cache.write_pos[unowned], wp0[unowned])
    for name in ("write_pos", "ring_origin", "flush_count", "pending", "x_buf", "B_buf",
                 "dt_buf", "dA_buf"):
        assert torch.equal(getattr(cache, name), getattr(twin, name)), name
    assert torch.equal(cache.hi.data, twin.hi.data)
    assert not cache.arrive.any() and not twin.arrive.any()


def test_commit_kernel_matches_torch(seed):
    c1 = R.Mamba2ReplayCache(10, 2, 8, 32, 1, buffer_len=8, max_draft=4, device="cuda")
    c1.pending.copy_(torch.randint(0, 5, (10,), dtype=torch.int32))
    c1.write_pos.copy_(torch.randint(0, 4, (10,), dtype=torch.int32))
    c2 = copy.deepcopy(c1)
    n = torch.randint(-1, 6, (6,), dtype=torch.int32, device="cuda")
    sbi = torch.tensor([9, -1, 0, 3, 4, -1], dtype=torch.int32, device="cuda")
    R.commit(c1, n, sbi, backend="cute")
    R.commit(c2, n, sbi, backend="torch")
    assert torch.equal(c1.write_pos, c2.write_pos) and torch.equal(c1.pending, c2.pending)


@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_out_of_range_slots_are_pad_rows_on_both_backends(kind, seed):
    """On CUDA tensors a slot outside [0, num_slots) is a pad row for the torch reference as for
    the kernels: its output stays poisoned and no slot changes (on CPU tensors it is an error)."""
    dev, pool, L, bf = "cuda", 8, 4, torch.bfloat16
    sbi = torch.tensor([2, pool + 3, 5, -7], dtype=torch.int32, device=dev)
    b = sbi.numel()
    for be in ("torch", "cute"):
        g = torch.Generator(device=dev).manual_seed(seed % 1000)
        r = lambda *s: torch.randn(*s, device=dev, generator=g)  # noqa: E731
        if kind == "mamba2":
            H, P, N, G = M2["H"], M2["P"], M2["N"], M2["G"]
            cache = R.Mamba2ReplayCache(pool, H, P, N, G, precision="nvfp4/fp16sr", buffer_len=L,
                                        act_dtype=bf, device=dev, seed=3)
            S0, out_shape, buf = r(pool, H, P, N) * 0.5, (b, H, P), "x_buf"
            step = lambda o: R.mamba2_decode(  # noqa: E731
                cache, r(b, H, P).to(bf), r(b, H), -torch.rand(H, device=dev), r(b, G, N).to(bf),
                r(b, G, N).to(bf), state_batch_indices=sbi, out=o, backend=be)
        else:
            H, HV, K, Vd = GDN["H"], GDN["HV"], GDN["K"], GDN["V"]
            cache = R.GDNReplayCache(pool, H, HV, K, Vd, precision="nvfp4/fp16sr", buffer_len=L,
                                     act_dtype=bf, device=dev, seed=3)
            S0, out_shape, buf = r(pool, HV, Vd, K) * 0.3, (b, HV, Vd), "k_buf"
            step = lambda o: R.gdn_decode(  # noqa: E731
                cache, r(b, H, K).to(bf), r(b, H, K).to(bf), r(b, HV, Vd).to(bf),
                g=-torch.rand(b, HV, device=dev), beta=torch.rand(b, HV, device=dev),
                state_batch_indices=sbi, out=o, backend=be)
        cache.init_from_state(list(range(pool)), S0, backend=be)
        watched = lambda: (cache.hi.data, getattr(cache, buf), cache.write_pos)  # noqa: E731
        before = [t.clone() for t in watched()]
        out = torch.full(out_shape, float("nan"), device=dev, dtype=bf)
        step(out)
        torch.cuda.synchronize()
        assert out[[1, 3]].isnan().all() and not out[[0, 2]].isnan().any(), be
        changed = [bool((a != c).reshape(len(a), -1).any(1)[[0, 1, 3, 4, 6, 7]].any())
                   for a, c in zip(before, watched())]
        assert not any(changed), (be, changed)        # only slots 2 and 5 may change
        assert bool((before[2] != cache.write_pos)[[2, 5]].all()), be
