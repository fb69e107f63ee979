"""CPU-only compile tests for the Mamba-2 standard-decode CuTe kernel.

Every supported variant (state fp32/fp16/bf16 x act fp32/fp16/bf16 x with/without z/D)
is compiled for sm_90a without a GPU (``CUTE_DSL_ARCH=sm_90a``, set by conftest.py and
again here), and the PTX is checked for 128-bit state loads/stores and no local memory.
Nothing is launched; numerical checks live in tests/gpu_scripts/check_mamba2_standard.py.
"""
import os
import re

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

try:
    import cutlass  # noqa: F401
    import cutlass.cute  # noqa: F401

    _CUTLASS_ERR = None
except Exception as e:  # pragma: no cover - depends on the environment
    _CUTLASS_ERR = f"{type(e).__name__}: {e}"

pytestmark = pytest.mark.skipif(
    _CUTLASS_ERR is not None,
    reason=f"nvidia-cutlass-dsl (CuTe DSL) not importable: {_CUTLASS_ERR}",
)

if _CUTLASS_ERR is None:
    from cute_kernels import common
    from cute_kernels import mamba2_standard as m2

DTYPES = ["float32", "float16", "bfloat16"]
# Nemotron-3-Super Mamba-2 layer
NEMO = dict(nheads=128, headdim=64, dstate=128, ngroups=8)


def _ld_v4(ptx):
    return len(re.findall(r"\bld\.global(?:\.[A-Za-z0-9:_]+)*\.v4\.(?:b32|f32|u32|s32)", ptx))


def _st_v4(ptx):
    return len(re.findall(r"\bst\.global(?:\.[A-Za-z0-9:_]+)*\.v4\.(?:b32|f32|u32|s32)", ptx))


def _expected_state_vectors(state_dtype, headdim=64, dstate=128, block_p=None, num_threads=None):
    cfg = m2.tile_config(state_dtype, headdim, dstate, block_p, num_threads)
    return cfg.rows_per_thread * cfg.chunks_per_thread


@pytest.mark.parametrize("state_dtype", DTYPES)
@pytest.mark.parametrize("act_dtype", DTYPES)
@pytest.mark.parametrize("has_z,has_D", [(False, False), (True, True), (True, False), (False, True)])
def test_compile_variant(state_dtype, act_dtype, has_z, has_D):
    k, ptx = m2.compile_only(state_dtype, act_dtype, "float32", has_z=has_z, has_D=has_D,
                             keep_ptx=True, **NEMO)
    assert ptx, "no PTX was produced"
    assert k.ffi is not None or not common.HAS_TVM_FFI
    if os.environ.get("CUTE_DSL_ARCH", "").startswith("sm_90"):
        assert re.search(r"^\.target\s+sm_90a", ptx, re.M), "PTX not built for sm_90a"
    n_state = _expected_state_vectors(state_dtype)
    stats = common.ptx_stats(ptx)
    # 128-bit (v4 x 32-bit) loads and stores for every 16-byte state chunk of the thread
    assert _ld_v4(ptx) >= n_state, stats
    assert _st_v4(ptx) == n_state, stats
    assert stats["ld.local"] == 0 and stats["st.local"] == 0, stats
    print(f"{state_dtype}/{act_dtype} z={has_z} D={has_D}: {k.compile_seconds:.2f}s {stats}")


@pytest.mark.parametrize("num_threads", [None, 128])
def test_fp32_state_uses_128bit_loads(num_threads):
    """The headline case: fp32 state, bf16 activations (Nemotron-3-Super)."""
    k, ptx = m2.compile_only("float32", "bfloat16", "float32", num_threads=num_threads,
                             keep_ptx=True, **NEMO)
    cfg = m2.tile_config("float32", 64, 128, None, num_threads)
    rows = cfg.rows_per_thread  # 16-byte state chunks per thread (1 per row: N=128 = 32 lanes x 4)
    assert cfg.threads_per_row == 32 and cfg.chunks_per_thread == 1
    assert _ld_v4(ptx) >= rows and _st_v4(ptx) == rows
    # y = S.C over the 32 lanes of a row: 5 butterfly steps per row
    assert common.ptx_stats(ptx)["shfl"] == rows * 5
    # no narrower state accesses: scalar global stores are only the bf16 outputs
    assert len(re.findall(r"\bst\.global\.b16\b", ptx)) == rows
    assert len(re.findall(r"\bst\.global\.(?:b32|f32)\b", ptx)) == 0


