"""Host fast path (no GPU needed): launch plans are memoised per cache and dropped when a cache
tensor is replaced; the fast path accepts only what the general path accepts (same errors); the
python part of an eager call stays cheap (bench.host_overhead --mode python, in a subprocess so its
kernel stubs never leak into this process)."""
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import replayssm_lp as R
from replayssm_lp import backends, ops
from replayssm_lp._validate import cache_plan, env_fingerprint, getenv

ROOT = Path(__file__).resolve().parents[1]
H, P, N, G = 4, 8, 32, 2
META = torch.device("meta")


def _m2_cache(**kw):
    kw = dict(dict(precision="nvfp4/fp16sr", buffer_len=4, max_draft=2, act_dtype=torch.bfloat16,
                   device="meta"), **kw)
    return R.Mamba2ReplayCache(6, H, P, N, G, **kw)


def _m2_args(b=3, act=torch.bfloat16):
    e = lambda *s, dtype=torch.float32: torch.empty(*s, dtype=dtype, device=META)  # noqa: E731
    return dict(x=e(b, H, P, dtype=act), dt=e(b, H), A=e(H), B=e(b, G, N, dtype=act),
                C=e(b, G, N, dtype=act), D=e(H), dt_bias=e(H),
                state_batch_indices=torch.zeros(b, dtype=torch.int32, device=META),
                out=e(b, H, P, dtype=act))


class _Recorder:
    """Stands in for compile_mamba2_replay: records compiles and kernel calls."""

    def __init__(self):
        self.compiles, self.calls = [], []

    def compile(self, *args, **kw):
        self.compiles.append((args, kw))
        return types.SimpleNamespace(ffi=lambda *a: self.calls.append(a),
                                     meta={"op": types.SimpleNamespace(any_sr=True)})


@pytest.fixture
def cute_on_meta(monkeypatch):
    """The CuTe backend counts as available for meta tensors; the replay kernel is a recorder."""
    import cute_kernels.mamba2_replay as M

    rec = _Recorder()
    real = backends.cute_unavailable_reason
    monkeypatch.setattr(backends, "cute_unavailable_reason",
                        lambda d: backends._load_kernel_modules() if d.type == "meta" else real(d))
    monkeypatch.setattr(M, "compile_mamba2_replay", rec.compile)
    backends.clear_memo()
    yield rec
    monkeypatch.undo()
    backends.clear_memo()


def test_env_helpers(monkeypatch):
    monkeypatch.setenv("REPLAYSSM_TEST_ENV_X", "abc")
    assert getenv("REPLAYSSM_TEST_ENV_X") == "abc" == os.environ.get("REPLAYSSM_TEST_ENV_X")
    assert env_fingerprint(("REPLAYSSM_TEST_ENV_X",)) != env_fingerprint(("REPLAYSSM_TEST_ENV_Y",))
    monkeypatch.delenv("REPLAYSSM_TEST_ENV_X")
    assert getenv("REPLAYSSM_TEST_ENV_X", "d") == "d"


def test_cache_plan_invalidation():
    c = _m2_cache()
    p = cache_plan(c)
    assert cache_plan(c) is p
    c.x_buf = torch.zeros_like(c.x_buf)                       # reallocated ring buffer
    p2 = cache_plan(c)
    assert p2 is not p and cache_plan(c) is p2
    c.hi.data = c.hi.data.clone()                             # reallocated stored copy
    p3 = cache_plan(c)
    assert p3 is not p2
    c.lo.scale = c.lo.scale.to(torch.uint8)                   # dtype change
    p4 = cache_plan(c)
    assert p4 is not p3
    c.write_pos = torch.zeros(6, dtype=torch.int64, device=META)  # cursor dtype change
    assert cache_plan(c) is not p4
    # CPU cache: in-place storage swap of a stored copy (same tensor object) drops the plan
    cc = R.Mamba2ReplayCache(2, H, P, N, G, precision="fp32", buffer_len=4)
    q = cache_plan(cc)
    cc.hi.data.set_(cc.hi.data.clone())
    assert cache_plan(cc) is not q
    # a one-element tensor replaced by an equal one still yields a fresh plan or a harmless one;
    # copies of a cache get their own plan
    import copy
    d = copy.deepcopy(cc)
    assert cache_plan(d) is not cache_plan(cc)


def test_plan_lives_and_dies_with_its_cache():
    import copy
    import gc
    import pickle
    import weakref
    c = R.Mamba2ReplayCache(2, H, P, N, G, precision="fp32", buffer_len=4)
    p = cache_plan(c)
    assert copy.deepcopy(c).__dict__.get("_replayssm_plan") is None
    assert pickle.loads(pickle.dumps(c)).__dict__.get("_replayssm_plan") is None
    assert cache_plan(copy.copy(c)) is not p and cache_plan(c) is p
    del p
    t, r = weakref.ref(c.x_buf), weakref.ref(c)
    gc.disable()
    try:
        del c                       # freed by reference counting: no cycle through the plan
        assert r() is None and t() is None
    finally:
        gc.enable()


