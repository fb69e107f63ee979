"""CPU compile tests of the Mamba-2 ReplaySSM decode kernel (cute_kernels/mamba2_replay.py).

Compiles every precision pair for Hopper (``CUTE_DSL_ARCH=sm_90a``, no GPU needed) and reads the
PTX / CUBIN: no local-memory arrays in the PTX, no approximate division (every stored byte goes
through ``div.rn.f32``, or -- nvfp4 RN blocks of sane data -- through the same fast-path sequence
ptxas emits for it, with the reciprocal hoisted per block), 128-bit state loads (or 16-byte
cp.async for the staged nvfp4 non-flush path), mma.sync where the tensor-core dot is selected;
the fallback paths (flush v1, register non-flush, CUDA-core dot) still compile. Registers and ptxas
spill bytes are printed (a spill is reported, not failed: ptxas' choice, see the kernel notes).
Numerical checks need the GPU: ``tests/gpu_scripts/check_mamba2_replay.py``.
"""
import os
import re
import struct
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

import pytest  # noqa: E402

cutlass = pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")
pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi is not installed (the kernel needs TVM-FFI)")

from cute_kernels import common  # noqa: E402
from cute_kernels import mamba2_replay as M  # noqa: E402
from replayssm_lp.pairs import precision_pairs  # noqa: E402

PAIRS = list(precision_pairs(include_extra=True))
SMALL = dict(H=8, P=64, N=128, G=2)      # H/G = 4 heads per group


def _variants():
    out = []
    for i, name in enumerate(PAIRS):
        # alternate one head per CTA (single CTA per group) and whole groups (4 CTAs' worth of
        # heads in one, cross-CTA arrival counter off / prefetch on) so both code paths compile
        out.append((name, "bfloat16", 64, 1 if i % 2 == 0 else 4, 16))
    out.append(("fp32", "float32", 64, 2, 16))
    out.append(("nvfp4/fp16sr", "bfloat16", 80, 2, 16))   # P=80 (Nano-4B headdim): row tails
    out.append(("fp8/fp32", "float16", 80, 1, 4))
    out.append(("nvfp4/fp16sr", "float16", 64, 4, 16))    # fp16 acts: mma without C scaling
    out.append(("nvfp4/fp8sr", "float32", 64, 2, 32))     # fp32 acts: staged, CUDA-core dot
    return out


# the fallback paths (env REPLAYSSM_M2_FLUSH=1 / REPLAYSSM_M2_STAGED=0 / REPLAYSSM_M2_MMA=0 /
# REPLAYSSM_M2_EARLY_ARRIVE=0)
FALLBACKS = [
    ("nvfp4/fp16sr", "bfloat16", 64, 4, 16, dict(flush_impl=1, staged=False, nonflush_mma=False)),
    ("nvfp4/fp16sr", "bfloat16", 64, 2, 16, dict(staged=False)),
    ("fp32", "bfloat16", 64, 4, 16, dict(flush_impl=1)),
    ("nvfp4/fp16sr", "bfloat16", 64, 1, 16, dict(early_arrive=False)),
    # grid position -> (row, slot) from the flush-first order (cute_kernels.row_order)
    ("nvfp4/fp16sr", "bfloat16", 64, 4, 16, dict(row_order=True)),
    ("fp32", "bfloat16", 64, 1, 16, dict(row_order=True)),
]


VARIANTS = _variants()
_REPORT = []


def _cubin_info(path):
    """(registers, stack frame bytes) of the (single) kernel in a CUBIN (EIATTR_REGCOUNT 0x2f,
    EIATTR_FRAME_SIZE 0x11 in the .nv.info section)."""
    b = open(path, "rb").read()
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    secs = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    stro = secs[shstrndx][4]
    regs = frame = None
    for name, _typ, _fl, _ad, off, size, *_ in secs:
        n = b[stro + name: b.index(b"\0", stro + name)].decode()
        if n != ".nv.info":
            continue
        p = off
        while p < off + size:
            fmt, attr = b[p], b[p + 1]
            if fmt == 4:
                sz = struct.unpack_from("<H", b, p + 2)[0]
                if sz == 8 and attr in (0x2F, 0x11):
                    _sym, v = struct.unpack_from("<II", b, p + 4)
                    if attr == 0x2F:
                        regs = v
                    else:
                        frame = v
                p += 4 + sz
            else:
                p += 4
    return regs, frame


_ALL = [v + ({},) for v in VARIANTS] + FALLBACKS


@pytest.mark.parametrize("pair,act,P,hpc,L,opts", _ALL,
                         ids=[f"{v[0]}-{v[1]}-P{v[2]}-hpc{v[3]}-L{v[4]}"
                              + "".join(f"-{k}{int(x)}" for k, x in v[5].items()) for v in _ALL])
def test_compile_variant(pair, act, P, hpc, L, opts):
    H, N, G = SMALL["H"], SMALL["N"], SMALL["G"]
    t0 = time.perf_counter()
    with common.dump_ptx(cubin=True) as d:
        k = M.compile_mamba2_replay(pair, act, "float32", H, P, N, G, L, L + 1, True, True, True,
                                    True, hpc, dump=d, **opts)
        ptx = d.read()
        cubins = d.files("cubin")
        regs, frame = _cubin_info(cubins[0]) if cubins else (None, None)
        d.cleanup()
    secs = time.perf_counter() - t0
    st = common.ptx_stats(ptx)
    _REPORT.append((pair, act, P, hpc, L, secs, regs, frame, st["ld.global.v4"], opts))
    print(f"\n{pair:16s} {act:9s} P={P} hpc={hpc} L={L}: compile {secs:5.2f}s, regs={regs}, "
          f"spill/stack bytes={frame}, ld.global.v4={st['ld.global.v4']}, "
          f"st.global.v4={st['st.global.v4']}, {k.meta['cfg']}")
    assert ptx and ".entry" in ptx
    assert st["ld.local"] == 0 and st["st.local"] == 0, "local-memory arrays in the PTX"
    for bad in ("div.approx", "div.full", "rcp.approx.ftz.f64"):
        assert bad not in ptx, f"{bad} in the PTX: encoders must use div.rn.f32"
    assert "div.rn.f32" in ptx
    op = k.meta["op"]
    if op.snf:       # staged non-flush: 16-byte cp.async of the state rows
        assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group" in ptx
    else:
        assert st["ld.global.v4"] > 0, "state chunks are not loaded with 128-bit loads"
    if op.mma:
        assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert op.snf == (op.read_fmt == "nvfp4" and opts.get("staged", True))
    assert op.mma == (op.read_fmt == "nvfp4" and act != "float32"
                      and opts.get("nonflush_mma", True))
    assert op.flush_impl == opts.get("flush_impl", 2)
    assert op.early_arrive == opts.get("early_arrive", True)
    assert op.row_order == opts.get("row_order", False)
    # the row arrive (a CTA of several per row): atom.inc with the late publish check
    # (LATE_CHECK_READ_FMTS: fp32 / nvfp4 read copies by default), else atom.add
    arrive = "atom.relaxed.gpu.global.inc" if op.late_arrive_check else "atom.global.add"
    assert arrive in ptx or k.meta["cfg"].ctas_per_row == 1
    if frame:
        print(f"  note: ptxas used a {frame}-byte stack frame (register spills) for this variant")


def test_compile_report():
    """Prints the table of the variants compiled above (run last)."""
    if not _REPORT:
        pytest.skip("no variant compiled in this session")
    tot = sum(r[5] for r in _REPORT)
    print("\npair             act       P  hpc  L  compile[s] regs spill  v4-loads  options")
    for r in _REPORT:
        print(f"{r[0]:16s} {r[1]:9s} {r[2]:3d} {r[3]:3d} {r[4]:3d} {r[5]:9.2f} {r[6]!s:>5s} "
              f"{r[7]!s:>5s} {r[8]:6d}  {r[9] or ''}")
    print(f"total compile time {tot:.1f}s for {len(_REPORT)} variants")


# ------------------------------------------------------------------------------------------------
# pure-Python parts (no compile)
# ------------------------------------------------------------------------------------------------
def test_choose_heads_per_cta(monkeypatch):
    monkeypatch.delenv("REPLAYSSM_M2_HEADS_PER_CTA", raising=False)
    # Nemotron-3-Super: H=128, G=8 -> 16 heads per group; 132 SMs without a GPU
    assert M.choose_heads_per_cta(1, 128, 8) == 1
    assert M.choose_heads_per_cta(8, 128, 8) == 1
    assert M.choose_heads_per_cta(32, 128, 8) == 2
    assert M.choose_heads_per_cta(256, 128, 8) == 4
    assert M.choose_heads_per_cta(512, 128, 8) == 4
    for b in (1, 3, 17, 64, 512):
        h = M.choose_heads_per_cta(b, 96, 8)          # Nano-4B: 12 heads per group
        assert 12 % h == 0 and h <= 4
    assert M.choose_heads_per_cta(512, 24, 8) == 1     # 3 heads per group: only 1 divides
    monkeypatch.setenv("REPLAYSSM_M2_HEADS_PER_CTA", "8")
    assert M.choose_heads_per_cta(1, 128, 8) == 8      # the tuning override still wins


