"""Compile-only checks of the GDN v2 decode's flush Gram on the tensor cores for Hopper (sm_90a)
on a machine without a GPU (``cute_kernels.gdn_replay``, ``GRAM_MMA_ENV``): a split pair's
build with the switch at 1 holds exactly the Gram's mma.sync more than at 0 (one warp per 16
keys against the n-tiles of the lower triangle, 16 k-steps of 8, 3 / 6 tf32 products as the
fold), no local memory; the shared pairs and the verify are untouched. Same layer as
``test_gdn_kernels_compile.py`` (H, HV, K, V = 2, 4, 128, 128, bf16 activations). Skips
visibly when nvidia-cutlass-dsl (or apache-tvm-ffi) is missing.
"""
import os

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # before cutlass is imported

import pytest  # noqa: E402

cutlass = pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")
pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi is not installed (tensor-free compile)")

from cute_kernels import common  # noqa: E402
from cute_kernels import gdn_replay as GR  # noqa: E402

H, HV, K, V = 2, 4, 128, 128


def _gram_mmas(L: int, products: int) -> int:
    """mma.sync of the tensor-core Gram: per 16-key m-tile mi, min(2 mi + 2, LP / 8) n-tiles."""
    lp = 8 * -(-L // 8)
    tiles = sum(min(2 * mi + 2, lp // 8) for mi in range(-(-lp // 16)))
    return tiles * (K // 8) * products


@pytest.mark.parametrize("pair,L,products", [("nvfp4/fp16sr", 16, 3), ("fp8/fp32", 32, 6)])
def test_gdn_gram_mma_compiles(pair, L, products, monkeypatch):
    counts = {}
    for v in ("0", "1"):
        monkeypatch.setenv(GR.GRAM_MMA_ENV, v)
        kern, ptx = GR.compile_only(pair, "bfloat16", H, HV, K, V, L, keep_ptx=True)
        assert kern.meta["gram_mma"] is (v == "1")
        st = common.ptx_stats(ptx)
        assert st["ld.local"] == 0 and st["st.local"] == 0, (v, st)
        counts[v] = ptx.count("mma.sync")
    assert counts["1"] - counts["0"] == _gram_mmas(L, products), counts


def test_gdn_gram_mma_only_split_decode(monkeypatch):
    """A shared pair (no Gram) and the verify ignore the switch."""
    monkeypatch.setenv(GR.GRAM_MMA_ENV, "1")
    kern, _ = GR.compile_only("fp16sr", "bfloat16", H, HV, K, V, 8)
    assert kern.meta["gram_mma"] is False
    from cute_kernels import gdn_verify as GV
    L, T = 8, 4
    kw, _ = GV._resolve("nvfp4/fp16sr", "bfloat16", H, HV, K, V, L, L + T, T, None, None,
                        "float32", "bfloat16", "float32", "bfloat16", True, True, None)
    assert GV.GDNVerifyKernel(**kw).gram_mma is False
    assert GR.GRAM_MMA_ENV in GR._ENV_NAMES


@pytest.mark.parametrize("pair,rows,on", [("nvfp4/fp16sr", 0, True), ("nvfp4/fp8sr", 0, True),
                                          ("fp8/fp32", 0, False), ("bf16/fp32", 0, False),
                                          ("fp8/fp32", 2, True), ("fp8/fp32", 1, False),
                                          ("nvfp4/fp16sr", 1, False)])
def test_gdn_gram_mma_default(pair, rows, on, monkeypatch):
    """Unset GRAM_MMA_ENV (:func:`gram_mma_default`): on for a 16-bit / fp8 recurrence and for a
    split launch's flush half, off for an fp32 recurrence's other builds and for the split's
    non-flush half (no flush code)."""
    monkeypatch.delenv(GR.GRAM_MMA_ENV, raising=False)
    L = 16
    kw, _ = GR._resolve(pair, "bfloat16", H, HV, K, V, L, L + 1, None, None, "float32",
                        "bfloat16", "float32", "bfloat16", True, True, None, None,
                        row_order=bool(rows), rows=rows, flush_positions=8 if rows == 2 else 0)
    assert GR.make_op(kw).gram_mma is on
