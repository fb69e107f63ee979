"""Snapshot speculative verify (vLLM semantics) in CuTe DSL: the baseline for ReplaySSM's verify.

Per batch row: read the state once from slot ``state_indices[row, max(num_accepted − 1, 0)]``
(column 0 without ``num_accepted_tokens``), run T standard decode steps in fp32 registers, and
after each draft t write the output ``out[row, t]`` and store the running state (RN to the state
dtype) to slot ``state_indices[row, t]`` (skipped where that entry is ``pad_slot_id``). A row whose
read slot is the pad id (or outside the pool) is skipped entirely. T is a compile-time constant.
The spec is :mod:`replayssm_lp.snapshot` (``*_snapshot_verify_ref``).

Traffic per row: 1 state read + T state writes — the cost ReplaySSM's output-only verify avoids.

* Mamba-2 (:class:`Mamba2SnapshotVerify`): a T-step loop around the standard-decode kernel's
  tiling (:mod:`cute_kernels.mamba2_standard`: same :class:`TileConfig`, launch heuristic and
  host-side layout canonicalisation); state fp32 / fp16 / bf16 ``[slots, H, P, N]``.
* GDN (:class:`GDNSnapshotVerify`): a T-step loop around the "vk" path of
  :mod:`cute_kernels.gdn_standard` (same tiles and the shared device helpers ``treduce``,
  ``gdn_gates``, ``qk_normalize_warp``); state ``[slots, HV, V, K]`` fp32 / fp16 / bf16.

Public entry points: :func:`mamba2_snapshot_verify_cute`, :func:`gdn_snapshot_verify_cute`
(launchers on torch tensors, no validation, current torch stream, CUDA-graph capturable once
compiled), :func:`compile_mamba2_snapshot`, :func:`compile_gdn_snapshot`, :func:`gdn_supports`.
"""

from __future__ import annotations

import operator
from typing import Optional

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr

import cuda.bindings.driver as cuda  # a dependency of nvidia-cutlass-dsl

from . import common
from .common import CompiledKernel, KernelCache, dtype_name
from .gdn_standard import gdn_gates, qk_normalize_warp, treduce
from . import gdn_standard as GS
from . import mamba2_standard as MS

__all__ = [
    "Mamba2SnapshotVerify", "GDNSnapshotVerify", "compile_mamba2_snapshot", "compile_gdn_snapshot",
    "mamba2_snapshot_verify_cute", "gdn_snapshot_verify_cute", "gdn_supports", "MAX_T",
]

SOFTPLUS_THRESHOLD = MS.SOFTPLUS_THRESHOLD
MAX_T = 16


def _read_slot(has_acc, mAcc, mIdx, row, T: int, num_slots, pad_slot_id):
    """(read slot, valid) of a row: column max(acc − 1, 0) (clamped to T − 1) of its indices."""
    col = Int32(0)
    if has_acc:
        col = cutlass.max(cutlass.min(mAcc[row] - Int32(1), Int32(T - 1)), Int32(0))
    slot = mIdx[row, col]
    valid = (slot != pad_slot_id) & (slot >= Int32(0)) & (slot < num_slots)
    return slot, valid


def _write_slot(mIdx, row, t: int, num_slots, pad_slot_id):
    slot = mIdx[row, t]
    return slot, (slot != pad_slot_id) & (slot >= Int32(0)) & (slot < num_slots)


# ======================================================================================
# Mamba-2
# ======================================================================================


