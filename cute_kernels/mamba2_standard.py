"""Mamba-2 STANDARD decode (one token, read + write the whole state) in CuTe DSL.

Semantics: vLLM / mamba_ssm ``selective_state_update`` with per-head scalars
(DESIGN.md §1, §3)::

    dt' = dt + dt_bias                      (dt_bias optional)
    dt' = softplus(dt') if dt_softplus and dt' <= 20   (bypass above 20)
    dA  = exp(A * dt')
    S   = dA * S + (dt' * x) outer B        (S: [P, N] of one (slot, head), fp32 math)
    y   = S @ C  (+ D * x)                  (D optional)
    y  *= z * sigmoid(z)                    (z optional)

Shapes (H = nheads, P = headdim, N = dstate, G = ngroups, head h uses group h // (H//G)):

* ``state`` [num_slots, H, P, N]  fp32 / fp16 / bf16, updated in place (RN when narrow);
* ``x``, ``z``, ``out`` [batch, H, P] activation dtype;  ``dt`` [batch, H] fp32 or act;
* ``A`` [H] fp32, ``D`` [H] fp32, ``dt_bias`` [H] fp32;  ``B``, ``C`` [batch, G, N] act;
* ``state_batch_indices`` int32 [batch] or None (row i -> slot i); a row whose index equals
  ``pad_slot_id`` (or lies outside ``[0, num_slots)``) is skipped: no state access, ``out``
  row left untouched.

Tiling (see :class:`TileConfig`): grid (batch, H, P / block_p), one CTA per (batch row,
head, block of ``block_p`` state rows), 256 threads by default. Each thread owns 16-byte
chunks of state rows along N (a row of N=128 fp32 is exactly one warp; 16 lanes for
fp16/bf16); in program order it issues all of its ``rows_per_thread`` 128-bit row loads
before any math (ptxas may stream them when it targets fewer registers: see
``min_blocks_per_mp``), updates in fp32 registers, reduces ``y = S.C`` with a butterfly
shuffle among the lanes that share a row, and stores the state back with 128-bit stores
(16-bit states: packed RN converts). Small batches split P over more CTAs
(:func:`choose_block_p`).

Public entry points:

* :func:`compile_mamba2_standard` - tensor-free compile (cached) -> :class:`CompiledKernel`;
* :func:`mamba2_standard_decode_cute` - launcher on torch tensors (no validation, no
  allocation when ``out`` is given; current torch stream);
* :func:`compile_only` - compile one variant without a GPU (``CUTE_DSL_ARCH=sm_90a``);
* :func:`choose_block_p` - the launch-config heuristic.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Optional, Tuple

import cutlass.cute as cute
from cutlass import Boolean, Float32, Int32, const_expr

import cuda.bindings.driver as cuda  # a dependency of nvidia-cutlass-dsl

from . import common
from .common import CompiledKernel, KernelCache, to_cute_dtype, dtype_name

__all__ = [
    "Mamba2StandardDecode",
    "TileConfig",
    "tile_config",
    "choose_block_p",
    "compile_mamba2_standard",
    "compile_only",
    "mamba2_standard_decode_cute",
    "fake_head_inputs",
]

SOFTPLUS_THRESHOLD = 20.0
STATE_DTYPES = ("float32", "float16", "bfloat16")
ACT_DTYPES = ("float32", "float16", "bfloat16")

# Launch defaults, chosen from the SASS (cuobjdump of the sm_90a cubins) and still to be
# confirmed on the GPU with tests/gpu_scripts/check_mamba2_standard.py --sweep:
# 256 threads + ".minnctapersm 4" gives every variant a 64-register budget (32 warps/SM)
# and ptxas then issues 6-10 of the thread's 128-bit row loads before the first math /
# store. With 128 threads and no hint, ptxas' own choice swings between 64 registers
# with ~5 loads in flight and 127 registers with all 16 hoisted, depending on the flags.
DEFAULT_NUM_THREADS = 256
DEFAULT_MIN_BLOCKS_PER_MP = 4
MIN_CTAS_PER_SM = 2


# --------------------------------------------------------------------------------------
# tile configuration (pure Python, no cutlass objects)
# --------------------------------------------------------------------------------------


class TileConfig:
    """Static tiling of one (row, head) state tile [P, N] over a CTA.

    * ``vec``: state elements per 16-byte access (4 for fp32, 8 for fp16/bf16);
    * ``threads_per_row`` (TN): lanes sharing one state row (power of two <= 32); each
      owns ``chunks_per_thread`` (CN) 16-byte chunks at column ``(c*TN + lane)*vec``;
    * ``rows_per_pass`` (RPP = num_threads / TN): rows covered by the CTA at once;
    * ``rows_per_thread`` (R = block_p / RPP): independent row chunks per thread
      (R*CN 128-bit loads, all issued before the math in program order; ptxas may
      stream them when it targets fewer registers, see ``min_blocks_per_mp``).
    """

    def __init__(self, state_bits: int, headdim: int, dstate: int, block_p: int, num_threads: int):
        self.vec = 128 // state_bits
        if dstate % self.vec != 0:
            raise ValueError(f"dstate={dstate} must be a multiple of {self.vec} (16-byte vectors)")
        chunks = dstate // self.vec
        tn = 1
        while tn * 2 <= 32 and chunks % (tn * 2) == 0:
            tn *= 2
        self.threads_per_row = tn
        self.chunks_per_thread = chunks // tn
        if num_threads % 32 != 0 or not 32 <= num_threads <= 1024:
            raise ValueError(f"num_threads={num_threads} must be a multiple of 32 in [32, 1024]")
        self.num_threads = num_threads
        self.rows_per_pass = num_threads // tn
        if headdim % block_p != 0:
            raise ValueError(f"block_p={block_p} must divide headdim={headdim}")
        if block_p % self.rows_per_pass != 0:
            raise ValueError(
                f"block_p={block_p} must be a multiple of rows_per_pass={self.rows_per_pass} "
                f"(num_threads={num_threads}, {tn} threads per state row)"
            )
        self.block_p = block_p
        self.rows_per_thread = block_p // self.rows_per_pass

    def __repr__(self) -> str:
        return (
            f"TileConfig(block_p={self.block_p}, threads={self.num_threads}, vec={self.vec}, "
            f"TN={self.threads_per_row}, CN={self.chunks_per_thread}, "
            f"RPP={self.rows_per_pass}, R={self.rows_per_thread})"
        )


@functools.lru_cache(maxsize=None)
def _valid_block_ps(state_bits: int, headdim: int, dstate: int, num_threads: int) -> Tuple[int, ...]:
    """Every valid ``block_p`` for this shape and thread count, largest first."""
    out = []
    for bp in range(headdim, 0, -1):
        try:
            TileConfig(state_bits, headdim, dstate, bp, num_threads)
        except ValueError:
            continue
        out.append(bp)
    return tuple(out)


def tile_config(state_dtype: Any, headdim: int, dstate: int, block_p: Optional[int] = None,
                num_threads: Optional[int] = None) -> TileConfig:
    """Resolve a (possibly partial) tile request into a valid :class:`TileConfig`.

    Defaults: :data:`DEFAULT_NUM_THREADS` threads and ``block_p = headdim`` (a whole head
    per CTA). When that thread count cannot tile ``headdim`` (tiny heads, e.g. P=16 with
    32 rows per pass) fewer threads are used.
    """
    bits = to_cute_dtype(state_dtype).width
    cands = [num_threads] if num_threads else [DEFAULT_NUM_THREADS, 128, 64, 32]
    for nt in cands:
        bps = _valid_block_ps(bits, headdim, dstate, nt)
        if not bps:
            continue
        if block_p is None:
            return TileConfig(bits, headdim, dstate, bps[0], nt)
        if block_p in bps:
            return TileConfig(bits, headdim, dstate, block_p, nt)
    raise ValueError(
        f"no valid tiling for state bits={bits}, headdim={headdim}, dstate={dstate}, "
        f"block_p={block_p}, num_threads={num_threads}"
    )


@functools.lru_cache(maxsize=4096)
def choose_block_p(batch: int, nheads: int, headdim: int, dstate: int, state_dtype: Any,
                   num_threads: Optional[int] = None, min_ctas: Optional[int] = None) -> int:
    """Launch heuristic: the largest ``block_p`` that still gives >= ``min_ctas`` CTAs.

    A whole head per CTA (fewest per-head scalar recomputations, most loads per thread)
    unless that leaves SMs idle: small batches split P over more CTAs (down to one row
    chunk per thread). ``min_ctas`` defaults to :data:`MIN_CTAS_PER_SM` per SM (132 SMs
    when no GPU is visible).
    """
    if min_ctas is None:
        min_ctas = MIN_CTAS_PER_SM * common.num_sms()
    cfg = tile_config(state_dtype, headdim, dstate, None, num_threads)
    bps = _valid_block_ps(to_cute_dtype(state_dtype).width, headdim, dstate, cfg.num_threads)
    for bp in bps:  # largest first
        if batch * nheads * (headdim // bp) >= min_ctas:
            return bp
    return bps[-1]


# --------------------------------------------------------------------------------------
# the kernel
# --------------------------------------------------------------------------------------


class Mamba2StandardDecode:
    """Compile-time parameters + host launch (``__call__``) + device code (``kernel``)."""

    def __init__(
        self,
        state_dtype,
        act_dtype,
        dt_dtype,
        nheads: int,
        headdim: int,
        dstate: int,
        ngroups: int,
        has_D: bool,
        has_z: bool,
        has_dt_bias: bool,
        dt_softplus: bool,
        has_state_batch_indices: bool = True,
        block_p: Optional[int] = None,
        num_threads: Optional[int] = None,
        min_blocks_per_mp: Optional[int] = None,
        pdl: Optional[int] = None,
    ):
        self.pdl = common.pdl_mode(pdl)
        self.state_dtype = to_cute_dtype(state_dtype)
        self.act_dtype = to_cute_dtype(act_dtype)
        self.dt_dtype = to_cute_dtype(dt_dtype)
        if nheads % ngroups != 0:
            raise ValueError(f"nheads={nheads} must be a multiple of ngroups={ngroups}")
        self.nheads, self.headdim, self.dstate, self.ngroups = nheads, headdim, dstate, ngroups
        self.heads_per_group = nheads // ngroups
        self.has_D, self.has_z, self.has_dt_bias = bool(has_D), bool(has_z), bool(has_dt_bias)
        self.dt_softplus = bool(dt_softplus)
        self.has_idx = bool(has_state_batch_indices)
        self.cfg = tile_config(self.state_dtype, headdim, dstate, block_p, num_threads)
        c = self.cfg
        self.vec, self.tn, self.cn = c.vec, c.threads_per_row, c.chunks_per_thread
        self.rpp, self.rows, self.block_p = c.rows_per_pass, c.rows_per_thread, c.block_p
        self.num_threads = c.num_threads
        # occupancy hint -> .minnctapersm k: ptxas gets a budget of 64K/(k*threads)
        # registers; 0 lets ptxas choose (see DEFAULT_MIN_BLOCKS_PER_MP).
        self.min_blocks_per_mp = int(
            DEFAULT_MIN_BLOCKS_PER_MP if min_blocks_per_mp is None else min_blocks_per_mp
        )
        # B/C chunk: vec act elements per thread per chunk, at most 128 bits per access
        self.act_copy_bits = min(128, self.vec * self.act_dtype.width)

    # ---------------------------------------------------------------- host side
    def _canon(self, t: cute.Tensor, static_shape, divs):
        """Re-type a tensor with static extents (None = keep runtime) and stride
        divisibility hints (``divs[i]`` elements; 0 = static unit stride;
        ``("static", s)`` = static stride ``s``, trusted).

        A no-op in effect for the TVM-FFI fake tensors (they already carry these facts);
        on the classic from_dlpack path (fully dynamic layouts) it restores them so the
        128-bit accesses are still emitted.
        """
        shape = tuple(
            t.shape[i] if s is None else s for i, s in enumerate(static_shape)
        )
        stride = []
        for i, d in enumerate(divs):
            if isinstance(d, tuple):  # ("static", value): trusted static stride
                stride.append(d[1])
            elif d == 0:
                stride.append(1)
            elif d == 1:
                stride.append(t.stride[i])
            else:
                stride.append(cute.assume(t.stride[i], divby=d))
        return cute.make_tensor(t.iterator, cute.make_layout(shape, stride=tuple(stride)))

    def _canon_inputs(self, lead, mState, mX, mDt, mA, mB, mC, mD, mZ, mDtBias, mOut):
        """:meth:`_canon` of every input of this kernel family: ``lead`` are the static extents of
        the per-token leading modes of x / z / out / dt / B / C (``(None,)`` = a runtime batch;
        the snapshot verify adds its draft mode T); each such mode gets the divisibility hint of
        the batch mode. Returns the tensors in argument order (state, x, dt, A, B, C, D, z,
        dt_bias, out); absent optional tensors stay None."""
        H, P, N, G = self.nheads, self.headdim, self.dstate, self.ngroups
        v = self.vec
        bv = self.act_copy_bits // self.act_dtype.width
        unit = (1,) * len(lead)
        mState = self._canon(mState, (None, H, P, N), (v, v, ("static", N), 0))
        mX = self._canon(mX, lead + (H, P), unit + (1, 0))
        mOut = self._canon(mOut, lead + (H, P), unit + (1, 0))
        mB = self._canon(mB, lead + (G, N), (bv,) * len(lead) + (bv, 0))
        mC = self._canon(mC, lead + (G, N), (bv,) * len(lead) + (bv, 0))
        mDt = self._canon(mDt, lead + (H,), unit + (1,))
        mA = self._canon(mA, (H,), (1,))
        if const_expr(mZ is not None):
            mZ = self._canon(mZ, lead + (H, P), unit + (1, 0))
        if const_expr(mD is not None):
            mD = self._canon(mD, (H,), (1,))
        if const_expr(mDtBias is not None):
            mDtBias = self._canon(mDtBias, (H,), (1,))
        return mState, mX, mDt, mA, mB, mC, mD, mZ, mDtBias, mOut

    def _launch(self, kernel, batch, stream):
        """Launch ``kernel`` (a ``self.kernel(...)`` call) on the grid (batch, H, P / block_p)."""
        kernel.launch(
            grid=[batch, self.nheads, self.headdim // self.block_p],
            block=[self.num_threads, 1, 1],
            stream=stream,
            use_pdl=bool(self.pdl),
            min_blocks_per_mp=self.min_blocks_per_mp,
            # an explicit carveout (-1 = CU_SHAREDMEM_CARVEOUT_DEFAULT, no preference) stops
            # the DSL from querying the device for smem/SM when min_blocks_per_mp > 1,
            # which would break GPU-less compiles
            preferred_smem_carveout=-1 if self.min_blocks_per_mp > 1 else None,
        )

    @cute.jit
    def __call__(
        self,
        mState: cute.Tensor,
        mX: cute.Tensor,
        mDt: cute.Tensor,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mC: cute.Tensor,
        mD: Optional[cute.Tensor],
        mZ: Optional[cute.Tensor],
        mDtBias: Optional[cute.Tensor],
        mIdx: Optional[cute.Tensor],
        mOut: cute.Tensor,
        pad_slot_id: Int32,
        stream: cuda.CUstream,
    ):
        mState, mX, mDt, mA, mB, mC, mD, mZ, mDtBias, mOut = self._canon_inputs(
            (None,), mState, mX, mDt, mA, mB, mC, mD, mZ, mDtBias, mOut)
        batch = mX.shape[0]
        self._launch(
            self.kernel(mState, mX, mDt, mA, mB, mC, mD, mZ, mDtBias, mIdx, mOut, pad_slot_id),
            batch, stream)

    # ---------------------------------------------------------------- device helpers
    # Plain Python methods traced inline into ``kernel`` (and the snapshot verify's kernel):
    # Python loops unroll, Python ``if``s on compile-time facts pick the code.

    def _tiled_copies(self, tidx):
        """(tiled_s, thr_s, tiled_a, thr_a): thread <-> data mapping, threads (RPP, TN) row-major,
        16 B of state per thread (128-bit copies), the same mapping for activation chunks."""
        thr_layout = cute.make_ordered_layout((self.rpp, self.tn), order=(1, 0))
        val_layout = cute.make_layout((1, self.vec))
        atom_s = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.state_dtype,
                                     num_bits_per_copy=128)
        tiled_s = cute.make_tiled_copy_tv(atom_s, thr_layout, val_layout)
        atom_a = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.act_dtype,
                                     num_bits_per_copy=self.act_copy_bits)
        tiled_a = cute.make_tiled_copy_tv(atom_a, thr_layout, val_layout)
        return tiled_s, tiled_s.get_slice(tidx), tiled_a, tiled_a.get_slice(tidx)

    def _state_tile(self, mState, slot, head, pblk):
        """The [block_p, N] tile of state matrix (slot, head) at P block ``pblk``."""
        return cute.local_tile(mState[slot, head, None, None], (self.block_p, self.dstate),
                               (pblk, 0))

    def _load_bc(self, tiled_a, thr_a, mB, mC, index):
        """This thread's chunks of B[index + (:,)] and C[index + (:,)] (act dtype registers).

        The N vector is viewed as an (RPP, N) tile with a 0 row stride, so the state's thread
        mapping gives each thread its column chunks."""
        RPP, N = self.rpp, self.dstate
        gB = cute.make_tensor(mB[index + (None,)].iterator,
                              cute.make_layout((RPP, N), stride=(0, 1)))
        gC = cute.make_tensor(mC[index + (None,)].iterator,
                              cute.make_layout((RPP, N), stride=(0, 1)))
        tBg = thr_a.partition_S(gB)  # ((V), 1, CN)
        tCg = thr_a.partition_S(gC)
        tBr = cute.make_rmem_tensor_like(tBg)
        tCr = cute.make_rmem_tensor_like(tCg)
        cute.copy(tiled_a, tBg, tBr)
        cute.copy(tiled_a, tCg, tCr)
        return tBr, tCr

    def _row_view(self, m, index, pblk):
        """The P block of the [P] vector ``m[index + (:,)]`` (x, z or out) viewed as a
        (block_p, TN*V) tile with a 0 column stride: element (0, r, 0) of a thread's partition
        is the entry of the state row of its r-th row chunk."""
        BP = self.block_p
        row = cute.local_tile(m[index + (None,)], (BP,), (pblk,))
        return cute.make_tensor(row.iterator,
                                cute.make_layout((BP, self.tn * self.vec), stride=(1, 0)))

    def _rows_f32(self, tRg):
        """The R per-row values of a :meth:`_row_view` partition in fp32 registers."""
        rR = cute.make_rmem_tensor((self.rows,), Float32)
        for r in range(self.rows):
            rR[r] = tRg[0, r, 0].to(Float32)
        return rR

    def _load_x_z_out(self, thr_a, mX, mZ, mOut, index, pblk):
        """(rX, rZ, tOg): this thread's x and z rows in fp32 (rZ None without z) and its view
        of out, for the (token, head) ``index``."""
        tXg = thr_a.partition_S(self._row_view(mX, index, pblk))  # ((V), R, 1)
        tOg = thr_a.partition_D(self._row_view(mOut, index, pblk))
        rX = self._rows_f32(tXg)
        rZ = None
        if self.has_z:
            rZ = self._rows_f32(thr_a.partition_S(self._row_view(mZ, index, pblk)))
        return rX, rZ, tOg

    def _update_and_dot_c(self, rSf, rBf, rCf, rX, dt, dA):
        """S = dA S + (dt x) B^T in place (fp32 registers); returns this thread's partial
        y = S.C of each of its R rows (to be summed over the TN lanes of the row)."""
        rY = cute.make_rmem_tensor((self.rows,), Float32)
        for r in range(self.rows):
            dtx = dt * rX[r]
            acc = Float32(0.0)
            for c in range(self.cn):
                for e in range(self.vec):
                    s = rSf[e, r, c] * dA + dtx * rBf[e, 0, c]
                    rSf[e, r, c] = s
                    acc = acc + s * rCf[e, 0, c]
            rY[r] = acc
        return rY

    def _reduce_y(self, rY):
        """Sum each row's partial y over the TN lanes of the row (butterfly, in place)."""
        for r in range(self.rows):
            rY[r] = cute.arch.warp_reduction(rY[r], operator.add, threads_in_group=self.tn)

    def _store_y(self, rY, rX, rZ, d_skip, tOg):
        """out = y (+ D x) (* silu(z)) of each row (called by the row's first lane)."""
        for r in range(self.rows):
            y = rY[r]
            if self.has_D:
                y = y + d_skip * rX[r]
            if self.has_z:
                zr = rZ[r]
                y = y * zr / (Float32(1.0) + cute.math.exp(-zr))
            tOg[0, r, 0] = y.to(self.act_dtype)

    # ---------------------------------------------------------------- device side
    @cute.kernel
    def kernel(
        self,
        mState: cute.Tensor,
        mX: cute.Tensor,
        mDt: cute.Tensor,
        mA: cute.Tensor,
        mB: cute.Tensor,
        mC: cute.Tensor,
        mD: Optional[cute.Tensor],
        mZ: Optional[cute.Tensor],
        mDtBias: Optional[cute.Tensor],
        mIdx: Optional[cute.Tensor],
        mOut: cute.Tensor,
        pad_slot_id: Int32,
    ):
        common.pdl_prologue(self.pdl)
        tidx, _, _ = cute.arch.thread_idx()
        row_b, head, pblk = cute.arch.block_idx()
        tiled_s, thr_s, tiled_a, thr_a = self._tiled_copies(tidx)

        # slot of this batch row; pad rows (index == pad_slot_id) and out-of-range slots
        # are skipped entirely (no state access, out row untouched)
        num_slots = mState.shape[0]
        valid = Boolean(True)
        if const_expr(self.has_idx):
            slot = mIdx[row_b]
            if slot == pad_slot_id:
                valid = Boolean(False)
            if slot < 0:
                valid = Boolean(False)
        else:
            slot = row_b  # no indices: row i -> slot i, pad_slot_id unused
        if slot >= num_slots:
            valid = Boolean(False)

        if valid:
            # ---- issue the state loads first (the long pole): R*CN x 128-bit per thread
            tSg = thr_s.partition_S(self._state_tile(mState, slot, head, pblk))  # ((V), R, CN)
            tSr = cute.make_rmem_tensor_like(tSg)
            cute.copy(tiled_s, tSg, tSr)

            # ---- small inputs
            group = head // self.heads_per_group
            tBr, tCr = self._load_bc(tiled_a, thr_a, mB, mC, (row_b, group))
            rX, rZ, tOg = self._load_x_z_out(thr_a, mX, mZ, mOut, (row_b, head), pblk)

            # ---- per-head scalars (fp32)
            dt = mDt[row_b, head].to(Float32)
            if const_expr(self.has_dt_bias):
                dt = dt + mDtBias[head].to(Float32)
            if const_expr(self.dt_softplus):
                if dt <= Float32(SOFTPLUS_THRESHOLD):
                    dt = cute.math.log1p(cute.math.exp(dt))
            a = mA[head].to(Float32)
            dA = cute.math.exp(a * dt)
            d_skip = Float32(0.0)
            if const_expr(self.has_D):
                d_skip = mD[head].to(Float32)

            # ---- fp32 update + partial dot with C
            rBf = common.fp32_regs(tBr)
            rCf = common.fp32_regs(tCr)
            rSf = common.fp32_regs(tSr)
            rY = self._update_and_dot_c(rSf, rBf, rCf, rX, dt, dA)

            # ---- write the state back (RN convert for 16-bit states), 128-bit stores
            tSr.store(rSf.load().to(self.state_dtype))
            cute.copy(tiled_s, tSr, tSg)

            # ---- y = S.C over the TN lanes of a row, + D x, * silu(z)
            self._reduce_y(rY)
            if tidx % self.tn == 0:
                self._store_y(rY, rX, rZ, d_skip, tOg)


