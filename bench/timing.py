"""Timing helpers shared by the GPU benchmarks: CUDA-graph replays over whole L-cycles, state pools
rotated so the timed data is not L2-resident, medians, and the copy-bandwidth anchor."""
from __future__ import annotations

import statistics
import time
from typing import Callable, Dict, List, Optional

import torch

L2_BYTES = 60 * 2**20  # H200

#: Set by the benchmarks' hidden ``--warm-only`` flag (bench/warmup.py): the timing helpers run their
#: eager warm-up pass only, which compiles every kernel variant a cell needs, and time nothing.
WARM_ONLY = False
NOT_TIMED = {"median_us": float("nan"), "min_us": float("nan"), "max_us": float("nan")}


def progress(total, desc):
    """A tqdm progress bar (not left on screen), or a silent stand-in without tqdm."""
    try:
        from tqdm import tqdm
        return tqdm(total=total, desc=desc, leave=False)
    except ImportError:  # pragma: no cover
        class _P:
            def update(self, n=1):
                pass

            def set_postfix_str(self, s):
                pass

            def close(self):
                pass
        return _P()


def pool_rotation(bytes_per_row_step: float, batch: int, min_bytes: float = 4 * L2_BYTES,
                  max_rot: int = 1024) -> int:
    """How many disjoint slot sets to rotate through so one pass over them exceeds ``min_bytes``.
    (``max_rot`` was 64 until session 45: at batch 1 the nvfp4 read-copy pools were then 19-38
    MB, inside the 50 / 60 MB L2 of an H100 / H200, so those cells read partly from L2.)"""
    per_set = max(bytes_per_row_step * batch, 1.0)
    return int(max(1, min(max_rot, -(-min_bytes // per_set))))


def graph_time_us(step: Callable[[int], None], steps_per_graph: int, replays: int = 20,
                  warmup: int = 2) -> Dict[str, float]:
    """Capture ``steps_per_graph`` calls of ``step(i)`` in one CUDA graph, replay it, and return the
    median / min / max microseconds per step over ``replays`` timed replays."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(steps_per_graph):  # warm up: compile everything before capture
            step(i)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    if WARM_ONLY:
        return dict(NOT_TIMED)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(steps_per_graph):
            step(i)
    for _ in range(warmup):
        g.replay()
    torch.cuda.synchronize()
    times: List[float] = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(replays):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000.0 / steps_per_graph)
    del g
    return {"median_us": statistics.median(times), "min_us": min(times), "max_us": max(times)}


def _median_event_s(fn: Callable[[], None], reps: int, warm: int = 20) -> float:
    """Median CUDA-event time of ``fn()`` over ``reps`` calls, after ``warm`` untimed ones (the
    clocks ramp up first)."""
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / 1000.0)
    return statistics.median(ts)


def copy_bandwidth_gbs(nbytes: int = 2 * 2**30, reps: int = 10) -> float:
    """Device-to-device copy bandwidth (bytes read + written per second), median of ``reps``."""
    a = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    b = torch.empty_like(a)
    t = _median_event_s(lambda: b.copy_(a), reps)
    del a, b
    return 2 * nbytes / t / 1e9


def read_bandwidth_gbs(nbytes: int = 2 * 2**30, reps: int = 10) -> Dict[str, float]:
    """Read-only bandwidth (bytes read per second) of torch's fp32 reductions over ``nbytes``,
    median of ``reps`` each: the ceiling for kernels that mostly read (a ReplaySSM non-flush
    step), next to :func:`copy_bandwidth_gbs` (read + write). Returns {"sum": ..., "amax": ...}."""
    a = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    out = {name: nbytes / _median_event_s(lambda op=op: op(a), reps) / 1e9
           for name, op in (("sum", torch.sum), ("amax", torch.amax))}
    del a
    return out


def host_overhead_us(call: Callable[[], None], n: int = 2000) -> float:
    """Host time per eager call (launch path only; the GPU work is tiny and queued)."""
    if WARM_ONLY:
        call()
        torch.cuda.synchronize()
        return float("nan")
    for _ in range(50):
        call()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


class DeadlineReached(Exception):
    """Raised by :class:`DeadlineProgress` once the run's wall-clock deadline passed."""


class DeadlineProgress:
    """The progress bar the cell generators update, raising :class:`DeadlineReached` once the
    wall-clock ``deadline`` (a ``time.time()`` value; None: none) passed. Checked between cells,
    so the benchmarks keep every cell measured before it (``sweep`` / ``spec --deadline``)."""

    def __init__(self, prog, deadline: Optional[float]):
        self.prog, self.deadline, self.reached = prog, deadline, False

    def update(self, n: int = 1):
        self.prog.update(n)
        if self.deadline is not None and time.time() > self.deadline:
            self.reached = True
            raise DeadlineReached