class Mamba2SnapshotVerify(MS.Mamba2StandardDecode):
    """Compile-time parameters (the standard kernel's, plus T and whether ``num_accepted_tokens``
    is given) + host launch (``__call__``) + device code (``kernel``)."""

    def __init__(self, state_dtype, act_dtype, dt_dtype, nheads: int, headdim: int, dstate: int,
                 ngroups: int, T: int, has_D: bool, has_z: bool, has_dt_bias: bool,
                 dt_softplus: bool, has_accepted: bool = True, block_p: Optional[int] = None,
                 num_threads: Optional[int] = None, min_blocks_per_mp: Optional[int] = None):
        super().__init__(state_dtype, act_dtype, dt_dtype, nheads, headdim, dstate, ngroups, has_D,
                         has_z, has_dt_bias, dt_softplus, True, block_p, num_threads,
                         min_blocks_per_mp)
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
        H, P, N, G, T = self.nheads, self.headdim, self.dstate, self.ngroups, self.T
        v = self.vec
        bv = self.act_copy_bits // self.act_dtype.width
        mState = self._canon(mState, (None, H, P, N), (v, v, ("static", N), 0))
        mX = self._canon(mX, (None, T, H, P), (1, 1, 1, 0))
        mOut = self._canon(mOut, (None, T, H, P), (1, 1, 1, 0))
        mB = self._canon(mB, (None, T, G, N), (bv, bv, bv, 0))
        mC = self._canon(mC, (None, T, G, N), (bv, bv, bv, 0))
        mDt = self._canon(mDt, (None, T, H), (1, 1, 1))
        mA = self._canon(mA, (H,), (1,))
        mIdx = self._canon(mIdx, (None, T), (1, 1))
        if const_expr(mZ is not None):
            mZ = self._canon(mZ, (None, T, H, P), (1, 1, 1, 0))
        if const_expr(mD is not None):
            mD = self._canon(mD, (H,), (1,))
        if const_expr(mDtBias is not None):
            mDtBias = self._canon(mDtBias, (H,), (1,))
        batch = mX.shape[0]
        self.kernel(mState, mX, mDt, mA, mB, mC, mD, mZ, mDtBias, mIdx, mAcc, mOut,
                    pad_slot_id).launch(
            grid=[batch, H, P // self.block_p],
            block=[self.num_threads, 1, 1],
            stream=stream,
            min_blocks_per_mp=self.min_blocks_per_mp,
            preferred_smem_carveout=-1 if self.min_blocks_per_mp > 1 else None,
        )

    @cute.kernel
    def kernel(self, mState: cute.Tensor, mX: cute.Tensor, mDt: cute.Tensor, mA: cute.Tensor,
               mB: cute.Tensor, mC: cute.Tensor, mD: Optional[cute.Tensor],
               mZ: Optional[cute.Tensor], mDtBias: Optional[cute.Tensor], mIdx: cute.Tensor,
               mAcc: Optional[cute.Tensor], mOut: cute.Tensor, pad_slot_id: Int32):
        N, T = self.dstate, self.T
        BP = self.block_p
        TN, CN, RPP, R, V = self.tn, self.cn, self.rpp, self.rows, self.vec
        tidx, _, _ = cute.arch.thread_idx()
        row_b, head, pblk = cute.arch.block_idx()

        thr_layout = cute.make_ordered_layout((RPP, TN), order=(1, 0))
        val_layout = cute.make_layout((1, V))
        atom_s = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.state_dtype,
                                     num_bits_per_copy=128)
        tiled_s = cute.make_tiled_copy_tv(atom_s, thr_layout, val_layout)
        atom_a = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.act_dtype,
                                     num_bits_per_copy=self.act_copy_bits)
        tiled_a = cute.make_tiled_copy_tv(atom_a, thr_layout, val_layout)
        thr_s = tiled_s.get_slice(tidx)
        thr_a = tiled_a.get_slice(tidx)

        num_slots = mState.shape[0]
        slot, valid = _read_slot(self.has_acc, mAcc, mIdx, row_b, T, num_slots, pad_slot_id)
        if valid:
            # ---- the one state read (the running state then lives in fp32 registers)
            gS = cute.local_tile(mState[slot, head, None, None], (BP, N), (pblk, 0))
            tSg = thr_s.partition_S(gS)  # ((V), R, CN)
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
            rSf = cute.make_rmem_tensor_like(tSr, Float32)
            rSf.store(tSr.load().to(Float32))

            for t in cutlass.range_constexpr(T):
                # ---- this draft's small inputs (same 0-stride views as the standard kernel)
                gB = cute.make_tensor(mB[row_b, t, group, None].iterator,
                                      cute.make_layout((RPP, N), stride=(0, 1)))
                gC = cute.make_tensor(mC[row_b, t, group, None].iterator,
                                      cute.make_layout((RPP, N), stride=(0, 1)))
                tBg = thr_a.partition_S(gB)
                tCg = thr_a.partition_S(gC)
                tBr = cute.make_rmem_tensor_like(tBg)
                tCr = cute.make_rmem_tensor_like(tCg)
                cute.copy(tiled_a, tBg, tBr)
                cute.copy(tiled_a, tCg, tCr)
                x_row = cute.local_tile(mX[row_b, t, head, None], (BP,), (pblk,))
                gX = cute.make_tensor(x_row.iterator, cute.make_layout((BP, TN * V), stride=(1, 0)))
                tXg = thr_a.partition_S(gX)
                o_row = cute.local_tile(mOut[row_b, t, head, None], (BP,), (pblk,))
                gO = cute.make_tensor(o_row.iterator, cute.make_layout((BP, TN * V), stride=(1, 0)))
                tOg = thr_a.partition_D(gO)
                rX = cute.make_rmem_tensor((R,), Float32)
                for r in cutlass.range_constexpr(R):
                    rX[r] = tXg[0, r, 0].to(Float32)
                if const_expr(self.has_z):
                    z_row = cute.local_tile(mZ[row_b, t, head, None], (BP,), (pblk,))
                    gZ = cute.make_tensor(z_row.iterator, cute.make_layout((BP, TN * V), stride=(1, 0)))
                    tZg = thr_a.partition_S(gZ)
                    rZ = cute.make_rmem_tensor((R,), Float32)
                    for r in cutlass.range_constexpr(R):
                        rZ[r] = tZg[0, r, 0].to(Float32)

                dt = mDt[row_b, t, head].to(Float32) + bias
                if const_expr(self.dt_softplus):
                    if dt <= Float32(SOFTPLUS_THRESHOLD):
                        dt = cute.math.log1p(cute.math.exp(dt))
                dA = cute.math.exp(a * dt)

                rBf = cute.make_rmem_tensor_like(tBr, Float32)
                rBf.store(tBr.load().to(Float32))
                rCf = cute.make_rmem_tensor_like(tCr, Float32)
                rCf.store(tCr.load().to(Float32))
                rY = cute.make_rmem_tensor((R,), Float32)
                for r in cutlass.range_constexpr(R):
                    dtx = dt * rX[r]
                    acc = Float32(0.0)
                    for c in cutlass.range_constexpr(CN):
                        for e in cutlass.range_constexpr(V):
                            s = rSf[e, r, c] * dA + dtx * rBf[e, 0, c]
                            rSf[e, r, c] = s
                            acc = acc + s * rCf[e, 0, c]
                    rY[r] = acc

                # ---- the snapshot of draft t: its own slot (skipped for pad entries)
                dslot, dvalid = _write_slot(mIdx, row_b, t, num_slots, pad_slot_id)
                if dvalid:
                    gD = cute.local_tile(mState[dslot, head, None, None], (BP, N), (pblk, 0))
                    tDg = thr_s.partition_D(gD)
                    tSr.store(rSf.load().to(self.state_dtype))
                    cute.copy(tiled_s, tSr, tDg)

                for r in cutlass.range_constexpr(R):
                    rY[r] = cute.arch.warp_reduction(rY[r], operator.add, threads_in_group=TN)
                if tidx % TN == 0:
                    for r in cutlass.range_constexpr(R):
                        y = rY[r]
                        if const_expr(self.has_D):
                            y = y + d_skip * rX[r]
                        if const_expr(self.has_z):
                            zr = rZ[r]
                            y = y * zr / (Float32(1.0) + cute.math.exp(-zr))
                        tOg[0, r, 0] = y.to(self.act_dtype)


