"""CPU tests of the flush-first row order (cute_kernels/row_order.py): its torch reference, the
launch policy, and the kernel compiled for sm_90a (no GPU needed). The kernel against the
reference, and steps launched through it: tests/test_gpu_row_order.py."""
import os

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

import pytest  # noqa: E402
import torch  # noqa: E402

import replayssm_lp as R  # noqa: E402

from .test_host_overhead import cute_on_meta  # noqa: E402,F401  (fixture)


def test_reference_is_a_flush_first_permutation(seed):
    ref = pytest.importorskip("cute_kernels.row_order").flush_first_order_ref
    L, T, R_ = 8, 1, 9
    slots = 50
    wpos = torch.randint(0, R_, (slots,), dtype=torch.int32)
    sbi = torch.randperm(slots)[:40].to(torch.int32)
    sbi[::7] = -1
    used = sbi[sbi >= 0].long()
    wpos[used[:3]] = L                      # some rows flush, some do not, whatever the draw
    wpos[used[3:6]] = 0
    out = ref(wpos, sbi, 40, L, R_, T)
    rows, sl = out[0].long(), out[1]
    assert torch.equal(rows.sort().values, torch.arange(40))
    assert torch.equal(sl, sbi[rows])
    valid = sbi[rows] >= 0
    flush = valid & (wpos[sbi[rows].clamp(min=0).long()] + T > L)
    nf = int(flush.sum())
    assert nf > 0 and flush[:nf].all() and not flush[nf:].any()
    # flushing rows in batch order, the others in reverse batch order
    assert (rows[:nf].diff() > 0).all() and (rows[nf:].diff() < 0).all()
    # verify (T drafts): the kernels' own test h + T > L, h clamped to R - T
    out = ref(torch.tensor([5, 6, 30, -3], dtype=torch.int32), None, 4, 8, 12, 3)
    assert out[0].tolist() == [1, 2, 3, 0]


def test_use_row_order_policy(monkeypatch):
    M = pytest.importorskip("cute_kernels.mamba2_replay")
    monkeypatch.delenv("REPLAYSSM_M2_ORDER", raising=False)
    c = R.Mamba2ReplayCache(300, 2, 8, 32, 1, buffer_len=8)
    assert tuple(c.row_order.shape) == (2, 300) and c.row_order.dtype == torch.int32
    assert not M.use_row_order(c, 1) and not M.use_row_order(c, M.ROW_ORDER_MIN_BATCH - 1)
    assert M.use_row_order(c, M.ROW_ORDER_MIN_BATCH) and M.use_row_order(c, 300)
    assert not M.use_row_order(c, 301)               # more rows than the order buffer holds
    monkeypatch.setenv("REPLAYSSM_M2_ORDER", "1")
    assert M.use_row_order(c, 1) and not M.use_row_order(c, 301)
    monkeypatch.setenv("REPLAYSSM_M2_ORDER", "0")
    assert not M.use_row_order(c, 256)


@pytest.mark.parametrize("has_idx", [True, False])
@pytest.mark.parametrize("T", [1, 8])
def test_order_kernel_compiles_for_sm90a(has_idx, T):
    pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")
    pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi is not installed")
    from cute_kernels import common
    from cute_kernels.row_order import FlushFirstOrder, _fake_args

    op = FlushFirstOrder(16, 16 + T, T, has_idx)
    k, ptx = common.compile_keep_ptx(op, _fake_args(op), ("row_order_test",), {})
    assert ".entry" in ptx and "vote.sync.ballot" in ptx and "bar.sync" in ptx
    st = common.ptx_stats(ptx)
    assert st["ld.local"] == 0 and st["st.local"] == 0
    assert st["st.global.scalar"] == 2                # (row, slot) per row, nothing else
    op = FlushFirstOrder(16, 16 + T, T, has_idx, cursors=True)
    k, ptx = common.compile_keep_ptx(op, _fake_args(op), ("row_order_test_cur",), {})
    assert common.ptx_stats(ptx)["st.global.scalar"] == 5   # + the three cursors


