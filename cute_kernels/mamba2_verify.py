"""Mamba-2 ReplaySSM speculative verify (T draft tokens per row) in CuTe DSL: ONE launch per call
for a batch whose rows sit at different buffer positions, for every precision pair.

Semantics: ``replayssm_lp.reference.mamba2_replay`` with T inputs per row and ``commit_all=False``
(the spec), plus ``_flush_rows`` / ``mamba2_fold`` / ``cache.write_state`` for the rows with
``h + T > L`` (h = ``write_pos[s]``). Per row (slot ``s``, origin = ``ring_origin[s]``, logical
entry j at physical ring index ``(origin + j) % R``):

* **outputs** (every valid row): with the E = h + T entries ``e`` -- the h committed ring entries,
  then the T drafts -- and their cumulative log decay Λ (one scan over all E), query t sits at
  ``q = h + t`` and ``y_t = Σ_{e<=q} exp(Λ_q − Λ_e)·dt'_e·(B_e·C_t)·x_e + exp(Λ_q)·(S·C_t) + D·x_t``
  (``*= silu(z_t)``). Non-flush rows: S = the read copy (``lo``; ``hi`` for shared pairs), read
  once for all T queries. Flush rows, as the spec does it: fold first, then
  ``y_t = exp(Λ_q − Λ_{h−1})·(S_new·C_t) + Σ_{h<=e<=q} (draft terms) + D·x_t`` with the fp32 fold
  S_new = exp(Λ_{h−1})·S_hi + Σ_{j<h} exp(Λ_{h−1} − Λ_j)·dt'_j·x_j ⊗ B_j (expanding S_new·C_t gives
  the sum above); the dots S_new·C_t are formed inside the flush's chunk loop from the fp32 fold
  (v2 flush), so hi is read once. Results differ from the spec by fp32 rounding (summation order).
* **flush rows** (h + T > L): fold the h committed entries into hi and write hi + lo exactly as the
  decode kernel does (its ``_flush2`` / ``_flush``: fp32 fold, bit-exact RN/SR encoders incl.
  nvfp4, Philox counters with generation = ``flush_count[s]`` as read at kernel start), then
  ``ring_origin += h``, ``write_pos = 0``, ``flush_count += 1``. ``_flush2`` takes the T query dots
  of S_new in place of the decode output (``_flush_dots``); with the v1 flush (``flush_impl=1``)
  the outputs come first, from hi before the flush rewrites it, and the decode flush's own T = 1
  output goes to a shared-memory sink. The fp32 pair from T = FRAG_MIN_T (SPLIT_FRAG_MIN_T in a
  split's flush launch) folds and takes those dots on tf32 tensor cores instead (``_flush_frag``:
  exact products, the tensor cores' fp32 sums, so its hi differs from the CUDA-core fold by fp32
  rounding).
* **append** (every valid row): x_t, B_t, dt'_t, A·dt'_t at logical h'..h'+T−1 (h' = 0 after a
  flush) of the (possibly moved) ring; these positions never hold an entry this call reads.
* **cursors** (last CTA of the row, ``arrive`` counter as in the decode kernel): ``write_pos = h'``,
  ``pending = T`` (verify never commits; :func:`replayssm_lp.ops.commit` moves ``write_pos``).
* pad rows (``state_batch_indices == pad_slot_id`` or outside ``[0, num_slots)``): nothing at all.

Launch: grid ``(H / heads_per_cta, batch)``, 128 threads; a CTA owns one row and ``heads_per_cta``
consecutive heads of one group (:func:`cute_kernels.mamba2_replay.choose_heads_per_cta`). The
split launch (``rows``; :func:`_use_split`) runs the grid twice, the non-flush rows in a build
without the flush code or buffers (its own occupancy) and the flush rows in one with the flush's
(the fp32 pair's: 3 CTAs/SM), both at once on two streams (:func:`_split_concurrent`), the rows'
cursors taken from the flush-first order's entries. Per CTA:

1. cursors; C_t of all T queries to smem (``sCT[n, t]``, t contiguous: one 16-byte load gives four
   queries' C at a column);
2. ``cb[e, t] = B_e·C_t`` for every entry (one warp per entry, lanes over N, one transposed
   butterfly for the T sums);
3. per head (one warp per head): dt'_t and A·dt'_t of the drafts (appended to dt_buf / dA_buf), the
   inclusive scan of the log decays over the E entries, the output coefficients
   ``coef[t, e] = exp(Λ_q − Λ_e)·dt'_e·cb[e, t]`` (causal mask e <= q), ``exp(Λ_q)``, and for flush
   rows the decode kernel's fold weights ``exp(Λ_{h−1} − Λ_j)·dt'_j`` and ``exp(Λ_{h−1})``;
4. per head: the state rows go to registers with 16-byte loads (the decode kernel's non-flush
   mapping, :class:`cute_kernels.mamba2_replay.ReplayTile`: TN lanes per row, RPT rows per thread),
   then the T dots ``S·C_t``:

   * nvfp4 copies with 16-bit acts (``use_mma``, env ``REPLAYSSM_M2V_MMA``, default on):
     tensor cores, ``mma.sync.m16n8k16`` f16 -> f32 with the queries as the 8 columns -- the
     decode kernel's A operand (e2m1·s_blk·2^-7 in fp16, exact) and k permutation, B = C_t in fp16
     (exact for fp16 acts; bf16 acts: C_t scaled by an exact power of two per query), so every
     product is exact and the sums are fp32 tensor-core accumulation; 8 k-steps per 16 rows, the
     row sums land in the lanes finished (no lane reduction); T > 8: a second n8 query tile
     against the same A fragments (``mma_nq``; their B fragments in shared memory between heads
     by ``_mma_bsmem_default``'s rule, ``REPLAYSSM_M2V_MMA_BSMEM``; until session 51 CUDA
     cores above 8 drafts, ``REPLAYSSM_M2V_MMA_MAX_T=8`` for that);
   * fp32 / fp16 / bf16 / fp8 copies with 16-bit acts, N = 128 (``mma_w``, env
     ``REPLAYSSM_M2V_MMA_WIDE``, default on): tf32 ``mma.sync.m16n8k8`` over a tile of 4 lanes
     per state row (the thread's two rows are rows g, g+8 of an m16 tile, each lane's own 32
     columns its k slots, B = C_t at the same columns); fp16 / bf16 / e4m3 values are exact in
     tf32, fp32 values go as three exact tf32 pieces (three mmas), C_t is exact: every product
     exact, fp32 accumulation (``_mma_wide_dot``); T > 8 as above, both tiles' C held packed
     two values a register;
   * every other case (fp32 acts, N != 128 for the tf32 dot): CUDA cores,
     each element decoded once and multiplied with the T columns of C in fp32 FMA (one vector smem
     load of C per column, shared by a group of rows), the rows·T sums reduced over the TN lanes
     with one transposed butterfly -- no tf32 / fp16 rounding of fp32 and 16-bit copies;

   the sums land in smem (``sDot[t, p]``, scaled); the x_e rows of the E entries of every head
   were staged in smem right after the cursors (``xs``: ring entries by cp.async, drafts by plain
   loads; flush rows of fp8 / nvfp4 read copies and of split pairs' bf16 / fp16 ones stage their
   drafts too, ``xd``), so the head loop
   waits on no global load but the state's; then ``Y = coef·X + exp(Λ)·sDot + D·x`` (a T×E by
   E×P product, one (t, p) output per thread step), gated and stored;
   (flush rows, v2 flush: steps 4's dots come from ``_flush2``, which runs first; the outputs
   then take the drafts only);
5. flush rows: the decode kernel's flush; then the append and the cursor update.

Numerics: fp32 everywhere (the tensor-core path: exact products, fp32 accumulation -- what the
decode kernel's nvfp4 read path does). The CUDA-core nvfp4 decode multiplies e2m1 by the block
scale exactly in fp32 and applies the global scale after the row sum; fp8 applies the row scale
after the row sum.

Public entry points: :func:`compile_mamba2_verify` (tensor-free, cached by scalars),
:func:`mamba2_verify_cute` (launcher on a :class:`replayssm_lp.Mamba2ReplayCache`),
:func:`supports_cache`, :func:`compile_only` (CPU compile tests).
"""

from __future__ import annotations

import functools
import os
from typing import Optional, Tuple

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Float32, Int32, Int64, Uint32, const_expr
from cutlass.cute.nvgpu import cpasync

from replayssm_lp._validate import cache_plan, env_reader
from replayssm_lp.pairs import parse_pair

from . import common
from . import lowprec as lp
from .common import CompiledKernel, KernelCache, dtype_name
from .mamba2_replay import (
    CHUNK,
    FOLD_ENTRIES_ENV,
    FOLD_UNROLL_ENV,
    Mamba2ReplayDecode,
    ReplayTile,
    _compile_keep_ptx,
    _compile_op,
    _e2m1x8_to_f16x2,
    fold_entries_max,
    fold_smem_bytes,
    _fp16_range_exponent,
    _launch_args,
    _launcher,
    _no_order,
    _order_launcher,
    _mma_nvfp4_tile,
    _BITS,
    _absmax16,
    _add_rn,
    _dep_f32,
    _dep_i32,
    _fold_pair_env,
    _fold_unroll,
    _mma_fold_default,
    _opaque_i32,
    _pair_roll_env,
    _pow2_f32,
    _prof_default,
    _sel_i32,
    _silu_gate,
    _warp_inclusive_scan,
    E2M1_ENV,
    FOLD_PAIR_ENV,
    PAIR_ROLL_ENV,
    choose_heads_per_cta,
    e2m1_magic,
    fold_a_frag,
    order_fn,
    use_row_order,
)

__all__ = [
    "Mamba2VerifyKernel",
    "MAX_DRAFT",
    "compile_mamba2_verify",
    "compile_only",
    "mamba2_verify_cute",
    "supports_cache",
]

#: 64-bit words after the phase stamps in a profiling record: non-flush CTAs the per-head sums
#: (dots + x, outputs), flush CTAs the flush's sub-phase sums (head start, fold, hi wait,
#: dots, encode + store + issue; thread 0's clocks)
PROF_EXTRA = 5
MAX_DRAFT = 16                     # largest T compiled (smem and registers scale with T)
_ACC_PER_GROUP = 32                # accumulators per row group of the state dot (rows x T)


def _mma_default() -> bool:
    """``REPLAYSSM_M2V_MMA`` (0 / 1; default 1): nvfp4 state dots on the tensor cores (16-bit
    acts, T <= ``_mma_max_t()``); 0 = the CUDA-core FMA path everywhere (fallback / A-B runs)."""
    return os.environ.get("REPLAYSSM_M2V_MMA", "1") != "0"


#: A-B switch: the largest T whose state dots take the tensor cores (unset: MMA_MAX_T_DEFAULT;
#: MAX_DRAFT = two n8 query tiles above 8 drafts, session 49; 8 = the CUDA-core dots above 8)
MMA_MAX_T_ENV = "REPLAYSSM_M2V_MMA_MAX_T"
#: MAX_DRAFT since session 51 (H100, Super b256 L16, with B in smem: T12 fp32 1340.6 -> 1024.9
#: µs, non-flush only 1806.6 -> 620.3; nvfp4/fp16sr 1715.2 -> 1548.5, 1031.9 -> 398.7;
#: bench/results/session51_gpu/call1/g1/knobs.md)
MMA_MAX_T_DEFAULT = MAX_DRAFT


def _mma_max_t() -> int:
    """``REPLAYSSM_M2V_MMA_MAX_T`` (default MMA_MAX_T_DEFAULT): above 8 drafts the tensor-core
    dots take a second n8 query tile (``mma_nq``)."""
    v = os.environ.get(MMA_MAX_T_ENV, "")
    return int(v) if v.isdigit() else MMA_MAX_T_DEFAULT


#: A-B switch (0 / 1; unset: :func:`_mma_bsmem_default`'s rule): above 8 drafts the dots' B
#: fragments (32 words a lane) are kept in shared memory and loaded per head (16-byte loads)
#: instead of held in registers through the head loop
MMA_BSMEM_ENV = "REPLAYSSM_M2V_MMA_BSMEM"


def _mma_bsmem_default(rows: int) -> bool:
    """B fragments in smem (``MMA_BSMEM_ENV`` forces) in a split's non-flush launch (rows 1, the
    builds timed: session 51, H100, Super b256 L16, non-flush only T12 fp32 746.8 -> 620.3 µs,
    nvfp4/fp16sr 423.7 -> 398.7; T16 791.8 -> 652.9, 466.4 -> 437.1); registers elsewhere: a
    flush launch never runs the non-flush dots (the smem would only cost occupancy: nvfp4/fp32
    T12 3 -> 2 CTAs/SM), and in the single launch below 128 rows (untimed) ptxas spills more
    with them in smem (fp32 T12 at 2 / 4 heads per CTA 0 -> 64 / 8 -> 80 B, fp8/fp32 T12 at 4
    heads 0 -> 52 B) or the CTA loses occupancy / its drafts buffer (nvfp4/fp8sr T12 at 1 head
    4 -> 3 CTAs/SM)."""
    v = os.environ.get(MMA_BSMEM_ENV, "")
    if v in ("0", "1"):
        return v == "1"
    return rows == 1


def _mma_wide_default() -> bool:
    """``REPLAYSSM_M2V_MMA_WIDE`` (0 / 1; default 1): fp32 / fp16 / bf16 / fp8 read copies' state
    dots on the tensor cores as well (tf32 m16n8k8, 16-bit acts; see ``_mma_wide_dot``). H200,
    Nemotron-3-Super, L = 16, T = 8, b256 (bench/results/session9_gpu call8, same run, off / on):
    fp32 1104.6 -> 933.1 µs (non-flush only 957.2 -> 686.9), fp8/fp32 1067.3 -> 855.1, bf16/fp32
    1101.5 -> 873.9. Found by the profiling build's per-head split (call7): the CUDA-core dots
    were 38 of a fp32 non-flush CTA's 45 µs of read + outputs."""
    return os.environ.get("REPLAYSSM_M2V_MMA_WIDE", "1") != "0"


WIDE_FMTS = ("fp32", "fp16", "bf16", "fp8")



XSTAGE_ENV = "REPLAYSSM_M2V_XSTAGE"


def _xstage_default() -> bool:
    """``REPLAYSSM_M2V_XSTAGE`` (0 / 1; default 1): non-flush rows stage the x of every entry of
    every head of the CTA in shared memory (act dtype) right after the cursors -- ring entries
    by cp.async, drafts by plain loads stored once the C loads are in -- so the per-head loop
    waits on no global load but the state's; the append then takes the drafts' x from there.
    0 = each head's x staged after its dots (a global round trip per head). H200,
    Nemotron-3-Super, L = 16, T = 8, b256 (bench/results/session10_gpu/call2, same run, 0 / 1):
    fp32 920.6 -> 788.9 µs (non-flush only 672.0 -> 429.4), fp8/fp32 838.2 -> 719.2 (527.1 ->
    298.4), nvfp4/fp16sr 964.3 -> 863.4 (558.6 -> 364.1); outputs and caches bit-identical."""
    return os.environ.get(XSTAGE_ENV, "1") != "0"


XDRAFT_ENV = "REPLAYSSM_M2V_XDRAFT"
#: read-copy formats whose flush rows stage the drafts' x by default: any pair / split pairs only
#: (the shared 16-bit pairs were not timed with it)
XDRAFT_FMTS = ("fp8", "nvfp4")
XDRAFT_SPLIT_FMTS = ("bf16", "fp16")


def _xdraft_default() -> Optional[bool]:
    """``REPLAYSSM_M2V_XDRAFT`` (0 / 1; unset: on for XDRAFT_FMTS read copies and the
    XDRAFT_SPLIT_FMTS ones of split pairs, where its buffer costs no CTA per SM -- not fp8 at
    T = 16, for one; with the x staging only): flush rows load the drafts' x right after the
    cursors too, into a buffer of their own (the union buffer is the flush's), so their outputs
    and the append take it from shared memory instead of a global round trip per head and one more for the append. H200,
    Nemotron-3-Super, L = 16, T = 8, b256 (bench/results/session10_gpu/call5, same run, off /
    on): fp8/fp32 721.1 -> 691.8 µs, nvfp4/fp16sr 863.9 -> 834.8 (flush only 2027.8 ->
    1942.5); fp32 792.4 -> 818.4 (flush only 1662.3 -> 1607.6 but non-flush 430.0 -> 503.5:
    its build is at the 128-register cap), hence off there. bf16 / fp16 read copies
    (session12_gpu/call4, off / on, T = 8): bf16/fp32 b256 752.7 -> 715.8, b512 1466.4 ->
    1403.9; fp16/fp32 756.8 -> 719.4, 1468.1 -> 1404.1 (call1: bf16/fp32 b256 T = 6 558.9 ->
    551.9)."""
    v = os.environ.get(XDRAFT_ENV)
    return None if v is None else v == "1"


def _verify_fold_unroll() -> int:
    """The v2 flush's fold unroll in the verify kernel: ``REPLAYSSM_M2_FOLD_UNROLL`` when set,
    else 2. H200, T = 8 b256 (bench/results/session10_gpu/call4, same run, 1 / 2): fp32 789.2
    -> 775.9 µs (flush only 1668.4 -> 1619.1), nvfp4/fp16sr 868.0 -> 869.4; bit-identical."""
    return _fold_unroll(2)


#: the verify's fold staging round in KiB (tuning; default the decode's 32): with more entries
#: than one round holds the flush takes the two-pass version (session 22 call 1, L32 T8 sized
#: for the ring's 39 entries at N128 P64, 30 KiB: at 24 KiB 1.9-2.7x slower; since session 23
#: the fold holds max(L, T) = 32 entries, 24 KiB)
FOLD_SMEM_ENV = "REPLAYSSM_M2V_FOLD_SMEM"


def _verify_fold_smem() -> int:
    """Bytes of the verify's fold staging round (``REPLAYSSM_M2V_FOLD_SMEM`` KiB, default 32)."""
    return fold_smem_bytes(FOLD_SMEM_ENV)


FRAG_FLUSH_ENV = "REPLAYSSM_M2V_FRAG_FLUSH"


def _frag_flush_default() -> Optional[bool]:
    """``REPLAYSSM_M2V_FRAG_FLUSH`` (0 / 1; unset: on for T >= FRAG_MIN_T with 2 or more heads
    per CTA, i.e. from 16 rows, and from T = SPLIT_FRAG_MIN_T in a split's flush launch; 1-head
    builds keep the CUDA-core flush, not timed with this one): the fp32 pair's flush rows fold
    and take their T dots on tf32 tensor cores, the fold kept in mma fragment layout end to end
    (:meth:`Mamba2VerifyKernel._flush_frag`), instead of the CUDA-core chunk loop. H200, Nemotron-3-Super fp32, L = 16, same run, off / on (bench/results/session11_gpu/
    call8): b256 T = 8 777.1 -> 609.6 µs (flush only 1620.7 -> 916.7), T = 7 717.8 -> 575.1,
    T = 6 639.2 -> 538.5; b512 T = 8 1526.3 -> 1169.8. T = 4 (call4): 479.1 -> 519.8 (its flush
    rows fold as fast, but the mixed step is slower), hence from T = 6. b32 (2 heads per CTA;
    session12_gpu/call1, off / on): T = 6 102.9 -> 98.0 µs, T = 8 127.0 -> 106.1 (flush only
    231.2 -> 156.1)."""
    v = os.environ.get(FRAG_FLUSH_ENV)
    return None if v is None else v == "1"


