"""CPU-only checks of the programmatic-dependent-launch switch (``REPLAYSSM_PDL``).

The decode step kernels (Mamba-2 / GDN replay and standard) built with ``REPLAYSSM_PDL=1|2``
carry the ``griddepcontrol`` prologue in that order (1: launch_dependents then wait; 2: wait then
launch_dependents) before any memory access, and launch with the PDL attribute; ``0``: neither.
The verify kernels (ReplaySSM and snapshot) follow the same switch. Unset: mode 2 for the decode
kernels, 0 for verify / snapshot. Compiled for sm_90a without a GPU; the timing lives in
bench/results/session6_gpu/README.md (§5-6) and session7_gpu (call 1: every batch, both layers,
verify).
"""
import os
import re

import pytest

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")

try:
    import cutlass  # noqa: F401

    _ERR = None
except Exception as e:  # pragma: no cover - depends on the environment
    _ERR = f"{type(e).__name__}: {e}"

pytestmark = pytest.mark.skipif(_ERR is not None,
                                reason=f"nvidia-cutlass-dsl (CuTe DSL) not importable: {_ERR}")

if _ERR is None:
    from cute_kernels import common
    from cute_kernels import gdn_replay as GR
    from cute_kernels import gdn_standard as GS
    from cute_kernels import gdn_verify as GV
    from cute_kernels import mamba2_replay as MR
    from cute_kernels import mamba2_standard as MS
    from cute_kernels import snapshot_verify as SV


#: what may precede ``griddepcontrol.wait``: the pre-wait L2 hints of ``pf_early`` builds (the
#: slot through an L2-only load, line and bulk L2 prefetches) -- no other memory access
_HINT = r"(?!\.cg\.b32|\.prefetch)"
_MEM = r"\b(ld|st|atom|red|cp\.async)\.(global|shared|bulk)"


def _order(ptx: str):
    """The griddepcontrol instructions in PTX order; with any, they come before the first
    global / shared memory access or async copy of the kernel other than the pre-wait hints."""
    found = re.findall(r"griddepcontrol\.(wait|launch_dependents)", ptx)
    if found:
        last = max(m.start() for m in re.finditer(r"griddepcontrol\.", ptx))
        mem = re.search(_MEM + _HINT, ptx)
        assert mem is None or last < mem.start(), "griddepcontrol after a memory access"
    return found


def _pre_wait(ptx: str):
    """The memory instructions before ``griddepcontrol.wait`` (all of them, hints included)."""
    w = ptx.index("griddepcontrol.wait")
    return [m.group(0) for m in
            re.finditer(r"\b(ld|st|atom|red|cp\.async|prefetch)\.(global|shared|bulk)[\w.]*",
                        ptx[:w])]


def test_pf_early_puts_only_l2_hints_before_the_wait(monkeypatch):
    """``pf_early`` (REPLAYSSM_M2_PF_EARLY / REPLAYSSM_GDN_PF_EARLY or their batch rules):
    before the PDL wait one L2-only load (the slot) and L2 prefetches, nothing that keeps data
    (no L1 line, no register value used after the wait); without it, or with a row order, or
    without PDL: nothing before the wait."""
    monkeypatch.setenv(common.PDL_ENV, "2")
    monkeypatch.setenv(MR.PF_EARLY_ENV, "1")
    monkeypatch.setenv(GR.PF_EARLY_ENV, "1")
    hints = {"ld.global.cg.b32", "prefetch.global.L2", "cp.async.bulk.prefetch.L2.global"}
    for ptx in (MR.compile_only("fp32", heads_per_cta=1)[1],
                MR.compile_only("nvfp4/fp16sr", heads_per_cta=2)[1],
                GR.compile_only("fp8/fp32", keep_ptx=True)[1],
                GR.compile_only("nvfp4/fp16sr", keep_ptx=True)[1]):
        pre = _pre_wait(ptx)
        assert set(pre) <= hints and pre.count("ld.global.cg.b32") == 1, pre
        assert "cp.async.bulk.prefetch.L2.global" in pre and "prefetch.global.L2" in pre
    assert _pre_wait(GR.compile_only("nvfp4/fp16sr", keep_ptx=True, row_order=True)[1]) == []
    monkeypatch.setenv(MR.PF_EARLY_ENV, "0")
    monkeypatch.setenv(GR.PF_EARLY_ENV, "0")
    assert _pre_wait(MR.compile_only("fp32", heads_per_cta=1)[1]) == []
    assert _pre_wait(GR.compile_only("nvfp4/fp16sr", keep_ptx=True)[1]) == []
    monkeypatch.setenv(common.PDL_ENV, "0")
    monkeypatch.setenv(MR.PF_EARLY_ENV, "1")
    monkeypatch.delenv(GR.PF_EARLY_ENV)
    for ptx in (MR.compile_only("fp32", heads_per_cta=1)[1],
                GR.compile_only("fp32", keep_ptx=True)[1]):
        assert "griddepcontrol" not in ptx and "ld.global.cg.b32" not in ptx
    assert MR.PF_EARLY_ENV in MR._ENV_NAMES and GR.PF_EARLY_ENV in GR._ENV_NAMES


