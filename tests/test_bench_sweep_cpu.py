"""CPU check of the ``replayssm-bench sweep --flush-first`` step plan against the decode
semantics: run the torch reference decode over one rotated L-cycle from ``write_pos = (s mod L)
+ 1`` and compare the slots whose checkpoint is written at each step (``flush_count`` moves) with
the ones :func:`bench.sweep.flush_order_sets` puts first."""
import torch

from bench.sweep import flush_order_sets
import replayssm_lp as R
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


def test_sweep_rejects_bad_arguments_before_any_work(tmp_path):
    """Every bad option stops ``sweep`` before the GPU check, the warm-up or the bandwidth
    measurement, naming the option (the checks run the same on a GPU machine)."""
    import pytest
    from bench.__main__ import main
    base = ["sweep", "--out", str(tmp_path / "o")]
    for extra, match in ((["--batches", "8,0"], "--batches: every value must be >= 1"),
                         (["--L", "0"], "--L: every value must be in 1..64"),
                         (["--L", "16,100"], "--L: every value must be in 1..64"),
                         (["--replays", "0"], "--replays must be >= 1"),
                         (["--max-draft", "99"], "--max-draft must be in 0..16"),
                         (["--warm-jobs", "-1"], "--warm-jobs must be >= 0"),
                         (["--shapes", "foo"], "--shapes: unknown shape 'foo'"),
                         (["--layer", "gdn", "--shapes", "nemotron3-super"],
                          "nemotron3-super is a mamba2 layer, not gdn"),
                         (["--pairs", "fp16/fp8sr"], "--pairs: unknown precision pair")):
        with pytest.raises(SystemExit, match=match):
            main(base + extra)
    assert not (tmp_path / "o").exists()


def _fake_gpu_sweep(monkeypatch, fail_on_shape=None):
    """The sweep's own control flow on CPU: the GPU checks, bandwidth and cells faked."""
    from bench import sweep, warmup

    def cells_fn(shape, pairs, batches, Ls, replays, peers, progress, phases=False, cells=None,
                 order=False, max_draft=0, philox_rounds=10):
        if shape == fail_on_shape:
            raise RuntimeError("planted failure")
        for b in batches:
            cells.append(dict(shape=shape, kind="standard", name="standard fp32", batch=b, L=None,
                              bytes=1e6 * b, median_us=10.0 * b))
            for L in Ls:
                for p in pairs:
                    cells.append(dict(shape=shape, kind="replay", name=p, batch=b, L=L,
                                      bytes=2e5 * b, median_us=3.0 * b))
        return cells
    monkeypatch.setattr(sweep.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(sweep.torch.cuda, "get_device_name", lambda *a: "fake H200")
    monkeypatch.setattr(sweep, "copy_bandwidth_gbs", lambda: 4000.0)
    monkeypatch.setattr(sweep, "mamba2_cells", cells_fn)
    monkeypatch.setattr(sweep, "gdn_cells", cells_fn)
    monkeypatch.setattr(sweep, "launch_overhead", lambda shape: {"mamba2_decode (public op)": 5.0})
    monkeypatch.setattr(sweep, "gdn_launch_overhead", lambda shape: {"gdn_decode (public op)": 6.0})
    monkeypatch.setattr(warmup, "report", lambda args: None)


def test_sweep_writes_self_describing_results(tmp_path, monkeypatch):
    import json
    from bench.__main__ import main
    _fake_gpu_sweep(monkeypatch)
    out = tmp_path / "o"
    assert main(["sweep", "--layer", "gdn", "--shapes", "qwen3.5-4b", "--pairs", "fp32",
                 "--batches", "1,8", "--L", "16", "--no-plots", "--out", str(out)]) == 0
    res = json.loads((out / "sweep.json").read_text())
    meta = res["meta"]
    assert meta["complete"] is True and meta["error"] is None
    assert meta["layer"] == "gdn" and meta["dims"]["qwen3.5-4b"]["HV"] == 32
    assert meta["batches"] == [1, 8] and meta["L"] == [16] and meta["argv"][0] == "sweep"
    assert "commit" in meta and "median_us" in meta["units"]
    assert meta["host_overhead_us"] == {"gdn_decode (public op)": 6.0}   # the swept layer's ops
    assert len(res["cells"]) == 4 and "gdn_decode (public op)" in (out / "sweep.md").read_text()


def test_sweep_error_mid_run_writes_the_cells_measured(tmp_path, monkeypatch):
    import json
    import pytest
    from bench.__main__ import main
    _fake_gpu_sweep(monkeypatch, fail_on_shape="nemotron3-nano-4b")
    out = tmp_path / "o"
    with pytest.raises(RuntimeError, match="planted failure"):
        main(["sweep", "--shapes", "nemotron3-super,nemotron3-nano-4b", "--pairs", "fp32",
              "--batches", "1", "--L", "16", "--no-plots", "--out", str(out)])
    res = json.loads((out / "sweep.json").read_text())
    assert res["meta"]["complete"] is False and "planted failure" in res["meta"]["error"]
    assert {c["shape"] for c in res["cells"]} == {"nemotron3-super"}
    assert res["meta"]["host_overhead_us"] == {}
    assert "**Incomplete:** stopped by RuntimeError" in (out / "sweep.md").read_text()


def test_session45_traffic_and_rotation():
    """The GDN split pairs' flush reads each entry's raw v + beta (and k, 1/|k|, g), not u: it
    recomputes u from the checkpoint. At batch 1 one pass over the timed slot sets of the smallest
    read copy (nvfp4, Super) moves >= 4x the L2 by the traffic model, its read copies alone >= 2x
    (max_rot 64 held them at 38 MB, inside an H200's 60 MB)."""
    from bench import timing, traffic
    H, HV, K, V, L, act = 16, 32, 128, 128, 16, 2
    for pair in ("nvfp4/fp16sr", "fp8/fp32"):
        p = R.parse_pair(pair)
        elems = HV * V * K
        hi, read = elems * p.rec_bytes_per_element(K), elems * p.read_bytes_per_element(K)
        io = 2 * H * K * act + 2 * HV * V * act + 2 * HV * 4
        entry = H * K * act + H * 4 + HV * V * 4 + HV * 4            # the appended entry (u)
        extra = HV * V * act + HV * 4                                 # raw v, beta
        flush_entry = H * K * act + H * 4 + HV * 4 + HV * V * act + HV * 4
        b = traffic.gdn_bytes(pair, H, HV, K, V, L)
        assert b.flush == 2 * hi + read + L * flush_entry + entry + extra + io
    d = traffic.SHAPES["nemotron3-super"]
    tb = traffic.mamba2_bytes("nvfp4/fp16sr", d["H"], d["P"], d["N"], d["G"], 16)
    read = d["H"] * d["P"] * d["N"] * R.parse_pair("nvfp4/fp16sr").read_bytes_per_element(d["N"])
    rot = timing.pool_rotation(tb.amortized, 1)
    assert rot * tb.amortized >= 4 * timing.L2_BYTES and rot * read >= 2 * timing.L2_BYTES
