"""The ops are registered with torch.library (fake impls included) and work under torch.compile."""
import copy

import pytest
import torch

import replayssm_lp as R


def test_ops_are_registered():
    for name in ("mamba2_step", "gdn_step", "commit", "mamba2_standard_decode", "gdn_standard_decode",
                 "mamba2_snapshot_verify", "gdn_snapshot_verify"):
        assert hasattr(torch.ops.replayssm, name), name


def test_fake_impl_runs_under_fake_tensor_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch._library.fake_class_registry import maybe_to_fake_obj  # noqa: F401  (import check)
    state = torch.randn(4, 2, 8, 16)
    args = [torch.randn(3, 2, 8), torch.randn(3, 2), -torch.rand(2), torch.randn(3, 1, 16), torch.randn(3, 1, 16)]
    with FakeTensorMode() as m:
        fs = m.from_tensor(state)
        fa = [m.from_tensor(a) for a in args]
        out = m.from_tensor(torch.empty(3, 2, 8))
        torch.ops.replayssm.mamba2_standard_decode(fs, *fa, None, None, None, True, None, -1, out, "torch")


@pytest.mark.parametrize("kind", ["mamba2", "commit"])
def test_compiled_step_matches_eager(kind, seed):
    H, P, N, G, L = 2, 8, 16, 1, 4
    c1 = R.Mamba2ReplayCache(6, H, P, N, G, precision="nvfp4/fp16sr", buffer_len=L, max_draft=2,
                             act_dtype=torch.float32, seed=3)
    c1.init_from_state(list(range(6)), torch.randn(6, H, P, N))
    c2 = copy.deepcopy(c1)
    sbi = torch.tensor([4, -1, 1], dtype=torch.int32)
    A = -torch.rand(H)

    def step(cache, x, dt, B, C, n):
        y = R.mamba2_verify(cache, x, dt, A, B, C, state_batch_indices=sbi, backend="torch")
        R.commit(cache, n, sbi, backend="torch")
        return y

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    for i in range(3 * L):
        x, dt = torch.randn(3, 2, H, P), torch.randn(3, 2, H)
        B, C = torch.randn(3, 2, G, N), torch.randn(3, 2, G, N)
        n = torch.randint(0, 3, (3,), dtype=torch.int32)
        y1 = compiled(c1, x, dt, B, C, n)
        y2 = step(c2, x, dt, B, C, n)
        assert torch.equal(y1, y2)
    assert torch.equal(c1.write_pos, c2.write_pos) and torch.equal(c1.hi.data, c2.hi.data)
    assert torch.equal(c1.lo.data, c2.lo.data) and torch.equal(c1.flush_count, c2.flush_count)


# torch.library.opcheck: the declared mutations are the ones made (test_schema), fake impls agree
# with the real ones and the ops trace under AOT dispatch. SchemaCheckMode compares mutated
# tensors with torch.allclose, which torch has no CPU kernel for on float8 (an nvfp4 / fp8 copy's
# scales or codes), so test_schema runs on the pairs without fp8 tensors only.
_ALL_OPCHECKS = ("test_schema", "test_autograd_registration", "test_faketensor",
                 "test_aot_dispatch_dynamic")


def _opcheck_utils(cache):
    from replayssm_lp import library as lib
    fp8 = any(t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) for t in lib.cache_tensors(cache))
    return _ALL_OPCHECKS[1:] if fp8 else _ALL_OPCHECKS


def _opcheck(op, args, utils):
    res = torch.library.opcheck(op, args, test_utils=utils)
    assert res == {u: "SUCCESS" for u in utils}, res


