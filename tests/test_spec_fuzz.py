"""Speculative-decoding fuzz on CPU (torch backend, tiny shapes): random T per call, random
acceptance 0..T, staggered rows, pad rows, scattered slots; the accepted-stream oracle (fp32 pair)
and the CPU twin (every pair listed). The fp32 Mamba-2 run covers the full 1000 steps; the others
run fewer to keep the file under a minute. The GPU variant (backend="cute", every pair) is in
tests/test_gpu_spec.py. Driver: tests/spec_fuzz.py."""
import pytest
import torch

from .spec_fuzz import FuzzMismatch, corrupt_live_entry, spec_fuzz


@pytest.fixture(autouse=True)
def one_cpu_thread():
    # tiny tensors: torch's intra-op threads cost ~70x more than the work on a 2-core runner
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("kind,steps", [("mamba2", 1000), ("gdn", 300)])
def test_fp32_pair_matches_accepted_stream(kind, steps, seed):
    r = spec_fuzz(kind, "fp32", steps, seed=seed)
    assert r.steps == steps
    assert r.flush_rows > steps // 4, r            # flushes happen at their natural rate
    assert 0 < r.accepted_tokens < r.verified_tokens, r
    assert r.worst_exact_rel <= 5e-5 and r.final_state_rel <= 5e-5, (seed, r)


@pytest.mark.parametrize("pair", ["nvfp4/fp16sr", "fp8/fp32", "fp8sr", "bf16sr"])
@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_other_pairs_match_the_twin(kind, pair, seed):
    r = spec_fuzz(kind, pair, 60, seed=seed)
    assert r.steps == 60 and r.flush_rows > 0, r


@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_more_drafts_than_buffer(kind, seed):
    # max_draft > L: every verify with T > L flushes first; bf16 activations
    r = spec_fuzz(kind, "fp32", 80, L=2, max_draft=5, act=torch.bfloat16, seed=seed, exact_rel=1e-2)
    assert r.flush_rows > 40, r


@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_teeth_twin_catches_one_corrupted_buffer_entry(kind, seed):
    hook = corrupt_live_entry(at_step=5, both=False)
    with pytest.raises(FuzzMismatch, match="buffer"):
        spec_fuzz(kind, "fp32", 60, seed=seed, corrupt=hook)
    assert hook.state["done"]


@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_teeth_accepted_stream_catches_a_corruption_the_twin_shares(kind, seed):
    # the twin gets the same damage, so only the standard decode of the accepted stream can see it
    hook = corrupt_live_entry(at_step=5, both=True)
    with pytest.raises(FuzzMismatch, match="accepted stream"):
        spec_fuzz(kind, "fp32", 80, seed=seed, corrupt=hook)
    assert hook.state["done"]


def test_teeth_pad_row_write_is_caught(seed, monkeypatch):
    # a verify that writes the outputs of pad rows must fail the fuzz
    import replayssm_lp as R
    real = R.mamba2_verify

    def leaky(cache, x, *a, out=None, **kw):
        res = real(cache, x, *a, out=out, **kw)
        out.nan_to_num_(0.0)
        return res
    monkeypatch.setattr(R, "mamba2_verify", leaky)
    with pytest.raises(FuzzMismatch, match="pad row"):
        spec_fuzz("mamba2", "fp32", 30, seed=seed)


# ------------------------------------------------------------------------------------------------
# the twin's tolerances: a fold that only sums in another order passes, a damaged element fails
# ------------------------------------------------------------------------------------------------
def _m2_fold_reordered(cache, slots, h):
    """reference.mamba2_fold in another fp32 order: weights from suffix sums of the log decays
    (not differences of a forward cumsum), the total summed at once, entries accumulated from the
    newest to the oldest — what a kernel's scan / accumulation order does to the fold."""
    from replayssm_lp import reference as ref
    S0 = cache.decode_hi(slots)
    R = cache.ring
    phys = ref._logical_phys(cache, slots, R)
    valid = torch.arange(R)[None] < h[:, None]
    grp = ref._group_of_head(cache.nheads, cache.ngroups, slots.device)
    xs = ref._mask(ref._gather(cache.x_buf, slots, phys).float(), valid)
    Bs = ref._mask(ref._gather(cache.B_buf, slots, phys).float(), valid)[:, :, grp]
    dts = ref._mask(ref._gather(cache.dt_buf, slots, phys), valid)
    dA = ref._mask(ref._gather(cache.dA_buf, slots, phys), valid)               # [n, R, H]
    after = torch.flip(torch.cumsum(torch.flip(dA, [1]), 1), [1]) - dA          # Σ_{i > j}
    w = ref._mask(torch.exp(after) * dts, valid)
    acc = torch.exp(dA.sum(1))[..., None, None] * S0
    for j in reversed(range(R)):
        acc = acc + (w[:, j, :, None] * xs[:, j])[..., None] * Bs[:, j, :, None, :]
    return acc