def test_tile_config_and_errors():
    t = M.ReplayTile("nvfp4", 128, 64, 128, 8, 16, 17, 16)
    assert (t.tn, t.cn, t.rpt, t.cb, t.nit, t.jb, t.njb) == (4, 1, 2, 8, 4, 16, 1)
    assert t.ctas_per_row == 8 and t.ctas_per_group == 1
    t = M.ReplayTile("fp32", 96, 80, 128, 8, 64, 65, 1)
    assert (t.tn, t.rpt, t.nit) == (32, 20, 5) and t.njb >= 2
    with pytest.raises(ValueError):
        M.ReplayTile("fp8", 8, 64, 128, 2, 16, 17, 3)      # 3 does not divide H/G = 4
    with pytest.raises(ValueError):
        M.ReplayTile("fp8", 8, 64, 128, 2, 16, 16, 1)      # ring too small
    with pytest.raises(ValueError):
        M.Mamba2ReplayDecode("nvfp4/fp4", "bfloat16", "float32", 8, 64, 128, 2, 16, 17, True,
                             True, True, True, 1)


def _simt_emulation(monkeypatch, mod):
    """Swaps the DSL names the warp helpers of kernel module ``mod`` use for a SIMT emulation:
    a value is one numpy array over the lanes, shuffles index that axis, selects are ``np.where``,
    ``Int32`` / ``Float32`` make int64 / float64 arrays."""
    import numpy as np

    class _Arch:
        @staticmethod
        def shuffle_sync_bfly(v, offset):
            return v[np.arange(v.shape[0]) ^ offset]

        @staticmethod
        def shuffle_sync(v, src):
            return v[np.broadcast_to(np.asarray(src), v.shape)]

    class _Cute:
        arch = _Arch

    class _Lp:
        @staticmethod
        def sel_f32(c, a, b):
            return np.where(c, a, b)

    class _Cutlass:
        max = staticmethod(np.maximum)
        min = staticmethod(np.minimum)

    monkeypatch.setattr(mod, "cute", _Cute)
    monkeypatch.setattr(mod, "lp", _Lp)
    monkeypatch.setattr(mod, "cutlass", _Cutlass)
    monkeypatch.setattr(mod, "_sel_i32", lambda c, a, b: np.where(c, a, b))
    monkeypatch.setattr(mod, "Int32", lambda v: np.asarray(v, dtype=np.int64))
    monkeypatch.setattr(mod, "Float32", lambda v: np.asarray(v, dtype=np.float64))


