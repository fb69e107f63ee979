"""Compile-only checks of the GDN speculative-verify CuTe kernel (cute_kernels.gdn_verify) for
Hopper (sm_90a) on a machine without a GPU.

* every precision pair (``precision_pairs(include_extra=True)``) compiles once, with the draft
  count T cycling through 1, 2, 8 and both gate forms; fp32 and nvfp4/fp16sr also at every
  T in {1, 2, 8}; one variant with 16-row CTAs (small batches). Per variant: 16-byte read-copy loads, no local memory in the PTX (no dynamically
  indexed registers), the flush's 3xTF32 tensor-core fold, the row-cursor atomic, nvfp4 pairs
  with whole-head CTAs;
* tiling / shared-memory budget and ``supports_cache`` over pairs x T x L (pure Python).

The compiles run in two worker processes (``cute.compile`` is not thread-safe; processes are
fine), so the file takes about half the serial time on 2 cores; in one inside a pytest-xdist
worker (``tests.harness.compile_workers``). Skips visibly when
nvidia-cutlass-dsl (or apache-tvm-ffi) is missing.
"""
import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # before cutlass is imported

import pytest  # noqa: E402

cutlass = pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")
pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi is not installed (tensor-free compile)")

from cute_kernels import gdn_replay as GR  # noqa: E402
from cute_kernels import gdn_verify as GV  # noqa: E402
from replayssm_lp import precision_pairs  # noqa: E402
from tests.harness import compile_workers  # noqa: E402

PAIRS = list(precision_pairs(include_extra=True))
TS = (1, 2, 8)
# every pair once (T and gate form cycling), plus all T for two pairs
VARIANTS = [(p, TS[i % 3], "raw" if i % 2 else "given", None) for i, p in enumerate(PAIRS)]
for _p in ("fp32", "nvfp4/fp16sr"):
    VARIANTS += [(_p, t, "raw", None) for t in TS
                 if (_p, t) not in {(v[0], v[1]) for v in VARIANTS}]
VARIANTS.append(("fp8/fp32", 4, "raw", 16))   # small batches: 16 value rows (one warp) per CTA


def _compile(args):
    pair, T, gates, bv = args
    return GV.compile_report(pair, T, L=16, gates=gates, block_v=bv)


@pytest.fixture(scope="module")
def reports():
    workers = compile_workers(len(VARIANTS))
    if workers == 1:
        return {(v[0], v[1], v[3]): _compile(v) for v in VARIANTS}
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as ex:
        out = list(ex.map(_compile, VARIANTS))
    return {(v[0], v[1], v[3]): r for v, r in zip(VARIANTS, out)}


