"""Gated DeltaNet STANDARD decode (one token, read + write the whole state) in CuTe DSL.

Semantics: ``replayssm_lp.reference.gdn_standard_step`` (FLA / vLLM ``fused_recurrent`` decode,
DESIGN.md §1, §3), per (batch row, value head hv; key head hk = hv // (HV/H))::

    g    = given g,   or  -exp(A_log) * softplus(a + dt_bias)  (softplus bypassed above 20)
    beta = given beta, or  sigmoid(b)
    kn   = k * rsqrt(sum k^2 + 1e-6), qn = q * rsqrt(sum q^2 + 1e-6) * scale   (l2norm optional)
    S    = e^g S ;  u = beta (v - S kn) ;  S += u kn^T ;  o = S qn            (fp32 math)

computed as ``Sk = S kn, Sq = S qn`` (one pass over the old state), ``u = beta (v - e^g Sk)``,
``o = e^g Sq + (kn . qn) u`` (= S_new qn) and ``S_new = e^g S + u kn^T``, stored back in place in
the state's dtype (RN for fp16 / bf16).

Shapes (H key heads, HV value heads, K key dim, V value dim):

* ``state`` [num_slots, HV, V, K] (layout ``"vk"``, K contiguous) or [num_slots, HV, K, V]
  (``"kv"``, the FLA / vLLM Triton layout), fp32 / fp16 / bf16, updated in place;
* ``q``, ``k`` [batch, H, K], ``v``, ``out`` [batch, HV, V] (activation dtype);
* gates: ``g``, ``beta`` [batch, HV] (any float dtype) or raw ``A_log`` [HV], ``a`` [batch, HV],
  ``dt_bias`` [HV] (optional), ``b`` [batch, HV];
* ``state_batch_indices`` int32 [batch] or None (row i -> slot i); a row whose index equals
  ``pad_slot_id`` (or lies outside ``[0, num_slots)``) is skipped: nothing is read or written.

Tiling: one CTA per (batch row, value head, block of ``block_v`` value rows). The state tile
(block_v x K) is loaded once with 128-bit loads into registers (fp32 math), both dot products are
formed in that one pass, reduced, the per-row u / o are computed from shared memory, and the
updated tile is stored with 128-bit stores.

* ``"vk"``: threads (RPP, TN) row-major; TN lanes share a state row (16 bytes each along K);
  the R state rows of a thread give 2R partial dots (S kn, S qn) that a *transposed* butterfly
  sums over the TN lanes in ``2R - 1`` shuffles (instead of ``2R log2 TN``).
* ``"kv"``: threads (RPP, TN) over the stored [K, block_v] tile, 16 bytes along V each; partial
  dots per column are reduced over the K rows through shuffles (inside a warp) and shared memory
  (across warps).

Public entry points: :func:`compile_gdn_standard`, :func:`gdn_standard_decode_cute`,
:func:`compile_only`, :func:`choose_block_v`, :func:`tile_config`.
"""

from __future__ import annotations

import functools
from typing import Any, List, Optional, Tuple

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, const_expr

import cuda.bindings.driver as cuda  # a dependency of nvidia-cutlass-dsl

from . import common
from . import lowprec as lp
from .common import CompiledKernel, KernelCache, dtype_name, dtype_of, to_cute_dtype

__all__ = [
    "GDNStandardDecode",
    "StdTile",
    "tile_config",
    "choose_block_v",
    "compile_gdn_standard",
    "compile_only",
    "gdn_standard_decode_cute",
    "treduce",
    "gdn_gates",
    "qk_normalize_warp",
    "init_gate_inputs",
    "launch_gates",
    "supports",
]

SOFTPLUS_THRESHOLD = 20.0
L2NORM_EPS = 1e-6
STATE_DTYPES = ("float32", "float16", "bfloat16")
ACT_DTYPES = ("float32", "float16", "bfloat16")
LAYOUTS = ("vk", "kv")

DEFAULT_NUM_THREADS = 128
MAX_ELEMS_PER_THREAD = 64      # fp32 state elements a thread holds (register budget)
MIN_CTAS_PER_SM = 2


# --------------------------------------------------------------------------------------
# device helpers shared with gdn_replay (plain Python functions over DSL values)
# --------------------------------------------------------------------------------------


def _self(cond, a, b):
    return cutlass.select_(cond, a, b)


def treduce(vals: List[Any], tn: int, lane_in_group):
    """Sum each of the ``n`` Float32 values in ``vals`` over the ``tn`` lanes of an aligned lane
    group (``tn`` a power of two <= 32) with a *transposed* butterfly: at each level a lane keeps
    half of its values and trades the other half with its partner, so ``n`` values cost about
    ``n - 1`` shuffles instead of ``n log2 tn``.

    Returns ``(rest, base)``: this lane holds the full sums of values ``base + i`` (i < len(rest));
    when ``n < tn`` the last values are replicated over ``tn / n`` lanes.
    """
    vals = list(vals)
    base = Int32(0)
    o = tn // 2
    while o >= 1:
        m = len(vals)
        if m > 1 and m % 2 == 0:
            half = m // 2
            bit = (lane_in_group & Int32(o)) != Int32(0)
            new = []
            for i in range(half):
                a, b = vals[i], vals[i + half]
                send = Float32(_self(bit, a, b))
                keep = Float32(_self(bit, b, a))
                new.append(keep + cute.arch.shuffle_sync_bfly(send, offset=o))
            vals = new
            base = base + Int32(_self(bit, Int32(half), Int32(0)))
        else:
            vals = [v + cute.arch.shuffle_sync_bfly(v, offset=o) for v in vals]
        o //= 2
    return vals, base


