"""Snapshot verify (vLLM semantics), torch reference, on CPU: outputs and the T stored snapshots equal
token-by-token standard decode (reference.mamba2_standard_step / gdn_standard_step in fp64); the read
column follows num_accepted_tokens; pad rows and pad columns are untouched; argument errors name the
argument; snapshot_accept picks slot n - 1."""
import pytest
import torch

from replayssm_lp import reference as ref
from replayssm_lp.snapshot import (gdn_snapshot_verify, mamba2_snapshot_verify, snapshot_accept,
                                   snapshot_read_slots)

H, P, N, G = 4, 8, 16, 2
GH, GHV, GK, GV = 2, 4, 16, 8


def _slots(b, T, pool):
    perm = torch.randperm(pool)[: b * T].reshape(b, T).to(torch.int32)
    return perm


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("T", [1, 3, 8])
def test_mamba2_snapshot_equals_token_by_token(T, state_dtype, seed):
    b, pool = 5, 64
    state = (torch.randn(pool, H, P, N) * 0.5).to(state_dtype)
    before = state.clone()
    idx = _slots(b, T, pool)
    idx[1] = -1                                  # a pad row
    if T > 1:
        idx[3, -1] = -1                          # a shorter row: its last draft is not stored
    acc = torch.randint(1, T + 1, (b,), dtype=torch.int32)
    acc[3] = 1                                   # (reading a pad column would skip the row)
    x, z = torch.randn(b, T, H, P), torch.randn(b, T, H, P)
    dt, A, D, bias = torch.randn(b, T, H), -torch.rand(H) - 0.1, torch.randn(H), torch.randn(H) * 0.3
    B, C = torch.randn(b, T, G, N), torch.randn(b, T, G, N)
    out = torch.full((b, T, H, P), float("nan"))
    mamba2_snapshot_verify(state, x, dt, A, B, C, D, z, bias, True, idx, -1, out, "torch",
                           num_accepted_tokens=acc)
    assert torch.isnan(out[1]).all()
    read = snapshot_read_slots(idx, acc)
    for r in (0, 2, 3, 4):
        run = before[read[r].long()].double()[None].clone()
        one = torch.tensor([0])
        for t in range(T):
            y = ref.mamba2_standard_step(run, x[r:r + 1, t], dt[r:r + 1, t], A, B[r:r + 1, t],
                                         C[r:r + 1, t], D, z[r:r + 1, t], bias, True, one, one,
                                         torch.float64)
            torch.testing.assert_close(out[r, t].double(), y[0], rtol=2e-5, atol=2e-5)
            s = int(idx[r, t])
            if s >= 0:
                tol = 1e-5 if state_dtype == torch.float32 else 1e-2
                torch.testing.assert_close(state[s].double(), run[0].to(state_dtype).double(),
                                           rtol=tol, atol=tol)
    written = {int(s) for s in idx.flatten() if s >= 0}
    untouched = [i for i in range(pool) if i not in written]
    assert torch.equal(state[untouched], before[untouched])


@pytest.mark.parametrize("raw", [True, False])
@pytest.mark.parametrize("T", [1, 4])
def test_gdn_snapshot_equals_token_by_token(T, raw, seed):
    b, pool = 4, 40
    state = torch.randn(pool, GHV, GV, GK) * 0.3
    before = state.clone()
    idx = _slots(b, T, pool)
    idx[2] = -1
    q, k, v = torch.randn(b, T, GH, GK), torch.randn(b, T, GH, GK), torch.randn(b, T, GHV, GV)
    A_log, a, bias, bb = torch.randn(GHV) * 0.5, torch.randn(b, T, GHV), torch.randn(GHV) * 0.3, torch.randn(b, T, GHV)
    g, beta = ref.gdn_gates(None, None, A_log, a, bias, bb)
    out = torch.full((b, T, GHV, GV), float("nan"))
    if raw:
        gdn_snapshot_verify(state, q, k, v, A_log=A_log, a=a, dt_bias=bias, b=bb, state_indices=idx,
                            out=out, backend="torch")
    else:
        gdn_snapshot_verify(state, q, k, v, g, beta, state_indices=idx, out=out, backend="torch")
    assert torch.isnan(out[2]).all()
    for r in (0, 1, 3):
        run = before[int(idx[r, 0])].double()[None].clone()
        one = torch.tensor([0])
        for t in range(T):
            o = ref.gdn_standard_step(run, q[r:r + 1, t], k[r:r + 1, t], v[r:r + 1, t], g[r:r + 1, t],
                                      beta[r:r + 1, t], None, True, one, one, "vk", torch.float64)
            torch.testing.assert_close(out[r, t].double(), o[0], rtol=2e-5, atol=2e-5)
            torch.testing.assert_close(state[int(idx[r, t])].double(), run[0], rtol=1e-5, atol=1e-5)


