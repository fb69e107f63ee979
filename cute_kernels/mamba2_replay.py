"""Mamba-2 ReplaySSM decode step (one token per row) in CuTe DSL: ONE launch per step for a batch
whose rows sit at different buffer positions, for every precision pair.

Semantics: ``replayssm_lp.reference.mamba2_replay`` with T = 1 and ``commit_all=True`` (the spec),
plus ``_flush_rows`` / ``mamba2_fold`` / ``cache.write_state`` for the rows whose buffer is full
(``h + 1 > L``). Per row (slot ``s``, h = ``write_pos[s]``, origin = ``ring_origin[s]``, logical
buffer entry j at physical ring index ``(origin + j) % R``):

* **non-flush row** (h < L): ``y = γ·(S0·C) + Σ_{j<h} coef_j·x_j + coef_cur·x_cur + D·x_cur``
  (``*= silu(z)``), S0 the read copy (``lo``; ``hi`` for shared pairs), Λ the cumulative log decay over
  the entries and the current token, γ = exp(Λ_tot), ``coef_j = exp(Λ_tot − Λ_j)·dt'_j·(B_j·C)``,
  ``coef_cur = dt'_cur·(B_cur·C)``. No state write.
* **flush row** (h ≥ L): fold the h entries into the hi checkpoint in fp32
  (``S_new = exp(Λ_{h−1})·S_hi + Σ_j exp(Λ_{h−1} − Λ_j)·dt'_j·x_j ⊗ B_j``), encode ``S_new`` into hi
  (recurrence format + rounding, SR stream 0) and, for split pairs, lo (read format + rounding, SR
  stream 1), bit-identical to ``formats.encode`` for the same fp32 input (SR generation =
  ``flush_count[s]`` as read at kernel start); the output comes from the fp32 ``S_new``:
  ``y = exp(dA_cur)·(S_new·C) + coef_cur·x_cur + D·x_cur``.
* **append** (every valid row): x_cur, dt'_cur, A·dt'_cur, B_cur at logical h' (0 after a flush) of the
  (possibly moved) ring; **cursors**: ``write_pos = h' + 1``, ``ring_origin = origin'``,
  ``flush_count += 1`` on flush rows, ``pending = 0`` — written by the last CTA of the row to arrive
  (``arrive[s]`` atomic counter, reset to 0 by that CTA), so no CTA reads a cursor already moved.
* pad rows (``state_batch_indices == pad_slot_id``, or outside ``[0, num_slots)``) are skipped
  entirely: no ``out`` write, no cache access.

Launch: grid ``(H / heads_per_cta, batch)``, 128 threads. A CTA owns one row and ``heads_per_cta``
consecutive heads of one group (:func:`choose_heads_per_cta`). Per CTA:

1. preamble: cursors; C (fp32) to smem; ``cb_j = B_j·C`` of the buffered entries (non-flush rows;
   one warp per entry, lanes over N) and ``cb_cur``; per head (one warp per head): dt', the inclusive
   warp scan of the log decays (current token included on non-flush rows), the coefficients
   ``coef_j`` (non-flush) or fold weights ``w_j = exp(Λ_{h−1} − Λ_j)·dt'_j`` (flush) to smem, and the
   dt'/dA append.
2. non-flush rows, per head (runtime loop): the read copy is streamed with 16-byte loads, a thread
   owns one 16-byte chunk of ``rows_per_thread`` rows (``TN`` lanes per state row, see
   :class:`ReplayTile`), dequantizes in registers and dots with C (fp32 registers); the partial row
   sums plus the lane's share of ``Σ_j coef_j x_j[p]`` are reduced with one butterfly over the TN
   lanes; lane 0 of a row adds the current-token and D terms, gates with z and stores ``out``.
   :meth:`Mamba2ReplayDecode._read_row_dot` is the only format-specific piece (swap point for an
   mma.sync version).
3. flush rows, per head: thread t owns the 16-element chunks ``q = t + 128·it`` of the row-major
   P×N matrix (chunk = one nvfp4 block = four Philox quads; ``N/16`` lanes per row): load + decode
   hi, fold from smem (``w_j·x_j[p]`` and ``B_j[n]`` staged as fp32), dot with C for the output, encode
   hi and lo, store. nvfp4 targets need the matrix amax before any block: a first pass folds and
   reduces the amax (CTA reduction), the second pass re-folds (same instructions, bit-identical) and
   encodes, so no P×N fp32 buffer is kept in registers or smem.
4. append, then the cursor update by the last CTA of the row.

All accumulation is fp32. Every stored byte of hi/lo is computed with the primitives of
:mod:`cute_kernels.lowprec` (``div.rn.f32`` divisions, Philox-4x32-10 with the round keys staged in
smem once per CTA, software RN/SR rounding).

Registers / occupancy (sm_90a builds, ptxas 13.4 as bundled with nvidia-cutlass-dsl 4.8.1): the
non-flush path alone needs 35-80 registers; the flush path (fold + two encoders) drives the count.
With one head per CTA ptxas settles at 70-110 registers without spills; with several heads per CTA
the head loop makes it use 110-128, so those variants pass ``.minnctapersm``
(:func:`default_min_blocks_per_mp`, 80-96 registers) to keep the memory-bound non-flush path at 5-6
CTAs per SM. Loop-invariant hoisting is held back on purpose (``_dep_i32`` / ``_opaque_i32``: a
``mov`` with a false dependency) where LLVM would otherwise keep ~10 64-bit pointers or the 20 Philox
round keys live across a loop. Non-flush rows with nvfp4 / fp8 read copies and several heads per
CTA prefetch the next head's read copy (two heads' loads in flight per thread).

Public entry points: :func:`compile_mamba2_replay` (tensor-free, cached), :func:`mamba2_replay_decode_cute`
(launcher on a :class:`replayssm_lp.Mamba2ReplayCache`), :func:`compile_only` (CPU compile tests),
:func:`choose_heads_per_cta` (launch heuristic), :class:`ReplayTile` (static tiling facts).
"""

from __future__ import annotations

import os

import operator
from typing import Optional, Tuple

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Float32, Int32, Int64, Uint8, Uint32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T

try:  # annotations only; the TVM-FFI path takes the stream from the torch environment
    import cuda.bindings.driver as cuda
except Exception:  # pragma: no cover
    cuda = None

from replayssm_lp.pairs import PrecisionPair, parse_pair

from . import common
from . import lowprec as lp
from .common import CompiledKernel, KernelCache, dtype_name, to_cute_dtype

__all__ = [
    "Mamba2ReplayDecode",
    "ReplayTile",
    "choose_heads_per_cta",
    "default_min_blocks_per_mp",
    "compile_mamba2_replay",
    "compile_only",
    "mamba2_replay_decode_cute",
]

