"""GPU tests of speculative decoding (skipped without an sm_90+ GPU).

* the speculative fuzz (tests/spec_fuzz.py) with backend="cute" for every precision pair and both
  layer kinds: the CuTe verify + commit against a CPU twin running the torch reference, and (fp32
  pair, 1000 steps) against the standard decode of the accepted stream. These skip, saying so,
  until CuTe kernels are registered for replayssm_lp.ops.mamba2_verify / gdn_verify; a
  configuration a registered kernel declines fails (tests/test_spec_fuzz.py checks on CPU that
  the configurations here are inside the kernels' support);
* the snapshot-verify CuTe kernels (cute_kernels.snapshot_verify, vLLM semantics) against their
  torch reference (replayssm_lp.snapshot): outputs, every stored snapshot, pad rows / pad columns,
  the read column chosen by num_accepted_tokens, untouched slots, CUDA-graph capture.

Knobs: REPLAYSSM_FUZZ_STEPS (steps per pair of the every-pair fuzz, default 30),
REPLAYSSM_FUZZ_DRAFTS=all (every draft count for every pair; slow: one kernel compile per T).
"""
import os

import pytest
import torch

from replayssm_lp import precision_pairs
from replayssm_lp import reference as ref
from replayssm_lp.backends import resolve
from replayssm_lp.snapshot import (gdn_snapshot_verify, mamba2_snapshot_verify, snapshot_read_slots)

from .conftest import requires_sm90
from .spec_fuzz import FuzzMismatch, corrupt_live_entry, spec_fuzz

pytestmark = requires_sm90
ALL_PAIRS = list(precision_pairs(include_extra=True))
M2 = dict(H=8, P=64, N=128, G=2)
GDN = dict(H=2, HV=4, K=128, V=128)
# fp32 pair, fp32 activations: draft outputs vs the fp64 standard decode of the accepted stream
EXACT_REL_FP32 = 5e-5
# steps per pair of the every-pair fuzz (the fp32 pair runs the full 1000 in its own test)
PAIR_STEPS = int(os.environ.get("REPLAYSSM_FUZZ_STEPS", "30"))


@pytest.fixture(autouse=True)
def one_cpu_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)     # the CPU twin works on small tensors
    yield
    torch.set_num_threads(n)


# ------------------------------------------------------------------------------------------------
# speculative fuzz with the CuTe verify + commit (first in the file: under ``pytest -n 3`` the two
# 1000-step runs, the longest tests, then start first on two workers)
# ------------------------------------------------------------------------------------------------
# Configurations inside the kernels' support (cute_kernels.*_verify.supports_cache; checked on CPU
# by tests/test_spec_fuzz.py): the GDN verify kernel needs K = 128, L <= 32, max_draft <= min(L, 8);
# the Mamba-2 one takes T up to 16, T > L included (it flushes first), so the T > L case is
# Mamba-2's (L = 4, T up to 8).
FUZZ_CFG = {"mamba2": dict(L=4, max_draft=8), "gdn": dict(L=8, max_draft=8)}
LONG_CFG = dict(L=16, max_draft=8)         # the 1000-step fp32 runs
# The verify kernels compile one variant per draft count T (Mamba-2 3-9 s, GDN 5-20 s each, see
# docs/NOTES.md), which is what this file's time goes to, so each pair of the every-pair fuzz draws
# T from a few values (Mamba-2 two, GDN one) that rotate over the pairs: across the pairs every T in
# 1..8 is met (and T > L on Mamba-2). The 1000-step fp32 runs mix T per call. REPLAYSSM_FUZZ_DRAFTS
# =all draws T from 1..max_draft everywhere (thorough, slow).
ALL_DRAFTS = os.environ.get("REPLAYSSM_FUZZ_DRAFTS", "") == "all"
LONG_DRAFTS = {"mamba2": None, "gdn": (1, 3, 6, 8)}      # None: every T in 1..max_draft


def pair_drafts(kind, pair):
    """The draft counts the every-pair fuzz uses for ``pair`` (None: all of 1..max_draft)."""
    if ALL_DRAFTS:
        return None
    i = ALL_PAIRS.index(pair)
    if kind == "mamba2":
        return (1 + (2 * i) % 8, 1 + (2 * i + 1) % 8)
    return (1 + i % 8,)