# --------------------------------------------------------------------------------------
# compile (tensor-free, cached) and launch
# --------------------------------------------------------------------------------------

_CACHE = KernelCache("mamba2_standard")


def _resolve(state_dtype, act_dtype, dt_dtype, nheads, headdim, dstate, ngroups, has_D, has_z,
             has_dt_bias, dt_softplus, has_idx, block_p, num_threads, min_blocks_per_mp,
             pdl=None):
    """Normalise the compile parameters into (constructor kwargs, cache key)."""
    cfg = tile_config(state_dtype, headdim, dstate, block_p, num_threads)
    kw = dict(
        state_dtype=dtype_name(state_dtype), act_dtype=dtype_name(act_dtype),
        dt_dtype=dtype_name(dt_dtype), nheads=int(nheads), headdim=int(headdim),
        dstate=int(dstate), ngroups=int(ngroups), has_D=bool(has_D), has_z=bool(has_z),
        has_dt_bias=bool(has_dt_bias), dt_softplus=bool(dt_softplus),
        has_state_batch_indices=bool(has_idx), block_p=cfg.block_p,
        num_threads=cfg.num_threads,
        min_blocks_per_mp=int(DEFAULT_MIN_BLOCKS_PER_MP if min_blocks_per_mp is None
                              else min_blocks_per_mp),
        pdl=common.pdl_mode(pdl),
    )
    key = ("mamba2_standard", common.arch_key()) + tuple(kw.values())
    return kw, key