def _perturb_test_folds(monkeypatch, how):
    """Make the folds of the cache under test (only) return ``how(cache, slots, h, S)``; returns
    the ``setup`` hook for spec_fuzz that names that cache."""
    from replayssm_lp import reference as ref
    who = {}
    for name in ("mamba2_fold", "gdn_fold"):
        real = getattr(ref, name)

        def fold(cache, slots, h, _real=real):
            S = _real(cache, slots, h)
            return how(cache, slots, h, S) if cache is who.get("test") else S
        monkeypatch.setattr(ref, name, fold)
    return lambda test, twin: who.__setitem__("test", test)


def _one_ulp(cache, slots, h, S):
    # every other element one fp32 ulp up: a last-bit fold difference everywhere
    up = torch.nextafter(S, torch.full_like(S, float("inf")))
    odd = (torch.arange(S.numel()) % 2 == 1).view(S.shape)
    return torch.where(odd, up, S)


@pytest.mark.parametrize("pair", ["fp32", "fp8/fp32", "nvfp4/fp8sr", "fp8rn", "nvfp4/fp16sr", "bf16sr"])
@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_twin_accepts_a_one_ulp_fold_difference(kind, pair, seed, monkeypatch):
    setup = _perturb_test_folds(monkeypatch, _one_ulp)
    # exact_buffers=False: GDN's u of the entries appended after a flush comes from the fold
    r = spec_fuzz(kind, pair, 40, seed=seed, exact_oracle=False, exact_buffers=False, setup=setup)
    assert r.steps == 40 and r.flush_rows > 0, r
    if pair != "bf16sr":   # (a 1-ulp fp32 change rarely moves an SR bf16 element; no fp32 scales)
        assert r.worst_units, r        # the perturbation reached the stored copies


@pytest.mark.parametrize("pair", ["fp32", "fp8/fp32", "nvfp4/fp8sr", "fp8rn"])
def test_twin_accepts_a_reordered_mamba2_fold(pair, seed, monkeypatch):
    # L = 16 folds (up to 16 entries, |Λ| up to ~30) as in the GPU 1000-step run
    setup = _perturb_test_folds(monkeypatch, lambda c, s, h, S: _m2_fold_reordered(c, s, h))
    r = spec_fuzz("mamba2", pair, 60, L=16, max_draft=8, seed=seed, exact_oracle=False,
                  exact_buffers=False, setup=setup)
    assert r.flush_rows > 0 and r.worst_units, r


@pytest.mark.parametrize("pair", ["fp32", "fp8/fp32", "nvfp4/fp8sr", "fp16sr"])
@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_twin_rejects_one_damaged_stored_element(kind, pair, seed, monkeypatch):
    # one element of one fold off by 2e-3 of its matrix's magnitude (~1.7e4 fp32 units of it; a
    # couple of units of the low-precision formats at the matrix's largest elements)
    def damage(cache, slots, h, S):
        S = S.clone()
        S[0, 0, 0, 0] = S[0, 0].abs().max() * (1.0 if S[0, 0, 0, 0] < 0 else -1.0)
        return S
    setup = _perturb_test_folds(monkeypatch, damage)
    # (GDN: the u computed from the damaged fold may be what is seen first)
    with pytest.raises(FuzzMismatch, match="stored" if kind == "mamba2" else "stored|u_buf"):
        spec_fuzz(kind, pair, 20, seed=seed, exact_oracle=False, exact_buffers=False, setup=setup)


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "bf16", "fp8", "nvfp4"])
def test_compare_stored_one_ulp_passes_a_damaged_element_fails(fmt, seed):
    # the comparison itself, on encodings of one fp32 state and of its 1-ulp / damaged variants
    from replayssm_lp import formats as F
    from .spec_fuzz import compare_stored, fold_tolerance
    S = torch.randn(3, 2, 16, 32) * torch.exp2(torch.randint(-6, 7, (3, 2, 1, 1)).float())
    tol = fold_tolerance(torch.full((3, 2), 10.0))
    up = torch.where(torch.rand(S.shape) < 0.5, torch.nextafter(S, torch.full_like(S, 1e30)), S)
    enc = lambda t: F.encode(t, fmt)  # noqa: E731
    problem, _ = compare_stored(enc(up), enc(S), fmt, tol)
    assert problem is None, problem
    bad = S.clone()
    i = int(S[1, 1, 3].abs().argmax())
    bad[1, 1, 3, i] = -S[1, 1, 3, i]                 # one element's sign (the row's largest)
    problem, _ = compare_stored(enc(bad), enc(S), fmt, tol)
    assert problem is not None


# ------------------------------------------------------------------------------------------------
# the GPU fuzz's configurations against the CuTe verify kernels' support (pure Python, no GPU)
# ------------------------------------------------------------------------------------------------
def _verify_modules():
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")
    from cute_kernels import gdn_verify as GV
    from cute_kernels import mamba2_verify as MV
    return {"mamba2": MV, "gdn": GV}