def test_rows_reduce_writers_emulated(monkeypatch):
    """The non-flush transposed row reduction (``_rows_reduce``) and the per-lane store mapping
    (``_rows_lane_row``, as the kernel's ``_nonflush`` uses them) on a SIMT emulation (one numpy
    array over the 128 threads per value) for every supported read format, P and N: every output
    row p < P is stored by exactly one lane, and that lane holds the full sum of row p over the TN
    lanes of its row group (odd splits at inner levels pad an entry whose plain index can name a
    real row held by another lane: P=80 fp8 / fp16 / fp32 used to store a 0 there too)."""
    import numpy as np

    _simt_emulation(monkeypatch, M)
    rng = np.random.default_rng(0)
    nt = 128
    tid = np.arange(nt)
    seen_cfgs = set()
    for fmt in ("fp32", "fp16", "bf16", "fp8", "nvfp4"):
        for N in (64, 128, 256):
            for P in (32, 48, 64, 80, 96, 128):
                t = M.ReplayTile(fmt, 8, P, N, 2, 16, 17, 1)
                TN, RPT, RPP = t.tn, t.rpt, t.rpp
                seen_cfgs.add((TN, RPT))
                lir, rp = tid % TN, tid // TN
                # integer-valued partials: the butterfly sums are exact in float64
                vals = [rng.integers(-1000, 1000, nt).astype(np.float64) for _ in range(RPT)]
                tot, row_r = M._rows_reduce(vals, TN, lir)
                myrow, mywr = M._rows_lane_row(RPT, TN, lir)
                tot, row_r, myrow, mywr = (np.broadcast_to(a, (nt,)) for a in (tot, row_r, myrow,
                                                                              mywr))
                assert (row_r == myrow).all(), (fmt, N, P)
                store = mywr & (myrow < RPT) & (rp + RPP * myrow < P)     # the kernel's my_store
                writers = {}
                for ln in np.nonzero(store)[0]:
                    r = int(myrow[ln])
                    g = (ln // TN) * TN
                    want = vals[r][g:g + TN].sum()
                    assert tot[ln] == want, (fmt, N, P, TN, RPT, int(ln), r, tot[ln], want)
                    writers.setdefault(int(rp[ln] + RPP * r), []).append(int(ln))
                assert sorted(writers) == list(range(P)), (fmt, N, P)
                multi = {p: w for p, w in writers.items() if len(w) > 1}
                assert not multi, (fmt, N, P, multi)
    assert {(8, 5), (16, 10), (32, 20)} <= seen_cfgs          # the P=80 cases of the bug report
    # power-of-two row counts (P = 32 / 64 / 128) keep the plain index (unchanged code)
    for tn in (1, 2, 4, 8, 16, 32):
        n = 1
        while n <= tn:
            assert not M._rows_pad_aliases(n, tn)
            n *= 2
    assert M._rows_pad_aliases(5, 8) and not M._rows_pad_aliases(3, 4)


def test_profiling_build(monkeypatch):
    """``REPLAYSSM_M2_PROF=1`` (tests/gpu_scripts/prof_mamba2_replay.py) stamps %clock64 at the 8
    phase boundaries and %globaltimer at start and end; the default build has no timer at all."""
    k, ptx = M.compile_only("nvfp4/fp16sr", heads_per_cta=4, **SMALL)
    assert "%clock64" not in ptx and "%globaltimer" not in ptx
    monkeypatch.setenv("REPLAYSSM_M2_PROF", "1")
    k, ptx = M.compile_only("nvfp4/fp16sr", heads_per_cta=4, **SMALL)
    assert ptx.count("%clock64") == 8 and ptx.count("%globaltimer") == 2 and "%smid" in ptx


def test_minblocks_override_is_in_the_compile_key(monkeypatch):
    """``REPLAYSSM_M2_MINBLOCKS`` (tuning runs) changes the build, so it changes the cache key."""
    args = ("nvfp4/fp16sr", "bfloat16", "float32", 8, 64, 128, 2, 16, 17, True, False, True,
            True, 4, True)
    monkeypatch.delenv("REPLAYSSM_M2_MINBLOCKS", raising=False)
    k0 = M._resolve(*args)[1]
    monkeypatch.setenv("REPLAYSSM_M2_MINBLOCKS", "3")
    k3 = M._resolve(*args)[1]
    assert k0 != k3 and "REPLAYSSM_M2_MINBLOCKS" in M._ENV_NAMES


def test_order_cursors_variant(monkeypatch):
    """REPLAYSSM_M2_ORDER_CURSORS (default on; 0 off): the decode kernel in flush-first order
    takes the row's cursors from the [5, n] order entry -- no live cursor loads, no fence before
    its arrive; without the flush-first order the switch does nothing."""
    monkeypatch.delenv(M.ORDER_CURSORS_ENV, raising=False)
    H, N, G = SMALL["H"], SMALL["N"], SMALL["G"]
    args = ("nvfp4/fp16sr", "bfloat16", "float32", H, 64, N, G, 16, 17, True, True, True, True, 4,
            True)
    kw, key = M._resolve(*args, row_order=True)
    assert kw["order_cursors"] is True
    assert M._resolve(*args)[0]["order_cursors"] is False
    monkeypatch.setenv(M.ORDER_CURSORS_ENV, "0")
    assert M._resolve(*args, row_order=True)[1] != key
    assert M._resolve(*args, row_order=True)[0]["order_cursors"] is False
    monkeypatch.delenv(M.ORDER_CURSORS_ENV)
    import re
    with common.dump_ptx() as d:
        k = M.compile_mamba2_replay(*args[:9], True, True, True, True, 4, True, dump=d,
                                    row_order=True)
        ptx = d.read()
    assert k.meta["op"].order_cursors
    i = ptx.index("atom.global.add")
    assert not re.findall(r"\bfence\.|\bmembar\.", ptx[:i])
    assert M.ORDER_CURSORS_ENV in M._ENV_NAMES


SPLIT_ARGS = ("nvfp4/fp16sr", "bfloat16", "float32", SMALL["H"], 64, SMALL["N"], SMALL["G"], 16,
              17, True, True, True, True, 4, True)


def _clear_split_env(monkeypatch):
    for name in (M.SPLIT_ENV, M.SPLIT_MINB1_ENV, M.SPLIT_MINB2_ENV, M.SPLIT_HPC2_ENV,
                 M.SPLIT_FPOS_ENV, M.ORDER_CURSORS_ENV, "REPLAYSSM_M2_MINBLOCKS",
                 "REPLAYSSM_M2_ORDER", "REPLAYSSM_M2_PROF", M.SPLIT_NFCAP_ENV):
        monkeypatch.delenv(name, raising=False)
        assert name in M._ENV_NAMES


def test_split_variant(monkeypatch):
    """The decode's split launch (REPLAYSSM_M2_SPLIT; compile keys ``rows`` /
    ``flush_positions``): the non-flush half (rows = 1) is built without the flush code or
    buffers (less shared memory, SPLIT_NONFLUSH_MINB CTAs/SM), the flush half (rows = 2) without
    the read set (no staging, no tensor-core read dots) over a persistent grid that walks
    positions in a loop; both take the order's cursors and no programmatic launch edges."""
    _clear_split_env(monkeypatch)
    kw0, key0 = M._resolve(*SPLIT_ARGS, row_order=True)
    kw1, key1 = M._resolve(*SPLIT_ARGS, row_order=True, rows=1)
    kw2, key2 = M._resolve(*SPLIT_ARGS, row_order=True, rows=2, flush_positions=8)
    assert len({key0, key1, key2}) == 3
    assert kw1["rows"] == 1 and kw1["order_cursors"] and kw1["pdl"] == 0
    assert kw2["rows"] == 2 and kw2["flush_positions"] == 8 and kw2["pdl"] == 0
    monkeypatch.setenv(M.ORDER_CURSORS_ENV, "0")       # the split needs the order's cursors
    assert M._resolve(*SPLIT_ARGS, row_order=True, rows=1)[0]["order_cursors"]
    monkeypatch.setenv(M.SPLIT_MINB1_ENV, "5")          # a tuning override: in the key
    assert M._resolve(*SPLIT_ARGS, row_order=True, rows=1)[1] != key1
    _clear_split_env(monkeypatch)
    op0, op1, op2 = (M.Mamba2ReplayDecode(**kw) for kw in (kw0, kw1, kw2))
    assert op1.smem_bytes() < op0.smem_bytes() and op1.snf and op1.mma and not op1.mma_fold
    assert op1.min_blocks_per_mp == min(M.SPLIT_NONFLUSH_MINB["nvfp4"], op1._smem_ctas() or 8)
    assert not (op2.snf or op2.mma or op2.prefetch or op2.early)
    # the flush half's hint: SPLIT_FLUSH_MINB by (read, checkpoint) format, else the shared one's
    assert op2.min_blocks_per_mp == min(M.SPLIT_FLUSH_MINB[("nvfp4", "fp16")],
                                        op2._smem_ctas() or 8)
    for pair in ("nvfp4/fp8sr", "fp32"):
        kws = [M._resolve(pair, *SPLIT_ARGS[1:], row_order=True, **k)[0]
               for k in ({}, dict(rows=2, flush_positions=8))]
        s0, s2 = (M.Mamba2ReplayDecode(**k) for k in kws)
        assert s2.min_blocks_per_mp == (s0.min_blocks_per_mp if pair == "nvfp4/fp8sr" else
                                        min(M.SPLIT_FLUSH_MINB[("fp32", "fp32")],
                                            s2._smem_ctas() or 8)), pair
    assert op2.persistent and not (op0.persistent or op1.persistent)
    fp8 = M.Mamba2ReplayDecode(**M._resolve("fp8/fp32", *SPLIT_ARGS[1:], row_order=True,
                                            rows=1)[0])
    assert not fp8.prefetch            # (spill-free at 7 CTAs/SM)
    # the verify kernel (a subclass) keeps its own split halves: one CTA per row and head group
    from cute_kernels import mamba2_verify as MV
    vkw, _ = MV._resolve("nvfp4/fp16sr", *SPLIT_ARGS[1:8], 24, 8, *SPLIT_ARGS[9:15],
                         rows=2, row_order=True, order_cursors=True)
    v2 = MV.Mamba2VerifyKernel(**vkw)
    assert v2.rows == 2 and not v2.persistent and v2._grid_positions(37) == 37
    with pytest.raises(ValueError, match="rows"):
        M.Mamba2ReplayDecode(**dict(kw1, rows=3))
    with pytest.raises(ValueError, match="order"):
        M.Mamba2ReplayDecode(**dict(kw1, row_order=False))
    with pytest.raises(ValueError, match="flush_positions"):
        M.Mamba2ReplayDecode(**dict(kw2, flush_positions=0))
    ptx = {}
    for rows, fpos in ((1, 0), (2, 8)):
        with common.dump_ptx() as d:
            M.compile_mamba2_replay(*SPLIT_ARGS, dump=d, row_order=True, rows=rows,
                                    flush_positions=fpos)
            ptx[rows] = d.read()
            d.cleanup()
    # non-flush half: the tensor-core read dots, no encoder (one div.rn: the output's gate)
    assert "mma.sync" in ptx[1] and ptx[1].count("div.rn.f32") <= 1 and "nctaid.y" not in ptx[1]
    # flush half: the encoders, no read dots, the persistent loop over grid positions
    assert "mma.sync" not in ptx[2] and ptx[2].count("div.rn.f32") >= 16 and "nctaid.y" in ptx[2]
    for p in ptx.values():
        assert "griddepcontrol" not in p and "atom.global.add" in p


def _launch_compile_kwarg(monkeypatch, name, pair="fp32"):
    """``f(batch, heads_per_cta=None)``: the ``name`` keyword make_launch passes to the compile
    of a single launch (the compile replaced by a stub that records it; a Nemotron-3-Super
    ``pair`` cache at L16, no GPU)."""
    import torch

    from replayssm_lp.pairs import parse_pair
    seen = []

    def compile_stub(*a, **k):
        seen.append(k.get(name))
        raise RuntimeError("stop")
    monkeypatch.setattr(M, "compile_mamba2_replay", compile_stub)

    class _C:
        philox_rounds = 10
        buffer_len, ring = 16, 17
        nheads, headdim, dstate, ngroups = 128, 64, 128, 8
        row_order = torch.zeros(2, 1024, dtype=torch.int32)
    _C.pair = parse_pair(pair)

    def kwarg(batch, hpc=None):
        x = torch.empty(batch, 128, 64, device="meta")
        dt = torch.empty(batch, 128, device="meta")
        B = torch.empty(batch, 8, 128, device="meta")
        with pytest.raises(RuntimeError, match="stop"):
            M.make_launch(_C, x, dt, B, None, None, None, True, None, heads_per_cta=hpc)
        return seen[-1]
    return kwarg


def test_make_launch_threads_switch(monkeypatch):
    """REPLAYSSM_M2_THREADS reaches the launches without the row order only (below its 32 rows;
    the ordered and split builds stay at 128 threads); unset: 128 everywhere."""
    _clear_split_env(monkeypatch)
    threads = _launch_compile_kwarg(monkeypatch, "num_threads")

    monkeypatch.delenv(M.THREADS_ENV, raising=False)
    assert threads(1) == 128 and threads(200) == 128
    monkeypatch.setenv(M.THREADS_ENV, "256")
    assert threads(1) == 256 and threads(4) == 256
    assert threads(100) == 128                                # ordered, one launch
    assert threads(31) is None           # the small-batch split's builds: their default (128)
    assert M.THREADS_ENV in M._ENV_NAMES


def test_make_launch_takes_the_split(monkeypatch):
    """make_launch's dispatch (no GPU: the split's launcher is replaced by a marker): the split
    for nvfp4 / fp8 read copies from SPLIT_MIN_BATCH rows, forced by REPLAYSSM_M2_SPLIT; never
    where the caller asks for an occupancy, below the order's batch or for the fp32 pair unless
    forced."""
    import torch

    from replayssm_lp.pairs import parse_pair
    _clear_split_env(monkeypatch)
    monkeypatch.setattr(M, "_split_launch", lambda *a, **k: "split")
    monkeypatch.setattr(M, "compile_mamba2_replay", lambda *a, **k: (_ for _ in ()).throw(
        RuntimeError("single launch")))

    def cache(pair, L=16):
        class _C:
            philox_rounds = 10
            buffer_len, ring = L, L + 1
            nheads, headdim, dstate, ngroups = 128, 64, 128, 8     # (use_pf_early)
            row_order = torch.zeros(2, 1024, dtype=torch.int32)
        _C.pair = parse_pair(pair)
        return _C

    def launch(pair, batch, L=16, **kw):
        x = torch.empty(batch, 128, 64, device="meta")
        dt = torch.empty(batch, 128, device="meta")
        B = torch.empty(batch, 8, 128, device="meta")
        return M.make_launch(cache(pair, L), x, dt, B, None, None, None, True, None, **kw)

    assert launch("nvfp4/fp16sr", 256) == "split" and launch("fp8/fp32", M.SPLIT_MIN_BATCH)
    assert M.SPLIT_MIN_BATCH >= M.ROW_ORDER_MIN_BATCH
    # the fp32 / 16-bit read copies from SPLIT_WIDE_MIN_L entries and SPLIT_WIDE_MIN_BATCH rows
    assert M.SPLIT_WIDE_MIN_BATCH == {"fp32": 256, "bf16": 128, "fp16": 128}
    assert M.SPLIT_WIDE_MIN_L == {"fp32": 32, "bf16": 32, "fp16": 32}
    for pair in ("fp32", "bf16/fp32", "fp16/fp32"):
        fmt = parse_pair(pair).read_fmt
        start, min_l = M.SPLIT_WIDE_MIN_BATCH[fmt], M.SPLIT_WIDE_MIN_L[fmt]
        if pair == "fp32":              # 16 heads a group (Super): from L16
            assert M.SPLIT_FP32_L16_HEADS == 8
            min_l = 16
        assert launch(pair, start, L=min_l) == "split"
        for batch, L in ((start - 1, min_l), (512, min_l - 1)):
            with pytest.raises(RuntimeError, match="single launch"):
                launch(pair, batch, L=L)
        assert start >= M.ROW_ORDER_MIN_BATCH
    for pair, batch, kw in (("nvfp4/fp16sr", 256, dict(min_blocks_per_mp=5)),
                            ("nvfp4/fp16sr", M.SPLIT_MIN_BATCH - 1, dict(L=32)),
                            ("fp32", 512, dict(L=8)), ("bf16/fp32", 512, {}),
                            ("fp16/fp32", 512, {})):
        with pytest.raises(RuntimeError, match="single launch"):
            launch(pair, batch, **kw)
    nano = cache("fp32")                # 12 heads a group (Nano-4B): fp32 from L32
    nano.nheads = 96
    assert not M.use_split(nano, 512) and M.use_split(cache("fp32", L=32), 256)
    nano.buffer_len, nano.ring = 32, 33
    assert M.use_split(nano, 256)
    monkeypatch.setenv("REPLAYSSM_M2_ORDER", "1")      # the split's own threshold, order or not
    with pytest.raises(RuntimeError, match="single launch"):
        launch("nvfp4/fp16sr", M.SPLIT_MIN_BATCH - 1, L=32)
    monkeypatch.delenv("REPLAYSSM_M2_ORDER")
    # below the order's batch: order + split at the (buffer length, rows) of SPLIT_SMALL_RULE,
    # every read copy; fewer rows, longer buffers, an explicit occupancy, switches off: not
    assert M.SPLIT_SMALL_RULE == ((8, 8), (16, 16))
    for pair in ("fp32", "nvfp4/fp16sr", "bf16/fp32"):
        for batch, L in ((8, 8), (31, 8), (16, 16), (48, 16), (M.SPLIT_SMALL_BELOW - 1, 16)):
            assert launch(pair, batch, L=L) == "split", (pair, batch, L)
        for batch, L in ((4, 8), (8, 16), (16, 17), (16, 32)):
            with pytest.raises(RuntimeError, match="single launch"):
                launch(pair, batch, L=L)
    with pytest.raises(RuntimeError, match="single launch"):
        launch("fp32", 16, min_blocks_per_mp=4)
    for pair in ("fp32", "bf16/fp32"):                 # from SPLIT_SMALL_BELOW: the wide rule's
        with pytest.raises(RuntimeError, match="single launch"):
            launch(pair, M.SPLIT_SMALL_BELOW, L=8)
    for env in ("REPLAYSSM_M2_ORDER", M.SPLIT_ENV):
        monkeypatch.setenv(env, "0")
        with pytest.raises(RuntimeError, match="single launch"):
            launch("fp32", 16)
        monkeypatch.setenv(env, "1")                 # forced on: the rule's sizes still split
        assert launch("fp32", 16) == "split"
        monkeypatch.delenv(env)
    monkeypatch.setenv(M.SPLIT_ENV, "1")
    assert launch("fp32", 256) == "split"
    monkeypatch.setenv("REPLAYSSM_M2_ORDER", "0")       # no order, no split
    with pytest.raises(RuntimeError, match="single launch"):
        launch("fp32", 256)
    monkeypatch.setenv(M.SPLIT_ENV, "0")
    monkeypatch.delenv("REPLAYSSM_M2_ORDER")
    with pytest.raises(RuntimeError, match="single launch"):
        launch("nvfp4/fp16sr", 256)


def test_split_heads_per_cta(monkeypatch):
    """The split's heads per CTA: the non-flush half at SPLIT_NONFLUSH_HEADS from its read copy's
    batch where H / G allows (else choose_heads_per_cta), the flush half at choose_heads_per_cta
    or REPLAYSSM_M2_SPLIT_HPC2; an explicit heads_per_cta sets both (no GPU: the launcher stops
    at the first compile / the flush half's width)."""
    import torch

    from replayssm_lp.pairs import parse_pair
    _clear_split_env(monkeypatch)
    monkeypatch.delenv("REPLAYSSM_M2_HEADS_PER_CTA", raising=False)
    assert M.SPLIT_NONFLUSH_HEADS == (8, 6) and M.choose_heads_per_cta(512, 128, 8) == 4
    n8 = 8
    for fmt, start in (("nvfp4", 64), ("fp8", 256), ("fp32", 128), ("bf16", 128)):
        assert M.SPLIT_NONFLUSH_HEADS_FROM.get(fmt, M.SPLIT_NONFLUSH_HEADS_FROM_OTHER) == start
        assert M.split_nonflush_heads(fmt, start, 128, 8) == n8            # 16 heads per group
        assert M.split_nonflush_heads(fmt, start - 1, 128, 8) == M.choose_heads_per_cta(
            start - 1, 128, 8)
        assert M.split_nonflush_heads(fmt, start, 96, 8) == 6               # Nano-4B: 12 per group
        assert M.split_nonflush_heads(fmt, 512, 32, 8) == 4                 # 4 per group: neither
        assert M.split_nonflush_heads(fmt, 512, 64, 8) == 8
    monkeypatch.setenv("REPLAYSSM_M2_HEADS_PER_CTA", "2")                  # the override wins
    assert M.split_nonflush_heads("nvfp4", 512, 128, 8) == 2
    monkeypatch.delenv("REPLAYSSM_M2_HEADS_PER_CTA")

    class _Stop(Exception):
        pass

    def first_compile(*a, **k):
        raise _Stop("nonflush", a[13], k["rows"])

    def flush_width(base, hpc2, *a, **k):
        raise _Stop("flush", hpc2)

    class _C:
        philox_rounds = 10
        buffer_len, ring = 16, 17
        pair = parse_pair("fp8/fp32")

    def halves(batch, heads_per_cta=None, P=64, N=128):
        x = torch.empty(batch, 128, P, device="meta")
        B = torch.empty(batch, 8, N, device="meta")
        got = []
        for stub in ("nonflush", "flush"):
            monkeypatch.setattr(M, "compile_mamba2_replay", first_compile if stub == "nonflush"
                                else (lambda *a, **k: None))
            monkeypatch.setattr(M, "split_flush_positions", flush_width)
            with pytest.raises(_Stop) as e:
                M._split_launch(_C, x, x[:, :, 0], B, None, None, None, True, None,
                                heads_per_cta, None, None, None, None)
            got.append(e.value.args[1])
        return tuple(got)

    assert halves(512) == (n8, 4) and halves(128) == (4, 4) and halves(32) == (2, 2)
    assert halves(512, heads_per_cta=2) == (2, 2)
    monkeypatch.setenv(M.SPLIT_HPC2_ENV, "1")
    assert halves(512) == (n8, 1) and halves(512, heads_per_cta=2) == (2, 1)
    monkeypatch.delenv(M.SPLIT_HPC2_ENV)
    # a staged nvfp4 read set of 8 heads that would not fit an SM's shared memory: 4 heads
    _C.pair, _C.buffer_len, _C.ring = parse_pair("nvfp4/fp16sr"), 64, 65
    assert halves(512, P=128, N=256) == (4, 4)
    _C.buffer_len, _C.ring = 16, 17
    assert halves(512, P=128, N=256) == (n8, 4)


def test_split_nonflush_cap(monkeypatch):
    """The split's non-flush half leaves an SM's room for a flush CTA below SPLIT_NFCAP_BELOW
    rows at L16 (SPLIT_NFCAP_L): Nemotron-3-Super's 8-head nvfp4 read set without z (55.7 KB,
    4 CTAs / SM) is padded to 3 CTAs (the flush CTA then fits: 52.7 KB for nvfp4/fp16sr,
    rolled); with z (57.7 KB: 3 CTAs already) nothing; Nano-4B nvfp4/fp32 neither (its 168-register flush CTA would not fit beside 3 by registers); never
    from 256 rows nor at L8 / L32 unless REPLAYSSM_M2_SPLIT_NFCAP=1, never with =0."""
    import torch

    monkeypatch.delenv(M.SPLIT_NFCAP_ENV, raising=False)
    monkeypatch.delenv(M.PAIR_ROLL_ENV, raising=False)
    impl = dict(flush_impl=None, nonflush_mma=None, staged=None, row_order=True)

    def cap(pair, batch, has_z=False, H=128, P=64, hpc1=8, L=16):
        base = (pair, torch.bfloat16, torch.float32, H, P, 128, 8, L, L + 1, True, has_z, True,
                True)
        return M.split_nonflush_cap(base, hpc1, 4, True, None, impl, batch)

    assert M.SPLIT_NFCAP_BELOW == 256 and M.SPLIT_NFCAP_L == (16,)
    assert cap("nvfp4/fp16sr", 64, L=8) == 0 and cap("nvfp4/fp16sr", 64, L=32) == 0
    for pair in ("nvfp4/fp16sr", "nvfp4/fp8sr", "nvfp4/fp32"):
        assert cap(pair, 64) == 3 and cap(pair, 255) == 3, pair
        assert cap(pair, 64, has_z=True) == 0 and cap(pair, 256) == 0, pair
    assert cap("nvfp4/fp16sr", 64, H=96, P=80, hpc1=6) == 3
    assert cap("nvfp4/fp32", 64, H=96, P=80, hpc1=6) == 0
    assert cap("fp8/fp16sr", 64, hpc1=4) == 0 and cap("fp32", 64, hpc1=4) == 0
    monkeypatch.setenv(M.SPLIT_NFCAP_ENV, "1")
    assert cap("nvfp4/fp16sr", 512) == 3 and cap("nvfp4/fp16sr", 64, L=32) == 2  # 3 -> 2
    assert cap("nvfp4/fp16sr", 64, L=8) == 0           # 4 CTAs + a 37 KB flush CTA fit
    assert cap("nvfp4/fp32", 64, L=8) == 3             # ... its 41 KB one does not
    monkeypatch.setenv(M.PAIR_ROLL_ENV, "1")
    assert cap("nvfp4/fp16sr", 64, L=8) == 3           # ... nor a rolled 45 KB one (+8 KB sS)
    monkeypatch.delenv(M.PAIR_ROLL_ENV)
    monkeypatch.setenv(M.SPLIT_NFCAP_ENV, "0")
    assert cap("nvfp4/fp16sr", 64) == 0
    # the padded build: 3 CTAs fit, 4 do not; its occupancy hint stays the unpadded build's 4
    base = ("nvfp4/fp16sr", torch.bfloat16, torch.float32, 128, 64, 128, 8, 16, 17, True, False,
            True, True)
    nf = M._split_half(base, 8, True, None, impl, 1, 3)
    assert nf.smem_bytes(padded=False) == 55664 and nf._smem_ctas(padded=False) == 4
    assert nf._smem_ctas() == 3 and nf.min_blocks_per_mp == 4
    assert 3 * (nf.smem_bytes() + 1024) + 52720 + 1024 <= M.SMEM_PER_SM   # the rolled flush CTA
    assert M._split_half(base, 4, True, None, impl, 2).smem_bytes() == 52720


def test_decode_folds_p80_l32_in_one_round():
    """The fold stages up to 32 KiB at once (decode and verify): Nano-4B's P = 80 at L = 32 needs
    26 KiB and a T = 8 draft ring at L = 32 (32 entries, P80) 26 KiB, so both keep the
    single-pass flush (flush_impl 2; at two rounds they fell back to the two-pass one: 1.6x slower
    at b512 nvfp4/fp16sr, session 21 call 7; the verify 1.9-2.7x, session 22 call 1). Shapes
    within 24 KiB are unchanged; past 32 KiB (L = 48 at P80) the fold still takes two rounds."""
    import torch

    from cute_kernels import mamba2_verify as MV
    assert M._FOLD_SMEM_BYTES == 32 * 1024
    assert MV._verify_fold_smem() == 32 * 1024 and MV.FOLD_SMEM_ENV in MV._ENV_NAMES
    for P, L, R, njb in ((80, 32, 33, 1), (64, 32, 33, 1), (80, 16, 17, 1), (80, 48, 49, 2),
                         (64, 32, 40, 1), (80, 32, 40, 1), (80, 16, 24, 1)):  # R 40 / 24: T = 8
        kw, _ = M._resolve("nvfp4/fp16sr", torch.bfloat16, torch.float32, 96, P, 128, 8, L, R,
                           True, False, True, True, 4, True, row_order=True)
        op = M.Mamba2ReplayDecode(**kw)
        assert op.cfg.njb == njb, (P, L, R)
        assert op.flush_impl == (2 if njb == 1 else 1), (P, L, R)
    assert M.ReplayTile("fp32", 96, 80, 128, 8, 32, 33, 4, fold_smem=24 * 1024).njb == 2
    # every swept layer and buffer length takes the single-pass flush (shared / split builds)
    from bench import traffic
    for shape, d in traffic.SHAPES.items():
        if d["kind"] != "mamba2":
            continue
        for L in (8, 16, 32):
            for pair in ("fp32", "nvfp4/fp16sr", "fp8/fp32", "bf16/fp32", "nvfp4/fp8sr"):
                for rows in (0, 2):
                    kw, _ = M._resolve(pair, torch.bfloat16, torch.float32, d["H"], d["P"],
                                       d["N"], d["G"], L, L + 1, True, False, True, True, 4,
                                       True, row_order=True, rows=rows, flush_positions=20)
                    assert M.Mamba2ReplayDecode(**kw).flush_impl == 2, (shape, L, pair, rows)


def _per_env(monkeypatch, name, values, build):
    """``{v: build()}`` with the environment variable ``name`` unset (v None) or set to v."""
    got = {}
    for v in values:
        if v is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, v)
        got[v] = build()
    return got


