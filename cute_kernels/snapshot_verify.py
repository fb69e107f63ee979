"""Snapshot speculative verify (vLLM semantics) in CuTe DSL: the baseline for ReplaySSM's verify.

Per batch row: read the state once from slot ``state_indices[row, max(num_accepted − 1, 0)]``
(column 0 without ``num_accepted_tokens``), run T standard decode steps in fp32 registers, and
after each draft t write the output ``out[row, t]`` and store the running state (RN to the state
dtype) to slot ``state_indices[row, t]`` (skipped where that entry is ``pad_slot_id``). A row whose
read slot is the pad id (or outside the pool) is skipped entirely. T is a compile-time constant.
The spec is :mod:`replayssm_lp.snapshot` (``*_snapshot_verify_ref``).

Traffic per row: 1 state read + T state writes — the cost ReplaySSM's output-only verify avoids.

* Mamba-2 (:class:`Mamba2SnapshotVerify`): a T-step loop around the standard-decode kernel's
  step (:mod:`cute_kernels.mamba2_standard`: same :class:`TileConfig`, launch heuristic, host-side
  layout canonicalisation, fake tensors and device helpers ``_load_bc``, ``_load_x_z_out``,
  ``_update_and_dot_c``, ``_store_y``); state fp32 / fp16 / bf16 ``[slots, H, P, N]``.
* GDN (:class:`GDNSnapshotVerify`): a T-step loop around the "vk" step of
  :mod:`cute_kernels.gdn_standard` (same tiles, fake tensors and device helpers
  ``_gates_and_qk``, ``_vk_partial_dots``, ``_vk_finish_row``, ``_vk_update``); state
  ``[slots, HV, V, K]`` fp32 / fp16 / bf16.

Public entry points: :func:`mamba2_snapshot_verify_cute`, :func:`gdn_snapshot_verify_cute`
(launchers on torch tensors, no validation, current torch stream, CUDA-graph capturable once
compiled), :func:`compile_mamba2_snapshot`, :func:`compile_gdn_snapshot`, :func:`gdn_supports`.
"""

from __future__ import annotations

from typing import Optional

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr

import cuda.bindings.driver as cuda  # a dependency of nvidia-cutlass-dsl

from . import common
from .common import CompiledKernel, KernelCache, dtype_name, dtype_of
from . import gdn_standard as GS
from . import mamba2_standard as MS

__all__ = [
    "Mamba2SnapshotVerify", "GDNSnapshotVerify", "compile_mamba2_snapshot", "compile_gdn_snapshot",
    "mamba2_snapshot_verify_cute", "gdn_snapshot_verify_cute", "gdn_supports", "MAX_T",
]

SOFTPLUS_THRESHOLD = MS.SOFTPLUS_THRESHOLD
MAX_T = 16


def _slot_valid(slot, num_slots, pad_slot_id):
    """A slot is used unless it is the pad id or outside the pool [0, num_slots)."""
    return (slot != pad_slot_id) & (slot >= Int32(0)) & (slot < num_slots)


def _read_slot(has_acc, mAcc, mIdx, row, T: int, num_slots, pad_slot_id):
    """(read slot, valid) of a row: column max(acc − 1, 0) (clamped to T − 1) of its indices."""
    col = Int32(0)
    if has_acc:
        col = cutlass.max(cutlass.min(mAcc[row] - Int32(1), Int32(T - 1)), Int32(0))
    slot = mIdx[row, col]
    return slot, _slot_valid(slot, num_slots, pad_slot_id)


def _write_slot(mIdx, row, t: int, num_slots, pad_slot_id):
    """(slot, valid) of the snapshot after draft t: column t of the row's indices."""
    slot = mIdx[row, t]
    return slot, _slot_valid(slot, num_slots, pad_slot_id)


# ======================================================================================
# Mamba-2
# ======================================================================================