def _cute_verify_or_skip(kind, pair, act, dims, L, max_draft):
    """Skip when no CuTe verify kernel is registered; a configuration the kernel declines is a
    mistake of this file and fails."""
    import replayssm_lp as R
    if kind == "mamba2":
        c = R.Mamba2ReplayCache(2, dims["H"], dims["P"], dims["N"], dims["G"], precision=pair,
                                buffer_len=L, max_draft=max_draft, act_dtype=act, device="cuda")
    else:
        c = R.GDNReplayCache(2, dims["H"], dims["HV"], dims["K"], dims["V"], precision=pair,
                             buffer_len=L, max_draft=max_draft, act_dtype=act, device="cuda")
    try:
        resolve("cute", f"{kind}_verify", c)
    except RuntimeError as e:
        if "does not support this configuration" in str(e):
            raise
        pytest.skip(f"no CuTe verify kernel: {e}")


def _drafts(d):
    return None if ALL_DRAFTS else d


@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_fuzz_cute_fp32_pair_matches_accepted_stream(kind, seed):
    dims = M2 if kind == "mamba2" else GDN
    _cute_verify_or_skip(kind, "fp32", torch.float32, dims, **LONG_CFG)
    r = spec_fuzz(kind, "fp32", 1000, backend="cute", device="cuda", dims=dims, **LONG_CFG,
                  batch=6, pool=17, act=torch.float32, seed=seed, exact_rel=EXACT_REL_FP32,
                  drafts=_drafts(LONG_DRAFTS[kind]))
    print(f"{kind} fp32: {r}")
    assert r.flush_rows > 100


@pytest.mark.parametrize("pair", ALL_PAIRS)
@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_fuzz_cute_every_pair_matches_twin(kind, pair, seed):
    dims, cfg = (M2 if kind == "mamba2" else GDN), FUZZ_CFG[kind]
    _cute_verify_or_skip(kind, pair, torch.bfloat16, dims, **cfg)
    r = spec_fuzz(kind, pair, PAIR_STEPS, backend="cute", device="cuda", dims=dims, **cfg,
                  batch=6, pool=17, act=torch.bfloat16, seed=seed, drafts=pair_drafts(kind, pair),
                  exact_oracle=(pair == "fp32"), exact_rel=2e-2)
    print(f"{kind} {pair} T in {pair_drafts(kind, pair) or 'all'}: {r}")
    assert r.steps == PAIR_STEPS and r.flush_rows >= 3, r      # (GDN at T = 1: ~9 in 30 steps)


@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_fuzz_cute_teeth(kind, seed):
    """One corrupted ring entry in the CuTe cache must fail the fuzz."""
    dims, cfg = (M2 if kind == "mamba2" else GDN), FUZZ_CFG[kind]
    _cute_verify_or_skip(kind, "fp32", torch.bfloat16, dims, **cfg)
    hook = corrupt_live_entry(at_step=3, both=False)
    with pytest.raises(FuzzMismatch, match="buffer"):
        spec_fuzz(kind, "fp32", 30, backend="cute", device="cuda", dims=dims, **cfg,
                  act=torch.bfloat16, seed=seed, exact_rel=2e-2, corrupt=hook,
                  drafts=_drafts(pair_drafts(kind, "fp32")))
    assert hook.state["done"]


# ------------------------------------------------------------------------------------------------
# snapshot baseline kernels
# ------------------------------------------------------------------------------------------------
def _snapshot_case(b, T, pool, dev):
    perm = torch.randperm(pool, device=dev)[: b * T].reshape(b, T).to(torch.int32)
    perm[1] = -1                                      # pad row
    if T > 1:
        perm[2, T - 1] = -1                           # a row with one draft fewer
    acc = torch.randint(1, T + 1, (b,), dtype=torch.int32, device=dev)
    acc[2] = 1
    return perm, acc