def test_verify_fold_round_switch(monkeypatch):
    """REPLAYSSM_M2V_FOLD_SMEM (KiB) sets the verify's fold staging round (default 32; at 16 the
    L32 T8 ring's max(L, T) = 32 fold entries take two rounds, the two-pass flush) and is part of
    its compile key."""
    import torch

    from cute_kernels import mamba2_verify as MV
    args = ("fp32", torch.bfloat16, torch.float32, 128, 64, 128, 8, 32, 40, 8, True, False,
            True, True, 4, True)

    def build():
        kw, key = MV._resolve(*args)
        op = MV.Mamba2VerifyKernel(**kw)
        return op.cfg.njb, op.flush_impl, key
    got = _per_env(monkeypatch, MV.FOLD_SMEM_ENV, (None, "16"), build)
    assert got[None][:2] == (1, 2) and got["16"][:2] == (2, 1)
    assert got[None][2] != got["16"][2]


def test_decode_fold_round_switch(monkeypatch):
    """REPLAYSSM_M2_FOLD_SMEM (KiB; A-B runs) sets the decode's fold staging round (default 32;
    at 16 a T = 8 draft ring at L = 32 folds in two rounds) and is part of its compile key."""
    import torch

    args = ("nvfp4/fp16sr", torch.bfloat16, torch.float32, 128, 64, 128, 8, 32, 40, True, False,
            True, True, 4, True)

    def build():
        kw, key = M._resolve(*args, row_order=True)
        op = M.Mamba2ReplayDecode(**kw)
        return op.cfg.njb, op.flush_impl, key
    got = _per_env(monkeypatch, M.FOLD_SMEM_ENV, (None, "16"), build)
    assert got[None][:2] == (1, 2) and got["16"][:2] == (2, 1)
    assert got[None][2] != got["16"][2] and M.FOLD_SMEM_ENV in M._ENV_NAMES