def softplus_bypass(x):
    """softplus(x), x itself above 20 (reference.softplus_bypass)."""
    xc = cute.arch.fmin(x, Float32(SOFTPLUS_THRESHOLD))
    sp = cute.math.log1p(cute.math.exp(xc))
    return Float32(_self(x > Float32(SOFTPLUS_THRESHOLD), x, sp))


def _gate_sources(has_g, has_beta, has_dt_bias, mG, mBeta, mALog, mA, mDtBias, mB, row, hv,
                  tok=None):
    """The gate inputs of (row, hv) as (tensor, index) pairs, in load order: g or (a, dt_bias,
    A_log), then beta or b. ``tok``: the per-token tensors' index instead of (row, hv) (e.g.
    (row, t, hv) for draft t of a verify)."""
    ti = (row, hv) if tok is None else tok
    if has_g:
        src = [(mG, ti)]
    else:
        src = [(mA, ti)] + ([(mDtBias, (hv,))] if has_dt_bias else []) + [(mALog, (hv,))]
    return src + [(mBeta, ti) if has_beta else (mB, ti)]


def _gates_of(has_g, has_beta, has_dt_bias, xs):
    """(g, beta) in fp32 from the gate inputs ``xs`` (:func:`_gate_sources` order), each a
    callable giving the fp32 value (loaded or converted where the math first needs it)."""
    if has_g:
        g = xs[0]()
    else:
        x = xs[0]()
        if has_dt_bias:
            x = x + xs[1]()
        g = -cute.math.exp(xs[-2]()) * softplus_bypass(x)
    if has_beta:
        beta = xs[-1]()
    else:
        beta = Float32(1.0) / (Float32(1.0) + cute.math.exp(-xs[-1]()))
    return g, beta


def gdn_gates(has_g, has_beta, has_dt_bias, mG, mBeta, mALog, mA, mDtBias, mB, row, hv,
              tok=None):
    """(g, beta) in fp32 for (row, hv), from given or raw gate tensors (reference.gdn_gates);
    ``tok``: see :func:`_gate_sources`."""
    src = _gate_sources(has_g, has_beta, has_dt_bias, mG, mBeta, mALog, mA, mDtBias, mB, row, hv,
                        tok)
    return _gates_of(has_g, has_beta, has_dt_bias,
                     [lambda t=t, i=i: t[i].to(Float32) for t, i in src])


@cute.jit
def gate_input_loads(has_g: cutlass.Constexpr, has_beta: cutlass.Constexpr,
                     has_dt_bias: cutlass.Constexpr, mG, mBeta, mALog, mA, mDtBias, mB,
                     row: Int32, hv: Int32, cond, tok=None):
    """Issue the loads of (row, hv)'s gate inputs where ``cond`` as raw bits
    (``lowprec.load_bits_u32``), without consuming them (a caller that issues a large load next
    keeps these small ones ahead of it); :func:`gdn_gates_from_loads` finishes. Returns
    (register tensor [n], dtypes)."""
    src = _gate_sources(has_g, has_beta, has_dt_bias, mG, mBeta, mALog, mA, mDtBias, mB, row, hv,
                        tok)
    regs = cute.make_rmem_tensor((len(src),), cutlass.Uint32)
    if cond:
        for j in cutlass.range_constexpr(len(src)):
            regs[j] = lp.load_bits_u32(src[j][0], src[j][1])
    return regs, [t.element_type for t, _ in src]


def gdn_gates_from_loads(has_g, has_beta, has_dt_bias, loads):
    """(g, beta) in fp32 from :func:`gate_input_loads`' raw bits."""
    regs, dts = loads
    return _gates_of(has_g, has_beta, has_dt_bias,
                     [lambda j=j: lp.bits_u32_to_f32(regs[j], dts[j]) for j in range(len(dts))])


def qk_normalize_warp(mQ, mK, row, hk, K: int, use_l2norm: bool, scale, lane, sKn, sQn):
    """One warp (K a multiple of 32): kn = k * kinv, qn = (q * qinv) * scale into shared memory
    (fp32, length K); returns (kinv, kq = sum kn*qn), valid in every lane."""
    nper = K // 32
    kv = []
    qv = []
    ss_k = Float32(0.0)
    ss_q = Float32(0.0)
    for i in range(nper):
        idx = lane + Int32(32 * i)
        kx = mK[row, hk, idx].to(Float32)
        qx = mQ[row, hk, idx].to(Float32)
        kv.append(kx)
        qv.append(qx)
        ss_k = ss_k + kx * kx
        ss_q = ss_q + qx * qx
    kinv = Float32(1.0)
    qinv = Float32(1.0)
    if use_l2norm:
        ss_k = cute.arch.warp_reduction(ss_k, lambda a, b: a + b, threads_in_group=32)
        ss_q = cute.arch.warp_reduction(ss_q, lambda a, b: a + b, threads_in_group=32)
        kinv = cute.math.rsqrt(ss_k + Float32(L2NORM_EPS))
        qinv = cute.math.rsqrt(ss_q + Float32(L2NORM_EPS))
    kq = Float32(0.0)
    for i in range(nper):
        kn = kv[i] * kinv
        qn = (qv[i] * qinv) * scale
        kq = kq + kn * qn
        sKn[lane + Int32(32 * i)] = kn
        sQn[lane + Int32(32 * i)] = qn
    kq = cute.arch.warp_reduction(kq, lambda a, b: a + b, threads_in_group=32)
    return kinv, kq