def test_launcher_uses_current_cache_tensors(cute_on_meta):
    from cute_kernels.mamba2_replay import mamba2_replay_decode_cute
    rec = cute_on_meta
    c = _m2_cache()
    a = _m2_args()
    args = (a["x"], a["dt"], a["A"], a["B"], a["C"], a["D"], None, a["dt_bias"], True,
            a["state_batch_indices"], -1, a["out"])
    mamba2_replay_decode_cute(c, *args)
    mamba2_replay_decode_cute(c, *args)
    assert len(rec.compiles) == 1 and len(rec.calls) == 2
    call = rec.calls[-1]
    assert call[0] is a["x"] and call[9] is a["out"]
    view = call[10]                                           # hi int32 word view, memoised
    assert view.dtype == torch.int32 and view is rec.calls[0][10]
    assert call[16] is c.x_buf and call[20] is c.write_pos and call[25] is c.seed
    # replaced cursor / ring buffer / seed: the next launch passes the new tensors
    c.write_pos = torch.zeros_like(c.write_pos)
    c.x_buf = torch.zeros_like(c.x_buf)
    c.seed = torch.zeros_like(c.seed)
    mamba2_replay_decode_cute(c, *args)
    call = rec.calls[-1]
    assert call[20] is c.write_pos and call[16] is c.x_buf and call[25] is c.seed
    # replaced stored copy: the views are rebuilt
    c.hi.data = c.hi.data.clone()
    mamba2_replay_decode_cute(c, *args)
    assert rec.calls[-1][10] is not view and rec.calls[-1][10].shape == view.shape
    # a different call signature (no D) compiles another variant
    mamba2_replay_decode_cute(c, *args[:5], None, *args[6:])
    assert len(rec.compiles) >= 2 and rec.compiles[-1][0][9] is False   # has_D


def test_launcher_env_is_part_of_the_key(cute_on_meta, monkeypatch):
    from cute_kernels.mamba2_replay import mamba2_replay_decode_cute
    rec = cute_on_meta
    c = _m2_cache()
    a = _m2_args()
    args = (a["x"], a["dt"], a["A"], a["B"], a["C"], None, None, None, True, None, -1, a["out"])
    mamba2_replay_decode_cute(c, *args)
    n = len(rec.compiles)
    monkeypatch.setenv("REPLAYSSM_M2_HEADS_PER_CTA", "2")
    mamba2_replay_decode_cute(c, *args)
    assert len(rec.compiles) == n + 1 and rec.compiles[-1][0][13] == 2   # heads_per_cta


def test_public_op_fast_and_general_paths(cute_on_meta):
    rec = cute_on_meta
    c = _m2_cache()
    a = _m2_args()
    R.mamba2_decode(c, **a, backend="cute")
    assert len(rec.calls) == 1
    x0 = rec.calls[-1][0]
    assert x0 is a["x"]                                       # fast path: no copy
    # non-contiguous x: accepted by the general path, which passes a contiguous copy
    xn = torch.empty(3, P, H, dtype=torch.bfloat16, device=META).transpose(1, 2)
    R.mamba2_decode(c, **dict(a, x=xn), backend="cute")
    assert rec.calls[-1][0] is not xn and rec.calls[-1][0].is_contiguous()
    # vLLM tied views (general path)
    tied = dict(a, A=a["A"][:, None, None].expand(H, P, N), dt=a["dt"][..., None].expand(3, H, P))
    R.mamba2_decode(c, **tied, backend="cute")
    assert len(rec.calls) == 3
    # prepared step
    step = ops.prepare_mamba2_decode(c, a["A"], a["D"], a["dt_bias"])
    step(a["x"], a["dt"], a["B"], a["C"], None, a["state_batch_indices"], a["out"])
    assert len(rec.calls) == 4 and rec.calls[-1][0] is a["x"]
    # a replaced (non-contiguous) ring buffer: supports() declines it again, auto -> torch path
    c.x_buf = torch.empty(c.x_buf.shape[::-1], dtype=c.x_buf.dtype, device=META).permute(3, 2, 1, 0)
    with pytest.raises(RuntimeError, match="does not support this configuration"):
        R.mamba2_decode(c, **a, backend="cute")
    assert backends.resolve("auto", "mamba2_decode", c) is None
    assert len(rec.calls) == 4


