"""Gated DeltaNet ReplaySSM decode step (one token per row, one launch) in CuTe DSL.

Semantics: exactly ``replayssm_lp.reference.gdn_replay`` with T = 1 and ``commit_all=True`` on a
``GDNReplayCache`` (DESIGN.md §1-§2), for every precision pair. Per batch row (slot s, buffer fill
h = write_pos[s]) and value head hv (key head hk = hv // (HV/H)):

* **flush** when ``h + 1 > L``: fold the h committed ring entries into the hi checkpoint in fp32 —
  fp32 / shared pairs: ``S = e^{G_tot} S_hi + sum_j e^{G_tot - G_j} u_j kn_j^T`` (u from ``u_buf``);
  split pairs: the delta rule replayed sequentially from the hi checkpoint with the buffered raw
  ``v_j, beta_j, g_j, kn_j`` (``u_j`` recomputed, so the read copy's error never enters the
  recurrence) — then encode hi (rec format / rounding, SR stream 0) and, for split pairs, lo (read
  format / rounding, SR stream 1), bit-identical to ``formats.encode`` with SR generation
  ``flush_count[s]`` (read at kernel start); ``ring_origin += h``, ``h = 0``.
* every valid row then computes, from S0 = the read copy (dequantised) or the fresh fp32 fold,
  with the m = h' buffered entries (G_p = cumulative log decay)::

      Sk = e^{G_{m-1}} (S0 kn) + sum_{p<m} e^{G_{m-1}-G_p} (kn_p . kn) u_p      (Sq likewise, qn)
      u  = beta (v - e^g Sk) ;  o = e^g Sq + (kn . qn) u

  one pass over the read copy forms both S0 kn and S0 qn;
* appends raw k + kinv (one CTA per key head), g, u (and raw v, beta for split pairs) at
  ``phys = (origin' + h') % R``; the last-arriving CTA of the row (atomic counter ``arrive[s]``,
  reset to 0) moves the cursors: ``write_pos = h' + 1``, ``ring_origin``, ``flush_count += 1`` on
  flush rows, ``pending = 0``. Thread 0 of every CTA reads the cursors (broadcast through shared
  memory) and arrives right after (fence + relaxed atomic), so the atomic's latency overlaps the
  CTA's work; every CTA of the row has read the cursors before the last one arrives.

Read-copy decode (all accumulation fp32): fp32; fp16 (``cvt.f32.f16``); bf16 (shift); fp8
(``cvt.rn.f16x2.e4m3x2``, the row scale applied once per row); nvfp4 (word-parallel fp16 bit trick:
4 shift/mask pairs turn 8 packed E2M1 codes into 4 fp16x2 words = value * 2^-14, the 2^14 and the
block scale applied once per 16-block).

Tiling: one CTA per (batch row, value head, block of ``block_v`` value rows); pairs involving nvfp4
use ``block_v = V`` (the NVFP4 global scale is the amax of the whole (slot, head) matrix). Two
thread <-> data mappings share the CTA:

* **read mapping** (non-flush rows): 16-byte chunks (8 bytes for nvfp4) along K, TN lanes per state
  row, R rows per thread, all loads issued up front; the 2R partial dots are summed over the TN
  lanes with a transposed butterfly (``gdn_standard.treduce``);
* **flush mapping**: 16 consecutive K elements per thread chunk (one NVFP4 block, one fp8 16-byte
  word group, four Philox quads), the fp32 fold of the CTA tile held in registers
  (``block_v * K / threads`` <= 64 values per thread), fp8 row amax by a butterfly over the row's
  lanes, the nvfp4 global amax through shared memory.

The ring entries the fold needs (kn_j in fp32, u_j or v_j, g_j, beta_j) are staged in shared memory
(``L * (K + block_v) * 4`` bytes; L <= 32 at K = V = 128). Non-flush rows prefetch the keys of the
coefficient dots and the u entries of their value rows together with the read tile, so a CTA's
critical path is ~3 dependent global round trips (index, cursors, everything else). The encode
loops over rows at run time (Philox rounds too) to keep the code (and compile time) small.
Registers are capped at 128 per thread by default (``min_blocks_per_mp``): the flush path holds
64 fp32 fold values per thread and would otherwise set the occupancy of the non-flush path.

Public entry points: :func:`compile_gdn_replay`, :func:`gdn_replay_decode_cute`,
:func:`compile_only`, :func:`replay_tile`, :func:`choose_block_v`.
"""

from __future__ import annotations

import functools
from typing import Optional, Tuple

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, Uint8, Uint32, const_expr

import cuda.bindings.driver as cuda  # a dependency of nvidia-cutlass-dsl

from . import common
from . import lowprec as lp
from .common import CompiledKernel, KernelCache, dtype_name, to_cute_dtype
from .gdn_standard import (gdn_gates, qk_normalize_warp, slot_of_row, treduce)

__all__ = [
    "GDNReplayDecode",
    "ReplayTile",
    "replay_tile",
    "choose_block_v",
    "compile_gdn_replay",
    "compile_only",
    "gdn_replay_decode_cute",
    "pair_key",
    "supports_cache",
]