@pytest.mark.parametrize("pair", ["fp32", "fp16/fp32", "nvfp4/fp16sr", "fp8/fp16sr"])
def test_opcheck_mamba2_step_verify_commit(pair, seed):
    from replayssm_lp import library as lib
    H, P, N, G, L, b = 2, 8, 16, 1, 4, 3
    c = R.Mamba2ReplayCache(6, H, P, N, G, precision=pair, buffer_len=L, max_draft=2,
                            act_dtype=torch.float32, seed=3)
    c.init_from_state(list(range(6)), torch.randn(6, H, P, N))
    utils = _opcheck_utils(c)
    sbi = torch.tensor([4, -1, 1], dtype=torch.int32)
    A, D, dt_bias = -torch.rand(H), torch.randn(H), torch.randn(H)
    x, dt, z = torch.randn(b, H, P), torch.randn(b, H), torch.randn(b, H, P)
    B, C = torch.randn(b, G, N), torch.randn(b, G, N)
    out = torch.full((b, H, P), float("nan"))
    _opcheck(torch.ops.replayssm.mamba2_step.default,
             (c.handle, False, x, dt, A, B, C, D, z, dt_bias, True, sbi, -1, out,
              lib.cache_tensors(c), "torch"), utils)
    xv, dtv = torch.randn(b, 2, H, P), torch.randn(b, 2, H)
    Bv, Cv = torch.randn(b, 2, G, N), torch.randn(b, 2, G, N)
    outv = torch.full((b, 2, H, P), float("nan"))
    _opcheck(torch.ops.replayssm.mamba2_step.default,
             (c.handle, True, xv, dtv, A, Bv, Cv, D, None, dt_bias, True, sbi, -1, outv,
              lib.cache_tensors(c), "torch"), utils)
    R.mamba2_verify(c, xv, dtv, A, Bv, Cv, D=D, dt_bias=dt_bias, state_batch_indices=sbi,
                    backend="torch")
    _opcheck(torch.ops.replayssm.commit.default,
             (c.handle, torch.tensor([1, 0, 2], dtype=torch.int32), sbi, -1,
              lib.cache_tensors(c), "torch"), utils)


@pytest.mark.parametrize("pair", ["fp32", "bf16/fp32", "nvfp4/fp16sr"])
def test_opcheck_gdn_step_verify(pair, seed):
    from replayssm_lp import library as lib
    H, HV, K, V, L, b = 1, 2, 16, 8, 4, 3
    c = R.GDNReplayCache(5, H, HV, K, V, precision=pair, buffer_len=L, max_draft=2,
                         act_dtype=torch.float32, seed=5)
    c.init_from_state(list(range(5)), torch.randn(5, HV, V, K) * 0.1)
    utils = _opcheck_utils(c)
    sbi = torch.tensor([3, 0, -1], dtype=torch.int32)
    A_log, dt_bias = torch.randn(HV), torch.randn(HV)
    for T, verify in ((None, False), (2, True)):
        lead = (b,) if T is None else (b, T)
        q, k, v = torch.randn(*lead, H, K), torch.randn(*lead, H, K), torch.randn(*lead, HV, V)
        a, bb = torch.randn(*lead, HV), torch.randn(*lead, HV)
        out = torch.full((*lead, HV, V), float("nan"))
        _opcheck(torch.ops.replayssm.gdn_step.default,
                 (c.handle, verify, q, k, v, None, None, A_log, a, dt_bias, bb, None, True, sbi, -1,
                  out, lib.cache_tensors(c), "torch"), utils)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opcheck_standard_decodes(dtype, seed):
    H, P, N, G, b = 2, 8, 16, 1, 3
    sbi = torch.tensor([2, -1, 0], dtype=torch.int32)
    state = torch.randn(4, H, P, N).to(dtype)
    _opcheck(torch.ops.replayssm.mamba2_standard_decode.default,
             (state, torch.randn(b, H, P), torch.randn(b, H), -torch.rand(H), torch.randn(b, G, N),
              torch.randn(b, G, N), torch.randn(H), torch.randn(b, H, P), torch.randn(H), True, sbi,
              -1, torch.full((b, H, P), float("nan")), "torch"), _ALL_OPCHECKS)
    HK, HV, K, V = 1, 2, 16, 8
    for layout, shape in (("vk", (4, HV, V, K)), ("kv", (4, HV, K, V))):
        _opcheck(torch.ops.replayssm.gdn_standard_decode.default,
                 ((torch.randn(*shape) * 0.1).to(dtype), torch.randn(b, HK, K), torch.randn(b, HK, K),
                  torch.randn(b, HV, V), None, None, torch.randn(HV), torch.randn(b, HV),
                  torch.randn(HV), torch.randn(b, HV), None, True, sbi, -1,
                  torch.full((b, HV, V), float("nan")), layout, "torch"), _ALL_OPCHECKS)