def _meta(op: Mamba2StandardDecode):
    """The :class:`CompiledKernel` meta of a compiled op: its tile configuration."""
    return {"cfg": op.cfg}


def fake_head_inputs(act_dtype, dt_dtype, H: int, P: int, lead, has_z: bool, has_D: bool,
                     has_dt_bias: bool):
    """Fake per-head inputs of a Mamba-2 step (x, out, z, dt, A, D, dt_bias; None where absent):
    x / out / z [*lead, H, P] (unit last stride), dt [*lead, H] in ``dt_dtype``, fp32 A / D /
    dt_bias [H]; ``lead`` the (symbolic) per-token leading modes, each with a free stride."""
    dyn = ("dyn",) * len(lead)
    f = common.fake_tensor
    x = f(act_dtype, lead + (H, P), dyn + ("dyn", 1))
    out = f(act_dtype, lead + (H, P), dyn + ("dyn", 1))
    z = f(act_dtype, lead + (H, P), dyn + ("dyn", 1)) if has_z else None
    dt = f(dt_dtype, lead + (H,), dyn + ("dyn",))
    A = f(Float32, (H,), ("dyn",))
    D = f(Float32, (H,), ("dyn",)) if has_D else None
    dt_bias = f(Float32, (H,), ("dyn",)) if has_dt_bias else None
    return x, out, z, dt, A, D, dt_bias


