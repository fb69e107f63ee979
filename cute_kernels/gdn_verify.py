"""Gated DeltaNet ReplaySSM speculative verify (T draft tokens per row, one launch) in CuTe DSL.

Semantics: exactly ``replayssm_lp.reference.gdn_replay`` with ``commit_all=False`` on a
``GDNReplayCache`` (DESIGN.md §1 "Speculative decoding"), for every precision pair. Per batch row
(slot s, committed entries h = write_pos[s]) and value head hv (key head hk = hv // (HV/H)):

* **flush** when ``h + T > L``: fold the h committed entries into hi exactly as the decode kernel
  does (``GDNReplayDecodeV2._flush``: shared pairs the rank-h update with the buffered u, split
  pairs the WY form that recomputes u from hi; hi / lo written with the spec encoders, SR
  generation = flush_count, then += 1), ``ring_origin += h``, m0 = 0 committed entries remain;
  the outputs then start from the fresh fp32 fold;
* otherwise m0 = h and the outputs start from the read copy.

Drafts t = 0..T-1 sit at logical positions m0 + t. With G_p the sequential prefix sum of the log
decays over positions (buffered g, then the drafts' g) and c_{t,p} = e^{G_{m0+t-1} - G_p}
(kn_p . kn_t) (d_{t,p} likewise with qn_t)::

    Sk_t = e^{G_{m0+t-1}} (S0 kn_t) + sum_{p<m0} c_{t,p} u_p + sum_{d<t} c_{t,m0+d} u'_d
    u'_t = beta_t (v_t - alpha_t Sk_t) ;  o_t = alpha_t Sq_t + (kn_t . qn_t) u'_t

The drafts' u' depend on each other only through the last sum: a T x T unit-lower-triangular
system, solved per value row by forward substitution once the "known" parts (read-copy dots +
committed ring terms) are reduced. S0 is read once for all 2T vectors. The T drafts are appended
(raw k + kinv, g, u; split pairs also raw v and beta) at ``(origin' + m0 + t) % R``; the last CTA
of the row sets ``write_pos = m0``, ``ring_origin``, ``flush_count`` (flush rows), ``pending = T``
(``ops.commit`` later moves write_pos by the accepted count).

Mapping (same CTA tile and thread <-> data map as the v2 decode kernel, whose device helpers and
flush this reuses): one CTA per (batch row, value head, block of ``block_v`` value rows), warp w
owns 16 rows, lane (g, t) holds rows g and g + 8 and 16-byte read chunks at byte 64 i + 16 t.

* read dot (non-flush rows): the lane's 32 columns of both rows decoded once (fp8 row scale after
  the dot, nvfp4 values pre-scaled per 16-block); by default on the tensor cores
  (``_read_dots_mma``: tf32 mma.sync, the decoded values are the A fragment as loaded, 2 mma per
  k-step for read copies exact in tf32 (all but fp32), 3xTF32 for fp32 -- as accurate as the fp32
  reference's dot to ~2^-22, ~2^-21 with ``bsplit``'s truncated A lo piece), else
  (``REPLAYSSM_GDN_VERIFY_MMA=0``) a run-time loop over the 2T vectors kn_t, qn_t with CUDA-core
  fp32 FMAs and a quad butterfly; the row sums go to shared memory per (vector, row);
  With ``bsplit`` (default at a 128-register budget, ``REPLAYSSM_GDN_VERIFY_BSPLIT``) the 2T
  vectors are split into tf32 pieces once per CTA in shared memory (``_presplit_vectors``: every
  warp used to split them again in every k-step) and fp32 A values by integer rounding
  (``lowprec.split_tf32_fast``, 4 instructions instead of 9): the CTA is issue-bound, not
  waiting on memory (session14_gpu: its read dots were ~1400 SASS instructions per warp);
* coefficient dots c, d: one thread per (vector, position) item over keys staged in shared memory
  (pitch K + 1: conflict-free across positions); decays from one sequential prefix (warp 0);
* flush rows: the v2 flush (fold, encoders, SR generation), unchanged; its output hook
  (``_flush_out_partials``) dots the fold, still in registers, with all 2T vectors (``bsplit``
  at 128 registers: on the read dots' 3xTF32 mma path, else CUDA-core FMAs). The fp32 pair
  (read copy = hi) instead folds the (g, t) read tile it holds on the CUDA cores
  (``_flush_tile``: the rank-hf update, keys past hf zero), stores it to hi and takes the draft
  dots of a non-flush row (``_tile_dots``);
* flush-first order (narrow read copies from 32 rows, ``REPLAYSSM_GDN_VERIFY_ORDER``): the
  order kernel with the call's T runs first; grid (HV * nsplit, positions) as the decode's;
* finish: thread r < block_v solves its row's T x T system, writes outputs, u (and v).

The "tail" (``tail_default``, ``REPLAYSSM_GDN_VERIFY_TAIL``) removes the waits the phase profile
found (``REPLAYSSM_GDN_PROF=1``, ``tests/gpu_scripts/prof_mamba2_replay.py --verify-T``): the
committed keys + kinv go by cp.async into the flush workspace right after the cursors (non-flush
rows only: flush rows have none left), the finish's global inputs (ring u of the thread's row, the
drafts' v and raw keys) are issued right after the read dots, and the committed ring terms are
added by the row-owner thread inside the finish instead of a pass of shuffles and barriers.
``coef_first`` (``REPLAYSSM_GDN_VERIFY_COEF_FIRST``, a tuning switch, off: it did not win)
moves a non-flush row's key staging and coefficient dots before its read dots, the finish's
inputs after them (their lines prefetched into L2 after the cursors); the profiling build's
phase 5 then holds both dots.

Shared memory: 2T padded draft vectors, per-draft scalars, the decay prefix, the 2T x L
coefficient matrix, 2T x block_v row sums, plus the v2 flush workspace (its pre-split key copies
only where the 47 KiB budget allows; the staged key buffer doubles as the coefficient keys).

Public entry points: :class:`GDNVerifyKernel`, :func:`compile_gdn_verify`, :func:`compile_only`,
:func:`compile_report`, :func:`gdn_verify_cute`, :func:`supports_cache`.
"""

from __future__ import annotations

import functools
from typing import Optional

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, Uint32, const_expr
from cutlass.cute.nvgpu import cpasync

from . import common
from . import lowprec as lp
from .common import CompiledKernel, KernelCache
from .gdn_replay import (ENCODE_ENV, KS_PITCH, ORDER_CURSORS_ENV, PREAMBLE_ENV, PROF_ENV,
                         SMEM_LIMIT, V2_K, V2_MAX_L, GDNReplayDecodeV2, ReplayTileV2, _mma,
                         _mma3_tf32, encode_mode, _cache_views, _compile_keep_ptx, _fake_args,
                         _fidx, _gate_dtypes, _prof_record, _env_int, _kernel_meta, _kq_addr,
                         _launcher, _op_kwargs, _read_chunk_values, _ring, _fma_rn, _fstamp,
                         _sel, _seq_prefix, choose_block_v_v2, order_entry, pair_key,
                         preamble_level, read_is_fp32_hi, use_row_order,
                         v2_default_min_blocks)
from .gdn_standard import gate_input_loads, gdn_gates, gdn_gates_from_loads, slot_of_row
from replayssm_lp._validate import cache_plan, env_reader

__all__ = [
    "GDNVerifyKernel",
    "VerifyTile",
    "compile_gdn_verify",
    "compile_only",
    "compile_report",
    "gdn_verify_cute",
    "supports_cache",
    "MAX_T",
]

MAX_T = 8                    # drafts per verify call (compile-time T)
TAIL_MAX_KEYS = 64           # tail: committed-key values one thread stages (L * K / threads)
#: staged key rows for the coefficient dots: 4 mod 32 words, so a quarter-warp's 16-byte loads
#: of 8 positions cover all banks (lanes of a warp hold positions p = item % L)
KD_PITCH = V2_K + 4
TOK_G, TOK_BETA, TOK_ALPHA, TOK_KQ, TOK_KINV, TOK_EG = 0, 8, 16, 24, 32, 40   # sTok fields


#: the flush's pre-split tf32 key copies (``ks_split``) also when they take the CTA past the 47 KB
#: budget, up to KSPLIT_SMEM_LIMIT (3 CTAs/SM still fit the SM's 228 KB -- not with bsplit's
#: pre-split vectors on top, which are off at 3 CTAs/SM by default); without them T = 8 (and
#: T = 4 with a fp32 recurrence copy) splits every key operand again inside the P dots and the
#: fold. Default: for read copies narrower than fp32 (their kernel has 80 registers and spills);
#: 1 / 0 force on / off. H200, Qwen3.5-4B, L = 16, session9_gpu/call4 (same run, off / on, µs):
#: b256 T = 8 nvfp4/fp16sr 771.3 -> 738.2 (flush only 1792 -> 1199), fp8/fp32 749.1 -> 698.3,
#: T = 4 fp8/fp32 372.0 -> 355.5; fp32 reads lose (128 registers, no spills: 550.3 -> 559.9)
KSPLIT_ENV = "REPLAYSSM_GDN_VERIFY_KSPLIT"
KSPLIT_SMEM_LIMIT = 72 * 1024


def ksplit_big(read_fmt: str) -> bool:
    e = _env_int(KSPLIT_ENV)
    return read_fmt != "fp32" if e is None else e == 1


