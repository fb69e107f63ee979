"""GPU tests of the flush-first row order (cute_kernels.row_order): the order kernel against its
torch reference, and Mamba-2 decode / verify steps launched through it (forced on with
REPLAYSSM_M2_ORDER=1 at small batches) against the torch reference, pad rows and unowned slots
untouched (CUDA-graph capture through it: test_gpu_ops.test_cuda_graph_capture_replay); the
GDN and Mamba-2 decodes' split launches on it (REPLAYSSM_GDN_SPLIT=1 / REPLAYSSM_M2_SPLIT=1)
against the torch reference and captured in a CUDA graph."""
import copy

import pytest
import torch

import replayssm_lp as R


from .conftest import requires_sm90
from .spec_fuzz import spec_fuzz
from .test_gpu_ops import GDN, M2, _twin_check

pytestmark = requires_sm90


@pytest.mark.parametrize("cursors", [False, True])
@pytest.mark.parametrize("batch", [1, 37, 1024, 1500])
@pytest.mark.parametrize("T", [1, 3])
@pytest.mark.parametrize("has_idx", [True, False])
def test_order_kernel_matches_reference(batch, T, has_idx, cursors, seed):
    from cute_kernels.row_order import compile_flush_first_order, flush_first_order_ref

    L, R_ = 8, 8 + max(T, 1)
    dev = "cuda"
    slots = 1600
    wpos = torch.randint(-2, R_ + 3, (slots,), dtype=torch.int32, device=dev)  # corrupt ones too
    sbi = None
    if has_idx:
        sbi = torch.randperm(slots, device=dev)[:batch].to(torch.int32)
        sbi[torch.rand(batch, device=dev) < 0.2] = -1                          # pad rows
        sbi[torch.rand(batch, device=dev) < 0.05] = slots + 5                   # out of range
    elif batch > slots:
        pytest.skip("rows map to slots 0..batch-1")
    nrow = 5 if cursors else 2
    order = torch.full((nrow, slots + 8), -77, dtype=torch.int32, device=dev)   # poisoned
    fn = compile_flush_first_order(L, R_, T, has_idx, cursors).ffi
    orig = fcnt = None
    if cursors:
        orig = torch.randint(0, R_, (slots,), dtype=torch.int32, device=dev)
        fcnt = torch.randint(0, 10 ** 6, (slots,), dtype=torch.int32, device=dev)
    fn(sbi, wpos, orig, fcnt, order, batch, -1)
    torch.cuda.synchronize()
    exp = flush_first_order_ref(wpos, sbi, batch, L, R_, T, ring_origin=orig, flush_count=fcnt)
    assert torch.equal(order[:, :batch], exp)
    assert (order[:, batch:] == -77).all(), "entries past the batch must stay untouched"
    assert torch.equal(order[0, :batch].sort().values, torch.arange(batch, device=dev, dtype=torch.int32))


@pytest.mark.parametrize("cursors", ["0", "1"])
@pytest.mark.parametrize("pair", ["fp32", "nvfp4/fp16sr", "fp8/fp32", "nvfp4/fp8sr"])
def test_mamba2_decode_in_flush_first_order_matches_reference(pair, cursors, seed, monkeypatch):
    """(``cursors``: the decode kernel takes the rows' cursors from the order entry.)"""
    monkeypatch.setenv("REPLAYSSM_M2_ORDER", "1")
    monkeypatch.setenv("REPLAYSSM_M2_ORDER_CURSORS", cursors)
    _twin_check("mamba2", pair, 4)


@pytest.mark.parametrize("pair", ["fp32", "nvfp4/fp16sr"])
def test_mamba2_verify_in_flush_first_order_matches_twin(pair, seed, monkeypatch):
    monkeypatch.setenv("REPLAYSSM_M2_ORDER", "1")
    r = spec_fuzz("mamba2", pair, 40, backend="cute", device="cuda", dims=M2, L=8,
                  max_draft=4, batch=6, pool=17, act=torch.bfloat16, seed=seed,
                  exact_oracle=(pair == "fp32"), exact_rel=2e-2)
    assert r.steps == 40 and r.flush_rows >= 3, r