def _fake_inputs(op: Mamba2StandardDecode, lead):
    """Fake (state, x, dt, A, B, C, D, z, dt_bias, out): num_slots symbolic, ``lead`` the
    (symbolic) per-token leading modes of x / z / out / dt / B / C (``(batch,)``; the snapshot
    verify adds its draft mode T), each with a free stride (B / C: divisible by one chunk)."""
    H, P, N, G = op.nheads, op.headdim, op.dstate, op.ngroups
    v = op.vec
    bv = op.act_copy_bits // op.act_dtype.width
    at = op.act_dtype
    slots = common.sym()
    f = common.fake_tensor
    state = f(op.state_dtype, (slots, H, P, N), (("dyn", v), ("dyn", v), N, 1), align_bytes=16)
    x, out, z, dt, A, D, dt_bias = fake_head_inputs(at, op.dt_dtype, H, P, lead, op.has_z,
                                                    op.has_D, op.has_dt_bias)
    bc_align = op.act_copy_bits // 8
    bc_strides = (("dyn", bv),) * len(lead) + (("dyn", bv), 1)
    B = f(at, lead + (G, N), bc_strides, align_bytes=bc_align)
    C = f(at, lead + (G, N), bc_strides, align_bytes=bc_align)
    return state, x, dt, A, B, C, D, z, dt_bias, out