FRAG_SPLIT_ENV = "REPLAYSSM_M2V_FRAG_SPLIT"
#: checkpoint formats the split pairs' fragment flush reads (hi words of a column pair: fp32
#: two, 16-bit one; an fp8 checkpoint's row scales are not in that path)
FRAG_SPLIT_REC_FMTS = ("fp32", "fp16", "bf16")


FRAG_PRELOAD_ENV = "REPLAYSSM_M2V_FRAG_PRELOAD"


def _frag_preload_default() -> bool:
    """``REPLAYSSM_M2V_FRAG_PRELOAD`` (0 / 1; default 0): the split pairs' fragment flush loads
    the next head's hi words (the first m-tile's, every n-tile: hi SPLIT_FLUSH_PD deep) before
    this head's encode pass, instead of at the next head's start -- their latency under the
    encode pass, which issues no global load. Measured off (H100, Super b256 L16, session 47
    call 2, the rule's builds without / with it): nvfp4/fp16sr T8 717.9 / 719.9 µs, nvfp4/fp32
    T8 659.2 / 654.4, T4 356.4 / 377.6, fp8/fp32 T8 677.2 / 701.8 (its registers: 36-152 B of
    spills at 168 with a 16-bit checkpoint, none without); forced for every pair it does not
    rescue the losers (T4 nvfp4/fp16sr 428.9 against the CUDA-core flush's 364.0)."""
    return os.environ.get(FRAG_PRELOAD_ENV, "0") == "1"


def _frag_split_default() -> Optional[bool]:
    """``REPLAYSSM_M2V_FRAG_SPLIT`` (0 / 1; unset: :meth:`Mamba2VerifyKernel._frag_split_rule`):
    a split pair's flush rows in a split's flush launch take the fragment flush too (:meth:`Mamba2VerifyKernel.
    _flush_frag`: the fold and the T dots on tf32 tensor cores) instead of the CUDA-core chunk
    loop, with their S_new handed through shared memory to the chunk encoders (the same bit-exact
    SR / nvfp4 / fp8 encoders and counters as the CUDA-core flush). The CUDA-core flush of
    nvfp4/fp16sr is issue-bound (session 36's profile: ~80 warp instructions per state element,
    a quarter of them the fold) and at T8 its flush rows cost 6x its non-flush rows (session 46:
    1570.7 / 261.2 µs, H100 b256)."""
    v = os.environ.get(FRAG_SPLIT_ENV)
    return None if v is None else v == "1"


#: the fragment flush by default from this many drafts (measured at T = 4, 6, 8) ...
FRAG_MIN_T = 6
#: ... and in a split's flush launch, where it does not cap the non-flush rows' registers (H200,
#: b256 / b512, session13_gpu/call6 and call8, single launch with the CUDA-core flush / split
#: with the fragment flush: T = 3 422.8 -> 409.8 / 819.4 -> 778.6 µs, T = 4 448.3 -> 423.6 /
#: 881.5 -> 800.8, T = 5 590.8 -> 465.2 / 1150.7 -> 882.6; T = 2 367.8 / 371.8, 714.5 / 707.9;
#: T = 1 325.5 / 340.2)
SPLIT_FRAG_MIN_T = 3
FRAG_PD_ENV = "REPLAYSSM_M2V_FRAG_PD"
#: 0 / 1 (default 1): the fragment flush prefetches each head's hi rows into L2 one head ahead
FRAG_L2PF_ENV = "REPLAYSSM_M2V_FRAG_L2PF"
READ_L2PF_ENV = "REPLAYSSM_M2V_READ_L2PF"
PRE_HOIST_ENV = "REPLAYSSM_M2V_PRE_HOIST"
#: 0 / 1 (default 1): the first READ_L2PF heads are prefetched after the cursors, by non-flush
#: rows only; 0: right after the slot, by every row (session12_gpu/call2 vs call3, b256 T = 4:
#: fp32 473.4 / 464.2 µs, nvfp4/fp16sr 377.8 / 374.4)
READ_L2PF_LATE_ENV = "REPLAYSSM_M2V_READ_L2PF_LATE"
#: the read copy's L2 prefetch by default up to this many drafts (timed at T = 4 and 8)
READ_L2PF_MAX_T = 4


def _read_l2pf_default(T: int, frag: bool, fp32_nonflush_launch: bool = False) -> int:
    """``REPLAYSSM_M2V_READ_L2PF`` (heads ahead; unset: 1 up to T = READ_L2PF_MAX_T in builds
    without the fragment flush and at any T in the fp32 pair's non-flush launch of a split, else
    0): thread 0 of a non-flush row's CTA prefetches the read copy's words of its first D heads into L2 (one bulk prefetch per head,
    ``cp.async.bulk.prefetch.L2``) right after the cursors -- during the C / cb / scan preamble
    -- and those of head k + D when head k starts: each head's read then waits on L2, not DRAM.
    H200, Nemotron-3-Super, b256, same run (bench/results/session12_gpu/call3, hoisted preamble
    without / with it): T = 4 fp32 471.5 -> 448.0 µs, nvfp4/fp16sr 386.3 -> 371.4, fp8/fp32
    336.9 -> 334.0; T = 8 nvfp4/fp16sr 777.4 -> 782.6, fp8/fp32 685.3 -> 682.6, and the fp32
    build with the fragment flush 586.9 -> 660.7 (its flush rows, which never prefetch, 881.2
    -> 1057.8 µs flush-only: ptxas' schedule of that 128-register build, not traffic), hence
    off there. The fp32 pair's split launch keeps the prefetch out of the flush launch
    (session13_gpu/call2, b256 T = 8, split with the SPLIT_FLUSH_* flush launch, without / with
    it in the non-flush launch): 580.0 -> 571.8 µs (non-flush only 403.7 -> 398.5)."""
    v = os.environ.get(READ_L2PF_ENV, "")
    if v.isdigit():
        return int(v)
    return 1 if ((T <= READ_L2PF_MAX_T and not frag) or fp32_nonflush_launch) else 0


#: the hoisted cb operands' registers per lane by default at most (L = 16, T <= 8, N = 128: 24;
#: larger rings were not timed with the hoist)
PRE_HOIST_MAX_REGS = 24


def _pre_hoist_default(read_fmt: str, cb_regs: int) -> bool:
    """``REPLAYSSM_M2V_PRE_HOIST`` (0 / 1; unset: on for every read copy but fp8 while the
    hoisted B_e take at most PRE_HOIST_MAX_REGS registers per lane, ``cb_regs``): the
    preamble's loads hoisted -- dt / A / dt_bias of the CTA's heads at its start, the B_e of
    the cb dots and the ring's dA / dt' right after the cursors (registers) -- so that the C,
    cb and scan phases wait on one round trip instead of three. H200, Nemotron-3-Super, b256,
    same run (bench/results/session12_gpu/call3, off / on; bit-identical): T = 8 fp32 611.6 ->
    586.9 µs (flush only 923.9 -> 881.2), nvfp4/fp16sr 778.5 -> 777.4, fp8/fp32 676.0 -> 685.3
    (hence off for fp8); T = 4 fp32 479.1 -> 471.5, nvfp4/fp16sr 390.6 -> 386.3, fp8/fp32
    341.4 -> 336.9. Profile (fp32 T = 8, non-flush CTA): cursors+C / cb dots / scans 2.64 /
    2.52 / 3.55 -> 4.89 / 0.96 / 2.12 µs. bf16 / fp16 read copies (call7): T = 4 bf16/fp32
    373.7 -> 364.0, fp16/fp32 376.2 -> 367.3; T = 8 719.2 -> 711.3, 716.1 -> 710.4."""
    v = os.environ.get(PRE_HOIST_ENV)
    if v is not None:
        return v == "1"
    return read_fmt != "fp8" and cb_regs <= PRE_HOIST_MAX_REGS


#: the split's flush launch: CTAs per SM (168 registers, no spills) and hi n-tiles in flight
#: (a whole m-tile row of N = 128)
SPLIT_FLUSH_MINB = 3
SPLIT_FLUSH_PD = 16


def _frag_pd(T: int, flush_launch: bool = False) -> int:
    """``REPLAYSSM_M2V_FRAG_PD`` (1-16; unset: 4 below T = 7, else 8; SPLIT_FLUSH_PD in the
    split's flush launch, whose SPLIT_FLUSH_MINB CTAs per SM leave the registers for it -- see
    :func:`_use_split`): the fragment flush loads a hi n-tile this many n-tiles ahead of its use (8 registers per n-tile of depth). Memory-level
    parallelism sets it, not the L1 (session11_gpu calls 2-4, flush only, T = 8 b256: PD 1
    5777.8 µs, 2 5342.3, 4 1090.3; ld.global.cg changed nothing; with the L2 prefetch PD 2
    2682.5, PD 4 947.4). With 2 fold k-steps (call 7, b256, PD 4 / 6 / 8): T = 6 541.2 / 605.3
    / 555.6 µs, T = 7 621.0 / 577.4 / 575.6, T = 8 720.5 / 669.3 / 611.6 (ptxas' schedule of
    the 128-register build moves with it)."""
    v = os.environ.get(FRAG_PD_ENV, "")
    if v.isdigit() and 1 <= int(v) <= 16:
        return int(v)
    if flush_launch:
        return SPLIT_FLUSH_PD
    return 8 if T >= 7 else 4


def _hi_pair_into(dst, mHi, slot, head, t, p, nt: int):
    """The hi words of columns ``8·nt + 2t`` and ``+1`` of row ``p`` (an m16n8 accumulator
    fragment's two columns) into ``dst``: its size in words per column pair -- 2 for fp32 (one
    8-byte load), 1 for a 16-bit format."""
    w = cute.size(dst)
    cute.autovec_copy(cute.local_tile(mHi[slot, head, p, None], (w,), (4 * nt + t,)), dst)


def _hi_pair(mHi, slot, head, t, p, nt: int, wpp: int = 2):
    """:func:`_hi_pair_into` a new register tensor of ``wpp`` words."""
    v = cute.make_rmem_tensor((wpp,), Int32)
    _hi_pair_into(v, mHi, slot, head, t, p, nt)
    return v


def _split3_trunc(x):
    """fp32 x = hi + mid + lo exactly, each piece with <= 11 significant bits (tf32-exact):
    truncate the low 13 bits twice (the subtractions are exact)."""
    hb = lp.f32_bits(x) & Uint32(0xFFFFE000)
    r1 = Float32(x) - lp.bits_f32(hb)
    mb = lp.f32_bits(r1) & Uint32(0xFFFFE000)
    return hb, mb, lp.f32_bits(r1 - lp.bits_f32(mb))


DOT_PIECES_ENV = "REPLAYSSM_M2V_DOT_PIECES"


def _dot_pieces() -> int:
    """``REPLAYSSM_M2V_DOT_PIECES`` (3 / 2; default 3): tf32 pieces of an fp32 state value in the
    output dots (the non-flush rows' read dots and the fragment flush's T dots; the fold always
    takes 3). 3: every product exact. 2: the value's top 22 bits (hi + the remainder, which the
    tensor core truncates to tf32), a relative error below 2^-21 per product -- far below the
    bf16 / fp16 rounding of the outputs, one mma and two instructions fewer per k-step. H200,
    fp32 b256, same run (bench/results/session12_gpu/call9, 3 / 2): T = 4 450.0 -> 442.4 µs
    (non-flush 350.7 -> 339.5); T = 8 595.1 -> 696.3 (the fragment flush rows 897.7 -> 1059.5:
    that build's schedule again, 36 B of spills), hence 3; spec fuzz passes with 2."""
    v = os.environ.get(DOT_PIECES_ENV, "3")
    return 2 if v == "2" else 3


def _split_dot(x, pieces: int):
    """``pieces`` tf32 operands of fp32 ``x`` for an output dot (see :func:`_dot_pieces`)."""
    if pieces == 3:
        return _split3_trunc(x)
    hb = lp.f32_bits(x) & Uint32(0xFFFFE000)
    return hb, lp.f32_bits(Float32(x) - lp.bits_f32(hb))


def _out_ilp_default() -> bool:
    """``REPLAYSSM_M2V_OUT_ILP`` (0 / 1; default 1): the outputs' entry sums of a thread's
    T·P/128 outputs in one entry loop (one x load shared, independent accumulators) instead of
    one dependent loop per output (:meth:`Mamba2VerifyKernel._head_out`). H200, b256 T = 8
    (bench/results/session5_gpu §8): nvfp4/fp16sr 1016.6 -> 965.7 µs, fp32 1150.1 -> 1093.5."""
    return os.environ.get("REPLAYSSM_M2V_OUT_ILP", "1") != "0"


def _pow2_ge(n: int) -> int:
    t = 1
    while t < n:
        t *= 2
    return t