class Mamba2SnapshotVerify(MS.Mamba2StandardDecode):
    """Compile-time parameters (the standard kernel's, plus T and whether ``num_accepted_tokens``
    is given) + host launch (``__call__``) + device code (``kernel``)."""

    def __init__(self, state_dtype, act_dtype, dt_dtype, nheads: int, headdim: int, dstate: int,
                 ngroups: int, T: int, has_D: bool, has_z: bool, has_dt_bias: bool,
                 dt_softplus: bool, has_accepted: bool = True, block_p: Optional[int] = None,
                 num_threads: Optional[int] = None, min_blocks_per_mp: Optional[int] = None,
                 pdl: Optional[int] = None):
        super().__init__(state_dtype, act_dtype, dt_dtype, nheads, headdim, dstate, ngroups, has_D,
                         has_z, has_dt_bias, dt_softplus, True, block_p, num_threads,
                         min_blocks_per_mp, pdl=common.pdl_mode(pdl, verify=True))
        if not 1 <= T <= MAX_T:
            raise ValueError(f"T={T} must be in [1, {MAX_T}]")
        self.T = int(T)
        self.has_acc = bool(has_accepted)

    @cute.jit
    def __call__(self, mState: cute.Tensor, mX: cute.Tensor, mDt: cute.Tensor, mA: cute.Tensor,
                 mB: cute.Tensor, mC: cute.Tensor, mD: Optional[cute.Tensor],
                 mZ: Optional[cute.Tensor], mDtBias: Optional[cute.Tensor], mIdx: cute.Tensor,
                 mAcc: Optional[cute.Tensor], mOut: cute.Tensor, pad_slot_id: Int32,
                 stream: cuda.CUstream):
        mState, mX, mDt, mA, mB, mC, mD, mZ, mDtBias, mOut = self._canon_inputs(
            (None, self.T), mState, mX, mDt, mA, mB, mC, mD, mZ, mDtBias, mOut)
        mIdx = self._canon(mIdx, (None, self.T), (1, 1))
        batch = mX.shape[0]
        self._launch(
            self.kernel(mState, mX, mDt, mA, mB, mC, mD, mZ, mDtBias, mIdx, mAcc, mOut,
                        pad_slot_id),
            batch, stream)

    @cute.kernel
    def kernel(self, mState: cute.Tensor, mX: cute.Tensor, mDt: cute.Tensor, mA: cute.Tensor,
               mB: cute.Tensor, mC: cute.Tensor, mD: Optional[cute.Tensor],
               mZ: Optional[cute.Tensor], mDtBias: Optional[cute.Tensor], mIdx: cute.Tensor,
               mAcc: Optional[cute.Tensor], mOut: cute.Tensor, pad_slot_id: Int32):
        common.pdl_prologue(self.pdl)
        T = self.T
        tidx, _, _ = cute.arch.thread_idx()
        row_b, head, pblk = cute.arch.block_idx()
        tiled_s, thr_s, tiled_a, thr_a = self._tiled_copies(tidx)

        num_slots = mState.shape[0]
        slot, valid = _read_slot(self.has_acc, mAcc, mIdx, row_b, T, num_slots, pad_slot_id)
        if valid:
            # ---- the one state read (the running state then lives in fp32 registers)
            tSg = thr_s.partition_S(self._state_tile(mState, slot, head, pblk))  # ((V), R, CN)
            tSr = cute.make_rmem_tensor_like(tSg)
            cute.copy(tiled_s, tSg, tSr)

            group = head // self.heads_per_group
            a = mA[head].to(Float32)
            d_skip = Float32(0.0)
            if const_expr(self.has_D):
                d_skip = mD[head].to(Float32)
            bias = Float32(0.0)
            if const_expr(self.has_dt_bias):
                bias = mDtBias[head].to(Float32)
            rSf = common.fp32_regs(tSr)

            for t in cutlass.range_constexpr(T):
                # ---- this draft's small inputs (the standard kernel's views, at token t)
                tBr, tCr = self._load_bc(tiled_a, thr_a, mB, mC, (row_b, t, group))
                rX, rZ, tOg = self._load_x_z_out(thr_a, mX, mZ, mOut, (row_b, t, head), pblk)

                dt = mDt[row_b, t, head].to(Float32) + bias
                if const_expr(self.dt_softplus):
                    if dt <= Float32(SOFTPLUS_THRESHOLD):
                        dt = cute.math.log1p(cute.math.exp(dt))
                dA = cute.math.exp(a * dt)

                rBf = common.fp32_regs(tBr)
                rCf = common.fp32_regs(tCr)
                rY = self._update_and_dot_c(rSf, rBf, rCf, rX, dt, dA)

                # ---- the snapshot of draft t: its own slot (skipped for pad entries)
                dslot, dvalid = _write_slot(mIdx, row_b, t, num_slots, pad_slot_id)
                if dvalid:
                    tDg = thr_s.partition_D(self._state_tile(mState, dslot, head, pblk))
                    tSr.store(rSf.load().to(self.state_dtype))
                    cute.copy(tiled_s, tSr, tDg)

                self._reduce_y(rY)
                if tidx % self.tn == 0:
                    self._store_y(rY, rX, rZ, d_skip, tOg)


