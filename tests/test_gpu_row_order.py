"""GPU tests of the flush-first row order (cute_kernels.row_order): the order kernel against its
torch reference, and Mamba-2 decode / verify steps launched through it (forced on with
REPLAYSSM_M2_ORDER=1 at small batches) against the torch reference, pad rows and unowned slots
untouched (CUDA-graph capture through it: test_gpu_ops.test_cuda_graph_capture_replay)."""
import pytest
import torch


from .conftest import requires_sm90
from .spec_fuzz import spec_fuzz
from .test_gpu_ops import M2, _twin_steps

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
    L = 4
    ct, cc, outs, stats = _twin_steps("mamba2", pair, L, 3 * L + 3)
    worst = max(((a - b).norm() / b.norm().clamp(min=1e-30)).item() for b, a in outs)
    assert worst < 1e-2, worst
    assert int(cc.flush_count.max()) >= 3


@pytest.mark.parametrize("pair", ["fp32", "nvfp4/fp16sr"])
def test_mamba2_verify_in_flush_first_order_matches_twin(pair, seed, monkeypatch):
    monkeypatch.setenv("REPLAYSSM_M2_ORDER", "1")
    r = spec_fuzz("mamba2", pair, 40, backend="cute", device="cuda", dims=M2, L=8,
                  max_draft=4, batch=6, pool=17, act=torch.bfloat16, seed=seed,
                  exact_oracle=(pair == "fp32"), exact_rel=2e-2)
    assert r.steps == 40 and r.flush_rows >= 3, r
