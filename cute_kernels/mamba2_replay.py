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

Launch: grid ``(H / heads_per_cta, batch)``, 128 threads (256 with :data:`THREADS_ENV` for launches
without the row order; with the row split, :data:`ROW_SPLIT_ENV` / :func:`row_split_for`, H·k
virtual heads of P / k rows -- tensor views made in ``__call__``, the kernel code unchanged but
the SR counter). A CTA owns one row and ``heads_per_cta``
consecutive heads of one group (:func:`choose_heads_per_cta`: 1 / 2 / 4 heads by batch size, so a
flushing row never serialises many head-folds in one CTA). Per CTA:

1. cursors (thread 0 reads them and arrives on the row's counter at once, the CTA gets them through
   smem: :func:`cute_kernels.common.read_cursors_and_arrive`, as the GDN kernels do; the atomic's
   round trip no longer ends every CTA), then at once the non-flush read set: nvfp4 read copies (``staged``): cp.async of every
   head's state rows, block-scale rows, global scale and x_j rows into smem, plus x / z / D loads
   (:meth:`Mamba2ReplayDecode._snf_issue`); other formats: the first head's read copy into
   registers. The preamble below then hides that latency.
2. preamble: C (fp32) to smem; ``cb_j = B_j·C`` of the buffered entries (non-flush rows; one warp
   per entry, lanes over N) and ``cb_cur``; per head (one warp per head): dt', the inclusive warp
   scan of the log decays (current token included on non-flush rows), the coefficients ``coef_j``
   (non-flush) or fold weights ``w_j = exp(Λ_{h−1} − Λ_j)·dt'_j`` (flush) to smem, the dt'/dA append.
3. non-flush rows, per head: a thread owns one 16-byte chunk of ``rows_per_thread`` rows (``TN``
   lanes per state row, see :class:`ReplayTile`) -- from smem (staged) or registers (the next head
   prefetched for nvfp4 / fp8 without staging); the dot with C: nvfp4 with 16-bit acts on the
   tensor cores (:meth:`Mamba2ReplayDecode._mma_rows`: A = e2m1 exact in fp16, B = C scaled
   exactly into fp16 with block c's k positions in column c, fp32 accumulation, the block scales
   on the block sums), otherwise dequantised in registers
   (:meth:`Mamba2ReplayDecode._read_row_dot`); plus the lane's share of ``Σ_j coef_j x_j[p]``,
   one butterfly over the TN lanes; lane 0 of a row adds the current-token and D terms, gates
   with z and stores ``out``.