@pytest.mark.parametrize("pair,T,gates,block_v", VARIANTS)
def test_gdn_verify_compiles(reports, pair, T, gates, block_v):
    r = reports[(pair, T, block_v)]
    assert r["secs"] < 90, r          # generous: shared CI machines are often loaded
    st = r["stats"]
    rf, _, cf, _, _ = GR.pair_key(pair)
    # read copy: 16-byte loads (2 rows x K * bits / 512 per thread)
    assert st["ld.global.v4"] >= 2 * (128 * GR.FMT_BITS[rf] // 512), (r["tile"], st)
    assert st["ld.local"] == 0 and st["st.local"] == 0, (r["tile"], st)
    # the flush fold (v2) on tensor cores: 3xTF32 rank update and S Kn^T
    assert r["mma_tf32"] >= 3 * 16, r
    assert r["atomics"] >= 1, r          # the row's arrival counter (last CTA moves the cursors)
    if "nvfp4" in (rf, cf):
        assert r["block_v"] == 128        # the nvfp4 global scale needs the whole matrix


def test_gdn_verify_tiles():
    for pair in PAIRS:
        rf, _, cf, _, split = GR.pair_key(pair)
        for L in (4, 8, 16, 32):
            for T in range(1, GV.MAX_T + 1):
                for bv in GR.V2_BLOCK_VS:
                    if "nvfp4" in (rf, cf) and bv != 128:
                        continue
                    if T > L:
                        with pytest.raises(ValueError, match="T <= buffer_len"):
                            GV.VerifyTile(rf, cf, 128, 128, bv, L, split, T)
                        continue
                    t = GV.VerifyTile(rf, cf, 128, 128, bv, L, split, T)
                    # over the 47 KB budget only for the pre-split keys (3 CTAs/SM still fit)
                    # and the fp32 pair's flush-tile staging (2 CTAs/SM by registers anyway)
                    assert t.smem_bytes - t.flush_tile_bytes <= (
                        GV.KSPLIT_SMEM_LIMIT if t.ks_split else GR.SMEM_LIMIT), t
                    assert t.flush_tile_bytes == (4 * L * bv + 16 if pair == "fp32" else 0)
                    if rf != "fp32" and t.lp <= 16 and bv == 128:
                        assert t.ks_split, t          # narrow read copies: keys pre-split
                    assert t.num_threads == 2 * bv and t.tpw == 1
                    assert L * GV.KD_PITCH <= t.lp * GR.KS_PITCH
    with pytest.raises(ValueError, match="T <= 8"):
        GV.VerifyTile("fp32", "fp32", 128, 128, 128, 16, False, 9)
    # fp8 read copies from T = 4: 2 CTAs/SM (128 registers); others as the decode rule
    t8 = GV.VerifyTile("fp8", "fp32", 128, 128, 128, 16, True, 8)
    assert GV.verify_min_blocks(t8, "fp8", "fp32", 8192) == 2
    tn = GV.VerifyTile("nvfp4", "fp16", 128, 128, 128, 16, True, 8)
    assert GV.verify_min_blocks(tn, "nvfp4", "fp16", 8192) == 3
    assert GV.verify_supported("nvfp4", "fp16", 128, 128, 16, 8)
    assert not GV.verify_supported("fp32", "fp32", 64, 64, 16, 2)      # K = 128 only
    assert not GV.verify_supported("fp32", "fp32", 128, 128, 48, 2)    # L <= 32
    assert not GV.verify_supported("fp32", "fp32", 128, 128, 4, 8)     # T <= L


def test_gdn_verify_supports_cache():
    from replayssm_lp import GDNReplayCache

    assert GV.supports_cache(GDNReplayCache(2, 2, 4, 128, 128, precision="nvfp4/fp16sr",
                                            buffer_len=16, max_draft=8))
    assert not GV.supports_cache(GDNReplayCache(2, 2, 4, 128, 128, buffer_len=4, max_draft=8))
    assert not GV.supports_cache(GDNReplayCache(2, 2, 4, 64, 64, buffer_len=16, max_draft=4))


def test_gdn_verify_tail_variant(monkeypatch):
    """REPLAYSSM_GDN_VERIFY_TAIL (unset: tail_default -- on, except nvfp4 read copies past
    T = 4): committed keys by cp.async after the cursors (16-byte chunks + 4-byte kinv), the
    committed ring terms in the row-owner finish (no extra pass); part of the compile key; no
    extra shared memory (the keys land in the flush workspace); L not a multiple of 4 takes the
    scalar coefficient reads."""
    import re
    monkeypatch.delenv(GV.TAIL_ENV, raising=False)
    args = ("fp32", "bfloat16", 16, 32, 128, 128, 16, 24, 8, None, None, "float32", "bfloat16",
            "float32", "bfloat16", True, True, None)
    kw1, key1 = GV._resolve(*args)
    assert kw1["tail"] is True
    assert GV._resolve("nvfp4/fp16sr", *args[1:])[0]["tail"] is False
    assert GV._resolve("nvfp4/fp16sr", *args[1:8], 4, *args[9:])[0]["tail"] is True
    monkeypatch.setenv(GV.TAIL_ENV, "0")
    kw0, key0 = GV._resolve(*args)
    assert kw0["tail"] is False and key0 != key1
    assert GV.TAIL_ENV in GV._ENV_NAMES
    assert GV.GDNVerifyKernel(**dict(kw0, tail=None)).tail is True         # direct construction
    monkeypatch.setenv(GV.TAIL_ENV, "1")
    for pair, T, L in (("fp32", 8, 16), ("nvfp4/fp16sr", 6, 6)):
        k, ptx = GV.compile_only(pair, L=L, T=T, keep_ptx=True)
        assert re.search(r"cp\.async\.c[ag]\.shared\.global(\.L2::\w+)?\s+\[[^\]]+\], "
                         r"\[[^\]]+\], 16(, 16)?;", ptx)        # the 16-byte key chunks
        assert "cp.async.wait_group" in ptx
        assert ptx.count("ld.local") == 0 and ptx.count("st.local") == 0
    # the longest buffer: the committed keys (L x K, activation dtype) fit the flush key buffer
    op = GV.GDNVerifyKernel(**dict(kw1, L=32, ring=40))
    assert op.tail and 32 * 128 * 4 <= op.tile.lp * GR.KS_PITCH * 4
    # one-warp CTAs at L = 32 would stage 128 key values per thread: no tail there
    assert not GV.GDNVerifyKernel(**dict(kw1, L=32, ring=40, block_v=16)).tail
    assert GV.GDNVerifyKernel(**dict(kw1, block_v=16)).tail                 # 64 at L = 16
    # the profiling build needs whole-head CTAs (its record spans the head's output row)
    with pytest.raises(ValueError, match="profiling build"):
        GV.GDNVerifyKernel(**dict(kw1, block_v=64, prof=True))


def test_gdn_verify_mma_dots_variant(monkeypatch):
    """REPLAYSSM_GDN_VERIFY_MMA (default on; 0: CUDA cores): the non-flush read dots on the
    tensor cores -- 2 tf32 mma per k-step and n-tile for read copies exact in tf32 (nvfp4, fp8,
    bf16), 3xTF32 for fp32; the flush's own 3xTF32 fold stays; part of the compile key; no
    local memory."""
    monkeypatch.delenv(GV.MMA_ENV, raising=False)
    monkeypatch.setenv(GV.BSPLIT_ENV, "0")   # the flush's output dots stay on the CUDA cores
    monkeypatch.setenv(GV.FLUSH_TILE_ENV, "0")   # (fp32: the (g, t) flush and its mma fold)
    args = ("fp32", "bfloat16", 16, 32, 128, 128, 16, 24, 8, None, None, "float32", "bfloat16",
            "float32", "bfloat16", True, True, None)
    kw1, key1 = GV._resolve(*args)
    monkeypatch.setenv(GV.MMA_ENV, "0")
    kw0, key0 = GV._resolve(*args)
    assert kw0["mma_dots"] is False and kw1["mma_dots"] is True and key0 != key1
    assert GV.MMA_ENV in GV._ENV_NAMES
    for pair, T, per_step in (("fp32", 8, 3), ("nvfp4/fp16sr", 3, 2), ("fp8/fp32", 8, 2),
                              ("fp16/fp32", 4, 2)):
        monkeypatch.setenv(GV.MMA_ENV, "0")
        r0 = GV.compile_report(pair, T)
        monkeypatch.setenv(GV.MMA_ENV, "1")
        r1 = GV.compile_report(pair, T)
        nj = (2 * T + 7) // 8
        assert r1["mma_tf32"] - r0["mma_tf32"] == per_step * 16 * nj, (pair, r0, r1)
        assert r1["stats"]["ld.local"] == 0 and r1["stats"]["st.local"] == 0


def test_gdn_verify_bsplit_variant(monkeypatch):
    """REPLAYSSM_GDN_VERIFY_BSPLIT (default: on at a 128-register budget): the 2T vectors split
    into tf32 pieces once per CTA in shared memory (one 16-byte load per n-tile and k-step, a
    bank-spreading pitch), and the flush rows' output dots on the same 3xTF32 mma path -- the
    latter only at 128 registers; part of the compile key; no local memory. Also the
    coefficient-dots-first order (REPLAYSSM_GDN_VERIFY_COEF_FIRST) and the block_v override
    (REPLAYSSM_GDN_VERIFY_BV) of the tuning runs."""
    for e in (GV.BSPLIT_ENV, GV.COEF_FIRST_ENV, GV.BV_ENV):
        monkeypatch.delenv(e, raising=False)
        assert e in GV._ENV_NAMES
    # (the flush hook's dots: fp32 flush rows take them from the (g, t) flush here, not from
    # the read tile they hold)
    monkeypatch.setenv(GV.FLUSH_TILE_ENV, "0")
    assert GV.bsplit_setting(256, 2) and GV.bsplit_setting(128, 4) and GV.bsplit_setting(256, 0)
    assert not GV.bsplit_setting(256, 3)                 # 80 registers: the spilling flush's L1
    args = ("fp32", "bfloat16", 16, 32, 128, 128, 16, 24, 8, None, None, "float32", "bfloat16",
            "float32", "bfloat16", True, True, None)
    kw1, key1 = GV._resolve(*args)
    assert kw1["bsplit"] is True and kw1["coef_first"] is False
    assert GV._resolve("nvfp4/fp16sr", *args[1:])[0]["bsplit"] is False      # 3 CTAs/SM
    # a small nvfp4 launch keeps 2 CTAs/SM (128 registers): bsplit there
    assert GV._resolve("nvfp4/fp16sr", *args[1:], min_blocks_per_mp=2)[0]["bsplit"] is True
    monkeypatch.setenv(GV.BSPLIT_ENV, "0")
    kw0, key0 = GV._resolve(*args)
    assert kw0["bsplit"] is False and key0 != key1
    # shared memory: the pieces of whole n-tiles of vectors, pitch 4 (mod 32) words
    t0 = GV.VerifyTile("fp32", "fp32", 128, 128, 128, 16, False, 8)
    t1 = GV.VerifyTile("fp32", "fp32", 128, 128, 128, 16, False, 8, bsplit=True)
    assert t1.bp_pitch % 32 == 4 and t1.bp_words == 16 * t1.bp_pitch
    assert t1.smem_bytes - t0.smem_bytes == 4 * t1.bp_words and t1.ks_split == t0.ks_split
    t3 = GV.VerifyTile("fp32", "fp32", 128, 128, 128, 16, False, 3, bsplit=True)
    assert t3.bp_words == 8 * t3.bp_pitch                 # 6 vectors, one whole n-tile
    for rf, cf, split in (("fp8", "fp32", True), ("nvfp4", "fp16", True)):
        for T in (4, 8):
            a = GV.VerifyTile(rf, cf, 128, 128, 128, 16, split, T)
            b = GV.VerifyTile(rf, cf, 128, 128, 128, 16, split, T, bsplit=True)
            assert a.ks_split and b.ks_split == a.ks_split   # its bytes do not decide ks_split
    # the fp32 A split's integer steps (test_split_tf32_fast_arithmetic checks them in numpy):
    # hi = (bits + 0x1000) & 0xFFFFE000, lo masked -- 4 values per k-step, read dots + hook
    import re
    monkeypatch.setenv(GV.BSPLIT_ENV, "1")
    _, ptx = GV.compile_only("fp32", T=8, keep_ptx=True)
    n_add = len(re.findall(r"add\.s32\s+%r\d+, %r\d+, 4096;", ptx))
    n_and = len(re.findall(r"and\.b32\s+%r\d+, %r\d+, -8192;", ptx))
    assert n_add == 2 * 16 * 4 and n_and == 2 * n_add, (n_add, n_and)
    for pair, T, hook in (("fp32", 8, True), ("fp8/fp32", 4, True), ("nvfp4/fp16sr", 8, False)):
        monkeypatch.setenv(GV.BSPLIT_ENV, "0")
        r0 = GV.compile_report(pair, T)
        monkeypatch.setenv(GV.BSPLIT_ENV, "1")
        r1 = GV.compile_report(pair, T)
        nj = (2 * T + 7) // 8
        # the read dots keep their mma count; the flush hook adds 3 per k-step and n-tile
        assert r1["mma_tf32"] - r0["mma_tf32"] == (3 * 16 * nj if hook else 0), (pair, r0, r1)
        assert "bsplit=True" in r1["tile"]
        assert r1["stats"]["ld.local"] == 0 and r1["stats"]["st.local"] == 0
    monkeypatch.delenv(GV.BSPLIT_ENV)                     # the defaults again
    monkeypatch.setenv(GV.COEF_FIRST_ENV, "1")
    kw, key = GV._resolve(*args)
    assert kw["coef_first"] is True and key != key1
    k, ptx = GV.compile_only("fp32", T=4, keep_ptx=True)
    assert k.meta["tile"].bsplit and ptx.count("ld.local") == 0
    assert GV.GDNVerifyKernel(**dict(kw, tail=False)).coef_first is False   # needs the tail


def test_split_tf32_fast_arithmetic():
    """``lowprec.split_tf32_fast`` in numpy (the same integer steps): hi is x rounded to
    nearest tf32 with ties away from zero (checked against an exact rational rounding), x - hi
    is exact in fp32, and hi + trunc_tf32(x - hi) is within 2^-21 |x| (2^-136 below tf32's
    normal range); inf stays inf; a NaN reaches lo."""
    import numpy as np
    from fractions import Fraction
    rng = np.random.default_rng()
    x = (rng.standard_normal(20000) * np.exp2(rng.integers(-60, 60, 20000))).astype(np.float32)
    x = np.concatenate([x, np.float32([1.0, -1.0, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11,
                                       2.0 ** -140, 3.4e38])])
    xb = x.view(np.uint32)
    hi = ((xb + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        lo = x - hi
    lo_t = (lo.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    for xi, hv in zip(x[::97].tolist() + x[-6:-1].tolist(),
                      hi[::97].tolist() + hi[-6:-1].tolist()):
        f = Fraction(xi)
        if f == 0:
            continue
        # tf32 keeps 10 fraction bits: the grid step at |x| is 2^(e - 10), e = exponent of |x|
        e = max(abs(f).numerator.bit_length() - abs(f).denominator.bit_length(), -126)
        while Fraction(2) ** e > abs(f):
            e -= 1
        while Fraction(2) ** (e + 1) <= abs(f):
            e += 1
        step = Fraction(2) ** (max(e, -126) - 10)
        q, r = divmod(abs(f), step)
        rq = q + (1 if 2 * r >= step else 0)                       # ties away from zero
        assert Fraction(hv) == (rq * step if f > 0 else -rq * step), (xi, hv)
    fin = np.isfinite(hi)
    assert np.all((x[fin].astype(np.float64) - hi[fin]) == lo[fin])          # exact
    err = np.abs(x[fin].astype(np.float64) - hi[fin] - lo_t[fin].astype(np.float64))
    # (below tf32's normal range its grid step 2^-136 bounds the error instead)
    assert np.all(err <= np.maximum(np.abs(x[fin].astype(np.float64)) * 2.0 ** -21,
                                    2.0 ** -136))
    special = np.float32([np.inf, -np.inf, np.nan]).view(np.uint32)
    sh = ((special + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    assert np.isinf(sh[0]) and np.isinf(sh[1])
    with np.errstate(invalid="ignore"):
        nan_lo = np.float32(np.nan) - sh[2]
    assert np.isnan((np.float32(nan_lo).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32))


def test_gdn_verify_early_loads_variant(monkeypatch):
    """The verify's early loads (default; REPLAYSSM_GDN_VERIFY_EARLY=0 turns them off): the
    cursors, the draft gates and each warp's draft q / k are loaded before the read tile and
    used after it -- no fence and no 16-bit conversion ahead of the tile, 2 x 4 q / k elements
    per lane there; off wherever a warp would take two drafts (T > warps)."""
    import re
    monkeypatch.setenv(GV.EARLY_ENV, "0")
    _, ptx = GV.compile_only("fp32", T=8, keep_ptx=True)
    head = ptx[:ptx.index("ld.global.v4")]
    assert len(re.findall(r"fence\.|membar\.", head)) == 1
    n_off = len(re.findall(r"ld\.global\.b16", head))
    monkeypatch.delenv(GV.EARLY_ENV, raising=False)
    k, ptx = GV.compile_only("fp32", T=8, keep_ptx=True)
    head = ptx[:ptx.index("ld.global.v4")]
    assert not re.search(r"fence\.|membar\.|cvt\.f32\.(bf16|f16)", head)
    assert len(re.findall(r"ld\.global\.b16", head)) == n_off + 8
    assert k.meta is not None
    kw, _ = GV._resolve("fp32", "bfloat16", 16, 32, 128, 128, 16, 24, 8, None, None, "float32",
                        "bfloat16", "float32", "bfloat16", True, True, 64, None)
    assert kw["early_loads"] and not GV.GDNVerifyKernel(**kw).early_loads   # 4 warps, 8 drafts
    kw, _ = GV._resolve("fp32", "bfloat16", 16, 32, 128, 128, 16, 24, 8, None, None, "float32",
                        "bfloat16", "float32", "bfloat16", True, True, None, None)
    assert GV.GDNVerifyKernel(**kw).early_loads


def test_gdn_verify_flush_tile_variant(monkeypatch):
    """fp32-pair flush rows fold the read tile they hold on the CUDA cores (default; a compile
    key, REPLAYSSM_GDN_VERIFY_FLUSH_TILE=0 turns it off; split pairs never): the fold's 3xTF32 mma products and the second
    load of hi leave that build, the u ring comes by 16-byte cp.async."""
    import re
    args = ("bfloat16", 16, 32, 128, 128, 16, 24, 8, None, None, "float32", "bfloat16",
            "float32", "bfloat16", True, True, None, None)
    monkeypatch.setenv(GV.FLUSH_TILE_ENV, "0")
    kw0, key0 = GV._resolve("fp32", *args)
    assert not kw0["flush_tile"]
    _, ptx0 = GV.compile_only("fp32", T=8, keep_ptx=True)
    monkeypatch.delenv(GV.FLUSH_TILE_ENV)                   # the default
    kw1, key1 = GV._resolve("fp32", *args)
    assert kw1["flush_tile"] and key1 != key0
    assert not GV._resolve("fp8/fp32", *args)[0]["flush_tile"]
    assert GV.GDNVerifyKernel(**kw1).flush_tile
    _, ptx1 = GV.compile_only("fp32", T=8, keep_ptx=True)
    cp16 = r"cp\.async\.c[ag]\.shared\.global \[[^\]]+\], \[[^\]]+\], 16"
    assert len(re.findall(cp16, ptx1)) > len(re.findall(cp16, ptx0))
    # fewer tf32 mma: the fold's products are gone (the draft dots keep theirs)
    assert ptx1.count("mma.sync") < ptx0.count("mma.sync")
    assert ptx1.count("ld.global.v4") < ptx0.count("ld.global.v4")
    # L > 16 too (its u_j staging is its own shared buffer, counted in the tile's bytes)
    k24, p24 = GV.compile_only("fp32", T=8, L=24, keep_ptx=True)
    assert len(re.findall(cp16, p24)) > 0 and k24.meta["tile"].smem_bytes > 4 * 24 * 128
    # tf32 mma only in the draft dots, inlined on both row kinds (3xTF32: 3 per k-step, n-tile)
    assert GV.compile_report("fp32", 8)["mma_tf32"] == 2 * 3 * 16 * 2
    monkeypatch.setenv(GV.MMA_ENV, "0")
    assert GV.compile_report("fp32", 8)["mma_tf32"] == 0


def test_gdn_verify_row_order_variant(monkeypatch):
    """REPLAYSSM_GDN_VERIFY_ORDER: the flush-first order (the call's T) ahead of the verify,
    a compile key; the kernel takes row, slot and (with the early loads) cursors from the order
    entry on the grid (HV * nsplit, positions); default builds unchanged by it."""
    import re
    monkeypatch.delenv(GV.VERIFY_ORDER_ENV, raising=False)
    assert GV.VERIFY_ORDER_ENV in GV._ENV_NAMES
    args = ("nvfp4/fp16sr", "bfloat16", 16, 32, 128, 128, 16, 24, 8, None, None, "float32",
            "bfloat16", "float32", "bfloat16", True, True, None)
    kw0, key0 = GV._resolve(*args)
    kw1, key1 = GV._resolve(*args, None, True)
    assert not kw0["row_order"] and kw1["row_order"] and key0 != key1
    op = GV.GDNVerifyKernel(**kw1)
    assert op.row_order and op.order_cursors == op.early_loads
    _, p0 = GV.compile_only("fp32", T=8, keep_ptx=True)
    _, p1 = GV.compile_only("fp32", T=8, keep_ptx=True, row_order=True)
    assert "ctaid.y" in p1 and "ctaid.y" in p0        # (unordered: hv on y)
    nparam = lambda p: len(re.findall(r"^\s*\.param\s", p[:p.index("{")], re.M))  # noqa: E731
    assert nparam(p1) > nparam(p0)
    import torch

    from replayssm_lp.pairs import parse_pair

    class _C:
        philox_rounds = 10
        row_order = torch.zeros(2, 64, dtype=torch.int32)
        pair = parse_pair("nvfp4/fp16sr")
    # default: the decode's rule (narrow read copies from 32 rows)
    assert GV.use_verify_row_order(_C, 32) and not GV.use_verify_row_order(_C, 31)
    _C.pair = parse_pair("fp32")
    assert not GV.use_verify_row_order(_C, 64)
    monkeypatch.setenv(GV.VERIFY_ORDER_ENV, "1")
    assert GV.use_verify_row_order(_C, 16) and not GV.use_verify_row_order(_C, 65)
    monkeypatch.setenv(GV.VERIFY_ORDER_ENV, "0")
    _C.pair = parse_pair("fp8/fp32")
    assert not GV.use_verify_row_order(_C, 64)


def test_gdn_verify_launch_key_has_the_order(monkeypatch):
    """The verify's process-wide launch cache keys the order choice: two caches of one shape
    whose slot counts decide it differently (the order needs one entry per row) get two
    entries, the larger one ordered (CPU: compile and bind only, no launch)."""
    import torch
    from replayssm_lp import GDNReplayCache
    monkeypatch.delenv(GV.VERIFY_ORDER_ENV, raising=False)
    monkeypatch.setattr(GV, "_LAUNCH", {})
    gd = GV._gate_dtypes(torch.zeros(1), torch.zeros(1, dtype=torch.bfloat16), None, None, None,
                         None)
    for ns in (64, 16):                  # batch 32: ordered with 64 slots, not with 16
        c = GDNReplayCache(ns, 2, 4, 128, 128, precision="nvfp4/fp16sr", buffer_len=16,
                           max_draft=4)
        q = torch.zeros(32, 4, 2, 128, dtype=torch.bfloat16)
        v = torch.zeros(32, 4, 4, 128, dtype=torch.bfloat16)
        GV.make_launch(c, q, v, gd, True, torch.arange(32, dtype=torch.int32))
    assert sorted(e[2] is not None for e in GV._LAUNCH.values()) == [False, True]