_M2_CACHE = KernelCache("mamba2_snapshot_verify")


def _m2_resolve(state_dtype, act_dtype, dt_dtype, nheads, headdim, dstate, ngroups, T, has_D, has_z,
                has_dt_bias, dt_softplus, has_accepted, block_p, num_threads, min_blocks_per_mp):
    """(constructor kwargs, cache key): the standard kernel's, with T and has_accepted in place
    of its optional state_batch_indices."""
    kw, _ = MS._resolve(state_dtype, act_dtype, dt_dtype, nheads, headdim, dstate, ngroups, has_D,
                        has_z, has_dt_bias, dt_softplus, True, block_p, num_threads,
                        min_blocks_per_mp)
    del kw["has_state_batch_indices"]
    kw.update(T=int(T), has_accepted=bool(has_accepted), pdl=common.pdl_default(verify=True))
    return kw, ("mamba2_snapshot", common.arch_key()) + tuple(kw.values())


def _m2_fake_args(op: Mamba2SnapshotVerify):
    """Fake tensors (batch, num_slots symbolic). Contract as the standard kernel's, with a T mode."""
    batch = common.sym()
    state, x, dt, A, B, C, D, z, dt_bias, out = MS._fake_inputs(op, (batch, op.T))
    f = common.fake_tensor
    idx = f(Int32, (batch, op.T), ("dyn", "dyn"))
    acc = f(Int32, (batch,), ("dyn",)) if op.has_acc else None
    return (state, x, dt, A, B, C, D, z, dt_bias, idx, acc, out, Int32(-1), common.fake_stream())


def compile_mamba2_snapshot(state_dtype, act_dtype, dt_dtype, nheads: int, headdim: int, dstate: int,
                            ngroups: int, T: int, has_D: bool = True, has_z: bool = False,
                            has_dt_bias: bool = True, dt_softplus: bool = True,
                            has_accepted: bool = True, block_p: Optional[int] = None,
                            num_threads: Optional[int] = None,
                            min_blocks_per_mp: Optional[int] = None) -> CompiledKernel:
    """Compile (cached, tensor-free, TVM-FFI) the Mamba-2 snapshot verify. Call the result as
    ``k.ffi(state, x, dt, A, B, C, D, z, dt_bias, state_indices, num_accepted_tokens, out,
    pad_slot_id)`` (``None`` for absent optional tensors)."""
    common.require_tvm_ffi()
    kw, key = _m2_resolve(state_dtype, act_dtype, dt_dtype, nheads, headdim, dstate, ngroups, T, has_D,
                          has_z, has_dt_bias, dt_softplus, has_accepted, block_p, num_threads,
                          min_blocks_per_mp)
    return common.compile_tvm_ffi_cached(_M2_CACHE, key, lambda: Mamba2SnapshotVerify(**kw),
                                         _m2_fake_args, MS._meta)


def compile_mamba2_snapshot_ptx(**kw):
    """Uncached compile returning ``(kernel, ptx)`` for compile-only tests."""
    kw2, key = _m2_resolve(**kw)
    op = Mamba2SnapshotVerify(**kw2)
    return common.compile_keep_ptx(op, _m2_fake_args(op), key, MS._meta(op))