_M2_CACHE = KernelCache("mamba2_snapshot_verify")


def _m2_resolve(state_dtype, act_dtype, dt_dtype, nheads, headdim, dstate, ngroups, T, has_D, has_z,
                has_dt_bias, dt_softplus, has_accepted, block_p, num_threads, min_blocks_per_mp):
    cfg = MS.tile_config(state_dtype, headdim, dstate, block_p, num_threads)
    kw = dict(
        state_dtype=dtype_name(state_dtype), act_dtype=dtype_name(act_dtype),
        dt_dtype=dtype_name(dt_dtype), nheads=int(nheads), headdim=int(headdim), dstate=int(dstate),
        ngroups=int(ngroups), T=int(T), has_D=bool(has_D), has_z=bool(has_z),
        has_dt_bias=bool(has_dt_bias), dt_softplus=bool(dt_softplus), has_accepted=bool(has_accepted),
        block_p=cfg.block_p, num_threads=cfg.num_threads,
        min_blocks_per_mp=int(MS.DEFAULT_MIN_BLOCKS_PER_MP if min_blocks_per_mp is None
                              else min_blocks_per_mp),
    )
    return kw, ("mamba2_snapshot", common.arch_key()) + tuple(kw.values())


def _m2_fake_args(op: Mamba2SnapshotVerify):
    """Fake tensors (batch, num_slots symbolic). Contract as the standard kernel's, with a T mode."""
    H, P, N, G, T = op.nheads, op.headdim, op.dstate, op.ngroups, op.T
    v = op.vec
    bv = op.act_copy_bits // op.act_dtype.width
    st, at, dtt = op.state_dtype, op.act_dtype, op.dt_dtype
    batch, slots = common.sym(), common.sym()
    f = common.fake_tensor
    state = f(st, (slots, H, P, N), (("dyn", v), ("dyn", v), N, 1), align_bytes=16)
    x = f(at, (batch, T, H, P), ("dyn", "dyn", "dyn", 1))
    out = f(at, (batch, T, H, P), ("dyn", "dyn", "dyn", 1))
    z = f(at, (batch, T, H, P), ("dyn", "dyn", "dyn", 1)) if op.has_z else None
    dt = f(dtt, (batch, T, H), ("dyn", "dyn", "dyn"))
    A = f(Float32, (H,), ("dyn",))
    D = f(Float32, (H,), ("dyn",)) if op.has_D else None
    dt_bias = f(Float32, (H,), ("dyn",)) if op.has_dt_bias else None
    bc_align = op.act_copy_bits // 8
    B = f(at, (batch, T, G, N), (("dyn", bv), ("dyn", bv), ("dyn", bv), 1), align_bytes=bc_align)
    C = f(at, (batch, T, G, N), (("dyn", bv), ("dyn", bv), ("dyn", bv), 1), align_bytes=bc_align)
    idx = f(Int32, (batch, T), ("dyn", "dyn"))
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
    if not common.HAS_TVM_FFI:
        raise RuntimeError("tensor-free compile needs apache-tvm-ffi")
    kw, key = _m2_resolve(state_dtype, act_dtype, dt_dtype, nheads, headdim, dstate, ngroups, T, has_D,
                          has_z, has_dt_bias, dt_softplus, has_accepted, block_p, num_threads,
                          min_blocks_per_mp)

    def build() -> CompiledKernel:
        op = Mamba2SnapshotVerify(**kw)
        compiled, secs = common.cute_compile(op, *_m2_fake_args(op), use_tvm_ffi=True)
        return CompiledKernel(compiled, key, secs, use_ffi=True, meta={"cfg": op.cfg})

    return _M2_CACHE.get_or_compile(key, build)