def init_gate_inputs(op, g_dtype, beta_dtype, alog_dtype, a_dtype, dt_bias_dtype, b_dtype):
    """Set a kernel op's gate facts from its compile parameters: ``has_g`` / ``has_beta`` (given
    g / beta, else the raw A_log + a (+ dt_bias) / b), ``has_dt_bias`` and the gate dtypes
    (cutlass types, None when absent). Raises when a gate has neither form."""
    op.has_g = g_dtype is not None
    op.has_beta = beta_dtype is not None
    if not op.has_g and (alog_dtype is None or a_dtype is None):
        raise ValueError("without g the raw gate inputs A_log and a are required")
    if not op.has_beta and b_dtype is None:
        raise ValueError("without beta the raw b is required")
    op.has_dt_bias = (not op.has_g) and dt_bias_dtype is not None
    cd = lambda d: None if d is None else to_cute_dtype(d)  # noqa: E731
    op.g_dtype, op.beta_dtype = cd(g_dtype), cd(beta_dtype)
    op.alog_dtype, op.a_dtype = cd(alog_dtype), cd(a_dtype)
    op.dt_bias_dtype, op.b_dtype = cd(dt_bias_dtype), cd(b_dtype)


def launch_gates(g, beta, A_log, a, dt_bias, b):
    """The gate tensors a launch passes, in argument order: a given ``g`` drops the raw A_log, a,
    dt_bias; a given ``beta`` drops b."""
    if g is not None:
        A_log = a = dt_bias = None
    if beta is not None:
        b = None
    return g, beta, A_log, a, dt_bias, b


def slot_of_row(has_idx, mIdx, row, num_slots, pad_slot_id):
    """(slot, valid) for a batch row; without indices row i -> slot i (pad_slot_id unused)."""
    if has_idx:
        slot = mIdx[row]
        valid = (slot != pad_slot_id) & (slot >= Int32(0)) & (slot < num_slots)
    else:
        slot = row
        valid = slot < num_slots
    return slot, valid


# --------------------------------------------------------------------------------------
# tile configuration (pure Python)
# --------------------------------------------------------------------------------------


class StdTile:
    """Static tiling of one (row, value head, V block) state tile over a CTA.

    ``vk``: stored tile [block_v, K]; TN lanes per state row (16 B each), CN chunks per lane,
    RPP = threads / TN rows per pass, R = block_v / RPP rows per thread.
    ``kv``: stored tile [K, block_v]; TN = block_v / vec lanes along V (one 16 B chunk each),
    RPP = threads / TN K-rows per pass, R = K / RPP K-rows per thread.
    """

    def __init__(self, state_bits: int, layout: str, K: int, V: int, block_v: int, num_threads: int):
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if num_threads % 32 or not 32 <= num_threads <= 1024:
            raise ValueError(f"num_threads={num_threads} must be a multiple of 32 in [32, 1024]")
        if V % block_v:
            raise ValueError(f"block_v={block_v} must divide V={V}")
        if K % 32:
            raise ValueError(f"K={K} must be a multiple of 32")
        self.layout = layout
        self.vec = 128 // state_bits
        self.num_threads = num_threads
        self.block_v = block_v
        v = self.vec
        if layout == "vk":
            if K % v:
                raise ValueError(f"K={K} must be a multiple of {v} (16-byte vectors)")
            chunks = K // v
            tn = 1
            while tn * 2 <= 32 and chunks % (tn * 2) == 0:
                tn *= 2
            self.tn, self.cn = tn, chunks // tn
            self.rpp = num_threads // tn
            if block_v % self.rpp:
                raise ValueError(f"block_v={block_v} must be a multiple of rows_per_pass={self.rpp}")
            self.r = block_v // self.rpp
        else:
            if block_v % v:
                raise ValueError(f"block_v={block_v} must be a multiple of {v} (16-byte vectors)")
            tn = block_v // v
            if tn > 32 or 32 % tn:
                raise ValueError(f"block_v={block_v}: block_v/{v} lanes must divide 32")
            self.tn, self.cn = tn, 1
            self.rpp = num_threads // tn
            if K % self.rpp:
                raise ValueError(f"K={K} must be a multiple of rows_per_pass={self.rpp}")
            self.r = K // self.rpp
        self.elems = self.r * self.cn * v

    def __repr__(self):
        return (f"StdTile({self.layout}, block_v={self.block_v}, threads={self.num_threads}, "
                f"vec={self.vec}, TN={self.tn}, CN={self.cn}, RPP={self.rpp}, R={self.r})")


@functools.lru_cache(maxsize=None)
def _valid_tiles(state_bits: int, layout: str, K: int, V: int) -> Tuple[Tuple[int, int], ...]:
    """Every (block_v, num_threads) with <= MAX_ELEMS_PER_THREAD elements per thread, largest
    block first, then the preferred thread count."""
    out = []
    for bv in range(V, 0, -1):
        if V % bv:
            continue
        for nt in (DEFAULT_NUM_THREADS, 64, 256, 32, 512):
            try:
                t = StdTile(state_bits, layout, K, V, bv, nt)
            except ValueError:
                continue
            if t.elems <= MAX_ELEMS_PER_THREAD and t.r >= 1:
                out.append((bv, nt))
                break
    return tuple(out)


