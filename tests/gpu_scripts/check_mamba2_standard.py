#!/usr/bin/env python3
"""GPU check + benchmark for cute_kernels.mamba2_standard (Mamba-2 standard decode).

Run on a CUDA machine from the project root, e.g. on the H200 machine:

    source .device/gpu_env.sh && python tests/gpu_scripts/check_mamba2_standard.py
    ... --quick            fewer correctness variants
    ... --no-bench         correctness only
    ... --sweep            also time a grid of tile configs (block_p x threads x occupancy hint)
    ... --flashinfer       also time FlashInfer's selective_state_update (if importable)

Correctness: each variant compares against a plain torch fp32 implementation written in
this file (fresh random inputs every run; the seed is printed), with
* outputs poisoned with NaN before the call (pad rows must stay NaN, every other row must
  be written),
* pad rows (``state_batch_indices == pad_slot_id``) and scattered slots in a larger pool,
* every slot no row owns checked bit-for-bit untouched,
* strided (vLLM-style) views for x/B/C/dt and a pool with a padded slot stride,
* a multi-step run, a CUDA-graph replay and a side-stream launch.

Benchmark: Nemotron-3-Super layer (H=128, P=64, N=128, G=8), fp32 state, bf16
activations, batch 1/64/256/512, CUDA graphs, state pools rotated so the state never sits
in L2; prints µs per step and GB/s (read + write of the state + the small inputs), next
to a device-to-device copy and mamba_ssm's Triton kernel when importable.
Exits 0 without doing anything when no CUDA device is present; exits 1 on any mismatch.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

NEMO = dict(H=128, P=64, N=128, G=8)
DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
SHORT = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}

# --------------------------------------------------------------------------------------
# reference (plain torch, fp32)
# --------------------------------------------------------------------------------------


def reference_step(state, x, dt, A, B, C, D, z, dt_bias, dt_softplus, idx, pad_slot_id):
    """Returns (new_state, valid_rows_mask, y_fp32[valid rows]). Does not modify inputs."""
    batch, H, P = x.shape
    G = B.shape[1]
    num_slots = state.shape[0]
    dev = x.device
    slots = idx.long() if idx is not None else torch.arange(batch, device=dev)
    valid = (slots >= 0) & (slots < num_slots)
    if idx is not None:  # without indices row i -> slot i and pad_slot_id is unused
        valid &= slots != pad_slot_id
    dtf = dt.float()
    if dt_bias is not None:
        dtf = dtf + dt_bias.float()[None]
    if dt_softplus:
        dtf = torch.where(dtf <= 20.0, torch.log1p(torch.exp(dtf)), dtf)
    dA = torch.exp(A.float()[None] * dtf)  # [b, H]
    Bh = B.float().repeat_interleave(H // G, dim=1)  # [b, H, N]
    Ch = C.float().repeat_interleave(H // G, dim=1)
    vs = slots[valid]
    S = state[vs].float()
    xv = x[valid].float()
    S = S * dA[valid][..., None, None] + (dtf[valid][..., None] * xv)[..., None] * Bh[valid][:, :, None, :]
    y = (S * Ch[valid][:, :, None, :]).sum(-1)
    if D is not None:
        y = y + D.float()[None, :, None] * xv
    if z is not None:
        zv = z[valid].float()
        y = y * zv * torch.sigmoid(zv)
    new_state = state.clone()
    new_state[vs] = S.to(state.dtype)
    return new_state, valid, y


def _mant_bits(dtype):
    return {torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}[dtype]


def close_report(name, got, ref, dtype, rel_slack=2.0, abs_frac=1e-4):
    """Elementwise |got-ref| <= rel_slack*2^-mant*|ref| + abs_frac*rms(ref). Returns (ok, msg)."""
    got = got.float()
    ref = ref.float()
    if got.numel() == 0:
        return True, f"{name}: empty"
    if not torch.isfinite(got).all():
        bad = (~torch.isfinite(got)).sum().item()
        return False, f"{name}: {bad} non-finite values"
    rtol = rel_slack * 2.0 ** (-_mant_bits(dtype))
    if dtype == torch.float32:
        rtol = max(rtol, 2e-6)  # fp32 math in a different order
    scale = ref.pow(2).mean().sqrt().item() + 1e-30
    err = (got - ref).abs()
    tol = rtol * ref.abs() + abs_frac * scale
    nbad = (err > tol).sum().item()
    rel = (err.max().item() / scale)
    return nbad == 0, f"{name}: max|err|/rms={rel:.2e} (rtol {rtol:.1e}) bad={nbad}"


# --------------------------------------------------------------------------------------
# inputs
# --------------------------------------------------------------------------------------


def make_case(batch, H, P, N, G, state_dtype, act_dtype, dt_dtype, has_z, has_D, has_bias,
              softplus, use_idx, pad_frac=0.25, pad_slot_id=-1, strided=False, pool_extra=5,
              dev="cuda"):
    g = torch.Generator(device=dev)
    g.manual_seed(int.from_bytes(os.urandom(4), "little"))

    def rn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g, device=dev, dtype=torch.float32).to(dtype)

    num_slots = (3 * batch + pool_extra) if use_idx else (batch + pool_extra)
    if strided:
        # pool with a padded slot stride (like a shared page buffer)
        pad_el = 64
        big = rn(num_slots, H * P * N + pad_el, dtype=state_dtype) * 0.5
        state = big[:, : H * P * N].view(num_slots, H, P, N)
    else:
        state = rn(num_slots, H, P, N, dtype=state_dtype) * 0.5
    if strided:
        # vLLM-style: x, B, C carved out of one projection row; dt a column view
        width = H * P + 2 * G * N + 24
        proj = rn(batch, width, dtype=act_dtype)
        x = proj[:, : H * P].view(batch, H, P)
        B = proj[:, H * P: H * P + G * N].view(batch, G, N)
        C = proj[:, H * P + G * N: H * P + 2 * G * N].view(batch, G, N)
        dt_full = rn(batch, H, 3, dtype=dt_dtype) * 0.7 - 1.0
        dt = dt_full[:, :, 1]
    else:
        x = rn(batch, H, P, dtype=act_dtype)
        B = rn(batch, G, N, dtype=act_dtype)
        C = rn(batch, G, N, dtype=act_dtype)
        dt = (rn(batch, H) * 0.7 - 1.0).to(dt_dtype)
    # a few dt above the softplus bypass threshold
    if batch * H >= 8:
        flat = dt.reshape(-1) if dt.is_contiguous() else None
        if flat is not None:
            flat[:: max(1, (batch * H) // 5)] = 25.0
    A = -torch.exp(rn(H) * 0.5)
    D = rn(H) if has_D else None
    dt_bias = rn(H) * 0.5 if has_bias else None
    z = rn(batch, H, P, dtype=act_dtype) if has_z else None
    idx = None
    if use_idx:
        perm = torch.randperm(num_slots, generator=g, device=dev)
        perm = perm[perm != pad_slot_id]  # a pad id may also be a valid slot number (e.g. 0)
        slots = perm[:batch].to(torch.int32)
        pad = torch.rand(batch, generator=g, device=dev) < pad_frac
        if batch >= 2:
            pad[0] = True  # at least one pad row and one real row
            pad[-1] = False
        idx = torch.where(pad, torch.full_like(slots, pad_slot_id), slots)
    return dict(state=state, x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias,
                dt_softplus=softplus, state_batch_indices=idx, pad_slot_id=pad_slot_id)


def run_kernel(case, out, **tile):
    from cute_kernels.mamba2_standard import mamba2_standard_decode_cute

    return mamba2_standard_decode_cute(
        case["state"], case["x"], case["dt"], case["A"], case["B"], case["C"], D=case["D"],
        z=case["z"], dt_bias=case["dt_bias"], dt_softplus=case["dt_softplus"],
        state_batch_indices=case["state_batch_indices"], pad_slot_id=case["pad_slot_id"],
        out=out, **tile,
    )


def check_case(label, case, steps=1, tile=None, mode="plain"):
    """Run `steps` kernel steps (plain / cuda graph / side stream) and compare. -> bool."""
    tile = tile or {}
    state0 = case["state"].clone()
    ref_state = state0
    x = case["x"]
    out = torch.full(x.shape, float("nan"), dtype=x.dtype, device=x.device)
    idx = case["state_batch_indices"]
    ys = []
    for _ in range(steps):
        ref_state, valid, y = reference_step(
            ref_state, case["x"], case["dt"], case["A"], case["B"], case["C"], case["D"],
            case["z"], case["dt_bias"], case["dt_softplus"], idx, case["pad_slot_id"],
        )
        ys.append(y)
    if mode == "plain":
        for _ in range(steps):
            run_kernel(case, out, **tile)
    elif mode == "graph":
        run_kernel(case, out, **tile)  # compile + warm up outside capture ...
        case["state"].copy_(state0)  # ... then restore the state
        out.fill_(float("nan"))
        torch.cuda.synchronize()
        gph = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            with torch.cuda.graph(gph):
                for _ in range(steps):
                    run_kernel(case, out, **tile)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        # capture must not have executed anything
        if not torch.equal(case["state"], state0):
            print(f"  FAIL {label}: state changed during capture")
            return False
        gph.replay()
    elif mode == "stream":
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(steps):
                run_kernel(case, out, **tile)
        torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()

    ok = True
    msgs = []
    state = case["state"]
    num_slots = state.shape[0]
    batch = x.shape[0]
    slots = idx.long() if idx is not None else torch.arange(batch, device=x.device)
    owned = torch.zeros(num_slots, dtype=torch.bool, device=x.device)
    owned[slots[valid]] = True
    # untouched slots: bit-exact
    if not torch.equal(state[~owned], state0[~owned]):
        ok = False
        msgs.append("UNOWNED SLOTS MODIFIED")
    # pad rows: out stays NaN
    if (~valid).any():
        if not torch.isnan(out[~valid].float()).all():
            ok = False
            msgs.append("PAD ROW OUTPUT WRITTEN")
    # state of owned slots
    o1, m1 = close_report("state", state[owned], ref_state[owned], state.dtype,
                          rel_slack=1.0 * steps + 1.0)
    ok &= o1
    msgs.append(m1)
    # outputs of valid rows (last step)
    o2, m2 = close_report("out", out[valid], ys[-1], x.dtype, rel_slack=2.0, abs_frac=2e-4 * steps)
    ok &= o2
    msgs.append(m2)
    print(f"  {'ok  ' if ok else 'FAIL'} {label}: " + "; ".join(msgs))
    return ok


def correctness(quick: bool) -> bool:
    from cute_kernels import mamba2_standard as m2

    all_ok = True
    H, P, N, G = NEMO["H"], NEMO["P"], NEMO["N"], NEMO["G"]
    dts = ["float32", "float16", "bfloat16"]
    flag_sets = [
        # (z, D, dt_bias, softplus, idx)
        (True, True, True, True, True),
        (False, False, False, False, False),
        (False, True, True, True, True),
    ]
    if quick:
        flag_sets = flag_sets[:2]
    print("== correctness: state x act x flags (Nemotron-3-Super shape, batch 7, pool 26)")
    for st in dts:
        for at in dts:
            for (hz, hd, hb, sp, ui) in flag_sets:
                label = f"state={SHORT[DT[st]]} act={SHORT[DT[at]]} z={hz:d} D={hd:d} bias={hb:d} softplus={sp:d} idx={ui:d}"
                try:
                    case = make_case(7, H, P, N, G, DT[st], DT[at], torch.float32, hz, hd, hb, sp, ui)
                    all_ok &= check_case(label, case)
                except Exception:
                    traceback.print_exc()
                    print(f"  FAIL {label}: exception")
                    all_ok = False

    print("== correctness: other shapes / tilings / call modes")
    extra = [
        ("batch1 fp32/bf16", dict(batch=1), {}, 1, "plain"),
        ("batch64 fp32/bf16 (whole heads)", dict(batch=64), {}, 1, "plain"),
        ("batch64 fp32/bf16 block_p=16", dict(batch=64), dict(block_p=16), 1, "plain"),
        ("batch64 fp32/bf16 128 threads, no occupancy hint", dict(batch=64),
         dict(num_threads=128, min_blocks_per_mp=0), 1, "plain"),
        ("batch64 fp32/bf16 128 threads min_blocks=2", dict(batch=64),
         dict(num_threads=128, min_blocks_per_mp=2), 1, "plain"),
        ("bf16 state block_p=8", dict(batch=9, state_dtype=torch.bfloat16), dict(block_p=8), 1, "plain"),
        ("dt in act dtype (bf16)", dict(batch=5, dt_dtype=torch.bfloat16), {}, 1, "plain"),
        ("strided views + padded pool", dict(batch=6, strided=True), {}, 1, "plain"),
        ("strided views fp16 state", dict(batch=6, strided=True, state_dtype=torch.float16), {}, 1, "plain"),
        ("pad_slot_id=0 (a real slot number)", dict(batch=8, pad_slot_id=0), {}, 1, "plain"),
        ("no indices + pad_slot_id=0 (row 0 still runs)", dict(batch=5, use_idx=False, pad_slot_id=0),
         {}, 1, "plain"),
        ("3 steps fp32", dict(batch=5), {}, 3, "plain"),
        ("cuda graph x2 steps", dict(batch=5), {}, 2, "graph"),
        ("side stream", dict(batch=5), {}, 1, "stream"),
        ("Nano-4B H96 P80", dict(batch=4, H=96, P=80), {}, 1, "plain"),
        ("Nano-4B bf16 state", dict(batch=4, H=96, P=80, state_dtype=torch.bfloat16), {}, 1, "plain"),
        ("tiny H8 P16 N16 G2", dict(batch=3, H=8, P=16, N=16, G=2), {}, 1, "plain"),
        ("N=256 G=1", dict(batch=3, H=4, P=64, N=256, G=1), {}, 1, "plain"),
        ("fp16 state fp32 act N=64", dict(batch=3, H=4, P=32, N=64, G=2, state_dtype=torch.float16,
                                           act_dtype=torch.float32), {}, 1, "plain"),
    ]
    if quick:
        extra = extra[:4] + extra[7:8] + extra[12:14]
    for label, over, tile, steps, mode in extra:
        kw = dict(batch=7, H=H, P=P, N=N, G=G, state_dtype=torch.float32, act_dtype=torch.bfloat16,
                  dt_dtype=torch.float32, has_z=True, has_D=True, has_bias=True, softplus=True,
                  use_idx=True)
        kw.update(over)
        try:
            case = make_case(kw.pop("batch"), kw.pop("H"), kw.pop("P"), kw.pop("N"), kw.pop("G"),
                             kw.pop("state_dtype"), kw.pop("act_dtype"), kw.pop("dt_dtype"),
                             kw.pop("has_z"), kw.pop("has_D"), kw.pop("has_bias"),
                             kw.pop("softplus"), kw.pop("use_idx"), **kw)
            all_ok &= check_case(label, case, steps=steps, tile=tile, mode=mode)
        except Exception:
            traceback.print_exc()
            print(f"  FAIL {label}: exception")
            all_ok = False

    # out=None allocates and returns
    case = make_case(3, H, P, N, G, torch.float32, torch.bfloat16, torch.float32,
                     False, True, True, True, True, pad_frac=0.0)
    ref_state, valid, y = reference_step(case["state"], case["x"], case["dt"], case["A"], case["B"],
                                         case["C"], case["D"], case["z"], case["dt_bias"], True,
                                         case["state_batch_indices"], -1)
    out = run_kernel(case, None)
    torch.cuda.synchronize()
    ok, msg = close_report("out", out[valid], y, out.dtype)
    print(f"  {'ok  ' if ok else 'FAIL'} out=None allocates: {msg}")
    all_ok &= ok

    n = len(m2._CACHE)
    print(f"  compiled variants: {n}; compile seconds: "
          f"{sum(k.compile_seconds for k in m2._CACHE._d.values()):.1f}")
    return all_ok


# --------------------------------------------------------------------------------------
# benchmark
# --------------------------------------------------------------------------------------


def graph_time_us(launches, trials=15, warmup=3):
    """Median time per launch (µs) of a CUDA graph replaying `launches` in order."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for f in launches:  # compile / autotune / warm up outside capture
            f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g):
            for f in launches:
                f()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    for _ in range(warmup):
        g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(trials):
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1e3 / len(launches))
    del g
    return statistics.median(times)