def compile_mamba2_snapshot_ptx(**kw):
    """Uncached compile returning ``(kernel, ptx)`` for compile-only tests."""
    kw2, key = _m2_resolve(**kw)
    op = Mamba2SnapshotVerify(**kw2)
    with common.dump_ptx() as d:
        compiled, secs = common.cute_compile(op, *_m2_fake_args(op), dump=d)
        k = CompiledKernel(compiled, key, secs, use_ffi=common.HAS_TVM_FFI, meta={"cfg": op.cfg})
        k.ptx = d.read() or None
        d.cleanup()
    return k, k.ptx


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
           batch if block_p is None else -block_p, num_threads)
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
                 block_v: Optional[int] = None, num_threads: Optional[int] = None):
        super().__init__(state_dtype, act_dtype, "vk", H, HV, K, V, g_dtype, beta_dtype, alog_dtype,
                         a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm, True, block_v, num_threads)
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
        self.kernel(mState, mQ, mK, mV, mG, mBeta, mALog, mA, mDtBias, mB, mIdx, mAcc, mOut, scale,
                    pad_slot_id).launch(
            grid=[batch, self.HV, self.V // self.block_v],
            block=[self.num_threads, 1, 1],
            stream=stream,
        )

    @cute.kernel
    def kernel(self, mState: cute.Tensor, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor,
               mG: Optional[cute.Tensor], mBeta: Optional[cute.Tensor],
               mALog: Optional[cute.Tensor], mA: Optional[cute.Tensor],
               mDtBias: Optional[cute.Tensor], mB: Optional[cute.Tensor], mIdx: cute.Tensor,
               mAcc: Optional[cute.Tensor], mOut: cute.Tensor, scale: Float32,
               pad_slot_id: Int32):
        K, BV, T = self.K, self.block_v, self.T
        TN, CN, RPP, R, VEC = self.tn, self.cn, self.rpp, self.r, self.vec
        tidx, _, _ = cute.arch.thread_idx()
        row_b, hv, vblk = cute.arch.block_idx()
        lane = tidx % 32
        warp = tidx // 32
        hk = hv // self.group

        smem = cutlass.memory.SmemAllocator()
        sKn = smem.allocate_tensor(Float32, cute.make_layout(K), byte_alignment=16)
        sQn = smem.allocate_tensor(Float32, cute.make_layout(K), byte_alignment=16)
        sU = smem.allocate_tensor(Float32, cute.make_layout(BV), byte_alignment=16)
        sScal = smem.allocate_tensor(Float32, cute.make_layout(4), byte_alignment=16)
        sDot = smem.allocate_tensor(Float32, cute.make_layout(2 * BV), byte_alignment=16)

        num_slots = mState.shape[0]
        slot, valid = _read_slot(self.has_acc, mAcc, mIdx, row_b, T, num_slots, pad_slot_id)
        if valid:
            thr_layout = cute.make_ordered_layout((RPP, TN), order=(1, 0))
            val_layout = cute.make_layout((1, VEC))
            atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.state_dtype,
                                       num_bits_per_copy=128)
            tiled = cute.make_tiled_copy_tv(atom, thr_layout, val_layout)
            thr = tiled.get_slice(tidx)
            gS = cute.local_tile(mState[slot, hv, None, None], (BV, K), (vblk, 0))
            tSg = thr.partition_S(gS)          # ((VEC), R, CN)
            tSr = cute.make_rmem_tensor_like(tSg)
            cute.copy(tiled, tSg, tSr)
            rS = cute.make_rmem_tensor_like(tSr, Float32)
            rS.store(tSr.load().to(Float32))
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
                g, beta = gdn_gates(self.has_g, self.has_beta, self.has_dt_bias, mGr, mBetar, mALog,
                                    mAr, mDtBias, mBr, t, hv)
                alpha = cute.math.exp(g)
                if warp == 0:
                    kinv, kq = qk_normalize_warp(mQr, mKr, t, hk, K, self.use_l2, scale, lane,
                                                 sKn, sQn)
                    if lane == 0:
                        sScal[0] = kq
                cute.arch.barrier()
                kq = sScal[0]

                rKn = cute.make_rmem_tensor((VEC, CN), Float32)
                rQn = cute.make_rmem_tensor((VEC, CN), Float32)
                for c in cutlass.range_constexpr(CN):
                    cute.autovec_copy(cute.local_tile(sKn, (VEC,), (c * TN + lr,)), rKn[None, c])
                    cute.autovec_copy(cute.local_tile(sQn, (VEC,), (c * TN + lr,)), rQn[None, c])
                dk = []
                dq = []
                for r in cutlass.range_constexpr(R):
                    ak = Float32(0.0)
                    aq = Float32(0.0)
                    for c in cutlass.range_constexpr(CN):
                        for e in cutlass.range_constexpr(VEC):
                            s = rS[e, r, c]
                            ak = ak + s * rKn[e, c]
                            aq = aq + s * rQn[e, c]
                    dk.append(ak)
                    dq.append(aq)
                rest, base = treduce(dk + dq, TN, lr)
                for i in cutlass.range_constexpr(len(rest)):
                    sDot[rp * (2 * R) + base + i] = rest[i]
                cute.arch.barrier()
                for it in cutlass.range_constexpr(NIT):
                    vr = tidx + it * NTT
                    if vr < BV:
                        vrp = vr % RPP
                        vri = vr // RPP
                        sk = sDot[vrp * (2 * R) + vri]
                        sq = sDot[vrp * (2 * R) + R + vri]
                        u = beta * (vpre[it].to(Float32) - alpha * sk)
                        o = alpha * sq + kq * u
                        mOut[row_b, t, hv, v0 + vr] = o.to(self.act_dtype)
                        sU[vr] = u
                cute.arch.barrier()
                for r in cutlass.range_constexpr(R):
                    u = sU[r * RPP + rp]
                    for c in cutlass.range_constexpr(CN):
                        for e in cutlass.range_constexpr(VEC):
                            rS[e, r, c] = alpha * rS[e, r, c] + u * rKn[e, c]

                # ---- the snapshot of draft t
                dslot, dvalid = _write_slot(mIdx, row_b, t, num_slots, pad_slot_id)
                if dvalid:
                    gD = cute.local_tile(mState[dslot, hv, None, None], (BV, K), (vblk, 0))
                    tDg = thr.partition_D(gD)
                    tSr.store(rS.load().to(self.state_dtype))
                    cute.copy(tiled, tSr, tDg)