def test_fold_entries_max_is_the_most_a_cache_ring_can_hold(monkeypatch):
    """The fold is sized for max(L, D) entries on every cache ring R = max(L, D) + max(D, 1)
    (= R - 1 only for rings of L + 1); the verify's entry bound EM = min(R, max(L, D) + T).
    ``REPLAYSSM_M2_FOLD_ENTRIES=ring`` restores R - 1 (A-B runs) and is in both compile keys."""
    import torch

    from cute_kernels import mamba2_verify as MV
    from replayssm_lp import Mamba2ReplayCache
    monkeypatch.delenv(M.FOLD_ENTRIES_ENV, raising=False)
    for L in (1, 2, 4, 8, 16, 32, 64):
        for D in range(0, 17):
            R = Mamba2ReplayCache(1, 2, 4, 16, 1, buffer_len=L, max_draft=D).ring
            assert M.fold_entries_max(L, R) == max(L, D), (L, D, R)
            if D == 0:
                assert M.fold_entries_max(L, R) == R - 1
    args = ("fp32", torch.bfloat16, torch.float32, 128, 64, 128, 8, 16, 24, 8, True, False,
            True, True, 4, True)
    dargs = ("nvfp4/fp16sr", torch.bfloat16, torch.float32, 128, 64, 128, 8, 16, 24, True,
             False, True, True, 4, True)

    def build():
        kw, key = MV._resolve(*args)
        op = MV.Mamba2VerifyKernel(**kw)
        dkw, dkey = M._resolve(*dargs, row_order=True)
        return op.cfg.hm, op.EM, op.smem_bytes(), key, M.Mamba2ReplayDecode(**dkw).cfg.hm, dkey
    got = _per_env(monkeypatch, M.FOLD_ENTRIES_ENV, (None, "ring"), build)
    assert got[None][:2] == (16, 24) and got["ring"][:2] == (23, 24)
    assert got[None][2] < got["ring"][2]             # fold staging and coefficients shrink
    assert got[None][4] == 16 and got["ring"][4] == 23
    assert got[None][3] != got["ring"][3] and got[None][5] != got["ring"][5]
    assert M.FOLD_ENTRIES_ENV in M._ENV_NAMES and M.FOLD_ENTRIES_ENV in MV._ENV_NAMES
    monkeypatch.setenv(M.FOLD_ENTRIES_ENV, "all")
    with pytest.raises(ValueError, match="REPLAYSSM_M2_FOLD_ENTRIES"):
        M.fold_entries_max(16, 24)


