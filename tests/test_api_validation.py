"""Every argument is validated before any work, with an error naming it; cache management."""
import pytest
import torch

import replayssm_lp as R
from replayssm_lp.backends import cute_unavailable_reason

H, P, N, G = 4, 8, 32, 2


def _m2(b=3, T=None, act=torch.float32):
    lead = (b,) if T is None else (b, T)
    return dict(x=torch.randn(*lead, H, P, dtype=act), dt=torch.randn(*lead, H), A=-torch.rand(H),
                B=torch.randn(*lead, G, N, dtype=act), C=torch.randn(*lead, G, N, dtype=act))


@pytest.fixture
def cache():
    return R.Mamba2ReplayCache(6, H, P, N, G, precision="nvfp4/fp16sr", buffer_len=4, max_draft=2,
                               act_dtype=torch.float32)


@pytest.mark.parametrize("field,bad,match", [
    ("x", torch.randn(3, H, P + 1), "x must have shape"),
    ("x", torch.randn(3, H, P, dtype=torch.float64), "x must have dtype"),
    ("dt", torch.randn(3, H + 1), "dt must have shape"),
    ("A", torch.randn(H + 1), "A must have shape"),
    ("A", torch.randn(H, P), "A must have shape"),
    ("B", torch.randn(3, G + 1, N), "B must have shape"),
    ("C", torch.randn(3, G, N - 1), "C must have shape"),
    ("D", torch.randn(H - 1), "D must have shape"),
    ("z", torch.randn(3, H, P - 1), "z must have shape"),
    ("dt_bias", torch.randn(2), "dt_bias must have shape"),
    ("state_batch_indices", torch.tensor([0, 1, 2]), "state_batch_indices must have dtype"),
    ("state_batch_indices", torch.tensor([0, 1], dtype=torch.int32), "state_batch_indices must have shape"),
    ("state_batch_indices", torch.tensor([0, 6, 1], dtype=torch.int32), "slots in"),
    ("state_batch_indices", torch.tensor([0, -2, 1], dtype=torch.int32), "slots in"),
    ("state_batch_indices", torch.tensor([4, -1, 4], dtype=torch.int32), r"slot 4 is at rows \[0, 2\]"),
    ("out", torch.randn(3, H, P, dtype=torch.bfloat16), "out must have dtype"),
    ("pad_slot_id", 3, "pad_slot_id must be a negative int"),
    ("backend", "triton", "backend must be one of"),
    ("x", "not a tensor", "x must be a torch.Tensor"),
])
def test_mamba2_decode_validation(cache, field, bad, match):
    kw = _m2()
    kw[field] = bad
    before = cache.write_pos.clone(), cache.x_buf.clone()
    with pytest.raises((ValueError, TypeError), match=match):
        R.mamba2_decode(cache, **kw)
    assert torch.equal(before[0], cache.write_pos) and torch.equal(before[1], cache.x_buf)


def test_vllm_tied_views_accepted(cache):
    kw = _m2()
    kw["A"] = kw["A"][:, None, None].expand(H, P, N)
    kw["dt"] = kw["dt"][..., None].expand(3, H, P)
    kw["D"] = torch.randn(H)[:, None].expand(H, P)
    out = R.mamba2_decode(cache, **kw)
    assert torch.isfinite(out).all()
    kw["A"] = torch.randn(H, P)  # materialised, not tied
    with pytest.raises(ValueError, match="A must have shape"):
        R.mamba2_decode(cache, **kw)
    # a tied dt's last size is headdim (it is never read, but a wrong one is a wrong call)
    kw = _m2()
    kw["dt"] = kw["dt"][..., None].expand(3, H, P - 1)
    msg = rf"stride 0 on headdim, size {P}\).*got size {P - 1}, stride 0"
    with pytest.raises(ValueError, match=msg):
        R.mamba2_decode(cache, **kw)
    with pytest.raises(ValueError, match=msg):
        R.mamba2_standard_decode(torch.zeros(6, H, P, N), **kw)
    kv = _m2(T=2)
    kv["dt"] = kv["dt"][..., None].expand(3, 2, H, P - 1)
    with pytest.raises(ValueError, match=msg):
        R.mamba2_verify(cache, **kv)
    with pytest.raises(ValueError, match=msg):
        R.mamba2_snapshot_verify(torch.zeros(6, H, P, N), **kv,
                                 state_indices=torch.arange(6, dtype=torch.int32).view(3, 2))


def test_verify_and_commit_validation(cache):
    with pytest.raises(ValueError, match="T=3 draft tokens"):
        R.mamba2_verify(cache, **_m2(T=3))
    with pytest.raises(ValueError, match=r"x must have shape \[batch, T"):
        R.mamba2_verify(cache, **_m2())
    R.mamba2_verify(cache, **_m2(T=2))
    with pytest.raises(ValueError, match="num_accepted_tokens must be in"):
        R.commit(cache, torch.tensor([0, 3, 1], dtype=torch.int32))
    with pytest.raises(TypeError, match="num_accepted_tokens must have dtype"):
        R.commit(cache, torch.tensor([0, 1, 1]))
    with pytest.raises(TypeError, match="cache must be"):
        R.commit("cache", torch.tensor([0], dtype=torch.int32))
    R.commit(cache, torch.tensor([2, 0, 1], dtype=torch.int32))
    assert cache.write_pos[:3].tolist() == [2, 0, 1] and cache.pending.sum() == 0
    # a pad row's count is ignored (the device kernel skips pad rows too), a valid row's is not
    sbi = torch.tensor([3, -1, 4], dtype=torch.int32)
    R.mamba2_verify(cache, **_m2(T=2), state_batch_indices=sbi)
    before = cache.write_pos.clone()
    with pytest.raises(ValueError, match=r"num_accepted_tokens must be in \[0, 2\], got \[7\]"):
        R.commit(cache, torch.tensor([7, 9, 1], dtype=torch.int32), sbi)
    assert torch.equal(cache.write_pos, before)
    R.commit(cache, torch.tensor([1, 9, 2], dtype=torch.int32), sbi)
    assert (cache.write_pos - before).tolist() == [0, 0, 0, 1, 2, 0] and cache.pending.sum() == 0