@pytest.mark.parametrize(
    "kw",
    [
        # no indices, dt in act dtype, no softplus, no dt_bias
        dict(has_state_batch_indices=False, dt_dtype="bfloat16", dt_softplus=False,
             has_dt_bias=False, **NEMO),
        # Nemotron-H / Nano-4B-like head (P=80)
        dict(nheads=96, headdim=80, dstate=128, ngroups=8),
        dict(nheads=96, headdim=80, dstate=128, ngroups=8, state_dtype="bfloat16"),
        # small-batch tilings and an explicit occupancy hint
        dict(block_p=16, **NEMO),
        dict(block_p=8, state_dtype="float16", **NEMO),
        dict(num_threads=128, **NEMO),
        dict(num_threads=128, min_blocks_per_mp=0, **NEMO),
        dict(min_blocks_per_mp=2, **NEMO),
        # tiny and wide dstate (fewer than 32 lanes per row / 2 chunks per lane)
        dict(nheads=8, headdim=16, dstate=16, ngroups=2, has_z=True),
        dict(nheads=4, headdim=64, dstate=256, ngroups=1),
    ],
)
def test_compile_other_shapes(kw):
    k, ptx = m2.compile_only(keep_ptx=True, **kw)
    n_state = _expected_state_vectors(
        kw.get("state_dtype", "float32"), kw["headdim"], kw["dstate"], kw.get("block_p"),
        kw.get("num_threads"),
    )
    assert _ld_v4(ptx) >= n_state and _st_v4(ptx) == n_state, common.ptx_stats(ptx)
    stats = common.ptx_stats(ptx)
    assert stats["ld.local"] == 0 and stats["st.local"] == 0, stats


@pytest.mark.skipif(not (_CUTLASS_ERR is None and common.HAS_TVM_FFI),
                    reason="apache-tvm-ffi not importable")
def test_compile_cache_and_signature():
    args = ("float32", "bfloat16", "float32", 128, 64, 128, 8, True, True, True, True)
    k1 = m2.compile_mamba2_standard(*args)
    k2 = m2.compile_mamba2_standard(*args)
    assert k1 is k2, "second compile with the same key must hit the cache"
    # torch dtypes name the same key
    import torch

    k3 = m2.compile_mamba2_standard(torch.float32, torch.bfloat16, torch.float32,
                                    *args[3:])
    assert k3 is k1
    assert k1.ffi is not None


def test_tile_config_and_heuristic():
    cfg = m2.tile_config("float32", 64, 128, num_threads=128)
    assert (cfg.vec, cfg.threads_per_row, cfg.rows_per_pass, cfg.rows_per_thread) == (4, 32, 4, 16)
    cfg = m2.tile_config("bfloat16", 64, 128, num_threads=128)
    assert (cfg.vec, cfg.threads_per_row, cfg.rows_per_pass, cfg.rows_per_thread) == (8, 16, 8, 8)
    cfg = m2.tile_config("float32", 64, 128, num_threads=256)
    assert (cfg.rows_per_pass, cfg.rows_per_thread) == (8, 8)
    # tiny heads fall back to fewer threads
    cfg = m2.tile_config("float32", 16, 16)
    assert cfg.block_p == 16 and cfg.num_threads * cfg.rows_per_thread == 16 * cfg.threads_per_row
    cfg = m2.tile_config("float32", 64, 256)
    assert cfg.chunks_per_thread == 2
    with pytest.raises(ValueError):
        m2.tile_config("float32", 64, 128, block_p=6)
    # big batches keep whole heads per CTA, batch 1 splits P over more CTAs
    assert m2.choose_block_p(64, 128, 64, 128, "float32", min_ctas=264) == 64
    bp1 = m2.choose_block_p(1, 128, 64, 128, "float32", min_ctas=264)
    assert bp1 < 64 and 128 * (64 // bp1) >= 264