def tile_config(state_dtype, layout: str, K: int, V: int, block_v: Optional[int] = None,
                num_threads: Optional[int] = None) -> StdTile:
    bits = to_cute_dtype(state_dtype).width
    if block_v is not None and num_threads is not None:
        return StdTile(bits, layout, K, V, block_v, num_threads)
    cands = _valid_tiles(bits, layout, K, V)
    for bv, nt in cands:
        if block_v is not None and bv != block_v:
            continue
        if num_threads is not None:
            try:
                return StdTile(bits, layout, K, V, bv, num_threads)
            except ValueError:
                continue
        return StdTile(bits, layout, K, V, bv, nt)
    raise ValueError(f"no valid GDN tiling for state bits={bits}, layout={layout}, K={K}, V={V}, "
                     f"block_v={block_v}, num_threads={num_threads}")


@functools.lru_cache(maxsize=4096)
def choose_block_v(batch: int, HV: int, K: int, V: int, state_dtype: Any, layout: str = "vk",
                   min_ctas: Optional[int] = None) -> int:
    """Launch heuristic: the largest block_v (<= MAX_ELEMS_PER_THREAD elements per thread) that
    still gives >= ``min_ctas`` CTAs (default MIN_CTAS_PER_SM per SM); small batches get smaller
    V blocks (more CTAs per row)."""
    if min_ctas is None:
        min_ctas = MIN_CTAS_PER_SM * common.num_sms()
    cands = _valid_tiles(to_cute_dtype(state_dtype).width, layout, K, V)
    if not cands:
        raise ValueError(f"no valid GDN tiling for K={K}, V={V}, layout={layout}")
    for bv, _ in cands:
        if batch * HV * (V // bv) >= min_ctas:
            return bv
    return cands[-1][0]


# --------------------------------------------------------------------------------------
# the kernel
# --------------------------------------------------------------------------------------


class GDNStandardDecode:
    """Compile-time parameters + host launch (``__call__``) + device code (``kernel``)."""

    def __init__(self, state_dtype, act_dtype, layout: str, H: int, HV: int, K: int, V: int,
                 g_dtype=None, beta_dtype=None, alog_dtype=None, a_dtype=None, dt_bias_dtype=None,
                 b_dtype=None, use_qk_l2norm: bool = True, has_state_batch_indices: bool = True,
                 block_v: Optional[int] = None, num_threads: Optional[int] = None,
                 pdl: Optional[int] = None):
        self.pdl = common.pdl_mode(pdl)
        self.state_dtype = to_cute_dtype(state_dtype)
        self.act_dtype = to_cute_dtype(act_dtype)
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if HV % H:
            raise ValueError(f"HV={HV} must be a multiple of H={H}")
        self.layout = layout
        self.H, self.HV, self.K, self.V = H, HV, K, V
        self.group = HV // H
        init_gate_inputs(self, g_dtype, beta_dtype, alog_dtype, a_dtype, dt_bias_dtype, b_dtype)
        self.use_l2 = bool(use_qk_l2norm)
        self.has_idx = bool(has_state_batch_indices)
        self.tile = tile_config(self.state_dtype, layout, K, V, block_v, num_threads)
        t = self.tile
        self.vec, self.tn, self.cn, self.rpp, self.r = t.vec, t.tn, t.cn, t.rpp, t.r
        self.block_v, self.num_threads = t.block_v, t.num_threads
        self.nwarps = self.num_threads // 32

    # ---------------------------------------------------------------- host side
    @cute.jit
    def __call__(self, mState: cute.Tensor, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor,
                 mG: Optional[cute.Tensor], mBeta: Optional[cute.Tensor],
                 mALog: Optional[cute.Tensor], mA: Optional[cute.Tensor],
                 mDtBias: Optional[cute.Tensor], mB: Optional[cute.Tensor],
                 mIdx: Optional[cute.Tensor], mOut: cute.Tensor, scale: Float32,
                 pad_slot_id: Int32, stream: cuda.CUstream):
        batch = mQ.shape[0]
        self._launch(self.kernel(mState, mQ, mK, mV, mG, mBeta, mALog, mA, mDtBias, mB, mIdx,
                                 mOut, scale, pad_slot_id),
                     batch, stream)

    def _launch(self, kernel, batch, stream):
        """Launch ``kernel`` (a ``self.kernel(...)`` call) on the grid (batch, HV, V / block_v)."""
        kernel.launch(
            grid=[batch, self.HV, self.V // self.block_v],
            block=[self.num_threads, 1, 1],
            stream=stream,
            use_pdl=bool(self.pdl),
        )

    # ---------------------------------------------------------------- device helpers
    # Plain Python methods traced inline into ``kernel`` (and the snapshot verify's kernel).

    def _alloc_smem(self):
        """(sKn, sQn, sU, sScal, sDot) in shared memory; ``sDot``: the reduced dots S kn, S qn,
        [2 block_v] ("vk"), or their per-warp partial sums [2 block_v, warps] ("kv")."""
        K, BV = self.K, self.block_v
        smem = cutlass.memory.SmemAllocator()
        sKn = smem.allocate_tensor(Float32, cute.make_layout(K), byte_alignment=16)
        sQn = smem.allocate_tensor(Float32, cute.make_layout(K), byte_alignment=16)
        sU = smem.allocate_tensor(Float32, cute.make_layout(BV), byte_alignment=16)
        sScal = smem.allocate_tensor(Float32, cute.make_layout(4), byte_alignment=16)
        if self.layout == "vk":
            sDot = smem.allocate_tensor(Float32, cute.make_layout(2 * BV), byte_alignment=16)
        else:
            sDot = smem.allocate_tensor(Float32, cute.make_layout((2 * BV, self.nwarps)),
                                        byte_alignment=16)
        return sKn, sQn, sU, sScal, sDot

    def _tiled_copy(self, tidx):
        """(tiled, thr): threads (RPP, TN) row-major over the stored tile, 128-bit state copies."""
        thr_layout = cute.make_ordered_layout((self.rpp, self.tn), order=(1, 0))
        val_layout = cute.make_layout((1, self.vec))
        atom = cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), self.state_dtype,
                                   num_bits_per_copy=128)
        tiled = cute.make_tiled_copy_tv(atom, thr_layout, val_layout)
        return tiled, tiled.get_slice(tidx)

    def _state_tile(self, mState, slot, hv, vblk):
        """The stored tile of state matrix (slot, hv) at V block ``vblk``: [block_v, K] ("vk")
        or [K, block_v] ("kv")."""
        K, BV = self.K, self.block_v
        if self.layout == "vk":
            return cute.local_tile(mState[slot, hv, None, None], (BV, K), (vblk, 0))
        return cute.local_tile(mState[slot, hv, None, None], (K, BV), (0, vblk))

    @cute.jit
    def _gates_and_qk(self, mQ, mK, mG, mBeta, mALog, mA, mDtBias, mB, row, hv, hk, scale,
                      lane, warp, sKn, sQn, sScal):
        """(e^g, beta, kq = kn . qn) of token ``row`` (head hv; key head hk): the gates in every
        thread (uniform loads); warp 0 writes the normalised k / q to ``sKn`` / ``sQn`` and kq
        through ``sScal[0]``; ends with a CTA barrier."""
        g, beta = gdn_gates(self.has_g, self.has_beta, self.has_dt_bias, mG, mBeta, mALog, mA,
                            mDtBias, mB, row, hv)
        alpha = cute.math.exp(g)
        if warp == 0:
            kinv, kq = qk_normalize_warp(mQ, mK, row, hk, self.K, self.use_l2, scale, lane, sKn,
                                         sQn)
            if lane == 0:
                sScal[0] = kq
        cute.arch.barrier()
        kq = sScal[0]
        return alpha, beta, kq

    def _vk_partial_dots(self, rS, sKn, sQn, sDot, lr, rp):
        """"vk": S kn and S qn of this thread's R rows, summed over the TN lanes of each row by
        the transposed butterfly into ``sDot`` (row group rp: [S kn of R rows, S qn of R rows]).
        Returns the thread's kn chunks (VEC, CN) for the update."""
        TN, CN, R, VEC = self.tn, self.cn, self.r, self.vec
        # kn / qn at this thread's columns: (c*TN + lr)*VEC + e
        rKn = cute.make_rmem_tensor((VEC, CN), Float32)
        rQn = cute.make_rmem_tensor((VEC, CN), Float32)
        for c in range(CN):
            cute.autovec_copy(cute.local_tile(sKn, (VEC,), (c * TN + lr,)), rKn[None, c])
            cute.autovec_copy(cute.local_tile(sQn, (VEC,), (c * TN + lr,)), rQn[None, c])
        dk = []
        dq = []
        for r in range(R):
            ak = Float32(0.0)
            aq = Float32(0.0)
            for c in range(CN):
                for e in range(VEC):
                    s = rS[e, r, c]
                    ak = ak + s * rKn[e, c]
                    aq = aq + s * rQn[e, c]
            dk.append(ak)
            dq.append(aq)
        rest, base = treduce(dk + dq, TN, lr)
        for i in range(len(rest)):
            sDot[rp * (2 * R) + base + i] = rest[i]
        return rKn

    def _vk_finish_row(self, vr, v_in, sDot, sU, alpha, beta, kq, mOut, out_index, v0):
        """"vk", value row ``vr`` of the block (input ``v_in``): u = beta (v - e^g S kn) into
        ``sU`` and o = e^g S qn + (kn . qn) u to ``mOut[out_index + (v0 + vr,)]``."""
        RPP, R = self.rpp, self.r
        vrp = vr % RPP
        vri = vr // RPP
        sk = sDot[vrp * (2 * R) + vri]
        sq = sDot[vrp * (2 * R) + R + vri]
        u = beta * (v_in.to(Float32) - alpha * sk)
        o = alpha * sq + kq * u
        mOut[out_index + (v0 + vr,)] = o.to(self.act_dtype)
        sU[vr] = u

    def _vk_update(self, rS, rKn, sU, alpha, rp):
        """"vk": S = e^g S + u kn^T on this thread's R rows (fp32 registers, in place)."""
        RPP, CN, VEC = self.rpp, self.cn, self.vec
        for r in range(self.r):
            u = sU[r * RPP + rp]
            for c in range(CN):
                for e in range(VEC):
                    rS[e, r, c] = alpha * rS[e, r, c] + u * rKn[e, c]

    # ---------------------------------------------------------------- device side
    @cute.kernel
    def kernel(self, mState: cute.Tensor, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor,
               mG: Optional[cute.Tensor], mBeta: Optional[cute.Tensor],
               mALog: Optional[cute.Tensor], mA: Optional[cute.Tensor],
               mDtBias: Optional[cute.Tensor], mB: Optional[cute.Tensor],
               mIdx: Optional[cute.Tensor], mOut: cute.Tensor, scale: Float32,
               pad_slot_id: Int32):
        common.pdl_prologue(self.pdl)
        BV = self.block_v
        TN, RPP, R, VEC = self.tn, self.rpp, self.r, self.vec
        tidx, _, _ = cute.arch.thread_idx()
        row_b, hv, vblk = cute.arch.block_idx()
        lane = tidx % 32
        warp = tidx // 32
        hk = hv // self.group

        sKn, sQn, sU, sScal, sDot = self._alloc_smem()

        slot, valid = slot_of_row(self.has_idx, mIdx, row_b, mState.shape[0], pad_slot_id)
        if valid:
            # ---- 1. issue the state loads (the long pole): 128-bit per thread chunk
            tiled, thr = self._tiled_copy(tidx)
            tSg = thr.partition_S(self._state_tile(mState, slot, hv, vblk))  # ((VEC), R, CN)
            tSr = cute.make_rmem_tensor_like(tSg)
            cute.copy(tiled, tSg, tSr)

            # v of the value rows this thread finishes (prefetched with the tile)
            NTT = self.num_threads
            NIT = (BV + NTT - 1) // NTT
            vpre = [mV[row_b, hv, vblk * BV + cutlass.min(tidx + it * NTT, Int32(BV - 1))]
                    for it in range(NIT)]
            # ---- 2. gates (every thread, uniform loads) and the normalised q / k (warp 0)
            alpha, beta, kq = self._gates_and_qk(mQ, mK, mG, mBeta, mALog, mA, mDtBias, mB, row_b,
                                                 hv, hk, scale, lane, warp, sKn, sQn, sScal)

            rS = common.fp32_regs(tSr)
            lr = tidx % TN           # lane within the row group
            rp = tidx // TN          # row group
            v0 = vblk * BV

            if const_expr(self.layout == "vk"):
                # ---- 3. partial dots of the R rows, transposed reduction over the TN lanes
                rKn = self._vk_partial_dots(rS, sKn, sQn, sDot, lr, rp)
                cute.arch.barrier()
                # ---- 4. per-row u and o (one thread per value row)
                for it in cutlass.range_constexpr(NIT):
                    vr = tidx + it * NTT
                    if vr < BV:
                        self._vk_finish_row(vr, vpre[it], sDot, sU, alpha, beta, kq, mOut,
                                            (row_b, hv), v0)
                cute.arch.barrier()
                # ---- 5. update and store
                self._vk_update(rS, rKn, sU, alpha, rp)
            else:
                # kv: this thread holds K-rows r*RPP + rp, V columns lr*VEC + e of the block
                rKn = cute.make_rmem_tensor((R,), Float32)
                rQn = cute.make_rmem_tensor((R,), Float32)
                for r in cutlass.range_constexpr(R):
                    rKn[r] = sKn[r * RPP + rp]
                    rQn[r] = sQn[r * RPP + rp]
                pk = []
                pq = []
                for e in cutlass.range_constexpr(VEC):
                    ak = Float32(0.0)
                    aq = Float32(0.0)
                    for r in cutlass.range_constexpr(R):
                        s = rS[e, r, 0]
                        ak = ak + s * rKn[r]
                        aq = aq + s * rQn[r]
                    pk.append(ak)
                    pq.append(aq)
                # reduce over the row groups inside the warp (lane bits >= log2 TN) ...
                o = TN
                while o < 32:
                    pk = [x + cute.arch.shuffle_sync_bfly(x, offset=o) for x in pk]
                    pq = [x + cute.arch.shuffle_sync_bfly(x, offset=o) for x in pq]
                    o *= 2
                # ... then across warps through shared memory
                if lane < TN:
                    for e in cutlass.range_constexpr(VEC):
                        sDot[lr * VEC + e, warp] = pk[e]
                        sDot[BV + lr * VEC + e, warp] = pq[e]
                cute.arch.barrier()
                for it in cutlass.range_constexpr(NIT):
                    vr = tidx + it * NTT
                    if vr < BV:
                        sk = sDot[vr, 0]
                        sq = sDot[BV + vr, 0]
                        for w in cutlass.range_constexpr(1, self.nwarps):
                            sk = sk + sDot[vr, w]
                            sq = sq + sDot[BV + vr, w]
                        vin = vpre[it].to(Float32)
                        u = beta * (vin - alpha * sk)
                        o2 = alpha * sq + kq * u
                        mOut[row_b, hv, v0 + vr] = o2.to(self.act_dtype)
                        sU[vr] = u
                cute.arch.barrier()
                rUc = cute.make_rmem_tensor((VEC,), Float32)
                cute.autovec_copy(cute.local_tile(sU, (VEC,), (lr,)), rUc)
                for r in cutlass.range_constexpr(R):
                    kn = rKn[r]
                    for e in cutlass.range_constexpr(VEC):
                        rS[e, r, 0] = alpha * rS[e, r, 0] + rUc[e] * kn

            tSr.store(rS.load().to(self.state_dtype))
            cute.copy(tiled, tSr, tSg)