@pytest.mark.parametrize("pair,P,k", [("fp32", 64, 2), ("fp32", 64, 4), ("fp8/fp32", 64, 4),
                                      ("bf16/fp32", 80, 5), ("fp16sr", 64, 4),
                                      ("fp8/fp16sr", 80, 5), ("fp8sr/fp32", 64, 2)])
def test_compile_row_split(pair, P, k):
    """The row split (each head's rows over k CTAs: virtual heads of P / k rows, views made in
    the host function) compiles for sm_90a; its SR pairs map the Philox counter back to the real
    head and element (a head index divided by k and a row-block offset appear in the PTX)."""
    kern, ptx = M.compile_only(pair, H=128 if P == 64 else 96, P=P, row_split=k, keep_ptx=True)
    assert ptx and ".local" not in ptx
    op = kern.meta["op"]
    assert (op.H, op.P, op.H_full, op.P_full) == ((128 if P == 64 else 96) * k, P // k,
                                                  128 if P == 64 else 96, P)
    assert op.cfg.ctas_per_row == op.H // op.hpc and op.cfg.full


def test_row_split_rules_and_errors(monkeypatch):
    from replayssm_lp.pairs import parse_pair
    with pytest.raises(ValueError, match="NVFP4"):
        M.check_row_split(parse_pair("nvfp4/fp16sr"), 64, 2)
    with pytest.raises(ValueError, match="multiple of 16"):
        M.check_row_split(parse_pair("fp32"), 64, 5)
    with pytest.raises(ValueError, match="one of"):
        M.check_row_split(parse_pair("fp32"), 64, 3)
    with pytest.raises(ValueError, match="row order"):
        M.Mamba2ReplayDecode("fp32", "bfloat16", "float32", 128, 64, 128, 8, 16, 17, True, False,
                             True, True, row_split=2, row_order=True)

    class _C:
        philox_rounds = 10
        headdim, buffer_len = 64, 16
        pair = parse_pair("fp32")
    monkeypatch.delenv(M.ROW_SPLIT_ENV, raising=False)
    # the default rule: k = 2 for 4-7 rows at L <= 8 (4-8 for fp32 read copies at any L)
    assert [M.row_split_for(_C, b, 128) for b in (1, 3, 4, 8, 9)] == [1, 1, 2, 2, 1]
    assert M.row_split_for(_C, 4, 256) == 1
    _C.pair = parse_pair("bf16/fp32")
    assert M.row_split_for(_C, 4, 128) == 1
    _C.buffer_len = 8
    assert [M.row_split_for(_C, b, 128) for b in (3, 4, 7, 8)] == [1, 2, 2, 1]
    _C.pair, _C.headdim = parse_pair("nvfp4/fp16sr"), 64
    assert M.row_split_for(_C, 4, 128) == 1
    _C.pair, _C.headdim = parse_pair("fp8/fp32"), 80          # P / 2 = 40: no split
    assert M.row_split_for(_C, 4, 128) == 1
    _C.pair, _C.headdim, _C.buffer_len = parse_pair("fp32"), 64, 16
    monkeypatch.setenv(M.ROW_SPLIT_ENV, "1")
    assert M.row_split_for(_C, 4, 128) == 1
    monkeypatch.setenv(M.ROW_SPLIT_ENV, "2")
    assert M.row_split_for(_C, 4, 128) == 2
    monkeypatch.setenv("REPLAYSSM_M2_PROF", "1")          # the profiling build: one CTA per head
    assert M.row_split_for(_C, 4, 128) == 1
    monkeypatch.delenv("REPLAYSSM_M2_PROF")
    with pytest.raises(ValueError, match="heads_per_cta=1"):
        M.Mamba2ReplayDecode("fp32", "bfloat16", "float32", 128, 64, 128, 8, 16, 17, True, False,
                             True, True, heads_per_cta=2, row_split=2)
    monkeypatch.setenv(M.ROW_SPLIT_ENV, "4")
    assert M.row_split_for(_C, 1, 128) == 4 and M.row_split_for(_C, 1, 256) == 1
    _C.pair = parse_pair("nvfp4/fp8sr")
    assert M.row_split_for(_C, 1, 128) == 1              # not applicable: the plain launch
    for bad in ("x", "3"):
        monkeypatch.setenv(M.ROW_SPLIT_ENV, bad)
        with pytest.raises(ValueError, match=M.ROW_SPLIT_ENV):
            M.row_split_for(_C, 1, 128)
    assert M.ROW_SPLIT_ENV in M._ENV_NAMES


def test_make_launch_row_split_dispatch(monkeypatch):
    """The launcher passes the default row split (k = 2 at 4 rows, fp32, L16) to the compile;
    1 with the row order, with several heads per CTA, or below 4 rows."""
    _clear_split_env(monkeypatch)
    monkeypatch.delenv(M.ROW_SPLIT_ENV, raising=False)
    monkeypatch.delenv(M.THREADS_ENV, raising=False)
    split = _launch_compile_kwarg(monkeypatch, "row_split")

    assert split(4) == 2 and split(8) == 2 and split(3) == 1 and split(100) == 1
    assert split(4, hpc=2) == 1


def test_make_launch_early_read_dispatch(monkeypatch):
    """16-bit read copies at <= EARLY_WIDE_ROWS rows (one CTA per head, no row order / split)
    compile with their first read set before the preamble; fp32 / fp8 / nvfp4 and larger
    launches keep the kernel's own rule (None); REPLAYSSM_M2_EARLY_READ forces either way."""
    _clear_split_env(monkeypatch)
    for name in (M.EARLY_READ_ENV, M.ROW_SPLIT_ENV, M.THREADS_ENV):
        monkeypatch.delenv(name, raising=False)
    for pair in ("bf16/fp32", "fp16sr", "fp16/fp32", "bf16sr"):
        early = _launch_compile_kwarg(monkeypatch, "early_read", pair)
        assert early(1) is True and early(M.EARLY_WIDE_ROWS) is True, pair
        assert early(M.EARLY_WIDE_ROWS + 1) is None and early(1, hpc=2) is None, pair
    for pair in ("fp32", "fp8/fp32", "nvfp4/fp16sr"):
        assert _launch_compile_kwarg(monkeypatch, "early_read", pair)(1) is None, pair
    monkeypatch.setenv(M.ROW_SPLIT_ENV, "2")                 # a row split at b1
    assert _launch_compile_kwarg(monkeypatch, "early_read", "bf16/fp32")(1) is None
    monkeypatch.delenv(M.ROW_SPLIT_ENV)
    monkeypatch.setenv("REPLAYSSM_M2_ORDER", "1")            # the row order at b1
    assert _launch_compile_kwarg(monkeypatch, "early_read", "bf16/fp32")(1) is None
    monkeypatch.delenv("REPLAYSSM_M2_ORDER")
    monkeypatch.setenv(M.EARLY_READ_ENV, "0")
    assert _launch_compile_kwarg(monkeypatch, "early_read", "bf16/fp32")(1) is False
    monkeypatch.setenv(M.EARLY_READ_ENV, "1")
    assert _launch_compile_kwarg(monkeypatch, "early_read", "fp32")(200) is True
    assert M.EARLY_READ_ENV in M._ENV_NAMES


def test_few_rows_hint_dispatch_and_builds(monkeypatch):
    """fp8 / nvfp4 read copies at <= EARLY_WIDE_ROWS rows (one CTA per head, no row order /
    split) compile with ``few_rows``: their one-head build takes EARLY_WIDE_MINB CTAs/SM (the
    default 6 / 5 would spill); other pairs, larger launches, several heads per CTA and the
    ordered build keep their hint; REPLAYSSM_M2_MINBLOCKS still overrides."""
    _clear_split_env(monkeypatch)
    for name in (M.ROW_SPLIT_ENV, M.THREADS_ENV, "REPLAYSSM_M2_MINBLOCKS"):
        monkeypatch.delenv(name, raising=False)
    kw, _ = M._resolve("fp8/fp32", "bfloat16", "float32", 128, 64, 128, 8, 16, 17, True, False,
                       True, True, 1, True, few_rows=True)      # (the compile's own kwargs)
    assert M.Mamba2ReplayDecode(**kw).min_blocks_per_mp == M.EARLY_WIDE_MINB
    for pair in ("fp8/fp32", "nvfp4/fp16sr", "fp8sr"):
        few = _launch_compile_kwarg(monkeypatch, "few_rows", pair)
        assert few(1) is True and few(M.EARLY_WIDE_ROWS) is True, pair
        assert few(M.EARLY_WIDE_ROWS + 1) is False and few(1, hpc=2) is False, pair
    for pair in ("fp32", "bf16/fp32"):
        assert _launch_compile_kwarg(monkeypatch, "few_rows", pair)(1) is False, pair
    monkeypatch.setenv("REPLAYSSM_M2_ORDER", "1")            # the row order at b1
    assert _launch_compile_kwarg(monkeypatch, "few_rows", "fp8/fp32")(1) is False
    monkeypatch.delenv("REPLAYSSM_M2_ORDER")
    kw = dict(act_dtype="bfloat16", dt_dtype="float32", nheads=128, headdim=64, dstate=128,
              ngroups=8, buffer_len=16, ring=17, has_D=True, has_z=False, has_dt_bias=True,
              dt_softplus=True)
    for pair in ("fp8/fp32", "nvfp4/fp16sr"):
        base = M.Mamba2ReplayDecode(pair, **kw).min_blocks_per_mp
        assert base > M.EARLY_WIDE_MINB, pair
        assert M.Mamba2ReplayDecode(pair, **kw, few_rows=True).min_blocks_per_mp == M.EARLY_WIDE_MINB
        assert M.Mamba2ReplayDecode(pair, **kw, few_rows=True,
                                    row_order=True).min_blocks_per_mp != M.EARLY_WIDE_MINB
        assert M.Mamba2ReplayDecode(pair, **kw, few_rows=True, heads_per_cta=2).min_blocks_per_mp \
            == M.Mamba2ReplayDecode(pair, **kw, heads_per_cta=2).min_blocks_per_mp
    fp8_split = dict(kw, pair="fp8/fp32", buffer_len=8, ring=9, row_split=2)
    assert not M.Mamba2ReplayDecode(**fp8_split, few_rows=True).few_rows
    assert M.Mamba2ReplayDecode("fp32", **kw, few_rows=True).min_blocks_per_mp == \
        M.Mamba2ReplayDecode("fp32", **kw).min_blocks_per_mp
    monkeypatch.setenv("REPLAYSSM_M2_MINBLOCKS", "6")
    assert M.Mamba2ReplayDecode("fp8/fp32", **kw, few_rows=True).min_blocks_per_mp == 6


