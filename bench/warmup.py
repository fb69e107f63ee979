"""Parallel kernel warm-up for the GPU benchmarks (``--warm-jobs N`` of ``sweep`` and ``spec``).

CuTe kernels compile on first use, seconds each and one at a time per process, so a sweep used to
spend most of its time compiling. With ``--warm-jobs N`` the benchmark first runs N copies of its
own command line, the precision pairs split round-robin among them, with the hidden ``--warm-only``
flag: each runs its cells' code once (the timing helpers of bench/timing.py stop after their eager
warm-up pass), which compiles exactly the kernel variants the measurement needs into the on-disk
kernel cache (``REPLAYSSM_KERNEL_CACHE_DIR``; a temporary directory when unset). Warm-only runs time
nothing and write no results. The measurement that follows loads every kernel from disk.
"""
from __future__ import annotations

import argparse
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Sequence

from . import timing


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--warm-jobs", type=int, default=0, metavar="N",
                   help="first compile the kernels in N parallel processes (the pairs split among "
                        "them) into the disk kernel cache ($REPLAYSSM_KERNEL_CACHE_DIR, else a "
                        "temporary directory), then measure with every kernel loaded (0 = off)")
    p.add_argument("--warm-only", action="store_true", help=argparse.SUPPRESS)


def setup(args, pairs: Sequence[str], child_args: Sequence[str] = ()) -> None:
    """Switch the timing helpers off in a ``--warm-only`` run (on otherwise); with
    ``--warm-jobs N``, run the warm-up processes (this command line plus ``child_args``) and wait
    for them."""
    timing.WARM_ONLY = args.warm_only
    if args.warm_jobs > 0 and not args.warm_only:
        warm_up(args.argv, pairs, args.warm_jobs, child_args)


def warm_up(argv: Sequence[str], pairs: Sequence[str], jobs: int,
            child_args: Sequence[str] = ()) -> None:
    """Run ``python -m bench <argv> --pairs <share> --warm-only <child_args>`` in ``jobs``
    processes at once and wait. A failed process is reported, not fatal: the measurement then
    compiles what is missing."""
    from cute_kernels.common import KERNEL_CACHE_DIR_ENV

    if not os.environ.get(KERNEL_CACHE_DIR_ENV):
        cache_dir = tempfile.mkdtemp(prefix="replayssm_kernels_")
        atexit.register(shutil.rmtree, cache_dir, ignore_errors=True)
        os.environ[KERNEL_CACHE_DIR_ENV] = cache_dir  # inherited by the children
        print(f"# kernel cache: {cache_dir} (temporary; set {KERNEL_CACHE_DIR_ENV} to keep it)")
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # `bench` importable
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    shares = [list(pairs[i::jobs]) for i in range(min(jobs, len(pairs)))]
    t0 = time.time()
    running = []
    for share in shares:
        # later options override earlier ones, so the original command line is kept as is
        cmd = [sys.executable, "-m", "bench", *argv, "--pairs", ",".join(share),
               "--warm-jobs", "0", "--warm-only", *child_args]
        log = tempfile.TemporaryFile(mode="w+")
        running.append((share, log, subprocess.Popen(cmd, env=env, stdout=log,
                                                      stderr=subprocess.STDOUT, text=True)))
    failed = 0
    for share, log, proc in running:
        if proc.wait() != 0:
            failed += 1
            log.seek(0)
            print(f"# warm-up of {','.join(share)} failed (rc {proc.returncode}); its output ends:\n"
                  f"{log.read()[-3000:]}")
        log.close()
    print(f"# warm-up: {len(shares)} processes in {time.time() - t0:.1f} s"
          + (f", {failed} failed (the measurement compiles what they missed)" if failed else ""))


def report(args) -> None:
    """After a measurement that had a warm-up: how many kernels it loaded and compiled (every
    one should have been loaded)."""
    if args.warm_jobs > 0 and not args.warm_only:
        from cute_kernels.common import disk_cache_counts

        loaded, compiled = disk_cache_counts()
        print(f"# kernels in the measurement: {loaded} loaded from the disk cache, "
              f"{compiled} compiled (missed by the warm-up)")