FMT_BITS = {"fp32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "nvfp4": 4}
CHUNK = 16                      # flush mapping: elements per thread chunk (one nvfp4 block)
MAX_FLUSH_ELEMS = 64            # fp32 fold values per thread
SMEM_LIMIT = 47 * 1024          # static shared memory budget (bytes)
MIN_CTAS_PER_SM = 2
REG_CAP = 128                   # default register cap per thread (occupancy hint, see tile)


def _sel(cond, a, b):
    return cutlass.select_(cond, a, b)


def _pow2_div(n: int, cap: int = 32) -> int:
    t = 1
    while t * 2 <= cap and n % (t * 2) == 0:
        t *= 2
    return t


def pair_key(pair) -> Tuple[str, str, str, str, bool]:
    """(read_fmt, read_rounding, rec_fmt, rec_rounding, split) of a PrecisionPair or name."""
    from replayssm_lp.pairs import parse_pair

    p = parse_pair(pair)
    rr = "rn" if p.read_fmt == "fp32" else p.read_rounding
    cr = "rn" if p.rec_fmt == "fp32" else p.rec_rounding
    if p.shared:
        return (p.rec_fmt, cr, p.rec_fmt, cr, False)
    return (p.read_fmt, rr, p.rec_fmt, cr, True)


# --------------------------------------------------------------------------------------
# tile configuration (pure Python)
# --------------------------------------------------------------------------------------


class ReplayTile:
    """Static tiling of a CTA tile ``[block_v, K]`` (see the module docstring)."""

    def __init__(self, read_fmt: str, rec_fmt: str, K: int, V: int, block_v: int,
                 num_threads: int, L: int):
        if K % 32:
            raise ValueError(f"K={K} must be a multiple of 32")
        if num_threads % 32 or not 32 <= num_threads <= 1024:
            raise ValueError(f"num_threads={num_threads} must be a multiple of 32 in [32, 1024]")
        if V % block_v:
            raise ValueError(f"block_v={block_v} must divide V={V}")
        if "nvfp4" in (read_fmt, rec_fmt) and block_v != V:
            raise ValueError("pairs involving nvfp4 need block_v = V (the nvfp4 global scale "
                             "spans the whole (slot, head) matrix)")
        self.block_v, self.num_threads = block_v, num_threads
        nt = num_threads
        # flush mapping: 16-element chunks
        nblk = K // CHUNK
        self.tnf = _pow2_div(nblk)
        self.cnf = nblk // self.tnf
        if nt % self.tnf:
            raise ValueError("num_threads must be a multiple of the flush lanes per row")
        self.rppf = nt // self.tnf
        if block_v % self.rppf:
            raise ValueError(f"block_v={block_v} must be a multiple of {self.rppf} (flush rows per "
                             f"pass at {nt} threads)")
        self.rf = block_v // self.rppf
        self.elems_f = self.rf * self.cnf * CHUNK
        # read mapping: 16-byte chunks (8 for nvfp4)
        rbits = FMT_BITS[read_fmt]
        self.read_bytes = 8 if read_fmt == "nvfp4" else 16
        self.cer = self.read_bytes * 8 // rbits
        nch = K // self.cer
        self.tnr = _pow2_div(nch)
        self.cnr = nch // self.tnr
        if nt % self.tnr:
            raise ValueError("num_threads must be a multiple of the read lanes per row")
        self.rppr = nt // self.tnr
        if block_v % self.rppr:
            raise ValueError(f"block_v={block_v} must be a multiple of {self.rppr} (read rows per "
                             f"pass at {nt} threads)")
        self.rr = block_v // self.rppr
        self.wpr = self.read_bytes // 4                      # words per read chunk
        self.whf = CHUNK * FMT_BITS[rec_fmt] // 32           # hi words per flush chunk
        self.wlf = CHUNK * FMT_BITS[read_fmt] // 32          # lo words per flush chunk
        self.smem_bytes = 4 * (2 * K + 2 * block_v + L * (K + block_v)
                               + 6 * max(L, nt) + 64 + nt // 32)
        if self.smem_bytes > SMEM_LIMIT:
            raise ValueError(f"shared memory {self.smem_bytes} B > {SMEM_LIMIT} B: buffer_len={L} "
                             f"too large for K={K}, block_v={block_v}")

    def __repr__(self):
        return (f"ReplayTile(block_v={self.block_v}, threads={self.num_threads}, flush: TN={self.tnf}"
                f" CN={self.cnf} RPP={self.rppf} R={self.rf}; read: {self.read_bytes}B x "
                f"TN={self.tnr} CN={self.cnr} RPP={self.rppr} R={self.rr}; smem={self.smem_bytes})")


def _default_threads(K: int, block_v: int) -> int:
    nt = max(64, block_v * K // MAX_FLUSH_ELEMS)
    return min(512, ((nt + 31) // 32) * 32)


@functools.lru_cache(maxsize=None)
def _valid_block_vs(read_fmt, rec_fmt, K, V, L) -> Tuple[Tuple[int, int], ...]:
    out = []
    for bv in range(V, 0, -1):
        if V % bv:
            continue
        try:
            t = ReplayTile(read_fmt, rec_fmt, K, V, bv, _default_threads(K, bv), L)
        except ValueError:
            continue
        if t.elems_f <= MAX_FLUSH_ELEMS:
            out.append((bv, t.num_threads))
    return tuple(out)


def replay_tile(read_fmt, rec_fmt, K, V, L, block_v=None, num_threads=None) -> ReplayTile:
    if block_v is not None and num_threads is not None:
        return ReplayTile(read_fmt, rec_fmt, K, V, block_v, num_threads, L)
    for bv, nt in _valid_block_vs(read_fmt, rec_fmt, K, V, L):
        if block_v is not None and bv != block_v:
            continue
        return ReplayTile(read_fmt, rec_fmt, K, V, bv, num_threads or nt, L)
    raise ValueError(f"no valid GDN replay tiling for {read_fmt}/{rec_fmt}, K={K}, V={V}, L={L}, "
                     f"block_v={block_v}, num_threads={num_threads}")


@functools.lru_cache(maxsize=4096)
def choose_block_v(batch: int, HV: int, K: int, V: int, read_fmt: str, rec_fmt: str, L: int,
                   min_ctas: Optional[int] = None) -> int:
    """CTAs per row heuristic: the largest block_v (whole head first) that still gives at least
    ``min_ctas`` CTAs (default 2 per SM); nvfp4 pairs always use the whole head."""
    if min_ctas is None:
        min_ctas = MIN_CTAS_PER_SM * common.num_sms()
    cands = _valid_block_vs(read_fmt, rec_fmt, K, V, L)
    if not cands:
        raise ValueError(f"no valid GDN replay tiling for {read_fmt}/{rec_fmt}, K={K}, V={V}, L={L}")
    for bv, _ in cands:
        if batch * HV * (V // bv) >= min_ctas:
            return bv
    return cands[-1][0]


# --------------------------------------------------------------------------------------
# straight-line device helpers
# --------------------------------------------------------------------------------------


def _nvfp4_word_f16x2(w):
    """8 packed E2M1 codes (code i at bits [4i, 4i+4)) -> 4 fp16x2 words holding value * 2^-14:
    word i has element i in the low half and element i + 4 in the high half."""
    w = Uint32(w)
    M = Uint32(0x0E000E00)
    S = Uint32(0x80008000)
    return (((w << Uint32(9)) & M) | ((w << Uint32(12)) & S),
            ((w << Uint32(5)) & M) | ((w << Uint32(8)) & S),
            ((w << Uint32(1)) & M) | ((w << Uint32(4)) & S),
            ((w >> Uint32(3)) & M) | (w & S))


def _read_chunk_values(fmt, words):
    """Decoded values of one read chunk (in element order); nvfp4 / fp8 without their scales
    (nvfp4: value * 2^-14)."""
    vals = []
    if fmt == "fp32":
        for w in words:
            vals.append(lp.bits_f32(w))
    elif fmt == "fp16":
        for w in words:
            a, b = lp.f16x2_to_f32(w)
            vals += [a, b]
    elif fmt == "bf16":
        for w in words:
            a, b = lp.bf16x2_to_f32(w)
            vals += [a, b]
    elif fmt == "fp8":
        for w in words:
            vals += list(lp.unpack_e4m3x4(w))
    else:  # nvfp4
        for w in words:
            hs = _nvfp4_word_f16x2(w)
            lo = [None] * 8
            for i in range(4):
                a, b = lp.f16x2_to_f32(hs[i])
                lo[i] = a
                lo[i + 4] = b
            vals += lo
    return vals


def _decode_exact(fmt, words, scale):
    """formats.decode of one 16-element flush chunk, bit for bit (fp8: ``scale`` = row scale;
    nvfp4: ``scale`` = d = s_blk * s_glob)."""
    vals = []
    if fmt == "fp32":
        for w in words:
            vals.append(lp.bits_f32(w))
    elif fmt == "fp16":
        for w in words:
            a, b = lp.f16x2_to_f32(w)
            vals += [a, b]
    elif fmt == "bf16":
        for w in words:
            a, b = lp.bf16x2_to_f32(w)
            vals += [a, b]
    elif fmt == "fp8":
        for w in words:
            for x in lp.unpack_e4m3x4(w):
                vals.append(lp.mul_rn(x, scale))
    else:
        for w in words:
            for j in range(8):
                code = (Uint32(w) >> Uint32(4 * j)) & Uint32(0xF)
                vals.append(lp.mul_rn(lp.e2m1_code_to_f32(code), scale))
    return vals


def _encode_chunk(fmt, sr, x, words, scale):
    """Encode 16 fp32 values into the storage words of ``fmt`` (formats.encode, bit for bit).
    fp8: ``scale`` = row scale; nvfp4: ``scale`` = d = s_blk * s_glob. ``words`` = SR words."""
    out = []
    wd = (lambda j: words[j]) if sr else (lambda j: None)  # noqa: E731
    if fmt == "fp32":
        for j in range(CHUNK):
            out.append(lp.f32_bits(x[j]))
    elif fmt in ("fp16", "bf16"):
        v = [lp.round_to_grid(x[j], fmt, sr, wd(j)) for j in range(CHUNK)]
        for j in range(CHUNK // 2):
            out.append(lp.pack_f16x2(v[2 * j], v[2 * j + 1]) if fmt == "fp16"
                       else lp.pack_bf16x2(v[2 * j], v[2 * j + 1]))
    elif fmt == "fp8":
        v = [lp.fp8_quantize(x[j], scale, sr, wd(j)) for j in range(CHUNK)]
        for j in range(CHUNK // 4):
            out.append(lp.pack_e4m3x4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]))
    else:
        codes = [lp.e2m1_code(lp.nvfp4_quantize(x[j], scale, sr, wd(j))) for j in range(CHUNK)]
        out = [lp.pack_nibbles8(codes[0:8]), lp.pack_nibbles8(codes[8:16])]
    return out


def _sr_words16(quad0, c1, c2, w3, k0, k1):
    """The 16 Philox words of elements 4*quad0 .. 4*quad0 + 15."""
    ws = []
    for jq in range(4):
        o = lp.philox4x32_10(Uint32(quad0) + Uint32(jq), c1, c2, w3, k0, k1)
        ws += list(o)
    return ws


def _sum_prefix(sG, upto, L: int):
    """sum_{i < upto} sG[i] in sequential order (upto runtime, L static)."""
    acc = Float32(0.0)
    for i in range(L):
        acc = acc + Float32(_sel(Int32(i) < upto, sG[i], Float32(0.0)))
    return acc


# --------------------------------------------------------------------------------------
# the kernel
# --------------------------------------------------------------------------------------


class GDNReplayDecode:
    """Compile-time parameters + host launch (``__call__``) + device code (``kernel``)."""

    def __init__(self, read_fmt: str, read_rounding: str, rec_fmt: str, rec_rounding: str,
                 split: bool, act_dtype, H: int, HV: int, K: int, V: int, L: int, ring: int,
                 g_dtype=None, beta_dtype=None, alog_dtype=None, a_dtype=None,
                 dt_bias_dtype=None, b_dtype=None, use_qk_l2norm: bool = True,
                 has_state_batch_indices: bool = True, block_v: Optional[int] = None,
                 num_threads: Optional[int] = None, min_blocks_per_mp: Optional[int] = None):
        for f in (read_fmt, rec_fmt):
            if f not in FMT_BITS:
                raise ValueError(f"unknown state format {f!r}")
        if HV % H:
            raise ValueError(f"HV={HV} must be a multiple of H={H}")
        if not 1 <= L <= 64 or ring < L + 1:
            raise ValueError(f"need 1 <= L <= 64 and ring >= L + 1, got L={L}, ring={ring}")
        self.read_fmt, self.rec_fmt = read_fmt, rec_fmt
        self.read_sr = read_rounding == "sr" and read_fmt != "fp32"
        self.rec_sr = rec_rounding == "sr" and rec_fmt != "fp32"
        self.split = bool(split)
        if not self.split and (read_fmt != rec_fmt or self.read_sr != self.rec_sr):
            raise ValueError("a shared pair has one format and rounding")
        self.any_sr = self.rec_sr or (self.split and self.read_sr)
        self.nvfp4_enc = rec_fmt == "nvfp4" or (self.split and read_fmt == "nvfp4")
        self.act_dtype = to_cute_dtype(act_dtype)
        self.H, self.HV, self.K, self.V, self.L, self.ring = H, HV, K, V, L, ring
        self.group = HV // H
        self.has_g = g_dtype is not None
        self.has_beta = beta_dtype is not None
        if not self.has_g and (alog_dtype is None or a_dtype is None):
            raise ValueError("without g the raw gate inputs A_log and a are required")
        if not self.has_beta and b_dtype is None:
            raise ValueError("without beta the raw b is required")
        self.has_dt_bias = (not self.has_g) and dt_bias_dtype is not None
        cd = lambda d: None if d is None else to_cute_dtype(d)  # noqa: E731
        self.g_dtype, self.beta_dtype = cd(g_dtype), cd(beta_dtype)
        self.alog_dtype, self.a_dtype = cd(alog_dtype), cd(a_dtype)
        self.dt_bias_dtype, self.b_dtype = cd(dt_bias_dtype), cd(b_dtype)
        self.use_l2 = bool(use_qk_l2norm)
        self.has_idx = bool(has_state_batch_indices)
        self.tile = replay_tile(read_fmt, rec_fmt, K, V, L, block_v, num_threads)
        self.block_v, self.num_threads = self.tile.block_v, self.tile.num_threads
        self.nwarps = self.num_threads // 32
        self.nsplit = V // self.block_v
        # occupancy hint (.minnctapersm): caps registers at 64K / (k * threads); the default caps
        # them at REG_CAP so the flush path (64 fold values per thread) does not set the
        # occupancy of the non-flush path; 0 lets ptxas choose
        if min_blocks_per_mp is None:
            min_blocks_per_mp = max(1, 65536 // (self.num_threads * REG_CAP))
        self.min_blocks_per_mp = int(min_blocks_per_mp)

    # ---------------------------------------------------------------- host side
    @cute.jit
    def __call__(self, mHi: cute.Tensor, mHiS: Optional[cute.Tensor], mHiG: Optional[cute.Tensor],
                 mLo: Optional[cute.Tensor], mLoS: Optional[cute.Tensor],
                 mLoG: Optional[cute.Tensor], mKb: cute.Tensor, mKinvb: cute.Tensor,
                 mGb: cute.Tensor, mUb: cute.Tensor, mVb: Optional[cute.Tensor],
                 mBb: Optional[cute.Tensor], mWpos: cute.Tensor, mOrig: cute.Tensor,
                 mFcnt: cute.Tensor, mPend: cute.Tensor, mArr: cute.Tensor,
                 mSeed: Optional[cute.Tensor], mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor,
                 mG: Optional[cute.Tensor], mBeta: Optional[cute.Tensor],
                 mALog: Optional[cute.Tensor], mA: Optional[cute.Tensor],
                 mDtBias: Optional[cute.Tensor], mB: Optional[cute.Tensor],
                 mIdx: Optional[cute.Tensor], mOut: cute.Tensor, scale: Float32,
                 pad_slot_id: Int32, stream: cuda.CUstream):
        batch = mQ.shape[0]
        self.kernel(mHi, mHiS, mHiG, mLo, mLoS, mLoG, mKb, mKinvb, mGb, mUb, mVb, mBb, mWpos,
                    mOrig, mFcnt, mPend, mArr, mSeed, mQ, mK, mV, mG, mBeta, mALog, mA, mDtBias,
                    mB, mIdx, mOut, scale, pad_slot_id).launch(
            grid=[batch, self.HV, self.nsplit],
            block=[self.num_threads, 1, 1],
            stream=stream,
            min_blocks_per_mp=self.min_blocks_per_mp,
            # an explicit carveout stops the DSL from querying the device (GPU-less compiles)
            preferred_smem_carveout=-1 if self.min_blocks_per_mp > 1 else None,
        )

    # ---------------------------------------------------------------- device side
    @cute.kernel
    def kernel(self, mHi: cute.Tensor, mHiS: Optional[cute.Tensor], mHiG: Optional[cute.Tensor],
               mLo: Optional[cute.Tensor], mLoS: Optional[cute.Tensor],
               mLoG: Optional[cute.Tensor], mKb: cute.Tensor, mKinvb: cute.Tensor,
               mGb: cute.Tensor, mUb: cute.Tensor, mVb: Optional[cute.Tensor],
               mBb: Optional[cute.Tensor], mWpos: cute.Tensor, mOrig: cute.Tensor,
               mFcnt: cute.Tensor, mPend: cute.Tensor, mArr: cute.Tensor,
               mSeed: Optional[cute.Tensor], mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor,
               mG: Optional[cute.Tensor], mBeta: Optional[cute.Tensor],
               mALog: Optional[cute.Tensor], mA: Optional[cute.Tensor],
               mDtBias: Optional[cute.Tensor], mB: Optional[cute.Tensor],
               mIdx: Optional[cute.Tensor], mOut: cute.Tensor, scale: Float32,
               pad_slot_id: Int32):
        K, BV, L, RING = self.K, self.block_v, self.L, self.ring
        NT, NW = self.num_threads, self.nwarps
        tl = self.tile
        TNF, CNF, RPPF, RF = tl.tnf, tl.cnf, tl.rppf, tl.rf
        TNR, CNR, RPPR, RR = tl.tnr, tl.cnr, tl.rppr, tl.rr
        WPR, CER, WHF, WLF = tl.wpr, tl.cer, tl.whf, tl.wlf
        LP = ((L + NT - 1) // NT) * NT          # per-position arrays, one slot per thread
        LW = ((L + NW - 1) // NW) * NW          # per-position arrays, one slot per warp
        RFMT, HFMT = self.read_fmt, self.rec_fmt

        tidx, _, _ = cute.arch.thread_idx()
        row_b, hv, vblk = cute.arch.block_idx()
        lane = tidx % 32
        warp = tidx // 32
        hk = hv // self.group
        v0 = vblk * BV

        smem = cutlass.memory.SmemAllocator()
        sKn = smem.allocate_tensor(Float32, cute.make_layout(K), byte_alignment=16)
        sQn = smem.allocate_tensor(Float32, cute.make_layout(K), byte_alignment=16)
        sDot = smem.allocate_tensor(Float32, cute.make_layout(2 * BV), byte_alignment=16)
        sKnB = smem.allocate_tensor(Float32, cute.make_layout(L * K), byte_alignment=16)
        sUB = smem.allocate_tensor(Float32, cute.make_layout(L * BV), byte_alignment=16)
        sG = smem.allocate_tensor(Float32, cute.make_layout(LP), byte_alignment=16)
        sW = smem.allocate_tensor(Float32, cute.make_layout(LP), byte_alignment=16)
        sBeta = smem.allocate_tensor(Float32, cute.make_layout(LP), byte_alignment=16)
        sC = smem.allocate_tensor(Float32, cute.make_layout(LW), byte_alignment=16)
        sD = smem.allocate_tensor(Float32, cute.make_layout(LW), byte_alignment=16)
        sScal = smem.allocate_tensor(Float32, cute.make_layout(8), byte_alignment=16)
        sAmax = smem.allocate_tensor(Float32, cute.make_layout(NW), byte_alignment=16)
        sCur = smem.allocate_tensor(Int32, cute.make_layout(4), byte_alignment=16)

        # 32-bit word views of the stored copies
        wHi = cute.recast_tensor(mHi, Uint32)
        wRd = wHi
        if const_expr(self.split):
            wLo = cute.recast_tensor(mLo, Uint32)
            wRd = wLo
            mRdS, mRdG = mLoS, mLoG
        else:
            mRdS, mRdG = mHiS, mHiG

        slot, valid = slot_of_row(self.has_idx, mIdx, row_b, mWpos.shape[0], pad_slot_id)
        if valid:
            # ---- cursors: read once (thread 0), broadcast through smem. Thread 0 then arrives on
            # the row's counter right away (all of this CTA's cursor reads are done); the CTA
            # that arrives last moves the cursors at its end. Every CTA of the row has read the
            # cursors before it arrives, so nobody sees the new values in this launch.
            old = Int32(0)
            if tidx == 0:
                sCur[0] = mWpos[slot]
                sCur[1] = mOrig[slot]
                sCur[2] = mFcnt[slot]
                cute.arch.fence_acq_rel_gpu()
                old = cute.arch.atomic_add((mArr.iterator + slot).llvm_ptr, Int32(1),
                                           sem="relaxed", scope="gpu")
            cute.arch.barrier()
            h = sCur[0]
            origin = sCur[1]
            gen = sCur[2]
            flush = h >= Int32(L)
            hf = cutlass.min(h, Int32(L))                   # entries folded on a flush row
            m = Int32(_sel(flush, Int32(0), h))             # entries before this token
            origin2 = Int32(_sel(flush, (origin + h) % Int32(RING), origin))
            phys_new = (origin2 + m) % Int32(RING)
            g, beta = gdn_gates(self.has_g, self.has_beta, self.has_dt_bias, mG, mBeta, mALog,
                                mA, mDtBias, mB, row_b, hv)
            alpha = cute.math.exp(g)
            # v of the value rows this thread finishes (prefetched)
            vpre = [mV[row_b, hv, v0 + cutlass.min(tidx + it * NT, Int32(BV - 1))]
                    for it in range((BV + NT - 1) // NT)]

            if flush:
                # ================= flush row: fold the buffer into hi, write hi (+ lo) =========
                lf = tidx % TNF
                rpf = tidx // TNF
                # ---- 1-2. q / k (every warp, identical), ring staging
                kinv, kq = qk_normalize_warp(mQ, mK, row_b, hk, K, self.use_l2, scale, lane,
                                             sKn, sQn)
                for i in cutlass.range_constexpr(LP // NT):
                    t = tidx + i * NT
                    tc = cutlass.min(t, Int32(L - 1))
                    ph = (origin + tc) % Int32(RING)
                    sG[t] = Float32(_sel(t < hf, mGb[slot, hv, ph], Float32(0.0)))
                    if const_expr(self.split):
                        sBeta[t] = Float32(_sel(t < hf, mBb[slot, hv, ph], Float32(0.0)))
                for i in cutlass.range_constexpr((L * K + NT - 1) // NT):
                    e = tidx + i * NT
                    if const_expr((L * K) % NT != 0):
                        e = cutlass.min(e, Int32(L * K - 1))
                    j = e // K
                    col = e % K
                    ph = (origin + j) % Int32(RING)
                    kx = mKb[slot, hk, ph, col].to(Float32) * mKinvb[slot, hk, ph]
                    sKnB[e] = Float32(_sel(j < hf, kx, Float32(0.0)))
                for i in cutlass.range_constexpr((L * BV + NT - 1) // NT):
                    e = tidx + i * NT
                    if const_expr((L * BV) % NT != 0):
                        e = cutlass.min(e, Int32(L * BV - 1))
                    j = e // BV
                    vr = e % BV
                    ph = (origin + j) % Int32(RING)
                    if const_expr(self.split):
                        x = mVb[slot, hv, ph, v0 + vr].to(Float32)
                    else:
                        x = mUb[slot, hv, ph, v0 + vr]
                    sUB[e] = Float32(_sel(j < hf, x, Float32(0.0)))
                # ---- 2b. issue the hi tile loads (after the staging loads: fewer live registers)
                PWH = 4 if WHF >= 4 else WHF
                rHW = cute.make_rmem_tensor((WHF, RF, CNF), Uint32)
                for r in cutlass.range_constexpr(RF):
                    gRow = wHi[slot, hv, v0 + r * RPPF + rpf, None]
                    for c in cutlass.range_constexpr(CNF):
                        for q in cutlass.range_constexpr(WHF // PWH):
                            cute.autovec_copy(
                                cute.local_tile(gRow, (PWH,), ((c * TNF + lf) * (WHF // PWH) + q,)),
                                cute.local_tile(rHW[None, r, c], (PWH,), (q,)))
                rHsc = cute.make_rmem_tensor((RF, CNF), Float32)
                if const_expr(HFMT == "fp8"):
                    for r in cutlass.range_constexpr(RF):
                        sc = mHiS[slot, hv, v0 + r * RPPF + rpf]
                        for c in cutlass.range_constexpr(CNF):
                            rHsc[r, c] = sc
                if const_expr(HFMT == "nvfp4"):
                    hsg = mHiG[slot, hv]
                    for r in cutlass.range_constexpr(RF):
                        for c in cutlass.range_constexpr(CNF):
                            sb = lp.e4m3_byte_to_f32(
                                Uint32(mHiS[slot, hv, v0 + r * RPPF + rpf, c * TNF + lf]))
                            rHsc[r, c] = lp.mul_rn(sb, hsg)
                if tidx == 0:
                    sScal[1] = kq
                    sScal[2] = kinv
                cute.arch.barrier()
                # ---- 3. fold weights (fp32 / shared: e^{G_tot - G_j}; split: alpha_j)
                gtot = _sum_prefix(sG, Int32(L), L)
                for i in cutlass.range_constexpr(LP // NT):
                    t = tidx + i * NT
                    if const_expr(self.split):
                        sW[t] = cute.math.exp(sG[t])
                    else:
                        sW[t] = cute.math.exp(gtot - _sum_prefix(sG, t + 1, L))
                cute.arch.barrier()
                # ---- 4. decode hi -> fp32 tile (formats.decode, exact)
                rS = cute.make_rmem_tensor((CHUNK, RF, CNF), Float32)
                for r in cutlass.range_constexpr(RF):
                    for c in cutlass.range_constexpr(CNF):
                        vals = _decode_exact(HFMT, [rHW[q, r, c] for q in range(WHF)],
                                             rHsc[r, c])
                        for e in cutlass.range_constexpr(CHUNK):
                            rS[e, r, c] = vals[e]
                # ---- 5. fold
                rKc = cute.make_rmem_tensor((CHUNK, CNF), Float32)
                if const_expr(not self.split):
                    eT = cute.math.exp(gtot)
                    for r in cutlass.range_constexpr(RF):
                        for c in cutlass.range_constexpr(CNF):
                            for e in cutlass.range_constexpr(CHUNK):
                                rS[e, r, c] = eT * rS[e, r, c]
                    for j in cutlass.range(hf, unroll=1):
                        wj = sW[j]
                        for c in cutlass.range_constexpr(CNF):
                            cute.autovec_copy(
                                cute.local_tile(sKnB, (CHUNK,), (j * (K // CHUNK) + c * TNF + lf,)),
                                rKc[None, c])
                        for r in cutlass.range_constexpr(RF):
                            cf = wj * sUB[j * BV + r * RPPF + rpf]
                            for c in cutlass.range_constexpr(CNF):
                                for e in cutlass.range_constexpr(CHUNK):
                                    rS[e, r, c] = rS[e, r, c] + cf * rKc[e, c]
                else:
                    for j in cutlass.range(hf, unroll=1):
                        aj = sW[j]
                        bj = sBeta[j]
                        for c in cutlass.range_constexpr(CNF):
                            cute.autovec_copy(
                                cute.local_tile(sKnB, (CHUNK,), (j * (K // CHUNK) + c * TNF + lf,)),
                                rKc[None, c])
                        parts = []
                        for r in cutlass.range_constexpr(RF):
                            acc = Float32(0.0)
                            for c in cutlass.range_constexpr(CNF):
                                for e in cutlass.range_constexpr(CHUNK):
                                    s = aj * rS[e, r, c]
                                    rS[e, r, c] = s
                                    acc = acc + s * rKc[e, c]
                            parts.append(acc)
                        for r in cutlass.range_constexpr(RF):
                            sk = cute.arch.warp_reduction(parts[r], lambda a, b: a + b,
                                                          threads_in_group=TNF)
                            u = bj * (sUB[j * BV + r * RPPF + rpf] - sk)
                            for c in cutlass.range_constexpr(CNF):
                                for e in cutlass.range_constexpr(CHUNK):
                                    rS[e, r, c] = rS[e, r, c] + u * rKc[e, c]
                # ---- 6. S0 kn, S0 qn from the fresh fp32 fold (kn / qn read from smem)
                dks = [Float32(0.0)] * RF
                dqs = [Float32(0.0)] * RF
                for c in cutlass.range_constexpr(CNF):
                    for e in cutlass.range_constexpr(CHUNK):
                        col = (c * TNF + lf) * CHUNK + e
                        kx = sKn[col]
                        qx = sQn[col]
                        for r in cutlass.range_constexpr(RF):
                            dks[r] = dks[r] + rS[e, r, c] * kx
                            dqs[r] = dqs[r] + rS[e, r, c] * qx
                rest, base = treduce(dks + dqs, TNF, lf)
                for i in cutlass.range_constexpr(len(rest)):
                    jj = base + i
                    isq = jj >= Int32(RF)
                    jr = jj - Int32(_sel(isq, Int32(RF), Int32(0)))
                    sDot[Int32(_sel(isq, Int32(BV), Int32(0))) + jr * RPPF + rpf] = rest[i]
                # ---- 7. encode hi (stream 0) and lo (split: stream 1)
                s_glob = Float32(0.0)
                if const_expr(self.nvfp4_enc):
                    am = Float32(0.0)
                    for r in cutlass.range_constexpr(RF):
                        for c in cutlass.range_constexpr(CNF):
                            for e in cutlass.range_constexpr(CHUNK):
                                am = lp.fmax_nq(am, lp.abs_nan0_inf_sat(rS[e, r, c]))
                    am = cute.arch.warp_reduction(am, lp.fmax_nq, threads_in_group=32)
                    if lane == 0:
                        sAmax[warp] = am
                    cute.arch.barrier()
                    am = sAmax[0]
                    for w in cutlass.range_constexpr(1, NW):
                        am = lp.fmax_nq(am, sAmax[w])
                    s_glob = lp.nvfp4_global_scale(am)
                k0 = Uint32(0)
                k1 = Uint32(0)
                if const_expr(self.any_sr):
                    k0, k1 = lp.sr_key_from_seed(mSeed[0])
                copies = [(wHi, mHiS, mHiG, HFMT, self.rec_sr, 0, WHF)]
                if const_expr(self.split):
                    copies.append((wLo, mLoS, mLoG, RFMT, self.read_sr, 1, WLF))
                for ci in cutlass.range_constexpr(len(copies)):
                    wDst, mDS, mDG, fmt, sr, stream_id, WC = copies[ci]
                    PW = 4 if WC >= 4 else WC
                    w3 = lp.sr_counter_word3(stream_id, gen) if sr else Uint32(0)
                    if const_expr(fmt == "nvfp4"):
                        if tidx == 0:
                            mDG[slot, hv] = s_glob
                    # rows in a runtime loop (traced once): the row's values are picked out of
                    # the register tile with selects
                    for r in cutlass.range(RF, unroll=1):
                        vrow = v0 + r * RPPF + rpf
                        xr = cute.make_rmem_tensor((CHUNK, CNF), Float32)
                        for c in cutlass.range_constexpr(CNF):
                            for e in cutlass.range_constexpr(CHUNK):
                                x = rS[e, 0, c]
                                for rr in cutlass.range_constexpr(1, RF):
                                    x = Float32(_sel(r == Int32(rr), rS[e, rr, c], x))
                                xr[e, c] = x
                        rsc = Float32(0.0)
                        if const_expr(fmt == "fp8"):
                            ramax = Float32(0.0)
                            for c in cutlass.range_constexpr(CNF):
                                for e in cutlass.range_constexpr(CHUNK):
                                    ramax = lp.fmax_nq(ramax, lp.abs_nan0_inf_sat(xr[e, c]))
                            if const_expr(TNF > 1):
                                ramax = cute.arch.warp_reduction(ramax, lp.fmax_nq,
                                                                 threads_in_group=TNF)
                            rsc = lp.fp8_row_scale(ramax)
                            if lf == 0:
                                mDS[slot, hv, vrow] = rsc
                        for c in cutlass.range_constexpr(CNF):
                            xs = [xr[e, c] for e in range(CHUNK)]
                            blk = c * TNF + lf
                            wds = None
                            if const_expr(sr):
                                # Philox-4x32-10 of the chunk's 4 quads, rounds in a runtime loop
                                quad0 = Uint32(vrow) * Uint32(K // 4) + Uint32(blk * 4)
                                wds = []
                                for jq in cutlass.range_constexpr(4):
                                    p0 = quad0 + Uint32(jq)
                                    p1 = Uint32(hv)
                                    p2 = Uint32(slot)
                                    p3 = w3
                                    q0 = k0
                                    q1 = k1
                                    for _rnd in cutlass.range(lp.PHILOX_ROUNDS, unroll=1):
                                        hi0, lo0 = lp.mulhilo32(p0, lp.PHILOX_M0)
                                        hi1, lo1 = lp.mulhilo32(p2, lp.PHILOX_M1)
                                        n0 = hi1 ^ p1 ^ q0
                                        n2 = hi0 ^ p3 ^ q1
                                        p1 = lo1
                                        p3 = lo0
                                        p0 = n0
                                        p2 = n2
                                        q0 = q0 + Uint32(lp.PHILOX_W0)
                                        q1 = q1 + Uint32(lp.PHILOX_W1)
                                    wds += [p0, p1, p2, p3]
                            if const_expr(fmt == "nvfp4"):
                                ab = Float32(0.0)
                                for e in cutlass.range_constexpr(CHUNK):
                                    ab = lp.fmax_nq(ab, lp.abs_nan0_inf_sat(xs[e]))
                                s_blk = lp.nvfp4_block_scale(ab, s_glob)
                                rsc = lp.mul_rn(s_blk, s_glob)
                                mDS[slot, hv, vrow, blk] = (lp.pack_e4m3x4(s_blk, 0.0, 0.0, 0.0)
                                                            & Uint32(0xFF)).to(Uint8)
                            ow = _encode_chunk(fmt, sr, xs, wds, rsc)
                            rW = cute.make_rmem_tensor((WC,), Uint32)
                            for q in cutlass.range_constexpr(WC):
                                rW[q] = ow[q]
                            gDst = wDst[slot, hv, vrow, None]
                            for q in cutlass.range_constexpr(WC // PW):
                                cute.autovec_copy(cute.local_tile(rW, (PW,), (q,)),
                                                  cute.local_tile(gDst, (PW,),
                                                                  (blk * (WC // PW) + q,)))
            else:
                # ================= non-flush row: read copy + buffer, no state write ===========
                lr = tidx % TNR
                rp = tidx // TNR
                # ---- 1. issue the read tile loads (128-bit; 64-bit for nvfp4)
                rRW = cute.make_rmem_tensor((WPR, RR, CNR), Uint32)
                for r in cutlass.range_constexpr(RR):
                    gRow = wRd[slot, hv, v0 + r * RPPR + rp, None]
                    for c in cutlass.range_constexpr(CNR):
                        cute.autovec_copy(cute.local_tile(gRow, (WPR,), (c * TNR + lr,)),
                                          rRW[None, r, c])
                # ring entries needed later, all loads in flight together with the tile:
                # the keys of the coefficient dots (warp w: positions w, w + NW, ...) and the u
                # entries of the value rows this thread finishes
                kpre = []
                for i in cutlass.range_constexpr(LW // NW):
                    p = warp + i * NW
                    pc = cutlass.min(p, Int32(L - 1))
                    ph = (origin + pc) % Int32(RING)
                    kpre.append((p, pc, mKinvb[slot, hk, ph],
                                 [mKb[slot, hk, ph, lane + jj * 32] for jj in range(K // 32)]))
                upre = []
                for it in cutlass.range_constexpr((BV + NT - 1) // NT):
                    vrc = cutlass.min(tidx + it * NT, Int32(BV - 1))
                    upre.append([mUb[slot, hv, (origin + p) % Int32(RING), v0 + vrc]
                                 for p in range(L)])
                rRsc = cute.make_rmem_tensor((RR, CNR), Float32)
                if const_expr(RFMT == "fp8"):
                    for r in cutlass.range_constexpr(RR):
                        rRsc[r, 0] = mRdS[slot, hv, v0 + r * RPPR + rp]
                if const_expr(RFMT == "nvfp4"):
                    sg14 = mRdG[slot, hv] * Float32(16384.0)
                    for r in cutlass.range_constexpr(RR):
                        for c in cutlass.range_constexpr(CNR):
                            sb = lp.e4m3_byte_to_f32(
                                Uint32(mRdS[slot, hv, v0 + r * RPPR + rp, c * TNR + lr]))
                            rRsc[r, c] = sb * sg14
                # ---- 2. q / k, g of the buffered entries
                kinv, kq = qk_normalize_warp(mQ, mK, row_b, hk, K, self.use_l2, scale, lane,
                                             sKn, sQn)
                for i in cutlass.range_constexpr(LP // NT):
                    t = tidx + i * NT
                    tc = cutlass.min(t, Int32(L - 1))
                    ph = (origin + tc) % Int32(RING)
                    sG[t] = Float32(_sel(t < m, mGb[slot, hv, ph], Float32(0.0)))
                cute.arch.barrier()
                # ---- 3. coefficients c_p = e^{G_{m-1}-G_p} (kn_p . kn), d_p likewise with qn
                gm = _sum_prefix(sG, m, L)
                for i in cutlass.range_constexpr(LW // NW):
                    p, pc, kinvp, kxs = kpre[i]
                    dk = Float32(0.0)
                    dq = Float32(0.0)
                    for jj in cutlass.range_constexpr(K // 32):
                        col = lane + jj * 32
                        x = kxs[jj].to(Float32) * kinvp
                        dk = dk + x * sKn[col]
                        dq = dq + x * sQn[col]
                    dk = cute.arch.warp_reduction(dk, lambda a, b: a + b, threads_in_group=32)
                    dq = cute.arch.warp_reduction(dq, lambda a, b: a + b, threads_in_group=32)
                    w = cute.math.exp(gm - _sum_prefix(sG, pc + 1, L))
                    ok = p < m
                    if lane == 0:
                        sC[p] = Float32(_sel(ok, dk * w, Float32(0.0)))
                        sD[p] = Float32(_sel(ok, dq * w, Float32(0.0)))
                eG = cute.math.exp(gm)
                if tidx == 0:
                    sScal[1] = kq
                    sScal[2] = kinv
                # ---- 4. S0 kn, S0 qn from the read copy (one pass)
                rKn = cute.make_rmem_tensor((CER, CNR), Float32)
                rQn = cute.make_rmem_tensor((CER, CNR), Float32)
                for c in cutlass.range_constexpr(CNR):
                    cute.autovec_copy(cute.local_tile(sKn, (CER,), (c * TNR + lr,)), rKn[None, c])
                    cute.autovec_copy(cute.local_tile(sQn, (CER,), (c * TNR + lr,)), rQn[None, c])
                dks = []
                dqs = []
                for r in cutlass.range_constexpr(RR):
                    ak = Float32(0.0)
                    aq = Float32(0.0)
                    for c in cutlass.range_constexpr(CNR):
                        vals = _read_chunk_values(RFMT, [rRW[q, r, c] for q in range(WPR)])
                        if const_expr(RFMT == "nvfp4"):
                            bk = Float32(0.0)
                            bq = Float32(0.0)
                            for e in cutlass.range_constexpr(CER):
                                bk = bk + vals[e] * rKn[e, c]
                                bq = bq + vals[e] * rQn[e, c]
                            ak = ak + bk * rRsc[r, c]
                            aq = aq + bq * rRsc[r, c]
                        else:
                            for e in cutlass.range_constexpr(CER):
                                ak = ak + vals[e] * rKn[e, c]
                                aq = aq + vals[e] * rQn[e, c]
                    if const_expr(RFMT == "fp8"):
                        ak = ak * rRsc[r, 0]
                        aq = aq * rRsc[r, 0]
                    dks.append(ak)
                    dqs.append(aq)
                rest, base = treduce(dks + dqs, TNR, lr)
                for i in cutlass.range_constexpr(len(rest)):
                    jj = base + i
                    isq = jj >= Int32(RR)
                    jr = jj - Int32(_sel(isq, Int32(RR), Int32(0)))
                    sDot[Int32(_sel(isq, Int32(BV), Int32(0))) + jr * RPPR + rp] = rest[i]
                cute.arch.barrier()
                # ---- 5. buffer terms: Sk = e^{G_{m-1}} S0 kn + sum_{p<m} c_p u_p (Sq likewise)
                for it in cutlass.range_constexpr((BV + NT - 1) // NT):
                    vr = tidx + it * NT
                    if vr < BV:
                        sk = eG * sDot[vr]
                        sq = eG * sDot[BV + vr]
                        for p in cutlass.range_constexpr(L):
                            ok = Int32(p) < m
                            up = upre[it][p]
                            sk = sk + Float32(_sel(ok, sC[p] * up, Float32(0.0)))
                            sq = sq + Float32(_sel(ok, sD[p] * up, Float32(0.0)))
                        sDot[vr] = sk
                        sDot[BV + vr] = sq

            cute.arch.barrier()
            # ================= per value row: u, o, appends ===================================
            kq = sScal[1]
            kinv = sScal[2]
            for it in cutlass.range_constexpr((BV + NT - 1) // NT):
                vr = tidx + it * NT
                if vr < BV:
                    vg = v0 + vr
                    sk = sDot[vr]
                    sq = sDot[BV + vr]
                    vraw = vpre[it]
                    u = beta * (vraw.to(Float32) - alpha * sk)
                    o = alpha * sq + kq * u
                    mOut[row_b, hv, vg] = o.to(self.act_dtype)
                    mUb[slot, hv, phys_new, vg] = u
                    if const_expr(self.split):
                        mVb[slot, hv, phys_new, vg] = vraw
            if vblk == 0:
                if hv % self.group == 0:
                    for i in cutlass.range_constexpr((K + NT - 1) // NT):
                        col = tidx + i * NT
                        if col < K:
                            mKb[slot, hk, phys_new, col] = mK[row_b, hk, col]
                    if tidx == 0:
                        mKinvb[slot, hk, phys_new] = kinv
                if tidx == 0:
                    mGb[slot, hv, phys_new] = g
                    if const_expr(self.split):
                        mBb[slot, hv, phys_new] = beta
            # ================= the last-arriving CTA of the row moves the cursors ==============
            if tidx == 0:
                if old == Int32(self.HV * self.nsplit - 1):
                    cute.arch.fence_acq_rel_gpu()
                    mWpos[slot] = m + Int32(1)
                    mOrig[slot] = origin2
                    if flush:
                        mFcnt[slot] = gen + Int32(1)
                    mPend[slot] = Int32(0)
                    mArr[slot] = Int32(0)


# --------------------------------------------------------------------------------------
# compile (tensor-free, cached) and launch
# --------------------------------------------------------------------------------------

_CACHE = KernelCache("gdn_replay")


def _dn(d):
    return None if d is None else dtype_name(d)


def _resolve(pair, act_dtype, H, HV, K, V, L, ring, g_dtype, beta_dtype, alog_dtype, a_dtype,
             dt_bias_dtype, b_dtype, use_qk_l2norm, has_idx, block_v, num_threads,
             min_blocks_per_mp=None):
    rf, rr, cf, cr, split = pair_key(pair)
    tile = replay_tile(rf, cf, K, V, L, block_v, num_threads)
    if min_blocks_per_mp is None:
        min_blocks_per_mp = max(1, 65536 // (tile.num_threads * REG_CAP))
    has_g = g_dtype is not None
    kw = dict(
        read_fmt=rf, read_rounding=rr, rec_fmt=cf, rec_rounding=cr, split=split,
        act_dtype=dtype_name(act_dtype), H=int(H), HV=int(HV), K=int(K), V=int(V), L=int(L),
        ring=int(ring), g_dtype=_dn(g_dtype), beta_dtype=_dn(beta_dtype),
        alog_dtype=None if has_g else _dn(alog_dtype), a_dtype=None if has_g else _dn(a_dtype),
        dt_bias_dtype=None if has_g else _dn(dt_bias_dtype),
        b_dtype=None if beta_dtype is not None else _dn(b_dtype),
        use_qk_l2norm=bool(use_qk_l2norm), has_state_batch_indices=bool(has_idx),
        block_v=tile.block_v, num_threads=tile.num_threads,
        min_blocks_per_mp=int(min_blocks_per_mp),
    )
    key = ("gdn_replay", common.arch_key()) + tuple(kw.values())
    return kw, key


def _copy_fakes(fmt: str, NS, HV: int, V: int, K: int):
    """(data int32 words, scale, global scale) fake tensors of one stored copy (contiguous)."""
    f = common.fake_tensor
    W = K * FMT_BITS[fmt] // 32
    data = f(Int32, (NS, HV, V, W), (HV * V * W, V * W, W, 1), align_bytes=16)
    scale = gscale = None
    if fmt == "fp8":
        scale = f(Float32, (NS, HV, V), (HV * V, V, 1), align_bytes=4)
    elif fmt == "nvfp4":
        nb = K // 16
        scale = f(Uint8, (NS, HV, V, nb), (HV * V * nb, V * nb, nb, 1), align_bytes=4)
        gscale = f(Float32, (NS, HV), (HV, 1), align_bytes=4)
    return data, scale, gscale


def _fake_args(op: GDNReplayDecode):
    """Fake tensors. Cache tensors: contiguous, num_slots symbolic; state copies as int32 word
    views; nvfp4 block scales as uint8. Per-token inputs: batch symbolic, unit last stride."""
    H, HV, K, V, R = op.H, op.HV, op.K, op.V, op.ring
    f = common.fake_tensor
    NS, batch = common.sym(), common.sym()
    hi = _copy_fakes(op.rec_fmt, NS, HV, V, K)
    lo = _copy_fakes(op.read_fmt, NS, HV, V, K) if op.split else (None, None, None)
    at = op.act_dtype
    kb = f(at, (NS, H, R, K), (H * R * K, R * K, K, 1), align_bytes=16)
    kinvb = f(Float32, (NS, H, R), (H * R, R, 1), align_bytes=4)
    gb = f(Float32, (NS, HV, R), (HV * R, R, 1), align_bytes=4)
    ub = f(Float32, (NS, HV, R, V), (HV * R * V, R * V, V, 1), align_bytes=16)
    vb = f(at, (NS, HV, R, V), (HV * R * V, R * V, V, 1), align_bytes=16) if op.split else None
    bb = f(Float32, (NS, HV, R), (HV * R, R, 1), align_bytes=4) if op.split else None
    curs = [f(Int32, (NS,), (1,), align_bytes=4) for _ in range(5)]
    seed = f(Int64, (1,), (1,), align_bytes=8) if op.any_sr else None
    q = f(at, (batch, H, K), ("dyn", "dyn", 1))
    k = f(at, (batch, H, K), ("dyn", "dyn", 1))
    v = f(at, (batch, HV, V), ("dyn", "dyn", 1))
    out = f(at, (batch, HV, V), ("dyn", "dyn", 1))
    g = f(op.g_dtype, (batch, HV), ("dyn", "dyn")) if op.has_g else None
    beta = f(op.beta_dtype, (batch, HV), ("dyn", "dyn")) if op.has_beta else None
    alog = a = dtb = b = None
    if not op.has_g:
        alog = f(op.alog_dtype, (HV,), ("dyn",))
        a = f(op.a_dtype, (batch, HV), ("dyn", "dyn"))
        if op.has_dt_bias:
            dtb = f(op.dt_bias_dtype, (HV,), ("dyn",))
    if not op.has_beta:
        b = f(op.b_dtype, (batch, HV), ("dyn", "dyn"))
    idx = f(Int32, (batch,), ("dyn",)) if op.has_idx else None
    return (hi[0], hi[1], hi[2], lo[0], lo[1], lo[2], kb, kinvb, gb, ub, vb, bb, *curs, seed,
            q, k, v, g, beta, alog, a, dtb, b, idx, out, Float32(1.0), Int32(-1),
            common.fake_stream())


def compile_gdn_replay(pair, act_dtype, H: int, HV: int, K: int, V: int, L: int, ring: int,
                       g_dtype=None, beta_dtype=None, alog_dtype=None, a_dtype=None,
                       dt_bias_dtype=None, b_dtype=None, use_qk_l2norm: bool = True,
                       has_state_batch_indices: bool = True, block_v: Optional[int] = None,
                       num_threads: Optional[int] = None,
                       min_blocks_per_mp: Optional[int] = None) -> CompiledKernel:
    """Compile (once per key, tensor-free, TVM-FFI) the GDN replay decode kernel for precision
    ``pair`` (name or PrecisionPair), buffer length ``L`` and ring capacity ``ring``.

    Call ``k.ffi(hi_words, hi_scale, hi_gscale, lo_words, lo_scale, lo_gscale, k_buf, kinv_buf,
    g_buf, u_buf, v_buf, beta_buf, write_pos, ring_origin, flush_count, pending, arrive, seed, q,
    k, v, g, beta, A_log, a, dt_bias, b, state_batch_indices, out, scale, pad_slot_id)`` (``None``
    for what the variant does not use; see :func:`gdn_replay_decode_cute`)."""
    if not common.HAS_TVM_FFI:
        raise RuntimeError("tensor-free compile needs apache-tvm-ffi")
    kw, key = _resolve(pair, act_dtype, H, HV, K, V, L, ring, g_dtype, beta_dtype, alog_dtype,
                       a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm, has_state_batch_indices,
                       block_v, num_threads, min_blocks_per_mp)

    def build() -> CompiledKernel:
        op = GDNReplayDecode(**kw)
        compiled, secs = common.cute_compile(op, *_fake_args(op), use_tvm_ffi=True)
        return CompiledKernel(compiled, key, secs, use_ffi=True,
                              meta={"tile": op.tile, "any_sr": op.any_sr, "split": op.split})

    return _CACHE.get_or_compile(key, build)


def compile_only(pair="nvfp4/fp16sr", act_dtype="bfloat16", H=16, HV=32, K=128, V=128, L=16,
                 ring=None, g_dtype=None, beta_dtype=None, alog_dtype="float32",
                 a_dtype="bfloat16", dt_bias_dtype="float32", b_dtype="bfloat16",
                 use_qk_l2norm=True, has_state_batch_indices=True, block_v=None,
                 num_threads=None, min_blocks_per_mp=None, keep_ptx: bool = False,
                 dump_dir: Optional[str] = None):
    """Compile one variant without launching (CPU-only with ``CUTE_DSL_ARCH=sm_90a``); defaults:
    Qwen3.5-4B layer, L = 16, raw gates. Returns ``(kernel, ptx or None)``."""
    ring = L + 1 if ring is None else ring
    if not keep_ptx and dump_dir is None:
        return compile_gdn_replay(pair, act_dtype, H, HV, K, V, L, ring, g_dtype, beta_dtype,
                                  alog_dtype, a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm,
                                  has_state_batch_indices, block_v, num_threads,
                                  min_blocks_per_mp), None
    kw, key = _resolve(pair, act_dtype, H, HV, K, V, L, ring, g_dtype, beta_dtype, alog_dtype,
                       a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm, has_state_batch_indices,
                       block_v, num_threads, min_blocks_per_mp)
    op = GDNReplayDecode(**kw)
    with common.dump_ptx(cubin=dump_dir is not None, dir=dump_dir) as d:
        compiled, secs = common.cute_compile(op, *_fake_args(op), dump=d)
        k = CompiledKernel(compiled, key, secs, use_ffi=common.HAS_TVM_FFI,
                           meta={"tile": op.tile, "any_sr": op.any_sr, "split": op.split})
        k.ptx = d.read() or None
        if dump_dir is None:
            d.cleanup()
    return k, k.ptx


# ---- torch-facing launcher -----------------------------------------------------------------

def supports_cache(cache) -> bool:
    """True when this kernel has a tiling for ``cache`` (K % 32 == 0, V tiles, shared memory for
    the fold staging: L <= 32 at K = V = 128), so a dispatcher can fall back to torch otherwise."""
    try:
        rf, _, cf, _, _ = pair_key(cache.pair)
        return bool(_valid_block_vs(rf, cf, int(cache.K), int(cache.V), int(cache.buffer_len)))
    except Exception:  # noqa: BLE001
        return False


def _words(t, fmt):
    import torch

    if t.dtype == torch.int32:
        return t
    if fmt == "fp8" and t.dtype == torch.float8_e4m3fn:
        t = t.view(torch.uint8)
    return t.view(torch.int32)


def _u8(t):
    import torch

    return None if t is None else (t if t.dtype == torch.uint8 else t.view(torch.uint8))


def _cache_views(cache, rf, cf, split):
    """int32 word views of the stored copies (+ uint8 nvfp4 scales), memoised on the cache and
    rebuilt when a tensor was replaced."""
    hi, lo = cache.hi, cache.lo
    ptrs = (hi.data.data_ptr(), None if lo is None else lo.data.data_ptr(),
            None if hi.scale is None else hi.scale.data_ptr(),
            None if lo is None or lo.scale is None else lo.scale.data_ptr())
    memo = getattr(cache, "_gdn_replay_views", None)
    if memo is not None and memo[0] == ptrs:
        return memo[1]

    def cp(enc, fmt):
        sc = enc.scale
        if fmt == "nvfp4":
            sc = _u8(sc)
        elif fmt != "fp8":
            sc = None
        return (_words(enc.data, fmt), sc, enc.global_scale if fmt == "nvfp4" else None)

    views = cp(hi, cf) + (cp(lo, rf) if split else (None, None, None))
    cache._gdn_replay_views = (ptrs, views)
    return views


_LAUNCH: dict = {}


def _dt(t):
    return None if t is None else t.dtype


def gdn_replay_decode_cute(cache, q, k, v, g=None, beta=None, A_log=None, a=None, dt_bias=None,
                           b=None, scale=None, use_qk_l2norm: bool = True,
                           state_batch_indices=None, pad_slot_id: int = -1, out=None,
                           block_v: Optional[int] = None, num_threads: Optional[int] = None,
                           min_blocks_per_mp: Optional[int] = None):
    """One GDN ReplaySSM decode step (T = 1, committed) on a ``GDNReplayCache`` on CUDA.

    Inputs validated by the torch layer: q, k [batch, H, K], v / out [batch, HV, V] in the cache's
    activation dtype (unit last stride); gates either ``g``, ``beta`` [batch, HV] or raw ``A_log``
    [HV], ``a`` [batch, HV], ``dt_bias`` [HV], ``b`` [batch, HV]; cache tensors contiguous;
    ``state_batch_indices`` int32 [batch] (unique slots) or None. ``scale`` None -> K^-0.5.
    Launches one kernel on the current torch stream, allocates nothing when ``out`` is given,
    never synchronises (CUDA-graph capturable once compiled). Returns ``out``.
    """
    batch, H, K = q.shape
    HV, Vd = v.shape[1], v.shape[2]
    if out is None:
        out = v.new_empty(v.shape)
    if batch == 0:
        return out
    if scale is None:
        scale = K ** -0.5
    rf, rr, cf, cr, split = pair_key(cache.pair)
    L, ring = cache.buffer_len, cache.ring
    fast_key = (rf, rr, cf, cr, split, q.dtype, H, HV, K, Vd, L, ring, _dt(g), _dt(beta),
                None if g is not None else _dt(A_log), None if g is not None else _dt(a),
                None if g is not None else _dt(dt_bias), None if beta is not None else _dt(b),
                bool(use_qk_l2norm), state_batch_indices is None,
                batch if block_v is None else -block_v, num_threads, min_blocks_per_mp)
    ent = _LAUNCH.get(fast_key)
    if ent is None:
        bv = block_v
        if bv is None:
            bv = choose_block_v(batch, HV, K, Vd, rf, cf, L)
        kern = compile_gdn_replay(
            cache.pair, q.dtype, H, HV, K, Vd, L, ring, _dt(g), _dt(beta),
            None if g is not None else _dt(A_log), None if g is not None else _dt(a),
            None if g is not None else _dt(dt_bias), None if beta is not None else _dt(b),
            use_qk_l2norm, state_batch_indices is not None, bv, num_threads, min_blocks_per_mp)
        ent = (kern.ffi, kern.meta["any_sr"])
        _LAUNCH[fast_key] = ent
    fn, any_sr = ent
    hw, hs, hg, lw, ls, lg = _cache_views(cache, rf, cf, split)
    if g is not None:
        A_log = a = dt_bias = None
    if beta is not None:
        b = None
    fn(hw, hs, hg, lw, ls, lg, cache.k_buf, cache.kinv_buf, cache.g_buf, cache.u_buf,
       cache.v_buf if split else None, cache.beta_buf if split else None, cache.write_pos,
       cache.ring_origin, cache.flush_count, cache.pending, cache.arrive,
       cache.seed if any_sr else None, q, k, v, g, beta, A_log, a, dt_bias, b,
       state_batch_indices, out, float(scale), int(pad_slot_id))
    return out
