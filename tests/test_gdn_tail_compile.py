"""Compile-only checks of the GDN v2 decode's step tail for Hopper (sm_90a) on a machine without a
GPU (``cute_kernels.gdn_replay``, ``TAIL_ENV``): the default build (unset = 3) appends the row's
key with one 8-byte store per lane of the q / k warp from the bits it already holds (the build
without it, 0, reloads k and stores it 2 bytes per thread), and reads an opaque zero from shared
memory into the publish check after the CTA's last barrier. Same layer as
``test_gdn_kernels_compile.py`` (H, HV, K, V = 2, 4, 128, 128, L = 16, bf16 activations). Skips
visibly when nvidia-cutlass-dsl (or apache-tvm-ffi) is missing.
"""
import collections
import os
import re

os.environ.setdefault("CUTE_DSL_ARCH", "sm_90a")  # before cutlass is imported

import pytest  # noqa: E402

cutlass = pytest.importorskip("cutlass", reason="nvidia-cutlass-dsl is not installed")
pytest.importorskip("tvm_ffi", reason="apache-tvm-ffi is not installed (tensor-free compile)")

from cute_kernels import common  # noqa: E402
from cute_kernels import gdn_replay as GR  # noqa: E402

H, HV, K, V, L = 2, 4, 128, 128, 16


def _mem_ops(ptx: str) -> collections.Counter:
    """Global / shared load and store instructions of the PTX by full opcode."""
    return collections.Counter(re.findall(r"^\s*(?:@!?%p\d+\s+)?((?:ld|st)\.(?:global|shared)"
                                          r"[\w.]*)", ptx, re.M))


@pytest.mark.parametrize("pair", ["fp8/fp32", "nvfp4/fp16sr"])
def test_gdn_replay_tail_compiles(pair, monkeypatch):
    """Unset TAIL_ENV against 0, one build each: 8 fewer 2-byte stores and at least as many fewer
    2-byte loads (the key append's 8-element copy, threads 0..K/8-1), one 8-byte global
    store more (the q / k warp's K / 32 elements per lane), one shared store + load more (the
    opaque zero), no local memory."""
    ops = {}
    for tail in ("0", None):
        if tail is None:
            monkeypatch.delenv(GR.TAIL_ENV, raising=False)
        else:
            monkeypatch.setenv(GR.TAIL_ENV, tail)
        kern, ptx = GR.compile_only(pair, "bfloat16", H, HV, K, V, L, keep_ptx=True)
        assert kern.meta["tail"] == ((False, False) if tail else (True, True))
        ops[tail] = _mem_ops(ptx)
        st = common.ptx_stats(ptx)
        assert st["ld.local"] == 0 and st["st.local"] == 0, (tail, st)
    old, new = ops["0"], ops[None]
    assert old["st.global.b16"] - new["st.global.b16"] == 8, (old, new)
    assert old["ld.global.b16"] - new["ld.global.b16"] >= 8, (old, new)
    assert new["st.global.v2.b32"] == old["st.global.v2.b32"] + 1, (old, new)
    assert new["st.shared.b32"] == old["st.shared.b32"] + 1, (old, new)
    assert new["ld.shared.b32"] == old["ld.shared.b32"] + 1, (old, new)