def test_early_wide_read_builds_at_four_ctas_per_sm(monkeypatch):
    """The early 16-bit / fp32 read set (live through the preamble) takes the occupancy hint
    EARLY_WIDE_MINB (the default 7 CTAs/SM would cap it at 72 registers: spills); without it
    the build keeps 7; an nvfp4 build keeps its hint either way; a forced next-head prefetch
    (16-bit, 2 heads per CTA) keeps the default hint."""
    for name in ("REPLAYSSM_M2_MINBLOCKS", M.EARLY_READ_ENV, "REPLAYSSM_M2_PREFETCH",
                 M.RING_PHYS_ENV):
        monkeypatch.delenv(name, raising=False)
    kw = dict(pair="bf16/fp32", act_dtype="bfloat16", dt_dtype="float32", nheads=128, headdim=64,
              dstate=128, ngroups=8, buffer_len=16, ring=17, has_D=True, has_z=False,
              has_dt_bias=True, dt_softplus=True)
    assert M.Mamba2ReplayDecode(**kw, early_read=True).min_blocks_per_mp == M.EARLY_WIDE_MINB
    assert M.Mamba2ReplayDecode(**kw, early_read=True).early
    op = M.Mamba2ReplayDecode(**kw)
    assert op.min_blocks_per_mp == 7 and not op.early
    fp32 = dict(kw, pair="fp32")
    assert M.Mamba2ReplayDecode(**fp32, early_read=True).min_blocks_per_mp == M.EARLY_WIDE_MINB
    assert M.Mamba2ReplayDecode(**fp32).min_blocks_per_mp == 7
    pf = M.Mamba2ReplayDecode(**kw, heads_per_cta=2, prefetch=True)
    assert pf.early and pf.min_blocks_per_mp == M.Mamba2ReplayDecode(
        **kw, heads_per_cta=2).min_blocks_per_mp
    # the ring entries at their physical index follow the early-wide read of early_read_for
    # only: not the kernel's own early rule (a row split's 16-register 16-bit read set)
    assert M.Mamba2ReplayDecode(**kw, early_read=True).ring_phys and not op.ring_phys
    assert not M.Mamba2ReplayDecode(**fp32, early_read=True).ring_phys
    assert not pf.ring_phys
    # a row split's 16-bit build (the kernel's own early rule: a 16-register read set) keeps the
    # default hint 7 (session30_gpu/call3/rs: hint 4 1.00-1.10x slower at Super b4-b7 L8)
    rs = M.Mamba2ReplayDecode(**dict(kw, buffer_len=8, ring=9, row_split=2))
    assert rs.early and not rs.ring_phys and rs.min_blocks_per_mp == 7
    nv = M.Mamba2ReplayDecode(**dict(kw, pair="nvfp4/fp16sr"))
    assert nv.min_blocks_per_mp == M.Mamba2ReplayDecode(
        **dict(kw, pair="nvfp4/fp16sr"), early_read=True).min_blocks_per_mp


@pytest.mark.parametrize("pair,L,k", [("fp32", 16, 1), ("bf16/fp32", 16, 1), ("nvfp4/fp16sr", 8, 1),
                                      ("fp8/fp32", 4, 2), ("fp16sr", 8, 1)])
def test_compile_ring_phys(pair, L, k, monkeypatch):
    """REPLAYSSM_M2_RING_PHYS: the ring entries at their physical index before the cursors
    compile for sm_90a (row split included) without local memory; the ordered build, the
    split's flush half and rings past 32 entries keep the default path."""
    monkeypatch.setenv(M.RING_PHYS_ENV, "0")
    _, ptx0 = M.compile_only(pair, L=L, row_split=k, keep_ptx=True)
    monkeypatch.setenv(M.RING_PHYS_ENV, "1")
    kern, ptx = M.compile_only(pair, L=L, row_split=k, keep_ptx=True)
    assert ptx and ".local" not in ptx
    # the two shuffles per head that put the scan entries in logical order
    assert ptx.count("shfl.sync.idx") > ptx0.count("shfl.sync.idx")
    assert kern.meta["op"].ring_phys
    base = ("fp32", "bfloat16", "float32", 128, 64, 128, 8)
    tail = (True, False, True, True)
    assert not M.Mamba2ReplayDecode(*base, 16, 17, *tail, row_order=True).ring_phys
    assert not M.Mamba2ReplayDecode(*base, 32, 41, *tail).ring_phys            # 41 entries
    monkeypatch.setenv(M.RING_PHYS_ENV, "2")
    with pytest.raises(ValueError, match=M.RING_PHYS_ENV):
        M.Mamba2ReplayDecode(*base, 16, 17, *tail)
    assert M.RING_PHYS_ENV in M._ENV_NAMES


@pytest.mark.parametrize("pair,k", [("nvfp4/fp16sr", 1), ("fp8/fp32", 2)])
def test_compile_late_check(pair, k, monkeypatch):
    """REPLAYSSM_M2_LATE_CHECK=1: the decode's dependent arrive becomes an ``atom.inc`` (ptxas
    does not warp-aggregate it) and thread 0 stores an opaque zero before the first barrier and
    reads it back into the publish check (one shared store and load more), without local memory;
    the row-ordered build (the order carries the cursors) and the verify keep the plain arrive."""
    monkeypatch.setenv(M.LATE_CHECK_ENV, "0")
    k0, ptx0 = M.compile_only(pair, L=8, row_split=k, keep_ptx=True)
    monkeypatch.setenv(M.LATE_CHECK_ENV, "1")
    kern, ptx = M.compile_only(pair, L=8, row_split=k, keep_ptx=True)
    assert kern.meta["op"].late_arrive_check and not k0.meta["op"].late_arrive_check
    assert ".local" not in ptx
    assert "atom.relaxed.gpu.global.inc.u32" in ptx and "atom.relaxed.gpu.global.inc" not in ptx0
    for op in ("st.shared.b32", "ld.shared.b32"):
        n0 = len(re.findall(rf"^\s*(?:@!?%p\d+\s+)?{re.escape(op)}\b", ptx0, re.M))
        n1 = len(re.findall(rf"^\s*(?:@!?%p\d+\s+)?{re.escape(op)}\b", ptx, re.M))
        assert n1 == n0 + 1, (op, n0, n1)
    base = ("fp32", "bfloat16", "float32", 128, 64, 128, 8, 16, 17, True, False, True, True)
    assert not M.Mamba2ReplayDecode(*base, row_order=True, order_cursors=True).late_arrive_check
    assert M.LATE_CHECK_ENV in M._ENV_NAMES
    # unset: on for fp32 / nvfp4 read copies only (session34_gpu/call1/lc)
    monkeypatch.delenv(M.LATE_CHECK_ENV)
    for p, on in (("fp32", True), ("nvfp4/fp16sr", True), ("fp8/fp32", False), ("bf16/fp32", False)):
        assert M.Mamba2ReplayDecode(p, *base[1:]).late_arrive_check is on, p