def _snapshot_inputs(T=3):
    """A Mamba-2 and a GDN snapshot verify's inputs: rows 0 and 2 real (their own T slots, row 2
    reading after 2 accepted drafts), row 1 a pad row."""
    H, P, N, G, HK, HV, K, V, b = 2, 8, 16, 1, 1, 2, 16, 8, 3
    si = torch.tensor([[0, 1, 2], [-1, -1, -1], [5, 6, -1]], dtype=torch.int32)[:, :T]
    nacc = torch.tensor([1, 0, 2], dtype=torch.int32)
    m2 = (torch.randn(8, H, P, N), torch.randn(b, T, H, P), torch.randn(b, T, H), -torch.rand(H),
          torch.randn(b, T, G, N), torch.randn(b, T, G, N), torch.randn(H), torch.randn(b, T, H, P),
          torch.randn(H), True, si, nacc, -1, torch.full((b, T, H, P), float("nan")), "torch")
    gdn = (torch.randn(8, HV, V, K) * 0.1, torch.randn(b, T, HK, K), torch.randn(b, T, HK, K),
           torch.randn(b, T, HV, V), None, None, torch.randn(HV), torch.randn(b, T, HV),
           torch.randn(HV), torch.randn(b, T, HV), 0.25, True, si, nacc, -1,
           torch.full((b, T, HV, V), float("nan")), "vk", "torch")
    return m2, gdn


def test_opcheck_snapshot_verifies(seed):
    m2, gdn = _snapshot_inputs()
    _opcheck(torch.ops.replayssm.mamba2_snapshot_verify.default, m2, _ALL_OPCHECKS)
    _opcheck(torch.ops.replayssm.gdn_snapshot_verify.default, gdn, _ALL_OPCHECKS)


def test_compiled_snapshot_verify_matches_eager(seed):
    """fullgraph=True: the snapshot verifies trace as custom ops (they graph-broke before), write
    the same states and outputs, and leave the pad row's out and unowned slots alone."""
    m2, gdn = _snapshot_inputs()

    def m2_step(state, x, dt, A, B, C, D, z, dt_bias, si, nacc, out):
        return R.mamba2_snapshot_verify(state, x, dt, A, B, C, D, z, dt_bias, True, si, -1, out,
                                        "torch", num_accepted_tokens=nacc)

    def gdn_step(state, q, k, v, A_log, a, dt_bias, b, si, nacc, out):
        return R.gdn_snapshot_verify(state, q, k, v, A_log=A_log, a=a, dt_bias=dt_bias, b=b,
                                     scale=0.25, state_indices=si, num_accepted_tokens=nacc,
                                     out=out, backend="torch")

    m2_args = [m2[i] for i in (0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 13)]
    gdn_args = [gdn[i] for i in (0, 1, 2, 3, 6, 7, 8, 9, 12, 13, 15)]
    for fn, args in ((m2_step, m2_args), (gdn_step, gdn_args)):
        a1 = [t.clone() if isinstance(t, torch.Tensor) else t for t in args]
        a2 = [t.clone() if isinstance(t, torch.Tensor) else t for t in args]
        y1 = torch.compile(fn, backend="aot_eager", fullgraph=True)(*a1)
        y2 = fn(*a2)
        assert y1 is a1[-1] or torch.equal(y1, a1[-1])
        assert torch.equal(y1.nan_to_num(7.0), y2.nan_to_num(7.0))
        assert torch.isnan(y1[1]).all()                          # the pad row's out untouched
        assert torch.equal(a1[0], a2[0])                         # the stored states
        assert torch.equal(a1[0][[3, 4, 7]], args[0][[3, 4, 7]])  # unowned slots untouched
        assert not torch.equal(a1[0][[0, 1, 2, 5, 6]], args[0][[0, 1, 2, 5, 6]])


def test_compiled_path_refuses_what_eager_refuses(seed):
    """On the compile path a string or bool scale was made a float and a NumPy pad id passed
    (eager refuses them): now refused there too, before the op runs."""
    import numpy as np
    m2, gdn = _snapshot_inputs()
    st, q, k, v = gdn[0], gdn[1][:, 0], gdn[2][:, 0], gdn[3][:, 0]
    a, bb = gdn[7][:, 0], gdn[9][:, 0]

    def std(scale):
        return R.gdn_standard_decode(st.clone(), q, k, v, A_log=gdn[6], a=a, dt_bias=gdn[8], b=bb,
                                     scale=scale, backend="torch")

    def snap(pad):
        return R.mamba2_snapshot_verify(m2[0].clone(), *m2[1:6], state_indices=m2[10],
                                        pad_slot_id=pad, backend="torch")

    assert torch.equal(torch.compile(std, backend="aot_eager", fullgraph=True)(0.5), std(0.5))
    for bad in ("0.5", True):
        with pytest.raises(Exception):
            torch.compile(std, backend="aot_eager", fullgraph=True)(bad)
    with pytest.raises(Exception):
        torch.compile(snap, backend="aot_eager", fullgraph=True)(np.int64(-1))
