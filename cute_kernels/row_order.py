"""Flush-first row order: a partition of a batch's rows, the rows that flush this step first.

A replay / verify launch runs one CTA (group) per (row, head chunk) in grid order. A flush CTA
lives ~10x longer than a non-flush one (it folds L buffer entries into the checkpoint and
re-encodes both copies), so when the flushing rows sit anywhere in the batch, the step ends about
one flush-CTA lifetime after the non-flush work. This one-CTA kernel, launched right before the
replay / verify kernel on the same stream, writes

    order[0, i] = batch row of grid position i,   order[1, i] = its cache slot,
    (``cursors``:) order[2:5, i] = the slot's write_pos, ring_origin, flush_count (0 for pad rows),

flushing rows first (in batch order), then the others (pad rows included) from the back, i.e. in
reverse batch order -- one pass over the rows, no total needed before the first write. A row
flushes when ``clamp(write_pos[slot], 0, R - T) + T > L`` -- the kernels' own test (``T = 1``:
decode). Only the schedule changes: every row still runs exactly once, with the same work.
Measured (H200, Nemotron-3-Super, L = 16, staggered rows, b256, rows permuted on the host):
nvfp4/fp16sr 242.7 -> 194.5 µs per step, fp32 350.1 -> 333.6.
With ``cursors`` the step kernel takes a row's cursors from the same entry (one round trip for
row, slot and cursors instead of two dependent ones; the live cursors are not read in that step).
"""
from __future__ import annotations

from typing import Optional

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Int32, Uint32, const_expr

import cuda.bindings.driver as cuda

from . import common
from .common import CompiledKernel, KernelCache

__all__ = ["FlushFirstOrder", "compile_flush_first_order", "flush_first_order_ref",
           "order_scratch", "run_order", "small_split_applies"]

_THREADS = 1024