@pytest.mark.parametrize("T", [1, 4, 8])
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_mamba2_snapshot_kernel_matches_reference(state_dtype, T, seed):
    H, P, N, G = M2["H"], M2["P"], M2["N"], M2["G"]
    dev, act, b, pool = "cuda", torch.bfloat16, 6, 64
    state = (torch.randn(pool, H, P, N, device=dev) * 0.5).to(state_dtype)
    state_ref = state.clone()
    idx, acc = _snapshot_case(b, T, pool, dev)
    r = lambda *s: torch.randn(*s, device=dev)  # noqa: E731
    x, z, B, C = r(b, T, H, P).to(act), r(b, T, H, P).to(act), r(b, T, G, N).to(act), r(b, T, G, N).to(act)
    dt, A, D, bias = r(b, T, H), -torch.rand(H, device=dev) - 0.1, r(H), r(H) * 0.3
    out = torch.full((b, T, H, P), float("nan"), device=dev, dtype=act)
    out_ref = out.clone()
    for o, s, be in ((out, state, "cute"), (out_ref, state_ref, "torch")):
        mamba2_snapshot_verify(s, x, dt, A, B, C, D, z, bias, True, idx, -1, o, be, num_accepted_tokens=acc)
    assert torch.isnan(out[1]).all()
    v = [0, 2, 3, 4, 5]
    torch.testing.assert_close(out[v].float(), out_ref[v].float(), rtol=1e-2, atol=1e-2)
    tol = 1e-5 if state_dtype == torch.float32 else 1e-2
    torch.testing.assert_close(state.float(), state_ref.float(), rtol=tol, atol=tol)
    written = {int(s) for s in idx.flatten().tolist() if s >= 0}
    untouched = [i for i in range(pool) if i not in written]
    assert torch.equal(state[untouched], state_ref[untouched])


@pytest.mark.parametrize("T", [1, 3, 8])
@pytest.mark.parametrize("gates", ["raw", "given"])
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_gdn_snapshot_kernel_matches_reference(state_dtype, gates, T, seed):
    H, HV, K, Vd = GDN["H"], GDN["HV"], GDN["K"], GDN["V"]
    dev, act, b, pool = "cuda", torch.bfloat16, 5, 48
    state = (torch.randn(pool, HV, Vd, K, device=dev) * 0.3).to(state_dtype)
    state_ref = state.clone()
    idx, acc = _snapshot_case(b, T, pool, dev)
    r = lambda *s: torch.randn(*s, device=dev)  # noqa: E731
    q, k, v = r(b, T, H, K).to(act), r(b, T, H, K).to(act), r(b, T, HV, Vd).to(act)
    A_log, a, bias, bb = r(HV) * 0.5, r(b, T, HV), r(HV) * 0.3, r(b, T, HV)
    g, beta = ref.gdn_gates(None, None, A_log, a, bias, bb)
    out = torch.full((b, T, HV, Vd), float("nan"), device=dev, dtype=act)
    out_ref = out.clone()
    for o, s, be in ((out, state, "cute"), (out_ref, state_ref, "torch")):
        if gates == "raw":
            gdn_snapshot_verify(s, q, k, v, A_log=A_log, a=a, dt_bias=bias, b=bb, state_indices=idx,
                                num_accepted_tokens=acc, out=o, backend=be)
        else:
            gdn_snapshot_verify(s, q, k, v, g, beta, state_indices=idx, num_accepted_tokens=acc, out=o,
                                backend=be)
    assert torch.isnan(out[1]).all()
    v_ = [0, 2, 3, 4]
    torch.testing.assert_close(out[v_].float(), out_ref[v_].float(), rtol=1e-2, atol=1e-2)
    tol = 1e-5 if state_dtype == torch.float32 else 1e-2
    torch.testing.assert_close(state.float(), state_ref.float(), rtol=tol, atol=tol)


