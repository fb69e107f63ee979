"""tests/gpu_scripts/ab_merge.py (the A/B table of a device call; CPU): one row per cell, spec
cells keyed by both L and T (T4 and T8 of one pair once collided into one row), the ratio new/base,
the standard-decode anchors left out, a cell of one tree only kept with '-'."""
import json
import os

from tests.harness import gpu_script


def _ab_merge():
    return gpu_script("ab_merge")


def _write(out, n, name, fname, cells):
    d = os.path.join(out, f"g{n}_{name}", name)
    os.makedirs(d)
    with open(os.path.join(d, fname), "w") as f:
        json.dump({"cells": cells}, f)


def test_spec_cells_keep_t_and_ratios(tmp_path, capsys):
    out = str(tmp_path)
    base = [dict(shape="s", batch=256, T=1, name="standard fp32", median_us=700.0),
            dict(shape="s", batch=256, T=4, name="snapshot fp32", median_us=2000.0),
            dict(shape="s", batch=256, T=4, L=16, name="nvfp4/fp16sr", median_us=300.0),
            dict(shape="s", batch=256, T=8, L=16, name="nvfp4/fp16sr", median_us=600.0)]
    new = [dict(c) for c in base]
    new[2]["median_us"], new[3]["median_us"] = 270.0, 660.0
    new.append(dict(shape="s", batch=256, T=8, L=16, name="fp8/fp16sr", median_us=500.0))
    _write(out, 3, "base", "spec.json", base)
    _write(out, 3, "new", "spec.json", new)
    _write(out, 1, "base", "sweep.json", [dict(shape="s", batch=64, L=16, name="fp32",
                                                median_us=50.0)])
    _write(out, 1, "new", "sweep.json", [dict(shape="s", batch=64, L=16, name="fp32",
                                               median_us=55.0)])
    _ab_merge().main(out, "base", "new", ["1", "3"])
    rows = [r for r in capsys.readouterr().out.splitlines()[2:]]
    assert "| s | 64 | 16 | fp32 | 50.0 | 55.0 | 1.100x |" in rows
    assert "| s | 256 | 16/T4 | nvfp4/fp16sr | 300.0 | 270.0 | 0.900x |" in rows
    assert "| s | 256 | 16/T8 | nvfp4/fp16sr | 600.0 | 660.0 | 1.100x |" in rows
    assert "| s | 256 | T4 | snapshot fp32 | 2000.0 | 2000.0 | 1.000x |" in rows
    assert "| s | 256 | 16/T8 | fp8/fp16sr | None | 500.0 | - |" in rows
    assert not any("standard" in r for r in rows) and len(rows) == 5