4. flush rows (:meth:`Mamba2ReplayDecode._flush2`, "v2"), per head: thread t owns the 16-element
   chunks ``q = t + 128·it`` of the row-major P×N matrix (chunk = one nvfp4 block = four Philox
   quads; ``N/16`` lanes per row): fold from smem (``w_j·x_j[p]`` and ``B_j[n]`` staged as fp32) +
   the decayed hi chunk (cp.async'ed into a per-thread smem slot one chunk earlier: software
   pipeline over chunks and heads; the next head's x_j rows likewise), dot with C for the output,
   encode + store the targets that need no matrix amax. nvfp4 targets need the matrix amax before
   any block: the fp32 chunks go to smem (the last one stays in registers), and after the CTA amax a
   second loop encodes them from there -- one fold per element. nvfp4 RN encodes use the
   ``div.rn.f32`` fast-path sequence with the reciprocal hoisted per block and magic addition onto
   the e2m1 grid (:meth:`Mamba2ReplayDecode._encode_nvfp4_rn`); fp16 SR encodes a chunk in the
   fp16 normal range by adding the word's 13 low bits and truncating (``lowprec.pack_f16_sr``).
   The flush is issue-bound (ncu, session36_gpu/call1). ``flush_impl=1`` selects the
   original version (hi loaded after the fold, a second fold pass for the amax).
5. append, then the cursor update by the last CTA of the row.

Shared memory: one union buffer holds either the flush buffers (sB, sWX, the S_new tile, the
cp.async landing zones) or the non-flush staging, since a CTA is one or the other
(:meth:`Mamba2ReplayDecode._ulayout`); ~44 KB at P=64, N=128, L=16 with nvfp4 targets (5 CTAs/SM).

All accumulation is fp32. Every stored byte of hi/lo is computed with the primitives of
:mod:`cute_kernels.lowprec` (``div.rn.f32`` divisions or their fast-path sequence where it is exact,
Philox-4x32-10 with the round keys staged in smem once per CTA, software RN/SR rounding), bit for
bit as ``formats.encode``.

Registers / occupancy (sm_90a builds, ptxas 13.4 as bundled with nvidia-cutlass-dsl 4.8.1): the
flush path drives the count; :func:`default_min_blocks_per_mp` caps it (96 registers, 5 CTAs/SM for
nvfp4 / fp8 read copies; 128 / 4 for 16-bit and fp32 read copies). Loop-invariant hoisting is held
back on purpose (``_dep_i32`` / ``_opaque_i32``: a ``mov`` with a false dependency) where LLVM
would otherwise keep ~10 64-bit pointers or the 20 Philox round keys live across a loop.

Implementation switches (part of the compile key; env defaults for A/B runs and fallbacks):
``flush_impl`` (``REPLAYSSM_M2_FLUSH``, 2), ``staged`` (``REPLAYSSM_M2_STAGED``, 1),
``nonflush_mma`` (``REPLAYSSM_M2_MMA``, 1); ``REPLAYSSM_M2_HEADS_PER_CTA`` forces heads_per_cta.

Public entry points: :func:`compile_mamba2_replay` (tensor-free, cached), :func:`mamba2_replay_decode_cute`
(launcher on a :class:`replayssm_lp.Mamba2ReplayCache`), :func:`compile_only` (CPU compile tests),
:func:`choose_heads_per_cta` (launch heuristic), :class:`ReplayTile` (static tiling facts).
"""

from __future__ import annotations

import functools
import os

import operator
from typing import Optional, Tuple

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Float32, Int32, Int64, Uint8, Uint32, const_expr
from cutlass._mlir.dialects import llvm
from cutlass.cute.nvgpu import cpasync
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
#: the thread counts the decode kernel takes (``num_threads``; the verify stays at 128)
THREAD_COUNTS = (128, 256)
CHUNK = 16                        # flush mapping: elements per chunk (one nvfp4 block, 4 Philox quads)
_BITS = common.FMT_BITS
_ACT_DTYPES = ("float32", "float16", "bfloat16")
# fold staging (flush rows): sB [JB, N] + sWX [JB, P] fp32; JB entries per stage. More than one
# stage means the slow two-pass flush (flush_impl 1), so one stage may take up to 32 KiB: Nano-4B
# at L = 32 needs 32 x (128 + 80) x 4 = 26 KiB (session 21 call 6, its two-pass flush: nvfp4/fp16sr
# b512 622.2 µs vs 329.6 at L16); a T = 8 draft ring at L = 32 folds max(L, T) = 32 entries
# (fold_entries_max; sized R - 1 = 39, 30 KiB, it took two rounds at 24 KiB: the verify 1.9-2.7x
# slower at b256 / b512, session 22 call 1)
_FOLD_SMEM_BYTES = 32 * 1024
#: the decode's fold staging round in KiB (tuning / A-B runs; default 32): in the compile key
FOLD_SMEM_ENV = "REPLAYSSM_M2_FOLD_SMEM"
#: ``ring``: size the fold for R - 1 entries as before session 23 (A-B runs; default ``max``,
#: :func:`fold_entries_max`); in both compile keys
FOLD_ENTRIES_ENV = "REPLAYSSM_M2_FOLD_ENTRIES"
SMEM_PER_SM = 228 * 1024          # H100 / H200 with the max carveout (1 KiB of it per CTA reserved)
REGS_PER_SM = 64 * 1024           # 32-bit registers of an SM (sm_90)


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
    thread; ``HM`` (:func:`fold_entries_max`) the most entries a flush folds, ``JB`` of them
    staged in smem at once
    (``NJB = ceil(HM/JB)`` stages, sB + sWX <= ``fold_smem`` bytes).
    """

    def __init__(self, read_fmt: str, H: int, P: int, N: int, G: int, L: int, R: int,
                 heads_per_cta: int, num_threads: int = NUM_THREADS, tn: Optional[int] = None,
                 fold_smem: int = _FOLD_SMEM_BYTES):
        if H % G:
            raise ValueError(f"nheads={H} must be a multiple of ngroups={G}")
        hpg = H // G
        if heads_per_cta < 1 or hpg % heads_per_cta:
            raise ValueError(f"heads_per_cta={heads_per_cta} must divide nheads/ngroups={hpg}")
        if not (1 <= L <= 64):
            raise ValueError(f"buffer_len L={L} must be in [1, 64]")
        if R < L + 1:
            raise ValueError(f"ring R={R} must be >= L + 1 = {L + 1}")
        if num_threads not in THREAD_COUNTS:
            raise ValueError(f"num_threads={num_threads} must be one of {THREAD_COUNTS}")
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
        self.tn = _pow2_le(nc, 32) if tn is None else int(tn)   # tn: a forced lane count
        if nc % self.tn or self.tn > 32:
            raise ValueError(f"{self.tn} lanes per row do not divide the {nc} chunks of a row")
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
        # most entries a flush can fold (the kernel clamps h to it: memory safety)
        self.hm = fold_entries_max(L, R)
        jb = self.hm
        while jb > 1 and jb * (N + P) * 4 > fold_smem:
            jb = (jb + 1) // 2
        self.jb = jb
        self.njb = -(-self.hm // jb)
        self.nseg = -(-(self.hm + 1) // 32)     # scan segments (entries 0..hm)

    def __repr__(self) -> str:
        return (f"ReplayTile(hpc={self.hpc}, read: vec={self.vec} TN={self.tn} CN={self.cn} "
                f"RPP={self.rpp} RPT={self.rpt} MJ={self.mj}; flush: CB={self.cb} NIT={self.nit} "
                f"JB={self.jb} NJB={self.njb})")


def fold_entries_max(L: int, R: int) -> int:
    """The most committed entries a row of a ring of ``R`` entries can hold, hence fold:
    write_pos <= max(L, T) (a verify with T > L drafts flushes first and may then commit all T),
    T <= D, and the cache's ring is ``R = max(L, D) + max(D, 1)``, so max(L, D) = max(L, R // 2)
    (= R - 1 for rings of L + 1). A ring not of that form is refused (the bound would not hold).
    :data:`FOLD_ENTRIES_ENV` = ``ring`` gives R - 1 (A-B runs)."""
    mode = os.environ.get(FOLD_ENTRIES_ENV) or "max"
    if mode not in ("max", "ring"):
        raise ValueError(f"{FOLD_ENTRIES_ENV} must be 'max' or 'ring', got {mode!r}")
    # D <= L: R = L + max(D, 1) in [L + 1, 2L]; D > L: R = 2D
    if not (L + 1 <= R <= 2 * L or (R > 2 * L and R % 2 == 0)):
        raise ValueError(f"ring R={R} is not a cache ring for buffer_len L={L} (R = max(L, D) + "
                         f"max(D, 1) for max_draft D)")
    return R - 1 if mode == "ring" else max(L, R // 2)


def fold_smem_bytes(env: str) -> int:
    """Bytes of one fold staging round: the tuning switch ``env`` (KiB; the decode's
    :data:`FOLD_SMEM_ENV`, the verify's own), else :data:`_FOLD_SMEM_BYTES`."""
    v = os.environ.get(env)
    return int(v) * 1024 if v else _FOLD_SMEM_BYTES


def _flush_impl_default() -> int:
    """``REPLAYSSM_M2_FLUSH`` (1 or 2; default 2): the flush implementation (tuning / fallback)."""
    return int(os.environ.get("REPLAYSSM_M2_FLUSH", "2"))


def _nonflush_mma_default() -> bool:
    """``REPLAYSSM_M2_MMA`` (0 / 1; default 1): nvfp4 read copies with 16-bit acts dot on the
    tensor cores (mma.sync) in non-flush rows; 0 = the CUDA-core path (fallback / A-B runs)."""
    return os.environ.get("REPLAYSSM_M2_MMA", "1") != "0"


def _env_flag(name: str) -> Optional[bool]:
    """A 0 / 1 tuning switch from the environment; None when unset."""
    v = os.environ.get(name, "")
    return None if v not in ("0", "1") else v == "1"


def _mma_fold_default() -> Optional[bool]:
    """``REPLAYSSM_M2_MMA_FOLD`` (0 / 1; unset: the kernel's default): the flush's fold on the
    tensor cores (:meth:`Mamba2ReplayDecode._mma_fold`, 16-bit activations) or CUDA-core FMAs."""
    return _env_flag("REPLAYSSM_M2_MMA_FOLD")


FOLD_UNROLL_ENV = "REPLAYSSM_M2_FOLD_UNROLL"


def _fold_unroll(default: int = 1) -> int:
    """``REPLAYSSM_M2_FOLD_UNROLL`` (1 / 2 / 4; unset: ``default``): unroll factor of the v2
    flush's CUDA-core fold loop over the buffered entries (each entry: one smem load of
    w_j x_j[r], one 16-value B_j row, 16 FMAs) -- and, since session 38, of the v1 flush's
    single-round fold as well. The split launch's flush build and the verify take 2 (the flush
    is issue-bound; session 20 call 1: the split flush 2.6-3.3 % faster with nvfp4/fp16sr, no
    change elsewhere), the shared decode kernel 1 (2 gained nothing there)."""
    v = os.environ.get(FOLD_UNROLL_ENV)
    return int(v) if v in ("1", "2", "4") else default


FOLD_PAIR_ENV = "REPLAYSSM_M2_FOLD_PAIR"


def _fold_pair_env() -> Optional[bool]:
    """``REPLAYSSM_M2_FOLD_PAIR`` (0 / 1; unset: the kernel's rule,
    :meth:`Mamba2ReplayDecode._fold_pair_default`): the v2
    flush folds two of a thread's chunks at once. They share the chunk-in-row, hence B_j: one
    16-value B_j load feeds 32 FMAs (the fold is shared-load-bound: 4 LDS.128 = 16 wavefronts
    per 16 FMAs, session 36's profile)."""
    return _env_flag(FOLD_PAIR_ENV)


PAIR_ROLL_ENV = "REPLAYSSM_M2_PAIR_ROLL"


def _pair_roll_env() -> Optional[bool]:
    """``REPLAYSSM_M2_PAIR_ROLL`` (0 / 1; unset: the kernel's rule,
    :meth:`Mamba2ReplayDecode._pair_roll_default`): a fold pair's two chunk encodes as one
    rolled two-trip loop instead of inline twice (with nvfp4 targets: their pass-1 targets, every
    chunk kept in sS -- one more chunk of smem per thread, no deferred chunk): the verify's
    fp8/fp16sr pair chunk loop 53.9 -> 33.2 KB (it stalls on instruction fetch inline, session 42
    call 2); the second chunk waits in smem (``sS``, 64 B per thread) across the first one's
    encode. Static (sm_90a, ``m2_md5.py --loops``): verify fp8/fp16sr flush half 12 / 16 B of
    spills, all outside the head loop (0 inline); decode ordered:fp8/fp16sr:4 48.6 -> 27.7 KB,
    32 -> 36 B, two spill ops inside the pair loop; split2:nvfp4/fp8sr 37.7 -> 23.5 KB, but its
    sS (+8 KB) takes the half from 5 to 4 CTAs/SM by smem, hence 96 -> 128 registers, and 0 ->
    76 / 88 B of spills (two ops in the pair loop); split2:nvfp4/fp16sr 24.7 -> 16.3 KB,
    verify:nvfp4/fp16sr:8:2 29.4 -> 21.4 KB, both without spills. The cost: 64 B of smem per
    thread (8 KB a CTA) in every rolled build but nvfp4 targets at an odd NIT (P = 80: their last
    chunk stays in registers as inline), so where smem sets the occupancy a CTA fewer per
    SM (flush halves, Super: fp16sr / fp8/fp16sr L32 6 -> 5, fp32 L32 5 -> 4, nvfp4/fp8sr
    L16 5 -> 4 -- nvfp4/fp16sr's register hint is 4 already --, nvfp4/fp8sr L32 4 -> 3; the
    shared kernels' non-flush rows alike, e.g. nvfp4/fp16sr L4 6 -> 5; the verify's
    nvfp4/fp16sr T8 hint 4 -> 3), and with it the split's non-flush cap and flush grid. (The second chunk in registers instead spills more: verify fp8/fp16sr 16 /
    24 B, ordered:fp8/fp16sr:4 68 / 76 B, mostly inside the loops.) Bit-identical to 0 by
    construction (the same operations per chunk; SR bits are counter-based)."""
    return _env_flag(PAIR_ROLL_ENV)


def _staged_default() -> bool:
    """``REPLAYSSM_M2_STAGED`` (0 / 1; default 1): non-flush rows with nvfp4 read copies stage
    every head's read set in smem with cp.async before the preamble; 0 = register loads."""
    return os.environ.get("REPLAYSSM_M2_STAGED", "1") != "0"


def _early_arrive_default() -> bool:
    """``REPLAYSSM_M2_EARLY_ARRIVE`` (0 / 1; default 1): thread 0 reads the cursors, broadcasts
    them through smem and arrives on the row's counter at the start of the CTA
    (:func:`cute_kernels.common.read_cursors_and_arrive`); 0 = every thread reads the cursors and
    the CTA arrives at its end (fence, atomic round trip, fence on every CTA's tail)."""
    return os.environ.get("REPLAYSSM_M2_EARLY_ARRIVE", "1") != "0"


def choose_heads_per_cta(batch: int, H: int, G: int, min_ctas: Optional[int] = None) -> int:
    """Launch heuristic for ``heads_per_cta`` (a divisor of ``H/G``, at most 4).

    A flush row's CTA folds and re-encodes its heads one after the other, so a CTA that holds a
    flushing row lasts ``heads_per_cta`` head-flushes (several µs each) while a non-flush CTA of
    the same launch streams its heads in a fraction of that: with whole groups per CTA (16 heads
    at H=128, G=8, the previous default for batch >= 32) the few flush CTAs of a staggered batch
    formed a tail of ~400 µs at batch 32 (vs 75 µs with one head per CTA). Per-CTA fixed costs
    (cursors, C, the cb_j dots, the decay scan: a chain of dependent loads and barriers) favour
    more heads per CTA, and so does the staged nvfp4 non-flush path (every head's read set in
    flight at once: bytes in flight per CTA grow with the head count at about the same CTA
    lifetime). H200, snapshot 724f1cf: nvfp4/fp16sr non-flush 42 µs at batch 32 (1 head per
    CTA; 34 with the v1 kernel at 6 CTAs/SM), 198 µs at batch 256 (2 heads), 261 µs at batch 512
    (4 heads; v1 306) -- per row, 4 heads per CTA streamed ~1.5x faster than 2. Rule (H/G = 16):
    1 head below batch 16, 2 below 64, 4 from there (a flush CTA then lasts 4 head-flushes, a
    few % of a launch of that size). ``min_ctas``: kept for API compatibility (ignored).
    ``REPLAYSSM_M2_HEADS_PER_CTA`` overrides (tuning runs)."""
    hpg = H // G
    forced = os.environ.get("REPLAYSSM_M2_HEADS_PER_CTA")  # tuning experiments only
    if forced:
        return int(forced)
    want = 1 if batch < 16 else (2 if batch < 64 else 4)
    best = 1
    for c in (1, 2, 4):
        if c <= want and hpg % c == 0:
            best = c
    return best


def _row_split_view(t: Optional[cute.Tensor], hmode: int, pmode: Optional[int] = None,
                    k: int = 1) -> Optional[cute.Tensor]:
    """The row-split view of ``t`` (None stays None): its head mode ``hmode`` (extent H) becomes
    (k, H) -- virtual head ``part + k * h`` -- with the part stepping over blocks of P / k rows of
    mode ``pmode`` (whose extent becomes P / k), or stride 0 without ``pmode`` (per-head
    values)."""
    if t is None:
        return None
    shape, stride = list(t.layout.shape), list(t.layout.stride)
    if pmode is None:
        step = 0
    else:
        shape[pmode] = shape[pmode] // k
        step = shape[pmode] * stride[pmode]
    shape[hmode] = (k, shape[hmode])
    stride[hmode] = (step, stride[hmode])
    return cute.make_tensor(t.iterator, cute.make_layout(tuple(shape), stride=tuple(stride)))


# --------------------------------------------------------------------------------------
# small device helpers (branch-free, plain Python over DSL scalars)
# --------------------------------------------------------------------------------------


def _asm(res_type, ptx: str, constraints: str, args):
    return llvm.inline_asm(res_type, args, ptx, constraints, has_side_effects=False,
                           is_align_stack=False)


#: 0 / 1 forces ``pf_early``: with PDL and no row order, every CTA issues L2 prefetches of its
#: row's cursors, ring entries, read copy and inputs *before* ``griddepcontrol.wait``
#: (:meth:`Mamba2ReplayDecode._prefetch_pre_wait`), so the first dependent loads after the wait
#: hit L2 while the previous grid still runs; unset: :func:`use_pf_early`
PF_EARLY_ENV = "REPLAYSSM_M2_PF_EARLY"
#: ... by default while a launch's read copy is at most this many bytes (batch x H·P·N at the
#: read format's width). H200, off / on in one run (bench/results/session25_gpu/call1, both
#: shapes, L8 / L16): batch 1 every pair 1.10-1.24x faster (Nemotron-3-Super fp32 L16 6.3 ->
#: 5.4 µs, fp8/fp32 5.2 -> 4.7); b4 nvfp4/fp16sr and bf16/fp32 (2-8 MiB) 1.03-1.10x, fp8
#: 0.97-1.02x; fp32 from b4 (16 MiB) 0.95-0.97x: there the prefetches queue behind the running
#: grid's own reads.
PF_EARLY_MAX_BYTES = 8 << 20
#: 128 / 256 (default 128): threads per CTA of a decode launch without the row order (small
#: batches: a head's P x N state over 8 warps, for the flush step above all -- at batch 1 a
#: flush is 128 CTAs of one head on 4 warps each, 10-15 µs; session25_gpu/call3). GPU-tested;
#: not adopted: 128 / 256 in one run (session27_gpu/call1) b1 0.94-1.05x, b2 0.70-1.00x,
#: Nemotron-3-Super b4 1.01-1.24x but Nano-4B b4 0.75-1.01x (the b1 flush phase 7.1 -> 6.3 µs
#: only, session27_gpu/call2); the row split (ROW_SPLIT_ENV) took Super's b4 gain.
THREADS_ENV = "REPLAYSSM_M2_THREADS"
#: 0 / 1 (default 1): the decode's row arrive without the fence before it -- its increment
#: computed from the cursors it follows (:func:`common._dep_arrive`, as the GDN decode does), so
#: thread 0 need not wait at a ``fence.acq_rel.gpu`` for all of its loads before the CTA's
#: first barrier. Launches without the row order only (below 32 rows; the order's entries carry
#: the cursors). H200, off / on in one run (bench/results/session25_gpu/call7, Nemotron-3-Super
#: L16): b1 fp32 5.4 -> 5.2 µs, fp8/fp32 4.7 -> 4.5, bf16/fp32 4.8 -> 4.6; b32 (ordered) 1.00x.
DEP_ARRIVE_ENV = "REPLAYSSM_M2_DEP_ARRIVE"
#: 0 / 1: the decode's publish check (``old == ctas_per_row - 1``) after the CTA's last barrier
#: (an opaque zero from smem added to the arrive's old value) and the dependent arrive as an
#: ``atom.inc`` (:func:`common._dep_arrive`, ``no_agg``). Without them ptxas warp-aggregates the
#: arrive and hoists the compare up to it (SHFL of the result, ISETP right after the ATOMG), so
#: warp 0 waits out the atomic's round trip before the first barrier, the whole CTA with it --
#: the GDN decode's step tail (gdn_replay.TAIL_ENV, bit 1) for the same hoist.
#: Unset: on for the read copies of LATE_CHECK_READ_FMTS. H200, 1 / 0 in one run
#: (bench/results/session34_gpu/call1/lc, Nemotron-3-Super + Nano-4B b1 / b2, L8 / L16):
#: nvfp4/fp16sr 0.93-0.97x (Super b1 L16 4.6 -> 4.3 us), fp32 0.96-0.98x (5.2 -> 5.0) but Nano
#: b2 L8 1.00x; fp8/fp32 0.99-1.02x, bf16/fp32 b1 1.00-1.02x, b2 0.97-0.99x: left off there.
LATE_CHECK_ENV = "REPLAYSSM_M2_LATE_CHECK"
LATE_CHECK_READ_FMTS = ("fp32", "nvfp4")
#: 0 / 1 forces; unset: on where the first 16-bit read set goes out before the preamble (the
#: early-wide builds of :func:`early_read_for`). 1 = a non-flush row's ring entries (dA, dt' per
#: head, B_j per group) loaded at their physical ring index right after the slot, beside the
#: cursors, and put in logical order (a warp shuffle; the cb dots over every physical entry) once
#: the origin is known: one dependent round trip fewer before the scan. Launches without the row
#: order, ring <= 32 entries. H200, 0 / default in one run (bench/results/session29_gpu/call2,
#: Nemotron-3-Super + Nano-4B L8 / L16): bf16/fp32, fp16/fp32, fp16sr, bf16sr b1 4.4-4.9 ->
#: 4.2-4.6 µs, b2 5.7-7.1 -> 5.6-6.8. Forced on elsewhere (call1, call3): fp32 b1 0.96-0.98x,
#: nvfp4/fp16sr b1 0.94-1.00x, fp8/fp32 0.96-1.07x, b3-b8 0.90-1.05x (not there). A and dt_bias
#: loaded then too (session 28's mode 2): 0.88-0.98x at b1, removed.
RING_PHYS_ENV = "REPLAYSSM_M2_RING_PHYS"


#: k (1 = off): the decode's row split -- each head's P state rows over k CTAs of P / k rows
#: (:func:`row_split_for`), for launches without the row order. Unset: the default rule
#: (:data:`ROW_SPLIT_ROWS`)
ROW_SPLIT_ENV = "REPLAYSSM_M2_ROW_SPLIT"
#: default row split: k = 2 (where P / 2 is a multiple of 16) for these rows (first, last) of a
#: launch without the row order or the small split, any read copy but NVFP4 at L <= 8, fp32 read
#: copies at L > 8. H200, Nemotron-3-Super (H128 P64), one CTA per head / k = 2 in one run
#: (bench/results/session27_gpu/call4, call3): L8 b4-b7 1.07-1.32x for fp32 / fp8 / bf16 / fp16
#: reads (fp32 b4 16.0 -> 12.8 µs, b6 21.7 -> 16.7), fp8/fp16sr 1.11-1.18x (b7 0.96x); L16 fp32
#: b4-b8 1.08-1.21x, the other reads 0.85-1.09x (not there); b3 0.79-0.97x, b2 0.86-0.94x, b1
#: 0.98-1.05x (not there). k = 4 at b1 0.79-0.90x, Nano-4B's k = 5 (P80) 0.63-0.95x at b1-b8
#: (more CTAs per head repeat the cursor / preamble chain and arrive on one row counter: at b1
#: the chain, not the rows, sets a CTA -- session27_gpu/call2's profile)
ROW_SPLIT_ROWS = (4, 7)
ROW_SPLIT_ROWS_FP32 = (4, 8)
#: 0 / 1 forces the non-flush rows' first read set before the preamble (``early``) in every
#: build; unset: :func:`early_read_for` (16-bit read copies at <= :data:`EARLY_WIDE_ROWS` rows)
EARLY_READ_ENV = "REPLAYSSM_M2_EARLY_READ"
#: rows (first .. this) of a launch with one CTA per head, no row order / split, whose 16-bit
#: read copy goes out before the preamble, built for 4 CTAs per SM (:data:`EARLY_WIDE_MINB`:
#: 95-96 registers without spills; the default 7 would cap it at 72). At <= 2 CTAs per SM the
#: cap costs nothing. H200 (session28_gpu/call4, Super / Nano-4B, L8 / L16): bf16/fp32,
#: fp16/fp32, fp16sr, bf16sr b1 1.00-1.04x, b2 0.99-1.07x; the hint alone 0.99-1.03x (call2).
#: fp32 read copies (110 registers) do not gain (b1 0.95-1.00x, b2 0.95-1.02x): their 4 MiB
#: per row take as long from any issue point and delay the preamble's loads (call3's profile).
EARLY_WIDE_ROWS = 2
EARLY_WIDE_MINB = 4
#: read copies whose one-head builds at those rows (one CTA per head, no row order / split) take
#: the hint EARLY_WIDE_MINB too (:func:`few_rows_hint_for`): their default hints (6 / 5) cap fp8
#: at 80 registers and nvfp4 at 96 (fp8 at L16 and nvfp4 at L8 / L16 spill 32-116 B); at 4 they
#: take 127-128 registers without spills. H200, default / REPLAYSSM_M2_MINBLOCKS=4 in one run
#: (session29_gpu/call4/mb, Super / Nano-4B, L8 / L16): fp8/fp32 b1 1.03-1.06x (L16 4.5 -> 4.3
#: µs), b2 1.04-1.08x (L16 6.0 -> 5.5); nvfp4/fp16sr 1.00-1.03x
FEW_ROWS_MINB_FMTS = ("fp8", "nvfp4")


def check_row_split(pair, P: int, k: int) -> None:
    """Raises ValueError unless the decode can split each head's ``P`` rows over ``k`` CTAs for
    ``pair``: ``k`` in :data:`ROW_SPLIT_COUNTS`, P / k rows a multiple of 16 (whole flush passes of
    128 threads at N = 128), and no NVFP4 copy (its global scale is the amax of the whole head,
    and its non-flush path stages whole heads)."""
    p = parse_pair(pair) if isinstance(pair, str) else pair
    if k not in ROW_SPLIT_COUNTS:
        raise ValueError(f"row_split must be one of {ROW_SPLIT_COUNTS}, got {k}")
    if P % k or (P // k) % 16:
        raise ValueError(f"row_split={k} needs headdim P={P} to split into rows that are a "
                         f"multiple of 16 (P / row_split)")
    if "nvfp4" in (p.rec_fmt, p.read_fmt):
        raise ValueError(f"row_split > 1 does not apply to {p.name}: an NVFP4 copy's global scale "
                         "needs the whole head's amax")


ROW_SPLIT_COUNTS = (1, 2, 4, 5)


def row_split_for(cache, batch: int, threads: int) -> int:
    """CTAs per head of a decode launch of ``batch`` rows without the row order or the small
    split (:data:`ROW_SPLIT_ENV` forces k where :func:`check_row_split` allows; else the rule of
    :data:`ROW_SPLIT_ROWS`; 1 at 256 threads)."""
    if _prof_default():
        return 1                         # (the profiling build keeps one CTA per head)
    v = os.environ.get(ROW_SPLIT_ENV)
    if not v:
        fp32 = cache.pair.read_fmt == "fp32"
        lo, hi = ROW_SPLIT_ROWS_FP32 if fp32 else ROW_SPLIT_ROWS
        if not (lo <= batch <= hi and (fp32 or cache.buffer_len <= 8)):
            return 1
        v = "2"
    if not v.isdigit() or int(v) not in ROW_SPLIT_COUNTS:
        raise ValueError(f"{ROW_SPLIT_ENV} must be one of {ROW_SPLIT_COUNTS}, got {v!r}")
    k = int(v)
    try:                                 # forced where it applies (this pair, P), else 1
        check_row_split(cache.pair, cache.headdim, k)
    except ValueError:
        return 1
    return k if threads == NUM_THREADS else 1


def early_read_for(cache, batch: int, heads_per_cta: int, row_split: int,
                   ordered: bool) -> Optional[bool]:
    """Whether a decode launch issues its first head's read set before the preamble
    (:data:`EARLY_READ_ENV` forces; None: the kernel's own rule, nvfp4 / fp8 sets of <= 16
    registers): 16-bit read copies at up to :data:`EARLY_WIDE_ROWS` rows, one CTA per head."""
    forced = _env_flag(EARLY_READ_ENV)
    if forced is not None:
        return forced
    if cache.pair.read_fmt in ("fp16", "bf16") and _few_rows_launch(batch, heads_per_cta,
                                                                    row_split, ordered):
        return True
    return None


def _few_rows_launch(batch: int, heads_per_cta: int, row_split: int, ordered: bool) -> bool:
    """A launch of up to :data:`EARLY_WIDE_ROWS` rows, one CTA per head, no row order / split
    (where :func:`early_read_for` and :func:`few_rows_hint_for` apply)."""
    return batch <= EARLY_WIDE_ROWS and heads_per_cta == 1 and row_split == 1 and not ordered


def few_rows_hint_for(cache, batch: int, heads_per_cta: int, row_split: int,
                      ordered: bool) -> bool:
    """Whether a decode launch builds its fp8 / nvfp4 read path for :data:`EARLY_WIDE_MINB` CTAs
    per SM (:data:`FEW_ROWS_MINB_FMTS`): up to :data:`EARLY_WIDE_ROWS` rows, one CTA per head,
    no row order or split (``REPLAYSSM_M2_MINBLOCKS`` still overrides every hint)."""
    return (cache.pair.read_fmt in FEW_ROWS_MINB_FMTS
            and _few_rows_launch(batch, heads_per_cta, row_split, ordered))


def launch_threads() -> int:
    """Threads per CTA of a decode launch without the row order (:data:`THREADS_ENV`)."""
    v = os.environ.get(THREADS_ENV) or str(NUM_THREADS)
    if not v.isdigit() or int(v) not in THREAD_COUNTS:
        raise ValueError(f"{THREADS_ENV} must be one of {THREAD_COUNTS}, got {v!r}")
    return int(v)


def use_pf_early(cache, batch: int) -> bool:
    """Whether a single launch of ``batch`` rows without the row order takes ``pf_early``
    (:data:`PF_EARLY_ENV` forces; else up to :data:`PF_EARLY_MAX_BYTES` of read copy)."""
    return common.pf_early_applies(PF_EARLY_ENV, batch,
                                   cache.nheads * cache.headdim * cache.dstate,
                                   cache.pair.read_fmt, PF_EARLY_MAX_BYTES)


def _prof_default() -> bool:
    """``REPLAYSSM_M2_PROF`` (0 / 1; default 0): profiling build -- thread 0 of every CTA stamps
    ``%clock64`` at the decode kernel's phase boundaries (and ``%globaltimer`` at its start and
    end, ``%smid``) and writes them over the first 22 int32 words of its first head's output row
    (``out[row, head0]``; outputs are garbage then). Off: no code emitted."""
    return os.environ.get("REPLAYSSM_M2_PROF", "0") == "1"


def _fma_rn(a, b, c) -> Float32:
    """a*b + c, one rounding (``fma.rn.f32``); explicit so both fold passes are bit-identical."""
    return Float32(_asm(T.f32(), "fma.rn.f32 $0, $1, $2, $3;", "=f,f,f,f",
                        [Float32(a).ir_value(), Float32(b).ir_value(), Float32(c).ir_value()]))


def fold_a_frag(sWX, ks: int, t, h, JB: int, p0, p1):
    """The m16n8k8 A fragment of the fold's k-step ``ks`` (lane ``t`` = lane % 4): ``sWX[j, p]``
    = (w_j x_j)[p] at rows p0, p1 and entries j0 = 8·ks + t, j0 + 4, zero from ``h`` on (reads
    clamped to JB − 1). Returns ``(a, (ok0, ok1, jc0, jc1))``: the guards serve the B fragment."""
    zero = Float32(0.0)
    j0 = Int32(8 * ks) + t
    j1 = j0 + 4
    ok0 = j0 < h
    ok1 = j1 < h
    jc0 = cutlass.min(j0, Int32(JB - 1))
    jc1 = cutlass.min(j1, Int32(JB - 1))
    a = [lp.sel_f32(ok0, sWX[jc0, p0], zero), lp.sel_f32(ok0, sWX[jc0, p1], zero),
         lp.sel_f32(ok1, sWX[jc1, p0], zero), lp.sel_f32(ok1, sWX[jc1, p1], zero)]
    return a, (ok0, ok1, jc0, jc1)


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


def _f16x2_mul(a, b) -> Uint32:
    """``mul.rn.f16x2`` (subnormals kept)."""
    return Uint32(_asm(T.i32(), "mul.rn.f16x2 $0, $1, $2;", "=r,r,r",
                       [Uint32(a).ir_value(), Uint32(b).ir_value()]))


def _prmt(a, sel: int) -> Uint32:
    """``prmt.b32 d, a, a, sel`` (byte permute of one word)."""
    return Uint32(_asm(T.i32(), f"prmt.b32 $0, $1, $1, {sel:#x};", "=r,r", [Uint32(a).ir_value()]))


def _mma_f16_16816(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """``mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32`` (PTX ISA fragment layout: lane =
    4·g + t; a0 = A[g][2t:2t+2], a1 = A[g+8][2t:2t+2], a2 = A[g][2t+8:2t+10], a3 = A[g+8][2t+8:2t+10];
    b0 = B[2t:2t+2][g], b1 = B[2t+8:2t+10][g]; c0/c1 = D[g][2t, 2t+1], c2/c3 = D[g+8][2t, 2t+1]).
    Volatile asm: a warp-collective op must not be sunk into a lane-divergent branch."""
    st = llvm.StructType.get_literal([T.f32()] * 4)
    res = llvm.inline_asm(
        st, [Uint32(v).ir_value() for v in (a0, a1, a2, a3, b0, b1)]
        + [Float32(v).ir_value() for v in (c0, c1, c2, c3)],
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {$0, $1, $2, $3}, {$4, $5, $6, $7}, "
        "{$8, $9}, {$10, $11, $12, $13};",
        "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f", has_side_effects=True, is_align_stack=False)
    return tuple(Float32(llvm.extractvalue(T.f32(), res, [i])) for i in range(4))


def _pow2_f32(e) -> Float32:
    """2^e as fp32 (Int32 e in the normal range: exponent bits only)."""
    return lp.bits_f32(Uint32(e + Int32(127)) << Uint32(23))


def _fp16_range_exponent(lane_absmax) -> Int32:
    """The exact power-of-two scaling of a 16-bit mma operand column into fp16's range:
    s = 14 − floor(log2 max|C|) (clamped to ±100; 0 for an all-zero column), max|C| the warp
    maximum of the lanes' partial maxima ``lane_absmax``."""
    a = cute.arch.warp_reduction(lane_absmax, lp.fmax_nq)
    e = Int32((lp.f32_bits(a) >> Uint32(23)) & Uint32(0xFF)) - Int32(127)
    s_exp = cutlass.min(cutlass.max(Int32(14) - e, Int32(-100)), Int32(100))
    return _sel_i32(a == Float32(0.0), Int32(0), s_exp)


def _mma_nvfp4_tile(raw, bsc, bfr, RPT: int, m: int, scale_a: bool = True, nq: int = 1):
    """The 8 k-steps (N = 128) of m-tile ``m`` of the nvfp4 tensor-core dot: the thread's state
    rows (2m, 2m+1) are rows g, g+8 of an m16n8k16 tile (lane = 4g + tq owns 16-byte chunk tq of
    each; a missing row 2m+1 is zeros). A = e2m1·2^-14 (fp16 bit trick), with ``scale_a`` times
    the block scale s_blk·2^7 (``mul.rn.f16x2``, exact); B = ``bfr`` (the k-permuted fragments
    of the caller's ``_mma_b_frags``). Returns two accumulator chains (``acc[4·c:4·c+4]``), each
    (D[g][2tq], D[g][2tq+1], D[g+8][2tq], D[g+8][2tq+1]): by k-step parity with ``scale_a``, else
    by word half (chain c = words 2c, 2c+1: block 2tq + c of the lane's chunk). ``nq`` > 1 (the
    verify at T > 8): ``bfr`` holds nq n8 tiles of B (16 words each, query tile q at 16q), the A
    fragments are decoded once for all, and chain q is tile q's accumulators."""
    i0 = 2 * m
    i1 = 2 * m + 1
    sc = []
    for i in (i0, i1):
        if i < RPT and scale_a:
            sv = lp._e4m3x2_to_f16x2(Uint32(bsc[i, 0]), False)        # (s_blk0, s_blk1)
            sv = _f16x2_mul(sv, Uint32(0x58005800))                  # * 128 (exact)
            sc.append((_prmt(sv, 0x1010), _prmt(sv, 0x3232)))
        else:
            sc.append(None)
    acc = [Float32(0.0)] * (4 * max(nq, 2))      # two chains of 4 (nq > 1: one per query tile)
    for w in range(4):
        fr = []
        for r, i in enumerate((i0, i1)):
            if i < RPT:
                d = _e2m1x8_to_f16x2(Uint32(raw[i, 0, w]))
                if scale_a:
                    bs = sc[r][0] if w < 2 else sc[r][1]
                    d = [_f16x2_mul(v, bs) for v in d]
                fr.append(d)
            else:
                fr.append([Uint32(0)] * 4)
        for hh in range(2):
            k = 2 * w + hh
            for q in range(nq):
                ch = 4 * q if nq > 1 else 4 * (hh if scale_a else w // 2)
                c = acc[ch: ch + 4]
                d0, d1, d2, d3 = _mma_f16_16816(fr[0][2 * hh], fr[1][2 * hh], fr[0][2 * hh + 1],
                                                fr[1][2 * hh + 1], bfr[16 * q + 2 * k],
                                                bfr[16 * q + 2 * k + 1], c[0], c[1], c[2], c[3])
                acc[ch: ch + 4] = [d0, d1, d2, d3]
    return acc


def _mma_nvfp4_blocks(raw, bsc, bfr, RPT: int, m: int):
    """The decode's nvfp4 tensor-core dot of m-tile ``m`` with the block scales applied to the
    accumulators instead of the A operand: B column c holds C' only at the k positions of block
    c (``bfr`` of :meth:`Mamba2ReplayDecode._mma_b_frags`), so D[row][c] is block c's partial
    dot. Lane (g, tq) owns blocks 2tq (k-steps of words 0-1: chain 0) and 2tq + 1 (words 2-3:
    chain 1), whose scales are its own ``bsc`` byte pair (:func:`_mma_nvfp4_tile` without
    ``scale_a``). Returns the lane's partials of rows (2m, 2m+1): s_blk0·D[g][2tq] +
    s_blk1·D[g][2tq+1] (the caller's row reduction over the 4 lanes sums the row's 8 blocks);
    a missing row 2m+1 is 0."""
    acc = _mma_nvfp4_tile(raw, bsc, bfr, RPT, m, scale_a=False)
    out = [Float32(0.0), Float32(0.0)]
    for r, i in enumerate((2 * m, 2 * m + 1)):
        if i < RPT:
            s0, s1 = lp.f16x2_to_f32(lp._e4m3x2_to_f16x2(Uint32(bsc[i, 0]), False))
            out[r] = s1 * acc[4 + 2 * r + 1] + s0 * acc[2 * r]
    return out


def _warp_inclusive_scan(v, lane):
    """Inclusive prefix sum of ``v`` over the 32 lanes of a warp (5 shuffle-up steps)."""
    for off in range(5):
        o = 1 << off
        t = cute.arch.shuffle_sync_up(v, offset=o)
        v = lp.sel_f32(lane >= o, v + t, v)
    return v


def _rows_plan(n: int, tn: int):
    """Static plan of :func:`_rows_reduce` for ``n`` row values over ``tn`` lanes: per butterfly
    level (offset o = tn/2 .. 1) the number of values before it (halving while > 1)."""
    plan = []
    o = tn // 2
    while o >= 1:
        plan.append((o, n))
        n = -(-n // 2) if n > 1 else 1
        o //= 2
    return plan


def _rows_pad_aliases(n: int, tn: int) -> bool:
    """Whether :func:`_rows_reduce` of ``n`` values over ``tn`` lanes leaves some lane with a
    padding entry whose plain index (the sum of the upper-half offsets of its lane bits) names a
    real row another lane holds: an odd split pads the upper half, and a later split of that
    padded list can move the padding to a low position (n = 5 over 8 lanes: lane bits 011 end
    with index 2 + 1 = 3, padding, while lane bits 100 hold row 3). Static; False for n a power of
    two (no padding at all) and for n = 3 (the padding only ever ends past the list)."""
    for lane in range(tn):
        row, cnt = 0, n
        for o, m in _rows_plan(n, tn):
            if m > 1:
                h = -(-m // 2)
                if lane & o:
                    row, cnt = row + h, max(cnt - h, 0)
                else:
                    cnt = min(cnt, h)
        if cnt == 0 and row < n:
            return True
    return False


def _rows_lane_row(n: int, tn: int, lir):
    """(row, writer) of this lane after :func:`_rows_reduce` of ``n`` values over ``tn`` lanes:
    the row whose sum it ends with (>= n on padding lanes), and whether it is the one lane of the
    lanes holding that row that should store it. Where padding can alias a real row
    (:func:`_rows_pad_aliases`) the number of real entries is tracked per lane (as
    mamba2_verify's ``_lanes_reduce`` does) and padding lanes get row ``n``; otherwise the row is
    the plain offset sum (the code is unchanged)."""
    row = Int32(0)
    wmask = 0
    track = _rows_pad_aliases(n, tn)
    cnt = Int32(n)
    for o, m in _rows_plan(n, tn):
        if m > 1:
            h = -(-m // 2)
            row = row + _sel_i32((lir & o) != 0, Int32(h), Int32(0))
            if track:
                cnt = _sel_i32((lir & o) != 0, cutlass.max(cnt - Int32(h), Int32(0)),
                               cutlass.min(cnt, Int32(h)))
        else:
            wmask |= o
    if track:
        row = _sel_i32(cnt > Int32(0), row, Int32(n))
    return row, (lir & wmask) == 0


def _rows_reduce(vals, tn: int, lir):
    """Sums ``vals[i]`` (one partial per row i, lane-distributed over the ``tn`` lanes of a row
    group) over the lanes, transposed: at each butterfly level a lane keeps one half of its
    values and trades the other half with its partner, so ``len(vals)`` rows cost ~len(vals)
    shuffles instead of len(vals)·log2(tn). Returns ``(sum, row)``: this lane's row index
    (lane-bit function, Int32; >= len(vals) for padding lanes, see :func:`_rows_lane_row`) and its
    full sum; the lanes that share a row hold the same sum (bit-identical: every pair adds in the
    same order)."""
    cur = list(vals)
    row = Int32(0)
    for o, n in _rows_plan(len(vals), tn):
        hi = (lir & o) != 0
        if n > 1:
            h = -(-n // 2)
            A = cur[:h]
            B = cur[h:] + [Float32(0.0)] * (h - (n - h))
            nxt = []
            for a, b in zip(A, B):
                send = lp.sel_f32(hi, a, b)
                keep = lp.sel_f32(hi, b, a)
                recv = cute.arch.shuffle_sync_bfly(send, offset=o)
                nxt.append(keep + recv)
            cur = nxt
            row = row + _sel_i32(hi, Int32(h), Int32(0))
        else:
            v = cur[0]
            cur = [v + cute.arch.shuffle_sync_bfly(v, offset=o)]
    if _rows_pad_aliases(len(vals), tn):
        row, _ = _rows_lane_row(len(vals), tn, lir)
    return cur[0], row


def _row_reduce(v, op, cb: int, rw: int):
    """Butterfly over the ``cb`` lanes of a flush row (lanes ``rw`` apart in the warp)."""
    off = (cb // 2) * rw
    while off >= rw:
        v = op(v, cute.arch.shuffle_sync_bfly(v, offset=off))
        off //= 2
    return v


def _silu_gate(y, z):
    return y * z / (Float32(1.0) + cute.math.exp(-z))


def _absmax16(acc, n: int = CHUNK) -> Float32:
    """``max_e nan_to_num(|acc[e]|)`` (NaN -> 0, inf -> FLT_MAX), bit-identical to a chain of
    ``fmax_nq(a, abs_nan0_inf_sat(x))`` from 0: maxNum ignores NaN operands, and saturating the max
    once equals saturating every element (min(max(a, b), F) = max(min(a, F), min(b, F)))."""
    a = Float32(0.0)
    for e in range(n):
        a = lp.fmax_nq(a, lp.bits_f32(lp.f32_bits(acc[e]) & Uint32(0x7FFFFFFF)))
    return lp.fmin_nq(a, Float32(lp.FLT_MAX))


def _rcp_nv(d) -> Float32:
    """The reciprocal of the ``div.rn.f32`` fast path as ptxas emits it (sm_90a SASS): ``r0 =
    MUFU.RCP(d)``, ``r1 = fma(r0, fma(-d, r0, 1), r0)``. With :func:`_div_nv` it reproduces the
    fast path's quotient bit for bit (Markstein correction), for operands the fast path accepts."""
    return Float32(_asm(T.f32(),
                        "{ .reg .f32 r0, e, nd; rcp.approx.ftz.f32 r0, $1; neg.f32 nd, $1; "
                        "fma.rn.f32 e, r0, nd, 0f3F800000; fma.rn.f32 $0, r0, e, r0; }",
                        "=f,f", [Float32(d).ir_value()]))


def _div_nv(x, r1, nd) -> Float32:
    """``x / d`` by the fast path of ``div.rn.f32``: ``q0 = x·r1``, ``rem = fma(q0, -d, x)``,
    ``q = fma(rem, r1, q0)`` (``nd = -d``). Correctly rounded (= ``div.rn.f32``) when d is normal,
    x/d and the remainder stay in the normal range (no over/underflow) -- the cases ptxas' FCHK lets
    through; see :meth:`Mamba2ReplayDecode._encode_nvfp4_rn` for where the kernel relies on it.
    The sign of a zero quotient is not reliable (take it from x)."""
    return Float32(_asm(T.f32(),
                        "{ .reg .f32 q0, rm; mul.rn.f32 q0, $1, $2; fma.rn.f32 rm, q0, $3, $1; "
                        "fma.rn.f32 $0, rm, $2, q0; }",
                        "=f,f,f,f", [Float32(x).ir_value(), Float32(r1).ir_value(),
                                     Float32(nd).ir_value()]))


#: A-B switch of the flush's nvfp4 RN fast path (read while tracing, in the keys): ``code`` =
#: the codes from q = x/d by :func:`_e2m1_rn_code` (sessions 5-35); unset = magic addition
#: (:func:`lowprec.e2m1_pack8_rn`)
E2M1_ENV = "REPLAYSSM_M2_E2M1"


def e2m1_magic() -> bool:
    return os.environ.get(E2M1_ENV, "") != "code"


def _e2m1_rn_code(q, x) -> Uint32:
    """4-bit code of ``round_e2m1(clamp(q, +-6))`` (RN, ties to even; NaN -> magnitude 0), sign from
    the fp32 sign bit of ``x`` -- equal to ``e2m1_code(round_to_grid(clamp(q), 'e2m1', RN))`` for
    every fp32 q with the sign of x (``formats.float_to_e2m1_codes``). |q| >= 1: RN to one
    mantissa bit on the bits (the code is then ``(bits >> 22) - 252``: 1.0 -> 2 ... 6.0 -> 7);
    |q| < 1 (the e2m1 subnormal 0.5 and 0): two compares (0.25 rounds to 0, 0.75 to 1.0)."""
    mag = lp.f32_bits(q) & Uint32(0x7FFFFFFF)
    a = lp.bits_f32(mag)
    mc = lp.sel_u32(mag < Uint32(0x40C00000), mag, Uint32(0x40C00000))   # clamp |q| to 6
    t = mc + Uint32(0x1FFFFF) + ((mc >> Uint32(22)) & Uint32(1))
    c_hi = (t >> Uint32(22)) - Uint32(252)
    c_lo = lp.sel_u32(a >= Float32(0.75), Uint32(2), lp.sel_u32(a > Float32(0.25), Uint32(1),
                                                                 Uint32(0)))
    c = lp.sel_u32(a >= Float32(1.0), c_hi, c_lo)          # NaN: both compares false -> 0
    return c | ((lp.f32_bits(x) >> Uint32(28)) & Uint32(8))


def _e2m1_grid_code(q) -> Uint32:
    """4-bit code of an on-grid e2m1 value q (as returned by ``round_to_grid(., 'e2m1')``), sign
    from q's sign bit, NaN -> 0 | sign: ``lowprec.e2m1_code`` in 6 integer ops instead of a
    7-compare chain (0.5 -> 1, 0 -> 0, 1.0 .. 6.0 -> (bits >> 22) - 252)."""
    b = lp.f32_bits(q)
    mag = b & Uint32(0x7FFFFFFF)
    ci = Int32(mag >> Uint32(22)) - Int32(252)
    c = cutlass.max(ci, Int32(lp.sel_u32(mag > Uint32(0), Uint32(1), Uint32(0))))
    c = lp.sel_u32(mag > Uint32(0x7F800000), Uint32(0), Uint32(c))
    return c | ((b >> Uint32(28)) & Uint32(8))


# --------------------------------------------------------------------------------------
# the kernel
# --------------------------------------------------------------------------------------


SPLIT_ENV = "REPLAYSSM_M2_SPLIT"
SPLIT_MINB1_ENV = "REPLAYSSM_M2_SPLIT_MINB1"
SPLIT_MINB2_ENV = "REPLAYSSM_M2_SPLIT_MINB2"
SPLIT_HPC2_ENV = "REPLAYSSM_M2_SPLIT_HPC2"
SPLIT_FPOS_ENV = "REPLAYSSM_M2_SPLIT_FPOS"
#: the decode's split launch by default from this many rows (where the order runs), for these
#: read copies. Session 20 (Nemotron-3-Super L16, off / on, bench/results/session20_gpu/call4/):
#: b32 nvfp4/fp16sr 46.6 -> 44.9 µs, fp8/fp32 37.5 -> 35.8, nvfp4/fp8sr 49.0 -> 48.5; 16-bit read
#: copies not: bf16/fp32 gains <= 1.6 % (b32..b512), fp16/fp32 loses 2.2-2.4 % at b256 / b512
SPLIT_MIN_BATCH = 32
SPLIT_READ_FMTS = ("fp8", "nvfp4")
#: the other read copies (fp32 / bf16 / fp16) split from this buffer length and batch: there the
#: shared build's ring needs more registers / shared memory (fp32 at L32: 96 registers, 38.7 KB,
#: 5 CTAs/SM) while the non-flush build stays at 7. Session 21 (Nemotron-3-Super, single launch
#: / split at 8 non-flush heads, bench/results/session21_gpu/call2/gB, gD): L32 b256 / b512
#: bf16/fp32 266.3 -> 250.1 / 523.2 -> 483.8 µs, fp16/fp32 265.9 -> 249.4 / 522.9 -> 481.5, fp32
#: 417.3 -> 410.3 / 816.1 -> 792.5; at L16 within +-2 % (fp16/fp32 slower), so not there. By
#: batch (call3/gw, L32 single / split): fp32 b64 126.9 / 125.9, b128 216.5 / 225.9 (slower),
#: bf16/fp32 b64 82.4 / 84.1, b128 138.9 / 136.5; hence fp32 from 256 rows, 16-bit from 128.
SPLIT_WIDE_MIN_L = {"fp32": 32, "bf16": 32, "fp16": 32}
SPLIT_WIDE_MIN_BATCH = {"fp32": 256, "bf16": 128, "fp16": 128}
#: ... fp32 from L16 where the split's non-flush CTAs take 8 heads (H / G a multiple of 8), since
#: the pair fold made its flush half cheaper. Session 38 (Super L16, single / split with the
#: flush-half hint 5; call3/g1, call4/g1): b256 331.0 -> 323.7 µs, b512 648.0 -> 628.0 (b128
#: 169.7 -> 173.4: slower); Nano-4B (12 heads a group) b256 311.3 -> 317.0, b512 618.5 -> 627.2
#: with 6 heads per non-flush CTA, and still 1.016x / 1.002x slower with 4 (call6: not the head
#: count, cause unknown); bf16/fp32 L16 b256 1.01x slower
SPLIT_FP32_L16_HEADS = 8
#: ... and below SPLIT_SMALL_BELOW rows (with the order, also below ROW_ORDER_MIN_BATCH), every
#: read copy at these (max buffer length, min rows) pairs (use_small_split). session24_gpu/call1, one launch / order + split:
#: Nemotron-3-Super b16 L8 1.13-1.33x, L16 1.24-1.39x, b8 L8 1.18-1.27x (b8 L16 0.97-1.06x:
#: not there); Nemotron-3-Nano-4B b16 1.16-1.43x, b8 L8 1.13-1.24x; b4 (call2): Nano-4B
#: 0.69-0.94x, so not there
SPLIT_SMALL_RULE = ((8, 8), (16, 16))
#: ... up to this many rows (exclusive): from ROW_ORDER_MIN_BATCH the fp8 / nvfp4 read copies
#: split anyway; fp32 / 16-bit ones at L <= 16 split here too. session24_gpu/call2, order without
#: / with split, b32 / b48: Nano-4B fp32 L8 63.8 -> 54.3 / 90.5 -> 76.8 µs, bf16/fp32 L16 47.3
#: -> 44.9 / 51.3 -> 49.4; Nemotron-3-Super fp32 / bf16 within -0.7 .. +2.4 %; larger batches
#: at L16 within +-2 % (session 21), so not there
SPLIT_SMALL_BELOW = 64
#: heads per CTA of the split's non-flush launch from these batches on (where H / G allows), by
#: read copy: with no flush CTAs in that launch, more heads per CTA share its fixed work (cursors,
#: C, the coefficient dots, the decay scan) without lengthening a flush tail; below, and for the
#: flush launch, choose_heads_per_cta. Session 21 (Nemotron-3-Super L16, 4 -> 8 heads, call1/gh,
#: call2/gC): fp8/fp32 b256 178.8 -> 175.9 µs, b512 343.6 -> 332.3, but b64 / b128 1-2 % slower;
#: nvfp4/fp16sr b64 78.5 -> 76.5, b128 102.2 -> 99.6, b256 181.1 -> 179.7, b512 347.0 -> 343.3;
#: 16 heads slower everywhere (fp32 b256 L16 331.7 -> 341.8). The first of these that divides
#: H / G: Nano-4B (12 heads per group) at 6 (call5, 4 -> 6 heads, b256 / b512): nvfp4/fp16sr
#: 181.1 -> 174.5 / 339.1 -> 326.1, fp8/fp32 163.9 -> 162.3 / 311.3 -> 306.6, L32 fp32
#: 386.2 -> 385.4 / 740.1 -> 733.3, bf16/fp32 319.3 -> 315.1 / 522.3 -> 512.2 (12: slower)
SPLIT_NONFLUSH_HEADS = (8, 6)
SPLIT_NONFLUSH_HEADS_FROM = {"nvfp4": 64, "fp8": 256}
SPLIT_NONFLUSH_HEADS_FROM_OTHER = 128
#: CTAs per SM of the split's non-flush launch (no flush code: registers and shared memory of
#: the read path only), by read copy
SPLIT_NONFLUSH_MINB = {"nvfp4": 6, "fp8": 7}     # (sm_90a: 77 / 70 registers, no spills;
                                                 # nvfp4 at 7: 72 registers, 40 B of spills)
SPLIT_NONFLUSH_MINB_OTHER = 7       # the other read copies (the shared build's 7 at L16)
#: CTAs per SM of the split's flush launch by (read, checkpoint) format; the others keep
#: default_min_blocks_per_mp's flush-v2 choice. Session 38 call 3 (Super L16 b256 / b512, default
#: / this): fp32 7 -> 5 (72 -> 94 registers, 48 -> 0 B spills) 324.2 -> 322.9 / 635.2 -> 628.3
#: µs (at L32 1.000x); nvfp4/fp16sr 5 -> 4 (96 -> 128 registers, 60 -> 0 B spills) 167.3 ->
#: 165.5 / 319.0 -> 316.6 (nvfp4/fp8sr at 4: 0 -> 56 B spills, b256 1.02x slower). The key is
#: by format, so nvfp4sr/fp16sr takes 4 as well (that pair untimed)
SPLIT_FLUSH_MINB = {("fp32", "fp32"): 5, ("nvfp4", "fp16"): 4}


def _env_int(name: str) -> Optional[int]:
    v = os.environ.get(name)
    return int(v) if v not in (None, "") else None


def split_min_blocks(rows: int, read_fmt: str, smem_ctas: int = 0,
                     rec_fmt: Optional[str] = None) -> Optional[int]:
    """CTAs per SM hint of a decode split launch's half (None: the flush half keeps
    :func:`default_min_blocks_per_mp`'s flush-v2 choice, but for the pairs of
    :data:`SPLIT_FLUSH_MINB`); capped by shared memory."""
    v = _env_int(SPLIT_MINB1_ENV if rows == 1 else SPLIT_MINB2_ENV)
    if v is None and rows == 1:
        v = SPLIT_NONFLUSH_MINB.get(read_fmt, SPLIT_NONFLUSH_MINB_OTHER)
    if v is None and rows == 2:
        v = SPLIT_FLUSH_MINB.get((read_fmt, rec_fmt))
    if v is not None and smem_ctas:
        v = min(v, smem_ctas)
    return v


def default_min_blocks_per_mp(read_fmt: str, heads_per_cta: int, state_regs: int = 0,
                              both_sr: bool = False, smem_ctas: int = 0,
                              flush_v2: bool = False, early_wide: bool = False) -> int:
    """Default ``.minnctapersm`` (= register cap 64K / (k·128)) of a variant.

    One head per CTA: ptxas' own choice (70-110 registers, no spills in the sm_90a builds we
    inspected). Several heads per CTA: ptxas alone goes to 110-128 registers (live ranges of the
    flush path across the head loop), leaving the memory-bound non-flush path 4 CTAs per SM. Caps
    that compiled without (or with a few bytes of) spills at P = 64 / 80, N = 128: 6 CTAs (80
    registers) for nvfp4 / fp8 read copies when the per-thread read set of two heads (prefetch) is
    <= 32 registers, else 5; 4 (128) for 16-bit read copies and when both copies are written with
    SR; fp32 read copies (64 state registers per head): ptxas' choice.
    ``state_regs``: state registers per thread for one head's read copy (RPT·CN·4).
    Flush v2 (``flush_v2``; :meth:`Mamba2ReplayDecode._flush2`, every head count): nvfp4 read
    copies 5 CTAs (96 registers; shared memory -- the S_new tile and the staging -- allows 5 at
    P = 64, N = 128, L = 16), fp8 read copies 6 (80), 4 (128) with 4 heads per CTA (H200, session 4:
    fp8/fp32 at batch 256 / 512 254 / 464 µs instead of 277 / 498 with 6; 1-2 heads, batch < 64:
    within noise either way), 16-bit and fp32 read copies 7 (72: the
    occupancy of the v1 builds, which the memory-bound non-flush path of these pairs needs),
    both copies SR 5; fewer when shared memory (``smem_ctas``: the CTAs per SM it allows, when it
    binds) allows fewer. The v2 flush's prefetches go through cp.async into smem (no registers
    held). Built at P = 64, N = 128 with z: <= 80 spill bytes, outside the fold / chunk / non-flush
    loops (their instruction counts move by < 5 % between 96 and 72 registers).
    ``early_wide``: a 16-bit / fp32 read set issued before the preamble (live through it) at the
    launch's request (:func:`early_read_for`; not a row split's 16-register set, which meets the
    kernel's own early rule: at 4 it was 1.00-1.10x slower than at 7, Super b4-b7 L8,
    bench/results/session30_gpu/call3/rs), or an fp8 / nvfp4 one-head build for a launch of few
    rows (:func:`few_rows_hint_for`): :data:`EARLY_WIDE_MINB`. ``REPLAYSSM_M2_MINBLOCKS``
    overrides (tuning runs)."""
    forced = os.environ.get("REPLAYSSM_M2_MINBLOCKS")    # tuning runs
    if forced:
        return int(forced)
    if early_wide:
        return min(EARLY_WIDE_MINB, smem_ctas) if smem_ctas else EARLY_WIDE_MINB
    if flush_v2:
        if both_sr or read_fmt == "nvfp4":
            k = 5
        elif read_fmt == "fp8":
            k = 4 if heads_per_cta >= 4 else 6
        else:
            k = 7
        return min(k, smem_ctas) if smem_ctas else k
    if heads_per_cta <= 1 or read_fmt == "fp32":
        return 0
    if read_fmt in ("fp16", "bf16") or both_sr:
        return 4
    return 6 if 2 * state_regs <= 32 else 5


class Mamba2ReplayDecode:
    """Compile-time parameters + host launch (``__call__``) + device code (``kernel``)."""

    #: every chunk of a flush head's fp32 S_new waits in sS, whatever the targets (a subclass's
    #: flush that forms S_new in another layout and encodes it from there: the verify's
    #: fragment flush of split pairs)
    sS_whole = False

    def _fold_pair_default(self) -> bool:
        """Whether the v2 flush folds a thread's chunks in pairs unless
        ``REPLAYSSM_M2_FOLD_PAIR`` says (measured, Super / Nano-4B, bench/results/session37_gpu/
        call2, session38_gpu/call1): on for the nvfp4, fp8 and 16-bit read copies (b1-b512
        0.87-0.99x), but for 16-bit read copies over an fp32 checkpoint only from 4 heads per CTA,
        in any launch (below: b4 1.055x, b16 1.02x slower, 0 -> 36-52 B of spills at 72
        registers; b256, 4 heads: 0.975x). fp32 read copies take it only in a split's flush half
        (fp32 L32 b256: flush 0.66x), not in the shared kernel (1.06-1.08x slower: its non-flush
        rows spill 48 B at the 72-register cap)."""
        if self.read_fmt == "fp32":
            return self.rows == 2
        if self.read_fmt in ("bf16", "fp16") and self.rec_fmt == "fp32":
            return self.hpc >= 4
        return True

    def _pair_roll_default(self) -> bool:
        """Whether a fold pair's encodes run rolled unless ``REPLAYSSM_M2_PAIR_ROLL`` says
        (H100, session 43 call 1, ``bench/results/session43_gpu/call1/roll_decode``, Super
        L16, rolled / inline): on for nvfp4 read copies over an fp16 SR checkpoint in a split's
        flush half at L16 (flush only b256 / b512 0.998 / 0.953x, mixed 0.964 / 0.970x; session
        45 call 1, the rule's build against the inline one, two rounds A B A B: mixed b256
        0.965 / 0.966x, b512 0.975 / 0.975x, flush only b256 / b512 0.971 / 0.976x and 0.976 /
        0.957x, with nvfp4/fp8sr, an identical build, mixed at 0.989-1.007x; Nano-4B b256 / b512
        mixed 0.994 / 0.995x);
        off for fp8 read copies (fp8/fp16sr flush only 1.16x: the rolled half spills 88 / 144 B
        at 128 registers, 0 inline) and nvfp4/fp8sr (flush only 0.95-0.97x, mixed 1.000-1.006x:
        0 -> 76 B of spills). Untimed, so off: other buffer lengths (at L8 the rolled flush CTA,
        37 -> 45 KB, no longer fits beside four non-flush CTAs) and the shared kernel (rolled,
        its nvfp4 builds lose their spills: 96 -> 127 registers; forced there in session 45 call
        1, Super / Nano-4B b1 / b8 / b16 L16 and b1 / b2 L8: inline / rolled mixed 0.95-1.02x,
        no lead for batch 1)."""
        return (self.read_fmt == "nvfp4" and self.rec_fmt == "fp16" and self.rows == 2
                and self.L == 16)

    def fold_smem(self, R: int, L: int) -> int:
        """Bytes of one fold staging round (:class:`ReplayTile`'s ``fold_smem``): the same for
        every ring and buffer length here (``R`` / ``L`` are for subclasses; the verify
        overrides it with its own switch); :data:`FOLD_SMEM_ENV` overrides."""
        return fold_smem_bytes(FOLD_SMEM_ENV)

    def __init__(self, pair, act_dtype, dt_dtype, nheads: int, headdim: int, dstate: int,
                 ngroups: int, buffer_len: int, ring: int, has_D: bool, has_z: bool,
                 has_dt_bias: bool, dt_softplus: bool, heads_per_cta: int = 1,
                 has_state_batch_indices: bool = True, prefetch: Optional[bool] = None,
                 min_blocks_per_mp: Optional[int] = None, flush_impl: Optional[int] = None,
                 nonflush_mma: Optional[bool] = None, staged: Optional[bool] = None,
                 early_arrive: Optional[bool] = None, prof: Optional[bool] = None,
                 row_order: bool = False, mma_fold: Optional[bool] = None,
                 early_read: Optional[bool] = None, pdl: Optional[int] = None,
                 order_cursors: bool = False, rows: int = 0, flush_positions: int = 0,
                 pf_early: Optional[bool] = None, num_threads: int = NUM_THREADS,
                 row_split: int = 1, few_rows: bool = False, smem_ctas_cap: int = 0,
                 philox_rounds: Optional[int] = None):
        p: PrecisionPair = parse_pair(pair)
        # the SR generator's rounds (the cache's ``philox_rounds``; 10 for pairs without SR)
        self.philox_rounds = common.philox_rounds_for(p, philox_rounds)
        self.pdl = common.pdl_mode(pdl)
        # split launch (:func:`use_split`): 1 = the non-flush rows only (no flush code or
        # buffers), 2 = the flush rows only (no read set), as a persistent grid of
        # ``flush_positions`` positions walking the order's leading flush rows; 0 = every row.
        # (The verify kernel, a subclass, passes its own split halves through here.)
        self.rows = int(rows)
        # split non-flush half only (:func:`split_nonflush_cap`): shared memory padded so that at
        # most this many CTAs share an SM, leaving room for a flush-half CTA; 0 = unpadded
        self.smem_ctas_cap = int(smem_ctas_cap) if self.rows == 1 else 0
        self.flush_positions = int(flush_positions)
        if self.rows not in (0, 1, 2):
            raise ValueError(f"rows must be 0, 1 or 2, got {rows}")
        if self.rows == 2 and self.flush_positions < 1 and type(self) is Mamba2ReplayDecode:
            raise ValueError("the decode split's flush launch needs flush_positions >= 1")
        # the decode split's flush launch walks grid positions (the verify's split launches,
        # flush_positions 0, keep one CTA per row and head group)
        self.persistent = self.rows == 2 and self.flush_positions > 0
        # grid position -> (row, slot) from the flush-first order (cute_kernels.row_order)
        self.row_order = bool(row_order)
        # ... and the row's cursors from the same entry (one round trip less; the step does not
        # read the live cursors, so its arrive needs no fence)
        self.order_cursors = bool(order_cursors) and self.row_order
        # L2 prefetches before the PDL wait (the grid position -> slot map must not come from an
        # order the previous grid writes)
        pe = bool(_env_flag(PF_EARLY_ENV)) if pf_early is None else bool(pf_early)
        self.pf_early = pe and self.pdl != 0 and not self.row_order and type(self) is Mamba2ReplayDecode
        self.prof = _prof_default() if prof is None else bool(prof)
        if self.rows and type(self) is Mamba2ReplayDecode and (self.prof or not self.order_cursors):
            raise ValueError("a decode split launch needs the flush-first order with its cursors "
                             "and has no profiling build")
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
        # row split (:func:`check_row_split`): each head's P state rows over ``row_split`` CTAs.
        # The kernel then runs on virtual heads of P / row_split rows (H * row_split of them,
        # views made in __call__); the tensors keep their real [.., H, P, ..] shapes
        self.row_split = int(row_split)
        self.H_full, self.P_full = self.H, self.P
        if self.row_split != 1:
            check_row_split(p, self.P, self.row_split)
            if type(self) is not Mamba2ReplayDecode or self.rows or row_order:
                raise ValueError("row_split > 1 is for the decode launch without the row order")
            if int(heads_per_cta) != 1:
                # (one head per CTA: pf_early's per-head prefetch spans assume it)
                raise ValueError(f"row_split > 1 needs heads_per_cta=1, got {heads_per_cta}")
            if _prof_default() if prof is None else prof:
                raise ValueError("row_split > 1 has no profiling build")
            self.H, self.P = self.H * self.row_split, self.P // self.row_split
        self.hpg = self.H // self.G
        self.has_D, self.has_z, self.has_dt_bias = bool(has_D), bool(has_z), bool(has_dt_bias)
        self.nz = 2 if self.has_z else 1    # rows (x, z) of the staged non-flush x/z buffer
        self.dt_softplus = bool(dt_softplus)
        self.has_idx = bool(has_state_batch_indices)
        self.cfg = ReplayTile(self.read_fmt, self.H, self.P, self.N, self.G, self.L, self.R,
                              int(heads_per_cta), num_threads=int(num_threads),
                              fold_smem=self.fold_smem(self.R, self.L))
        self.hpc = self.cfg.hpc
        # does the flush need a matrix amax (nvfp4 global scale) before encoding?
        self.flush_targets = [(self.rec_fmt, self.rec_sr, 0)]
        if self.split:
            self.flush_targets.append((self.read_fmt, self.read_sr, 1))
        self.needs_gamax = any(f == "nvfp4" for f, _, _ in self.flush_targets)
        # flush implementation: 2 = single fold pass (fp32 S_new tile in smem for nvfp4 targets,
        # software-pipelined hi / x_buf loads, fast nvfp4 RN encoder); 1 = the original two-pass
        # version (kept as a fallback; also used when the fold needs several staging rounds)
        self.early_arrive = _early_arrive_default() if early_arrive is None else bool(early_arrive)
        # (the decode only: the verify keeps its fenced arrive)
        self.dep_arrive = type(self) is Mamba2ReplayDecode and _env_flag(DEP_ARRIVE_ENV) is not False
        # the publish check after the CTA's last barrier, the arrive not warp-aggregated
        # (LATE_CHECK_ENV)
        lc = _env_flag(LATE_CHECK_ENV)
        self.late_arrive_check = (self.dep_arrive and self.early_arrive
                                  and not self.order_cursors and self.cfg.ctas_per_row > 1
                                  and (self.read_fmt in LATE_CHECK_READ_FMTS if lc is None else lc))
        self.fold_unroll = _fold_unroll(2 if self.rows == 2 else 1)
        fi = _flush_impl_default() if flush_impl is None else int(flush_impl)
        if fi not in (1, 2):
            raise ValueError(f"flush_impl must be 1 or 2, got {fi}")
        self.flush_impl = fi if (self.cfg.njb == 1 and
                                 (self.P * (self.act_dtype.width // 8)) % 16 == 0) else 1
        # non-flush nvfp4 read copies: every head's state, scales and x_j staged in smem with
        # cp.async right after the cursors (:meth:`_snf_issue`), in the smem the flush path
        # uses for its own buffers (a CTA is either)
        ab = self.act_dtype.width // 8
        sg = _staged_default() if staged is None else bool(staged)
        self.snf = bool(sg and self.read_fmt == "nvfp4" and self.N in (64, 128, 256)
                        and (self.P * ab) % 16 == 0 and self.rows != 2)
        # non-flush nvfp4 read copies with 16-bit acts: the row dots on the tensor cores
        # (:meth:`_mma_rows`); needs 4 lanes per state row (N = 128)
        mm = _nonflush_mma_default() if nonflush_mma is None else bool(nonflush_mma)
        self.mma = bool(mm and self.read_fmt == "nvfp4" and dtype_name(self.act_dtype) != "float32"
                        and self.cfg.tn == 4 and self.cfg.cn == 1 and self.rows != 2)
        # targets encoded in the fold pass (pass 1) / after the matrix amax (pass 2)
        if self.flush_impl == 2 and self.needs_gamax:
            self.flush_p1 = [t for t in self.flush_targets if t[0] != "nvfp4"]
            self.flush_p2 = [t for t in self.flush_targets if t[0] == "nvfp4"]
        else:
            self.flush_p1, self.flush_p2 = list(self.flush_targets), []
        # flush v2: the fold on the tensor cores (:meth:`_mma_fold`) -- 16-row passes (N = 128),
        # N/4 columns per warp in n-tiles of 8, 16-bit activations (B_j exact in tf32). Default:
        # decode with fp8 read copies and an fp32 checkpoint only. H200 A/B
        # (bench/results/session5_gpu/mma_fold): the flush runs 1.10-1.12x faster with fp8 / fp32
        # copies, 0.93x with nvfp4 -> fp16 (two CTA barriers per pass, 5 -> 4 CTAs/SM by smem),
        # and the kernel's shared resources cost the non-flush rows 0.90x (nvfp4: smem; fp32:
        # registers 72 -> 80); fp8/fp32 1.04x overall
        mf = _mma_fold_default() if mma_fold is None else bool(mma_fold)
        if mf is None:               # measured: fp8/fp32 (fp8 -> fp16 SR targets: unmeasured)
            mf = self.read_fmt == "fp8" and self.rec_fmt == "fp32"
        self.mma_fold = bool(mf and self.flush_impl == 2 and self.cfg.rpf == 16     # N = 128
                             and dtype_name(self.act_dtype) != "float32" and self.rows != 1)
        # v2 flush: two chunks of the thread (rows r, r + RPF; one chunk-in-row) folded at once
        # (:meth:`_fold_cc`); not in the profiling builds (their clocks time single chunks)
        fp = _fold_pair_env()
        if fp is None:
            fp = self._fold_pair_default()
        self.fold_pair = bool(fp and self.flush_impl == 2 and not self.mma_fold
                              and not self.prof and self.cfg.nit >= 2 and self.rows != 1)
        self.fold_pairs = self.cfg.nit // 2 if self.fold_pair else 0
        # with nvfp4 targets a pair's second chunk waits in sS while the first is encoded (it
        # would otherwise stay live through that encode: 72 B of spills at 96 registers); the
        # last pair's second chunk is the one pass 2 keeps in registers, so with an even NIT the
        # pass-1 targets of chunk NIT - 2 are encoded in pass 2 (every pass-1 target there:
        # 1.04x slower flush, session37_gpu/call1)
        # (rolled encodes: every chunk of a head waits in sS, the last one too -- no deferral)
        pr = _pair_roll_env()
        if pr is None:
            pr = self._pair_roll_default()
        self.pair_roll = bool(self.fold_pair and pr)
        self.pair_defer = bool(self.fold_pair and self.needs_gamax and self.flush_p1
                               and self.cfg.nit % 2 == 0 and not self.pair_roll)
        # (with the roll the pair loop keeps both chunks in sS whenever a later chunk follows;
        # an even NIT's last pair keeps its second chunk there too: :attr:`_sS_all`)
        # non-flush: prefetch the next head's read copy while reducing the current one (formats
        # with few state registers per head: nvfp4 8, fp8 16 per thread at P=64, N=128)
        if prefetch is None:
            prefetch = _env_flag("REPLAYSSM_M2_PREFETCH")     # tuning runs
        # (not in a split's non-flush launch: with it, fp8 spills 144 B at 7 CTAs/SM, 0 without)
        self.prefetch = (bool(prefetch) if prefetch is not None else
                         (self.read_fmt in ("nvfp4", "fp8") and self.hpc > 1 and self.rows != 1))
        if self.hpc == 1 or self.snf or self.rows == 2:   # (staged: every head is in smem)
            self.prefetch = False
        # the first head's read set goes out before the preamble when it is small (nvfp4 / fp8:
        # <= 16 registers per thread); 16-bit / fp32 read sets (32 / 64 registers, live through
        # the preamble) would cost occupancy -- they load at the head start
        self.early = (not self.snf) and (self.cfg.rpt * self.cfg.cn * 4 <= 16 or self.prefetch)
        early_wide_read = early_read is True     # (the launch's early_read_for, or forced)
        if early_read is None:
            early_read = _env_flag(EARLY_READ_ENV)  # tuning runs
        if early_read is not None:
            self.early = (not self.snf) and (early_read or self.prefetch)
        if self.rows == 2:               # (no read set)
            self.early = False
        # the launch's early read set, live through the preamble (not the kernel's own rule)
        early_wide = early_wide_read and self.early and not self.prefetch
        rp = os.environ.get(RING_PHYS_ENV, "")
        if rp not in ("", "0", "1"):
            raise ValueError(f"{RING_PHYS_ENV} must be 0 or 1 (unset: the default rule), got {rp!r}")
        ring_phys = rp == "1"
        if not rp:            # the early-wide builds (16-bit read set, no prefetch)
            ring_phys = early_wide and self.read_fmt in ("fp16", "bf16")
        # (one scan segment: every physical entry in one lane of a warp)
        self.ring_phys = bool(ring_phys and type(self) is Mamba2ReplayDecode
                              and not self.row_order and self.rows != 2 and self.R <= 32)
        # occupancy hint (CTAs of 128 threads per SM) -> .minnctapersm, i.e. a register cap of
        # 64K / (k * 128) for ptxas; 0 = ptxas' choice. See default_min_blocks_per_mp. Wider
        # CTAs keep the same register cap: k * 128 / num_threads of them (at 256 threads the
        # 128-thread k would cap nvfp4/fp16sr at 48 registers, ~240 B of spills)
        c = self.cfg
        if min_blocks_per_mp is None and self.rows:
            # (the unpadded CTAs: the cap's room is for a flush CTA's registers too)
            min_blocks_per_mp = split_min_blocks(self.rows, self.read_fmt,
                                                 self._smem_ctas(padded=False), self.rec_fmt)
        # few_rows: a launch of <= EARLY_WIDE_ROWS rows (few_rows_hint_for)
        self.few_rows = bool(few_rows and self.hpc == 1 and self.read_fmt in FEW_ROWS_MINB_FMTS
                             and not self.row_order and not self.rows and self.row_split == 1)
        if min_blocks_per_mp is None:
            k = default_min_blocks_per_mp(self.read_fmt, self.hpc, c.rpt * c.cn * 4,
                                          self.split and self.read_sr and self.rec_sr,
                                          self._smem_ctas(), self.flush_impl == 2,
                                          (early_wide
                                           and self.read_fmt in ("fp32", "fp16", "bf16"))
                                          or self.few_rows)
            if k and c.nt != NUM_THREADS and not os.environ.get("REPLAYSSM_M2_MINBLOCKS"):
                k = max(1, k * NUM_THREADS // c.nt)
            min_blocks_per_mp = k
        self.min_blocks_per_mp = int(min_blocks_per_mp)

    def _ulayout(self, padded: bool = True):
        """Byte offsets in the shared union buffer (``sU``) and its size (``padded``: grown to
        the :attr:`smem_ctas_cap` bound, whose tail nothing uses). Flush rows: sB
        [JB, N] f32, sWX [JB, P] f32, sS (v2 with nvfp4 targets). Non-flush rows with staging
        (nvfp4 read copies): per head the state words [P, N/8], block scales [P, N/16] bytes, the
        global scale, x_j [L-1, P] (act dtype; entries j < h <= L-1), x (and z with z) [NZ, P] f32, D."""
        c, N, P, NT, HPC = self.cfg, self.N, self.P, self.cfg.nt, self.hpc
        al = lambda b: -(-b // 16) * 16  # noqa: E731
        off = {}
        o = 0
        off["sB"] = o
        o += al(4 * c.jb * N)
        off["sWX"] = o
        o += al(4 * c.jb * P)
        if self.flush_impl == 2 and self.needs_gamax:
            off["sS"] = o
            o += 64 * NT * self._sS_chunks()
        elif self.pair_roll:
            off["sS"] = o                # a pair's second chunk, across the first one's encode
            o += 64 * NT
        if self.mma_fold:
            off["slab"] = o              # the tensor-core fold's 16-row pass (rows padded)
            o += al(4 * 16 * (N + 4))
        if self.flush_impl == 2:
            # cp.async landing zones: the next hi chunk of every thread, its scale word, and the
            # next head's x_j rows (JB x P, act dtype)
            off["hw"] = o
            o += al(NT * CHUNK * _BITS[self.rec_fmt] // 8)
            off["hs"] = o
            o += al(4 * NT)
            off["xr"] = o
            o += al(c.jb * P * (self.act_dtype.width // 8))
        size = o
        if self.rows == 1:               # non-flush rows only: no flush buffers (views kept, unused)
            off = {name: 0 for name in off}
            size = 16
        if self.snf:
            ab = self.act_dtype.width // 8
            o = 0
            for name, b in (("st", HPC * P * N // 2), ("sc", HPC * P * (N // 16)), ("gs", 4 * HPC),
                            ("dd", 4 * HPC), ("xb", HPC * max(self.L - 1, 1) * P * ab),
                            ("xz", HPC * self.nz * P * 4)):
                off[name] = o
                o += al(b)
            size = max(size, o)
        cap = self.smem_ctas_cap
        if padded and cap and SMEM_PER_SM // (self._smem_fixed() + size + 1024) > cap:
            # cap CTAs fit, cap + 1 do not
            size = al(SMEM_PER_SM // (cap + 1) - 1024 + 1 - self._smem_fixed())
        return off, size

    @property
    def _sS_all(self) -> bool:
        """nvfp4 targets with the rolled pair encodes and an even NIT: the last chunk is a
        pair's second, so it waits in sS too (an odd NIT's last chunk, from the single-chunk
        loop, stays in registers for pass 2 as without the roll)."""
        return self.pair_roll and self.needs_gamax and self.cfg.nit % 2 == 0

    def _sS_chunks(self) -> int:
        """Chunks per thread in sS with nvfp4 targets: all but the last, which stays in registers
        for pass 2 -- or all of them (:attr:`_sS_all`)."""
        return self.cfg.nit if (self._sS_all or self.sS_whole) else max(self.cfg.nit - 1, 1)

    def _smem_fixed(self) -> int:
        """Shared memory of one CTA outside the union buffer (16-byte aligned allocations)."""
        c, N, NT = self.cfg, self.N, self.cfg.nt
        al = lambda b: -(-b // 16) * 16  # noqa: E731
        b = al(4 * N) + al(4 * (max(self.L, 1) + 1)) + al(4 * self.hpc * c.hm) + al(16 * self.hpc)
        return b + al(4 * (NT // 32)) + al(4 * self._sr_key_words())

    def smem_bytes(self, padded: bool = True) -> int:
        """Dynamic shared memory of one CTA (the allocations of :meth:`kernel`, 16-byte aligned;
        ``padded``: with the :attr:`smem_ctas_cap` padding)."""
        return self._smem_fixed() + self._ulayout(padded)[1]

    def _smem_ctas(self, padded: bool = True) -> int:
        """CTAs per SM allowed by shared memory when it binds below 8 (else 0); 228 KiB per SM
        (H100 / H200, with the max carveout), 1 KiB reserved per CTA."""
        k = SMEM_PER_SM // (self.smem_bytes(padded) + 1024)
        return k if k < 8 else 0

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
        mArrive: cute.Tensor, mSeed: Optional[cute.Tensor], mOrder: Optional[cute.Tensor],
        pad_slot_id: Int32, stream: cuda.CUstream,
    ):
        npos = self._grid_positions(mX.shape[0])
        if const_expr(self.row_split > 1):
            # virtual heads h' = part + k * h of P / k rows (colexicographic in the (k, H) mode):
            # per-row tensors get a (k, H) head mode over the row blocks, per-head ones a
            # stride-0 k (every part reads / writes the real head's value)
            rv = functools.partial(_row_split_view, k=self.row_split)
            mX, mOut, mZ = rv(mX, 1, 2), rv(mOut, 1, 2), rv(mZ, 1, 2)
            mDt, mA, mD, mDtBias = rv(mDt, 1), rv(mA, 0), rv(mD, 0), rv(mDtBias, 0)
            mHi, mHiS, mLo, mLoS = rv(mHi, 1, 2), rv(mHiS, 1, 2), rv(mLo, 1, 2), rv(mLoS, 1, 2)
            mXBuf, mDtBuf, mDABuf = rv(mXBuf, 1, 3), rv(mDtBuf, 1), rv(mDABuf, 1)
        self.kernel(
            mX, mDt, mA, mB, mC, mD, mZ, mDtBias, mIdx, mOut, mHi, mHiS, mHiG, mLo, mLoS, mLoG,
            mXBuf, mBBuf, mDtBuf, mDABuf, mWPos, mOrig, mFlushCnt, mPend, mArrive, mSeed, mOrder,
            pad_slot_id,
        ).launch(
            grid=[self.cfg.ctas_per_row, npos, 1],
            block=[self.cfg.nt, 1, 1],
            stream=stream,
            use_pdl=bool(self.pdl),
            # .minnctapersm k -> ptxas caps registers at 64K / (k * 128); an explicit carveout
            # stops the DSL from querying the device (GPU-less compiles), as in mamba2_standard
            min_blocks_per_mp=self.min_blocks_per_mp,
            # smem-bound variants ask for the max carveout (100 %: 228 KiB per SM)
            preferred_smem_carveout=(100 if self._smem_ctas() else
                                     (-1 if self.min_blocks_per_mp > 1 else None)),
        )

    def _grid_positions(self, batch):
        """The grid's y extent: ``batch`` (one position per row), or the decode split's
        persistent flush launch's ``flush_positions`` (fewer for a smaller batch)."""
        if self.persistent:
            return cutlass.min(batch, Int32(self.flush_positions))
        return batch

    # ---------------------------------------------------------------- device helpers
    def _union_buffer(self, smem):
        """Allocates the union buffer (``sU``, layout :meth:`_ulayout`) in ``smem``; returns
        ``uview(name, dtype, layout)``: the ``dtype`` view of ``layout`` at the offset of ``name``."""
        uoff, usize = self._ulayout()
        sU = smem.allocate_tensor(Int32, cute.make_layout(usize // 4), byte_alignment=16)

        def uview(name, dtype, layout):
            return cute.make_tensor(cute.recast_ptr(sU.iterator + uoff[name] // 4, dtype=dtype),
                                    layout)

        return uview

    def _flush_views(self, uview):
        """The flush path's buffers in the union buffer (``uview(name, dtype, layout)``: a view at
        the :meth:`_ulayout` offset of ``name``): ``(sB, sWX, sS, sHW, sHS, sXR)``; ``sS`` only
        for flush v2 with nvfp4 targets, ``sHW`` / ``sHS`` / ``sXR`` only for flush v2 (else None)."""
        cfg, N, P, NT = self.cfg, self.N, self.P, self.cfg.nt
        sB = uview("sB", Float32, cute.make_layout((cfg.jb, N), stride=(N, 1)))
        sWX = uview("sWX", Float32, cute.make_layout((cfg.jb, P), stride=(P, 1)))
        sS = None
        if self.flush_impl == 2 and (self.needs_gamax or self.sS_whole):
            # the fp32 S_new of one head (flush rows, nvfp4 targets): float4 (it, g) of thread t
            # at row (it*4 + g)*NT + t -> conflict-free 16-byte accesses
            # (the last chunk stays in registers: NIT - 1 chunks per thread here; every chunk
            # with the rolled pair encodes at an even NIT, :meth:`_sS_chunks`)
            sS = uview("sS", Float32, cute.make_layout((self._sS_chunks() * 4 * NT, 4),
                                                       stride=(4, 1)))
        elif self.flush_impl == 2 and self.pair_roll:
            sS = uview("sS", Float32, cute.make_layout((4 * NT, 4), stride=(4, 1)))
        sHW = sHS = sXR = None
        if self.flush_impl == 2:
            wpc = CHUNK * _BITS[self.rec_fmt] // 32
            V = min(4, wpc)
            sHW = uview("hw", Int32, cute.make_layout((wpc // V, NT, V), stride=(NT * V, V, 1)))
            sHS = uview("hs", Int32, cute.make_layout(NT))
            sXR = uview("xr", self.act_dtype, cute.make_layout((cfg.jb, P), stride=(P, 1)))
        sSlab = None
        if self.mma_fold:
            sSlab = uview("slab", Float32, cute.make_layout((16, N), stride=(N + 4, 1)))
        return sB, sWX, sS, sHW, sHS, sXR, sSlab

    @cute.jit
    def _row_slot(self, mIdx: Optional[cute.Tensor], row: Int32):
        """The cache slot of batch row ``row`` (``state_batch_indices[row]``, or ``row``)."""
        slot = row
        if const_expr(self.has_idx):
            slot = mIdx[row]
        return slot

    @cute.jit
    def _grid_row_slot(self, mIdx: Optional[cute.Tensor], mOrder: Optional[cute.Tensor],
                       gpos: Int32):
        """(batch row, cache slot) of grid position ``gpos``: the flush-first order's entry
        (``row_order``: both read at once, one load level like the slot alone) or the identity."""
        if const_expr(self.row_order):
            row = mOrder[0, gpos]
            slot = mOrder[1, gpos]
        else:
            row = gpos
            slot = self._row_slot(mIdx, gpos)
        return row, slot

    @cute.jit
    def _slot_valid(self, slot: Int32, num_slots: Int32, pad_slot_id: Int32):
        """False for pad rows: ``slot == pad_slot_id`` or outside ``[0, num_slots)``."""
        valid = slot != pad_slot_id
        if slot < 0:
            valid = Boolean(False)
        if slot >= num_slots:
            valid = Boolean(False)
        return valid

    @cute.jit
    def _dt_prime(self, dtv: Float32, mDtBias: Optional[cute.Tensor], head: Int32, bias=None):
        """dt' of one head from its raw dt (fp32): ``+ dt_bias`` (``bias``: already loaded), then
        softplus (identity above ``SOFTPLUS_THRESHOLD``), as configured."""
        if const_expr(self.has_dt_bias):
            if const_expr(bias is None):
                dtv = dtv + mDtBias[head].to(Float32)
            else:
                dtv = dtv + bias
        if const_expr(self.dt_softplus):
            if dtv <= Float32(SOFTPLUS_THRESHOLD):
                dtv = cute.math.log1p(cute.math.exp(dtv))
        return dtv

    @cute.jit
    def _c_dot(self, sC: cute.Tensor, lane: Int32, bb: Optional[cute.Tensor] = None, i: int = 0,
               gB=None) -> Float32:
        """The warp's sum of B_j[n] * C[n] for one ring entry (C in smem; lanes past N add 0):
        lane's B_j at n = lane + 32 m in registers, ``bb[i, m]``, or loaded here from
        ``gB = (B buffer, slot, group, physical entry)``."""
        N = self.N
        acc = Float32(0.0)
        for m in cutlass.range_constexpr(-(-N // 32)):
            n = lane + 32 * m
            nc = n if const_expr(N % 32 == 0) else cutlass.min(n, N - 1)
            if const_expr(gB is None):
                v = bb[i, m] * sC[nc]
            else:
                v = gB[0][gB[1], gB[2], gB[3], nc].to(Float32) * sC[nc]
            if const_expr(N % 32 == 0):
                acc = acc + v
            else:
                acc = acc + lp.sel_f32(n < N, v, Float32(0.0))
        return cute.arch.warp_reduction(acc, operator.add)

    @cute.jit
    def _read_cursors(self, sCur: cute.Tensor, mWPos: cute.Tensor, mOrig: cute.Tensor,
                      mFlushCnt: cute.Tensor, mArrive: cute.Tensor, slot: Int32, tidx: Int32,
                      pre=None):
        """``(write_pos, ring_origin, flush_count, arrive counter's old value)`` of the row.
        ``early_arrive``: thread 0 reads them and arrives at once, the CTA gets them through smem
        (one barrier); otherwise every thread reads them (old = 0: it arrives at the end).
        ``pre``: the cursors as the order kernel read them (``order_cursors``); thread 0 arrives
        at once (``early_arrive``) without a fence: nobody reads the live cursors in this step."""
        if const_expr(pre is not None):
            old = Int32(0)
            if const_expr(self.early_arrive and self.cfg.ctas_per_row > 1):
                if tidx == 0:
                    old = common.row_arrive(mArrive, slot)
            h, origin, gen = pre
        elif const_expr(self.early_arrive):
            old = common.read_cursors_and_arrive(
                sCur, mWPos, mOrig, mFlushCnt, mArrive if self.cfg.ctas_per_row > 1 else None,
                slot, tidx, dep_arrive=self.dep_arrive, no_agg=self.late_arrive_check)
            if const_expr(self.late_arrive_check):
                if tidx == 0:
                    sCur[3] = Int32(0)               # (the opaque zero of the publish check)
            cute.arch.barrier()
            h, origin, gen = sCur[0], sCur[1], sCur[2]
        else:
            old = Int32(0)
            h, origin, gen = mWPos[slot], mOrig[slot], mFlushCnt[slot]
        return h, origin, gen, old

    @cute.jit
    def _publish_cursors(self, mWPos: cute.Tensor, mOrig: cute.Tensor, mFlushCnt: cute.Tensor,
                         mPend: cute.Tensor, mArrive: cute.Tensor, slot: Int32, kept: Int32,
                         committed: cutlass.Constexpr, pending: cutlass.Constexpr,
                         origin2: Int32, flush: Boolean, gen: Int32, tidx: Int32, old: Int32,
                         sCur: Optional[cute.Tensor] = None):
        """The row's cursors, written by the last of its CTAs to arrive (the ``arrive`` counter
        when a row spans several CTAs; reset for the next call): ``write_pos = kept + committed``,
        ``ring_origin = origin2``, ``flush_count = gen + 1`` on flush rows, ``pending``.
        ``early_arrive``: the CTA arrived at its start (``old``: the counter's value then, thread
        0); otherwise it arrives here. ``sCur``: the cursors' smem (``late_arrive_check``: its
        opaque zero)."""
        cfg = self.cfg
        if const_expr(not self.early_arrive):
            cute.arch.barrier()       # every thread of the CTA has read the cursors
        if tidx == 0:
            last = Boolean(True)
            if const_expr(cfg.ctas_per_row > 1):
                if const_expr(not self.early_arrive):
                    cute.arch.fence_acq_rel_gpu()
                    old = common.row_arrive(mArrive, slot)
                    cute.arch.fence_acq_rel_gpu()
                if const_expr(self.late_arrive_check):
                    # + an opaque zero read after the CTA's last barrier: ptxas otherwise hoists
                    # this compare up to the atomic, and warp 0 waits out the atomic's round
                    # trip before the first barrier (the whole CTA with it)
                    old = old + sCur[3]
                last = old == Int32(cfg.ctas_per_row - 1)
                if const_expr(self.early_arrive):
                    if last:
                        cute.arch.fence_acq_rel_gpu()   # after every CTA's cursor reads
            if last:
                if const_expr(committed > 0):
                    mWPos[slot] = kept + committed
                else:
                    mWPos[slot] = kept
                mOrig[slot] = origin2
                if flush:
                    mFlushCnt[slot] = gen + 1
                mPend[slot] = Int32(pending)
                if const_expr(cfg.ctas_per_row > 1):
                    mArrive[slot] = Int32(0)

    def _phys(self, origin, j):
        """Physical ring index of logical entry j (0 <= j < R) given origin (< R)."""
        t = origin + j
        return _sel_i32(t >= Int32(self.R), t - Int32(self.R), t)

    def _issue_read(self, mRd, mRdS, mRdG, raw, rsc, bsc, gsc, slot, head, rp, lir, fmt=None,
                    tile=None):
        """Issue the loads of one head's read copy for this thread: 16-byte state chunks
        ``raw[i, cc, :]`` (row ``rp + RPP·i``, clamped to P-1; chunk ``lir + TN·cc``), fp8 row scales
        ``rsc[i]``, nvfp4 block-scale byte pairs ``bsc[i, cc]`` (blocks 2c, 2c+1) and the nvfp4
        global scale ``gsc[0]``. Nothing waits on them here. ``fmt`` / ``tile``: the copy's format
        and its :class:`ReplayTile` (default: the read copy's, ``self.read_fmt`` / ``self.cfg``)."""
        fmt = self.read_fmt if fmt is None else fmt
        cfg = self.cfg if tile is None else tile
        P = self.P
        for i in range(cfg.rpt):
            p = rp + cfg.rpp * i
            if P % cfg.rpp != 0:
                p = cutlass.min(p, P - 1)
            for cc in range(cfg.cn):
                c = lir + cfg.tn * cc
                src = cute.local_tile(mRd[slot, head, p, None], (4,), (c,))
                cute.autovec_copy(src, raw[i, cc, None])
                if fmt == "nvfp4":
                    b0 = Uint32(mRdS[slot, head, p, 2 * c])
                    b1 = Uint32(mRdS[slot, head, p, 2 * c + 1])
                    bsc[i, cc] = ((b0 & Uint32(0xFF)) | ((b1 & Uint32(0xFF)) << Uint32(8))).to(Int32)
            if fmt == "fp8":
                rsc[i] = mRdS[slot, head, p]
        if fmt == "nvfp4":
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

    def _mma_b_frags(self, sC, bfr, tq):
        """B fragments of the mma path (once per CTA): C' = C·2^s in fp16, k permuted so that
        lane (g, tq) of step i = 2w + hh holds, for its state chunk tq (codes 32tq .. 32tq+31)
        and word w, the pairs of :func:`_e2m1x8_to_f16x2` (codes c, c+4):
        ``bfr[2i] = (C'[n0], C'[n0+4])``, ``bfr[2i+1] = (C'[n0+1], C'[n0+5])``, n0 = 32tq+8w+2hh,
        in column g only where those codes are in block g = 2tq + (w >= 2), else zeros (column c
        of D is block c's partial: :func:`_mma_nvfp4_blocks`).
        fp16 acts: s = 0 (C' = C exactly). bf16 acts: s = 14 - floor(log2 max|C|) (clamped to
        +-100), an exact power-of-two scaling into fp16's range; elements more than 2^28 below
        max|C| lose bits in fp16's subnormal range (relative error of the dot < N·2^-39).
        Returns the fp32 factor 2^(14 - s) that undoes s and the 2^-14 of the A operand."""
        s_exp = Int32(0)
        if const_expr(dtype_name(self.act_dtype) == "bfloat16"):
            lane = cute.arch.lane_idx()
            a = Float32(0.0)
            for m in range(self.N // 32):
                a = lp.fmax_nq(a, lp.bits_f32(lp.f32_bits(sC[lane + 32 * m]) & Uint32(0x7FFFFFFF)))
            s_exp = _fp16_range_exponent(a)
        cs = _pow2_f32(s_exp)                                               # 2^s
        g = (cute.arch.lane_idx() // 4).to(Int32)
        for i in range(8):
            n0 = 32 * tq + 8 * (i // 2) + 2 * (i % 2)
            mine = g == 2 * tq + (1 if i >= 4 else 0)
            bfr[2 * i] = _sel_i32(mine, lp.pack_f16x2(sC[n0] * cs, sC[n0 + 4] * cs), 0)
            bfr[2 * i + 1] = _sel_i32(mine, lp.pack_f16x2(sC[n0 + 1] * cs, sC[n0 + 5] * cs), 0)
        return lp.bits_f32(Uint32(Int32(14 + 127) - s_exp) << Uint32(23))  # 2^(14 - s)

    def _mma_rows(self, raw, bsc, bfr, dm):
        """nvfp4 state dots on the tensor cores: ``dm[i]`` = this lane's part (its chunk's two
        blocks) of sum_n e2m1[p_i, n]·s_blk[p_i, n]·C'[n]·2^-14 for the thread's rows p_i (RPT of
        them; the row reduction over its TN = 4 lanes completes it). Rows (2m, 2m+1) of the
        thread are rows g, g+8 of one m16n8k16 tile (lane = 4g + tq owns 16-byte chunk tq of
        each, as loaded by :meth:`_issue_read`); 8 k-steps cover N = 128. A = e2m1·2^-14 (fp16
        bit trick: exact), so every product A·C' is exact and the block sums fp32 (tensor-core
        accumulation); each block sum is then scaled by its s_blk in fp32
        (:func:`_mma_nvfp4_blocks`: no per-element scale multiply)."""
        RPT = self.cfg.rpt
        for m in range(-(-RPT // 2)):
            part = _mma_nvfp4_blocks(raw, bsc, bfr, RPT, m)
            dm[2 * m] = part[0]
            if 2 * m + 1 < RPT:
                dm[2 * m + 1] = part[1]

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

    def _sr_key_words(self) -> int:
        """Int32 words of ``sKey``: two per round, rounded up to whole 16-byte loads (two rounds'
        keys each, :meth:`_philox_smem`: an odd round count reads one pair past its keys)."""
        return 4 * ((self.philox_rounds + 1) // 2)

    @cute.jit
    def _sr_key_setup(self, mSeed: Optional[cute.Tensor], sKey: cute.Tensor, tidx: Int32):
        """SR pairs: the Philox key schedule into ``sKey`` once per CTA (round r's keys by thread
        r; visible after the flush's first barrier), for :meth:`_philox_smem`."""
        if const_expr(self.any_sr):
            if tidx < self.philox_rounds:
                k0, k1 = lp.sr_key_from_seed(mSeed[0])
                for r in cutlass.range_constexpr(1, self.philox_rounds):
                    if tidx == r:
                        k0 = k0 + Uint32((r * lp.PHILOX_W0) & 0xFFFFFFFF)
                        k1 = k1 + Uint32((r * lp.PHILOX_W1) & 0xFFFFFFFF)
                sKey[2 * tidx] = Int32(k0)
                sKey[2 * tidx + 1] = Int32(k1)

    def _philox_smem(self, c0, c1, c2, c3, sKey, dep):
        """``lowprec.philox4x32`` with the key schedule (``k0 + r·W0``, ``k1 + r·W1``) read from
        smem (``sKey[2r]``, ``sKey[2r+1]``, filled once per CTA) at an address that depends on
        ``dep``: the round keys (20 at 10 rounds) are neither recomputed per call nor hoisted
        into registers."""
        c0, c1, c2, c3 = Uint32(c0), Uint32(c1), Uint32(c2), Uint32(c3)
        base = _dep_i32(Int32(0), dep)
        kv = cute.make_rmem_tensor((4,), Int32)
        for r in range(self.philox_rounds):
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
        if const_expr(self.row_split > 1 and sr):
            # the SR counter names the real head and element (a virtual head's rows are the
            # real head's rows part * P / k ..)
            qc = qc + (head % self.row_split) * (self.P * self.cfg.cb)
            head = head // self.row_split
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
        f16_sr = fmt == "fp16" and sr
        fast = None
        if f16_sr:                  # the chunk in the fp16 normal range: lp.pack_f16_sr's 2 ops
            fast = lp.f16_sr_chunk_fast([acc[j] for j in range(CHUNK)])
        for jq in range(4):
            w = [None] * 4
            ctr = quad0 + Uint32(jq)
            if tok is not None:     # quad by quad: keeps ptxas from overlapping all 16 elements
                ctr = Uint32(_dep_i32(Int32(ctr), tok))
            if sr:
                w = self._philox_smem(ctr, Uint32(head), Uint32(slot), w3, sKey, Int32(ctr))
            if fast is not None:
                xs = cute.make_rmem_tensor((4,), Float32)
                ws = cute.make_rmem_tensor((4,), Uint32)
                for i in range(4):
                    xs[i] = acc[4 * jq + i] if tok is None else _dep_f32(acc[4 * jq + i], tok)
                    ws[i] = w[i]
                lp.pack_f16_sr(xs, ws, cute.local_tile(rW, (2,), (jq,)), fast, 4)
                tok = rW[2 * jq + 1]
                continue
            q = []
            for i in range(4):
                x = acc[4 * jq + i]
                if tok is not None:
                    x = _dep_f32(x, tok)
                if fmt == "fp16" or fmt == "bf16":
                    if f16_sr:
                        q.append(lp.round_f16_sr(x, w[i]))
                    else:
                        q.append(lp.round_to_grid(x, fmt, sr, w[i]))
                elif fmt == "fp8":
                    q.append(lp.fp8_quantize(x, scale, sr, w[i]))
                else:
                    q.append(_e2m1_grid_code(lp.nvfp4_quantize(x, d, sr, w[i])))
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
        if const_expr(self.cfg.njb == 1):
            self._fold_cc(sWX, sB, acc, None, h, r, r, cbi)
        else:
            for e in cutlass.range_constexpr(CHUNK):
                acc[e] = Float32(0.0)
            bj = cute.make_rmem_tensor((CHUNK,), Float32)
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
        rW = cute.make_rmem_tensor((CHUNK * _BITS[fmt] // 32,), Int32)
        sw = self._hi_load(mHi, mHiS, rW, slot, head, r, cbi)
        self._hi_decode_add(acc, rW, sw, hig, gf)

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

    @cute.jit
    def _prefetch_pre_wait(self, mX: cute.Tensor, mDt: cute.Tensor, mB: cute.Tensor,
                           mC: cute.Tensor, mZ: Optional[cute.Tensor],
                           mIdx: Optional[cute.Tensor], mHi: cute.Tensor,
                           mLo: Optional[cute.Tensor], mLoS: Optional[cute.Tensor],
                           mLoG: Optional[cute.Tensor], mXBuf: cute.Tensor, mBBuf: cute.Tensor,
                           mDtBuf: cute.Tensor, mDABuf: cute.Tensor, mWPos: cute.Tensor,
                           mOrig: cute.Tensor, mFlushCnt: cute.Tensor, mArrive: cute.Tensor):
        """``pf_early``: before ``griddepcontrol.wait``, one lane per warp issues L2 prefetches
        of what the CTA's dependent load chain reads after it -- warp 0 the read copy of its
        heads (hi for shared pairs: what a non-flush row reads), warp 1 its scales and the
        cursors, warp 2 the ring entries (x_j, B_j, dt'_j, A·dt'_j), warp 3 the row's inputs.
        The slot comes from an L2-only load (the previous grid may still write it); it only
        places these hints, the kernel reads it again after the wait. Pad rows: nothing."""
        tidx, _, _ = cute.arch.thread_idx()
        hc, row, _ = cute.arch.block_idx()
        HPC, P, N, R = self.hpc, self.P, self.N, self.R
        head0 = hc * HPC
        grp = head0 // self.hpg
        slot = common.hinted_slot(mIdx, row, self.has_idx)
        if tidx % 32 == 0:
            warp = tidx // 32
            if slot >= 0 and slot < mWPos.shape[0]:
                fmt = self.read_fmt
                mRd = mLo if const_expr(self.split) else mHi
                if warp == 0:
                    common.prefetch_l2_span(mRd[slot, head0, None, None].iterator,
                                            HPC * P * N * common.FMT_BITS[fmt] // 8)
                if warp == 1:
                    if const_expr(self.split and fmt == "nvfp4"):
                        common.prefetch_l2_span(mLoS[slot, head0, None, None].iterator,
                                                HPC * P * (N // 16))
                        common.prefetch_l2(mLoG.iterator + cute.crd2idx((slot, head0),
                                                                       mLoG.layout))
                    if const_expr(self.split and fmt == "fp8"):
                        common.prefetch_l2_span(mLoS[slot, head0, None].iterator, HPC * P * 4)
                    common.prefetch_row_cursors(slot, mWPos, mOrig, mFlushCnt, mArrive)
                if warp == 2:
                    ab = self.act_dtype.width // 8
                    # (row split: the part's P / k rows of every ring entry, P_full apart)
                    xspan = HPC * R * P * ab
                    if const_expr(self.row_split > 1):
                        xspan = ((R - 1) * self.P_full + P) * ab
                    common.prefetch_l2_span(mXBuf[slot, head0, None, None].iterator, xspan)
                    common.prefetch_l2_span(mBBuf[slot, grp, None, None].iterator, R * N * ab)
                    common.prefetch_l2_span(mDtBuf[slot, head0, None].iterator, HPC * R * 4)
                    common.prefetch_l2_span(mDABuf[slot, head0, None].iterator, HPC * R * 4)
            if warp == 3:
                ab = self.act_dtype.width // 8
                common.prefetch_l2_span(mX[row, head0, None].iterator, HPC * P * ab)
                if const_expr(self.has_z):
                    common.prefetch_l2_span(mZ[row, head0, None].iterator, HPC * P * ab)
                common.prefetch_l2_span(mB[row, grp, None].iterator, N * ab)
                common.prefetch_l2_span(mC[row, grp, None].iterator, N * ab)
                common.prefetch_l2(mDt.iterator + cute.crd2idx((row, head0), mDt.layout))

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
        mArrive: cute.Tensor, mSeed: Optional[cute.Tensor], mOrder: Optional[cute.Tensor],
        pad_slot_id: Int32,
    ):
        if const_expr(self.pf_early):
            self._prefetch_pre_wait(mX, mDt, mB, mC, mZ, mIdx, mHi, mLo, mLoS, mLoG, mXBuf, mBBuf,
                                    mDtBuf, mDABuf, mWPos, mOrig, mFlushCnt, mArrive)
        common.pdl_prologue(self.pdl)
        tidx, _, _ = cute.arch.thread_idx()
        hc, gpos, _ = cute.arch.block_idx()
        if const_expr(self.persistent):
            # the split's flush launch: a persistent grid (CTAs per row, P) walks the order's
            # leading flush rows -- positions y, y + P, ... up to the first one that does not
            # flush (the flush-first order puts every flushing row first)
            npos = cute.arch.grid_dim()[1]
            go = Boolean(True)
            for it in cutlass.range((mX.shape[0] - gpos + npos - Int32(1)) // npos, unroll=1):
                if go:
                    cute.arch.barrier()           # the previous row's shared memory is free
                    go = self._row(mX, mDt, mA, mB, mC, mD, mZ, mDtBias, mIdx, mOut, mHi, mHiS,
                                   mHiG, mLo, mLoS, mLoG, mXBuf, mBBuf, mDtBuf, mDABuf, mWPos,
                                   mOrig, mFlushCnt, mPend, mArrive, mSeed, mOrder, pad_slot_id,
                                   tidx, hc, gpos + it * npos)
        else:
            self._row(mX, mDt, mA, mB, mC, mD, mZ, mDtBias, mIdx, mOut, mHi, mHiS, mHiG, mLo,
                      mLoS, mLoG, mXBuf, mBBuf, mDtBuf, mDABuf, mWPos, mOrig, mFlushCnt, mPend,
                      mArrive, mSeed, mOrder, pad_slot_id, tidx, hc, gpos)

    @cute.jit
    def _row(
        self,
        mX: cute.Tensor, mDt: cute.Tensor, mA: cute.Tensor, mB: cute.Tensor, mC: cute.Tensor,
        mD: Optional[cute.Tensor], mZ: Optional[cute.Tensor], mDtBias: Optional[cute.Tensor],
        mIdx: Optional[cute.Tensor], mOut: cute.Tensor,
        mHi: cute.Tensor, mHiS: Optional[cute.Tensor], mHiG: Optional[cute.Tensor],
        mLo: Optional[cute.Tensor], mLoS: Optional[cute.Tensor], mLoG: Optional[cute.Tensor],
        mXBuf: cute.Tensor, mBBuf: cute.Tensor, mDtBuf: cute.Tensor, mDABuf: cute.Tensor,
        mWPos: cute.Tensor, mOrig: cute.Tensor, mFlushCnt: cute.Tensor, mPend: cute.Tensor,
        mArrive: cute.Tensor, mSeed: Optional[cute.Tensor], mOrder: Optional[cute.Tensor],
        pad_slot_id: Int32, tidx: Int32, hc: Int32, gpos: Int32,
    ):
        """One grid position of the step (a row and ``heads_per_cta`` heads): the CTA's whole
        work. ``gpos``: the position in the grid (the order's, when there is one; the split's
        flush launch walks several). Returns whether the row is this launch's (``rows`` = 2:
        a valid flush row)."""
        cfg = self.cfg
        H, P, N, L, R = self.H, self.P, self.N, self.L, self.R
        HPC, NT = self.hpc, cfg.nt
        LC = max(L, 1)
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
        sRed = smem.allocate_tensor(Float32, cute.make_layout(NT // 32), byte_alignment=16)
        sKey = smem.allocate_tensor(Int32, cute.make_layout(self._sr_key_words()),
                                    byte_alignment=16)
        sCur = smem.allocate_tensor(Int32, cute.make_layout(4), byte_alignment=16)
        # one union buffer: the flush buffers, or the non-flush staging (a CTA is either)
        uview = self._union_buffer(smem)
        sB, sWX, sS, sHW, sHS, sXR, sSlab = self._flush_views(uview)
        sSt = sSc = sGs = sDD = sXB = sXZ = None
        if const_expr(self.snf):
            WPR = N // 8
            NB = N // 16
            LB = max(L - 1, 1)
            sSt = uview("st", Int32, cute.make_layout((HPC, P, WPR), stride=(P * WPR, WPR, 1)))
            sSc = uview("sc", Uint8, cute.make_layout((HPC, P, NB), stride=(P * NB, NB, 1)))
            sGs = uview("gs", Float32, cute.make_layout(HPC))
            sDD = uview("dd", Float32, cute.make_layout(HPC))
            sXB = uview("xb", self.act_dtype, cute.make_layout((HPC, LB, P), stride=(LB * P, P, 1)))
            NZ = self.nz
            sXZ = uview("xz", Float32, cute.make_layout((HPC, NZ, P), stride=(NZ * P, P, 1)))

        pc0 = pg0 = None
        if const_expr(self.prof):
            pg0 = common.sreg64("globaltimer")
            pc0 = common.sreg64("clock64")
        row, slot = self._grid_row_slot(mIdx, mOrder, gpos)
        ocur = None
        if const_expr(self.order_cursors):
            ocur = (mOrder[2, gpos], mOrder[3, gpos], mOrder[4, gpos])
        # the row's slot-independent inputs (C, B_cur, dt) are loaded now, in the shadow of the
        # slot -> cursor load chain
        grp0 = (hc * HPC) // self.hpg
        NCL = -(-N // NT)
        c_pre = cute.make_rmem_tensor((NCL,), Float32)
        for i in cutlass.range_constexpr(NCL):
            n = tidx + i * NT
            if const_expr(N % NT == 0):
                c_pre[i] = mC[row, grp0, n].to(Float32)
            else:
                if n < N:
                    c_pre[i] = mC[row, grp0, n].to(Float32)
        NBL = -(-N // 32)
        b_pre = cute.make_rmem_tensor((NBL,), Float32)
        for m in cutlass.range_constexpr(NBL):
            n = lane + 32 * m
            if const_expr(N % 32 == 0):
                b_pre[m] = mB[row, grp0, n].to(Float32)
            else:
                b_pre[m] = mB[row, grp0, cutlass.min(n, N - 1)].to(Float32)
        NW = NT // 32
        NDT = -(-HPC // NW)
        dt_pre = cute.make_rmem_tensor((NDT,), Float32)
        for i in cutlass.range_constexpr(NDT):
            k = warp + NW * i
            if k < HPC:
                dt_pre[i] = mDt[row, hc * HPC + k].to(Float32)
        valid = self._slot_valid(slot, mWPos.shape[0], pad_slot_id)
        if const_expr(self.rows):
            # a split launch's half: the other half's rows end here (the order entry's write
            # position, loaded beside its row and slot)
            valid = valid & self._owns_row(ocur[0])
        res = Boolean(False)

        if valid:
            # ------------------------------------------------------------ preamble
            # ring_phys: the ring entries at their physical index, before the cursors (their
            # origin) are known
            NCBP = -(-R // NW)
            ph_va = cute.make_rmem_tensor((NDT,), Float32)
            ph_vd = cute.make_rmem_tensor((NDT,), Float32)
            ph_bb = cute.make_rmem_tensor((NCBP, NBL), Float32)
            if const_expr(self.ring_phys):
                for i in cutlass.range_constexpr(NDT):
                    k = warp + NW * i
                    if k < HPC:
                        pj = cutlass.min(lane, R - 1)
                        ph_va[i] = mDABuf[slot, hc * HPC + k, pj]
                        ph_vd[i] = mDtBuf[slot, hc * HPC + k, pj]
                if const_expr(L > 1):
                    for i in cutlass.range_constexpr(NCBP):
                        pe0 = cutlass.min(warp + NW * i, R - 1)
                        for m in cutlass.range_constexpr(NBL):
                            pn0 = lane + 32 * m
                            if const_expr(N % 32 != 0):
                                pn0 = cutlass.min(pn0, N - 1)
                            ph_bb[i, m] = mBBuf[slot, grp0, pe0, pn0].to(Float32)
            h, origin, gen, old = self._read_cursors(sCur, mWPos, mOrig, mFlushCnt, mArrive,
                                                     slot, tidx, ocur)
            h = cutlass.min(h, Int32(cfg.hm))   # any valid cache state is inside
            pcs = [pc0]
            if const_expr(self.prof):
                pcs.append(common.sreg64("clock64"))   # 1: cursors known (after a barrier)
            flush = h >= Int32(L)
            if const_expr(self.rows == 1):
                flush = Boolean(False)
            elif const_expr(self.rows == 2):
                flush = Boolean(True)
                res = Boolean(True)
            nb = h                       # buffered entries the output uses
            origin2 = origin             # ring origin after this step
            if flush:
                nb = Int32(0)
                origin2 = self._phys(origin, h)
            phys_cur = self._phys(origin2, nb)
            head0 = hc * HPC
            group = head0 // self.hpg

            # the preamble's slot-dependent inputs go out together, right after the cursors:
            # the decay-scan entries (dA, dt' of every buffered entry, one warp per head) and,
            # for non-flush rows, the B_j of the cb_j dots (one warp per entry)
            NSEG = cfg.nseg
            pre_va = cute.make_rmem_tensor((NDT, NSEG), Float32)
            pre_vd = cute.make_rmem_tensor((NDT, NSEG), Float32)
            for i in cutlass.range_constexpr(NDT):
                k = warp + NW * i
                if k < HPC:
                    for s_ in cutlass.range_constexpr(NSEG):
                        jc = cutlass.min(lane + 32 * s_, R - 1)
                        ph = self._phys(origin, jc)
                        if const_expr(self.ring_phys):
                            # (NSEG = 1: lane ph holds physical entry ph)
                            pre_va[i, s_] = cute.arch.shuffle_sync(ph_va[i], ph)
                            pre_vd[i, s_] = cute.arch.shuffle_sync(ph_vd[i], ph)
                        else:
                            pre_va[i, s_] = mDABuf[slot, head0 + k, ph]
                            pre_vd[i, s_] = mDtBuf[slot, head0 + k, ph]
            NCB = -(-(L - 1) // NW) if L > 1 else 0
            PREB = NCB * NBL <= 16 and not self.ring_phys   # registers: at most 16 per lane
            pre_bb = cute.make_rmem_tensor((max(NCB, 1), NBL), Float32)
            if const_expr(PREB and NCB > 0):
                if not flush:
                    for i in cutlass.range_constexpr(NCB):
                        ec = cutlass.min(warp + NW * i, L - 1)
                        ph = self._phys(origin, ec)
                        for m in cutlass.range_constexpr(NBL):
                            nn = lane + 32 * m
                            if const_expr(N % 32 != 0):
                                nn = cutlass.min(nn, N - 1)
                            pre_bb[i, m] = mBBuf[slot, group, ph, nn].to(Float32)

            # non-flush rows: the first head's read-copy loads go out now, so that the preamble's
            # dependent loads and barriers hide their latency (registers: RPT*CN*4 words)
            TN = cfg.tn
            raw_l = cute.make_ordered_layout((cfg.rpt, cfg.cn, 4), order=(2, 1, 0))
            raw = cute.make_rmem_tensor(raw_l, Int32)
            rsc = cute.make_rmem_tensor((cfg.rpt,), Float32)
            bsc = cute.make_rmem_tensor((cfg.rpt, cfg.cn), Int32)
            gsc = cute.make_rmem_tensor((1,), Float32)
            NXZ = -(-(HPC * self.nz * P) // NT)
            xzr = cute.make_rmem_tensor((NXZ + 1,), Float32)
            if not flush:
                if const_expr(self.snf):
                    self._snf_issue(mLo if const_expr(self.split) else mHi,
                                    mLoS if const_expr(self.split) else mHiS,
                                    mLoG if const_expr(self.split) else mHiG,
                                    mXBuf, mX, mZ, mD, sSt, sSc, sGs, sXB, xzr, slot, row, head0,
                                    origin, h, tidx)
                elif const_expr(self.early):
                    self._issue_read(mLo if const_expr(self.split) else mHi,
                                     mLoS if const_expr(self.split) else mHiS,
                                     mLoG if const_expr(self.split) else mHiG,
                                     raw, rsc, bsc, gsc, slot, head0, tidx // TN, tidx % TN)

            for i in cutlass.range_constexpr(NCL):
                n = tidx + i * NT
                if n < N:
                    sC[n] = c_pre[i]
            cute.arch.barrier()
            if const_expr(self.prof):
                pcs.append(common.sreg64("clock64"))   # 2: preamble loads issued, C in smem

            # cb_cur (every warp computes it; warp 0 stores) and the buffered cb_j (non-flush)
            cbc = Float32(0.0)
            for m in cutlass.range_constexpr(NBL):
                n = lane + 32 * m
                if const_expr(N % 32 == 0):
                    cbc = cbc + b_pre[m] * sC[n]
                else:
                    if n < N:
                        cbc = cbc + b_pre[m] * sC[n]
            cbc = cute.arch.warp_reduction(cbc, operator.add)
            if tidx == 0:
                sCB[LC] = cbc
            if const_expr(self.ring_phys and L > 1):
                if not flush:
                    # the dot of every physical entry, stored at its logical index
                    for i in cutlass.range_constexpr(NCBP):
                        pe1 = warp + NW * i
                        pacc = self._c_dot(sC, lane, ph_bb, i)
                        pl1 = pe1 - origin
                        pl1 = _sel_i32(pl1 < Int32(0), pl1 + Int32(R), pl1)
                        if lane == 0:
                            if pe1 < Int32(R) and pl1 < nb:
                                sCB[pl1] = pacc
            elif not flush:
                for i in cutlass.range_constexpr(NCB):
                    e = warp + NW * i
                    ec = cutlass.min(e, L - 1)
                    if const_expr(PREB):
                        acc = self._c_dot(sC, lane, pre_bb, i)
                    else:                        # (B_j loaded here: the preamble did not)
                        acc = self._c_dot(sC, lane, gB=(mBBuf, slot, group,
                                                        self._phys(origin, ec)))
                    if lane == 0:
                        if e < nb:
                            sCB[ec] = acc
            cute.arch.barrier()
            if const_expr(self.prof):
                pcs.append(common.sreg64("clock64"))   # 3: cb dots (ring B entries landed)

            # per head: dt', scan of the log decays, coefficients (one warp per head)
            for i in cutlass.range_constexpr(NDT):
                k = warp + NW * i
                if k < HPC:
                    head = head0 + k
                    dtv = self._dt_prime(dt_pre[i], mDtBias, head)
                    dA_cur = mA[head].to(Float32) * dtv
                    lam = cute.make_rmem_tensor((cfg.nseg,), Float32)
                    dts = cute.make_rmem_tensor((cfg.nseg,), Float32)
                    carry = Float32(0.0)
                    for s in cutlass.range_constexpr(cfg.nseg):
                        j = lane + 32 * s
                        va = pre_va[i, s]
                        vd = pre_vd[i, s]
                        cur = lp.sel_f32(flush, Float32(0.0), dA_cur)
                        v = lp.sel_f32(j < h, va, lp.sel_f32(j == h, cur, Float32(0.0)))
                        dts[s] = lp.sel_f32(j < h, vd, Float32(0.0))
                        v = _warp_inclusive_scan(v, lane) + carry
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
            if const_expr(self.snf):
                if not flush:
                    self._snf_finish(sXZ, sDD, xzr, tidx)
            cute.arch.barrier()
            if const_expr(self.prof):
                pcs.append(common.sreg64("clock64"))   # 4: decay scan + coefficients

            if const_expr(self.rows == 1):
                self._nonflush(mX, mZ, mD, mOut, mHi, mHiS, mHiG, mLo, mLoS, mLoG, mXBuf,
                               sC, sCoef, sScal, raw, rsc, bsc, gsc, sSt, sSc, sGs, sDD, sXB, sXZ,
                               row, slot, head0, origin, h, tidx)
            elif const_expr(self.rows == 2):
                self._flush_rows(mX, mZ, mD, mOut, mHi, mHiS, mHiG, mLo, mLoS, mLoG, mXBuf,
                                 mBBuf, mSeed, sC, sB, sWX, sS, sHW, sHS, sXR, sCoef, sScal, sRed,
                                 sKey, sSlab, row, slot, head0, group, origin, h, gen, tidx)
            else:
                if not flush:
                    self._nonflush(mX, mZ, mD, mOut, mHi, mHiS, mHiG, mLo, mLoS, mLoG, mXBuf,
                                   sC, sCoef, sScal, raw, rsc, bsc, gsc, sSt, sSc, sGs, sDD, sXB,
                                   sXZ, row, slot, head0, origin, h, tidx)
                else:
                    self._flush_rows(mX, mZ, mD, mOut, mHi, mHiS, mHiG, mLo, mLoS, mLoG, mXBuf,
                                     mBBuf, mSeed, sC, sB, sWX, sS, sHW, sHS, sXR, sCoef, sScal,
                                     sRed, sKey, sSlab, row, slot, head0, group, origin, h, gen,
                                     tidx)

            if const_expr(self.prof):
                pcs.append(common.sreg64("clock64"))   # 5: non-flush read + dot / flush done
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
            # the token is committed: write_pos = nb + 1, nothing pending
            if const_expr(self.prof):
                pcs.append(common.sreg64("clock64"))   # 6: append stores issued
            self._publish_cursors(mWPos, mOrig, mFlushCnt, mPend, mArrive, slot, nb, 1, 0,
                                  origin2, flush, gen, tidx, old, sCur)
            if const_expr(self.prof):
                pcs.append(common.sreg64("clock64"))   # 7: cursors published (end)
                pg1 = common.sreg64("globaltimer")
                cute.arch.barrier()                     # every output store of the CTA is out
                if tidx == 0:
                    common.prof_store(cute.recast_tensor(mOut[row, head0, None], Int32),
                                      _sel_i32(flush, Int32(1), Int32(0)), [pg0, pg1] + pcs)
        return res

    def _owns_row(self, h):
        """Whether this launch runs a row at write position ``h`` (:func:`common.owns_row`)."""
        return common.owns_row(self.rows, h, self.L)

    @cute.jit
    def _flush_rows(self, mX, mZ, mD, mOut, mHi, mHiS, mHiG, mLo, mLoS, mLoG, mXBuf, mBBuf,
                    mSeed, sC, sB, sWX, sS, sHW, sHS, sXR, sCoef, sScal, sRed, sKey, sSlab,
                    row, slot, head0, group, origin, h, gen, tidx):
        """A flush row's fold, encode and output: the v2 flush (``flush_impl`` 2) or v1."""
        if const_expr(self.flush_impl == 2):
            self._flush2(mX, mZ, mD, mOut, mHi, mHiS, mHiG, mLo, mLoS, mLoG, mXBuf,
                         mBBuf, mSeed, sC, sB, sWX, sS, sHW, sHS, sXR, sCoef, sScal, sRed,
                         sKey, row, slot, head0, group, origin, h, gen, tidx,
                         sSlab=sSlab)
        else:
            self._flush(mX, mZ, mD, mOut, mHi, mHiS, mHiG, mLo, mLoS, mLoG, mXBuf,
                        mBBuf, mSeed, sC, sB, sWX, sCoef, sScal, sRed, sKey, row, slot,
                        head0, group, origin, h, gen, tidx)

    # ---------------------------------------------------------------- non-flush rows
    @cute.jit
    def _snf_issue(self, mRd: cute.Tensor, mRdS: cute.Tensor, mRdG: cute.Tensor,
                   mXBuf: cute.Tensor, mX: cute.Tensor, mZ: Optional[cute.Tensor],
                   mD: Optional[cute.Tensor], sSt: cute.Tensor, sSc: cute.Tensor,
                   sGs: cute.Tensor, sXB: cute.Tensor, xzr: cute.Tensor, slot: Int32, row: Int32,
                   head0: Int32, origin: Int32, h: Int32, tidx: Int32):
        """Staged non-flush read set of every head of the CTA, issued right after the cursors:
        cp.async (one group) of the state rows (16 B), block-scale rows (N/16 B), global scales
        (4 B) and the x_j rows j < h (16 B); x, z and D with plain loads into ``xzr`` (stored to
        smem by :meth:`_snf_finish`: their tensors may be unaligned views). Nothing waits here."""
        HPC, P, N, L, NT = self.hpc, self.P, self.N, self.L, self.cfg.nt
        CPR = N // 32                    # 16-byte chunks per state row
        NB = N // 16                     # scale bytes per row
        a16 = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL),
                                  Int32, num_bits_per_copy=128)
        asc = cute.make_copy_atom(cpasync.CopyG2SOp(), Uint8, num_bits_per_copy=8 * NB)
        ags = cute.make_copy_atom(cpasync.CopyG2SOp(), Float32, num_bits_per_copy=32)
        tot = HPC * P * CPR
        for i in cutlass.range_constexpr(-(-tot // NT)):
            c = tidx + NT * i
            k = c // (P * CPR)
            p = (c // CPR) % P
            q = c % CPR
            if const_expr(tot % NT == 0):
                cute.copy(a16, cute.local_tile(mRd[slot, head0 + k, p, None], (4,), (q,)),
                          cute.local_tile(sSt[k, p, None], (4,), (q,)))
            else:
                if c < tot:
                    cute.copy(a16, cute.local_tile(mRd[slot, head0 + k, p, None], (4,), (q,)),
                              cute.local_tile(sSt[k, p, None], (4,), (q,)))
        for i in cutlass.range_constexpr(-(-(HPC * P) // NT)):
            c = tidx + NT * i
            if c < HPC * P:
                k = c // P
                p = c % P
                cute.copy(asc, mRdS[slot, head0 + k, p, None], sSc[k, p, None])
        if tidx < HPC:
            cute.copy(ags, cute.local_tile(mRdG[slot, None], (1,), (head0 + tidx,)),
                      cute.local_tile(sGs, (1,), (tidx,)))
        self._cpa_xring_heads(mXBuf, sXB, slot, head0, origin, h, tidx, L - 1)
        cute.arch.cp_async_commit_group()
        NZ = self.nz
        for i in cutlass.range_constexpr(-(-(HPC * NZ * P) // NT)):
            e = tidx + NT * i
            if e < HPC * NZ * P:
                k = e // (NZ * P)
                w = (e // P) % NZ
                p = e % P
                if const_expr(self.has_z):
                    if w == 0:
                        xzr[i] = mX[row, head0 + k, p].to(Float32)
                    else:
                        xzr[i] = mZ[row, head0 + k, p].to(Float32)
                else:
                    xzr[i] = mX[row, head0 + k, p].to(Float32)
        if const_expr(self.has_D):
            if tidx < HPC:
                xzr[xzr.shape[0] - 1] = mD[head0 + tidx].to(Float32)

    def _snf_read(self, sSt, sSc, sGs, raw, bsc, gsc, k, rp, lir):
        """Head k's read set from the staging buffers (the layout of :meth:`_issue_read`)."""
        cfg, P = self.cfg, self.P
        for i in range(cfg.rpt):
            p = rp + cfg.rpp * i
            if P % cfg.rpp != 0:
                p = cutlass.min(p, P - 1)
            for cc in range(cfg.cn):
                c = lir + cfg.tn * cc
                cute.autovec_copy(cute.local_tile(sSt[k, p, None], (4,), (c,)), raw[i, cc, None])
                b0 = Uint32(sSc[k, p, 2 * c])
                b1 = Uint32(sSc[k, p, 2 * c + 1])
                bsc[i, cc] = (b0 | (b1 << Uint32(8))).to(Int32)
        gsc[0] = sGs[k]

    @cute.jit
    def _snf_finish(self, sXZ: cute.Tensor, sDD: cute.Tensor, xzr: cute.Tensor, tidx: Int32):
        """x, z, D (loaded by :meth:`_snf_issue`) to smem; wait for this thread's cp.async group
        (the barrier that follows makes every thread's copies visible)."""
        HPC, P, NT = self.hpc, self.P, self.cfg.nt
        NZ = self.nz
        for i in cutlass.range_constexpr(-(-(HPC * NZ * P) // NT)):
            e = tidx + NT * i
            if e < HPC * NZ * P:
                k = e // (NZ * P)
                w = (e // P) % NZ
                p = e % P
                sXZ[k, w, p] = xzr[i]
        if const_expr(self.has_D):
            if tidx < HPC:
                sDD[tidx] = xzr[xzr.shape[0] - 1]
        cute.arch.cp_async_wait_group(0)

    @cute.jit
    def _nonflush(self, mX: cute.Tensor, mZ: Optional[cute.Tensor], mD: Optional[cute.Tensor],
                  mOut: cute.Tensor, mHi: cute.Tensor, mHiS: Optional[cute.Tensor],
                  mHiG: Optional[cute.Tensor], mLo: Optional[cute.Tensor],
                  mLoS: Optional[cute.Tensor], mLoG: Optional[cute.Tensor], mXBuf: cute.Tensor,
                  sC: cute.Tensor, sCoef: cute.Tensor, sScal: cute.Tensor, raw: cute.Tensor,
                  rsc: cute.Tensor, bsc: cute.Tensor, gsc: cute.Tensor,
                  sSt: Optional[cute.Tensor], sSc: Optional[cute.Tensor],
                  sGs: Optional[cute.Tensor], sDD: Optional[cute.Tensor],
                  sXB: Optional[cute.Tensor], sXZ: Optional[cute.Tensor], row: Int32,
                  slot: Int32, head0: Int32, origin: Int32, h: Int32, tidx: Int32):
        """Non-flush rows. ``raw``/``rsc``/``bsc``/``gsc``: the first head's read-copy load set,
        issued by the caller before the preamble; with staging (``self.snf``) every head's read
        set, x_j, x, z and D are in smem instead (sSt ... sXZ)."""
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
        bfr = cute.make_rmem_tensor((16,), Int32)
        cpow = Float32(1.0)               # mma path: 2^(14 - s), see _mma_b_frags
        if const_expr(self.mma):
            cpow = self._mma_b_frags(sC, bfr, lir)
        else:
            for cc in cutlass.range_constexpr(CN):
                for e in cutlass.range_constexpr(VEC):
                    creg[cc * VEC + e] = sC[(lir + TN * cc) * VEC + e]
        # per-head load set (state words, fp8 row scales / nvfp4 block-scale byte pairs, global
        # scale): head 0's is in raw/rsc/bsc/gsc already
        raw_l = cute.make_ordered_layout((RPT, CN, 4), order=(2, 1, 0))
        pf = self.prefetch
        if const_expr(pf):
            raw2 = cute.make_rmem_tensor(raw_l, Int32)
            rsc2 = cute.make_rmem_tensor((RPT,), Float32)
            bsc2 = cute.make_rmem_tensor((RPT, CN), Int32)
            gsc2 = cute.make_rmem_tensor((1,), Float32)
        # the row this lane ends up storing after the transposed reduction (static per lane)
        myrow, mywr = _rows_lane_row(RPT, TN, lir)
        my_store = mywr & (myrow < Int32(RPT))
        if const_expr(P % RPP != 0):
            my_store = my_store & (rp + RPP * myrow < Int32(P))
        for k in cutlass.range(self.hpc, unroll=1):
            head = _opaque_i32(head0 + k)
            gam = sScal[k, 0]
            ccur = sScal[k, 1]
            # ---- every state load of the head (or of the next head, prefetched) first
            if const_expr(self.snf):
                self._snf_read(sSt, sSc, sGs, raw, bsc, gsc, k, rp, lir)
            elif const_expr(pf):
                if k + 1 < self.hpc:
                    nxt = _opaque_i32(head0 + k + 1)
                    self._issue_read(mRd, mRdS, mRdG, raw2, rsc2, bsc2, gsc2, slot, nxt, rp, lir)
            else:
                if const_expr(self.early):
                    if k > 0:
                        self._issue_read(mRd, mRdS, mRdG, raw, rsc, bsc, gsc, slot, head, rp, lir)
                else:
                    self._issue_read(mRd, mRdS, mRdG, raw, rsc, bsc, gsc, slot, head, rp, lir)
            sblk = cute.make_rmem_tensor((RPT, CN, 2), Float32)
            hsc = gam
            if const_expr(self.mma):
                hsc = gam * (gsc[0] * cpow)
            elif const_expr(fmt == "nvfp4"):
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
                        if const_expr(self.snf):
                            xv = sXB[k, cutlass.min(j, max(L - 2, 0)), p].to(Float32)
                        else:
                            xv = mXBuf[slot, head, ph, p].to(Float32)
                        xj[i, mm] = lp.sel_f32(j < h, xv, Float32(0.0))
                for i in cutlass.range_constexpr(RPT):
                    for mm in cutlass.range_constexpr(MG):
                        ybuf[i] = ybuf[i] + cf[mm] * xj[i, mm]
            # x / z of the one row this lane stores (see _rows_reduce), loaded before the math
            prow = rp + RPP * cutlass.min(myrow, Int32(RPT - 1))
            if const_expr(P % RPP != 0):
                prow = cutlass.min(prow, P - 1)
            zmy = Float32(0.0)
            if const_expr(self.snf):
                xmy = sXZ[k, 0, prow]
                if const_expr(self.has_z):
                    zmy = sXZ[k, 1, prow]
            else:
                xmy = mX[row, head, prow].to(Float32)
                if const_expr(self.has_z):
                    zmy = mZ[row, head, prow].to(Float32)
            dsk = Float32(0.0)
            if const_expr(self.has_D):
                if const_expr(self.snf):
                    dsk = sDD[k]
                else:
                    dsk = mD[head].to(Float32)
            # ---- math: partial row sums, reduced over the TN lanes of a row (transposed)
            dm = cute.make_rmem_tensor((RPT,), Float32)
            if const_expr(self.mma):
                self._mma_rows(raw, bsc, bfr, dm)
            ys = []
            for i in cutlass.range_constexpr(RPT):
                sc = hsc
                if const_expr(fmt == "fp8"):
                    sc = gam * rsc[i]
                if const_expr(self.mma):
                    # each lane holds its two blocks' part of the row's state dot
                    ys.append(dm[i] * sc + ybuf[i])
                else:
                    ys.append(self._read_row_dot(raw, i, creg, sblk) * sc + ybuf[i])
            tot, _ = _rows_reduce(ys, TN, lir)
            if my_store:
                y = tot + (ccur + dsk) * xmy
                if const_expr(self.has_z):
                    y = _silu_gate(y, zmy)
                mOut[row, head, prow] = y.to(self.act_dtype)
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
        self._sr_key_setup(mSeed, sKey, tidx)
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
                self._fold_output(acc, sC, mX, mZ, mOut, row, head_i, r, cbi, vq, gout,
                                  ccur + dsk)
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

    # ---------------------------------------------------------------- flush rows, v2
    @cute.jit
    def _encode_nvfp4_rn(self, acc: cute.Tensor, s_glob: Float32, rW: cute.Tensor,
                         scb: cute.Tensor):
        """nvfp4 RN encode of one 16-element block ``acc`` (= ``_encode_chunk('nvfp4', False)``,
        bit for bit): rW[0:2] the packed codes, scb[0] the block-scale byte.

        Fast path (every block of sane data): ``d = s_blk·s_glob`` in [2^-60, 2^60] and no inf in
        the block. Then ``q = x/(d·2^14)`` comes from the ``div.rn.f32`` fast-path sequence with
        the reciprocal hoisted out of the element loop (:func:`_rcp_nv` once, 3 FMA-pipe ops per
        element), rounded onto the e2m1 grid by magic addition and coded through the fp16 bit
        layout (:func:`lowprec.e2m1_pack8_rn`, NaN -> 0 | sign; the GDN flush's encoder). Where
        the code depends on q's value (|x/d| >= 1/4, q <= ~9.6·2^-14 for finite data), x, q and
        the remainder are normal numbers (|x| >= 2^-62, |rem| >= 2^-109): the range where the
        fast path is the correctly rounded quotient (ptxas' FCHK passes it), which is x/d's
        correctly rounded quotient times 2^-14 exactly. Below 1/4 the code is 0 | sign whatever
        the last bits of q (tiny / subnormal x included), and the sign is taken from x.
        Otherwise (inf in the block, extreme scales) the exact per-element path of v1.
        ``REPLAYSSM_M2_E2M1=code`` (A-B): the fast path's codes from q = x/d by
        :func:`_e2m1_rn_code` instead (sessions 5-35)."""
        a = _absmax16(acc)
        s_blk = lp.nvfp4_block_scale(a, s_glob)
        d = lp.mul_rn(s_blk, s_glob)
        scb[0] = (lp.pack_e4m3x4(s_blk, 0.0, 0.0, 0.0) & Uint32(0xFF)).to(Int32)
        fast = d >= Float32(2.0 ** -60)
        if a >= Float32(lp.FLT_MAX):
            fast = Boolean(False)
        if d > Float32(2.0 ** 60):
            fast = Boolean(False)
        if fast:
            if const_expr(e2m1_magic()):
                d14 = lp.mul_rn(d, Float32(16384.0))          # (exact: d <= 2^60)
                r14 = _rcp_nv(d14)
                xs = [acc[e] for e in range(CHUNK)]
                rW[0] = lp.e2m1_pack8_rn(xs[0:8], d14, r14, xs[0:8], nan_to_zero=True).to(Int32)
                rW[1] = lp.e2m1_pack8_rn(xs[8:16], d14, r14, xs[8:16], nan_to_zero=True).to(Int32)
            else:
                r1 = _rcp_nv(d)
                nd = -d
                nib0 = Uint32(0)
                nib1 = Uint32(0)
                for e in cutlass.range_constexpr(CHUNK):
                    c = _e2m1_rn_code(_div_nv(acc[e], r1, nd), acc[e])
                    if const_expr(e < 8):
                        nib0 = nib0 | (c << Uint32(4 * e))
                    else:
                        nib1 = nib1 | (c << Uint32(4 * (e - 8)))
                rW[0] = nib0.to(Int32)
                rW[1] = nib1.to(Int32)
        else:
            nib0 = Uint32(0)
            nib1 = Uint32(0)
            for e in cutlass.range_constexpr(CHUNK):
                c = _e2m1_grid_code(lp.nvfp4_quantize(acc[e], d, False, None))
                if const_expr(e < 8):
                    nib0 = nib0 | (c << Uint32(4 * e))
                else:
                    nib1 = nib1 | (c << Uint32(4 * (e - 8)))
            rW[0] = nib0.to(Int32)
            rW[1] = nib1.to(Int32)

    @cute.jit
    def _encode_fp8_rn(self, acc: cute.Tensor, rW: cute.Tensor, scf: cute.Tensor):
        """fp8 RN encode of one 16-element chunk (= ``_encode_chunk('fp8', False)``, bit for bit;
        warp-collective: the row amax is reduced over the CB lanes of the row): rW[0:4] the e4m3
        bytes, scf[0] the row scale. Fast path as :meth:`_encode_nvfp4_rn`: scale in [2^-60, 2^60]
        and no inf in the row -> ``x/scale`` by the ``div.rn.f32`` fast-path sequence (exact where
        the rounding depends on it: |x/scale| >= 2^-11, the e4m3 RN tiny threshold being 2^-10),
        the sign of zero taken from x; else ``div.rn.f32``."""
        a = _absmax16(acc)
        a = _row_reduce(a, lp.fmax_nq, self.cfg.cb, self.cfg.rw)
        scale = lp.fp8_row_scale(a)
        scf[0] = scale
        qv = cute.make_rmem_tensor((CHUNK,), Float32)
        fast = scale >= Float32(2.0 ** -60)
        if a >= Float32(lp.FLT_MAX):
            fast = Boolean(False)
        if scale > Float32(2.0 ** 60):
            fast = Boolean(False)
        if fast:
            r1 = _rcp_nv(scale)
            nd = -scale
            for e in cutlass.range_constexpr(CHUNK):
                q = _div_nv(acc[e], r1, nd)
                qv[e] = lp.bits_f32((lp.f32_bits(q) & Uint32(0x7FFFFFFF))
                                    | (lp.f32_bits(acc[e]) & Uint32(0x80000000)))
        else:
            for e in cutlass.range_constexpr(CHUNK):
                qv[e] = lp._safe_div(acc[e], scale)
        for jq in cutlass.range_constexpr(4):
            q = [lp.round_to_grid(qv[4 * jq + i], "e4m3", False) for i in range(4)]
            rW[jq] = lp.pack_e4m3x4(q[0], q[1], q[2], q[3]).to(Int32)

    @cute.jit
    def _encode_store(self, second: cutlass.Constexpr, acc: cute.Tensor, qc: Int32, r: Int32,
                      cbi: Int32, vq: Boolean, slot: Int32, head: Int32, w3_hi: Uint32,
                      w3_lo: Uint32, sKey: cute.Tensor, s_glob: Float32, mHi: cute.Tensor,
                      mHiS: Optional[cute.Tensor], mLo: Optional[cute.Tensor],
                      mLoS: Optional[cute.Tensor]):
        """Encode chunk ``acc`` into the flush targets of pass 1 (``second`` False) or pass 2 and
        store them (row r, chunk-in-row cbi; only when ``vq``). Several targets are encoded one
        after the other (``_dep_f32`` chain: one working set at a time)."""
        targets = self.flush_p2 if const_expr(second) else self.flush_p1
        tok = None
        for fmt, sr, stream in targets:
            if const_expr(tok is not None):
                for e in cutlass.range_constexpr(CHUNK):
                    acc[e] = _dep_f32(acc[e], tok)
            mDat = mHi if const_expr(stream == 0) else mLo
            mSc = mHiS if const_expr(stream == 0) else mLoS
            wpc = CHUNK * _BITS[fmt] // 32
            rW = cute.make_rmem_tensor((wpc,), Int32)
            scb = cute.make_rmem_tensor((1,), Int32)
            scf = cute.make_rmem_tensor((1,), Float32)
            sc = None
            if const_expr(fmt == "nvfp4" and not sr):
                self._encode_nvfp4_rn(acc, s_glob, rW, scb)
            elif const_expr(fmt == "fp8" and not sr):
                self._encode_fp8_rn(acc, rW, scf)
                sc = scf[0]
            else:
                sc = self._encode_chunk(fmt, sr, acc, qc, head, slot,
                                        w3_hi if stream == 0 else w3_lo, sKey, s_glob, rW)
            tok = rW[wpc - 1]
            if vq:
                gD = cute.local_tile(mDat[slot, head, r, None], (wpc,), (cbi,))
                cute.autovec_copy(rW, gD)
                if const_expr(fmt == "fp8"):
                    if cbi == 0:
                        mSc[slot, head, r] = sc
                if const_expr(fmt == "nvfp4"):
                    if const_expr(sr):
                        mSc[slot, head, r, cbi] = sc.to(Uint8)
                    else:
                        mSc[slot, head, r, cbi] = scb[0].to(Uint8)
        return tok

    @cute.jit
    def _fold_cc(self, sWX: cute.Tensor, sB: cute.Tensor, acc: cute.Tensor,
                 acc2: Optional[cute.Tensor], h: Int32, r: Int32, r2: Int32, cbi: Int32):
        """The v2 flush's CUDA-core fold: ``acc[e] = Σ_{j<h} fma(sWX[j, r], sB[j, 16·cbi + e])``
        from 0, in j order; with ``acc2`` the same for row ``r2`` at once (one B_j load for both)."""
        for e in cutlass.range_constexpr(CHUNK):
            acc[e] = Float32(0.0)
            if const_expr(acc2 is not None):
                acc2[e] = Float32(0.0)
        bj = cute.make_rmem_tensor((CHUNK,), Float32)
        for j in cutlass.range(h, unroll=self.fold_unroll):
            wx = sWX[j, r]
            if const_expr(acc2 is not None):
                wx2 = sWX[j, r2]
            cute.autovec_copy(cute.local_tile(sB[j, None], (CHUNK,), (cbi,)), bj)
            for e in cutlass.range_constexpr(CHUNK):
                acc[e] = _fma_rn(wx, bj[e], acc[e])
            if const_expr(acc2 is not None):
                for e in cutlass.range_constexpr(CHUNK):
                    acc2[e] = _fma_rn(wx2, bj[e], acc2[e])

    @cute.jit
    def _hi_decode_add(self, acc: cute.Tensor, hw: cute.Tensor, sw: Uint32, hig: Float32,
                       gf: Float32):
        """``acc += fl(gf·hi chunk)``: ``hw`` the chunk's words, ``sw`` its scale (fp8: the row
        scale's bits; nvfp4: the block-scale byte, times ``hig``)."""
        d_blk = Float32(0.0)
        if const_expr(self.rec_fmt == "nvfp4"):
            d_blk = lp.mul_rn(lp.e4m3_byte_to_f32(sw), hig)
        self._decode_add_chunk(self.rec_fmt, hw, acc, gf, lp.bits_f32(sw), d_blk)

    @cute.jit
    def _hi_add_landed(self, acc: cute.Tensor, hw: cute.Tensor, sHW: cute.Tensor,
                       sHS: cute.Tensor, tidx: Int32, cbi: Int32, hig: Float32, gf: Float32):
        """:meth:`_hi_decode_add` of the hi chunk in this thread's cp.async landing slot."""
        wpc = CHUNK * _BITS[self.rec_fmt] // 32
        V = min(4, wpc)
        for g in cutlass.range_constexpr(wpc // V):
            cute.autovec_copy(sHW[g, tidx, None], cute.local_tile(hw, (V,), (g,)))
        sw = Uint32(sHS[tidx])
        if const_expr(self.rec_fmt == "nvfp4"):
            sw = (sw >> (Uint32(8) * Uint32(cbi % 4))) & Uint32(0xFF)
        self._hi_decode_add(acc, hw, sw, hig, gf)

    @cute.jit
    def _hi_load(self, mHi: cute.Tensor, mHiS: Optional[cute.Tensor], hw: cute.Tensor,
                 slot: Int32, head: Int32, r: Int32, cbi: Int32) -> Uint32:
        """hi chunk (row r, chunk-in-row cbi) into registers ``hw`` by plain loads; returns its
        scale as :meth:`_hi_decode_add` takes it."""
        wpc = CHUNK * _BITS[self.rec_fmt] // 32
        cute.autovec_copy(cute.local_tile(mHi[slot, head, r, None], (wpc,), (cbi,)), hw)
        sw = Uint32(0)
        if const_expr(self.rec_fmt == "fp8"):
            sw = lp.f32_bits(mHiS[slot, head, r])
        if const_expr(self.rec_fmt == "nvfp4"):
            sw = Uint32(mHiS[slot, head, r, cbi])
        return sw

    @cute.jit
    def _chunk_output(self, acc: cute.Tensor, k: Int32, row: Int32, head: Int32, r: Int32,
                      cbi: Int32, vq: Boolean, gout: Float32, cx: Float32, sC: cute.Tensor,
                      sCT: Optional[cute.Tensor], sDotF: Optional[cute.Tensor], mX: cute.Tensor,
                      mZ: Optional[cute.Tensor], mOut: cute.Tensor):
        """A flush chunk's output from the fp32 fold: the decode output, or (``sDotF``, the
        verify kernel) its T query dots."""
        if const_expr(sDotF is not None):
            self._flush_dots(acc, sCT, sDotF, k, r, vq, cbi)
        else:
            self._fold_output(acc, sC, mX, mZ, mOut, row, head, r, cbi, vq, gout, cx)

    @cute.jit
    def _chunk_store(self, acc: cute.Tensor, amax: Float32, it: Int32, r: Int32, cbi: Int32,
                     vq: Boolean, slot: Int32, head: Int32, w3_hi: Uint32, w3_lo: Uint32,
                     s_glob: Float32, sKey: cute.Tensor, sS: Optional[cute.Tensor],
                     mHi: cute.Tensor, mHiS: Optional[cute.Tensor], mLo: Optional[cute.Tensor],
                     mLoS: Optional[cute.Tensor], tidx: Int32) -> Float32:
        """Chunk ``it`` of the thread (row r) after its output: with nvfp4 targets the running
        amax (returned) and, but for the last chunk (kept in registers), the chunk into sS; then
        the targets that need no matrix amax encoded and stored."""
        if const_expr(self.needs_gamax):
            amax = self._chunk_keep(acc, amax, it, sS, tidx)
        if const_expr(len(self.flush_p1) > 0):
            self._encode_store(False, acc, r * self.cfg.cb + cbi, r, cbi, vq, slot, head, w3_hi,
                               w3_lo, sKey, s_glob, mHi, mHiS, mLo, mLoS)
        return amax

    @cute.jit
    def _chunk_keep(self, acc: cute.Tensor, amax: Float32, it: Int32, sS: cute.Tensor,
                    tidx: Int32) -> Float32:
        """nvfp4 targets: the running amax with chunk ``it`` (returned), the chunk into sS but
        for the last (pass 2 takes it from registers; every chunk with :attr:`_sS_all`)."""
        # rows past P (clamped duplicates) hold a valid row's values: amax unchanged
        amax = lp.fmax_nq(amax, _absmax16(acc))
        if const_expr(self._sS_all):
            self._sS_store(acc, sS, it, tidx)
        else:
            if it < self.cfg.nit - 1:
                self._sS_store(acc, sS, it, tidx)
        return amax

    @cute.jit
    def _sS_store(self, acc: cute.Tensor, sS: cute.Tensor, it: Int32, tidx: Int32):
        """The thread's chunk ``it`` (``acc``) into sS: float4 (it, g) at row (it*4 + g)*NT + t
        (conflict-free 16-byte accesses)."""
        for g in cutlass.range_constexpr(4):
            cute.autovec_copy(cute.local_tile(acc, (4,), (g,)),
                              sS[(it * 4 + g) * self.cfg.nt + tidx, None])

    @cute.jit
    def _sS_load(self, acc: cute.Tensor, sS: cute.Tensor, it: Int32, tidx: Int32):
        """acc <- the thread's chunk ``it`` from sS (:meth:`_chunk_keep`)."""
        for g in cutlass.range_constexpr(4):
            cute.autovec_copy(sS[(it * 4 + g) * self.cfg.nt + tidx, None],
                              cute.local_tile(acc, (4,), (g,)))

    @cute.jit
    def _cpa_next(self, it: Int32, k: Int32, rrow: Int32, cbi: Int32, head0: Int32,
                  slot: Int32, origin: Int32, h: Int32, mHi: cute.Tensor,
                  mHiS: Optional[cute.Tensor], mXBuf: cute.Tensor, sHW: cute.Tensor,
                  sHS: cute.Tensor, sXR: cute.Tensor, tidx: Int32):
        """cp.async (committed) of the hi chunk after the thread's chunk ``it`` of head ``k`` into
        its landing slot (in flight during that chunk's fold); after a head's last chunk, the
        next head's chunk 0 and x_j rows."""
        cfg = self.cfg
        wrap = it + 1 >= cfg.nit
        nit = _sel_i32(wrap, Int32(0), it + 1)
        nk = k + _sel_i32(wrap, Int32(1), Int32(0))
        if nk < self.hpc:
            rn = rrow + nit * cfg.rpf
            if const_expr(not cfg.full):
                rn = cutlass.min(rn, self.P - 1)
            hn = _opaque_i32(head0 + nk)
            self._cpa_hi_chunk(mHi, mHiS, sHW, sHS, slot, hn, rn, cbi, tidx)
            if wrap:
                self._cpa_xrows(mXBuf, sXR, slot, hn, origin, h, tidx)
        cute.arch.cp_async_commit_group()

    @cute.jit
    def _cpa_hi_chunk(self, mHi: cute.Tensor, mHiS: Optional[cute.Tensor], sHW: cute.Tensor,
                      sHS: cute.Tensor, slot: Int32, head: Int32, r: Int32, cbi: Int32,
                      tidx: Int32):
        """cp.async of hi chunk (row r, chunk-in-row cbi) into this thread's landing slot: the
        words (16-byte vectors, 8 bytes for nvfp4), the fp8 row scale / the aligned 4-byte word
        that holds the nvfp4 block-scale byte. Not committed here."""
        fmt = self.rec_fmt
        wpc = CHUNK * _BITS[fmt] // 32
        V = min(4, wpc)
        if const_expr(V == 4):
            a = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL),
                                    Int32, num_bits_per_copy=128)
        else:
            a = cute.make_copy_atom(cpasync.CopyG2SOp(), Int32, num_bits_per_copy=32 * V)
        for g in cutlass.range_constexpr(wpc // V):
            cute.copy(a, cute.local_tile(mHi[slot, head, r, None], (V,), (cbi * (wpc // V) + g,)),
                      sHW[g, tidx, None])
        if const_expr(fmt == "fp8"):
            a4 = cute.make_copy_atom(cpasync.CopyG2SOp(), Float32, num_bits_per_copy=32)
            cute.copy(a4, cute.local_tile(mHiS[slot, head, None], (1,), (r,)),
                      cute.local_tile(cute.make_tensor(cute.recast_ptr(sHS.iterator,
                                                                       dtype=Float32),
                                                       sHS.layout), (1,), (tidx,)))
        if const_expr(fmt == "nvfp4"):
            a4 = cute.make_copy_atom(cpasync.CopyG2SOp(), Uint8, num_bits_per_copy=32)
            cute.copy(a4, cute.local_tile(mHiS[slot, head, r, None], (4,), (cbi // 4,)),
                      cute.local_tile(cute.make_tensor(cute.recast_ptr(sHS.iterator, dtype=Uint8),
                                                       cute.make_layout(4 * self.cfg.nt)),
                                      (4,), (tidx,)))

    @cute.jit
    def _cpa_xring_heads(self, mXBuf: cute.Tensor, sX: cute.Tensor, slot: Int32, head0: Int32,
                         origin: Int32, h: Int32, tidx: Int32, rows: int):
        """cp.async of the ring's x_j rows j < h (< ``rows``) of every head of the CTA into
        ``sX[k, j, :]`` (16-byte chunks; thread's share; not committed). A thread's (j, chunk) is
        the same in every head (one head's rows·CX copies over the NT threads), so its ring index
        and predicate are worked out once."""
        P, NT = self.P, self.cfg.nt
        EPC = 128 // self.act_dtype.width
        CX = P // EPC
        ax = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL),
                                 self.act_dtype, num_bits_per_copy=128)
        per_head = rows * CX
        for m in cutlass.range_constexpr(-(-per_head // NT)):
            c = tidx + NT * m
            j = c // CX
            q = c % CX
            if c < per_head:
                if j < h:
                    ph = self._phys(origin, j)
                    for k in cutlass.range_constexpr(self.hpc):
                        cute.copy(ax, cute.local_tile(mXBuf[slot, head0 + k, ph, None], (EPC,),
                                                      (q,)),
                                  cute.local_tile(sX[k, j, None], (EPC,), (q,)))

    @cute.jit
    def _cpa_xrows(self, mXBuf: cute.Tensor, sXR: cute.Tensor, slot: Int32, head: Int32,
                   origin: Int32, h: Int32, tidx: Int32):
        """cp.async of one head's x_j rows (j < h) into sXR (thread's share; not committed)."""
        JB, P, NT = self.cfg.jb, self.P, self.cfg.nt
        EPC = 128 // self.act_dtype.width
        CX = P // EPC
        a = cute.make_copy_atom(cpasync.CopyG2SOp(cache_mode=cpasync.LoadCacheMode.GLOBAL),
                                self.act_dtype, num_bits_per_copy=128)
        for i in cutlass.range_constexpr(-(-(JB * CX) // NT)):
            c = tidx + NT * i
            jj = c // CX
            q = c % CX
            if jj < h:                   # (h <= JB)
                cute.copy(a, cute.local_tile(mXBuf[slot, head, self._phys(origin, jj), None],
                                             (EPC,), (q,)),
                          cute.local_tile(sXR[jj, None], (EPC,), (q,)))

    @cute.jit
    def _fold_output(self, acc: cute.Tensor, sC: cute.Tensor, mX: cute.Tensor,
                     mZ: Optional[cute.Tensor], mOut: cute.Tensor, row: Int32, head: Int32,
                     r: Int32, cbi: Int32, vq: Boolean, gout: Float32, cx: Float32):
        """Decode output of a flush row from one fp32 S_new chunk: ``y = gout·(S_new·C)[r] +
        cx·x[r]`` (cx = dt'·(B·C) + D), gated, stored by the row's first lane."""
        cfg = self.cfg
        cj = cute.make_rmem_tensor((CHUNK,), Float32)
        cute.autovec_copy(cute.local_tile(sC, (CHUNK,), (cbi,)), cj)
        y = Float32(0.0)
        for e in cutlass.range_constexpr(CHUNK):
            y = y + acc[e] * cj[e]
        y = _row_reduce(y, operator.add, cfg.cb, cfg.rw)
        if vq:
            if cbi == 0:
                yo = gout * y + cx * mX[row, head, r].to(Float32)
                if const_expr(self.has_z):
                    yo = _silu_gate(yo, mZ[row, head, r].to(Float32))
                mOut[row, head, r] = yo.to(self.act_dtype)

    @cute.jit
    def _mma_fold(self, sWX: cute.Tensor, sB: cute.Tensor, sSlab: cute.Tensor, acc: cute.Tensor,
                  h: Int32, it: Int32, rrow: Int32, cbi: Int32, warp: Int32, lane: Int32):
        """``acc[e] = Σ_{j<h} sWX[j, r]·sB[j, 16·cbi + e]`` (r = the thread's row of pass ``it``)
        on the tensor cores. The pass's 16 rows x N columns are one ``D = A·B``, ``A[m, j] =
        sWX[j, 16·it + m]`` split into two tf32 terms (hi + lo: ~2^-22 relative, and every product
        exact in the fp32 accumulator: B_j holds 16-bit activations, exact in tf32), K = the JB
        staged entries (j >= h zeroed in A and B), warp w the columns [w·N/4, (w+1)·N/4) in n-tiles
        of 8 (m16n8k8). The slab goes through smem (``sSlab``, rows padded by 4 words) to the
        thread's 16-element chunk. Two CTA barriers: the previous pass's reads, this pass's writes."""
        P, N, JB = self.P, self.N, self.cfg.jb
        KS = -(-JB // 8)
        NTW = N // 32
        g = lane // 4
        t = lane % 4
        p0 = cutlass.min(it * 16 + g, Int32(P - 1))
        p1 = cutlass.min(it * 16 + g + 8, Int32(P - 1))
        zero = Float32(0.0)
        c = [[zero, zero, zero, zero] for _ in range(NTW)]
        for ks in cutlass.range_constexpr(KS):
            a, (ok0, ok1, jc0, jc1) = fold_a_frag(sWX, ks, t, h, JB, p0, p1)
            sp = [lp.split_tf32(v) for v in a]
            a_hi = [x[0] for x in sp]
            a_lo = [x[1] for x in sp]
            for nt in cutlass.range_constexpr(NTW):
                n = warp * (N // 4) + (nt * 8) + g
                b = [lp.f32_bits(lp.sel_f32(ok0, sB[jc0, n], zero)),
                     lp.f32_bits(lp.sel_f32(ok1, sB[jc1, n], zero))]
                c[nt] = lp.mma_sync("tf32", a_lo, b, c[nt])
                c[nt] = lp.mma_sync("tf32", a_hi, b, c[nt])
        cute.arch.barrier()          # every thread has read the previous pass's slab
        for nt in cutlass.range_constexpr(NTW):
            n = warp * (N // 4) + (nt * 8) + 2 * t
            sSlab[g, n] = c[nt][0]
            sSlab[g, n + 1] = c[nt][1]
            sSlab[g + 8, n] = c[nt][2]
            sSlab[g + 8, n + 1] = c[nt][3]
        cute.arch.barrier()
        cute.autovec_copy(cute.local_tile(sSlab[rrow, None], (CHUNK,), (cbi,)), acc)

    @cute.jit
    def _flush2(self, mX: cute.Tensor, mZ: Optional[cute.Tensor], mD: Optional[cute.Tensor],
                mOut: cute.Tensor, mHi: cute.Tensor, mHiS: Optional[cute.Tensor],
                mHiG: Optional[cute.Tensor], mLo: Optional[cute.Tensor],
                mLoS: Optional[cute.Tensor], mLoG: Optional[cute.Tensor], mXBuf: cute.Tensor,
                mBBuf: cute.Tensor, mSeed: Optional[cute.Tensor], sC: cute.Tensor,
                sB: cute.Tensor, sWX: cute.Tensor, sS: Optional[cute.Tensor],
                sHW: cute.Tensor, sHS: cute.Tensor, sXR: cute.Tensor,
                sCoef: cute.Tensor, sScal: cute.Tensor, sRed: cute.Tensor, sKey: cute.Tensor,
                row: Int32, slot: Int32, head0: Int32, group: Int32, origin: Int32, h: Int32,
                gen: Int32, tidx: Int32, sCT: Optional[cute.Tensor] = None,
                sDotF: Optional[cute.Tensor] = None, sSlab: Optional[cute.Tensor] = None,
                pacc=None):
        """Flush rows, single fold pass (one staging round, NJB == 1). Per head: sWX from the
        x_j rows that cp.async brought in during the previous head; per chunk: fold, + the
        decayed hi chunk (cp.async'ed into this thread's landing slot during the previous chunk:
        software pipeline over chunks and heads, no registers held), output, then the targets
        that need no matrix amax are encoded and stored at once; with nvfp4 targets the fp32
        chunk also goes to smem (sS) and, after the CTA amax, a second loop encodes it from
        there -- the fold runs once. With ``sDotF`` (the verify kernel) the T query dots of every
        S_new row go to ``sDotF[k, t, p]`` instead of the decode output (C_t from ``sCT``).
        ``pacc`` (profiling builds): thread 0's clocks summed into [0] head start (x rows wait,
        barriers, sWX), [1] fold, [2] hi chunk wait + decayed add, [3] output / dots,
        [4] encode + store + next copies."""
        cfg = self.cfg
        NT, CB, NIT, RW, RPF, P, N = cfg.nt, cfg.cb, cfg.nit, cfg.rw, cfg.rpf, self.P, self.N
        HPC, JB = self.hpc, cfg.jb
        NXW = -(-(JB * P) // NT)
        warp = tidx // 32
        lane = tidx % 32
        cbi = lane // RW                 # chunk-in-row of every chunk this thread owns
        rrow = warp * RW + lane % RW     # its row within a pass of RPF rows
        fmt_hi = self.rec_fmt
        wpc_hi = CHUNK * _BITS[fmt_hi] // 32
        self._sr_key_setup(mSeed, sKey, tidx)
        w3_hi = lp.sr_counter_word3(0, gen)
        w3_lo = lp.sr_counter_word3(1, gen)
        # first copies out: x_j rows and hi chunk 0 of the first head
        self._cpa_xrows(mXBuf, sXR, slot, head0, origin, h, tidx)
        r0 = rrow
        if const_expr(not cfg.full):
            r0 = cutlass.min(r0, P - 1)
        self._cpa_hi_chunk(mHi, mHiS, sHW, sHS, slot, head0, r0, cbi, tidx)
        cute.arch.cp_async_commit_group()
        hw = cute.make_rmem_tensor((wpc_hi,), Int32)
        # the group's B entries once per CTA
        for it in cutlass.range(-(-(JB * N) // NT), unroll=4):
            idx = tidx + it * NT
            jj = idx // N
            n = idx % N
            if jj < h:                   # h <= hm = jb here
                sB[jj, n] = mBBuf[slot, group, self._phys(origin, jj), n].to(Float32)
        dsk = Float32(0.0)
        for k in cutlass.range(HPC, unroll=1):
            head = _opaque_i32(head0 + k)
            gf = sScal[k, 0]
            ccur = sScal[k, 1]
            gout = sScal[k, 2]
            if const_expr(self.has_D):
                dsk = mD[head].to(Float32)
            hig = Float32(0.0)           # the hi global scale before this flush rewrites it
            if const_expr(fmt_hi == "nvfp4"):
                hig = mHiG[slot, head]
            if const_expr(pacc is not None):
                q0 = common.sreg64("clock64")
            cute.arch.cp_async_wait_group(0)   # this head's x_j rows (and hi chunk 0) landed
            cute.arch.barrier()          # ... for every thread; sWX / sRed of the previous head
            for i in cutlass.range_constexpr(NXW):  # are consumed
                idx = tidx + i * NT
                jj = idx // P
                p = idx % P
                if jj < h:
                    sWX[jj, p] = sCoef[k, jj] * sXR[jj, p].to(Float32)
            cute.arch.barrier()          # (sXR free again: the next head's rows may come in)
            if const_expr(pacc is not None):
                q1 = common.sreg64("clock64")
                pacc[0] = pacc[0] + (q1 - q0)
            acc = cute.make_rmem_tensor((CHUNK,), Float32)
            amax = Float32(0.0)
            s_glob = Float32(0.0)
            # pairs of chunks (it, it + 1), the second into acc: with an even NIT the last chunk
            # ends in acc as pass 2 wants; an odd NIT's last chunk takes the single loop below
            accp = cute.make_rmem_tensor((CHUNK,), Float32)
            hw2 = cute.make_rmem_tensor((wpc_hi,), Int32)
            for ip in cutlass.range(self.fold_pairs, unroll=1):
                it = 2 * ip
                slot_i = _dep_i32(slot, it)
                head_i = _dep_i32(head, it)
                r = rrow + it * RPF
                r2 = r + RPF
                vq = r < P
                vq2 = r2 < P
                if const_expr(not cfg.full):
                    r = cutlass.min(r, P - 1)
                    r2 = cutlass.min(r2, P - 1)
                # the second chunk's hi by plain loads, in flight during the fold (the first's
                # landed by cp.async in the landing slot, issued one pair ago)
                sw2 = self._hi_load(mHi, mHiS, hw2, slot_i, head_i, r2, cbi)
                self._fold_cc(sWX, sB, accp, acc, h, r, r2, cbi)
                cute.arch.cp_async_wait_group(0)
                self._hi_add_landed(accp, hw, sHW, sHS, tidx, cbi, hig, gf)
                self._hi_decode_add(acc, hw2, sw2, hig, gf)
                # (the landing slot is read: the next pair's first hi chunk may come in)
                self._cpa_next(it + 1, k, rrow, cbi, head0, _dep_i32(slot, it), origin, h,
                               mHi, mHiS, mXBuf, sHW, sHS, sXR, tidx)
                self._chunk_output(accp, k, row, head_i, r, cbi, vq, gout, ccur + dsk, sC, sCT,
                                   sDotF, mX, mZ, mOut)
                self._chunk_output(acc, k, row, head_i, r2, cbi, vq2, gout, ccur + dsk, sC, sCT,
                                   sDotF, mX, mZ, mOut)
                if const_expr(self.pair_roll):
                    # chunk it, then chunk it + 1 (from sS: acc is not live through the first
                    # encode) through one copy of the code; the trip count through a mov so that
                    # ptxas does not unroll it back. With nvfp4 targets both chunks are kept in
                    # sS first (pass 2 reads every chunk from there), then the pass-1 targets.
                    if const_expr(self.needs_gamax):
                        amax = self._chunk_keep(accp, amax, it, sS, tidx)
                        amax = self._chunk_keep(acc, amax, it + 1, sS, tidx)
                    else:
                        self._sS_store(acc, sS, 0, tidx)
                    if const_expr(not self.needs_gamax or len(self.flush_p1) > 0):
                        for q in cutlass.range(_opaque_i32(2), unroll=1):
                            rq = rrow + (it + q) * RPF
                            vqq = rq < P
                            if const_expr(not cfg.full):
                                rq = cutlass.min(rq, P - 1)
                            if const_expr(self.needs_gamax):
                                self._encode_store(False, accp, rq * CB + cbi, rq, cbi, vqq,
                                                   slot_i, head_i, w3_hi, w3_lo, sKey, s_glob,
                                                   mHi, mHiS, mLo, mLoS)
                                if q == 0:
                                    self._sS_load(accp, sS, it + 1, tidx)
                            else:
                                amax = self._chunk_store(accp, amax, it + q, rq, cbi, vqq, slot_i,
                                                         head_i, w3_hi, w3_lo, s_glob, sKey, sS,
                                                         mHi, mHiS, mLo, mLoS, tidx)
                                if q == 0:
                                    self._sS_load(accp, sS, 0, tidx)
                elif const_expr(self.needs_gamax and len(self.flush_p1) > 0):
                    amax = self._chunk_keep(accp, amax, it, sS, tidx)
                    amax = self._chunk_keep(acc, amax, it + 1, sS, tidx)
                    if it + 1 < NIT - 1:     # acc waits in sS while accp is encoded
                        self._encode_store(False, accp, r * CB + cbi, r, cbi, vq, slot_i, head_i,
                                           w3_hi, w3_lo, sKey, s_glob, mHi, mHiS, mLo, mLoS)
                        self._sS_load(acc, sS, it + 1, tidx)
                    # (else the last pair: chunk NIT - 2's pass-1 targets wait for pass 2)
                    self._encode_store(False, acc, r2 * CB + cbi, r2, cbi, vq2, slot_i, head_i,
                                       w3_hi, w3_lo, sKey, s_glob, mHi, mHiS, mLo, mLoS)
                else:
                    amax = self._chunk_store(accp, amax, it, r, cbi, vq, slot_i, head_i, w3_hi,
                                             w3_lo, s_glob, sKey, sS, mHi, mHiS, mLo, mLoS, tidx)
                    amax = self._chunk_store(acc, amax, it + 1, r2, cbi, vq2, slot_i, head_i,
                                             w3_hi, w3_lo, s_glob, sKey, sS, mHi, mHiS, mLo, mLoS,
                                             tidx)
            for it in cutlass.range(2 * self.fold_pairs, NIT, unroll=1):
                # per-chunk copies of the indices (see v1): addresses recomputed per chunk
                slot_i = _dep_i32(slot, it)
                head_i = _dep_i32(head, it)
                r = rrow + it * RPF
                vq = r < P
                if const_expr(not cfg.full):
                    r = cutlass.min(r, P - 1)
                # ---- fold: sum_j fma(w_j x_j[r], B_j[16 cbi + e]) from 0, then the decayed hi
                if const_expr(self.mma_fold):
                    self._mma_fold(sWX, sB, sSlab, acc, h, it, rrow, cbi, warp, lane)
                else:
                    self._fold_cc(sWX, sB, acc, None, h, r, r, cbi)
                if const_expr(pacc is not None):
                    q2 = common.sreg64("clock64")
                    pacc[1] = pacc[1] + (q2 - q1)
                # + the decayed checkpoint (this chunk's hi: cp.async issued one chunk ago)
                cute.arch.cp_async_wait_group(0)
                self._hi_add_landed(acc, hw, sHW, sHS, tidx, cbi, hig, gf)
                if const_expr(pacc is not None):
                    q3 = common.sreg64("clock64")
                    pacc[2] = pacc[2] + (q3 - q2)
                # ---- output from the fp32 fold (the verify kernel: its T query dots)
                self._chunk_output(acc, k, row, head_i, r, cbi, vq, gout, ccur + dsk, sC, sCT,
                                   sDotF, mX, mZ, mOut)
                if const_expr(pacc is not None):
                    q4 = common.sreg64("clock64")
                    pacc[3] = pacc[3] + (q4 - q3)
                amax = self._chunk_store(acc, amax, it, r, cbi, vq, slot_i, head_i, w3_hi, w3_lo,
                                         s_glob, sKey, sS, mHi, mHiS, mLo, mLoS, tidx)
                # ---- cp.async of the next chunk's hi (in flight during its fold), and after the
                # last chunk of a head the next head's x_j rows
                self._cpa_next(it, k, rrow, cbi, head0, _dep_i32(slot, it), origin, h, mHi, mHiS,
                               mXBuf, sHW, sHS, sXR, tidx)
                if const_expr(pacc is not None):
                    q1 = common.sreg64("clock64")    # the next chunk's fold starts here
                    pacc[4] = pacc[4] + (q1 - q4)
            if const_expr(self.needs_gamax):
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
                # the last chunk first (still in acc), then the others from smem
                for it2 in cutlass.range(NIT - int(self.pair_defer), unroll=1):
                    it = _sel_i32(it2 == 0, Int32(NIT - 1), it2 - 1)
                    slot_i = _dep_i32(slot, it2)
                    head_i = _dep_i32(head, it2)
                    r = rrow + it * RPF
                    vq = r < P
                    if const_expr(not cfg.full):
                        r = cutlass.min(r, P - 1)
                    qc = r * CB + cbi
                    if const_expr(self._sS_all):
                        self._sS_load(acc, sS, it, tidx)
                    else:
                        if it2 > 0:
                            self._sS_load(acc, sS, it, tidx)
                    self._encode_store(True, acc, qc, r, cbi, vq, slot_i, head_i, w3_hi, w3_lo,
                                       sKey, s_glob, mHi, mHiS, mLo, mLoS)
                if const_expr(self.pair_defer):
                    # chunk NIT - 2 (the last pair's first): its pass-1 targets, then these
                    r = rrow + (NIT - 2) * RPF
                    vq = r < P
                    if const_expr(not cfg.full):
                        r = cutlass.min(r, P - 1)
                    slot_i = _dep_i32(slot, NIT)
                    head_i = _dep_i32(head, NIT)
                    self._sS_load(acc, sS, NIT - 2, tidx)
                    tok = self._encode_store(False, acc, r * CB + cbi, r, cbi, vq, slot_i, head_i,
                                             w3_hi, w3_lo, sKey, s_glob, mHi, mHiS, mLo, mLoS)
                    for e in cutlass.range_constexpr(CHUNK):
                        acc[e] = _dep_f32(acc[e], tok)
                    self._encode_store(True, acc, r * CB + cbi, r, cbi, vq, slot_i, head_i, w3_hi,
                                       w3_lo, sKey, s_glob, mHi, mHiS, mLo, mLoS)


# --------------------------------------------------------------------------------------
# compile (tensor-free, cached) and launch
# --------------------------------------------------------------------------------------

_CACHE = KernelCache("mamba2_replay")


def _resolve(pair_name, act_dtype, dt_dtype, H, P, N, G, L, R, has_D, has_z, has_dt_bias,
             dt_softplus, heads_per_cta, has_idx, prefetch=None, min_blocks_per_mp=None,
             flush_impl=None, nonflush_mma=None, staged=None, early_arrive=None,
             row_order=False, rows=0, flush_positions=0, pf_early=None,
             num_threads=NUM_THREADS, row_split=1, early_read=None, few_rows=False,
             smem_ctas_cap=0, philox_rounds=None):
    pair = parse_pair(pair_name)
    # (a split's halves need the order's cursors, and run on two streams: no programmatic
    # launch edges)
    ocur = bool(row_order) and (bool(rows) or _env_flag(ORDER_CURSORS_ENV) is not False)
    kw = dict(
        pair=pair.name, act_dtype=dtype_name(act_dtype), dt_dtype=dtype_name(dt_dtype),
        nheads=int(H), headdim=int(P), dstate=int(N), ngroups=int(G), buffer_len=int(L),
        ring=int(R), has_D=bool(has_D), has_z=bool(has_z), has_dt_bias=bool(has_dt_bias),
        dt_softplus=bool(dt_softplus), heads_per_cta=int(heads_per_cta),
        has_state_batch_indices=bool(has_idx),
        prefetch=_env_flag("REPLAYSSM_M2_PREFETCH") if prefetch is None else bool(prefetch),
        min_blocks_per_mp=None if min_blocks_per_mp is None else int(min_blocks_per_mp),
        flush_impl=_flush_impl_default() if flush_impl is None else int(flush_impl),
        nonflush_mma=_nonflush_mma_default() if nonflush_mma is None else bool(nonflush_mma),
        staged=_staged_default() if staged is None else bool(staged),
        early_arrive=_early_arrive_default() if early_arrive is None else bool(early_arrive),
        prof=_prof_default(), row_order=bool(row_order), mma_fold=_mma_fold_default(),
        early_read=_env_flag(EARLY_READ_ENV) if early_read is None else bool(early_read),
        pdl=0 if rows else common.pdl_default(),
        order_cursors=ocur, rows=int(rows), flush_positions=int(flush_positions) if rows == 2 else 0,
        pf_early=(bool(_env_flag(PF_EARLY_ENV)) if pf_early is None else bool(pf_early))
        and not row_order,
        num_threads=int(num_threads), row_split=int(row_split),
        few_rows=bool(few_rows) and min_blocks_per_mp is None,   # (an explicit hint wins)
        smem_ctas_cap=int(smem_ctas_cap) if rows == 1 else 0,
        philox_rounds=common.philox_rounds_for(pair, philox_rounds),
    )
    # the tuning overrides of the occupancy hint are read when the kernel is built: in the key
    key = ("mamba2_replay", common.arch_key(), os.environ.get("REPLAYSSM_M2_MINBLOCKS"),
           _fold_unroll(2 if rows == 2 else 1), os.environ.get(FOLD_SMEM_ENV),
           os.environ.get(FOLD_ENTRIES_ENV), os.environ.get(DEP_ARRIVE_ENV),
           os.environ.get(RING_PHYS_ENV), os.environ.get(LATE_CHECK_ENV),
           lp.f16_sr_chunk(), e2m1_magic(), _fold_pair_env(), _pair_roll_env()) + tuple(kw.values())
    if rows:
        key += (_env_int(SPLIT_MINB1_ENV if rows == 1 else SPLIT_MINB2_ENV),)
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
        al = min(16, nb & -nb)           # a row of block scales is one cp.async (staged path)
        scale = f(Uint8, (slots, H, P, nb), (("dyn", al), P * nb, nb, 1), align_bytes=al)
        gscale = f(Float32, (slots, H), ("dyn", 1), align_bytes=4)
    return data, scale, gscale


def _fake_args(op: Mamba2ReplayDecode, draft_modes: Tuple[int, ...] = ()):
    """Fake tensors: ``batch`` and ``num_slots`` symbolic. Contract checked by TVM-FFI at call
    time: dtypes; H, P, N, G, R extents; one ``batch`` across x/dt/B/C/z/out/indices, one
    ``num_slots`` across every cache tensor; the cache tensors contiguous (static inner strides),
    stored copies passed as int32 word views, 16-byte aligned. ``draft_modes``: static modes of
    the per-token inputs after ``batch`` (the verify kernel's ``(T,)``: x, z, out [batch, T, H, P],
    dt [batch, T, H], B, C [batch, T, G, N]; innermost dim contiguous)."""
    H, P, N, G, R = op.H_full, op.P_full, op.N, op.G, op.R
    at, dtt = op.act_dtype, op.dt_dtype
    batch = common.sym()
    slots = common.sym()
    f = common.fake_tensor
    tok = (batch, *draft_modes)                 # leading modes of every per-token input
    dyn = ("dyn",) * len(tok)
    x = f(at, (*tok, H, P), (*dyn, "dyn", 1))
    out = f(at, (*tok, H, P), (*dyn, "dyn", 1))
    z = f(at, (*tok, H, P), (*dyn, "dyn", 1)) if op.has_z else None
    dt = f(dtt, (*tok, H), (*dyn, "dyn"))
    A = f(Float32, (H,), ("dyn",))
    D = f(Float32, (H,), ("dyn",)) if op.has_D else None
    dt_bias = f(Float32, (H,), ("dyn",)) if op.has_dt_bias else None
    B = f(at, (*tok, G, N), (*dyn, "dyn", 1))
    C = f(at, (*tok, G, N), (*dyn, "dyn", 1))
    idx = f(Int32, (batch,), ("dyn",)) if op.has_idx else None
    hi, hi_s, hi_g = _fake_copy(op.rec_fmt, slots, H, P, N)
    lo = lo_s = lo_g = None
    if op.split:
        lo, lo_s, lo_g = _fake_copy(op.read_fmt, slots, H, P, N)
    ab = op.act_dtype.width // 8
    x_buf = f(at, (slots, H, R, P), (("dyn", 16 // ab), R * P, P, 1), align_bytes=16)
    if (P * ab) % 16:
        x_buf = f(at, (slots, H, R, P), ("dyn", R * P, P, 1))
    B_buf = f(at, (slots, G, R, N), ("dyn", R * N, N, 1))
    dt_buf = f(Float32, (slots, H, R), ("dyn", R, 1))
    dA_buf = f(Float32, (slots, H, R), ("dyn", R, 1))
    cur = [f(Int32, (slots,), (1,)) for _ in range(5)]   # write_pos, origin, flush_count, pending, arrive
    seed = f(Int64, (1,), (1,), align_bytes=8) if op.any_sr else None
    order = (f(Int32, (5 if op.order_cursors else 2, common.sym()), ("dyn", 1)) if op.row_order
             else None)
    return (x, dt, A, B, C, D, z, dt_bias, idx, out, hi, hi_s, hi_g, lo, lo_s, lo_g,
            x_buf, B_buf, dt_buf, dA_buf, *cur, seed, order, Int32(-1), common.fake_stream())


def _compile_op(kernel_cache: KernelCache, key, cls, kw: dict, dump, draft_modes=()):
    """``cls(**kw)`` compiled (tensor-free, TVM-FFI, the fake tensors of :func:`_fake_args` with
    ``draft_modes``) once per ``key`` in ``kernel_cache``; with ``dump`` uncached."""
    return common.compile_tvm_ffi_cached(kernel_cache, key, lambda: cls(**kw),
                                         lambda op: _fake_args(op, draft_modes),
                                         lambda op: {"cfg": op.cfg, "op": op}, dump=dump)


def _compile_keep_ptx(compile_fn, args, keep_ptx: bool):
    """``(compile_fn(*args), ptx)``; with ``keep_ptx`` the compile is uncached and dumps its PTX
    (``compile_fn`` takes a ``dump`` keyword), else ``ptx`` is None."""
    if not keep_ptx:
        return compile_fn(*args), None
    with common.dump_ptx() as d:
        k = compile_fn(*args, dump=d)
        ptx = d.read() or None
        d.cleanup()
    k.ptx = ptx
    return k, ptx


def _require_ffi():
    if not common.HAS_TVM_FFI:
        raise RuntimeError("the Mamba-2 replay kernel needs apache-tvm-ffi (TVM-FFI call path)")


def compile_mamba2_replay(pair_name, act_dtype, dt_dtype, H: int, P: int, N: int, G: int, L: int,
                          R: int, has_D: bool, has_z: bool, has_dt_bias: bool, dt_softplus: bool,
                          heads_per_cta: int, has_state_batch_indices: bool = True,
                          prefetch: Optional[bool] = None,
                          min_blocks_per_mp: Optional[int] = None,
                          dump: Optional["common.dump_ptx"] = None,
                          flush_impl: Optional[int] = None,
                          nonflush_mma: Optional[bool] = None,
                          staged: Optional[bool] = None,
                          early_arrive: Optional[bool] = None,
                          row_order: bool = False, rows: int = 0,
                          flush_positions: int = 0,
                          pf_early: Optional[bool] = None,
                          num_threads: int = NUM_THREADS, row_split: int = 1,
                          early_read: Optional[bool] = None,
                          few_rows: bool = False, smem_ctas_cap: int = 0,
                          philox_rounds: Optional[int] = None) -> CompiledKernel:
    """Compile (once per key, tensor-free, TVM-FFI) the replay decode kernel. Every argument is
    baked into the binary and forms the cache key; ``batch`` and ``num_slots`` stay symbolic.
    Call ``k.ffi(x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out, hi_words, hi_scale,
    hi_global_scale, lo_words, lo_scale, lo_global_scale, x_buf, B_buf, dt_buf, dA_buf, write_pos,
    ring_origin, flush_count, pending, arrive, seed, order, pad_slot_id)`` (``None`` for absent
    tensors; ``order``: ``row_order`` below; see :func:`mamba2_replay_decode_cute`). Tuning knobs
    (also part of the key): ``prefetch`` (non-flush rows load the next head's read copy before
    reducing the current one; default: on for nvfp4 / fp8 read copies when ``heads_per_cta > 1``;
    ``REPLAYSSM_M2_PREFETCH``) and ``min_blocks_per_mp`` (``.minnctapersm`` occupancy hint =
    register cap for ptxas; 0 = ptxas' choice; None = :func:`default_min_blocks_per_mp`;
    ``REPLAYSSM_M2_MINBLOCKS``), ``early_read`` (the first head's read set issued before the
    preamble; None: :data:`EARLY_READ_ENV`, else the kernel's rule -- launches pick
    :func:`early_read_for`), ``few_rows`` (fp8 / nvfp4 one-head builds for launches of few rows
    take the occupancy hint :data:`EARLY_WIDE_MINB`; launches pick :func:`few_rows_hint_for`);
    from the environment only: ``REPLAYSSM_M2_MMA_FOLD`` (the flush's
    fold on the tensor cores).
    Implementation switches (part of the key; None = the env default): ``flush_impl`` 2 (single
    fold pass, default; ``REPLAYSSM_M2_FLUSH``) or 1 (the original two-pass flush), ``staged``
    (nvfp4 non-flush read sets staged in smem by cp.async; ``REPLAYSSM_M2_STAGED``),
    ``nonflush_mma`` (nvfp4 non-flush dots on the tensor cores with 16-bit acts;
    ``REPLAYSSM_M2_MMA``), ``early_arrive`` (cursors read by thread 0 and the row's arrival at
    the CTA start; ``REPLAYSSM_M2_EARLY_ARRIVE``), ``row_order`` (grid position -> (row, slot)
    from the flush-first order, an extra ``order [2, >= batch]`` int32 argument before
    ``pad_slot_id``; None there otherwise), ``rows`` / ``flush_positions`` (a split launch's
    half: :func:`use_split`), ``pf_early`` (L2 prefetches before the PDL wait, without
    ``row_order``; None: :data:`PF_EARLY_ENV`, else off), ``row_split`` (each head's rows over
    that many CTAs, :func:`check_row_split`; launches without ``row_order``), ``smem_ctas_cap``
    (a split non-flush half at most that many CTAs per SM: :func:`split_nonflush_cap`),
    ``philox_rounds`` (the SR generator's rounds: the cache's; None = 10). With ``dump`` the
    compile bypasses the cache."""
    _require_ffi()
    kw, key = _resolve(pair_name, act_dtype, dt_dtype, H, P, N, G, L, R, has_D, has_z,
                       has_dt_bias, dt_softplus, heads_per_cta, has_state_batch_indices, prefetch,
                       min_blocks_per_mp, flush_impl, nonflush_mma, staged, early_arrive,
                       row_order, rows, flush_positions, pf_early, num_threads, row_split,
                       early_read, few_rows, smem_ctas_cap, philox_rounds)
    return _compile_op(_CACHE, key, Mamba2ReplayDecode, kw, dump)


def compile_only(pair_name="nvfp4/fp16sr", act_dtype="bfloat16", dt_dtype="float32", H: int = 128,
                 P: int = 64, N: int = 128, G: int = 8, L: int = 16, R: Optional[int] = None,
                 has_D: bool = True, has_z: bool = False, has_dt_bias: bool = True,
                 dt_softplus: bool = True, heads_per_cta: int = 1,
                 has_state_batch_indices: bool = True,
                 keep_ptx: bool = True,
                 num_threads: int = NUM_THREADS,
                 row_split: int = 1,
                 philox_rounds: Optional[int] = None) -> Tuple[CompiledKernel, Optional[str]]:
    """Compile one variant without a GPU (``CUTE_DSL_ARCH=sm_90a``). Defaults: Nemotron-3-Super
    layer, L=16, decode-only ring (R = L + 1). Returns ``(kernel, ptx_or_None)``; with ``keep_ptx``
    the compile is uncached and the PTX text is returned."""
    if R is None:
        R = L + 1
    args = (pair_name, act_dtype, dt_dtype, H, P, N, G, L, R, has_D, has_z, has_dt_bias,
            dt_softplus, heads_per_cta, has_state_batch_indices)
    return _compile_keep_ptx(functools.partial(compile_mamba2_replay, num_threads=num_threads,
                                               row_split=row_split, philox_rounds=philox_rounds),
                             args, keep_ptx)


from replayssm_lp._validate import cache_plan, env_reader  # noqa: E402  (launcher helpers)


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
                              min_blocks_per_mp: Optional[int] = None,
                              flush_impl: Optional[int] = None, staged: Optional[bool] = None,
                              nonflush_mma: Optional[bool] = None, _memo=None):
    """One ReplaySSM decode step of a :class:`replayssm_lp.Mamba2ReplayCache` on CUDA tensors
    (inputs validated by the torch layer: x, z, out [batch, H, P] act dtype; dt [batch, H] fp32 or
    act; A, D, dt_bias [H] fp32; B, C [batch, G, N] act; ``state_batch_indices`` int32 [batch] or
    None = row i -> slot i). Updates the cache (flush rows: hi/lo, scales, flush_count; every valid
    row: its buffer entry and cursors) and writes ``out``. Allocates no device memory, no host sync;
    launches on the current torch stream (CUDA-graph capturable once compiled: warm every
    heads_per_cta variant up before capture). Returns ``out``. ``flush_impl`` / ``staged`` /
    ``nonflush_mma``: implementation switches (None = the defaults, env-overridable; see
    :func:`compile_mamba2_replay`). ``_memo``: the memo of the cache's plan when the caller has
    just validated it."""
    batch, H, P = x.shape
    if out is None:
        out = x.new_empty(x.shape)
    if batch == 0:
        return out
    # hot path: the cache's plan (valid while the cache holds the same tensors) memoises, per call
    # signature, the launch (compiled function + kernel-ready views of the stored copies)
    memo = cache_plan(cache).memo if _memo is None else _memo
    key = (x.dtype, dt.dtype, H, P, B.shape, D is None, z is None, dt_bias is None,
           dt_softplus, state_batch_indices is None,
           batch, heads_per_cta, prefetch, min_blocks_per_mp,
           flush_impl, staged, nonflush_mma, common.HAS_TVM_FFI, _env())
    launch = common.memo_launch(
        memo, "m2_replay_launch", key, make_launch, cache, x, dt, B, D, z, dt_bias, dt_softplus,
        state_batch_indices, heads_per_cta, prefetch, min_blocks_per_mp, flush_impl, staged,
        nonflush_mma)
    launch(cache, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out, pad_slot_id)
    return out


def make_launch(cache, x, dt, B, D, z, dt_bias, dt_softplus, state_batch_indices,
                heads_per_cta=None, prefetch=None, min_blocks_per_mp=None, flush_impl=None,
                staged=None, nonflush_mma=None):
    """``launch(cache, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out, pad_slot_id)``:
    the kernel call for one call signature (x / dt dtypes, shapes, which optional inputs are
    given, the launch heuristics' choice for this batch) on ``cache``'s current stored copies
    (compiled on first use; views of the stored copies made here). The environment variables
    :data:`_ENV_NAMES` are read here: a caller that memoises the launch keys it by their values
    too. Only valid while the cache holds the same stored-copy tensors: keep it in the memo of
    the cache's plan (:func:`replayssm_lp._validate.cache_plan`), as this launcher and the ops'
    fast path do. The launch reads the ring buffers, cursors and seed from the cache per call.
    Where :func:`use_split` or :func:`use_small_split` says so, two launches at once
    (:func:`_split_launch`)."""
    if (min_blocks_per_mp is None and _split_honours()
            and (use_split(cache, x.shape[0]) or use_small_split(cache, x.shape[0]))):
        return _split_launch(cache, x, dt, B, D, z, dt_bias, dt_softplus, state_batch_indices,
                             heads_per_cta, prefetch, flush_impl, staged, nonflush_mma)
    return _launcher(_launch_entry(cache, x, dt, B, D, z, dt_bias, dt_softplus,
                                   state_batch_indices, heads_per_cta, prefetch, min_blocks_per_mp,
                                   flush_impl, staged, nonflush_mma))


def use_split(cache, batch: int) -> bool:
    """Whether a decode of ``batch`` rows runs as a split launch (:func:`_split_launch`):
    ``REPLAYSSM_M2_SPLIT`` = 0 / 1 forces (1 still needs the flush-first order); else fp8 /
    nvfp4 read copies (:data:`SPLIT_READ_FMTS`) from :data:`SPLIT_MIN_BATCH` rows, the others
    (fp32 / bf16 / fp16) from :data:`SPLIT_WIDE_MIN_L` entries (fp32: 16 where a group's heads
    are a multiple of :data:`SPLIT_FP32_L16_HEADS`) and their :data:`SPLIT_WIDE_MIN_BATCH` rows
    (below, their shared build already runs 7 CTAs/SM)."""
    if not use_row_order(cache, batch):
        return False
    forced = _env_flag(SPLIT_ENV)
    if forced is not None:
        return forced
    if cache.pair.read_fmt in SPLIT_READ_FMTS:
        return batch >= SPLIT_MIN_BATCH
    fmt = cache.pair.read_fmt
    if fmt not in SPLIT_WIDE_MIN_L or batch < SPLIT_WIDE_MIN_BATCH[fmt]:
        return False
    min_l = SPLIT_WIDE_MIN_L[fmt]
    if fmt == "fp32" and (cache.nheads // cache.ngroups) % SPLIT_FP32_L16_HEADS == 0:
        min_l = 16
    return cache.buffer_len >= min_l


def use_small_split(cache, batch: int) -> bool:
    """Whether a decode of fewer than :data:`SPLIT_SMALL_BELOW` rows runs as a split launch
    where :func:`use_split` does not, with its order (also below :data:`ROW_ORDER_MIN_BATCH`):
    at the (buffer length, rows) of :data:`SPLIT_SMALL_RULE`, where a flushing row's CTAs set a
    step that has few others to hide them behind.
    ``REPLAYSSM_M2_ORDER`` or ``REPLAYSSM_M2_SPLIT`` = 0 turns it off (= 1 forces the split at
    any batch, :func:`use_split`). The order's scratch is one per cache: these batches now
    write it too (see :func:`use_row_order`)."""
    from .row_order import small_split_applies

    if _env_flag("REPLAYSSM_M2_ORDER") is False or _env_flag(SPLIT_ENV) is False:
        return False
    return small_split_applies(SPLIT_SMALL_RULE, cache, batch, SPLIT_SMALL_BELOW)


def split_nonflush_heads(read_fmt: str, batch: int, H: int, G: int) -> int:
    """Heads per CTA of the split's non-flush launch: the first of :data:`SPLIT_NONFLUSH_HEADS`
    that divides ``H / G``, from :data:`SPLIT_NONFLUSH_HEADS_FROM` rows (by read copy); else
    :func:`choose_heads_per_cta` (whose ``REPLAYSSM_M2_HEADS_PER_CTA`` override wins here too)."""
    base = choose_heads_per_cta(batch, H, G)
    if os.environ.get("REPLAYSSM_M2_HEADS_PER_CTA"):
        return base
    start = SPLIT_NONFLUSH_HEADS_FROM.get(read_fmt, SPLIT_NONFLUSH_HEADS_FROM_OTHER)
    fits = [h for h in SPLIT_NONFLUSH_HEADS if (H // G) % h == 0]
    return fits[0] if batch >= start and fits else base


def _split_honours() -> bool:
    """Whether the split's own builds honour the environment: not with the tuning switch of one
    kernel's occupancy (``REPLAYSSM_M2_MINBLOCKS``) nor the profiling build (one record per CTA
    of one kernel)."""
    return os.environ.get("REPLAYSSM_M2_MINBLOCKS") in (None, "") and not _prof_default()


def _no_order(ent):
    """A launch entry without its order kernel (the kernel takes the order another step of the
    same call computed)."""
    return ent[:8] + (None,) + ent[9:]


def _split_launch(cache, x, dt, B, D, z, dt_bias, dt_softplus, state_batch_indices,
                  heads_per_cta, prefetch, flush_impl, staged, nonflush_mma):
    """The split decode (:func:`use_split`): the flush-first order kernel (rows, slots,
    cursors), then the flush rows' persistent launch (``rows`` = 2: no read set; its CTAs walk
    the order's leading flush rows) on a high-priority side stream and the non-flush rows'
    launch (``rows`` = 1: no flush code or buffers, :data:`SPLIT_NONFLUSH_MINB` CTAs/SM) on the
    caller's stream at once, joined before return. Heads per CTA: the non-flush half's
    ``heads_per_cta`` if given, else :func:`split_nonflush_heads` (:func:`choose_heads_per_cta`
    where that build would not fit an SM's shared memory); the flush half's
    ``REPLAYSSM_M2_SPLIT_HPC2``, else ``heads_per_cta`` if given, else
    :func:`choose_heads_per_cta`. Same arguments as :func:`make_launch`'s result."""
    from .row_order import ConcurrentHalves

    batch, H, P = x.shape
    G, N = B.shape[1], B.shape[2]
    has_idx = state_batch_indices is not None
    base = (cache.pair, x.dtype, dt.dtype, H, P, N, G, cache.buffer_len, cache.ring,
            D is not None, z is not None, dt_bias is not None, dt_softplus)
    impl = dict(flush_impl=flush_impl, nonflush_mma=nonflush_mma, staged=staged, row_order=True,
                philox_rounds=cache.philox_rounds)
    if heads_per_cta is None:
        narrow = choose_heads_per_cta(batch, H, G)
        hpc1 = split_nonflush_heads(cache.pair.read_fmt, batch, H, G)
        if hpc1 != narrow and not _nonflush_fits(base, hpc1, has_idx, prefetch, impl):
            hpc1 = narrow
        hpc2 = _env_int(SPLIT_HPC2_ENV) or narrow
    else:
        hpc1, hpc2 = heads_per_cta, _env_int(SPLIT_HPC2_ENV) or heads_per_cta
    cap = split_nonflush_cap(base, hpc1, hpc2, has_idx, prefetch, impl, batch)
    k1 = compile_mamba2_replay(*base, hpc1, has_idx, prefetch, None, rows=1, smem_ctas_cap=cap,
                               **impl)
    fpos = split_flush_positions(base, hpc2, has_idx, prefetch, impl, x.device.index)
    k2 = compile_mamba2_replay(*base, hpc2, has_idx, prefetch, None, rows=2, flush_positions=fpos,
                               **impl)
    order = order_fn(cache, 1, has_idx, True)
    ent1, ent2 = _launch_args(k1, cache, order), _launch_args(k2, cache, order)
    run_order = _order_launcher(ent1)
    nonflush = _launcher(_no_order(ent1), order_ready=True)
    flush = _launcher(_no_order(ent2), order_ready=True)
    halves = ConcurrentHalves(x.device, priority=-1)

    def launch(cache, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out, pad_slot_id):
        run_order(cache, x, state_batch_indices, pad_slot_id)
        halves(flush, nonflush, cache, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out,
               pad_slot_id)
    return launch


def _split_half(base, hpc: int, has_idx: bool, prefetch, impl: dict, rows: int,
                cap: int = 0) -> Mamba2ReplayDecode:
    """The (uncompiled) kernel object of a split launch's half: ``rows`` 1 (non-flush, at most
    ``cap`` CTAs per SM) or 2 (flush)."""
    kw, _ = _resolve(*base, hpc, has_idx, prefetch, None, impl["flush_impl"],
                     impl["nonflush_mma"], impl["staged"], None, True, rows, int(rows == 2),
                     smem_ctas_cap=cap, philox_rounds=impl.get("philox_rounds"))
    return Mamba2ReplayDecode(**kw)


SPLIT_NFCAP_ENV = "REPLAYSSM_M2_SPLIT_NFCAP"
#: below this many rows, at these buffer lengths, the split's non-flush half leaves an SM's room
#: for a flush CTA (:func:`split_nonflush_cap`). Session 39 (nvfp4/{fp16sr,fp8sr,fp32}, nocap /
#: cap, call2/g1-g3): Super L16 b64 fp16sr 67.1 -> 62.3 µs, fp32 63.5 -> 57.5 (fp8sr 1.00x), b128
#: 96.1 -> 91.1 / 94.0 -> 90.9; Nano-4B L16 and b32 within +-1 %; b256 / b512 2-5 % slower (the
#: non-flush half at 3 CTAs all along); not at L8 (capped there: Super nvfp4/fp32, Nano-4B
#: nvfp4/fp8sr 5 -> 4; Super b128 / b256 1.03 / 1.05x slower, Nano within 1 %) nor L32 (3 CTAs
#: -> 2: 0.95-1.14x, Super fp16sr b64 / b128 0.95 / 0.97x, b256 1.08-1.14x slower)
SPLIT_NFCAP_BELOW = 256
SPLIT_NFCAP_L = (16,)


def split_nonflush_cap(base, hpc1: int, hpc2: int, has_idx: bool, prefetch, impl: dict,
                       batch: int) -> int:
    """CTAs per SM of the split's non-flush half (0: as shared memory allows): one fewer than
    its shared memory allows where that many would leave no room for one CTA of the flush half,
    below :data:`SPLIT_NFCAP_BELOW` rows at the buffer lengths :data:`SPLIT_NFCAP_L`. Both
    halves start at once, and a flush CTA that finds every SM full waits for a non-flush CTA to
    retire (a whole non-flush CTA lifetime at small batches, where the flush rows are the step's
    critical path) -- the measured why of Super L16's gain; Nano-4B L16 and L8 gained nothing
    from the same room. ``REPLAYSSM_M2_SPLIT_NFCAP`` = 0 / 1 forces it off / on (where a flush
    CTA would not fit and the cap makes it fit)."""
    forced = _env_flag(SPLIT_NFCAP_ENV)
    if forced is False or (forced is None and (batch >= SPLIT_NFCAP_BELOW
                                               or base[7] not in SPLIT_NFCAP_L)):
        return 0
    nf = _split_half(base, hpc1, has_idx, prefetch, impl, 1)
    fl = _split_half(base, hpc2, has_idx, prefetch, impl, 2)
    s1, s2 = nf.smem_bytes() + 1024, fl.smem_bytes() + 1024
    k = SMEM_PER_SM // s1
    if k < 2 or k * s1 + s2 <= SMEM_PER_SM:
        return 0
    padded = _split_half(base, hpc1, has_idx, prefetch, impl, 1, k - 1)
    # the flush CTA must fit beside k - 1 non-flush ones by registers too (ptxas' caps of the
    # two occupancy hints; no hint: up to 255 a thread)
    # (allocated in units of 8 a thread: 255 -> 256)
    regs = lambda op: op.cfg.nt * (min(256, REGS_PER_SM // (op.min_blocks_per_mp * op.cfg.nt) // 8 * 8)  # noqa: E731
                                   if op.min_blocks_per_mp else 256)
    fits = ((k - 1) * (padded.smem_bytes() + 1024) + s2 <= SMEM_PER_SM
            and (k - 1) * regs(padded) + regs(fl) <= REGS_PER_SM)
    return k - 1 if fits else 0


def _nonflush_fits(base, hpc: int, has_idx: bool, prefetch, impl: dict) -> bool:
    """Whether the split's non-flush build at ``hpc`` heads per CTA fits an SM's shared memory
    (the staged nvfp4 read set grows with heads x L x P: Nemotron-3-Super at 8 heads and L16
    57.7 KB, L64 108.6 KB; P128 N256 L64 would need 288 KB)."""
    return _split_half(base, hpc, has_idx, prefetch, impl, 1).smem_bytes() + 1024 <= SMEM_PER_SM


def split_flush_positions(base, hpc2: int, has_idx: bool, prefetch, impl: dict,
                          device_index: Optional[int] = None) -> int:
    """Grid positions (rows at once) of the split's persistent flush launch: one wave of its
    CTAs (SMs x its CTAs per SM over its CTAs per row), at least 1;
    ``REPLAYSSM_M2_SPLIT_FPOS`` overrides. ``base`` / ``impl``: the build's arguments."""
    v = _env_int(SPLIT_FPOS_ENV)
    if v is not None:
        return max(1, v)
    op = _split_half(base, hpc2, has_idx, prefetch, impl, 2)
    per_sm = op.min_blocks_per_mp or 4
    return max(1, (common.num_sms(device_index) * per_sm) // op.cfg.ctas_per_row)


def _launch_args(k, cache, order_ffi=None):
    """A launch entry: ``(ffi function, hi words, hi scale, hi global scale, lo ..., any_sr,
    order_ffi, order_cursors)`` of the compiled kernel ``k`` on ``cache``'s stored copies;
    ``order_ffi``: the flush-first order kernel that runs ahead of it (``k`` compiled with
    ``row_order``), or None; ``order_cursors``: ``k`` takes the cursors from the order too."""
    op = k.meta["op"]
    return (k.ffi, *_copy_views(cache), bool(op.any_sr), order_ffi,
            bool(getattr(op, "order_cursors", False)))


#: default: the flush-first order from this many rows. H200, Nemotron-3-Super, L = 16, staggered
#: (bench/results/session5_gpu): b1 6.2 -> 9.4 µs (the extra launch), b8 19.2 -> 21.2,
#: b16 0.98-1.07x, b32 57.9 -> 47.0, b64 103.0 -> 82.7, b256 239.4 -> 195.4 (nvfp4/fp16sr)
ROW_ORDER_MIN_BATCH = 32


def use_row_order(cache, batch: int) -> bool:
    """Whether a launch of ``batch`` rows on ``cache`` runs the flush-first order kernel first
    (:mod:`cute_kernels.row_order`): ``REPLAYSSM_M2_ORDER`` = 0 / 1 forces it off / on, else from
    :data:`ROW_ORDER_MIN_BATCH` rows; never when ``batch`` exceeds the order buffer
    (``cache.row_order``, one entry per slot: only pad rows can make a batch that large)."""
    if batch > cache.row_order.shape[1]:
        return False
    forced = _env_flag("REPLAYSSM_M2_ORDER")
    if forced is not None:
        return forced
    return batch >= ROW_ORDER_MIN_BATCH


#: the flush-first order also carries the rows' cursors (default on; 0: off, tuning / A-B): the
#: decode kernel then reads row, slot and cursors in one round trip and arrives without a fence
#: (session 8, call1: nvfp4/fp16sr b256 196.2 -> 191.4 µs, fp32 339.1 -> 333.5, b512 1.01-1.03x)
ORDER_CURSORS_ENV = "REPLAYSSM_M2_ORDER_CURSORS"


def order_fn(cache, T: int, has_idx: bool, cursors: bool = False):
    """TVM-FFI function of the flush-first order kernel for ``cache`` and ``T`` appended
    entries per row (``cursors``: the [5, n] variant)."""
    from .row_order import compile_flush_first_order

    return compile_flush_first_order(cache.buffer_len, cache.ring, T, has_idx, cursors).ffi


def _copy_views(cache):
    """(hi words, hi scale, hi global scale, lo ...) views of the stored copies, memoised on the
    cache's plan (rebuilt when a cache tensor is replaced or a stored copy's storage moved)."""
    memo = cache_plan(cache).memo
    views = memo.get("m2_copy_views")
    if views is None:
        pair = cache.pair
        hi = _copy_args(cache.hi, pair.rec_fmt)
        lo = (None, None, None) if cache.lo is None else _copy_args(cache.lo, pair.read_fmt)
        views = memo["m2_copy_views"] = hi + lo
    return views


def _launch(ent, cache, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out, pad_slot_id):
    """One launch of a :func:`_launch_args` entry with the cache's buffers and cursors."""
    _launcher(ent)(cache, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out, pad_slot_id)


def _order_launcher(ent):
    """``run(cache, x, state_batch_indices, pad_slot_id) -> order``: the flush-first order kernel
    of a :func:`_launch_args` entry, into the cache's scratch (``row_order_ext`` when the entry's
    kernel takes the cursors from it, else ``row_order``)."""
    from .row_order import run_order
    order_ffi, ocur = ent[8], ent[9]

    def run(cache, x, state_batch_indices, pad_slot_id):
        return run_order(order_ffi, ocur, cache, x.shape[0], state_batch_indices, pad_slot_id)
    return run


def _launcher(ent, order_ready: bool = False):
    """The launch function of a :func:`_launch_args` entry (the entry unpacked once, into the
    closure): the per-token inputs and the cache's buffers, cursors and seed, read per call.
    ``order_ready``: the kernel (compiled with ``row_order``) takes the order an earlier launch
    of the same call computed (``cache.row_order``, or ``row_order_ext`` with the cursors)
    instead of running the order kernel."""
    from .row_order import order_scratch
    fn, hw, hs, hg, lw, ls, lg, any_sr, order_ffi, ocur = ent
    run_order = _order_launcher(ent) if order_ffi is not None else None

    def launch(cache, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out, pad_slot_id):
        order = None
        if order_ready:
            order = order_scratch(cache, ocur)
        if run_order is not None:    # the flush-first order first, into the cache's scratch
            order = run_order(cache, x, state_batch_indices, pad_slot_id)
        fn(x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out, hw, hs, hg, lw, ls, lg,
           cache.x_buf, cache.B_buf, cache.dt_buf, cache.dA_buf, cache.write_pos,
           cache.ring_origin, cache.flush_count, cache.pending, cache.arrive,
           cache.seed if any_sr else None, order, pad_slot_id)
    return launch


#: environment variables the launch decisions read (part of the launch memo key)
_ENV_NAMES = ("REPLAYSSM_M2_FLUSH", "REPLAYSSM_M2_MMA", "REPLAYSSM_M2_STAGED",
              "REPLAYSSM_M2_HEADS_PER_CTA", "REPLAYSSM_M2_EARLY_ARRIVE", "REPLAYSSM_M2_PROF",
              "REPLAYSSM_M2_MINBLOCKS", "REPLAYSSM_M2_ORDER", "REPLAYSSM_M2_MMA_FOLD",
              "REPLAYSSM_M2_PREFETCH", EARLY_READ_ENV, common.PDL_ENV,
              ORDER_CURSORS_ENV, FOLD_UNROLL_ENV, SPLIT_ENV, SPLIT_MINB1_ENV, SPLIT_MINB2_ENV,
              SPLIT_HPC2_ENV, SPLIT_FPOS_ENV, FOLD_SMEM_ENV, FOLD_ENTRIES_ENV, PF_EARLY_ENV,
              DEP_ARRIVE_ENV, THREADS_ENV, ROW_SPLIT_ENV, RING_PHYS_ENV, LATE_CHECK_ENV,
              lp.F16_SR_CHUNK_ENV, E2M1_ENV, FOLD_PAIR_ENV, SPLIT_NFCAP_ENV, PAIR_ROLL_ENV)
_env = env_reader(_ENV_NAMES)


def _launch_entry(cache, x, dt, B, D, z, dt_bias, dt_softplus, state_batch_indices,
                  heads_per_cta, prefetch, min_blocks_per_mp, flush_impl, staged, nonflush_mma):
    """A :func:`_launch_args` entry for one call signature on one cache plan."""
    batch, H, P = x.shape
    G, N = B.shape[1], B.shape[2]
    if heads_per_cta is None:
        heads_per_cta = choose_heads_per_cta(batch, H, G)
    pair = cache.pair
    ordered = use_row_order(cache, batch)
    has_idx = state_batch_indices is not None
    threads = NUM_THREADS if ordered else launch_threads()
    split = 1 if ordered or heads_per_cta != 1 else row_split_for(cache, batch, threads)
    k = compile_mamba2_replay(pair, x.dtype, dt.dtype, H, P, N, G, cache.buffer_len, cache.ring,
                              D is not None, z is not None, dt_bias is not None, dt_softplus,
                              heads_per_cta, has_idx, prefetch,
                              min_blocks_per_mp, flush_impl=flush_impl, nonflush_mma=nonflush_mma,
                              staged=staged, row_order=ordered,
                              pf_early=not ordered and use_pf_early(cache, batch),
                              num_threads=threads, row_split=split,
                              early_read=early_read_for(cache, batch, heads_per_cta, split,
                                                        ordered),
                              few_rows=few_rows_hint_for(cache, batch, heads_per_cta, split,
                                                         ordered),
                              philox_rounds=cache.philox_rounds)
    ocur = bool(getattr(k.meta["op"], "order_cursors", False))
    return _launch_args(k, cache, order_fn(cache, 1, has_idx, ocur) if ordered else None)