def copy_bandwidth_gbs(nbytes=1 << 30):
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    dst = torch.empty_like(src)
    t = graph_time_us([lambda: dst.copy_(src)] * 4, trials=10)
    return 2 * nbytes / (t * 1e-6) / 1e9


def bench(sweep: bool, flashinfer: bool):
    from cute_kernels import mamba2_standard as m2

    H, P, N, G = NEMO["H"], NEMO["P"], NEMO["N"], NEMO["G"]
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = int(getattr(props, "L2_cache_size", 60 << 20) or (60 << 20))
    print(f"== benchmark on {props.name} ({props.multi_processor_count} SMs, L2 {l2 >> 20} MiB): "
          f"Nemotron-3-Super H={H} P={P} N={N} G={G}, fp32 state, bf16 x/B/C/out, fp32 dt/A/D/dt_bias, "
          f"softplus, state_batch_indices, no z")
    cbw = copy_bandwidth_gbs()
    print(f"  device copy (read+write) bandwidth: {cbw:.0f} GB/s")

    try:
        from mamba_ssm.ops.triton.selective_state_update import selective_state_update as mamba_ssu
    except Exception as e:
        mamba_ssu = None
        print(f"  mamba_ssm Triton SSU not importable ({type(e).__name__}); skipping that anchor")
    fi_ssu = None
    if flashinfer:
        try:
            from flashinfer.mamba import selective_state_update as fi_ssu
        except Exception as e:
            print(f"  flashinfer not importable ({type(e).__name__}: {e})")

    sbytes = H * P * N * 4
    configs = [dict()]
    if sweep:
        configs = []
        for nt in (128, 256):
            for bp in (64, 32, 16, 8):
                for mb in (0, 2, 4):
                    try:
                        m2.tile_config("float32", P, N, bp, nt)
                    except ValueError:
                        continue
                    configs.append(dict(block_p=bp, num_threads=nt, min_blocks_per_mp=mb))
    header = f"  {'batch':>5} {'pools':>5} {'config':>28} {'µs/step':>9} {'GB/s':>7} {'%copy':>6}"
    print(header)
    for batch in (1, 64, 256, 512):
        n_pools = max(1, math.ceil(3 * l2 / (batch * sbytes)))
        dev = "cuda"
        x = torch.randn(batch, H, P, device=dev).to(torch.bfloat16)
        B = torch.randn(batch, G, N, device=dev).to(torch.bfloat16)
        C = torch.randn(batch, G, N, device=dev).to(torch.bfloat16)
        dt = torch.randn(batch, H, device=dev) * 0.5 - 1
        A = -torch.exp(torch.randn(H, device=dev) * 0.5)
        D = torch.randn(H, device=dev)
        dt_bias = torch.randn(H, device=dev) * 0.5
        out = torch.empty_like(x)
        pools = [torch.randn(batch, H, P, N, device=dev) * 0.5 for _ in range(n_pools)]
        idxs = [torch.randperm(batch, device=dev).to(torch.int32) for _ in range(n_pools)]
        small = (x.numel() * 2 * 2 + B.numel() * 2 * 2 + dt.numel() * 4 + 3 * H * 4 + batch * 4)
        nbytes = 2 * batch * sbytes + small
        reps = max(1, math.ceil(20 / n_pools))
        for cfg in configs:
            def mk(i, cfg=cfg):
                return lambda: m2.mamba2_standard_decode_cute(
                    pools[i], x, dt, A, B, C, D=D, dt_bias=dt_bias, dt_softplus=True,
                    state_batch_indices=idxs[i], out=out, **cfg)
            try:
                t = graph_time_us([mk(i) for i in range(n_pools)] * reps)
            except Exception as e:
                print(f"  {batch:>5} {n_pools:>5} {str(cfg):>28} failed: {type(e).__name__}: {e}")
                continue
            bp = cfg.get("block_p") or m2.choose_block_p(batch, H, P, N, "float32", cfg.get("num_threads"))
            name = (f"cute bp={bp} t={cfg.get('num_threads') or m2.DEFAULT_NUM_THREADS} "
                    f"mb={cfg.get('min_blocks_per_mp', m2.DEFAULT_MIN_BLOCKS_PER_MP)}")
            gbs = nbytes / (t * 1e-6) / 1e9
            print(f"  {batch:>5} {n_pools:>5} {name:>28} {t:9.2f} {gbs:7.0f} {100 * gbs / cbw:5.0f}%")
        # peers on the same data (stride-0 per-head broadcasts, as mamba_ssm's model code does)
        dt3 = dt[:, :, None].expand(batch, H, P)
        A3 = A[:, None, None].expand(H, P, N)
        D2 = D[:, None].expand(H, P)
        bias2 = dt_bias[:, None].expand(H, P)
        if mamba_ssu is not None:
            def mkm(i):
                return lambda: mamba_ssu(pools[i], x, dt3, A3, B, C, D=D2, z=None, dt_bias=bias2,
                                         dt_softplus=True, state_batch_indices=idxs[i])
            try:
                t = graph_time_us([mkm(i) for i in range(n_pools)] * reps)
                gbs = nbytes / (t * 1e-6) / 1e9
                print(f"  {batch:>5} {n_pools:>5} {'mamba_ssm triton':>28} {t:9.2f} {gbs:7.0f} {100 * gbs / cbw:5.0f}%")
            except Exception as e:
                print(f"  mamba_ssm failed: {type(e).__name__}: {e}")
        if fi_ssu is not None:
            def mkf(i):
                return lambda: fi_ssu(pools[i], x, dt3, A3, B, C, D2, z=None, dt_bias=bias2,
                                      dt_softplus=True, state_batch_indices=idxs[i], out=out)
            try:
                t = graph_time_us([mkf(i) for i in range(n_pools)] * reps)
                gbs = nbytes / (t * 1e-6) / 1e9
                print(f"  {batch:>5} {n_pools:>5} {'flashinfer ssu':>28} {t:9.2f} {gbs:7.0f} {100 * gbs / cbw:5.0f}%")
            except Exception as e:
                print(f"  flashinfer failed: {type(e).__name__}: {e}")
        pools = idxs = None  # free the pools before the next batch size
        torch.cuda.empty_cache()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-bench", action="store_true")
    ap.add_argument("--bench-only", action="store_true")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--flashinfer", action="store_true")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device (this script needs a GPU)")
        return 0
    seed = int.from_bytes(os.urandom(4), "little")
    torch.manual_seed(seed)
    print(f"seed {seed}; torch {torch.__version__}; device {torch.cuda.get_device_name()}")
    from cute_kernels import common

    print(f"TVM-FFI fast path: {common.HAS_TVM_FFI}; arch {common.arch_key()}")
    t0 = time.time()
    ok = True
    if not args.bench_only:
        ok = correctness(args.quick)
        print(f"correctness: {'PASS' if ok else 'FAIL'} ({time.time() - t0:.0f}s)")
    if not args.no_bench:
        bench(args.sweep, args.flashinfer)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