SPLIT_CASES = (
    [("gdn", p, f, "") for p in ("nvfp4/fp16sr", "fp8/fp32", "nvfp4/fp8sr", "bf16/fp32")
     for f in ("1", "3")]
    + [("mamba2", p, f, h) for p in ("nvfp4/fp16sr", "fp8/fp32", "nvfp4/fp8sr", "fp32")
       for f, h in (("1", ""), ("3", "2"), ("2", "4"))]
    + [("mamba2", "bf16/fp32", "2", "4")])


def _force_split(monkeypatch, kind, fpos, hpc2=""):
    """Forces the split launch of ``kind``'s decode (the order on, ``fpos`` flush positions,
    Mamba-2's ``hpc2`` heads per flush CTA) and clears the tuning switches under which the split
    quietly steps aside for the single launch, then checks it would be taken."""
    from cute_kernels import gdn_replay as GR
    from cute_kernels import mamba2_replay as MR
    env = "REPLAYSSM_GDN" if kind == "gdn" else "REPLAYSSM_M2"
    for var in ("REPLAYSSM_M2_MINBLOCKS", "REPLAYSSM_M2_PROF", GR.TPW_ENV, GR.MINB_ENV,
                GR.PROF_ENV, GR.PREAMBLE_ENV):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(f"{env}_ORDER", "1")
    monkeypatch.setenv(f"{env}_SPLIT", "1")
    monkeypatch.setenv(f"{env}_SPLIT_FPOS", fpos)
    monkeypatch.setenv("REPLAYSSM_M2_SPLIT_HPC2", hpc2)
    assert MR._split_honours() if kind == "mamba2" else GR._split_honours(None, None)


@pytest.mark.parametrize("kind,pair,fpos,hpc2", SPLIT_CASES)
def test_decode_split_matches_reference(kind, pair, fpos, hpc2, seed, monkeypatch):
    """The split decode forced at a small batch: the flush rows' persistent launch over
    ``fpos`` grid positions (its CTAs walk several flush rows; with GDN every row flushes at
    once here), Mamba-2's at ``hpc2`` heads per CTA (empty: choose_heads_per_cta's), and the
    non-flush rows' launch without flush code, at once on two streams, against the torch
    reference every step (stored copies, cursors, pad rows' outputs untouched)."""
    _force_split(monkeypatch, kind, fpos, hpc2)
    _twin_check(kind, pair, 4)


@pytest.mark.parametrize("pair", ["fp8/fp32", "fp32", "nvfp4/fp16sr", "bf16/fp32"])
@pytest.mark.parametrize("hpc,H,P", [("8", 32, 64), ("16", 32, 64), ("6", 24, 80), ("12", 24, 80)])
def test_mamba2_split_wide_nonflush_ctas_match_reference(pair, hpc, H, P, seed, monkeypatch):
    """The Mamba-2 split with ``hpc`` heads per non-flush CTA (a whole group at H / G, as
    Nemotron-3-Super's 16 and Nano-4B's 12 heads per group with its P = 80) and 4 per flush
    CTA: a CTA's heads share its cursors, C and the coefficient dots."""
    _force_split(monkeypatch, "mamba2", "2", "4")
    monkeypatch.setenv("REPLAYSSM_M2_HEADS_PER_CTA", hpc)
    _twin_check("mamba2", pair, 4, dims=dict(H=H, P=P, N=128, G=2))


def _default_split(monkeypatch):
    """The Mamba-2 decode's own split dispatch: no split / order / heads / cap switch set."""
    from cute_kernels import mamba2_replay as MR
    _force_split(monkeypatch, "mamba2", "", "")
    for var in (MR.SPLIT_ENV, MR.SPLIT_FPOS_ENV, MR.SPLIT_HPC2_ENV, "REPLAYSSM_M2_ORDER",
                "REPLAYSSM_M2_HEADS_PER_CTA", MR.SPLIT_NFCAP_ENV):
        monkeypatch.delenv(var, raising=False)