def test_gdn_validation():
    c = R.GDNReplayCache(4, 2, 4, 32, 16, precision="fp32", buffer_len=4, act_dtype=torch.float32)
    q, k, v = torch.randn(2, 2, 32), torch.randn(2, 2, 32), torch.randn(2, 4, 16)
    g, beta = -torch.rand(2, 4), torch.rand(2, 4)
    R.gdn_decode(c, q, k, v, g, beta)
    with pytest.raises(ValueError, match="v must have shape"):
        R.gdn_decode(c, q, k, torch.randn(2, 4, 17), g, beta)
    with pytest.raises(ValueError, match="raw gate inputs"):
        R.gdn_decode(c, q, k, v, None, beta)
    with pytest.raises(ValueError, match="either g"):
        R.gdn_decode(c, q, k, v, g, beta, A_log=torch.randn(4), a=torch.randn(2, 4))
    with pytest.raises(ValueError, match=r"beta is None: the raw b \[batch, HV\] is required"):
        R.gdn_decode(c, q, k, v, g)
    with pytest.raises(ValueError, match=r"beta is None: the raw b \[batch, HV\] is required"):
        R.gdn_standard_decode(torch.zeros(4, 4, 16, 32), q, k, v, g)
    with pytest.raises(TypeError, match="cache must be a GDNReplayCache"):
        R.gdn_decode(R.Mamba2ReplayCache(2, 2, 8, 16), q, k, v, g, beta)
    with pytest.raises(ValueError, match="state_layout"):
        R.gdn_standard_decode(torch.zeros(2, 4, 16, 32), q, k, v, g, beta, state_layout="xy")


def test_gdn_fast_gates_refuse_g_with_raw_inputs():
    """The CUDA fast path's gate check (a unit call on CPU tensors) accepts exactly the general
    path's forms: g with dt_bias (or A_log, a) goes to the general path, which refuses it."""
    from replayssm_lp.ops import _gdn_gates_fast
    g, beta, dev = -torch.rand(2, 4), torch.rand(2, 4), torch.device("cpu")
    assert _gdn_gates_fast(g, beta, None, None, None, None, (2, 4), (4,), dev) is not None
    for raw in (dict(dt_bias=torch.rand(4)), dict(A_log=torch.rand(4)), dict(a=torch.rand(2, 4))):
        kw = {**dict(A_log=None, a=None, dt_bias=None), **raw}
        assert _gdn_gates_fast(g, beta, kw["A_log"], kw["a"], kw["dt_bias"], None, (2, 4), (4,),
                               dev) is None, raw
    c = R.GDNReplayCache(4, 2, 4, 32, 16, precision="fp32", buffer_len=4, act_dtype=torch.float32)
    q, k, v = torch.randn(2, 2, 32), torch.randn(2, 2, 32), torch.randn(2, 4, 16)
    with pytest.raises(ValueError, match="either g"):
        R.gdn_decode(c, q, k, v, g, beta, dt_bias=torch.rand(4))


def test_cache_construction_errors():
    with pytest.raises(ValueError, match="buffer_len must be in"):
        R.Mamba2ReplayCache(2, 2, 8, 16, buffer_len=65)
    with pytest.raises(ValueError, match="buffer_len must be in"):
        R.Mamba2ReplayCache(2, 2, 8, 16, buffer_len=0)
    with pytest.raises(ValueError, match="max_draft must be in"):
        R.Mamba2ReplayCache(2, 2, 8, 16, max_draft=17)
    with pytest.raises(ValueError, match="unknown precision pair 'fp4'.*nvfp4/fp16sr"):
        R.Mamba2ReplayCache(2, 2, 8, 16, precision="fp4")
    with pytest.raises(ValueError, match="multiple of 16"):
        R.Mamba2ReplayCache(2, 2, 8, 24, precision="nvfp4sr")
    with pytest.raises(ValueError, match="multiple of ngroups"):
        R.Mamba2ReplayCache(2, 3, 8, 16, ngroups=2)
    with pytest.raises(ValueError, match="multiple of num_k_heads"):
        R.GDNReplayCache(2, 3, 4, 16, 16)
    with pytest.raises(TypeError, match="buffer_len must be an int"):
        R.Mamba2ReplayCache(2, 2, 8, 16, buffer_len=4.0)
    with pytest.raises(ValueError, match="device must be a torch device this machine has, got 'banana'"):
        R.Mamba2ReplayCache(2, 2, 8, 16, device="banana")
    with pytest.raises(TypeError, match="device must be a torch.device, str or int, got float"):
        R.GDNReplayCache(2, 2, 4, 16, 16, device=3.5)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="device must be a torch device this machine has"):
            R.GDNReplayCache(2, 2, 4, 16, 16, device="cuda")


