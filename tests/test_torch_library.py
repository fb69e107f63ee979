"""The ops are registered with torch.library (fake impls included) and work under torch.compile."""
import copy

import pytest
import torch

import replayssm_lp as R


def test_ops_are_registered():
    for name in ("mamba2_step", "gdn_step", "commit", "mamba2_standard_decode", "gdn_standard_decode"):
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
