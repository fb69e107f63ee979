"""Smoke test of ``replayssm-bench spec`` on CPU (torch backend, tiny shapes, wall-clock timing):
every cell kind is produced, ratios and memory rows are consistent, JSON + markdown (+ PNG) land
under --out."""
import json
import os

import pytest
import torch

from bench.__main__ import main


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_spec_bench_runs_on_cpu(tmp_path, restore_threads):
    out = str(tmp_path / "spec")
    rc = main(["spec", "--device", "cpu", "--tiny", "--batches", "1,3", "--T", "1,2", "--L", "4",
               "--pairs", "fp32,nvfp4/fp16sr", "--replays", "1", "--budget-gib", "1",
               "--num-layers", "2", "--out", out])
    assert rc == 0
    with open(os.path.join(out, "spec.json")) as f:
        res = json.load(f)
    cells, mem = res["cells"], res["memory"]
    assert not [c for c in cells if "error" in c], [c for c in cells if "error" in c]
    for layer in ("mamba2", "gdn"):
        for batch in (1, 3):
            mine = [c for c in cells if c["layer"] == layer and c["batch"] == batch]
            assert sum(c["kind"] == "standard" for c in mine) == 1
            for T in (1, 2):
                assert sum(c["kind"] == "snapshot" and c["T"] == T for c in mine) == 1
                for pair in ("fp32", "nvfp4/fp16sr"):
                    rep = [c for c in mine if c["T"] == T and c["name"] == pair]
                    assert len(rep) == 1 and rep[0]["median_us"] > 0
                    assert 0 <= rep[0]["flush_per_row_step"] <= 1
                    assert {c["name"] for c in mine if c["kind"] == "phase" and c["T"] == T} >= {
                        f"{pair} [nonflush only]", f"{pair} [flush only]"}
    # memory: T snapshots grow linearly with T; the ring only by T entries
    snap = {m["T"]: m["bytes_per_request"] for m in mem if m["layer"] == "mamba2" and "snapshot fp32" in m["name"]}
    assert snap[2] == 2 * snap[1]
    for m in mem:
        assert m["max_batch"] == int(2**30 // (m["bytes_per_request"] * 2))
    md = open(os.path.join(out, "spec.md")).read()
    assert "## Targets (issue 5)" in md and "Memory per request" in md
    assert res["meta"]["backend"] == "torch"


def test_spec_bench_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="unknown precision pair"):
        main(["spec", "--device", "cpu", "--tiny", "--pairs", "fp33", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):
        main(["spec", "--device", "cpu", "--tiny", "--T", "0", "--out", str(tmp_path)])