_M2_LAUNCH: dict = {}


def mamba2_snapshot_verify_cute(state, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                                dt_softplus: bool = True, state_indices=None,
                                num_accepted_tokens=None, pad_slot_id: int = -1, out=None,
                                block_p: Optional[int] = None, num_threads: Optional[int] = None):
    """Snapshot verify on CUDA tensors (validated by :mod:`replayssm_lp.snapshot`): x, z, out
    [b, T, H, P]; dt [b, T, H]; B, C [b, T, G, N]; state_indices int32 [b, T]. Returns ``out``."""
    batch, T, nheads, headdim = x.shape
    if out is None:
        out = x.new_empty(x.shape)
    if batch == 0:
        return out
    key = (state.dtype, x.dtype, dt.dtype, T, nheads, headdim, state.shape[-1], B.shape[2],
           D is None, z is None, dt_bias is None, dt_softplus, num_accepted_tokens is None,
           batch if block_p is None else -block_p, num_threads, common.pdl_env())
    fn = _M2_LAUNCH.get(key)
    if fn is None:
        bp = block_p
        if bp is None:
            bp = MS.choose_block_p(batch, nheads, headdim, state.shape[-1], dtype_name(state.dtype),
                                   num_threads)
        fn = compile_mamba2_snapshot(state.dtype, x.dtype, dt.dtype, nheads, headdim, state.shape[-1],
                                     B.shape[2], T, D is not None, z is not None, dt_bias is not None,
                                     dt_softplus, num_accepted_tokens is not None, bp,
                                     num_threads).ffi
        _M2_LAUNCH[key] = fn
    fn(state, x, dt, A, B, C, D, z, dt_bias, state_indices, num_accepted_tokens, out, int(pad_slot_id))
    return out


# ======================================================================================
# GDN ("vk" state layout)
# ======================================================================================


