"""Compile-only checks of the GDN v2 decode's flush column halves for Hopper (sm_90a) on a machine
without a GPU (``cute_kernels.gdn_replay``: ``flush_halves_for``, ``flush_pf_for``): mode 1 (two
warps per row tile), mode 2 (the two CTAs of a cluster), the flush's L2 prefetch of the hi rows,
and their default rules. Same layer as ``test_gdn_kernels_compile.py`` (H, HV, K, V = 2, 4, 128,
128, L = 16, bf16 activations). Skips visibly when nvidia-cutlass-dsl (or apache-tvm-ffi) is missing.
"""
import functools
import os

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # before cutlass is imported

import pytest  # noqa: E402

cutlass = pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")
pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi is not installed (tensor-free compile)")

from cute_kernels import common  # noqa: E402
from cute_kernels import gdn_replay as GR  # noqa: E402

H, HV, K, V = 2, 4, 128, 128
L = 16


@functools.lru_cache(maxsize=None)
def _plain_build(pair: str, bv: int):
    """The one-warp-per-tile build of the same tile (no halves, no flush prefetch): (meta tile,
    PTX)."""
    k, ptx = GR.compile_only(pair, "bfloat16", H, HV, K, V, L, keep_ptx=True, block_v=bv,
                             min_blocks_per_mp=1)
    return k.meta["tile"], ptx


HALVES_BUILDS = [("fp8/fp32", 1), ("fp8/fp32", 2), ("nvfp4/fp16sr", 2)]


