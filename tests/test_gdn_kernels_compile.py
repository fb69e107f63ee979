"""Compile-only checks of the GDN CuTe kernels for Hopper (sm_90a) on a machine without a GPU.

* standard decode (cute_kernels.gdn_standard): fp32 / bf16 state x "vk" / "kv" layout x raw /
  given gates, at (H, HV, K, V) = (2, 4, 128, 128) with bf16 activations: the state moves with
  128-bit loads and stores only, no local memory;
* ReplaySSM decode (cute_kernels.gdn_replay): every precision pair
  (``precision_pairs(include_extra=True)``), same shape, L = 16, both implementations:
  v2 (default: tensor-core read dot for fp16 / bf16 / fp8 / nvfp4 read copies, 3xTF32 chunked
  fold) and v1 (the previous kernel, kept selectable with REPLAYSSM_GDN_REPLAY_IMPL=v1):
  128-bit (v1 nvfp4: 64-bit) read-copy loads, the expected mma instructions, no local memory
  in the PTX.

Skips visibly when nvidia-cutlass-dsl (or apache-tvm-ffi) is missing. ~3 min on 2 cores.
"""
import os

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # before cutlass is imported

import pytest  # noqa: E402

cutlass = pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")
pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi is not installed (tensor-free compile)")

from cute_kernels import common  # noqa: E402
from cute_kernels import gdn_replay as GR  # noqa: E402
from cute_kernels import gdn_standard as GS  # noqa: E402
from replayssm_lp import precision_pairs  # noqa: E402

H, HV, K, V = 2, 4, 128, 128
L = 16


@pytest.mark.parametrize("gates", ["raw", "given"])
@pytest.mark.parametrize("layout", ["vk", "kv"])
@pytest.mark.parametrize("state_dtype", ["float32", "bfloat16"])
def test_gdn_standard_compiles(state_dtype, layout, gates):
    gk = (dict(g_dtype="float32", beta_dtype="float32") if gates == "given" else
          dict(alog_dtype="float32", a_dtype="bfloat16", dt_bias_dtype="float32",
               b_dtype="bfloat16"))
    k, ptx = GS.compile_only(state_dtype, "bfloat16", layout, H, HV, K, V, **gk, keep_ptx=True)
    assert k.compile_seconds < 30
    st = common.ptx_stats(ptx)
    tile = k.meta["tile"]
    n_vec = tile.r * tile.cn
    # the whole state tile in one pass: n_vec 128-bit loads and stores per thread, nothing narrower
    assert st["ld.global.v4"] == n_vec, st
    assert st["st.global.v4"] == n_vec, st
    assert st["st.global.v2"] == 0 and st["ld.global.v2"] == 0, st
    assert st["ld.local"] == 0 and st["st.local"] == 0, st


def test_gdn_standard_heuristics():
    # big batches: a whole head per CTA; batch 1 spreads V over more CTAs
    bv_big = GS.choose_block_v(256, 32, 128, 128, "float32", "vk", min_ctas=264)
    bv_small = GS.choose_block_v(1, 32, 128, 128, "float32", "vk", min_ctas=264)
    assert bv_big == 128 and bv_small < bv_big
    for sd in ("float32", "bfloat16", "float16"):
        for lay in ("vk", "kv"):
            for bv, _ in GS._valid_tiles(common.to_cute_dtype(sd).width, lay, 128, 128):
                t = GS.tile_config(sd, lay, 128, 128, bv)
                assert t.elems <= GS.MAX_ELEMS_PER_THREAD


PAIRS = list(precision_pairs(include_extra=True))


def _compile_replay(pair, impl):
    """Compile one ReplaySSM decode variant; returns (PTX, its memory-instruction counts, read
    format, recurrence format, tile). Checks the compile time, no local memory (no dynamically
    indexed registers) and whole-head CTAs for nvfp4 pairs (the global scale spans the matrix)."""
    k, ptx = GR.compile_only(pair, "bfloat16", H, HV, K, V, L, keep_ptx=True, impl=impl)
    assert k.compile_seconds < 30
    st = common.ptx_stats(ptx)
    rf, _, cf, _, _ = GR.pair_key(pair)
    tile = k.meta["tile"]
    assert st["ld.local"] == 0 and st["st.local"] == 0, st
    if "nvfp4" in (rf, cf):
        assert tile.block_v == V
    return ptx, st, rf, cf, tile