_GDN_CACHE = KernelCache("gdn_snapshot_verify")


def _dn(d):
    return None if d is None else dtype_name(d)


def _gdn_resolve(state_dtype, act_dtype, H, HV, K, V, T, g_dtype, beta_dtype, alog_dtype, a_dtype,
                 dt_bias_dtype, b_dtype, use_qk_l2norm, has_accepted, block_v, num_threads):
    tile = GS.tile_config(state_dtype, "vk", K, V, block_v, num_threads)
    has_g = g_dtype is not None
    kw = dict(
        state_dtype=dtype_name(state_dtype), act_dtype=dtype_name(act_dtype), H=int(H), HV=int(HV),
        K=int(K), V=int(V), T=int(T), g_dtype=_dn(g_dtype), beta_dtype=_dn(beta_dtype),
        alog_dtype=None if has_g else _dn(alog_dtype), a_dtype=None if has_g else _dn(a_dtype),
        dt_bias_dtype=None if has_g else _dn(dt_bias_dtype),
        b_dtype=None if beta_dtype is not None else _dn(b_dtype),
        use_qk_l2norm=bool(use_qk_l2norm), has_accepted=bool(has_accepted),
        block_v=tile.block_v, num_threads=tile.num_threads,
    )
    return kw, ("gdn_snapshot", common.arch_key()) + tuple(kw.values())