@pytest.mark.parametrize("pair,L,batch,H,P,heads", [
    ("fp32", 32, 256, 32, 64, 8), ("fp32", 16, 256, 32, 64, 8),
    ("bf16/fp32", 32, 160, 32, 64, 8),
    ("fp8/fp32", 16, 256, 32, 64, 8), ("nvfp4/fp16sr", 16, 64, 32, 64, 8),
    ("nvfp4/fp16sr", 16, 64, 24, 80, 6)])
def test_mamba2_split_defaults_match_reference(pair, L, batch, H, P, heads, seed, monkeypatch):
    """The decode's default dispatch where it takes the split with ``heads`` per non-flush CTA
    (fp32 read copies from L = 16 at 256 rows, 16-bit ones from L = 32, fp8 / nvfp4 from
    their batches; the flush halves at SPLIT_FLUSH_MINB's hints; H / G = 16, or 12
    as Nano-4B's) against the torch reference over 3L + 3 staggered steps."""
    from cute_kernels import mamba2_replay as MR
    _default_split(monkeypatch)
    cc, _, _ = _twin_check("mamba2", pair, L, dims=dict(H=H, P=P, N=128, G=2),
                           pool=batch + 16, batch=batch)
    assert MR.use_split(cc, batch), "the default must take the split here"
    assert MR.split_nonflush_heads(cc.pair.read_fmt, batch, H, 2) == heads


@pytest.mark.parametrize("pair", ["nvfp4/fp16sr", "nvfp4/fp8sr"])
def test_mamba2_split_nonflush_cap_matches_reference(pair, seed, monkeypatch):
    """The split's non-flush half at 3 CTAs per SM (shared memory padded: its 8-head staged
    nvfp4 read set without z would fit 4, leaving no room for a flush CTA; b64, L16) against the
    torch reference over 3L + 3 staggered steps."""
    from cute_kernels import mamba2_replay as MR
    _default_split(monkeypatch)
    L, batch, H, P = 16, 64, 32, 64
    base = (pair, torch.bfloat16, torch.float32, H, P, 128, 2, L, L + 1, True, False, True, True)
    impl = dict(flush_impl=None, nonflush_mma=None, staged=None, row_order=True)
    assert MR.split_nonflush_cap(base, 8, MR.choose_heads_per_cta(batch, H, 2), True, None, impl,
                                 batch) == 3
    built = []                            # the non-flush builds the launches actually compile
    compile_real = MR.compile_mamba2_replay

    def compile_spy(*a, **kw):
        k = compile_real(*a, **kw)
        if kw.get("rows") == 1:
            built.append(k.meta["op"])
        return k
    monkeypatch.setattr(MR, "compile_mamba2_replay", compile_spy)
    cc, _, _ = _twin_check("mamba2", pair, L, dims=dict(H=H, P=P, N=128, G=2),
                           pool=batch + 16, batch=batch, has_z=False)
    assert MR.use_split(cc, batch)
    assert built and all(op.smem_ctas_cap == 3 and op._smem_ctas() == 3 for op in built), built


def _assert_single_round(pair, H, P, L, R):
    """The decode build of this shape (H heads, G = 2, 4 heads per CTA) folds in one staging
    round, i.e. takes the single-pass flush."""
    from cute_kernels import mamba2_replay as MR
    kw, _ = MR._resolve(pair, torch.bfloat16, torch.float32, H, P, 128, 2, L, R, True, False,
                        True, True, 4, True, row_order=True)
    op = MR.Mamba2ReplayDecode(**kw)
    assert op.cfg.njb == 1 and op.flush_impl == 2, (op.cfg, op.flush_impl)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("pair", ["nvfp4/fp16sr", "fp8/fp32", "fp32", "nvfp4/fp8sr"])