@pytest.mark.parametrize("pair", PAIRS)
def test_gdn_replay_compiles(pair):
    """v2 (the default)."""
    ptx, st, rf, cf, tile = _compile_replay(pair, "v2")
    assert isinstance(tile, GR.ReplayTileV2)
    # read copy: 16-byte loads (2 tpw rows x K * bits / 512 per thread)
    assert st["ld.global.v4"] >= 2 * tile.tpw * (K * GR.FMT_BITS[rf] // 512), st
    if rf in GR.MMA_READ_FMTS:
        kind = "bf16" if rf == "bf16" else "f16"
        assert ptx.count(f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32") >= 8, rf
    # the fold's rank-L update (and the split pairs' S Kn^T) on tensor cores, 3xTF32 -- but
    # the fp32 pair folds its whole-row tile on the CUDA cores (GR.flush_whole_fit)
    n_tf32 = ptx.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32")
    if pair == "fp32":
        assert n_tf32 == 0
    else:
        assert n_tf32 >= 3 * 16


@pytest.mark.parametrize("pair", PAIRS)
def test_gdn_replay_v1_compiles(pair):
    """The previous kernel stays selectable (REPLAYSSM_GDN_REPLAY_IMPL=v1)."""
    ptx, st, rf, cf, tile = _compile_replay(pair, "v1")
    # read copy: one 16-byte (nvfp4: 8-byte) load per row chunk
    if rf == "nvfp4":
        assert st["ld.global.v2"] >= tile.rr * tile.cnr, st
    else:
        assert st["ld.global.v4"] >= tile.rr * tile.cnr, st


def test_gdn_replay_tiles():
    for pair in PAIRS:
        rf, _, cf, _, _ = GR.pair_key(pair)
        for bv, nt in GR._valid_block_vs(rf, cf, 128, 128, 16):
            t = GR.replay_tile(rf, cf, 128, 128, 16, bv)
            assert t.elems_f <= GR.MAX_FLUSH_ELEMS and t.smem_bytes <= GR.SMEM_LIMIT
        for bv in GR.V2_BLOCK_VS:
            if "nvfp4" in (rf, cf) and bv != 128:
                continue
            for L_ in (4, 16, 32):
                t = GR.ReplayTileV2(rf, cf, 128, 128, bv, L_, rf != cf)
                assert t.smem_bytes <= GR.SMEM_LIMIT and t.num_threads == 32 * t.nwarps
    # small batches of a non-nvfp4 pair split V over more CTAs; nvfp4 pairs never do
    assert GR.choose_block_v(1, 32, 128, 128, "fp8", "fp32", 16, min_ctas=264) < 128
    assert GR.choose_block_v(1, 32, 128, 128, "nvfp4", "fp16", 16, min_ctas=264) == 128
    assert GR.choose_block_v_v2(1, 32, 128, "fp8", "fp32", min_ctas=264) < 128
    assert GR.choose_block_v_v2(256, 32, 128, "fp8", "fp32", min_ctas=264) == 128
    assert GR.choose_block_v_v2(1, 32, 128, "nvfp4", "fp16", min_ctas=264) == 128
    with pytest.raises(ValueError, match="too large"):
        GR.replay_tile("fp32", "fp32", 128, 128, 64, 128, 256)
    # v2 occupancy: narrower-than-fp32 read copies trade the flush's registers for CTAs per SM
    # from OCC_MIN_CTAS CTAs on (decode nvfp4 + 16-bit recurrence: 4, else 3; verify 3)
    big, small = GR.OCC_MIN_CTAS, GR.OCC_MIN_CTAS - 1
    t = GR.ReplayTileV2("nvfp4", "fp16", 128, 128, 128, 16, True)
    assert GR.v2_default_min_blocks(t, "nvfp4", "fp16", big) == 4
    assert GR.v2_default_min_blocks(t, "nvfp4", "fp16", big, verify=True) == 3
    assert GR.v2_default_min_blocks(t, "nvfp4", "fp16", small) == 2
    assert GR.v2_default_min_blocks(t, "nvfp4", "fp16") == 4          # no batch: large
    # nvfp4 launches of at most one CTA per SM (batch 1 / 2): the full register file
    n_sm = common.num_sms()
    assert GR.v2_default_min_blocks(t, "nvfp4", "fp16", n_sm) == 1
    assert GR.v2_default_min_blocks(t, "nvfp4", "fp16", n_sm + 1) == 2
    assert GR.v2_default_min_blocks(t, "nvfp4", "fp16", n_sm, verify=True) == 2
    t8 = GR.ReplayTileV2("fp8", "fp32", 128, 128, 64, 16, True)
    assert GR.v2_default_min_blocks(t8, "fp8", "fp32", 32) == 4         # not other pairs
    t = GR.ReplayTileV2("fp8", "fp32", 128, 128, 128, 16, True)
    assert GR.v2_default_min_blocks(t, "fp8", "fp32", big) == 3
    t = GR.ReplayTileV2("fp32", "fp32", 128, 128, 128, 16, False)
    assert GR.v2_default_min_blocks(t, "fp32", "fp32", big) == 2
    t = GR.ReplayTileV2("fp8", "fp32", 128, 128, 64, 16, True)          # 128 threads: cap 4
    assert GR.v2_default_min_blocks(t, "fp8", "fp32", big) == 4          # never lowered
    # v2 where supported, v1 otherwise or on request
    assert GR.resolve_impl("nvfp4", "fp16", 128, 128, 16) == "v2"
    assert GR.resolve_impl("nvfp4", "fp16", 128, 128, 16, "v1") == "v1"
    assert GR.resolve_impl("fp32", "fp32", 64, 64, 16) == "v1"       # v2 needs K = 128
    assert GR.resolve_impl("fp32", "fp32", 128, 128, 48) == "v1"     # v2 needs L <= 32


def _arrive_fences(ptx: str) -> int:
    """Fences before the kernel's first atomic (the CTA's arrive on its row counter)."""
    import re
    i = ptx.index("atom.global.add")
    return len(re.findall(r"\bfence\.|\bmembar\.", ptx[:i]))


def _small_loads_before_tile(ptx: str, bits: int = 16) -> int:
    """``bits``-wide global loads ahead of the first 16-byte load (the read tile): 16 -- raw
    gates a / b, v, q / k of bf16 acts; 32 -- the slot index, the cursors, dt_bias, A_log."""
    import re
    return len(re.findall(rf"ld\.global\.b{bits}\b", ptx[:ptx.index("ld.global.v4")]))


def test_gdn_replay_preamble_levels(monkeypatch):
    """The v2 CTA preamble (session 7): q / k normalised by the last warp (not warp 0, which
    waits for the cursors behind the arrive's fence); read copies other than fp32 also issue the
    read tile before the cursors are consumed and order the arrive by a data dependency instead
    of a fence (a fence would wait for the tile); level 3 (session 15) issues the cursors, gates
    and q / k before the tile; level 4 (session 16, the nvfp4 default) issues the row's gates,
    q / k and v before its slot. REPLAYSSM_GDN_PREAMBLE overrides; it is part of the compile
    key."""
    monkeypatch.delenv(GR.V_LATE_ENV, raising=False)
    monkeypatch.delenv(GR.RING_GATES_ASYNC_ENV, raising=False)
    monkeypatch.delenv(GR.PREAMBLE_ENV, raising=False)
    monkeypatch.delenv(GR.IMPL_ENV, raising=False)
    monkeypatch.delenv(GR.WHOLE_ROWS_ENV, raising=False)
    monkeypatch.delenv(GR.TPW_ENV, raising=False)
    assert GR.preamble_level("nvfp4") == 4 and GR.preamble_level("fp32") == 1
    assert GR.preamble_level("fp8") == 3 and GR.preamble_level("bf16") == 3
    # fp32 read copies take level 3 with whole-row tile loads (their default at one tile/warp)
    assert GR.preamble_level("fp32", whole_rows=True) == 3
    assert GR.whole_rows_default("fp32", 1) and not GR.whole_rows_default("fp32", 2)
    assert not GR.whole_rows_default("bf16", 1)
    fargs = ("fp32",) + ("bfloat16", 16, 32, 128, 128, 16, 17, None, None, "float32",
                         "bfloat16", "float32", "bfloat16", True, True, None, None)
    fkw, fkey = GR._resolve(*fargs)
    assert fkw["whole_rows"] and fkw["preamble"] == 3 and GR.make_op(fkw).whole_rows
    monkeypatch.setenv(GR.WHOLE_ROWS_ENV, "0")
    fkw0, fkey0 = GR._resolve(*fargs)
    assert not fkw0["whole_rows"] and fkw0["preamble"] == 1 and fkey0 != fkey
    monkeypatch.delenv(GR.WHOLE_ROWS_ENV)
    monkeypatch.setenv(GR.PREAMBLE_ENV, "0")
    assert GR.preamble_level("nvfp4") == 0
    monkeypatch.delenv(GR.PREAMBLE_ENV)
    args = ("nvfp4/fp16sr", "bfloat16", 16, 32, 128, 128, 16, 17, None, None, "float32",
            "bfloat16", "float32", "bfloat16", True, True, None, None)
    kw, key = GR._resolve(*args)
    assert kw["preamble"] == 4 and kw["v_late"]           # (level 4 implies v as raw bits)
    monkeypatch.setenv(GR.PREAMBLE_ENV, "1")
    assert GR._resolve(*args)[1] != key                    # the level is in the compile key
    monkeypatch.delenv(GR.PREAMBLE_ENV)
    op = GR.make_op(kw)
    assert op.preamble == 4 and op.v_late and op.qk_warp == op.nwarps - 1
    assert GR.PREAMBLE_ENV in GR._ENV_NAMES
    _, ptx = GR.compile_only("nvfp4/fp16sr", keep_ptx=True)
    assert _arrive_fences(ptx) == 0                        # data-dependent arrive:
    import re                                              # a register increment, not 1
    assert re.search(r"atom\.global\.add\.u32\s+%r\d+, \[[^\]]+\], %r\d+;", ptx)
    # raw gates a, b, the lane's one v, its 2 x 4 q / k elements (level 4) ...
    assert _small_loads_before_tile(ptx) == 2 + 1 + 8
    assert _small_loads_before_tile(ptx, 32) == 1 + 3 + 2    # slot, cursors, dt_bias + A_log
    # ... all of them (with dt_bias, A_log) ahead of the slot and the cursors
    head = ptx[:ptx.index("ld.global.v4")]
    assert re.findall(r"ld\.global\.b\d+", head)[:13].count("ld.global.b16") == 11
    # ... and none of them is converted (waited for) before the tile is issued
    assert not re.search(r"cvt\.f32\.(bf16|f16)", head)
    _, ptx = GR.compile_only("fp32", keep_ptx=True)      # whole rows, level 3, v late
    assert _small_loads_before_tile(ptx) == 2 + 8 and _arrive_fences(ptx) == 0
    # (the whole-row flush's output dots take a second transposed butterfly)
    bfly_flush_whole = len(re.findall(r"shfl\.sync\.bfly", ptx))
    monkeypatch.setenv(GR.FLUSH_WHOLE_ENV, "0")
    _, ptx = GR.compile_only("fp32", keep_ptx=True)
    bfly_whole = len(re.findall(r"shfl\.sync\.bfly", ptx))
    assert bfly_flush_whole - bfly_whole == 31
    monkeypatch.delenv(GR.FLUSH_WHOLE_ENV)
    monkeypatch.setenv(GR.WHOLE_ROWS_ENV, "0")             # (g, t) chunks, level 1
    _, ptx = GR.compile_only("fp32", keep_ptx=True)
    # the whole rows' transposed butterfly: 32 row partials over 32 lanes, 31 shuffles
    assert bfly_whole - len(re.findall(r"shfl\.sync\.bfly", ptx)) == 31
    assert _small_loads_before_tile(ptx) == 4                # raw gates + 2 v (early here)
    assert _arrive_fences(ptx) == 1                        # fence, then the arrive
    assert re.search(r"atom\.global\.add\.u32\s+%r\d+, \[[^\]]+\], 1;", ptx)


def test_gdn_replay_ring_gates_async_and_v_late(monkeypatch):
    """Non-flush rows take warp 0's ring g / kinv by cp.async into shared memory (default;
    REPLAYSSM_GDN_RING_GATES_ASYNC=0: registers, which ptxas spilled right after the loads);
    fp32 read copies load v behind the tile (REPLAYSSM_GDN_V_LATE=1 / 0 forces). Both are
    compile keys."""
    import re
    for name in (GR.RING_GATES_ASYNC_ENV, GR.V_LATE_ENV, GR.WHOLE_ROWS_ENV, GR.TPW_ENV,
                 GR.IMPL_ENV, GR.PREAMBLE_ENV):
        monkeypatch.delenv(name, raising=False)
    args = ("nvfp4/fp16sr", "bfloat16", 16, 32, 128, 128, 16, 17, None, None, "float32",
            "bfloat16", "float32", "bfloat16", True, True, None, None)
    kw, key = GR._resolve(*args)
    assert kw["ring_gates_async"]
    _, ptx = GR.compile_only("nvfp4/fp16sr", keep_ptx=True)
    assert len(re.findall(r"cp\.async\.ca\.shared\.global \[[^\]]+\], \[[^\]]+\], 4", ptx)) == 2
    assert ptx.count("cp.async.wait_group") == 1
    monkeypatch.setenv(GR.RING_GATES_ASYNC_ENV, "0")
    kw0, key0 = GR._resolve(*args)
    assert not kw0["ring_gates_async"] and key0 != key
    _, ptx = GR.compile_only("nvfp4/fp16sr", keep_ptx=True)
    assert "cp.async.ca" not in ptx
    monkeypatch.delenv(GR.RING_GATES_ASYNC_ENV)
    # v behind the tile: the fp32 read copy's default
    fargs = ("fp32",) + args[1:]
    fkw, fkey = GR._resolve(*fargs)
    assert fkw["v_late"] and not GR._resolve(*(("fp8/fp32",) + args[1:]))[0]["v_late"]
    monkeypatch.setenv(GR.V_LATE_ENV, "0")
    fkw0, fkey0 = GR._resolve(*fargs)
    assert not fkw0["v_late"] and fkey0 != fkey
    assert GR._resolve(*args)[0]["v_late"]                 # preamble 4 (nvfp4) implies it
    monkeypatch.delenv(GR.V_LATE_ENV)
    monkeypatch.setenv(GR.WHOLE_ROWS_ENV, "0")             # fp32 in (g, t) chunks: v early
    assert not GR._resolve(*fargs)[0]["v_late"]
    monkeypatch.delenv(GR.WHOLE_ROWS_ENV)
    assert GR.V_LATE_ENV in GR._ENV_NAMES and GR.RING_GATES_ASYNC_ENV in GR._ENV_NAMES
    # the verify kernel takes neither switch, whatever the decode's preamble level
    from cute_kernels import gdn_verify as GV
    monkeypatch.setenv(GR.PREAMBLE_ENV, "4")
    vkw, _ = GV._resolve("nvfp4/fp16sr", "bfloat16", 16, 32, 128, 128, 16, 24, 8, None, None,
                         "float32", "bfloat16", "float32", "bfloat16", True, True, None, None)
    vk = GV.GDNVerifyKernel(**vkw)
    assert vk.preamble == 1 and not vk.v_late and not vk.ring_gates_async
    assert not vk.flush_whole


def test_gdn_replay_flush_whole(monkeypatch):
    """The fp32 pair's flush rows fold the whole-row tile they hold (default; compile key;
    REPLAYSSM_GDN_FLUSH_WHOLE=0 or (g, t) tiles: the (g, t) flush): no 3xTF32 mma and no
    second load of hi in that build, the u ring staged by 16-byte cp.async, 0 spills."""
    import re
    for name in (GR.FLUSH_WHOLE_ENV, GR.WHOLE_ROWS_ENV, GR.TPW_ENV, GR.IMPL_ENV,
                 GR.PREAMBLE_ENV):
        monkeypatch.delenv(name, raising=False)
    args = ("bfloat16", 16, 32, 128, 128, 16, 17, None, None, "float32", "bfloat16",
            "float32", "bfloat16", True, True, None, None)
    kw, key = GR._resolve("fp32", *args)
    assert kw["flush_whole"] and kw["whole_rows"]
    for pair in ("fp8/fp32", "bf16/fp32", "nvfp4/fp16sr"):   # split pairs: hi is not the tile
        assert not GR._resolve(pair, *args)[0]["flush_whole"]
    _, ptx = GR.compile_only("fp32", keep_ptx=True)
    assert "mma.sync" not in ptx
    assert len(re.findall(r"cp\.async\.c[ag]\.shared\.global \[[^\]]+\], \[[^\]]+\], 16",
                          ptx)) >= 1
    monkeypatch.setenv(GR.FLUSH_WHOLE_ENV, "0")
    kw0, key0 = GR._resolve("fp32", *args)
    assert not kw0["flush_whole"] and key0 != key
    _, ptx0 = GR.compile_only("fp32", keep_ptx=True)
    assert "mma.sync" in ptx0
    monkeypatch.delenv(GR.FLUSH_WHOLE_ENV)
    monkeypatch.setenv(GR.WHOLE_ROWS_ENV, "0")
    assert not GR._resolve("fp32", *args)[0]["flush_whole"]
    monkeypatch.delenv(GR.WHOLE_ROWS_ENV)
    # L > 16: the staging's key buffers are not there (three key tiles): the (g, t) flush
    a24 = args[:5] + (24, 25) + args[7:]
    assert not GR._resolve("fp32", *a24)[0]["flush_whole"]
    k24, p24 = GR.compile_only("fp32", L=24, keep_ptx=True)
    assert "mma.sync" in p24 and not k24.meta["tile"].ks_split


def test_gdn_replay_row_order_variant(monkeypatch):
    """The flush-first order (REPLAYSSM_GDN_ORDER=1; compile key ``row_order``): grid (HV *
    nsplit, positions) with the heads of a position adjacent, the row and slot (and, preamble
    >= 3, the cursors: REPLAYSSM_GDN_ORDER_CURSORS) from the order entry; the live cursors are
    not loaded then. No local memory in the fp32 build; the launcher runs the order kernel
    only where asked."""
    import re
    for name in (GR.ORDER_ENV, GR.ORDER_CURSORS_ENV):
        monkeypatch.delenv(name, raising=False)
        assert name in GR._ENV_NAMES
    args = ("nvfp4/fp16sr", "bfloat16", 16, 32, 128, 128, 16, 17, None, None, "float32",
            "bfloat16", "float32", "bfloat16", True, True, None, None)
    kw0, key0 = GR._resolve(*args)
    kw1, key1 = GR._resolve(*args, None, None, True)
    assert not kw0["row_order"] and kw1["row_order"] and kw1["order_cursors"] and key0 != key1
    monkeypatch.setenv(GR.ORDER_CURSORS_ENV, "0")
    kw2, key2 = GR._resolve(*args, None, None, True)
    assert kw2["row_order"] and not kw2["order_cursors"] and key2 not in (key0, key1)
    monkeypatch.delenv(GR.ORDER_CURSORS_ENV)
    _, p0 = GR.compile_only("fp32", keep_ptx=True)
    k1, p1 = GR.compile_only("fp32", keep_ptx=True, row_order=True)
    assert k1.meta["order_cursors"]
    # the heads of a grid position are adjacent: ctaid.y is the position
    assert "ctaid.y" in p1 and p1.count("ctaid.z") == 0
    # one kernel parameter more: the order tensor
    nparam = lambda p: len(re.findall(r"^\s*\.param\s", p[:p.index("{")], re.M))  # noqa: E731
    assert nparam(p1) > nparam(p0), (nparam(p0), nparam(p1))
    st = common.ptx_stats(p1)
    assert st["ld.local"] == 0 and st["st.local"] == 0

    import torch

    from replayssm_lp.pairs import parse_pair

    class _C:                                      # use_row_order: the env and the buffer
        philox_rounds = 10
        row_order = torch.zeros(2, 64, dtype=torch.int32)
        pair = parse_pair("nvfp4/fp16sr")
    # default: narrow read copies from ORDER_MIN_BATCH rows; fp32 read copies never
    assert GR.use_row_order(_C, GR.ORDER_MIN_BATCH) and not GR.use_row_order(_C, 31)
    assert not GR.use_row_order(_C, 65)            # larger than the order buffer
    _C.pair = parse_pair("fp32")
    assert not GR.use_row_order(_C, 64)
    monkeypatch.setenv(GR.ORDER_ENV, "1")
    assert GR.use_row_order(_C, 8) and not GR.use_row_order(_C, 65)
    monkeypatch.setenv(GR.ORDER_ENV, "0")
    _C.pair = parse_pair("nvfp4/fp16sr")
    assert not GR.use_row_order(_C, 64)


def test_gdn_replay_split_variant(monkeypatch):
    """The split decode (REPLAYSSM_GDN_SPLIT; compile keys ``rows`` / ``flush_positions``): the
    non-flush half (rows = 1) is built without flush code at two row tiles per warp (128
    threads per head, no local memory), the flush half (rows = 2) at one tile per warp over a
    persistent grid that walks positions in a loop, neither with the read copy's unused half;
    both take the order's cursors and no programmatic launch edges. The rule: narrow read
    copies from SPLIT_MIN_BATCH rows, only where the order runs; 0 / 1 force it."""
    for name in (GR.SPLIT_ENV, GR.SPLIT_TPW_ENV, GR.SPLIT_MINB1_ENV, GR.SPLIT_MINB2_ENV,
                 GR.SPLIT_FPOS_ENV, GR.ORDER_ENV, GR.ORDER_CURSORS_ENV):
        monkeypatch.delenv(name, raising=False)
        assert name in GR._ENV_NAMES
    args = ("nvfp4/fp16sr", "bfloat16", 16, 32, 128, 128, 16, 17, None, None, "float32",
            "bfloat16", "float32", "bfloat16", True, True, None, None)
    kw0, key0 = GR._resolve(*args, None, None, True)
    kw1, key1 = GR._resolve(*args, None, None, True, 1)
    kw2, key2 = GR._resolve(*args, None, None, True, 2, 8)
    assert len({key0, key1, key2}) == 3
    assert kw1["rows"] == 1 and kw1["tpw"] == GR.SPLIT_NONFLUSH_TPW and kw1["order_cursors"]
    assert kw1["min_blocks_per_mp"] == GR.SPLIT_NONFLUSH_MINB["nvfp4"] and kw1["pdl"] == 0
    assert kw2["rows"] == 2 and kw2["tpw"] == 1 and kw2["flush_positions"] == 8
    assert kw2["min_blocks_per_mp"] == GR.SPLIT_FLUSH_MINB and kw2["pdl"] == 0
    monkeypatch.setenv(GR.ORDER_CURSORS_ENV, "0")     # the split needs the order's cursors
    assert GR._resolve(*args, None, None, True, 1)[0]["order_cursors"]
    monkeypatch.delenv(GR.ORDER_CURSORS_ENV)
    with pytest.raises(ValueError, match="rows"):
        GR.make_op(dict(kw1, rows=3))
    with pytest.raises(ValueError, match="order"):
        GR.make_op(dict(kw1, row_order=False))
    _, p0 = GR.compile_only("nvfp4/fp16sr", keep_ptx=True, row_order=True)
    k1, p1 = GR.compile_only("nvfp4/fp16sr", keep_ptx=True, rows=1)
    k2, p2 = GR.compile_only("nvfp4/fp16sr", keep_ptx=True, rows=2)
    st0, st1, st2 = (common.ptx_stats(p) for p in (p0, p1, p2))
    assert st1["ld.local"] == 0 and st1["st.local"] == 0
    # the non-flush half has no flush: no SR (Philox multiplies) and a fraction of the code
    assert len(p1) < len(p0) // 3 and p1.count("mul.wide.u32") < 20
    assert p2.count("mul.wide.u32") > 200           # the flush half encodes with SR
    # the flush half walks positions (a loop over the grid's y) and loads no read tile: its
    # 16-byte global loads are fewer than the full build's
    assert "nctaid.y" in p2 and "nctaid.y" not in p0

    import torch

    from replayssm_lp.pairs import parse_pair

    class _C:
        philox_rounds = 10
        row_order = torch.zeros(2, 1024, dtype=torch.int32)
        pair = parse_pair("nvfp4/fp16sr")
        buffer_len = 16
    assert GR.use_split(_C, GR.SPLIT_MIN_BATCH) and not GR.use_split(_C, GR.SPLIT_MIN_BATCH - 1)
    _C.buffer_len = GR.SPLIT_MAX_L + 1               # longer buffers: the single launch
    assert not GR.use_split(_C, 512)
    monkeypatch.setenv(GR.SPLIT_ENV, "1")
    assert GR.use_split(_C, 512)                     # (unless forced)
    monkeypatch.delenv(GR.SPLIT_ENV)
    _C.buffer_len = 16
    _C.pair = parse_pair("fp32")
    assert not GR.use_split(_C, 512)                 # fp32 read copies: no order, no split
    monkeypatch.setenv(GR.SPLIT_ENV, "1")
    monkeypatch.setenv(GR.ORDER_ENV, "1")
    assert not GR.use_split(_C, 512)                 # forced: never for fp32 read copies
    _C.pair = parse_pair("bf16/fp32")
    assert GR.use_split(_C, 8)
    monkeypatch.setenv(GR.ORDER_ENV, "0")
    assert not GR.use_split(_C, 512)                 # forced, but only where the order runs
    monkeypatch.setenv(GR.ORDER_ENV, "1")
    monkeypatch.setenv(GR.SPLIT_ENV, "0")
    assert not GR.use_split(_C, 512)
    # the split only where its own builds honour the call
    assert GR._split_honours(None, None) and not GR._split_honours(256, None)
    assert not GR._split_honours(None, 2)
    for name, val in ((GR.TPW_ENV, "1"), (GR.MINB_ENV, "3"), (GR.PROF_ENV, "1"),
                      (GR.PREAMBLE_ENV, "2")):
        monkeypatch.setenv(name, val)
        assert not GR._split_honours(None, None), name
        monkeypatch.delenv(name)
    monkeypatch.setenv(GR.PREAMBLE_ENV, "3")
    assert GR._split_honours(None, None)
    monkeypatch.delenv(GR.PREAMBLE_ENV)
    monkeypatch.setenv(GR.SPLIT_FPOS_ENV, "3")
    assert GR.split_flush_positions(32) == 3
    monkeypatch.delenv(GR.SPLIT_FPOS_ENV)
    assert GR.split_flush_positions(32) == max(1, common.num_sms() * GR.SPLIT_FLUSH_MINB // 32)


def test_gdn_make_launch_takes_the_split(monkeypatch):
    """make_launch's dispatch (no GPU: the split's launcher is replaced by a marker): the split
    at a batch the rule picks, also after the tiling heuristics filled in their occupancy (a
    session-18 mend once compared the filled-in value and never split); not where the caller
    asks for an occupancy."""
    import torch

    from replayssm_lp.pairs import parse_pair
    for name in (GR.SPLIT_ENV, GR.ORDER_ENV, GR.MINB_ENV, GR.TPW_ENV, GR.PROF_ENV,
                 GR.PREAMBLE_ENV):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(GR, "_split_launch", lambda *a, **k: "split")
    monkeypatch.setattr(GR, "compile_gdn_replay", lambda *a, **k: (_ for _ in ()).throw(
        RuntimeError("single launch")))

    class _C:
        philox_rounds = 10
        pair = parse_pair("nvfp4/fp16sr")
        buffer_len, ring = 16, 17
        HV, V, K = 32, 128, 128                    # (use_pf_early)
        row_order = torch.zeros(2, 1024, dtype=torch.int32)
    q = torch.empty(256, 16, 128, device="meta")
    v = torch.empty(256, 32, 128, device="meta")
    gd = (None, None, torch.float32, torch.bfloat16, torch.float32, torch.bfloat16)
    assert GR.make_launch(_C, q, v, gd, True, None) == "split"
    with pytest.raises(RuntimeError, match="single launch"):
        GR.make_launch(_C, q, v, gd, True, None, min_blocks_per_mp=2)
    _C.buffer_len, _C.ring = 32, 33
    with pytest.raises(RuntimeError, match="single launch"):
        GR.make_launch(_C, q[:32], v[:32], gd, True, None)     # below SPLIT_MIN_BATCH
    # ... except at the (buffer length, rows) of SPLIT_SMALL_RULE (order + split below the
    # split's own batch); fewer rows, longer buffers, fp32 read copies, forced switches: not
    _C.buffer_len, _C.ring = 8, 9
    assert GR.make_launch(_C, q[:8], v[:8], gd, True, None) == "split"
    assert GR.make_launch(_C, q[:31], v[:31], gd, True, None) == "split"
    with pytest.raises(RuntimeError, match="single launch"):
        GR.make_launch(_C, q[:4], v[:4], gd, True, None)
    with pytest.raises(RuntimeError, match="single launch"):
        GR.make_launch(_C, q[:8], v[:8], gd, True, None, min_blocks_per_mp=2)
    assert GR.make_launch(_C, q[:48], v[:48], gd, True, None) == "split"
    assert GR.use_small_split(_C, 8) and GR.use_small_split(_C, GR.SPLIT_MIN_BATCH - 1)
    assert not GR.use_small_split(_C, GR.SPLIT_MIN_BATCH)
    _C.buffer_len = 16                               # L16: from 16 rows
    assert not GR.use_small_split(_C, 15) and GR.use_small_split(_C, 16)
    _C.buffer_len = 17
    assert not GR.use_small_split(_C, 16)
    _C.buffer_len = 8
    for env in (GR.ORDER_ENV, GR.SPLIT_ENV):
        monkeypatch.setenv(env, "0")
        assert not GR.use_small_split(_C, 8), env
        monkeypatch.setenv(env, "1")                 # forced on: the rule's sizes still split
        assert GR.use_small_split(_C, 8) and not GR.use_small_split(_C, 4), env
        monkeypatch.delenv(env)
    _C.pair = parse_pair("fp32")
    assert not GR.use_small_split(_C, 8)


def test_launch_block_v_switch(monkeypatch):
    """REPLAYSSM_GDN_BLOCK_V (tuning) sets a v2 launch's value rows per CTA for pairs without
    nvfp4 (nvfp4 keeps the whole head: its global scale), is validated, and is part of the
    launch key; unset, the heuristics choose, never below 64 rows for 128-row heads, fp32 read
    copies at most 64 rows up to 2048 (row, value head) pairs, fp8 / bf16 / fp16 ones up to 256
    at L <= 16; the v1 kernel and the profiling build keep their own choice."""
    from cute_kernels import common
    monkeypatch.setattr(common, "num_sms", lambda *a, **k: 132)      # the H200's
    monkeypatch.delenv(GR.BLOCK_V_ENV, raising=False)
    monkeypatch.delenv(GR.PROF_ENV, raising=False)
    assert GR.BLOCK_V_ENV in GR._ENV_NAMES
    lbv = GR.launch_block_v
    assert lbv(32, 32, 128, 128, "fp8", "fp32", 32, "v2") == 128
    # fp32 read copies: 64 rows up to 2048 (row, value head) pairs, then the heuristics' 128
    assert lbv(32, 32, 128, 128, "fp32", "fp32", 16, "v2") == 64
    assert lbv(64, 32, 128, 128, "fp32", "fp32", 32, "v2") == 64
    assert lbv(32, 64, 128, 128, "fp32", "fp32", 16, "v2") == 64
    assert lbv(64, 64, 128, 128, "fp32", "fp32", 16, "v2") == 128
    assert lbv(128, 32, 128, 128, "fp32", "fp32", 16, "v2") == 128
    assert GR.choose_block_v_v2(1, 32, 128, "fp32", "fp32") == 32       # heuristics: < 64
    for rf in ("fp32", "fp8", "bf16"):
        assert lbv(1, 32, 128, 128, rf, "fp32", 32, "v2") == 64       # ... never below 64
    assert lbv(1, 32, 128, 128, "nvfp4", "fp16", 16, "v2") == 128     # whole head
    # fp8 / bf16 / fp16 read copies: 64 rows up to 256 pairs at L <= 16
    for rf, rec in (("fp8", "fp32"), ("bf16", "fp32"), ("fp16", "fp32"), ("fp8", "fp8")):
        assert lbv(8, 32, 128, 128, rf, rec, 16, "v2") == 64
        assert lbv(4, 64, 128, 128, rf, rec, 8, "v2") == 64
        assert lbv(8, 32, 128, 128, rf, rec, 32, "v2") == 128        # L32: lost there
        assert lbv(16, 32, 128, 128, rf, rec, 16, "v2") == 128
    assert lbv(32, 32, 128, 256, "fp32", "fp32", 16, "v2") == 128      # untimed head size
    assert lbv(32, 32, 128, 128, "fp32", "fp32", 16, "v1") == \
        GR.choose_block_v(32, 32, 128, 128, "fp32", "fp32", 16)
    monkeypatch.setenv(GR.BLOCK_V_ENV, "64")
    assert lbv(32, 32, 128, 128, "fp8", "fp32", 32, "v2") == 64
    assert lbv(32, 32, 128, 128, "nvfp4", "fp16", 32, "v2") == 128
    monkeypatch.setenv(GR.PROF_ENV, "1")
    assert lbv(32, 32, 128, 128, "fp8", "fp32", 32, "v2") == 128       # profiling: whole head
    monkeypatch.delenv(GR.PROF_ENV)
    for bad in ("48", "256"):
        monkeypatch.setenv(GR.BLOCK_V_ENV, bad)
        with pytest.raises(ValueError, match=f"REPLAYSSM_GDN_BLOCK_V={bad}"):
            lbv(32, 32, 128, 128, "fp32", "fp32", 16, "v2")


@pytest.mark.parametrize("pair", ["fp32", "nvfp4/fp16sr"])
def test_profiling_build_compiles(pair, monkeypatch):
    """``REPLAYSSM_GDN_PROF=1`` (tests/gpu_scripts/sass_phases.py, the phase profile) builds:
    %clock64 stamps at the phase boundaries of the flush and non-flush paths and %globaltimer at
    start and end (it had stopped compiling: the end stamps grew a list inside a dynamic
    branch); the default build has no timer at all."""
    monkeypatch.delenv(GR.PROF_ENV, raising=False)
    _, ptx = GR.compile_only(pair, H=2, HV=4, keep_ptx=True)
    assert "%clock64" not in ptx and "%globaltimer" not in ptx
    monkeypatch.setenv(GR.PROF_ENV, "1")
    _, ptx = GR.compile_only(pair, H=2, HV=4, keep_ptx=True)
    assert ptx.count("%clock64") >= 12 and ptx.count("%globaltimer") == 2 and "%smid" in ptx