# --------------------------------------------------------------------------------------
# compile (tensor-free, cached) and launch
# --------------------------------------------------------------------------------------

_CACHE = KernelCache("gdn_standard")


def _resolve(state_dtype, act_dtype, layout, H, HV, K, V, g_dtype, beta_dtype, alog_dtype, a_dtype,
             dt_bias_dtype, b_dtype, use_qk_l2norm, has_idx, block_v, num_threads):
    tile = tile_config(state_dtype, layout, K, V, block_v, num_threads)
    has_g = g_dtype is not None
    name = common.optional_dtype_name
    kw = dict(
        state_dtype=dtype_name(state_dtype), act_dtype=dtype_name(act_dtype), layout=str(layout),
        H=int(H), HV=int(HV), K=int(K), V=int(V), g_dtype=name(g_dtype),
        beta_dtype=name(beta_dtype), alog_dtype=None if has_g else name(alog_dtype),
        a_dtype=None if has_g else name(a_dtype),
        dt_bias_dtype=None if has_g else name(dt_bias_dtype),
        b_dtype=None if beta_dtype is not None else name(b_dtype),
        use_qk_l2norm=bool(use_qk_l2norm), has_state_batch_indices=bool(has_idx),
        block_v=tile.block_v, num_threads=tile.num_threads, pdl=common.pdl_default(),
    )
    key = ("gdn_standard", common.arch_key()) + tuple(kw.values())
    return kw, key