@pytest.mark.parametrize("op", ["decode", "verify"])
def test_ordered_launch_runs_the_order_kernel_first(op, cute_on_meta, monkeypatch):
    """The launch plumbing (kernels stubbed, meta tensors): with the order on, the order kernel
    runs first on the cache's write_pos / row_order (verify: with its T) and the step kernel
    (compiled with ``row_order``) gets the same order tensor; off, neither."""
    import cute_kernels.mamba2_replay as M
    import cute_kernels.mamba2_verify as MV

    from .test_host_overhead import _m2_args, _m2_cache

    rec = cute_on_meta
    monkeypatch.setattr(MV, "compile_mamba2_verify", rec.compile)
    order_calls = []
    monkeypatch.setattr(M, "order_fn", lambda cache, T, has_idx, cursors=False: (
        lambda *a: order_calls.append((len(rec.calls), T, has_idx) + a)))
    monkeypatch.setattr(MV, "order_fn", M.order_fn)
    c = _m2_cache()
    a = _m2_args()
    T = 1
    run = M.mamba2_replay_decode_cute
    if op == "verify":
        T = 2
        for n in ("x", "dt", "B", "C", "out"):
            a[n] = a[n].unsqueeze(1).expand(-1, T, *a[n].shape[1:]).contiguous()
        run = MV.mamba2_verify_cute
    args = (a["x"], a["dt"], a["A"], a["B"], a["C"], a["D"], None, a["dt_bias"], True,
            a["state_batch_indices"], -1, a["out"])
    monkeypatch.setenv("REPLAYSSM_M2_ORDER", "1")
    run(c, *args)
    assert rec.compiles[-1][1]["row_order"] is True
    (n_before, T_, has_idx, sbi, wpos, orig, fcnt, order, batch, pad), = order_calls
    assert orig is None and fcnt is None                      # the [2, n] order
    assert n_before == 0 and len(rec.calls) == 1              # the order kernel went first
    assert (T_, has_idx, batch, pad) == (T, True, 3, -1)
    assert sbi is a["state_batch_indices"] and wpos is c.write_pos and order is c.row_order
    assert rec.calls[-1][26] is c.row_order and rec.calls[-1][25] is c.seed
    monkeypatch.setenv("REPLAYSSM_M2_ORDER", "0")
    run(c, *args)
    assert rec.compiles[-1][1]["row_order"] is False
    assert len(order_calls) == 1 and rec.calls[-1][26] is None and len(rec.calls) == 2


def test_reference_with_cursors(seed):
    """The [5, batch] order: rows and slots as the [2, batch] one, then each row's slot's
    write_pos, ring_origin, flush_count (0 for pad / out-of-range rows)."""
    ref = pytest.importorskip("cute_kernels.row_order").flush_first_order_ref
    slots, batch, L, R_ = 40, 30, 8, 9
    wpos = torch.randint(0, R_, (slots,), dtype=torch.int32)
    orig = torch.randint(0, R_, (slots,), dtype=torch.int32)
    fcnt = torch.randint(0, 1000, (slots,), dtype=torch.int32)
    sbi = torch.randperm(slots)[:batch].to(torch.int32)
    sbi[::5] = -1
    sbi[3] = slots + 2
    two = ref(wpos, sbi, batch, L, R_, 1)
    five = ref(wpos, sbi, batch, L, R_, 1, ring_origin=orig, flush_count=fcnt)
    assert five.shape == (5, batch) and torch.equal(five[:2], two)
    sl = five[1].long()
    ok = (sl >= 0) & (sl < slots)
    for i, c in enumerate((wpos, orig, fcnt)):
        assert torch.equal(five[2 + i][ok], c[sl[ok]]) and (five[2 + i][~ok] == 0).all()