class GDNSnapshotVerify(GS.GDNStandardDecode):
    """The standard GDN kernel's parameters ("vk" layout) plus T; T steps per launch."""

    def __init__(self, state_dtype, act_dtype, H: int, HV: int, K: int, V: int, T: int,
                 g_dtype=None, beta_dtype=None, alog_dtype=None, a_dtype=None, dt_bias_dtype=None,
                 b_dtype=None, use_qk_l2norm: bool = True, has_accepted: bool = True,
                 block_v: Optional[int] = None, num_threads: Optional[int] = None,
                 pdl: Optional[int] = None):
        super().__init__(state_dtype, act_dtype, "vk", H, HV, K, V, g_dtype, beta_dtype, alog_dtype,
                         a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm, True, block_v, num_threads,
                         pdl=common.pdl_mode(pdl, verify=True))
        if not 1 <= T <= MAX_T:
            raise ValueError(f"T={T} must be in [1, {MAX_T}]")
        self.T = int(T)
        self.has_acc = bool(has_accepted)

    @cute.jit
    def __call__(self, mState: cute.Tensor, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor,
                 mG: Optional[cute.Tensor], mBeta: Optional[cute.Tensor],
                 mALog: Optional[cute.Tensor], mA: Optional[cute.Tensor],
                 mDtBias: Optional[cute.Tensor], mB: Optional[cute.Tensor], mIdx: cute.Tensor,
                 mAcc: Optional[cute.Tensor], mOut: cute.Tensor, scale: Float32,
                 pad_slot_id: Int32, stream: cuda.CUstream):
        batch = mQ.shape[0]
        self._launch(self.kernel(mState, mQ, mK, mV, mG, mBeta, mALog, mA, mDtBias, mB, mIdx, mAcc,
                                 mOut, scale, pad_slot_id),
                     batch, stream)

    @cute.kernel
    def kernel(self, mState: cute.Tensor, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor,
               mG: Optional[cute.Tensor], mBeta: Optional[cute.Tensor],
               mALog: Optional[cute.Tensor], mA: Optional[cute.Tensor],
               mDtBias: Optional[cute.Tensor], mB: Optional[cute.Tensor], mIdx: cute.Tensor,
               mAcc: Optional[cute.Tensor], mOut: cute.Tensor, scale: Float32,
               pad_slot_id: Int32):
        common.pdl_prologue(self.pdl)
        BV, T = self.block_v, self.T
        TN = self.tn
        tidx, _, _ = cute.arch.thread_idx()
        row_b, hv, vblk = cute.arch.block_idx()
        lane = tidx % 32
        warp = tidx // 32
        hk = hv // self.group

        sKn, sQn, sU, sScal, sDot = self._alloc_smem()

        num_slots = mState.shape[0]
        slot, valid = _read_slot(self.has_acc, mAcc, mIdx, row_b, T, num_slots, pad_slot_id)
        if valid:
            tiled, thr = self._tiled_copy(tidx)
            tSg = thr.partition_S(self._state_tile(mState, slot, hv, vblk))  # ((VEC), R, CN)
            tSr = cute.make_rmem_tensor_like(tSg)
            cute.copy(tiled, tSg, tSr)
            rS = common.fp32_regs(tSr)
            lr = tidx % TN
            rp = tidx // TN
            v0 = vblk * BV
            NTT = self.num_threads
            NIT = (BV + NTT - 1) // NTT

            # per-draft views: the standard helpers index [row, head], so hand them [t, head]
            mQr, mKr = mQ[row_b, None, None, None], mK[row_b, None, None, None]
            mGr = mG[row_b, None, None] if const_expr(self.has_g) else None
            mBetar = mBeta[row_b, None, None] if const_expr(self.has_beta) else None
            mAr = mA[row_b, None, None] if const_expr(not self.has_g) else None
            mBr = mB[row_b, None, None] if const_expr(not self.has_beta) else None

            for t in cutlass.range_constexpr(T):
                vpre = [mV[row_b, t, hv, v0 + cutlass.min(tidx + it * NTT, Int32(BV - 1))]
                        for it in range(NIT)]
                alpha, beta, kq = self._gates_and_qk(mQr, mKr, mGr, mBetar, mALog, mAr, mDtBias,
                                                     mBr, t, hv, hk, scale, lane, warp, sKn, sQn,
                                                     sScal)

                # ---- the standard "vk" step on the running state
                rKn = self._vk_partial_dots(rS, sKn, sQn, sDot, lr, rp)
                cute.arch.barrier()
                for it in cutlass.range_constexpr(NIT):
                    vr = tidx + it * NTT
                    if vr < BV:
                        self._vk_finish_row(vr, vpre[it], sDot, sU, alpha, beta, kq, mOut,
                                            (row_b, t, hv), v0)
                cute.arch.barrier()
                self._vk_update(rS, rKn, sU, alpha, rp)

                # ---- the snapshot of draft t
                dslot, dvalid = _write_slot(mIdx, row_b, t, num_slots, pad_slot_id)
                if dvalid:
                    tDg = thr.partition_D(self._state_tile(mState, dslot, hv, vblk))
                    tSr.store(rS.load().to(self.state_dtype))
                    cute.copy(tiled, tSr, tDg)


_GDN_CACHE = KernelCache("gdn_snapshot_verify")


def _gdn_resolve(state_dtype, act_dtype, H, HV, K, V, T, g_dtype, beta_dtype, alog_dtype, a_dtype,
                 dt_bias_dtype, b_dtype, use_qk_l2norm, has_accepted, block_v, num_threads):
    """(constructor kwargs, cache key): the standard "vk" kernel's, with T and has_accepted in
    place of its layout and optional state_batch_indices."""
    kw, _ = GS._resolve(state_dtype, act_dtype, "vk", H, HV, K, V, g_dtype, beta_dtype, alog_dtype,
                        a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm, True, block_v, num_threads)
    del kw["layout"], kw["has_state_batch_indices"]
    kw.update(T=int(T), has_accepted=bool(has_accepted), pdl=common.pdl_default(verify=True))
    return kw, ("gdn_snapshot", common.arch_key()) + tuple(kw.values())