def test_mamba2_single_round_fold_at_p80_l32(pair, split, seed, monkeypatch):
    """P = 80 at L = 32 (Nano-4B's head size): the fold's 32 entries staged in one round of
    26 KiB (the 32 KiB budget; at 24 it took two rounds and the two-pass flush), in the
    single launch and (``split``, forced) in the split's persistent flush launch."""
    if split:
        _force_split(monkeypatch, "mamba2", "2", "4")
    _assert_single_round(pair, 24, 80, 32, 33)
    _twin_check("mamba2", pair, 32, dims=dict(H=24, P=80, N=128, G=2))


@pytest.mark.parametrize("P", [64, 80])
@pytest.mark.parametrize("pair", ["nvfp4/fp16sr", "fp8/fp32", "fp32"])
def test_mamba2_draft_ring_single_round_fold_at_l32(pair, P, seed):
    """The decode on a draft-capable ring at L = 32 (max_draft 8: 40 entries, at most max(L, T)
    = 32 to fold, staged in one round of 24 / 26 KiB at P 64 / 80) against the torch reference
    over 3L + 3 staggered steps."""
    _assert_single_round(pair, 8, P, 32, 40)
    cc, _, _ = _twin_check("mamba2", pair, 32, dims=dict(H=8, P=P, N=128, G=2), max_draft=8)
    assert cc.ring == 40


@pytest.mark.parametrize("pair", ["nvfp4/fp16sr", "fp8/fp32", "bf16/fp32"])
def test_gdn_split_at_l32_matches_reference(pair, seed, monkeypatch):
    """The GDN decode's split forced at L = 32 (its default stops at SPLIT_MAX_L = 16; the
    non-flush half spills 116-200 B there, the shared ordered build 1.5-2.2 KB on CPU builds)
    against the torch reference over 3L + 3 staggered steps (next_call1.sh times it)."""
    _force_split(monkeypatch, "gdn", "2")
    _twin_check("gdn", pair, 32)


def test_gdn_split_capture_matches_eager(seed, monkeypatch):
    """The split decode (order, flush launch on a side stream, non-flush launch) captured in a
    CUDA graph over staggered rows with pad rows: outputs, stored copies, ring and cursors
    bit-identical to the same steps run eagerly; unowned slots untouched, arrive counters 0."""
    _force_split(monkeypatch, "gdn", "2")
    H, HV, K, Vd = GDN["H"], GDN["HV"], GDN["K"], GDN["V"]
    dev, L, b, slots = "cuda", 4, 10, 16
    g = torch.Generator(device=dev).manual_seed(2000 + seed)
    r = lambda *s: torch.randn(*s, device=dev, generator=g)  # noqa: E731
    cache = R.GDNReplayCache(slots, H, HV, K, Vd, precision="nvfp4/fp16sr", buffer_len=L,
                             act_dtype=torch.bfloat16, device=dev, seed=9)
    cache.init_from_state(list(range(slots)), r(slots, HV, Vd, K) * 0.3)
    cache.write_pos.copy_(torch.arange(slots, dtype=torch.int32, device=dev) % (L + 1))
    sbi = torch.randperm(slots, device=dev, generator=g)[:b].to(torch.int32)
    sbi[2] = -1
    sbi[7] = -1
    q, k, v = r(b, H, K).to(torch.bfloat16), r(b, H, K).to(torch.bfloat16), r(b, HV, Vd).to(torch.bfloat16)
    A_log, a, dt_bias, bb = r(HV) * 0.5, r(b, HV), r(HV) * 0.3, r(b, HV)
    out = torch.full((b, HV, Vd), float("nan"), device=dev, dtype=torch.bfloat16)
    step = lambda c, o: R.gdn_decode(c, q, k, v, A_log=A_log, a=a, dt_bias=dt_bias, b=bb,  # noqa: E731
                                     state_batch_indices=sbi, out=o, backend="cute")
    _capture_matches_eager(cache, step, out, sbi, L, ("k_buf", "u_buf", "v_buf", "g_buf",
                                                      "beta_buf"))