def _gdn_fake_args(op: GDNSnapshotVerify):
    H, HV, K, V, T = op.H, op.HV, op.K, op.V, op.T
    f = common.fake_tensor
    batch, slots = common.sym(), common.sym()
    st, at = op.state_dtype, op.act_dtype
    state = f(st, (slots, HV, V, K), (("dyn", op.vec), ("dyn", op.vec), K, 1), align_bytes=16)
    q = f(at, (batch, T, H, K), ("dyn", "dyn", "dyn", 1))
    k = f(at, (batch, T, H, K), ("dyn", "dyn", "dyn", 1))
    v = f(at, (batch, T, HV, V), ("dyn", "dyn", "dyn", 1))
    out = f(at, (batch, T, HV, V), ("dyn", "dyn", "dyn", 1))
    g = f(op.g_dtype, (batch, T, HV), ("dyn", "dyn", "dyn")) if op.has_g else None
    beta = f(op.beta_dtype, (batch, T, HV), ("dyn", "dyn", "dyn")) if op.has_beta else None
    alog = a = dtb = b = None
    if not op.has_g:
        alog = f(op.alog_dtype, (HV,), ("dyn",))
        a = f(op.a_dtype, (batch, T, HV), ("dyn", "dyn", "dyn"))
        if op.has_dt_bias:
            dtb = f(op.dt_bias_dtype, (HV,), ("dyn",))
    if not op.has_beta:
        b = f(op.b_dtype, (batch, T, HV), ("dyn", "dyn", "dyn"))
    idx = f(Int32, (batch, T), ("dyn", "dyn"))
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
    if not common.HAS_TVM_FFI:
        raise RuntimeError("tensor-free compile needs apache-tvm-ffi")
    kw, key = _gdn_resolve(state_dtype, act_dtype, H, HV, K, V, T, g_dtype, beta_dtype, alog_dtype,
                           a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm, has_accepted, block_v,
                           num_threads)

    def build() -> CompiledKernel:
        op = GDNSnapshotVerify(**kw)
        compiled, secs = common.cute_compile(op, *_gdn_fake_args(op), use_tvm_ffi=True)
        return CompiledKernel(compiled, key, secs, use_ffi=True, meta={"tile": op.tile})

    return _GDN_CACHE.get_or_compile(key, build)


