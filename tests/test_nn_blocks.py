"""nn blocks (replayssm_lp.nn) against the standard recurrence (reference, fp64), CPU,
backend="torch"."""
import pytest
import torch

from replayssm_lp import precision_pairs
from replayssm_lp import reference as ref
from replayssm_lp.nn import GDNDecodeBlock, Mamba2DecodeBlock

H, P, N, G = 4, 8, 32, 2            # Mamba-2 heads, headdim, dstate, groups
HK, HV, K, V = 2, 4, 32, 16         # GDN key heads, value heads, head_k_dim, head_v_dim
POOL, BATCH, L = 6, 3, 4


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: intra-op threads only add spin-wait contention on a busy 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _rel(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30)).item()


def _mamba2_params():
    A = -torch.exp(torch.rand(H) * 2 - 1)
    return A, torch.randn(H), torch.randn(H) * 0.5      # A, D, dt_bias


def _mamba2_inputs(lead):
    return (torch.randn(*lead, H, P), torch.randn(*lead, H), torch.randn(*lead, G, N),
            torch.randn(*lead, G, N), torch.randn(*lead, H, P))   # x, dt, B, C, z


def _gdn_params():
    return torch.log(torch.rand(HV) * 15 + 1), torch.randn(HV) * 0.5   # A_log, dt_bias


def _gdn_inputs(lead):
    return (torch.randn(*lead, HK, K), torch.randn(*lead, HK, K), torch.randn(*lead, HV, V),
            torch.randn(*lead, HV), torch.randn(*lead, HV))            # q, k, v, a, b


@pytest.mark.parametrize("with_z", [True, False])
def test_mamba2_block_decode_equals_standard_recurrence(with_z, seed):
    blk = Mamba2DecodeBlock(H, P, N, G, precision="fp32", buffer_len=L, num_slots=POOL,
                            act_dtype=torch.float32, backend="torch")
    slots = torch.tensor([4, 0, 2])
    S = torch.randn(BATCH, H, P, N, dtype=torch.float64) * 0.5
    blk.prefill(slots.tolist(), S.float())
    exact = torch.zeros(POOL, H, P, N, dtype=torch.float64)
    exact[slots] = S
    A, D, dtb = _mamba2_params()
    sbi = slots.to(torch.int32)
    for step in range(3 * L + 2):
        x, dt, B, C, z = _mamba2_inputs((BATCH,))
        z = z if with_z else None
        pad = step % 3 == 1                      # row 1 is a pad row on some steps
        sb = sbi.clone()
        if pad:
            sb[1] = -1
        y = blk(x, dt, A, B, C, D=D, z=z, dt_bias=dtb, state_batch_indices=sb)
        rows = torch.tensor([0, 2]) if pad else torch.arange(BATCH)
        y_ex = ref.mamba2_standard_step(exact, x.double(), dt.double(), A.double(), B.double(),
                                        C.double(), D.double(), None if z is None else z.double(),
                                        dtb.double(), True, rows, slots[rows], torch.float64)
        assert _rel(y[rows], y_ex) < 1e-5, (seed, step)
    assert int(blk.cache.flush_count[slots].min()) >= 3          # init + >= 2 flushes
    assert _rel(blk.materialize(slots.tolist()), exact[slots]) < 1e-5
    blk.reset([0])
    assert blk.materialize([0]).abs().max() == 0


@pytest.mark.parametrize("raw_gates", [True, False])
def test_gdn_block_decode_equals_standard_recurrence(raw_gates, seed):
    blk = GDNDecodeBlock(HK, HV, K, V, precision="fp32", buffer_len=L, num_slots=POOL,
                         act_dtype=torch.float32, backend="torch")
    slots = torch.tensor([1, 5, 3])
    S_kv = torch.randn(BATCH, HV, K, V, dtype=torch.float64) * 0.3   # FLA / HF layout
    blk.prefill(slots.tolist(), S_kv.float(), layout="kv")
    exact = torch.zeros(POOL, HV, V, K, dtype=torch.float64)
    exact[slots] = S_kv.transpose(-1, -2)
    A_log, dtb = _gdn_params()
    for step in range(3 * L + 2):
        q, k, v, a, b = _gdn_inputs((BATCH,))
        g, beta = ref.gdn_gates(A_log=A_log, a=a, dt_bias=dtb, b=b)
        if raw_gates:
            o = blk(q, k, v, A_log=A_log, a=a, dt_bias=dtb, b=b,
                    state_batch_indices=slots.to(torch.int32))
        else:
            o = blk(q, k, v, g, beta, state_batch_indices=slots.to(torch.int32))
        o_ex = ref.gdn_standard_step(exact, q.double(), k.double(), v.double(), g.double(),
                                     beta.double(), None, True, torch.arange(BATCH), slots,
                                     "vk", torch.float64)
        assert _rel(o, o_ex) < 1e-5, (seed, step)
    assert _rel(blk.materialize(slots.tolist(), layout="kv"), exact[slots].transpose(-1, -2)) < 1e-5


