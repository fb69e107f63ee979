"""CPU check of the ``replayssm-bench sweep --flush-first`` step plan against the decode
semantics: run the torch reference decode over one rotated L-cycle from ``write_pos = (s mod L)
+ 1`` and compare the slots whose checkpoint is written at each step (``flush_count`` moves) with
the ones :func:`bench.sweep.flush_order_sets` puts first."""
import torch

from bench.sweep import flush_order_sets
from replayssm_lp import Mamba2ReplayCache, ops


def test_flush_order_sets_match_the_decode():
    torch.manual_seed(0)
    H, P, N, G, L, batch, rot = 2, 4, 8, 1, 4, 6, 3
    cache = Mamba2ReplayCache(rot * batch, H, P, N, G, precision="fp32", buffer_len=L,
                              act_dtype=torch.float32, device="cpu", seed=1)
    cache.init_from_state(list(range(cache.num_slots)),
                          torch.randn(cache.num_slots, H, P, N) * 0.1)
    s_all = torch.arange(cache.num_slots, dtype=torch.int32)
    cache.write_pos.copy_(s_all % L + 1)
    sets = [torch.arange(r * batch, (r + 1) * batch, dtype=torch.int32) for r in range(rot)]
    grid, first = flush_order_sets(sets, L)
    assert len(grid) == len(first) == rot * L
    x, dt = torch.randn(batch, H, P), torch.rand(batch, H) * 0.1
    A, B, C = -torch.rand(H), torch.randn(batch, G, N), torch.randn(batch, G, N)
    flushes = torch.zeros(cache.num_slots, dtype=torch.int64)
    for i in range(rot * L):
        assert sorted(first[i].tolist()) == sorted(grid[i].tolist())   # same rows, reordered
        before = cache.flush_count.clone()
        ops.mamba2_decode(cache, x, dt, A, B, C, None, None, None, True, first[i],
                          backend="torch")
        moved = set(torch.nonzero(cache.flush_count != before).flatten().tolist())
        lead = first[i][:len(moved)].tolist()
        assert set(lead) == moved, (i, lead, moved)
        flushes += (cache.flush_count != before).long()
    assert torch.all(flushes == 1)               # every slot flushes once per cycle
    assert torch.equal(cache.write_pos, s_all % L + 1)   # and the cycle repeats