def test_init_materialize_reset_bytes(seed):
    c = R.Mamba2ReplayCache(5, H, P, N, G, precision="fp32", buffer_len=4, act_dtype=torch.float32)
    S = torch.randn(2, H, P, N)
    c.init_from_state([3, 1], S)
    assert torch.equal(c.materialize([3, 1]), S)
    assert c.flush_count.tolist() == [0, 1, 0, 1, 0]
    with pytest.raises(ValueError, match="S must have shape"):
        c.init_from_state([0], S)
    with pytest.raises(ValueError, match="slots must be in"):
        c.materialize([5])
    with pytest.raises(ValueError, match="must not repeat"):
        c.init_from_state([1, 1], S)
    c.reset([3])
    assert (c.materialize([3]) == 0).all() and c.flush_count[3] == 0
    # bytes: fp32 state + ring (x, B act fp32, dt, dA) + five int32 cursors and the row-order
    # scratch (5 int32 a slot; 16 B were counted until session 45)
    Rg = c.ring
    exp = H * P * N * 4 + H * Rg * P * 4 + G * Rg * N * 4 + 2 * H * Rg * 4 + 40
    assert c.bytes_per_slot() == exp
    split = R.Mamba2ReplayCache(5, H, P, N, G, precision="nvfp4/fp16sr", buffer_len=4, act_dtype=torch.float32)
    assert split.bytes_per_slot() - (exp - H * P * N * 4) == H * P * N * 2 + H * P * N // 2 + H * P * N // 16 + H * 4


def test_gdn_kv_layout_roundtrip(seed):
    c = R.GDNReplayCache(3, 2, 4, 32, 16, precision="fp32", buffer_len=4, act_dtype=torch.float32)
    S_kv = torch.randn(1, 4, 32, 16)
    c.init_from_state([2], S_kv, layout="kv")
    assert torch.equal(c.materialize([2], layout="kv"), S_kv)
    assert torch.equal(c.materialize([2]), S_kv.transpose(-1, -2))


def test_standard_decode_kv_layout_matches_vk(seed):
    q, k, v = torch.randn(3, 2, 32), torch.randn(3, 2, 32), torch.randn(3, 4, 16)
    a, b, A_log = torch.randn(3, 4), torch.randn(3, 4), torch.randn(4)
    S = torch.randn(5, 4, 16, 32)
    S_kv = S.transpose(-1, -2).contiguous()
    sbi = torch.tensor([4, -1, 0], dtype=torch.int32)
    o1 = R.gdn_standard_decode(S, q, k, v, A_log=A_log, a=a, b=b, state_batch_indices=sbi)
    o2 = R.gdn_standard_decode(S_kv, q, k, v, A_log=A_log, a=a, b=b, state_batch_indices=sbi, state_layout="kv")
    assert torch.allclose(o1, o2, atol=1e-6) and torch.allclose(S, S_kv.transpose(-1, -2), atol=1e-6)
    assert (o1[1] == 0).all()


def test_backend_resolution_on_cpu(cache):
    assert cute_unavailable_reason(torch.device("cpu")) is not None
    with pytest.raises(RuntimeError, match="backend='cute'"):
        R.mamba2_decode(cache, **_m2(), backend="cute")
    R.mamba2_decode(cache, **_m2(), backend="auto")  # falls back to torch


def test_cute_plan_rejects_pools_beyond_32bit_offsets():
    """The CuTe kernels address cache tensors with 32-bit offsets: a tensor with more elements
    is refused (naming it) when the launchers first plan the cache, before any launch."""
    from replayssm_lp._validate import MAX_KERNEL_ELEMENTS, cache_plan
    c = R.GDNReplayCache(3, 2, 4, 32, 16, precision="nvfp4/fp16sr", buffer_len=4,
                         act_dtype=torch.float32)
    cache_plan(c)                                               # a small pool plans
    big = torch.empty(1, dtype=torch.uint8).expand(MAX_KERNEL_ELEMENTS + 1)   # no memory
    c.__dict__["u_buf"] = big
    with pytest.raises(ValueError, match=r"cache\.u_buf has 2147483648 elements"):
        cache_plan(c)
    c2 = R.GDNReplayCache(3, 2, 4, 32, 16, precision="nvfp4/fp16sr", buffer_len=4,
                          act_dtype=torch.float32)
    c2.lo.__dict__["data"] = big
    with pytest.raises(ValueError, match=r"cache\.lo\.data"):
        cache_plan(c2)


def test_duplicate_slots_rejected_everywhere(cache):
    """Two valid rows on one slot would both update it: every op that takes state_batch_indices
    refuses it on CPU tensors, before any work (pad rows may repeat the pad id)."""
    dup = torch.tensor([1, -1, 1], dtype=torch.int32)
    before = [t.clone() for t in (cache.write_pos, cache.x_buf, cache.pending)]
    with pytest.raises(ValueError, match="own slot"):
        R.mamba2_verify(cache, **_m2(T=2), state_batch_indices=dup)
    with pytest.raises(ValueError, match="own slot"):
        R.commit(cache, torch.tensor([1, 0, 1], dtype=torch.int32), dup)
    state = torch.zeros(6, H, P, N)
    with pytest.raises(ValueError, match="own slot"):
        R.mamba2_standard_decode(state, **_m2(), state_batch_indices=dup)
    assert all(torch.equal(a, b) for a, b in zip(before, (cache.write_pos, cache.x_buf,
                                                           cache.pending)))
    assert not state.any()
    pads = torch.tensor([-1, 2, -1], dtype=torch.int32)
    R.mamba2_decode(cache, **_m2(), state_batch_indices=pads)
    g = R.GDNReplayCache(4, 2, 4, 16, 16, precision="fp8/fp32", buffer_len=4,
                         act_dtype=torch.float32)
    q, k, v = torch.randn(2, 2, 16), torch.randn(2, 2, 16), torch.randn(2, 4, 16)
    with pytest.raises(ValueError, match="own slot"):
        R.gdn_decode(g, q, k, v, g=-torch.rand(2, 4), beta=torch.rand(2, 4),
                     state_batch_indices=torch.tensor([3, 3], dtype=torch.int32))


