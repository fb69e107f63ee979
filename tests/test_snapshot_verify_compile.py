"""Compile-only checks of the snapshot-verify CuTe kernels (cute_kernels.snapshot_verify) for
Hopper (sm_90a) without a GPU: every state dtype and gate mode, T in {1, 8}. The state is read once
(R*CN 128-bit loads per thread) and written T times (T*R*CN 128-bit stores), nothing narrower, no
local memory. Numerics: tests/test_gpu_spec.py on an H200."""
import os

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # before cutlass is imported

import pytest  # noqa: E402

pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")
pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi is not installed (tensor-free compile)")

from cute_kernels import common  # noqa: E402
from cute_kernels import snapshot_verify as SV  # noqa: E402

NEMO = dict(nheads=128, headdim=64, dstate=128, ngroups=8)


def _check_state_traffic(ptx, n_vec, T):
    st = common.ptx_stats(ptx)
    assert st["ld.global.v4"] >= n_vec, st          # B/C of fp32 activations also use v4 loads
    assert st["st.global.v4"] == T * n_vec, st
    assert st["st.global.v2"] == 0, st
    assert st["ld.local"] == 0 and st["st.local"] == 0, st
    return st


_DT = ["float32", "float16", "bfloat16"]
# every state x activation dtype at T = 8, and every T of the benchmark at the common dtypes
_M2_VARIANTS = [(sd, ad, 8) for sd in _DT for ad in _DT] + [("float32", "bfloat16", t) for t in (1, 2, 4)]


@pytest.mark.parametrize("state_dtype,act_dtype,T", _M2_VARIANTS)
def test_mamba2_snapshot_compiles(state_dtype, act_dtype, T):
    has_z = act_dtype != "bfloat16"
    k, ptx = SV.compile_mamba2_snapshot_ptx(
        state_dtype=state_dtype, act_dtype=act_dtype, dt_dtype="float32", **NEMO, T=T, has_D=True,
        has_z=has_z, has_dt_bias=True, dt_softplus=True, has_accepted=(T > 1), block_p=None,
        num_threads=None, min_blocks_per_mp=None)
    assert k.compile_seconds < 60
    cfg = k.meta["cfg"]
    _check_state_traffic(ptx, cfg.rows_per_thread * cfg.chunks_per_thread, T)


def test_mamba2_snapshot_small_block_p_compiles():
    # small batches split P over more CTAs (the standard kernel's heuristic): still one read, T writes
    bp = SV.MS.choose_block_p(1, 128, 64, 128, "float32", min_ctas=264)
    assert bp < 64
    k, ptx = SV.compile_mamba2_snapshot_ptx(
        state_dtype="float32", act_dtype="bfloat16", dt_dtype="bfloat16", **NEMO, T=4, has_D=False,
        has_z=False, has_dt_bias=False, dt_softplus=False, has_accepted=False, block_p=bp,
        num_threads=None, min_blocks_per_mp=None)
    cfg = k.meta["cfg"]
    _check_state_traffic(ptx, cfg.rows_per_thread * cfg.chunks_per_thread, 4)


_RAW = dict(g_dtype=None, beta_dtype=None, alog_dtype="float32", a_dtype="bfloat16",
            dt_bias_dtype="float32", b_dtype="bfloat16")
_GIVEN = dict(g_dtype="float32", beta_dtype="float32", alog_dtype=None, a_dtype=None,
              dt_bias_dtype=None, b_dtype=None)


_GDN_VARIANTS = ([(sd, g, 8) for sd in _DT for g in ("raw", "given")]
                 + [("float32", "raw", t) for t in (1, 2, 4)])


@pytest.mark.parametrize("state_dtype,gates,T", _GDN_VARIANTS)
def test_gdn_snapshot_compiles(state_dtype, gates, T):
    k, ptx = SV.compile_gdn_snapshot_ptx(
        state_dtype=state_dtype, act_dtype="bfloat16", H=16, HV=32, K=128, V=128, T=T,
        use_qk_l2norm=True, has_accepted=(T > 1), block_v=None, num_threads=None,
        **(_RAW if gates == "raw" else _GIVEN))
    assert k.compile_seconds < 60
    tile = k.meta["tile"]
    _check_state_traffic(ptx, tile.r * tile.cn, T)


def test_gdn_snapshot_small_block_v_compiles():
    bv = SV.GS.choose_block_v(1, 32, 128, 128, "float32", "vk", min_ctas=264)
    k, ptx = SV.compile_gdn_snapshot_ptx(
        state_dtype="float32", act_dtype="float32", H=2, HV=4, K=128, V=128, T=2,
        use_qk_l2norm=False, has_accepted=True, block_v=bv, num_threads=None, **_GIVEN)
    tile = k.meta["tile"]
    _check_state_traffic(ptx, tile.r * tile.cn, 2)


def test_out_of_range_T_is_refused():
    with pytest.raises(ValueError, match="T=17"):
        SV.Mamba2SnapshotVerify("float32", "bfloat16", "float32", 8, 64, 128, 2, 17, True, False,
                                True, True)
    assert SV.gdn_supports("float32", 128, 128) and not SV.gdn_supports("float32", 100, 128)