def test_gdn_launcher_plan(monkeypatch):
    import cute_kernels.gdn_replay as GR
    calls, compiles = [], []

    def fake_compile(*a, **k):
        compiles.append(a)
        return types.SimpleNamespace(ffi=lambda *args: calls.append(args), meta={"any_sr": True})

    monkeypatch.setattr(GR, "compile_gdn_replay", fake_compile)
    c = R.GDNReplayCache(4, 2, 4, 128, 128, precision="nvfp4/fp16sr", buffer_len=4,
                         act_dtype=torch.bfloat16, device="meta")
    e = lambda *s, dtype=torch.bfloat16: torch.empty(*s, dtype=dtype, device=META)  # noqa: E731
    q, k, v, o = e(2, 2, 128), e(2, 2, 128), e(2, 4, 128), e(2, 4, 128)
    g, beta = e(2, 4, dtype=torch.float32), e(2, 4, dtype=torch.float32)
    for _ in range(2):
        GR.gdn_replay_decode_cute(c, q, k, v, g, beta, out=o)
    assert len(compiles) == 1 and calls[0][0] is calls[1][0]       # memoised word views
    assert calls[-1][6] is c.k_buf and calls[-1][12] is c.write_pos
    c.lo.data = c.lo.data.clone()
    c.write_pos = torch.zeros_like(c.write_pos)
    GR.gdn_replay_decode_cute(c, q, k, v, g, beta, out=o)
    assert calls[-1][3] is not calls[0][3] and calls[-1][12] is c.write_pos
    assert calls[-1][0] is not calls[0][0]                           # new plan, new views


def test_gdn_launchers_occupancy_by_batch_and_env(monkeypatch):
    """The GDN decode / verify launchers pick the CTAs-per-SM hint from the launch size (2 below
    OCC_MIN_CTAS, 4 / 3 from it for nvfp4/fp16sr decode / verify), leave it to the env override
    when one is set, and rebuild the launch when REPLAYSSM_PDL or the override changes."""
    import cute_kernels.gdn_replay as GR
    import cute_kernels.gdn_verify as GV
    got = {"replay": [], "verify": []}

    def fake(kind, mb_at):
        def compile_(*a, **k):
            got[kind].append(a[mb_at])
            return types.SimpleNamespace(ffi=lambda *args: None, meta={"any_sr": True})
        return compile_

    monkeypatch.setattr(GR, "compile_gdn_replay", fake("replay", 18))
    monkeypatch.setattr(GV, "compile_gdn_verify", fake("verify", 18))
    monkeypatch.delenv("REPLAYSSM_GDN_REPLAY_MINB", raising=False)
    monkeypatch.delenv("REPLAYSSM_GDN_VERIFY_MINB", raising=False)
    monkeypatch.delenv("REPLAYSSM_PDL", raising=False)
    # (no flush-first order: its kernel is not faked here; test_gdn_*_compile cover its rule)
    monkeypatch.setenv(GR.ORDER_ENV, "0")
    monkeypatch.setenv(GV.VERIFY_ORDER_ENV, "0")
    H_, HV_, slots = 16, 32, 128                     # batch 128: 128 * 32 = OCC_MIN_CTAS CTAs
    assert slots * HV_ == GR.OCC_MIN_CTAS
    c = R.GDNReplayCache(slots, H_, HV_, 128, 128, precision="nvfp4/fp16sr", buffer_len=4,
                         max_draft=2, act_dtype=torch.bfloat16, device="meta")
    e = lambda *s, dtype=torch.bfloat16: torch.empty(*s, dtype=dtype, device=META)  # noqa: E731

    def decode(b):
        GR.gdn_replay_decode_cute(c, e(b, H_, 128), e(b, H_, 128), e(b, HV_, 128),
                                  e(b, HV_, dtype=torch.float32), e(b, HV_, dtype=torch.float32),
                                  out=e(b, HV_, 128))

    def verify(b):
        GV.gdn_verify_cute(c, e(b, 2, H_, 128), e(b, 2, H_, 128), e(b, 2, HV_, 128),
                           e(b, 2, HV_, dtype=torch.float32), e(b, 2, HV_, dtype=torch.float32),
                           out=e(b, 2, HV_, 128))

    decode(8), decode(slots), decode(8)
    verify(8), verify(slots), verify(8)
    assert got == {"replay": [2, 4], "verify": [2, 3]}
    monkeypatch.setenv("REPLAYSSM_GDN_REPLAY_MINB", "3")
    monkeypatch.setenv("REPLAYSSM_GDN_VERIFY_MINB", "4")
    decode(slots), verify(slots)                     # the override is resolved at compile
    assert got["replay"][-1] is None and got["verify"][-1] is None
    monkeypatch.setenv("REPLAYSSM_PDL", "2")
    decode(slots), verify(slots)
    assert len(got["replay"]) == 4 and len(got["verify"]) == 4


