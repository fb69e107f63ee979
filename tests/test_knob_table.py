"""tests/gpu_scripts/knob_table.py (the table of a knob grid; CPU): one round keeps the old
table (medians per setting, the A/B ratio with two settings, '-' for a failed cell); with rounds
the value is the median of the rounds' medians and the round spread column shows the largest
drift of one setting between its rounds."""
import json
import os

from tests.harness import gpu_script


def _knob_table():
    return gpu_script("knob_table")


def _write(path, fname, cells):
    os.makedirs(path)
    with open(os.path.join(path, fname), "w") as f:
        json.dump({"cells": cells}, f)


def _cell(us, batch=256, name="nvfp4/fp16sr"):
    return dict(shape="nemotron3-super", batch=batch, L=16, name=name, median_us=us)


def test_one_round_table(tmp_path):
    kt, out = _knob_table(), str(tmp_path)
    _write(os.path.join(out, "d"), "sweep.json", [_cell(160.0), _cell(300.0, 512)])
    _write(os.path.join(out, "r1"), "sweep.json", [_cell(150.0), _cell(None, 512)])
    lines = kt.table(out, 1, ["d:-", "r1:REPLAYSSM_M2_PAIR_ROLL=1"]).splitlines()
    assert lines[0] == "settings: d:-; r1:REPLAYSSM_M2_PAIR_ROLL=1"
    assert lines[1].endswith("| d | r1 | d/r1 |") and "spread" not in lines[1]
    assert lines[3] == "| nemotron3-super | 256 | 16 | nvfp4/fp16sr | 160.0 | 150.0 | 1.067x |"
    assert lines[4] == "| nemotron3-super | 512 | 16 | nvfp4/fp16sr | 300.0 | - | - |"


def test_rounds_median_and_spread(tmp_path):
    kt, out = _knob_table(), str(tmp_path)
    for d, us in (("d", 100.0), ("d.r2", 104.0), ("d.r3", 101.0),
                  ("r1", 100.0), ("r1.r2", 99.0), ("r1.r3", 98.0)):
        _write(os.path.join(out, d), "spec.json", [dict(layer="mamba2", batch=256, T=8, L=16,
                                                        name="nvfp4/fp16sr", median_us=us)])
    lines = kt.table(out, 3, ["d:-", "r1:X=1"]).splitlines()
    assert lines[0].endswith("(3 rounds)") and lines[1].endswith("| d/r1 | round spread |")
    assert lines[2] == "|---|---:|---:|---|" + "---:|" * 4      # d, r1, ratio, spread
    # medians 101 / 99; the spread is d's 104 / 100 (r1's is 100 / 98)
    assert lines[3] == "| mamba2 | 256 | 8 | nvfp4/fp16sr | 101.0 | 99.0 | 1.020x | 4.0 % |"