def test_mamba2_decode_arrives_without_a_fence(monkeypatch):
    """The decode's row arrive (REPLAYSSM_M2_DEP_ARRIVE, default on): no fence between the PDL
    wait and the first atomic; with the switch at 0 the fenced arrive; the verify keeps its
    fence (its class does not take the switch)."""
    monkeypatch.setenv(common.PDL_ENV, "2")

    def fenced(ptx):
        w = ptx.index("griddepcontrol.wait")
        return bool(re.search(r"fence\.acq_rel|membar", ptx[w:ptx.index("atom.", w)]))

    monkeypatch.delenv(MR.DEP_ARRIVE_ENV, raising=False)
    k, ptx = MR.compile_only("fp32", heads_per_cta=1)
    assert k.meta["op"].dep_arrive and not fenced(ptx)
    monkeypatch.setenv(MR.DEP_ARRIVE_ENV, "0")
    k, ptx = MR.compile_only("fp32", heads_per_cta=1)
    assert not k.meta["op"].dep_arrive and fenced(ptx)
    assert MR.DEP_ARRIVE_ENV in MR._ENV_NAMES


def test_mamba2_decode_builds_at_256_threads(monkeypatch):
    """REPLAYSSM_M2_THREADS: the decode at 256 threads (``.reqntid 256``; the occupancy hint
    scaled to the 128-thread build's register cap), the 128-thread build untouched by the
    switch's plumbing; a bad value is refused."""
    monkeypatch.setenv(common.PDL_ENV, "2")
    k1, p1 = MR.compile_only("nvfp4/fp16sr", heads_per_cta=1)
    k2, p2 = MR.compile_only("nvfp4/fp16sr", heads_per_cta=1, num_threads=256)
    assert ".reqntid 128" in p1 and ".reqntid 256" in p2
    op1, op2 = k1.meta["op"], k2.meta["op"]
    assert op2.cfg.nt == 256 and op2.cfg.nit == op1.cfg.nit // 2
    assert op2.min_blocks_per_mp == max(1, op1.min_blocks_per_mp * 128 // 256)
    monkeypatch.delenv(MR.THREADS_ENV, raising=False)
    assert MR.launch_threads() == 128
    monkeypatch.setenv(MR.THREADS_ENV, "256")
    assert MR.launch_threads() == 256
    monkeypatch.setenv(MR.THREADS_ENV, "384")
    with pytest.raises(ValueError, match=MR.THREADS_ENV):
        MR.launch_threads()
    with pytest.raises(ValueError, match="num_threads"):
        MR.ReplayTile("fp32", 128, 64, 128, 8, 16, 17, 1, num_threads=512)


def test_gdn_pf_early_rule(monkeypatch):
    """GDN's default: up to PF_EARLY_MAX_BYTES (32 MiB) of read copy per launch; the switch
    forces; a compile without the rule's answer (compile_only) has no prefetches unless forced."""
    from types import SimpleNamespace
    from replayssm_lp.pairs import parse_pair

    monkeypatch.delenv(GR.PF_EARLY_ENV, raising=False)
    qwen4b = lambda pair: SimpleNamespace(HV=32, V=128, K=128, pair=parse_pair(pair))  # noqa: E731
    assert GR.use_pf_early(qwen4b("fp32"), 16)            # 32 MiB: 0.99x, at the edge
    assert not GR.use_pf_early(qwen4b("fp32"), 17)        # b64 0.94x, b256 0.93x (call2)
    assert GR.use_pf_early(qwen4b("nvfp4/fp16sr"), 64)
    monkeypatch.setenv(GR.PF_EARLY_ENV, "1")
    assert GR.use_pf_early(qwen4b("fp32"), 512)
    monkeypatch.setenv(GR.PF_EARLY_ENV, "0")
    assert not GR.use_pf_early(qwen4b("fp32"), 1)
    monkeypatch.delenv(GR.PF_EARLY_ENV)
    assert GR._resolve("fp32", "bfloat16", 16, 32, 128, 128, 16, 17, None, None, "float32",
                       "bfloat16", "float32", "bfloat16", True, True, None, None)[0].get(
                           "pf_early") is None


def test_mamba2_pf_early_rule(monkeypatch):
    """Mamba-2's default: up to PF_EARLY_MAX_BYTES of read copy per launch; the switch forces."""
    from types import SimpleNamespace
    from replayssm_lp.pairs import parse_pair

    monkeypatch.delenv(MR.PF_EARLY_ENV, raising=False)
    super_ = lambda pair: SimpleNamespace(nheads=128, headdim=64, dstate=128,  # noqa: E731
                                          pair=parse_pair(pair))
    assert MR.use_pf_early(super_("fp32"), 1) and MR.use_pf_early(super_("fp32"), 2)
    assert not MR.use_pf_early(super_("fp32"), 4)         # 16 MiB (measured slower)
    assert MR.use_pf_early(super_("bf16/fp32"), 4) and not MR.use_pf_early(super_("bf16/fp32"), 8)
    assert MR.use_pf_early(super_("nvfp4/fp16sr"), 8)
    monkeypatch.setenv(MR.PF_EARLY_ENV, "1")
    assert MR.use_pf_early(super_("fp32"), 512)
    monkeypatch.setenv(MR.PF_EARLY_ENV, "0")
    assert not MR.use_pf_early(super_("nvfp4/fp16sr"), 1)


@pytest.mark.parametrize("mode", ["0", "1", "2"])
def test_decode_kernels_carry_the_pdl_prologue(mode, monkeypatch):
    monkeypatch.setenv(common.PDL_ENV, mode)
    want = {"0": [], "1": ["launch_dependents", "wait"], "2": ["wait", "launch_dependents"]}[mode]
    _, ptx = MR.compile_only("fp32", heads_per_cta=1)
    assert _order(ptx) == want
    _, ptx = GS.compile_only(keep_ptx=True)
    assert _order(ptx) == want
    if mode == "2":
        _, ptx = MS.compile_only(keep_ptx=True)
        assert _order(ptx) == want
        _, ptx = GR.compile_only("nvfp4/fp16sr", keep_ptx=True)
        assert _order(ptx) == want
    # the mode is part of the compile keys (a switch never reuses the other build)
    kw, key = MR._resolve("fp32", "bfloat16", "float32", 128, 64, 128, 8, 16, 17, True, False,
                          True, True, 1, True)
    assert kw["pdl"] == int(mode) and MR.Mamba2ReplayDecode(**kw).pdl == int(mode)
    assert common.PDL_ENV in MR._ENV_NAMES
    assert common.PDL_ENV in MS._ENV_NAMES and common.PDL_ENV in GS._ENV_NAMES
    assert common.PDL_ENV in GR._ENV_NAMES


@pytest.mark.parametrize("mode", ["0", "2"])
def test_verify_and_snapshot_kernels_follow_the_switch(mode, monkeypatch):
    monkeypatch.setenv(common.PDL_ENV, mode)
    want = [] if mode == "0" else ["wait", "launch_dependents"]
    _, ptx = GV.compile_only("fp32", T=2, keep_ptx=True)
    assert _order(ptx) == want
    from cute_kernels import mamba2_verify as MV
    _, ptx = MV.compile_only("fp32", T=2)
    assert _order(ptx) == want
    assert common.PDL_ENV in MV._ENV_NAMES and common.PDL_ENV in GV._ENV_NAMES
    kw, _ = SV._gdn_resolve("float32", "bfloat16", 16, 32, 128, 128, 2, None, None, "float32",
                            "bfloat16", "float32", "bfloat16", True, True, None, None)
    assert kw["pdl"] == int(mode) and SV.GDNSnapshotVerify(**kw).pdl == int(mode)
    _, ptx = SV.compile_gdn_snapshot_ptx(
        state_dtype="float32", act_dtype="bfloat16", H=16, HV=32, K=128, V=128, T=2,
        g_dtype=None, beta_dtype=None, alog_dtype="float32", a_dtype="bfloat16",
        dt_bias_dtype="float32", b_dtype="bfloat16", use_qk_l2norm=True, has_accepted=True,
        block_v=None, num_threads=None)
    assert _order(ptx) == want
    _, ptx = SV.compile_mamba2_snapshot_ptx(
        state_dtype="float32", act_dtype="bfloat16", dt_dtype="float32", nheads=128, headdim=64,
        dstate=128, ngroups=8, T=2, has_D=True, has_z=False, has_dt_bias=True, dt_softplus=True,
        has_accepted=True, block_p=None, num_threads=None, min_blocks_per_mp=None)
    assert _order(ptx) == want


def test_unset_switch_defaults(monkeypatch):
    """Unset: the decode kernels (replay, standard) use mode 2, verify and snapshot kernels 0,
    in the compile keys and in direct construction."""
    monkeypatch.delenv(common.PDL_ENV, raising=False)
    assert common.pdl_default() == 2 and common.pdl_default(verify=True) == 0
    kw, _ = MR._resolve("fp32", "bfloat16", "float32", 128, 64, 128, 8, 16, 17, True, False,
                        True, True, 1, True)
    assert kw["pdl"] == 2 and MR.Mamba2ReplayDecode(**{**kw, "pdl": None}).pdl == 2
    kw, _ = SV._gdn_resolve("float32", "bfloat16", 16, 32, 128, 128, 2, None, None, "float32",
                            "bfloat16", "float32", "bfloat16", True, True, None, None)
    assert kw["pdl"] == 0 and SV.GDNSnapshotVerify(**{**kw, "pdl": None}).pdl == 0
    _, ptx = GV.compile_only("fp32", T=2, keep_ptx=True)
    assert _order(ptx) == []
    _, ptx = GS.compile_only(keep_ptx=True)
    assert _order(ptx) == ["wait", "launch_dependents"]
    # every verify-side resolve / constructor takes the verify default, every decode one 2
    from cute_kernels import mamba2_verify as MV
    kw, _ = MV._resolve("fp32", "bfloat16", "float32", 128, 64, 128, 8, 16, 24, 8, True, False,
                        True, True, 1, True)
    assert kw["pdl"] == 0 and MV.Mamba2VerifyKernel(**{**kw, "pdl": None}).pdl == 0
    kw, _ = SV._m2_resolve("float32", "bfloat16", "float32", 128, 64, 128, 8, 2, True, False,
                           True, True, True, None, None, None)
    assert kw["pdl"] == 0 and SV.Mamba2SnapshotVerify(**{**kw, "pdl": None}).pdl == 0
    kw, _ = GV._resolve("fp32", "bfloat16", 16, 32, 128, 128, 16, 24, 2, None, None, "float32",
                        "bfloat16", "float32", "bfloat16", True, True, None)
    assert kw["pdl"] == 0 and GV.GDNVerifyKernel(**{**kw, "pdl": None}).pdl == 0
    kw, _ = MS._resolve("float32", "bfloat16", "float32", 128, 64, 128, 8, True, False, True, True,
                        True, None, None, None)
    assert kw["pdl"] == 2 and MS.Mamba2StandardDecode(**{**kw, "pdl": None}).pdl == 2
    monkeypatch.setenv(common.PDL_ENV, "bogus")          # not a mode: the defaults
    assert common.pdl_default() == 2 and common.pdl_default(verify=True) == 0