def _meta(op: GDNStandardDecode):
    """The :class:`CompiledKernel` meta of a compiled op: its tile."""
    return {"tile": op.tile}


def _fake_inputs(op: GDNStandardDecode, lead):
    """Fake (state, q, k, v, g, beta, A_log, a, dt_bias, b, out), None where the variant has no
    such input: num_slots symbolic, ``lead`` the (symbolic) per-token leading modes of q / k / v /
    out and the per-token gates (``(batch,)``; the snapshot verify adds its draft mode T), each
    with a free stride."""
    H, HV, K, V = op.H, op.HV, op.K, op.V
    vec = op.vec
    f = common.fake_tensor
    slots = common.sym()
    dyn = ("dyn",) * len(lead)
    st, at = op.state_dtype, op.act_dtype
    if op.layout == "vk":
        state = f(st, (slots, HV, V, K), (("dyn", vec), ("dyn", vec), K, 1), align_bytes=16)
    else:
        state = f(st, (slots, HV, K, V), (("dyn", vec), ("dyn", vec), V, 1), align_bytes=16)
    q = f(at, lead + (H, K), dyn + ("dyn", 1))
    k = f(at, lead + (H, K), dyn + ("dyn", 1))
    v = f(at, lead + (HV, V), dyn + ("dyn", 1))
    out = f(at, lead + (HV, V), dyn + ("dyn", 1))
    g = f(op.g_dtype, lead + (HV,), dyn + ("dyn",)) if op.has_g else None
    beta = f(op.beta_dtype, lead + (HV,), dyn + ("dyn",)) if op.has_beta else None
    alog = a = dtb = b = None
    if not op.has_g:
        alog = f(op.alog_dtype, (HV,), ("dyn",))
        a = f(op.a_dtype, lead + (HV,), dyn + ("dyn",))
        if op.has_dt_bias:
            dtb = f(op.dt_bias_dtype, (HV,), ("dyn",))
    if not op.has_beta:
        b = f(op.b_dtype, lead + (HV,), dyn + ("dyn",))
    return state, q, k, v, g, beta, alog, a, dtb, b, out


