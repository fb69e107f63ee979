#!/usr/bin/env python
"""GPU check: the CuTe state encode / decode kernels are bit-identical to replayssm_lp.formats.

For every R x C shape, format (fp32 / fp16 / bf16 / fp8 / nvfp4), rounding (rn / sr) and, for SR,
stream (0 = hi, 1 = lo):

* fresh fp32 states with mixed magnitudes (randn * exp(randn * 3)), all-zero 16-blocks, all-zero
  rows, one all-zero matrix, -0 entries, fp32 subnormals, values at / above the format maxima, +-inf;
* scattered destination slots in a larger pool, pad rows (slot -1) and an out-of-range slot;
* every pool tensor poisoned with random bytes first;
* the kernel's bytes (data, scales) at the owned slots must equal ``formats.encode`` (with
  ``formats.sr_words(seed, slot, H, R, C, flush_count[slot], stream)`` for SR) exactly, compared as
  raw uint8 with ``torch.equal``; every other pool slot must still hold the poison;
* the decoder's output must equal ``formats.decode`` of the same stored bytes bit for bit (int32
  view), and its pad rows must be untouched.

Prints one table row per case; exit status 1 if anything differs, 0 otherwise.

    python tests/gpu_scripts/check_state_codec.py                 # on the GPU machine
    python tests/gpu_scripts/check_state_codec.py --reference-only  # CPU: exercise the reference side
    python tests/gpu_scripts/check_state_codec.py --emu /path/ptxemu_codec.py  # CPU: run the kernels'
        # PTX in an external emulator module exposing encode_emu(...) / decode_emu(...) with the
        # launchers' signatures (slow; use small --n / --heads)
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time

import torch

_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from replayssm_lp import formats as F  # noqa: E402

FMTS = ("fp32", "fp16", "bf16", "fp8", "nvfp4")
MAXV = {"fp16": F.FP16_MAX, "bf16": F.BF16_MAX, "fp8": F.E4M3_MAX, "nvfp4": F.E2M1_MAX,
        "fp32": 3.0e38}


def make_states(n, H, R, C, gen, fmt):
    """fp32 [n, H, R, C] with mixed magnitudes and the edge cases listed in the module doc."""
    S = torch.randn(n, H, R, C, generator=gen) * torch.exp(torch.randn(n, H, R, C, generator=gen) * 3)
    flat = S.view(n, H, R, C // 16, 16)
    # all-zero 16-blocks (nvfp4 block scale 0) -- some +0, some -0
    m = torch.rand(n, H, R, C // 16, generator=gen) < 0.05
    flat[m] = 0.0
    m2 = torch.rand(n, H, R, C // 16, generator=gen) < 0.02
    flat[m2] = -0.0
    # all-zero rows (fp8 row scale 0)
    if R > 3:
        S[:, :, 3] = 0.0
        S[:, :, 2, ::2] = -0.0
        S[:, :, 2, 1::2] = 0.0
    # -0 entries sprinkled
    z = torch.rand(n, H, R, C, generator=gen) < 0.01
    S[z] = -0.0
    # fp32 subnormals and tiny values
    t = torch.rand(n, H, R, C, generator=gen) < 0.005
    S[t] = torch.randn(int(t.sum()), generator=gen) * 1e-40
    # one matrix with a huge dynamic range, one all-zero matrix (nvfp4 global scale 0)
    if n > 1:
        S[1, 0] = torch.randn(R, C, generator=gen) * torch.exp(torch.randn(R, C, generator=gen) * 12)
    if n > 2 and H > 1:
        S[2, H - 1] = 0.0
    # values near / at / above the format's max, and infinities (saturate, never NaN)
    v = MAXV[fmt]
    if R > 5 and C >= 16:
        row = S[0, 0, 5]
        row[0], row[1], row[2], row[3] = v, -v, v * 1.0001, -v * 0.9999
        row[4], row[5] = float("inf"), float("-inf")
        row[6], row[7] = 3.0e38, -3.3e38
        row[8] = 65519.0 if fmt == "fp16" else min(v * 1.03, 3.4e38)
    return S.contiguous()


def poison(shape, dtype, gen):
    nbytes = torch.empty(0, dtype=dtype).element_size()
    shp = list(shape)
    shp[-1] *= nbytes
    b = torch.randint(0, 256, shp, generator=gen, dtype=torch.uint8)
    return b.view(dtype)


def alloc_pool(fmt, NS, H, R, C, gen, device):
    st = F.FORMATS[fmt].storage
    dshape = (NS, H, R, C // 2 if fmt == "nvfp4" else C)
    data = poison(dshape, st, gen).to(device)
    scale = gscale = None
    if fmt == "fp8":
        scale = poison((NS, H, R), torch.float32, gen).to(device)
    elif fmt == "nvfp4":
        scale = poison((NS, H, R, C // 16), torch.float8_e4m3fn, gen).to(device)
        gscale = poison((NS, H), torch.float32, gen).to(device)
    return data, scale, gscale


def u8(t):
    return t.contiguous().view(torch.uint8) if t.dtype != torch.uint8 else t.contiguous()


def run_case(backend, R, C, fmt, rounding, stream, args, gen, device):
    n, H, NS = args.n, args.heads, args.pool
    S = make_states(n, H, R, C, gen, fmt)
    # scattered distinct slots; row 1 is a pad row, the last row points past the pool
    perm = torch.randperm(NS, generator=gen)[:n].to(torch.int32)
    slots = perm.clone()
    if n > 1:
        slots[1] = -1
    if n > 3:
        slots[-1] = NS + 3
    flush = torch.randint(0, 2**31 - 1, (NS,), generator=gen, dtype=torch.int32)
    flush[0] = 0x7FFFFFFF
    lo, hi = (int(v) for v in torch.randint(0, 2**32, (2,), generator=gen))
    seed_val = (hi << 32) | lo                 # full 64-bit seed, often negative as int64
    if seed_val >= 2**63:
        seed_val -= 2**64
    seed = torch.tensor([seed_val], dtype=torch.int64)
    valid = (slots >= 0) & (slots < NS)
    sl = slots[valid].long()

    # ---- reference (CPU) ----
    words = None
    if rounding == "sr" and fmt != "fp32":
        words = F.sr_words(seed, sl, H, R, C, flush[sl].long(), stream)
    ref = F.encode(S[valid], fmt, rounding, words)
    ref_dec = F.decode(ref, fmt)
    if backend is None:
        return dict(enc=None, dec=None, untouched=None, nbad=0, note="reference only")

    # ---- kernels ----
    data, scale, gscale = alloc_pool(fmt, NS, H, R, C, gen, "cpu")
    data0, scale0, gscale0 = data.clone(), (scale.clone() if scale is not None else None), \
        (gscale.clone() if gscale is not None else None)
    d_S, d_slots, d_flush, d_seed = (t.to(device) for t in (S, slots, flush, seed))
    d_data, d_scale, d_gscale = (None if t is None else t.to(device) for t in (data, scale, gscale))
    flush_before = d_flush.clone()
    backend.encode(d_S, d_slots, d_flush, d_seed, fmt, rounding, stream, d_data, d_scale, d_gscale)
    backend.sync()
    k_data = d_data.cpu()
    k_scale = d_scale.cpu() if d_scale is not None else None
    k_gscale = d_gscale.cpu() if d_gscale is not None else None

    bad = []
    nbad = 0
    enc_ok = torch.equal(u8(k_data[sl]), u8(ref.data))
    if not enc_ok:
        nbad += int((u8(k_data[sl]) != u8(ref.data)).sum())
        bad.append("data")
    if fmt == "fp8":
        ok = torch.equal(u8(k_scale[sl]), u8(ref.scale))
        enc_ok &= ok
        if not ok:
            nbad += int((u8(k_scale[sl]) != u8(ref.scale)).sum())
            bad.append("row scale")
    if fmt == "nvfp4":
        ok1 = torch.equal(u8(k_scale[sl]), u8(ref.scale))
        ok2 = torch.equal(u8(k_gscale[sl]), u8(ref.global_scale))
        enc_ok &= ok1 and ok2
        if not ok1:
            nbad += int((u8(k_scale[sl]) != u8(ref.scale)).sum())
            bad.append("block scale")
        if not ok2:
            bad.append("global scale")
    if not torch.equal(d_flush.cpu(), flush_before.cpu()):
        enc_ok = False
        bad.append("flush_count modified")

    others = torch.tensor([s for s in range(NS) if s not in set(sl.tolist())], dtype=torch.long)
    untouched = torch.equal(u8(k_data[others]), u8(data0[others]))
    if scale0 is not None:
        untouched &= torch.equal(u8(k_scale[others]), u8(scale0[others]))
    if gscale0 is not None:
        untouched &= torch.equal(u8(k_gscale[others]), u8(gscale0[others]))

    # decode of the kernel-written pool vs formats.decode of the same bytes
    out0 = poison((slots.numel(), H, R, C), torch.float32, gen)
    d_out = out0.to(device)
    backend.decode(d_data, d_scale, d_gscale, d_slots, fmt, d_out)
    backend.sync()
    out = d_out.cpu()
    ref_dec_k = F.decode(F.EncodedState(k_data[sl], None if k_scale is None else k_scale[sl],
                                         None if k_gscale is None else k_gscale[sl]), fmt)
    dec_ok = torch.equal(out[valid].view(torch.int32), ref_dec_k.view(torch.int32))
    if not dec_ok:
        bad.append("decode")
    if enc_ok and not torch.equal(out[valid].view(torch.int32), ref_dec.view(torch.int32)):
        dec_ok = False
        bad.append("decode!=ref")
    pad_ok = torch.equal(out[~valid].view(torch.int32), out0[~valid].view(torch.int32))
    untouched &= pad_ok
    if not untouched:
        bad.append("untouched")
    finite_ok = bool(torch.isfinite(out[valid]).all()) or fmt == "fp32"
    if not finite_ok:
        bad.append("non-finite decode")
    return dict(enc=enc_ok, dec=dec_ok, untouched=untouched and finite_ok, nbad=nbad,
                note=",".join(bad))


class GpuBackend:
    def __init__(self):
        from cute_kernels.state_codec import decode_state_cute, encode_state_cute
        self.encode = encode_state_cute
        self.decode = decode_state_cute

    def sync(self):
        torch.cuda.synchronize()


class EmuBackend:
    def __init__(self, path):
        spec = importlib.util.spec_from_file_location("_codec_emu", path)
        mod = importlib.util.module_from_spec(spec)
        sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
        spec.loader.exec_module(mod)
        self.encode = mod.encode_emu
        self.decode = mod.decode_emu

    def sync(self):
        pass


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="64x128,80x128,128x128")
    ap.add_argument("--fmts", default=",".join(FMTS))
    ap.add_argument("--n", type=int, default=6, help="rows (matrices per head) per case")
    ap.add_argument("--heads", type=int, default=3)
    ap.add_argument("--pool", type=int, default=17, help="num_slots of the pool")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reference-only", action="store_true",
                    help="run only the CPU reference side (no kernels)")
    ap.add_argument("--emu", default=None, help="module path of a CPU PTX-emulator backend")
    args = ap.parse_args(argv)
    if args.pool < args.n:
        ap.error("--pool must be >= --n")

    if args.reference_only:
        backend, device = None, "cpu"
    elif args.emu:
        os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")
        backend, device = EmuBackend(args.emu), "cpu"
    else:
        if not torch.cuda.is_available():
            print("no CUDA device (use --reference-only or --emu on CPU)")
            return 2
        backend, device = GpuBackend(), "cuda"

    gen = torch.Generator().manual_seed(args.seed)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    fmts = args.fmts.split(",")
    hdr = f"{'RxC':>8} {'fmt':>6} {'rnd':>3} {'str':>3} {'encode':>7} {'decode':>7} {'untouched':>9} {'bad_bytes':>9} {'sec':>6}  note"
    print(hdr)
    print("-" * len(hdr))
    failures = 0
    for (R, C) in shapes:
        for fmt in fmts:
            for rounding in ("rn", "sr"):
                streams = (0, 1) if (rounding == "sr" and fmt != "fp32") else (0,)
                for stream in streams:
                    t0 = time.perf_counter()
                    try:
                        r = run_case(backend, R, C, fmt, rounding, stream, args, gen, device)
                    except Exception as e:  # report and keep going
                        r = dict(enc=False, dec=False, untouched=False, nbad=-1,
                                 note=f"EXC {type(e).__name__}: {e}"[:200])
                    dt = time.perf_counter() - t0
                    fmtb = lambda b: "-" if b is None else ("ok" if b else "FAIL")  # noqa: E731
                    if r["nbad"] < 0 or (backend is not None
                                         and not (r["enc"] and r["dec"] and r["untouched"])):
                        failures += 1
                    print(f"{R}x{C:<5} {fmt:>6} {rounding:>3} {stream:>3} {fmtb(r['enc']):>7} "
                          f"{fmtb(r['dec']):>7} {fmtb(r['untouched']):>9} {r['nbad']:>9} {dt:6.2f}  "
                          f"{r['note']}", flush=True)
    if backend is None:
        print(f"reference side ran on CPU (no kernels checked); {failures} case(s) raised")
        return 1 if failures else 0
    print(f"{failures} failing case(s)" if failures else "ALL BIT-IDENTICAL")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