def _fake_args(op: Mamba2StandardDecode):
    """Fake tensors: batch and num_slots symbolic (one compile serves every batch size).

    Contract checked by TVM-FFI at call time: dtypes; H, P, N, G extents; a shared
    ``batch`` across x/dt/B/C/z/out/indices; unit last stride of state/x/z/out/B/C;
    state P-stride == N; state base 16-byte aligned with slot/head strides multiples of
    16 bytes; B/C base and row strides aligned to one per-thread chunk.
    """
    batch = common.sym()
    state, x, dt, A, B, C, D, z, dt_bias, out = _fake_inputs(op, (batch,))
    idx = common.fake_tensor(Int32, (batch,), ("dyn",)) if op.has_idx else None
    return (state, x, dt, A, B, C, D, z, dt_bias, idx, out, Int32(-1), common.fake_stream())


def compile_mamba2_standard(
    state_dtype,
    act_dtype,
    dt_dtype,
    nheads: int,
    headdim: int,
    dstate: int,
    ngroups: int,
    has_D: bool,
    has_z: bool,
    has_dt_bias: bool,
    dt_softplus: bool,
    has_state_batch_indices: bool = True,
    block_p: Optional[int] = None,
    num_threads: Optional[int] = None,
    min_blocks_per_mp: Optional[int] = None,
    pdl: Optional[int] = None,
) -> CompiledKernel:
    """Compile (once per key, tensor-free, TVM-FFI) the standard-decode kernel.

    Every argument is baked into the binary and forms the cache key (dtypes may be torch
    dtypes, cutlass types or names); ``batch`` and ``num_slots`` stay symbolic. Call the
    result as ``k.ffi(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out,
    pad_slot_id)`` with torch tensors (``None`` where the variant has no such tensor); it
    launches on the current torch stream. Needs ``apache-tvm-ffi``; without it
    :func:`mamba2_standard_decode_cute` compiles on the classic path at first launch.
    """
    common.require_tvm_ffi("; without it the classic path compiles on first launch "
                           "(mamba2_standard_decode_cute)")
    kw, key = _resolve(state_dtype, act_dtype, dt_dtype, nheads, headdim, dstate, ngroups, has_D,
                       has_z, has_dt_bias, dt_softplus, has_state_batch_indices, block_p,
                       num_threads, min_blocks_per_mp, pdl)
    return common.compile_tvm_ffi_cached(_CACHE, key + ("tvm_ffi",),
                                         lambda: Mamba2StandardDecode(**kw), _fake_args, _meta)


