"""CPU compile tests of the Mamba-2 speculative-verify kernel (cute_kernels/mamba2_verify.py).

Compiles every precision pair (canonical + extra) for Hopper (``CUTE_DSL_ARCH=sm_90a``, no GPU
needed) at one of T = 1, 2, 8 draft tokens (rotating, so each T meets several formats), plus a few
shape variants (P = 80 row tails, fp32 / fp16 acts, whole groups per CTA, the v1 flush), and reads
the PTX: no local-memory arrays, no approximate division in the encoders, 128-bit state loads, the
cross-CTA cursor counter where a row spans several CTAs. Registers and ptxas stack bytes are
printed. Numerical checks need the GPU: ``tests/gpu_scripts/check_mamba2_verify.py``.
"""
import os
import time

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

import pytest  # noqa: E402

cutlass = pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")
pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi is not installed (the kernel needs TVM-FFI)")

from cute_kernels import common  # noqa: E402
from cute_kernels import mamba2_verify as MV  # noqa: E402
from replayssm_lp.pairs import precision_pairs  # noqa: E402

from tests.harness import compile_workers  # noqa: E402
from tests.test_mamba2_replay_compile import _cubin_info, _simt_emulation  # noqa: E402

PAIRS = list(precision_pairs(include_extra=True))
SMALL = dict(H=8, P=64, N=128, G=2)      # H/G = 4 heads per group
TS = (1, 2, 8, 1, 2)


def _variants():
    # (pair, act, P, heads_per_cta, L, T, options)
    out = []
    for i, name in enumerate(PAIRS):
        out.append((name, "bfloat16", 64, 1 if i % 2 == 0 else 4, 16, TS[i % len(TS)], {}))
    out.append(("nvfp4/fp16sr", "float16", 80, 2, 8, 4, {}))      # P = 80 row tails, T = 4
    out.append(("fp32", "bfloat16", 80, 4, 16, 8, {}))             # P = 80: outputs by 80 threads
    out.append(("nvfp4/fp8sr", "float32", 64, 2, 4, 8, {}))        # fp32 acts: CUDA-core nvfp4, T > L
    out.append(("fp16sr", "bfloat16", 64, 4, 16, 8, {"flush_impl": 1}))   # the v1 flush
    out.append(("nvfp4/fp16sr", "bfloat16", 64, 4, 16, 8, {"row_order": True}))  # flush-first
    # the split launch (REPLAYSSM_M2V_SPLIT): non-flush rows' kernel, flush rows' kernel
    out.append(("nvfp4/fp16sr", "bfloat16", 64, 4, 16, 8, {"row_order": True, "rows": 1}))
    out.append(("fp32", "bfloat16", 64, 4, 16, 8, {"row_order": True, "rows": 2}))
    # ... run at once: both take the rows' cursors from the order (REPLAYSSM_M2V_SPLIT_CONCURRENT)
    out.append(("fp32", "bfloat16", 64, 4, 16, 8, {"row_order": True, "rows": 1,
                                                   "order_cursors": True}))
    out.append(("fp32", "bfloat16", 64, 4, 16, 6, {"row_order": True, "rows": 2,
                                                   "order_cursors": True}))
    # the split's flush launch takes the fragment flush from SPLIT_FRAG_MIN_T drafts
    out.append(("fp32", "bfloat16", 64, 4, 16, MV.SPLIT_FRAG_MIN_T,
                {"row_order": True, "rows": 2, "order_cursors": True}))
    return out


VARIANTS = _variants()
_REPORT = []
IDS = [f"{v[0]}-{v[1]}-P{v[2]}-hpc{v[3]}-L{v[4]}-T{v[5]}"
       + "".join(f"-{k}{x}" for k, x in v[6].items()) for v in VARIANTS]


def _compile_one(v):
    """Compile one variant (in a worker process) and return what the assertions need."""
    pair, act, P, hpc, L, T, opts = v
    H, N, G = SMALL["H"], SMALL["N"], SMALL["G"]
    R = max(L, T) + T
    t0 = time.perf_counter()
    try:
        with common.dump_ptx(cubin=True) as d:
            k = MV.compile_mamba2_verify(pair, act, "float32", H, P, N, G, L, R, T, True, True,
                                         True, True, hpc, dump=d, **opts)
            ptx = d.read()
            cubins = d.files("cubin")
            regs, frame = _cubin_info(cubins[0]) if cubins else (None, None)
            d.cleanup()
    except Exception as e:  # noqa: BLE001 - reported by the test
        import traceback
        return {"error": f"{e!r}\n{traceback.format_exc()}"}
    op = k.meta["op"]
    return {
        "secs": time.perf_counter() - t0, "regs": regs, "frame": frame,
        "stats": common.ptx_stats(ptx), "entry": bool(ptx and ".entry" in ptx),
        "bad": [b for b in ("div.approx", "div.full", "rcp.approx.ftz.f64") if b in ptx],
        "div_rn": "div.rn.f32" in ptx, "atom": "atom.global.add" in ptx,
        "ctas_per_row": k.meta["cfg"].ctas_per_row, "T": op.T, "flush_impl": op.flush_impl,
        "smem": op.smem_bytes(), "minblk": op.min_blocks_per_mp,
        "mma": ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"),
        "mma_lo": op.mma_lo, "mma_hi": op.mma_hi, "read_fmt": op.read_fmt, "rec_fmt": op.rec_fmt,
        "mma_w": op.mma_w, "mma_tf32": ptx.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32"),
        "frag": op.frag,
    }