def _cpu_cache(kind, dims, pair, L, max_draft, act=torch.bfloat16):
    import replayssm_lp as R
    if kind == "mamba2":
        return R.Mamba2ReplayCache(3, dims["H"], dims["P"], dims["N"], dims["G"], precision=pair,
                                   buffer_len=L, max_draft=max_draft, act_dtype=act)
    return R.GDNReplayCache(3, dims["H"], dims["HV"], dims["K"], dims["V"], precision=pair,
                            buffer_len=L, max_draft=max_draft, act_dtype=act)


@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_gpu_fuzz_configs_are_inside_the_verify_kernels_support(kind):
    """tests/test_gpu_spec.py must not ask a CuTe verify kernel for a configuration it declines
    (that raised for 18 GDN cases: L = 4 with max_draft = 8)."""
    mods = _verify_modules()
    from . import test_gpu_spec as G
    dims = G.M2 if kind == "mamba2" else G.GDN
    for pair in G.ALL_PAIRS:
        cfg = G.FUZZ_CFG[kind]
        assert mods[kind].supports_cache(_cpu_cache(kind, dims, pair, **cfg)), (kind, pair, cfg)
        d = G.pair_drafts(kind, pair)
        assert d is None or all(1 <= t <= cfg["max_draft"] for t in d), (pair, d)
    assert mods[kind].supports_cache(_cpu_cache(kind, dims, "fp32", **G.LONG_CFG, act=torch.float32))
    # every T in 1..8 is met across the every-pair fuzz; T > L on Mamba-2
    seen = set().union(*(G.pair_drafts(kind, p) or range(1, 9) for p in G.ALL_PAIRS))
    assert seen == set(range(1, 9)), seen
    if kind == "mamba2":
        assert max(seen) > G.FUZZ_CFG["mamba2"]["L"]


def test_gdn_verify_cute_unsupported_config_raises_clearly(monkeypatch):
    """backend="cute" on a configuration the GDN verify kernel declines raises the clear error (CUDA
    availability faked: the support check is pure Python, the kernel never launches)."""
    _verify_modules()
    import replayssm_lp as R
    import replayssm_lp.cute_ops  # noqa: F401  (registers the kernels)
    from replayssm_lp import backends
    monkeypatch.setattr(backends, "_device_reason", lambda dev: None)
    b, T, act = 2, 3, torch.float32
    args = lambda c: (torch.randn(b, T, c.H, c.K), torch.randn(b, T, c.H, c.K),  # noqa: E731
                      torch.randn(b, T, c.HV, c.V))
    kw = lambda c: dict(A_log=torch.zeros(c.HV), a=torch.zeros(b, T, c.HV),  # noqa: E731
                        dt_bias=torch.zeros(c.HV), b=torch.zeros(b, T, c.HV),
                        state_batch_indices=torch.tensor([0, 2], dtype=torch.int32),
                        out=torch.zeros(b, T, c.HV, c.V), backend="cute")
    try:
        for L, md, K in ((4, 8, 128), (8, 8, 64), (40, 8, 128)):   # max_draft > L, K != 128, L > 32
            c = R.GDNReplayCache(3, 2, 4, K, 128, precision="fp32", buffer_len=L, max_draft=md,
                                 act_dtype=act)
            with pytest.raises(RuntimeError, match="backend='cute' requested for gdn_verify, but "
                                                   "the CuTe gdn_verify kernel does not support "
                                                   "this configuration"):
                R.gdn_verify(c, *args(c), **kw(c))
        # a supported configuration resolves to the kernel (not launched here)
        ok = R.GDNReplayCache(3, 2, 4, 128, 128, precision="fp32", buffer_len=8, max_draft=8,
                              act_dtype=act)
        assert backends.resolve("cute", "gdn_verify", ok) is not None
    finally:
        monkeypatch.undo()
        backends.clear_memo()


@pytest.mark.parametrize("L,max_draft", [(4, 4), (2, 5), (6, 3)])
def test_committed_entries_stay_within_the_fold_bound(L, max_draft, seed):
    """The Mamba-2 kernels size the flush's fold for ``fold_entries_max(L, R)`` = max(L, D)
    entries (not R - 1) and clamp h to it: every cursor the reference leaves after a verify and
    commit must be inside, whatever T and acceptance (T > L flushes first, then may commit T)."""
    from cute_kernels.mamba2_replay import fold_entries_max
    seen = {"max": 0}

    def check(step, test, twin, slots):
        for c in (test, twin):
            wp = int(c.write_pos.max())
            assert wp <= fold_entries_max(c.buffer_len, c.ring) == max(L, max_draft), (step, wp)
            seen["max"] = max(seen["max"], wp)

    spec_fuzz("mamba2", "fp32", 120, L=L, max_draft=max_draft, seed=seed, corrupt=check)
    assert seen["max"] == max(L, max_draft)          # the bound is reached, so it is tight