def compile_gdn_snapshot_ptx(**kw):
    """Uncached compile returning ``(kernel, ptx)`` for compile-only tests."""
    kw2, key = _gdn_resolve(**kw)
    op = GDNSnapshotVerify(**kw2)
    with common.dump_ptx() as d:
        compiled, secs = common.cute_compile(op, *_gdn_fake_args(op), dump=d)
        k = CompiledKernel(compiled, key, secs, use_ffi=common.HAS_TVM_FFI, meta={"tile": op.tile})
        k.ptx = d.read() or None
        d.cleanup()
    return k, k.ptx


def gdn_supports(state_dtype, K: int, V: int) -> bool:
    """True when the "vk" tiling exists for this state (K a multiple of 32, 16-byte vectors)."""
    return GS.supports(state_dtype, "vk", K, V)


_GDN_LAUNCH: dict = {}


def _dt(t):
    return None if t is None else t.dtype


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
    if g is not None:
        A_log = a = dt_bias = None
    if beta is not None:
        b = None
    key = (state.dtype, q.dtype, T, H, HV, K, Vd, _dt(g), _dt(beta), _dt(A_log), _dt(a), _dt(dt_bias),
           _dt(b), bool(use_qk_l2norm), num_accepted_tokens is None,
           batch if block_v is None else -block_v, num_threads)
    fn = _GDN_LAUNCH.get(key)
    if fn is None:
        bv = block_v
        if bv is None:
            bv = GS.choose_block_v(batch, HV, K, Vd, dtype_name(state.dtype), "vk")
        fn = compile_gdn_snapshot(state.dtype, q.dtype, H, HV, K, Vd, T, _dt(g), _dt(beta), _dt(A_log),
                                  _dt(a), _dt(dt_bias), _dt(b), use_qk_l2norm,
                                  num_accepted_tokens is not None, bv, num_threads).ffi
        _GDN_LAUNCH[key] = fn
    fn(state, q, k, v, g, beta, A_log, a, dt_bias, b, state_indices, num_accepted_tokens, out,
       float(scale), int(pad_slot_id))
    return out