def test_gdn_snapshot_kv_layout_matches_vk(seed):
    b, T, pool = 3, 3, 12
    S = torch.randn(pool, GHV, GV, GK) * 0.3
    idx = _slots(b, T, pool)
    q, k, v = torch.randn(b, T, GH, GK), torch.randn(b, T, GH, GK), torch.randn(b, T, GHV, GV)
    g, beta = -torch.rand(b, T, GHV), torch.rand(b, T, GHV)
    Skv = S.transpose(-1, -2).contiguous()
    o1 = gdn_snapshot_verify(S, q, k, v, g, beta, state_indices=idx, backend="torch")
    o2 = gdn_snapshot_verify(Skv, q, k, v, g, beta, state_indices=idx, state_layout="kv", backend="torch")
    torch.testing.assert_close(o1, o2)
    torch.testing.assert_close(S, Skv.transpose(-1, -2))


def test_accept_then_continue_equals_one_long_stream(seed):
    """Two verify steps chained through snapshot_accept equal the standard decode of the accepted
    stream (vLLM's rollback by slot choice)."""
    b, T, pool = 3, 4, 32
    state = torch.randn(pool, H, P, N) * 0.5
    exact = state.double().clone()
    cur = torch.arange(b, dtype=torch.int32) * T                # each row owns T slots from 0, 4, 8
    own = torch.stack([cur + j for j in range(T)], 1).to(torch.int32)
    A, D = -torch.rand(H) - 0.1, torch.randn(H)
    for step in range(3):
        x, dt = torch.randn(b, T, H, P), torch.randn(b, T, H)
        B, C = torch.randn(b, T, G, N), torch.randn(b, T, G, N)
        out = mamba2_snapshot_verify(state, x, dt, A, B, C, D, state_indices=own, backend="torch")
        new_acc = torch.randint(1, T + 1, (b,), dtype=torch.int32)
        for r in range(b):
            run = exact[int(own[r, 0])][None].clone()
            one = torch.tensor([0])
            for t in range(int(new_acc[r])):
                y = ref.mamba2_standard_step(run, x[r:r + 1, t], dt[r:r + 1, t], A, B[r:r + 1, t],
                                             C[r:r + 1, t], D, None, None, True, one, one, torch.float64)
                torch.testing.assert_close(out[r, t].double(), y[0], rtol=1e-4, atol=1e-4)
            # the exact state after the accepted prefix goes where the next step reads it (column 0)
            exact[int(own[r, 0])] = run[0]
        nxt = snapshot_accept(own, new_acc)
        assert torch.equal(nxt, own[torch.arange(b), new_acc.long() - 1])
        for r in range(b):
            torch.testing.assert_close(state[int(nxt[r])].double(), exact[int(own[r, 0])], rtol=1e-4, atol=1e-4)
            exact[int(nxt[r])] = exact[int(own[r, 0])].clone()
        # continue from the accepted slot: rotate each row's slots so it is column 0 (the same as
        # passing num_accepted_tokens=new_acc with the unrotated table)
        own = torch.stack([own[r].roll(-(int(new_acc[r]) - 1)) for r in range(b)]).to(torch.int32)


def test_snapshot_accept_pad_and_errors():
    idx = torch.tensor([[4, 5, 6], [-1, -1, -1], [7, 8, 9]], dtype=torch.int32)
    n = torch.tensor([2, 1, 3], dtype=torch.int32)
    assert snapshot_accept(idx, n).tolist() == [5, -1, 9]
    with pytest.raises(ValueError, match="num_accepted_tokens"):
        snapshot_accept(idx, torch.tensor([0, 1, 1], dtype=torch.int32))
    with pytest.raises(ValueError, match="num_accepted_tokens"):
        snapshot_accept(idx, torch.tensor([1, 1], dtype=torch.int32))