def test_audit_gaps_refused_before_any_work(cache):
    """Inputs that used to pass silently (an API audit): each is refused with an error naming the
    argument, and nothing the call could write has changed."""
    snap = lambda: [t.clone() for t in (cache.write_pos, cache.pending, cache.x_buf,  # noqa: E731
                                        cache.hi.data, cache.flush_count)]
    before = snap()
    S = torch.randn(2, H, P, N)
    # slots must be integers (floats / bools used to be truncated to other slots)
    for slots in ([1.7, 3.2], torch.tensor([True, False]), torch.tensor([0.5])):
        with pytest.raises(TypeError, match="slots must be"):
            cache.init_from_state(slots, S)
    with pytest.raises(TypeError, match="slots must be"):
        cache.materialize([0.5])
    # Mamba-2 states have one layout (a "kv" state used to be stored untransposed)
    for layout in ("kv", "garbage"):
        with pytest.raises(ValueError, match="layout must be 'default'"):
            cache.init_from_state([0, 1], S, layout=layout)
    with pytest.raises(TypeError, match="S must be a torch.Tensor"):
        cache.init_from_state([0], [[1.0]])
    with pytest.raises(ValueError, match="backend must be one of"):
        cache.init_from_state([0, 1], S, backend="garbage")
    # a failed copy of S leaves the slots as they were (they used to be reset first)
    with pytest.raises((NotImplementedError, RuntimeError)):
        cache.init_from_state([0, 1], torch.randn(2, H, P, N, device="meta"))
    # an out that overlaps itself
    with pytest.raises(ValueError, match="out is written by this op"):
        R.mamba2_decode(cache, **_m2(), out=torch.zeros(1, 1, P).expand(3, H, P))
    assert all(torch.equal(a, b) for a, b in zip(before, snap()))
    # commit: n above what the last verify appended (used to be clamped silently on CPU)
    R.mamba2_verify(cache, **_m2(T=1))
    with pytest.raises(ValueError, match="exceed the drafts"):
        R.commit(cache, torch.tensor([2, 1, 1], dtype=torch.int32))
    assert cache.pending[:3].tolist() == [1, 1, 1]
    R.commit(cache, torch.tensor([1, 0, 1], dtype=torch.int32))
    with pytest.raises(ValueError, match="exceed the drafts"):
        R.commit(cache, torch.tensor([1, 0, 0], dtype=torch.int32))    # no verify since
    # a standard decode into a state pool whose slots share memory
    state = torch.zeros(1, H, P, N).expand(6, H, P, N)
    with pytest.raises(ValueError, match="state is written by this op"):
        R.mamba2_standard_decode(state, **_m2(), state_batch_indices=torch.tensor(
            [0, 1, 2], dtype=torch.int32))
    # GDN: dt_bias belongs to the raw gates; with g it used to be ignored
    g = R.GDNReplayCache(4, 2, 4, 16, 16, precision="fp8/fp32", buffer_len=4,
                         act_dtype=torch.float32)
    q, k, v = torch.randn(2, 2, 16), torch.randn(2, 2, 16), torch.randn(2, 4, 16)
    with pytest.raises(ValueError, match="either g"):
        R.gdn_decode(g, q, k, v, g=-torch.rand(2, 4), beta=torch.rand(2, 4),
                     dt_bias=torch.randn(99))
    with pytest.raises(ValueError, match="either g"):
        R.gdn_standard_decode(torch.zeros(4, 4, 16, 16), q, k, v, g=-torch.rand(2, 4),
                              beta=torch.rand(2, 4), dt_bias=torch.randn(4))
    # snapshot verify: a real row reading a pad entry (more drafts accepted than it has) used
    # to be skipped as a pad row
    st = torch.zeros(6, H, P, N)
    idx = torch.tensor([[0, 1, -1], [3, 4, 5]], dtype=torch.int32)
    n = torch.tensor([3, 1], dtype=torch.int32)
    with pytest.raises(ValueError, match="point at pad entries"):
        R.mamba2_snapshot_verify(st, **_m2(b=2, T=3), state_indices=idx, num_accepted_tokens=n)
    with pytest.raises(ValueError, match="point at pad entries"):
        R.snapshot_accept(idx, n)
    assert not st.any()
    pad_row = torch.tensor([[-1, -1, -1], [3, 4, 5]], dtype=torch.int32)
    assert R.snapshot_accept(pad_row, n).tolist() == [-1, 3]         # a pad row stays one


def test_audit_scalars_refused(cache):
    """Scalar arguments from the same audit: GDN's scale (bools and non-finite values used to
    pass, a NaN spread into the row's state), a non-tensor dt (a raw AttributeError), the cache
    seed (floats truncated, strings accepted, overflow unnamed)."""
    g = R.GDNReplayCache(4, 2, 4, 16, 16, precision="fp8/fp32", buffer_len=4,
                         act_dtype=torch.float32)
    q, k, v = torch.randn(2, 2, 16), torch.randn(2, 2, 16), torch.randn(2, 4, 16)
    gates = dict(g=-torch.rand(2, 4), beta=torch.rand(2, 4))
    wp = g.write_pos.clone()
    for bad, err in ((True, TypeError), (float("nan"), ValueError), (float("inf"), ValueError),
                     ("0.1", TypeError)):
        with pytest.raises(err, match="scale must be"):
            R.gdn_decode(g, q, k, v, **gates, scale=bad)
        with pytest.raises(err, match="scale must be"):
            R.gdn_standard_decode(torch.zeros(4, 4, 16, 16), q, k, v, **gates, scale=bad)
    assert torch.equal(wp, g.write_pos)
    R.gdn_decode(g, q, k, v, **gates, scale=0.25)
    kw = _m2()
    kw["dt"] = kw["dt"].tolist()
    with pytest.raises(TypeError, match="dt must be a torch.Tensor"):
        R.mamba2_decode(cache, **kw)
    with pytest.raises(TypeError, match="dt must be a torch.Tensor"):
        R.mamba2_standard_decode(torch.zeros(6, H, P, N), **kw)
    for seed, err in ((1.7, TypeError), ("12", TypeError), (2 ** 64, ValueError)):
        with pytest.raises(err, match="seed must be"):
            R.Mamba2ReplayCache(2, H, P, N, G, precision="nvfp4/fp16sr", seed=seed)
    assert int(R.Mamba2ReplayCache(2, H, P, N, G, seed=-(2 ** 63)).seed) == -(2 ** 63)