def _lanes_reduce(vals, tn: int, lir, stride: int = 1):
    """Sums each value of ``vals`` (a list of Float32, the same length in every lane) over the
    ``tn`` lanes of a group, ``stride`` lanes apart (``lir`` = lane in group), transposed: at every butterfly
    level a lane keeps one half of its list and trades the other half with its partner, so n values
    cost ~n shuffles in all instead of n·log2(tn). Returns ``(sums, base, count)``: ``sums[m]`` is
    the total of ``vals[base + m]`` for ``m < count`` (Int32 ``base`` and ``count``, functions of
    the lane bits); entries from ``count`` on are padding. (An odd split pads the upper half; at a
    later level ``base + m`` of a padding entry can name a real index another lane holds, so the
    validity is tracked per lane, not read off the index.) Lanes that end with the same index hold
    bit-identical sums."""
    cur = list(vals)
    base = Int32(0)
    count = Int32(len(vals))
    o = tn // 2
    while o >= 1:
        n = len(cur)
        if n > 1:
            hi = (lir & o) != 0
            h = -(-n // 2)
            keep_lo = cur[:h]
            keep_hi = cur[h:] + [Float32(0.0)] * (h - (n - h))
            nxt = []
            for a, b in zip(keep_lo, keep_hi):
                send = lp.sel_f32(hi, a, b)
                keep = lp.sel_f32(hi, b, a)
                nxt.append(keep + cute.arch.shuffle_sync_bfly(send, offset=o * stride))
            cur = nxt
            base = base + _sel_i32(hi, Int32(h), Int32(0))
            count = _sel_i32(hi, cutlass.max(count - Int32(h), Int32(0)),
                             cutlass.min(count, Int32(h)))
        else:
            v = cur[0]
            cur = [v + cute.arch.shuffle_sync_bfly(v, offset=o * stride)]
        o //= 2
    return cur, base, count


def _bcast_seg(lam, nseg: int, q):
    """``Λ_q`` from a warp's segmented scan (entry e = lane + 32·s in ``lam[s]``); 0 when q is
    outside [0, 32·nseg) (q = −1: the empty prefix). ``q`` must be warp-uniform."""
    r = Float32(0.0)
    ql = q & Int32(31)
    for s in range(nseg):
        v = cute.arch.shuffle_sync(lam[s], ql)
        inseg = (q >= Int32(32 * s)) & (q < Int32(32 * (s + 1)))
        r = lp.sel_f32(inseg, v, r)
    return r


class Mamba2VerifyKernel(Mamba2ReplayDecode):
    """Compile-time parameters + host launch (``__call__``) + device code (``kernel``) of the
    verify step. Inherits the decode kernel's flush (fold + encoders) and tiling helpers."""

    def fold_smem(self, R: int, L: int) -> int:
        """The verify's fold staging round (:func:`_verify_fold_smem`)."""
        return _verify_fold_smem()

    def _fold_pair_default(self) -> bool:
        """The pair fold in the verify's flush (measured at b256, bench/results/session37_gpu/
        call2, session38_gpu/call1): on for nvfp4 and 16-bit read copies (T8 nvfp4/fp16sr 0.973x,
        bf16/fp32 0.955x); off for fp8 (T8 fp8/fp16sr 1.074x slower, flush only 1.07x, with 128
        registers and no spills either way: instruction fetch -- its inline pair chunk loop is
        53.9 KB, and "no instruction" goes to 25.6 % of the stall samples with it, session42_gpu/
        call2; REPLAYSSM_M2_PAIR_ROLL rolls the pair's encodes) and fp32 (T4 / T8 0.99 /
        1.00x)."""
        return self.read_fmt not in ("fp8", "fp32")

    def _pair_roll_default(self) -> bool:
        """Rolled pair encodes in the verify's flush launch (H100, Super b256 L16, rolled /
        inline): on for nvfp4/fp16sr at T8 (session 43 call 1: mixed 0.969x, flush only 0.966x;
        session 45 call 1, two rounds: mixed 0.965 / 0.974x, flush only 0.971 / 0.971x); off at
        T4, where it loses (session 45 call 1: mixed 1.034 / 1.045x, flush only 1.024 /
        1.026x), and at every other T (untimed: T1-T7, T9-T16); off for fp8 read copies (their pair is off,
        :meth:`_fold_pair_default`; forced on and rolled, 1.155x), and where untimed: the single
        launch (+8 KB for every row's CTA: 4 -> 3 CTAs per SM at T4 with 2-4 heads per CTA) and
        buffer lengths other than 16. (Since session 47 that T8 flush launch takes the fragment
        flush by default, :meth:`_frag_split_rule`, which has no chunk-loop fold: the roll
        applies with ``REPLAYSSM_M2V_FRAG_SPLIT=0``.)"""
        return (self.read_fmt == "nvfp4" and self.rec_fmt == "fp16" and self.rows == 2
                and self.L == 16 and self.T == 8)

    def _frag_split_rule(self) -> bool:
        """The split pairs' fragment flush by default (H100, Super b256 L16, session 47 call 1,
        two rounds A B A B, CUDA-core / fragment flush, natural mix; flush only): nvfp4/fp32
        at T4 1.059x (1.193x), T8 1.102x (1.231x), hence T4-T8; nvfp4/fp16sr and fp8/fp32 at T8
        only: 1.031x (1.090x), 1.029x (1.156x) -- at T4 they lose, 0.913x (0.901x) and 0.981x
        (1.042x); fp8/fp16sr loses at both (T4 0.885x, T8 0.920x). Untimed pairs, T, buffer
        lengths and head sizes: off.
        The rule against the old default in call 2 (one round): nvfp4/fp16sr T8 748.3 -> 717.9
        µs, fp8/fp32 T8 702.2 -> 677.2, nvfp4/fp32 T4 376.0 -> 356.4, T8 726.1 -> 659.2."""
        pair = f"{self.read_fmt}/{self.rec_fmt}"
        if self.read_sr or self.L != 16 or self.P != 64:     # (timed at Super's P = 64 only)
            return False
        if pair == "nvfp4/fp32":
            return 4 <= self.T <= 8
        return self.T == 8 and (pair == "fp8/fp32" or (pair == "nvfp4/fp16" and self.rec_sr))

    def __init__(self, pair, act_dtype, dt_dtype, nheads: int, headdim: int, dstate: int,
                 ngroups: int, buffer_len: int, ring: int, num_drafts: int, has_D: bool,
                 has_z: bool, has_dt_bias: bool, dt_softplus: bool, heads_per_cta: int = 1,
                 has_state_batch_indices: bool = True, min_blocks_per_mp: Optional[int] = None,
                 flush_impl: Optional[int] = None, use_mma: Optional[bool] = None,
                 row_order: bool = False, pdl: Optional[int] = None, rows: int = 0,
                 order_cursors: bool = False, philox_rounds: Optional[int] = None):
        T = int(num_drafts)
        # 0: every row; split launch: 1 = non-flush rows only, 2 = flush rows only (the other
        # rows' CTAs exit after the cursors; the two launches together make one verify call)
        self.rows = int(rows)
        if not (1 <= T <= MAX_DRAFT):
            raise ValueError(f"num_drafts T={T} must be in [1, {MAX_DRAFT}]")
        if int(ring) < T + 1 or int(ring) < int(buffer_len) + 1:
            raise ValueError(f"ring R={ring} must be >= max(L, T) + 1")
        if int(dstate) % 32:
            raise ValueError(f"the verify kernel needs dstate % 32 == 0, got {dstate}")
        self.T = T
        self.TP = _pow2_ge(T)                # padded query count (vector loads of C)
        # most entries a call sees: h + T, h <= the most committed entries (fold_entries_max)
        self.EM = min(int(ring), fold_entries_max(int(buffer_len), int(ring)) + T)
        self.NSEGV = -(-self.EM // 32)       # scan segments
        super().__init__(pair, act_dtype, dt_dtype, nheads, headdim, dstate, ngroups, buffer_len,
                         ring, has_D, has_z, has_dt_bias, dt_softplus, heads_per_cta,
                         has_state_batch_indices, prefetch=False, min_blocks_per_mp=0,
                         flush_impl=flush_impl, nonflush_mma=False, staged=False,
                         row_order=row_order,
                         mma_fold=bool(_mma_fold_default()),   # off unless forced: 0.90-0.98x
                         pdl=common.pdl_mode(pdl, verify=True), order_cursors=order_cursors,
                         rows=self.rows, philox_rounds=philox_rounds)
        if self.rows:
            self.early_arrive = True     # the owned cursor read arrives at the CTA's start
        # v2 flush: flush rows take their T dots from the fold S_new inside the flush (hi read
        # once); v1: the dot path of flush rows reads hi before the flush rewrites it
        self.flush_dots = self.flush_impl == 2
        self.tile_hi = (self.cfg if not self.split else
                        ReplayTile(self.rec_fmt, self.H, self.P, self.N, self.G, self.L, self.R,
                                   self.hpc))
        # tensor-core state dot (nvfp4 copies, 16-bit acts, N = 128): see _mma_dot
        mm = _mma_default() if use_mma is None else bool(use_mma)
        self.use_mma = bool(mm and dtype_name(self.act_dtype) != "float32" and T <= _mma_max_t())
        # n8 query tiles of the tensor-core dots (queries 8q + g of tile q; T <= 16)
        self.mma_nq = -(-T // 8)
        self.mma_lo = self.use_mma and self._mma_tile_ok(self.read_fmt, self.cfg)
        self.mma_hi = self.use_mma and self._mma_tile_ok(self.rec_fmt, self.tile_hi)
        self.mma_any = self.mma_lo or self.mma_hi
        # the other read formats on the tensor cores (tf32; non-flush reads of the read copy, N =
        # 128): a tile of 4 lanes per state row (rows g, g + 8 of an m16 tile per thread pair)
        self.mma_w = bool(self.use_mma and _mma_wide_default() and self.read_fmt in WIDE_FMTS
                          and self.N == 128)
        self.tile_w = (ReplayTile(self.read_fmt, self.H, self.P, self.N, self.G, self.L, self.R,
                                  self.hpc, tn=4) if self.mma_w else None)
        # B fragment words a lane (the tf32 dot's 32; nvfp4: 16 a query tile) and, above 8
        # drafts, where they live between heads (MMA_BSMEM_ENV)
        self.bfr_words = 32 if self.mma_w else 16 * self.mma_nq
        self.mma_bsmem = bool(_mma_bsmem_default(self.rows) and self.mma_nq > 1
                              and (self.mma_lo or self.mma_w))
        # every head's x entries staged at the start (non-flush rows, v2 flush; 16-byte rows)
        self.xs = bool(_xstage_default() and self.flush_dots
                       and (self.P * self.act_dtype.width // 8) % 16 == 0)
        # the fp32 pair's flush in mma fragment layout (16-bit acts: B_j exact in tf32)
        ff = _frag_flush_default()
        frag_min_t = SPLIT_FRAG_MIN_T if self.rows == 2 else FRAG_MIN_T
        # (T up to 16: the dots take one n8 query tile per 8 drafts -- until session 48 one
        # tile, and builds at T 9-16 left drafts 9.. unwritten, session 47's review)
        frag_fits = bool(self.flush_dots and self.N == 128 and self.P % 64 == 0
                         and self.cfg.nt == 128 and self.rows != 1
                         and dtype_name(self.act_dtype) != "float32")
        # split pairs (a split's flush launch only): S_new through sS to the chunk encoders
        fs = _frag_split_default()
        self.frag_split = bool(frag_fits and self.split and self.rows == 2
                               and self.rec_fmt in FRAG_SPLIT_REC_FMTS
                               and self.T >= SPLIT_FRAG_MIN_T
                               and (self._frag_split_rule() if fs is None else fs))
        self.frag = bool(self.frag_split or (
            (self.T >= frag_min_t and self.hpc >= 2 if ff is None else ff)
            and frag_fits and not self.split and self.rec_fmt == "fp32"))
        if self.frag_split:
            # the chunk loop's fold pairs and rolled encodes are not this flush's
            self.fold_pair = self.pair_roll = self.pair_defer = False
            self.fold_pairs = 0
            self.sS_whole = True
            assert self.cfg.cb * self.cfg.rw == 32 and self.cfg.full, "sS chunk map"
        self.frag_pd = _frag_pd(self.T, flush_launch=self.rows == 2)
        # (the preload holds a whole m-tile row of hi: every n-tile in flight, PD = N / 8)
        self.frag_preload = bool(self.frag_split and _frag_preload_default()
                                 and self.frag_pd >= self.N // 8)
        self.frag_l2pf = os.environ.get(FRAG_L2PF_ENV, "1") == "1"
        # read copy prefetched into L2 this many heads ahead (not the split's flush launch)
        self.read_l2pf = (min(_read_l2pf_default(self.T, self.frag, self.rows == 1
                                                  and self.read_fmt == "fp32"), self.hpc)
                          if self.rows != 2 else 0)
        self.read_l2pf_late = os.environ.get(READ_L2PF_LATE_ENV, "1") == "1"
        self.pre_hoist = _pre_hoist_default(self.read_fmt, -(-self.EM // 4) * (self.N // 32))
        self.dot_pieces = _dot_pieces()
        # flush rows' drafts x staged too (own buffer), for their outputs and the append
        xd = _xdraft_default()
        self.xd = bool(self.xs and self.rows != 1
                       and ((self.read_fmt in XDRAFT_FMTS
                             or (self.split and self.read_fmt in XDRAFT_SPLIT_FMTS))
                            if xd is None else xd))
        # occupancy hint: 4 CTAs/SM (128 registers) -- the T accumulators of the state dot and
        # the flush path together; fewer when shared memory binds; the split's fragment-flush
        # launch SPLIT_FLUSH_MINB (its hi loads SPLIT_FLUSH_PD n-tiles deep)
        k = ((SPLIT_FLUSH_MINB if self.rows == 2 and self.frag else 4)
             if min_blocks_per_mp is None else int(min_blocks_per_mp))
        forced = os.environ.get("REPLAYSSM_M2V_MINBLOCKS")    # tuning runs
        if forced and min_blocks_per_mp is None:
            k = int(forced)
        if self.xd and xd is None:
            # by default only where its buffer costs no CTA per SM: shared memory's CTAs, capped
            # by the register hint's (at 128 registers 4 bind first, whatever smem would allow)
            cap = k or 8
            with_xd = min(self._smem_ctas() or 8, cap)
            self.xd = False                  # (_smem_ctas reads it)
            without_xd = min(self._smem_ctas() or 8, cap)
            self.xd = with_xd >= without_xd
        self.fold_unroll = _verify_fold_unroll()
        # outputs: a thread's outputs share one p (see _head_out; P > 128: one loop per output)
        self.out_ilp = bool(_out_ilp_default() and self.P <= self.cfg.nt)
        sc = self._smem_ctas()
        self.min_blocks_per_mp = min(k, sc) if (sc and k) else k

    # ------------------------------------------------------------------ static facts
    @staticmethod
    def _mma_tile_ok(fmt, tile) -> bool:
        """The m16n8k16 mapping: 4 lanes per state row, one 16-byte chunk (32 codes) each."""
        return fmt == "nvfp4" and tile.tn == 4 and tile.cn == 1

    def _rows_per_group(self, tile) -> int:
        """Rows of the state dot processed together (they share the C loads): the largest divisor
        of RPT with rows·T <= 32 accumulators."""
        rg = 1
        for d in range(1, tile.rpt + 1):
            if tile.rpt % d == 0 and d * self.T <= _ACC_PER_GROUP:
                rg = d
        return rg

    def _ulayout(self, padded: bool = True):
        """Union buffer (``sU``): the decode flush's buffers, or the output phase's sDot [T, P] and
        sXE [EM, P] (fp32) -- a flush row finishes its outputs before the flush starts. (No
        padding: the verify's halves take no ``smem_ctas_cap``; the decode's padding would not
        count this class's own allocations.)"""
        assert self.smem_ctas_cap == 0, "the verify takes no smem_ctas_cap"
        off, size = super()._ulayout(padded)
        al = lambda b: -(-b // 16) * 16  # noqa: E731
        off = dict(off)
        if self.rows == 1:               # non-flush launch: no flush buffers (views kept, unused)
            off = {name: 0 for name in off}
            size = 0
        off["dot"] = 0
        off["xe"] = al(4 * self.T * self.P)
        size = max(size, off["xe"] + al(4 * self.EM * self.P))
        if self.frag:                    # the fragment flush's padded B_j and w_j x_j rows
            jb = self.cfg.jb
            off["fsB"] = 0
            off["fsWX"] = al(4 * jb * (self.N + 4))
            if self.frag_split:          # then a head's S_new (sS), then the x_j landing zone
                off["sS"] = off["fsWX"] + al(4 * jb * (self.P + 4))
                off["xr"] = off["sS"] + 64 * self.cfg.nt * self._sS_chunks()
                size = max(size, off["xr"] + al(jb * self.P * self.act_dtype.width // 8))
            assert off["fsWX"] + al(4 * jb * (self.P + 4)) <= off["xr"], "fsWX overlaps sXR"
        # non-flush rows' staged x (xs builds; flush rows use xe, never both in one CTA)
        if self.xs:
            off["xa"] = off["xe"]
            size = max(size, off["xa"]
                       + al(self.hpc * self.EM * self.P * self.act_dtype.width // 8))
        return off, size

    def smem_bytes(self, padded: bool = True) -> int:
        """Dynamic shared memory of one CTA (the allocations of :meth:`kernel`; ``padded`` as the
        decode's, a no-op here)."""
        N, P, NT, HPC, T, TP, EM = self.N, self.P, self.cfg.nt, self.hpc, self.T, self.TP, self.EM
        al = lambda b: -(-b // 16) * 16  # noqa: E731
        b = al(4 * N) + al(4 * N * TP) + al(4 * EM * TP) + al(4 * HPC * self.cfg.hm)
        b += al(4 * HPC * T * EM) + al(16 * HPC) + al(4 * HPC * TP) + al(4 * (NT // 32))
        b += al(4 * self._sr_key_words()) + al(P * (self.act_dtype.width // 8)) + al(4 * TP)
        if self.mma_bsmem:
            b += al(4 * 32 * self.bfr_words)
        if self.flush_dots and self.rows != 1:
            b += al(4 * HPC * T * P)
        if self.xd:
            b += al(HPC * T * P * self.act_dtype.width // 8)
        return b + self._ulayout(padded)[1]

    # ------------------------------------------------------------------ host side
    # ``__call__`` (the launch: grid (H / heads_per_cta, batch), 128 threads) is the decode
    # kernel's: the same arguments, ``self.kernel`` is this class's device code

    # ------------------------------------------------------------------ device side
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
        cfg = self.cfg
        H, P, N, L, R = self.H, self.P, self.N, self.L, self.R
        T, TP, EM, HPC, NT = self.T, self.TP, self.EM, self.hpc, cfg.nt
        common.pdl_prologue(self.pdl)
        if const_expr(self.prof):
            pg0 = common.sreg64("globaltimer")
            pc0 = common.sreg64("clock64")              # 0: start
        tidx, _, _ = cute.arch.thread_idx()
        hc, gpos, _ = cute.arch.block_idx()
        warp = tidx // 32
        lane = tidx % 32

        smem = cutlass.memory.SmemAllocator()
        sC = smem.allocate_tensor(Float32, cute.make_layout(N), byte_alignment=16)
        sCT = smem.allocate_tensor(Float32, cute.make_layout(N * TP), byte_alignment=16)
        sCB = smem.allocate_tensor(Float32, cute.make_layout((EM, TP), stride=(TP, 1)),
                                   byte_alignment=16)
        HM = cfg.hm
        sCoef = smem.allocate_tensor(Float32, cute.make_layout((HPC, HM), stride=(HM, 1)),
                                     byte_alignment=16)
        sCoefT = smem.allocate_tensor(Float32, cute.make_layout((HPC, T, EM),
                                                                stride=(T * EM, EM, 1)),
                                      byte_alignment=16)
        sScal = smem.allocate_tensor(Float32, cute.make_layout((HPC, 4), stride=(4, 1)),
                                     byte_alignment=16)
        sG = smem.allocate_tensor(Float32, cute.make_layout((HPC, TP), stride=(TP, 1)),
                                  byte_alignment=16)
        sRed = smem.allocate_tensor(Float32, cute.make_layout(NT // 32), byte_alignment=16)
        sKey = smem.allocate_tensor(Int32, cute.make_layout(self._sr_key_words()),
                                    byte_alignment=16)
        # the decode flush's own T = 1 output goes here (never read): every (row, head) -> one row
        sSink = smem.allocate_tensor(self.act_dtype, cute.make_layout(P), byte_alignment=16)
        sPw = smem.allocate_tensor(Int32, cute.make_layout(TP), byte_alignment=16)
        sCur = smem.allocate_tensor(Int32, cute.make_layout(4), byte_alignment=16)
        sBF = None                   # the dots' B fragments, word w of lane l at (w % 4, l, w // 4)
        if const_expr(self.mma_bsmem):
            BW = self.bfr_words
            sBF = smem.allocate_tensor(Int32, cute.make_layout((4, 32, BW // 4),
                                                               stride=(1, 4, 128)),
                                       byte_alignment=16)
        sDotF = None                 # flush rows' dots from S_new (outlive the flush buffers)
        if const_expr(self.flush_dots and self.rows != 1):
            sDotF = smem.allocate_tensor(Float32, cute.make_layout((HPC, T, P),
                                                                   stride=(T * P, P, 1)),
                                         byte_alignment=16)
        uview = self._union_buffer(smem)
        sB, sWX, sS, sHW, sHS, sXR, sSlab = self._flush_views(uview)
        sDot = uview("dot", Float32, cute.make_layout((T, P), stride=(P, 1)))
        sXE = uview("xe", Float32, cute.make_layout((EM, P), stride=(P, 1)))
        fsB = fsWX = None
        if const_expr(self.frag):
            JBF = self.cfg.jb
            fsB = uview("fsB", Float32, cute.make_layout((JBF, N), stride=(N + 4, 1)))
            fsWX = uview("fsWX", Float32, cute.make_layout((JBF, P), stride=(P + 4, 1)))
        sXA = sXD = None
        if const_expr(self.xd):
            sXD = smem.allocate_tensor(self.act_dtype, cute.make_layout((HPC, T, P),
                                                                        stride=(T * P, P, 1)),
                                       byte_alignment=16)
        if const_expr(self.xs):
            sXA = uview("xa", self.act_dtype, cute.make_layout((HPC, EM, P),
                                                               stride=(EM * P, P, 1)))

        row, slot = self._grid_row_slot(mIdx, mOrder, gpos)
        ocur = None                      # the cursors as the order kernel read them
        if const_expr(self.order_cursors):
            ocur = (mOrder[2, gpos], mOrder[3, gpos], mOrder[4, gpos])
        valid = self._slot_valid(slot, mWPos.shape[0], pad_slot_id)
        if const_expr(self.read_l2pf > 0 and not self.read_l2pf_late):
            if valid:
                if tidx == 0:            # the first heads' read words on their way into L2
                    for k in cutlass.range_constexpr(self.read_l2pf):
                        self._read_prefetch(mHi, mLo, slot, hc * HPC + k)

        NHW = -(-HPC // 4)                  # heads per warp in the scans
        NSV = self.NSEGV
        spre = None
        if const_expr(self.pre_hoist):
            # per head of this warp: [dt of draft `lane`, A, dt_bias, (dA, dt') per scan segment]
            spre = cute.make_rmem_tensor((NHW * (3 + 2 * NSV),), Float32)
            if valid:
                self._scan_pre_heads(mDt, mA, mDtBias, spre, row, hc * HPC, warp, lane)

        if valid:
            # ------------------------------------------------------------ cursors
            # h <= EM - T for any valid cache state (clamped: memory safety on corrupt cursors)
            if const_expr(self.rows == 0):
                h, origin, gen, old = self._read_cursors(sCur, mWPos, mOrig, mFlushCnt, mArrive,
                                                         slot, tidx, pre=ocur)
            else:
                h, origin, gen, old = self._read_cursors_owned(sCur, mWPos, mOrig, mFlushCnt,
                                                               mArrive, slot, tidx, pre=ocur)
            h = self._clamp_h(h)
            flush = self._flushes(h)
            own = Boolean(True)          # split launch: this launch's kind of row only
            if const_expr(self.rows == 1):
                own = not flush
                flush = Boolean(False)
            elif const_expr(self.rows == 2):
                own = flush
                flush = Boolean(True)
            if own:
                E = h + Int32(T)             # entries the outputs use: h committed + T drafts
                hb = h                       # logical position of the first draft after this call
                origin2 = origin             # ring origin after this call
                if flush:
                    hb = Int32(0)
                    origin2 = self._phys(origin, h)
                head0 = hc * HPC
                group = head0 // self.hpg
                bpre = None
                if const_expr(self.pre_hoist):
                    # the cb dots' B_e and the scans' ring entries, before anything else
                    bpre = cute.make_rmem_tensor(((-(-EM // 4)) * (N // 32),), Float32)
                    self._cb_pre(mB, mBBuf, bpre, row, slot, group, origin, h, E, warp, lane)
                    self._scan_pre_ring(mDtBuf, mDABuf, spre, slot, head0, origin, h, warp, lane)
                if const_expr(self.read_l2pf > 0 and self.read_l2pf_late):
                    if not flush:
                        if tidx == 0:    # non-flush rows only: the first heads' read words
                            for k in cutlass.range_constexpr(self.read_l2pf):
                                self._read_prefetch(mHi, mLo, slot, head0 + k)
                xdr = None                   # the drafts' x (xs builds), stored after the C loads
                if const_expr(self.xs):
                    xdr = cute.make_rmem_tensor((-(-(HPC * T * P) // NT),), self.act_dtype)
                    if not flush:
                        self._xs_issue(mX, mXBuf, sXA, xdr, row, slot, head0, origin, h, tidx)
                    if const_expr(self.xd):
                        if flush:        # the drafts only (no ring x: the flush stages its own)
                            self._xs_issue(mX, None, None, xdr, row, slot, head0, origin, h,
                                           tidx)

                # ------------------------------------------------------------ C of every query
                for i in cutlass.range_constexpr(-(-(T * N) // NT)):
                    idx = tidx + i * NT
                    t = idx // N
                    n = idx % N
                    if idx < T * N:
                        cv = mC[row, t, group, n].to(Float32)
                        sCT[n * TP + t] = cv
                        if t == 0:
                            sC[n] = cv
                if const_expr(self.xs):
                    if not flush:
                        self._xs_drafts(sXA, xdr, h, tidx)
                    if const_expr(self.xd):
                        if flush:
                            self._xs_drafts(sXD, xdr, 0, tidx)
                cute.arch.barrier()
                if const_expr(self.prof):
                    pcs = [pc0, common.sreg64("clock64")]   # 1: cursors, C of the queries
                if const_expr(self.mma_any and dtype_name(self.act_dtype) == "bfloat16"):
                    self._mma_col_exponents(sCT, sPw, warp, lane)

                # ------------------------------------------------------------ cb[e, t] = B_e . C_t
                self._cb_dots(mB, mBBuf, sCT, sCB, row, slot, group, origin, h, E, warp, lane,
                              bpre)
                cute.arch.barrier()
                if const_expr(self.prof):
                    pcs.append(common.sreg64("clock64"))    # 2: cb dots

                # ------------------------------------------------------------ per head: decay scan
                for i in cutlass.range_constexpr(-(-HPC // 4)):
                    k = warp + 4 * i
                    if k < HPC:
                        self._head_scan(mDt, mA, mDtBias, mDtBuf, mDABuf, sCB, sCoef, sCoefT,
                                        sScal, sG, row, slot, head0 + k, k, origin, origin2, h,
                                        hb, E, flush, lane, spre, i * (3 + 2 * NSV))
                cute.arch.barrier()
                if const_expr(self.prof):
                    pcs.append(common.sreg64("clock64"))    # 3: decay scans, coefficients

                # ------------------------------------------------------------ outputs, per head
                # (B of the dots: 32 words for the tf32 dot -- at T > 8 its two query tiles
                # packed two values a word -- or 16 a query tile for the nvfp4 one)
                bfr = cute.make_rmem_tensor((self.bfr_words,), Int32)
                cpw = cute.make_rmem_tensor((2 * self.mma_nq,), Float32)
                if const_expr(self.prof):
                    # non-flush rows: per-head sums of dots, outputs; flush rows: the flush's
                    # sub-phase sums (see Mamba2ReplayDecode._flush2's ``pacc``)
                    rAcc = cute.make_rmem_tensor((PROF_EXTRA,), Int64)
                    rAcc.fill(0)
                # (T > 8 with the v2 flush: built in the non-flush branch, their only user -- built
                # here, they stay live across the flush and it spills, fp32 T16)
                frags_late = self.flush_dots and self.mma_nq > 1
                if const_expr(not frags_late):
                    self._dot_b_frags(sCT, sPw, bfr, cpw, lane, sBF, warp)
                if const_expr(self.flush_dots):
                    # flush rows (v2 flush): the flush first -- its fold S_new gives the T dots
                    # (sDotF) -- then the outputs from S_new and the drafts only
                    if flush:
                        if const_expr(self.frag):
                            self._flush_frag(mHi, mXBuf, mBBuf, sCoef, sScal, sCT, sDotF, fsB,
                                             fsWX, sXR, slot, head0, group, origin, h, tidx,
                                             mHiS, mLo, mLoS, mLoG, mSeed, sS, sRed, sKey, gen)
                        elif const_expr(self.rows != 1):
                            self._flush_row(mX, mZ, mD, mHi, mHiS, mHiG, mLo, mLoS, mLoG, mXBuf,
                                            mBBuf, mSeed, sC, sB, sWX, sS, sHW, sHS, sXR, sCoef,
                                            sScal, sRed, sKey, sSink, sCT, sDotF, row, slot,
                                            head0, group, origin, h, gen, tidx, sSlab,
                                            rAcc if const_expr(self.prof) else None)
                        if const_expr(self.rows != 1):
                            cute.arch.barrier()  # sDotF complete; the union buffer free for sXE
                            self._flush_outputs(mX, mZ, mD, mOut, mXBuf, sCoefT, sG, sDotF, sXE,
                                                sXD, row, slot, head0, origin, h, E, tidx)
                    else:
                        if const_expr(self.rows != 2):
                            if const_expr(frags_late):
                                self._dot_b_frags(sCT, sPw, bfr, cpw, lane, sBF, warp)
                            self._nonflush_outputs(mX, mZ, mD, mOut, mHi, mHiS, mHiG, mLo, mLoS,
                                                   mLoG, mXBuf, sCT, sDot, sXE, sXA, sCoefT, sG,
                                                   sBF if const_expr(self.mma_bsmem) else bfr,
                                                   cpw, row, slot, head0, origin, h, E,
                                                   tidx, rAcc if const_expr(self.prof) else None)
                else:
                    # v1 flush: every row's outputs from its read state (flush rows: hi before the
                    # flush rewrites it), then the flush
                    self._read_outputs_v1(flush, mX, mZ, mD, mOut, mHi, mHiS, mHiG, mLo, mLoS,
                                          mLoG, mXBuf, sCT, sDot, sXE, sCoefT, sG,
                                          sBF if const_expr(self.mma_bsmem) else bfr, cpw, row,
                                          slot, head0, origin, h, E, tidx)
                    if flush:
                        self._flush_row(mX, mZ, mD, mHi, mHiS, mHiG, mLo, mLoS, mLoG, mXBuf, mBBuf,
                                        mSeed, sC, sB, sWX, sS, sHW, sHS, sXR, sCoef, sScal, sRed,
                                        sKey, sSink, None, None, row, slot, head0, group, origin, h,
                                        gen, tidx, sSlab)

                if const_expr(self.prof):
                    pcs.append(common.sreg64("clock64"))    # 4: read + outputs (flush rows: flush)
                # ------------------------------------------------------------ append the drafts
                # (dt' / dA went out in the scan); positions h'..h'+T-1 of the new ring hold no
                # entry any CTA of this call reads
                for i in cutlass.range_constexpr(-(-(HPC * T * P) // NT)):
                    idx = tidx + i * NT
                    k = idx // (T * P)
                    t = (idx // P) % T
                    p = idx % P
                    if k < HPC:
                        ph = self._phys(origin2, hb + t)
                        if const_expr(self.xs):
                            if flush:
                                if const_expr(self.xd):
                                    mXBuf[slot, head0 + k, ph, p] = sXD[k, t, p]
                                else:
                                    mXBuf[slot, head0 + k, ph, p] = mX[row, t, head0 + k, p]
                            else:            # staged at the start (non-flush: hb = h)
                                mXBuf[slot, head0 + k, ph, p] = sXA[k, h + t, p]
                        else:
                            mXBuf[slot, head0 + k, ph, p] = mX[row, t, head0 + k, p]
                if hc % cfg.ctas_per_group == 0:
                    for i in cutlass.range_constexpr(-(-(T * N) // NT)):
                        idx = tidx + i * NT
                        t = idx // N
                        n = idx % N
                        if idx < T * N:
                            mBBuf[slot, group, self._phys(origin2, hb + t),
                                  n] = mB[row, t, group, n]

                # ------------------------------------------------------------ cursors (last CTA)
                # nothing committed (write_pos = h'), the T drafts pending
                if const_expr(self.prof):
                    pcs.append(common.sreg64("clock64"))    # 5: append issued
                self._publish_cursors(mWPos, mOrig, mFlushCnt, mPend, mArrive, slot, hb, 0, T,
                                      origin2, flush, gen, tidx, old)
                if const_expr(self.prof):
                    pcs.append(common.sreg64("clock64"))    # 6: cursors published (end)
                    pg1 = common.sreg64("globaltimer")
                    cute.arch.barrier()                     # every output store of the CTA is out
                    if tidx == 0:                           # the record over draft 0's first head
                        common.prof_store(cute.recast_tensor(mOut[row, 0, head0, None], Int32),
                                          _sel_i32(flush, Int32(1), Int32(0)),
                                          [pg0, pg1] + pcs
                                          + [rAcc[i] for i in range(PROF_EXTRA)])

    @cute.jit
    def _read_cursors_owned(self, sCur: cute.Tensor, mWPos: cute.Tensor, mOrig: cute.Tensor,
                            mFlushCnt: cute.Tensor, mArrive: cute.Tensor, slot: Int32,
                            tidx: Int32, pre=None):
        """Split launch (``rows`` 1 / 2): the cursors as :meth:`_read_cursors` reads them (thread
        0, broadcast through smem), but the CTA arrives on the row's counter only when the row
        is this launch's kind (non-flush / flush): the other launch owns, arrives and publishes
        it. ``pre``: the cursors as the order kernel read them (``order_cursors``; thread 0
        arrives without a fence). Only then may the two launches run at once: the other one
        moves its rows' live cursors meanwhile. Returns ``(write_pos, ring_origin, flush_count,
        the counter's old value)``."""
        def owned(w):
            fl = self._flushes(self._clamp_h(w))
            return fl if const_expr(self.rows == 2) else not fl

        if const_expr(pre is not None):
            old = Int32(0)
            if const_expr(self.cfg.ctas_per_row > 1):
                mine = owned(pre[0])
                if tidx == 0:
                    if mine:
                        old = common.row_arrive(mArrive, slot)
            return pre[0], pre[1], pre[2], old

        old = common.read_cursors_and_arrive(
            sCur, mWPos, mOrig, mFlushCnt, mArrive if self.cfg.ctas_per_row > 1 else None, slot,
            tidx, arrive_if=owned)
        cute.arch.barrier()
        return sCur[0], sCur[1], sCur[2], old

    def _clamp_h(self, w):
        """A row's committed entries h from its write_pos, clamped to [0, EM − T] (any valid cache
        state is inside; memory safety on corrupt cursors)."""
        return cutlass.max(cutlass.min(w, Int32(self.EM - self.T)), Int32(0))

    def _flushes(self, h):
        """Whether a row with h committed entries flushes in this call: h + T > L (the order
        kernel's test, :mod:`cute_kernels.row_order`)."""
        return h + Int32(self.T) > Int32(self.L)

    # ------------------------------------------------------------------ outputs
    @cute.jit
    def _read_outputs_v1(self, flush: Boolean, mX: cute.Tensor, mZ: Optional[cute.Tensor],
                         mD: Optional[cute.Tensor], mOut: cute.Tensor, mHi: cute.Tensor,
                         mHiS: Optional[cute.Tensor], mHiG: Optional[cute.Tensor],
                         mLo: Optional[cute.Tensor], mLoS: Optional[cute.Tensor],
                         mLoG: Optional[cute.Tensor], mXBuf: cute.Tensor, sCT: cute.Tensor,
                         sDot: cute.Tensor, sXE: cute.Tensor, sCoefT: cute.Tensor,
                         sG: cute.Tensor, bfr: cute.Tensor, cpw: cute.Tensor, row: Int32,
                         slot: Int32, head0: Int32, origin: Int32, h: Int32, E: Int32,
                         tidx: Int32):
        """v1 flush, every row: per head the T dots of the stored state (the read copy; hi for
        shared pairs and for flush rows of split pairs, before the flush rewrites it), the x of
        every entry staged, the outputs."""
        for k in cutlass.range(self.hpc, unroll=1):
            head = _opaque_i32(head0 + k)
            cp = (mHi, mHiS, mHiG, mLo, mLoS, mLoG, sCT, sDot, bfr, cpw, slot, head, tidx)
            if const_expr(self.split):
                if flush:
                    self._head_dot(True, *cp)
                else:
                    self._head_dot(False, *cp)
            else:
                self._head_dot(True, *cp)
            self._head_outputs(mX, mZ, mD, mOut, mXBuf, sCoefT, sG, sDot, sXE, None, row, slot,
                               head, k, origin, h, E, tidx)

    @cute.jit
    def _head_outputs(self, mX: cute.Tensor, mZ: Optional[cute.Tensor],
                      mD: Optional[cute.Tensor], mOut: cute.Tensor, mXBuf: cute.Tensor,
                      sCoefT: cute.Tensor, sG: cute.Tensor, sDot: cute.Tensor, sXE: cute.Tensor,
                      sXk: Optional[cute.Tensor], row: Int32, slot: Int32, head: Int32,
                      k: Int32, origin: Int32, h: Int32, E: Int32, tidx: Int32, rAcc=None,
                      c0=None):
        """Head k after its dots: the x of its entries staged into ``sXE`` (``sXk``: already in
        shared memory), a barrier, its outputs, a barrier (sDot / sXE are rewritten by the next
        head). ``rAcc`` (profiling build): thread 0's clocks from ``c0`` -- [0] dots + x staged,
        [1] outputs."""
        if const_expr(sXk is None):
            self._stage_x(mX, mXBuf, sXE, row, slot, head, origin, h, 0, E, tidx)
            sXk = sXE
        cute.arch.barrier()
        if const_expr(rAcc is not None):
            c1 = common.sreg64("clock64")
            rAcc[0] = rAcc[0] + (c1 - c0)
        self._head_out(mX, mZ, mD, mOut, sCoefT, sG, sDot, sXk, row, head, k, h, 0, tidx)
        cute.arch.barrier()
        if const_expr(rAcc is not None):
            rAcc[1] = rAcc[1] + (common.sreg64("clock64") - c1)

    @cute.jit
    def _nonflush_outputs(self, mX: cute.Tensor, mZ: Optional[cute.Tensor],
                         mD: Optional[cute.Tensor], mOut: cute.Tensor, mHi: cute.Tensor,
                         mHiS: Optional[cute.Tensor], mHiG: Optional[cute.Tensor],
                         mLo: Optional[cute.Tensor], mLoS: Optional[cute.Tensor],
                         mLoG: Optional[cute.Tensor], mXBuf: cute.Tensor, sCT: cute.Tensor,
                         sDot: cute.Tensor, sXE: cute.Tensor, sXA: Optional[cute.Tensor],
                         sCoefT: cute.Tensor, sG: cute.Tensor, bfr: cute.Tensor,
                         cpw: cute.Tensor, row: Int32, slot: Int32, head0: Int32,
                         origin: Int32, h: Int32, E: Int32, tidx: Int32, rAcc=None):
        """A non-flush row's outputs (v2 flush): per head the T dots of the read copy (hi for
        shared pairs), then :meth:`_head_outputs`; ``xs``: every head's x is in ``sXA`` already
        (issued after the cursors), no per-head staging."""
        use_hi = not self.split
        if const_expr(self.xs):
            cute.arch.cp_async_wait_group(0)     # the ring x (visible after the first barrier)
        for k in cutlass.range(self.hpc, unroll=1):
            head = _opaque_i32(head0 + k)
            if const_expr(self.read_l2pf > 0):
                if k + self.read_l2pf < self.hpc:
                    if tidx == 0:
                        self._read_prefetch(mHi, mLo, slot, head + self.read_l2pf)
            if const_expr(rAcc is not None):
                c0 = common.sreg64("clock64")
            self._head_dot(use_hi, mHi, mHiS, mHiG, mLo, mLoS, mLoG, sCT, sDot, bfr, cpw, slot,
                           head, tidx)
            self._head_outputs(mX, mZ, mD, mOut, mXBuf, sCoefT, sG, sDot, sXE,
                               sXA[k, None, None] if const_expr(self.xs) else None, row, slot,
                               head, k, origin, h, E, tidx, rAcc,
                               c0 if const_expr(rAcc is not None) else None)

    @cute.jit
    def _flush_outputs(self, mX: cute.Tensor, mZ: Optional[cute.Tensor],
                       mD: Optional[cute.Tensor], mOut: cute.Tensor, mXBuf: cute.Tensor,
                       sCoefT: cute.Tensor, sG: cute.Tensor, sDotF: cute.Tensor,
                       sXE: cute.Tensor, sXD: Optional[cute.Tensor], row: Int32, slot: Int32,
                       head0: Int32, origin: Int32, h: Int32, E: Int32, tidx: Int32):
        """A flush row's outputs after the v2 flush: per head, the drafts' x staged (from
        ``sXD`` when the drafts were loaded at the start), then the outputs from S_new's dots
        (``sDotF``) and the drafts only."""
        T, P, NT = self.T, self.P, self.cfg.nt
        for k in cutlass.range(self.hpc, unroll=1):
            head = _opaque_i32(head0 + k)
            if const_expr(sXD is not None):
                for i in cutlass.range_constexpr(-(-(T * P) // NT)):
                    idx = tidx + i * NT
                    if idx < T * P:
                        sXE[h + idx // P, idx % P] = sXD[k, idx // P, idx % P].to(Float32)
            else:
                self._stage_x(mX, mXBuf, sXE, row, slot, head, origin, h, h, E, tidx)
            cute.arch.barrier()
            self._head_out(mX, mZ, mD, mOut, sCoefT, sG, sDotF[k, None, None], sXE, row, head,
                           k, h, h, tidx)
            cute.arch.barrier()

    @cute.jit
    def _flush_frag(self, mHi: cute.Tensor, mXBuf: cute.Tensor, mBBuf: cute.Tensor,
                    sCoef: cute.Tensor, sScal: cute.Tensor, sCT: cute.Tensor,
                    sDotF: cute.Tensor, fsB: cute.Tensor, fsWX: cute.Tensor, sXR: cute.Tensor,
                    slot: Int32, head0: Int32, group: Int32, origin: Int32, h: Int32,
                    tidx: Int32, mHiS: Optional[cute.Tensor] = None,
                    mLo: Optional[cute.Tensor] = None, mLoS: Optional[cute.Tensor] = None,
                    mLoG: Optional[cute.Tensor] = None, mSeed: Optional[cute.Tensor] = None,
                    sS: Optional[cute.Tensor] = None, sRed: Optional[cute.Tensor] = None,
                    sKey: Optional[cute.Tensor] = None, gen: Optional[Int32] = None):
        """Flush of a fp32-pair row on the tensor cores, the fold kept in mma fragment layout.
        Per head, warp w owns the m16 tiles ``16·(w + 4i)`` of S (P x N); per n-tile of 8
        columns, the thread (g, t) holds S[p0, c], S[p0, c+1], S[p1, c], S[p1, c+1] (p0 = 16m + g,
        p1 = p0 + 8, c = 8nt + 2t; the m16n8k8 accumulator):

        * fold ``F = Σ_{j<h} (w_j x_j)[p] B_j[n]``: tf32 mma, A = w_j x_j (fp32, three exact tf32
          pieces), B = B_j (16-bit activations: exact), K = the buffered entries (zero past h);
        * ``S_new = fl(gf·hi) + F`` (``_decode_add_chunk``'s rounding), stored to hi (8 bytes);
        * the T dots ``S_new·C_t``: the accumulator is the next mma's A operand as it stands (k
          slot t <-> column c, t + 4 <-> c + 1; B = C_q at the same columns, q = 8·qt + g for
          each n8 query tile qt: one tile up to T = 8, two up to 16), S_new again in three exact
          pieces; into ``sDotF[k, t, p]``.

        Products are exact; the sums are the tensor cores' fp32 accumulation (the CUDA-core flush
        sums each element's terms in a fixed fp32 order instead).

        Split pairs (:attr:`frag_split`; hi fp32 / fp16 / bf16): S_new goes to ``sS`` at the
        chunk layout's places instead of to hi (:meth:`_sS_frag_store`; with an nvfp4 target
        the running amax too), then after one CTA barrier per head every thread encodes its
        chunks from there with the CUDA-core flush's encoders and counters
        (:meth:`_frag_encode`): the targets are those of the same fp32 S_new, bit for bit."""
        P, N, T, TP, NT, HPC = self.P, self.N, self.T, self.TP, self.cfg.nt, self.hpc
        JB = self.cfg.jb
        KS = -(-min(JB, self.EM - T) // 8)   # h <= EM - T (clamped): k-steps past it are zero
        NTL = N // 8
        warp = tidx // 32
        lane = tidx % 32
        g = lane // 4
        t = lane % 4
        # the T dots' query tiles (n8: queries 8·qt + g), one accumulator chain each past T = 8
        NQ = -(-T // 8)
        gq = [cutlass.min(g + 8 * qt, Int32(T - 1)) for qt in range(NQ)]
        qlive = [g + 8 * qt < Int32(T) for qt in range(NQ)]
        zero = Float32(0.0)
        fs = self.frag_split
        w3_hi = w3_lo = None
        if const_expr(fs):
            self._sr_key_setup(mSeed, sKey, tidx)
            w3_hi = lp.sr_counter_word3(0, gen)
            w3_lo = lp.sr_counter_word3(1, gen)
        # the group's B entries once per CTA (padded rows: conflict-free fragment reads)
        for it in cutlass.range(-(-(JB * N) // NT), unroll=4):
            idx = tidx + it * NT
            jj = idx // N
            n = idx % N
            if jj < h:
                fsB[jj, n] = mBBuf[slot, group, self._phys(origin, jj), n].to(Float32)
        self._cpa_xrows(mXBuf, sXR, slot, head0, origin, h, tidx)
        cute.arch.cp_async_commit_group()
        PD = min(self.frag_pd, NTL)

        p00 = 16 * warp + g
        pre = self.frag_preload
        hqp = None
        if const_expr(pre):
            # the first m-tile's hi words of the next head are loaded before this head's encodes
            # (their latency under the encode pass, which issues no global load)
            hqp = [[cute.make_rmem_tensor((self._hi_wpp,), Int32) for r in range(2)]
                   for nt in range(PD)]
            self._hi_frag_tile(hqp, mHi, slot, head0, t, p00)
        if const_expr(self.frag_l2pf):
            self._frag_prefetch(mHi, slot, head0, warp, g, t)
        for k in cutlass.range(HPC, unroll=1):
            head = _opaque_i32(head0 + k)
            gf = sScal[k, 0]
            if const_expr(self.frag_l2pf):
                if k + 1 < HPC:          # the next head's hi lines on their way into L2
                    self._frag_prefetch(mHi, slot, _opaque_i32(head0 + k + 1), warp, g, t)
            # the first m-tile's first PD n-tiles of hi in flight across the head's barriers
            if const_expr(pre):
                hq = hqp
            else:
                hq = [self._hi_frag_rows(mHi, slot, head, t, p00, nt) for nt in range(PD)]
            amax = Float32(0.0)
            cute.arch.cp_async_wait_group(0)     # this head's x_j rows
            cute.arch.barrier()                  # ... for every thread; fsWX of the last head read
            for i in cutlass.range_constexpr(-(-(JB * P) // NT)):
                idx = tidx + i * NT
                jj = idx // P
                p = idx % P
                if jj < h:
                    fsWX[jj, p] = sCoef[k, jj] * sXR[jj, p].to(Float32)
            cute.arch.barrier()                  # fsWX complete, sXR free
            if k + 1 < HPC:
                self._cpa_xrows(mXBuf, sXR, slot, _opaque_i32(head0 + k + 1), origin, h, tidx)
            cute.arch.cp_async_commit_group()
            for mi in cutlass.range_constexpr(P // 64):
                p0 = 16 * (warp + 4 * mi) + g
                p1 = p0 + 8
                if const_expr(mi > 0):
                    hq = [self._hi_frag_rows(mHi, slot, head, t, p0, nt) for nt in range(PD)]
                # A of the fold for every k-step: rows p0, p1 x entries j0 = 8ks + t, j0 + 4
                apc = []
                okb = []
                for ks in cutlass.range_constexpr(KS):
                    a, guards = fold_a_frag(fsWX, ks, t, h, JB, p0, p1)
                    apc.append([_split3_trunc(x) for x in a])
                    okb.append(guards)
                # the dots, two chains: n-tile parity (T <= 8) or one per query tile
                dacc = [[zero] * 4, [zero] * 4]
                for nt in cutlass.range_constexpr(NTL):
                    c = 8 * nt + 2 * t
                    hv = hq[nt]
                    if const_expr(nt + PD < NTL):    # hi PD n-tiles ahead: latency under the mma
                        hq.append(self._hi_frag_rows(mHi, slot, head, t, p0, nt + PD))
                    f = [zero] * 4
                    for ks in cutlass.range_constexpr(KS):
                        ok0, ok1, jc0, jc1 = okb[ks]
                        b = [lp.f32_bits(lp.sel_f32(ok0, fsB[jc0, 8 * nt + g], zero)),
                             lp.f32_bits(lp.sel_f32(ok1, fsB[jc1, 8 * nt + g], zero))]
                        for pc in cutlass.range_constexpr(3):
                            f = lp.mma_sync("tf32", [x[pc] for x in apc[ks]], b, f, volatile=True)
                    # S_new = fl(gf·hi) + F; accumulators (p0, c), (p0, c+1), (p1, c), (p1, c+1)
                    hd = [self._hi_frag_f32(hv[r]) for r in range(2)]
                    sn = [_add_rn(lp.mul_rn(gf, hd[e // 2][e % 2]), f[e]) for e in range(4)]
                    for r in cutlass.range_constexpr(2):
                        if const_expr(fs):
                            self._sS_frag_store(sS, sn[2 * r], sn[2 * r + 1], p0 + 8 * r, c)
                        else:
                            ov = cute.make_rmem_tensor((2,), Int32)
                            ov[0] = lp.f32_bits(sn[2 * r]).to(Int32)
                            ov[1] = lp.f32_bits(sn[2 * r + 1]).to(Int32)
                            cute.autovec_copy(ov, cute.local_tile(
                                mHi[slot, head, p0 + 8 * r, None], (2,), (c // 2,)))
                    if const_expr(fs and self.needs_gamax):
                        amax = lp.fmax_nq(amax, _absmax16(sn, 4))
                    # the T dots: A = (S[p0, c], S[p1, c], S[p0, c+1], S[p1, c+1]) = k slots t, t+4
                    pieces = [_split_dot(x, self.dot_pieces) for x in (sn[0], sn[2], sn[1],
                                                                       sn[3])]
                    for qt in cutlass.range_constexpr(NQ):
                        b = [lp.f32_bits(lp.sel_f32(qlive[qt], sCT[c * TP + gq[qt]], zero)),
                             lp.f32_bits(lp.sel_f32(qlive[qt], sCT[(c + 1) * TP + gq[qt]],
                                                    zero))]
                        ch = qt if NQ == 2 else nt % 2
                        for pc in cutlass.range_constexpr(self.dot_pieces):
                            dacc[ch] = lp.mma_sync("tf32", [x[pc] for x in pieces], b,
                                                   dacc[ch], volatile=True)
                # D of query tile qt: (p0, 8qt + 2t), (p0, +1), (p1, 8qt + 2t), (p1, +1)
                for r in cutlass.range_constexpr(2):
                    for j in cutlass.range_constexpr(2):
                        for qt in cutlass.range_constexpr(NQ):
                            q = 8 * qt + 2 * t + j
                            if q < T:
                                if const_expr(NQ == 1):
                                    sDotF[k, q, p0 + 8 * r] = (dacc[0][2 * r + j]
                                                               + dacc[1][2 * r + j])
                                else:
                                    sDotF[k, q, p0 + 8 * r] = dacc[qt][2 * r + j]
            if const_expr(fs):
                if const_expr(pre):
                    if k + 1 < HPC:
                        self._hi_frag_tile(hqp, mHi, slot, _opaque_i32(head0 + k + 1), t, p00)
                s_glob = Float32(0.0)
                if const_expr(self.needs_gamax):
                    amax = cute.arch.warp_reduction(amax, lp.fmax_nq)
                    if lane == 0:
                        sRed[warp] = amax
                cute.arch.barrier()              # sS (chunks cross warps) and sRed complete
                if const_expr(self.needs_gamax):
                    amax = sRed[0]
                    for w in cutlass.range_constexpr(1, NT // 32):
                        amax = lp.fmax_nq(amax, sRed[w])
                    s_glob = lp.nvfp4_global_scale(amax)
                    if tidx == 0:
                        mLoG[slot, head] = s_glob
                self._frag_encode(sS, mHi, mHiS, mLo, mLoS, slot, head, w3_hi, w3_lo, sKey,
                                  s_glob, tidx)

    @property
    def _hi_wpp(self) -> int:
        """hi words per column pair of the fragment flush (fp32 2, 16-bit 1)."""
        return 2 * _BITS[self.rec_fmt] // 32

    def _hi_frag_rows(self, mHi, slot, head, t, p0, nt: int):
        """n-tile nt's hi words of rows p0 and p0 + 8 (:func:`_hi_pair`), new registers."""
        return [_hi_pair(mHi, slot, head, t, p0 + 8 * r, nt, self._hi_wpp) for r in range(2)]

    def _hi_frag_tile(self, dst, mHi, slot, head, t, p0):
        """:func:`_hi_pair_into` every n-tile of rows p0 and p0 + 8: ``dst[nt][r]``."""
        for nt in range(len(dst)):
            for r in range(2):
                _hi_pair_into(dst[nt][r], mHi, slot, head, t, p0 + 8 * r, nt)

    def _hi_frag_f32(self, hv):
        """The two decoded hi values of :func:`_hi_pair`'s words (``formats.decode``)."""
        if self.rec_fmt == "fp32":
            return [lp.bits_f32(Uint32(hv[0])), lp.bits_f32(Uint32(hv[1]))]
        if self.rec_fmt == "fp16":
            return list(lp.f16x2_to_f32(Uint32(hv[0])))
        return list(lp.bf16x2_to_f32(Uint32(hv[0])))

    @cute.jit
    def _sS_frag_store(self, sS: cute.Tensor, v0: Float32, v1: Float32, p: Int32, c: Int32):
        """S_new[p, c] and [p, c + 1] (c even) into sS where the CUDA-core flush's thread keeps
        them (:meth:`_sS_store`): row p is row ``p % RPF`` of chunk pass ``it = p // RPF``, the
        thread of warp ``(p % RPF) // RW`` and lane ``(c // 16)·RW + p % RW``, elements
        ``c % 16`` and ``+ 1`` of its chunk."""
        cfg = self.cfg
        RW, RPF, NT = cfg.rw, cfg.rpf, cfg.nt
        it = p // RPF
        pr = p % RPF
        tid = (pr // RW) * 32 + (c // CHUNK) * RW + pr % RW
        e = c % CHUNK
        ov = cute.make_rmem_tensor((2,), Float32)
        ov[0] = v0
        ov[1] = v1
        cute.autovec_copy(ov, cute.local_tile(sS[(it * 4 + e // 4) * NT + tid, None], (2,),
                                              ((e % 4) // 2,)))

    @cute.jit
    def _frag_encode(self, sS: cute.Tensor, mHi: cute.Tensor, mHiS: Optional[cute.Tensor],
                     mLo: Optional[cute.Tensor], mLoS: Optional[cute.Tensor], slot: Int32,
                     head: Int32, w3_hi: Uint32, w3_lo: Uint32, sKey: cute.Tensor,
                     s_glob: Float32, tidx: Int32):
        """A head's flush targets from its S_new in sS: every chunk of the thread (rows
        ``rrow + it·RPF``, chunk-in-row ``lane // RW``) through the CUDA-core flush's encoders
        and stores, the pass-1 targets then (nvfp4, with ``s_glob``) the pass-2 ones."""
        cfg = self.cfg
        warp = tidx // 32
        lane = tidx % 32
        cbi = lane // cfg.rw
        rrow = warp * cfg.rw + lane % cfg.rw
        acc = cute.make_rmem_tensor((CHUNK,), Float32)
        for it in cutlass.range(cfg.nit, unroll=1):
            slot_i = _dep_i32(slot, it)
            head_i = _dep_i32(head, it)
            r = rrow + it * cfg.rpf          # (cfg.full: every row exists)
            self._sS_load(acc, sS, it, tidx)
            tok = None
            if const_expr(len(self.flush_p1) > 0):
                tok = self._encode_store(False, acc, r * cfg.cb + cbi, r, cbi, Boolean(True),
                                         slot_i, head_i, w3_hi, w3_lo, sKey, s_glob, mHi, mHiS,
                                         mLo, mLoS)
            if const_expr(len(self.flush_p2) > 0):
                if const_expr(tok is not None):
                    for e in cutlass.range_constexpr(CHUNK):
                        acc[e] = _dep_f32(acc[e], tok)
                self._encode_store(True, acc, r * cfg.cb + cbi, r, cbi, Boolean(True), slot_i,
                                   head_i, w3_hi, w3_lo, sKey, s_glob, mHi, mHiS, mLo, mLoS)

    @cute.jit
    def _read_prefetch(self, mHi: cute.Tensor, mLo: Optional[cute.Tensor], slot: Int32,
                       head: Int32):
        """One bulk L2 prefetch of a head's read-copy words (lo for split pairs, else hi). The
        same prefetch lost in the decode kernel (session12_gpu/call2, b256 / b512, one head
        ahead: fp32 330.7 -> 342.9 / 646.3 -> 677.4 µs, nvfp4/fp16sr 192.7 -> 199.1 / 367.0 ->
        380.4, fp8/fp32 unchanged)."""
        fmt = self.read_fmt if const_expr(self.split) else self.rec_fmt
        mRd = mLo if const_expr(self.split) else mHi
        common.prefetch_l2_bulk(mRd[slot, head, None, None].iterator,
                                self.P * self.N * common.FMT_BITS[fmt] // 8)

    @cute.jit
    def _frag_prefetch(self, mHi: cute.Tensor, slot: Int32, head: Int32, warp: Int32, g: Int32,
                       t: Int32):
        """L2 prefetch of the hi rows this thread's warp folds in ``head``: lane (g, t) takes
        lines t, t + 4, .. (32 words each) of rows p0 and p1 of every m-tile (a warp covers its
        rows' lines: 4 of a fp32 row of N = 128, 2 of a 16-bit one)."""
        lines = self.N * _BITS[self.rec_fmt] // 1024
        for mi in cutlass.range_constexpr(self.P // 64):
            p0 = 16 * (warp + 4 * mi) + g
            for r in cutlass.range_constexpr(2):
                for q in cutlass.range_constexpr(-(-lines // 4)):
                    line = cute.local_tile(mHi[slot, head, p0 + 8 * r, None], (32,), (4 * q + t,))
                    if const_expr(lines % 4 == 0):
                        common.prefetch_l2(line.iterator)
                    elif 4 * q + t < lines:
                        common.prefetch_l2(line.iterator)

    @cute.jit
    def _xs_issue(self, mX: cute.Tensor, mXBuf: cute.Tensor, sXA: cute.Tensor, xdr: cute.Tensor,
                  row: Int32, slot: Int32, head0: Int32, origin: Int32, h: Int32, tidx: Int32):
        """Non-flush row, right after the cursors: cp.async (one group) of the ring x rows j < h
        of every head into ``sXA[k, j, :]`` (16-byte chunks; the ring is the cache's, aligned),
        and plain loads of the drafts' x into ``xdr`` (the caller's tensors may be unaligned
        views; :meth:`_xs_drafts` stores them). Nothing waits here."""
        JM = self.EM - self.T                     # most committed entries a row can hold
        if const_expr(sXA is not None):
            self._cpa_xring_heads(mXBuf, sXA, slot, head0, origin, h, tidx, JM)
            cute.arch.cp_async_commit_group()
        for i in cutlass.range_constexpr(xdr.shape[0]):
            k, t, p, live = self._draft_item(tidx, i)
            if live:
                xdr[i] = mX[row, t, head0 + k, p]

    def _draft_item(self, tidx, i):
        """Item i of this thread in the drafts' x (``[HPC, T, P]``, 128 threads in stride):
        ``(k, t, p, inside)``."""
        T, P, NT = self.T, self.P, self.cfg.nt
        idx = tidx + i * NT
        return idx // (T * P), (idx // P) % T, idx % P, idx < self.hpc * T * P

    @cute.jit
    def _xs_drafts(self, sXA: cute.Tensor, xdr: cute.Tensor, h: Int32, tidx: Int32):
        """The drafts' x loaded by :meth:`_xs_issue` to ``sXA[k, h + t, :]`` (``sXD``: h = 0)."""
        for i in cutlass.range_constexpr(xdr.shape[0]):
            k, t, p, live = self._draft_item(tidx, i)
            if live:
                sXA[k, h + t, p] = xdr[i]

    # ------------------------------------------------------------------ flush rows
    @cute.jit
    def _flush_row(self, mX: cute.Tensor, mZ: Optional[cute.Tensor], mD: Optional[cute.Tensor],
                   mHi: cute.Tensor, mHiS: Optional[cute.Tensor], mHiG: Optional[cute.Tensor],
                   mLo: Optional[cute.Tensor], mLoS: Optional[cute.Tensor],
                   mLoG: Optional[cute.Tensor], mXBuf: cute.Tensor, mBBuf: cute.Tensor,
                   mSeed: Optional[cute.Tensor], sC: cute.Tensor, sB: cute.Tensor,
                   sWX: cute.Tensor, sS: Optional[cute.Tensor], sHW: Optional[cute.Tensor],
                   sHS: Optional[cute.Tensor], sXR: Optional[cute.Tensor], sCoef: cute.Tensor,
                   sScal: cute.Tensor, sRed: cute.Tensor, sKey: cute.Tensor, sSink: cute.Tensor,
                   sCT: Optional[cute.Tensor], sDotF: Optional[cute.Tensor], row: Int32,
                   slot: Int32, head0: Int32, group: Int32, origin: Int32, h: Int32, gen: Int32,
                   tidx: Int32, sSlab: Optional[cute.Tensor] = None, pacc=None):
        """The decode kernel's flush of this row's heads (fold of the h committed entries, hi + lo
        written). Its own T = 1 output goes to a shared-memory sink (never read) -- or, with
        ``sDotF`` (v2 flush), the T query dots of S_new replace it."""
        H, P = self.H, self.P
        mX0 = mX[None, 0, None, None]
        mZ0 = None
        if const_expr(self.has_z):
            mZ0 = mZ[None, 0, None, None]
        sink = cute.make_tensor(sSink.iterator, cute.make_layout((1 << 24, H, P), stride=(0, 0, 1)))
        if const_expr(self.flush_impl == 2):
            self._flush2(mX0, mZ0, mD, sink, mHi, mHiS, mHiG, mLo, mLoS, mLoG, mXBuf, mBBuf,
                         mSeed, sC, sB, sWX, sS, sHW, sHS, sXR, sCoef, sScal, sRed, sKey, row,
                         slot, head0, group, origin, h, gen, tidx, sCT, sDotF, sSlab, pacc)
        else:
            self._flush(mX0, mZ0, mD, sink, mHi, mHiS, mHiG, mLo, mLoS, mLoG, mXBuf, mBBuf,
                        mSeed, sC, sB, sWX, sCoef, sScal, sRed, sKey, row, slot, head0, group,
                        origin, h, gen, tidx)

    @cute.jit
    def _flush_dots(self, acc: cute.Tensor, sCT: cute.Tensor, sDotF: cute.Tensor, k: Int32,
                    r: Int32, vq: Boolean, cbi: Int32):
        """Inside the v2 flush's chunk loop: ``sDotF[k, t, r]`` = the T dots ``S_new[r]·C_t`` of
        the fp32 fold (the chunk holds 16 columns from ``16·cbi``; lane partials reduced over
        the CB lanes of the row, RW apart, with one transposed butterfly)."""
        cfg = self.cfg
        sums, base, cnt = _lanes_reduce(self._chunk_dots(acc, sCT, cbi), cfg.cb, cbi,
                                        stride=cfg.rw)
        for m in cutlass.range_constexpr(len(sums)):
            if Int32(m) < cnt:
                if vq:
                    sDotF[k, base + m, r] = sums[m]

    def _chunk_dots(self, acc, sCT, cbi):
        """Lane partials ``Σ_e acc[e]·C_t[16·cbi + e]`` for every query t (a list of T)."""
        T, TP = self.T, self.TP
        part = [Float32(0.0)] * T
        ct = cute.make_rmem_tensor((TP,), Float32)
        for e in range(CHUNK):
            cute.autovec_copy(cute.local_tile(sCT, (TP,), (cbi * CHUNK + e,)), ct)
            for t in range(T):
                part[t] = part[t] + acc[e] * ct[t]
        return part

    # ------------------------------------------------------------------ preamble pieces
    @cute.jit
    def _cb_dots(self, mB: cute.Tensor, mBBuf: cute.Tensor, sCT: cute.Tensor, sCB: cute.Tensor,
                 row: Int32, slot: Int32, group: Int32, origin: Int32, h: Int32, E: Int32,
                 warp: Int32, lane: Int32, bpre: Optional[cute.Tensor] = None):
        """``sCB[e, t] = B_e·C_t`` for e < E (ring entries e < h, drafts e = h + i): one warp per
        entry, lanes over N, the T partial sums reduced with one transposed butterfly.
        ``bpre``: the B_e already loaded by :meth:`_cb_pre`."""
        N, EM = self.N, self.EM
        NBL = N // 32
        for i in cutlass.range_constexpr(-(-EM // 4)):
            e = warp + 4 * i
            if e < E:
                bv = cute.make_rmem_tensor((NBL,), Float32)
                if const_expr(bpre is not None):
                    for m in cutlass.range_constexpr(NBL):
                        bv[m] = bpre[i * NBL + m]
                else:
                    self._cb_load(mB, mBBuf, bv, row, slot, group, origin, h, e, lane)
                sums, base, cnt = self._cb_partials(bv, sCT, lane)
                for m in cutlass.range_constexpr(len(sums)):
                    if Int32(m) < cnt:
                        sCB[e, base + m] = sums[m]

    @cute.jit
    def _cb_load(self, mB: cute.Tensor, mBBuf: cute.Tensor, bv: cute.Tensor, row: Int32,
                 slot: Int32, group: Int32, origin: Int32, h: Int32, e: Int32, lane: Int32):
        """Lane ``lane``'s columns ``lane + 32 m`` of B_e (the ring for e < h, else draft e - h)."""
        NBL = self.N // 32
        if e < h:
            ph = self._phys(origin, e)
            for m in cutlass.range_constexpr(NBL):
                bv[m] = mBBuf[slot, group, ph, lane + 32 * m].to(Float32)
        else:
            for m in cutlass.range_constexpr(NBL):
                bv[m] = mB[row, e - h, group, lane + 32 * m].to(Float32)

    @cute.jit
    def _cb_pre(self, mB: cute.Tensor, mBBuf: cute.Tensor, bpre: cute.Tensor, row: Int32,
                slot: Int32, group: Int32, origin: Int32, h: Int32, E: Int32, warp: Int32,
                lane: Int32):
        """Every B_e of this warp's cb entries (e = warp + 4 i < E) into ``bpre[i·NBL + m]``."""
        NBL = self.N // 32
        for i in cutlass.range_constexpr(-(-self.EM // 4)):
            e = warp + 4 * i
            if e < E:
                bv = cute.make_rmem_tensor((NBL,), Float32)
                self._cb_load(mB, mBBuf, bv, row, slot, group, origin, h, e, lane)
                for m in cutlass.range_constexpr(NBL):
                    bpre[i * NBL + m] = bv[m]

    @cute.jit
    def _scan_pre_heads(self, mDt: cute.Tensor, mA: cute.Tensor, mDtBias: Optional[cute.Tensor],
                        spre: cute.Tensor, row: Int32, head0: Int32, warp: Int32, lane: Int32):
        """Per scan head of this warp (k = warp + 4 i): its draft dt (lane t), A and dt_bias into
        ``spre`` (see the kernel); they need no cursor."""
        W = 3 + 2 * self.NSEGV
        tl = cutlass.min(lane, Int32(self.T - 1))
        for i in cutlass.range_constexpr(-(-self.hpc // 4)):
            k = warp + 4 * i
            if k < self.hpc:
                spre[i * W] = mDt[row, tl, head0 + k].to(Float32)
                spre[i * W + 1] = mA[head0 + k].to(Float32)
                if const_expr(self.has_dt_bias):
                    spre[i * W + 2] = mDtBias[head0 + k].to(Float32)

    @cute.jit
    def _scan_pre_ring(self, mDtBuf: cute.Tensor, mDABuf: cute.Tensor, spre: cute.Tensor,
                       slot: Int32, head0: Int32, origin: Int32, h: Int32, warp: Int32,
                       lane: Int32):
        """Per scan head of this warp: the ring's dA / dt' of entries e = lane + 32 s < h
        (0 beyond) into ``spre``."""
        W = 3 + 2 * self.NSEGV
        for i in cutlass.range_constexpr(-(-self.hpc // 4)):
            k = warp + 4 * i
            if k < self.hpc:
                for s in cutlass.range_constexpr(self.NSEGV):
                    va, vd = self._ring_da_dt(mDtBuf, mDABuf, slot, head0 + k, origin, h,
                                              lane + 32 * s)
                    spre[i * W + 3 + 2 * s] = va
                    spre[i * W + 4 + 2 * s] = vd

    @cute.jit
    def _ring_da_dt(self, mDtBuf: cute.Tensor, mDABuf: cute.Tensor, slot: Int32, head: Int32,
                    origin: Int32, h: Int32, e: Int32):
        """``(dA, dt')`` of ring entry e of ``head`` (0, 0 from e = h on)."""
        va = Float32(0.0)
        vd = Float32(0.0)
        if e < h:
            ph = self._phys(origin, cutlass.min(e, Int32(self.EM - 1)))
            va = mDABuf[slot, head, ph]
            vd = mDtBuf[slot, head, ph]
        return va, vd

    def _cb_partials(self, bv, sCT, lane):
        """Lane partials of B_e·C_t over its columns, reduced over the warp (see _lanes_reduce)."""
        T, TP = self.T, self.TP
        part = [Float32(0.0)] * T
        ct = cute.make_rmem_tensor((TP,), Float32)
        for m in range(self.N // 32):
            n = lane + 32 * m
            cute.autovec_copy(cute.local_tile(sCT, (TP,), (n,)), ct)
            for t in range(T):
                part[t] = part[t] + bv[m] * ct[t]
        return _lanes_reduce(part, 32, lane)

    @cute.jit
    def _head_scan(self, mDt: cute.Tensor, mA: cute.Tensor, mDtBias: Optional[cute.Tensor],
                   mDtBuf: cute.Tensor, mDABuf: cute.Tensor, sCB: cute.Tensor, sCoef: cute.Tensor,
                   sCoefT: cute.Tensor, sScal: cute.Tensor, sG: cute.Tensor, row: Int32,
                   slot: Int32, head: Int32, k: Int32, origin: Int32, origin2: Int32, h: Int32,
                   hb: Int32, E: Int32, flush: Boolean, lane: Int32,
                   spre: Optional[cute.Tensor] = None, pb: cutlass.Constexpr = 0):
        """One warp, head ``head`` (k-th of the CTA): dt'_t / dA_t of the drafts (lane t), appended
        to dt_buf / dA_buf; the inclusive scan Λ over the E entries; the output coefficients
        ``sCoefT[k, t, e]``, ``sG[k, t] = exp(Λ_{h+t})`` (flush rows with the v2 flush, whose dots
        come from S_new: ``exp(Λ_{h+t} − Λ_{h−1})``); the fold weights of the decode flush
        ``sCoef[k, j] = exp(Λ_{h−1} − Λ_j)·dt'_j`` (j < h), ``sScal[k, 0] = exp(Λ_{h−1})``.
        ``spre`` (from ``pb``): this head's inputs loaded ahead (the hoisted preamble)."""
        T, EM, NSEG = self.T, self.EM, self.NSEGV
        tl = cutlass.min(lane, Int32(T - 1))
        if const_expr(spre is not None):
            if const_expr(self.has_dt_bias):
                dtv = self._dt_prime(spre[pb], mDtBias, head, spre[pb + 2])
            else:
                dtv = self._dt_prime(spre[pb], mDtBias, head)
            dav = spre[pb + 1] * dtv
        else:
            dtv = self._dt_prime(mDt[row, tl, head].to(Float32), mDtBias, head)
            dav = mA[head].to(Float32) * dtv
        lam = cute.make_rmem_tensor((NSEG,), Float32)
        dts = cute.make_rmem_tensor((NSEG,), Float32)
        carry = Float32(0.0)
        for s in cutlass.range_constexpr(NSEG):
            e = lane + 32 * s
            va = Float32(0.0)
            vd = Float32(0.0)
            if const_expr(spre is not None):
                va = spre[pb + 3 + 2 * s]
                vd = spre[pb + 4 + 2 * s]
            else:
                va, vd = self._ring_da_dt(mDtBuf, mDABuf, slot, head, origin, h, e)
            di = cutlass.max(cutlass.min(e - h, Int32(T - 1)), Int32(0))
            va_d = cute.arch.shuffle_sync(dav, di)        # warp-collective: every lane
            vd_d = cute.arch.shuffle_sync(dtv, di)
            isd = (e >= h) & (e < E)
            va = lp.sel_f32(isd, va_d, va)
            vd = lp.sel_f32(isd, vd_d, vd)
            dts[s] = vd
            v = _warp_inclusive_scan(va, lane) + carry
            lam[s] = v
            carry = cute.arch.shuffle_sync(v, 31)
        # the drafts' dt' / dA to the ring (after the scan read the committed entries)
        if lane < T:
            ph = self._phys(origin2, hb + lane)
            mDtBuf[slot, head, ph] = dtv
            mDABuf[slot, head, ph] = dav
        # fold weights of the committed entries (used by flush rows only)
        lam_h = _bcast_seg(lam, NSEG, h - 1)
        for s in cutlass.range_constexpr(NSEG):
            e = lane + 32 * s
            if e < h:
                sCoef[k, e] = cute.math.exp(lam_h - lam[s]) * dts[s]
        if lane == 0:
            sScal[k, 0] = cute.math.exp(lam_h)
            sScal[k, 1] = Float32(0.0)
            sScal[k, 2] = Float32(0.0)
        # output coefficients (causal: entry e contributes to query t iff e <= h + t)
        for t in cutlass.range_constexpr(T):
            q = h + t
            lq = _bcast_seg(lam, NSEG, q)
            lg = lq
            if const_expr(self.flush_dots):
                if flush:
                    lg = lq - lam_h
            if lane == 0:
                sG[k, t] = cute.math.exp(lg)
            for s in cutlass.range_constexpr(NSEG):
                e = lane + 32 * s
                if const_expr(32 * s < EM):
                    if e < EM:
                        cw = Float32(0.0)
                        if e <= q:
                            cw = cute.math.exp(lq - lam[s]) * dts[s] * sCB[e, t]
                        sCoefT[k, t, e] = cw

    # ------------------------------------------------------------------ outputs
    def _decode_word(self, fmt, w, sblk):
        """The fp32 values of one 32-bit word of a chunk and their element offsets in the word's
        column run: fp32 1, fp16/bf16 2, fp8 4, nvfp4 8 (times the block scale ``sblk``; the
        e2m1 decode yields e2m1·2^-14, the caller folds 2^14 into the global scale)."""
        if fmt == "fp32":
            return [lp.bits_f32(w)]
        if fmt == "fp16":
            return list(lp.f16x2_to_f32(w))
        if fmt == "bf16":
            return list(lp.bf16x2_to_f32(w))
        if fmt == "fp8":
            return list(lp.unpack_e4m3x4(w))
        h2 = _e2m1x8_to_f16x2(w)           # word pi: codes (pi, pi + 4)
        vals = [None] * 8
        for pi in range(4):
            lo, hi = lp.f16x2_to_f32(h2[pi])
            vals[pi] = lo * sblk
            vals[pi + 4] = hi * sblk
        return vals

    def _dot_group(self, fmt, tile, raw, rsc, bsc, sCT, g, rg, lir):
        """Lane partials of ``S[p_r]·C_t`` for rows r of group g (rg rows) and every t: decode each
        element once, multiply it with the T columns of C at its column (one vector smem load per
        column, shared by the group's rows). fp8 row scales applied here. Returns a list indexed
        ``r·T + t``."""
        T, TP, vec = self.T, self.TP, tile.vec
        epw = {"fp32": 1, "fp16": 2, "bf16": 2, "fp8": 4, "nvfp4": 8}[fmt]
        acc = [[Float32(0.0)] * T for _ in range(rg)]
        ct = cute.make_rmem_tensor((TP,), Float32)
        for cc in range(tile.cn):
            c = lir + tile.tn * cc
            sb = [None] * rg
            if fmt == "nvfp4":
                for r in range(rg):
                    b0, b1, _, _ = lp.unpack_e4m3x4(Uint32(bsc[g * rg + r, cc]))
                    sb[r] = (b0, b1)
            for w in range(4):
                dec = []
                for r in range(rg):
                    s = sb[r][w // 2] if fmt == "nvfp4" else None
                    dec.append(self._decode_word(fmt, Uint32(raw[g * rg + r, cc, w]), s))
                for j in range(epw):
                    col = c * vec + w * epw + j
                    cute.autovec_copy(cute.local_tile(sCT, (TP,), (col,)), ct)
                    for r in range(rg):
                        for t in range(T):
                            acc[r][t] = acc[r][t] + dec[r][j] * ct[t]
        out = []
        for r in range(rg):
            for t in range(T):
                v = acc[r][t]
                if fmt == "fp8":
                    v = v * rsc[g * rg + r]
                out.append(v)
        return out

    def _read_tile(self, use_hi):
        """(format, :class:`ReplayTile`, tf32 path?) of the state dot of the copy hi (``use_hi``)
        or lo."""
        fmt = self.rec_fmt if use_hi else self.read_fmt
        tile = self.tile_hi if use_hi else self.cfg
        wide = self.mma_w and (not use_hi or not self.split)     # the read copy's non-flush dot
        if wide:
            tile = self.tile_w
        return fmt, tile, wide

    @cute.jit
    def _head_dot(self, use_hi: cutlass.Constexpr, mHi: cute.Tensor,
                  mHiS: Optional[cute.Tensor], mHiG: Optional[cute.Tensor],
                  mLo: Optional[cute.Tensor], mLoS: Optional[cute.Tensor],
                  mLoG: Optional[cute.Tensor], sCT: cute.Tensor, sDot: cute.Tensor,
                  bfr: cute.Tensor, cpw: cute.Tensor, slot: Int32, head: Int32, tidx: Int32):
        """``sDot[t, p] = Σ_n S[p, n]·C_t[n]`` (decoded, every scale applied) of one head, S the
        copy hi (``use_hi``) or lo."""
        fmt, tile, wide = self._read_tile(use_hi)
        mRd, mRdS, mRdG = (mHi, mHiS, mHiG) if const_expr(use_hi) else (mLo, mLoS, mLoG)
        if const_expr(self.mma_bsmem):
            # ``bfr`` is their smem copy (_dot_b_frags): to registers for this head's dot only
            sBF = bfr
            bfr = cute.make_rmem_tensor((self.bfr_words,), Int32)
            for v in cutlass.range_constexpr(self.bfr_words // 4):
                cute.autovec_copy(sBF[None, tidx % 32, v], cute.local_tile(bfr, (4,), (v,)))
        lir = tidx % tile.tn
        rp = tidx // tile.tn
        raw = cute.make_rmem_tensor(cute.make_ordered_layout((tile.rpt, tile.cn, 4),
                                                             order=(2, 1, 0)), Int32)
        rsc = cute.make_rmem_tensor((tile.rpt,), Float32)
        bsc = cute.make_rmem_tensor((tile.rpt, tile.cn), Int32)
        gsc = cute.make_rmem_tensor((1,), Float32)
        # the decode kernel's non-flush read set, for the format of this copy
        self._issue_read(mRd, mRdS, mRdG, raw, rsc, bsc, gsc, slot, head, rp, lir, fmt=fmt,
                         tile=tile)
        if const_expr(self.mma_hi if use_hi else self.mma_lo):
            self._mma_dot(raw, bsc, gsc, bfr, cpw, sDot, tile, rp, lir)
        elif const_expr(wide):
            self._mma_wide_dot(fmt, raw, rsc, bfr, sDot, tile, rp, lir)
        else:
            self._fma_dot(fmt, tile, raw, rsc, bsc, gsc, sCT, sDot, rp, lir)

    @cute.jit
    def _fma_dot(self, fmt: cutlass.Constexpr, tile: cutlass.Constexpr, raw: cute.Tensor,
                 rsc: cute.Tensor, bsc: cute.Tensor, gsc: cute.Tensor, sCT: cute.Tensor,
                 sDot: cute.Tensor, rp: Int32, lir: Int32):
        """CUDA-core dot: every element decoded once, T fp32 FMAs; row groups share the C loads;
        the T·rows partial sums reduced over the TN lanes of a row (transposed butterfly)."""
        T, P = self.T, self.P
        TN, RPT, RPP = tile.tn, tile.rpt, tile.rpp
        hsc = Float32(1.0)
        if const_expr(fmt == "nvfp4"):
            hsc = gsc[0] * Float32(16384.0)
        rg = self._rows_per_group(tile)
        for g in cutlass.range_constexpr(RPT // rg):
            vals = self._dot_group(fmt, tile, raw, rsc, bsc, sCT, g, rg, lir)
            sums, base, cnt = _lanes_reduce(vals, TN, lir)
            for m in cutlass.range_constexpr(len(sums)):
                idx = base + m
                if Int32(m) < cnt:
                    r = idx // T
                    t = idx - r * T
                    p = rp + RPP * (g * rg + r)
                    if p < P:
                        sDot[t, p] = sums[m] * hsc

    # ------------------------------------------------------------------ tensor-core dot
    @cute.jit
    def _mma_col_exponents(self, sCT: cute.Tensor, sPw: cute.Tensor, warp: Int32, lane: Int32):
        """bf16 acts: ``sPw[t] = s_t = 14 − floor(log2 max|C_t|)`` (clamped to ±100; 0 for a zero
        C_t), the exact power-of-two scaling that brings C_t into fp16's range (one warp per
        query; the decode kernel's rule, per column here)."""
        T, TP, N = self.T, self.TP, self.N
        for j in cutlass.range_constexpr(-(-T // 4)):
            t = warp + 4 * j
            if t < T:
                a = Float32(0.0)
                for m in cutlass.range_constexpr(N // 32):
                    a = lp.fmax_nq(a, lp.bits_f32(lp.f32_bits(sCT[(lane + 32 * m) * TP + t])
                                                  & Uint32(0x7FFFFFFF)))
                s_exp = _fp16_range_exponent(a)
                if lane == 0:
                    sPw[t] = s_exp

    @cute.jit
    def _dot_b_frags(self, sCT, sPw, bfr, cpw, lane, sBF, warp):
        """The B fragments of the tensor-core state dots (either kind; none for CUDA-core ones);
        with ``mma_bsmem`` warp 0's go to ``sBF`` (one CTA barrier; ``cpw`` stays in every
        thread's registers)."""
        if const_expr(self.mma_any):
            self._mma_b_frags(sCT, sPw, bfr, cpw, lane)
        if const_expr(self.mma_w):
            self._mma_wide_b_frags(sCT, bfr, lane)
        if const_expr(self.mma_bsmem):
            if warp == 0:
                for v in cutlass.range_constexpr(self.bfr_words // 4):
                    cute.autovec_copy(cute.local_tile(bfr, (4,), (v,)), sBF[None, lane, v])
            cute.arch.barrier()

    def _mma_b_frags(self, sCT, sPw, bfr, cpw, lane):
        """B fragments of the m16n8k16 dot (once per CTA; C is shared by the CTA's heads): column
        n = query n (lane group g = n; zero for n >= T), k permuted as in the decode kernel's
        ``_mma_b_frags``: lane (g, tq) of k-step i = 2w + hh holds C'_g at columns n0, n0+4 (bfr[2i])
        and n0+1, n0+5 (bfr[2i+1]), n0 = 32tq + 8w + 2hh -- the codes its A fragment holds.
        C' = C·2^s_g in fp16 (fp16 acts: s = 0, exact; bf16 acts: see _mma_col_exponents).
        ``cpw[j]`` = 2^(7 − s) of query 2tq + j (undoes s and the 2^-7 of the A operand).
        T > 8: query tile q (queries 8q + n) at ``bfr[16q:]``, its ``cpw`` at ``cpw[2q:]``."""
        T, TP = self.T, self.TP
        g = lane // 4
        tq = lane % 4
        bf16 = dtype_name(self.act_dtype) == "bfloat16"
        for q in range(self.mma_nq):
            gc = cutlass.min(g + 8 * q, Int32(T - 1))
            live = g + 8 * q < Int32(T)
            cs = _pow2_f32(Int32(sPw[gc])) if bf16 else Float32(1.0)
            for i in range(8):
                n0 = 32 * tq + 8 * (i // 2) + 2 * (i % 2)
                v = [lp.sel_f32(live, sCT[(n0 + d) * TP + gc] * cs, Float32(0.0))
                     for d in (0, 4, 1, 5)]
                bfr[16 * q + 2 * i] = lp.pack_f16x2(v[0], v[1]).to(Int32)
                bfr[16 * q + 2 * i + 1] = lp.pack_f16x2(v[2], v[3]).to(Int32)
        for q in range(self.mma_nq):
            for j in range(2):
                qj = cutlass.min(8 * q + 2 * tq + j, Int32(T - 1))
                sj = Int32(sPw[qj]) if bf16 else Int32(0)
                cpw[2 * q + j] = _pow2_f32(Int32(7) - sj)

    @cute.jit
    def _mma_dot(self, raw: cute.Tensor, bsc: cute.Tensor, gsc: cute.Tensor, bfr: cute.Tensor,
                 cpw: cute.Tensor, sDot: cute.Tensor, tile: cutlass.Constexpr, rp: Int32,
                 lir: Int32):
        """nvfp4 state dot on the tensor cores: rows (2m, 2m+1) of the thread are rows g, g+8 of
        an m16n8k16 tile (lane = 4g + tq owns 16-byte chunk tq of each, as loaded), the 8 columns
        are the queries, 8 k-steps cover N = 128. A = e2m1·s_blk·2^-7 in fp16 (exact: <= 6
        significant bits, lowest bit >= 2^-22), B = C'_t in fp16, so every product is exact and
        the sums are fp32 (tensor-core accumulation). D[g][2tq + j] is the finished row sum of
        row 2m, query 2tq + j (no lane reduction). T > 8: the same A fragments against each query
        tile's B, one accumulator chain a tile."""
        RPT, RPP, NQ = tile.rpt, tile.rpp, self.mma_nq
        gs = gsc[0]
        for m in cutlass.range_constexpr(-(-RPT // 2)):
            acc = _mma_nvfp4_tile(raw, bsc, bfr, RPT, m, nq=NQ)
            if const_expr(NQ == 1):
                self._store_mtile(sDot, lambda r, j, i: (acc[2 * r + j] + acc[4 + 2 * r + j])
                                  * cpw[j] * gs, rp, lir, RPP, RPT, m)
            else:
                for q in cutlass.range_constexpr(NQ):
                    self._store_mtile(sDot, lambda r, j, i: acc[4 * q + 2 * r + j]
                                      * cpw[2 * q + j] * gs, rp, lir, RPP, RPT, m, q)

    @cute.jit
    def _store_mtile(self, sDot: cute.Tensor, value, rp: Int32, lir: Int32,
                     RPP: cutlass.Constexpr, RPT: cutlass.Constexpr, m: cutlass.Constexpr,
                     qt: cutlass.Constexpr = 0):
        """``sDot[q, p] = value(r, j, i)`` for m-tile m of a tensor-core dot: the thread's row
        i = 2m + r (p = rp + RPP·i), query q = 8·qt + 2·lir + j (query tile qt); rows past RPT / P
        and queries past T are not stored."""
        T, P = self.T, self.P
        for r in cutlass.range_constexpr(2):
            i = 2 * m + r
            if const_expr(i < RPT):
                p = rp + RPP * i
                for j in cutlass.range_constexpr(2):
                    q = 2 * lir + j if const_expr(qt == 0) else 8 * qt + 2 * lir + j
                    v = value(r, j, i)
                    if q < T:
                        if p < P:
                            sDot[q, p] = v

    def _mma_wide_b_frags(self, sCT, bw, lane):
        """B fragments of the tf32 dot (once per CTA; C is shared by the CTA's heads): lane (g, tq)
        holds C_g (query g; zero for g >= T) at the 32 columns of its own A values, value m of a
        row being column (tq + 4 (m // vec))·vec + m % vec (the tile's 16-byte chunk order); k-step
        s takes m = 2s (k = tq) and 2s + 1 (k = tq + 4). C is bf16 / fp16: exact in tf32.
        T > 8 (two query tiles, 64 values in the same 32 registers): C_{8q+g} of k-step s packed as
        one bf16x2 / fp16x2 word ``bw[16q + s]`` (m = 2s low, 2s + 1 high; exact, C being in the
        act dtype), unpacked per k-step by :meth:`_wide_b_pair`."""
        T, TP, vec = self.T, self.TP, self.tile_w.vec
        g = lane // 4
        tq = lane % 4
        if const_expr(self.mma_nq == 1):
            gc = cutlass.min(g, Int32(T - 1))
            live = g < Int32(T)
            for m in range(self.N // 4):
                col = (tq + 4 * (m // vec)) * vec + (m % vec)
                bw[m] = lp.f32_bits(lp.sel_f32(live, sCT[col * TP + gc], Float32(0.0))).to(Int32)
        else:
            pack = (lp.pack_bf16x2 if dtype_name(self.act_dtype) == "bfloat16"
                    else lp.pack_f16x2)
            for q in range(self.mma_nq):
                gc = cutlass.min(g + 8 * q, Int32(T - 1))
                live = g + 8 * q < Int32(T)
                for s_ in range(self.N // 8):
                    v = []
                    for m in (2 * s_, 2 * s_ + 1):
                        col = (tq + 4 * (m // vec)) * vec + (m % vec)
                        v.append(lp.sel_f32(live, sCT[col * TP + gc], Float32(0.0)))
                    bw[16 * q + s_] = pack(v[0], v[1]).to(Int32)

    def _wide_b_pair(self, bw, q: int, s_: int):
        """(b0, b1) tf32 words of query tile q, k-step s of the tf32 dot's B (T > 8: unpacked
        from :meth:`_mma_wide_b_frags`' bf16x2 / fp16x2 word, exact)."""
        w = Uint32(bw[16 * q + s_])
        lo, hi = (lp.bf16x2_to_f32(w) if dtype_name(self.act_dtype) == "bfloat16"
                  else lp.f16x2_to_f32(w))
        return lp.f32_bits(lo), lp.f32_bits(hi)

    @cute.jit
    def _mma_wide_dot(self, fmt: cutlass.Constexpr, raw: cute.Tensor, rsc: cute.Tensor,
                      bw: cute.Tensor, sDot: cute.Tensor, tile: cutlass.Constexpr, rp: Int32,
                      lir: Int32):
        """fp32 / fp16 / bf16 / fp8 state dot on the tensor cores (tf32 mma.sync.m16n8k8): the
        thread's rows (2m, 2m+1) are rows g, g+8 of an m16 tile (lane = 4g + tq owns 16-byte chunks
        tq, tq + 4, ... of each, as loaded), the 8 columns are the queries, N/8 k-steps. A: fp16 /
        bf16 / e4m3 values are exact in tf32 (one mma per k-step); fp32 values as three exact tf32
        pieces (three mmas); B = C_t exact: every product is exact, the sums fp32 (tensor-core
        accumulation, two chains). fp8: the row scale after the sum, as the CUDA-core path.
        T > 8: each k-step's A pieces against both query tiles, one chain a tile."""
        N, NQ = self.N, self.mma_nq
        RPT, RPP, CN = tile.rpt, tile.rpp, tile.cn
        for m in cutlass.range_constexpr(-(-RPT // 2)):
            vals = []
            for i in cutlass.range_constexpr(2 * m, 2 * m + 2):
                rv = [Float32(0.0)] * (N // 4)
                if const_expr(i < RPT):
                    rv = []
                    for cc in cutlass.range_constexpr(CN):
                        for w in cutlass.range_constexpr(4):
                            rv += self._decode_word(fmt, Uint32(raw[i, cc, w]), None)
                vals.append(rv)
            # two chains: k-step parity (T <= 8) or one per query tile
            acc = [[Float32(0.0)] * 4, [Float32(0.0)] * 4]
            for s_ in cutlass.range_constexpr(N // 8):
                xs = (vals[0][2 * s_], vals[1][2 * s_], vals[0][2 * s_ + 1], vals[1][2 * s_ + 1])
                if const_expr(fmt == "fp32"):
                    a_pcs = [_split_dot(x, self.dot_pieces) for x in xs]
                    a_pcs = [[pc_[pc] for pc_ in a_pcs] for pc in range(self.dot_pieces)]
                else:
                    a_pcs = [[lp.f32_bits(x) for x in xs]]
                for q in cutlass.range_constexpr(NQ):
                    ch = s_ % 2 if const_expr(NQ == 1) else q
                    bq = ([bw[2 * s_], bw[2 * s_ + 1]] if const_expr(NQ == 1)
                          else list(self._wide_b_pair(bw, q, s_)))
                    for a in a_pcs:
                        acc[ch] = lp.mma_sync("tf32", a, bq, acc[ch], volatile=True)
            for q in cutlass.range_constexpr(NQ):
                if const_expr(NQ == 1):
                    sums = lambda r, j: acc[0][2 * r + j] + acc[1][2 * r + j]  # noqa: E731
                else:
                    sums = lambda r, j: acc[q][2 * r + j]  # noqa: E731
                if const_expr(fmt == "fp8"):          # the row scale after the sum
                    value = lambda r, j, i: sums(r, j) * rsc[i]  # noqa: E731
                else:
                    value = lambda r, j, i: sums(r, j)  # noqa: E731
                self._store_mtile(sDot, value, rp, lir, RPP, RPT, m, q)

    @cute.jit
    def _stage_x(self, mX: cute.Tensor, mXBuf: cute.Tensor, sXE: cute.Tensor, row: Int32,
                 slot: Int32, head: Int32, origin: Int32, h: Int32, e0: Int32, E: Int32,
                 tidx: Int32):
        """``sXE[e, p]`` = x of entry e (fp32) for e0 <= e < E: ring entries e < h, drafts
        e = h + t."""
        P, EM, NT = self.P, self.EM, self.cfg.nt
        for i in cutlass.range_constexpr(-(-(EM * P) // NT)):
            idx = tidx + i * NT
            e = idx // P
            p = idx % P
            if (e < E) & (e >= e0):
                if e < h:
                    sXE[e, p] = mXBuf[slot, head, self._phys(origin, e), p].to(Float32)
                else:
                    sXE[e, p] = mX[row, e - h, head, p].to(Float32)

    @cute.jit
    def _head_out(self, mX: cute.Tensor, mZ: Optional[cute.Tensor], mD: Optional[cute.Tensor],
                  mOut: cute.Tensor, sCoefT: cute.Tensor, sG: cute.Tensor, sDot: cute.Tensor,
                  sXE: cute.Tensor, row: Int32, head: Int32, k: Int32, h: Int32, e0: Int32,
                  tidx: Int32):
        """``y[t, p] = Σ_{e0<=e<=h+t} coef[t, e]·x_e[p] + sG[t]·sDot[t, p] + D·x_t[p]``
        (the reference's order; e0 = h when sDot holds S_new's dots, whose fold took the entries
        before h), ``*= silu(z)``, stored to ``out[row, t, head, p]``."""
        # out_ilp: the first GP = P·floor(128 / P) threads take the outputs, output i of a thread
        # at (t, p) = divmod(tidx + i·GP, P), so all of a thread's outputs share p (P = 80: 80
        # threads x T outputs); the others have none
        GP = (self.cfg.nt // self.P) * self.P if self.out_ilp else self.cfg.nt
        if const_expr(GP < self.cfg.nt):
            if tidx < GP:
                self._head_out_rows(mX, mZ, mD, mOut, sCoefT, sG, sDot, sXE, row, head, k, h,
                                    e0, tidx, GP)
        else:
            self._head_out_rows(mX, mZ, mD, mOut, sCoefT, sG, sDot, sXE, row, head, k, h, e0,
                                tidx, GP)

    @cute.jit
    def _head_out_rows(self, mX: cute.Tensor, mZ: Optional[cute.Tensor],
                       mD: Optional[cute.Tensor], mOut: cute.Tensor, sCoefT: cute.Tensor,
                       sG: cute.Tensor, sDot: cute.Tensor, sXE: cute.Tensor, row: Int32,
                       head: Int32, k: Int32, h: Int32, e0: Int32, tidx: Int32, GP):
        """:meth:`_head_out` of one thread: outputs ``tidx + i·GP`` (flattened [T, P])."""
        T, P = self.T, self.P
        NO = -(-(T * P) // GP)           # outputs per thread
        dsk = Float32(0.0)
        if const_expr(self.has_D):
            dsk = mD[head].to(Float32)
        accs = None
        if const_expr(self.out_ilp):
            # every output of this thread has p = tidx % P: one entry loop, one x_e[p] load per
            # entry, NO independent accumulators (entries past an output's q add exact zeros)
            p = tidx % P
            accs = cute.make_rmem_tensor((NO,), Float32)
            for i in cutlass.range_constexpr(NO):
                accs[i] = Float32(0.0)
            t_last = cutlass.min((tidx + (NO - 1) * GP) // P, Int32(T - 1))
            for e in cutlass.range(e0, h + t_last + 1, unroll=2):
                xe = sXE[e, p].to(Float32)
                for i in cutlass.range_constexpr(NO):
                    ti = cutlass.min((tidx + i * GP) // P, Int32(T - 1))
                    accs[i] = accs[i] + lp.sel_f32(e <= h + ti, sCoefT[k, ti, e] * xe,
                                                   Float32(0.0))
        for i in cutlass.range_constexpr(NO):
            idx = tidx + i * GP
            t = idx // P
            p = idx % P
            if idx < T * P:
                q = h + t
                acc = Float32(0.0)
                if const_expr(self.out_ilp):
                    acc = accs[i]
                else:
                    for e in cutlass.range(e0, q + 1, unroll=1):
                        acc = acc + sCoefT[k, t, e] * sXE[e, p].to(Float32)
                y = acc + sG[k, t] * sDot[t, p]
                if const_expr(self.has_D):
                    y = y + dsk * sXE[q, p].to(Float32)
                if const_expr(self.has_z):
                    y = _silu_gate(y, mZ[row, t, head, p].to(Float32))
                mOut[row, t, head, p] = y.to(self.act_dtype)


# --------------------------------------------------------------------------------------
# compile (tensor-free, cached) and launch
# --------------------------------------------------------------------------------------

_CACHE = KernelCache("mamba2_verify")


def _resolve(pair_name, act_dtype, dt_dtype, H, P, N, G, L, R, T, has_D, has_z, has_dt_bias,
             dt_softplus, heads_per_cta, has_idx, min_blocks_per_mp=None, flush_impl=None,
             use_mma=None, row_order=False, rows=0, order_cursors=False, philox_rounds=None):
    from .mamba2_replay import _early_arrive_default, _flush_impl_default
    kw = dict(
        pair=parse_pair(pair_name).name, act_dtype=dtype_name(act_dtype),
        dt_dtype=dtype_name(dt_dtype), nheads=int(H), headdim=int(P), dstate=int(N),
        ngroups=int(G), buffer_len=int(L), ring=int(R), num_drafts=int(T), has_D=bool(has_D),
        has_z=bool(has_z), has_dt_bias=bool(has_dt_bias), dt_softplus=bool(dt_softplus),
        heads_per_cta=int(heads_per_cta), has_state_batch_indices=bool(has_idx),
        min_blocks_per_mp=None if min_blocks_per_mp is None else int(min_blocks_per_mp),
        flush_impl=_flush_impl_default() if flush_impl is None else int(flush_impl),
        use_mma=_mma_default() if use_mma is None else bool(use_mma),
        row_order=bool(row_order), pdl=common.pdl_default(verify=True), rows=int(rows),
        order_cursors=bool(order_cursors and row_order),
        philox_rounds=common.philox_rounds_for(pair_name, philox_rounds),
    )
    key = ("mamba2_verify", common.arch_key(), os.environ.get("REPLAYSSM_M2V_MINBLOCKS"),
           _early_arrive_default(), _mma_fold_default(), _out_ilp_default(),
           _prof_default(), _mma_wide_default(),
           _xstage_default(), _xdraft_default(),
           _verify_fold_unroll(), _frag_flush_default(), os.environ.get(FRAG_PD_ENV),
           os.environ.get(FRAG_L2PF_ENV, "1"), os.environ.get(READ_L2PF_ENV),
           os.environ.get(READ_L2PF_LATE_ENV, "1"), os.environ.get(PRE_HOIST_ENV),
           _dot_pieces(), os.environ.get(FOLD_SMEM_ENV), os.environ.get(FOLD_ENTRIES_ENV),
           lp.f16_sr_chunk(), e2m1_magic(), _fold_pair_env(), _pair_roll_env(),
           _frag_split_default(), _frag_preload_default(), _mma_max_t(),
           os.environ.get(MMA_BSMEM_ENV)) + tuple(
        kw.values())
    return kw, key


def compile_mamba2_verify(pair_name, act_dtype, dt_dtype, H: int, P: int, N: int, G: int, L: int,
                          R: int, T: int, has_D: bool, has_z: bool, has_dt_bias: bool,
                          dt_softplus: bool, heads_per_cta: int,
                          has_state_batch_indices: bool = True,
                          min_blocks_per_mp: Optional[int] = None,
                          flush_impl: Optional[int] = None,
                          dump: Optional["common.dump_ptx"] = None,
                          use_mma: Optional[bool] = None,
                          row_order: bool = False, rows: int = 0,
                          order_cursors: bool = False,
                          philox_rounds: Optional[int] = None) -> CompiledKernel:
    """Compile (once per key, tensor-free, TVM-FFI) the verify kernel for T drafts. Every argument
    is baked into the binary and forms the cache key; ``batch`` and ``num_slots`` stay symbolic.
    Call ``k.ffi(x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out, hi_words, hi_scale,
    hi_global_scale, lo_words, lo_scale, lo_global_scale, x_buf, B_buf, dt_buf, dA_buf, write_pos,
    ring_origin, flush_count, pending, arrive, seed, order, pad_slot_id)`` (``None`` for absent
    tensors; ``order``: see :func:`cute_kernels.mamba2_replay.compile_mamba2_replay`).
    ``philox_rounds``: the SR generator's rounds (the cache's; None = 10). With ``dump`` the
    compile bypasses the cache."""
    if not common.HAS_TVM_FFI:
        raise RuntimeError("the Mamba-2 verify kernel needs apache-tvm-ffi (TVM-FFI call path)")
    kw, key = _resolve(pair_name, act_dtype, dt_dtype, H, P, N, G, L, R, T, has_D, has_z,
                       has_dt_bias, dt_softplus, heads_per_cta, has_state_batch_indices,
                       min_blocks_per_mp, flush_impl, use_mma, row_order, rows, order_cursors,
                       philox_rounds)
    # per-token inputs carry the T mode: x, z, out [batch, T, H, P], dt [batch, T, H], B, C
    # [batch, T, G, N]; the cache tensors as in the decode kernel
    return _compile_op(_CACHE, key, Mamba2VerifyKernel, kw, dump, draft_modes=(int(T),))


def compile_only(pair_name="nvfp4/fp16sr", act_dtype="bfloat16", dt_dtype="float32", H: int = 128,
                 P: int = 64, N: int = 128, G: int = 8, L: int = 16, T: int = 8,
                 R: Optional[int] = None, has_D: bool = True, has_z: bool = False,
                 has_dt_bias: bool = True, dt_softplus: bool = True, heads_per_cta: int = 1,
                 has_state_batch_indices: bool = True,
                 keep_ptx: bool = True, min_blocks_per_mp: Optional[int] = None,
                 rows: int = 0, order_cursors: bool = False,
                 philox_rounds: Optional[int] = None
                 ) -> Tuple[CompiledKernel, Optional[str]]:
    """Compile one variant without a GPU (``CUTE_DSL_ARCH=sm_90a``). Defaults: Nemotron-3-Super
    layer, L = 16, T = 8, ring R = max(L, T) + T. Returns ``(kernel, ptx_or_None)``."""
    if R is None:
        R = max(L, T) + T
    args = (pair_name, act_dtype, dt_dtype, H, P, N, G, L, R, T, has_D, has_z, has_dt_bias,
            dt_softplus, heads_per_cta, has_state_batch_indices, min_blocks_per_mp)
    return _compile_keep_ptx(functools.partial(compile_mamba2_verify, rows=rows,
                                               row_order=order_cursors,
                                               order_cursors=order_cursors,
                                               philox_rounds=philox_rounds), args, keep_ptx)


def supports_cache(cache) -> bool:
    """Configurations this kernel handles: dstate a multiple of 32 up to 512 (16-byte read chunks
    of every format, the flush mapping), max_draft <= 16, contiguous cache tensors."""
    N = cache.dstate
    if N % 32 or N > 512 or max(cache.max_draft, 1) > MAX_DRAFT:
        return False
    ts = [cache.hi.data, cache.write_pos] + list(cache._buffers())
    if cache.lo is not None:
        ts.append(cache.lo.data)
    return all(t.is_contiguous() for t in ts)


def mamba2_verify_cute(cache, x, dt, A, B, C, D=None, z=None, dt_bias=None,
                       dt_softplus: bool = True, state_batch_indices=None, pad_slot_id: int = -1,
                       out=None, heads_per_cta: Optional[int] = None,
                       min_blocks_per_mp: Optional[int] = None,
                       flush_impl: Optional[int] = None, use_mma: Optional[bool] = None,
                       _memo=None):
    """One speculative verify call on a :class:`replayssm_lp.Mamba2ReplayCache` (inputs validated
    by the torch layer: x, z, out [batch, T, H, P] act dtype; dt [batch, T, H] fp32 or act; A, D,
    dt_bias [H] fp32; B, C [batch, T, G, N] act; ``state_batch_indices`` int32 [batch] or None =
    row i -> slot i). Writes ``out`` for valid rows, appends the T drafts (pending = T, write_pos
    unchanged unless the row flushed: then hi/lo, scales, flush_count, ring_origin, write_pos = 0).
    No device allocation (given ``out``), no host sync; launches on the current torch stream
    (CUDA-graph capturable once compiled). Returns ``out``. The compiled function and the
    stored-copy views are kept per call signature in the memo of the cache's plan
    (:func:`replayssm_lp._validate.cache_plan`; ``_memo``: that memo when the caller has just
    validated the plan)."""
    batch, T, H, P = x.shape
    if out is None:
        out = x.new_empty(x.shape)
    if batch == 0:
        return out
    memo = cache_plan(cache).memo if _memo is None else _memo
    key = (x.dtype, dt.dtype, T, H, P, B.shape[2], B.shape[3], D is None, z is None,
           dt_bias is None, bool(dt_softplus), state_batch_indices is None,
           batch, heads_per_cta, min_blocks_per_mp, flush_impl,
           use_mma, _env())
    launch = common.memo_launch(memo, "m2_verify_launch", key, make_launch, cache, x, dt, B, D,
                                z, dt_bias, dt_softplus, state_batch_indices, heads_per_cta,
                                min_blocks_per_mp, flush_impl, use_mma)
    launch(cache, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out, pad_slot_id)
    return out


def make_launch(cache, x, dt, B, D, z, dt_bias, dt_softplus, state_batch_indices,
                heads_per_cta=None, min_blocks_per_mp=None, flush_impl=None, use_mma=None):
    """``launch(cache, x, dt, A, B, C, D, z, dt_bias, state_batch_indices, out, pad_slot_id)``
    for one verify call signature (T included) on ``cache``'s current stored copies; reads
    :data:`_ENV_NAMES`; keep it in the memo of the cache's plan (see
    :func:`cute_kernels.mamba2_replay.make_launch`)."""
    args = (cache, x, dt, B, D, z, dt_bias, dt_softplus, state_batch_indices, heads_per_cta,
            min_blocks_per_mp, flush_impl, use_mma)
    if not _use_split(cache, x.shape[0], x.shape[1]):
        return _launcher(_launch_entry(*args))
    conc = _split_concurrent() and use_row_order(cache, x.shape[0])
    ent, op2 = _launch_entry(*args, rows=2, with_op=True, order_cursors=conc)
    if not op2.flush_dots:           # the v1 flush (forced, or past one staging round): one launch
        return _launcher(_launch_entry(*args))
    if (os.environ.get(SPLIT_ENV) is None and cache.pair.read_fmt not in SPLIT_READ_FMTS
            and not op2.frag):       # the fp32 pair's default split is for the fragment flush
        return _launcher(_launch_entry(*args))
    ent1 = _launch_entry(*args, rows=1, order_cursors=conc)
    if not conc:
        # the non-flush rows' launch (its own occupancy, no flush buffers), then the flush rows'
        # launch on the same flush-first order
        nonflush = _launcher(ent1)
        flush = _launcher(_no_order(ent), order_ready=ent[8] is not None)

        def launch(*a):
            nonflush(*a)
            flush(*a)
        return launch
    # concurrent: the order kernel (rows, slots and cursors), then the flush launch on a side
    # stream and the non-flush launch on the caller's, both on that order; joined before return
    from .row_order import ConcurrentHalves

    order = _order_launcher(ent1)
    nonflush = _launcher(_no_order(ent1), order_ready=True)
    flush = _launcher(_no_order(ent), order_ready=True)
    halves = ConcurrentHalves(x.device)

    def launch(cache, x, *a):        # a = dt, A, B, C, D, z, dt_bias, indices, out, pad_slot_id
        order(cache, x, a[7], a[9])
        halves(flush, nonflush, cache, x, *a)
    return launch


SPLIT_CONCURRENT_ENV = "REPLAYSSM_M2V_SPLIT_CONCURRENT"


def _split_concurrent() -> bool:
    """``REPLAYSSM_M2V_SPLIT_CONCURRENT`` (0 / 1; default 1): a split call runs its two launches
    at once -- the flush rows' on a side stream, first, the non-flush rows' on the caller's --
    so that the short non-flush CTAs fill the SMs around the long flush ones (what the single
    launch's flush-first order does) instead of each launch ending on its own tail. Both take
    their rows' cursors from the flush-first order's entries (``order_cursors``), so neither
    reads cursors the other moves. Needs the order kernel (``use_row_order``); 0: one launch
    after the other on the caller's stream. H200, Nemotron-3-Super, L = 16, b256, same run
    (bench/results/session13_gpu/call4, one after the other / at once): fp32 T = 8 576.4 ->
    568.8 µs (single launch 592.2, standard fp32 step 573.7), T = 7 552.0 -> 542.6, T = 6 500.3
    -> 486.7; b512 T = 8 1095.4 -> 1075.4; nvfp4/fp16sr T = 8 776.8 -> 749.0, T = 4 370.5 ->
    369.2; fp8/fp32 T = 8 676.2 -> 646.2, T = 4 336.7 -> 318.6."""
    return os.environ.get(SPLIT_CONCURRENT_ENV, "1") != "0"


SPLIT_ENV = "REPLAYSSM_M2V_SPLIT"
SPLIT_MINB_ENV = "REPLAYSSM_M2V_SPLIT_MINB"


#: the split launch by default from this many rows (measured at 128, 256 and 512)
SPLIT_MIN_BATCH = 128
#: read copies split by default at any T (the fp32 pair: from T = SPLIT_FRAG_MIN_T)
SPLIT_READ_FMTS = ("fp8", "nvfp4")


def _use_split(cache, batch: int, T: int) -> bool:
    """Whether a verify call is two launches of the same kernel: one for the non-flush rows (no
    flush code or buffers: 24 KB of smem instead of 45-69, ``REPLAYSSM_M2V_SPLIT_MINB`` CTAs/SM,
    default 5, where the single kernel runs 3-4) and one for the flush rows; the CTAs of the
    other kind of row exit after the cursors. ``REPLAYSSM_M2V_SPLIT`` = 1 / 0 forces it on / off;
    unset: from :data:`SPLIT_MIN_BATCH` rows, for fp8 and nvfp4 read copies and for the fp32
    pair's fragment flush (T >= SPLIT_FRAG_MIN_T; :func:`make_launch` keeps one launch where the
    flush is not the fragment one). H200, Nemotron-3-Super, L = 16, b256 (bench/results/
    session10_gpu/call6, same run, single / split): T = 8 fp8/fp32 694.4 -> 675.6 µs,
    nvfp4/fp16sr 828.0 -> 781.4; T = 4 fp8/fp32 375.4 -> 345.2, nvfp4/fp16sr 404.0 -> 393.5,
    fp32 480.8 -> 487.7. The fp32 pair's split pays off once its flush launch holds
    SPLIT_FLUSH_MINB CTAs per SM with hi loads SPLIT_FLUSH_PD deep and its non-flush launch
    prefetches the read copy (session13_gpu/call3, same run, single / split): b256 T = 8 594.2
    -> 573.4 µs (standard fp32 step 574.0), T = 7 577.6 -> 552.3, T = 6 535.1 -> 497.5; b512
    T = 8 1125.7 -> 1094.0, T = 6 1039.3 -> 954.4. With the old 128-register flush launch it
    lost (call2: b256 T = 8 589.4 -> 665.6). b128 with the two launches at once (call5, single /
    split): fp32 T = 8 314.9 -> 303.8 (T = 4 236.0 / 237.8 with the CUDA-core flush),
    nvfp4/fp16sr T = 4 200.8 -> 189.2, T = 8 418.7 -> 384.4, fp8/fp32 186.0 -> 165.2,
    358.2 -> 335.2."""
    v = os.environ.get(SPLIT_ENV)
    if v is not None:
        return v == "1"
    if batch < SPLIT_MIN_BATCH:
        return False
    return (cache.pair.read_fmt in SPLIT_READ_FMTS
            or (cache.pair.name == "fp32" and T >= SPLIT_FRAG_MIN_T))


#: environment variables the launch decisions read (part of the launch memo key)
_ENV_NAMES = ("REPLAYSSM_M2_FLUSH", "REPLAYSSM_M2V_MMA", "REPLAYSSM_M2V_MMA_WIDE",
              "REPLAYSSM_M2_PROF", "REPLAYSSM_M2_HEADS_PER_CTA", "REPLAYSSM_M2V_MINBLOCKS",
              "REPLAYSSM_M2_EARLY_ARRIVE", "REPLAYSSM_M2_ORDER", "REPLAYSSM_M2_MMA_FOLD",
              "REPLAYSSM_M2V_OUT_ILP", XSTAGE_ENV, SPLIT_ENV, SPLIT_MINB_ENV,
              FOLD_UNROLL_ENV, XDRAFT_ENV, FRAG_FLUSH_ENV, FRAG_PD_ENV,
              FRAG_L2PF_ENV, READ_L2PF_ENV, READ_L2PF_LATE_ENV, PRE_HOIST_ENV,
              DOT_PIECES_ENV, SPLIT_CONCURRENT_ENV, common.PDL_ENV, FOLD_SMEM_ENV,
              FOLD_ENTRIES_ENV, lp.F16_SR_CHUNK_ENV, E2M1_ENV, FOLD_PAIR_ENV, PAIR_ROLL_ENV,
              FRAG_SPLIT_ENV, FRAG_PRELOAD_ENV, MMA_MAX_T_ENV, MMA_BSMEM_ENV)
_env = env_reader(_ENV_NAMES)


def _launch_entry(cache, x, dt, B, D, z, dt_bias, dt_softplus, state_batch_indices,
                  heads_per_cta, min_blocks_per_mp, flush_impl, use_mma, rows=0,
                  with_op=False, order_cursors=False):
    """A :func:`cute_kernels.mamba2_replay._launch_args` entry for one call signature on one
    cache (``rows``: the split launch's kind of row, see :class:`Mamba2VerifyKernel`;
    ``with_op``: also the kernel object; ``order_cursors``: the kernel takes the rows' cursors
    from the order too, whose kernel then writes them)."""
    if rows == 1 and min_blocks_per_mp is None:
        min_blocks_per_mp = int(os.environ.get(SPLIT_MINB_ENV, "5"))
    batch, T, H, P = x.shape
    G, N = B.shape[2], B.shape[3]
    if heads_per_cta is None:
        heads_per_cta = choose_heads_per_cta(batch, H, G)
    pair = cache.pair
    ordered = use_row_order(cache, batch)
    has_idx = state_batch_indices is not None
    k = compile_mamba2_verify(pair, x.dtype, dt.dtype, H, P, N, G, cache.buffer_len, cache.ring,
                              T, D is not None, z is not None, dt_bias is not None, dt_softplus,
                              heads_per_cta, has_idx, min_blocks_per_mp,
                              flush_impl, use_mma=use_mma, row_order=ordered, rows=rows,
                              order_cursors=order_cursors and ordered,
                              philox_rounds=cache.philox_rounds)
    ocur = bool(getattr(k.meta["op"], "order_cursors", False))
    ent = _launch_args(k, cache, order_fn(cache, T, has_idx, ocur) if ordered else None)
    return (ent, k.meta["op"]) if with_op else ent