def _gdn_fake_args(op: GDNSnapshotVerify):
    """Fake tensors (batch, num_slots symbolic). Contract as the standard kernel's, with a T mode."""
    batch = common.sym()
    state, q, k, v, g, beta, alog, a, dtb, b, out = GS._fake_inputs(op, (batch, op.T))
    f = common.fake_tensor
    idx = f(Int32, (batch, op.T), ("dyn", "dyn"))
    acc = f(Int32, (batch,), ("dyn",)) if op.has_acc else None
    return (state, q, k, v, g, beta, alog, a, dtb, b, idx, acc, out, Float32(1.0), Int32(-1),
            common.fake_stream())


def compile_gdn_snapshot(state_dtype, act_dtype, H: int, HV: int, K: int, V: int, T: int,
                         g_dtype=None, beta_dtype=None, alog_dtype=None, a_dtype=None,
                         dt_bias_dtype=None, b_dtype=None, use_qk_l2norm: bool = True,
                         has_accepted: bool = True, block_v: Optional[int] = None,
                         num_threads: Optional[int] = None) -> CompiledKernel:
    """Compile (cached, TVM-FFI) the GDN snapshot verify. Call as ``k.ffi(state, q, k, v, g, beta,
    A_log, a, dt_bias, b, state_indices, num_accepted_tokens, out, scale, pad_slot_id)``."""
    common.require_tvm_ffi()
    kw, key = _gdn_resolve(state_dtype, act_dtype, H, HV, K, V, T, g_dtype, beta_dtype, alog_dtype,
                           a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm, has_accepted, block_v,
                           num_threads)
    return common.compile_tvm_ffi_cached(_GDN_CACHE, key, lambda: GDNSnapshotVerify(**kw),
                                         _gdn_fake_args, GS._meta)


def compile_gdn_snapshot_ptx(**kw):
    """Uncached compile returning ``(kernel, ptx)`` for compile-only tests."""
    kw2, key = _gdn_resolve(**kw)
    op = GDNSnapshotVerify(**kw2)
    return common.compile_keep_ptx(op, _gdn_fake_args(op), key, GS._meta(op))


def gdn_supports(state_dtype, K: int, V: int) -> bool:
    """True when the "vk" tiling exists for this state (K a multiple of 32, 16-byte vectors)."""
    return GS.supports(state_dtype, "vk", K, V)


_GDN_LAUNCH: dict = {}


def gdn_snapshot_verify_cute(state, q, k, v, g=None, beta=None, A_log=None, a=None, dt_bias=None,
                             b=None, scale=None, use_qk_l2norm: bool = True, state_indices=None,
                             num_accepted_tokens=None, pad_slot_id: int = -1, out=None,
                             block_v: Optional[int] = None, num_threads: Optional[int] = None):
    """GDN snapshot verify on CUDA tensors ("vk" state [slots, HV, V, K]); inputs [b, T, ...]
    validated by :mod:`replayssm_lp.snapshot`. Returns ``out`` [b, T, HV, V]."""
    batch, T, H, K = q.shape
    HV, Vd = v.shape[2], v.shape[3]
    if out is None:
        out = v.new_empty(v.shape)
    if batch == 0:
        return out
    if scale is None:
        scale = K ** -0.5
    gates = GS.launch_gates(g, beta, A_log, a, dt_bias, b)
    gate_dtypes = tuple(dtype_of(x) for x in gates)
    key = (state.dtype, q.dtype, T, H, HV, K, Vd) + gate_dtypes + (
        bool(use_qk_l2norm), num_accepted_tokens is None,
        batch if block_v is None else -block_v, num_threads, common.pdl_env())
    fn = _GDN_LAUNCH.get(key)
    if fn is None:
        bv = block_v
        if bv is None:
            bv = GS.choose_block_v(batch, HV, K, Vd, dtype_name(state.dtype), "vk")
        fn = compile_gdn_snapshot(state.dtype, q.dtype, H, HV, K, Vd, T, *gate_dtypes, use_qk_l2norm,
                                  num_accepted_tokens is not None, bv, num_threads).ffi
        _GDN_LAUNCH[key] = fn
    fn(state, q, k, v, *gates, state_indices, num_accepted_tokens, out, float(scale),
       int(pad_slot_id))
    return out