def test_switch_arguments_must_be_bools(cache):
    """dt_softplus / use_qk_l2norm_in_kernel: True / False (numpy's bool and 0 / 1 too, the same
    results); a string such as "no", None, 2, a tensor or a float is a TypeError naming the
    argument before any work (truthiness used to take "no" as True) -- every entry point."""
    import numpy as np

    from replayssm_lp.nn import GDNDecodeBlock, Mamba2DecodeBlock
    from replayssm_lp.ops import prepare_gdn_decode, prepare_mamba2_decode
    m2 = lambda T=None: _m2(T=T)  # noqa: E731
    gdn = R.GDNReplayCache(4, 2, 4, 16, 16, precision="fp32", buffer_len=4, max_draft=2,
                           act_dtype=torch.float32)
    q, k, v = torch.randn(3, 2, 16), torch.randn(3, 2, 16), torch.randn(3, 4, 16)
    gates = dict(g=-torch.rand(3, 4), beta=torch.rand(3, 4))
    T2 = lambda t: t.unsqueeze(1).expand(t.shape[0], 2, *t.shape[1:]).contiguous()  # noqa: E731
    sbi = torch.tensor([0, 1, 2], dtype=torch.int32)
    si2 = torch.tensor([[0, 3], [1, 4], [2, 5]], dtype=torch.int32)
    calls = {
        "mamba2_decode": lambda f: R.mamba2_decode(cache, **m2(), dt_softplus=f),
        "mamba2_verify": lambda f: R.mamba2_verify(cache, **m2(T=2), dt_softplus=f),
        "mamba2_standard_decode": lambda f: R.mamba2_standard_decode(
            torch.zeros(6, H, P, N), **m2(), dt_softplus=f),
        "mamba2_snapshot_verify": lambda f: R.mamba2_snapshot_verify(
            torch.zeros(6, H, P, N), **m2(T=2), dt_softplus=f, state_indices=si2),
        "prepare_mamba2_decode": lambda f: prepare_mamba2_decode(cache, -torch.rand(H),
                                                                   dt_softplus=f),
        "Mamba2DecodeBlock": lambda f: Mamba2DecodeBlock(H, P, N, G, act_dtype=torch.float32,
                                                           dt_softplus=f),
        "gdn_decode": lambda f: R.gdn_decode(gdn, q, k, v, **gates, use_qk_l2norm_in_kernel=f),
        "gdn_verify": lambda f: R.gdn_verify(gdn, T2(q), T2(k), T2(v), T2(gates["g"]),
                                             T2(gates["beta"]), use_qk_l2norm_in_kernel=f),
        "gdn_standard_decode": lambda f: R.gdn_standard_decode(
            torch.zeros(4, 4, 16, 16), q, k, v, **gates, use_qk_l2norm_in_kernel=f,
            state_batch_indices=sbi),
        "gdn_snapshot_verify": lambda f: R.gdn_snapshot_verify(
            torch.zeros(6, 4, 16, 16), T2(q), T2(k), T2(v), T2(gates["g"]), T2(gates["beta"]),
            use_qk_l2norm_in_kernel=f, state_indices=si2),
        "prepare_gdn_decode": lambda f: prepare_gdn_decode(gdn, use_qk_l2norm_in_kernel=f),
        "GDNDecodeBlock": lambda f: GDNDecodeBlock(2, 4, 16, 16, act_dtype=torch.float32,
                                                     use_qk_l2norm_in_kernel=f),
    }
    for name, call in calls.items():
        arg = "dt_softplus" if "mamba2" in name.lower() else "use_qk_l2norm_in_kernel"
        before = [t.clone() for t in (cache.write_pos, cache.x_buf, gdn.write_pos, gdn.x_buf
                                      if hasattr(gdn, "x_buf") else gdn.write_pos)]
        for bad in ("no", "False", None, 2, 1.0, torch.tensor(True)):
            with pytest.raises(TypeError, match=f"{arg} must be a bool"):
                call(bad)
        after = (cache.write_pos, cache.x_buf, gdn.write_pos, gdn.x_buf
                 if hasattr(gdn, "x_buf") else gdn.write_pos)
        assert all(torch.equal(a, b) for a, b in zip(before, after)), name
        for ok in (True, False, np.bool_(True), 0, 1):
            call(ok)
    # 0 / 1 and numpy's bool mean what True / False do (fresh state each)
    x = m2()
    outs = {f: R.mamba2_standard_decode(torch.ones(6, H, P, N), **x, dt_softplus=f)
            for f in (True, 1, np.bool_(True), False, 0)}
    assert torch.equal(outs[True], outs[1]) and torch.equal(outs[True], outs[np.bool_(True)])
    assert torch.equal(outs[False], outs[0]) and not torch.equal(outs[True], outs[False])


