"""Gated DeltaNet ReplaySSM decode step (one token per row, one launch -- two at once with the
split launch, :func:`use_split`) in CuTe DSL.

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

Two implementations share this interface and semantics. The description above is **v1** (the
previous kernel, still selectable: ``impl="v1"`` or ``REPLAYSSM_GDN_REPLAY_IMPL=v1``). **v2**
(:class:`GDNReplayDecodeV2`, the default where supported: K = 128, L <= 32) differs in:

* mapping: warp w owns ``tpw`` tiles of 16 value rows (m16 mma tiles; default tpw = 1: 256
  threads per whole head, <= 128 registers; tpw = 2 - 128 threads, ~255 registers - via
  REPLAYSSM_GDN_REPLAY_TPW for tuning), lane (g, t) holds rows g and g + 8 of each tile; lane t
  loads 16-byte chunks at byte 64 i + 16 t of a row (coalesced) -- except fp32 read copies at
  one tile per warp, where each warp instruction loads one whole 512-byte row (``whole_rows``;
  the row sums by one transposed butterfly, then moved to the (g, 0) lanes);
* the CTA preamble (:func:`preamble_level`; level 3 by default, 4 for nvfp4 read copies): the
  cursor, gate and q / k loads are issued, then the read tile, and only then are the small
  loads used (data-dependent arrive, no fence); level 4 issues the row's gate inputs, q / k and
  v before its slot is known; fp32 read copies in (g, t) chunks use level 1 (cursors with a
  fenced arrive and the gates first, then the tile). v is loaded as raw bits behind the tile
  for fp32 whole-row tiles (:func:`v_late_default`), and non-flush rows take warp 0's ring
  g / kinv by cp.async (no register held: ptxas spilled them while still in flight);
  ring loads are predicated on p < h and overlap the B-fragment build and the main dot;
* non-flush dot on tensor cores (``mma.sync.m16n8k16``, fp32 accumulate) for fp16 / bf16 / fp8 /
  nvfp4 read copies: A = the read copy, exactly representable in fp16 (fp16 itself, e4m3 values,
  e2m1 * block scale * 2^-14 by one ``mul.f16x2``; nvfp4 decode ~2.5 instructions / element),
  B = 8 columns [kn_hi, kn_mid, kn_lo, qn_hi, qn_mid, qn_lo, 0, 0] (fp16 pieces after a power of
  two scaling, bf16 pieces for bf16 copies: ~2^-33 / 2^-24 relative), so the dot agrees with the
  fp32 dot at fp32 rounding level; the mma K order follows the registers and B is permuted to
  match (built once per CTA in shared memory). fp32 read copies: CUDA-core FMAs;
* buffer terms: lane t handles positions p = t (mod 4) of its rows (u loads predicated on p < h),
  combined with the dot partials by one quad butterfly; the decay prefix sums are sequential
  (like a CUDA cumsum) because exp(G_a - G_b) amplifies any reordering;
* flush, split pairs, chunked (WY) form instead of the sequential replay: P = S_hi Kn^T (3xTF32
  mma over all buffered keys at once), R = beta (v - e^{G} P), U = (I + A)^-1 R by forward
  substitution across the lane quad (A_ji = beta_j e^{G_j - G_i} kn_i.kn_j, Gram on CUDA cores,
  decays from direct partial sums), then S = e^{G_tot} S_hi + (U diag(w)) Kn as 3xTF32 mma with
  the fold kept in registers, one 16-row tile at a time; shared pairs: the same rank-L update
  with the buffered u. nvfp4 copies need the matrix amax first: with one row tile per warp
  (the default) the fold stays in registers across the CTA amax, then every copy is encoded;
  with two, each tile is folded again from the still unwritten hi after the amax;
* encoders: hardware RN converts (fp16 / bf16 / e4m3 satfinite, after the same clamps), SR fp16
  by ``lowprec.round_f16_sr`` (exact for every input, its subnormal range included), SR bf16 by
  adding the random bits then ``cvt.rz``, nvfp4 RN by fast IEEE division (the div.rn fast path
  with a per-block refined reciprocal) + magic-number rounding + fp16 bit layout for the codes;
  bit-identical to formats.encode, with the generic per-element code as a warp-level fallback
  for NaN / inf and divisors outside [2^-100, 2^100] (RN fp8 / nvfp4) and for fp8 / nvfp4 SR.
  Philox is unchanged (10 rounds, straight-line);
* occupancy (:func:`v2_default_min_blocks`): read copies narrower than fp32 run 3 CTAs per SM (4
  for an nvfp4 read copy with a 16-bit recurrence) once a launch has ``OCC_MIN_CTAS`` CTAs -- the
  non-flush rows are latency-bound at 2; the flush path then spills, which costs less than it
  gains there and more than it gains in smaller launches (which keep 2); nvfp4 read copies in a
  launch of at most one CTA per SM take the whole register file (:func:`few_ctas_full_cap`).

* split launch (:func:`use_split`; read copies narrower than fp32, from ``SPLIT_MIN_BATCH``
  rows, L <= ``SPLIT_MAX_L``): after the flush-first order, the flush rows run in a build of their own (``rows`` = 2:
  no read tile, 256 threads, 2 CTAs per SM, a persistent grid of ``flush_positions`` positions
  walking the order's leading flush rows) on a high-priority side stream while the other rows
  run in a build without flush code (``rows`` = 1: two 16-row tiles per warp, 128 threads per
  value head, 5-6 CTAs per SM), both taking the rows' cursors from the order's entries; each
  launch arrives on and publishes only its own rows.

Public entry points: :func:`compile_gdn_replay`, :func:`gdn_replay_decode_cute`,
:func:`compile_only`, :func:`replay_tile`, :func:`choose_block_v`, :func:`choose_block_v_v2`,
:func:`launch_block_v`, :func:`resolve_impl`.
"""

from __future__ import annotations

import functools
import os
from typing import Optional, Tuple

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Float32, Int32, Int64, Uint8, Uint32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import cpasync
from cutlass.cutlass_dsl import T

import cuda.bindings.driver as cuda  # a dependency of nvidia-cutlass-dsl

from . import common
from . import lowprec as lp
from .common import CompiledKernel, KernelCache, dtype_name, to_cute_dtype
from .gdn_standard import (gate_input_loads, gdn_gates, gdn_gates_from_loads, init_gate_inputs,
                           launch_gates, qk_normalize_warp, slot_of_row, treduce)

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

FMT_BITS = common.FMT_BITS
CHUNK = 16                      # flush mapping: elements per thread chunk (one nvfp4 block)
MAX_FLUSH_ELEMS = 64            # fp32 fold values per thread
SMEM_LIMIT = 47 * 1024          # static shared memory budget (bytes)
HALVES_SMEM_LIMIT = 100 * 1024  # v2 with flush column halves (one CTA per SM)
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