def verify_min_blocks(tile: "VerifyTile", read_fmt: str, rec_fmt: str,
                      ctas: Optional[int] = None) -> int:
    """CTAs per SM hint of the verify kernel: the decode kernel's rule
    (:func:`cute_kernels.gdn_replay.v2_default_min_blocks`), except fp8 read copies with T >= 4 at
    2 per SM (128 registers: their flush stops spilling). session9_gpu/call4 (same run, pre-split
    keys on, 3 -> 2 per SM): b256 T = 8 698.3 -> 634.1 µs, T = 4 355.5 -> 342.2, b32 equal;
    nvfp4 read copies lose (738.2 -> 764.1)."""
    if read_fmt == "fp8" and tile.T >= 4 and tile.tpw == 1:
        # never below the tile's own cap (block_v < 128: 128 / 64 threads -> 4 / 8 per SM)
        return max(2, 65536 // (tile.num_threads * tile.reg_cap))
    return v2_default_min_blocks(tile, read_fmt, rec_fmt, ctas, verify=True)


class VerifyTile(ReplayTileV2):
    """v2 tiling (one 16-row tile per warp) plus the verify's shared memory: the 2T draft vectors,
    per-draft scalars, decay prefix, coefficient matrix and per-row sums. The flush's pre-split
    key copies (``ks_split``) are kept only where everything fits the static budget."""

    def __init__(self, read_fmt: str, rec_fmt: str, K: int, V: int, block_v: int, L: int,
                 split: bool, T: int, bsplit: bool = False):
        super().__init__(read_fmt, rec_fmt, K, V, block_v, L, split, tpw=1)
        if not 1 <= T <= MAX_T:
            raise ValueError(f"verify needs 1 <= T <= {MAX_T}, got T={T}")
        if T > L:
            raise ValueError(f"verify needs T <= buffer_len (T={T}, L={L})")
        self.T = T
        KP = K + K // 8
        lp_, bv = self.lp, block_v
        own = 4 + 16 + 2 * T * KP + 64 + 32 + 2 * T * L + 2 * T * bv
        flush = lp_ * KS_PITCH + lp_ * lp_ + 5 * 32
        nks_split = 1 + self.f5_pieces
        allocs = 18 * 16                      # alignment slack, 16 B per allocation
        # the mma dots' B operands pre-split into tf32 pieces (bsplit): per vector (n-tiles of 8,
        # zero past 2T) and column pair (hi, hi, lo, lo) -- one 16-byte load per n-tile and
        # k-step; the pitch (2 KP + 4 words) spreads a quarter-warp's loads over all banks for
        # the fp32 read layout (2-way conflicts for the narrower layouts and the flush's columns)
        self.bsplit = bool(bsplit)
        self.bp_pitch = 2 * KP + 4
        self.bp_words = 8 * ((2 * T + 7) // 8) * self.bp_pitch if self.bsplit else 0
        # (its bytes come on top of the budgets: they do not decide ks_split)
        split_limit = (KSPLIT_SMEM_LIMIT if ksplit_big(read_fmt) else SMEM_LIMIT) \
            + 4 * self.bp_words
        plain_limit = SMEM_LIMIT + 4 * self.bp_words
        own += self.bp_words
        fits_split = 4 * (own + flush + (nks_split - 1) * lp_ * KS_PITCH) + allocs <= split_limit
        self.ks_split = bool(self.ks_split and fits_split)
        extra = (nks_split - 1) * lp_ * KS_PITCH if self.ks_split else 0
        self.smem_bytes = 4 * (own + flush + extra) + allocs
        if self.smem_bytes > (split_limit if self.ks_split else plain_limit):
            raise ValueError(f"verify shared memory {self.smem_bytes} B over budget "
                             f"(T={T}, L={L}, block_v={block_v})")
        # the fp32 pair's flush from the held tile stages u_j of the CTA's rows (flush_tile;
        # counted here, outside the budgets above: it did not decide ks_split)
        self.flush_tile_bytes = (4 * L * bv + 16 if read_is_fp32_hi(read_fmt, rec_fmt, split)
                                 else 0)
        self.smem_bytes += self.flush_tile_bytes
        if L * KD_PITCH > lp_ * KS_PITCH:
            raise ValueError("staged coefficient keys do not fit the flush key buffer")

    def __repr__(self):
        return (f"VerifyTile(T={self.T}, block_v={self.block_v}, threads={self.num_threads}, "
                f"bsplit={self.bsplit}, "
                f"key tiles={self.nkt}, ks_split={self.ks_split}, smem={self.smem_bytes})")


def verify_supported(read_fmt, rec_fmt, K, V, L, T) -> bool:
    return (K == V2_K and 1 <= L <= V2_MAX_L and V % 16 == 0 and V >= 16
            and (V == 128 or "nvfp4" not in (read_fmt, rec_fmt)) and 1 <= T <= min(L, MAX_T))


class GDNVerifyKernel(GDNReplayDecodeV2):
    """Compile-time parameters (``__init__``), device code (``kernel``); the host launch
    (``__call__``, one CTA per (row, value head, value block)) and the v2 device helpers and
    flush (fold + encoders) are inherited, the flush's output hook is overridden."""

    impl = "verify"
    # fp16 SR flush encodes element by element (as the decode's) unless REPLAYSSM_F16_SR_CHUNK=1:
    # the chunk check (lp.pack_f16_sr) took the nvfp4/fp16sr T=8 build's spills 604 -> 964 B

    def __init__(self, read_fmt: str, read_rounding: str, rec_fmt: str, rec_rounding: str,
                 split: bool, act_dtype, H: int, HV: int, K: int, V: int, L: int, ring: int,
                 T: int, g_dtype=None, beta_dtype=None, alog_dtype=None, a_dtype=None,
                 dt_bias_dtype=None, b_dtype=None, use_qk_l2norm: bool = True,
                 has_state_batch_indices: bool = True, block_v: Optional[int] = None,
                 min_blocks_per_mp: Optional[int] = None, pdl: Optional[int] = None,
                 preamble: Optional[int] = None, prof: bool = False,
                 tail: Optional[bool] = None, mma_dots: bool = True,
                 coef_first: bool = False, bsplit: bool = False, coef_vec: bool = True,
                 early_loads: bool = False, flush_tile: bool = False,
                 row_order: bool = False, order_cursors: bool = False,
                 philox_rounds: Optional[int] = None):
        self.T = int(T)
        # the decode's preamble 3 (EARLY_ENV): cursors, draft gates, q / k issued before the
        # read tile and used after it (data-dependent arrive, no fence)
        self.early_loads = bool(early_loads)
        # (read by _make_tile inside the base constructor)
        self.bsplit = bool(bsplit) and bool(mma_dots)
        self.coef_vec = bool(coef_vec)
        # (None: tail_default; the read format is known only after the base class parsed it)
        self._tail_req = tail
        self.mma_dots = bool(mma_dots)
        if ring < L + self.T:
            raise ValueError(f"ring={ring} must hold L + T = {L + self.T} entries")
        super().__init__(read_fmt, read_rounding, rec_fmt, rec_rounding, split, act_dtype, H, HV,
                         K, V, L, ring, g_dtype=g_dtype, beta_dtype=beta_dtype,
                         alog_dtype=alog_dtype, a_dtype=a_dtype, dt_bias_dtype=dt_bias_dtype,
                         b_dtype=b_dtype, use_qk_l2norm=use_qk_l2norm,
                         has_state_batch_indices=has_state_batch_indices, block_v=block_v,
                         min_blocks_per_mp=min_blocks_per_mp, tpw=1,
                         pdl=common.pdl_mode(pdl, verify=True),
                         preamble=preamble, prof=prof, row_order=row_order,
                         philox_rounds=philox_rounds)
        self.preamble = min(self.preamble, 1)       # the verify has levels 0 and 1 only
        # (the decode's v / ring-gate load switches do not apply to the verify kernel)
        self.v_late = self.ring_gates_async = self.flush_whole = False
        # (early loads: one draft per warp, taken as in level 1)
        self.early_loads = self.early_loads and self.preamble == 1 and self.T <= self.nwarps
        # the order's cursors stand in for the early cursor loads (ORDER_ENV)
        self.order_cursors = bool(order_cursors) and self.row_order and self.early_loads
        self.tail = (tail_default(self.read_fmt, self.T) if self._tail_req is None
                     else bool(self._tail_req))
        if (L * K + self.num_threads - 1) // self.num_threads > TAIL_MAX_KEYS:
            self.tail = False          # its key staging would hold too many values per thread
        # non-flush rows: key staging + coefficient dots before the read dots (COEF_FIRST_ENV);
        # the tail's early loads are what make that order free of new waits
        self.coef_first = bool(coef_first) and self.tail
        # fp32 shared pair: flush rows fold the read tile they hold (FLUSH_TILE_ENV)
        self.flush_tile = bool(flush_tile) and read_is_fp32_hi(self.read_fmt, self.rec_fmt,
                                                               self.split)
        if self.prof and (self.block_v != self.V or self.act_dtype.width != 16):
            raise ValueError("the verify profiling build writes its record over a whole head's "
                             "16-bit output row: block_v must be V and the activations 16-bit")

    def _draft_warp(self, t: int) -> int:
        """The warp that normalizes draft t's q / k: warps 1, 2, ... first (warp 0 waits for the
        cursors behind the arrive's fence); ``preamble`` 0: t mod NW, the session-6 order."""
        NW = self.nwarps
        return t % NW if self.preamble == 0 else (t + 1) % NW

    def _default_min_blocks(self):
        return verify_min_blocks(self.tile, self.read_fmt, self.rec_fmt)

    def _hook_mma(self) -> bool:
        """``bsplit`` flush rows take their output dots on the mma path too -- with a 128-register
        budget only: a forced bsplit at 80 (3 CTAs/SM) made the spilling flush slower, the mma
        hook more so (session14_gpu/call3 with it, call4 without: nvfp4/fp16sr flush only b256
        T = 8 1206.5 -> 1502.9 / 1181.8 -> 1324.1 µs; fp32 831.2 -> 767.5)."""
        assert self.tile.tpw == 1          # the mma path writes the rows of one tile per warp
        return self.bsplit and _budget_128(self.num_threads, self.min_blocks_per_mp)

    def _make_tile(self, block_v, num_threads):
        bv = self.V if block_v is None else int(block_v)
        return VerifyTile(self.read_fmt, self.rec_fmt, self.K, self.V, bv, self.L, self.split,
                          self.T, self.bsplit)

    # ---------------------------------------------------------------- device helpers
    @cute.jit
    def _draft_gates_to_smem(self, sTok: cute.Tensor, mG, mBeta, mALog, mA, mDtBias, mB,
                             row_b: Int32, hv: Int32, warp: Int32, lane: Int32, pre):
        """Lanes t < T of the last warp: draft t's g, beta, e^g into ``sTok`` (``pre``: their
        inputs from ``gate_input_loads``, else loaded here)."""
        if warp == Int32(self.nwarps - 1):
            if lane < Int32(self.T):
                if const_expr(pre is not None):
                    gt, bt = gdn_gates_from_loads(self.has_g, self.has_beta, self.has_dt_bias,
                                                  pre)
                else:
                    gt, bt = gdn_gates(self.has_g, self.has_beta, self.has_dt_bias, mG, mBeta,
                                       mALog, mA, mDtBias, mB, row_b, hv, tok=(row_b, lane, hv))
                sTok[TOK_G + lane] = gt
                sTok[TOK_BETA + lane] = bt
                sTok[TOK_ALPHA + lane] = cute.math.exp(gt)

    @cute.jit
    def _flush_out_partials(self, S: cute.Tensor, rP: cute.Tensor, sKn: cute.Tensor,
                            sQn: cute.Tensor, tr: cutlass.Constexpr, t4: Int32):
        """Flush hook (replaces the decode kernel's two dots): full row sums of the fresh fold
        with every draft vector, scaled by e^{G_{t-1}}, into sSum. With :meth:`_hook_mma` the
        3xTF32 mma dots of :meth:`_read_dots_mma` (one tile per warp: ``tr`` is 0); else CUDA-core
        FMAs, where the four lanes of a quad hold bit-identical sums after the butterfly (IEEE
        addition commutes), so all of them store."""
        sVec, sSum, sTok, lrow, sBp, g4, warp = self._vctx
        T, BV = self.T, self.block_v
        if const_expr(self._hook_mma()):
            # the same tf32 mma dots as a non-flush row's read copy, on the fresh fold (fp32)
            self._read_dots_mma(None, sVec, sSum, sTok, [Float32(1.0), Float32(1.0)], t4, g4,
                                warp, sBp, S)
        else:
            KP = self.K + self.K // 8
            for vi in cutlass.range(2 * T, unroll=1):       # run-time loop: small code
                p0 = Float32(0.0)
                p1 = Float32(0.0)
                for k4 in cutlass.range_constexpr(8):
                    vv = cute.make_rmem_tensor((4,), Float32)
                    a4 = vi * Int32(KP // 4) + _kq_addr(_fidx(t4, 4 * k4)) // Int32(4)
                    cute.autovec_copy(cute.local_tile(sVec, (4,), (a4,)), vv)
                    for e in cutlass.range_constexpr(4):
                        p0 = p0 + S[0, 4 * k4 + e] * vv[e]
                        p1 = p1 + S[1, 4 * k4 + e] * vv[e]
                eg = sTok[Int32(TOK_EG) + vi % Int32(T)]
                p0 = p0 + cute.arch.shuffle_sync_bfly(p0, offset=1)
                p0 = p0 + cute.arch.shuffle_sync_bfly(p0, offset=2)
                p1 = p1 + cute.arch.shuffle_sync_bfly(p1, offset=1)
                p1 = p1 + cute.arch.shuffle_sync_bfly(p1, offset=2)
                sSum[vi * BV + lrow + 16 * tr] = eg * p0
                sSum[vi * BV + lrow + 16 * tr + 8] = eg * p1

    @cute.jit
    def _read_dots_mma(self, dv: Optional[cute.Tensor], sVec: cute.Tensor, sSum: cute.Tensor,
                       sTok: cute.Tensor, rsc, t4: Int32, g4: Int32, warp: Int32,
                       sBp: Optional[cute.Tensor] = None, S: Optional[cute.Tensor] = None):
        """Read dots on the tensor cores (``mma_dots``): the warp's 16 rows times the 2T vectors,
        mma.sync m16n8k8 tf32 (vectors as the 8 columns of an n-tile). The lane's values are the
        A fragment as they are: k-step s takes its elements 2s (logical k = t) and 2s + 1
        (k = t + 4), two adjacent columns, so B is one load of the same two columns of vector g.
        A = the decoded read copy ``dv`` [element, row] (non-flush rows) or, with ``S`` [row,
        element], a flush row's fresh fold (columns :func:`_fidx`). Read copies exact in tf32
        (nvfp4 without its global scale, fp8, bf16, fp16) take A once and B split in two (2 mma);
        fp32 3xTF32. B comes split from ``sBp`` (``bsplit``: one 16-byte load) or is split here.
        The D fragment holds whole row sums (rows g, g + 8; vectors 2t, 2t + 1)."""
        K, T, BV = self.K, self.T, self.block_v
        NV = 2 * T
        KP = K + K // 8
        tl = self.tile
        CER = 128 // tl.rbits                  # elements per 16-byte chunk
        UE = min(CER, 16)
        NUN = CER // UE
        NJ = (NV + 7) // 8                     # n-tiles of 8 vectors
        fold = S is not None
        exact = (not fold) and self.read_fmt in ("nvfp4", "fp8", "bf16", "fp16")   # <= 11 bits
        presplit = sBp is not None
        z = Float32(0.0)
        acc = [[z, z, z, z] for _ in range(NJ)]
        if const_expr(presplit):
            # (the pieces of vectors past 2T are zeros: no clamp, no select)
            vbase = [(Int32(8 * j) + g4) * Int32(tl.bp_pitch) for j in range(NJ)]
        else:
            vok = [Int32(8 * j) + g4 < Int32(NV) for j in range(NJ)]
            vbase = [cutlass.min(Int32(8 * j) + g4, Int32(NV - 1)) * Int32(KP)
                     for j in range(NJ)]
        for s in cutlass.range_constexpr(K // 8):
            d0 = 2 * s
            if const_expr(fold):
                col = _fidx(t4, d0)
                av = [S[0, d0], S[1, d0], S[0, d0 + 1], S[1, d0 + 1]]
            else:
                ii = d0 // (NUN * UE)
                u = (d0 % (NUN * UE)) // UE
                col = (Int32(ii * 4) + t4) * Int32(CER) + Int32(UE * u + d0 % UE)
                av = [dv[d0, 0], dv[d0, 1], dv[d0 + 1, 0], dv[d0 + 1, 1]]
            if const_expr(exact):
                # (values exact in tf32: their fp32 bits are the tf32 operand)
                ab = ([lp.f32_bits(x) for x in av] if const_expr(presplit)
                      else [lp.tf32_bits(x) for x in av])
            else:
                sp = ([lp.split_tf32_fast(x) for x in av] if const_expr(presplit)
                      else [lp.split_tf32(x) for x in av])
                ah = [p_[0] for p_ in sp]
                al = [p_[1] for p_ in sp]
            for j in cutlass.range_constexpr(NJ):
                if const_expr(presplit):
                    bq = cute.make_rmem_tensor((4,), Uint32)
                    cute.autovec_copy(cute.local_tile(sBp, (4,), ((vbase[j] + Int32(2)
                                                                   * _kq_addr(col)) // Int32(4),)),
                                      bq)
                    b0h, b1h, b0l, b1l = bq[0], bq[1], bq[2], bq[3]
                else:
                    bb = cute.make_rmem_tensor((2,), Float32)
                    cute.autovec_copy(cute.local_tile(sVec, (2,), ((vbase[j] + _kq_addr(col))
                                                                  // Int32(2),)), bb)
                    b0h, b0l = lp.split_tf32(Float32(_sel(vok[j], bb[0], z)))
                    b1h, b1l = lp.split_tf32(Float32(_sel(vok[j], bb[1], z)))
                if const_expr(exact):
                    acc[j] = _mma("tf32", ab, [b0l, b1l], acc[j])
                    acc[j] = _mma("tf32", ab, [b0h, b1h], acc[j])
                else:
                    acc[j] = _mma3_tf32(ah, al, [b0h, b1h], [b0l, b1l], acc[j])
        for j in cutlass.range_constexpr(NJ):
            for hc in cutlass.range_constexpr(2):
                vi = Int32(8 * j + hc) + Int32(2) * t4
                if vi < Int32(NV):
                    eg = sTok[Int32(TOK_EG) + vi % Int32(T)]
                    for rr in cutlass.range_constexpr(2):
                        sSum[vi * BV + warp * 16 + g4 + 8 * rr] = eg * (acc[j][2 * rr + hc]
                                                                        * rsc[rr])

    @cute.jit
    def _presplit_vectors(self, sVec: cute.Tensor, sBp: cute.Tensor, tidx: Int32):
        """``bsplit``: the 2T vectors' tf32 pieces into ``sBp`` (zeros past 2T, up to whole
        n-tiles): word v * pitch + 2 kq(c) + {0, 1} the hi of columns c, c + 1 (c even),
        + {2, 3} their lo -- exactly :func:`lowprec.split_tf32` of each value."""
        K, NT = self.K, self.num_threads
        NV = 2 * self.T
        KP = K + K // 8
        NVP = 8 * ((NV + 7) // 8)
        P2 = self.tile.bp_pitch
        for it in cutlass.range_constexpr((NVP * K + NT - 1) // NT):
            e = tidx + it * NT
            if e < Int32(NVP * K):
                v = e // K
                c = e % K
                x = Float32(0.0)
                if v < Int32(NV):
                    x = sVec[v * KP + _kq_addr(c)]
                h, lo = lp.split_tf32(x)
                w = v * Int32(P2) + Int32(2) * _kq_addr(c - c % Int32(2)) + c % Int32(2)
                sBp[w] = h
                sBp[w + Int32(2)] = lo

    @cute.jit
    def _stage_committed_keys(self, sKc: cute.Tensor, sKic: cute.Tensor, mKb: cute.Tensor,
                              mKinvb: cute.Tensor, slot: Int32, hk: Int32, origin: Int32,
                              m0: Int32, tidx: Int32):
        """Tail variant: cp.async of the m0 committed keys (16-byte chunks; the cache's key
        buffer is 16-byte aligned) and their kinv into shared memory, one group, committed;
        waited for before the barrier that precedes the key staging."""
        K, L, NT, RING = self.K, self.L, self.num_threads, self.ring
        EW = self.act_dtype.width
        CE = 128 // EW                                  # elements per 16-byte chunk
        NC = L * (K // CE)
        a16 = cute.make_copy_atom(cpasync.CopyG2SOp(), self.act_dtype, num_bits_per_copy=128)
        a4 = cute.make_copy_atom(cpasync.CopyG2SOp(), Float32, num_bits_per_copy=32)
        for it in cutlass.range_constexpr((NC + NT - 1) // NT):
            c = tidx + it * NT
            p = c // (K // CE)
            if (c < Int32(NC)) & (p < m0):
                ph = _ring(origin, p, RING)
                cc = c % (K // CE)
                cute.copy(a16, cute.local_tile(mKb[slot, hk, ph, None], (CE,), (cc,)),
                          cute.local_tile(sKc[p, None], (CE,), (cc,)))
        if tidx < m0:
            cute.copy(a4, cute.local_tile(mKinvb[slot, hk, None], (1,),
                                          (_ring(origin, tidx, RING),)),
                      cute.local_tile(sKic, (1,), (tidx,)))
        cute.arch.cp_async_commit_group()

    @cute.jit
    def _finish_loads(self, mUb: cute.Tensor, mV: cute.Tensor, mK: cute.Tensor, slot: Int32,
                      hv: Int32, hk: Int32, row_b: Int32, origin: Int32, m0: Int32, v0: Int32,
                      vblk: Int32, tidx: Int32):
        """Tail: the finish's global inputs into registers -- row-owner threads the committed u
        of their row (0 from m0 on) and the drafts' v; the drafts' raw keys for the append."""
        K, L, T, NT, BV, RING = self.K, self.L, self.T, self.num_threads, self.block_v, self.ring
        NKD = T * (K // 8)                           # 8-element chunks of draft keys
        NKI = (NKD + NT - 1) // NT
        rUr = cute.make_rmem_tensor((L,), Float32)
        rUr.fill(0.0)
        rVr = cute.make_rmem_tensor((T,), self.act_dtype)
        rKd = cute.make_rmem_tensor((NKI, 8), self.act_dtype)
        if tidx < Int32(BV):
            for pu in cutlass.range_constexpr(L):
                if Int32(pu) < m0:
                    rUr[pu] = mUb[slot, hv, _ring(origin, Int32(pu), RING), v0 + tidx]
            for tv in cutlass.range_constexpr(T):
                rVr[tv] = mV[row_b, tv, hv, v0 + tidx]
        if vblk == 0:
            if hv % self.group == 0:
                for ik in cutlass.range_constexpr(NKI):
                    ck = tidx + ik * NT
                    if ck < Int32(NKD):
                        cute.autovec_copy(cute.local_tile(mK[row_b, ck // (K // 8), hk, None],
                                                          (8,), (ck % (K // 8),)),
                                          rKd[ik, None])
        return rUr, rVr, rKd

    @cute.jit
    def _prefetch_finish_lines(self, mUb: cute.Tensor, mV: cute.Tensor, slot: Int32, hv: Int32,
                               row_b: Int32, origin: Int32, m0: Int32, v0: Int32, tidx: Int32):
        """coef_first: L2 prefetch of the lines :meth:`_finish_loads` reads later (ring u of the
        m0 committed positions, the drafts' v), one line per thread, right after the cursors."""
        BV, T, RING = self.block_v, self.T, self.ring
        LU = (BV * 4 + 127) // 128                   # 128-byte lines of one ring-u row block
        LV = (BV * self.act_dtype.width // 8 + 127) // 128 + 1   # v rows: any 2-byte offset
        if tidx < m0 * Int32(LU):
            p = tidx // Int32(LU)
            c = tidx % Int32(LU)
            common.prefetch_l2(mUb[slot, hv, _ring(origin, p, RING), None].iterator
                               + v0 + c * Int32(32))
        iv = tidx - Int32(self.L * LU)
        if (iv >= Int32(0)) & (iv < Int32(T * LV)):
            t = iv // Int32(LV)
            c = iv % Int32(LV)
            off = c * Int32(BV - 1) // Int32(LV - 1)      # first .. last element: every line
            common.prefetch_l2(mV[row_b, t, hv, None].iterator + v0 + off)

    @cute.jit
    def _ring_terms(self, sCo: cute.Tensor, base, rUr: cute.Tensor, m0: Int32) -> Float32:
        """sum_{p < m0} sCo[base + p] u_p of the row-owner thread (u_p = 0 from m0 on);
        coefficients read 4 at a time (broadcast: every thread of the warp reads the same)."""
        L = self.L
        N4 = L // 4 if L % 4 == 0 else 0              # (16-byte aligned rows of sCo only)
        acc = [Float32(0.0), Float32(0.0)]
        for p4 in cutlass.range_constexpr(N4):
            cf = cute.make_rmem_tensor((4,), Float32)
            cute.autovec_copy(cute.local_tile(sCo, (4,), (base // 4 + p4,)), cf)
            for e in cutlass.range_constexpr(4):
                p = 4 * p4 + e
                acc[e % 2] = acc[e % 2] + Float32(_sel(Int32(p) < m0, cf[e], Float32(0.0))) \
                    * rUr[p]
        for p in cutlass.range_constexpr(4 * N4, L):
            acc[0] = acc[0] + Float32(_sel(Int32(p) < m0, sCo[base + p], Float32(0.0))) * rUr[p]
        return acc[0] + acc[1]

    @cute.jit
    def _flush_tile(self, mKb: cute.Tensor, mKinvb: cute.Tensor, mGb: cute.Tensor,
                    mUb: cute.Tensor, wHi: cute.Tensor, rRd: cute.Tensor, sScal: cute.Tensor,
                    sKs: cute.Tensor, sUf: cute.Tensor, sW: cute.Tensor, sVec: cute.Tensor,
                    sSum: cute.Tensor, sTok: cute.Tensor, sBp: Optional[cute.Tensor],
                    slot: Int32, hv: Int32, hk: Int32, v0: Int32, rows, origin: Int32,
                    hf: Int32, tidx: Int32, lane: Int32, warp: Int32, g4: Int32, t4: Int32,
                    rFs=None):
        """Flush row of the fp32 shared pair (:func:`read_is_fp32_hi`) from the read tile it
        holds (the hi copy): S = e^{G_tot} S + sum_{j < hf} (u_j w_j) kn_j on the CUDA cores in
        the tile's (g, t) layout, the draft dots of S as a non-flush row's, S stored to hi."""
        K, L, BV = self.K, self.L, self.block_v
        _fstamp(rFs, 0)
        self._stage_tile_fold(mKb, mKinvb, mGb, mUb, sScal, sKs, sUf, sW, slot, hv, hk, v0,
                              origin, hf, tidx, lane, warp, True)
        _fstamp(rFs, 1)                                 # ring values, keys, weights staged
        # ---- fold: element 4 ii + e of row r is column 16 ii + 4 t + e (fp32 read layout)
        dv = self._decode_tile(rRd, None)
        eT = sScal[8]
        for jd in cutlass.range_constexpr(K // 4):
            for r in cutlass.range_constexpr(2):
                dv[jd, r] = eT * dv[jd, r]
        lr = warp * Int32(16) + g4
        for j in cutlass.range_constexpr(L):
            wj = sW[j]
            uw = [Float32(_sel(Int32(j) < hf, sUf[Int32(j * BV) + lr + Int32(8 * r)] * wj,
                               Float32(0.0))) for r in range(2)]
            for ii in cutlass.range_constexpr(K // 16):
                kv = cute.make_rmem_tensor((4,), Float32)
                cute.autovec_copy(cute.local_tile(sKs, (4,), (Int32(j * K // 4 + 4 * ii) + t4,)),
                                  kv)
                for e in cutlass.range_constexpr(4):
                    for r in cutlass.range_constexpr(2):
                        dv[4 * ii + e, r] = _fma_rn(uw[r], kv[e], dv[4 * ii + e, r])
        _fstamp(rFs, 5)                                 # fold
        self._tile_dots(dv, [Float32(1.0), Float32(1.0)], sVec, sSum, sTok, t4, g4, warp, sBp)
        _fstamp(rFs, 6)                                 # draft dots
        for r in cutlass.range_constexpr(2):
            for ii in cutlass.range_constexpr(K // 16):
                ws = cute.make_rmem_tensor((4,), Uint32)
                for e in cutlass.range_constexpr(4):
                    ws[e] = lp.f32_bits(dv[4 * ii + e, r])
                cute.autovec_copy(ws, cute.local_tile(wHi[slot, hv, rows[r], None], (4,),
                                                      (Int32(4 * ii) + t4,)))
        _fstamp(rFs, 8)                                 # stores issued

    @cute.jit
    def _nonflush_dots(self, rRd: cute.Tensor, rsc, rbs, sVec: cute.Tensor, sSum: cute.Tensor,
                       sTok: cute.Tensor, t4: Int32, g4: Int32, warp: Int32,
                       sBp: Optional[cute.Tensor] = None):
        """Non-flush rows: sSum[v, row] = e^{G_{m0+t-1}} (S0 vec_v) for the 2T vectors, S0 = the
        lane's read-copy words ``rRd`` (fp8 row scale ``rsc``, nvfp4 block scales ``rbs``)."""
        # S0 = the read copy, one pass for 2T vectors
        # (the committed ring terms are added once the coefficients exist)
        self._tile_dots(self._decode_tile(rRd, rbs), rsc, sVec, sSum, sTok, t4, g4, warp, sBp)

    @cute.jit
    def _decode_tile(self, rRd: cute.Tensor, rbs) -> cute.Tensor:
        """The lane's 32 columns of both rows of the read tile ``rRd`` as fp32 values, decoded
        once (nvfp4: block scales ``rbs`` applied): [K / 4 elements, 2 rows]; element
        (ii * NUN + u) * UE + e is column (4 ii + t) * CER + UE u + e."""
        K, RFMT = self.K, self.read_fmt
        R2 = 2
        tl = self.tile
        RW = 4 * (K * tl.rbits // 512)
        CER = 128 // tl.rbits                  # elements per 16-byte chunk
        UE = min(CER, 16)                      # elements per unit (one nvfp4 block)
        NUN = CER // UE
        WU = UE * tl.rbits // 32               # words per unit
        dv = cute.make_rmem_tensor((K // 4, R2), Float32)
        for ii in cutlass.range_constexpr(RW // 4):
            for u in cutlass.range_constexpr(NUN):
                for r in cutlass.range_constexpr(R2):
                    vs = _read_chunk_values(RFMT, [rRd[4 * ii + WU * u + w, r]
                                                   for w in range(WU)])
                    for e in cutlass.range_constexpr(UE):
                        x = vs[e]
                        if const_expr(RFMT == "nvfp4"):
                            x = x * rbs[2 * r + u]
                        dv[(ii * NUN + u) * UE + e, r] = x
        return dv

    @cute.jit
    def _tile_dots(self, dv: cute.Tensor, rsc, sVec: cute.Tensor, sSum: cute.Tensor,
                   sTok: cute.Tensor, t4: Int32, g4: Int32, warp: Int32,
                   sBp: Optional[cute.Tensor] = None):
        """sSum[v, row] = e^{G_{m0+t-1}} (S vec_v) for the 2T vectors, S = the decoded tile
        ``dv`` (:meth:`_decode_tile`) times the row scales ``rsc``: a run-time loop over the
        vectors (small code, no accumulator array) or the mma dots."""
        K, T, BV = self.K, self.T, self.block_v
        R2 = 2
        NV = 2 * T
        KP = K + K // 8
        tl = self.tile
        RW = 4 * (K * tl.rbits // 512)
        CER = 128 // tl.rbits
        UE = min(CER, 16)
        NUN = CER // UE
        if const_expr(self.mma_dots):
            self._read_dots_mma(dv, sVec, sSum, sTok, rsc, t4, g4, warp, sBp)
        else:
            for vi in cutlass.range(NV, unroll=1):
                a = [Float32(0.0), Float32(0.0)]
                for ii in cutlass.range_constexpr(RW // 4):
                    for u in cutlass.range_constexpr(NUN):
                        col0 = (Int32(ii * 4) + t4) * Int32(CER) + Int32(UE * u)
                        for j4 in cutlass.range_constexpr(UE // 4):
                            vv = cute.make_rmem_tensor((4,), Float32)
                            a4 = vi * Int32(KP // 4) + _kq_addr(col0 + Int32(4 * j4)) \
                                // Int32(4)
                            cute.autovec_copy(cute.local_tile(sVec, (4,), (a4,)), vv)
                            for e in cutlass.range_constexpr(4):
                                jd = (ii * NUN + u) * UE + 4 * j4 + e
                                for r in cutlass.range_constexpr(R2):
                                    a[r] = a[r] + dv[jd, r] * vv[e]
                eg = sTok[Int32(TOK_EG) + vi % Int32(T)]
                for r in cutlass.range_constexpr(R2):
                    x = a[r] * rsc[r]
                    x = x + cute.arch.shuffle_sync_bfly(x, offset=1)
                    x = x + cute.arch.shuffle_sync_bfly(x, offset=2)
                    sSum[vi * BV + warp * 16 + g4 + 8 * r] = eg * x

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
        if const_expr(self.prof):
            pg0 = common.sreg64("globaltimer")
            pc0 = common.sreg64("clock64")              # 0: start
        K, BV, L, RING, T = self.K, self.block_v, self.L, self.ring, self.T
        NT, NW = self.num_threads, self.nwarps
        tl = self.tile
        R2 = 2                                   # rows per lane (one 16-row tile per warp)
        NU = tl.nu
        RFMT = self.read_fmt
        KP = K + K // 8
        NV = 2 * T                               # vectors: kn_0..kn_{T-1}, qn_0..qn_{T-1}

        tidx, row_b, hv, vblk, lane, warp, g4, t4, hk, v0, row0, rows = self._lane_coords()
        gpos = row_b
        slot_o = Int32(0)
        if const_expr(self.row_order):
            gpos, row_b, slot_o, hv, vblk, hk, v0, row0, rows = self._ordered_coords(
                mOrder, warp, g4)

        smem = cutlass.memory.SmemAllocator()
        sCur = smem.allocate_tensor(Int32, cute.make_layout(4), byte_alignment=16)
        sScal = smem.allocate_tensor(Float32, cute.make_layout(16), byte_alignment=16)
        sVec = smem.allocate_tensor(Float32, cute.make_layout(NV * KP), byte_alignment=16)
        sTok = smem.allocate_tensor(Float32, cute.make_layout(64), byte_alignment=16)
        sGp = smem.allocate_tensor(Float32, cute.make_layout(32), byte_alignment=16)
        sCo = smem.allocate_tensor(Float32, cute.make_layout(NV * L), byte_alignment=16)
        sSum = smem.allocate_tensor(Float32, cute.make_layout(NV * BV), byte_alignment=16)
        sBp = None
        if const_expr(self.bsplit):
            sBp = smem.allocate_tensor(Uint32, cute.make_layout(tl.bp_words), byte_alignment=16)
        # v2 flush workspace (the staged keys double as the coefficient keys afterwards)
        sKs, sKh, sKl, sKm, sA, sGv, sEG, sW, sBeta, sAm = self._alloc_flush_smem(smem)
        sKd = cute.make_tensor(sKs.iterator, cute.make_layout(L * KD_PITCH))
        sUf = None
        if const_expr(self.flush_tile):
            sUf = smem.allocate_tensor(Float32, cute.make_layout(L * BV), byte_alignment=16)
        if const_expr(self.tail):
            # committed keys (raw) and their kinv, copied in by cp.async right after the cursors
            # of a non-flush row, into the flush workspace (unused there until the key staging,
            # which reads them into registers before overwriting it): no extra shared memory,
            # which at 3 CTAs / SM would shrink the L1 that holds the flush's spills
            sKc = cute.make_tensor(cute.recast_tensor(sKs, self.act_dtype).iterator,
                                   cute.make_layout((L, K), stride=(K, 1)))
            sKic = sA
        # what the flush hook needs (trace-time context)
        self._vctx = (sVec, sSum, sTok, warp * 16 + g4, sBp, g4, warp)

        wHi, wLo, wRd, mRdS, mRdG = self._copy_word_views(mHi, mHiS, mHiG, mLo, mLoS, mLoG)

        slot, valid = self._row_slot(mIdx, row_b, slot_o, mWpos.shape[0], pad_slot_id)
        if valid:
            old = Int32(0)
            cpre = None
            gpre = None
            qkpre = None
            if const_expr(self.early_loads):
                # the small loads first, used after the tile's issue: the cursors (thread 0),
                # the draft gates (lanes t < T of the last warp), this warp's draft q / k
                if const_expr(self.order_cursors):
                    cpre = self._order_cursors(mOrder, gpos, tidx)
                else:
                    cpre = common.load_cursors(mWpos, mOrig, mFcnt, slot, tidx)
                gpre = gate_input_loads(self.has_g, self.has_beta, self.has_dt_bias, mG, mBeta,
                                        mALog, mA, mDtBias, mB, row_b, hv,
                                        (warp == Int32(NW - 1)) & (lane < Int32(T)),
                                        tok=(row_b, lane, hv))
                tw = (warp + Int32(NW - 1)) % Int32(NW)         # the draft this warp takes
                qkpre = self._qk_loads(mQ, mK, (row_b, tw, hk), lane, tw < Int32(T))
            else:
                # ---- cursors (thread 0, broadcast via smem); arrive right away: every CTA of
                # the row has read them before the last one arrives and moves them at its end
                old = common.read_cursors_and_arrive(sCur, mWpos, mOrig, mFcnt, mArr, slot,
                                                     tidx)
                self._draft_gates_to_smem(sTok, mG, mBeta, mALog, mA, mDtBias, mB, row_b, hv,
                                          warp, lane, None)
            # ---- read tile and scales (independent of the cursors; unused on flush rows)
            RW = 4 * (K * tl.rbits // 512)            # words per row per lane (16 B chunks)
            rRd = self._load_read_rows(wRd, slot, hv, rows, t4)
            rsc = [Float32(1.0)] * R2
            rbs = [Float32(1.0)] * (2 * R2)
            if const_expr(RFMT == "fp8"):
                rsc = [mRdS[slot, hv, rows[r]] for r in range(R2)]
            if const_expr(RFMT == "nvfp4"):
                rsg = mRdG[slot, hv] * Float32(16384.0)
                bsc = rsg
                if const_expr(self.mma_dots):
                    # e2m1 x e4m3 stays exact in tf32; the global scale goes after the dot
                    bsc = Float32(16384.0)
                    rsc = [mRdG[slot, hv]] * R2
                rbs = [lp.e4m3_byte_to_f32(Uint32(mRdS[slot, hv, rows[i // 2], 2 * t4 + (i % 2)]))
                       * bsc for i in range(2 * R2)]
            if const_expr(self.early_loads):
                old = common.read_cursors_and_arrive(sCur, mWpos, mOrig, mFcnt, mArr, slot, tidx,
                                                     dep_arrive=True, pre=cpre)
                self._draft_gates_to_smem(sTok, mG, mBeta, mALog, mA, mDtBias, mB, row_b, hv,
                                          warp, lane, gpre)
            # ---- q / k of every draft (warp (t + 1) % NW): kn_t, qn_t (padded) in smem, kq, kinv
            for t in cutlass.range_constexpr(T):
                if warp == Int32(self._draft_warp(t)):
                    kinv_w, kq_w, _, _ = self._normalize_qk_warp(
                        mQ, mK, (row_b, t, hk), lane, scale, sVec, t * KP, sVec, (T + t) * KP,
                        False, pre=qkpre)
                    if lane == 0:
                        sTok[TOK_KQ + t] = kq_w
                        sTok[TOK_KINV + t] = kinv_w
            cute.arch.barrier()
            if const_expr(self.prof):
                pcs = [pc0, common.sreg64("clock64")]   # 1: cursors, q / k, gates
                rFs = cute.make_rmem_tensor((12,), Int64)   # flush sub-phases, generic votes
                rFs.fill(0)
            h = sCur[0]
            origin = sCur[1]
            gen = sCur[2]
            flush = h + Int32(T) > Int32(L)
            m0 = Int32(_sel(flush, Int32(0), h))                 # committed entries kept
            origin2 = Int32(_sel(flush, _ring(origin, h, RING), origin))
            # ---- decays: sequential prefix G_p over positions (buffered g, then the drafts'),
            # e^{G_{m0+t-1}} per draft (warp 0)
            if warp == 0:
                gp = Float32(0.0)
                if lane < m0:
                    gp = mGb[slot, hv, _ring(origin, lane, RING)]
                dl = lane - m0
                dlc = cutlass.max(cutlass.min(dl, Int32(T - 1)), Int32(0))
                gd = sTok[TOK_G + dlc]
                gp = Float32(_sel((dl >= Int32(0)) & (dl < Int32(T)), gd, gp))
                G = _seq_prefix(gp, lane, L)
                sGp[lane] = G
                qi = m0 + lane - Int32(1)
                Gq = cute.arch.shuffle_sync(G, cutlass.max(qi, Int32(0)))
                eg = Float32(_sel(qi >= Int32(0), cute.math.exp(Gq), Float32(1.0)))
                if lane < Int32(T):
                    sTok[TOK_EG + lane] = eg
            # ---- u of the committed entries this lane adds (positions t4 + 4 i < m0)
            if const_expr(self.tail):
                self._stage_committed_keys(sKc, sKic, mKb, mKinvb, slot, hk, origin, m0, tidx)
                if const_expr(self.coef_first):
                    self._prefetch_finish_lines(mUb, mV, slot, hv, row_b, origin, m0, v0, tidx)
            else:
                rU = self._load_ring_u(mUb, slot, hv, origin, m0, rows, t4)
            if const_expr(self.bsplit):
                self._presplit_vectors(sVec, sBp, tidx)
            cute.arch.barrier()
            if const_expr(self.prof):
                pcs.append(common.sreg64("clock64"))    # 2: decay prefix, ring u issued
            if flush:
                # ================= flush row: the decode kernel's fold + encode; its output
                # hook writes e^{G_{t-1}} (S_new kn_t), e^{G_{t-1}} (S_new qn_t) to sSum
                if const_expr(self.flush_tile):
                    self._flush_tile(mKb, mKinvb, mGb, mUb, wHi, rRd, sScal, sKs, sUf, sW,
                                     sVec, sSum, sTok, sBp, slot, hv, hk, v0, rows, origin,
                                     cutlass.min(h, Int32(L)), tidx, lane, warp, g4, t4,
                                     rFs if const_expr(self.prof) else None)
                else:
                    rPd = cute.make_rmem_tensor((2, R2), Float32)
                    self._flush(mHiS, mHiG, mLoS, mLoG, mKb, mKinvb, mGb, mUb, mVb, mBb, mSeed,
                                wHi, wLo, sScal, sVec, sVec, sKs, sKh, sKm, sKl, sA, sGv, sEG,
                                sW, sBeta, sAm, rPd,
                                slot, hv, hk, row0, origin, cutlass.min(h, Int32(L)), gen, tidx,
                                lane, warp, g4, t4, rFs if const_expr(self.prof) else None)
                if const_expr(self.coef_first):
                    # the tile is used after this branch on non-flush rows only: redefining it
                    # here ends its live range at the branch, so it holds no registers during
                    # the fold (else ptxas keeps all of it live across the flush and spills)
                    rRd.fill(0)
            else:
                if const_expr(not self.coef_first):
                    # ================= non-flush row: S0 = the read copy, one pass for 2T
                    # vectors (the committed ring terms are added once the coefficients exist)
                    self._nonflush_dots(rRd, rsc, rbs, sVec, sSum, sTok, t4, g4, warp, sBp)
            if const_expr(self.tail):
                if const_expr(not self.coef_first):
                    # the finish's global inputs, issued now (their round trip hides behind the
                    # key staging and the coefficient dots)
                    rUr, rVr, rKd = self._finish_loads(mUb, mV, mK, slot, hv, hk, row_b, origin,
                                                       m0, v0, vblk, tidx)
                cute.arch.cp_async_wait_group(0)             # the committed keys are in smem
            cute.arch.barrier()                              # sKs is reused below
            if const_expr(self.prof):
                pcs.append(common.sreg64("clock64"))    # 3: read dots / flush
            # ---- stage the keys of the coefficient dots: kn_p (p < m0: ring, then drafts)
            if const_expr(self.tail):
                # the committed keys sit in the buffer sKd overwrites: all read first
                NIT = (L * K + NT - 1) // NT
                xs = cute.make_rmem_tensor((NIT,), Float32)
                for it in cutlass.range_constexpr(NIT):
                    es = tidx + it * NT
                    ps = es // K
                    xv = Float32(0.0)
                    if es < Int32(L * K):
                        if ps < m0:
                            xv = sKc[ps, es % K].to(Float32) * sKic[ps]
                        else:
                            xv = sVec[cutlass.min(ps - m0, Int32(T - 1)) * KP + _kq_addr(es % K)]
                    xs[it] = xv
                cute.arch.barrier()
                for it in cutlass.range_constexpr(NIT):
                    es = tidx + it * NT
                    if es < Int32(L * K):
                        sKd[(es // K) * KD_PITCH + es % K] = xs[it]
            else:
                for it in cutlass.range((L * K + NT - 1) // NT, unroll=1):
                    e_ = tidx + it * NT
                    if e_ < Int32(L * K):
                        p = e_ // K
                        col = e_ % K
                        x = Float32(0.0)
                        if p < m0:
                            ph = _ring(origin, p, RING)
                            x = mKb[slot, hk, ph, col].to(Float32) * mKinvb[slot, hk, ph]
                        else:
                            d = cutlass.min(p - m0, Int32(T - 1))
                            x = sVec[d * KP + _kq_addr(col)]
                        sKd[p * KD_PITCH + col] = x
            cute.arch.barrier()
            if const_expr(self.prof):
                pcs.append(common.sreg64("clock64"))    # 4: coefficient keys staged
            # ---- coefficients sCo[v, p] = e^{G_{m0+t-1} - G_p} (kn_p . vec_v), p < m0 + t
            for it in cutlass.range((NV * L + NT - 1) // NT, unroll=1):
                item = tidx + it * NT
                if item < Int32(NV * L):
                    vi = item // L
                    p = item % L
                    t = vi % T
                    val = Float32(0.0)
                    if p < m0 + t:
                        a0 = Float32(0.0)
                        a1 = Float32(0.0)
                        vb = vi * KP
                        kb = p * KD_PITCH
                        for cb in cutlass.range(K // 8, unroll=1):
                            if const_expr(not self.coef_vec):
                                for c in cutlass.range_constexpr(0, 8, 2):
                                    col = cb * 8 + c
                                    a0 = a0 + sKd[kb + col] * sVec[vb + _kq_addr(col)]
                                    a1 = a1 + sKd[kb + col + 1] * sVec[vb + _kq_addr(col + 1)]
                            else:
                                for c in cutlass.range_constexpr(0, 8, 4):
                                    # 16-byte loads of both operands; a0 / a1 take the even /
                                    # odd columns in the same order as with scalar loads
                                    col = cb * 8 + c
                                    kk = cute.make_rmem_tensor((4,), Float32)
                                    vv = cute.make_rmem_tensor((4,), Float32)
                                    cute.autovec_copy(cute.local_tile(sKd, (4,),
                                                                      ((kb + col) // 4,)), kk)
                                    cute.autovec_copy(
                                        cute.local_tile(sVec, (4,),
                                                        ((vb + _kq_addr(col)) // 4,)), vv)
                                    a0 = a0 + kk[0] * vv[0]
                                    a1 = a1 + kk[1] * vv[1]
                                    a0 = a0 + kk[2] * vv[2]
                                    a1 = a1 + kk[3] * vv[3]
                        w = cute.math.exp(sGp[m0 + t - Int32(1)] - sGp[p])
                        val = w * (a0 + a1)
                    sCo[item] = val
            if const_expr(self.coef_first):
                if not flush:
                    # the read tile, loaded at the start, has had the key staging and the
                    # coefficient dots to arrive
                    self._nonflush_dots(rRd, rsc, rbs, sVec, sSum, sTok, t4, g4, warp, sBp)
                # (after the read dots: issued earlier they would share registers with the tile;
                # the ring u and v lines were prefetched into L2 after the cursors)
                rUr, rVr, rKd = self._finish_loads(mUb, mV, mK, slot, hv, hk, row_b, origin, m0,
                                                   v0, vblk, tidx)
            cute.arch.barrier()
            if const_expr(self.prof):
                pcs.append(common.sreg64("clock64"))    # 5: coefficient dots
            # ---- committed ring terms: sSum[v, row] += sum_{p<m0} sCo[v, p] u_p (lane t4 sums
            # positions t4 (mod 4); one lane of the quad updates). Tail variant: the row-owner
            # thread adds them in the finish instead (no pass, no barrier)
            if const_expr(not self.tail):
                if m0 > Int32(0):
                    for vi in cutlass.range(NV, unroll=1):
                        for r in cutlass.range_constexpr(R2):
                            x = Float32(0.0)
                            for i in cutlass.range_constexpr(NU):
                                p = t4 + 4 * i
                                pc = cutlass.min(p, Int32(L - 1))
                                cf = Float32(_sel(p < m0, sCo[vi * L + pc], Float32(0.0)))
                                x = x + cf * rU[i, r]
                            x = x + cute.arch.shuffle_sync_bfly(x, offset=1)
                            x = x + cute.arch.shuffle_sync_bfly(x, offset=2)
                            if t4 == Int32(0):
                                ia = vi * BV + warp * 16 + g4 + 8 * r
                                sSum[ia] = sSum[ia] + x
                cute.arch.barrier()
            if const_expr(self.prof):
                pcs.append(common.sreg64("clock64"))    # 6: committed ring terms
            # ================= per value row: T x T forward substitution, outputs, appends =====
            if tidx < Int32(BV):
                vg = v0 + tidx
                us = []
                for t in cutlass.range_constexpr(T):
                    sk = sSum[t * BV + tidx]
                    sq = sSum[(T + t) * BV + tidx]
                    if const_expr(self.tail):
                        sk = sk + self._ring_terms(sCo, t * L, rUr, m0)
                        sq = sq + self._ring_terms(sCo, (T + t) * L, rUr, m0)
                    for d in cutlass.range_constexpr(t):
                        sk = sk + sCo[t * L + m0 + d] * us[d]
                        sq = sq + sCo[(T + t) * L + m0 + d] * us[d]
                    vraw = rVr[t] if const_expr(self.tail) else mV[row_b, t, hv, vg]
                    u = sTok[TOK_BETA + t] * (vraw.to(Float32) - sTok[TOK_ALPHA + t] * sk)
                    o = sTok[TOK_ALPHA + t] * sq + sTok[TOK_KQ + t] * u
                    ph = _ring(origin2, m0 + Int32(t), RING)
                    mOut[row_b, t, hv, vg] = o.to(self.act_dtype)
                    mUb[slot, hv, ph, vg] = u
                    if const_expr(self.split):
                        mVb[slot, hv, ph, vg] = vraw
                    us.append(u)
            if vblk == 0:
                if hv % self.group == 0:
                    NKC = T * (K // 8)
                    for it in cutlass.range_constexpr((NKC + NT - 1) // NT):
                        c = tidx + it * NT
                        if c < Int32(NKC):
                            t = c // (K // 8)
                            cc = c % (K // 8)
                            ph = _ring(origin2, m0 + t, RING)
                            src = (rKd[it, None] if const_expr(self.tail) else
                                   cute.local_tile(mK[row_b, t, hk, None], (8,), (cc,)))
                            cute.autovec_copy(src, cute.local_tile(mKb[slot, hk, ph, None], (8,),
                                                                   (cc,)))
                    if tidx < Int32(T):
                        mKinvb[slot, hk, _ring(origin2, m0 + tidx, RING)] = sTok[TOK_KINV + tidx]
                if tidx < Int32(T):
                    ph = _ring(origin2, m0 + tidx, RING)
                    mGb[slot, hv, ph] = sTok[TOK_G + tidx]
                    if const_expr(self.split):
                        mBb[slot, hv, ph] = sTok[TOK_BETA + tidx]
            if const_expr(self.prof):
                pcs.append(common.sreg64("clock64"))    # 7: solve, outputs, appends issued
            # ================= the last-arriving CTA of the row moves the cursors ==============
            if tidx == 0:
                if old == Int32(self.HV * self.nsplit - 1):
                    cute.arch.fence_acq_rel_gpu()
                    mWpos[slot] = m0
                    mOrig[slot] = origin2
                    if flush:
                        mFcnt[slot] = gen + Int32(1)
                    mPend[slot] = Int32(T)
                    mArr[slot] = Int32(0)
            if const_expr(self.prof):
                pcs.append(common.sreg64("clock64"))    # 8: cursors published (end)
                pg1 = common.sreg64("globaltimer")
                cute.arch.barrier()                     # every output store of the CTA is out
                if tidx == 0:                           # the record over draft 0's output
                    _prof_record(mOut[row_b, 0, hv, None], v0, flush, [pg0, pg1] + pcs)
                    _prof_record(mOut[row_b, 0, hv, None], v0 + Int32(64), flush,
                                 [rFs[i] for i in range(12)])


# --------------------------------------------------------------------------------------
# compile (tensor-free, cached) and launch
# --------------------------------------------------------------------------------------

_CACHE = KernelCache("gdn_verify")


def _resolve(pair, act_dtype, H, HV, K, V, L, ring, T, g_dtype, beta_dtype, alog_dtype, a_dtype,
             dt_bias_dtype, b_dtype, use_qk_l2norm, has_idx, block_v, min_blocks_per_mp=None,
             row_order=False, philox_rounds=None):
    rf, rr, cf, cr, split = pair_key(pair)
    if not verify_supported(rf, cf, K, V, L, T):
        raise ValueError(f"GDN verify kernel: unsupported shape / draft count (K={K}, V={V}, "
                         f"L={L}, T={T}; needs K = 128, L <= 32, 1 <= T <= min(L, {MAX_T}))")
    bv = V if block_v is None else int(block_v)
    tile = VerifyTile(rf, cf, K, V, bv, L, split, T)
    if min_blocks_per_mp is None:
        min_blocks_per_mp = _env_int(VERIFY_MINB_ENV)
    if min_blocks_per_mp is None:
        min_blocks_per_mp = verify_min_blocks(tile, rf, cf)
    kw = _op_kwargs(rf, rr, cf, cr, split, act_dtype, H, HV, K, V, L, ring, g_dtype, beta_dtype,
                    alog_dtype, a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm, has_idx)
    kw.update(T=int(T), block_v=bv, min_blocks_per_mp=int(min_blocks_per_mp),
              pdl=common.pdl_default(verify=True), preamble=min(preamble_level(rf), 1),
              prof=_env_int(PROF_ENV) == 1, tail=_tail_setting(rf, T),
              mma_dots=_env_int(MMA_ENV) != 0, coef_first=_env_int(COEF_FIRST_ENV) == 1,
              bsplit=bsplit_setting(tile.num_threads, int(min_blocks_per_mp)),
              coef_vec=_env_int(COEF_VEC_ENV) != 0, early_loads=_env_int(EARLY_ENV) != 0,
              flush_tile=read_is_fp32_hi(rf, cf, split) and _env_int(FLUSH_TILE_ENV) != 0,
              row_order=bool(row_order),
              order_cursors=bool(row_order) and _env_int(ORDER_CURSORS_ENV) != 0,
              philox_rounds=common.philox_rounds_for(pair, philox_rounds))
    # switches read while tracing (not constructor arguments) are part of the key
    key = ("gdn_verify", common.arch_key(), encode_mode(),
           lp.f16_sr_chunk(GDNVerifyKernel.F16_SR_CHUNK),
           ksplit_big(rf)) + tuple(kw.values())
    return kw, key


def compile_gdn_verify(pair, act_dtype, H: int, HV: int, K: int, V: int, L: int, ring: int,
                       T: int, g_dtype=None, beta_dtype=None, alog_dtype=None, a_dtype=None,
                       dt_bias_dtype=None, b_dtype=None, use_qk_l2norm: bool = True,
                       has_state_batch_indices: bool = True, block_v: Optional[int] = None,
                       min_blocks_per_mp: Optional[int] = None,
                       row_order: bool = False,
                       philox_rounds: Optional[int] = None) -> CompiledKernel:
    """Compile (once per key, tensor-free, TVM-FFI) the GDN verify kernel for precision ``pair``,
    buffer length ``L``, ring capacity ``ring`` and ``T`` drafts per row.

    Call ``k.ffi(hi_words, hi_scale, hi_gscale, lo_words, lo_scale, lo_gscale, k_buf, kinv_buf,
    g_buf, u_buf, v_buf, beta_buf, write_pos, ring_origin, flush_count, pending, arrive, seed, q,
    k, v, g, beta, A_log, a, dt_bias, b, state_batch_indices, out, scale, pad_slot_id)``
    (``None`` for what the variant does not use; see :func:`gdn_verify_cute`); ``row_order``:
    an ``order`` argument after ``state_batch_indices``, as the decode's; ``philox_rounds``: the
    SR generator's rounds (the cache's; None = 10)."""
    if not common.HAS_TVM_FFI:
        raise RuntimeError("tensor-free compile needs apache-tvm-ffi")
    kw, key = _resolve(pair, act_dtype, H, HV, K, V, L, ring, T, g_dtype, beta_dtype, alog_dtype,
                       a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm, has_state_batch_indices,
                       block_v, min_blocks_per_mp, row_order, philox_rounds)
    return common.compile_tvm_ffi_cached(_CACHE, key, lambda: GDNVerifyKernel(**kw),
                                         lambda op: _fake_args(op, op.T), _kernel_meta)


def compile_only(pair="nvfp4/fp16sr", act_dtype="bfloat16", H=16, HV=32, K=128, V=128, L=16,
                 T=4, ring=None, g_dtype=None, beta_dtype=None, alog_dtype="float32",
                 a_dtype="bfloat16", dt_bias_dtype="float32", b_dtype="bfloat16",
                 use_qk_l2norm=True, has_state_batch_indices=True, block_v=None,
                 min_blocks_per_mp=None, keep_ptx: bool = False,
                 dump_dir: Optional[str] = None, row_order: bool = False,
                 philox_rounds: Optional[int] = None):
    """Compile one variant without launching (CPU-only with ``CUTE_DSL_ARCH=sm_90a``); defaults:
    Qwen3.5-4B layer, L = 16, T = 4, raw gates. Returns ``(kernel, ptx or None)``."""
    ring = L + T if ring is None else ring
    if not keep_ptx and dump_dir is None:
        return compile_gdn_verify(pair, act_dtype, H, HV, K, V, L, ring, T, g_dtype, beta_dtype,
                                  alog_dtype, a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm,
                                  has_state_batch_indices, block_v, min_blocks_per_mp,
                                  row_order, philox_rounds), None
    kw, key = _resolve(pair, act_dtype, H, HV, K, V, L, ring, T, g_dtype, beta_dtype, alog_dtype,
                       a_dtype, dt_bias_dtype, b_dtype, use_qk_l2norm, has_state_batch_indices,
                       block_v, min_blocks_per_mp, row_order, philox_rounds)
    op = GDNVerifyKernel(**kw)
    return _compile_keep_ptx(op, key, _fake_args(op, op.T), dump_dir)


def compile_report(pair: str, T: int, L: int = 16, gates: str = "raw",
                   act_dtype: str = "bfloat16", H: int = 2, HV: int = 4, V: int = 128,
                   block_v: Optional[int] = None) -> dict:
    """Compile one variant (CPU-only is fine) and return plain facts for tests: compile seconds,
    tile, PTX memory-instruction counts, tensor-core instruction counts. Picklable, so a test
    can spread compiles over worker processes."""
    gk = (dict(g_dtype="float32", beta_dtype="float32", alog_dtype=None, a_dtype=None,
               dt_bias_dtype=None, b_dtype=None) if gates == "given" else {})
    k, ptx = compile_only(pair, act_dtype, H, HV, V2_K, V, L, T=T, keep_ptx=True,
                          block_v=block_v, **gk)
    tile = k.meta["tile"]
    return dict(pair=pair, T=T, L=L, secs=k.compile_seconds, tile=repr(tile),
                block_v=tile.block_v, stats=common.ptx_stats(ptx),
                mma_tf32=ptx.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"),
                atomics=ptx.count("atom."), bar=ptx.count("bar.sync"))


# ---- torch-facing launcher -----------------------------------------------------------------

def supports_cache(cache) -> bool:
    """True when the verify kernel handles ``cache`` for every draft count it allows
    (K = 128, L <= 32, max(max_draft, 1) <= min(L, 8), nvfp4 pairs with V = 128)."""
    try:
        rf, _, cf, _, _ = pair_key(cache.pair)
        T = max(int(cache.max_draft), 1)
        return verify_supported(rf, cf, int(cache.K), int(cache.V), int(cache.buffer_len), T)
    except Exception:  # noqa: BLE001
        return False


_LAUNCH: dict = {}
_pair_key = functools.lru_cache(maxsize=64)(pair_key)   # PrecisionPair is hashable


def gdn_verify_cute(cache, q, k, v, g=None, beta=None, A_log=None, a=None, dt_bias=None, b=None,
                    scale=None, use_qk_l2norm: bool = True, state_batch_indices=None,
                    pad_slot_id: int = -1, out=None, block_v: Optional[int] = None,
                    min_blocks_per_mp: Optional[int] = None, _memo=None):
    """Speculative verify of T GDN drafts per row on a ``GDNReplayCache`` on CUDA (drafts appended
    and left pending; ``ops.commit`` keeps the accepted ones).

    Inputs validated by the torch layer: q, k [batch, T, H, K], v / out [batch, T, HV, V] in the
    cache's activation dtype (unit last stride); gates either ``g``, ``beta`` [batch, T, HV] or raw
    ``A_log`` [HV], ``a`` [batch, T, HV], ``dt_bias`` [HV], ``b`` [batch, T, HV]; cache tensors
    contiguous; ``state_batch_indices`` int32 [batch] (unique slots) or None. ``scale`` None ->
    K^-0.5. One kernel (two with the flush-first order: :func:`use_verify_row_order`) on the
    current torch stream, no allocation when ``out`` is given, no host sync (CUDA-graph
    capturable once compiled). Returns ``out``. ``_memo``: the memo of the
    cache's plan when the caller has just validated it.
    """
    batch, T, H, K = q.shape
    HV, Vd = v.shape[2], v.shape[3]
    if out is None:
        out = v.new_empty(v.shape)
    if batch == 0:
        return out
    if scale is None:
        scale = K ** -0.5
    # hot path: the memo of the cache's plan (valid while the cache holds the same tensors)
    # keeps, per call signature, the compiled function with the stored-copy views bound
    memo = cache_plan(cache).memo if _memo is None else _memo
    gate_dtypes = _gate_dtypes(g, beta, A_log, a, dt_bias, b)
    fast_key = (q.dtype, T, H, HV, K, Vd, *gate_dtypes, bool(use_qk_l2norm),
                state_batch_indices is None, batch, block_v, min_blocks_per_mp, _env())
    launch = common.memo_launch(memo, "gdn_verify_launch", fast_key, make_launch, cache, q, v,
                                gate_dtypes, use_qk_l2norm, state_batch_indices, block_v,
                                min_blocks_per_mp)
    launch(cache, q, k, v, g, beta, A_log, a, dt_bias, b, state_batch_indices, out, scale,
           pad_slot_id)
    return out


#: CTAs per SM hint (register cap) of the verify kernel, for tuning runs
VERIFY_MINB_ENV = "REPLAYSSM_GDN_VERIFY_MINB"
#: the finish's global inputs issued early (committed keys by cp.async after the cursors; ring u,
#: drafts' v and keys after the read dots) and the committed ring terms added by the row-owner
#: thread in the finish: 0 / 1 force it off / on, unset: :func:`tail_default`
TAIL_ENV = "REPLAYSSM_GDN_VERIFY_TAIL"


def tail_default(read_fmt: str, T: int) -> bool:
    """Whether the verify kernel issues its finish's inputs early (see TAIL_ENV). Measured on the
    H200 (Qwen3.5-4B, L = 16, session 8 call4): non-flush rows 1.30-1.84x faster at b1 / b32 /
    b256 for every read format; flush rows with an 80-register budget (nvfp4 / fp8 read copies,
    3 CTAs/SM) slower, their spilling flush longer (call5: nvfp4 64 -> 69 µs, fp8 40 -> 63 µs a
    CTA at T = 8). Whole staggered verify b256: fp32 T = 4 / 8 1.22x / 1.19x, fp8/fp32 1.16x /
    1.03x, nvfp4/fp16sr 1.05x / 0.88x -- so off for nvfp4 read copies past T = 4."""
    return not (read_fmt == "nvfp4" and T > 4)


def _tail_setting(read_fmt: str, T: int) -> bool:
    e = _env_int(TAIL_ENV)
    return tail_default(read_fmt, T) if e is None else e == 1
#: non-flush read dots on the tensor cores (tf32 mma.sync; default on, 0: the CUDA-core loop).
#: H200, Qwen3.5-4B, L = 16, session 8 call7 (same run, off / on): non-flush b256 T = 8 fp32
#: 432.2 -> 393.4 µs, nvfp4/fp16sr 497.6 -> 425.2, fp8/fp32 377.5 -> 319.0; staggered b256 fp32
#: T = 4 / 8 355.1 -> 341.6 / 580.4 -> 544.1, fp8/fp32 390.4 -> 373.8 / 753.2 -> 749.0,
#: nvfp4/fp16sr 429.7 -> 427.5 / 839.4 -> 845.3; b32 1.03-1.07x
MMA_ENV = "REPLAYSSM_GDN_VERIFY_MMA"
#: non-flush rows stage the coefficient keys and run the coefficient dots before the read dots
#: (they need only the cursors, keys and decays), so the read tile issued at the CTA's start has
#: that long to arrive; 1: on (needs the tail), unset / 0: the read dots first
COEF_FIRST_ENV = "REPLAYSSM_GDN_VERIFY_COEF_FIRST"
#: the coefficient dots with 16-byte shared loads (default; 0: scalar loads, the same sums)
COEF_VEC_ENV = "REPLAYSSM_GDN_VERIFY_COEF_VEC"
#: the decode's preamble 3 in the verify (default where T <= warps; 0: off): the cursors, the
#: draft gates and each warp's draft q / k issued before the read tile, used after it
#: (data-dependent arrive). Bit-identical outputs (session16_gpu/call1 A-B, 4 pairs); b256
#: T = 8: fp32 498.8 -> 480.9 µs, nvfp4/fp16sr 728.3 -> 704.2, fp8/fp32 620.6 -> 589.9; T = 4
#: 0.99-1.01x
EARLY_ENV = "REPLAYSSM_GDN_VERIFY_EARLY"
#: fp32 shared pair: a flush row folds the read tile it holds in its (g, t) layout on the CUDA
#: cores (u_j of the CTA's rows and kn_j staged in shared memory), stores it to hi from there and
#: takes its draft dots as a non-flush row does (no second hi read, no 3xTF32 fold). Default;
#: 0: the decode's (g, t) flush. session17_gpu/call2, b256 T = 4 / 8: 318.7 -> 290.9 / 479.6 ->
#: 431.4 µs (flush only 627.4 -> 502.6 / 729.1 -> 607.5); b512 617.7 -> 568.0 / 942.2 -> 854.1
FLUSH_TILE_ENV = "REPLAYSSM_GDN_VERIFY_FLUSH_TILE"
#: the flush-first row order ahead of the verify (cute_kernels.row_order with the call's T, as
#: the decode's REPLAYSSM_GDN_ORDER; the order's cursors with REPLAYSSM_GDN_ORDER_CURSORS where
#: the early loads apply). 1 / 0 force; unset: the decode's rule (read copies narrower than fp32,
#: from ORDER_MIN_BATCH rows). session17_gpu/call6, T = 8 b256: nvfp4/fp16sr 704.3 -> 657.6 µs,
#: fp8/fp32 592.6 -> 562.0, fp32 434.3 -> 453.1 (loses, as in the decode)
VERIFY_ORDER_ENV = "REPLAYSSM_GDN_VERIFY_ORDER"
#: value rows per CTA (block_v) for tuning runs; unset: choose_block_v_v2
BV_ENV = "REPLAYSSM_GDN_VERIFY_BV"
#: the mma dots' B operands (the 2T vectors) split into tf32 pieces once per CTA in shared memory,
#: A (fp32 values) split by integer rounding (``lowprec.split_tf32_fast``); the flush rows' output
#: dots on the same mma path. 1 / 0 force on / off; unset: :func:`bsplit_setting`
BSPLIT_ENV = "REPLAYSSM_GDN_VERIFY_BSPLIT"


def bsplit_setting(num_threads: int, min_blocks: int) -> bool:
    """Whether the verify kernel pre-splits its mma B operands (BSPLIT_ENV): by default where
    the register budget is 128 (<= 2 CTAs of 256 threads per SM). H200, Qwen3.5-4B, L = 16,
    session14_gpu/call3-4 (same run, off / on, µs): b256 T = 8 fp32 538.1 -> 500.3 (non-flush
    386.5 -> 360.2, flush only 810.1 -> 760.8), T = 4 336.2 -> 320.4, b512 T = 8 1060.3 ->
    985.6, b32 T = 8 86.8 -> 81.2; fp8/fp32 b256 T = 8 639.4 -> 631.2, T = 4 348.6 -> 336.6.
    Not at 80 registers (nvfp4 read copies from 4096 CTAs): its 18.7 KB at T = 8 shrink the L1
    that holds the spilling flush's locals (nvfp4/fp16sr flush only b256 T = 8 1181.8 ->
    1324.1)."""
    e = _env_int(BSPLIT_ENV)
    if e is not None:
        return e == 1
    return _budget_128(num_threads, min_blocks)


def _budget_128(num_threads: int, min_blocks: int) -> bool:
    """A register budget of at least 128 per thread (``min_blocks`` 0: ptxas' choice)."""
    return 65536 // (num_threads * max(int(min_blocks), 1)) >= 128


_ENV_NAMES = (VERIFY_MINB_ENV, common.PDL_ENV, PREAMBLE_ENV, PROF_ENV, TAIL_ENV, MMA_ENV,
              ENCODE_ENV, KSPLIT_ENV, COEF_FIRST_ENV, BV_ENV, BSPLIT_ENV, COEF_VEC_ENV,
              EARLY_ENV, FLUSH_TILE_ENV, VERIFY_ORDER_ENV, ORDER_CURSORS_ENV,
              lp.F16_SR_CHUNK_ENV)
_env = env_reader(_ENV_NAMES)


def make_launch(cache, q, v, gate_dtypes, use_qk_l2norm, state_batch_indices, block_v=None,
                min_blocks_per_mp=None):
    """``launch(cache, q, k, v, g, beta, A_log, a, dt_bias, b, state_batch_indices, out, scale,
    pad_slot_id)`` for one verify call signature (q [batch, T, H, K]: T included) with the views
    of ``cache``'s current stored copies bound: keep it in the memo of the cache's plan (see
    :func:`cute_kernels.mamba2_replay.make_launch`)."""
    batch, T, H, K = q.shape
    HV, Vd = v.shape[2], v.shape[3]
    rf, rr, cf, cr, split = _pair_key(cache.pair)
    L, ring = cache.buffer_len, cache.ring
    # (the order's choice is in the key: it depends on the cache's slot count, not in the rest)
    ro = use_verify_row_order(cache, batch)
    key = (rf, rr, cf, cr, split, q.dtype, H, HV, K, Vd, L, ring, T, *gate_dtypes,
           bool(use_qk_l2norm), state_batch_indices is None,
           batch, block_v, min_blocks_per_mp, _env(), ro, cache.philox_rounds)
    ent = _LAUNCH.get(key)
    if ent is None:
        bv = block_v
        if bv is None and _env_int(PROF_ENV) == 1:
            bv = Vd                # profiling build: one CTA (and one record) per (row, head)
        if bv is None:
            bv = _env_int(BV_ENV)
        if bv is None:
            bv = choose_block_v_v2(batch, HV, Vd, rf, cf)
        if min_blocks_per_mp is None and _env_int(VERIFY_MINB_ENV) is None:
            tile = VerifyTile(rf, cf, K, Vd, bv, L, split, T)
            min_blocks_per_mp = verify_min_blocks(tile, rf, cf, batch * HV * (Vd // bv))
        kern = compile_gdn_verify(
            cache.pair, q.dtype, H, HV, K, Vd, L, ring, T, *gate_dtypes, use_qk_l2norm,
            state_batch_indices is not None, bv, min_blocks_per_mp, ro,
            philox_rounds=cache.philox_rounds)
        order = order_entry(cache, T, state_batch_indices is not None, kern) if ro else None
        ent = _LAUNCH[key] = (kern.ffi, kern.meta["any_sr"], order)
    fn, any_sr, order = ent
    # the stored-copy views are the decode launcher's (memoised on the cache's plan)
    return _launcher(fn, any_sr, split, _cache_views(cache, rf, cf, split), order)


def use_verify_row_order(cache, batch: int) -> bool:
    """Whether a verify launch of ``batch`` rows runs the flush-first order kernel (its T's flush
    test) first: :data:`VERIFY_ORDER_ENV` = 0 / 1 forces, else read copies narrower than fp32
    from ``ORDER_MIN_BATCH`` rows; never past the order buffer (one entry per slot: only pad
    rows make a batch that large) or the grid's y limit: the decode's rule."""
    return use_row_order(cache, batch, VERIFY_ORDER_ENV)