@pytest.mark.parametrize("field,bad,match", [
    ("x", torch.empty(3, H, P + 1, dtype=torch.bfloat16, device=META), "x must have shape"),
    ("x", torch.empty(3, H, P, dtype=torch.float32, device=META), "x must have dtype"),
    ("x", torch.empty(3, H, P, dtype=torch.bfloat16), "x must be on meta"),
    ("dt", torch.empty(3, H + 1, device=META), "dt must have shape"),
    ("dt", torch.empty(3, H, dtype=torch.int32, device=META), "dt must have dtype"),
    ("A", torch.empty(H + 1, device=META), "A must have shape"),
    ("A", torch.empty(H), "A must be on meta"),
    ("B", torch.empty(3, G + 1, N, dtype=torch.bfloat16, device=META), "B must have shape"),
    ("C", torch.empty(3, G, N, dtype=torch.float16, device=META), "C must have dtype"),
    ("D", torch.empty(H - 1, device=META), "D must have shape"),
    ("dt_bias", torch.empty(2, device=META), "dt_bias must have shape"),
    ("state_batch_indices", torch.zeros(3, dtype=torch.int64, device=META), "must have dtype"),
    ("state_batch_indices", torch.zeros(2, dtype=torch.int32, device=META), "must have shape"),
    ("state_batch_indices", torch.zeros(3, dtype=torch.int32), "must be on meta"),
    ("out", torch.empty(3, H, P, dtype=torch.float32, device=META), "out must have dtype"),
    ("out", torch.empty(3, H, P + 1, dtype=torch.bfloat16, device=META), "out must have shape"),
    ("pad_slot_id", 3, "pad_slot_id must be a negative int"),
    ("pad_slot_id", True, "pad_slot_id must be a negative int"),
    ("backend", "triton", "backend must be one of"),
    ("x", "not a tensor", "x must be a torch.Tensor"),
])
def test_fast_path_rejects_what_the_general_path_rejects(cute_on_meta, field, bad, match):
    c = _m2_cache()
    kw = dict(_m2_args(), backend="cute")
    R.mamba2_decode(c, **kw)                                  # warm the plan (fast path)
    n = len(cute_on_meta.calls)
    kw[field] = bad
    with pytest.raises((ValueError, TypeError), match=match):
        R.mamba2_decode(c, **kw)
    assert len(cute_on_meta.calls) == n
    if field not in ("A", "D", "dt_bias", "pad_slot_id", "backend"):
        step = ops.prepare_mamba2_decode(c, kw["A"], kw["D"], kw["dt_bias"])
        per_call = {k: kw[k] for k in ("x", "dt", "B", "C", "state_batch_indices", "out")}
        with pytest.raises((ValueError, TypeError), match=match):
            step(per_call["x"], per_call["dt"], per_call["B"], per_call["C"], None,
                 per_call["state_batch_indices"], per_call["out"])
        assert len(cute_on_meta.calls) == n


def test_prepare_validates_bound_arguments():
    c = R.Mamba2ReplayCache(4, H, P, N, G, precision="fp32", buffer_len=4, act_dtype=torch.float32)
    with pytest.raises(ValueError, match="A must have shape"):
        ops.prepare_mamba2_decode(c, torch.randn(H + 1))
    with pytest.raises(TypeError, match="cache must be a Mamba2ReplayCache"):
        ops.prepare_mamba2_decode("c", torch.randn(H))
    with pytest.raises(ValueError, match="pad_slot_id"):
        ops.prepare_mamba2_decode(c, torch.randn(H), pad_slot_id=0)
    gc = R.GDNReplayCache(4, 2, 4, 32, 16, precision="fp32", buffer_len=4, act_dtype=torch.float32)
    with pytest.raises(ValueError, match="A_log must have shape"):
        ops.prepare_gdn_decode(gc, torch.randn(5))


def test_prepared_steps_match_the_ops_on_cpu(seed):
    """CPU (torch reference behind both): a prepared step is exactly the op."""
    import copy
    c1 = R.Mamba2ReplayCache(4, H, P, N, G, precision="fp32", buffer_len=4, act_dtype=torch.float32)
    c1.init_from_state([0, 1, 2, 3], torch.randn(4, H, P, N))
    c2 = copy.deepcopy(c1)
    A, D, dtb = -torch.rand(H), torch.randn(H), torch.randn(H)
    step = ops.prepare_mamba2_decode(c2, A, D, dtb)
    sbi = torch.tensor([2, -1, 0], dtype=torch.int32)
    for _ in range(6):
        x, dt = torch.randn(3, H, P), torch.randn(3, H)
        B, C = torch.randn(3, G, N), torch.randn(3, G, N)
        o1, o2 = torch.zeros(3, H, P), torch.zeros(3, H, P)
        R.mamba2_decode(c1, x, dt, A, B, C, D, None, dtb, True, sbi, out=o1)
        step(x, dt, B, C, None, sbi, o2)
        assert torch.equal(o1, o2)
    assert torch.equal(c1.materialize([0, 2]), c2.materialize([0, 2]))
    g1 = R.GDNReplayCache(3, 2, 4, 32, 16, precision="fp32", buffer_len=4, act_dtype=torch.float32)
    g2 = copy.deepcopy(g1)
    A_log, dt_bias = torch.randn(4), torch.randn(4)
    gstep = ops.prepare_gdn_decode(g2, A_log, dt_bias)
    for _ in range(5):
        q, k, v = torch.randn(2, 2, 32), torch.randn(2, 2, 32), torch.randn(2, 4, 16)
        a, b = torch.randn(2, 4), torch.randn(2, 4)
        o1 = R.gdn_decode(g1, q, k, v, A_log=A_log, a=a, dt_bias=dt_bias, b=b)
        o2 = gstep(q, k, v, a=a, b=b)
        assert torch.equal(o1, o2)