@pytest.fixture(scope="module")
def compiled(request):
    """The selected variants, compiled by a pool of (at most 2) spawned workers: compiles are
    single-threaded and ~3-9 s each, the test should stay around a minute on 2 idle cores."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    sel = [it.callspec.params["v"] for it in request.session.items
           if getattr(it, "originalname", None) == "test_compile_variant"
           and str(it.fspath) == __file__.replace(".pyc", ".py") and hasattr(it, "callspec")]
    sel = sel or VARIANTS
    ids = [IDS[VARIANTS.index(v)] for v in sel]
    n = compile_workers(len(sel))
    if n == 1:
        return dict(zip(ids, map(_compile_one, sel)))
    with ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn")) as ex:
        return dict(zip(ids, ex.map(_compile_one, sel)))


@pytest.mark.parametrize("v", VARIANTS, ids=IDS)
def test_compile_variant(compiled, v):
    pair, act, P, hpc, L, T, opts = v
    r = compiled[IDS[VARIANTS.index(v)]]
    assert "error" not in r, r.get("error")
    st = r["stats"]
    _REPORT.append((pair, act, P, hpc, L, T, r["secs"], r["regs"], r["frame"], st["ld.global.v4"],
                    r["smem"], r["minblk"]))
    print(f"\n{pair:16s} {act:9s} P={P} hpc={hpc} L={L} T={T}: compile {r['secs']:5.2f}s, "
          f"regs={r['regs']}, stack={r['frame']}, smem={r['smem']}, ld.global.v4={st['ld.global.v4']}")
    assert r["entry"]
    assert st["ld.local"] == 0 and st["st.local"] == 0, "local-memory arrays in the PTX"
    assert not r["bad"], f"{r['bad']} in the PTX: encoders must use div.rn.f32"
    assert r["div_rn"]
    # 128-bit state loads (the nvfp4 read copy with fp32 acts is loaded as 32-bit words: its
    # only state loads there, since flush rows read hi through the flush's cp.async)
    rows = opts.get("rows", 0)          # split launch: 2 = the flush rows' kernel (no dots)
    if not (r["read_fmt"] == "nvfp4" and act == "float32") and rows != 2:
        assert st["ld.global.v4"] > 0, "state chunks are not loaded with 128-bit loads"
    assert r["atom"] or r["ctas_per_row"] == 1
    assert r["T"] == T and r["flush_impl"] == opts.get("flush_impl", 2)
    assert r["smem"] <= 227 * 1024
    # tensor-core dot exactly where selected: nvfp4 copies, 16-bit acts, T <= 8
    want = opts.get("use_mma", True) and act != "float32" and T <= 8
    assert r["mma_lo"] == (want and r["read_fmt"] == "nvfp4")
    assert r["mma_hi"] == (want and r["rec_fmt"] == "nvfp4")
    if rows == 0:
        assert (r["mma"] > 0) == (r["mma_lo"] or r["mma_hi"])
    # the tf32 dot of the other read formats (N = 128 here): 16 k-steps, fp32 in 3 pieces
    assert r["mma_w"] == (want and r["read_fmt"] in MV.WIDE_FMTS)
    # + the fragment flush (fp32 pair, T >= FRAG_MIN_T): 16 n-tiles x (2 fold k-steps + 1 dot)
    # x 3 pieces
    frag_min_t = MV.SPLIT_FRAG_MIN_T if rows == 2 else MV.FRAG_MIN_T
    assert r["frag"] == (r["read_fmt"] == "fp32" and r["rec_fmt"] == "fp32" and rows != 1
                         and act != "float32" and T >= frag_min_t and P % 64 == 0
                         and hpc >= 4)
    # (P = 80: 32-row passes leave a partial one, whose dot is a second copy of the code)
    copies = 1 if P % 32 == 0 else 2
    assert r["mma_tf32"] == ((48 if r["read_fmt"] == "fp32" else 16) * copies
                             if r["mma_w"] and rows != 2 else 0) + (144 if r["frag"] else 0)


def test_compile_report():
    """Prints the table of the variants compiled above (run last)."""
    if not _REPORT:
        pytest.skip("no variant compiled in this session")
    print("\npair             act       P  hpc  L  T  compile[s] regs stack v4-loads smem  minblk")
    for r in _REPORT:
        print(f"{r[0]:16s} {r[1]:9s} {r[2]:3d} {r[3]:3d} {r[4]:3d} {r[5]:2d} {r[6]:9.2f} "
              f"{r[7]!s:>5s} {r[8]!s:>5s} {r[9]:6d} {r[10]:6d} {r[11]:3d}")
    print(f"total compile time {sum(r[6] for r in _REPORT):.1f}s for {len(_REPORT)} variants "
          f"(2 worker processes)")


# ------------------------------------------------------------------------------------------------
# pure-Python parts (no compile)
# ------------------------------------------------------------------------------------------------
def test_static_config_and_errors():
    op = MV.Mamba2VerifyKernel("nvfp4/fp16sr", "bfloat16", "float32", 128, 64, 128, 8, 16, 24, 8,
                               True, False, True, True, 4)
    assert (op.T, op.TP, op.EM, op.NSEGV) == (8, 8, 24, 1)
    assert op.tile_hi.vec == 8 and op.cfg.vec == 32          # hi fp16, lo nvfp4
    assert op._rows_per_group(op.cfg) == 2                   # nvfp4: RPT = 2 rows, 16 accumulators
    assert op._rows_per_group(op.tile_hi) == 4               # fp16: RPT = 8 -> 4 rows x 8 queries
    assert op.smem_bytes() < 100 * 1024
    with pytest.raises(ValueError):
        MV.Mamba2VerifyKernel("fp32", "bfloat16", "float32", 8, 64, 128, 2, 16, 17, 17, True,
                              False, True, True, 1)          # T > 16
    with pytest.raises(ValueError):
        MV.Mamba2VerifyKernel("fp32", "bfloat16", "float32", 8, 64, 128, 2, 16, 16, 4, True,
                              False, True, True, 1)          # ring < L + 1
    with pytest.raises(ValueError):
        MV.Mamba2VerifyKernel("fp32", "bfloat16", "float32", 8, 64, 48, 2, 16, 24, 8, True,
                              False, True, True, 1)          # dstate % 32


def test_output_decomposition_matches_reference():
    """The kernel's output formula, emulated in fp64 torch: one scan over the h committed entries
    and the T drafts, S = the read copy on non-flush rows and the hi copy *before* the flush on
    flush rows (``y_t = Σ_{e<=h+t} exp(Λ_{h+t} − Λ_e)·dt'_e·(B_e·C_t)·x_e + exp(Λ_{h+t})·S·C_t +
    D·x_t``), equals the spec (fold first, then outputs from the fp32 fold) to fp32 rounding."""
    import torch

    import replayssm_lp as R
    from replayssm_lp import reference as ref

    torch.manual_seed(0)
    H, P, N, G, L, md = 4, 16, 32, 2, 6, 4
    for pair in ("fp32", "nvfp4/fp16sr", "fp8sr"):
        c = R.Mamba2ReplayCache(5, H, P, N, G, precision=pair, buffer_len=L, max_draft=md,
                                act_dtype=torch.float32)
        c.init_from_state([0, 1, 2, 3, 4], torch.randn(5, H, P, N))
        A = -torch.rand(H) * 2
        nflush = 0
        for step in range(12):
            T = int(torch.randint(1, md + 1, (1,)))
            slots = torch.tensor([3, 0, 4])
            x, B, C = torch.randn(3, T, H, P), torch.randn(3, T, G, N), torch.randn(3, T, G, N)
            dtp = torch.rand(3, T, H) * 0.5
            D = torch.randn(H)
            # emulation, from the cache state before the call
            h = c.write_pos[slots].long()
            grp = torch.arange(H) // (H // G)
            S_read = c.decode_read(slots).double()
            S_hi = c.decode_hi(slots).double()
            flush = (h + T) > L
            ys = torch.zeros(3, T, H, P, dtype=torch.float64)
            for r in range(3):
                hr = int(h[r])
                ph = (int(c.ring_origin[slots[r]]) + torch.arange(hr)) % c.ring
                xe = torch.cat([c.x_buf[slots[r], :, ph].permute(1, 0, 2).double(),
                                x[r].double()], 0)                              # [E, H, P]
                Be = torch.cat([c.B_buf[slots[r], :, ph].permute(1, 0, 2).double(),
                                B[r].double()], 0)[:, grp]                      # [E, H, N]
                dte = torch.cat([c.dt_buf[slots[r], :, ph].T.double(), dtp[r].double()], 0)
                dAe = torch.cat([c.dA_buf[slots[r], :, ph].T.double(),
                                 (A[None] * dtp[r]).double()], 0)
                lam = torch.cumsum(dAe, 0)                                      # [E, H]
                S = S_hi[r] if bool(flush[r]) else S_read[r]
                for t in range(T):
                    q = hr + t
                    Ct = C[r, t].double()[grp]                                  # [H, N]
                    w = torch.exp(lam[q][None] - lam[: q + 1]) * dte[: q + 1]   # [q+1, H]
                    cb = (Be[: q + 1] * Ct[None]).sum(-1)                       # [q+1, H]
                    y = ((w * cb)[..., None] * xe[: q + 1]).sum(0)
                    y = y + torch.exp(lam[q])[:, None] * torch.einsum("hpn,hn->hp", S, Ct)
                    ys[r, t] = y + D.double()[:, None] * x[r, t].double()
            yr = ref.mamba2_replay(c, slots, x, dtp, A, B, C, D, None, commit_all=False)
            err = (ys - yr.double()).abs().max() / yr.abs().max()
            nflush += int(flush.sum())
            assert err < 2e-6, (pair, step, T, float(err))
            # commit a random prefix
            n = torch.randint(0, T + 1, (3,))
            c.write_pos[slots] += n.to(torch.int32)
            c.pending[slots] = 0
        assert nflush >= 3, (pair, nflush)      # the flush rows' formula was exercised


def test_lanes_reduce_and_broadcast_emulated(monkeypatch):
    """``_lanes_reduce`` (transposed butterfly) and ``_bcast_seg`` run on a SIMT emulation (one
    numpy array over the lanes per value): every lane ends with the full sum of the value its
    returned index names, padding indices only past the list, and broadcasts pick Λ_q."""
    import numpy as np

    _simt_emulation(monkeypatch, MV)
    rng = np.random.default_rng(0)
    for tn in (1, 2, 4, 8, 16, 32):
        for nv in (1, 2, 3, 5, 8, 16, 17, 32):
            lanes = 32
            vals = [rng.standard_normal(lanes) for _ in range(nv)]
            lir = np.arange(lanes) % tn
            sums, base, cnt = MV._lanes_reduce(vals, tn, lir)
            base = np.broadcast_to(base, (lanes,))
            cnt = np.broadcast_to(cnt, (lanes,))
            seen = set()
            for m, s in enumerate(sums):
                s = np.broadcast_to(s, (lanes,))
                for ln in range(lanes):
                    idx = int(base[ln]) + m
                    if m >= int(cnt[ln]):
                        continue
                    assert idx < nv
                    grp = (ln // tn) * tn
                    want = sum(v[grp:grp + tn].sum() for v in [vals[idx]])
                    assert abs(s[ln] - want) < 1e-9, (tn, nv, ln, idx)
                    seen.add((ln // tn, idx))
            assert len(seen) == (lanes // tn) * nv, (tn, nv)     # every value of every group
    lam = [rng.standard_normal(32) for _ in range(3)]
    for q in (-1, 0, 5, 31, 32, 70, 95, 96):
        r = MV._bcast_seg(lam, 3, np.asarray(q))
        want = 0.0 if not 0 <= q < 96 else lam[q // 32][q % 32]
        assert np.allclose(r, want), q


def test_profiling_build(monkeypatch):
    """REPLAYSSM_M2_PROF=1 (profiling build, off): the verify kernel stamps %clock64 at its 7
    phase boundaries, 3 times per head of the non-flush outputs loop (dots vs outputs) and 6
    times in the flush's head and chunk loops (its sub-phase sums; tests/gpu_scripts/
    prof_mamba2_replay.py --verify-T; the CUDA-core flush's: the fragment flush has no
    sub-phase stamps); a key of its own; off: no clock reads."""
    monkeypatch.delenv("REPLAYSSM_M2_PROF", raising=False)
    monkeypatch.setenv("REPLAYSSM_M2V_FRAG_FLUSH", "0")
    args = ("fp32", "bfloat16", "float32", 8, 64, 128, 2, 16, 24, 8, True, False, True, True, 1,
            True)
    key0 = MV._resolve(*args)[1]
    _, ptx0 = MV.compile_only("fp32", H=8, G=2, keep_ptx=True)
    monkeypatch.setenv("REPLAYSSM_M2_PROF", "1")
    assert MV._resolve(*args)[1] != key0
    _, ptx1 = MV.compile_only("fp32", H=8, G=2, keep_ptx=True)
    assert "clock64" not in ptx0 and ptx1.count("mov.u64") >= 7 and ptx1.count("clock64") == 16


@pytest.mark.parametrize("env", ["REPLAYSSM_M2V_XSTAGE", "REPLAYSSM_M2V_XDRAFT",
                                 "REPLAYSSM_M2_FOLD_UNROLL", "REPLAYSSM_M2V_FRAG_FLUSH",
                                 "REPLAYSSM_M2V_FRAG_PD", "REPLAYSSM_M2V_FRAG_L2PF",
                                 "REPLAYSSM_M2V_PRE_HOIST", "REPLAYSSM_M2V_READ_L2PF",
                                 "REPLAYSSM_M2V_READ_L2PF_LATE", "REPLAYSSM_M2V_DOT_PIECES",
                                 "REPLAYSSM_M2V_FRAG_SPLIT", "REPLAYSSM_M2V_FRAG_PRELOAD"])
def test_trace_time_switches_are_in_the_keys(env, monkeypatch):
    """Every switch read while tracing is part of the compile key and of the launch memo's
    environment (an in-process flip must not reuse the other build: session 9's void check)."""
    args = ("fp8/fp32", "bfloat16", "float32", 8, 64, 128, 2, 16, 24, 8, True, False, True, True,
            4, True)
    monkeypatch.delenv(env, raising=False)
    k0 = MV._resolve(*args)[1]
    monkeypatch.setenv(env, {"REPLAYSSM_M2_FOLD_UNROLL": "4", "REPLAYSSM_M2V_FRAG_PD": "2",
                             "REPLAYSSM_M2V_DOT_PIECES": "2",
                             "REPLAYSSM_M2V_FRAG_PRELOAD": "1"}.get(env, "0"))
    assert MV._resolve(*args)[1] != k0
    assert env in MV._ENV_NAMES


def test_pair_roll_switch_and_compile(monkeypatch):
    """REPLAYSSM_M2_PAIR_ROLL=1 (with the pair fold): the verify flush's two chunk encodes as one
    rolled loop, the second chunk in sS (with nvfp4 targets at an even NIT every chunk there, no
    deferral); in the compile key and the launch memo's environment; the fp8/fp16sr and
    nvfp4/fp16sr flush halves compile for sm_90a, with less PTX than inline."""
    from cute_kernels import mamba2_replay as MR
    args = ("fp8/fp16sr", "bfloat16", "float32", 128, 64, 128, 8, 16, 24, 8, True, False, True,
            True, 4)
    monkeypatch.setenv(MR.FOLD_PAIR_ENV, "1")
    monkeypatch.setenv(MV.FRAG_SPLIT_ENV, "0")       # the CUDA-core flush's encodes
    monkeypatch.delenv(MR.PAIR_ROLL_ENV, raising=False)
    assert not MV.Mamba2VerifyKernel(*args, rows=2).pair_roll
    k0 = MV._resolve(*args, True)[1]
    monkeypatch.setenv(MR.PAIR_ROLL_ENV, "1")
    assert MV._resolve(*args, True)[1] != k0 and MR.PAIR_ROLL_ENV in MV._ENV_NAMES
    op = MV.Mamba2VerifyKernel(*args, rows=2)
    assert op.pair_roll and op.fold_pair
    off, _ = op._ulayout()
    assert "sS" in off
    # nvfp4 targets: every chunk in sS (one more than inline), no chunk deferred to pass 2
    nv = MV.Mamba2VerifyKernel("nvfp4/fp16sr", *args[1:], rows=2)
    assert nv.pair_roll and not nv.pair_defer and nv._sS_chunks() == nv.cfg.nit
    monkeypatch.setenv(MR.PAIR_ROLL_ENV, "0")
    nv0 = MV.Mamba2VerifyKernel("nvfp4/fp16sr", *args[1:], rows=2)
    assert nv0.pair_defer and nv0._sS_chunks() == nv0.cfg.nit - 1
    monkeypatch.setenv(MR.PAIR_ROLL_ENV, "1")
    for pair in ("fp8/fp16sr", "nvfp4/fp16sr"):
        sizes = []
        for v in ("0", "1"):
            monkeypatch.setenv(MR.PAIR_ROLL_ENV, v)
            _, ptx = MV.compile_only(pair, T=8, heads_per_cta=4, keep_ptx=True, rows=2,
                                     order_cursors=True, L=16, H=128, P=64, N=128, G=8)
            sizes.append(len(ptx))
        assert sizes[1] < 0.8 * sizes[0], (pair, sizes)


def test_preamble_hoist_and_read_prefetch(monkeypatch):
    """Defaults: the preamble's loads hoisted for every read copy but fp8; the read
    copy's L2 prefetch one head ahead up to T = READ_L2PF_MAX_T in builds without the fragment
    flush, never in the split's flush launch; both forced by their switches. The builds carry
    one bulk prefetch per head (the first after the cursors, the rest in the head loop)."""
    for env in ("REPLAYSSM_M2V_PRE_HOIST", "REPLAYSSM_M2V_READ_L2PF",
                "REPLAYSSM_M2V_READ_L2PF_LATE", "REPLAYSSM_M2V_FRAG_FLUSH"):
        monkeypatch.delenv(env, raising=False)

    def op(pair, T, rows=0):
        return MV.Mamba2VerifyKernel(pair, "bfloat16", "float32", 128, 64, 128, 8, 16, 16 + T, T,
                                     True, False, True, True, 4, rows=rows)

    assert op("fp32", 8).pre_hoist and op("nvfp4/fp16sr", 4).pre_hoist
    assert op("bf16/fp32", 4).pre_hoist and op("fp16/fp32", 8).pre_hoist
    big = MV.Mamba2VerifyKernel("fp32", "bfloat16", "float32", 128, 64, 128, 8, 32, 40, 8, True,
                                False, True, True, 4)
    assert not big.pre_hoist                      # L = 32: 40 hoisted registers, not timed
    assert not op("fp8/fp32", 4).pre_hoist
    assert op("fp32", 4).read_l2pf == 1 and op("fp8/fp32", 4, rows=1).read_l2pf == 1
    assert op("fp32", 8).read_l2pf == 0 and op("nvfp4/fp16sr", 8).read_l2pf == 0
    assert op("fp8/fp32", 4, rows=2).read_l2pf == 0 and op("fp32", 4).read_l2pf_late
    # the fp32 pair's split: the non-flush launch prefetches at any T, the flush launch never
    assert op("fp32", 8, rows=1).read_l2pf == 1 and op("fp32", 8, rows=2).read_l2pf == 0
    assert op("nvfp4/fp16sr", 8, rows=1).read_l2pf == 0
    monkeypatch.setenv("REPLAYSSM_M2V_READ_L2PF", "2")
    monkeypatch.setenv("REPLAYSSM_M2V_PRE_HOIST", "0")
    assert op("fp32", 8).read_l2pf == 2 and not op("fp32", 8).pre_hoist
    monkeypatch.delenv("REPLAYSSM_M2V_READ_L2PF")
    monkeypatch.delenv("REPLAYSSM_M2V_PRE_HOIST")
    _, ptx = MV.compile_only("fp32", T=4, heads_per_cta=4, keep_ptx=True)
    assert ptx.count("cp.async.bulk.prefetch.L2.global") == 2
    _, ptx = MV.compile_only("fp32", T=8, heads_per_cta=4, keep_ptx=True)
    assert "cp.async.bulk.prefetch" not in ptx


def test_verify_defaults_and_split_rule(monkeypatch):
    """Defaults: x staged for every pair; the flush rows' drafts for fp8 / nvfp4 / bf16 / fp16
    read copies (bf16 / fp16 of split pairs only; not the fp32 pair); fold unrolled by 2; the split launch for fp8 / nvfp4 read copies from
    SPLIT_MIN_BATCH rows (the fp32 pair's from SPLIT_FRAG_MIN_T drafts), forced either way by
    REPLAYSSM_M2V_SPLIT; the non-flush build
    (rows=1) has no flush buffers."""
    for env in ("REPLAYSSM_M2V_XSTAGE", "REPLAYSSM_M2V_XDRAFT", "REPLAYSSM_M2V_SPLIT",
                "REPLAYSSM_M2_FOLD_UNROLL", MV.MMA_MAX_T_ENV, MV.MMA_BSMEM_ENV):
        monkeypatch.delenv(env, raising=False)

    def op(pair, rows=0):
        return MV.Mamba2VerifyKernel(pair, "bfloat16", "float32", 128, 64, 128, 8, 16, 24, 8,
                                     True, False, True, True, 4, rows=rows)

    for pair, xd in (("fp32", False), ("fp8/fp32", True), ("nvfp4/fp16sr", True),
                     ("bf16/fp32", True), ("fp16/fp32", True), ("fp16sr", False),
                     ("nvfp4sr", True)):
        o = op(pair)
        assert o.xs and o.xd == xd and o.fold_unroll == 2, pair
    # the drafts buffer only where it costs no CTA per SM, counted as the build runs: shared
    # memory's CTAs capped by the register hint's 4 (fp8 at T = 4: 7 -> 6 by smem, 4 by
    # registers: on; session 23 call 1 timed it off 3-4 % slower at b256 / b512)
    o4 = MV.Mamba2VerifyKernel("fp8/fp32", "bfloat16", "float32", 128, 64, 128, 8, 16, 24, 4,
                               True, False, True, True, 4)
    assert o4.xd and o4.min_blocks_per_mp == 4 and o4._smem_ctas() == 6
    # T = 16: fits at 3 CTAs/SM with the fold sized for max(L, T) entries; with R - 1 (the
    # A-B switch) the buffer would cost fp8/fp32 a CTA per SM (3 -> 2): off there
    o16 = MV.Mamba2VerifyKernel("fp8/fp32", "bfloat16", "float32", 128, 64, 128, 8, 16, 32, 16,
                                True, False, True, True, 4)
    assert o16.xd and o16.min_blocks_per_mp == 3
    monkeypatch.setenv("REPLAYSSM_M2_FOLD_ENTRIES", "ring")
    o16 = MV.Mamba2VerifyKernel("fp8/fp32", "bfloat16", "float32", 128, 64, 128, 8, 16, 32, 16,
                                True, False, True, True, 4)
    assert not o16.xd and o16.min_blocks_per_mp == 3
    # (the dots' B fragments forced into smem: their 4 KB make it 2 CTAs/SM with or without
    # the buffer, so the buffer stays on there)
    monkeypatch.setenv(MV.MMA_BSMEM_ENV, "1")
    o16 = MV.Mamba2VerifyKernel("fp8/fp32", "bfloat16", "float32", 128, 64, 128, 8, 16, 32, 16,
                                True, False, True, True, 4)
    assert o16.xd and o16.min_blocks_per_mp == 2
    monkeypatch.delenv(MV.MMA_BSMEM_ENV)
    monkeypatch.delenv("REPLAYSSM_M2_FOLD_ENTRIES")
    nf, fl = op("nvfp4/fp16sr", rows=1), op("nvfp4/fp16sr", rows=2)
    assert not nf.xd and nf.smem_bytes() < 32 * 1024 < fl.smem_bytes()

    class Cache:
        def __init__(self, pair):
            from replayssm_lp.pairs import parse_pair
            self.pair = parse_pair(pair)

    n, f = MV.SPLIT_MIN_BATCH, MV.SPLIT_FRAG_MIN_T
    assert MV._use_split(Cache("nvfp4/fp16sr"), n, 1) and MV._use_split(Cache("fp8/fp32"), n, 4)
    assert not MV._use_split(Cache("nvfp4/fp16sr"), n - 1, 8)
    # the fp32 pair: from SPLIT_FRAG_MIN_T drafts (its fragment flush gets the flush launch)
    assert MV._use_split(Cache("fp32"), n, f) and MV._use_split(Cache("fp32"), 2 * n, 8)
    assert not MV._use_split(Cache("fp32"), 4 * n, f - 1)
    assert not MV._use_split(Cache("fp32"), n - 1, 8)
    for pair in ("bf16/fp32", "fp16/fp32", "fp16sr", "bf16sr"):
        assert not MV._use_split(Cache(pair), 4 * n, 8), pair
    monkeypatch.setenv("REPLAYSSM_M2V_SPLIT", "1")
    assert MV._use_split(Cache("fp32"), 1, 1)
    monkeypatch.setenv("REPLAYSSM_M2V_SPLIT", "0")
    assert not MV._use_split(Cache("nvfp4/fp16sr"), 4 * n, 8)
    assert not MV._use_split(Cache("fp32"), 4 * n, 8)
    # the two launches at once by default; the switch is in the launch memo's key, and the
    # kernels that take the cursors from the order are a compile key of their own
    monkeypatch.delenv(MV.SPLIT_CONCURRENT_ENV, raising=False)
    assert MV._split_concurrent() and MV.SPLIT_CONCURRENT_ENV in MV._ENV_NAMES
    monkeypatch.setenv(MV.SPLIT_CONCURRENT_ENV, "0")
    assert not MV._split_concurrent()
    args = ("fp32", "bfloat16", "float32", 8, 64, 128, 2, 16, 24, 8, True, False, True, True, 4,
            True)
    k1 = MV._resolve(*args, row_order=True, rows=1)[1]
    assert MV._resolve(*args, row_order=True, rows=1, order_cursors=True)[1] != k1
    assert MV._resolve(*args, row_order=False, rows=1, order_cursors=True)[1] == \
        MV._resolve(*args, row_order=False, rows=1)[1]      # no order, no cursors from it


def test_fragment_flush_default_and_compile(monkeypatch):
    """The fp32 pair's flush in mma fragment layout: by default from T = FRAG_MIN_T at 2 or more
    heads per CTA (forced either way by REPLAYSSM_M2V_FRAG_FLUSH), hi loads 4 (T < 7) or 8 n-tiles
    ahead (SPLIT_FLUSH_PD in the split's flush launch, at SPLIT_FLUSH_MINB CTAs per SM), L2
    prefetch one head ahead; other pairs never. It builds for sm_90a with its tf32 mmas (fold:
    3 pieces x 2 k-steps per n-tile, dots: 3 per n-tile), its 8-byte hi loads and stores, and
    no local memory."""
    for env in ("REPLAYSSM_M2V_FRAG_FLUSH", "REPLAYSSM_M2V_FRAG_PD", "REPLAYSSM_M2V_FRAG_L2PF",
                MV.MMA_MAX_T_ENV, MV.MMA_BSMEM_ENV):
        monkeypatch.delenv(env, raising=False)

    def op(pair, T, hpc=4):
        return MV.Mamba2VerifyKernel(pair, "bfloat16", "float32", 8, 64, 128, 2, 16, 16 + T, T,
                                     True, False, True, True, hpc)

    o = op("fp32", 8)
    assert o.frag and o.frag_pd == 8 and o.frag_l2pf and op("fp32", 6).frag_pd == 4
    assert o.min_blocks_per_mp == 4
    # the split's flush launch: SPLIT_FLUSH_MINB CTAs per SM, hi SPLIT_FLUSH_PD n-tiles deep
    fl = MV.Mamba2VerifyKernel("fp32", "bfloat16", "float32", 8, 64, 128, 2, 16, 24, 8, True,
                               False, True, True, 4, rows=2)
    assert fl.frag and fl.frag_pd == MV.SPLIT_FLUSH_PD == 16
    assert fl.min_blocks_per_mp == MV.SPLIT_FLUSH_MINB == 3
    # ... whose fragment flush starts at SPLIT_FRAG_MIN_T drafts (the single launch: FRAG_MIN_T)
    t = MV.SPLIT_FRAG_MIN_T
    assert t < MV.FRAG_MIN_T and not op("fp32", t).frag
    fl = MV.Mamba2VerifyKernel("fp32", "bfloat16", "float32", 8, 64, 128, 2, 16, 16 + t, t, True,
                               False, True, True, 4, rows=2)
    assert fl.frag and fl.min_blocks_per_mp == 3
    assert not MV.Mamba2VerifyKernel("fp32", "bfloat16", "float32", 8, 64, 128, 2, 16, 15 + t,
                                     t - 1, True, False, True, True, 4, rows=2).frag
    assert op("fp32", MV.FRAG_MIN_T).frag and not op("fp32", MV.FRAG_MIN_T - 1).frag
    assert op("fp32", 8, hpc=2).frag and not op("fp32", 8, hpc=1).frag  # 1 head: CUDA cores
    # T 9-16: two n8 query tiles in the dots (until session 48 the CUDA-core flush there)
    assert all(op("fp32", t).frag for t in range(9, MV.MAX_DRAFT + 1))
    assert MV.Mamba2VerifyKernel("fp32", "bfloat16", "float32", 8, 64, 128, 2, 16, 28, 12,
                                 True, False, True, True, 4, rows=2).frag
    assert not op("nvfp4/fp16sr", 8).frag and not op("fp8/fp32", 8).frag
    monkeypatch.setenv("REPLAYSSM_M2V_FRAG_FLUSH", "0")
    assert not op("fp32", 8).frag
    monkeypatch.setenv("REPLAYSSM_M2V_FRAG_FLUSH", "1")
    assert op("fp32", 4).frag and not op("nvfp4/fp16sr", 8).frag
    monkeypatch.delenv("REPLAYSSM_M2V_FRAG_FLUSH")
    _, ptx = MV.compile_only("fp32", H=8, G=2, heads_per_cta=4, keep_ptx=True)
    assert "ld.local" not in ptx and "st.local" not in ptx
    # non-flush dots 48 + fold 16 n-tiles x 2 k-steps (h <= R - T = 16) x 3 + dots 16 x 3
    assert ptx.count("mma.sync.aligned.m16n8k8") == 48 + 16 * 2 * 3 + 16 * 3
    # 2 rows x 2 lines per thread for the first head and for each next one
    assert ptx.count("prefetch.global.L2") == 4
    assert ptx.count("ld.global.v2.b32") >= 32 and ptx.count("st.global.v2.b32") >= 32
    # T = 12: non-flush dots 48 x 2 query tiles (since session 51; REPLAYSSM_M2V_MMA_MAX_T=8:
    # none, the CUDA-core dots), fold 16 x 2 x 3, dots 16 n-tiles x 2 query tiles x 3 (that
    # drafts 9-12 get their dots is the GPU fuzz's, test_fuzz_mamba2_verify_more_than_8_...)
    for max_t, nonflush in ((None, 48 * 2), ("8", 0)):
        if max_t:
            monkeypatch.setenv(MV.MMA_MAX_T_ENV, max_t)
        _, ptx = MV.compile_only("fp32", H=8, G=2, T=12, heads_per_cta=4, keep_ptx=True)
        assert "ld.local" not in ptx and "st.local" not in ptx
        assert ptx.count("mma.sync.aligned.m16n8k8") == nonflush + 16 * 2 * 3 + 16 * 2 * 3
    monkeypatch.delenv(MV.MMA_MAX_T_ENV)


def test_tensor_core_dots_above_8_drafts(monkeypatch):
    """REPLAYSSM_M2V_MMA_MAX_T (session 49; default MAX_DRAFT since session 51, 8 = the CUDA-core
    dots above 8 drafts): the non-flush state dots stay on the tensor cores up to MAX_DRAFT, two
    n8 query tiles from T = 9; their B fragments sit in shared memory between heads by
    ``_mma_bsmem_default``'s rule since session 51 (a split's non-flush launch;
    REPLAYSSM_M2V_MMA_BSMEM=0/1 forces). Both build for sm_90a with one dot
    per query tile and k-step (the split's non-flush launch, where the dots are the only mmas),
    no local memory in the PTX."""
    for env in (MV.MMA_MAX_T_ENV, MV.MMA_BSMEM_ENV):
        monkeypatch.delenv(env, raising=False)

    def op(pair, T, rows=1):
        return _super_verify(pair, T, rows=rows)

    assert MV.MMA_MAX_T_DEFAULT == MV.MAX_DRAFT
    for T in range(1, MV.MAX_DRAFT + 1):
        assert op("fp32", T).mma_w and op("nvfp4/fp16sr", T).mma_lo, T
        assert op("fp32", T).mma_nq == (1 if T <= 8 else 2)
        assert op("fp32", T).mma_bsmem == (T > 8) == op("nvfp4/fp16sr", T).mma_bsmem, T
    # the rule: the split's non-flush launch only; not the single launch or a flush launch
    for T in (9, 12, 16):
        assert op("fp8/fp32", T).mma_bsmem and op("nvfp4/fp32", T).mma_bsmem, T
        for pair in ("fp32", "fp8/fp32", "nvfp4/fp16sr", "nvfp4/fp32"):
            assert not op(pair, T, rows=0).mma_bsmem and not op(pair, T, rows=2).mma_bsmem
    monkeypatch.setenv(MV.MMA_MAX_T_ENV, "8")
    assert not op("fp32", 9).mma_w and not op("nvfp4/fp16sr", 9).mma_lo and op("fp32", 8).mma_w
    assert not op("fp32", 9).mma_bsmem
    monkeypatch.delenv(MV.MMA_MAX_T_ENV)
    monkeypatch.setenv(MV.MMA_BSMEM_ENV, "0")
    assert not op("fp32", 12).mma_bsmem and op("fp32", 12).mma_nq == 2
    monkeypatch.setenv(MV.MMA_BSMEM_ENV, "1")
    assert op("fp8/fp32", 12).mma_bsmem and not op("fp8/fp32", 8).mma_bsmem
    with_b = op("fp32", 12).smem_bytes()
    monkeypatch.setenv(MV.MMA_BSMEM_ENV, "0")
    assert with_b == op("fp32", 12).smem_bytes() + 4 * 32 * 32     # 32 words a lane
    for pair, kind, per_tile in (("fp32", "m16n8k8", 16 * 3), ("nvfp4/fp16sr", "m16n8k16", 8)):
        v4 = {}
        for bsmem in ("0", "1"):
            monkeypatch.setenv(MV.MMA_BSMEM_ENV, bsmem)
            _, ptx = MV.compile_only(pair, H=8, G=2, T=12, heads_per_cta=4, keep_ptx=True,
                                     rows=1, order_cursors=True)
            assert "ld.local" not in ptx and "st.local" not in ptx, (pair, bsmem)
            assert ptx.count(f"mma.sync.aligned.{kind}") == 2 * per_tile, (pair, bsmem)
            v4[bsmem] = (ptx.count("ld.shared.v4.b32"), ptx.count("st.shared.v4.b32"))
        # B in smem: the per-head reload, 32 words a lane in 16-byte loads, and warp 0's stores
        assert v4["1"][0] >= v4["0"][0] + 8 and v4["1"][1] >= v4["0"][1] + 8, (pair, v4)


def _super_verify(pair, T=8, rows=2, hpc=4):
    """The verify kernel object at Nemotron-3-Super's shape, L16 (b256's 4 heads per CTA)."""
    return MV.Mamba2VerifyKernel(pair, "bfloat16", "float32", 128, 64, 128, 8, 16, 24, T, True,
                                 False, True, True, hpc, rows=rows)


def test_fragment_flush_of_split_pairs_rule_and_compile(monkeypatch):
    """REPLAYSSM_M2V_FRAG_SPLIT=1: a split pair's flush rows in a split's flush launch (rows=2,
    T >= SPLIT_FRAG_MIN_T, hi fp32 / fp16 / bf16) take the fragment flush, S_new through sS
    (every chunk of a head; no fold pairs or rolled encodes), sS after the fragment buffers and
    before the x_j landing zone; unset, the measured rule (``_frag_split_rule``); never in the
    other launches, for an fp8 checkpoint or a shared pair (fp32 keeps its own). The switches
    are in the compile key. nvfp4/fp16sr and
    fp8/fp32 build for sm_90a: fold and dots on tf32 mmas, 4-byte hi loads (fp16), no local
    memory."""
    monkeypatch.delenv(MV.FRAG_SPLIT_ENV, raising=False)
    # the rule (unset): nvfp4/fp32 at T4-T8, nvfp4/fp16sr and fp8/fp32 at T8, L16 only
    rule = {"nvfp4/fp32": (4, 5, 6, 7, 8), "nvfp4/fp16sr": (8,), "fp8/fp32": (8,)}
    for pair in ("nvfp4/fp32", "nvfp4/fp16sr", "fp8/fp32", "fp8/fp16sr", "nvfp4sr/fp16sr",
                 "bf16/fp32", "nvfp4/fp8sr", "fp32"):
        for T in range(1, 17):
            o = _super_verify(pair, T=T)
            assert o.frag_split == (T in rule.get(pair, ())), (pair, T)
            assert o.frag_preload == (o.frag_split and MV._frag_preload_default())
    assert not _super_verify("nvfp4/fp16sr", rows=0).frag_split
    assert not MV.Mamba2VerifyKernel("nvfp4/fp32", "bfloat16", "float32", 128, 64, 128, 8, 32, 40,
                                     8, True, False, True, True, 4, rows=2).frag_split   # L32
    assert not MV.Mamba2VerifyKernel("nvfp4/fp32", "bfloat16", "float32", 64, 128, 128, 8, 16,
                                     24, 8, True, False, True, True, 4, rows=2).frag_split  # P128
    monkeypatch.setenv(MV.FRAG_SPLIT_ENV, "0")
    assert not _super_verify("nvfp4/fp16sr").frag_split and not _super_verify("nvfp4/fp16sr").frag
    args = ("nvfp4/fp16sr", "bfloat16", "float32", 128, 64, 128, 8, 16, 24, 8, True, False, True,
            True, 4, True)
    k0 = MV._resolve(*args, rows=2)[1]
    monkeypatch.setenv(MV.FRAG_SPLIT_ENV, "1")
    assert MV._resolve(*args, rows=2)[1] != k0 and MV.FRAG_SPLIT_ENV in MV._ENV_NAMES
    for pair in ("nvfp4/fp16sr", "nvfp4/fp32", "fp8/fp32", "fp8/fp16sr", "bf16/fp32",
                 "fp16/fp32", "nvfp4sr/fp16sr", "fp8sr/fp32"):
        o = _super_verify(pair)
        assert o.frag and o.frag_split and o.sS_whole, pair
        assert not (o.fold_pair or o.pair_roll or o.pair_defer or o.fold_pairs), pair
        assert o._sS_chunks() == o.cfg.nit and o.min_blocks_per_mp <= MV.SPLIT_FLUSH_MINB, pair
        off, size = o._ulayout()
        assert off["fsWX"] + 4 * 16 * (64 + 4) <= off["sS"], pair
        assert off["sS"] + 64 * 128 * o.cfg.nit <= off["xr"] and off["xr"] + 16 * 64 * 2 <= size
        assert _super_verify(pair, T=MV.SPLIT_FRAG_MIN_T).frag_split, pair
        assert not _super_verify(pair, T=MV.SPLIT_FRAG_MIN_T - 1).frag_split, pair
        assert not _super_verify(pair, rows=0).frag_split, pair
        assert not _super_verify(pair, rows=1).frag_split, pair
    for pair in ("nvfp4/fp8sr", "fp16sr", "nvfp4sr", "fp32"):
        assert not _super_verify(pair).frag_split, pair
    assert _super_verify("fp32").frag
    for pair, hi_load in (("nvfp4/fp16sr", "ld.global.b32"), ("fp8/fp32", "ld.global.v2.b32")):
        _, ptx = MV.compile_only(pair, T=8, heads_per_cta=4, keep_ptx=True, rows=2,
                                 order_cursors=True, L=16, H=128, P=64, N=128, G=8)
        assert "ld.local" not in ptx and "st.local" not in ptx, pair
        # fold 16 n-tiles x 2 k-steps x 3 pieces + dots 16 x 3 per m-tile (no non-flush dots)
        assert ptx.count("mma.sync.aligned.m16n8k8") == 16 * 2 * 3 + 16 * 3, pair
        assert ptx.count(hi_load) >= 32, pair


def test_fragment_flush_sS_map_emulated():
    """``_sS_frag_store``'s place of S_new[p, c], [p, c + 1] (c even), read back by every
    thread's ``_sS_load`` of its chunks, gives each thread rows ``rrow + it·RPF`` and columns
    ``16·cbi ..`` of S_new: the chunk layout of the CUDA-core flush (Super: P 64, N 128)."""
    import numpy as np

    o = _super_verify("nvfp4/fp16sr")
    cfg = o.cfg
    P, N, NT, RW, RPF, NIT = o.P, o.N, cfg.nt, cfg.rw, cfg.rpf, cfg.nit
    S = np.random.default_rng(1).standard_normal((P, N))
    sS = np.full((NIT * 4 * NT, 4), np.nan)
    for p in range(P):
        for c in range(0, N, 2):      # the index arithmetic of _sS_frag_store
            it, pr = p // RPF, p % RPF
            tid = (pr // RW) * 32 + (c // 16) * RW + pr % RW
            e = c % 16
            row, col = (it * 4 + e // 4) * NT + tid, 2 * ((e % 4) // 2)
            assert np.isnan(sS[row, col:col + 2]).all()
            sS[row, col:col + 2] = S[p, c:c + 2]
    assert not np.isnan(sS).any()
    for tidx in range(NT):
        warp, lane = tidx // 32, tidx % 32
        cbi, rrow = lane // RW, warp * RW + lane % RW
        for it in range(NIT):     # _sS_load: float4 g of chunk it at row (it*4 + g)*NT + tidx
            chunk = np.concatenate([sS[(it * 4 + g) * NT + tidx] for g in range(4)])
            np.testing.assert_array_equal(chunk, S[rrow + it * RPF, 16 * cbi:16 * cbi + 16])


def test_fragment_flush_maps_emulated():
    """The lane maps of ``_flush_frag`` on a numpy model of mma.sync.m16n8k8 (PTX fragment
    layouts): fold accumulators, S_new = gf·hi + fold, and the T dots with the accumulator as the
    next A operand reproduce the matrix products."""
    import numpy as np

    rng = np.random.default_rng(0)
    T, h, JB, N, R = 8, 13, 23, 128, 24
    KS = -(-min(JB, R - T) // 8)                # the kernel's k-steps: h <= R - T
    wx = rng.standard_normal((JB, 16))          # one m16 tile: rows p = g, g + 8
    Bm = rng.standard_normal((JB, N))
    hi = rng.standard_normal((16, N))
    C = rng.standard_normal((N, T))
    gf = 0.7

    def mma(a, b, c):
        """a[lane] 4 values, b[lane] 2, c[lane] 4: D = A·B + C in the PTX layouts."""
        A = np.zeros((16, 8)); B = np.zeros((8, 8)); D = np.zeros((16, 8))
        for ln in range(32):
            g, t = ln // 4, ln % 4
            A[g, t], A[g + 8, t], A[g, t + 4], A[g + 8, t + 4] = a[ln]
            B[t, g], B[t + 4, g] = b[ln]
            D[g, 2 * t], D[g, 2 * t + 1], D[g + 8, 2 * t], D[g + 8, 2 * t + 1] = c[ln]
        D = A @ B + D
        return [(D[ln // 4, 2 * (ln % 4)], D[ln // 4, 2 * (ln % 4) + 1],
                 D[ln // 4 + 8, 2 * (ln % 4)], D[ln // 4 + 8, 2 * (ln % 4) + 1])
                for ln in range(32)]

    snew = np.zeros((16, N))
    dots = [[(0.0,) * 4] * 32 for _ in range(2)]
    for nt in range(N // 8):
        f = [(0.0,) * 4] * 32
        for ks in range(KS):
            a, b = [], []
            for ln in range(32):
                g, t = ln // 4, ln % 4
                j0, j1 = 8 * ks + t, 8 * ks + t + 4
                w = lambda j, p: wx[min(j, JB - 1), p] if j < h else 0.0  # noqa: E731
                a.append((w(j0, g), w(j0, g + 8), w(j1, g), w(j1, g + 8)))
                bb = lambda j: Bm[min(j, JB - 1), 8 * nt + g] if j < h else 0.0  # noqa: E731
                b.append((bb(j0), bb(j1)))
            f = mma(a, b, f)
        a, b = [], []
        for ln in range(32):
            g, t = ln // 4, ln % 4
            c = 8 * nt + 2 * t
            hv = (hi[g, c], hi[g, c + 1], hi[g + 8, c], hi[g + 8, c + 1])
            sn = [gf * hv[e] + f[ln][e] for e in range(4)]
            snew[g, c], snew[g, c + 1], snew[g + 8, c], snew[g + 8, c + 1] = sn
            a.append((sn[0], sn[2], sn[1], sn[3]))
            q = min(g, T - 1)
            b.append((C[c, q] if g < T else 0.0, C[c + 1, q] if g < T else 0.0))
        dots[nt % 2] = mma(a, b, dots[nt % 2])
    want = gf * hi + wx[:h].T @ Bm[:h]
    np.testing.assert_allclose(snew, want, rtol=1e-12, atol=1e-12)
    got = np.zeros((16, T))
    for ln in range(32):
        g, t = ln // 4, ln % 4
        for r in range(2):
            for j in range(2):
                if 2 * t + j < T:
                    got[g + 8 * r, 2 * t + j] = dots[0][ln][2 * r + j] + dots[1][ln][2 * r + j]
    np.testing.assert_allclose(got, want @ C, rtol=1e-10, atol=1e-10)