def compile_only(
    state_dtype="float32",
    act_dtype="bfloat16",
    dt_dtype="float32",
    nheads: int = 128,
    headdim: int = 64,
    dstate: int = 128,
    ngroups: int = 8,
    has_D: bool = True,
    has_z: bool = False,
    has_dt_bias: bool = True,
    dt_softplus: bool = True,
    has_state_batch_indices: bool = True,
    block_p: Optional[int] = None,
    num_threads: Optional[int] = None,
    min_blocks_per_mp: Optional[int] = None,
    keep_ptx: bool = False,
    dump_dir: Optional[str] = None,
) -> Tuple[CompiledKernel, Optional[str]]:
    """Compile one variant without launching; works on a CPU-only machine when
    ``CUTE_DSL_ARCH`` (e.g. ``sm_90a``) is set. Defaults: Nemotron-3-Super layer.

    Returns ``(kernel, ptx)``. Without ``keep_ptx``/``dump_dir`` this is
    :func:`compile_mamba2_standard` (cached; ``ptx`` is None; without TVM-FFI an uncached
    classic compile against the same fake tensors). With ``keep_ptx`` it
    compiles afresh (uncached) with ``--keep-ptx`` and returns the PTX text; with
    ``dump_dir`` the PTX and CUBIN files are also left in that directory.
    """
    if not keep_ptx and dump_dir is None and common.HAS_TVM_FFI:
        k = compile_mamba2_standard(state_dtype, act_dtype, dt_dtype, nheads, headdim, dstate,
                                    ngroups, has_D, has_z, has_dt_bias, dt_softplus,
                                    has_state_batch_indices, block_p, num_threads,
                                    min_blocks_per_mp)
        return k, None
    kw, key = _resolve(state_dtype, act_dtype, dt_dtype, nheads, headdim, dstate, ngroups, has_D,
                       has_z, has_dt_bias, dt_softplus, has_state_batch_indices, block_p,
                       num_threads, min_blocks_per_mp)
    op = Mamba2StandardDecode(**kw)
    if not keep_ptx and dump_dir is None:  # no TVM-FFI: plain uncached compile check
        compiled, secs = common.cute_compile(op, *_fake_args(op))
        return CompiledKernel(compiled, key, secs, use_ffi=False, meta=_meta(op)), None
    return common.compile_keep_ptx(op, _fake_args(op), key, _meta(op), dump_dir)