def test_validation_names_the_argument():
    b, T, pool = 2, 3, 10
    state = torch.zeros(pool, H, P, N)
    x, dt = torch.zeros(b, T, H, P), torch.zeros(b, T, H)
    A, B, C = -torch.ones(H), torch.zeros(b, T, G, N), torch.zeros(b, T, G, N)
    idx = torch.arange(b * T, dtype=torch.int32).reshape(b, T)
    ok = dict(state_indices=idx, backend="torch")
    mamba2_snapshot_verify(state, x, dt, A, B, C, **ok)
    cases = [
        ("x", lambda: mamba2_snapshot_verify(state, x[:, :, :, :2], dt, A, B, C, **ok)),
        ("dt", lambda: mamba2_snapshot_verify(state, x, dt[:, :2], A, B, C, **ok)),
        ("B", lambda: mamba2_snapshot_verify(state, x, dt, A, B.half(), C, **ok)),
        ("C", lambda: mamba2_snapshot_verify(state, x, dt, A, B, C[:1], **ok)),
        ("A", lambda: mamba2_snapshot_verify(state, x, dt, torch.ones(H + 1), B, C, **ok)),
        ("state_indices", lambda: mamba2_snapshot_verify(state, x, dt, A, B, C, state_indices=idx[:, :2],
                                                         backend="torch")),
        ("state_indices", lambda: mamba2_snapshot_verify(state, x, dt, A, B, C, state_indices=idx + 50,
                                                         backend="torch")),
        ("state_indices", lambda: mamba2_snapshot_verify(state, x, dt, A, B, C, state_indices=idx.long(),
                                                         backend="torch")),
        ("state_indices must give each row its own slot", lambda: mamba2_snapshot_verify(
            state, x, dt, A, B, C, state_indices=idx.flip(0) % 4, backend="torch")),
        ("num_accepted_tokens", lambda: mamba2_snapshot_verify(
            state, x, dt, A, B, C, **ok, num_accepted_tokens=torch.tensor([9, 1], dtype=torch.int32))),
        ("out", lambda: mamba2_snapshot_verify(state, x, dt, A, B, C, out=torch.zeros(b, T, H, P + 1),
                                               state_indices=idx, backend="torch")),
        ("backend", lambda: mamba2_snapshot_verify(state, x, dt, A, B, C, state_indices=idx, backend="gpu")),
        ("pad_slot_id", lambda: mamba2_snapshot_verify(state, x, dt, A, B, C, state_indices=idx,
                                                       pad_slot_id=3, backend="torch")),
        ("state", lambda: mamba2_snapshot_verify(state.double(), x, dt, A, B, C, **ok)),
    ]
    for name, fn in cases:
        with pytest.raises((ValueError, TypeError), match=name):
            fn()
    gs = torch.zeros(pool, GHV, GV, GK)
    q, k, v = torch.zeros(b, T, GH, GK), torch.zeros(b, T, GH, GK), torch.zeros(b, T, GHV, GV)
    g, beta = torch.zeros(b, T, GHV), torch.zeros(b, T, GHV)
    gdn_snapshot_verify(gs, q, k, v, g, beta, state_indices=idx, backend="torch")
    gcases = [
        ("v", lambda: gdn_snapshot_verify(gs, q, k, v[..., :2], g, beta, state_indices=idx, backend="torch")),
        ("k", lambda: gdn_snapshot_verify(gs, q, k[:, :1], v, g, beta, state_indices=idx, backend="torch")),
        ("beta", lambda: gdn_snapshot_verify(gs, q, k, v, g, None, state_indices=idx, backend="torch")),
        ("A_log", lambda: gdn_snapshot_verify(gs, q, k, v, None, beta, state_indices=idx, backend="torch")),
        ("state_layout", lambda: gdn_snapshot_verify(gs, q, k, v, g, beta, state_indices=idx,
                                                     state_layout="x", backend="torch")),
        ("state_indices", lambda: gdn_snapshot_verify(gs, q, k, v, g, beta, state_indices=None,
                                                      backend="torch")),
    ]
    for name, fn in gcases:
        with pytest.raises((ValueError, TypeError), match=name):
            fn()


def test_cute_backend_needs_a_gpu():
    state = torch.zeros(4, H, P, N)
    idx = torch.zeros(1, 1, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="mamba2_snapshot_verify"):
        mamba2_snapshot_verify(state, torch.zeros(1, 1, H, P), torch.zeros(1, 1, H), -torch.ones(H),
                               torch.zeros(1, 1, G, N), torch.zeros(1, 1, G, N), state_indices=idx,
                               backend="cute")
