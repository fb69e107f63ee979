#!/usr/bin/env python3
"""GPU check + benchmark for the GDN CuTe kernels (cute_kernels.gdn_standard, cute_kernels.gdn_replay).

Run on a CUDA (sm_90+) machine from the project root, e.g. on the H200 machine:

    source .device/gpu_env.sh && python tests/gpu_scripts/check_gdn.py
    ... --quick              fewer variants / pairs, shorter traces
    ... --no-bench           correctness only
    ... --bench-only         timing only
    ... --pairs fp32,nvfp4/fp16sr   restrict the replay pairs (default: every pair incl. extras)
    ... --impl v1|v2|both    replay kernel(s) checked for correctness (default v2; the
                             REPLAYSSM_GDN_REPLAY_IMPL environment variable selects the kernel
                             gdn_replay_decode_cute launches)
    ... --tune               also time the v2 occupancy variants (REPLAYSSM_GDN_REPLAY_TPW = 1 / 2
                             row tiles per warp x REPLAYSSM_GDN_REPLAY_MINB CTAs per SM)
    ... --cpu-selftest       run the harness on the CPU with the torch reference on both sides
                             (checks the script itself; works without a GPU)

Correctness (fresh random inputs every run; the seed is printed):

* standard decode vs ``replayssm_lp.gdn_standard_decode(..., backend="torch")`` on the same GPU
  tensors: fp32 / fp16 / bf16 state x "vk" / "kv" x raw / given gates x l2norm on / off, pad rows
  (poisoned outputs must stay NaN), scattered slots in a larger pool (every unowned slot bit-for-bit
  untouched), multi-step, a CUDA-graph replay;
* ReplaySSM decode vs the torch reference cache (``gdn_decode(..., backend="torch")``, torch
  encoder) for every precision pair, L = 4 and 16, >= 3L committed steps per slot, ~25 % pad rows
  per step (rows end up at staggered buffer positions, flushing on different steps), scattered
  slots in a larger pool. After every step: outputs within fp32 rounding (bf16 acts: one bf16 ulp),
  stored hi / lo within one unit of the target format (fraction of differing bytes reported),
  raw k / v buffers bit-exact, kinv / g / beta within a few ulp, u within fp32 rounding, cursors
  exact, ``arrive`` back to 0; then the reference cache is re-synchronised from the kernel's cache
  so every step is checked from identical inputs. Unowned slots checked bit-for-bit at the end.

Benchmark (CUDA graphs, state pools rotated so the timed state is > 4x the 60 MB L2, median of
replays): Qwen3.5-4B GDN layer (H=16, HV=32, K=V=128), fp32 state, bf16 activations, batch
1 / 64 / 256 / 512: our standard kernel ("vk" and "kv"), FLA's ``fused_recurrent_gated_delta_rule``
when importable (anchor: 96 us at batch 64 on an H200), and the replay kernel for a few pairs
(L = 16, staggered rows, whole L-cycles), v2 and v1; prints us / step and GB/s (bytes of
bench/traffic.py).

Exits 0 without doing anything when no CUDA device is present (unless --cpu-selftest); exits 1 on
any mismatch.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import replayssm_lp as R  # noqa: E402
from replayssm_lp import GDNReplayCache, precision_pairs  # noqa: E402

SMALL = dict(H=2, HV=4, K=128, V=128)
QWEN = dict(H=16, HV=32, K=128, V=128)
SHORT = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}
MANT = {torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}
FAILS = []
EXPECT_FAIL = [False]


IMPL_ENV = "REPLAYSSM_GDN_REPLAY_IMPL"


class _env:
    """Temporarily set environment variables (None removes)."""

    def __init__(self, **kv):
        self.kv = kv
        self.old = {}

    def __enter__(self):
        for k, v in self.kv.items():
            self.old[k] = os.environ.get(k)
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = str(v)

    def __exit__(self, *a):
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def log_fail(msg):
    FAILS.append(msg)
    print(("  (expected) " if EXPECT_FAIL[0] else "  FAIL ") + msg)


# --------------------------------------------------------------------------------------
# comparison helpers
# --------------------------------------------------------------------------------------


def close(got, ref, act_dtype, rtol=None, abs_frac=None):
    """|got - ref| <= rtol |ref| + abs_frac rms(ref) elementwise. -> (ok, max err / rms, nbad)."""
    got, ref = got.float(), ref.float()
    if got.numel() == 0:
        return True, 0.0, 0
    if not torch.isfinite(got).all() and torch.isfinite(ref).all():
        return False, float("inf"), int((~torch.isfinite(got)).sum())
    if rtol is None:
        rtol = 2.0 * 2.0 ** (-MANT[act_dtype]) if act_dtype != torch.float32 else 1e-5
    if abs_frac is None:
        abs_frac = 1e-4 if act_dtype != torch.float32 else 1e-5
    scale = ref.pow(2).mean().sqrt().item() + 1e-30
    err = (got - ref).abs()
    nbad = int((err > rtol * ref.abs() + abs_frac * scale).sum())
    return nbad == 0, err.max().item() / scale, nbad


def _ordinal_int(bits, sign_bit, mag_mask):
    b = bits.to(torch.int64)
    mag = b & mag_mask
    neg = (b & sign_bit) != 0
    return torch.where(neg, -mag, mag)


def ordinals(t, fmt):
    """Stored codes -> integers ordered like the values (adjacent representable values differ by
    one). fp32/fp16/bf16/fp8 data and scales, nvfp4 packed nibbles (unpacked)."""
    if fmt == "fp32":
        return _ordinal_int(t.contiguous().view(torch.int32), 1 << 31, 0x7FFFFFFF)
    if fmt in ("fp16", "bf16"):
        return _ordinal_int(t.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF, 1 << 15, 0x7FFF)
    if fmt in ("fp8", "e4m3"):
        return _ordinal_int(t.contiguous().view(torch.uint8), 0x80, 0x7F)
    if fmt == "nvfp4":
        p = t.contiguous().view(torch.uint8).to(torch.int64)
        codes = torch.stack((p & 0xF, p >> 4), dim=-1).flatten(-2)
        return _ordinal_int(codes, 0x8, 0x7)
    raise ValueError(fmt)


def unit_diff(a, b, fmt):
    """(max ordinal distance, fraction of differing elements)."""
    oa, ob = ordinals(a, fmt), ordinals(b, fmt)
    d = (oa - ob).abs()
    if d.numel() == 0:
        return 0, 0.0
    return int(d.max()), float((d != 0).float().mean())


def decoded(cache, side, slots):
    """fp32 values of the stored hi / lo copy of ``slots`` (formats.decode)."""
    from replayssm_lp import formats as F

    enc = cache.hi if side == "hi" else cache.lo
    fmt = cache.pair.rec_fmt if side == "hi" else cache.pair.read_fmt
    sub = F.EncodedState(enc.data[slots], None if enc.scale is None else enc.scale[slots],
                         None if enc.global_scale is None else enc.global_scale[slots])
    return F.decode(sub, fmt)


def cache_tensors(cache):
    """name -> tensor of everything a GDN replay cache stores per slot."""
    d = {"hi.data": cache.hi.data}
    if cache.hi.scale is not None:
        d["hi.scale"] = cache.hi.scale
    if cache.hi.global_scale is not None:
        d["hi.gscale"] = cache.hi.global_scale
    if cache.lo is not None:
        d["lo.data"] = cache.lo.data
        if cache.lo.scale is not None:
            d["lo.scale"] = cache.lo.scale
        if cache.lo.global_scale is not None:
            d["lo.gscale"] = cache.lo.global_scale
    for n in ("k_buf", "kinv_buf", "g_buf", "u_buf", "v_buf", "beta_buf", "write_pos",
              "ring_origin", "flush_count", "pending", "arrive"):
        t = getattr(cache, n, None)
        if t is not None:
            d[n] = t
    return d


def _bits(t):
    return t.view(torch.uint8) if t.dtype == torch.float8_e4m3fn else t


# --------------------------------------------------------------------------------------
# standard decode
# --------------------------------------------------------------------------------------


def gdn_inputs(batch, dims, act, gates, dev, gen, T=None, unit_qk=False):
    """Random GDN step inputs. ``unit_qk``: q and k of unit length, what a caller that turns the
    kernel's L2 norm off passes (FLA's ``use_qk_l2norm_in_kernel=False``). Raw N(0, 1) keys
    there make the delta rule unstable (beta |k|^2 ~ 64 >> 2: the state grows ~100x in a few
    steps, and even the torch fp32 reference drifts 1-2e-5 of the rms from fp64), so fp32
    implementations cannot agree to the checks' tolerances."""
    H, HV, K, V = dims["H"], dims["HV"], dims["K"], dims["V"]
    lead = (batch,) if T is None else (batch, T)

    def rn(*s, dtype=torch.float32):
        return torch.randn(*s, generator=gen, device=dev).to(dtype)

    def qk():
        x = rn(*lead, H, K)
        return (x / x.norm(dim=-1, keepdim=True) if unit_qk else x).to(act)

    kw = dict(q=qk(), k=qk(), v=rn(*lead, HV, V, dtype=act))
    if gates == "raw":
        a = rn(*lead, HV).to(act)
        flat = a.view(-1)
        flat[:: max(1, flat.numel() // 3)] = 25.0  # softplus bypass
        kw.update(A_log=torch.log(torch.rand(HV, generator=gen, device=dev) * 15 + 1),
                  a=a, dt_bias=rn(HV) * 0.5, b=rn(*lead, HV).to(act))
    else:
        kw.update(g=-torch.rand(*lead, HV, generator=gen, device=dev) * 2.0,
                  beta=torch.sigmoid(rn(*lead, HV)))
    return kw


def check_standard_case(label, batch, dims, state_dtype, act, layout, gates, l2, steps=1,
                        mode="plain", pad_slot_id=-1, use_idx=True, tile=None):
    from cute_kernels.gdn_standard import gdn_standard_decode_cute

    dev = torch.device("cuda")
    gen = torch.Generator(device=dev)
    gen.manual_seed(int.from_bytes(os.urandom(4), "little"))
    H, HV, K, V = dims["H"], dims["HV"], dims["K"], dims["V"]
    pool = 3 * batch + 5 if use_idx else batch + 3
    shape = (pool, HV, V, K) if layout == "vk" else (pool, HV, K, V)
    state0 = (torch.randn(*shape, generator=gen, device=dev) * 0.5).to(state_dtype)
    sbi = None
    valid = torch.ones(batch, dtype=torch.bool, device=dev)
    if use_idx:
        perm = torch.randperm(pool, generator=gen, device=dev)
        slots = perm[:batch].to(torch.int32)
        valid = torch.rand(batch, generator=gen, device=dev) >= 0.25
        if batch >= 2:
            valid[0], valid[-1] = False, True
        sbi = torch.where(valid, slots, torch.full_like(slots, pad_slot_id))
    ins = [gdn_inputs(batch, dims, act, gates, dev, gen, unit_qk=not l2) for _ in range(steps)]
    scale = None if l2 else 0.3
    # reference: the torch backend of the public op, step by step
    sr = state0.clone()
    ys = []
    for kw in ins:
        yr = torch.full((batch, HV, V), float("nan"), dtype=act, device=dev)
        R.gdn_standard_decode(sr, **kw, scale=scale, use_qk_l2norm_in_kernel=l2,
                              state_batch_indices=sbi, pad_slot_id=pad_slot_id, out=yr,
                              state_layout=layout, backend="torch")
        ys.append(yr)
    sc = state0.clone()
    out = torch.full((batch, HV, V), float("nan"), dtype=act, device=dev)
    tile = tile or {}

    def run(kw):
        gdn_standard_decode_cute(sc, kw["q"], kw["k"], kw["v"], kw.get("g"), kw.get("beta"),
                                 kw.get("A_log"), kw.get("a"), kw.get("dt_bias"), kw.get("b"),
                                 scale, l2, sbi, pad_slot_id, out, layout, **tile)

    if mode == "plain":
        for kw in ins:
            run(kw)
    elif mode == "op":
        for kw in ins:
            R.gdn_standard_decode(sc, **kw, scale=scale, use_qk_l2norm_in_kernel=l2,
                                  state_batch_indices=sbi, pad_slot_id=pad_slot_id, out=out,
                                  state_layout=layout, backend="cute")
    elif mode == "graph":
        run(ins[0])  # compile + warm up, then restore
        sc.copy_(state0)
        out.fill_(float("nan"))
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            with torch.cuda.graph(g):
                for kw in ins:
                    run(kw)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        if not torch.equal(sc, state0):
            log_fail(f"{label}: state changed during capture")
            return False
        g.replay()
    torch.cuda.synchronize()

    ok = True
    msgs = []
    owned = torch.zeros(pool, dtype=torch.bool, device=dev)
    if use_idx:
        owned[sbi[valid].long()] = True
    else:
        owned[:batch] = True
    if not torch.equal(sc[~owned], state0[~owned]):
        ok = False
        msgs.append("UNOWNED SLOTS MODIFIED")
    if (~valid).any() and not torch.isnan(out[~valid].float()).all():
        ok = False
        msgs.append("PAD ROW OUTPUT WRITTEN")
    # fp32 states: u = v - S·k is a K-term dot whose summation order differs from torch's and can
    # cancel, so one step leaves a few 1e-6 of rms on a handful of elements (2.4e-6 seen on the
    # H200 without the q/k L2 norm); a real error is orders of magnitude larger
    o1, e1, n1 = close(sc[owned], sr[owned], state_dtype,
                       rtol=(steps + 1) * 2.0 ** (-MANT[state_dtype]) if state_dtype != torch.float32
                       else 4e-6 * steps, abs_frac=4e-6 * steps if state_dtype == torch.float32 else 1e-4)
    o2, e2, n2 = close(out[valid], ys[-1][valid], act)
    ok &= o1 and o2
    msgs.append(f"state err/rms={e1:.1e} bad={n1}")
    msgs.append(f"out err/rms={e2:.1e} bad={n2}")
    line = f"{label}: " + "; ".join(msgs)
    if ok:
        print("  ok   " + line)
    else:
        log_fail(line)
    return ok


def standard_correctness(quick):
    print("== standard GDN decode vs torch reference")
    dts = [torch.float32, torch.float16, torch.bfloat16]
    combos = []
    for st in dts:
        for layout in ("vk", "kv"):
            for gates in ("raw", "given"):
                for l2 in (True, False):
                    if quick and (st == torch.float16 or not l2):
                        continue
                    combos.append((st, layout, gates, l2))
    for st, layout, gates, l2 in combos:
        label = f"small state={SHORT[st]} {layout} gates={gates} l2={int(l2)} act=bf16"
        try:
            check_standard_case(label, 7, SMALL, st, torch.bfloat16, layout, gates, l2)
        except Exception:
            traceback.print_exc()
            log_fail(f"{label}: exception")
    extra = [
        ("qwen fp32 vk batch 3 (block_v split)", 3, QWEN, torch.float32, torch.bfloat16, "vk", "raw", True, 1, "plain", {}),
        ("qwen fp32 kv batch 64", 64, QWEN, torch.float32, torch.bfloat16, "kv", "raw", True, 1, "plain", {}),
        ("qwen bf16 vk batch 64", 64, QWEN, torch.bfloat16, torch.bfloat16, "vk", "given", True, 1, "plain", {}),
        ("fp32 acts fp32 state vk", 5, SMALL, torch.float32, torch.float32, "vk", "raw", True, 1, "plain", {}),
        ("fp32 acts fp32 state kv", 5, SMALL, torch.float32, torch.float32, "kv", "given", True, 1, "plain", {}),
        ("block_v=32 vk", 5, SMALL, torch.float32, torch.bfloat16, "vk", "raw", True, 1, "plain", dict(block_v=32)),
        ("block_v=32 kv", 5, SMALL, torch.float32, torch.bfloat16, "kv", "raw", True, 1, "plain", dict(block_v=32)),
        ("3 steps", 5, SMALL, torch.float32, torch.bfloat16, "vk", "raw", True, 3, "plain", {}),
        ("via ops backend=cute", 5, SMALL, torch.float32, torch.bfloat16, "kv", "raw", True, 2, "op", {}),
        ("cuda graph x2", 5, SMALL, torch.float32, torch.bfloat16, "vk", "raw", True, 2, "graph", {}),
    ]
    if quick:
        extra = extra[:3] + extra[-2:]
    for (label, batch, dims, st, act, layout, gates, l2, steps, mode, tile) in extra:
        try:
            check_standard_case(label, batch, dims, st, act, layout, gates, l2, steps=steps,
                                mode=mode, tile=tile)
        except Exception:
            traceback.print_exc()
            log_fail(f"{label}: exception")
    try:
        check_standard_case("no indices", 4, SMALL, torch.float32, torch.bfloat16, "vk", "raw", True,
                            use_idx=False)
        check_standard_case("pad_slot_id=-7", 6, SMALL, torch.float32, torch.bfloat16, "vk", "raw",
                            True, pad_slot_id=-7)
    except Exception:
        traceback.print_exc()
        log_fail("misc standard: exception")


# --------------------------------------------------------------------------------------
# ReplaySSM decode
# --------------------------------------------------------------------------------------


def _torch_write_state(cache):
    """Make the reference cache encode with the torch encoder (formats.encode), whatever the
    device (write_state would otherwise use the CuTe state codec on a GPU)."""
    import inspect

    if "backend" in inspect.signature(type(cache).write_state).parameters:
        def write_state(slots, S, backend="auto", _c=cache):
            return type(_c).write_state(_c, slots, S, backend="torch")
        cache.write_state = write_state


def _init(cache, slots, S):
    import inspect

    if "backend" in inspect.signature(type(cache).init_from_state).parameters:
        cache.init_from_state(slots, S, backend="torch")
    else:
        cache.init_from_state(slots, S)


def compare_caches(cr, ck, s, act, st, fails):
    """What one step wrote for the owned slots ``s`` of the kernel cache ``ck`` vs the reference
    ``cr``: cursors exact, ``arrive`` back to 0, raw k / v bit-exact, kinv / g / beta within
    8 ulp, u within fp32 rounding, stored hi / lo within one unit of the target format (or, where
    the fold's last fp32 bits differ after cancellation, within 4e-6 of the matrix rms), scales
    within 16 ulp (fp32) / 1 unit (e4m3). Stats are max-updated in ``st``, problems appended to
    ``fails``."""
    tr, tc = cache_tensors(cr), cache_tensors(ck)

    def stat(k, v):
        st[k] = max(st.get(k, 0), v)
    for n in ("write_pos", "ring_origin", "flush_count", "pending"):
        if not torch.equal(tc[n][s], tr[n][s]):
            fails.append(f"{n} {tc[n][s].tolist()} != ref {tr[n][s].tolist()}")
    if int(tc["arrive"][s].abs().sum()) != 0:
        fails.append("arrive counter not reset")
    for n in ("k_buf", "v_buf"):
        if n in tc and not torch.equal(tc[n][s], tr[n][s]):
            fails.append(f"{n} differs (raw copy must be exact)")
    for n in ("kinv_buf", "g_buf", "beta_buf"):
        if n in tc:
            du, _ = unit_diff(tc[n][s], tr[n][s], "fp32")
            stat("ulp", du)
            if du > 8:
                fails.append(f"{n} differs by {du} ulp")
    o, e, nb = close(tc["u_buf"][s], tr["u_buf"][s], torch.float32,
                     rtol=1e-5 if act == torch.float32 else 1e-4, abs_frac=1e-5)
    stat("u_err", e)
    if not o:
        fails.append(f"u_buf err/rms={e:.1e} bad={nb}")
    for side, fmt in (("hi", ck.pair.rec_fmt), ("lo", ck.pair.read_fmt)):
        if f"{side}.data" not in tc:
            continue
        # stored codes: one unit of the format, or (where the fold's last fp32 bits differ
        # after cancellation) a decoded difference at the fp32 rounding level of the matrix
        d = (ordinals(tc[f"{side}.data"][s], fmt) - ordinals(tr[f"{side}.data"][s], fmt)).abs()
        vc, vr = decoded(ck, side, s), decoded(cr, side, s)
        rms = vr.pow(2).mean(dim=(-1, -2), keepdim=True).sqrt()
        dv = (vc - vr).abs()
        bad = (d > 1) & (dv.reshape(d.shape) > 4e-6 * rms.expand_as(vr).reshape(d.shape))
        fr = float((d != 0).float().mean()) if d.numel() else 0.0
        du = int(d.max()) if d.numel() else 0
        stat(f"{side}_frac", fr)
        stat(f"{side}_units", du)
        if bad.any():
            fails.append(f"{side}.data: {int(bad.sum())} element(s) off by > 1 unit and > 4e-6 rms "
                         f"(max {du} units; {fr:.2%} of elements differ)")
        if f"{side}.scale" in tc:
            sfmt = "fp32" if fmt == "fp8" else "e4m3"
            ds, _ = unit_diff(tc[f"{side}.scale"][s], tr[f"{side}.scale"][s], sfmt)
            stat(f"{side}_sunits", ds)
            if ds > (16 if sfmt == "fp32" else 1):
                fails.append(f"{side}.scale differs by {ds} units")
        if f"{side}.gscale" in tc:
            ds, _ = unit_diff(tc[f"{side}.gscale"][s], tr[f"{side}.gscale"][s], "fp32")
            if ds > 16:
                fails.append(f"{side}.gscale differs by {ds} ulp")


def replay_trace(pair, L, act, dims, batch=6, pool_extra=7, steps=None, gates="raw", l2=True,
                 device="cuda", impl="cute", verbose=False):
    """One pair / L trace; returns a stats dict (and records failures)."""
    dev = torch.device(device)
    gen = torch.Generator(device=dev)
    seed = int.from_bytes(os.urandom(4), "little")
    gen.manual_seed(seed)
    H, HV, K, V = dims["H"], dims["HV"], dims["K"], dims["V"]
    pool = batch + pool_extra
    csr = int(torch.randint(0, 2**31, (1,), generator=torch.Generator().manual_seed(seed)))
    mk = lambda: GDNReplayCache(pool, H, HV, K, V, precision=pair, buffer_len=L,  # noqa: E731
                                act_dtype=act, device=dev, seed=csr)
    ref, cut = mk(), mk()
    _torch_write_state(ref)
    perm = torch.randperm(pool, generator=gen, device=dev)
    slots = perm[:batch]
    S0 = torch.randn(batch, HV, V, K, generator=gen, device=dev) * 0.5
    _init(ref, slots.tolist(), S0)
    _init(cut, slots.tolist(), S0)
    for n, t in cache_tensors(cut).items():   # identical starting bytes
        t.copy_(cache_tensors(ref)[n])
    owned = torch.zeros(pool, dtype=torch.bool, device=dev)
    owned[slots] = True
    snap = {n: t[~owned].clone() for n, t in cache_tensors(cut).items()}
    steps = steps if steps is not None else 4 * L + 3
    st = dict(pair=pair, L=L, act=SHORT[act], steps=steps, out_err=0.0, u_err=0.0,
              hi_frac=0.0, lo_frac=0.0, hi_units=0, lo_units=0, hi_sunits=0, lo_sunits=0,
              flushes=0, ok=True, seed=seed)
    ok = True
    for step in range(steps):
        pad = torch.rand(batch, generator=gen, device=dev) < 0.25
        if step == 0:
            pad[:] = False
        pad[step % batch] = False
        sbi = torch.where(pad, torch.full_like(slots, -1), slots).to(torch.int32)
        kw = gdn_inputs(batch, dims, act, gates, dev, gen, unit_qk=not l2)
        scale = None if l2 else 0.25
        before_flush = ((ref.write_pos[slots] + 1) > L) & ~pad
        st["flushes"] += int(before_flush.sum())
        out_r = torch.full((batch, HV, V), float("nan"), dtype=act, device=dev)
        out_c = torch.full((batch, HV, V), float("nan"), dtype=act, device=dev)
        R.gdn_decode(ref, **kw, scale=scale, use_qk_l2norm_in_kernel=l2, state_batch_indices=sbi,
                     out=out_r, backend="torch")
        if impl == "cute":
            from cute_kernels.gdn_replay import gdn_replay_decode_cute
            gdn_replay_decode_cute(cut, kw["q"], kw["k"], kw["v"], kw.get("g"), kw.get("beta"),
                                   kw.get("A_log"), kw.get("a"), kw.get("dt_bias"), kw.get("b"),
                                   scale, l2, sbi, -1, out_c)
        else:  # harness self-test: the torch reference on both sides
            R.gdn_decode(cut, **kw, scale=scale, use_qk_l2norm_in_kernel=l2,
                         state_batch_indices=sbi, out=out_c, backend="torch")
            if impl == "corrupt" and step == steps - 1:   # teeth: a 2-unit error in hi
                v = cut.hi.data.view(-1)
                if v.dtype == torch.float32:
                    v[v.numel() // 2] = v[v.numel() // 2] * 1.001 + 1.0
        if dev.type == "cuda":
            torch.cuda.synchronize()
        msgs = []
        valid = ~pad
        if pad.any() and not torch.isnan(out_c[pad].float()).all():
            msgs.append("pad-row output written")
        o, e, nb = close(out_c[valid], out_r[valid], act)
        st["out_err"] = max(st["out_err"], e)
        if not o:
            msgs.append(f"out err/rms={e:.1e} bad={nb}")
        compare_caches(ref, cut, slots, act, st, msgs)
        if msgs:
            ok = False
            log_fail(f"replay {pair} L={L} act={SHORT[act]} step {step} (seed {seed}): "
                     + "; ".join(msgs))
            break
        # re-synchronise: the next step starts from identical caches
        for n, t in cache_tensors(ref).items():
            t.copy_(cache_tensors(cut)[n])
    tc = cache_tensors(cut)
    for n, t in tc.items():
        if not torch.equal(_bits(t[~owned]), _bits(snap[n])):
            ok = False
            log_fail(f"replay {pair} L={L}: unowned slots modified in {n}")
    commits = int(cut.flush_count[slots].sum()) - batch  # init counts one write per slot
    st["ok"] = ok
    st["commits"] = commits
    return st


def replay_correctness(pairs, Ls, quick, device="cuda", impl="cute", kernel_impls=("v2",),
                       qwen_batch=5, qwen_pairs=None):
    for ki in kernel_impls:
        with _env(**{IMPL_ENV: ki}):
            _replay_correctness(pairs, Ls, quick, device, impl, ki, qwen_batch, qwen_pairs)


def _replay_correctness(pairs, Ls, quick, device, impl, ki, qwen_batch=5, qwen_pairs=None):
    print(f"== ReplaySSM GDN decode vs torch reference cache ({impl}, kernel {ki})")
    rows = []
    acts = [torch.bfloat16] if quick else [torch.bfloat16, torch.float32, torch.float16]
    for L in Ls:
        for pair in pairs:
            for act in acts:
                if act == torch.float32 and pair not in ("fp32", "nvfp4/fp16sr", "fp8/fp32", "fp16sr"):
                    continue
                if act == torch.float16 and pair not in ("fp32", "nvfp4/fp16sr"):
                    continue
                gates = "raw" if (sum(map(ord, pair)) + L) % 2 else "given"
                t0 = time.time()
                try:
                    st = replay_trace(pair, L, act, SMALL, gates=gates, l2=(L != 4 or pair != "fp32"),
                                      device=device, impl=impl,
                                      steps=(3 * L + 3) if quick else None)
                except Exception:
                    traceback.print_exc()
                    log_fail(f"replay {pair} L={L} ({ki}): exception")
                    continue
                st["secs"] = time.time() - t0
                rows.append(st)
                print(f"  {'ok  ' if st['ok'] else 'FAIL'} [{ki}] {pair:15s} L={L:2d} act={st['act']} "
                      f"gates={gates:5s} steps={st['steps']} flushes={st['flushes']} "
                      f"out err/rms={st['out_err']:.1e} u err/rms={st['u_err']:.1e} "
                      f"hi: {st['hi_units']} unit(s) on {st['hi_frac']:.3%} "
                      f"lo: {st['lo_units']} unit(s) on {st['lo_frac']:.3%} "
                      f"scales: {st['hi_sunits']}/{st['lo_sunits']} unit(s) ({st['secs']:.1f}s)",
                      flush=True)
    if impl == "cute":
        # one Qwen-shaped trace (whole-head CTAs, 32 heads, 16 key heads)
        qp = qwen_pairs or (pairs[:1] if quick else ["fp32", "nvfp4/fp16sr"])
        for pair in qp:
            try:
                st = replay_trace(pair, 16, torch.bfloat16, QWEN, batch=qwen_batch, steps=20)
                print(f"  {'ok  ' if st['ok'] else 'FAIL'} [{ki}] qwen {pair} b{qwen_batch} L=16 out err/rms="
                      f"{st['out_err']:.1e} hi frac {st['hi_frac']:.3%}", flush=True)
            except Exception:
                traceback.print_exc()
                log_fail(f"replay qwen {pair} ({ki}): exception")
    return rows


# --------------------------------------------------------------------------------------
# benchmark
# --------------------------------------------------------------------------------------


def bench(batches, pairs, replays=20, tune=False):
    from bench import traffic
    from bench.timing import copy_bandwidth_gbs, graph_time_us, pool_rotation
    from cute_kernels.gdn_replay import gdn_replay_decode_cute
    from cute_kernels.gdn_standard import gdn_standard_decode_cute

    dev = torch.device("cuda")
    H, HV, K, V = QWEN["H"], QWEN["HV"], QWEN["K"], QWEN["V"]
    act = torch.bfloat16
    copy = copy_bandwidth_gbs()
    print(f"== benchmark: Qwen3.5-4B GDN layer (H={H}, HV={HV}, K=V={K}), bf16 acts, "
          f"CUDA graphs; copy bandwidth {copy:,.0f} GB/s (read+write)")
    print(f"| batch | kernel | us/step | GB/s | % copy |")
    print(f"|---:|---|---:|---:|---:|")
    gen = torch.Generator(device=dev).manual_seed(0)
    for batch in batches:
        kw = gdn_inputs(batch, QWEN, act, "raw", dev, gen)
        out = torch.empty(batch, HV, V, dtype=act, device=dev)
        sbytes = traffic.gdn_standard_bytes(H, HV, K, V, 4, 2)
        rot = pool_rotation(sbytes, batch)
        for layout in ("vk", "kv"):
            try:
                shape = (rot * batch, HV, V, K) if layout == "vk" else (rot * batch, HV, K, V)
                state = torch.randn(*shape, device=dev) * 0.1
                sets = [torch.arange(r * batch, (r + 1) * batch, device=dev, dtype=torch.int32)
                        for r in range(rot)]

                def step(i, state=state, sets=sets, layout=layout):
                    gdn_standard_decode_cute(state, kw["q"], kw["k"], kw["v"], None, None,
                                             kw["A_log"], kw["a"], kw["dt_bias"], kw["b"], None,
                                             True, sets[i % len(sets)], -1, out, layout)
                t = graph_time_us(step, max(rot, 8), replays)
                gbs = sbytes * batch / (t["median_us"] * 1e-6) / 1e9
                print(f"| {batch} | standard fp32 {layout} (ours) | {t['median_us']:.1f} | {gbs:,.0f} | "
                      f"{100 * gbs / copy:.0f}% |", flush=True)
                del state
            except Exception:
                traceback.print_exc()
                log_fail(f"bench standard {layout} batch {batch}: exception")
        try:  # FLA anchor (new fp32 state per call, [B, HV, K, V])
            from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
            states = [torch.randn(batch, HV, K, V, device=dev) * 0.1 for _ in range(rot)]
            qf, kf, vf = kw["q"][:, None], kw["k"][:, None], kw["v"][:, None]
            gf = (-torch.rand(batch, 1, HV, device=dev))
            bf = torch.rand(batch, 1, HV, device=dev)

            def step_fla(i):
                fused_recurrent_gated_delta_rule(qf, kf, vf, g=gf, beta=bf,
                                                 initial_state=states[i % rot],
                                                 output_final_state=True,
                                                 use_qk_l2norm_in_kernel=True)
            t = graph_time_us(step_fla, max(rot, 8), replays)
            gbs = sbytes * batch / (t["median_us"] * 1e-6) / 1e9
            print(f"| {batch} | FLA fused_recurrent fp32 (new state) | {t['median_us']:.1f} | {gbs:,.0f} | "
                  f"{100 * gbs / copy:.0f}% |", flush=True)
            del states
        except ImportError:
            pass
        except Exception as e:  # noqa: BLE001
            print(f"# FLA peer failed: {type(e).__name__}: {e}")
        L = 16
        variants = [("v2", {IMPL_ENV: "v2"}), ("v1", {IMPL_ENV: "v1"})]
        if tune:
            variants += [(f"v2 tpw={t} minb={mb}", {IMPL_ENV: "v2", "REPLAYSSM_GDN_REPLAY_TPW": t,
                                                    "REPLAYSSM_GDN_REPLAY_MINB": mb})
                         for t, mb in ((1, 3), (1, 4), (2, 2), (2, 4))]
        for pair, (vname, venv) in [(p, v) for p in pairs for v in variants]:
            try:
                tb = traffic.gdn_bytes(pair, H, HV, K, V, L)
                rot_r = pool_rotation(tb.amortized, batch)
                cache = GDNReplayCache(rot_r * batch, H, HV, K, V, precision=pair, buffer_len=L,
                                       act_dtype=act, device=dev, seed=1234)
                _init(cache, list(range(cache.num_slots)),
                      torch.randn(cache.num_slots, HV, V, K, device=dev) * 0.1)
                s_ = torch.arange(cache.num_slots, device=dev, dtype=torch.int32)
                cache.write_pos.copy_(s_ % L)
                cache.ring_origin.zero_()
                sets = [torch.arange(r * batch, (r + 1) * batch, device=dev, dtype=torch.int32)
                        for r in range(rot_r)]

                def step_r(i, cache=cache, sets=sets):
                    gdn_replay_decode_cute(cache, kw["q"], kw["k"], kw["v"], None, None,
                                           kw["A_log"], kw["a"], kw["dt_bias"], kw["b"], None,
                                           True, sets[i % len(sets)], -1, out)
                with _env(**venv):
                    t = graph_time_us(step_r, rot_r * L, replays)
                gbs = tb.amortized * batch / (t["median_us"] * 1e-6) / 1e9
                print(f"| {batch} | replay {pair} L={L} [{vname}] (amortized) | "
                      f"{t['median_us']:.1f} | {gbs:,.0f} | {100 * gbs / copy:.0f}% |",
                      flush=True)
                del cache
                torch.cuda.empty_cache()
            except Exception:
                traceback.print_exc()
                log_fail(f"bench replay {pair} [{vname}] batch {batch}: exception")


# --------------------------------------------------------------------------------------


def cpu_selftest():
    """The harness itself on the CPU: torch reference on both sides must match exactly."""
    print("== CPU self-test of the harness (torch reference on both sides)")
    for pair in ("fp32", "nvfp4/fp16sr", "fp8sr"):
        st = replay_trace(pair, 4, torch.float32, dict(H=2, HV=4, K=32, V=16), batch=4,
                          steps=10, device="cpu", impl="torch")
        print(f"  {'ok  ' if st['ok'] else 'FAIL'} {pair}: out err {st['out_err']:.1e}, "
              f"hi frac {st['hi_frac']:.3%}, flushes {st['flushes']}")
    n = len(FAILS)
    EXPECT_FAIL[0] = True
    st = replay_trace("fp32", 4, torch.float32, dict(H=2, HV=4, K=32, V=16), batch=4, steps=6,
                      device="cpu", impl="corrupt", pool_extra=0)
    EXPECT_FAIL[0] = False
    caught = not st["ok"] and len(FAILS) > n
    del FAILS[n:]
    print(f"  {'ok  ' if caught else 'FAIL'} a corrupted hi element is detected")
    if not caught:
        FAILS.append("self-test: corruption not detected")
    assert ordinals(torch.tensor([1.0, -1.0, 0.0]), "fp32").tolist()[2] == 0
    a = torch.tensor([1.0, 2.0]).to(torch.float8_e4m3fn)
    b = torch.tensor([1.125, 2.0]).to(torch.float8_e4m3fn)
    assert unit_diff(a, b, "fp8") == (1, 0.5)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--bench-only", action="store_true")
    ap.add_argument("--pairs", default=None, help="comma-separated precision pairs (replay checks)")
    ap.add_argument("--Ls", default=None, help="buffer lengths of the replay checks (default 4,16)")
    ap.add_argument("--qwen-batch", type=int, default=5,
                    help="rows of the Qwen-shaped replay trace (from 64: the split launch)")
    ap.add_argument("--qwen-pairs", default=None, help="pairs of the Qwen-shaped trace")
    ap.add_argument("--bench-pairs", default="fp32,nvfp4/fp16sr,nvfp4/fp8sr,fp8/fp32")
    ap.add_argument("--batches", default="1,64,256,512")
    ap.add_argument("--impl", default="v2", choices=("v1", "v2", "both"),
                    help="replay kernel(s) to check for correctness")
    ap.add_argument("--tune", action="store_true",
                    help="also benchmark the v2 occupancy variants")
    ap.add_argument("--cpu-selftest", action="store_true")
    args = ap.parse_args()
    if args.cpu_selftest:
        cpu_selftest()
        return 1 if FAILS else 0
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to do (use --cpu-selftest to check the harness)")
        return 0
    major, _ = torch.cuda.get_device_capability()
    if major < 9:
        print("needs sm_90+; nothing to do")
        return 0
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    pairs = args.pairs.split(",") if args.pairs else list(precision_pairs(include_extra=True))
    if not args.bench_only:
        standard_correctness(args.quick)
        kis = ("v2", "v1") if args.impl == "both" else (args.impl,)
        Ls = [int(x) for x in args.Ls.split(",")] if args.Ls else ([4] if args.quick else [4, 16])
        replay_correctness(pairs, Ls, args.quick, kernel_impls=kis, qwen_batch=args.qwen_batch,
                           qwen_pairs=args.qwen_pairs.split(",") if args.qwen_pairs else None)
    if not args.no_bench:
        bench([int(b) for b in args.batches.split(",")], args.bench_pairs.split(","),
              tune=args.tune)
    print("\n== summary")
    if FAILS:
        print(f"{len(FAILS)} FAILURE(S):")
        for f in FAILS:
            print("  - " + f)
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