def test_session40_audit_mends(seed):
    """An empty slot list is no slots; shape errors speak the caller's layout; backend='cute'
    without kernels raises in init_from_state too; numpy ints size a cache; only the pairs of
    DESIGN §2 parse; GDN blocks check scale when built; clearer commit / dt / layout messages."""
    import numpy as np
    from replayssm_lp.nn import GDNDecodeBlock
    c = R.Mamba2ReplayCache(4, H, P, N, G, precision="nvfp4/fp16sr", act_dtype=torch.float32)
    S = torch.randn(2, H, P, N)
    c.init_from_state([1, 3], S)
    before = [t.clone() for t in (c.hi.data, c.lo.data, c.flush_count)]
    c.reset([])
    c.reset(())
    c.init_from_state([], torch.zeros(0, H, P, N))
    assert c.materialize([]).shape == (0, H, P, N)
    assert all(torch.equal(a, b) for a, b in zip(before, (c.hi.data, c.lo.data, c.flush_count)))
    GDNDecodeBlock(2, 4, 16, 16, num_slots=2, act_dtype=torch.float32).reset([])
    with pytest.raises(TypeError, match="slots must be integers"):
        c.reset([1.0])
    with pytest.raises(RuntimeError, match="backend='cute' requested for init_from_state"):
        c.init_from_state([0], S[:1], backend="cute")
    assert torch.equal(c.hi.data, before[0])
    # the GDN layouts: the expected shape in the layout the caller named
    g = R.GDNReplayCache(4, 2, 4, 16, 8, act_dtype=torch.float32)          # K = 16, V = 8
    with pytest.raises(ValueError, match=r"S must have shape \[2, 4, 16, 8\] \(\[n, HV, K, V\] "
                                         r"for layout='kv'\), got \[2, 4, 8, 16\]"):
        g.init_from_state([0, 1], torch.randn(2, 4, 8, 16), layout="kv")
    with pytest.raises(ValueError, match=r"S must have shape \[2, 4, 8, 16\].*pass layout='kv'"):
        g.init_from_state([0, 1], torch.randn(2, 4, 16, 8))
    with pytest.raises(ValueError, match="layout must be 'vk' or 'kv'"):
        g.materialize([0], layout="xx")
    st = torch.randn(4, 4, 8, 16)                                            # [slots, HV, V, K]
    q = k = torch.randn(1, 2, 16)
    with pytest.raises(ValueError, match="is the state in the other layout"):
        R.gdn_standard_decode(st, q, k, torch.randn(1, 4, 8), -torch.rand(1, 4), torch.rand(1, 4),
                              state_layout="kv", backend="torch")
    # sizes: numpy ints are ints; dtypes must be torch dtypes
    c2 = R.Mamba2ReplayCache(np.int64(3), np.int32(H), P, N, G)
    assert type(c2.num_slots) is int and type(c2.nheads) is int and c2.x_buf.shape[0] == 3
    for bad, exc, match in ((0, ValueError, "num_slots must be >= 1, got 0"),
                            (np.True_, TypeError, "num_slots must be an int"),
                            (2.0, TypeError, "num_slots must be an int"),
                            (torch.tensor(3), TypeError, "num_slots must be an int")):
        with pytest.raises(exc, match=match):
            R.Mamba2ReplayCache(bad, H, P, N, G)
    with pytest.raises(TypeError, match="act_dtype must be a torch.dtype"):
        R.Mamba2ReplayCache(2, H, P, N, G, act_dtype="bfloat16")
    # pairs: well formed but not in DESIGN §2 -> the listed error; aliases of listed ones parse
    for name in ("fp16/fp8sr", "bf16/fp16sr", "fp8/bf16sr", "bf16rn"):
        with pytest.raises(ValueError, match="unknown precision pair.*nvfp4/fp16sr"):
            R.parse_pair(name)
    assert R.parse_pair("nvfp4rn/fp16sr").name == "nvfp4/fp16sr"
    assert all(R.parse_pair(n).name == n for n in R.precision_pairs(include_extra=True))
    with pytest.raises(TypeError, match="scale must be a float or None, got str"):
        GDNDecodeBlock(2, 4, 16, 8, num_slots=2, scale="0.1")
    # commit: the lengths that disagree, and the shape that was given
    cv = R.Mamba2ReplayCache(4, H, P, N, G, max_draft=2, act_dtype=torch.float32)
    with pytest.raises(ValueError, match="state_batch_indices has 3 rows but num_accepted_tokens has 2"):
        R.commit(cv, torch.ones(2, dtype=torch.int32), torch.arange(3, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"got shape \[2, 1\]"):
        R.commit(cv, torch.ones(2, 1, dtype=torch.int32))
    # an untied [b, H, P] dt: Mamba-2 has one dt per head
    kw = _m2()
    kw["dt"] = torch.randn(3, H, P)
    with pytest.raises(ValueError, match="one dt per head"):
        R.mamba2_decode(c, **kw)


def test_session45_audit_mends(cache):
    """Session 45's audit: writable tensors whose rows overlap through ``as_strided`` / ``unfold``
    (torch reports 'too hard to tell' for them) are refused, non-dense views that do not overlap
    still run; a hand-built PrecisionPair must be a listed pair (a bogus rounding used to fail at
    the first flush, after the checkpoint was rewritten); a snapshot pad row (pad id in column 0)
    that reads a real slot is refused (the kernels would run it and write its slots)."""
    from replayssm_lp._validate import no_overlap
    per = H * P * N
    # state pool [6, H, P, N] whose slots overlap by half: slot 2's rows are slots 1 and 3's
    state = torch.randn(4 * per).as_strided((6, H, P, N), (per // 2, P * N, N, 1))
    base = state.clone()
    with pytest.raises(ValueError, match="state is written by this op.*share memory"):
        R.mamba2_standard_decode(state, **_m2(),
                                 state_batch_indices=torch.tensor([2, -1, -1], dtype=torch.int32))
    assert torch.equal(state, base)
    out = torch.full((3 * H * P,), float("nan")).as_strided((3, H, P), (1, P, 1))
    before = cache.write_pos.clone()
    with pytest.raises(ValueError, match="out is written by this op"):
        R.mamba2_decode(cache, **_m2(), out=out)
    assert torch.equal(before, cache.write_pos)
    for t, bad in ((torch.zeros(3, 4, 8)[..., ::2], False),                # non-dense, disjoint
                   (torch.zeros(20).as_strided((3, 2), (2, 3)), False),    # interleaved, disjoint
                   (torch.zeros(10).unfold(0, 4, 2), True),                # windows overlap
                   (torch.zeros(20).as_strided((4, 3), (2, 3)), True)):    # [3, 0] and [0, 2] meet
        if bad:
            with pytest.raises(ValueError, match="must not share memory"):
                no_overlap("t", t)
        else:
            no_overlap("t", t)
    st = torch.randn(6, H, P, N)
    out = R.mamba2_standard_decode(st, **_m2(), out=torch.full((3, 2 * H, P), float("nan"))[:, ::2])
    assert torch.isfinite(out).all()
    # hand-built pairs
    from replayssm_lp.pairs import PrecisionPair
    for pair in (PrecisionPair("fp8", "xx", "fp16", "sr", False),        # unknown rounding
                 PrecisionPair("fp16", "rn", "bf16", "sr", False),       # not in DESIGN §2
                 PrecisionPair("fp32", "rn", "nvfp4", "sr", False)):     # refused as a name too
        with pytest.raises(ValueError, match="not one of the pairs.*valid pairs: .*nvfp4/fp16sr"):
            R.Mamba2ReplayCache(2, H, P, N, G, precision=pair)
    ok = R.parse_pair("nvfp4/fp8sr")
    assert R.Mamba2ReplayCache(2, H, P, N, G, precision=PrecisionPair(*[getattr(ok, f) for f in (
        "read_fmt", "read_rounding", "rec_fmt", "rec_rounding", "shared")])).pair == ok
    # snapshot: a pad row reading a real slot
    st = torch.randn(6, H, P, N)
    base = st.clone()
    idx = torch.tensor([[-1, 3], [0, 1]], dtype=torch.int32)
    n = torch.tensor([2, 1], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"rows \[0\] are pad rows.*selects a real slot \(\[3\]\)"):
        R.mamba2_snapshot_verify(st, **_m2(b=2, T=2), state_indices=idx, num_accepted_tokens=n)
    with pytest.raises(ValueError, match="are pad rows"):
        R.snapshot_accept(idx, n)
    assert torch.equal(st, base)
    n1 = torch.tensor([1, 1], dtype=torch.int32)                 # reads column 0: a pad row
    assert R.snapshot_accept(idx, n1).tolist() == [-1, 0]


def test_session45_minor_audit_mends():
    """The audit's smaller points: a per-head tensor with an empty trailing dim names itself (was
    a raw IndexError); bools among slots are refused (``[True, 2]`` was slots 1, 2); the
    pad_slot_id error names the type it got; a prepared GDN step refuses dt_bias without A_log
    (it could never be used)."""
    import numpy as np
    from replayssm_lp.ops import prepare_gdn_decode
    with pytest.raises(ValueError, match=r"A must have shape \[4\]"):
        R.mamba2_standard_decode(torch.zeros(3, H, P, N), **{**_m2(), "A": torch.zeros(H, 0)})
    c = R.Mamba2ReplayCache(4, H, P, N, G, act_dtype=torch.float32)
    c.init_from_state([1, 2], torch.randn(2, H, P, N))
    before = c.hi.data.clone()
    with pytest.raises(TypeError, match="slots must be integers, got a bool"):
        c.reset([True, 2])
    assert torch.equal(before, c.hi.data)
    with pytest.raises(ValueError, match=r"pad_slot_id must be a negative int \(a Python int\), got .*int64"):
        R.mamba2_decode(c, **_m2(), pad_slot_id=np.int64(-1))
    g = R.GDNReplayCache(4, 2, 4, 16, 16, act_dtype=torch.float32)
    with pytest.raises(ValueError, match="dt_bias is used only with A_log"):
        prepare_gdn_decode(g, dt_bias=torch.randn(4))
    prepare_gdn_decode(g, A_log=torch.randn(4), dt_bias=torch.randn(4))


def test_session45_cache_audit_mends(tmp_path):
    """A cache audit's findings: (1) a prefill state or input that requires grad leaves no autograd
    graph in the cache (it used to grow a node per step and survive reset); (2) an unpickled /
    torch.load-ed cache gets a handle of its own (it kept the pickled one: 'not alive', or another
    live cache's); (3) init_from_state from a view of the cache's own copy keeps the state (reset
    zeroed it first)."""
    import pickle
    A = -torch.rand(H)
    c = R.Mamba2ReplayCache(3, H, P, N, G, precision="fp32", buffer_len=2, act_dtype=torch.float32)
    W = torch.randn(1, H, P, N, requires_grad=True)
    c.init_from_state([0], W * 1.0)
    x = torch.randn(3, H, P, requires_grad=True)
    out = R.mamba2_decode(c, x, torch.randn(3, H), A, torch.randn(3, G, N), torch.randn(3, G, N),
                          backend="torch")
    for _ in range(3):
        R.mamba2_decode(c, **_m2(), backend="torch")
    cache_tensors = [c.hi.data, c.x_buf, c.B_buf, c.dt_buf, c.dA_buf, out]
    assert not any(t.requires_grad or t.grad_fn is not None for t in cache_tensors)
    g = R.GDNReplayCache(2, 2, 4, 16, 16, precision="nvfp4/fp16sr", buffer_len=2,
                         act_dtype=torch.float32)
    g.init_from_state([0, 1], torch.randn(2, 4, 16, 16, requires_grad=True))
    q = torch.randn(2, 2, 16, requires_grad=True)
    R.gdn_decode(g, q, torch.randn(2, 2, 16), torch.randn(2, 4, 16), g=-torch.rand(2, 4),
                 beta=torch.rand(2, 4), backend="torch")
    assert not any(t.requires_grad for t in g._state_tensors() + list(g._buffers()))
    # (2) pickling: the copy runs as itself, with its own buffer length, the original gone
    c4 = R.Mamba2ReplayCache(2, H, P, N, G, precision="fp32", buffer_len=4, act_dtype=torch.float32)
    c4.init_from_state([0, 1], torch.randn(2, H, P, N))
    blob = pickle.dumps(c4)
    h4 = c4.handle
    del c4
    R.Mamba2ReplayCache(2, H, P, N, G, precision="fp32", buffer_len=1, act_dtype=torch.float32)
    from replayssm_lp.library import _CACHES                 # what the compiled ops look up
    c5, twin = pickle.loads(blob), pickle.loads(blob)
    assert c5.handle != h4 and _CACHES[c5.handle] is c5 and _CACHES[twin.handle] is twin
    kw = _m2(b=2)
    assert torch.equal(R.mamba2_decode(c5, **kw, backend="torch"),
                       R.mamba2_decode(twin, **kw, backend="torch"))
    torch.save(c5, tmp_path / "c.pt")
    c6 = torch.load(tmp_path / "c.pt", weights_only=False)
    assert _CACHES[c6.handle] is c6 and c6.buffer_len == 4
    # (3) init_from_state from the cache's own copy
    S = torch.randn(1, H, P, N)
    c5.init_from_state([0], S)
    c5.init_from_state([0], c5.hi.data[0:1])
    assert torch.equal(c5.materialize([0]), S)


def test_session45_numpy_scale_compiles():
    """GDN's scale as a NumPy float (``1 / np.sqrt(K)``) runs under torch.compile too (the op
    schema's ``float?`` refused the 0-dim tensor dynamo made of it)."""
    import numpy as np
    g = R.GDNReplayCache(2, 2, 4, 16, 16, precision="fp32", buffer_len=2, act_dtype=torch.float32)
    twin = R.GDNReplayCache(2, 2, 4, 16, 16, precision="fp32", buffer_len=2, act_dtype=torch.float32)
    S = torch.randn(2, 4, 16, 16)
    g.init_from_state([0, 1], S)
    twin.init_from_state([0, 1], S)
    args = (torch.randn(2, 2, 16), torch.randn(2, 2, 16), torch.randn(2, 4, 16), -torch.rand(2, 4),
            torch.rand(2, 4))
    sc = 1 / np.sqrt(16)
    f = torch.compile(lambda q, k, v, gg, bb: R.gdn_decode(g, q, k, v, g=gg, beta=bb, scale=sc,
                                                           backend="torch"),
                      backend="aot_eager", fullgraph=True)
    q, k, v, gg, bb = args
    assert torch.equal(f(*args), R.gdn_decode(twin, q, k, v, g=gg, beta=bb, scale=float(sc),
                                              backend="torch"))


@pytest.mark.parametrize("precision", ["nvfp4/fp16sr", "fp8/fp16sr", "fp8sr", "nvfp4/fp8sr"])
def test_plain_pickle_of_a_cache_with_float8_tensors(precision, tmp_path):
    """A cache whose stored copies hold float8 tensors (fp8 values, nvfp4 block scales) pickles
    with plain ``pickle`` (torch 2.13 fails on a float8 tensor's storage there; the cache sends
    their bytes as uint8 views) and with ``torch.save``: every stored byte, the dtypes and the
    next step's outputs equal the original's."""
    import pickle
    m2 = R.Mamba2ReplayCache(3, H, P, N, G, precision=precision, buffer_len=2, seed=7,
                             act_dtype=torch.float32)
    m2.init_from_state([0, 2], torch.randn(2, H, P, N))
    gd = R.GDNReplayCache(3, 2, 4, 16, 16, precision=precision, buffer_len=2, seed=5,
                          act_dtype=torch.float32)
    gd.init_from_state([1, 2], torch.randn(2, 4, 16, 16))
    for c in (m2, gd):
        torch.save(c, tmp_path / "c.pt")
        for twin in (pickle.loads(pickle.dumps(c)), torch.load(tmp_path / "c.pt", weights_only=False)):
            for name in ("hi", "lo"):
                a, b = getattr(c, name), getattr(twin, name)
                assert (a is None) == (b is None), name
                for f in ("data", "scale", "global_scale") if a is not None else ():
                    x, y = getattr(a, f), getattr(b, f)
                    assert (x is None) == (y is None), (name, f)
                    if x is not None:
                        assert x.dtype == y.dtype and x.shape == y.shape, (name, f)
                        assert torch.equal(x.view(torch.uint8), y.view(torch.uint8)), (name, f)
            assert twin.handle != c.handle
            # the order's two scratch names stay one buffer
            assert twin.row_order.data_ptr() == twin.row_order_ext.data_ptr()
            assert torch.equal(twin.row_order, twin.row_order_ext[:2])
    kw = _m2(b=3)
    twin = pickle.loads(pickle.dumps(m2))
    assert torch.equal(R.mamba2_decode(m2, **kw, backend="torch"),
                       R.mamba2_decode(twin, **kw, backend="torch"))
