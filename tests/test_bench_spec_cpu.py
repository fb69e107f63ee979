"""Smoke test of ``replayssm-bench spec`` on CPU (torch backend, tiny shapes, wall-clock timing):
every cell kind is produced, ratios and memory rows are consistent, JSON + markdown (+ PNG) land
under --out."""
import json
import math
import os
import re

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


def test_spec_deadline_keeps_the_cells_measured(tmp_path, restore_threads):
    """A deadline that passes during the run stops it between cells: the cells measured so far
    and every memory row are written, ``complete`` is False."""
    out = str(tmp_path / "spec")
    rc = main(["spec", "--device", "cpu", "--tiny", "--batches", "1,2,3", "--T", "1,2", "--L", "4",
               "--pairs", "fp32", "--replays", "1", "--deadline", "1e-9", "--no-plots",
               "--out", out])
    assert rc == 0
    with open(os.path.join(out, "spec.json")) as f:
        res = json.load(f)
    assert res["meta"]["complete"] is False
    assert len(res["cells"]) == 1 and res["cells"][0]["kind"] == "standard"   # the first cell only
    assert {m["layer"] for m in res["memory"]} == {"mamba2", "gdn"}


def test_spec_bench_rejects_bad_arguments(tmp_path):
    """Every bad option stops the command before any cell, naming the option."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    base = ["spec", "--device", "cpu", "--tiny", "--pairs", "fp32"]
    for extra, match in ((["--pairs", "fp33"], "--pairs: unknown precision pair 'fp33'"),
                         (["--T", "0"], "--T: every value must be in 1..16"),
                         (["--batches", "1,2,0"], "--batches: every value must be >= 1"),
                         (["--batches", "1,x"], "--batches: expected comma-separated integers"),
                         (["--L", "0"], "--L must be in 1..64"),
                         (["--replays", "0"], "--replays must be >= 1"),
                         (["--num-layers", "0"], "--num-layers must be >= 1"),
                         (["--budget-gib", "0"], "--budget-gib must be > 0"),
                         (["--out", str(blocker / "sub")], "cannot create the output folder")):
        argv = base + extra + ([] if "--out" in extra else ["--out", str(tmp_path / "o")])
        with pytest.raises(SystemExit, match=match):
            main(argv)
    assert not (tmp_path / "o").exists()


def test_spec_error_mid_run_writes_the_cells_measured(tmp_path, monkeypatch, restore_threads):
    """A cell that raises stops the run, but the cells measured before it are written (with the
    error and ``complete`` False) before the exception propagates."""
    from bench import spec
    real = spec.layer_cells

    def failing(layer, *a, **k):
        if layer == "gdn":
            raise RuntimeError("planted failure")
        return real(layer, *a, **k)
    monkeypatch.setattr(spec, "layer_cells", failing)
    out = str(tmp_path / "spec")
    with pytest.raises(RuntimeError, match="planted failure"):
        main(["spec", "--device", "cpu", "--tiny", "--batches", "1", "--T", "1", "--L", "4",
              "--pairs", "fp32", "--replays", "1", "--no-plots", "--out", out])
    with open(os.path.join(out, "spec.json")) as f:
        res = json.load(f)
    meta = res["meta"]
    assert meta["complete"] is False and "planted failure" in meta["error"]
    assert res["cells"] and {c["layer"] for c in res["cells"]} == {"mamba2"}
    assert meta["argv"][0] == "spec" and "commit" in meta and meta["dims"]["gdn"]["HV"] > 0
    assert "**Incomplete:** stopped by RuntimeError" in open(os.path.join(out, "spec.md")).read()


def test_spec_warm_only_run_times_nothing_and_writes_nothing(tmp_path, monkeypatch,
                                                           restore_threads):
    from bench import spec, timing
    monkeypatch.setattr(timing, "WARM_ONLY", False)  # restored after the test
    timings, real_time_us = [], spec.time_us

    def recorded_time_us(*args):
        timings.append(real_time_us(*args))
        return timings[-1]
    monkeypatch.setattr(spec, "time_us", recorded_time_us)
    out = tmp_path / "spec"
    rc = main(["spec", "--device", "cpu", "--tiny", "--batches", "2", "--T", "2", "--L", "4",
               "--pairs", "nvfp4/fp16sr", "--replays", "1", "--warm-only", "--out", str(out)])
    assert rc == 0 and not out.exists()
    assert timings and all(math.isnan(t["median_us"]) for t in timings)  # every cell ran, untimed


def test_spec_warm_jobs_split_the_pairs_over_warm_only_processes(tmp_path, monkeypatch, capsys,
                                                                 restore_threads):
    import subprocess

    from bench import timing, warmup
    from cute_kernels.common import KERNEL_CACHE_DIR_ENV
    monkeypatch.setenv(KERNEL_CACHE_DIR_ENV, "")  # unset: the warm-up makes a temporary one
    commands, real_popen = [], subprocess.Popen

    def popen(cmd, **kwargs):
        if cmd[:1] != ["git"]:        # (the result's run metadata asks git for the commit)
            commands.append((cmd, kwargs["env"][KERNEL_CACHE_DIR_ENV]))
        return real_popen(cmd, **kwargs)
    monkeypatch.setattr(subprocess, "Popen", popen)
    out = tmp_path / "spec"
    argv = ["spec", "--device", "cpu", "--tiny", "--batches", "2", "--T", "2", "--L", "4",
            "--pairs", "fp32,nvfp4/fp16sr,fp8/fp32", "--replays", "1", "--no-plots",
            "--warm-jobs", "2", "--out", str(out)]
    assert main(argv) == 0
    assert not timing.WARM_ONLY
    shares = []
    for cmd, cache_dir in commands:
        assert cmd[1:3] == ["-m", "bench"] and cmd[3:3 + len(argv)] == argv
        assert cmd[-5:] == ["--pairs", cmd[-4], "--warm-jobs", "0", "--warm-only"]
        assert cache_dir and cache_dir == os.environ[KERNEL_CACHE_DIR_ENV]
        shares.append(cmd[-4])
    assert shares == ["fp32,fp8/fp32", "nvfp4/fp16sr"]
    printed = capsys.readouterr().out
    assert "# warm-up: 2 processes in" in printed and "failed" not in printed
    assert re.search(r"# kernels in the measurement: \d+ loaded from the disk cache, \d+ compiled",
                     printed)  # (process totals: this pytest process compiled kernels before)
    with open(out / "spec.json") as f:
        assert {c["name"] for c in json.load(f)["cells"] if c["kind"] == "replay"} == {
            "fp32", "nvfp4/fp16sr", "fp8/fp32"}


def test_sweep_warm_up_shares_the_deadline(monkeypatch):
    from bench import sweep, warmup
    calls = []

    class Started(Exception):
        pass

    def warm_up(argv, pairs, jobs, child_args=()):
        calls.append((argv, list(pairs), jobs, list(child_args)))
        raise Started
    monkeypatch.setattr(warmup, "warm_up", warm_up)
    monkeypatch.setattr(sweep.torch.cuda, "is_available", lambda: True)
    argv = ["sweep", "--pairs", "fp32,nvfp4/fp16sr", "--deadline", "300", "--warm-jobs", "4"]
    with pytest.raises(Started):
        main(argv)
    assert calls == [(argv, ["fp32", "nvfp4/fp16sr"], 4, ["--deadline", "300"])]


def test_spec_shapes_option():
    """``spec --shapes``: at most one shape per layer kind, of a timed kind; the default shapes
    otherwise; bad values exit naming the shape (before any work)."""
    from bench.spec import SHAPES, spec_shapes
    both = ["mamba2", "gdn"]
    assert spec_shapes("", both, False) == SHAPES
    assert spec_shapes("nemotron3-nano-4b", both, False) == {"mamba2": "nemotron3-nano-4b",
                                                             "gdn": "qwen3.5-4b"}
    assert spec_shapes("qwen3.5-122b", ["gdn"], False) == {"gdn": "qwen3.5-122b"}
    assert spec_shapes("", both, True) == {"mamba2": "tiny", "gdn": "tiny"}
    for arg, layers, tiny, msg in (("nano", both, False, "unknown layer shape 'nano'"),
                                   ("qwen3.5-4b", ["mamba2"], False, "qwen3.5-4b is a gdn layer"),
                                   ("nemotron3-super,nemotron3-nano-4b", both, False,
                                    "one shape per layer kind"),
                                   ("qwen3.5-4b", both, True, "exclude each other")):
        with pytest.raises(SystemExit, match=msg):
            spec_shapes(arg, layers, tiny)


def test_session45_spec_acceptance_and_rotation(tmp_path, restore_threads):
    """ReplaySSM verify cells commit 1..T tokens a step, as the snapshot baseline's (the first of
    the T tokens is always accepted): at T = 1 every row then flushes once per L steps (0..T
    drew half that). The acceptance vectors cycle with a count prime to the slot-set rotation."""
    from bench import spec
    for rot in range(1, 1025):
        assert rot % spec._n_acceptance(rot)
    out = str(tmp_path / "spec")
    assert main(["spec", "--device", "cpu", "--tiny", "--layer", "mamba2", "--batches", "2",
                 "--T", "1", "--L", "4", "--pairs", "fp32", "--replays", "1", "--budget-gib", "1",
                 "--num-layers", "1", "--out", out, "--no-plots"]) == 0
    with open(os.path.join(out, "spec.json")) as f:
        cells = json.load(f)["cells"]
    frs = [c["flush_per_row_step"] for c in cells if c.get("flush_per_row_step") is not None]
    assert frs and all(abs(f - 1 / 4) < 1e-9 for f in frs), frs