def test_snapshot_kernels_capture_in_cuda_graph(seed):
    H, P, N, G = M2["H"], M2["P"], M2["N"], M2["G"]
    dev, act, b, T, pool = "cuda", torch.bfloat16, 4, 4, 32
    state = torch.randn(pool, H, P, N, device=dev)
    idx = torch.arange(b * T, device=dev, dtype=torch.int32).reshape(b, T)
    acc = torch.full((b,), 2, dtype=torch.int32, device=dev)
    x, B, C = (torch.randn(b, T, H, P, device=dev).to(act), torch.randn(b, T, G, N, device=dev).to(act),
               torch.randn(b, T, G, N, device=dev).to(act))
    dt, A = torch.randn(b, T, H, device=dev), -torch.rand(H, device=dev)
    out = torch.zeros(b, T, H, P, device=dev, dtype=act)
    twin = state.clone()
    call = lambda s, o: mamba2_snapshot_verify(s, x, dt, A, B, C, state_indices=idx, out=o,  # noqa: E731
                                               backend="cute", num_accepted_tokens=acc)
    call(state, out)                      # compile outside capture
    call(twin, out.clone())
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        call(state, out)
    ref_out = out.clone()
    for _ in range(3):
        g.replay()
        call(twin, ref_out)
    torch.cuda.synchronize()
    assert torch.equal(out, ref_out) and torch.equal(state, twin)
    # the read column follows num_accepted_tokens
    assert torch.equal(snapshot_read_slots(idx, acc), idx[:, 1])


@pytest.mark.parametrize("mma", ["0", "1"])
@pytest.mark.parametrize("pair", ["fp32", "nvfp4/fp16sr", "fp8/fp32", "bf16/fp32"])
def test_fuzz_gdn_verify_tail_variant(pair, mma, seed, monkeypatch):
    """REPLAYSSM_GDN_VERIFY_TAIL=1 (the verify's finish inputs issued early, ring terms in the
    finish), with and without REPLAYSSM_GDN_VERIFY_MMA (read dots on the tensor cores): the
    every-pair fuzz with T in {3, 8}, L = 16 (non-flush rows with committed entries)."""
    monkeypatch.setenv("REPLAYSSM_GDN_VERIFY_TAIL", "1")
    monkeypatch.setenv("REPLAYSSM_GDN_VERIFY_MMA", mma)
    _variant_fuzz("gdn", pair, GDN, dict(L=16, max_draft=8), 40, seed, f"tail mma={mma}")


def _variant_fuzz(kind, pair, dims, cfg, steps, seed, label):
    """The every-pair fuzz of one kernel variant (set by the caller's environment) with T in
    {3, 8}: ``steps`` verify / commit calls against the twin, at least 3 flush rows."""
    _cute_verify_or_skip(kind, pair, torch.bfloat16, dims, **cfg)
    r = spec_fuzz(kind, pair, steps, backend="cute", device="cuda", dims=dims, **cfg,
                  batch=6, pool=17, act=torch.bfloat16, seed=seed, drafts=(3, 8),
                  exact_oracle=(pair == "fp32"), exact_rel=2e-2)
    print(f"{kind} {label} {pair}: {r}")
    assert r.steps == steps and r.flush_rows >= 3, r


@pytest.mark.parametrize("fold_kib", ["16", "32"])
@pytest.mark.parametrize("pair", ["fp32", "nvfp4/fp16sr", "fp8/fp32"])
def test_fuzz_mamba2_verify_fold_round_l32(pair, fold_kib, seed, monkeypatch):
    """The Mamba-2 verify at L = 32 with T <= 8 drafts (ring of 40 entries, at most max(L, T) =
    32 to fold: 24 KiB at P64 N128) folding in two staging rounds (REPLAYSSM_M2V_FOLD_SMEM=16:
    the two-pass flush) or one (32, the default: the single-pass flush)."""
    from cute_kernels import mamba2_verify as MV
    monkeypatch.setenv(MV.FOLD_SMEM_ENV, fold_kib)
    _variant_fuzz("mamba2", pair, M2, dict(L=32, max_draft=8), 80, seed, f"L32 fold {fold_kib} KiB")


@pytest.mark.parametrize("pair", ["fp8/fp16sr", "bf16/fp32", "fp16sr", "nvfp4/fp16sr"])
def test_fuzz_mamba2_verify_pair_roll(pair, seed, monkeypatch):
    """The verify's flush with the pair fold and its two chunk encodes rolled
    (REPLAYSSM_M2_FOLD_PAIR=1, REPLAYSSM_M2_PAIR_ROLL=1) against the twin, L16, T in {3, 8}."""
    from cute_kernels import mamba2_replay as MR
    monkeypatch.setenv(MR.FOLD_PAIR_ENV, "1")
    monkeypatch.setenv(MR.PAIR_ROLL_ENV, "1")
    _variant_fuzz("mamba2", pair, M2, dict(L=16, max_draft=8), 60, seed, "pair roll")