class FlushFirstOrder:
    """Compile-time: ``L`` (buffer length), ``R`` (ring capacity), ``T`` (entries the launch
    appends per row: 1 for decode, the draft count for verify), ``has_idx``, ``cursors`` (also
    write the rows' cursors: ``mOrder`` is [5, n])."""

    def __init__(self, L: int, R: int, T: int, has_idx: bool, cursors: bool = False):
        self.L, self.R, self.T, self.has_idx = int(L), int(R), int(T), bool(has_idx)
        self.cursors = bool(cursors)

    @cute.jit
    def __call__(self, mIdx: Optional[cute.Tensor], mWPos: cute.Tensor,
                 mOrig: Optional[cute.Tensor], mFcnt: Optional[cute.Tensor], mOrder: cute.Tensor,
                 batch: Int32, pad_slot_id: Int32, stream: cuda.CUstream):
        self.kernel(mIdx, mWPos, mOrig, mFcnt, mOrder, batch, pad_slot_id).launch(
            grid=[1, 1, 1], block=[_THREADS, 1, 1], stream=stream)

    @cute.jit
    def _row_flag(self, mIdx: Optional[cute.Tensor], mWPos: cute.Tensor, r: Int32, batch: Int32,
                  pad_slot_id: Int32):
        """(slot, flushes, valid) of batch row ``r`` (``r >= batch``: (-1, False, False))."""
        slot = Int32(-1)
        f = Boolean(False)
        ok = Boolean(False)
        if r < batch:
            slot = r
            if const_expr(self.has_idx):
                slot = mIdx[r]
            if slot != pad_slot_id and slot >= 0 and slot < mWPos.shape[0]:
                ok = Boolean(True)
                h = cutlass.max(cutlass.min(mWPos[slot], Int32(self.R - self.T)), Int32(0))
                f = h + Int32(self.T) > Int32(self.L)
        return slot, f, ok

    @cute.jit
    def _chunk_counts(self, f: Boolean, sCnt: cute.Tensor, warp: Int32, lane: Int32):
        """Flushing rows of this 1024-row chunk: (before this thread, in the whole chunk)."""
        ball = Uint32(cute.arch.vote_ballot_sync(f))
        below = cute.arch.popc(ball & cute.arch.lanemask_lt())
        if lane == 0:
            sCnt[warp] = Int32(cute.arch.popc(ball))
        cute.arch.barrier()
        before = Int32(below)
        total = Int32(0)
        for w in cutlass.range_constexpr(_THREADS // 32):
            c = sCnt[w]
            total = total + c
            if w < warp:
                before = before + c
        cute.arch.barrier()          # sCnt is rewritten by the next chunk
        return before, total

    @cute.kernel
    def kernel(self, mIdx: Optional[cute.Tensor], mWPos: cute.Tensor,
               mOrig: Optional[cute.Tensor], mFcnt: Optional[cute.Tensor], mOrder: cute.Tensor,
               batch: Int32, pad_slot_id: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        warp = tidx // 32
        lane = tidx % 32
        smem = cutlass.memory.SmemAllocator()
        sCnt = smem.allocate_tensor(Int32, cute.make_layout(_THREADS // 32), byte_alignment=16)
        nchunks = (batch + Int32(_THREADS - 1)) // Int32(_THREADS)
        fbase = Int32(0)             # flushing rows placed so far (from the front)
        nbase = Int32(0)             # other rows placed so far (from the back)
        for c in cutlass.range(nchunks, unroll=1):
            r = c * _THREADS + tidx
            slot, f, ok = self._row_flag(mIdx, mWPos, r, batch, pad_slot_id)
            before, t = self._chunk_counts(f, sCnt, warp, lane)
            if r < batch:
                # rows of the chunk before this one that do not flush: tidx - before
                pos = batch - Int32(1) - (nbase + tidx - before)
                if f:
                    pos = fbase + before
                mOrder[0, pos] = r
                mOrder[1, pos] = slot
                if const_expr(self.cursors):
                    w = Int32(0)
                    o = Int32(0)
                    g = Int32(0)
                    if ok:
                        w = mWPos[slot]
                        o = mOrig[slot]
                        g = mFcnt[slot]
                    mOrder[2, pos] = w
                    mOrder[3, pos] = o
                    mOrder[4, pos] = g
            fbase = fbase + t
            nbase = nbase + cutlass.min(batch - c * _THREADS, Int32(_THREADS)) - t


def small_split_applies(rule, cache, batch: int, below: int) -> bool:
    """Whether a batch of fewer than ``below`` rows (where a kernel family's own split rule
    takes over) runs the order + split launch: ``rule`` lists (max buffer length, min rows)
    pairs; the batch must also fit the cache's order buffer (one entry per slot)."""
    L = cache.buffer_len
    return (batch < below and batch <= cache.row_order.shape[1]
            and any(L <= max_l and batch >= min_rows for max_l, min_rows in rule))


def order_scratch(cache, cursors: bool):
    """The cache's order buffer: ``cache.row_order_ext`` [5, num_slots] for the ``cursors``
    variant, else ``cache.row_order`` [2, num_slots]."""
    return cache.row_order_ext if cursors else cache.row_order


def run_order(order_ffi, cursors: bool, cache, batch: int, state_batch_indices, pad_slot_id):
    """Run a compiled flush-first order (``order_ffi``, the ``cursors`` variant or not) for
    ``batch`` rows on ``cache``'s cursors into its scratch; returns that scratch
    (:func:`order_scratch`)."""
    out = order_scratch(cache, cursors)
    if cursors:
        order_ffi(state_batch_indices, cache.write_pos, cache.ring_origin, cache.flush_count,
                  out, batch, pad_slot_id)
    else:
        order_ffi(state_batch_indices, cache.write_pos, None, None, out, batch, pad_slot_id)
    return out


class ConcurrentHalves:
    """Runs a split launch's two halves at once: ``side_fn(*args)`` on a side stream of its own
    (``priority``: -1 = high, so its long CTAs are dispatched first), after the caller's stream
    reaches this point, and ``main_fn(*args)`` on the caller's stream; the caller's stream then
    waits for the side stream. CUDA-graph capturable (the fork and the join are event records /
    waits). One per launch function: its events are re-recorded on every call."""

    def __init__(self, device, priority: int = 0):
        import torch

        self.device = device
        self.side = torch.cuda.Stream(device=device, priority=priority)
        self.forked, self.joined = torch.cuda.Event(), torch.cuda.Event()

    def __call__(self, side_fn, main_fn, *args):
        import torch

        main = torch.cuda.current_stream(self.device)
        self.forked.record(main)
        self.side.wait_event(self.forked)
        with torch.cuda.stream(self.side):
            side_fn(*args)
        main_fn(*args)
        self.joined.record(self.side)
        main.wait_event(self.joined)


_CACHE = KernelCache("row_order")


def _fake_args(op: FlushFirstOrder):
    batch, slots, cap = common.sym(), common.sym(), common.sym()
    f = common.fake_tensor
    cur = (f(Int32, (slots,), (1,)), f(Int32, (slots,), (1,))) if op.cursors else (None, None)
    return (f(Int32, (batch,), (1,)) if op.has_idx else None, f(Int32, (slots,), (1,)), *cur,
            f(Int32, (5 if op.cursors else 2, cap), ("dyn", 1)), Int32(1), Int32(-1),
            common.fake_stream())


def compile_flush_first_order(L: int, R: int, T: int, has_idx: bool,
                              cursors: bool = False) -> CompiledKernel:
    """The order kernel (one CTA of 1024 threads) for one (L, R, T, has_idx, cursors); TVM-FFI
    call ``k.ffi(state_batch_indices or None, write_pos, ring_origin, flush_count (both None
    without cursors), order [2 (5 with cursors), >= batch] int32, batch, pad_slot_id)``."""
    key = ("row_order", common.arch_key(), int(L), int(R), int(T), bool(has_idx), bool(cursors))
    return common.compile_tvm_ffi_cached(
        _CACHE, key, lambda: FlushFirstOrder(L, R, T, has_idx, cursors), _fake_args)


def flush_first_order_ref(write_pos, state_batch_indices, batch: int, L: int, R: int, T: int,
                          pad_slot_id: int = -1, ring_origin=None, flush_count=None):
    """Torch reference of the kernel: ``[2, batch]`` int32 (rows, slots); with ``ring_origin``
    and ``flush_count`` ``[5, batch]`` (rows, slots, the slots' cursors, 0 for pad rows)."""
    import torch

    rows = torch.arange(batch, dtype=torch.int64, device=write_pos.device)
    slots = rows if state_batch_indices is None else state_batch_indices[:batch].to(torch.int64)
    ok = (slots != pad_slot_id) & (slots >= 0) & (slots < write_pos.shape[0])
    h = write_pos.to(torch.int64)[slots.clamp(0, write_pos.shape[0] - 1)].clamp(0, R - T)
    flush = ok & (h + T > L)
    perm = torch.cat([rows[flush], rows[~flush].flip(0)])
    out = [perm, slots[perm]]
    if ring_origin is not None:
        sc = slots.clamp(0, write_pos.shape[0] - 1)
        for c in (write_pos, ring_origin, flush_count):
            out.append(torch.where(ok, c.to(torch.int64)[sc], torch.zeros_like(sc))[perm])
    return torch.stack(out).to(torch.int32)
