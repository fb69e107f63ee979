"""State encode / decode kernels (CuTe DSL): fp32 states <-> the stored formats of formats.py.

``StateEncode`` writes fp32 states ``S [n, H, R, C]`` into pool tensors at the slots
``slots[i]`` in one of the formats fp32 / fp16 / bf16 / fp8 / nvfp4 with RN or SR rounding,
bit-identical to ``replayssm_lp.formats.encode`` (+ ``formats.sr_words`` for SR, with
``generation = flush_count[slot]`` read on the device and the seed from a device int64 tensor).
``StateDecode`` is the inverse (``formats.decode``) into an fp32 ``[n, H, R, C]`` tensor.
Used by init_from_state / materialize, so they favour simplicity over speed (loads and stores are
still 128-bit where the format allows).

Tiling: one CTA (128 threads) per (row i, head h) matrix ``[R, C]``; the matrix is cut in chunks of
16 consecutive elements of a row (one nvfp4 block; chunk q covers elements ``16q .. 16q+15`` of the
row-major matrix, i.e. row ``q // (C/16)``); thread t handles chunks ``t, t + 128, ...`` in a runtime
loop (``unroll=1``: small code, ~1 s compiles; the init / materialize paths are not hot).

* fp8: the row amax is a butterfly max over the ``C/16`` lanes sharing a row (``C/16`` must divide
  32), scale = amax / 448, stored by the row's first lane.
* nvfp4: pass 1 reduces the matrix amax (warp shuffle + smem), ``s_glob = amax / 2688``; pass 2
  re-reads each chunk (L1/L2 hit), forms the block scale and the 16 codes (two 32-bit words).
* SR: chunk q needs the Philox words of quads ``4q .. 4q+3``: four Philox-4x32-10 calls with counter
  ``(quad, h, slot, (stream << 31) | flush_count[slot])`` and key = the seed's two halves.

Storage views (the launchers build them; kernels only see 32-bit words):
``data`` is passed as an int32 view ``[num_slots, H, R, C * bits / 32]`` (fp32 / fp16 / bf16 / e4m3
/ packed e2m1 words, little-endian: element 0 in the low bits), the nvfp4 block scale as uint8
``[num_slots, H, R, C/16]``, the fp8 row scale as fp32 ``[num_slots, H, R]``, the nvfp4 global scale
as fp32 ``[num_slots, H]``.

Rows with ``slots[i] < 0`` (pad) or ``slots[i] >= num_slots`` are skipped entirely (nothing read or
written for them; the decoder leaves those ``out`` rows untouched). ``flush_count`` is only read.

Public entry points: :func:`encode_state_cute`, :func:`decode_state_cute`,
:func:`compile_state_encode`, :func:`compile_state_decode`, :func:`compile_only`.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64, Uint8, Uint32, const_expr

try:  # annotations only; the TVM-FFI path takes the stream from the torch environment
    import cuda.bindings.driver as cuda
except Exception:  # pragma: no cover
    cuda = None

from . import common
from .common import CompiledKernel, KernelCache
from . import lowprec as lp

__all__ = [
    "StateEncode", "StateDecode", "FMTS", "ROUNDINGS", "encode_state_cute", "decode_state_cute",
    "compile_state_encode", "compile_state_decode", "compile_only",
]

FMTS = ("fp32", "fp16", "bf16", "fp8", "nvfp4")
ROUNDINGS = ("rn", "sr")
_BITS = {"fp32": 32, "fp16": 16, "bf16": 16, "fp8": 8, "nvfp4": 4}
CHUNK = 16                  # elements per chunk (= one nvfp4 block)
NUM_THREADS = 128


def _check_static(fmt: str, R: int, C: int, num_threads: int) -> None:
    if fmt not in FMTS:
        raise ValueError(f"unknown state format {fmt!r}; expected one of {FMTS}")
    if R <= 0 or C <= 0 or C % CHUNK:
        raise ValueError(f"state codec needs R > 0 and C a multiple of {CHUNK}, got R={R}, C={C}")
    cb = C // CHUNK
    if fmt == "fp8" and (32 % cb):
        raise ValueError(f"fp8 state codec needs C/16 to divide 32 (C in 16..512, power of two), "
                         f"got C={C}")
    if num_threads % 32 or not (32 <= num_threads <= 1024):
        raise ValueError(f"num_threads must be a multiple of 32 in [32, 1024], got {num_threads}")


class _CodecBase:
    def __init__(self, fmt: str, R: int, C: int, num_threads: int = NUM_THREADS):
        _check_static(fmt, R, C, num_threads)
        self.fmt = fmt
        self.R, self.C = int(R), int(C)
        self.cb = self.C // CHUNK                         # chunks per row
        self.nq = self.R * self.cb                        # chunks per matrix
        self.nt = int(num_threads)
        self.nit = (self.nq + self.nt - 1) // self.nt     # chunks per thread
        self.full = self.nq % self.nt == 0
        self.bits = _BITS[fmt]
        self.words = self.C * self.bits // 32             # int32 words per row
        self.wpc = CHUNK * self.bits // 32                # int32 words per chunk

    # chunk q -> (clamped q, row, chunk-in-row, valid); clamping keeps every lane's loads in
    # bounds so warp collectives stay convergent, stores are predicated on ``valid``.
    def _chunk(self, tidx, it):
        q = tidx + it * self.nt
        if const_expr(self.full):
            valid = q >= 0   # always true (dynamic Boolean)
            qc = q
        else:
            valid = q < self.nq
            qc = cutlass.min(q, self.nq - 1)
        return qc, qc // self.cb, qc % self.cb, valid


class StateEncode(_CodecBase):
    """fp32 ``S [n, H, R, C]`` -> pool ``data`` (int32 word view) / scales at ``slots[i]``.

    Compile-time: ``fmt``, ``rounding`` ('rn' | 'sr'; ignored for fp32), ``stream_id`` (0 = hi /
    recurrence checkpoint, 1 = lo / read copy; only the SR counter uses it), ``R``, ``C``,
    ``philox_rounds`` (the SR generator's rounds: the cache's).
    """

    def __init__(self, fmt: str, rounding: str, stream_id: int, R: int, C: int,
                 num_threads: int = NUM_THREADS, philox_rounds: int = lp.PHILOX_ROUNDS):
        super().__init__(fmt, R, C, num_threads)
        if rounding not in ROUNDINGS:
            raise ValueError(f"rounding must be one of {ROUNDINGS}, got {rounding!r}")
        if stream_id not in (0, 1):
            raise ValueError(f"stream_id must be 0 (hi) or 1 (lo), got {stream_id!r}")
        self.sr = rounding == "sr" and fmt != "fp32"
        self.stream_id = int(stream_id)
        self.philox_rounds = int(philox_rounds)

    @cute.jit
    def __call__(self, mS: cute.Tensor, mSlots: cute.Tensor, mFlush: Optional[cute.Tensor],
                 mSeed: Optional[cute.Tensor], mData: cute.Tensor, mScale: Optional[cute.Tensor],
                 mGScale: Optional[cute.Tensor], stream: cuda.CUstream):
        n = mS.shape[0]
        H = mS.shape[1]
        self.kernel(mS, mSlots, mFlush, mSeed, mData, mScale, mGScale).launch(
            grid=[H, n, 1], block=[self.nt, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mS: cute.Tensor, mSlots: cute.Tensor, mFlush: Optional[cute.Tensor],
               mSeed: Optional[cute.Tensor], mData: cute.Tensor, mScale: Optional[cute.Tensor],
               mGScale: Optional[cute.Tensor]):
        tidx, _, _ = cute.arch.thread_idx()
        h, i, _ = cute.arch.block_idx()
        fmt = self.fmt
        slot = mSlots[i]
        if const_expr(fmt == "nvfp4"):
            smem = cutlass.memory.SmemAllocator()
            sRed = smem.allocate_tensor(Float32, cute.make_layout(self.nt // 32), byte_alignment=16)
        if slot >= 0 and slot < mData.shape[0]:
            gS = mS[i, h, None, None]                    # (R, C) fp32
            gD = mData[slot, h, None, None]              # (R, words) int32
            k0 = Uint32(0)
            k1 = Uint32(0)
            w3 = Uint32(0)
            if const_expr(self.sr):
                k0, k1 = lp.sr_key_from_seed(mSeed[0])
                w3 = lp.sr_counter_word3(self.stream_id, mFlush[slot])
            c1 = Uint32(h)
            c2 = Uint32(slot)

            s_glob = Float32(0.0)
            if const_expr(fmt == "nvfp4"):
                # ---- pass 1: matrix amax (NaN -> 0, inf -> FLT_MAX) ----
                amax = Float32(0.0)
                for it in cutlass.range(self.nit, unroll=1):
                    qc, r, cb, valid = self._chunk(tidx, it)
                    rX = self._load_chunk(gS, r, cb)
                    for j in cutlass.range_constexpr(CHUNK):
                        amax = lp.fmax_nq(amax, lp.abs_nan0_inf_sat(rX[j]))
                amax = cute.arch.warp_reduction(amax, lp.fmax_nq, threads_in_group=32)
                warp = tidx // 32
                lane = tidx % 32
                if lane == 0:
                    sRed[warp] = amax
                cute.arch.barrier()
                amax = sRed[0]
                for w in cutlass.range_constexpr(1, self.nt // 32):
                    amax = lp.fmax_nq(amax, sRed[w])
                s_glob = lp.nvfp4_global_scale(amax)
                if tidx == 0:
                    mGScale[slot, h] = s_glob

            # ---- encode pass ----
            for it in cutlass.range(self.nit, unroll=1):
                qc, r, cb, valid = self._chunk(tidx, it)
                rX = self._load_chunk(gS, r, cb)
                rW = cute.make_rmem_tensor((self.wpc,), Int32)
                words = [None] * CHUNK
                if const_expr(self.sr):
                    quad0 = Uint32(qc) * Uint32(4)
                    for jq in cutlass.range_constexpr(4):
                        o0, o1, o2, o3 = lp.philox4x32(quad0 + Uint32(jq), c1, c2, w3, k0, k1,
                                                       self.philox_rounds)
                        words[4 * jq + 0] = o0
                        words[4 * jq + 1] = o1
                        words[4 * jq + 2] = o2
                        words[4 * jq + 3] = o3
                if const_expr(fmt == "fp32"):
                    for j in cutlass.range_constexpr(CHUNK):
                        rW[j] = lp.f32_bits(rX[j]).to(Int32)
                elif const_expr(fmt == "fp16" and self.sr and lp.f16_sr_chunk()):
                    # the flush kernels' fp16 SR (check_state_codec tests it bit-exact)
                    ws = cute.make_rmem_tensor((CHUNK,), Uint32)
                    for j in cutlass.range_constexpr(CHUNK):
                        ws[j] = words[j]
                    lp.pack_f16_sr(rX, ws, rW, lp.f16_sr_chunk_fast([rX[j] for j in range(CHUNK)]),
                                   CHUNK)
                elif const_expr(fmt == "fp16" or fmt == "bf16"):
                    # (fp16 SR with the chunk check off: round_f16_sr, as bit-exact)
                    vals = [lp.round_f16_sr(rX[j], words[j]) if fmt == "fp16" and self.sr
                            else lp.round_to_grid(rX[j], fmt, self.sr,
                                                  words[j] if self.sr else None)
                            for j in range(CHUNK)]
                    for j in cutlass.range_constexpr(CHUNK // 2):
                        if const_expr(fmt == "fp16"):
                            rW[j] = lp.pack_f16x2(vals[2 * j], vals[2 * j + 1]).to(Int32)
                        else:
                            rW[j] = lp.pack_bf16x2(vals[2 * j], vals[2 * j + 1]).to(Int32)
                elif const_expr(fmt == "fp8"):
                    a = Float32(0.0)
                    for j in cutlass.range_constexpr(CHUNK):
                        a = lp.fmax_nq(a, lp.abs_nan0_inf_sat(rX[j]))
                    if const_expr(self.cb > 1):
                        a = cute.arch.warp_reduction(a, lp.fmax_nq, threads_in_group=self.cb)
                    scale = lp.fp8_row_scale(a)
                    vals = [lp.fp8_quantize(rX[j], scale, self.sr,
                                            words[j] if self.sr else None)
                            for j in range(CHUNK)]
                    for j in cutlass.range_constexpr(CHUNK // 4):
                        rW[j] = lp.pack_e4m3x4(vals[4 * j], vals[4 * j + 1], vals[4 * j + 2],
                                               vals[4 * j + 3]).to(Int32)
                    if valid and cb == 0:
                        mScale[slot, h, r] = scale
                else:  # nvfp4
                    a = Float32(0.0)
                    for j in cutlass.range_constexpr(CHUNK):
                        a = lp.fmax_nq(a, lp.abs_nan0_inf_sat(rX[j]))
                    s_blk = lp.nvfp4_block_scale(a, s_glob)
                    d = lp.mul_rn(s_blk, s_glob)
                    codes = [lp.e2m1_code(lp.nvfp4_quantize(rX[j], d, self.sr,
                                                            words[j] if self.sr else None))
                             for j in range(CHUNK)]
                    rW[0] = lp.pack_nibbles8(codes[0:8]).to(Int32)
                    rW[1] = lp.pack_nibbles8(codes[8:16]).to(Int32)
                    if valid:
                        mScale[slot, h, r, cb] = lp.e4m3_byte(s_blk).to(Uint8)
                if valid:
                    gDc = cute.local_tile(gD, (1, self.wpc), (r, cb))[0, None]
                    cute.autovec_copy(rW, gDc)

    def _load_chunk(self, gS: cute.Tensor, r, cb):
        gSc = cute.local_tile(gS, (1, CHUNK), (r, cb))[0, None]
        rX = cute.make_rmem_tensor((CHUNK,), Float32)
        cute.autovec_copy(gSc, rX)
        return rX


class StateDecode(_CodecBase):
    """Pool ``data`` (int32 word view) / scales at ``slots[i]`` -> fp32 ``out [n, H, R, C]``."""

    @cute.jit
    def __call__(self, mData: cute.Tensor, mScale: Optional[cute.Tensor],
                 mGScale: Optional[cute.Tensor], mSlots: cute.Tensor, mOut: cute.Tensor,
                 stream: cuda.CUstream):
        n = mOut.shape[0]
        H = mOut.shape[1]
        self.kernel(mData, mScale, mGScale, mSlots, mOut).launch(
            grid=[H, n, 1], block=[self.nt, 1, 1], stream=stream)

    @cute.kernel
    def kernel(self, mData: cute.Tensor, mScale: Optional[cute.Tensor],
               mGScale: Optional[cute.Tensor], mSlots: cute.Tensor, mOut: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        h, i, _ = cute.arch.block_idx()
        fmt = self.fmt
        slot = mSlots[i]
        if slot >= 0 and slot < mData.shape[0]:
            gD = mData[slot, h, None, None]              # (R, words) int32
            gO = mOut[i, h, None, None]                  # (R, C) fp32
            s_glob = Float32(0.0)
            if const_expr(fmt == "nvfp4"):
                s_glob = mGScale[slot, h]
            for it in cutlass.range(self.nit, unroll=1):
                qc, r, cb, valid = self._chunk(tidx, it)
                if valid:
                    gDc = cute.local_tile(gD, (1, self.wpc), (r, cb))[0, None]
                    rW = cute.make_rmem_tensor((self.wpc,), Int32)
                    cute.autovec_copy(gDc, rW)
                    rO = cute.make_rmem_tensor((CHUNK,), Float32)
                    if const_expr(fmt == "fp32"):
                        for j in cutlass.range_constexpr(CHUNK):
                            rO[j] = lp.bits_f32(Uint32(rW[j]))
                    elif const_expr(fmt == "fp16" or fmt == "bf16"):
                        for j in cutlass.range_constexpr(CHUNK // 2):
                            if const_expr(fmt == "fp16"):
                                v0, v1 = lp.f16x2_to_f32(Uint32(rW[j]))
                            else:
                                v0, v1 = lp.bf16x2_to_f32(Uint32(rW[j]))
                            rO[2 * j] = v0
                            rO[2 * j + 1] = v1
                    elif const_expr(fmt == "fp8"):
                        scale = mScale[slot, h, r]
                        for j in cutlass.range_constexpr(CHUNK // 4):
                            v0, v1, v2, v3 = lp.unpack_e4m3x4(Uint32(rW[j]))
                            rO[4 * j] = lp.mul_rn(v0, scale)
                            rO[4 * j + 1] = lp.mul_rn(v1, scale)
                            rO[4 * j + 2] = lp.mul_rn(v2, scale)
                            rO[4 * j + 3] = lp.mul_rn(v3, scale)
                    else:  # nvfp4
                        s_blk = lp.e4m3_byte_to_f32(Uint32(mScale[slot, h, r, cb]))
                        d = lp.mul_rn(s_blk, s_glob)
                        for jw in cutlass.range_constexpr(2):
                            w = Uint32(rW[jw])
                            for j in cutlass.range_constexpr(8):
                                code = (w >> Uint32(4 * j)) & Uint32(0xF)
                                rO[8 * jw + j] = lp.mul_rn(lp.e2m1_code_to_f32(code), d)
                    gOc = cute.local_tile(gO, (1, CHUNK), (r, cb))[0, None]
                    cute.autovec_copy(rO, gOc)


# --------------------------------------------------------------------------------------
# compile (tensor-free, cached) and launch
# --------------------------------------------------------------------------------------

_ENC_CACHE = KernelCache("state_encode")
_DEC_CACHE = KernelCache("state_decode")


def _norm_rounding(fmt: str, rounding: str) -> str:
    return "rn" if fmt == "fp32" else rounding


def _fake_encode_args(op: StateEncode):
    R, C, W = op.R, op.C, op.words
    f = common.fake_tensor
    n, H, NS = common.sym(), common.sym(), common.sym()
    S = f(Float32, (n, H, R, C), (("dyn", R * C), ("dyn", R * C), C, 1), align_bytes=16)
    slots = f(Int32, (n,), (1,), align_bytes=4)
    flush = f(Int32, (NS,), (1,), align_bytes=4) if op.sr else None
    seed = f(Int64, (1,), (1,), align_bytes=8) if op.sr else None
    data = f(Int32, (NS, H, R, W), (("dyn", R * W), ("dyn", R * W), W, 1), align_bytes=16)
    scale = gscale = None
    if op.fmt == "fp8":
        scale = f(Float32, (NS, H, R), (("dyn", R), ("dyn", R), 1), align_bytes=4)
    elif op.fmt == "nvfp4":
        cb = op.cb
        scale = f(Uint8, (NS, H, R, cb), (("dyn", R * cb), ("dyn", R * cb), cb, 1), align_bytes=1)
        gscale = f(Float32, (NS, H), ("dyn", 1), align_bytes=4)
    return (S, slots, flush, seed, data, scale, gscale, common.fake_stream())


def _fake_decode_args(op: StateDecode):
    R, C, W = op.R, op.C, op.words
    f = common.fake_tensor
    n, H, NS = common.sym(), common.sym(), common.sym()
    data = f(Int32, (NS, H, R, W), (("dyn", R * W), ("dyn", R * W), W, 1), align_bytes=16)
    scale = gscale = None
    if op.fmt == "fp8":
        scale = f(Float32, (NS, H, R), (("dyn", R), ("dyn", R), 1), align_bytes=4)
    elif op.fmt == "nvfp4":
        cb = op.cb
        scale = f(Uint8, (NS, H, R, cb), (("dyn", R * cb), ("dyn", R * cb), cb, 1), align_bytes=1)
        gscale = f(Float32, (NS, H), ("dyn", 1), align_bytes=4)
    slots = f(Int32, (n,), (1,), align_bytes=4)
    out = f(Float32, (n, H, R, C), (("dyn", R * C), ("dyn", R * C), C, 1), align_bytes=16)
    return (data, scale, gscale, slots, out, common.fake_stream())


def _enc_key(fmt, rounding, stream_id, R, C, philox_rounds=lp.PHILOX_ROUNDS):
    rounding = _norm_rounding(fmt, rounding)
    stream_id = int(stream_id) if rounding == "sr" else 0
    rounds = common.check_philox_rounds(philox_rounds) if rounding == "sr" else lp.PHILOX_ROUNDS
    return ("state_encode", common.arch_key(), fmt, rounding, stream_id, int(R), int(C),
            lp.f16_sr_chunk(), rounds)


def _dec_key(fmt, R, C):
    return ("state_decode", common.arch_key(), fmt, int(R), int(C))


def _require_ffi():
    if not common.HAS_TVM_FFI:
        raise RuntimeError("the state codec kernels need apache-tvm-ffi (TVM-FFI call path)")


def compile_state_encode(fmt: str, rounding: str, stream_id: int, R: int, C: int,
                         dump: Optional["common.dump_ptx"] = None,
                         philox_rounds: int = lp.PHILOX_ROUNDS) -> CompiledKernel:
    """Compile (cached by ``(fmt, rounding, stream_id, R, C, philox_rounds)``) the encoder. Call
    ``k.ffi(S, slots, flush_count, seed, data_i32, scale, global_scale)`` with torch tensors
    (``None`` for the tensors the variant does not use: flush_count / seed unless SR, scale unless
    fp8 / nvfp4, global_scale unless nvfp4). With ``dump`` the compile bypasses the cache."""
    _require_ffi()
    key = _enc_key(fmt, rounding, stream_id, R, C, philox_rounds)
    return common.compile_tvm_ffi_cached(_ENC_CACHE, key,
                                         lambda: StateEncode(fmt, key[3], key[4], R, C,
                                                             philox_rounds=key[-1]),
                                         _fake_encode_args, dump=dump)


def compile_state_decode(fmt: str, R: int, C: int,
                         dump: Optional["common.dump_ptx"] = None) -> CompiledKernel:
    """Compile (cached by ``(fmt, R, C)``) the decoder. Call
    ``k.ffi(data_i32, scale, global_scale, slots, out)``."""
    _require_ffi()
    key = _dec_key(fmt, R, C)
    return common.compile_tvm_ffi_cached(_DEC_CACHE, key, lambda: StateDecode(fmt, R, C),
                                         _fake_decode_args, dump=dump)


def compile_only(kind: str, fmt: str, R: int, C: int, rounding: str = "rn", stream_id: int = 0,
                 keep_ptx: bool = True,
                 philox_rounds: int = lp.PHILOX_ROUNDS) -> Tuple[CompiledKernel, Optional[str]]:
    """Compile one encoder (``kind='encode'``) or decoder (``kind='decode'``) variant without a
    GPU (``CUTE_DSL_ARCH=sm_90a``). Returns ``(compiled_kernel, ptx_text_or_None)``."""
    if not keep_ptx:
        k = (compile_state_encode(fmt, rounding, stream_id, R, C, philox_rounds=philox_rounds)
             if kind == "encode" else compile_state_decode(fmt, R, C))
        return k, None
    with common.dump_ptx() as d:
        k = (compile_state_encode(fmt, rounding, stream_id, R, C, dump=d,
                                  philox_rounds=philox_rounds)
             if kind == "encode" else compile_state_decode(fmt, R, C, dump=d))
        ptx = d.read() or None
        d.cleanup()
    k._ptx = ptx
    return k, ptx


# ---- torch-facing launchers ---------------------------------------------------------------

def _as_words(t, fmt: str):
    """Pool data tensor (native storage dtype) -> int32 word view ``[..., C*bits/32]``."""
    import torch

    want = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
            "fp8": torch.float8_e4m3fn, "nvfp4": torch.uint8}[fmt]
    if t.dtype != want and not (fmt == "fp8" and t.dtype == torch.uint8) \
            and not (fmt == "fp32" and t.dtype == torch.int32):
        raise TypeError(f"{fmt} state data must be {want}, got {t.dtype}")
    if t.dtype == torch.int32:
        return t
    return t.view(torch.int32)


def _check_scales(fmt: str, scale, global_scale) -> None:
    if fmt in ("fp8", "nvfp4") and scale is None:
        raise ValueError(f"{fmt} state needs its scale tensor")
    if fmt == "nvfp4" and global_scale is None:
        raise ValueError("nvfp4 state needs its global_scale tensor")


def _as_u8(t):
    import torch

    if t is None:
        return None
    return t if t.dtype == torch.uint8 else t.view(torch.uint8)


def encode_state_cute(S, slots, flush_count, seed, fmt: str, rounding: str, stream_id: int,
                      data, scale=None, global_scale=None,
                      philox_rounds: int = lp.PHILOX_ROUNDS) -> None:
    """Encode fp32 ``S [n, H, R, C]`` into pool tensors at ``slots`` (int32 [n], -1 = skip).

    ``flush_count`` int32 [num_slots] (the SR generation is ``flush_count[slot]``; not modified)
    and ``seed`` int64 [1] are device tensors, needed for SR (may be None for RN). ``data``:
    [num_slots, H, R, C] fp32 / fp16 / bf16 / float8_e4m3fn (or uint8), or uint8 [.., C/2] for
    nvfp4; ``scale``: fp32 [num_slots, H, R] (fp8) or float8_e4m3fn / uint8 [.., C/16] (nvfp4);
    ``global_scale``: fp32 [num_slots, H] (nvfp4). All contiguous, 16-byte aligned data / S. Runs
    on the current torch stream; no host sync, no allocation (CUDA-graph safe). ``philox_rounds``:
    the SR generator's rounds (the cache's)."""
    n, H, R, C = S.shape
    if n == 0 or H == 0:
        return
    sr = _norm_rounding(fmt, rounding) == "sr"
    if sr and (flush_count is None or seed is None):
        raise ValueError("SR encode needs flush_count and seed device tensors")
    _check_scales(fmt, scale, global_scale)
    k = compile_state_encode(fmt, rounding, stream_id, R, C, philox_rounds=philox_rounds)
    if sr and seed.dim() != 1:
        seed = seed.reshape(1)
    k.ffi(S, slots, flush_count if sr else None, seed if sr else None, _as_words(data, fmt),
          _as_u8(scale) if fmt == "nvfp4" else (scale if fmt == "fp8" else None),
          global_scale if fmt == "nvfp4" else None)


def decode_state_cute(data, scale, global_scale, slots, fmt: str, out) -> None:
    """Decode pool tensors at ``slots`` (int32 [n], -1 = skip: that ``out`` row is left untouched)
    into fp32 ``out [n, H, R, C]`` (formats.decode, bit for bit)."""
    n, H, R, C = out.shape
    if n == 0 or H == 0:
        return
    _check_scales(fmt, scale, global_scale)
    k = compile_state_decode(fmt, R, C)
    k.ffi(_as_words(data, fmt), _as_u8(scale) if fmt == "nvfp4" else (scale if fmt == "fp8"
                                                                        else None),
          global_scale if fmt == "nvfp4" else None, slots, out)