@pytest.mark.parametrize("pair,preload", [(p, "0") for p in ("nvfp4/fp16sr", "nvfp4/fp32",
                                                              "fp8/fp32", "fp8/fp16sr",
                                                              "bf16/fp32", "nvfp4sr/fp16sr")]
                         + [("nvfp4/fp16sr", "1")])
def test_fuzz_mamba2_verify_frag_split(pair, preload, seed, monkeypatch):
    """The split pairs' fragment flush (REPLAYSSM_M2V_FRAG_SPLIT=1: fold and dots on tf32
    tensor cores, S_new through sS to the chunk encoders; REPLAYSSM_M2V_FRAG_PRELOAD its next
    head's hi loaded before the encode pass) in the split launch (forced at this batch by
    REPLAYSSM_M2V_SPLIT=1) against the twin, L16, T in {3, 8}: stored copies within one unit of
    their format, outputs within the fuzz's tolerance; the flush launch built is it."""
    from cute_kernels import mamba2_verify as MV
    monkeypatch.setenv(MV.SPLIT_ENV, "1")
    monkeypatch.setenv(MV.FRAG_SPLIT_ENV, "1")
    monkeypatch.setenv(MV.FRAG_PRELOAD_ENV, preload)
    # 4 heads per CTA (b256's): sS / sRed / x_j reuse across heads, the preload's next head
    # (added after the session 47 GPU runs, which had 1 head per CTA here; review finding)
    monkeypatch.setenv("REPLAYSSM_M2_HEADS_PER_CTA", "4")
    _variant_fuzz("mamba2", pair, M2, dict(L=16, max_draft=8), 60, seed, "frag split")
    ops = [MV._CACHE.get(k).meta["op"] for k in MV._CACHE.keys()]
    name = MV.parse_pair(pair).name
    assert any(o.frag_split and o.frag_preload == (preload == "1") and o.pair.name == name
               and o.T == 8 for o in ops), pair


@pytest.mark.parametrize("pair", ["fp32", "nvfp4/fp16sr", "fp8/fp32"])
@pytest.mark.parametrize("split", ["0", "1"])
@pytest.mark.parametrize("bsmem", ["0", "1"])
def test_fuzz_mamba2_verify_more_than_8_drafts_at_4_heads(pair, split, bsmem, seed, monkeypatch):
    """T in {9, 12, 16} (MAX_DRAFT) at 4 heads per CTA, single and split launch, against the
    twin, L16: until session 47 the fp32 pair's fragment flush (8 queries in its dots' n8 tile)
    was built at T > 8 too and left drafts 9.. unwritten -- no GPU test drew T > 8 at 2 or more
    heads per CTA. Since session 48 its dots take two query tiles there: the fp32 builds drawn
    here are fragment flushes (asserted); with REPLAYSSM_M2V_MMA_MAX_T=16 (session 49; the
    default since session 51) every pair's non-flush state dots take the tensor cores there
    too, two n8 query tiles (asserted), their B fragments in registers or (``bsmem``; by
    default since session 51 in a split's non-flush launch) in shared memory between heads."""
    from cute_kernels import mamba2_verify as MV
    monkeypatch.setenv("REPLAYSSM_M2_HEADS_PER_CTA", "4")
    monkeypatch.setenv(MV.SPLIT_ENV, split)
    monkeypatch.setenv(MV.MMA_BSMEM_ENV, bsmem)
    monkeypatch.setenv(MV.MMA_MAX_T_ENV, str(MV.MAX_DRAFT))
    if pair == "fp32":
        for T in (9, 12, 16):
            op = MV.Mamba2VerifyKernel(pair, "bfloat16", "float32", M2["H"], M2["P"], M2["N"],
                                       M2["G"], 16, 32, T, True, False, True, True, 4)
            assert op.frag, T
    for T in (9, 12, 16):
        op = MV.Mamba2VerifyKernel(pair, "bfloat16", "float32", M2["H"], M2["P"], M2["N"],
                                   M2["G"], 16, 32, T, True, False, True, True, 4)
        assert (op.mma_w or op.mma_lo) and op.mma_nq == 2, (pair, T)
        assert op.mma_bsmem == (bsmem == "1"), (pair, T)
    cfg = dict(L=16, max_draft=16)
    _cute_verify_or_skip("mamba2", pair, torch.bfloat16, M2, **cfg)
    r = spec_fuzz("mamba2", pair, 40, backend="cute", device="cuda", dims=M2, **cfg, batch=6,
                  pool=17, act=torch.bfloat16, seed=seed, drafts=(9, 12, 16), exact_rel=2e-2,
                  exact_oracle=(pair == "fp32"))
    print(f"mamba2 T > 8, 4 heads/CTA, split {split}, {pair}: {r}")
    assert r.steps == 40 and r.flush_rows >= 3, r