@pytest.mark.parametrize("pair,mode", HALVES_BUILDS)
def test_gdn_replay_flush_halves_compiles(pair, mode, monkeypatch):
    """The flush column halves, each warp's 64 columns: half the flush mma per warp (P = S_hi
    Kn^T for split pairs, the fold), no local memory in the PTX. Mode 1 (two warps per row tile):
    twice the warps, the exchanges through shared memory behind CTA barriers. Mode 2 (a CTA pair
    of a cluster): the warps of the one-warp-per-tile build, the exchanges through distributed
    shared memory behind two cluster barriers. Both with the flush's L2 prefetch of the hi rows."""
    monkeypatch.delenv(GR.PF_EARLY_ENV, raising=False)      # (its prefetches would count too)
    bv = 128 if "nvfp4" in pair else 64
    k, ptx = GR.compile_only(pair, "bfloat16", H, HV, K, V, L, keep_ptx=True, block_v=bv,
                             min_blocks_per_mp=1, flush_halves=mode, flush_pf=True)
    t1, ptx1 = _plain_build(pair, bv)
    t = k.meta["tile"]
    assert (t.halves, t.pair) == (mode == 1, mode == 2) and not (t1.halves or t1.pair)
    assert t.num_threads == (2 if mode == 1 else 1) * t1.num_threads == \
        (2 if mode == 1 else 1) * 32 * (bv // 16)
    st = common.ptx_stats(ptx)
    assert st["ld.local"] == 0 and st["st.local"] == 0, st
    # (with the flush's L2 prefetch of the hi rows: one bulk prefetch, none without)
    pf = "cp.async.bulk.prefetch.L2"
    assert ptx.count(pf) == 1 and ptx1.count(pf) == 0
    mma = "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"
    # (the fold: 3 or 6 tf32 products per n-tile of 8 columns and key tile, half the n-tiles)
    assert 0 < ptx.count(mma) < ptx1.count(mma), (ptx.count(mma), ptx1.count(mma))
    rf, _, cf, _, split = GR.pair_key(pair)
    amax = int("fp8" in (rf, cf) or "nvfp4" in (rf, cf))
    if mode == 1:
        # P exchange (split pairs) + output partials (+ the fp8 row amax) behind bar.sync
        assert ptx.count("bar.sync") >= ptx1.count("bar.sync") + 1 + int(split) + amax
        assert "barrier.cluster" not in ptx
    else:
        # two barriers: the first exchange (P, else the output partials) reads the peer's
        # buffer; the rest push into it, the output partials riding on the amax's barrier
        assert ptx.count("barrier.cluster.arrive") == ptx.count("barrier.cluster.wait") == 2
        assert ptx.count("ld.shared::cluster.f32") > 0 and "barrier.cluster" not in ptx1
        assert (ptx.count("st.shared::cluster.f32") > 0) == bool(split)


def test_gdn_flush_halves_rule(monkeypatch):
    """Flush halves by default: nvfp4 read copies over a CTA pair where the doubled grid fits
    one CTA per SM (no row order), fp8 / 16-bit read copies over two warps at <= 1 CTA per SM;
    never fp32 reads, two tiles per warp, or a split launch's half; REPLAYSSM_GDN_FLUSH_HALVES
    0 / 1 / 2 forces; the tile refuses two tiles per warp and both modes at once."""
    monkeypatch.delenv(GR.FLUSH_HALVES_ENV, raising=False)
    n_sm = common.num_sms()
    assert GR.flush_halves_for("fp8", 1, n_sm) == 1 and GR.flush_halves_for("bf16", 1, 32) == 1
    assert GR.flush_halves_for("nvfp4", 1, n_sm // 2) == 2
    assert GR.flush_halves_for("nvfp4", 1, n_sm // 2 + 1) == 0
    assert GR.flush_halves_for("nvfp4", 1, 32, row_order=True) == 0
    assert not GR.flush_halves_for("fp8", 1, n_sm + 1) and not GR.flush_halves_for("fp8", 1, None)
    assert not GR.flush_halves_for("fp32", 1, 32)
    assert not GR.flush_halves_for("fp8", 2, 32) and not GR.flush_halves_for("fp8", 1, 32, rows=2)
    monkeypatch.setenv(GR.FLUSH_HALVES_ENV, "0")
    assert not GR.flush_halves_for("fp8", 1, 32) and not GR.flush_halves_for("nvfp4", 1, 32)
    monkeypatch.setenv(GR.FLUSH_HALVES_ENV, "1")
    assert GR.flush_halves_for("bf16", 1, 10 ** 6) == 1 and GR.flush_halves_for("nvfp4", 1, 32) == 1
    assert not GR.flush_halves_for("fp32", 1, 32)
    monkeypatch.setenv(GR.FLUSH_HALVES_ENV, "2")
    assert GR.flush_halves_for("fp8", 1, n_sm // 2) == 2
    assert GR.flush_halves_for("fp8", 1, n_sm // 2 + 1) == 0
    assert GR.flush_halves_for("fp8", 1, 32, row_order=True) == 0
    t = GR.ReplayTileV2("fp8", "fp32", 128, 128, 64, 16, True, halves=True)
    assert (t.nwarps, t.rwarps, t.num_threads) == (8, 4, 256)
    assert GR.v2_default_min_blocks(t, "fp8", "fp32", 10 ** 6) == 1
    t = GR.ReplayTileV2("nvfp4", "fp16", 128, 128, 128, 16, True, pair=True)
    assert (t.nwarps, t.num_threads, t.pair) == (8, 256, True)
    assert GR.v2_default_min_blocks(t, "nvfp4", "fp16", 10 ** 6) == 1
    with pytest.raises(ValueError, match="one row tile per warp"):
        GR.ReplayTileV2("fp8", "fp32", 128, 128, 64, 16, True, tpw=2, halves=True)
    with pytest.raises(ValueError, match="not both"):
        GR.ReplayTileV2("fp8", "fp32", 128, 128, 64, 16, True, halves=True, pair=True)
    # the flush's L2 prefetch of the hi rows: <= 1 CTA per SM, not a split launch's half
    monkeypatch.delenv(GR.FLUSH_PF_ENV, raising=False)
    assert GR.flush_pf_for(n_sm) and not GR.flush_pf_for(n_sm + 1) and not GR.flush_pf_for(None)
    assert not GR.flush_pf_for(32, rows=2)
    monkeypatch.setenv(GR.FLUSH_PF_ENV, "0")
    assert not GR.flush_pf_for(32)
