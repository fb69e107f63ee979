"""Argument checks and run metadata shared by the bench commands: a bad value stops the command
with a message naming the option before any warm-up, bandwidth measurement or cell, and every
JSON result says which code and command produced it."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def int_list(option: str, text: str, lo: int, hi: Optional[int] = None) -> List[int]:
    """``"1,8,32"`` -> [1, 8, 32], each in [lo, hi]; else SystemExit naming ``option``."""
    try:
        vals = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise SystemExit(f"{option}: expected comma-separated integers, got {text!r}") from None
    bad = [v for v in vals if v < lo or (hi is not None and v > hi)]
    if not vals or bad:
        rng = f"in {lo}..{hi}" if hi is not None else f">= {lo}"
        raise SystemExit(f"{option}: every value must be {rng}, got {text!r}")
    return vals


def at_least(option: str, value, lo):
    """``value`` >= ``lo`` (None passes: the command's default); else SystemExit naming it."""
    if value is not None and value < lo:
        raise SystemExit(f"{option} must be >= {lo}, got {value}")
    return value


#: the default of ``--philox-rounds`` (so tests/gpu_scripts/run_knob_grid.sh can set it)
PHILOX_ROUNDS_ENV = "REPLAYSSM_BENCH_PHILOX_ROUNDS"


def add_philox_rounds(parser) -> None:
    """The ``--philox-rounds`` option (sweep and spec): the ReplaySSM caches' SR generator rounds."""
    parser.add_argument("--philox-rounds", type=int, default=None,
                        help="Philox rounds of the caches' stochastic-rounding words (1-16; "
                             f"default 10, or ${PHILOX_ROUNDS_ENV}: knob grids): the flush "
                             "encoders' cost; RN-only pairs ignore it")


def philox_rounds(value: Optional[int]) -> int:
    """``--philox-rounds`` (None: ``$REPLAYSSM_BENCH_PHILOX_ROUNDS``, else 10), checked to be in
    the caches' range; else SystemExit naming the option or the variable."""
    from replayssm_lp.formats import PHILOX_ROUNDS, PHILOX_ROUNDS_RANGE
    name = "--philox-rounds"
    if value is None:
        env = os.environ.get(PHILOX_ROUNDS_ENV, "")
        if not env:
            return PHILOX_ROUNDS
        name = f"${PHILOX_ROUNDS_ENV}"
        try:
            value = int(env)
        except ValueError:
            raise SystemExit(f"{name} must be an integer, got {env!r}") from None
    lo, hi = PHILOX_ROUNDS_RANGE
    if not lo <= value <= hi:
        raise SystemExit(f"{name} must be in {lo}..{hi}, got {value}")
    return value


def shapes_of(option: str, names: List[str], known: Dict[str, dict], kind: Optional[str] = None):
    """Every name a key of ``known`` (of layer ``kind`` when given); else SystemExit."""
    for n in names:
        if n not in known:
            raise SystemExit(f"{option}: unknown shape {n!r}; known: {', '.join(known)}")
        if kind is not None and known[n]["kind"] != kind:
            raise SystemExit(f"{option}: shape {n} is a {known[n]['kind']} layer, not {kind}")
    return names


def out_dir(option: str, path: str) -> str:
    """Create the output folder now (not after hours of measuring); SystemExit if impossible."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise SystemExit(f"{option} {path!r}: cannot create the output folder: {e}") from None
    if not os.access(path, os.W_OK):
        raise SystemExit(f"{option} {path!r}: the output folder is not writable")
    return path


def run_meta(argv: Optional[List[str]] = None) -> Dict[str, object]:
    """Which code and command produced a result: git commit (+ dirty flag), argv, Python,
    host."""
    def git(*a):
        try:
            r = subprocess.run(["git", "-C", ROOT, *a], capture_output=True, text=True, timeout=10)
            return r.stdout.strip() if r.returncode == 0 else None
        except (OSError, subprocess.SubprocessError):
            return None
    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return dict(commit=commit, dirty=bool(status) if status is not None else None,
                argv=list(sys.argv[1:] if argv is None else argv), python=platform.python_version(),
                host=platform.node())