def test_mamba2_block_verify_commit(seed):
    T = 3
    blk = Mamba2DecodeBlock(H, P, N, G, precision="fp32", buffer_len=L, max_draft=T,
                            num_slots=POOL, act_dtype=torch.float32, backend="torch")
    slots = torch.tensor([2, 3, 5])
    S = torch.randn(BATCH, H, P, N, dtype=torch.float64) * 0.5
    blk.prefill(slots.tolist(), S.float())
    exact = torch.zeros(POOL, H, P, N, dtype=torch.float64)
    exact[slots] = S
    A, D, dtb = _mamba2_params()
    sbi = slots.to(torch.int32)
    rows = torch.arange(BATCH)
    for it in range(3 * L):
        x, dt, B, C, z = _mamba2_inputs((BATCH, T))
        y = blk.verify(x, dt, A, B, C, D=D, z=z, dt_bias=dtb, state_batch_indices=sbi)
        n_acc = torch.randint(0, T + 1, (BATCH,), dtype=torch.int32)
        blk.commit(n_acc, sbi)
        tmp = exact.clone()
        for t in range(T):   # every draft's output, from the committed state
            y_ex = ref.mamba2_standard_step(tmp, x[:, t].double(), dt[:, t].double(), A.double(),
                                            B[:, t].double(), C[:, t].double(), D.double(),
                                            z[:, t].double(), dtb.double(), True, rows, slots,
                                            torch.float64)
            assert _rel(y[:, t], y_ex) < 1e-5, (seed, it, t)
            keep = (n_acc > t).nonzero().squeeze(1)
            exact[slots[keep]] = tmp[slots[keep]]
    assert _rel(blk.materialize(slots.tolist()), exact[slots]) < 1e-5


def test_gdn_block_verify_commit(seed):
    T = 2
    blk = GDNDecodeBlock(HK, HV, K, V, precision="fp32", buffer_len=L, max_draft=T,
                         num_slots=POOL, act_dtype=torch.float32, backend="torch")
    slots = torch.tensor([0, 4, 1])
    blk.prefill(slots.tolist(), torch.zeros(BATCH, HV, V, K))
    exact = torch.zeros(POOL, HV, V, K, dtype=torch.float64)
    A_log, dtb = _gdn_params()
    sbi = slots.to(torch.int32)
    rows = torch.arange(BATCH)
    for it in range(2 * L + 1):
        q, k, v, a, b = _gdn_inputs((BATCH, T))
        o = blk.verify(q, k, v, A_log=A_log, a=a, dt_bias=dtb, b=b, state_batch_indices=sbi)
        n_acc = torch.randint(0, T + 1, (BATCH,), dtype=torch.int32)
        blk.commit(n_acc, sbi)
        tmp = exact.clone()
        for t in range(T):
            g, beta = ref.gdn_gates(A_log=A_log, a=a[:, t], dt_bias=dtb, b=b[:, t])
            o_ex = ref.gdn_standard_step(tmp, q[:, t].double(), k[:, t].double(), v[:, t].double(),
                                         g.double(), beta.double(), None, True, rows, slots, "vk",
                                         torch.float64)
            assert _rel(o[:, t], o_ex) < 1e-5, (seed, it, t)
            keep = (n_acc > t).nonzero().squeeze(1)
            exact[slots[keep]] = tmp[slots[keep]]
    assert _rel(blk.materialize(slots.tolist()), exact[slots]) < 1e-5


