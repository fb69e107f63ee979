"""Speculative-decoding commit: a pointer move on the device (no state work).

For every row ``i`` whose slot ``s = state_batch_indices[i]`` is not the pad id:
``n = clamp(num_accepted_tokens[i], 0, pending[s])``; ``write_pos[s] += n``; ``pending[s] = 0``.
The rejected drafts stay in the ring and are overwritten by later appends. One thread per row.
"""
from __future__ import annotations

from typing import Optional

import cutlass
import cutlass.cute as cute
from cutlass import Int32, const_expr

import cuda.bindings.driver as cuda

from . import common
from .common import CompiledKernel, KernelCache

__all__ = ["ReplayCommit", "compile_replay_commit", "replay_commit_cute"]

_THREADS = 128


class ReplayCommit:
    def __init__(self, has_idx: bool):
        self.has_idx = bool(has_idx)

    @cute.jit
    def __call__(self, mAccepted: cute.Tensor, mIdx: Optional[cute.Tensor], mWritePos: cute.Tensor,
                 mPending: cute.Tensor, pad_slot_id: Int32, stream: cuda.CUstream):
        batch = mAccepted.shape[0]
        self.kernel(mAccepted, mIdx, mWritePos, mPending, pad_slot_id).launch(
            grid=[(batch + _THREADS - 1) // _THREADS, 1, 1], block=[_THREADS, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mAccepted: cute.Tensor, mIdx: Optional[cute.Tensor], mWritePos: cute.Tensor,
               mPending: cute.Tensor, pad_slot_id: Int32):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        row = bidx * _THREADS + tidx
        if row < mAccepted.shape[0]:
            slot = row
            if const_expr(self.has_idx):
                slot = mIdx[row]
            if slot != pad_slot_id and slot >= 0 and slot < mWritePos.shape[0]:
                n = mAccepted[row]
                pend = mPending[slot]
                if n < 0:
                    n = Int32(0)
                if n > pend:
                    n = pend
                mWritePos[slot] = mWritePos[slot] + n
                mPending[slot] = Int32(0)


_CACHE = KernelCache("replay_commit")


def _fake_args(op: ReplayCommit):
    batch, slots = common.sym(), common.sym()
    f = common.fake_tensor
    return (f(Int32, (batch,), (1,)), f(Int32, (batch,), (1,)) if op.has_idx else None,
            f(Int32, (slots,), (1,)), f(Int32, (slots,), (1,)), Int32(-1), common.fake_stream())


def compile_replay_commit(has_idx: bool) -> CompiledKernel:
    key = ("replay_commit", common.arch_key(), bool(has_idx))
    return common.compile_tvm_ffi_cached(_CACHE, key, lambda: ReplayCommit(has_idx), _fake_args)


def replay_commit_cute(write_pos, pending, num_accepted_tokens, state_batch_indices=None,
                       pad_slot_id: int = -1) -> None:
    """Launch on the current torch stream; inputs validated by the torch layer."""
    if num_accepted_tokens.shape[0] == 0:
        return
    fn = _FFI.get(state_batch_indices is not None)
    if fn is None:
        fn = make_launch(state_batch_indices is not None)
    fn(num_accepted_tokens, state_batch_indices, write_pos, pending, pad_slot_id)


#: has_idx -> the compiled function (the compile key's other part, the arch, is fixed in a process:
#: ``common.get_arch`` is memoised)
_FFI: dict = {}


def make_launch(has_idx: bool):
    """``fn(num_accepted_tokens, state_batch_indices, write_pos, pending, pad_slot_id)``: the
    compiled commit kernel's TVM-FFI function (compiled on first use); batch must be >= 1."""
    fn = _FFI[bool(has_idx)] = compile_replay_commit(has_idx).ffi
    return fn