def _capture_matches_eager(cache, step, out, sbi, L, buffers):
    """``step(cache, out)`` (a decode step of the rows ``sbi``, pad rows -1) captured 2L times in
    a CUDA graph and replayed 3 times against the same steps run eagerly on a copy of
    ``cache``: outputs, ``buffers``, cursors and stored copies bit-identical; pad rows' outputs
    (NaN-poisoned ``out``) and unowned slots untouched, arrive counters back at 0."""
    twin = copy.deepcopy(cache)
    hi0, wp0 = cache.hi.data.clone(), cache.write_pos.clone()
    ref = out.clone()
    step(cache, out)                     # compile + warm up outside capture
    step(twin, ref)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(2 * L):
            step(cache, out)
    for _ in range(3):
        graph.replay()
        for _ in range(2 * L):
            step(twin, ref)
    torch.cuda.synchronize()
    assert int(twin.flush_count.max()) >= 3
    valid = sbi >= 0
    assert torch.equal(out[valid], ref[valid]) and out[~valid].isnan().all()
    unowned = torch.ones(cache.write_pos.shape[0], dtype=torch.bool, device=out.device)
    unowned[sbi[valid].long()] = False
    assert torch.equal(cache.hi.data[unowned], hi0[unowned])
    assert torch.equal(cache.write_pos[unowned], wp0[unowned])
    assert int(cache.arrive.abs().max()) == 0
    for name in ("write_pos", "ring_origin", "flush_count", "pending", *buffers):
        assert torch.equal(getattr(cache, name), getattr(twin, name)), name
    assert torch.equal(cache.hi.data, twin.hi.data)
    if cache.lo is not None:
        assert torch.equal(cache.lo.data, twin.lo.data)
    assert not cache.arrive.any() and not twin.arrive.any()


def test_mamba2_split_capture_matches_eager(seed, monkeypatch):
    """The split Mamba-2 decode captured in a CUDA graph over staggered rows with pad rows:
    outputs, stored copies, ring and cursors bit-identical to the same steps run eagerly;
    unowned slots untouched, arrive counters 0."""
    _force_split(monkeypatch, "mamba2", "2")
    H, P, N, G = M2["H"], M2["P"], M2["N"], M2["G"]
    dev, L, b, slots = "cuda", 4, 10, 16
    g = torch.Generator(device=dev).manual_seed(3000 + seed)
    r = lambda *s: torch.randn(*s, device=dev, generator=g)  # noqa: E731
    cache = R.Mamba2ReplayCache(slots, H, P, N, G, precision="nvfp4/fp16sr", buffer_len=L,
                                act_dtype=torch.bfloat16, device=dev, seed=9)
    cache.init_from_state(list(range(slots)), r(slots, H, P, N) * 0.5)
    cache.write_pos.copy_(torch.arange(slots, dtype=torch.int32, device=dev) % (L + 1))
    sbi = torch.randperm(slots, device=dev, generator=g)[:b].to(torch.int32)
    sbi[2] = -1
    sbi[7] = -1
    bf = torch.bfloat16
    x, z = r(b, H, P).to(bf), r(b, H, P).to(bf)
    dt, A, D, dt_bias = r(b, H), -torch.exp(r(H) * 0.5), r(H), r(H) * 0.3
    B, C = r(b, G, N).to(bf), r(b, G, N).to(bf)
    out = torch.full((b, H, P), float("nan"), device=dev, dtype=bf)
    step = lambda c, o: R.mamba2_decode(c, x, dt, A, B, C, D, z, dt_bias, True, sbi,  # noqa: E731
                                        out=o, backend="cute")
    _capture_matches_eager(cache, step, out, sbi, L, ("x_buf", "B_buf", "dt_buf", "dA_buf"))