# loose sanity bounds per format (the read copy sets the output error)
_TOL = {"fp32": 1e-5, "fp16": 3e-3, "bf16": 2e-2, "fp8": 0.12, "nvfp4": 0.35}


@pytest.mark.parametrize("name", list(precision_pairs()))
def test_every_pair_runs_in_blocks(name, seed):
    pair = precision_pairs()[name]
    tol = _TOL[pair.read_fmt] + _TOL[pair.rec_fmt]
    mb = Mamba2DecodeBlock(H, P, N, G, precision=name, buffer_len=L, num_slots=2,
                           act_dtype=torch.float32, backend="torch", seed=seed)
    gb = GDNDecodeBlock(HK, HV, K, V, precision=name, buffer_len=L, num_slots=2,
                        act_dtype=torch.float32, backend="torch", seed=seed)
    assert mb.precision == gb.precision == pair.name
    S = torch.randn(2, H, P, N, dtype=torch.float64) * 0.5
    Sg = torch.randn(2, HV, V, K, dtype=torch.float64) * 0.3
    mb.prefill([0, 1], S.float())
    gb.prefill([0, 1], Sg.float())
    A, D, dtb = _mamba2_params()
    A_log, gdtb = _gdn_params()
    rows = torch.arange(2)
    for step in range(2 * L + 1):
        x, dt, B, C, z = _mamba2_inputs((2,))
        y = mb(x, dt, A, B, C, D=D, z=z, dt_bias=dtb)
        y_ex = ref.mamba2_standard_step(S, x.double(), dt.double(), A.double(), B.double(),
                                        C.double(), D.double(), z.double(), dtb.double(), True,
                                        rows, rows, torch.float64)
        q, k, v, a, b = _gdn_inputs((2,))
        o = gb(q, k, v, A_log=A_log, a=a, dt_bias=gdtb, b=b)
        g, beta = ref.gdn_gates(A_log=A_log, a=a, dt_bias=gdtb, b=b)
        o_ex = ref.gdn_standard_step(Sg, q.double(), k.double(), v.double(), g.double(),
                                     beta.double(), None, True, rows, rows, "vk", torch.float64)
        assert torch.isfinite(y).all() and torch.isfinite(o).all()
        ey, eo = _rel(y, y_ex), _rel(o, o_ex)
        assert ey < tol and eo < tol, (name, step, ey, eo)


def test_block_bf16_activations_and_out(seed):
    blk = Mamba2DecodeBlock(H, P, N, G, precision="nvfp4/fp16sr", buffer_len=L, num_slots=2,
                            backend="torch")
    assert blk.cache.act_dtype == torch.bfloat16
    blk.prefill([0, 1], torch.randn(2, H, P, N))
    A, D, dtb = _mamba2_params()
    x, dt, B, C, _ = _mamba2_inputs((2,))
    out = torch.empty(2, H, P, dtype=torch.bfloat16)
    y = blk(x.bfloat16(), dt, A, B.bfloat16(), C.bfloat16(), D=D, dt_bias=dtb, out=out)
    assert y is out and torch.isfinite(out.float()).all()
    with pytest.raises(TypeError, match="x must have dtype"):
        blk(x, dt, A, B.bfloat16(), C.bfloat16(), D=D, dt_bias=dtb)


def test_block_refuses_move_and_bad_args():
    blk = GDNDecodeBlock(HK, HV, K, V, precision="fp32", num_slots=1, act_dtype=torch.float32,
                         backend="torch")
    blk.float()                     # no-op conversions are fine
    blk.to("cpu")
    with pytest.raises(RuntimeError, match="cannot be moved or cast"):
        blk.double()
    assert "GDNReplayCache" in repr(blk)
    with pytest.raises(ValueError, match="backend"):
        Mamba2DecodeBlock(H, P, N, G, backend="triton")
    with pytest.raises(ValueError, match="unknown precision pair"):
        Mamba2DecodeBlock(H, P, N, G, precision="fp4")
    with pytest.raises(ValueError, match="multiple of 16"):
        GDNDecodeBlock(HK, HV, 24, V, precision="nvfp4/fp16sr")
    assert sum(p.numel() for p in blk.parameters()) == 0