def _fake_args(op: GDNStandardDecode):
    """Fake tensors: batch and num_slots symbolic. Contract (checked by TVM-FFI at call time):
    dtypes; H, HV, K, V extents; shared ``batch``; unit last stride of state/q/k/v/out; the state
    contiguous inside a (slot, head) matrix, 16-byte aligned, slot / head strides multiples of 16
    bytes."""
    batch = common.sym()
    state, q, k, v, g, beta, alog, a, dtb, b, out = _fake_inputs(op, (batch,))
    idx = common.fake_tensor(Int32, (batch,), ("dyn",)) if op.has_idx else None
    return (state, q, k, v, g, beta, alog, a, dtb, b, idx, out, Float32(1.0), Int32(-1),
            common.fake_stream())


def compile_gdn_standard(state_dtype, act_dtype, layout: str, H: int, HV: int, K: int, V: int,
                         g_dtype=None, beta_dtype=None, alog_dtype=None, a_dtype=None,
                         dt_bias_dtype=None, b_dtype=None, use_qk_l2norm: bool = True,
                         has_state_batch_indices: bool = True, block_v: Optional[int] = None,
                         num_threads: Optional[int] = None) -> CompiledKernel:
    """Compile (once per key, tensor-free, TVM-FFI) the standard GDN decode kernel.

    Gate mode: give ``g_dtype`` (g given) or ``alog_dtype`` + ``a_dtype`` (+ ``dt_bias_dtype``)
    for the raw gate; ``beta_dtype`` (beta given) or ``b_dtype`` (raw b). Call the result as
    ``k.ffi(state, q, k, v, g, beta, A_log, a, dt_bias, b, state_batch_indices, out, scale,
    pad_slot_id)`` with ``None`` for the absent tensors; launches on the current torch stream.
    """
    common.require_tvm_ffi()
    kw, key = _resolve(state_dtype, act_dtype, layout, H, HV, K, V, g_dtype, beta_dtype,
                       alog_dtype, a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm,
                       has_state_batch_indices, block_v, num_threads)
    return common.compile_tvm_ffi_cached(_CACHE, key, lambda: GDNStandardDecode(**kw), _fake_args,
                                         _meta)