def _classic_launch(kw, key, tensors, pad_slot_id: int) -> None:
    """Classic path (no apache-tvm-ffi): from_dlpack + CUstream, compiled at first launch
    against the real tensors with fully dynamic layouts (the kernel's ``_canon`` restores
    the static facts), cached under the same key plus ``"classic"``."""
    conv = common.from_dlpack_dynamic
    act_bits = to_cute_dtype(kw["act_dtype"]).width
    vec = 128 // to_cute_dtype(kw["state_dtype"]).width
    bc_align = min(128, vec * act_bits) // 8
    state, x, dt, A, B, C, D, z, dt_bias, idx, out = tensors
    args = (
        conv(state, 16), conv(x), conv(dt), conv(A), conv(B, bc_align), conv(C, bc_align),
        conv(D), conv(z), conv(dt_bias), conv(idx), conv(out), Int32(pad_slot_id),
        common.current_cu_stream(),
    )
    key = key + ("classic",)

    def build() -> CompiledKernel:
        op = Mamba2StandardDecode(**kw)
        compiled, secs = common.cute_compile(op, *args, use_tvm_ffi=False)
        return CompiledKernel(compiled, key, secs, use_ffi=False, meta=_meta(op))

    _CACHE.get_or_compile(key, build).compiled(*args)


