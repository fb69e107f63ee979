"""Host launch overhead per eager call (µs), batch 1: every public op and its kernel launcher.

    python -m bench.host_overhead                # GPU: real kernels (CPU-only box: python mode)
    python -m bench.host_overhead --mode python  # stub the compiled kernels (no GPU needed)

Modes:

* ``real`` (needs an sm_90+ GPU): the compiled kernels run. Calls are timed in bursts of
  ``--burst`` calls with a device sync between bursts (outside the timed region), so the launch
  queue never fills and the number is host time, not GPU time; the median burst is reported.
* ``python``: every compiled kernel is replaced by a Python no-op before the first compile
  (``cute_kernels.common.cute_compile`` is stubbed), the CuTe backend is declared available for the
  tensors' device (``meta`` by default: no data, and the CPU-only index check does not run), and
  everything else -- validation, backend resolution, launch plans, cache-key building, argument
  views -- runs as on the GPU. It measures the Python part only; the TVM-FFI argument conversion
  (measured separately below with ``tvm_ffi``'s ``testing.nop`` on CPU tensors) and the driver
  launch come on top on a GPU.

Shapes: Nemotron-3-Super Mamba-2 layer (H=128, P=64, N=128, G=8) and Qwen3.5-4B GDN (H=16,
HV=32, K=V=128), bf16 activations, ``nvfp4/fp16sr`` replay caches, L=16, ``state_batch_indices``
given (the serving case).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Callable, Dict, List, Tuple

import torch

_NOOP_CALLS = [0]


def _noop(*args):
    _NOOP_CALLS[0] += 1


class _FakeCompiled:
    def __tvm_ffi_object__(self):
        return _noop

    def __call__(self, *args):
        _NOOP_CALLS[0] += 1


def stub_kernels(device_types=("meta", "cpu")) -> None:
    """Python-only mode: compiled kernels become no-ops and the CuTe backend counts as available
    on ``device_types``. Irreversible for the process (meant for this benchmark and tests)."""
    import cute_kernels.common as common
    from replayssm_lp import backends

    common.cute_compile = lambda fn, *a, **k: (_FakeCompiled(), 0.0)
    common.kernel_cache_dir = lambda: None  # no real kernels from disk, no stubs written there
    common.HAS_TVM_FFI = True
    real = backends.cute_unavailable_reason

    def reason(device):
        if device.type in device_types:
            return backends._load_kernel_modules()
        return real(device)

    backends.cute_unavailable_reason = reason
    getattr(backends, "clear_memo", lambda: None)()


def _time_python(call: Callable[[], object], n: int, repeat: int) -> float:
    """µs per call of this thread's CPU time (robust to other processes competing for the CPU,
    which wall-clock timing on a shared CI box is not); the lower half's median of ``repeat``."""
    for _ in range(20):
        call()
    best = []
    for _ in range(repeat):
        t0 = time.thread_time()
        for _ in range(n):
            call()
        best.append((time.thread_time() - t0) / n * 1e6)
    return statistics.median(sorted(best)[: max(1, repeat // 2)])


def _time_gpu(call: Callable[[], object], burst: int, repeat: int) -> float:
    for _ in range(20):
        call()
    torch.cuda.synchronize()
    per = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(burst):
            call()
        per.append((time.perf_counter() - t0) / burst * 1e6)
        torch.cuda.synchronize()
    return statistics.median(per)


def _cases(dev: torch.device) -> List[Tuple[str, Callable[[], object]]]:
    import replayssm_lp as R
    from replayssm_lp import ops

    act = torch.bfloat16
    gen = torch.Generator().manual_seed(0)

    def r(*s, dtype=torch.float32):
        if dev.type == "meta":
            return torch.empty(*s, dtype=dtype, device=dev)
        return torch.randn(*s, generator=gen).to(dtype=dtype, device=dev)

    cases: List[Tuple[str, Callable[[], object]]] = []
    b = 1
    sbi = torch.zeros(b, dtype=torch.int32, device=dev)

    # ---- Mamba-2 (Nemotron-3-Super layer)
    H, P, N, G = 128, 64, 128, 8
    x, z = r(b, H, P, dtype=act), None
    dt, A, D, dtb = r(b, H), -r(H).abs() if dev.type != "meta" else r(H), r(H), r(H)
    Bm, Cm = r(b, G, N, dtype=act), r(b, G, N, dtype=act)
    out = torch.empty(b, H, P, dtype=act, device=dev)
    m2 = R.Mamba2ReplayCache(2, H, P, N, G, precision="nvfp4/fp16sr", buffer_len=16,
                             act_dtype=act, device=dev)
    state = torch.zeros(2, H, P, N, device=dev)
    a = (x, dt, A, Bm, Cm, D, z, dtb, True, sbi)
    from cute_kernels.mamba2_replay import mamba2_replay_decode_cute
    from cute_kernels.mamba2_standard import mamba2_standard_decode_cute
    cases += [
        ("mamba2_decode (public op)", lambda: ops.mamba2_decode(m2, *a, out=out, backend="cute")),
        ("mamba2_decode (auto backend)", lambda: ops.mamba2_decode(m2, *a, out=out)),
    ]
    prep = getattr(ops, "prepare_mamba2_decode", None)
    if prep is not None:
        step = prep(m2, A, D, dtb, True)
        cases.append(("prepare_mamba2_decode step (prepared)",
                      lambda: step(x, dt, Bm, Cm, z, sbi, out)))
    cases += [
        ("mamba2_replay_decode_cute (launcher)",
         lambda: mamba2_replay_decode_cute(m2, *a, -1, out)),
        ("mamba2_standard_decode (public op)",
         lambda: ops.mamba2_standard_decode(state, *a, out=out, backend="cute")),
        ("mamba2_standard_decode_cute (launcher)",
         lambda: mamba2_standard_decode_cute(state, *a, -1, out)),
    ]

    # ---- GDN (Qwen3.5-4B layer), raw gates
    H, HV, K, Vd = 16, 32, 128, 128
    q, k, v = r(b, H, K, dtype=act), r(b, H, K, dtype=act), r(b, HV, Vd, dtype=act)
    A_log, ag, dtb2, bg = r(HV), r(b, HV, dtype=act), r(HV), r(b, HV, dtype=act)
    o = torch.empty(b, HV, Vd, dtype=act, device=dev)
    gc = R.GDNReplayCache(2, H, HV, K, Vd, precision="nvfp4/fp16sr", buffer_len=16,
                          act_dtype=act, device=dev)
    gstate = torch.zeros(2, HV, Vd, K, device=dev)
    gk = dict(A_log=A_log, a=ag, dt_bias=dtb2, b=bg, state_batch_indices=sbi, out=o)
    from cute_kernels.gdn_replay import gdn_replay_decode_cute
    from cute_kernels.gdn_standard import gdn_standard_decode_cute
    cases += [
        ("gdn_decode (public op)", lambda: ops.gdn_decode(gc, q, k, v, backend="cute", **gk)),
    ]
    prep = getattr(ops, "prepare_gdn_decode", None)
    if prep is not None:
        gstep = prep(gc, A_log, dtb2)
        cases.append(("prepare_gdn_decode step (prepared)",
                      lambda: gstep(q, k, v, a=ag, b=bg, state_batch_indices=sbi, out=o)))
    cases += [
        ("gdn_replay_decode_cute (launcher)",
         lambda: gdn_replay_decode_cute(gc, q, k, v, None, None, A_log, ag, dtb2, bg, None, True,
                                        sbi, -1, o)),
        ("gdn_standard_decode (public op)",
         lambda: ops.gdn_standard_decode(gstate, q, k, v, backend="cute", **gk)),
        ("gdn_standard_decode_cute (launcher)",
         lambda: gdn_standard_decode_cute(gstate, q, k, v, None, None, A_log, ag, dtb2, bg, None,
                                          True, sbi, -1, o)),
    ]

    # ---- speculative verify (T = 4 drafts per row) on caches with max_draft = 4
    T = 4
    H, P, N, G = 128, 64, 128, 8
    vm2 = R.Mamba2ReplayCache(2, H, P, N, G, precision="nvfp4/fp16sr", buffer_len=16,
                              max_draft=T, act_dtype=act, device=dev)
    vx, vdt, vB, vC = r(b, T, H, P, dtype=act), r(b, T, H), r(b, T, G, N, dtype=act), \
        r(b, T, G, N, dtype=act)
    vout = torch.empty(b, T, H, P, dtype=act, device=dev)
    cases.append(("mamba2_verify (public op, T=4)",
                  lambda: ops.mamba2_verify(vm2, vx, vdt, A, vB, vC, D, None, dtb, True, sbi,
                                            out=vout, backend="cute")))
    H, HV, K, Vd = 16, 32, 128, 128
    vgc = R.GDNReplayCache(2, H, HV, K, Vd, precision="nvfp4/fp16sr", buffer_len=16, max_draft=T,
                           act_dtype=act, device=dev)
    vq, vk, vv = r(b, T, H, K, dtype=act), r(b, T, H, K, dtype=act), r(b, T, HV, Vd, dtype=act)
    vgk = dict(A_log=A_log, a=r(b, T, HV, dtype=act), dt_bias=dtb2, b=r(b, T, HV, dtype=act),
               state_batch_indices=sbi, out=torch.empty(b, T, HV, Vd, dtype=act, device=dev))
    cases.append(("gdn_verify (public op, T=4)",
                  lambda: ops.gdn_verify(vgc, vq, vk, vv, backend="cute", **vgk)))

    # ---- commit (pointer move) on a speculative cache
    sc = R.Mamba2ReplayCache(2, 8, 64, 128, 2, precision="fp32", buffer_len=16, max_draft=4,
                             act_dtype=act, device=dev)
    nacc = torch.zeros(b, dtype=torch.int32, device=dev)
    from cute_kernels.replay_commit import replay_commit_cute
    cases += [
        ("commit (public op)", lambda: ops.commit(sc, nacc, sbi, backend="cute")),
        ("replay_commit_cute (launcher)",
         lambda: replay_commit_cute(sc.write_pos, sc.pending, nacc, sbi, -1)),
    ]
    return cases


def ffi_floor(nargs=(12, 27), n: int = 20000) -> Dict[int, float]:
    """µs of a TVM-FFI call of the no-op ``testing.nop`` with ``n`` CPU torch tensors (the argument
    conversion floor the kernels' calls pay on top of the Python part); {} without tvm_ffi."""
    try:
        import tvm_ffi
        f = tvm_ffi.get_global_func("testing.nop")
    except Exception:  # noqa: BLE001
        return {}
    t = torch.zeros(1, 128, 64)
    return {m: _time_python(lambda: f(*([t] * m)), n, 5) for m in nargs}


def run(mode: str = "auto", n: int = 3000, repeat: int = 7, burst: int = 100,
        device: str = "meta", only: str = "", interleave: int = 1) -> Dict[str, float]:
    """``interleave`` > 1: time every call ``interleave`` times round-robin (each round a full
    measurement) and report the median per call, so that clock / thermal drift over the run
    does not favour the calls measured first."""
    if mode == "auto":
        mode = "real" if torch.cuda.is_available() else "python"
    if mode == "real":
        dev = torch.device("cuda", torch.cuda.current_device())
    else:
        dev = torch.device(device)
        stub_kernels()
    cases = [(name, call) for name, call in _cases(dev)
             if not only or any(w in name for w in only.split(","))]
    per: Dict[str, List[float]] = {name: [] for name, _ in cases}
    for _ in range(max(1, interleave)):
        for name, call in cases:
            per[name].append(_time_gpu(call, burst, max(repeat, 20)) if mode == "real"
                             else _time_python(call, n, repeat))
    res = {name: statistics.median(v) for name, v in per.items()}
    return res, mode, dev


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m bench.host_overhead", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", choices=("auto", "real", "python"), default="auto")
    ap.add_argument("--device", default="meta", help="python mode: tensor device (meta or cpu)")
    ap.add_argument("-n", type=int, default=3000, help="python mode: calls per repeat")
    ap.add_argument("--burst", type=int, default=100, help="real mode: calls per timed burst")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", action="store_true", help="print {call: µs} as JSON only")
    ap.add_argument("--only", default="", help="comma-separated substrings of the call names")
    ap.add_argument("--interleave", type=int, default=1,
                    help="measure every call this many times round-robin; report the median")
    args = ap.parse_args(argv)
    res, mode, dev = run(args.mode, args.n, args.repeat, args.burst, args.device, args.only,
                         args.interleave)
    if args.json:
        import json
        print(json.dumps(res))
        return 0
    print(f"# host overhead per eager call, batch 1 ({mode} mode, device {dev}, "
          f"torch {torch.__version__})")
    if mode == "real":
        print(f"# {torch.cuda.get_device_name()}; median of bursts of {args.burst} calls")
    else:
        print("# python part only (thread CPU time): compiled kernels stubbed by a Python no-op")
    print("| call | µs/call |")
    print("|---|---:|")
    for k, v in res.items():
        print(f"| {k} | {v:.2f} |")
    fl = ffi_floor()
    if fl:
        print("# TVM-FFI argument conversion floor (testing.nop, CPU tensors): "
              + ", ".join(f"{m} tensors {v:.2f} µs" for m, v in fl.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