SOFTPLUS_THRESHOLD = 20.0
NUM_THREADS = 128
CHUNK = 16                        # flush mapping: elements per chunk (one nvfp4 block, 4 Philox quads)
_BITS = {"fp32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "nvfp4": 4}
_ACT_DTYPES = ("float32", "float16", "bfloat16")
# fold staging (flush rows): sB [JB, N] + sWX [JB, P] fp32; JB entries per stage
_FOLD_SMEM_BYTES = 24 * 1024


# --------------------------------------------------------------------------------------
# static tiling (pure Python)
# --------------------------------------------------------------------------------------


def _pow2_le(n: int, cap: int) -> int:
    t = 1
    while t * 2 <= cap and n % (t * 2) == 0:
        t *= 2
    return t


class ReplayTile:
    """Static tiling of one launch variant.

    Non-flush (read copy, format ``read_fmt``): ``vec`` elements per 16-byte chunk, ``NC = N/vec``
    chunks per state row, ``TN`` lanes per row (power of two <= 32 dividing NC), ``CN = NC/TN``
    chunks per lane and row, ``RPP = 128/TN`` rows per pass, ``RPT = ceil(P/RPP)`` rows per thread
    (rows past P are clamped to P-1 and never stored), ``MJ = ceil((L-1)/TN)`` buffer entries per lane
    and row for ``Σ_j coef_j x_j[p]``.

    Flush (hi and lo): ``CB = N/16`` chunks per row (must divide 32: the lanes of a row are in one
    warp, ``RW = 32/CB`` apart), ``RPF = 128/CB`` rows per pass, ``NIT = ceil(P/RPF)`` chunks per
    thread; ``HM = R - 1`` the most entries a flush folds, ``JB`` of them staged in smem at once
    (``NJB = ceil(HM/JB)`` stages, sB + sWX <= 24 KiB).
    """

    def __init__(self, read_fmt: str, H: int, P: int, N: int, G: int, L: int, R: int,
                 heads_per_cta: int, num_threads: int = NUM_THREADS):
        if H % G:
            raise ValueError(f"nheads={H} must be a multiple of ngroups={G}")
        hpg = H // G
        if heads_per_cta < 1 or hpg % heads_per_cta:
            raise ValueError(f"heads_per_cta={heads_per_cta} must divide nheads/ngroups={hpg}")
        if not (1 <= L <= 64):
            raise ValueError(f"buffer_len L={L} must be in [1, 64]")
        if R < L + 1:
            raise ValueError(f"ring R={R} must be >= L + 1 = {L + 1}")
        if num_threads != 128:
            raise ValueError("the replay decode kernel is written for 128 threads")
        self.nt = num_threads
        self.hpc = heads_per_cta
        self.ctas_per_group = hpg // heads_per_cta
        self.ctas_per_row = H // heads_per_cta
        # ---- non-flush read mapping
        bits = _BITS[read_fmt]
        self.vec = 128 // bits
        if N % self.vec:
            raise ValueError(f"{read_fmt} read copy needs dstate={N} to be a multiple of {self.vec} "
                             f"(16-byte chunks)")
        self.words_read = N * bits // 32
        nc = N // self.vec
        self.tn = _pow2_le(nc, 32)
        self.cn = nc // self.tn
        self.rpp = num_threads // self.tn
        self.rpt = -(-P // self.rpp)
        self.mj = -(-(L - 1) // self.tn) if L > 1 else 0
        # ---- flush mapping
        if N % CHUNK:
            raise ValueError(f"the flush path needs dstate={N} to be a multiple of {CHUNK}")
        self.cb = N // CHUNK
        if 32 % self.cb:
            raise ValueError(f"the flush path needs dstate/16 to divide 32 (dstate in 16..512, a "
                             f"power of two), got dstate={N}")
        self.nq = P * self.cb
        # lane l of warp w owns chunk-in-row cb = l // RW of row it*RPF + w*RW + l % RW: the CB
        # lanes of a row sit RW apart in one warp (strided butterflies), and a quarter-warp reads
        # at most two B_j chunks from smem (16-byte loads, no bank conflicts)
        self.rw = 32 // self.cb                  # rows per warp per pass
        self.rpf = num_threads // self.cb        # rows per pass
        self.nit = -(-P // self.rpf)
        self.full = P % self.rpf == 0
        # most entries a flush can fold: write_pos <= max(L, T) <= R - 1 (a verify with T > L
        # drafts may leave up to T committed entries); the kernel clamps h to it (memory safety)
        self.hm = R - 1
        jb = self.hm
        while jb > 1 and jb * (N + P) * 4 > _FOLD_SMEM_BYTES:
            jb = (jb + 1) // 2
        self.jb = jb
        self.njb = -(-self.hm // jb)
        self.nseg = -(-(self.hm + 1) // 32)     # scan segments (entries 0..hm)

    def __repr__(self) -> str:
        return (f"ReplayTile(hpc={self.hpc}, read: vec={self.vec} TN={self.tn} CN={self.cn} "
                f"RPP={self.rpp} RPT={self.rpt} MJ={self.mj}; flush: CB={self.cb} NIT={self.nit} "
                f"JB={self.jb} NJB={self.njb})")


def choose_heads_per_cta(batch: int, H: int, G: int, min_ctas: Optional[int] = None) -> int:
    """Launch heuristic: the largest power-of-two ``heads_per_cta`` dividing ``H/G`` that still
    yields about ``min_ctas`` CTAs (default 2 per SM, 132 SMs without a GPU, with 5 % slack so that a
    batch of 32 Nemotron-3-Super rows (H=128, G=8) gets whole groups). Small batches get one head per
    CTA (more CTAs in flight), large batches whole groups (cb_j, C and the cursors amortised over
    more heads)."""
    hpg = H // G
    forced = os.environ.get("REPLAYSSM_M2_HEADS_PER_CTA")  # tuning experiments only
    if forced:
        return int(forced)
    if min_ctas is None:
        min_ctas = 2 * common.num_sms()
    best = 1
    c = 1
    while c <= hpg:
        if hpg % c == 0 and batch * (H // c) >= 0.95 * min_ctas:
            best = c
        c *= 2
    return best


# --------------------------------------------------------------------------------------
# small device helpers (branch-free, plain Python over DSL scalars)
# --------------------------------------------------------------------------------------


def _asm(res_type, ptx: str, constraints: str, args):
    return llvm.inline_asm(res_type, args, ptx, constraints, has_side_effects=False,
                           is_align_stack=False)


def _fma_rn(a, b, c) -> Float32:
    """a*b + c, one rounding (``fma.rn.f32``); explicit so both fold passes are bit-identical."""
    return Float32(_asm(T.f32(), "fma.rn.f32 $0, $1, $2, $3;", "=f,f,f,f",
                        [Float32(a).ir_value(), Float32(b).ir_value(), Float32(c).ir_value()]))


def _add_rn(a, b) -> Float32:
    return Float32(_asm(T.f32(), "add.rn.f32 $0, $1, $2;", "=f,f,f",
                        [Float32(a).ir_value(), Float32(b).ir_value()]))


def _opaque_i32(x) -> Int32:
    """``x`` through a ``mov``: LLVM cannot see it as an affine function of a loop counter, so it
    does not strength-reduce every address that depends on it into its own 64-bit induction
    variable (which costs two registers per address stream for the whole loop)."""
    return Int32(_asm(T.i32(), "mov.b32 $0, $1;", "=r,r", [Int32(x).ir_value()]))


def _dep_i32(x, k) -> Int32:
    """``x`` (unchanged, one ``mov``) with a false dependency on ``k``: values derived from it
    inside a loop over k are not hoisted out of the loop by LLVM's LICM (which would keep them
    live, in registers, across the whole loop)."""
    return Int32(_asm(T.i32(), "mov.b32 $0, $1;", "=r,r,r",
                      [Int32(x).ir_value(), Int32(k).ir_value()]))


def _dep_f32(x, tok) -> Float32:
    """``x`` (one ``mov``) made to depend on the Int32 ``tok``: serialises two independent
    instruction streams (ptxas would otherwise interleave them and hold both working sets)."""
    return Float32(_asm(T.f32(), "mov.b32 $0, $1;", "=f,f,r",
                        [Float32(x).ir_value(), Int32(tok).ir_value()]))


def _sel_i32(cond, a, b) -> Int32:
    return Int32(cutlass.select_(cond, Int32(a), Int32(b)))


def _e2m1x8_to_f16x2(w):
    """Word of 8 e2m1 codes (code j at bits [4j, 4j+4)) -> four fp16x2 words; word i holds codes
    (i, i+4) as fp16 values e2m1·2^-14 (magnitude bits at fp16 [11:9], sign at bit 15; subnormal 0.5
    included). ~3-4 integer ops (shift/and/or -> LOP3) per pair."""
    w = Uint32(w)
    m_mag = Uint32(0x0E000E00)
    m_sgn = Uint32(0x80008000)
    out = []
    for i in range(4):
        sm = 9 - 4 * i            # magnitude shift (left if > 0)
        ss = 12 - 4 * i           # sign shift
        a = (w << Uint32(sm)) if sm > 0 else (w >> Uint32(-sm))
        b = (w << Uint32(ss)) if ss > 0 else w
        out.append((a & m_mag) | (b & m_sgn))
    return out


def _row_reduce(v, op, cb: int, rw: int):
    """Butterfly over the ``cb`` lanes of a flush row (lanes ``rw`` apart in the warp)."""
    off = (cb // 2) * rw
    while off >= rw:
        v = op(v, cute.arch.shuffle_sync_bfly(v, offset=off))
        off //= 2
    return v


def _silu_gate(y, z):
    return y * z / (Float32(1.0) + cute.math.exp(-z))


# --------------------------------------------------------------------------------------
# the kernel
# --------------------------------------------------------------------------------------


def default_min_blocks_per_mp(read_fmt: str, heads_per_cta: int, state_regs: int = 0,
                              both_sr: bool = False) -> int:
    """Default ``.minnctapersm`` (= register cap 64K / (k·128)) of a variant.

    One head per CTA: ptxas' own choice (70-110 registers, no spills in the sm_90a builds we
    inspected). Several heads per CTA: ptxas alone goes to 110-128 registers (live ranges of the
    flush path across the head loop), leaving the memory-bound non-flush path 4 CTAs per SM. Caps
    that compiled without (or with a few bytes of) spills at P = 64 / 80, N = 128: 6 CTAs (80
    registers) for nvfp4 / fp8 read copies when the per-thread read set of two heads (prefetch) is
    <= 32 registers, else 5; 4 (128) for 16-bit read copies and when both copies are written with
    SR; fp32 read copies (64 state registers per head): ptxas' choice.
    ``state_regs``: state registers per thread for one head's read copy (RPT·CN·4)."""
    if heads_per_cta <= 1 or read_fmt == "fp32":
        return 0
    if read_fmt in ("fp16", "bf16") or both_sr:
        return 4
    return 6 if 2 * state_regs <= 32 else 5


class Mamba2ReplayDecode:
    """Compile-time parameters + host launch (``__call__``) + device code (``kernel``)."""

    def __init__(self, pair, act_dtype, dt_dtype, nheads: int, headdim: int, dstate: int,
                 ngroups: int, buffer_len: int, ring: int, has_D: bool, has_z: bool,
                 has_dt_bias: bool, dt_softplus: bool, heads_per_cta: int = 1,
                 has_state_batch_indices: bool = True, prefetch: Optional[bool] = None,
                 min_blocks_per_mp: Optional[int] = None):
        p: PrecisionPair = parse_pair(pair)
        self.pair = p
        self.split = not p.shared
        self.rec_fmt, self.rec_sr = p.rec_fmt, (p.rec_rounding == "sr" and p.rec_fmt != "fp32")
        if self.split:
            self.read_fmt = p.read_fmt
            self.read_sr = p.read_rounding == "sr" and p.read_fmt != "fp32"
        else:
            self.read_fmt, self.read_sr = p.rec_fmt, self.rec_sr
        self.any_sr = self.rec_sr or (self.split and self.read_sr)
        self.act_dtype = to_cute_dtype(act_dtype)
        self.dt_dtype = to_cute_dtype(dt_dtype)
        if dtype_name(self.act_dtype) not in _ACT_DTYPES:
            raise ValueError(f"act dtype must be one of {_ACT_DTYPES}, got {act_dtype}")
        self.H, self.P, self.N, self.G = int(nheads), int(headdim), int(dstate), int(ngroups)
        self.L, self.R = int(buffer_len), int(ring)
        self.hpg = self.H // self.G
        self.has_D, self.has_z, self.has_dt_bias = bool(has_D), bool(has_z), bool(has_dt_bias)
        self.dt_softplus = bool(dt_softplus)
        self.has_idx = bool(has_state_batch_indices)
        self.cfg = ReplayTile(self.read_fmt, self.H, self.P, self.N, self.G, self.L, self.R,
                              int(heads_per_cta))
        self.hpc = self.cfg.hpc
        # does the flush need a matrix amax (nvfp4 global scale) before encoding?
        self.flush_targets = [(self.rec_fmt, self.rec_sr, 0)]
        if self.split:
            self.flush_targets.append((self.read_fmt, self.read_sr, 1))
        self.needs_gamax = any(f == "nvfp4" for f, _, _ in self.flush_targets)
        # non-flush: prefetch the next head's read copy while reducing the current one (formats
        # with few state registers per head: nvfp4 8, fp8 16 per thread at P=64, N=128)
        self.prefetch = (bool(prefetch) if prefetch is not None else
                         (self.read_fmt in ("nvfp4", "fp8") and self.hpc > 1))
        if self.hpc == 1:
            self.prefetch = False
        # occupancy hint (CTAs of 128 threads per SM) -> .minnctapersm, i.e. a register cap of
        # 64K / (k * 128) for ptxas; 0 = ptxas' choice. See default_min_blocks_per_mp.
        c = self.cfg
        self.min_blocks_per_mp = int(
            default_min_blocks_per_mp(self.read_fmt, self.hpc, c.rpt * c.cn * 4,
                                      self.split and self.read_sr and self.rec_sr)
            if min_blocks_per_mp is None else min_blocks_per_mp)

    # ---------------------------------------------------------------- host side
    @cute.jit
    def __call__(
        self,
        mX: cute.Tensor, mDt: cute.Tensor, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor,
        mD: Optional[cute.Tensor], mZ: Optional[cute.Tensor], mDtBias: Optional[cute.Tensor],
        mIdx: Optional[cute.Tensor], mOut: cute.Tensor,
        mHi: cute.Tensor, mHiS: Optional[cute.Tensor], mHiG: Optional[cute.Tensor],
        mLo: Optional[cute.Tensor], mLoS: Optional[cute.Tensor], mLoG: Optional[cute.Tensor],
        mXBuf: cute.Tensor, mBBuf: cute.Tensor, mDtBuf: cute.Tensor, mDABuf: cute.Tensor,
        mWPos: cute.Tensor, mOrig: cute.Tensor, mFlushCnt: cute.Tensor, mPend: cute.Tensor,
        mArrive: cute.Tensor, mSeed: Optional[cute.Tensor], pad_slot_id: Int32,
        stream: cuda.CUstream,
    ):
        batch = mX.shape[0]
        self.kernel(
            mX, mDt, mA, mB, mC, mD, mZ, mDtBias, mIdx, mOut, mHi, mHiS, mHiG, mLo, mLoS, mLoG,
            mXBuf, mBBuf, mDtBuf, mDABuf, mWPos, mOrig, mFlushCnt, mPend, mArrive, mSeed,
            pad_slot_id,
        ).launch(
            grid=[self.cfg.ctas_per_row, batch, 1],
            block=[self.cfg.nt, 1, 1],
            stream=stream,
            # .minnctapersm k -> ptxas caps registers at 64K / (k * 128); an explicit carveout
            # stops the DSL from querying the device (GPU-less compiles), as in mamba2_standard
            min_blocks_per_mp=self.min_blocks_per_mp,
            preferred_smem_carveout=-1 if self.min_blocks_per_mp > 1 else None,
        )

    # ---------------------------------------------------------------- device helpers
    def _phys(self, origin, j):
        """Physical ring index of logical entry j (0 <= j < R) given origin (< R)."""
        t = origin + j
        return _sel_i32(t >= Int32(self.R), t - Int32(self.R), t)

    def _issue_read(self, mRd, mRdS, mRdG, raw, rsc, bsc, gsc, slot, head, rp, lir):
        """Issue the loads of one head's read copy for this thread: 16-byte state chunks
        ``raw[i, cc, :]`` (row ``rp + RPP·i``, clamped to P-1; chunk ``lir + TN·cc``), fp8 row scales
        ``rsc[i]``, nvfp4 block-scale byte pairs ``bsc[i, cc]`` (blocks 2c, 2c+1) and the nvfp4
        global scale ``gsc[0]``. Nothing waits on them here."""
        cfg = self.cfg
        P = self.P
        for i in range(cfg.rpt):
            p = rp + cfg.rpp * i
            if P % cfg.rpp != 0:
                p = cutlass.min(p, P - 1)
            for cc in range(cfg.cn):
                c = lir + cfg.tn * cc
                src = cute.local_tile(mRd[slot, head, p, None], (4,), (c,))
                cute.autovec_copy(src, raw[i, cc, None])
                if self.read_fmt == "nvfp4":
                    b0 = Uint32(mRdS[slot, head, p, 2 * c])
                    b1 = Uint32(mRdS[slot, head, p, 2 * c + 1])
                    bsc[i, cc] = ((b0 & Uint32(0xFF)) | ((b1 & Uint32(0xFF)) << Uint32(8))).to(Int32)
            if self.read_fmt == "fp8":
                rsc[i] = mRdS[slot, head, p]
        if self.read_fmt == "nvfp4":
            gsc[0] = mRdG[slot, head]

    def _read_row_dot(self, raw, i, creg, sblk):
        """Format-specific dot of one state row chunk set with C (fp32), unscaled by the row / global
        scales. ``raw[i, cc, w]``: the four 32-bit words of 16-byte chunk ``cc`` of row i;
        ``creg[cc*vec + e]``: C at the chunk's elements (fp32); ``sblk[i, cc, b]`` (nvfp4): block
        scale b of the chunk as fp32 (the e2m1 decode yields e2m1·2^-14: the caller folds 2^14
        into the head's scale together with the global scale and γ). The only
        format-specific piece of the non-flush path: an mma.sync version replaces this."""
        fmt = self.read_fmt
        vec = self.cfg.vec
        acc = Float32(0.0)
        for cc in range(self.cfg.cn):
            base = cc * vec
            if fmt == "fp32":
                for w in range(4):
                    acc = acc + lp.bits_f32(Uint32(raw[i, cc, w])) * creg[base + w]
            elif fmt == "fp16" or fmt == "bf16":
                for w in range(4):
                    if fmt == "fp16":
                        v0, v1 = lp.f16x2_to_f32(Uint32(raw[i, cc, w]))
                    else:
                        v0, v1 = lp.bf16x2_to_f32(Uint32(raw[i, cc, w]))
                    acc = acc + v0 * creg[base + 2 * w]
                    acc = acc + v1 * creg[base + 2 * w + 1]
            elif fmt == "fp8":
                for w in range(4):
                    v0, v1, v2, v3 = lp.unpack_e4m3x4(Uint32(raw[i, cc, w]))
                    acc = acc + v0 * creg[base + 4 * w]
                    acc = acc + v1 * creg[base + 4 * w + 1]
                    acc = acc + v2 * creg[base + 4 * w + 2]
                    acc = acc + v3 * creg[base + 4 * w + 3]
            else:  # nvfp4: 32 elements = 2 blocks of 16 = 2 words each
                for b in range(2):
                    part = Float32(0.0)
                    for ww in range(2):
                        h2 = _e2m1x8_to_f16x2(Uint32(raw[i, cc, 2 * b + ww]))
                        e0 = base + 16 * b + 8 * ww
                        for pi in range(4):
                            lo, hi = lp.f16x2_to_f32(h2[pi])
                            part = part + lo * creg[e0 + pi]
                            part = part + hi * creg[e0 + pi + 4]
                    acc = acc + part * sblk[i, cc, b]
        return acc

    def _decode_add_chunk(self, fmt, rW, acc, gf, scale, d_blk):
        """``acc[e] = fl(gf · decode(chunk)[e]) + acc[e]`` with ``decode`` exactly
        ``formats.decode`` (fp8: ``q·scale``, nvfp4: ``e2m1·(s_blk·s_glob)``, both ``mul.rn``)."""
        def put(e, v):
            acc[e] = _add_rn(lp.mul_rn(gf, v), acc[e])
        if fmt == "fp32":
            for j in range(CHUNK):
                put(j, lp.bits_f32(Uint32(rW[j])))
        elif fmt == "fp16" or fmt == "bf16":
            for j in range(CHUNK // 2):
                if fmt == "fp16":
                    v0, v1 = lp.f16x2_to_f32(Uint32(rW[j]))
                else:
                    v0, v1 = lp.bf16x2_to_f32(Uint32(rW[j]))
                put(2 * j, v0)
                put(2 * j + 1, v1)
        elif fmt == "fp8":
            for j in range(CHUNK // 4):
                v = lp.unpack_e4m3x4(Uint32(rW[j]))
                for e in range(4):
                    put(4 * j + e, lp.mul_rn(v[e], scale))
        else:  # nvfp4
            for jw in range(2):
                w = Uint32(rW[jw])
                for j in range(8):
                    code = (w >> Uint32(4 * j)) & Uint32(0xF)
                    put(8 * jw + j, lp.mul_rn(lp.e2m1_code_to_f32(code), d_blk))

    @staticmethod
    def _philox_smem(c0, c1, c2, c3, sKey, dep):
        """``lowprec.philox4x32_10`` with the key schedule (``k0 + r·W0``, ``k1 + r·W1``) read from
        smem (``sKey[2r]``, ``sKey[2r+1]``, filled once per CTA) at an address that depends on
        ``dep``: 20 round keys are neither recomputed per call nor hoisted into 20 registers."""
        c0, c1, c2, c3 = Uint32(c0), Uint32(c1), Uint32(c2), Uint32(c3)
        base = _dep_i32(Int32(0), dep)
        kv = cute.make_rmem_tensor((4,), Int32)
        for r in range(lp.PHILOX_ROUNDS):
            if r % 2 == 0:           # two rounds' keys per 16-byte smem load (broadcast)
                cute.autovec_copy(cute.local_tile(sKey, (4,), (base + r // 2,)), kv)
            k0 = Uint32(kv[2 * (r % 2)])
            k1 = Uint32(kv[2 * (r % 2) + 1])
            hi0, lo0 = lp.mulhilo32(c0, lp.PHILOX_M0)
            hi1, lo1 = lp.mulhilo32(c2, lp.PHILOX_M1)
            c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        return c0, c1, c2, c3

    def _encode_chunk(self, fmt, sr, acc, qc, head, slot, w3, sKey, s_glob, rW):
        """16 fp32 values ``acc[0:16]`` -> stored words in ``rW`` (formats.encode, bit for bit),
        one Philox quad at a time (SR words of chunk qc: counter ``(4qc + jq, head, slot, w3)``,
        key schedule in ``sKey``).
        Returns the chunk's scale (fp8: the row scale, reduced over the CB lanes of the row;
        nvfp4: the block scale byte as Uint32) or None. Warp-collective for fp8."""
        if fmt == "fp32":
            for j in range(CHUNK):
                rW[j] = lp.f32_bits(acc[j]).to(Int32)
            return None
        scale = None
        d = None
        if fmt == "fp8" or fmt == "nvfp4":
            a = Float32(0.0)
            for j in range(CHUNK):
                a = lp.fmax_nq(a, lp.abs_nan0_inf_sat(acc[j]))
            if fmt == "fp8":
                a = _row_reduce(a, lp.fmax_nq, self.cfg.cb, self.cfg.rw)
                scale = lp.fp8_row_scale(a)
            else:
                s_blk = lp.nvfp4_block_scale(a, s_glob)
                d = lp.mul_rn(s_blk, s_glob)
                scale = lp.pack_e4m3x4(s_blk, 0.0, 0.0, 0.0) & Uint32(0xFF)
        quad0 = Uint32(qc) * Uint32(4)
        nib = [Uint32(0), Uint32(0)]
        tok = None
        for jq in range(4):
            w = [None] * 4
            ctr = quad0 + Uint32(jq)
            if tok is not None:     # quad by quad: keeps ptxas from overlapping all 16 elements
                ctr = Uint32(_dep_i32(Int32(ctr), tok))
            if sr:
                w = self._philox_smem(ctr, Uint32(head), Uint32(slot), w3, sKey, Int32(ctr))
            q = []
            for i in range(4):
                x = acc[4 * jq + i]
                if tok is not None:
                    x = _dep_f32(x, tok)
                if fmt == "fp16" or fmt == "bf16":
                    q.append(lp.round_to_grid(x, fmt, sr, w[i]))
                elif fmt == "fp8":
                    q.append(lp.fp8_quantize(x, scale, sr, w[i]))
                else:
                    q.append(lp.e2m1_code(lp.nvfp4_quantize(x, d, sr, w[i])))
            if fmt == "fp16":
                rW[2 * jq] = lp.pack_f16x2(q[0], q[1]).to(Int32)
                rW[2 * jq + 1] = lp.pack_f16x2(q[2], q[3]).to(Int32)
                tok = rW[2 * jq + 1]
            elif fmt == "bf16":
                rW[2 * jq] = lp.pack_bf16x2(q[0], q[1]).to(Int32)
                rW[2 * jq + 1] = lp.pack_bf16x2(q[2], q[3]).to(Int32)
                tok = rW[2 * jq + 1]
            elif fmt == "fp8":
                rW[jq] = lp.pack_e4m3x4(q[0], q[1], q[2], q[3]).to(Int32)
                tok = rW[jq]
            else:
                for i in range(4):
                    e = 4 * jq + i
                    nib[e // 8] = nib[e // 8] | (q[i] << Uint32(4 * (e % 8)))
                tok = Int32(nib[(4 * jq) // 8])
        if fmt == "nvfp4":
            rW[0] = nib[0].to(Int32)
            rW[1] = nib[1].to(Int32)
        return scale

    @cute.jit
    def _fold_chunk(self, mHi: cute.Tensor, mHiS: Optional[cute.Tensor], hig: Float32,
                    mBBuf: cute.Tensor, mXBuf: cute.Tensor,
                    sB: cute.Tensor, sWX: cute.Tensor, sCoef: cute.Tensor, acc: cute.Tensor,
                    slot: Int32, head: Int32, group: Int32, k: Int32, origin: Int32, h: Int32,
                    r: Int32, cbi: Int32, gf: Float32, tidx: Int32):
        """acc[0:16] <- S_new of the chunk (row r, chunk-in-row cbi):
        ``fl(gf·S_hi) + Σ_j fma(w_j x_j[r], B_j[16cbi + e])`` (the sum first, from 0, then the
        decayed checkpoint, as the reference adds ``exp(tot)·S0 + einsum(...)``). ``hig``: the hi
        global scale as read before this flush (nvfp4). With several staging rounds (NJB > 1) this
        is CTA-collective (barriers)."""
        fmt = self.rec_fmt
        JB = self.cfg.jb
        for e in cutlass.range_constexpr(CHUNK):
            acc[e] = Float32(0.0)
        bj = cute.make_rmem_tensor((CHUNK,), Float32)
        if const_expr(self.cfg.njb == 1):
            for j in cutlass.range(h, unroll=1):
                wx = sWX[j, r]
                cute.autovec_copy(cute.local_tile(sB[j, None], (CHUNK,), (cbi,)), bj)
                for e in cutlass.range_constexpr(CHUNK):
                    acc[e] = _fma_rn(wx, bj[e], acc[e])
        else:
            nst = (h + JB - 1) // JB
            for st in cutlass.range(nst, unroll=1):
                j0 = st * JB
                cute.arch.barrier()
                self._stage_fold(mBBuf, mXBuf, sB, sWX, sCoef, slot, head, group, k, origin, h,
                                 j0, tidx)
                cute.arch.barrier()
                nj = cutlass.min(h - j0, JB)
                for jj in cutlass.range(nj, unroll=1):
                    wx = sWX[jj, r]
                    cute.autovec_copy(cute.local_tile(sB[jj, None], (CHUNK,), (cbi,)), bj)
                    for e in cutlass.range_constexpr(CHUNK):
                        acc[e] = _fma_rn(wx, bj[e], acc[e])
        # the decayed checkpoint (loaded after the fold: its 16 values are never live in it)
        wpc = CHUNK * _BITS[fmt] // 32
        gD = cute.local_tile(mHi[slot, head, r, None], (wpc,), (cbi,))
        rW = cute.make_rmem_tensor((wpc,), Int32)
        cute.autovec_copy(gD, rW)
        scale = Float32(0.0)
        d_blk = Float32(0.0)
        if const_expr(fmt == "fp8"):
            scale = mHiS[slot, head, r]
        if const_expr(fmt == "nvfp4"):
            s_blk = lp.e4m3_byte_to_f32(Uint32(mHiS[slot, head, r, cbi]))
            d_blk = lp.mul_rn(s_blk, hig)
        self._decode_add_chunk(fmt, rW, acc, gf, scale, d_blk)

    @cute.jit
    def _stage_fold(self, mBBuf: cute.Tensor, mXBuf: cute.Tensor, sB: cute.Tensor,
                    sWX: cute.Tensor, sCoef: cute.Tensor, slot: Int32, head: Int32,
                    group: Int32, k: Int32, origin: Int32, h: Int32, j0: Int32, tidx: Int32):
        """sB[jj, n] = B_{j0+jj}[n], sWX[jj, p] = w_{j0+jj}·x_{j0+jj}[p] (fp32) for j0+jj < h."""
        JB, N, P, nt = self.cfg.jb, self.N, self.P, self.cfg.nt
        for it in cutlass.range(-(-(JB * N) // nt), unroll=4):
            idx = tidx + it * nt
            jj = idx // N
            n = idx % N
            if j0 + jj < h:
                if jj < JB:
                    ph = self._phys(origin, j0 + jj)
                    sB[jj, n] = mBBuf[slot, group, ph, n].to(Float32)
        for it in cutlass.range(-(-(JB * P) // nt), unroll=4):
            idx = tidx + it * nt
            jj = idx // P
            p = idx % P
            if j0 + jj < h:
                if jj < JB:
                    ph = self._phys(origin, j0 + jj)
                    sWX[jj, p] = sCoef[k, j0 + jj] * mXBuf[slot, head, ph, p].to(Float32)

    # ---------------------------------------------------------------- device side
    @cute.kernel
    def kernel(
        self,
        mX: cute.Tensor, mDt: cute.Tensor, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor,
        mD: Optional[cute.Tensor], mZ: Optional[cute.Tensor], mDtBias: Optional[cute.Tensor],
        mIdx: Optional[cute.Tensor], mOut: cute.Tensor,
        mHi: cute.Tensor, mHiS: Optional[cute.Tensor], mHiG: Optional[cute.Tensor],
        mLo: Optional[cute.Tensor], mLoS: Optional[cute.Tensor], mLoG: Optional[cute.Tensor],
        mXBuf: cute.Tensor, mBBuf: cute.Tensor, mDtBuf: cute.Tensor, mDABuf: cute.Tensor,
        mWPos: cute.Tensor, mOrig: cute.Tensor, mFlushCnt: cute.Tensor, mPend: cute.Tensor,
        mArrive: cute.Tensor, mSeed: Optional[cute.Tensor], pad_slot_id: Int32,
    ):
        cfg = self.cfg
        H, P, N, L, R = self.H, self.P, self.N, self.L, self.R
        HPC, NT = self.hpc, cfg.nt
        LC = max(L, 1)
        tidx, _, _ = cute.arch.thread_idx()
        hc, row, _ = cute.arch.block_idx()
        warp = tidx // 32
        lane = tidx % 32

        smem = cutlass.memory.SmemAllocator()
        sC = smem.allocate_tensor(Float32, cute.make_layout(N), byte_alignment=16)
        sCB = smem.allocate_tensor(Float32, cute.make_layout(LC + 1), byte_alignment=16)
        HM = cfg.hm
        sCoef = smem.allocate_tensor(Float32, cute.make_layout((HPC, HM), stride=(HM, 1)),
                                     byte_alignment=16)
        sScal = smem.allocate_tensor(Float32, cute.make_layout((HPC, 4), stride=(4, 1)),
                                     byte_alignment=16)
        sB = smem.allocate_tensor(Float32, cute.make_layout((cfg.jb, N), stride=(N, 1)),
                                  byte_alignment=16)
        sWX = smem.allocate_tensor(Float32, cute.make_layout((cfg.jb, P), stride=(P, 1)),
                                   byte_alignment=16)
        sRed = smem.allocate_tensor(Float32, cute.make_layout(NT // 32), byte_alignment=16)
        sKey = smem.allocate_tensor(Int32, cute.make_layout(2 * lp.PHILOX_ROUNDS),
                                    byte_alignment=16)

        if const_expr(self.has_idx):
            slot = mIdx[row]
        else:
            slot = row
        num_slots = mWPos.shape[0]
        valid = slot != pad_slot_id
        if slot < 0:
            valid = Boolean(False)
        if slot >= num_slots:
            valid = Boolean(False)

        if valid:
            # ------------------------------------------------------------ preamble
            h = cutlass.min(mWPos[slot], Int32(cfg.hm))   # <= R-1 for any valid cache state
            origin = mOrig[slot]
            gen = mFlushCnt[slot]
            flush = h >= Int32(L)
            nb = h                       # buffered entries the output uses
            origin2 = origin             # ring origin after this step
            if flush:
                nb = Int32(0)
                origin2 = self._phys(origin, h)
            phys_cur = self._phys(origin2, nb)
            head0 = hc * HPC
            group = head0 // self.hpg

            for i in cutlass.range_constexpr(-(-N // NT)):
                n = tidx + i * NT
                if n < N:
                    sC[n] = mC[row, group, n].to(Float32)
            cute.arch.barrier()

            # cb_cur (every warp computes it; warp 0 stores) and the buffered cb_j (non-flush)
            cbc = Float32(0.0)
            for m in cutlass.range_constexpr(-(-N // 32)):
                n = lane + 32 * m
                if const_expr(N % 32 == 0):
                    cbc = cbc + mB[row, group, n].to(Float32) * sC[n]
                else:
                    if n < N:
                        cbc = cbc + mB[row, group, n].to(Float32) * sC[n]
            cbc = cute.arch.warp_reduction(cbc, operator.add)
            if tidx == 0:
                sCB[LC] = cbc
            if not flush:
                for i in cutlass.range_constexpr(-(-(L - 1) // 4) if L > 1 else 0):
                    e = warp + 4 * i
                    ec = cutlass.min(e, L - 1)
                    ph = self._phys(origin, ec)
                    acc = Float32(0.0)
                    for m in cutlass.range_constexpr(-(-N // 32)):
                        n = lane + 32 * m
                        nn = n if const_expr(N % 32 == 0) else cutlass.min(n, N - 1)
                        v = mBBuf[slot, group, ph, nn].to(Float32) * sC[nn]
                        if const_expr(N % 32 == 0):
                            acc = acc + v
                        else:
                            acc = acc + lp.sel_f32(n < N, v, Float32(0.0))
                    acc = cute.arch.warp_reduction(acc, operator.add)
                    if lane == 0:
                        if e < nb:
                            sCB[ec] = acc
            cute.arch.barrier()

            # per head: dt', scan of the log decays, coefficients (one warp per head)
            for i in cutlass.range_constexpr(-(-HPC // 4)):
                k = warp + 4 * i
                if k < HPC:
                    head = head0 + k
                    dtv = mDt[row, head].to(Float32)
                    if const_expr(self.has_dt_bias):
                        dtv = dtv + mDtBias[head].to(Float32)
                    if const_expr(self.dt_softplus):
                        if dtv <= Float32(SOFTPLUS_THRESHOLD):
                            dtv = cute.math.log1p(cute.math.exp(dtv))
                    dA_cur = mA[head].to(Float32) * dtv
                    lam = cute.make_rmem_tensor((cfg.nseg,), Float32)
                    dts = cute.make_rmem_tensor((cfg.nseg,), Float32)
                    carry = Float32(0.0)
                    for s in cutlass.range_constexpr(cfg.nseg):
                        j = lane + 32 * s
                        jc = cutlass.min(j, R - 1)
                        ph = self._phys(origin, jc)
                        va = mDABuf[slot, head, ph]
                        vd = mDtBuf[slot, head, ph]
                        cur = lp.sel_f32(flush, Float32(0.0), dA_cur)
                        v = lp.sel_f32(j < h, va, lp.sel_f32(j == h, cur, Float32(0.0)))
                        dts[s] = lp.sel_f32(j < h, vd, Float32(0.0))
                        for off in cutlass.range_constexpr(5):
                            o = 1 << off
                            t = cute.arch.shuffle_sync_up(v, offset=o)
                            v = lp.sel_f32(lane >= o, v + t, v)
                        v = v + carry
                        lam[s] = v
                        carry = cute.arch.shuffle_sync(v, 31)
                    tot = carry              # Λ over all entries (+ the current token unless flush)
                    for s in cutlass.range_constexpr(cfg.nseg):
                        j = lane + 32 * s
                        if j < h:
                            cw = cute.math.exp(tot - lam[s]) * dts[s]
                            if not flush:
                                cw = cw * sCB[j]
                            sCoef[k, j] = cw
                    if lane == 0:
                        sScal[k, 0] = cute.math.exp(tot)
                        sScal[k, 1] = dtv * cbc
                        sScal[k, 2] = cute.math.exp(dA_cur)
                        mDtBuf[slot, head, phys_cur] = dtv
                        mDABuf[slot, head, phys_cur] = dA_cur
            cute.arch.barrier()

            if not flush:
                self._nonflush(mX, mZ, mD, mOut, mHi, mHiS, mHiG, mLo, mLoS, mLoG, mXBuf,
                               sC, sCoef, sScal, row, slot, head0, origin, h, tidx)
            else:
                self._flush(mX, mZ, mD, mOut, mHi, mHiS, mHiG, mLo, mLoS, mLoG, mXBuf, mBBuf,
                            mSeed, sC, sB, sWX, sCoef, sScal, sRed, sKey, row, slot, head0, group,
                            origin, h, gen, tidx)

            # ------------------------------------------------------------ append
            for i in cutlass.range_constexpr(-(-(HPC * P) // NT)):
                idx = tidx + i * NT
                k = idx // P
                p = idx % P
                if k < HPC:
                    mXBuf[slot, head0 + k, phys_cur, p] = mX[row, head0 + k, p]
            if hc % cfg.ctas_per_group == 0:
                for i in cutlass.range_constexpr(-(-N // NT)):
                    n = tidx + i * NT
                    if n < N:
                        mBBuf[slot, group, phys_cur, n] = mB[row, group, n]

            # ------------------------------------------------------------ cursors (last CTA)
            cute.arch.barrier()
            if tidx == 0:
                last = Boolean(True)
                if const_expr(cfg.ctas_per_row > 1):
                    cute.arch.fence_acq_rel_gpu()
                    old = cute.arch.atomic_add((mArrive.iterator + slot).llvm_ptr, Int32(1),
                                               sem="relaxed", scope="gpu")
                    cute.arch.fence_acq_rel_gpu()
                    last = old == Int32(cfg.ctas_per_row - 1)
                if last:
                    mWPos[slot] = nb + 1
                    mOrig[slot] = origin2
                    if flush:
                        mFlushCnt[slot] = gen + 1
                    mPend[slot] = Int32(0)
                    if const_expr(cfg.ctas_per_row > 1):
                        mArrive[slot] = Int32(0)

    # ---------------------------------------------------------------- non-flush rows
    @cute.jit
    def _nonflush(self, mX: cute.Tensor, mZ: Optional[cute.Tensor], mD: Optional[cute.Tensor],
                  mOut: cute.Tensor, mHi: cute.Tensor, mHiS: Optional[cute.Tensor],
                  mHiG: Optional[cute.Tensor], mLo: Optional[cute.Tensor],
                  mLoS: Optional[cute.Tensor], mLoG: Optional[cute.Tensor], mXBuf: cute.Tensor,
                  sC: cute.Tensor, sCoef: cute.Tensor, sScal: cute.Tensor, row: Int32,
                  slot: Int32, head0: Int32, origin: Int32, h: Int32, tidx: Int32):
        cfg = self.cfg
        P, L, R = self.P, self.L, self.R
        TN, CN, RPP, RPT, MJ, VEC = cfg.tn, cfg.cn, cfg.rpp, cfg.rpt, cfg.mj, cfg.vec
        MG = max(1, min(MJ, 4))             # buffer entries per lane and group (unrolled)
        NMG = -(-MJ // MG) if MJ > 0 else 0  # groups (runtime loop when > 1)
        fmt = self.read_fmt
        mRd = mLo if const_expr(self.split) else mHi
        mRdS = mLoS if const_expr(self.split) else mHiS
        mRdG = mLoG if const_expr(self.split) else mHiG
        lir = tidx % TN                 # lane in row
        rp = tidx // TN                 # row in pass
        # C at this lane's columns, fp32 registers (once per CTA)
        creg = cute.make_rmem_tensor((CN * VEC,), Float32)
        for cc in cutlass.range_constexpr(CN):
            for e in cutlass.range_constexpr(VEC):
                creg[cc * VEC + e] = sC[(lir + TN * cc) * VEC + e]
        # per-head load set: state words, fp8 row scales / nvfp4 block-scale byte pairs, global
        raw_l = cute.make_ordered_layout((RPT, CN, 4), order=(2, 1, 0))
        raw = cute.make_rmem_tensor(raw_l, Int32)
        rsc = cute.make_rmem_tensor((RPT,), Float32)
        bsc = cute.make_rmem_tensor((RPT, CN), Int32)
        gsc = cute.make_rmem_tensor((1,), Float32)
        pf = self.prefetch
        if const_expr(pf):
            raw2 = cute.make_rmem_tensor(raw_l, Int32)
            rsc2 = cute.make_rmem_tensor((RPT,), Float32)
            bsc2 = cute.make_rmem_tensor((RPT, CN), Int32)
            gsc2 = cute.make_rmem_tensor((1,), Float32)
            self._issue_read(mRd, mRdS, mRdG, raw, rsc, bsc, gsc, slot, head0, rp, lir)
        for k in cutlass.range(self.hpc, unroll=1):
            head = _opaque_i32(head0 + k)
            gam = sScal[k, 0]
            ccur = sScal[k, 1]
            # ---- every state load of the head (or of the next head, prefetched) first
            if const_expr(pf):
                nxt = _opaque_i32(head0 + cutlass.min(k + 1, self.hpc - 1))
                self._issue_read(mRd, mRdS, mRdG, raw2, rsc2, bsc2, gsc2, slot, nxt, rp, lir)
            else:
                self._issue_read(mRd, mRdS, mRdG, raw, rsc, bsc, gsc, slot, head, rp, lir)
            sblk = cute.make_rmem_tensor((RPT, CN, 2), Float32)
            hsc = gam
            if const_expr(fmt == "nvfp4"):
                hsc = gam * (gsc[0] * Float32(16384.0))
                for i in cutlass.range_constexpr(RPT):
                    for cc in cutlass.range_constexpr(CN):
                        b0, b1, _, _ = lp.unpack_e4m3x4(Uint32(bsc[i, cc]))
                        sblk[i, cc, 0] = b0
                        sblk[i, cc, 1] = b1
            # ---- buffer entries: lane lir takes j = lir + TN*m, in groups of MG (predicated)
            ybuf = cute.make_rmem_tensor((RPT,), Float32)
            for i in cutlass.range_constexpr(RPT):
                ybuf[i] = Float32(0.0)
            for g in cutlass.range(NMG, unroll=1):
                xj = cute.make_rmem_tensor((RPT, MG), Float32)
                cf = cute.make_rmem_tensor((MG,), Float32)
                for mm in cutlass.range_constexpr(MG):
                    j = lir + TN * (g * MG + mm)
                    jc = cutlass.min(j, L - 1)
                    cf[mm] = lp.sel_f32(j < h, sCoef[k, jc], Float32(0.0))
                    ph = self._phys(origin, jc)
                    for i in cutlass.range_constexpr(RPT):
                        p = rp + RPP * i
                        if const_expr(P % RPP != 0):
                            p = cutlass.min(p, P - 1)
                        xj[i, mm] = lp.sel_f32(j < h, mXBuf[slot, head, ph, p].to(Float32),
                                               Float32(0.0))
                for i in cutlass.range_constexpr(RPT):
                    for mm in cutlass.range_constexpr(MG):
                        ybuf[i] = ybuf[i] + cf[mm] * xj[i, mm]
            xc = cute.make_rmem_tensor((RPT,), Float32)
            zc = cute.make_rmem_tensor((RPT,), Float32)
            for i in cutlass.range_constexpr(RPT):
                p = rp + RPP * i
                if const_expr(P % RPP != 0):
                    p = cutlass.min(p, P - 1)
                xc[i] = mX[row, head, p].to(Float32)
                if const_expr(self.has_z):
                    zc[i] = mZ[row, head, p].to(Float32)
            dsk = Float32(0.0)
            if const_expr(self.has_D):
                dsk = mD[head].to(Float32)
            # ---- math: partial row sums, one butterfly per row over the TN lanes
            part = cute.make_rmem_tensor((RPT,), Float32)
            for i in cutlass.range_constexpr(RPT):
                sc = hsc
                if const_expr(fmt == "fp8"):
                    sc = gam * rsc[i]
                y = self._read_row_dot(raw, i, creg, sblk) * sc + ybuf[i]
                part[i] = cute.arch.warp_reduction(y, operator.add, threads_in_group=TN)
            if lir == 0:
                for i in cutlass.range_constexpr(RPT):
                    p = rp + RPP * i
                    if p < P:
                        y = part[i] + (ccur + dsk) * xc[i]
                        if const_expr(self.has_z):
                            y = _silu_gate(y, zc[i])
                        mOut[row, head, p] = y.to(self.act_dtype)
            if const_expr(pf):
                raw.store(raw2.load())
                rsc.store(rsc2.load())
                bsc.store(bsc2.load())
                gsc.store(gsc2.load())

    # ---------------------------------------------------------------- flush rows
    @cute.jit
    def _flush(self, mX: cute.Tensor, mZ: Optional[cute.Tensor], mD: Optional[cute.Tensor],
               mOut: cute.Tensor, mHi: cute.Tensor, mHiS: Optional[cute.Tensor],
               mHiG: Optional[cute.Tensor], mLo: Optional[cute.Tensor],
               mLoS: Optional[cute.Tensor], mLoG: Optional[cute.Tensor], mXBuf: cute.Tensor,
               mBBuf: cute.Tensor, mSeed: Optional[cute.Tensor], sC: cute.Tensor,
               sB: cute.Tensor, sWX: cute.Tensor, sCoef: cute.Tensor, sScal: cute.Tensor,
               sRed: cute.Tensor, sKey: cute.Tensor, row: Int32, slot: Int32, head0: Int32, group: Int32,
               origin: Int32, h: Int32, gen: Int32, tidx: Int32):
        cfg = self.cfg
        NT, CB, NIT, RW, RPF, P = cfg.nt, cfg.cb, cfg.nit, cfg.rw, cfg.rpf, self.P
        warp = tidx // 32
        lane = tidx % 32
        cbi = lane // RW                 # chunk-in-row of every chunk this thread owns
        rrow = warp * RW + lane % RW     # its row within a pass of RPF rows
        if const_expr(self.any_sr):
            # Philox key schedule once per CTA (visible after the first barrier of the head loop)
            if tidx < lp.PHILOX_ROUNDS:
                k0, k1 = lp.sr_key_from_seed(mSeed[0])
                for r in cutlass.range_constexpr(1, lp.PHILOX_ROUNDS):
                    if tidx == r:
                        k0 = k0 + Uint32((r * lp.PHILOX_W0) & 0xFFFFFFFF)
                        k1 = k1 + Uint32((r * lp.PHILOX_W1) & 0xFFFFFFFF)
                sKey[2 * tidx] = Int32(k0)
                sKey[2 * tidx + 1] = Int32(k1)
        w3_hi = lp.sr_counter_word3(0, gen)
        w3_lo = lp.sr_counter_word3(1, gen)
        if const_expr(cfg.njb == 1):
            # one staging round: the group's B entries once per CTA
            for it in cutlass.range(-(-(cfg.jb * self.N) // NT), unroll=4):
                idx = tidx + it * NT
                jj = idx // self.N
                n = idx % self.N
                if jj < h:                   # h <= hm <= jb here
                    ph = self._phys(origin, jj)
                    sB[jj, n] = mBBuf[slot, group, ph, n].to(Float32)
        dsk = Float32(0.0)
        for k in cutlass.range(self.hpc, unroll=1):
            head = _opaque_i32(head0 + k)
            tidx = _dep_i32(tidx, k)
            origin = _dep_i32(origin, k)
            gf = sScal[k, 0]
            ccur = sScal[k, 1]
            gout = sScal[k, 2]
            if const_expr(self.has_D):
                dsk = mD[head].to(Float32)
            hig = Float32(0.0)           # the hi global scale before this flush rewrites it
            if const_expr(self.rec_fmt == "nvfp4"):
                hig = mHiG[slot, head]
            cute.arch.barrier()          # sWX / sRed of the previous head are consumed
            if const_expr(cfg.njb == 1):
                for it in cutlass.range(-(-(cfg.jb * self.P) // NT), unroll=4):
                    idx = tidx + it * NT
                    jj = idx // self.P
                    p = idx % self.P
                    if jj < h:
                        ph = self._phys(origin, jj)
                        sWX[jj, p] = sCoef[k, jj] * mXBuf[slot, head, ph, p].to(Float32)
                cute.arch.barrier()
            acc = cute.make_rmem_tensor((CHUNK,), Float32)
            s_glob = Float32(0.0)
            if const_expr(self.needs_gamax):
                amax = Float32(0.0)
                for it in cutlass.range(NIT, unroll=1):
                    r = rrow + it * RPF
                    if const_expr(not cfg.full):
                        r = cutlass.min(r, P - 1)
                    self._fold_chunk(mHi, mHiS, hig, mBBuf, mXBuf, sB, sWX, sCoef, acc,
                                     _dep_i32(slot, it), _dep_i32(head, it), group, k, origin, h,
                                     r, cbi, gf, tidx)
                    for e in cutlass.range_constexpr(CHUNK):
                        amax = lp.fmax_nq(amax, lp.abs_nan0_inf_sat(acc[e]))
                amax = cute.arch.warp_reduction(amax, lp.fmax_nq)
                if lane == 0:
                    sRed[warp] = amax
                cute.arch.barrier()
                amax = sRed[0]
                for w in cutlass.range_constexpr(1, NT // 32):
                    amax = lp.fmax_nq(amax, sRed[w])
                s_glob = lp.nvfp4_global_scale(amax)
                if tidx == 0:
                    if const_expr(self.rec_fmt == "nvfp4"):
                        mHiG[slot, head] = s_glob
                    if const_expr(self.split and self.read_fmt == "nvfp4"):
                        mLoG[slot, head] = s_glob
            for it in cutlass.range(NIT, unroll=1):
                # per-chunk copies of the indices: addresses are recomputed per chunk (a few IMADs)
                # instead of being hoisted as ~10 live 64-bit pointers across the chunk loop
                slot_i = _dep_i32(slot, it)
                head_i = _dep_i32(head, it)
                r = rrow + it * RPF
                vq = r < P
                if const_expr(not cfg.full):
                    r = cutlass.min(r, P - 1)
                qc = r * CB + cbi        # chunk id: elements 16qc .. 16qc+15 of the P x N matrix
                self._fold_chunk(mHi, mHiS, hig, mBBuf, mXBuf, sB, sWX, sCoef, acc, slot_i,
                                 head_i, group, k, origin, h, r, cbi, gf, tidx)
                # ---- output from the fp32 fold
                cj = cute.make_rmem_tensor((CHUNK,), Float32)
                cute.autovec_copy(cute.local_tile(sC, (CHUNK,), (cbi,)), cj)
                y = Float32(0.0)
                for e in cutlass.range_constexpr(CHUNK):
                    y = y + acc[e] * cj[e]
                y = _row_reduce(y, operator.add, CB, RW)
                if vq:
                    if cbi == 0:
                        xv = mX[row, head_i, r].to(Float32)
                        yo = gout * y + (ccur + dsk) * xv
                        if const_expr(self.has_z):
                            yo = _silu_gate(yo, mZ[row, head_i, r].to(Float32))
                        mOut[row, head_i, r] = yo.to(self.act_dtype)
                # ---- encode hi (stream 0) and lo (stream 1), one after the other
                tok = None
                for fmt, sr, stream in self.flush_targets:
                    if const_expr(tok is not None):
                        for e in cutlass.range_constexpr(CHUNK):
                            acc[e] = _dep_f32(acc[e], tok)
                    mDat = mHi if const_expr(stream == 0) else mLo
                    mSc = mHiS if const_expr(stream == 0) else mLoS
                    wpc = CHUNK * _BITS[fmt] // 32
                    rW = cute.make_rmem_tensor((wpc,), Int32)
                    sc = self._encode_chunk(fmt, sr, acc, qc, head_i, slot_i,
                                            w3_hi if stream == 0 else w3_lo, sKey, s_glob, rW)
                    tok = rW[wpc - 1]
                    if vq:
                        gD = cute.local_tile(mDat[slot_i, head_i, r, None], (wpc,), (cbi,))
                        cute.autovec_copy(rW, gD)
                        if const_expr(fmt == "fp8"):
                            if cbi == 0:
                                mSc[slot_i, head_i, r] = sc
                        if const_expr(fmt == "nvfp4"):
                            mSc[slot_i, head_i, r, cbi] = sc.to(Uint8)


# --------------------------------------------------------------------------------------
# compile (tensor-free, cached) and launch
# --------------------------------------------------------------------------------------

_CACHE = KernelCache("mamba2_replay")


def _resolve(pair_name, act_dtype, dt_dtype, H, P, N, G, L, R, has_D, has_z, has_dt_bias,
             dt_softplus, heads_per_cta, has_idx, prefetch=None, min_blocks_per_mp=None):
    pair = parse_pair(pair_name)
    kw = dict(
        pair=pair.name, act_dtype=dtype_name(act_dtype), dt_dtype=dtype_name(dt_dtype),
        nheads=int(H), headdim=int(P), dstate=int(N), ngroups=int(G), buffer_len=int(L),
        ring=int(R), has_D=bool(has_D), has_z=bool(has_z), has_dt_bias=bool(has_dt_bias),
        dt_softplus=bool(dt_softplus), heads_per_cta=int(heads_per_cta),
        has_state_batch_indices=bool(has_idx),
        prefetch=None if prefetch is None else bool(prefetch),
        min_blocks_per_mp=None if min_blocks_per_mp is None else int(min_blocks_per_mp),
    )
    key = ("mamba2_replay", common.arch_key()) + tuple(kw.values())
    return kw, key


def _fake_copy(fmt: str, slots, H: int, P: int, N: int):
    """Fake (data int32 words, scale, global scale) of one stored copy."""
    f = common.fake_tensor
    W = N * _BITS[fmt] // 32
    data = f(Int32, (slots, H, P, W), (("dyn", 4), P * W, W, 1), align_bytes=16)
    scale = gscale = None
    if fmt == "fp8":
        scale = f(Float32, (slots, H, P), ("dyn", P, 1), align_bytes=4)
    elif fmt == "nvfp4":
        nb = N // CHUNK
        scale = f(Uint8, (slots, H, P, nb), (("dyn", 2), P * nb, nb, 1), align_bytes=2)
        gscale = f(Float32, (slots, H), ("dyn", 1), align_bytes=4)
    return data, scale, gscale


def _fake_args(op: Mamba2ReplayDecode):
    """Fake tensors: ``batch`` and ``num_slots`` symbolic. Contract checked by TVM-FFI at call
    time: dtypes; H, P, N, G, R extents; one ``batch`` across x/dt/B/C/z/out/indices, one
    ``num_slots`` across every cache tensor; the cache tensors contiguous (static inner strides),
    stored copies passed as int32 word views, 16-byte aligned."""
    H, P, N, G, R = op.H, op.P, op.N, op.G, op.R
    at, dtt = op.act_dtype, op.dt_dtype
    batch = common.sym()
    slots = common.sym()
    f = common.fake_tensor
    x = f(at, (batch, H, P), ("dyn", "dyn", 1))
    out = f(at, (batch, H, P), ("dyn", "dyn", 1))
    z = f(at, (batch, H, P), ("dyn", "dyn", 1)) if op.has_z else None
    dt = f(dtt, (batch, H), ("dyn", "dyn"))
    A = f(Float32, (H,), ("dyn",))
    D = f(Float32, (H,), ("dyn",)) if op.has_D else None
    dt_bias = f(Float32, (H,), ("dyn",)) if op.has_dt_bias else None
    B = f(at, (batch, G, N), ("dyn", "dyn", 1))
    C = f(at, (batch, G, N), ("dyn", "dyn", 1))
    idx = f(Int32, (batch,), ("dyn",)) if op.has_idx else None
    hi, hi_s, hi_g = _fake_copy(op.rec_fmt, slots, H, P, N)
    lo = lo_s = lo_g = None
    if op.split:
        lo, lo_s, lo_g = _fake_copy(op.read_fmt, slots, H, P, N)
    x_buf = f(at, (slots, H, R, P), ("dyn", R * P, P, 1))
    B_buf = f(at, (slots, G, R, N), ("dyn", R * N, N, 1))
    dt_buf = f(Float32, (slots, H, R), ("dyn", R, 1))
    dA_buf = f(Float32, (slots, H, R), ("dyn", R, 1))
    cur = [f(Int32, (slots,), (1,)) for _ in range(5)]   # write_pos, origin, flush_count, pending, arrive
    seed = f(Int64, (1,), (1,), align_bytes=8) if op.any_sr else None
    return (x, dt, A, B, C, D, z, dt_bias, idx, out, hi, hi_s, hi_g, lo, lo_s, lo_g,
            x_buf, B_buf, dt_buf, dA_buf, *cur, seed, Int32(-1), common.fake_stream())


def _require_ffi():
    if not common.HAS_TVM_FFI:
        raise RuntimeError("the Mamba-2 replay kernel needs apache-tvm-ffi (TVM-FFI call path)")


def compile_mamba2_replay(pair_name, act_dtype, dt_dtype, H: int, P: int, N: int, G: int, L: int,
                          R: int, has_D: bool, has_z: bool, has_dt_bias: bool, dt_softplus: bool,
                          heads_per_cta: int, has_state_batch_indices: bool = True,
                          prefetch: Optional[bool] = None,
                          min_blocks_per_mp: Optional[int] = None,
                          dump: Optional["common.dump_ptx"] = None) -> CompiledKernel:
    """Compile (once per key, tensor-free, TVM-FFI) the replay decode kernel. Every argument is
    baked into the binary and forms the cache key; ``batch`` and ``num_slots`` stay symbolic.
    Call ``k.ffi(x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out, hi_words, hi_scale,
    hi_global_scale, lo_words, lo_scale, lo_global_scale, x_buf, B_buf, dt_buf, dA_buf, write_pos,
    ring_origin, flush_count, pending, arrive, seed, pad_slot_id)`` (``None`` for absent tensors;
    see :func:`mamba2_replay_decode_cute`). Tuning knobs (also part of the key): ``prefetch``
    (non-flush rows load the next head's read copy before reducing the current one; default: on for
    nvfp4 / fp8 read copies when ``heads_per_cta > 1``) and ``min_blocks_per_mp`` (``.minnctapersm``
    occupancy hint = register cap for ptxas; 0 = ptxas' choice; None = :func:`default_min_blocks_per_mp`).
    With ``dump`` the compile bypasses the cache."""
    _require_ffi()
    kw, key = _resolve(pair_name, act_dtype, dt_dtype, H, P, N, G, L, R, has_D, has_z,
                       has_dt_bias, dt_softplus, heads_per_cta, has_state_batch_indices, prefetch,
                       min_blocks_per_mp)

    def build() -> CompiledKernel:
        op = Mamba2ReplayDecode(**kw)
        compiled, secs = common.cute_compile(op, *_fake_args(op), use_tvm_ffi=True, dump=dump)
        return CompiledKernel(compiled, key, secs, use_ffi=True, meta={"cfg": op.cfg, "op": op})

    if dump is not None:
        return build()
    return _CACHE.get_or_compile(key, build)


def compile_only(pair_name="nvfp4/fp16sr", act_dtype="bfloat16", dt_dtype="float32", H: int = 128,
                 P: int = 64, N: int = 128, G: int = 8, L: int = 16, R: Optional[int] = None,
                 has_D: bool = True, has_z: bool = False, has_dt_bias: bool = True,
                 dt_softplus: bool = True, heads_per_cta: int = 1,
                 has_state_batch_indices: bool = True,
                 keep_ptx: bool = True) -> Tuple[CompiledKernel, Optional[str]]:
    """Compile one variant without a GPU (``CUTE_DSL_ARCH=sm_90a``). Defaults: Nemotron-3-Super
    layer, L=16, decode-only ring (R = L + 1). Returns ``(kernel, ptx_or_None)``; with ``keep_ptx``
    the compile is uncached and the PTX text is returned."""
    if R is None:
        R = L + 1
    args = (pair_name, act_dtype, dt_dtype, H, P, N, G, L, R, has_D, has_z, has_dt_bias,
            dt_softplus, heads_per_cta, has_state_batch_indices)
    if not keep_ptx:
        return compile_mamba2_replay(*args), None
    with common.dump_ptx() as d:
        k = compile_mamba2_replay(*args, dump=d)
        ptx = d.read() or None
        d.cleanup()
    k.ptx = ptx
    return k, ptx


def _copy_args(enc, fmt: str):
    """(int32 words, scale, global scale) views of an EncodedState for the kernel."""
    from .state_codec import _as_u8, _as_words

    data = _as_words(enc.data, fmt)
    if fmt == "fp8":
        return data, enc.scale, None
    if fmt == "nvfp4":
        return data, _as_u8(enc.scale), enc.global_scale
    return data, None, None


def mamba2_replay_decode_cute(cache, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                              dt_softplus: bool = True, state_batch_indices=None,
                              pad_slot_id: int = -1, out=None, heads_per_cta: Optional[int] = None,
                              prefetch: Optional[bool] = None,
                              min_blocks_per_mp: Optional[int] = None):
    """One ReplaySSM decode step of a :class:`replayssm_lp.Mamba2ReplayCache` on CUDA tensors
    (inputs validated by the torch layer: x, z, out [batch, H, P] act dtype; dt [batch, H] fp32 or
    act; A, D, dt_bias [H] fp32; B, C [batch, G, N] act; ``state_batch_indices`` int32 [batch] or
    None = row i -> slot i). Updates the cache (flush rows: hi/lo, scales, flush_count; every valid
    row: its buffer entry and cursors) and writes ``out``. Allocates no device memory, no host sync;
    launches on the current torch stream (CUDA-graph capturable once compiled: warm every
    heads_per_cta variant up before capture). Returns ``out``."""
    batch, H, P = x.shape
    if out is None:
        out = x.new_empty(x.shape)
    if batch == 0:
        return out
    G, N = B.shape[1], B.shape[2]
    if heads_per_cta is None:
        heads_per_cta = choose_heads_per_cta(batch, H, G)
    pair = cache.pair
    k = compile_mamba2_replay(pair, x.dtype, dt.dtype, H, P, N, G, cache.buffer_len, cache.ring,
                              D is not None, z is not None, dt_bias is not None, dt_softplus,
                              heads_per_cta, state_batch_indices is not None, prefetch,
                              min_blocks_per_mp)
    hi = _copy_args(cache.hi, pair.rec_fmt)
    lo = (None, None, None) if cache.lo is None else _copy_args(cache.lo, pair.read_fmt)
    op = k.meta["op"]
    k.ffi(x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out, *hi, *lo,
          cache.x_buf, cache.B_buf, cache.dt_buf, cache.dA_buf, cache.write_pos,
          cache.ring_origin, cache.flush_count, cache.pending, cache.arrive,
          cache.seed if op.any_sr else None, pad_slot_id)
    return out