@pytest.mark.parametrize("pair", ["fp8/fp32", "bf16/fp32"])
def test_fuzz_mamba2_verify_drafts_buffer_at_4_heads(pair, seed, monkeypatch):
    """The flush rows' drafts buffer in the 4-heads-per-CTA build at T <= 4 (the b256 build: its
    smem takes 7 -> 6 CTAs/SM, the register hint 4, so it is on since session 23) against the
    twin, L16 with an 8-draft ring (Nemotron-3-Super's per-head shape)."""
    from cute_kernels import mamba2_verify as MV
    monkeypatch.setenv("REPLAYSSM_M2_HEADS_PER_CTA", "4")
    for T in (2, 4):
        op = MV.Mamba2VerifyKernel(pair, "bfloat16", "float32", M2["H"], M2["P"], M2["N"],
                                   M2["G"], 16, 24, T, True, False, True, True, 4)
        assert op.xd and op.min_blocks_per_mp == 4 and op._smem_ctas() < 8, (pair, T)
    cfg = dict(L=16, max_draft=8)
    _cute_verify_or_skip("mamba2", pair, torch.bfloat16, M2, **cfg)
    r = spec_fuzz("mamba2", pair, 80, backend="cute", device="cuda", dims=M2, **cfg, batch=6,
                  pool=17, act=torch.bfloat16, seed=seed, drafts=(2, 4), exact_rel=2e-2,
                  exact_oracle=False)
    print(f"mamba2 4 heads/CTA {pair}: {r}")
    assert r.steps == 80 and r.flush_rows >= 3, r


@pytest.mark.parametrize("pair", ["fp32", "nvfp4/fp16sr", "fp8/fp32"])
def test_fuzz_mamba2_verify_p80(pair, seed):
    """Nano-4B's head size P = 80 (128 % P != 0): the outputs by the first 80 threads, each all
    T of its p (out_ilp, since session 23; before, one dependent entry loop per output), in the
    non-flush and the flush rows' outputs; L16 with an 8-draft ring, T in {3, 8}."""
    from cute_kernels import mamba2_verify as MV
    dims = dict(H=8, P=80, N=128, G=2)
    assert MV.Mamba2VerifyKernel(pair, "bfloat16", "float32", 8, 80, 128, 2, 16, 24, 8, True,
                                 False, True, True, 4).out_ilp
    _variant_fuzz("mamba2", pair, dims, dict(L=16, max_draft=8), 60, seed, "P80")


@pytest.mark.parametrize("pair", ["fp32", "nvfp4/fp16sr", "fp8/fp32", "bf16/fp32"])
def test_fuzz_gdn_verify_l32(pair, seed):
    """The GDN verify at its largest buffer, L = 32, with T in {3, 8} (ring of 40 entries; the
    flush's L x L solve over up to 39 entries; CPU builds at T8: nvfp4/fp16sr 80 registers and
    1.4 KB of spills, fp32 128 and 80 B)."""
    _variant_fuzz("gdn", pair, GDN, dict(L=32, max_draft=8), 80, seed, "L32")