def _sr_words16(quad0, c1, c2, w3, k0, k1, rounds: int):
    """The 16 Philox words (``rounds`` rounds) of elements 4*quad0 .. 4*quad0 + 15."""
    ws = []
    for jq in range(4):
        o = lp.philox4x32(Uint32(quad0) + Uint32(jq), c1, c2, w3, k0, k1, rounds)
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
                 num_threads: Optional[int] = None, min_blocks_per_mp: Optional[int] = None,
                 pdl: Optional[int] = None, philox_rounds: Optional[int] = None):
        self.pdl = common.pdl_mode(pdl)
        # the SR generator's rounds (the cache's ``philox_rounds``, by :func:`_resolve`)
        self.philox_rounds = lp.PHILOX_ROUNDS if philox_rounds is None else int(philox_rounds)
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
        init_gate_inputs(self, g_dtype, beta_dtype, alog_dtype, a_dtype, dt_bias_dtype, b_dtype)
        self.use_l2 = bool(use_qk_l2norm)
        self.has_idx = bool(has_state_batch_indices)
        self.block_v_req, self._mbp_req = block_v, min_blocks_per_mp
        self.tile = self._make_tile(block_v, num_threads)
        self.block_v, self.num_threads = self.tile.block_v, self.tile.num_threads
        self.nwarps = self.num_threads // 32
        self.nsplit = V // self.block_v
        # occupancy hint (.minnctapersm): caps registers at 64K / (k * threads); the default caps
        # them at REG_CAP so the flush path (64 fold values per thread) does not set the
        # occupancy of the non-flush path; 0 lets ptxas choose
        if min_blocks_per_mp is None:
            min_blocks_per_mp = self._default_min_blocks()
        self.min_blocks_per_mp = int(min_blocks_per_mp)
        # flush-first order (v2 decode only): grid position -> (row, slot[, cursors]) from
        # cute_kernels.row_order, run right before this launch
        self.row_order = self.order_cursors = False
        self.rows = self.flush_positions = 0      # (v2: a split launch's half)
        self.npair = 1                            # (v2: 2 = each CTA one of a cluster pair)
        self.flush_pf = False                     # (v2: the flush's L2 prefetch of the hi rows)
        self.late_arrive_check = self.k_append_regs = False     # (v2: the step tail, TAIL_ENV)

    def _default_min_blocks(self):
        return max(1, 65536 // (self.num_threads * REG_CAP))

    def _make_tile(self, block_v, num_threads):
        return replay_tile(self.read_fmt, self.rec_fmt, self.K, self.V, self.L, block_v,
                           num_threads)

    # ---------------------------------------------------------------- device helpers (all kernels)
    def _copy_word_views(self, mHi, mHiS, mHiG, mLo, mLoS, mLoG):
        """32-bit word views of the stored copies: (hi, lo, read copy) words and the read copy's
        (scale, global scale); lo is hi's view for shared pairs (no lo copy)."""
        wHi = cute.recast_tensor(mHi, Uint32)
        wRd = wHi
        wLo = wHi
        if self.split:
            wLo = cute.recast_tensor(mLo, Uint32)
            wRd = wLo
            mRdS, mRdG = mLoS, mLoG
        else:
            mRdS, mRdG = mHiS, mHiG
        return wHi, wLo, wRd, mRdS, mRdG

    @cute.jit
    def _append_gate_entry(self, mGb: cute.Tensor, mBb: Optional[cute.Tensor], slot: Int32,
                           hv: Int32, phys: Int32, g: Float32, beta: Float32, tidx: Int32):
        """Thread 0 appends the token's g (split pairs: and beta) at ring position ``phys``."""
        if tidx == 0:
            mGb[slot, hv, phys] = g
            if const_expr(self.split):
                mBb[slot, hv, phys] = beta

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
                 mIdx: Optional[cute.Tensor], mOrder: Optional[cute.Tensor],
                 mOut: cute.Tensor, scale: Float32,
                 pad_slot_id: Int32, stream: cuda.CUstream):
        batch = mQ.shape[0]
        npos = batch
        if const_expr(self.rows == 2):            # the split's persistent flush grid
            npos = cutlass.min(batch, Int32(self.flush_positions))
        self.kernel(mHi, mHiS, mHiG, mLo, mLoS, mLoG, mKb, mKinvb, mGb, mUb, mVb, mBb, mWpos,
                    mOrig, mFcnt, mPend, mArr, mSeed, mQ, mK, mV, mG, mBeta, mALog, mA, mDtBias,
                    mB, mIdx, mOrder, mOut, scale, pad_slot_id).launch(
            # flush-first order (row_order): the heads of a grid position adjacent, so the
            # flushing rows' CTAs are dispatched first
            grid=([self.HV * self.nsplit, npos, 1] if self.row_order
                  else [batch, self.HV, self.nsplit * self.npair]),
            block=[self.num_threads, 1, 1],
            stream=stream,
            use_pdl=bool(self.pdl),
            min_blocks_per_mp=self.min_blocks_per_mp,
            # an explicit carveout stops the DSL from querying the device (GPU-less compiles)
            preferred_smem_carveout=-1 if self.min_blocks_per_mp > 1 else None,
            **({"cluster": [1, 1, 2]} if self.npair == 2 else {}),
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
               mIdx: Optional[cute.Tensor], mOrder: Optional[cute.Tensor],
               mOut: cute.Tensor, scale: Float32,
               pad_slot_id: Int32):
        common.pdl_prologue(self.pdl)
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

        wHi, wLo, wRd, mRdS, mRdG = self._copy_word_views(mHi, mHiS, mHiG, mLo, mLoS, mLoG)

        slot, valid = slot_of_row(self.has_idx, mIdx, row_b, mWpos.shape[0], pad_slot_id)
        if valid:
            # ---- cursors (thread 0, broadcast through smem); arrive right away
            old = common.read_cursors_and_arrive(sCur, mWpos, mOrig, mFcnt, mArr, slot, tidx)
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
                                # Philox-4x32 of the chunk's 4 quads, rounds in a runtime loop
                                quad0 = Uint32(vrow) * Uint32(K // 4) + Uint32(blk * 4)
                                wds = []
                                for jq in cutlass.range_constexpr(4):
                                    p0 = quad0 + Uint32(jq)
                                    p1 = Uint32(hv)
                                    p2 = Uint32(slot)
                                    p3 = w3
                                    q0 = k0
                                    q1 = k1
                                    for _rnd in cutlass.range(self.philox_rounds, unroll=1):
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
                self._append_gate_entry(mGb, mBb, slot, hv, phys_new, g, beta, tidx)
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
# v2: tensor-core read dot, chunked (WY) split fold, fast encoders (see the v2 docstring)
# --------------------------------------------------------------------------------------

V2_K = 128                       # head_k_dim the v2 kernel is written for
V2_BLOCK_VS = (128, 64, 32, 16)  # value rows per CTA (16 per warp)
V2_MAX_L = 32
MMA_READ_FMTS = ("fp16", "bf16", "fp8", "nvfp4")
KS_PITCH = 160                   # staged key row pitch (words), see _ks_addr
IMPL_ENV = "REPLAYSSM_GDN_REPLAY_IMPL"   # "v1" forces the previous kernel
TPW_ENV = "REPLAYSSM_GDN_REPLAY_TPW"     # v2 row tiles per warp (1 / 2) for tuning runs
MINB_ENV = "REPLAYSSM_GDN_REPLAY_MINB"   # v2 CTAs per SM hint (register cap) for tuning runs
BLOCK_V_ENV = "REPLAYSSM_GDN_BLOCK_V"    # v2 value rows per CTA for tuning runs (not nvfp4 pairs)
#: value rows per CTA of 128-row heads at small batches (launch_block_v; never fewer: 32 rows
#: lost wherever timed, session22_gpu/call3, session23_gpu/call3)
SMALL_BLOCK_V = 64
#: the decode's fp32 read copies take SMALL_BLOCK_V rows (not 128) up to this many (row, value
#: head) pairs: b64 at Qwen3.5-4B's 32 value heads (b128 and up keep 128, session22_gpu/call4)
FP32_SMALL_MAX_HEADS = 2048
#: fp8 / bf16 / fp16 read copies take SMALL_BLOCK_V rows up to this many pairs at L <=
#: NARROW_SMALL_MAX_L: b8 at Qwen3.5-4B, b4 at the 122B (a flushing head's u recompute, fold
#: and encodes over two CTAs; session23_gpu/call3)
NARROW_SMALL_MAX_HEADS = 256
NARROW_SMALL_MAX_L = 16
# v2 profiling build (1; off): thread 0 of each CTA stamps %clock64 at the phase boundaries and
# writes them over its output row (outputs are garbage then; one CTA per head in that build):
# tests/gpu_scripts/prof_mamba2_replay.py --layer gdn, tests/gpu_scripts/sass_phases.py
PROF_ENV = "REPLAYSSM_GDN_PROF"
# v2 / verify CTA preamble (A-B runs): 0 = session 6 (warp 0 normalizes q / k after its cursor
# round trip and the arrive's fence: the two round trips back to back); 1 = q / k in the last
# warp (verify: drafts from warp 1 on); 2 = also the read tile (decode) issued before the cursors
# and the gates, the arrive ordered by a data dependency instead of a fence (which would wait for
# the tile). Earlier default (session7_gpu/call4, replaced in session 15, below): 2 for nvfp4
# read copies (b512 325 -> 319 µs), 1 for the others (2 slows fp32: 394 -> 416, its cursor loads
# queue behind the 64 KB tile). Measured and dropped (call3): the q / k warp building the mma B
# fragments, the tile before a fenced arrive.
# 3 = 2 with the small loads (cursors, gates, q / k) issued before the tile and consumed after
# its issue. Default since session 15: 3 for every read copy but fp32 in (g, t) chunks (calls 1-2,
# staggered / non-flush only: b256 fp8/fp32 170.5 -> 165.3 / 108.4 -> 101.7, nvfp4/fp16sr
# 163.3 -> 160.1 / 92.7 -> 87.5, bf16/fp32 182.2 -> 180.7; fp32 loses, 199.2 -> 205.2 -- and at
# 3 CTAs / SM 230.1: its 64 KB tile wants fewer loads in flight, not more)
# 4 = 3 with the row's gate inputs, q / k and v (raw bits, one per finishing lane) issued
# before its slot is known (they do not depend on it). Default for nvfp4 read copies
# (session16_gpu/call3, b256 / b512: nvfp4/fp16sr 158.6 -> 156.3 / 288.5 -> 282.0 µs, non-flush
# only 87.5 -> 83.7); fp32 186.3 (V_LATE alone: 183.8), fp8/fp32 even
PREAMBLE_ENV = "REPLAYSSM_GDN_PREAMBLE"
# v2 decode, fp32 read copies: each warp instruction of the read tile loads one whole 512-byte
# row (lane l: words 4 l .. 4 l + 3 of each of the warp's 16 rows; the row sums by one transposed
# butterfly) instead of 8 rows x 64 bytes, as our standard kernel does; 0 turns it off. Default
# with preamble 3 (session15_gpu/call6, fp32 b256 / b512: 198.5 -> 191.8 / 391.4 -> 379.0 µs,
# non-flush 175.3 -> 167.7; either change alone does not gain: 198.1 / 199.2 -> 205.2)
WHOLE_ROWS_ENV = "REPLAYSSM_GDN_WHOLE_ROWS"
# non-flush rows: warp 0's ring g / kinv (the coefficient weights) by cp.async into shared memory
# instead of registers (default; 0: registers): at 64 registers ptxas spilled them right after
# their loads, and that spill store waited for the load before the B-fragment barrier (nvfp4
# SASS). session16_gpu/call2, non-flush only b256 / b512: fp8/fp32 102.7 -> 98.9 / 193.6 ->
# 187.3 µs, nvfp4/fp16sr 88.8 -> 87.6 / 169.0 -> 167.2; fp32 (with the tile split in two, a
# switch since removed) 172.0 -> 168.4; call 3, switched off: fp32 188.4 -> 192.0
RING_GATES_ASYNC_ENV = "REPLAYSSM_GDN_RING_GATES_ASYNC"
# v (one value per finishing lane, raw bits) loaded behind the read tile instead of two per lane
# ahead of it (default for fp32 whole-row tiles; 1 / 0 force; preamble 4 implies it, before the
# slot): ptxas spilled the early v values in the middle of the tile's loads, and the spill store
# waited a round trip before the last tile rows were issued (SASS of every decode build,
# sass_phases.py --load-spills); split pairs append v from it. session16_gpu/call3, b256 / b512: fp32 188.4 -> 183.8 / 370.7 -> 362.0 µs
# (non-flush only 165.3 -> 160.2); nvfp4/fp16sr even, fp8/fp32 164.9 -> 167.7 (not there)
V_LATE_ENV = "REPLAYSSM_GDN_V_LATE"
# fp32 pair (whole-row tile = the hi copy): a flush row folds the tile it already holds on the
# CUDA cores in that layout (S = e^{G_tot} S + sum_j u_j (w_j kn_j), fp32 FMAs; u_j, w_j kn_j in
# shared memory), dots and stores it in whole rows: no second 64 KB read of hi, no 3xTF32 mma
# (default; 0 = the (g, t) flush). session17_gpu/call1, b256 / b512: 184.0 -> 159.2 / 362.7 ->
# 320.9 µs (flush only 518.8 -> 363.2, non-flush only 159.7 -> 155.4: ptxas no longer spills)
FLUSH_WHOLE_ENV = "REPLAYSSM_GDN_FLUSH_WHOLE"
# v2 decode: the flush-first row order (cute_kernels.row_order, one extra one-CTA launch ahead of
# the step) so the flushing rows' CTAs, ~10x longer than the others with a narrow read copy, are
# dispatched first instead of ending the step (Mamba-2 has it since session 5). 1 / 0 force;
# unset: read copies narrower than fp32, from ORDER_MIN_BATCH rows. session17_gpu/call4 (with the
# order's cursors), Qwen3.5-4B: nvfp4/fp16sr b32 / b256 / b512 39.0 -> 28.5 / 156.3 -> 143.7 /
# 283.0 -> 276.6 µs, fp8/fp32 37.1 -> 27.9 / 164.6 -> 154.2 / 303.7 -> 296.4, bf16/fp32 40.9 ->
# 30.7 / 179.0 -> 169.5 / 331.3 -> 321.7; fp32 (flush CTAs ~2x a non-flush one) loses: 28.5 ->
# 30.3 / 160.8 -> 173.2 / 322.7 -> 333.9
ORDER_ENV = "REPLAYSSM_GDN_ORDER"
#: the order's default from this many rows (below, its extra launch is not paid back: Mamba-2,
#: session5_gpu: b1 6.2 -> 9.4 µs, b8 0.9x, b16 0.98-1.07x)
ORDER_MIN_BATCH = 32
# with the order: the rows' cursors from the order entry (one round trip for row, slot and
# cursors; preamble >= 3 builds). Default on; 0: off
ORDER_CURSORS_ENV = "REPLAYSSM_GDN_ORDER_CURSORS"
# v2 decode split launch (:func:`use_split`): after the order, the flush rows in a persistent
# launch of their own (256 threads, SPLIT_FLUSH_MINB CTAs / SM: registers for the fold) on a
# side stream and the non-flush rows in one without flush code (SPLIT_NONFLUSH_TPW row tiles per
# warp: the per-warp preamble paid once per 32 value rows, not 16) at once. 1 / 0 force; unset:
# read copies narrower than fp32 from SPLIT_MIN_BATCH rows. The four tuning switches: the
# non-flush launch's tiles per warp and CTAs / SM, the flush launch's CTAs / SM and grid
# positions (tests: a few positions make each flush CTA walk several rows)
SPLIT_ENV = "REPLAYSSM_GDN_SPLIT"
SPLIT_FPOS_ENV = "REPLAYSSM_GDN_SPLIT_FPOS"
SPLIT_TPW_ENV = "REPLAYSSM_GDN_SPLIT_TPW"
SPLIT_MINB1_ENV = "REPLAYSSM_GDN_SPLIT_MINB1"
SPLIT_MINB2_ENV = "REPLAYSSM_GDN_SPLIT_MINB2"
#: from this many rows (session18_gpu/call3, no split / split, Qwen3.5-4B L = 16: b32
#: nvfp4/fp16sr 28.1 / 28.6 µs, b64 48.3 / 37.2, b128 74.2 / 63.4)
SPLIT_MIN_BATCH = 64
#: ... and below it (with the order, below ORDER_MIN_BATCH too): (max L, min rows) pairs
#: (use_small_split). session24_gpu/call2, one launch with the order / split, b32 / b48: L8
#: 1.11-1.35x (both shapes); L16 122B 1.07-1.35x, 4B b48 1.06-1.23x, 4B b32 0.93-0.99x (left).
#: session23_gpu, one launch / split: call 6, L8 b8 / b16: 4B nvfp4/fp16sr 22.7 -> 20.6 / 27.7
#: -> 22.1 µs, fp8/fp32 15.9 -> 15.3 / 24.8 -> 22.6; 122B nvfp4/fp16sr 27.4 -> 21.9 / 36.9 ->
#: 24.3; call 7, L16 b16: 4B 1.10-1.15x, 122B 1.24-1.33x. Lost at b4 (0.71-0.95x, call 5)
#: and at L16 b8 on the 4B (0.85-0.93x)
SPLIT_SMALL_RULE = ((8, 8), (16, 16))
SPLIT_NONFLUSH_TPW = 2
#: the default split up to this buffer length (see use_split)
SPLIT_MAX_L = 16
#: the non-flush half's CTAs / SM by read copy (else 5): at 6 (80 registers) the nvfp4 / fp8
#: builds hold (b512 nvfp4/fp16sr 223.7 -> 217.2 µs, fp8/fp32 236.0 -> 231.4), bf16 spills
#: (304.1 -> 338.4) -- session18_gpu/call3
SPLIT_NONFLUSH_MINB = {"nvfp4": 6, "fp8": 6}
SPLIT_FLUSH_MINB = 2
# flush encoder of fp16 SR (A-B runs): 1 (default) = exact for every input (lowprec.round_f16_sr);
# 0 = session 8: the fast path only when no value of the warp's tile lies in (0, 2^-14), else the
# generic per-element loop (80 % of the flush tiles of N(0, 0.1) states). session9_gpu/call2:
# nvfp4/fp16sr b256 176.7 -> 162.0 µs (flush only 1216 -> 993), b512 318.8 -> 293.9, verify T = 8
# b256 843.5 -> 768.0. Measured and dropped there: fp8 SR unrolled with exact division (its flush
# 1.5x slower than the generic loop: spills)
ENCODE_ENV = "REPLAYSSM_GDN_ENCODE"


def encode_mode() -> int:
    return 0 if os.environ.get(ENCODE_ENV, "") == "0" else 1


def whole_rows_fit(read_fmt: str, tpw: Optional[int]) -> bool:
    """Whether whole-row tile loads apply: fp32 read copies (CUDA-core dots), one row tile per
    warp."""
    return read_fmt == "fp32" and tpw == 1


def whole_rows_default(read_fmt: str, tpw: Optional[int]) -> bool:
    """Whether a v2 decode reads its fp32 read copy in whole rows (:data:`WHOLE_ROWS_ENV`;
    ``REPLAYSSM_GDN_WHOLE_ROWS=0`` turns it off) where :func:`whole_rows_fit`."""
    return whole_rows_fit(read_fmt, tpw) and os.environ.get(WHOLE_ROWS_ENV, "") != "0"


#: 0 / 1 forces the v2 decode's L2 prefetches before the PDL wait
#: (:meth:`GDNReplayDecodeV2._prefetch_pre_wait`; launches without a row order); unset:
#: :func:`use_pf_early`
PF_EARLY_ENV = "REPLAYSSM_GDN_PF_EARLY"
#: ... by default while a launch's read copy is at most this many bytes. H200, off / on in one
#: run (bench/results/session25_gpu/call1, both shapes, L8 / L16, b1 / 4 / 8): b1 every pair
#: 1.06-1.24x faster (Qwen3.5-4B fp32 L8 4.1 -> 3.3 µs, FLA 3.9 in call2; Qwen3.5-122B
#: nvfp4/fp16sr 5.7 -> 4.9), b4 1.03-1.12x, b8 1.00-1.12x (122B fp32 b8 = 32 MiB 1.01-1.03x);
#: fp32 reads past it 0.93-0.95x (call2: 4B b16 = 32 MiB 0.99x, b64 0.94x, b256 159.9 -> 171.5
#: µs; 122B b16 0.95x): the prefetches queue behind the running grid's reads.
PF_EARLY_MAX_BYTES = 32 << 20


def use_pf_early(cache, batch: int) -> bool:
    """Whether a v2 launch of ``batch`` rows without the row order takes ``pf_early``
    (:data:`PF_EARLY_ENV` forces; else up to :data:`PF_EARLY_MAX_BYTES` of read copy)."""
    return common.pf_early_applies(PF_EARLY_ENV, batch, cache.HV * cache.V * cache.K,
                                   cache.pair.read_fmt, PF_EARLY_MAX_BYTES)


def preamble_level(read_fmt: str, whole_rows: bool = False) -> int:
    """The preamble level of a kernel with read copy ``read_fmt`` (``REPLAYSSM_GDN_PREAMBLE``
    overrides): 4 for nvfp4 read copies, else 3, but 1 for an fp32 read copy read in (g, t)
    chunks (``whole_rows`` False)."""
    v = os.environ.get(PREAMBLE_ENV, "")
    if v in ("0", "1", "2", "3", "4"):
        return int(v)
    if read_fmt == "nvfp4":
        return 4
    return 1 if read_fmt == "fp32" and not whole_rows else 3


def v_late_default(read_fmt: str, whole_rows: bool) -> bool:
    """Whether a v2 decode loads v as raw bits, one per finishing lane, behind the tile
    (:data:`V_LATE_ENV` overrides: 1 / 0; preamble 4 implies it, ahead of the slot): fp32
    whole-row tiles."""
    v = os.environ.get(V_LATE_ENV, "")
    return v == "1" if v in ("0", "1") else read_fmt == "fp32" and whole_rows


def _prof_record(out_row: cute.Tensor, v0, flush, words) -> None:
    """The profiling build's record over the 16-bit output row ``out_row`` of a whole-head CTA
    (int32 words from value row ``v0``): ``common.prof_store``."""
    o32 = cute.recast_tensor(out_row, Int32)
    common.prof_store(cute.make_tensor(o32.iterator + v0 // 2, cute.make_layout(32)),
                      Int32(_sel(flush, Int32(1), Int32(0))), words)


def _fstamp(rFs, i: int) -> None:
    """Profiling build: %clock64 into flush sub-phase slot ``i`` of ``rFs`` (None: no-op)."""
    if rFs is not None:
        rFs[i] = common.sreg64("clock64")


def _env_int(name):
    v = os.environ.get(name)
    return int(v) if v else None


def _f32asm(ptx, *args):
    return Float32(lp._asm(T.f32(), ptx, "=f" + ",f" * len(args),
                           [Float32(a).ir_value() for a in args]))


_fma_rn, _add_rn, _sub_rn = lp.fma_rn, lp.add_rn, lp.sub_rn


def _rcp_approx(a):
    return _f32asm("rcp.approx.ftz.f32 $0, $1;", a)


_tf32_bits = lp.tf32_bits
_split_tf32 = lp.split_tf32
_mma = lp.mma_sync


def _split3_tf32(x):
    """x = hi + mid + lo, three tf32 pieces (33 bits)."""
    h = _tf32_bits(x)
    r1 = _sub_rn(x, lp.bits_f32(h))
    m = _tf32_bits(r1)
    lo = _tf32_bits(_sub_rn(r1, lp.bits_f32(m)))
    return h, m, lo


def _mma6_tf32(a3, b3, c):
    """c + (ah + am + al)(bh + bm + bl) keeping the six products of order <= 2 (the dropped
    ones are ~2^-33 relative): an fp32-accurate rank update on tensor cores."""
    (ah, am, al), (bh, bm, bl) = a3, b3
    c = _mma("tf32", am, bm, c)
    c = _mma("tf32", al, bh, c)
    c = _mma("tf32", ah, bl, c)
    c = _mma("tf32", am, bh, c)
    c = _mma("tf32", ah, bm, c)
    return _mma("tf32", ah, bh, c)


def _mma3_tf32(ah, al, bh, bl, c):
    """3xTF32: c + (ah + al)(bh + bl) without the al*bl term."""
    c = _mma("tf32", al, bh, c)
    c = _mma("tf32", ah, bl, c)
    return _mma("tf32", ah, bh, c)


def _f16x2_mul(a, b) -> Uint32:
    return Uint32(lp._asm(T.i32(), "mul.rn.f16x2 $0, $1, $2;", "=r,r,r",
                          [Uint32(a).ir_value(), Uint32(b).ir_value()]))


def _round_f16(x):
    """fp32 -> nearest fp16 -> fp32."""
    return _f32asm("{ .reg .b16 h; cvt.rn.f16.f32 h, $1; cvt.f32.f16 $0, h; }", x)


def _round_bf16(x):
    """fp32 -> nearest bf16 -> fp32."""
    return _f32asm("{ .reg .b16 h; .reg .b16 z; cvt.rn.bf16.f32 h, $1; mov.b16 z, 0; "
                   "mov.b32 $0, {z, h}; }", x)


def _cvt_rz_x2(fmt, a0, a1) -> Uint32:
    """Two fp32 -> fp16x2 / bf16x2 rounded toward zero (a0 in the low half)."""
    if fmt == "fp16":
        return lp.pack_f16x2_rz(a0, a1)
    return Uint32(lp._asm(T.i32(), "cvt.rz.bf16x2.f32 $0, $2, $1;", "=r,f,f",
                          [Float32(a0).ir_value(), Float32(a1).ir_value()]))


def _cvt_rn_x2(fmt, a0, a1) -> Uint32:
    return lp.pack_f16x2(a0, a1) if fmt == "fp16" else lp.pack_bf16x2(a0, a1)


def _e4m3_bcast_f16x2(b) -> Uint32:
    """e4m3 byte (low 8 bits of b) -> fp16x2 with the value in both halves (exact)."""
    b = Uint32(b) & Uint32(0xFF)
    return lp._e4m3x2_to_f16x2(b | (b << Uint32(8)), False)


def _qn_split(x, piece: int, fmt: str):
    """Piece ``piece`` (0 hi, 1 mid, 2 lo) of fp32 x as fp16 / bf16 values (x = sum of the 3
    pieces to ~2^-33 relative of x's binade for fp16 after scaling, 24 bits for bf16)."""
    rnd = _round_f16 if fmt == "f16" else _round_bf16
    h = rnd(x)
    if piece == 0:
        return h
    r1 = _sub_rn(x, h)
    m = rnd(r1)
    if piece == 1:
        return m
    return rnd(_sub_rn(r1, m))


def _pow2_scale_of_norm(nrm):
    """(2^s, 2^-s) with 2^s * nrm in [2^14, 2^15) (nrm >= 0; clamped for tiny / huge norms):
    fp16 B pieces of a vector of that 2-norm never overflow."""
    e = (lp.f32_bits(nrm) >> Uint32(23)) & Uint32(0xFF)
    e = cutlass.max(cutlass.min(e, Uint32(254)), Uint32(15))
    return lp.bits_f32((Uint32(268) - e) << Uint32(23)), lp.bits_f32((e - Uint32(14)) << Uint32(23))


def _seq_prefix(x, lane, n: int, upper: bool = False):
    """Sequential-order prefix sums over the first n lanes of a warp: lane j gets
    x_0 + x_1 + ... + x_j (``upper``: x_{j+1} + ... + x_{n-1}), summed left to right like a
    sequential cumsum (the decay weights exp(G_a - G_b) amplify any reordering)."""
    acc = Float32(0.0)
    for i in range(n):
        xi = cute.arch.shuffle_sync(x, i)
        take = (lane < Int32(i)) if upper else (lane >= Int32(i))
        acc = acc + Float32(_sel(take, xi, Float32(0.0)))
    return acc


def _seq_prefix_mul(x, lane, n: int, upper: bool = False):
    """As _seq_prefix with products: lane j gets x_0 * ... * x_j (``upper``: x_{j+1} * ... *
    x_{n-1}), multiplied left to right (the order of the sequential recurrence's decays)."""
    acc = Float32(1.0)
    for i in range(n):
        xi = cute.arch.shuffle_sync(x, i)
        take = (lane < Int32(i)) if upper else (lane >= Int32(i))
        acc = acc * Float32(_sel(take, xi, Float32(1.0)))
    return acc


def _shared_fold_weights(gj, hf, lane, n: int):
    """Shared pairs' fold weights in lane j < n of a warp holding g_j (0 past ``hf``): (w_j =
    e^{G_tot - G_j}, e^{G_j}, e^{G_tot}), G the sequential prefix of g, G_tot = G_{hf-1}."""
    G = _seq_prefix(gj, lane, n)
    Gt = cute.arch.shuffle_sync(G, cutlass.max(hf - Int32(1), Int32(0)))
    Gt = Float32(_sel(hf > Int32(0), Gt, Float32(0.0)))
    wl = cute.math.exp(Gt - G)           # as reference.gdn_fold: exp(tot - G)
    return wl, cute.math.exp(G), cute.math.exp(Gt)


def _ks_addr(j, col):
    """Word address of staged key j, column col (row pitch KS_PITCH, row offset 8*sigma(j),
    2 pad words per 16 columns): the F3 (LDS.64) and F5 (LDS.32) B-fragment reads are
    bank-conflict free."""
    j = Int32(j)
    col = Int32(col)
    jj = j & Int32(7)
    sig = (jj ^ (jj >> Int32(2))) & Int32(3)
    return j * Int32(KS_PITCH) + sig * Int32(8) + col + Int32(2) * (col >> Int32(4))


def _kq_addr(col):
    """Word address of column col in the padded kn / qn vectors (4 pad words per 32)."""
    col = Int32(col)
    return col + Int32(4) * (col >> Int32(5))


def _read_pairs(fmt: str, t, j: int):
    """(e_lo, e_hi): elements held by half-register j (0..15) of read-copy row data of lane
    group t (non-flush mma mapping; see the v2 docstring)."""
    if fmt == "nvfp4":
        q, i = divmod(j, 4)
        e = Int32(32) * t + Int32(8 * q + i)
        return e, e + Int32(4)
    if fmt == "fp8":
        q, half = divmod(j, 2)
        ii, ww = divmod(q, 4)
        e = Int32(64 * ii + 4 * ww + 2 * half) + Int32(16) * t
        return e, e + Int32(1)
    ii, ww = divmod(j, 4)               # fp16 / bf16
    e = Int32(32 * ii + 2 * ww) + Int32(8) * t
    return e, e + Int32(1)


def _read_pairs_dyn(fmt: str, t, j):
    """_read_pairs with a run-time half-register index j."""
    j = Int32(j)
    if fmt == "nvfp4":
        e = Int32(32) * t + Int32(8) * (j >> Int32(2)) + (j & Int32(3))
        return e, e + Int32(4)
    if fmt == "fp8":
        q = j >> Int32(1)
        e = Int32(64) * (q >> Int32(2)) + Int32(4) * (q & Int32(3)) + Int32(2) * (j & Int32(1)) \
            + Int32(16) * t
        return e, e + Int32(1)
    e = Int32(32) * (j >> Int32(2)) + Int32(2) * (j & Int32(3)) + Int32(8) * t
    return e, e + Int32(1)


def _qn_piece(x, piece, fmt: str):
    """Piece ``piece`` (run-time 0 hi, 1 mid, 2 lo) of x in fp16 / bf16 steps."""
    rnd = _round_f16 if fmt == "f16" else _round_bf16
    h = rnd(x)
    r1 = _sub_rn(x, h)
    m = rnd(r1)
    lo = rnd(_sub_rn(r1, m))
    return Float32(_sel(piece == Int32(0), h, _sel(piece == Int32(1), m, lo)))


def _absf(x):
    return _f32asm("abs.f32 $0, $1;", x)


def _amax_acc(acc, x):
    """max(acc, |x|) ignoring NaN; clamp the final value with _amax_fin: together they equal
    the max of lp.abs_nan0_inf_sat (NaN -> 0, inf -> FLT_MAX) for acc starting at 0."""
    return lp.fmax_nq(acc, _absf(x))


def _amax_fin(acc):
    return cute.arch.fmin(Float32(acc), Float32(lp.FLT_MAX))


def _ring(origin, p, RING: int):
    """(origin + p) mod RING for 0 <= origin < RING, 0 <= p < RING (no division)."""
    x = Int32(origin) + Int32(p)
    return x - Int32(_sel(x >= Int32(RING), Int32(RING), Int32(0)))


def _frag_slot(fmt: str, e):
    """Inverse of _read_pairs: element e -> (kap, rho, t, eta): chunk, register (0: slots
    2t..2t+1, 1: 2t+8..2t+9), lane group and half holding it."""
    e = Int32(e)
    if fmt == "nvfp4":
        t = e >> Int32(5)
        r = e & Int32(31)
        q = r >> Int32(3)
        w = r & Int32(7)
        eta = w >> Int32(2)
        j = Int32(4) * q + (w & Int32(3))
    elif fmt == "fp8":
        t = (e >> Int32(4)) & Int32(3)
        ii = e >> Int32(6)
        r = e & Int32(15)
        ww = r >> Int32(2)
        half = (r >> Int32(1)) & Int32(1)
        eta = r & Int32(1)
        j = Int32(2) * (Int32(4) * ii + ww) + half
    else:
        t = (e >> Int32(3)) & Int32(3)
        ii = e >> Int32(5)
        r = e & Int32(7)
        ww = r >> Int32(1)
        eta = r & Int32(1)
        j = Int32(4) * ii + ww
    return j >> Int32(1), j & Int32(1), t, eta


def _to_half_bits(fmt: str, x):
    """fp32 value exactly representable in fp16 / bf16 -> its 16-bit pattern."""
    ptx = ("{ .reg .b16 h; cvt.rn.f16.f32 h, $1; mov.b16 $0, h; }" if fmt == "f16" else
           "{ .reg .b16 h; cvt.rn.bf16.f32 h, $1; mov.b16 $0, h; }")
    return cutlass.Uint16(lp._asm(T.i16(), ptx, "=h,f", [Float32(x).ir_value()]))


def _row_of(row0, r):
    """Value row ``r`` (0 .. 2 tpw - 1) of the lane whose first row is ``row0``: rows g, g + 8 of
    each 16-row tile (``r`` a Python int or an Int32)."""
    if isinstance(r, int):
        return row0 + (16 * (r // 2) + 8 * (r % 2))
    return row0 + Int32(8) * (r % Int32(2)) + Int32(16) * (r // Int32(2))


def _fidx(t, k: int):
    """Column of flush register k (0..31) of lane group t: runs of 16 at 64 q + 16 t."""
    return Int32(64 * (k // 16) + (k % 16)) + Int32(16) * t


def _fidx_h(t, k: int, qb):
    """:func:`_fidx` of a lane holding one run (flush halves: k in 0..15, run ``qb``, its
    warp's column half); ``qb`` None: both runs, :func:`_fidx` itself."""
    return _fidx(t, k) if qb is None else _fidx(t, k) + Int32(64) * qb


def _cluster_sync():
    """``barrier.cluster`` arrive (release) + wait (acquire): every thread of both CTAs."""
    cute.arch.cluster_arrive()
    cute.arch.cluster_wait()


def _push_peer(sX: cute.Tensor, idx, v, peer):
    """``st.shared::cluster.f32``: ``v`` into element ``idx`` of ``sX`` in CTA ``peer`` of the
    cluster (a mapped DSMEM tensor cannot be indexed in 4.8.1; after a :func:`_cluster_sync`
    that both CTAs have passed: the peer is running)."""
    ptr = cute.arch.map_dsmem_ptr(sX.iterator + idx, peer)
    llvm.inline_asm(None, [ptr.toint().ir_value(), Float32(v).ir_value()],
                    "st.shared::cluster.f32 [$0], $1;", "r,f", has_side_effects=True,
                    is_align_stack=False)


def _ld_peer(sX: cute.Tensor, idx, peer) -> Float32:
    """``ld.shared::cluster.f32``: element ``idx`` of ``sX`` in CTA ``peer`` of the cluster."""
    ptr = cute.arch.map_dsmem_ptr(sX.iterator + idx, peer)
    return Float32(llvm.inline_asm(T.f32(), [ptr.toint().ir_value()],
                                   "ld.shared::cluster.f32 $0, [$1];", "=f,r",
                                   has_side_effects=True, is_align_stack=False))


class _PairExchange:
    """The flush's exchanges between the two CTAs of a cluster (flush halves over a CTA pair),
    planned while tracing (the flush is straight-line code, the same in both CTAs): values are
    posted, a cluster barrier passes, each CTA combines its own with the peer's. Before the
    first barrier a CTA writes its own buffer and reads the peer's after it (which proves the
    peer has started: a CTA may only store into a running peer); later posts are pushed into
    the peer and read locally. Posts wait for the next barrier (:meth:`take` adds one only
    when none has passed since), so values ready early ride on a later exchange's barrier. A
    read of the peer's memory after the last barrier gets one more (:meth:`close`) before
    either CTA may exit. No run-time branch: both CTAs post and combine everything."""

    def __init__(self, sX: cute.Tensor, rank):
        self.sX, self.peer = sX, Int32(1) - rank
        self.nsync = 0               # barriers passed (while tracing)
        self.exit_guard = False      # the peer's memory read after the last barrier

    def sync(self):
        _cluster_sync()
        self.nsync += 1
        self.exit_guard = False

    def post(self, vals, idxs):
        """Post ``vals`` at elements ``idxs`` of the exchange buffer; returns the ticket."""
        pushed = self.nsync > 0
        for v, ix in zip(vals, idxs):
            if pushed:
                _push_peer(self.sX, ix, v, self.peer)
            else:
                self.sX[ix] = v
        return (pushed, self.nsync, idxs)

    def take(self, ticket, vals, op):
        """``op(own, peer's)`` of each posted value (the same in both CTAs for a commutative
        ``op``)."""
        pushed, at, idxs = ticket
        if self.nsync == at:
            self.sync()
        if pushed:
            return [op(v, self.sX[ix]) for v, ix in zip(vals, idxs)]
        self.exit_guard = True
        return [op(v, _ld_peer(self.sX, ix, self.peer)) for v, ix in zip(vals, idxs)]

    def combine(self, vals, idxs, op):
        return self.take(self.post(vals, idxs), vals, op)

    def close(self):
        if self.exit_guard:
            self.sync()


def _quad_row_amax(S: cute.Tensor, r: int, n: int) -> Float32:
    """amax of flush row ``r`` (registers S[r, 0:n]) over the quad's lanes (the lane's part
    of the row: n of its columns)."""
    am = Float32(0.0)
    for k in range(n):
        am = _amax_acc(am, S[r, k])
    am = _amax_fin(am)
    am = lp.fmax_nq(am, cute.arch.shuffle_sync_bfly(am, offset=1))
    return lp.fmax_nq(am, cute.arch.shuffle_sync_bfly(am, offset=2))


def _fp8_scale_special(special, rsc):
    """``special`` or'ed with an fp8 row scale outside the fast division's range."""
    return special | ((rsc != Float32(0.0)) & ((rsc < Float32(2.0 ** -100))
                                               | (rsc > Float32(2.0 ** 100))))


def _qg(q: int, qb):
    """Run index (0 / 1: columns 64 q + 16 t ...) of a lane's local run ``q`` (``qb`` None: the
    lane holds both runs; else run ``qb`` only)."""
    return q if qb is None else qb + Int32(q)


class ReplayTileV2:
    """v2 tiling: ``block_v`` value rows per CTA; each warp owns ``tpw`` tiles of 16 rows
    (m16 mma tiles), lane (g, t) holds rows g and g + 8 of each tile."""

    def __init__(self, read_fmt: str, rec_fmt: str, K: int, V: int, block_v: int, L: int,
                 split: bool, tpw: Optional[int] = None, halves: bool = False,
                 pair: bool = False):
        if K != V2_K:
            raise ValueError(f"v2 needs K = {V2_K}, got {K}")
        if block_v not in V2_BLOCK_VS or V % block_v:
            raise ValueError(f"v2 block_v must be one of {V2_BLOCK_VS} and divide V={V}")
        if "nvfp4" in (read_fmt, rec_fmt) and block_v != V:
            raise ValueError("pairs involving nvfp4 need block_v = V (global scale)")
        if not 1 <= L <= V2_MAX_L:
            raise ValueError(f"v2 needs L <= {V2_MAX_L}")
        self.mma = read_fmt in MMA_READ_FMTS
        if tpw is None:
            # one row tile per warp: 256 threads per whole head at <= 128 registers (16 warps
            # per SM, as v1). tpw = 2 (compact read copies only) halves the per-thread fixed
            # work but needs ~255 registers (8 warps per SM): measured slower on the H200
            # (snapshot 724f1cf: nvfp4/fp16sr 536 us at batch 512); kept for tuning runs.
            tpw = 1
        if tpw == 2 and block_v < 32:
            tpw = 1                           # one 16-row tile: nothing to pair
        if tpw not in (1, 2) or block_v % (16 * tpw):
            raise ValueError(f"v2 tiles per warp {tpw} invalid for block_v={block_v}")
        if (halves or pair) and tpw != 1:
            raise ValueError("flush column halves need one row tile per warp")
        if halves and pair:
            raise ValueError("flush column halves are over warps or over a CTA pair, not both")
        self.tpw = tpw
        self.block_v = block_v
        # halves: two warps per 16-row tile, each the tile's 64-column half in the flush
        self.halves = bool(halves)
        # pair: the halves over a 2-CTA cluster (CTA rank r: the columns of run r), exchanged
        # through distributed shared memory
        self.pair = bool(pair)
        self.rwarps = block_v // (16 * tpw)   # warps that own row tiles (all warps: rows)
        self.nwarps = self.rwarps * (2 if self.halves else 1)
        self.num_threads = 32 * self.nwarps
        self.reg_cap = 128 * tpw - (1 if tpw == 2 else 0)
        self.nkt = (L + 7) // 8               # key tiles of 8 in the flush
        self.lp = 8 * self.nkt                # padded key count
        self.npw = (L + self.nwarps - 1) // self.nwarps     # coefficient positions per warp
        self.lw = self.npw * self.nwarps
        self.nu = (L + 3) // 4                # buffered u entries per lane (non-flush)
        self.rbits = FMT_BITS[read_fmt]
        self.hbits = FMT_BITS[rec_fmt]
        self.split = split
        # the staged keys are also kept pre-split into tf32 hi / lo when they fit
        self.ks_split = self.lp <= 16
        # the fold's rank-L update: 3 tf32 pieces / 6 products where the recurrence copy is
        # fp32 (its check tolerance is at fp32 rounding level), 3xTF32 otherwise
        self.f5_pieces = 3 if rec_fmt == "fp32" else 2
        nks = (1 + self.f5_pieces) if self.ks_split else 1
        words = (4 + 16 + 2 * (K + K // 8) + 512 + 3 * 32
                 + nks * self.lp * KS_PITCH + self.lp * self.lp + 5 * 32)
        # halves: the exchanges between a tile's two warps (P partials, output partials, fp8
        # row amaxes), one CTA per SM (:func:`flush_halves_for`): a larger budget
        cols = self.halves or self.pair
        self.xch_words = (32 * self.nwarps * (4 * self.nkt + 4 + 2) + 32) if cols else 0
        self.smem_bytes = 4 * (words + self.xch_words) + 16 * (19 if cols else 16)
        if self.smem_bytes > (HALVES_SMEM_LIMIT if cols else SMEM_LIMIT):
            raise ValueError("v2 shared memory over budget")
        self.elems_f = 64

    def __repr__(self):
        return (f"ReplayTileV2(block_v={self.block_v}, threads={self.num_threads}, "
                f"tiles/warp={self.tpw}, halves={self.halves}, pair={self.pair}, "
                f"mma={self.mma}, "
                f"key tiles={self.nkt}, "
                f"smem={self.smem_bytes})")


def v2_supported(read_fmt, rec_fmt, K, V, L) -> bool:
    return K == V2_K and 1 <= L <= V2_MAX_L and V % 16 == 0 and (
        V == 128 or "nvfp4" not in (read_fmt, rec_fmt)) and V >= 16


#: CTAs per launch from which the v2 kernels trade the flush's registers for occupancy
OCC_MIN_CTAS = 4096


def few_ctas_full_cap(read_fmt: str, rec_fmt: str, ctas: Optional[int],
                      verify: bool = False) -> bool:
    """Whether a v2 decode launch of ``ctas`` CTAs with an NVFP4 copy is built for one CTA per
    SM (255 registers): at most one CTA per SM runs anyway (Qwen3.5-4B b1-b4, 122B b1-b2), and
    the default 128-register cap makes the flush spill (Qwen3.5-4B: nvfp4/fp16sr 108-128 B,
    nvfp4/fp8sr 64 B; 0-48 B at cap 1). H200, Qwen3.5-4B + 122B, L8 / L16, in one run each:
    default / REPLAYSSM_GDN_REPLAY_MINB=1 (bench/results/session30_gpu/call2/mb, b1 / b2):
    nvfp4/fp16sr 1.01-1.07x, nvfp4/fp8sr 1.06-1.10x, the other pairs 0.91-1.02x (not there);
    this rule / MINB=2 (call3/gn): 1.02-1.12x; 4B b3 / b4 (call4/gn): 1.05-1.11x."""
    return (not verify and ctas is not None and ctas <= common.num_sms()
            and "nvfp4" in (read_fmt, rec_fmt))


#: flush column halves (:func:`flush_halves_for`): 0 / 1 / 2 force where the build allows
FLUSH_HALVES_ENV = "REPLAYSSM_GDN_FLUSH_HALVES"
#: the v2 decode's step tail, bit mask (read at compile time, part of the key): 1 = the row
#: counter's publish check after the CTA's last barrier, 2 = the appends from registers (k from
#: the q / k warp's bits, a split pair's v from the finishing lane's); unset = 3 (both)
TAIL_ENV = "REPLAYSSM_GDN_TAIL"
#: the flush's L2 prefetch of the CTA's hi rows at its start (:func:`flush_pf_for`): 0 / 1 forces
FLUSH_PF_ENV = "REPLAYSSM_GDN_FLUSH_PF"
#: the split pairs' flush Gram (kn_i . kn_j, i < j) on the tensor cores (:meth:`_gram_mma`: one
#: warp per 16 keys, 3xTF32 as the fold) = 1, or on the CUDA cores (pairs of keys per lane pair)
#: = 0; unset: :func:`gram_mma_default`. Read by the decode's constructor, part of the key; the
#: verify keeps the CUDA-core Gram.
GRAM_MMA_ENV = "REPLAYSSM_GDN_GRAM_MMA"


def gram_mma_default(rec_fmt: str, rows: int) -> bool:
    """Whether a split pair's decode flush takes the tensor-core Gram when GRAM_MMA_ENV is unset:
    a 16-bit / fp8 recurrence (2 tf32 pieces, 3 products) or a split launch's flush half
    (``rows`` = 2: no non-flush path whose registers the Gram's could disturb). H200, 1 / 0 in
    one run (session35_gpu/call2/gb, gl; Qwen3.5-4B / 122B b1 / b2 L8 / L16): nvfp4/fp16sr and
    nvfp4/fp8sr 0.97-0.99x (122B b2 L16 nvfp4/fp16sr 1.03x alone), 4B b512 L16 nvfp4/fp16sr
    0.984x, fp8/fp32 0.970x (the split's flush half); an fp32 recurrence's one-launch builds
    (6 products, fp8/fp32 / bf16/fp32 b1 / b2) 0.97-1.05x, 1.01-1.05x in 10 of 16 cells: off.
    The b1 flush profile (4B L16): Gram 1.77 -> 0.85 us (nvfp4/fp16sr), 2.24 -> 1.29
    (fp8/fp32). Call 3 (default / 0): 4B L16 nvfp4/fp16sr b32 0.975x, b512 0.986x, bf16/fp32's
    flush half at b512 0.996x (one cell's noise in that run: ~1.5 %)."""
    return rows == 2 or rec_fmt != "fp32"


def flush_pf_for(ctas: Optional[int], rows: int = 0) -> bool:
    """Whether a v2 decode's flush issues one L2 prefetch of the CTA's hi rows before staging
    (their loads come after the stage, Gram and solve, ~3-4 us later, and otherwise wait on
    DRAM: the hi tile + P sub-phase did not shorten when the pair halved its bytes, call 4's
    profile). Default: launches of at most one CTA per SM (not a split launch's half);
    :data:`FLUSH_PF_ENV` 0 / 1 forces. H200, against =0 in one run (session31_gpu/call6/pf,
    4B b1 / b2, 122B b1 / b2, L8 / L16): the split pairs 1.00-1.02x (fp8/fp32 4B b2 L8 5.2 ->
    5.1 us), fp16sr and nvfp4/fp8sr 0.99-1.01x."""
    if rows:
        return False
    forced = _env_int(FLUSH_PF_ENV)
    if forced is not None:
        return forced == 1
    return ctas is not None and ctas <= common.num_sms()


def flush_halves_for(read_fmt: str, tpw: int, ctas: Optional[int], whole_rows: bool = False,
                     flush_whole: bool = False, rows: int = 0, row_order: bool = False) -> int:
    """How a v2 decode launch of ``ctas`` CTAs splits each row tile's flush into two 64-column
    halves: 0 = not, 1 = over two warps (``ReplayTileV2(halves=True)``), 2 = over the two CTAs
    of a cluster (``pair=True``: two SMs, DSMEM exchanges). Possible for read copies on the mma
    path (fp32 reads fold the whole-row tile), one row tile per warp, not a split launch's half
    (2: the plain grid, no row order). :data:`FLUSH_HALVES_ENV` 0 / 1 / 2 forces (2 only where
    the doubled grid fits one CTA per SM). Default:

    * nvfp4 read copies: 2 where 2 ``ctas`` <= the SM count (Qwen3.5-4B b1 / b2, 122B b1);
    * fp8 / bf16 / fp16 read copies: 1 at <= 1 CTA per SM (4B b1 / b2, 122B b1 at 64 rows).

    Not bit-identical to the kernel without halves (P and the output partials are two 64-column
    sums added). Mode 2's CTAs both read the row's cursors: with two rows on one slot (the
    caller's contract on CUDA tensors, as in vLLM, forbids it) the row counter can publish in
    mid-launch and the two CTAs disagree on the flush, which hangs the pair at its cluster
    barrier instead of racing on the slot.

    The flush's per-row phases (hi tile + P, fold, encodes) are throughput-bound per SM
    partition (bench/results/session31_gpu/call2: at 16 warps the encodes are as long as at 8),
    so for the 128-row nvfp4 tiles only more SMs shorten them (call 4's profile: the b1 flush
    span 16.6 -> 12.5 us). H200, in one run each: nvfp4/fp16sr and nvfp4/fp8sr, 2 against 0
    (call4/h): 4B b1 L8 4.7 -> 4.2 us, L16 4.4 -> 4.1, b2 L8 6.2 -> 5.2 / 6.5 -> 5.4, 122B b1
    L8 4.7 -> 4.2 / 4.3 (1.05-1.19x); mode 1 loses there (call1/h: 512 threads at 128
    registers, 0.80-0.98x). fp8/fp32, bf16/fp32, fp16sr: 1 against 0 0.99-1.10x (fp16sr 4B b2
    L8 4.6 -> 4.2), 2 against 0 0.92-1.02x (call4/h), 2 at 128 rows 0.89-0.97x (call5/bv)."""
    if tpw != 1 or whole_rows or flush_whole or rows or read_fmt not in MMA_READ_FMTS:
        return 0
    forced = _env_int(FLUSH_HALVES_ENV)
    n_sm = common.num_sms()
    pair_fits = not row_order and ctas is not None and 2 * ctas <= n_sm
    if forced is not None:
        return (2 if pair_fits else 0) if forced == 2 else (1 if forced == 1 else 0)
    if read_fmt == "nvfp4":
        return 2 if pair_fits else 0
    return int(ctas is not None and ctas <= n_sm)


def v2_default_min_blocks(tile: "ReplayTileV2", read_fmt: str, rec_fmt: str,
                          ctas: Optional[int] = None, verify: bool = False) -> int:
    """CTAs per SM hint (.minnctapersm, i.e. the register cap) of a v2 decode / verify kernel
    for a launch of ``ctas`` CTAs (None: a large batch). With read copies narrower than fp32
    the non-flush rows are latency-bound at 2 CTAs of 256 threads per SM: from OCC_MIN_CTAS
    CTAs, 3 per SM (80 registers; decode with an nvfp4 read copy and a 16-bit recurrence: 4,
    64 registers) run them faster although the flush then spills. Smaller launches keep 2: a
    spilling flush CTA lives long enough to set the step time. H200, Qwen3.5-4B, L = 16
    (bench/results/session6_gpu): decode b512 nvfp4/fp16sr 403 -> 336 us, fp8/fp32 375 -> 339,
    bf16/fp32 391 -> 359 (fp32 reads lose: 420 -> 461); b32 nvfp4/fp16sr 44.2 -> 56.9 (so not
    there); verify T = 4 b256 nvfp4/fp16sr 512 -> 456 (4 per SM: 572). Decode launches of at
    most one CTA per SM with an nvfp4 copy: 1 (:func:`few_ctas_full_cap`)."""
    base = max(1, 65536 // (tile.num_threads * tile.reg_cap))
    if tile.halves or tile.pair or few_ctas_full_cap(read_fmt, rec_fmt, ctas, verify):
        return 1
    if tile.tpw != 1 or read_fmt == "fp32" or (ctas is not None and ctas < OCC_MIN_CTAS):
        return base
    if not verify and read_fmt == "nvfp4" and rec_fmt in ("fp16", "bf16"):
        return max(base, 4)
    return max(base, 3)                     # never fewer CTAs than the tile's own cap allows


def choose_block_v_v2(batch: int, HV: int, V: int, read_fmt: str, rec_fmt: str,
                      min_ctas: Optional[int] = None) -> int:
    """Largest block_v giving at least ``min_ctas`` CTAs (default 3/4 of the SMs: small
    batches are latency-bound, and a CTA's per-head work - coefficient dots, q/k - is split over
    fewer warps when block_v shrinks); nvfp4 pairs use the whole head."""
    if "nvfp4" in (read_fmt, rec_fmt):
        return V
    if min_ctas is None:
        min_ctas = (3 * common.num_sms()) // 4
    cands = [bv for bv in V2_BLOCK_VS if bv <= V and V % bv == 0]
    for bv in cands:
        if batch * HV * (V // bv) >= min_ctas:
            return bv
    return cands[-1]


class GDNReplayDecodeV2(GDNReplayDecode):
    """v2 device code (same launch interface and semantics as :class:`GDNReplayDecode`).

    Thread <-> data: warp w owns ``tpw`` tiles of 16 value rows; lane (g, t) (g = lane / 4,
    t = lane % 4) holds rows g and g + 8 of each tile (R2 = 2 tpw rows per thread).

    * non-flush, read copies fp16 / bf16 / fp8 / nvfp4: ``mma.sync.m16n8k16`` (f16 or bf16
      operands, fp32 accumulate). A = the read copy (exact in fp16: fp16 itself, e4m3 values,
      e2m1 * block scale * 2^-14), B = 8 columns [kn_hi, kn_mid, kn_lo, qn_hi, qn_mid, qn_lo,
      0, 0] (kn, qn split into three fp16 pieces after a power-of-two scaling, or bf16 pieces),
      so the dot is fp32-accurate. Lane t loads 16-byte chunks at byte 64 i + 16 t of each row
      (coalesced); the K order inside the mma follows the registers, B is permuted to match
      (built once per CTA in shared memory). fp32 read copies: CUDA-core dot over whole rows
      at one tile per warp (``whole_rows``; the (g, t) chunks at tpw = 2 or with
      REPLAYSSM_GDN_WHOLE_ROWS=0).
      The read tile's issue point follows :func:`preamble_level` (before the cursors are used,
      at level 3).
    * buffer terms: lane t handles buffered positions p = t (mod 4) for its rows; the partial
      sums are combined with the dot partials by one quad butterfly.
    * flush: the hi tile in registers (R2 rows x 32 columns: runs of 16 at 64 q + 16 t).
      Shared pairs: S = e^{G_tot} S_hi + (U diag(w)) Kn with U = buffered u. Split pairs:
      P = S_hi Kn^T (3xTF32 mma), R = beta (v - e^{G} P), U = (I + A)^-1 R by forward
      substitution across the quad (A_ji = beta_j e^{G_j - G_i} kn_i.kn_j, Gram on CUDA
      cores), then the same rank-L update as 3xTF32 mma with the fold kept in registers;
      encodes with hardware RN converts, a fast SR path for fp16 / bf16, fast-division nvfp4 /
      fp8 quantizers (bit-exact; generic per-element code for NaN / inf / extreme ranges).
      The fp32 pair (read copy = hi) at L <= 16 instead folds the whole-row tile it already
      holds (:meth:`_flush_whole`): CUDA-core FMAs S = e^{G_tot} S + sum_j u_j (w_j kn_j) in
      that layout (u_j, kn_j staged in shared memory by :meth:`_stage_tile_fold`), whole-row
      dots and stores -- no second hi read, no mma.
    * ``row_order``: the flush-first order (:mod:`cute_kernels.row_order`, run just before)
      maps grid (HV * nsplit, positions) to (row, slot, cursors), flushing rows' CTAs first.
    """

    # fp16 SR flush encodes element by element unless REPLAYSSM_F16_SR_CHUNK=1: lp.pack_f16_sr's
    # chunk check, 1 against 0 in one run (bench/results/session36_gpu/call2/gg, Qwen3.5-4B):
    # b1 L8 / L16 0.996-1.000x, b512 L8 nvfp4/fp16sr 266.3 vs 250.6 us (1.063x), fp16sr 1.046x,
    # L16 0.983x / 1.019x (its per-chunk branches cut the flush's straight-line overlap)
    F16_SR_CHUNK = False

    impl = "v2"

    def __init__(self, *args, tpw: Optional[int] = None, prof: bool = False,
                 preamble: Optional[int] = None, whole_rows: bool = False,
                 ring_gates_async: bool = False, v_late: bool = False,
                 flush_whole: bool = False, row_order: bool = False,
                 order_cursors: bool = False, rows: int = 0, flush_positions: int = 0,
                 pf_early: bool = False, flush_halves: int = 0, flush_pf: bool = False, **kw):
        self._tpw_req = tpw
        # the flush's 64-column halves (:func:`flush_halves_for`): 1 = two warps per row tile,
        # 2 = a cluster of two CTAs per (row, head, value block)
        self._halves_req = int(flush_halves)
        if self._halves_req not in (0, 1, 2):
            raise ValueError(f"flush_halves must be 0, 1 or 2, got {flush_halves}")
        self.prof = bool(prof)
        # CTA preamble level (see PREAMBLE_ENV); None: preamble_level(read_fmt, whole_rows)
        self.preamble = None if preamble is None else int(preamble)
        super().__init__(*args, **kw)
        # fp32 read copies (CUDA-core dots): each warp instruction loads one whole 512-byte row
        # (WHOLE_ROWS_ENV; the decode's choice: whole_rows_default); the verify keeps (g, t)
        self.whole_rows = bool(whole_rows) and whole_rows_fit(self.read_fmt, self.tile.tpw)
        self.ring_gates_async = bool(ring_gates_async)
        self.v_late = bool(v_late)
        if self.preamble is None:
            self.preamble = preamble_level(self.read_fmt, self.whole_rows)
        # preamble 4 loads v as raw bits (one per finishing lane) before the slot
        self.v_late = self.v_late or self.preamble >= 4
        self.flush_whole = bool(flush_whole) and flush_whole_fit(
            self.read_fmt, self.rec_fmt, self.split, self.whole_rows, self.L)
        self.row_order = bool(row_order)
        # the order's cursors replace the live ones (the early cursor loads of preamble >= 3)
        self.order_cursors = bool(order_cursors) and self.row_order and self.preamble >= 3
        # split launch (:func:`use_split`): 1 = the non-flush rows only (no flush code), 2 = the
        # flush rows only (no read tile), as a persistent grid of ``flush_positions`` positions
        # walking the order's leading flush rows; both take the rows' cursors from the order
        # entries, so neither sees the cursors the other moves
        self.rows = int(rows)
        self.flush_positions = int(flush_positions)
        if self.rows not in (0, 1, 2):
            raise ValueError(f"rows must be 0, 1 or 2, got {rows}")
        if self.rows and not self.order_cursors:
            raise ValueError("a split launch needs the flush-first order with its cursors")
        if self.rows and (self.prof or self.flush_whole):
            raise ValueError("a split launch has no profiling build and no whole-row flush")
        if self.rows == 2 and self.flush_positions < 1:
            raise ValueError("the split's flush launch needs flush_positions >= 1")
        # L2 prefetches before the PDL wait (PF_EARLY_ENV; not where an order the previous grid
        # writes maps grid positions to rows)
        self.pf_early = (bool(pf_early) and self.pdl != 0 and not self.row_order
                         and type(self) is GDNReplayDecodeV2)
        if (self.tile.halves or self.tile.pair) and (
                self.flush_whole or self.rows or self.whole_rows
                or type(self) is not GDNReplayDecodeV2):
            raise ValueError("flush column halves are for the v2 decode's mma flush only (not "
                             "the whole-row flush, a split launch or the verify)")
        if self.tile.pair and self.row_order:
            raise ValueError("flush halves over a CTA pair need the plain grid (no row order)")
        if (self.tile.halves or self.tile.pair) and self.split and \
                self.read_fmt == self.rec_fmt == "fp8":
            # (the fp8 row amax exchange has one slot per row: a second fp8 copy's could land
            # before the other half has read the first's)
            raise ValueError("flush halves take at most one fp8 copy")
        self.npair = 2 if self.tile.pair else 1
        # the flush's L2 prefetch of the hi rows (:func:`flush_pf_for`; not the whole-row flush)
        self.flush_pf = bool(flush_pf) and not self.flush_whole and self.rows == 0
        # the step's tail (TAIL_ENV): the publish check after the last barrier, the appends
        # from registers
        tail = _env_int(TAIL_ENV)
        tail = 3 if tail is None else tail
        self.late_arrive_check = bool(tail & 1)
        self.k_append_regs = bool(tail & 2)
        # the split flush's Gram on the tensor cores (GRAM_MMA_ENV; the decode's builds with
        # flush code only)
        gram = _env_int(GRAM_MMA_ENV)
        self.gram_mma = (self.split and type(self) is GDNReplayDecodeV2 and self.rows != 1
                         and (gram_mma_default(self.rec_fmt, self.rows) if gram is None
                              else gram == 1))

    def _owns_row(self, h):
        """Whether this launch runs a row at write position ``h`` (:func:`common.owns_row`)."""
        return common.owns_row(self.rows, h, self.L)

    @property
    def _arrive_if(self):
        """The arrive's condition on the row's write position (None: every row arrives)."""
        return self._owns_row if self.rows else None

    @property
    def qk_warp(self) -> int:
        """The warp that normalizes q / k: the last one (its loads overlap warp 0's cursor
        round trip -- and, at level 1, its fence; ``preamble`` 0: warp 0, the session-6
        order)."""
        return 0 if self.preamble == 0 else self.nwarps - 1

    def _gate_thread(self) -> int:
        """The thread that computes the row's gates (warp 1's first)."""
        return 32 if self.nwarps > 1 else 0

    @cute.jit
    def _gates_to_smem(self, sScal: cute.Tensor, mG, mBeta, mALog, mA, mDtBias, mB,
                       row_b: Int32, hv: Int32, tidx: Int32, pre=None):
        """One thread (:meth:`_gate_thread`): the row's gates g, beta, e^g into
        ``sScal[10:13]`` (``pre``: their inputs from ``gate_input_loads``)."""
        if tidx == Int32(self._gate_thread()):
            if const_expr(pre is not None):
                g0, b0 = gdn_gates_from_loads(self.has_g, self.has_beta, self.has_dt_bias, pre)
            else:
                g0, b0 = gdn_gates(self.has_g, self.has_beta, self.has_dt_bias, mG, mBeta,
                                   mALog, mA, mDtBias, mB, row_b, hv)
            sScal[10] = g0
            sScal[11] = b0
            sScal[12] = cute.math.exp(g0)

    def _make_tile(self, block_v, num_threads):
        bv = self.V if block_v is None else int(block_v)
        return ReplayTileV2(self.read_fmt, self.rec_fmt, self.K, self.V, bv, self.L,
                            self.split, self._tpw_req, getattr(self, "_halves_req", 0) == 1,
                            getattr(self, "_halves_req", 0) == 2)

    def _default_min_blocks(self):
        return v2_default_min_blocks(self.tile, self.read_fmt, self.rec_fmt)

    # ---------------------------------------------------------------- device helpers (v2, verify)
    def _lane_coords(self):
        """Thread / CTA coordinates of the v2 mapping: (tidx, batch row, value head hv, value
        block, lane, warp, g4, t4, key head hk, first value row v0, row0, rows); warp w owns tpw
        tiles of 16 value rows, lane (g4, t4) rows g4 and g4 + 8 of each (``rows``, 2 tpw)."""
        TPW = self.tile.tpw
        tidx, _, _ = cute.arch.thread_idx()
        row_b, hv, vblk = cute.arch.block_idx()
        lane = tidx % 32
        warp = tidx // 32
        g4 = lane // 4
        t4 = lane % 4
        hk = hv // self.group
        if const_expr(self.tile.pair):
            vblk = vblk // Int32(2)                 # (grid z: value block x CTA rank)
        v0, row0, rows = self._block_rows(vblk, warp, g4)
        return tidx, row_b, hv, vblk, lane, warp, g4, t4, hk, v0, row0, rows

    def _block_rows(self, vblk, warp, g4):
        """(first value row v0 of block ``vblk``, the lane's first row row0, its rows): warp w
        owns tpw tiles of 16 rows, lane (g4, t4) rows g4 and g4 + 8 of each."""
        v0 = vblk * self.block_v
        if const_expr(self.tile.halves):
            warp = warp % Int32(self.tile.rwarps)     # (both warps of a tile: its rows)
        row0 = v0 + warp * (16 * self.tile.tpw) + g4
        return v0, row0, [_row_of(row0, r) for r in range(2 * self.tile.tpw)]

    def _ordered_coords(self, mOrder: cute.Tensor, warp: Int32, g4: Int32, gpos=None):
        """Flush-first order (``row_order``), grid (HV * nsplit, positions): (grid position,
        batch row and slot from its order entry, hv, value block, hk, v0, row0, rows) --
        :meth:`_lane_coords` for this grid (``gpos``: that position instead of the CTA's)."""
        hvb, gy, _ = cute.arch.block_idx()
        if gpos is None:
            gpos = gy
        hv = hvb // Int32(self.nsplit)
        vblk = hvb % Int32(self.nsplit)
        hk = hv // self.group
        v0, row0, rows = self._block_rows(vblk, warp, g4)
        row_b = mOrder[0, gpos]
        return gpos, row_b, mOrder[1, gpos], hv, vblk, hk, v0, row0, rows

    def _row_slot(self, mIdx, row_b, slot_o, num_slots, pad_slot_id):
        """(slot, valid) of the CTA's row: the order entry's slot ``slot_o`` (``row_order``) or
        :func:`slot_of_row`."""
        if const_expr(not self.row_order):
            return slot_of_row(self.has_idx, mIdx, row_b, num_slots, pad_slot_id)
        valid = (slot_o >= Int32(0)) & (slot_o < num_slots)
        if const_expr(self.has_idx):
            valid = valid & (slot_o != pad_slot_id)
        return slot_o, valid

    @cute.jit
    def _order_cursors(self, mOrder: cute.Tensor, gpos: Int32, tidx: Int32) -> cute.Tensor:
        """Thread 0: the row's cursors as the order kernel read them, in the register form of
        ``common.load_cursors`` (this launch moves them only after every CTA of the row has
        arrived)."""
        cpre = cute.make_rmem_tensor((3,), Int32)
        if tidx == 0:
            for c in cutlass.range_constexpr(3):
                cpre[c] = mOrder[2 + c, gpos]
        return cpre

    def _alloc_flush_smem(self, smem):
        """The flush's shared workspace: staged keys (+ their tf32 pieces where ``ks_split``),
        the Gram matrix and per-position vectors. Returns (sKs, sKh, sKl, sKm, sA, sGv, sEG, sW,
        sBeta, sAm)."""
        tl = self.tile
        LP = tl.lp
        # (the split's non-flush launch uses only the per-position vectors: 4-word stand-ins,
        # its occupancy is not capped by the flush's staging)
        nof = self.rows == 1
        KS = 4 if nof else LP * KS_PITCH
        sKs = smem.allocate_tensor(Float32, cute.make_layout(KS), byte_alignment=16)
        KSS = KS if tl.ks_split else 4
        sKh = smem.allocate_tensor(Uint32, cute.make_layout(KSS), byte_alignment=16)
        sKl = smem.allocate_tensor(Uint32, cute.make_layout(KSS), byte_alignment=16)
        KSM = KSS if tl.f5_pieces == 3 else 4
        sKm = smem.allocate_tensor(Uint32, cute.make_layout(KSM), byte_alignment=16)
        sA = smem.allocate_tensor(Float32, cute.make_layout(4 if nof else LP * LP),
                                  byte_alignment=16)
        sGv = smem.allocate_tensor(Float32, cute.make_layout(32), byte_alignment=16)
        sEG = smem.allocate_tensor(Float32, cute.make_layout(32), byte_alignment=16)
        sW = smem.allocate_tensor(Float32, cute.make_layout(32), byte_alignment=16)
        sBeta = smem.allocate_tensor(Float32, cute.make_layout(32), byte_alignment=16)
        sAm = smem.allocate_tensor(Float32, cute.make_layout(32), byte_alignment=16)
        return sKs, sKh, sKl, sKm, sA, sGv, sEG, sW, sBeta, sAm

    def _load_read_rows(self, wRd, slot, hv, rows, t4, whole_rows: bool = False, lane=None,
                        g4=None, into=None):
        """The read copy's words of this lane's rows: [RW, len(rows)], 16-byte chunks at byte
        64 i + 16 t of each row (RW = words per row per lane). ``whole_rows`` (fp32, one row
        tile per warp): [4, 16] instead, words 4 lane .. 4 lane + 3 of each of the warp's 16
        rows -- each warp instruction reads a whole row (4 full 128-byte lines). ``into``: an
        [RW, len(rows)] tensor to load (not whole rows)."""
        K, R2 = self.K, len(rows)
        if whole_rows:
            rRd = cute.make_rmem_tensor((4, 16), Uint32)
            for i in range(16):
                cute.autovec_copy(cute.local_tile(wRd[slot, hv, rows[0] - g4 + i, None], (4,),
                                                  (lane,)), rRd[None, i])
            return rRd
        RW = 4 * (K * self.tile.rbits // 512)
        rRd = cute.make_rmem_tensor((RW, R2), Uint32) if into is None else into
        for r in range(R2):
            gRow = wRd[slot, hv, rows[r], None]
            for ii in range(RW // 4):
                cute.autovec_copy(cute.local_tile(gRow, (4,), (ii * 4 + t4,)),
                                  cute.local_tile(rRd[None, r], (4,), (ii,)))
        return rRd

    @cute.jit
    def _qk_loads(self, mQ: cute.Tensor, mK: cute.Tensor, qk_index, lane: Int32, cond):
        """Issue the loads of this lane's k, q elements (those ``_normalize_qk_warp`` takes)
        where ``cond``, as raw bits [k / q, element] (``lowprec.load_bits_u32``), unconsumed."""
        n = self.K // 32
        rw = cute.make_rmem_tensor((2, n), Uint32)
        src = (mK, mQ)
        if cond:
            for j in cutlass.range_constexpr(2):
                for i in cutlass.range_constexpr(n):
                    rw[j, i] = lp.load_bits_u32(src[j], qk_index + (lane * n + i,))
        return rw

    def _qk_values(self, rw, j: int):
        """The fp32 values of :meth:`_qk_loads`' bits (``j`` 0: k, 1: q)."""
        return [lp.bits_u32_to_f32(rw[j, i], self.act_dtype) for i in range(rw.shape[1])]

    def _whole_row_dots(self, rRd, sKn, sQn, lane, g4, t4):
        """S0 kn, S0 qn of the ``whole_rows`` tile (:meth:`_whole_row_dots_of` its words)."""
        return self._whole_row_dots_of(lambda i: [lp.bits_f32(rRd[w, i]) for w in range(4)],
                                       sKn, sQn, lane, g4, t4)

    def _whole_row_dots_of(self, row_vals, sKn, sQn, lane, g4, t4):
        """S kn, S qn of a whole-row tile (``row_vals(i)``: this lane's 4 fp32 values of the
        warp's row i): each lane's 4-element partial dots of the warp's 16 rows, summed over
        the warp by one transposed butterfly (lane l then holds value l = (row l // 2, kn /
        qn), ``treduce``), moved to lane (g, 0) for its rows g, g + 8 (0 in the other lanes of
        the quad, whose buffer terms the quad butterfly adds)."""
        kk = cute.make_rmem_tensor((4,), Float32)
        qq = cute.make_rmem_tensor((4,), Float32)
        a4 = _kq_addr(Int32(4) * lane) // 4
        cute.autovec_copy(cute.local_tile(sKn, (4,), (a4,)), kk)
        cute.autovec_copy(cute.local_tile(sQn, (4,), (a4,)), qq)
        parts = []
        for i in range(16):
            vals = row_vals(i)
            pk = vals[0] * kk[0]
            pq = vals[0] * qq[0]
            for e in range(1, 4):
                pk = pk + vals[e] * kk[e]
                pq = pq + vals[e] * qq[e]
            parts += [pk, pq]
        rest, _ = treduce(parts, 32, lane)
        first = t4 == Int32(0)
        z = Float32(0.0)
        got = [Float32(_sel(first, cute.arch.shuffle_sync(rest[0], Int32(2) * g4 + Int32(d)), z))
               for d in (0, 1, 16, 17)]
        return [got[0], got[2]], [got[1], got[3]]

    def _normalize_qk_warp(self, mQ, mK, qk_index, lane, scale, sKn, kn_at, sQn, qn_at,
                           with_norms: bool, pre=None):
        """One warp: kn = k * kinv, qn = (q * qinv) * scale of the token at ``mK[qk_index +
        (col,)]`` into the padded vectors ``sKn[kn_at + _kq_addr(col)]``, ``sQn[qn_at + ...]``
        (``*_at`` None: no offset). Returns (kinv, kq = kn . qn) (warp-reduced) and this lane's
        partial squared norms of kn, qn (``with_norms``; else 0). ``pre``: k, q already loaded
        by :meth:`_qk_loads`."""
        K = self.K
        kv = []
        qv = []
        ssk = Float32(0.0)
        ssq = Float32(0.0)
        pk = None if pre is None else self._qk_values(pre, 0)
        pq = None if pre is None else self._qk_values(pre, 1)
        for i in range(K // 32):
            if pre is not None:
                kx = pk[i]
                qx = pq[i]
            else:
                kx = mK[qk_index + (lane * (K // 32) + i,)].to(Float32)
                qx = mQ[qk_index + (lane * (K // 32) + i,)].to(Float32)
            kv.append(kx)
            qv.append(qx)
            ssk = ssk + kx * kx
            ssq = ssq + qx * qx
        kinv_w = Float32(1.0)
        qinv_w = Float32(1.0)
        if self.use_l2:
            ssk = cute.arch.warp_reduction(ssk, lambda a, b: a + b, threads_in_group=32)
            ssq = cute.arch.warp_reduction(ssq, lambda a, b: a + b, threads_in_group=32)
            kinv_w = cute.math.rsqrt(ssk + Float32(1e-6))
            qinv_w = cute.math.rsqrt(ssq + Float32(1e-6))
        kq_w = Float32(0.0)
        nk = Float32(0.0)
        nq = Float32(0.0)
        for i in range(K // 32):
            kn = kv[i] * kinv_w
            qn = (qv[i] * qinv_w) * scale
            kq_w = kq_w + kn * qn
            if with_norms:
                nk = nk + kn * kn
                nq = nq + qn * qn
            col = lane * (K // 32) + i
            sKn[_kq_addr(col) if kn_at is None else kn_at + _kq_addr(col)] = kn
            sQn[_kq_addr(col) if qn_at is None else qn_at + _kq_addr(col)] = qn
        kq_w = cute.arch.warp_reduction(kq_w, lambda a, b: a + b, threads_in_group=32)
        return kinv_w, kq_w, nk, nq

    @cute.jit
    def _v_bits_load(self, mV: cute.Tensor, row_b: Int32, hv: Int32, row0: Int32, t4: Int32):
        """v of the one value row this lane finishes (lane t < R2: row ``rows[t]``) as raw bits
        (``lowprec.load_bits_u32``), 0 in the other lanes."""
        vbits = Uint32(0)
        if t4 < Int32(2 * self.tile.tpw):
            vbits = lp.load_bits_u32(mV, (row_b, hv, _row_of(row0, t4)))
        return vbits

    def _row_input_loads(self, mQ, mK, mV, mG, mBeta, mALog, mA, mDtBias, mB, row_b, hv, hk,
                         tidx, lane, warp, row0, t4, with_v: bool):
        """Preambles 3 / 4: the gate inputs (gate thread), q / k (q / k warp) and, ``with_v``,
        v (finishing lanes) of the row, issued unconsumed -- (gate loads, q / k bits, v bits or
        None)."""
        gpre = gate_input_loads(self.has_g, self.has_beta, self.has_dt_bias, mG, mBeta, mALog,
                                mA, mDtBias, mB, row_b, hv, tidx == Int32(self._gate_thread()))
        qkpre = self._qk_loads(mQ, mK, (row_b, hk), lane, warp == Int32(self.qk_warp))
        return gpre, qkpre, self._v_bits_load(mV, row_b, hv, row0, t4) if with_v else None

    @cute.jit
    def _load_ring_u(self, mUb: cute.Tensor, slot: Int32, hv: Int32, origin: Int32, m: Int32,
                     rows, t4: Int32):
        """u of the committed ring entries this lane adds (positions p = t4 + 4 i < m) for its
        rows: [NU, len(rows)], 0 elsewhere."""
        NU, R2, RING = self.tile.nu, len(rows), self.ring
        rU = cute.make_rmem_tensor((NU, R2), Float32)
        rU.fill(0.0)
        for i in cutlass.range_constexpr(NU):
            p = t4 + 4 * i
            if p < m:
                ph = _ring(origin, p, RING)
                for r in cutlass.range_constexpr(R2):
                    rU[i, r] = mUb[slot, hv, ph, rows[r]]
        return rU

    @cute.jit
    def _prefetch_pre_wait(self, mHi: cute.Tensor, mLo: Optional[cute.Tensor],
                           mLoS: Optional[cute.Tensor], mLoG: Optional[cute.Tensor],
                           mKb: cute.Tensor, mKinvb: cute.Tensor, mGb: cute.Tensor,
                           mUb: cute.Tensor, mVb: Optional[cute.Tensor], mBb: Optional[cute.Tensor],
                           mWpos: cute.Tensor, mOrig: cute.Tensor, mFcnt: cute.Tensor,
                           mArr: cute.Tensor, mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor,
                           mIdx: Optional[cute.Tensor]):
        """``pf_early``: before ``griddepcontrol.wait``, lane 0 of warps 0-3 issues L2 prefetches
        of what the CTA's dependent load chain reads after it -- warp 0 its read tile (hi for
        shared pairs), warp 1 the tile's scales and the cursors, warp 2 the ring entries (keys,
        1/|k|, g, u; v and beta for split pairs), warp 3 q / k / v. The slot comes from an
        L2-only load (the previous grid may still write it); it only places these hints, the
        kernel reads it again after the wait. Pad rows: nothing but q / k / v."""
        tidx, _, _ = cute.arch.thread_idx()
        row_b, hv, vblk = cute.arch.block_idx()
        if const_expr(self.tile.pair):
            vblk = vblk // Int32(2)                 # (grid z: value block x CTA rank)
        K, V, BV, R = self.K, self.V, self.block_v, self.ring
        hk = hv // self.group
        v0 = vblk * BV
        ab = self.act_dtype.width // 8
        slot = common.hinted_slot(mIdx, row_b, self.has_idx)
        if tidx % 32 == 0:
            warp = tidx // 32
            if slot >= 0 and slot < mWpos.shape[0]:
                fmt = self.read_fmt
                mRd = mLo if const_expr(self.split) else mHi
                if warp == 0:
                    common.prefetch_l2_span(mRd[slot, hv, v0, None].iterator,
                                            BV * K * FMT_BITS[fmt] // 8)
                if warp == 1:
                    if const_expr(self.split and fmt == "nvfp4"):
                        common.prefetch_l2_span(mLoS[slot, hv, v0, None].iterator, BV * (K // 16))
                        common.prefetch_l2(mLoG.iterator + cute.crd2idx((slot, hv), mLoG.layout))
                    if const_expr(self.split and fmt == "fp8"):
                        common.prefetch_l2(mLoS.iterator + cute.crd2idx((slot, hv, v0),
                                                                       mLoS.layout))
                    common.prefetch_row_cursors(slot, mWpos, mOrig, mFcnt, mArr)
                if warp == 2:
                    common.prefetch_l2_span(mKb[slot, hk, None, None].iterator, R * K * ab)
                    common.prefetch_l2_span(mKinvb[slot, hk, None].iterator, R * 4)
                    common.prefetch_l2_span(mGb[slot, hv, None].iterator, R * 4)
                    common.prefetch_l2_span(mUb[slot, hv, None, None].iterator, R * V * 4)
                    if const_expr(self.split):
                        common.prefetch_l2_span(mVb[slot, hv, None, None].iterator, R * V * ab)
                        common.prefetch_l2_span(mBb[slot, hv, None].iterator, R * 4)
            if warp == 3:
                common.prefetch_l2_span(mQ[row_b, hk, None].iterator, K * ab)
                common.prefetch_l2_span(mK[row_b, hk, None].iterator, K * ab)
                common.prefetch_l2_span(mV[row_b, hv, None].iterator, V * ab)

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
               mIdx: Optional[cute.Tensor], mOrder: Optional[cute.Tensor],
               mOut: cute.Tensor, scale: Float32,
               pad_slot_id: Int32):
        if const_expr(self.pf_early):
            self._prefetch_pre_wait(mHi, mLo, mLoS, mLoG, mKb, mKinvb, mGb, mUb, mVb, mBb, mWpos,
                                    mOrig, mFcnt, mArr, mQ, mK, mV, mIdx)
        common.pdl_prologue(self.pdl)
        if const_expr(self.rows == 2):
            # the split's flush launch: a persistent grid (HV * nsplit, P) walks the order's
            # leading flush rows -- positions y, y + P, ... up to the first one that does not
            # flush (the flush-first order puts every flushing row first)
            _, y, _ = cute.arch.block_idx()
            npos = cute.arch.grid_dim()[1]
            go = Boolean(True)
            for it in cutlass.range((mQ.shape[0] - y + npos - Int32(1)) // npos, unroll=1):
                if go:
                    cute.arch.barrier()           # the previous row's shared memory is free
                    go = self._row(mHi, mHiS, mHiG, mLo, mLoS, mLoG, mKb, mKinvb, mGb, mUb,
                                   mVb, mBb, mWpos, mOrig, mFcnt, mPend, mArr, mSeed, mQ, mK, mV,
                                   mG, mBeta, mALog, mA, mDtBias, mB, mIdx, mOrder, mOut, scale,
                                   pad_slot_id, y + it * npos)
        else:
            self._row(mHi, mHiS, mHiG, mLo, mLoS, mLoG, mKb, mKinvb, mGb, mUb, mVb, mBb, mWpos,
                      mOrig, mFcnt, mPend, mArr, mSeed, mQ, mK, mV, mG, mBeta, mALog, mA, mDtBias,
                      mB, mIdx, mOrder, mOut, scale, pad_slot_id, None)

    @cute.jit
    def _row(self, mHi: cute.Tensor, mHiS: Optional[cute.Tensor], mHiG: Optional[cute.Tensor],
             mLo: Optional[cute.Tensor], mLoS: Optional[cute.Tensor],
             mLoG: Optional[cute.Tensor], mKb: cute.Tensor, mKinvb: cute.Tensor,
             mGb: cute.Tensor, mUb: cute.Tensor, mVb: Optional[cute.Tensor],
             mBb: Optional[cute.Tensor], mWpos: cute.Tensor, mOrig: cute.Tensor,
             mFcnt: cute.Tensor, mPend: cute.Tensor, mArr: cute.Tensor,
             mSeed: Optional[cute.Tensor], mQ: cute.Tensor, mK: cute.Tensor, mV: cute.Tensor,
             mG: Optional[cute.Tensor], mBeta: Optional[cute.Tensor],
             mALog: Optional[cute.Tensor], mA: Optional[cute.Tensor],
             mDtBias: Optional[cute.Tensor], mB: Optional[cute.Tensor],
             mIdx: Optional[cute.Tensor], mOrder: Optional[cute.Tensor],
             mOut: cute.Tensor, scale: Float32,
             pad_slot_id: Int32, gpos_in):
        """One grid position of the step (a row, value head, value block): the CTA's whole
        work. ``gpos_in``: the order position (the split's flush launch walks several);
        None: the CTA's own. Returns whether the row is this launch's (``rows`` = 2: a
        flush row)."""
        if const_expr(self.prof):
            pg0 = common.sreg64("globaltimer")
            pc0 = common.sreg64("clock64")              # 0: start
        K, BV, L, RING = self.K, self.block_v, self.L, self.ring
        NT, NW = self.num_threads, self.nwarps
        tl = self.tile
        TPW = tl.tpw
        R2 = 2 * TPW
        NKT, LP, NPW, LW, NU = tl.nkt, tl.lp, tl.npw, tl.lw, tl.nu
        RFMT = self.read_fmt
        MMA = tl.mma
        MK = "bf16" if RFMT == "bf16" else "f16"
        KP = K + K // 8

        tidx, row_b, hv, vblk, lane, warp, g4, t4, hk, v0, row0, rows = self._lane_coords()
        # flush halves: the column half (run) this warp / CTA holds in the flush, and whether it
        # is the one that finishes the rows (the other reads nothing in a non-flush step)
        rank = None
        first = None
        if const_expr(tl.halves):
            first = warp < Int32(tl.rwarps)
        if const_expr(tl.pair):
            _, _, bz = cute.arch.block_idx()
            rank = bz % Int32(2)
            first = rank == Int32(0)
        gpos = row_b
        slot_o = Int32(0)
        if const_expr(self.row_order):
            gpos, row_b, slot_o, hv, vblk, hk, v0, row0, rows = self._ordered_coords(
                mOrder, warp, g4, gpos_in)

        smem = cutlass.memory.SmemAllocator()
        sCur = smem.allocate_tensor(Int32, cute.make_layout(4), byte_alignment=16)
        sScal = smem.allocate_tensor(Float32, cute.make_layout(16), byte_alignment=16)
        sKQ = smem.allocate_tensor(Float32, cute.make_layout(2 * KP), byte_alignment=16)
        sKn = cute.make_tensor(sKQ.iterator, cute.make_layout(KP))
        sQn = cute.make_tensor(sKQ.iterator + KP, cute.make_layout(KP))
        sBf = smem.allocate_tensor(Uint32, cute.make_layout(512 if MMA else 4), byte_alignment=16)
        sC = smem.allocate_tensor(Float32, cute.make_layout(32), byte_alignment=16)
        sD = smem.allocate_tensor(Float32, cute.make_layout(32), byte_alignment=16)
        sWn = smem.allocate_tensor(Float32, cute.make_layout(32), byte_alignment=16)
        sKs, sKh, sKl, sKm, sA, sGv, sEG, sW, sBeta, sAm = self._alloc_flush_smem(smem)
        sX = None
        if const_expr(tl.halves or tl.pair):
            sX = smem.allocate_tensor(Float32, cute.make_layout(tl.xch_words), byte_alignment=16)

        wHi, wLo, wRd, mRdS, mRdG = self._copy_word_views(mHi, mHiS, mHiG, mLo, mLoS, mLoG)

        gpre4 = None
        qkpre4 = None
        vbits = Uint32(0)
        if const_expr(self.preamble >= 4):
            # the row's own inputs do not depend on its slot: issued before the slot load
            # returns (a pad row's are read and unused)
            gpre4, qkpre4, vbits = self._row_input_loads(mQ, mK, mV, mG, mBeta, mALog, mA,
                                                       mDtBias, mB, row_b, hv, hk, tidx, lane,
                                                       warp, row0, t4, True)
        slot, valid = self._row_slot(mIdx, row_b, slot_o, mWpos.shape[0], pad_slot_id)
        if const_expr(self.rows):
            # a split launch's half: the other half's rows end here (no read tile, cursors or
            # preamble; the order entry's write position, loaded beside its row and slot)
            valid = valid & self._owns_row(mOrder[2, gpos])
        res = Boolean(False)
        if valid:
            EARLY = self.preamble >= 2        # the tile before the cursors and the gates
            old = Int32(0)
            cpre = None
            gpre = gpre4
            qkpre = qkpre4
            if const_expr(self.order_cursors):
                cpre = self._order_cursors(mOrder, gpos, tidx)
            elif const_expr(self.preamble >= 3):
                # the small loads first (cursors, gates, q / k), consumed after the tile's
                # issue: they no longer queue behind it
                cpre = common.load_cursors(mWpos, mOrig, mFcnt, slot, tidx)
            if const_expr(self.preamble == 3):
                gpre, qkpre, _ = self._row_input_loads(mQ, mK, mV, mG, mBeta, mALog, mA,
                                                       mDtBias, mB, row_b, hv, hk, tidx, lane,
                                                       warp, row0, t4, False)
            if const_expr(not EARLY):
                old = common.read_cursors_and_arrive(sCur, mWpos, mOrig, mFcnt, mArr, slot, tidx)
                self._gates_to_smem(sScal, mG, mBeta, mALog, mA, mDtBias, mB, row_b, hv, tidx)
            # ---- speculative loads (independent of the cursors): v (unless v_late), the read
            # tile and its scales (EARLY: before the cursors and the gates, whose waits would
            # hold warps 0 and 1 back a round trip)
            rV = None
            if const_expr(not self.v_late):
                rV = cute.make_rmem_tensor((R2,), Float32)
                for r in cutlass.range_constexpr(R2):
                    rV[r] = mV[row_b, hv, rows[r]].to(Float32)
            RW = 4 * (K * tl.rbits // 512)            # words per row per lane (16 B chunks)
            rRd = None
            if const_expr(self.rows != 2 and (tl.halves or tl.pair)):
                # flush halves: the tile's second warp / CTA reads nothing in a non-flush step
                rRd = cute.make_rmem_tensor((RW, R2), Uint32)
                rRd.fill(0)
                if first:
                    self._load_read_rows(wRd, slot, hv, rows, t4, into=rRd)
            elif const_expr(self.rows != 2):          # (the split's flush launch: no read tile)
                rRd = self._load_read_rows(wRd, slot, hv, rows, t4, self.whole_rows, lane, g4)
            rsc = [Float32(1.0)] * R2
            rsb = [Uint32(0)] * (2 * R2)
            rsg = Float32(1.0)
            if const_expr(RFMT == "fp8" and self.rows != 2):
                rsc = [mRdS[slot, hv, rows[r]] for r in range(R2)]
            if const_expr(RFMT == "nvfp4" and self.rows != 2):
                rsb = [Uint32(mRdS[slot, hv, rows[i // 2], 2 * t4 + (i % 2)])
                       for i in range(2 * R2)]
                rsg = mRdG[slot, hv]
                if const_expr(not EARLY):             # (EARLY: scaled after the barrier)
                    rsg = rsg * Float32(16384.0)
            if const_expr(self.v_late and self.preamble < 4):
                # v of the one row this lane finishes, raw bits, issued behind the tile
                vbits = self._v_bits_load(mV, row_b, hv, row0, t4)
            if const_expr(EARLY):
                old = common.read_cursors_and_arrive(sCur, mWpos, mOrig, mFcnt, mArr, slot, tidx,
                                                     dep_arrive=True, pre=cpre,
                                                     arrive_if=self._arrive_if)
                self._gates_to_smem(sScal, mG, mBeta, mALog, mA, mDtBias, mB, row_b, hv, tidx,
                                    pre=gpre)
            # ---- q / k (warp QKW): kn, qn (padded) in smem, kq, kinv, B-piece scales
            if warp == Int32(self.qk_warp):
                kinv_w, kq_w, nk, nq = self._normalize_qk_warp(mQ, mK, (row_b, hk), lane, scale,
                                                               sKn, None, sQn, None, True,
                                                               pre=qkpre)
                if const_expr(MMA and MK == "f16"):
                    nk = cute.arch.warp_reduction(nk, lambda a, b: a + b, threads_in_group=32)
                    nq = cute.arch.warp_reduction(nq, lambda a, b: a + b, threads_in_group=32)
                if lane == 0:
                    sScal[0] = kq_w
                    sScal[1] = kinv_w
                    if const_expr(MMA and MK == "f16"):
                        s_k, i_k = _pow2_scale_of_norm(cute.math.sqrt(nk))
                        s_q, i_q = _pow2_scale_of_norm(cute.math.sqrt(nq))
                        sScal[2] = s_k
                        sScal[3] = s_q
                        sScal[4] = i_k
                        sScal[5] = i_q
                    else:
                        sScal[2] = Float32(1.0)
                        sScal[3] = Float32(1.0)
                        sScal[4] = Float32(1.0)
                        sScal[5] = Float32(1.0)
            if const_expr(self.late_arrive_check):
                if tidx == 0:
                    sCur[3] = Int32(0)               # (the opaque zero of the publish check)
            cute.arch.barrier()
            if const_expr(RFMT == "nvfp4" and EARLY):
                rsg = rsg * Float32(16384.0)
            if const_expr(self.prof):
                pcs = [pc0, common.sreg64("clock64")]   # 1: cursors, q / k, gates known
                p2 = Int64(0)
                p3 = Int64(0)
                p4 = Int64(0)
                rFs = cute.make_rmem_tensor((12,), Int64)    # flush sub-phases, generic votes
                rFs.fill(0)
            h = sCur[0]
            origin = sCur[1]
            gen = sCur[2]
            kq = sScal[0]
            kinv = sScal[1]
            g = sScal[10]
            beta = sScal[11]
            alpha = sScal[12]
            flush = h >= Int32(L)
            mine = self._owns_row(h)
            if const_expr(self.rows == 2):
                res = flush
            hf = cutlass.min(h, Int32(L))
            m = Int32(_sel(flush, Int32(0), h))
            origin2 = Int32(_sel(flush, _ring(origin, h, RING), origin))
            phys_new = _ring(origin2, m, RING)
            rP = cute.make_rmem_tensor((2, R2), Float32)     # (kn / qn, row) lane partials
            if flush:
                if const_expr(self.rows != 1):
                    if const_expr(self.prof):
                        p2 = common.sreg64("clock64")        # (flush rows: phase 3 = the flush)
                    if const_expr(self.flush_whole):
                        self._flush_whole(mKb, mKinvb, mGb, mUb, wHi, rRd, sScal, sKn, sQn, sKh,
                                          sKm, sW, rP, slot, hv, hk, v0, origin, tidx, lane,
                                          warp, g4, t4, rFs if const_expr(self.prof) else None)
                    else:
                        self._flush(mHiS, mHiG, mLoS, mLoG, mKb, mKinvb, mGb, mUb, mVb, mBb,
                                    mSeed, wHi, wLo, sScal, sKn, sQn, sKs, sKh, sKm, sKl, sA, sGv,
                                    sEG, sW, sBeta, sAm, rP,
                                    slot, hv, hk, row0, origin, hf, gen, tidx, lane, warp, g4, t4,
                                    rFs if const_expr(self.prof) else None, sX, rank)
                    if const_expr(self.prof):
                        p3 = common.sreg64("clock64")
                        p4 = p3
            else:
                if const_expr(self.rows != 2):
                    # ================= non-flush row =============================================
                    # ring loads: keys of the coefficient dots (warp w: positions w + NW i), u of
                    # the rows (lane t: positions t + 4 i); warp 0 also g and kinv (lane p)
                    gp = Float32(0.0)
                    kvp = Float32(0.0)
                    if warp == 0:
                        if lane < m:
                            ph = _ring(origin, lane, RING)
                            if const_expr(self.ring_gates_async):
                                # into the flush's (here unused) per-position vectors, no register
                                # held: a spill store of a loaded register would wait for it
                                a4 = cute.make_copy_atom(cpasync.CopyG2SOp(), Float32,
                                                         num_bits_per_copy=32)
                                cute.copy(a4, cute.local_tile(mGb[slot, hv, None], (1,), (ph,)),
                                          cute.local_tile(sGv, (1,), (lane,)))
                                cute.copy(a4, cute.local_tile(mKinvb[slot, hk, None], (1,), (ph,)),
                                          cute.local_tile(sEG, (1,), (lane,)))
                            else:
                                gp = mGb[slot, hv, ph]
                                kvp = mKinvb[slot, hk, ph]
                        if const_expr(self.ring_gates_async):
                            cute.arch.cp_async_commit_group()
                    rk = cute.make_rmem_tensor((K // 32, NPW), self.act_dtype)
                    rk.fill(0.0)
                    for i in cutlass.range_constexpr(NPW):
                        p = warp + i * NW
                        if p < m:
                            ph = _ring(origin, p, RING)
                            cute.autovec_copy(cute.local_tile(mKb[slot, hk, ph, None], (K // 32,),
                                                              (lane,)), rk[None, i])
                    rU = self._load_ring_u(mUb, slot, hv, origin, m, rows, t4)
                    # B fragments of the mma: kn / qn split into pieces, each (vector, element)
                    # scattered to its half-word slot in fragment order (column g' = 3 v + piece)
                    if const_expr(MMA):
                        sBh = cute.recast_tensor(sBf, cutlass.Uint16)
                        for it in cutlass.range_constexpr((2 * K + NT - 1) // NT):
                            e_ = tidx + it * NT
                            if e_ < Int32(2 * K):
                                vq = e_ // K
                                el = e_ % K
                                x = sKQ[vq * KP + _kq_addr(el)] * sScal[2 + vq]
                                kap, rho, tt, eta = _frag_slot(RFMT, el)
                                rnd = _round_f16 if MK == "f16" else _round_bf16
                                hv0 = rnd(x)
                                r1 = _sub_rn(x, hv0)
                                hv1 = rnd(r1)
                                hv2 = rnd(_sub_rn(r1, hv1))
                                for pc in cutlass.range_constexpr(3):
                                    col = vq * 3 + pc
                                    hidx = (((kap * 32 + col * 4 + tt) * 2 + rho) * 2) + eta
                                    sBh[hidx] = _to_half_bits(MK, (hv0, hv1, hv2)[pc])
                        for it in cutlass.range_constexpr((128 + NT - 1) // NT):
                            e_ = tidx + it * NT
                            if e_ < Int32(128):
                                # columns 6, 7 (lanes g' = 6, 7): zero words
                                kap = e_ // 16
                                rr = e_ % 16
                                sBf[(kap * 32 + 24 + rr // 2) * 2 + rr % 2] = Uint32(0)
                    if const_expr(MMA):
                        cute.arch.barrier()                  # the B fragments
                    if const_expr(self.prof):
                        p2 = common.sreg64("clock64")        # 2: ring loads issued, B fragments
                    # ---- S0 kn, S0 qn partials from the read copy
                    ak = [Float32(0.0)] * R2
                    aq = [Float32(0.0)] * R2
                    if const_expr(MMA):
                        bfr = cute.make_rmem_tensor((2, 8), Uint32)
                        for kap in cutlass.range_constexpr(8):
                            cute.autovec_copy(cute.local_tile(sBf, (2,), (kap * 32 + lane,)),
                                              bfr[None, kap])
                        fk = sScal[4] * rsg
                        fq = sScal[5] * rsg
                        for tr in cutlass.range_constexpr(TPW):
                            hreg = [[None] * 16, [None] * 16]
                            for rr in cutlass.range_constexpr(2):
                                r = 2 * tr + rr
                                if const_expr(RFMT == "nvfp4"):
                                    s2 = [_e4m3_bcast_f16x2(rsb[2 * r]),
                                          _e4m3_bcast_f16x2(rsb[2 * r + 1])]
                                    for q in cutlass.range_constexpr(4):
                                        hs = _nvfp4_word_f16x2(rRd[q, r])
                                        for i in cutlass.range_constexpr(4):
                                            hreg[rr][4 * q + i] = _f16x2_mul(hs[i], s2[q // 2])
                                elif const_expr(RFMT == "fp8"):
                                    for q in cutlass.range_constexpr(8):
                                        hreg[rr][2 * q] = lp._e4m3x2_to_f16x2(rRd[q, r], False)
                                        hreg[rr][2 * q + 1] = lp._e4m3x2_to_f16x2(rRd[q, r], True)
                                else:
                                    for q in cutlass.range_constexpr(16):
                                        hreg[rr][q] = rRd[q, r]
                            acc = [Float32(0.0)] * 4
                            for kap in cutlass.range_constexpr(8):
                                acc = _mma(MK, [hreg[0][2 * kap], hreg[1][2 * kap],
                                                hreg[0][2 * kap + 1], hreg[1][2 * kap + 1]],
                                           [bfr[0, kap], bfr[1, kap]], acc)
                            # D columns: 0..2 kn pieces, 3..5 qn pieces (lane t: columns 2t, 2t+1)
                            z = Float32(0.0)
                            for rr in cutlass.range_constexpr(2):
                                c0 = acc[2 * rr]
                                c1 = acc[2 * rr + 1]
                                r = 2 * tr + rr
                                pk_ = Float32(_sel(t4 == Int32(0), c0 + c1,
                                                   _sel(t4 == Int32(1), c0, z)))
                                pq_ = Float32(_sel(t4 == Int32(1), c1,
                                                   _sel(t4 == Int32(2), c0 + c1, z)))
                                ak[r] = pk_ * (fk * rsc[r])
                                aq[r] = pq_ * (fq * rsc[r])
                    elif const_expr(self.whole_rows):
                        ak, aq = self._whole_row_dots(rRd, sKn, sQn, lane, g4, t4)
                    else:
                        for r in cutlass.range_constexpr(R2):
                            for ii in cutlass.range_constexpr(RW // 4):
                                base = Int32(16 * ii) + Int32(4) * t4
                                kk = cute.make_rmem_tensor((4,), Float32)
                                qq = cute.make_rmem_tensor((4,), Float32)
                                a4 = _kq_addr(base) // 4
                                cute.autovec_copy(cute.local_tile(sKn, (4,), (a4,)), kk)
                                cute.autovec_copy(cute.local_tile(sQn, (4,), (a4,)), qq)
                                vals = _read_chunk_values(RFMT, [rRd[4 * ii + w, r]
                                                                 for w in range(4)])
                                for e in cutlass.range_constexpr(4):
                                    ak[r] = ak[r] + vals[e] * kk[e]
                                    aq[r] = aq[r] + vals[e] * qq[e]
                    if const_expr(self.prof):
                        p3 = common.sreg64("clock64")        # 3: read tile landed, S0 dots
                    # warp 0: prefix of g (sequential order), weights * kinv, e^{G_{m-1}}
                    if warp == 0:
                        if const_expr(self.ring_gates_async):
                            cute.arch.cp_async_wait_group(0)     # this lane's own copies
                            gp = Float32(_sel(lane < m, sGv[lane], Float32(0.0)))
                            kvp = Float32(_sel(lane < m, sEG[lane], Float32(0.0)))
                        Gp = _seq_prefix(gp, lane, L)
                        Gm1 = cute.arch.shuffle_sync(Gp, cutlass.max(m - Int32(1), Int32(0)))
                        Gm1 = Float32(_sel(m > Int32(0), Gm1, Float32(0.0)))
                        sWn[lane] = Float32(_sel(lane < m, cute.math.exp(Gm1 - Gp) * kvp,
                                                 Float32(0.0)))
                        if lane == 0:
                            sScal[9] = cute.math.exp(Gm1)
                    # raw coefficient dots kn_p.kn, kn_p.qn (unnormalised keys): 2 NPW partial sums
                    # per lane, summed over the warp by one transposed butterfly
                    base = _kq_addr(lane * (K // 32))
                    kk = cute.make_rmem_tensor((K // 32,), Float32)
                    qq = cute.make_rmem_tensor((K // 32,), Float32)
                    cute.autovec_copy(cute.local_tile(sKn, (K // 32,), (base // (K // 32),)), kk)
                    cute.autovec_copy(cute.local_tile(sQn, (K // 32,), (base // (K // 32),)), qq)
                    parts = []
                    for i in cutlass.range_constexpr(NPW):
                        dk = Float32(0.0)
                        dq = Float32(0.0)
                        for e in cutlass.range_constexpr(K // 32):
                            x = rk[e, i].to(Float32)
                            dk = dk + x * kk[e]
                            dq = dq + x * qq[e]
                        parts += [dk, dq]
                    rest, vbase = treduce(parts, 32, lane)
                    nrep = max(1, 32 // (2 * NPW))      # lanes holding the same sum
                    if lane % Int32(nrep) == Int32(0):
                        for ri in cutlass.range_constexpr(len(rest)):
                            vi = vbase + Int32(ri)
                            p = warp + (vi // Int32(2)) * NW
                            if p < Int32(32):
                                if vi % Int32(2) == Int32(0):
                                    sC[p] = rest[ri]
                                else:
                                    sD[p] = rest[ri]
                    cute.arch.barrier()                      # coefficients, weights
                    if const_expr(self.prof):
                        p4 = common.sreg64("clock64")        # 4: coefficient dots, weights
                    eG = sScal[9]
                    # ---- buffer terms (positions p = t (mod 4)) + the e^G-scaled dot partials
                    bk = [Float32(0.0)] * R2
                    bq = [Float32(0.0)] * R2
                    for i in cutlass.range_constexpr(NU):
                        p = t4 + 4 * i
                        pc = cutlass.min(p, Int32(31))
                        wv = Float32(_sel(p < Int32(LW), sWn[pc], Float32(0.0)))
                        cc = wv * sC[pc]
                        dd = wv * sD[pc]
                        for r in cutlass.range_constexpr(R2):
                            bk[r] = bk[r] + cc * rU[i, r]
                            bq[r] = bq[r] + dd * rU[i, r]
                    for r in cutlass.range_constexpr(R2):
                        rP[0, r] = eG * ak[r] + bk[r]
                        rP[1, r] = eG * aq[r] + bq[r]
            if const_expr(self.prof):
                pcs.extend([p2, p3, p4])
            if mine:                  # (a split launch: the other launch's rows do nothing)
                # ================= quad butterfly: full sums of every row in every lane ===========
                for o in cutlass.range_constexpr(2):
                    for r in cutlass.range_constexpr(R2):
                        for c in cutlass.range_constexpr(2):
                            rP[c, r] = rP[c, r] + cute.arch.shuffle_sync_bfly(rP[c, r],
                                                                              offset=1 << o)
                # ================= per value row: u, o, appends (lane t finishes row r = t) =======
                fin = t4 < Int32(R2)
                if const_expr(tl.halves or tl.pair):
                    fin = fin & first              # (the tile's first warp / CTA finishes)
                if fin:
                    sk = rP[0, 0]
                    sq = rP[1, 0]
                    # (v_late: converted after the row selects below, where the bits are used)
                    vraw = Float32(0.0) if const_expr(self.v_late) else rV[0]
                    vrow = rows[0]
                    for r in cutlass.range_constexpr(1, R2):
                        isr = t4 == Int32(r)
                        sk = Float32(_sel(isr, rP[0, r], sk))
                        sq = Float32(_sel(isr, rP[1, r], sq))
                        if const_expr(not self.v_late):
                            vraw = Float32(_sel(isr, rV[r], vraw))
                        vrow = Int32(_sel(isr, rows[r], vrow))
                    if const_expr(self.v_late):
                        vraw = lp.bits_u32_to_f32(vbits, self.act_dtype)
                    u = beta * (vraw - alpha * sk)
                    o = alpha * sq + kq * u
                    mOut[row_b, hv, vrow] = o.to(self.act_dtype)
                    mUb[slot, hv, phys_new, vrow] = u
                    if const_expr(self.split):
                        if const_expr(self.v_late or self.k_append_regs):
                            # v itself (exact in fp32), not a second load of it
                            mVb[slot, hv, phys_new, vrow] = vraw.to(mVb.element_type)
                        else:
                            mVb[slot, hv, phys_new, vrow] = mV[row_b, hv, vrow]
                app = vblk == 0
                if const_expr(tl.pair):
                    app = app & first                # (one CTA of the pair appends)
                if app:
                    if hv % self.group == 0:
                        if const_expr(self.k_append_regs and qkpre is not None):
                            # the q / k warp's own bits of k: one store per lane, no reload
                            # (warp 0's 16 threads of 8 loads + stores ran them one round trip
                            # at a time at the CTA's end)
                            if warp == Int32(self.qk_warp):
                                kb = cute.make_rmem_tensor((K // 32,), self.act_dtype)
                                for i in cutlass.range_constexpr(K // 32):
                                    kb[i] = lp.bits_u32_to_f32(qkpre[0, i],
                                                               self.act_dtype).to(self.act_dtype)
                                cute.autovec_copy(kb, cute.local_tile(
                                    mKb[slot, hk, phys_new, None], (K // 32,), (lane,)))
                        elif tidx < Int32(K // 8):
                            cute.autovec_copy(cute.local_tile(mK[row_b, hk, None], (8,), (tidx,)),
                                              cute.local_tile(mKb[slot, hk, phys_new, None], (8,),
                                                              (tidx,)))
                        if tidx == 0:
                            mKinvb[slot, hk, phys_new] = kinv
                    self._append_gate_entry(mGb, mBb, slot, hv, phys_new, g, beta, tidx)
                if const_expr(self.prof):
                    pc5 = common.sreg64("clock64")          # 5: outputs, appends issued
                # ================= the last-arriving CTA of the row moves the cursors ==========
                if tidx == 0:
                    if const_expr(self.late_arrive_check):
                        # + an opaque zero read after the CTA's last barrier: ptxas otherwise
                        # hoists this compare up to the atomic, and warp 0 waits out the
                        # atomic's round trip before the first barrier (the whole CTA with it)
                        old = old + sCur[3]
                    if old == Int32(self.HV * self.nsplit * self.npair - 1):
                        cute.arch.fence_acq_rel_gpu()
                        mWpos[slot] = m + Int32(1)
                        mOrig[slot] = origin2
                        if flush:
                            mFcnt[slot] = gen + Int32(1)
                        mPend[slot] = Int32(0)
                        mArr[slot] = Int32(0)
                if const_expr(self.prof):
                    pc6 = common.sreg64("clock64")          # 6: cursors published (end)
                    pg1 = common.sreg64("globaltimer")
                    cute.arch.barrier()                     # every output store of the CTA is out
                    rec = tidx == 0
                    if const_expr(tl.pair):
                        rec = rec & first                   # (CTA 0 of the pair records)
                    if rec:
                        # (5 and 6 as scalars: a list grown inside this dynamic branch would
                        # change its type at the join)
                        _prof_record(mOut[row_b, hv, None], v0, flush,
                                     [pg0, pg1] + pcs + [pc5, pc6])
                        _prof_record(mOut[row_b, hv, None], v0 + Int32(64), flush,
                                     [rFs[i] for i in range(12)])
        return res

    # ---------------------------------------------------------------- flush (v2)
    @cute.jit
    def _load_hi_tile(self, mHiS: Optional[cute.Tensor], sgl: Float32,
                      wHi: cute.Tensor, S: cute.Tensor, slot: Int32, hv: Int32, rt: Int32,
                      t4: Int32, qb=None):
        """Rows rt, rt + 8 of the hi copy, runs of 16 at 64 q + 16 t, decoded exactly
        (nvfp4: ``sgl`` = the global scale read before any write; ``qb``: run qb only)."""
        HFMT = self.rec_fmt
        WH = 16 * FMT_BITS[HFMT] // 32
        NQ = 2 if qb is None else 1
        rHW = cute.make_rmem_tensor((WH, NQ, 2), Uint32)
        for r in cutlass.range_constexpr(2):
            gRow = wHi[slot, hv, rt + 8 * r, None]
            for q in cutlass.range_constexpr(NQ):
                cute.autovec_copy(cute.local_tile(gRow, (WH,), (4 * _qg(q, qb) + t4,)),
                                  rHW[None, q, r])
        hsc = [Float32(1.0)] * (2 * NQ)
        if const_expr(HFMT == "fp8"):
            hsc = [mHiS[slot, hv, rt + 8 * (i // NQ)] for i in range(2 * NQ)]
        if const_expr(HFMT == "nvfp4"):
            hsc = [lp.mul_rn(lp.e4m3_byte_to_f32(Uint32(mHiS[slot, hv, rt + 8 * (i // NQ),
                                                             4 * _qg(i % NQ, qb) + t4])), sgl)
                   for i in range(2 * NQ)]
        for r in cutlass.range_constexpr(2):
            for q in cutlass.range_constexpr(NQ):
                vals = _decode_exact(HFMT, [rHW[w, q, r] for w in range(WH)], hsc[NQ * r + q])
                for e in cutlass.range_constexpr(16):
                    S[r, 16 * q + e] = vals[e]

    @cute.jit
    def _fold_tile(self, S: cute.Tensor, rUw: cute.Tensor, sKs: cute.Tensor, sKh: cute.Tensor,
                   sKm: cute.Tensor, sKl: cute.Tensor, eT: Float32, tr: cutlass.Constexpr,
                   g4: Int32, t4: Int32, qb=None):
        """S = e^{G_tot} S + (U diag(w)) Kn for one row tile (3xTF32 mma; ``qb``: the columns of
        run qb only)."""
        NKT = self.tile.nkt
        NQ = 2 if qb is None else 1
        for r in cutlass.range_constexpr(2):
            for k in cutlass.range_constexpr(16 * NQ):
                S[r, k] = eT * S[r, k]
        for kap in cutlass.range_constexpr(NKT):
            jb = Int32(8 * kap) + Int32(2) * t4
            P3 = self.tile.f5_pieces == 3
            apc = [[], [], []]
            for x in (rUw[0, kap, 2 * tr], rUw[0, kap, 2 * tr + 1], rUw[1, kap, 2 * tr],
                      rUw[1, kap, 2 * tr + 1]):
                pcs = _split3_tf32(x) if P3 else _split_tf32(x)
                apc[0].append(pcs[0])
                apc[1].append(pcs[1])
                if const_expr(P3):
                    apc[2].append(pcs[2])
            for nu in cutlass.range_constexpr(8 * NQ):
                colB = Int32(64 * (nu // 8) + 2 * (nu % 8)) + (g4 % Int32(2)) \
                    + Int32(16) * (g4 // Int32(2))
                if const_expr(qb is not None):
                    colB = colB + Int32(64) * qb
                a0 = _ks_addr(jb, colB)
                a1 = _ks_addr(jb + Int32(1), colB)
                cin = [S[0, 2 * nu], S[0, 2 * nu + 1], S[1, 2 * nu], S[1, 2 * nu + 1]]
                if const_expr(P3):
                    if const_expr(self.tile.ks_split):
                        b0 = (sKh[a0], sKm[a0], sKl[a0])
                        b1 = (sKh[a1], sKm[a1], sKl[a1])
                    else:
                        b0 = _split3_tf32(sKs[a0])
                        b1 = _split3_tf32(sKs[a1])
                    acc = _mma6_tf32((apc[0], apc[1], apc[2]),
                                     ([b0[0], b1[0]], [b0[1], b1[1]], [b0[2], b1[2]]), cin)
                else:
                    if const_expr(self.tile.ks_split):
                        b0h, b0l, b1h, b1l = sKh[a0], sKl[a0], sKh[a1], sKl[a1]
                    else:
                        b0h, b0l = _split_tf32(sKs[a0])
                        b1h, b1l = _split_tf32(sKs[a1])
                    acc = _mma3_tf32(apc[0], apc[1], [b0h, b1h], [b0l, b1l], cin)
                S[0, 2 * nu] = acc[0]
                S[0, 2 * nu + 1] = acc[1]
                S[1, 2 * nu] = acc[2]
                S[1, 2 * nu + 1] = acc[3]

    @cute.jit
    def _gram_mma(self, sKs: cute.Tensor, sKh: cute.Tensor, sKm: cute.Tensor, sKl: cute.Tensor,
                  sA: cute.Tensor, sGv: cute.Tensor, sBeta: cute.Tensor, hf: Int32, warp: Int32,
                  lane: Int32):
        """sA[j LP + i] = beta_j (a_{i+1} ... a_j) kn_i.kn_j for i < j < hf (0 elsewhere in the
        tiles written), the Gram on the tensor cores: warp mi takes keys 16 mi .. 16 mi + 15 as
        the rows of m16n8k8 tiles against keys 8 ni .. 8 ni + 7 (ni <= 2 mi + 1: the lower
        triangle; with fewer warps than m-tiles, warp mi % NW takes several). Both operands are
        the staged keys: a tf32 A fragment's (row g, col t) and
        (g, t + 4) words are the B fragment of the 8 keys of that row block, so a k-step loads
        each key block once. 3xTF32 products as the fold (6 for an fp32 recurrence), four
        accumulator chains over the k-steps summed in a fixed order (deterministic)."""
        K, LP = self.K, self.tile.lp
        NRB = LP // 8                                   # key blocks of 8
        P3 = self.tile.f5_pieces == 3
        NPC = 3 if P3 else 2
        NCH = 4
        g = lane // Int32(4)
        t = lane % Int32(4)
        for mi in cutlass.range_constexpr((LP + 15) // 16):
            NB = min(2 * mi + 2, NRB)                   # key blocks read = n-tiles
            if warp == Int32(mi % self.nwarps):
                alphas = [Float32(1.0)] + [sGv[ll] for ll in range(1, LP)]
                acc = [[[Float32(0.0)] * 4 for _ in range(NCH)] for _ in range(NB)]
                for ks in cutlass.range_constexpr(K // 8):
                    # pieces[rb][half][piece]: key 8 rb + g, column 8 ks + t + 4 half
                    pieces = []
                    for rb in cutlass.range_constexpr(NB):
                        ph = []
                        for hh in cutlass.range_constexpr(2):
                            a = _ks_addr(Int32(8 * rb) + g, Int32(8 * ks + 4 * hh) + t)
                            if const_expr(self.tile.ks_split):
                                if const_expr(P3):
                                    ph.append((sKh[a], sKm[a], sKl[a]))
                                else:
                                    ph.append((sKh[a], sKl[a]))
                            else:
                                ph.append(_split3_tf32(sKs[a]) if P3 else _split_tf32(sKs[a]))
                        pieces.append(ph)
                    z = tuple(Uint32(0) for _ in range(NPC))
                    lo_blk = pieces[2 * mi]
                    hi_blk = [z, z]
                    if const_expr(2 * mi + 1 < NB):
                        hi_blk = pieces[2 * mi + 1]
                    afr = [[lo_blk[0][p], hi_blk[0][p], lo_blk[1][p], hi_blk[1][p]]
                           for p in range(NPC)]
                    ch = ks % NCH
                    for ni in cutlass.range_constexpr(NB):
                        bfr = [[pieces[ni][0][p], pieces[ni][1][p]] for p in range(NPC)]
                        if const_expr(P3):
                            acc[ni][ch] = _mma6_tf32(tuple(afr), tuple(bfr), acc[ni][ch])
                        else:
                            acc[ni][ch] = _mma3_tf32(afr[0], afr[1], bfr[0], bfr[1],
                                                     acc[ni][ch])
                for ni in cutlass.range_constexpr(NB):
                    for e in cutlass.range_constexpr(4):
                        if const_expr(16 * mi + 8 * (e // 2) < LP):   # (rows past LP: none)
                            dot = acc[ni][0][e]
                            for c in cutlass.range_constexpr(1, NCH):
                                dot = dot + acc[ni][c][e]
                            j = Int32(16 * mi + 8 * (e // 2)) + g
                            i = Int32(8 * ni + e % 2) + Int32(2) * t
                            dec = Float32(1.0)                  # a_{i+1} ... a_j, in order
                            for ll in cutlass.range_constexpr(1, LP):
                                dec = dec * Float32(_sel((Int32(ll) > i) & (Int32(ll) <= j),
                                                         alphas[ll], Float32(1.0)))
                            av = sBeta[j] * dec * dot
                            sA[j * Int32(LP) + i] = Float32(_sel((i < j) & (j < hf), av,
                                                                 Float32(0.0)))

    @cute.jit
    def _flush(self, mHiS: Optional[cute.Tensor], mHiG: Optional[cute.Tensor],
               mLoS: Optional[cute.Tensor], mLoG: Optional[cute.Tensor], mKb: cute.Tensor,
               mKinvb: cute.Tensor, mGb: cute.Tensor, mUb: cute.Tensor,
               mVb: Optional[cute.Tensor], mBb: Optional[cute.Tensor],
               mSeed: Optional[cute.Tensor], wHi: cute.Tensor, wLo: cute.Tensor,
               sScal: cute.Tensor, sKn: cute.Tensor, sQn: cute.Tensor, sKs: cute.Tensor,
               sKh: cute.Tensor, sKm: cute.Tensor, sKl: cute.Tensor,
               sA: cute.Tensor, sGv: cute.Tensor, sEG: cute.Tensor, sW: cute.Tensor,
               sBeta: cute.Tensor, sAm: cute.Tensor, rP: cute.Tensor, slot: Int32, hv: Int32,
               hk: Int32, row0: Int32, origin: Int32, hf: Int32, gen: Int32, tidx: Int32,
               lane: Int32, warp: Int32, g4: Int32, t4: Int32, rFs=None, sX=None, rank=None):
        K, L, RING = self.K, self.L, self.ring
        NT, NW = self.num_threads, self.nwarps
        # flush halves: warp w and w + RWN (tile.halves) or warp w of the two CTAs of a cluster
        # (tile.pair, CTA ``rank``) share a row tile, each holding the columns of run qb (64 qb
        # + 16 t ...): P and the output partials are summed over the two, the fp8 row amax and
        # the nvfp4 matrix amax maxed, through ``sX`` (pair: each pushes into the other's, then
        # one cluster barrier; the first barrier, after staging, proves both CTAs running); the
        # rest is per half (the pair: the stage, Gram and solve in both CTAs)
        HALVES = self.tile.halves
        PAIR = self.tile.pair
        NQ = 1 if (HALVES or PAIR) else 2
        RWN = self.tile.rwarps
        qb = None
        partner = None
        xw = None
        if const_expr(HALVES):
            qb = warp // Int32(RWN)
            partner = (warp + Int32(RWN)) % Int32(NW)
            xw = (None, warp, partner, lane)
        if const_expr(PAIR):
            qb = rank
            xw = (_PairExchange(sX, rank), warp, None, lane)
        NKT, LP = self.tile.nkt, self.tile.lp
        _fstamp(rFs, 0)                                 # profiling build: flush sub-phases
        TPW = self.tile.tpw
        R2 = 2 * TPW
        HFMT = self.rec_fmt
        if const_expr(self.flush_pf):
            # the CTA's hi rows into L2 now: their loads come after the stage, Gram and solve
            if tidx == 0:                               # (row0 = the CTA's first row there)
                common.prefetch_l2_span(wHi[slot, hv, row0, None].iterator,
                                        self.block_v * K * FMT_BITS[HFMT] // 8)
        copies = [(HFMT, self.rec_sr, 0)]
        if const_expr(self.split):
            copies.append((self.read_fmt, self.read_sr, 1))
        two_pass = any(c[0] == "nvfp4" for c in copies)
        rows = [row0 + (16 * (r // 2) + 8 * (r % 2)) for r in range(R2)]
        sgl_old = Float32(1.0)
        if const_expr(HFMT == "nvfp4"):
            sgl_old = mHiG[slot, hv]
        # ---- per-lane ring values of rows x keys 8 tau + 2 t + e (split: raw v; shared: u)
        rU = cute.make_rmem_tensor((2, NKT, R2), Float32)      # (e, key tile, row)
        rU.fill(0.0)
        for tau in cutlass.range_constexpr(NKT):
            for e in cutlass.range_constexpr(2):
                j = Int32(8 * tau + e) + Int32(2) * t4
                if j < hf:
                    ph = _ring(origin, j, RING)
                    for r in cutlass.range_constexpr(R2):
                        if const_expr(self.split):
                            rU[e, tau, r] = mVb[slot, hv, ph, rows[r]].to(Float32)
                        else:
                            rU[e, tau, r] = mUb[slot, hv, ph, rows[r]]
        # ---- stage kn_j (fp32, padded rows), zero A, G prefix / weights (warp 0)
        NCH = LP * K // 8
        for it in cutlass.range_constexpr((NCH + NT - 1) // NT):
            c = tidx + it * NT
            if c < Int32(NCH):
                j = c // (K // 8)
                cc = c % (K // 8)
                xs = cute.make_rmem_tensor((8,), self.act_dtype)
                xs.fill(0.0)
                kj = Float32(0.0)
                if j < hf:
                    ph = _ring(origin, j, RING)
                    cute.autovec_copy(cute.local_tile(mKb[slot, hk, ph, None], (8,), (cc,)), xs)
                    kj = mKinvb[slot, hk, ph]
                for e in cutlass.range_constexpr(8):
                    ka = _ks_addr(j, cc * 8 + e)
                    kx = xs[e].to(Float32) * kj
                    sKs[ka] = kx
                    if const_expr(self.tile.ks_split):
                        if const_expr(self.tile.f5_pieces == 3):
                            kh, km, kl = _split3_tf32(kx)
                            sKm[ka] = km
                        else:
                            kh, kl = _split_tf32(kx)
                        sKh[ka] = kh
                        sKl[ka] = kl
        if const_expr(self.split):
            for it in cutlass.range_constexpr((LP * LP + NT - 1) // NT):
                c = tidx + it * NT
                if c < Int32(LP * LP):
                    sA[c] = Float32(0.0)
        if warp == 0:
            gj = Float32(0.0)
            bj = Float32(0.0)
            if lane < hf:
                ph = _ring(origin, lane, RING)
                gj = mGb[slot, hv, ph]
                if const_expr(self.split):
                    bj = mBb[slot, hv, ph]
            if const_expr(self.split):
                # split: decays as products of alpha_j = e^{g_j} in the order of the sequential
                # recurrence (the reference): e^{G_j} = a_0 ... a_j, w_j = a_{j+1} ... a_{h-1}
                aj = Float32(_sel(lane < hf, cute.math.exp(gj), Float32(1.0)))
                EGl = _seq_prefix_mul(aj, lane, LP)
                wl = _seq_prefix_mul(aj, lane, LP, upper=True)
                eTl = cute.arch.shuffle_sync(EGl, Int32(LP - 1))
                gv = aj
            else:
                wl, EGl, eTl = _shared_fold_weights(gj, hf, lane, LP)
                gv = gj
            if lane < Int32(LP):
                sGv[lane] = gv
                sEG[lane] = EGl
                sW[lane] = Float32(_sel(lane < hf, wl, Float32(0.0)))
                sBeta[lane] = bj
            if lane == 0:
                sScal[8] = eTl
        cute.arch.barrier()
        _fstamp(rFs, 1)                                 # ring values, keys, gates staged
        if const_expr(self.split and self.gram_mma):
            self._gram_mma(sKs, sKh, sKm, sKl, sA, sGv, sBeta, hf, warp, lane)
            cute.arch.barrier()
        elif const_expr(self.split):
            # ---- Gram: A_ji = beta_j e^{G_j - G_i} kn_i.kn_j (i < j), halves of K per lane pair
            NP = LP * (LP - 1) // 2
            for it in cutlass.range_constexpr((2 * NP + NT - 1) // NT):
                item = tidx + it * NT
                pr = item // 2
                half = item % 2
                jx = Int32(0)
                for jj in cutlass.range_constexpr(1, LP):
                    jx = jx + Int32(_sel(pr >= Int32(jj * (jj - 1) // 2), Int32(1), Int32(0)))
                ix = pr - jx * (jx - Int32(1)) // Int32(2)
                icl = cutlass.min(ix, Int32(LP - 1))
                jc = cutlass.min(jx, Int32(LP - 1))
                dacc = [Float32(0.0), Float32(0.0)]
                for cc in cutlass.range_constexpr(K // 4):
                    col = half * (K // 2) + 2 * cc
                    ai = _ks_addr(icl, col)
                    aj = _ks_addr(jc, col)
                    va = cute.make_rmem_tensor((2,), Float32)
                    vb = cute.make_rmem_tensor((2,), Float32)
                    cute.autovec_copy(cute.local_tile(sKs, (2,), (ai // 2,)), va)
                    cute.autovec_copy(cute.local_tile(sKs, (2,), (aj // 2,)), vb)
                    dacc[cc % 2] = dacc[cc % 2] + va[0] * vb[0] + va[1] * vb[1]
                dot = dacc[0] + dacc[1]
                dot = dot + cute.arch.shuffle_sync_bfly(dot, offset=1)
                if item < Int32(2 * NP):
                    if half == 0:
                        dec = Float32(1.0)          # a_{i+1} ... a_j (sGv = alphas)
                        for ll in cutlass.range_constexpr(1, LP):
                            dec = dec * Float32(_sel((Int32(ll) > icl) & (Int32(ll) <= jc),
                                                     sGv[ll], Float32(1.0)))
                        av = sBeta[jc] * dec * dot
                        sA[jc * LP + icl] = Float32(_sel(jc < hf, av, Float32(0.0)))
            cute.arch.barrier()
        _fstamp(rFs, 2)                                 # Gram matrix (split pairs)
        eT = sScal[8]
        S = cute.make_rmem_tensor((2, 16 * NQ), Float32)
        amx = Float32(0.0)
        for tr in cutlass.range_constexpr(TPW):
            rt = rows[2 * tr]
            self._load_hi_tile(mHiS, sgl_old, wHi, S, slot, hv, rt, t4, qb)
            if const_expr(self.split):
                # ---- F3: P = S_hi Kn^T (3xTF32), keys 8 tau + 2 t + e; R = beta (v - e^G P)
                P = cute.make_rmem_tensor((4, NKT), Float32)
                P.fill(0.0)
                P3 = self.tile.f5_pieces == 3
                for kap in cutlass.range_constexpr(8 * NQ):
                    ah = []
                    am = []
                    al = []
                    for x in (S[0, 2 * kap], S[1, 2 * kap], S[0, 2 * kap + 1],
                              S[1, 2 * kap + 1]):
                        if const_expr(P3):
                            hh, mm, ll = _split3_tf32(x)
                            am.append(mm)
                        else:
                            hh, ll = _split_tf32(x)
                        ah.append(hh)
                        al.append(ll)
                    col = _fidx_h(t4, 2 * kap, qb)
                    for tau in cutlass.range_constexpr(NKT):
                        ad = _ks_addr(g4 + Int32(8 * tau), col)
                        if const_expr(P3):
                            bp = []
                            for arr in (sKh, sKm, sKl):
                                bt = cute.make_rmem_tensor((2,), Uint32)
                                if const_expr(self.tile.ks_split):
                                    cute.autovec_copy(cute.local_tile(arr, (2,), (ad // 2,)), bt)
                                else:
                                    b0_ = _split3_tf32(sKs[ad])
                                    b1_ = _split3_tf32(sKs[ad + 1])
                                    bt[0] = b0_[len(bp)]
                                    bt[1] = b1_[len(bp)]
                                bp.append([bt[0], bt[1]])
                            acc = _mma6_tf32((ah, am, al), (bp[0], bp[1], bp[2]),
                                             [P[0, tau], P[1, tau], P[2, tau], P[3, tau]])
                            for i in cutlass.range_constexpr(4):
                                P[i, tau] = acc[i]
                        else:
                            if const_expr(self.tile.ks_split and self.tile.f5_pieces == 2):
                                bh = cute.make_rmem_tensor((2,), Uint32)
                                bl = cute.make_rmem_tensor((2,), Uint32)
                                cute.autovec_copy(cute.local_tile(sKh, (2,), (ad // 2,)), bh)
                                cute.autovec_copy(cute.local_tile(sKl, (2,), (ad // 2,)), bl)
                                b0h, b1h, b0l, b1l = bh[0], bh[1], bl[0], bl[1]
                            else:
                                bb = cute.make_rmem_tensor((2,), Float32)
                                cute.autovec_copy(cute.local_tile(sKs, (2,), (ad // 2,)), bb)
                                b0h, b0l = _split_tf32(bb[0])
                                b1h, b1l = _split_tf32(bb[1])
                            acc = _mma3_tf32(ah, al, [b0h, b1h], [b0l, b1l],
                                             [P[0, tau], P[1, tau], P[2, tau], P[3, tau]])
                            for i in cutlass.range_constexpr(4):
                                P[i, tau] = acc[i]
                if const_expr(HALVES):
                    # the pair's partial P over its column halves (a + b: the same in both)
                    for i in cutlass.range_constexpr(4):
                        for tau in cutlass.range_constexpr(NKT):
                            sX[((warp * 4 + i) * NKT + tau) * 32 + lane] = P[i, tau]
                    cute.arch.barrier()
                    for i in cutlass.range_constexpr(4):
                        for tau in cutlass.range_constexpr(NKT):
                            P[i, tau] = P[i, tau] + sX[((partner * 4 + i) * NKT + tau) * 32
                                                       + lane]
                if const_expr(PAIR):
                    ks = [(i, tau) for i in range(4) for tau in range(NKT)]
                    got = xw[0].combine([P[i, tau] for i, tau in ks],
                                        [((warp * 4 + i) * NKT + tau) * 32 + lane
                                         for i, tau in ks], lambda a, b: a + b)
                    for n_, (i, tau) in enumerate(ks):
                        P[i, tau] = got[n_]
                for tau in cutlass.range_constexpr(NKT):
                    for e in cutlass.range_constexpr(2):
                        j = Int32(8 * tau + e) + Int32(2) * t4
                        bj = sBeta[j]
                        egj = sEG[j]
                        for rr in cutlass.range_constexpr(2):
                            r = 2 * tr + rr
                            rU[e, tau, r] = bj * (rU[e, tau, r] - egj * P[2 * rr + e, tau])
                _fstamp(rFs, 3)                         # hi tile landed, P = S_hi Kn^T
                # ---- forward substitution u_j = R_j - sum_{i<j} A_ji u_i across the quad
                for j in cutlass.range_constexpr(LP):
                    tau_o, rem = divmod(j, 8)
                    t_o, e_o = divmod(rem, 2)
                    src = lane - t4 + Int32(t_o)
                    uj = [cute.arch.shuffle_sync(rU[e_o, tau_o, 2 * tr + rr], src)
                          for rr in range(2)]
                    for tau in cutlass.range_constexpr(NKT):
                        for e in cutlass.range_constexpr(2):
                            jj = Int32(8 * tau + e) + Int32(2) * t4
                            a = sA[jj * LP + j]
                            for rr in cutlass.range_constexpr(2):
                                r = 2 * tr + rr
                                rU[e, tau, r] = rU[e, tau, r] - a * uj[rr]
            _fstamp(rFs, 4)                             # forward substitution
            # ---- U diag(w) for this tile's rows, then the fold
            for tau in cutlass.range_constexpr(NKT):
                for e in cutlass.range_constexpr(2):
                    wj = sW[Int32(8 * tau + e) + Int32(2) * t4]
                    for rr in cutlass.range_constexpr(2):
                        rU[e, tau, 2 * tr + rr] = rU[e, tau, 2 * tr + rr] * wj
            if const_expr(HALVES or PAIR):
                self._fold_tile(S, rU, sKs, sKh, sKm, sKl, eT, tr, g4, t4, qb)
            else:
                self._fold_tile(S, rU, sKs, sKh, sKm, sKl, eT, tr, g4, t4)
            _fstamp(rFs, 5)                             # fold
            # ---- output partials S_new kn, S_new qn (this lane's 32 columns of each row)
            if const_expr(HALVES or PAIR):
                self._flush_out_partials(S, rP, sKn, sQn, tr, t4, qb)
            else:
                self._flush_out_partials(S, rP, sKn, sQn, tr, t4)
            rp_ticket = None
            if const_expr(PAIR):
                # (posted now: they ride on the encodes' amax barrier where there is one)
                rp_ticket = xw[0].post([rP[k // 2, k % 2] for k in range(4)],
                                       [32 * NW * 4 * NKT + (warp * 4 + k) * 32 + lane
                                        for k in range(4)])
            _fstamp(rFs, 6)                             # output hook
            if const_expr(two_pass):
                for r in cutlass.range_constexpr(2):
                    for k in cutlass.range_constexpr(16 * NQ):
                        amx = _amax_acc(amx, S[r, k])
            else:
                for ci in cutlass.range_constexpr(len(copies)):
                    fmt, sr, sid = copies[ci]
                    wDst, mDS = (wHi, mHiS) if sid == 0 else (wLo, mLoS)
                    self._encode(S, fmt, sr, sid, wDst, mDS, mSeed, slot, hv, rt, gen, t4,
                                 Float32(0.0), rFs, qb, sX, xw)
                    _fstamp(rFs, 8 + ci)                # encode + stores of copy ci issued
        if const_expr(two_pass):
            # ---- the nvfp4 global scale needs the whole fold: CTA amax, then encode every copy
            # (from S as it stands with one tile per warp, else each tile folded again)
            amx = cute.arch.warp_reduction(_amax_fin(amx), lp.fmax_nq, threads_in_group=32)
            if lane == 0:
                sAm[warp] = amx
            cute.arch.barrier()
            amx = sAm[0]
            for w in cutlass.range_constexpr(1, NW):
                amx = lp.fmax_nq(amx, sAm[w])
            if const_expr(PAIR):
                # the matrix amax over both CTAs (max: the same in both)
                amx = xw[0].combine([amx], [32 * NW * (4 * NKT + 6) + lane], lp.fmax_nq)[0]
            s_glob = lp.nvfp4_global_scale(amx)
            _fstamp(rFs, 7)                             # CTA amax (two-pass)
            gw = tidx == 0
            if const_expr(PAIR):
                gw = gw & (rank == Int32(0))
            if gw:
                if const_expr(HFMT == "nvfp4"):
                    mHiG[slot, hv] = s_glob
                else:
                    mLoG[slot, hv] = s_glob
            for tr in cutlass.range_constexpr(TPW):
                rt = rows[2 * tr]
                if const_expr(TPW > 1):
                    # S holds the last tile's fold only: fold every tile again from the old hi
                    # (one tile per warp, the default, keeps its fold in S across the amax)
                    self._load_hi_tile(mHiS, sgl_old, wHi, S, slot, hv, rt, t4)
                    self._fold_tile(S, rU, sKs, sKh, sKm, sKl, eT, tr, g4, t4)
                for ci in cutlass.range_constexpr(len(copies)):
                    fmt, sr, sid = copies[ci]
                    wDst, mDS = (wHi, mHiS) if sid == 0 else (wLo, mLoS)
                    self._encode(S, fmt, sr, sid, wDst, mDS, mSeed, slot, hv, rt, gen, t4,
                                 s_glob, rFs, qb, sX, xw)
                    _fstamp(rFs, 8 + ci)
        if const_expr(HALVES):
            # the output partials of the tile's second warp to its first (which finishes)
            off = 32 * NW * 4 * NKT
            if warp >= Int32(RWN):
                for ci_ in cutlass.range_constexpr(2):
                    for ri_ in cutlass.range_constexpr(2):
                        sX[off + ((warp - Int32(RWN)) * 4 + 2 * ci_ + ri_) * 32 + lane] = \
                            rP[ci_, ri_]
            cute.arch.barrier()
            if warp < Int32(RWN):
                for ci_ in cutlass.range_constexpr(2):
                    for ri_ in cutlass.range_constexpr(2):
                        rP[ci_, ri_] = rP[ci_, ri_] + sX[off + (warp * 4 + 2 * ci_ + ri_) * 32
                                                         + lane]
        if const_expr(PAIR):
            # the output partials summed over the pair (CTA 0 finishes the rows), then the exit
            # barrier if the peer's memory was read after the last one
            got = xw[0].take(rp_ticket, [rP[k // 2, k % 2] for k in range(4)], lambda a, b: a + b)
            for k in cutlass.range_constexpr(4):
                rP[k // 2, k % 2] = got[k]
            xw[0].close()

    @cute.jit
    def _scaled_key8(self, mKb: cute.Tensor, mKinvb: cute.Tensor, slot: Int32, hk: Int32,
                     ph: Int32, cc: Int32, kf: cute.Tensor):
        """``kf`` = elements 8 cc .. 8 cc + 7 of ring key ``ph`` times its kinv (fp32)."""
        xs = cute.make_rmem_tensor((8,), self.act_dtype)
        cute.autovec_copy(cute.local_tile(mKb[slot, hk, ph, None], (8,), (cc,)), xs)
        kj = mKinvb[slot, hk, ph]
        for e in cutlass.range_constexpr(8):
            kf[e] = xs[e].to(Float32) * kj

    @cute.jit
    def _stage_tile_fold(self, mKb: cute.Tensor, mKinvb: cute.Tensor, mGb: cute.Tensor,
                         mUb: cute.Tensor, sScal: cute.Tensor, sKf: cute.Tensor,
                         sU: cute.Tensor, sW: cute.Tensor, slot: Int32, hv: Int32, hk: Int32,
                         v0: Int32, origin: Int32, hf: Int32, tidx: Int32, lane: Int32,
                         warp: Int32, mask_keys: cutlass.Constexpr = False):
        """Staging of a shared pair's fold from a held tile (:func:`flush_whole_fit`; the
        verify's fp32 flush): u_j of the CTA's rows into ``sU[j * BV + row]`` (cp.async, all L
        positions: the fold must ignore those past ``hf``), kn_j = k_j kinv_j (fp32) into
        ``sKf[j * K + col]`` (``mask_keys``: 0 past ``hf``, not loaded -- a verify's draft
        appends may be rewriting those ring entries meanwhile), the weights w_j (0 past ``hf``)
        into ``sW`` and e^{G_tot} into ``sScal[8]`` (warp 0). Ends with the CTA barrier."""
        K, L, RING, NT, BV = self.K, self.L, self.ring, self.num_threads, self.block_v
        assert cute.size(sU) >= L * BV and cute.size(sKf) >= L * K, "fold staging too small"
        a16 = cute.make_copy_atom(cpasync.CopyG2SOp(), Float32, num_bits_per_copy=128)
        NCU = L * BV // 4
        for it in cutlass.range_constexpr((NCU + NT - 1) // NT):
            c = tidx + it * NT
            if c < Int32(NCU):
                j = c // Int32(BV // 4)
                cc = c % Int32(BV // 4)
                ph = _ring(origin, j, RING)
                cute.copy(a16, cute.local_tile(mUb[slot, hv, ph, None], (4,),
                                               (v0 // Int32(4) + cc,)),
                          cute.local_tile(sU, (4,), (j * Int32(BV // 4) + cc,)))
        cute.arch.cp_async_commit_group()
        NCK = L * K // 8
        for it in cutlass.range_constexpr((NCK + NT - 1) // NT):
            c = tidx + it * NT
            if c < Int32(NCK):
                j = c // Int32(K // 8)
                cc = c % Int32(K // 8)
                ph = _ring(origin, j, RING)
                kf = cute.make_rmem_tensor((8,), Float32)
                if const_expr(mask_keys):
                    kf.fill(0.0)
                    if j < hf:
                        self._scaled_key8(mKb, mKinvb, slot, hk, ph, cc, kf)
                else:
                    self._scaled_key8(mKb, mKinvb, slot, hk, ph, cc, kf)
                cute.autovec_copy(kf, cute.local_tile(sKf, (8,), (c,)))
        if warp == 0:
            gj = Float32(0.0)
            if lane < hf:
                gj = mGb[slot, hv, _ring(origin, lane, RING)]
            wl, _, eTl = _shared_fold_weights(gj, hf, lane, L)
            if lane < Int32(L):
                sW[lane] = Float32(_sel(lane < hf, wl, Float32(0.0)))
            if lane == 0:
                sScal[8] = eTl
        cute.arch.cp_async_wait_group(0)
        cute.arch.barrier()

    @cute.jit
    def _flush_whole(self, mKb: cute.Tensor, mKinvb: cute.Tensor, mGb: cute.Tensor,
                     mUb: cute.Tensor, wHi: cute.Tensor, rRd: cute.Tensor, sScal: cute.Tensor,
                     sKn: cute.Tensor, sQn: cute.Tensor, sKh: cute.Tensor, sKm: cute.Tensor,
                     sW: cute.Tensor, rP: cute.Tensor, slot: Int32, hv: Int32, hk: Int32,
                     v0: Int32, origin: Int32, tidx: Int32, lane: Int32, warp: Int32,
                     g4: Int32, t4: Int32, rFs=None):
        """Flush of the fp32 shared pair from the whole-row tile ``rRd`` (the hi copy's words
        4 lane .. 4 lane + 3 of the warp's 16 rows, :func:`flush_whole_fit`): S = e^{G_tot} S
        + sum_j u_j (w_j kn_j) on the CUDA cores in that layout, S kn / S qn partials into
        ``rP`` as the non-flush dots, S stored in whole rows. A flush row has h >= L: all L
        entries fold."""
        K, L, BV = self.K, self.L, self.block_v
        _fstamp(rFs, 0)
        sU = cute.make_tensor(cute.recast_ptr(sKm.iterator, dtype=Float32),
                              cute.make_layout(L * BV))
        sKf = cute.make_tensor(cute.recast_ptr(sKh.iterator, dtype=Float32),
                               cute.make_layout(L * K))
        self._stage_tile_fold(mKb, mKinvb, mGb, mUb, sScal, sKf, sU, sW, slot, hv, hk, v0,
                              origin, Int32(L), tidx, lane, warp)
        _fstamp(rFs, 1)                                 # ring values, keys, weights staged
        # ---- fold: S[i, c] = e^{G_tot} S[i, c] + sum_j u_j[row i] (w_j kn_j[4 lane + c])
        eT = sScal[8]
        S = cute.make_rmem_tensor((4, 16), Float32)     # (column 4 lane + c, warp row i)
        for i in cutlass.range_constexpr(16):
            for c in cutlass.range_constexpr(4):
                S[c, i] = eT * lp.bits_f32(rRd[c, i])
        for j in cutlass.range_constexpr(L):
            wj = sW[j]
            kv = cute.make_rmem_tensor((4,), Float32)
            cute.autovec_copy(cute.local_tile(sKf, (4,), (Int32(j * K // 4) + lane,)), kv)
            kw = [kv[c] * wj for c in range(4)]
            for i4 in cutlass.range_constexpr(4):
                uu = cute.make_rmem_tensor((4,), Float32)
                cute.autovec_copy(cute.local_tile(sU, (4,), (Int32(j * BV // 4 + i4)
                                                            + Int32(4) * warp,)), uu)
                for ii in cutlass.range_constexpr(4):
                    for c in cutlass.range_constexpr(4):
                        S[c, 4 * i4 + ii] = _fma_rn(uu[ii], kw[c], S[c, 4 * i4 + ii])
        _fstamp(rFs, 5)                                 # fold
        # ---- S_new kn, S_new qn (lane (g, 0): rows g, g + 8), as the non-flush tile's dots
        ak, aq = self._whole_row_dots_of(lambda i: [S[c, i] for c in range(4)], sKn, sQn,
                                         lane, g4, t4)
        for r in cutlass.range_constexpr(2):
            rP[0, r] = ak[r]
            rP[1, r] = aq[r]
        _fstamp(rFs, 6)                                 # output dots
        for i in cutlass.range_constexpr(16):
            ws = cute.make_rmem_tensor((4,), Uint32)
            for c in cutlass.range_constexpr(4):
                ws[c] = lp.f32_bits(S[c, i])
            cute.autovec_copy(ws, cute.local_tile(wHi[slot, hv, v0 + Int32(16) * warp
                                                      + Int32(i), None], (4,), (lane,)))
        _fstamp(rFs, 8)                                 # stores issued

    def _flush_out_partials(self, S, rP, sKn, sQn, tr, t4, qb=None):
        """rP[0 / 1, rows of tile tr] = this lane's partial dots of the fresh fold S with kn / qn
        (a hook: the speculative-verify kernel dots every draft's kn / qn instead; ``qb``: the
        lane holds run qb only)."""
        for rr in range(2):
            rP[0, 2 * tr + rr] = Float32(0.0)
            rP[1, 2 * tr + rr] = Float32(0.0)
        for k4 in range(8 if qb is None else 4):
            kk = cute.make_rmem_tensor((4,), Float32)
            qq = cute.make_rmem_tensor((4,), Float32)
            a4 = _kq_addr(_fidx_h(t4, 4 * k4, qb)) // Int32(4)
            cute.autovec_copy(cute.local_tile(sKn, (4,), (a4,)), kk)
            cute.autovec_copy(cute.local_tile(sQn, (4,), (a4,)), qq)
            for e in range(4):
                for rr in range(2):
                    r = 2 * tr + rr
                    rP[0, r] = rP[0, r] + S[rr, 4 * k4 + e] * kk[e]
                    rP[1, r] = rP[1, r] + S[rr, 4 * k4 + e] * qq[e]

    # ---------------------------------------------------------------- encode (v2)
    @cute.jit
    def _encode(self, S: cute.Tensor, fmt: cutlass.Constexpr, sr: cutlass.Constexpr,
                stream_id: cutlass.Constexpr, wDst: cute.Tensor, mDS: Optional[cute.Tensor],
                mSeed: Optional[cute.Tensor], slot: Int32, hv: Int32, rt: Int32, gen: Int32,
                t4: Int32, s_glob: Float32, rFs=None, qb=None, sX=None, xw=None):
        """Encode rows rt, rt + 8 (S[r, 16 q + e] = column 64 q + 16 t + e) into ``fmt``
        (formats.encode bit for bit; nvfp4: ``s_glob`` = the matrix's global scale). ``qb``
        (flush halves): the lane holds run qb only; the fp8 row amax is maxed with the other
        half's through ``sX`` (``xw`` = (the CTA pair's :class:`_PairExchange` or None, warp,
        partner warp, lane))."""
        K = self.K
        NQ = 2 if qb is None else 1
        NRUN = 2 * NQ
        WC = 16 * FMT_BITS[fmt] // 32
        PW = 4 if WC >= 4 else WC
        rows = [rt, rt + 8]
        # fp16 SR: exact for every input in _fast_chunk (no fallback); fp8 / nvfp4 SR: generic
        exact16 = fmt == "fp16" and sr and encode_mode() >= 1
        generic = (fmt == "nvfp4" and sr) or (fmt == "fp8" and sr)
        needs_fallback = (fmt in ("fp8", "nvfp4") and not sr) or (fmt == "fp16" and sr
                                                                  and not exact16)
        k0 = Uint32(0)
        k1 = Uint32(0)
        w3 = Uint32(0)
        if const_expr(sr):
            k0, k1 = lp.sr_key_from_seed(mSeed[0])
            w3 = lp.sr_counter_word3(stream_id, gen)
        special = Boolean(False)
        if const_expr(needs_fallback):
            # NaN / inf anywhere in the lane's values -> the generic path for its warp
            nacc = Float32(0.0)
            for r in cutlass.range_constexpr(2):
                for k in cutlass.range_constexpr(16 * NQ):
                    nacc = _fma_rn(S[r, k], Float32(0.0), nacc)
            special = nacc != nacc
        # scales: fp8 row scale, nvfp4 block scales; run i = (row i // 2, half i % 2)
        dsc = [Float32(1.0)] * NRUN
        if const_expr(fmt == "fp8" and qb is not None):
            # halves: the row amax over both warps of the tile (max: the same in both)
            ams = [_quad_row_amax(S, r, 16) for r in range(2)]
            xch, warp, partner, lane = xw
            aoff = 32 * self.nwarps * (4 * self.tile.nkt + 4)
            if const_expr(xch is not None):         # (over a CTA pair)
                ams = xch.combine(ams, [aoff + (warp * 2 + r) * 32 + lane for r in range(2)],
                                  lp.fmax_nq)
            else:
                for r in cutlass.range_constexpr(2):
                    sX[aoff + (warp * 2 + r) * 32 + lane] = ams[r]
                cute.arch.barrier()
                ams = [lp.fmax_nq(ams[r], sX[aoff + (partner * 2 + r) * 32 + lane])
                       for r in range(2)]
            for r in cutlass.range_constexpr(2):
                am = ams[r]
                rsc = lp.fp8_row_scale(am)
                if (t4 == 0) & (qb == 0):
                    mDS[slot, hv, rows[r]] = rsc
                dsc[r] = rsc
                special = _fp8_scale_special(special, rsc)
        if const_expr(fmt == "fp8" and qb is None):
            for r in cutlass.range_constexpr(2):
                am = _quad_row_amax(S, r, 32)
                rsc = lp.fp8_row_scale(am)
                if t4 == 0:
                    mDS[slot, hv, rows[r]] = rsc
                dsc[2 * r] = rsc
                dsc[2 * r + 1] = rsc
                special = _fp8_scale_special(special, rsc)
        if const_expr(fmt == "fp16" and sr and not exact16):
            for r in cutlass.range_constexpr(2):
                for k in cutlass.range_constexpr(16 * NQ):
                    mg = lp.f32_bits(S[r, k]) & Uint32(0x7FFFFFFF)
                    special = special | ((mg - Uint32(1)) < Uint32(0x387FFFFF))
        if const_expr(fmt == "nvfp4"):
            for i in cutlass.range_constexpr(NRUN):
                a_ = Float32(0.0)
                for e in cutlass.range_constexpr(16):
                    a_ = _amax_acc(a_, S[i // NQ, 16 * (i % NQ) + e])
                s_blk = lp.nvfp4_block_scale(_amax_fin(a_), s_glob)
                dsc[i] = lp.mul_rn(s_blk, s_glob)
                mDS[slot, hv, rows[i // NQ], 4 * _qg(i % NQ, qb) + t4] = (
                    lp.pack_e4m3x4(s_blk, 0.0, 0.0, 0.0) & Uint32(0xFF)).to(Uint8)
                d14 = dsc[i] * Float32(16384.0)
                special = special | ((dsc[i] != Float32(0.0)) & ((d14 < Float32(2.0 ** -100))
                                                                 | (d14 > Float32(2.0 ** 100))))
        use_generic = Boolean(True)
        if const_expr(not generic):
            use_generic = Boolean(False)
            if const_expr(needs_fallback):
                use_generic = cute.arch.vote_any_sync(special)
        if const_expr(rFs is not None):                 # profiling build: warp 0 went generic
            rFs[10 + stream_id] = Int64(Int32(_sel(use_generic, Int32(1), Int32(0))))
        if use_generic:
            # generic per-element path (formats.encode bit for bit), runs in a run-time loop
            for rq in cutlass.range(NRUN, unroll=1):
                r = rq // NQ
                q = rq % NQ
                if const_expr(qb is not None):
                    q = q + qb                      # (the run's column half)
                xs = []
                for e in cutlass.range_constexpr(16):
                    x = S[0, e]
                    for alt in cutlass.range_constexpr(1, NRUN):
                        x = Float32(_sel(rq == Int32(alt), S[alt // NQ, 16 * (alt % NQ) + e],
                                         x))
                    xs.append(x)
                dd = dsc[0]
                for alt in cutlass.range_constexpr(1, NRUN):
                    dd = Float32(_sel(rq == Int32(alt), dsc[alt], dd))
                row = rt + Int32(8) * r
                wds = None
                if const_expr(sr):
                    quad0 = Uint32(row) * Uint32(K // 4) + Uint32(16) * Uint32(q) \
                        + Uint32(4) * Uint32(t4)
                    wds = _sr_words16(quad0, Uint32(hv), Uint32(slot), w3, k0, k1,
                                      self.philox_rounds)
                ow = _encode_chunk(fmt, sr, xs, wds, dd)
                rW = cute.make_rmem_tensor((WC,), Uint32)
                for i in cutlass.range_constexpr(WC):
                    rW[i] = ow[i]
                gDst = wDst[slot, hv, row, None]
                for i in cutlass.range_constexpr(WC // PW):
                    wi = (4 * q + t4) * (WC // PW) + i
                    cute.autovec_copy(cute.local_tile(rW, (PW,), (i,)),
                                      cute.local_tile(gDst, (PW,), (wi,)))
        else:
            if const_expr(not generic):
                for rq in cutlass.range_constexpr(NRUN):
                    r, ql = divmod(rq, NQ)
                    q = _qg(ql, qb)
                    row = rows[r]
                    xs = [S[r, 16 * ql + e] for e in range(16)]
                    wds = None
                    if const_expr(sr):
                        quad0 = Uint32(row) * Uint32(K // 4) + Uint32(16 * q) \
                            + Uint32(4) * Uint32(t4)
                        wds = _sr_words16(quad0, Uint32(hv), Uint32(slot), w3, k0, k1,
                                          self.philox_rounds)
                    ow = self._fast_chunk(fmt, sr, xs, wds, dsc[rq])
                    rW = cute.make_rmem_tensor((WC,), Uint32)
                    for i in cutlass.range_constexpr(WC):
                        rW[i] = ow[i]
                    gDst = wDst[slot, hv, row, None]
                    for i in cutlass.range_constexpr(WC // PW):
                        cute.autovec_copy(cute.local_tile(rW, (PW,), (i,)),
                                          cute.local_tile(gDst, (PW,),
                                                          ((4 * q + t4) * (WC // PW) + i,)))

    def _fast_chunk(self, fmt, sr, xs, wds, dd):
        """16 fp32 -> storage words (fast paths; bit-identical to formats.encode for every input
        with fp16 SR, else for inputs without NaN / inf and divisors in [2^-100, 2^100])."""
        if fmt == "fp32":
            return [lp.f32_bits(x) for x in xs]
        if fmt == "fp16" and sr and encode_mode() >= 1:
            # exact SR (the fp16 subnormal range included: a warp with one such value used to
            # take the generic path, 80 % of the flush tiles of N(0, 0.1) states); a chunk in
            # the normal range by lp.pack_f16_sr's 2 ops an element
            fast = lp.f16_sr_chunk_fast(xs, self.F16_SR_CHUNK)
            if fast is None:
                ys = [lp.round_f16_sr(x, wds[j]) for j, x in enumerate(xs)]
                return [lp.pack_f16x2(ys[2 * i], ys[2 * i + 1]) for i in range(8)]
            xt = cute.make_rmem_tensor((CHUNK,), Float32)
            wt = cute.make_rmem_tensor((CHUNK,), Uint32)
            for j, x in enumerate(xs):
                xt[j] = x
                wt[j] = wds[j]
            ot = cute.make_rmem_tensor((CHUNK // 2,), Uint32)
            lp.pack_f16_sr(xt, wt, ot, fast, CHUNK)
            return [ot[i] for i in range(CHUNK // 2)]
        if fmt in ("fp16", "bf16"):
            vmax = lp.FP16_MAX if fmt == "fp16" else lp.BF16_MAX
            ys = []
            for j, x in enumerate(xs):
                xc = cute.arch.fmin(cute.arch.fmax(x, Float32(-vmax)), Float32(vmax))
                if sr:
                    low = 0x1FFF if fmt == "fp16" else 0xFFFF
                    xc = lp.bits_f32(lp.f32_bits(xc) + (Uint32(wds[j]) & Uint32(low)))
                ys.append(Float32(_sel(x != x, x, xc)))
            if sr:
                return [_cvt_rz_x2(fmt, ys[2 * i], ys[2 * i + 1]) for i in range(8)]
            return [_cvt_rn_x2(fmt, ys[2 * i], ys[2 * i + 1]) for i in range(8)]
        if fmt == "fp8":
            z = dd == Float32(0.0)
            d1 = Float32(_sel(z, Float32(1.0), dd))
            r0 = _rcp_approx(d1)
            rc = _fma_rn(r0, _fma_rn(-d1, r0, Float32(1.0)), r0)
            qs = []
            for x in xs:
                x = Float32(_sel(z, lp.mul_rn(x, Float32(0.0)), x))
                q0 = x * rc
                qs.append(_fma_rn(_fma_rn(-q0, d1, x), rc, q0))
            return [lp.pack_e4m3x4(qs[4 * i], qs[4 * i + 1], qs[4 * i + 2], qs[4 * i + 3])
                    for i in range(4)]
        # nvfp4 RN
        z = dd == Float32(0.0)
        d14 = Float32(_sel(z, Float32(1.0), dd * Float32(16384.0)))
        r0 = _rcp_approx(d14)
        rc = _fma_rn(r0, _fma_rn(-d14, r0, Float32(1.0)), r0)
        xin = [Float32(_sel(z, lp.mul_rn(x, Float32(0.0)), x)) for x in xs]
        return [lp.e2m1_pack8_rn(xin[0:8], d14, rc, xs[0:8]),
                lp.e2m1_pack8_rn(xin[8:16], d14, rc, xs[8:16])]


# --------------------------------------------------------------------------------------
# compile (tensor-free, cached) and launch
# --------------------------------------------------------------------------------------

_CACHE = KernelCache("gdn_replay")


def _dn(d):
    return None if d is None else dtype_name(d)


def read_is_fp32_hi(read_fmt: str, rec_fmt: str, split: bool) -> bool:
    """Whether the read copy is the fp32 hi copy itself (the fp32 shared pair): a flush row then
    holds its hi tile already (the decode's whole-row flush, the verify's flush tile)."""
    return not split and read_fmt == "fp32" and rec_fmt == "fp32"


def flush_whole_fit(read_fmt: str, rec_fmt: str, split: bool, whole_rows: bool, L: int) -> bool:
    """Whether a flush row can fold the whole-row read tile it holds: :func:`read_is_fp32_hi`,
    read in whole rows, and L <= 16 (its u_j / kn_j staging uses the flush's pre-split key
    buffers, which exist up to two key tiles)."""
    return whole_rows and read_is_fp32_hi(read_fmt, rec_fmt, split) and L <= 16


def flush_whole_default(read_fmt: str, rec_fmt: str, split: bool, whole_rows: bool,
                        L: int) -> bool:
    """Where :func:`flush_whole_fit` (``REPLAYSSM_GDN_FLUSH_WHOLE=0`` turns it off)."""
    return (flush_whole_fit(read_fmt, rec_fmt, split, whole_rows, L)
            and os.environ.get(FLUSH_WHOLE_ENV, "") != "0")


def resolve_impl(read_fmt, rec_fmt, K, V, L, impl=None) -> str:
    """"v2" (default) when the v2 kernel supports the shape, else "v1"; ``impl`` or the
    environment variable REPLAYSSM_GDN_REPLAY_IMPL ("v1" / "v2") overrides."""
    if impl is None:
        impl = os.environ.get(IMPL_ENV, "v2")
    if impl not in ("v1", "v2"):
        raise ValueError(f"impl must be 'v1' or 'v2', got {impl!r}")
    if impl == "v2" and not v2_supported(read_fmt, rec_fmt, K, V, L):
        impl = "v1"
    return impl


def make_op(kw):
    kw = dict(kw)
    impl = kw.pop("impl", "v1")
    tpw = kw.pop("tpw", None)
    prof = kw.pop("prof", False)
    pre = kw.pop("preamble", None)
    whole = kw.pop("whole_rows", False)
    rga = kw.pop("ring_gates_async", False)
    vl = kw.pop("v_late", False)
    fw = kw.pop("flush_whole", False)
    ro = kw.pop("row_order", False)
    oc = kw.pop("order_cursors", False)
    rows = kw.pop("rows", 0)
    fpos = kw.pop("flush_positions", 0)
    pfe = kw.pop("pf_early", False)
    fh = kw.pop("flush_halves", False)
    fpf = kw.pop("flush_pf", False)
    if impl == "v2":
        return GDNReplayDecodeV2(**kw, tpw=tpw, prof=prof, preamble=pre, whole_rows=whole,
                                 ring_gates_async=rga, v_late=vl, flush_whole=fw,
                                 row_order=ro, order_cursors=oc, rows=rows,
                                 flush_positions=fpos, pf_early=pfe, flush_halves=fh,
                                 flush_pf=fpf)
    return GDNReplayDecode(**kw)


def _op_kwargs(rf, rr, cf, cr, split, act_dtype, H, HV, K, V, L, ring, g_dtype, beta_dtype,
               alog_dtype, a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm, has_idx) -> dict:
    """Constructor keywords of a replay kernel (GDNReplayDecode and subclasses) as plain names
    (cache keys); the raw gate dtypes are dropped where g / beta are given."""
    has_g = g_dtype is not None
    return dict(
        read_fmt=rf, read_rounding=rr, rec_fmt=cf, rec_rounding=cr, split=split,
        act_dtype=dtype_name(act_dtype), H=int(H), HV=int(HV), K=int(K), V=int(V), L=int(L),
        ring=int(ring), g_dtype=_dn(g_dtype), beta_dtype=_dn(beta_dtype),
        alog_dtype=None if has_g else _dn(alog_dtype), a_dtype=None if has_g else _dn(a_dtype),
        dt_bias_dtype=None if has_g else _dn(dt_bias_dtype),
        b_dtype=None if beta_dtype is not None else _dn(b_dtype),
        use_qk_l2norm=bool(use_qk_l2norm), has_state_batch_indices=bool(has_idx),
    )


def _resolve(pair, act_dtype, H, HV, K, V, L, ring, g_dtype, beta_dtype, alog_dtype, a_dtype,
             dt_bias_dtype, b_dtype, use_qk_l2norm, has_idx, block_v, num_threads,
             min_blocks_per_mp=None, impl=None, row_order=False, rows=0, flush_positions=0,
             pf_early=None, flush_halves=False, flush_pf=False, philox_rounds=None):
    rf, rr, cf, cr, split = pair_key(pair)
    impl = resolve_impl(rf, cf, K, V, L, impl)
    tpw = None
    rows = int(rows)
    if rows and impl != "v2":
        raise ValueError("a split launch (rows = 1 / 2) needs the v2 kernel")
    if impl == "v2":
        tpw_req = _env_int(TPW_ENV)
        if rows:
            tpw_req = split_tpw(rows)
            if min_blocks_per_mp is None:
                min_blocks_per_mp = split_min_blocks(rows, rf)
        tile = ReplayTileV2(rf, cf, K, V, V if block_v is None else int(block_v), L, split,
                            tpw_req, halves=int(flush_halves) == 1, pair=int(flush_halves) == 2)
        tpw = tile.tpw
        if min_blocks_per_mp is None:
            min_blocks_per_mp = _env_int(MINB_ENV)
        if min_blocks_per_mp is None:
            min_blocks_per_mp = v2_default_min_blocks(tile, rf, cf)
    else:
        tile = replay_tile(rf, cf, K, V, L, block_v, num_threads)
    if min_blocks_per_mp is None:
        min_blocks_per_mp = max(1, 65536 // (tile.num_threads * getattr(tile, "reg_cap",
                                                                        REG_CAP)))
    kw = _op_kwargs(rf, rr, cf, cr, split, act_dtype, H, HV, K, V, L, ring, g_dtype, beta_dtype,
                    alog_dtype, a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm, has_idx)
    kw.update(block_v=tile.block_v, num_threads=tile.num_threads,
              min_blocks_per_mp=int(min_blocks_per_mp), impl=impl, tpw=tpw,
              # (a split's halves run on two streams: no programmatic launch edges)
              pdl=0 if rows else common.pdl_default(),
              prof=impl == "v2" and _env_int(PROF_ENV) == 1 and not rows,
              philox_rounds=common.philox_rounds_for(pair, philox_rounds))
    whole = impl == "v2" and whole_rows_default(rf, tpw)
    pre = preamble_level(rf, whole) if impl == "v2" else 1
    kw.update(preamble=pre, whole_rows=whole,
              ring_gates_async=impl == "v2" and _env_int(RING_GATES_ASYNC_ENV) != 0,
              v_late=impl == "v2" and (v_late_default(rf, whole) or pre >= 4),
              flush_whole=(impl == "v2" and not rows
                           and flush_whole_default(rf, cf, split, whole, L)))
    ro = impl == "v2" and bool(row_order)
    kw.update(row_order=ro, order_cursors=ro and pre >= 3 and (
        rows or _env_int(ORDER_CURSORS_ENV) != 0))
    if rows:
        kw.update(rows=rows, flush_positions=int(flush_positions) if rows == 2 else 0)
    pfe = os.environ.get(PF_EARLY_ENV, "") == "1" if pf_early is None else bool(pf_early)
    if impl == "v2" and not ro and pfe:
        kw.update(pf_early=True)
    if impl == "v2" and flush_halves:
        if kw["flush_whole"] or kw["whole_rows"] or rows:
            raise ValueError("flush halves need the mma flush (not fp32 reads or a split launch)")
        kw.update(flush_halves=int(flush_halves))
    if impl == "v2" and flush_pf and not rows and not kw["flush_whole"]:
        kw.update(flush_pf=True)
    # encode_mode() is read while tracing, TAIL_ENV by the constructor: part of the key
    key = ("gdn_replay", common.arch_key(), encode_mode(),
           lp.f16_sr_chunk(GDNReplayDecodeV2.F16_SR_CHUNK),
           os.environ.get(TAIL_ENV, ""), os.environ.get(GRAM_MMA_ENV, "")) + tuple(kw.values())
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


def _fake_args(op: GDNReplayDecode, T: Optional[int] = None):
    """Fake tensors. Cache tensors: contiguous, num_slots symbolic; state copies as int32 word
    views; nvfp4 block scales as uint8. Per-token inputs: batch symbolic, unit last stride;
    ``T`` (the verify kernel's drafts per row): inputs [batch, T, ...] instead of [batch, ...]."""
    H, HV, K, V, R = op.H, op.HV, op.K, op.V, op.ring
    tok = () if T is None else (T,)             # the per-token inputs' extra dimension
    dvec = ("dyn",) * (2 + len(tok)) + (1,)     # q, k, v, out: unit last stride
    dgate = ("dyn",) * (2 + len(tok))           # per-token gates
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
    q = f(at, (batch, *tok, H, K), dvec)
    k = f(at, (batch, *tok, H, K), dvec)
    v = f(at, (batch, *tok, HV, V), dvec)
    out = f(at, (batch, *tok, HV, V), dvec)
    g = f(op.g_dtype, (batch, *tok, HV), dgate) if op.has_g else None
    beta = f(op.beta_dtype, (batch, *tok, HV), dgate) if op.has_beta else None
    alog = a = dtb = b = None
    if not op.has_g:
        alog = f(op.alog_dtype, (HV,), ("dyn",))
        a = f(op.a_dtype, (batch, *tok, HV), dgate)
        if op.has_dt_bias:
            dtb = f(op.dt_bias_dtype, (HV,), ("dyn",))
    if not op.has_beta:
        b = f(op.b_dtype, (batch, *tok, HV), dgate)
    idx = f(Int32, (batch,), ("dyn",)) if op.has_idx else None
    order = None
    if getattr(op, "row_order", False):
        order = f(Int32, (5 if op.order_cursors else 2, common.sym()), ("dyn", 1))
    return (hi[0], hi[1], hi[2], lo[0], lo[1], lo[2], kb, kinvb, gb, ub, vb, bb, *curs, seed,
            q, k, v, g, beta, alog, a, dtb, b, idx, order, out, Float32(1.0), Int32(-1),
            common.fake_stream())


def _kernel_meta(op) -> dict:
    return {"tile": op.tile, "any_sr": op.any_sr, "split": op.split,
            "order_cursors": op.order_cursors,
            "tail": (op.late_arrive_check, op.k_append_regs),
            "gram_mma": bool(getattr(op, "gram_mma", False))}


def _compile_keep_ptx(op, key, fake_args, dump_dir: Optional[str]):
    """Compile ``op`` keeping the PTX (and the CUBIN in ``dump_dir`` when given); returns
    ``(kernel, ptx or None)``."""
    with common.dump_ptx(cubin=dump_dir is not None, dir=dump_dir) as d:
        compiled, secs = common.cute_compile(op, *fake_args, dump=d)
        k = CompiledKernel(compiled, key, secs, use_ffi=common.HAS_TVM_FFI,
                           meta=_kernel_meta(op))
        k.ptx = d.read() or None
        if dump_dir is None:
            d.cleanup()
    return k, k.ptx


def compile_gdn_replay(pair, act_dtype, H: int, HV: int, K: int, V: int, L: int, ring: int,
                       g_dtype=None, beta_dtype=None, alog_dtype=None, a_dtype=None,
                       dt_bias_dtype=None, b_dtype=None, use_qk_l2norm: bool = True,
                       has_state_batch_indices: bool = True, block_v: Optional[int] = None,
                       num_threads: Optional[int] = None,
                       min_blocks_per_mp: Optional[int] = None,
                       impl: Optional[str] = None, row_order: bool = False, rows: int = 0,
                       flush_positions: int = 0, pf_early: Optional[bool] = None,
                       flush_halves: int = 0, flush_pf: bool = False,
                       philox_rounds: Optional[int] = None) -> CompiledKernel:
    """Compile (once per key, tensor-free, TVM-FFI) the GDN replay decode kernel for precision
    ``pair`` (name or PrecisionPair), buffer length ``L`` and ring capacity ``ring``.

    Call ``k.ffi(hi_words, hi_scale, hi_gscale, lo_words, lo_scale, lo_gscale, k_buf, kinv_buf,
    g_buf, u_buf, v_buf, beta_buf, write_pos, ring_origin, flush_count, pending, arrive, seed, q,
    k, v, g, beta, A_log, a, dt_bias, b, state_batch_indices, order, out, scale, pad_slot_id)``
    (``None`` for what the variant does not use; see :func:`gdn_replay_decode_cute`). ``impl``:
    "v2" (default where supported) or "v1" (the previous kernel; see :func:`resolve_impl`).
    ``row_order`` (v2): grid position -> (row, slot[, cursors]) from the flush-first order
    (``order``: ``cache.row_order`` / ``row_order_ext``, :mod:`cute_kernels.row_order`).
    ``rows`` (v2, with ``row_order``): one half of a split launch (:func:`use_split`): 1 = the
    non-flush rows, 2 = the flush rows over a persistent grid of ``flush_positions``
    positions. ``pf_early`` (v2, without ``row_order``): L2 prefetches before the PDL wait
    (:func:`use_pf_early`; None: :data:`PF_EARLY_ENV` = 1, else off). ``flush_halves`` (v2):
    each row tile's flush in two column halves, 1 = over two warps, 2 = over the two CTAs of a
    cluster (:func:`flush_halves_for`). ``flush_pf`` (v2): the flush's L2 prefetch of the hi
    rows (:func:`flush_pf_for`). ``philox_rounds``: the SR generator's rounds (the cache's; None =
    10)."""
    if not common.HAS_TVM_FFI:
        raise RuntimeError("tensor-free compile needs apache-tvm-ffi")
    kw, key = _resolve(pair, act_dtype, H, HV, K, V, L, ring, g_dtype, beta_dtype, alog_dtype,
                       a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm, has_state_batch_indices,
                       block_v, num_threads, min_blocks_per_mp, impl, row_order, rows,
                       flush_positions, pf_early, flush_halves, flush_pf, philox_rounds)
    return common.compile_tvm_ffi_cached(_CACHE, key, lambda: make_op(kw), _fake_args, _kernel_meta)


def compile_only(pair="nvfp4/fp16sr", act_dtype="bfloat16", H=16, HV=32, K=128, V=128, L=16,
                 ring=None, g_dtype=None, beta_dtype=None, alog_dtype="float32",
                 a_dtype="bfloat16", dt_bias_dtype="float32", b_dtype="bfloat16",
                 use_qk_l2norm=True, has_state_batch_indices=True, block_v=None,
                 num_threads=None, min_blocks_per_mp=None, keep_ptx: bool = False,
                 dump_dir: Optional[str] = None, impl: Optional[str] = None,
                 row_order: bool = False, rows: int = 0, flush_positions: int = 0,
                 flush_halves: int = 0, flush_pf: bool = False,
                 philox_rounds: Optional[int] = None):
    """Compile one variant without launching (CPU-only with ``CUTE_DSL_ARCH=sm_90a``); defaults:
    Qwen3.5-4B layer, L = 16, raw gates. Returns ``(kernel, ptx or None)``."""
    ring = L + 1 if ring is None else ring
    if rows:
        row_order = True
        flush_positions = flush_positions or split_flush_positions(HV, V // (block_v or V))
    if not keep_ptx and dump_dir is None:
        return compile_gdn_replay(pair, act_dtype, H, HV, K, V, L, ring, g_dtype, beta_dtype,
                                  alog_dtype, a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm,
                                  has_state_batch_indices, block_v, num_threads,
                                  min_blocks_per_mp, impl, row_order, rows,
                                  flush_positions, flush_halves=flush_halves,
                                  flush_pf=flush_pf, philox_rounds=philox_rounds), None
    kw, key = _resolve(pair, act_dtype, H, HV, K, V, L, ring, g_dtype, beta_dtype, alog_dtype,
                       a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm, has_state_batch_indices,
                       block_v, num_threads, min_blocks_per_mp, impl, row_order, rows,
                       flush_positions, flush_halves=flush_halves, flush_pf=flush_pf,
                       philox_rounds=philox_rounds)
    op = make_op(kw)
    return _compile_keep_ptx(op, key, _fake_args(op), dump_dir)


# ---- torch-facing launcher -----------------------------------------------------------------

from replayssm_lp._validate import cache_plan, env_reader  # noqa: E402  (launcher helpers)


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
    """int32 word views of the stored copies (+ uint8 nvfp4 scales), memoised on the cache's
    plan (:func:`replayssm_lp._validate.cache_plan`: rebuilt when a cache tensor was replaced or
    a stored copy's storage moved)."""
    memo = cache_plan(cache).memo
    views = memo.get("gdn_replay_views")
    if views is None:
        views = memo["gdn_replay_views"] = _build_cache_views(cache, rf, cf, split)
    return views


def _build_cache_views(cache, rf, cf, split):
    hi, lo = cache.hi, cache.lo

    def cp(enc, fmt):
        sc = enc.scale
        if fmt == "nvfp4":
            sc = _u8(sc)
        elif fmt != "fp8":
            sc = None
        return (_words(enc.data, fmt), sc, enc.global_scale if fmt == "nvfp4" else None)

    return cp(hi, cf) + (cp(lo, rf) if split else (None, None, None))


_LAUNCH: dict = {}   # kept for compatibility; the launch memo lives on each cache's plan
#: environment variables the launch decisions read (part of the launch memo key)
_ENV_NAMES = (IMPL_ENV, TPW_ENV, MINB_ENV, common.PDL_ENV, PROF_ENV, PREAMBLE_ENV,
              WHOLE_ROWS_ENV, ENCODE_ENV, RING_GATES_ASYNC_ENV, V_LATE_ENV, FLUSH_WHOLE_ENV,
              ORDER_ENV, ORDER_CURSORS_ENV, SPLIT_ENV, SPLIT_TPW_ENV, SPLIT_MINB1_ENV,
              SPLIT_MINB2_ENV, SPLIT_FPOS_ENV, BLOCK_V_ENV, PF_EARLY_ENV, FLUSH_HALVES_ENV,
              FLUSH_PF_ENV, TAIL_ENV, GRAM_MMA_ENV, lp.F16_SR_CHUNK_ENV)
_env = env_reader(_ENV_NAMES)


def _dt(t):
    return None if t is None else t.dtype


def _gate_dtypes(g, beta, A_log, a, dt_bias, b) -> tuple:
    """(g, beta, A_log, a, dt_bias, b) dtypes as the kernel sees them: the raw gates' are None
    where g / beta are given (compile_* arguments, part of the launch memo key)."""
    return (_dt(g), _dt(beta), None if g is not None else _dt(A_log),
            None if g is not None else _dt(a), None if g is not None else _dt(dt_bias),
            None if beta is not None else _dt(b))


def _launch(fn, any_sr, split, views, cache, q, k, v, g, beta, A_log, a, dt_bias, b,
            state_batch_indices, out, scale, pad_slot_id):
    """Call a compiled replay kernel (``fn`` = its TVM-FFI function) on ``cache``; ``views``:
    :func:`_cache_views`. Raw gates are passed as None where g / beta are given."""
    _launcher(fn, any_sr, split, views)(cache, q, k, v, g, beta, A_log, a, dt_bias, b,
                                        state_batch_indices, out, scale, pad_slot_id)


def _launcher(fn, any_sr, split, views, order=None, order_ready: bool = False):
    """``launch(cache, q, k, v, g, beta, A_log, a, dt_bias, b, state_batch_indices, out, scale,
    pad_slot_id)`` of a compiled replay / verify kernel (``fn``) with the stored-copy ``views``
    bound (:func:`_cache_views`); the cache's buffers, cursors and seed are read per call. Raw
    gates are passed as None where g / beta are given. ``order``: (flush-first order function,
    with cursors) run first into the cache's scratch, for a kernel compiled with ``row_order``
    (``order_ready``: already run by the caller; its scratch is passed)."""
    from .row_order import order_scratch, run_order
    hw, hs, hg, lw, ls, lg = views
    order_fn_, ocur = order if order is not None else (None, False)

    def launch(cache, q, k, v, g, beta, A_log, a, dt_bias, b, state_batch_indices, out, scale,
               pad_slot_id):
        mo = None
        if order_ready:
            mo = order_scratch(cache, ocur)
        elif order_fn_ is not None:
            mo = run_order(order_fn_, ocur, cache, q.shape[0], state_batch_indices,
                           int(pad_slot_id))
        fn(hw, hs, hg, lw, ls, lg, cache.k_buf, cache.kinv_buf, cache.g_buf, cache.u_buf,
           cache.v_buf if split else None, cache.beta_buf if split else None, cache.write_pos,
           cache.ring_origin, cache.flush_count, cache.pending, cache.arrive,
           cache.seed if any_sr else None, q, k, v, *launch_gates(g, beta, A_log, a, dt_bias, b),
           state_batch_indices, mo, out, float(scale), int(pad_slot_id))

    return launch


def gdn_replay_decode_cute(cache, q, k, v, g=None, beta=None, A_log=None, a=None, dt_bias=None,
                           b=None, scale=None, use_qk_l2norm: bool = True,
                           state_batch_indices=None, pad_slot_id: int = -1, out=None,
                           block_v: Optional[int] = None, num_threads: Optional[int] = None,
                           min_blocks_per_mp: Optional[int] = None, impl: Optional[str] = None,
                           _memo=None):
    """One GDN ReplaySSM decode step (T = 1, committed) on a ``GDNReplayCache`` on CUDA.

    Inputs validated by the torch layer: q, k [batch, H, K], v / out [batch, HV, V] in the cache's
    activation dtype (unit last stride); gates either ``g``, ``beta`` [batch, HV] or raw ``A_log``
    [HV], ``a`` [batch, HV], ``dt_bias`` [HV], ``b`` [batch, HV]; cache tensors contiguous;
    ``state_batch_indices`` int32 [batch] (unique slots) or None. ``scale`` None -> K^-0.5.
    Launches one kernel on the current torch stream (two with the flush-first order:
    :func:`use_row_order`; three on two streams, joined before return, with the split launch:
    :func:`use_split`), allocates nothing when ``out`` is given,
    never synchronises (CUDA-graph capturable once compiled). Returns ``out``. ``_memo``: the
    memo of the cache's plan when the caller has just validated it.
    """
    batch, H, K = q.shape
    HV, Vd = v.shape[1], v.shape[2]
    if out is None:
        out = v.new_empty(v.shape)
    if batch == 0:
        return out
    if scale is None:
        scale = K ** -0.5
    # hot path: one dict lookup on the cache's plan (valid while the cache holds the same
    # tensors; it memoises the stored-copy views too), keyed by what the tensors carry
    memo = cache_plan(cache).memo if _memo is None else _memo
    gate_dtypes = _gate_dtypes(g, beta, A_log, a, dt_bias, b)
    fast_key = (q.dtype, H, HV, K, Vd, *gate_dtypes, use_qk_l2norm, state_batch_indices is None,
                batch, block_v, num_threads, min_blocks_per_mp, impl, _env())
    launch = common.memo_launch(memo, "gdn_replay_launch", fast_key, make_launch, cache, q, v,
                                gate_dtypes, use_qk_l2norm, state_batch_indices, block_v,
                                num_threads, min_blocks_per_mp, impl)
    launch(cache, q, k, v, g, beta, A_log, a, dt_bias, b, state_batch_indices, out, scale,
           pad_slot_id)
    return out


def launch_block_v(batch: int, HV: int, K: int, V: int, read_fmt: str, rec_fmt: str, L: int,
                   impl: str) -> int:
    """Value rows per CTA of a decode launch the caller left to the heuristics: the v2 profiling
    build's whole head, else :data:`BLOCK_V_ENV` (tuning; not for nvfp4 pairs, whose global
    scale needs the whole head), else :func:`choose_block_v_v2` / :func:`choose_block_v`; then,
    for 128-row heads without nvfp4, ``SMALL_BLOCK_V`` rows:

    * never fewer (the heuristics' 32 at b1 on the 4B: fp32 4.3 -> 4.1 µs at L8, fp8/fp32 5.3
      -> 4.7 at L16, every pair 4-12 % faster at 64, session23_gpu/call3);
    * no more for fp32 read copies up to ``FP32_SMALL_MAX_HEADS`` (row, value head) pairs
      (H200, Qwen3.5-4B b8 / 32 / 64, session22_gpu/call3, 64 rows vs 128: fp32 1-7 % faster,
      b32 L16 28.5 -> 26.9 µs, L32 38.9 -> 36.0, b64 L32 61.8 -> 59.4; 32 rows slower
      everywhere);
    * no more for fp8 / bf16 / fp16 read copies up to ``NARROW_SMALL_MAX_HEADS`` pairs at L <=
      ``NARROW_SMALL_MAX_L``, where one flushing head's CTA sets a step (session23_gpu/call3,
      4B b8 L8 / L16: fp8/fp32 20.2 -> 15.9 / 15.8 -> 14.0 µs, bf16/fp32 21.3 -> 17.2 / 17.4
      -> 15.6, fp8sr 18.3 -> 14.4; 122B b4 L8 fp8/fp32 13.4 -> 12.0, L16 1-4 %; beyond, mixed:
      b32 L32 fp8/fp32 58.9 -> 60.3, b8 L32 18.3 -> 18.9, session22_gpu/call3)."""
    if impl != "v2":
        return choose_block_v(batch, HV, K, V, read_fmt, rec_fmt, L)
    if _env_int(PROF_ENV) == 1:
        return V                   # profiling build: one CTA (and one 20-word record) per head
    bv = None if "nvfp4" in (read_fmt, rec_fmt) else _env_int(BLOCK_V_ENV)
    if bv is not None:
        if bv not in V2_BLOCK_VS or V % bv:
            raise ValueError(f"{BLOCK_V_ENV}={bv} must be one of {V2_BLOCK_VS} dividing the "
                             f"value head dim {V}")
        return bv
    bv = choose_block_v_v2(batch, HV, V, read_fmt, rec_fmt)
    if V != 128 or "nvfp4" in (read_fmt, rec_fmt):   # (timed at V = 128 only)
        return bv
    pairs = batch * HV
    small = (pairs <= FP32_SMALL_MAX_HEADS if read_fmt == "fp32"
             else pairs <= NARROW_SMALL_MAX_HEADS and L <= NARROW_SMALL_MAX_L)
    return SMALL_BLOCK_V if (small or bv < SMALL_BLOCK_V) else bv


def make_launch(cache, q, v, gate_dtypes, use_qk_l2norm, state_batch_indices, block_v=None,
                num_threads=None, min_blocks_per_mp=None, impl=None):
    """``launch(cache, q, k, v, g, beta, A_log, a, dt_bias, b, state_batch_indices, out, scale,
    pad_slot_id)`` (``scale`` a number) for one call signature: q's dtype and shape, v's head
    count and dim, ``gate_dtypes`` (:func:`_gate_dtypes`), whether indices are given, the tiling
    heuristics' choice for this batch. Reads :data:`_ENV_NAMES` (a caller that memoises the
    launch keys it by their values too); binds the views of ``cache``'s current stored copies:
    keep it in the memo of the cache's plan (see :func:`cute_kernels.mamba2_replay.make_launch`)."""
    batch, H, K = q.shape
    HV, Vd = v.shape[1], v.shape[2]
    rf, rr, cf, cr, split = pair_key(cache.pair)
    L, ring = cache.buffer_len, cache.ring
    im = resolve_impl(rf, cf, K, Vd, L, impl)
    honoured = _split_honours(num_threads, min_blocks_per_mp)    # (the caller's request)
    bv = block_v if block_v is not None else launch_block_v(batch, HV, K, Vd, rf, cf, L, im)
    ctas = batch * HV * (Vd // bv)
    ro = im == "v2" and use_row_order(cache, batch)
    halves = 0
    if im == "v2":
        tile = ReplayTileV2(rf, cf, K, Vd, bv, L, split, _env_int(TPW_ENV))
        # (a caller's thread count or occupancy hint, or REPLAYSSM_GDN_REPLAY_MINB, is the
        # one-warp-per-tile kernel's: no halves -- mode 1 at hint 2 would cap 256 threads at 128
        # registers, its flush needs ~145)
        if num_threads is None and min_blocks_per_mp is None and _env_int(MINB_ENV) is None:
            halves = flush_halves_for(
                rf, tile.tpw, ctas, whole_rows_default(rf, tile.tpw),
                flush_whole_default(rf, cf, split, whole_rows_default(rf, tile.tpw), L),
                row_order=ro)
        if halves:
            tile = ReplayTileV2(rf, cf, K, Vd, bv, L, split, tile.tpw, halves=halves == 1,
                                pair=halves == 2)
        if min_blocks_per_mp is None and _env_int(MINB_ENV) is None:
            min_blocks_per_mp = v2_default_min_blocks(tile, rf, cf, ctas)
    if honoured and ((ro and use_split(cache, batch))
                     or (im == "v2" and use_small_split(cache, batch))):
        return _split_launch(cache, q, v, gate_dtypes, use_qk_l2norm, state_batch_indices, bv)
    kern = compile_gdn_replay(
        cache.pair, q.dtype, H, HV, K, Vd, L, ring, *gate_dtypes, use_qk_l2norm,
        state_batch_indices is not None, bv, num_threads, min_blocks_per_mp, im, ro,
        pf_early=not ro and use_pf_early(cache, batch), flush_halves=halves,
        flush_pf=im == "v2" and flush_pf_for(ctas), philox_rounds=cache.philox_rounds)
    order = order_entry(cache, 1, state_batch_indices is not None, kern) if ro else None
    return _launcher(kern.ffi, kern.meta["any_sr"], split, _cache_views(cache, rf, cf, split),
                     order)


def _split_launch(cache, q, v, gate_dtypes, use_qk_l2norm, state_batch_indices, bv):
    """The split decode (:func:`use_split`): the order kernel (rows, slots, cursors), then the
    flush rows' persistent launch on a high-priority side stream and the non-flush rows' launch
    on the caller's stream, at once (the short non-flush CTAs fill the SMs around the long
    flush ones), joined before return. Same arguments as :func:`make_launch`'s result."""
    batch, H, K = q.shape
    HV, Vd = v.shape[1], v.shape[2]
    rf, rr, cf, cr, split = pair_key(cache.pair)
    has_idx = state_batch_indices is not None
    common_args = (cache.pair, q.dtype, H, HV, K, Vd, cache.buffer_len, cache.ring, *gate_dtypes,
                   use_qk_l2norm, has_idx, bv, None, None, "v2", True)
    k1 = compile_gdn_replay(*common_args, rows=1, philox_rounds=cache.philox_rounds)
    k2 = compile_gdn_replay(*common_args, rows=2,
                            flush_positions=split_flush_positions(HV, Vd // bv, q.device.index),
                            philox_rounds=cache.philox_rounds)
    order = order_entry(cache, 1, has_idx, k1)
    views = _cache_views(cache, rf, cf, split)
    nonflush = _launcher(k1.ffi, k1.meta["any_sr"], split, views, order, order_ready=True)
    flush = _launcher(k2.ffi, k2.meta["any_sr"], split, views, order, order_ready=True)
    from .row_order import ConcurrentHalves, run_order
    order_fn_, ocur = order
    halves = ConcurrentHalves(q.device, priority=-1)

    def launch(cache, q, k, v, g, beta, A_log, a, dt_bias, b, state_batch_indices, out, scale,
               pad_slot_id):
        run_order(order_fn_, ocur, cache, q.shape[0], state_batch_indices, int(pad_slot_id))
        halves(flush, nonflush, cache, q, k, v, g, beta, A_log, a, dt_bias, b,
               state_batch_indices, out, scale, pad_slot_id)
    return launch


def order_entry(cache, T: int, has_idx: bool, kern):
    """(flush-first order function for ``T`` appended entries, with cursors) for ``_launcher``,
    matching the compiled step / verify kernel ``kern`` (compiled with ``row_order``)."""
    from .mamba2_replay import order_fn
    oc = kern.meta["order_cursors"]
    return order_fn(cache, T, has_idx, oc), oc


def use_row_order(cache, batch: int, env: str = ORDER_ENV) -> bool:
    """Whether a v2 decode (verify: ``env`` its switch) launch of ``batch`` rows runs the
    flush-first order kernel first (``env`` = 0 / 1 forces; else read copies narrower than fp32
    from :data:`ORDER_MIN_BATCH` rows); never when ``batch`` exceeds the order buffer
    (``cache.row_order``, one entry per slot: only pad rows can make a batch that large) or the
    grid's y limit (the ordered grid's positions). The order is one scratch buffer per cache:
    two streams stepping disjoint slots of one cache concurrently would share it."""
    if batch > cache.row_order.shape[1] or batch > 65535:
        return False
    forced = _env_int(env)
    if forced is not None:
        return forced == 1
    return cache.pair.read_fmt != "fp32" and batch >= ORDER_MIN_BATCH


def use_split(cache, batch: int) -> bool:
    """Whether a v2 decode of ``batch`` rows runs as a split launch (the order, then the flush
    rows' persistent launch on a side stream and the non-flush rows' launch at once):
    :data:`SPLIT_ENV` = 0 / 1 forces (1 still needs the order); unset: read copies narrower
    than fp32 from :data:`SPLIT_MIN_BATCH` rows, where the order runs, at buffer lengths up to
    :data:`SPLIT_MAX_L` (GPU-tested at L = 4 and 16 and timed at 16; at L = 32 the non-flush
    half spills 200 B, not timed). Never for fp32 read copies: their preamble (level 1 without
    whole rows, which two row tiles per warp do not have) takes no cursors from the order."""
    if cache.pair.read_fmt == "fp32" or not use_row_order(cache, batch):
        return False
    forced = _env_int(SPLIT_ENV)
    if forced is not None:
        return forced == 1
    return batch >= SPLIT_MIN_BATCH and cache.buffer_len <= SPLIT_MAX_L


def use_small_split(cache, batch: int) -> bool:
    """Whether a v2 decode below :func:`use_split`'s batch (:data:`SPLIT_MIN_BATCH`) runs as a
    split launch anyway (with its order, also below :data:`ORDER_MIN_BATCH`): narrow read
    copies at the (buffer length, rows) of :data:`SPLIT_SMALL_RULE`, where flush rows in most
    steps make a flushing head's CTA set the step and the split's 256-thread flush CTA is
    shorter. :data:`ORDER_ENV` or :data:`SPLIT_ENV` = 0 turns it off (forced on,
    the split still needs the rule's sizes here, or the order, :func:`use_split`). The order's
    scratch is one per cache: these batches now write it too (see :func:`use_row_order`)."""
    if _env_int(ORDER_ENV) == 0 or _env_int(SPLIT_ENV) == 0:
        return False
    from .row_order import small_split_applies

    return (cache.pair.read_fmt != "fp32"
            and small_split_applies(SPLIT_SMALL_RULE, cache, batch, SPLIT_MIN_BATCH))


def _split_honours(num_threads, min_blocks_per_mp) -> bool:
    """Whether the split's own builds honour the call: not where a caller (or the tuning
    switches REPLAYSSM_GDN_REPLAY_TPW / _MINB) asks for a thread count or occupancy of the one
    kernel, not for the profiling build (one record per CTA of one kernel), not below preamble
    level 3 (the order's cursors need it)."""
    return (num_threads is None and min_blocks_per_mp is None and _env_int(TPW_ENV) is None
            and _env_int(MINB_ENV) is None and _env_int(PROF_ENV) != 1
            and _env_int(PREAMBLE_ENV) in (None, 3, 4))


def split_tpw(rows: int) -> int:
    """Row tiles per warp of a split launch's half (the flush half: 1)."""
    if rows != 1:
        return 1
    v = _env_int(SPLIT_TPW_ENV)
    return SPLIT_NONFLUSH_TPW if v is None else v


def split_min_blocks(rows: int, read_fmt: str = "nvfp4") -> int:
    """CTAs per SM hint of a split launch's half (the non-flush half's by read copy)."""
    v = _env_int(SPLIT_MINB1_ENV if rows == 1 else SPLIT_MINB2_ENV)
    if v is not None:
        return v
    return SPLIT_NONFLUSH_MINB.get(read_fmt, 5) if rows == 1 else SPLIT_FLUSH_MINB


def split_flush_positions(HV: int, nsplit: int = 1, device_index: Optional[int] = None) -> int:
    """Grid positions of the split's persistent flush launch: one wave of its CTAs
    (SMs x CTAs per SM over the CTAs of one position), at least 1; :data:`SPLIT_FPOS_ENV`
    overrides."""
    v = _env_int(SPLIT_FPOS_ENV)
    if v is not None:
        return max(1, v)
    return max(1, (common.num_sms(device_index) * split_min_blocks(2)) // (HV * nsplit))