def mamba2_standard_decode_cute(
    state,
    x,
    dt,
    A,
    B,
    C,
    D=None,
    z=None,
    dt_bias=None,
    dt_softplus: bool = True,
    state_batch_indices=None,
    pad_slot_id: int = -1,
    out=None,
    block_p: Optional[int] = None,
    num_threads: Optional[int] = None,
    min_blocks_per_mp: Optional[int] = None,
):
    """One standard Mamba-2 decode step on CUDA torch tensors; updates ``state`` in place.

    Inputs are assumed validated by the torch layer: shapes and dtypes as in the module
    docstring; unit last stride for state/x/z/out/B/C; ``state.stride(2) == dstate``;
    state 16-byte aligned with slot/head strides multiples of 16 bytes; B/C aligned to one
    per-thread chunk (8 bytes for bf16 acts with an fp32 state). Allocates nothing when
    ``out`` is given. Launches on ``torch.cuda.current_stream()`` (CUDA-graph capturable
    once compiled: warm every (variant, block_p) up before capture). Returns ``out``.

    ``block_p`` / ``num_threads`` / ``min_blocks_per_mp`` override the tiling
    (default: :func:`choose_block_p`, :data:`DEFAULT_NUM_THREADS` threads,
    :data:`DEFAULT_MIN_BLOCKS_PER_MP`). Per call the host cost is one dict lookup plus
    the TVM-FFI call.
    """
    batch, nheads, headdim = x.shape
    if out is None:
        out = x.new_empty(x.shape)
    if batch == 0:
        return out
    # hot path: one dict lookup keyed by what the torch tensors already carry
    fast_key = (state.dtype, x.dtype, dt.dtype, nheads, headdim, state.shape[-1], B.shape[1],
                D is None, z is None, dt_bias is None, dt_softplus, state_batch_indices is None,
                batch if block_p is None else -block_p, num_threads, min_blocks_per_mp,
                common.HAS_TVM_FFI, common.pdl_env())
    fn = _LAUNCH.get(fast_key)
    if fn is None:
        fn = _make_launcher(state, x, dt, B, D, z, dt_bias, dt_softplus, state_batch_indices,
                            block_p, num_threads, min_blocks_per_mp)
        _LAUNCH[fast_key] = fn
    fn(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out, pad_slot_id)
    return out


_LAUNCH: dict = {}
_ENV_NAMES = (common.PDL_ENV,)


def make_launch(state, x, dt, B, D, z, dt_bias, dt_softplus, state_batch_indices):
    """``launch(state, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out, pad_slot_id)``
    for one call signature: the state's dtype and shape, x / dt dtypes and shapes, B's group
    count, which optional inputs are given, the tiling heuristic's choice for this batch
    (compiled on first use)."""
    return _make_launcher(state, x, dt, B, D, z, dt_bias, dt_softplus, state_batch_indices,
                          None, None, None)


def _make_launcher(state, x, dt, B, D, z, dt_bias, dt_softplus, state_batch_indices, block_p,
                   num_threads, min_blocks_per_mp):
    """Resolve tiling + compile (first call per key) and return ``fn(*12 call args)``."""
    batch, nheads, headdim = x.shape
    dstate = state.shape[-1]
    if block_p is None:
        block_p = choose_block_p(batch, nheads, headdim, dstate, common.dtype_name(state.dtype),
                                 num_threads)
    kw, key = _resolve(state.dtype, x.dtype, dt.dtype, nheads, headdim, dstate, B.shape[1],
                       D is not None, z is not None, dt_bias is not None, dt_softplus,
                       state_batch_indices is not None, block_p, num_threads, min_blocks_per_mp)
    if common.HAS_TVM_FFI:
        return compile_mamba2_standard(**kw).ffi

    def classic(*args):
        *tensors, pad_slot_id = args
        _classic_launch(kw, key, tuple(tensors), pad_slot_id)

    return classic