def test_python_part_is_cheap():
    """Python-only host cost per call (kernels stubbed). Generous bound for a loaded CI box (the
    unloaded CPU figure is a few µs; GPU: ``python -m bench.host_overhead`` on the H200)."""
    env = dict(os.environ, CUTE_DSL_ARCH=os.environ.get("CUTE_DSL_ARCH", "sm_90a"))
    r = subprocess.run([sys.executable, "-m", "bench.host_overhead", "--mode", "python", "--json",
                        "-n", "500", "--repeat", "5"], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    for name, us in res.items():
        assert us < 60, (name, us, res)


# ---- the fast path memoises the launch per call signature (and re-reads the env per call) ----
def test_public_op_memoises_the_launch_and_rereads_env(cute_on_meta, monkeypatch):
    rec = cute_on_meta
    c = _m2_cache()
    a = _m2_args()
    for _ in range(3):
        R.mamba2_decode(c, **a, backend="cute")
    assert len(rec.compiles) == 1 and len(rec.calls) == 3
    assert rec.calls[0][10] is rec.calls[2][10]               # memoised stored-copy view
    # a launch-decision switch takes effect at the next call (new signature -> new compile)
    monkeypatch.setenv("REPLAYSSM_M2_HEADS_PER_CTA", "2")
    R.mamba2_decode(c, **a, backend="cute")
    assert len(rec.compiles) == 2 and rec.compiles[-1][0][13] == 2 and len(rec.calls) == 4
    monkeypatch.delenv("REPLAYSSM_M2_HEADS_PER_CTA")
    R.mamba2_decode(c, **a, backend="cute")
    assert rec.compiles[-1][0][13] != 2 or len(rec.compiles) == 2
    # REPLAYSSM_FORCE_TORCH=1 is honoured per call by backend="auto" (the fast path declines)
    n = len(rec.calls)
    R.mamba2_decode(c, **a)                                   # auto: fast path
    assert len(rec.calls) == n + 1
    monkeypatch.setenv("REPLAYSSM_FORCE_TORCH", "1")
    assert ops._mamba2_fast("mamba2_decode", c, a["x"], a["dt"], a["A"], a["B"], a["C"], a["D"],
                            None, a["dt_bias"], True, a["state_batch_indices"], -1, a["out"],
                            "auto", False) is ops._MISS
    assert backends.resolve("auto", "mamba2_decode", c) is None
    R.mamba2_decode(c, **a, backend="cute")                   # cute ignores the switch
    assert len(rec.calls) == n + 2
    monkeypatch.delenv("REPLAYSSM_FORCE_TORCH")
    R.mamba2_decode(c, **a)
    assert len(rec.calls) == n + 3
    # batch 0: nothing launched, out returned
    e = _m2_args(b=0)
    assert R.mamba2_decode(c, **e, backend="cute") is e["out"] and len(rec.calls) == n + 3


def test_fast_path_rebuilds_after_a_cache_tensor_is_replaced(cute_on_meta):
    rec = cute_on_meta
    c = _m2_cache()
    a = _m2_args()
    step = ops.prepare_mamba2_decode(c, a["A"], a["D"], a["dt_bias"])
    step(a["x"], a["dt"], a["B"], a["C"], None, a["state_batch_indices"], a["out"])
    view = rec.calls[-1][10]
    c.hi.data = c.hi.data.clone()                             # reallocated stored copy
    c.write_pos = torch.zeros_like(c.write_pos)
    step(a["x"], a["dt"], a["B"], a["C"], None, a["state_batch_indices"], a["out"])
    assert rec.calls[-1][10] is not view and rec.calls[-1][20] is c.write_pos
    R.mamba2_decode(c, **a, backend="cute")
    assert rec.calls[-1][10] is rec.calls[-2][10]


def _recorder_compile(calls, compiles, meta):
    def compile(*a, **k):
        compiles.append((a, k))
        return types.SimpleNamespace(ffi=lambda *args: calls.append(args), meta=meta)
    return compile


def test_verify_and_commit_fast_paths(cute_on_meta, monkeypatch):
    import cute_kernels.mamba2_verify as MV
    import cute_kernels.replay_commit as RC
    calls, compiles = [], []
    monkeypatch.setattr(MV, "compile_mamba2_verify",
                        _recorder_compile(calls, compiles, {"op": types.SimpleNamespace(any_sr=True)}))
    monkeypatch.setattr(RC, "compile_replay_commit",
                        _recorder_compile(calls, compiles, {}))
    monkeypatch.setattr(RC, "_FFI", {})
    c = _m2_cache()
    b, T = 3, 2
    e = lambda *s, dtype=torch.float32: torch.empty(*s, dtype=dtype, device=META)  # noqa: E731
    bf = torch.bfloat16
    mk = lambda T: dict(x=e(b, T, H, P, dtype=bf), dt=e(b, T, H), A=e(H),  # noqa: E731
                        B=e(b, T, G, N, dtype=bf), C=e(b, T, G, N, dtype=bf), D=e(H),
                        dt_bias=e(H), out=e(b, T, H, P, dtype=bf),
                        state_batch_indices=torch.zeros(b, dtype=torch.int32, device=META))
    kw = mk(T)
    for _ in range(2):
        R.mamba2_verify(c, **kw, backend="cute")
    assert len(compiles) == 1 and len(calls) == 2 and calls[-1][0] is kw["x"]
    assert calls[-1][20] is c.write_pos and compiles[0][0][9] == T       # T baked in
    with pytest.raises(ValueError, match="max_draft"):                    # T > max_draft
        R.mamba2_verify(c, **mk(3), backend="cute")
    assert len(calls) == 2
    nacc = torch.zeros(b, dtype=torch.int32, device=META)
    ops.commit(c, nacc, kw["state_batch_indices"], backend="cute")
    assert calls[-1] == (nacc, kw["state_batch_indices"], c.write_pos, c.pending, -1)
    ops.commit(c, nacc[:0], kw["state_batch_indices"][:0], backend="cute")   # batch 0: no launch
    assert len(calls) == 3
    with pytest.raises(TypeError, match="num_accepted_tokens must have dtype"):
        ops.commit(c, nacc.to(torch.int64), backend="cute")
    assert len(calls) == 3


@pytest.mark.parametrize("frag", [True, False])
def test_verify_split_launch_selection(cute_on_meta, monkeypatch, frag):
    """The split verify, one launch after the other (REPLAYSSM_M2V_SPLIT=1, _CONCURRENT=0): the
    flush launch's build decides (compiled first), then the non-flush launch's; each call runs
    the non-flush rows' kernel, then the flush rows'. Unforced, the fp32 pair keeps one launch
    when its flush launch has no fragment flush."""
    import cute_kernels.mamba2_verify as MV
    calls, compiles = [], []

    def compile(*a, **k):
        compiles.append(k.get("rows", 0))
        rows = k.get("rows", 0)
        op = types.SimpleNamespace(any_sr=True, flush_dots=True, frag=frag, order_cursors=False)
        return types.SimpleNamespace(ffi=lambda *args: calls.append(rows), meta={"op": op})

    monkeypatch.setattr(MV, "compile_mamba2_verify", compile)
    monkeypatch.setenv("REPLAYSSM_M2_ORDER", "0")
    monkeypatch.setenv(MV.SPLIT_CONCURRENT_ENV, "0")
    monkeypatch.setenv(MV.SPLIT_ENV, "1")
    c = _m2_cache(precision="fp32", max_draft=4)
    b, T = 3, 4
    e = lambda *s, dtype=torch.float32: torch.empty(*s, dtype=dtype, device=META)  # noqa: E731
    bf = torch.bfloat16
    kw = dict(x=e(b, T, H, P, dtype=bf), dt=e(b, T, H), A=e(H), B=e(b, T, G, N, dtype=bf),
              C=e(b, T, G, N, dtype=bf), D=e(H), dt_bias=e(H), out=e(b, T, H, P, dtype=bf),
              state_batch_indices=torch.zeros(b, dtype=torch.int32, device=META))
    R.mamba2_verify(c, **kw, backend="cute")
    assert compiles == [2, 1] and calls == [1, 2]          # forced: split whatever the flush
    monkeypatch.delenv(MV.SPLIT_ENV)
    monkeypatch.setattr(MV, "_use_split", lambda cache, batch, T: True)   # as from 128 rows
    compiles.clear()
    calls.clear()
    R.mamba2_verify(c, **dict(kw, out=e(b, T, H, P, dtype=bf)), backend="cute")
    if frag:
        assert compiles == [2, 1] and calls == [1, 2]
    else:                                                   # fp32 without the fragment flush
        assert compiles == [2, 0] and calls == [0]


@pytest.mark.parametrize("field,bad,match", [
    ("q", torch.empty(2, 2, 127, dtype=torch.bfloat16, device=META), "q must have shape"),
    ("k", torch.empty(2, 2, 128, dtype=torch.float16, device=META), "k must have dtype"),
    ("v", torch.empty(2, 4, 128, dtype=torch.bfloat16), "v must be on meta"),
    ("a", torch.empty(2, 5, dtype=torch.bfloat16, device=META), "a must have shape"),
    ("b", torch.empty(2, 4, dtype=torch.int32, device=META), "b must have dtype"),
    ("g", torch.empty(2, 4, device=META), "give either g"),
    ("state_batch_indices", torch.zeros(2, dtype=torch.int64, device=META), "must have dtype"),
    ("out", torch.empty(2, 4, 127, dtype=torch.bfloat16, device=META), "out must have shape"),
    ("scale", "x", "scale must be a float"),
])
def test_gdn_fast_path_rejects_what_the_general_path_rejects(monkeypatch, field, bad, match):
    import cute_kernels.gdn_replay as GR
    calls, compiles = [], []
    real = backends.cute_unavailable_reason
    monkeypatch.setattr(backends, "cute_unavailable_reason",
                        lambda d: backends._load_kernel_modules() if d.type == "meta" else real(d))
    monkeypatch.setattr(GR, "compile_gdn_replay", _recorder_compile(calls, compiles,
                                                                    {"any_sr": True}))
    backends.clear_memo()
    try:
        c = R.GDNReplayCache(4, 2, 4, 128, 128, precision="nvfp4/fp16sr", buffer_len=4,
                             act_dtype=torch.bfloat16, device="meta")
        e = lambda *s, dtype=torch.bfloat16: torch.empty(*s, dtype=dtype, device=META)  # noqa: E731
        kw = dict(q=e(2, 2, 128), k=e(2, 2, 128), v=e(2, 4, 128), A_log=e(4, dtype=torch.float32),
                  a=e(2, 4), dt_bias=e(4, dtype=torch.float32), b=e(2, 4),
                  state_batch_indices=torch.zeros(2, dtype=torch.int32, device=META),
                  out=e(2, 4, 128), backend="cute")
        R.gdn_decode(c, **kw)
        step = ops.prepare_gdn_decode(c, kw["A_log"], kw["dt_bias"], backend="cute")
        step(kw["q"], kw["k"], kw["v"], a=kw["a"], b=kw["b"],
             state_batch_indices=kw["state_batch_indices"], out=kw["out"])
        assert len(compiles) == 1 and len(calls) == 2 and calls[-1][18] is kw["q"]
        n = len(calls)
        kw[field] = bad
        with pytest.raises((ValueError, TypeError), match=match):
            R.gdn_decode(c, **kw)
        if field not in ("scale",):
            per = {k: kw[k] for k in ("a", "b", "state_batch_indices", "out")}
            if field == "g":
                per["g"] = bad
            with pytest.raises((ValueError, TypeError), match=match):
                step(kw["q"], kw["k"], kw["v"], **per)
        assert len(calls) == n
    finally:
        monkeypatch.undo()
        backends.clear_memo()


def test_standard_ops_fast_path(cute_on_meta, monkeypatch):
    import cute_kernels.gdn_standard as GS
    import cute_kernels.mamba2_standard as MS
    calls, compiles = [], []
    monkeypatch.setattr(MS, "compile_mamba2_standard", lambda **kw: (
        compiles.append(kw), types.SimpleNamespace(ffi=lambda *a: calls.append(a)))[1])
    monkeypatch.setattr(GS, "compile_gdn_standard", lambda *a, **kw: (
        compiles.append(a), types.SimpleNamespace(ffi=lambda *x: calls.append(x)))[1])
    monkeypatch.setattr(MS, "_LAUNCH", {})
    monkeypatch.setattr(GS, "_LAUNCH", {})
    a = _m2_args()
    state = torch.empty(6, H, P, N, device=META)
    for _ in range(2):
        R.mamba2_standard_decode(state, **a, backend="cute")
    assert len(compiles) == 1 and len(calls) == 2 and calls[-1][0] is state
    assert ops._m2_standard_fast(state, a["x"], a["dt"], a["A"], a["B"], a["C"], a["D"], None,
                                 a["dt_bias"], True, a["state_batch_indices"], -1, a["out"],
                                 "cute") is a["out"] and len(calls) == 3 and not MS._LAUNCH
    with pytest.raises(ValueError, match="C must have shape"):
        R.mamba2_standard_decode(state, **dict(a, C=a["B"][:, :1]), backend="cute")
    gs = torch.empty(4, 4, 128, 128, device=META)
    e = lambda *s, dtype=torch.bfloat16: torch.empty(*s, dtype=dtype, device=META)  # noqa: E731
    g, beta = e(2, 4, dtype=torch.float32), e(2, 4, dtype=torch.float32)
    q, k, v, o = e(2, 2, 128), e(2, 2, 128), e(2, 4, 128), e(2, 4, 128)
    for layout in ("vk", "kv", "vk"):
        R.gdn_standard_decode(gs, q, k, v, g, beta, out=o, state_layout=layout, backend="cute")
    assert len(compiles) == 3 and len(calls) == 6 and not GS._LAUNCH
    assert calls[-1][:6] == (gs, q, k, v, g, beta) and calls[-1][-2:] == (128 ** -0.5, -1)
    with pytest.raises(ValueError, match="state_layout"):
        R.gdn_standard_decode(gs, q, k, v, g, beta, out=o, state_layout="xx", backend="cute")
    assert len(calls) == 6


def test_fast_path_takes_tied_views_and_no_out(cute_on_meta):
    """vLLM's tied dt / per-head views and out=None go through the fast path, launched exactly
    as the general path would launch them ([H] / [b, H] views; zeros for out)."""
    rec = cute_on_meta
    c = _m2_cache()
    a = _m2_args()
    tied = dict(a, A=a["A"][:, None, None].expand(H, P, N), D=a["D"][:, None].expand(H, P),
                dt_bias=a["dt_bias"][:, None].expand(H, P), dt=a["dt"][..., None].expand(3, H, P))
    assert ops._mamba2_fast("mamba2_decode", c, tied["x"], tied["dt"], tied["A"], tied["B"],
                            tied["C"], tied["D"], None, tied["dt_bias"], True,
                            tied["state_batch_indices"], -1, tied["out"], "cute",
                            False) is tied["out"]
    fast = rec.calls[-1]
    for i, name in ((1, "dt"), (2, "A"), (5, "D"), (7, "dt_bias")):
        assert fast[i].shape == a[name].shape and fast[i].is_contiguous(), name
        assert fast[i] is a[name], name                  # the expanded views' own base
    # a tied view whose base is not the [H] tensor itself: a fresh [H] view of it
    big = torch.empty(H + 4, device=META)
    A2 = big[4:][:, None, None].expand(H, P, N)
    ops._mamba2_fast("mamba2_decode", c, tied["x"], tied["dt"], A2, tied["B"], tied["C"], None,
                     None, None, True, None, -1, tied["out"], "cute", False)
    assert rec.calls[-1][2]._base is big and rec.calls[-1][2].shape == (H,)
    assert rec.calls[-1][2].storage_offset() == 4
    A3 = torch.empty(2 * H, device=META)[::2][:, None, None].expand(H, P, N)   # strided: general
    assert ops._mamba2_fast("mamba2_decode", c, tied["x"], tied["dt"], A3, tied["B"], tied["C"],
                            None, None, None, True, None, -1, tied["out"], "cute",
                            False) is ops._MISS
    # the general path (a tied dt with stride != 0 on the last dim is its error)
    with pytest.raises(ValueError, match=rf"stride 0 on headdim, size {P}\).*got size {P}, stride 1"):
        R.mamba2_decode(c, **dict(tied, dt=torch.empty(3, H, P, device=META)), backend="cute")
    n = len(rec.calls)
    out = R.mamba2_decode(c, **dict(tied, out=None), backend="cute")
    assert len(rec.calls) == n + 1 and rec.calls[-1][9] is out
    assert out.shape == (3, H, P) and out.dtype == torch.bfloat16
    # prepared steps: out=None too
    step = ops.prepare_mamba2_decode(c, tied["A"], tied["D"], tied["dt_bias"])
    o2 = step(a["x"], a["dt"], a["B"], a["C"], None, a["state_batch_indices"])
    assert len(rec.calls) == n + 2 and rec.calls[-1][9] is o2 and rec.calls[-1][2]._base is a["A"]


def test_half_precision_per_head_params_reach_the_kernel_as_fp32(cute_on_meta):
    """vLLM's Mamba-2 mixers hold dt_bias (and may hold D) in the model dtype: the op takes them,
    and the CuTe kernel (compiled for fp32 per-head parameters) receives exact fp32 copies."""
    kw = _m2_args()
    kw["dt_bias"] = kw["dt_bias"].to(torch.bfloat16)
    kw["D"] = kw["D"].to(torch.float16)
    R.mamba2_decode(_m2_cache(), **kw, backend="cute")
    args = cute_on_meta.calls[-1]
    A, D, dt_bias = args[2], args[5], args[7]       # the kernel's (x, dt, A, B, C, D, z, dt_bias, ...)
    assert A.dtype == D.dtype == dt_bias.dtype == torch.float32
    assert A.shape == D.shape == dt_bias.shape == (H,)