def test_flush_encoder_switches_in_keys_and_launch_memo(monkeypatch):
    """REPLAYSSM_F16_SR_CHUNK (lowprec.pack_f16_sr) and REPLAYSSM_M2_E2M1 are read while tracing:
    they are in the decode / verify launch memos and change the compile keys."""
    from cute_kernels import gdn_replay as GR
    from cute_kernels import gdn_verify as GV
    from cute_kernels import lowprec as lp
    from cute_kernels import mamba2_verify as MV
    for names in (M._ENV_NAMES, MV._ENV_NAMES):
        assert lp.F16_SR_CHUNK_ENV in names and M.E2M1_ENV in names and M.FOLD_PAIR_ENV in names
        assert M.PAIR_ROLL_ENV in names
    assert lp.F16_SR_CHUNK_ENV in GR._ENV_NAMES and lp.F16_SR_CHUNK_ENV in GV._ENV_NAMES
    args = ("nvfp4/fp16sr", "bfloat16", "float32", 128, 64, 128, 8, 16, 17, True, False, True,
            True, 4, True)
    keys, vkeys = [], []
    envs = ({}, {lp.F16_SR_CHUNK_ENV: "0"}, {M.E2M1_ENV: "code"}, {M.FOLD_PAIR_ENV: "0"},
            {M.PAIR_ROLL_ENV: "1"})
    for env in envs:
        for name in set().union(*envs):
            monkeypatch.delenv(name, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        keys.append(M._resolve(*args)[1])
        vkeys.append(MV._resolve(*args[:9], 4, *args[9:15])[1])
    assert len(set(keys)) == len(set(vkeys)) == len(envs)


def test_fold_pair_rule(monkeypatch):
    """The pair fold: the v2 flush's CUDA-core fold takes a thread's chunks in pairs (an odd
    count's last alone); with nvfp4 targets and an even count, chunk NIT - 2's pass-1 targets
    are encoded in pass 2. Default (measured; REPLAYSSM_M2_FOLD_PAIR=0 / 1 forces): on but for
    the fp32 read copy outside a split's flush half and 16-bit read copies over an fp32
    checkpoint below 4 heads per CTA; in the verify not for fp8 / fp32 read copies. Never with
    the tensor-core fold, the profiling build, the v1 flush or in a split's non-flush half."""
    from cute_kernels import mamba2_verify as MV
    base = ("bfloat16", "float32", 128, 64, 128, 8, 16, 17, True, False, True, True, 4, True)
    split = dict(row_order=True, order_cursors=True)
    monkeypatch.delenv(M.FOLD_PAIR_ENV, raising=False)
    for pair in ("nvfp4/fp16sr", "nvfp4/fp8sr", "fp8/fp16sr", "fp16sr", "bf16/fp32"):
        op = M.Mamba2ReplayDecode(pair, *base)
        assert op.fold_pair and op.fold_pairs == 2, pair
        assert not M.Mamba2ReplayDecode(pair, *base, rows=1, **split).fold_pair, pair
    for pair, hpc, on in (("bf16/fp32", 1, False), ("fp16/fp32", 2, False), ("fp16sr", 1, True),
                          ("nvfp4/fp32", 1, True)):
        assert M.Mamba2ReplayDecode(pair, *base[:12], hpc, True).fold_pair is on, (pair, hpc)
    for pair, on in (("nvfp4/fp16sr", True), ("bf16/fp32", True), ("fp8/fp16sr", False),
                     ("fp32", False)):
        kw, _ = MV._resolve(pair, *base[:8], 8, *base[8:14])
        assert MV.Mamba2VerifyKernel(**kw).fold_pair is on, pair
    assert not M.Mamba2ReplayDecode("fp32", *base).fold_pair
    assert M.Mamba2ReplayDecode("fp32", *base, rows=2, flush_positions=4, **split).fold_pair
    monkeypatch.setenv(M.FOLD_PAIR_ENV, "0")
    assert not M.Mamba2ReplayDecode("nvfp4/fp16sr", *base).fold_pair
    assert not M.Mamba2ReplayDecode("fp32", *base, rows=2, flush_positions=4, **split).fold_pair
    monkeypatch.setenv(M.FOLD_PAIR_ENV, "1")
    assert M.Mamba2ReplayDecode("fp32", *base).fold_pair
    op = M.Mamba2ReplayDecode("nvfp4/fp16sr", *base)
    assert op.fold_pair and op.fold_pairs == 2 and op.pair_defer
    assert [t[0] for t in op.flush_p1] == ["fp16"] and [t[0] for t in op.flush_p2] == ["nvfp4"]
    op = M.Mamba2ReplayDecode("fp16sr", "bfloat16", "float32", 128, 80, 128, 8, 16, 17, True,
                              False, True, True, 4, True)
    assert op.cfg.nit == 5 and op.fold_pairs == 2 and op.flush_p1 and not op.flush_p2
    assert not op.pair_defer
    assert not M.Mamba2ReplayDecode("fp8/fp32", *base).fold_pair          # tensor-core fold
    assert not M.Mamba2ReplayDecode("nvfp4/fp16sr", *base, prof=True).fold_pair
    assert not M.Mamba2ReplayDecode("nvfp4/fp16sr", *base, flush_impl=1).fold_pair


def test_pair_roll_rule(monkeypatch):
    """The rolled pair encodes (REPLAYSSM_M2_PAIR_ROLL unset: the kernels' rule, measured at L16):
    on in a decode split's flush half and the verify's flush launch (T8) for nvfp4 read copies
    over an fp16 SR checkpoint only (not the shared kernels, not L8 / L32, not nvfp4/fp8sr, fp8 or
    16-bit read copies); every chunk then in sS, none deferred; =0 / =1 force it off / on
    wherever the pair fold is on. The rule's build is the env-forced one that was timed (the
    same PTX), and a build outside it is the =0 one."""
    from cute_kernels import mamba2_verify as MV
    base = ("bfloat16", "float32", 128, 64, 128, 8, 16, 17, True, False, True, True, 4, True)
    split = dict(row_order=True, order_cursors=True, rows=2, flush_positions=4)
    for name in (M.PAIR_ROLL_ENV, M.FOLD_PAIR_ENV):
        monkeypatch.delenv(name, raising=False)
    for pair, on in (("nvfp4/fp16sr", True), ("nvfp4/fp8sr", False), ("fp8/fp16sr", False),
                     ("fp16sr", False), ("nvfp4/fp32", False)):
        op = M.Mamba2ReplayDecode(pair, *base, **split)
        assert op.fold_pair and op.pair_roll is on, pair
        assert not M.Mamba2ReplayDecode(pair, *base).pair_roll, pair
    for L in (8, 32):
        lb = base[:6] + (L, L + 1) + base[8:]
        assert not M.Mamba2ReplayDecode("nvfp4/fp16sr", *lb, **split).pair_roll, L
    op = M.Mamba2ReplayDecode("nvfp4/fp16sr", *base, **split)
    assert not op.pair_defer and op._sS_chunks() == op.cfg.nit
    # (the verify's CUDA-core flush: at T8 nvfp4/fp16sr's flush launch takes the fragment flush)
    monkeypatch.setenv(MV.FRAG_SPLIT_ENV, "0")
    for pair, rows, on in (("nvfp4/fp16sr", 2, True), ("nvfp4/fp16sr", 0, False),
                           ("nvfp4/fp8sr", 2, False), ("fp8/fp16sr", 2, False)):
        kw, _ = MV._resolve(pair, *base[:8], 8, *base[8:14], rows=rows, row_order=rows > 0,
                            order_cursors=rows > 0)
        assert MV.Mamba2VerifyKernel(**kw).pair_roll is on, (pair, rows)
    kw, _ = MV._resolve("nvfp4/fp16sr", *base[:6], 8, 9, 8, *base[8:14], rows=2, row_order=True,
                        order_cursors=True)
    assert not MV.Mamba2VerifyKernel(**kw).pair_roll                     # L8: untimed
    kw, _ = MV._resolve("nvfp4/fp16sr", *base[:8], 4, *base[8:14], rows=2, row_order=True,
                        order_cursors=True)
    assert not MV.Mamba2VerifyKernel(**kw).pair_roll                     # T4: rolled loses
    kw, _ = MV._resolve("nvfp4/fp16sr", *base[:8], 12, *base[8:14], rows=2, row_order=True,
                        order_cursors=True)
    assert not MV.Mamba2VerifyKernel(**kw).pair_roll                     # T12: untimed
    monkeypatch.setenv(M.PAIR_ROLL_ENV, "0")
    assert not M.Mamba2ReplayDecode("nvfp4/fp16sr", *base, **split).pair_roll
    monkeypatch.setenv(M.PAIR_ROLL_ENV, "1")
    assert M.Mamba2ReplayDecode("nvfp4/fp8sr", *base).pair_roll
    monkeypatch.setenv(M.FOLD_PAIR_ENV, "0")
    assert not M.Mamba2ReplayDecode("nvfp4/fp16sr", *base, **split).pair_roll
    monkeypatch.delenv(M.FOLD_PAIR_ENV)

    def ptx(pair, roll):
        if roll is None:
            monkeypatch.delenv(M.PAIR_ROLL_ENV, raising=False)
        else:
            monkeypatch.setenv(M.PAIR_ROLL_ENV, roll)
        with common.dump_ptx() as d:
            M.compile_mamba2_replay(pair, *base, dump=d, row_order=True, rows=2,
                                    flush_positions=20)
            text = d.read()
            d.cleanup()
        return re.sub(r"kernel_\w+", "K", text)

    assert ptx("nvfp4/fp16sr", None) == ptx("nvfp4/fp16sr", "1")
    assert ptx("nvfp4/fp8sr", None) == ptx("nvfp4/fp8sr", "0")