def compile_only(state_dtype="float32", act_dtype="bfloat16", layout="vk", H=16, HV=32, K=128,
                 V=128, g_dtype=None, beta_dtype=None, alog_dtype="float32", a_dtype="bfloat16",
                 dt_bias_dtype="float32", b_dtype="bfloat16", use_qk_l2norm=True,
                 has_state_batch_indices=True, block_v=None, num_threads=None,
                 keep_ptx: bool = False, dump_dir: Optional[str] = None):
    """Compile one variant without launching (CPU-only with ``CUTE_DSL_ARCH=sm_90a``); defaults:
    Qwen3.5-4B layer with raw gates. Returns ``(kernel, ptx or None)``; ``keep_ptx`` compiles
    afresh (uncached) and returns the PTX text."""
    if not keep_ptx and dump_dir is None:
        return compile_gdn_standard(state_dtype, act_dtype, layout, H, HV, K, V, g_dtype,
                                    beta_dtype, alog_dtype, a_dtype, dt_bias_dtype, b_dtype,
                                    use_qk_l2norm, has_state_batch_indices, block_v,
                                    num_threads), None
    kw, key = _resolve(state_dtype, act_dtype, layout, H, HV, K, V, g_dtype, beta_dtype,
                       alog_dtype, a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm,
                       has_state_batch_indices, block_v, num_threads)
    op = GDNStandardDecode(**kw)
    return common.compile_keep_ptx(op, _fake_args(op), key, _meta(op), dump_dir)


def supports(state_dtype, layout: str, K: int, V: int) -> bool:
    """True when the kernel has a tiling for this state (K % 32 == 0, 16-byte vectors)."""
    try:
        return bool(_valid_tiles(to_cute_dtype(state_dtype).width, layout, int(K), int(V)))
    except Exception:  # noqa: BLE001
        return False


_LAUNCH: dict = {}


def gdn_standard_decode_cute(state, q, k, v, g=None, beta=None, A_log=None, a=None, dt_bias=None,
                             b=None, scale=None, use_qk_l2norm: bool = True,
                             state_batch_indices=None, pad_slot_id: int = -1, out=None,
                             state_layout: str = "vk", block_v: Optional[int] = None,
                             num_threads: Optional[int] = None):
    """One standard GDN decode step on CUDA tensors; updates ``state`` in place, writes ``out``.

    Inputs are assumed validated by the torch layer (shapes / dtypes as in the module docstring,
    unit last strides, state contiguous per (slot, head) matrix and 16-byte aligned). Either ``g``
    or ``A_log`` + ``a`` (+ ``dt_bias``); either ``beta`` or ``b``. ``scale`` None -> K^-0.5.
    Allocates nothing when ``out`` is given; launches on the current torch stream (CUDA-graph
    capturable once compiled). Returns ``out``.
    """
    batch, H, K = q.shape
    HV = v.shape[1]
    Vd = v.shape[2]
    if out is None:
        out = v.new_empty(v.shape)
    if batch == 0:
        return out
    if scale is None:
        scale = K ** -0.5
    g, beta, A_log, a, dt_bias, b = launch_gates(g, beta, A_log, a, dt_bias, b)
    fast_key = (state.dtype, q.dtype, state_layout, H, HV, K, Vd, _dt(g), _dt(beta), _dt(A_log),
                _dt(a), _dt(dt_bias), _dt(b), bool(use_qk_l2norm), state_batch_indices is None,
                batch if block_v is None else -block_v, num_threads, common.pdl_env())
    fn = _LAUNCH.get(fast_key)
    if fn is None:
        fn = _LAUNCH[fast_key] = _compile_for(state, q, v, fast_key[7:13], use_qk_l2norm,
                                              state_batch_indices, state_layout, block_v,
                                              num_threads)
    fn(state, q, k, v, g, beta, A_log, a, dt_bias, b, state_batch_indices, out, float(scale),
       int(pad_slot_id))
    return out


def _dt(t):
    return None if t is None else t.dtype


def _compile_for(state, q, v, gate_dtypes, use_qk_l2norm, state_batch_indices, state_layout,
                 block_v=None, num_threads=None):
    """The TVM-FFI function of the kernel for one call signature (compiled on first use)."""
    batch, H, K = q.shape
    HV, Vd = v.shape[1], v.shape[2]
    bv = block_v
    if bv is None:
        bv = choose_block_v(batch, HV, K, Vd, dtype_name(state.dtype), state_layout)
    return compile_gdn_standard(state.dtype, q.dtype, state_layout, H, HV, K, Vd, *gate_dtypes,
                                use_qk_l2norm, state_batch_indices is not None, bv,
                                num_threads).ffi


_ENV_NAMES = (common.PDL_ENV,)


def make_launch(state, q, v, gate_dtypes, use_qk_l2norm, state_batch_indices, state_layout):
    """``launch(state, q, k, v, g, beta, A_log, a, dt_bias, b, state_batch_indices, out, scale,
    pad_slot_id)`` (``scale`` a number) for one call signature: the state's dtype and layout,
    q's dtype and shape, v's head count and dim, ``gate_dtypes`` (g, beta, A_log, a, dt_bias, b
    dtypes as the kernel sees them: the raw gates' None where g / beta are given), whether
    indices are given, the tiling heuristic's choice for this batch."""
    fn = _compile_for(state, q, v, gate_dtypes, use_qk_l2norm, state_batch_indices, state_layout)

    def launch(state, q, k, v, g, beta, A_log, a, dt_bias, b, state_batch_indices, out, scale,
               pad_slot_id):
        fn(state, q, k, v, *launch_gates(g, beta, A_log, a, dt_bias, b), state_batch_indices, out,
           float(scale), int(pad_slot_id))

    return launch
