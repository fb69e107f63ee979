"""A cache's ``philox_rounds`` (the SR generator's round count, 1-16, default 10; CPU side):
the reference draws its SR words with it, the cache validates and keeps it, and every SR kernel
family builds with it baked in (the GPU bit checks: tests/test_gpu_ops.py
``test_replay_step_with_philox_rounds_matches_reference``)."""
import copy
import io
import os
import re

import pytest
import torch

import replayssm_lp as R
from replayssm_lp import formats as F

M = 0xFFFFFFFF


def _philox_py(ctr, key, rounds):
    """Philox-4x32 on Python ints, written from the Random123 definition (independent of
    ``formats.philox4x32``)."""
    c, k = list(ctr), list(key)
    for r in range(rounds):
        if r:
            k = [(k[0] + 0x9E3779B9) & M, (k[1] + 0xBB67AE85) & M]
        p0, p1 = c[0] * 0xD2511F53, c[2] * 0xCD9E8D57
        c = [((p1 >> 32) ^ c[1] ^ k[0]) & M, p1 & M, ((p0 >> 32) ^ c[3] ^ k[1]) & M, p0 & M]
    return c


@pytest.mark.parametrize("rounds", [1, 4, 7, 10, 16])
def test_philox_rounds_reference_matches_definition(rounds, seed):
    g = torch.Generator().manual_seed(seed)
    ctr = torch.randint(0, 2**32, (6, 4), generator=g, dtype=torch.int64)
    key = [int(v) for v in torch.randint(0, 2**32, (2,), generator=g, dtype=torch.int64)]
    out = F.philox4x32(ctr, key[0], key[1], rounds)
    for i in range(6):
        assert out[i].tolist() == _philox_py(ctr[i].tolist(), key, rounds), (rounds, i)


def test_sr_words_take_the_rounds(seed):
    s = int(torch.randint(0, 2**62, (1,)))
    slots, gen = torch.tensor([2, 5]), torch.tensor([0, 3])
    w10 = F.sr_words(s, slots, 2, 4, 16, gen, 0)
    assert torch.equal(w10, F.sr_words(s, slots, 2, 4, 16, gen, 0, F.PHILOX_ROUNDS))
    w7 = F.sr_words(s, slots, 2, 4, 16, gen, 0, 7)
    assert (w7 != w10).float().mean() > 0.99
    e = 21                                       # element e of (slot 5, head 1)
    ref = _philox_py([e >> 2, 1, 5, 3], [s & M, s >> 32], 7)[e & 3]
    assert int(w7[1, 1, e // 16, e % 16]) == ref


def test_cache_philox_rounds_validated_kept_and_used(seed):
    H, P, N, G = 2, 8, 32, 1
    for bad, err in ((0, ValueError), (17, ValueError), (True, TypeError), (7.0, TypeError),
                     ("7", TypeError)):
        with pytest.raises(err, match="philox_rounds must be"):
            R.Mamba2ReplayCache(4, H, P, N, G, precision="nvfp4/fp16sr", philox_rounds=bad)
        with pytest.raises(err, match="philox_rounds must be"):
            R.GDNReplayCache(4, 1, 2, 32, 16, precision="fp16sr", philox_rounds=bad)
    c7 = R.Mamba2ReplayCache(4, H, P, N, G, precision="nvfp4/fp16sr", seed=5, philox_rounds=7)
    c10 = R.Mamba2ReplayCache(4, H, P, N, G, precision="nvfp4/fp16sr", seed=5)
    assert c7.philox_rounds == 7 and c10.philox_rounds == F.PHILOX_ROUNDS
    assert "philox_rounds=7" in repr(c7) and "philox_rounds" not in repr(c10)
    assert copy.deepcopy(c7).philox_rounds == 7
    buf = io.BytesIO()
    torch.save(c7, buf)
    buf.seek(0)
    assert torch.load(buf, weights_only=False).philox_rounds == 7
    with pytest.raises(AttributeError):           # the launches' kernels bake it in
        c7.philox_rounds = 4
    old = c10.__dict__.copy()                      # pickled before the option existed
    del old["_philox_rounds"]
    fresh = R.Mamba2ReplayCache.__new__(R.Mamba2ReplayCache)
    fresh.__setstate__(old)
    assert fresh.philox_rounds == F.PHILOX_ROUNDS
    # the reference's SR encode draws its words with the cache's rounds: the fp16 SR checkpoint
    # (hi) differs, the nvfp4 RN read copy (lo) does not
    S = torch.randn(2, H, P, N, generator=torch.Generator().manual_seed(seed))
    for c in (c7, c10):
        c.init_from_state([1, 3], S, backend="torch")
    assert not torch.equal(c7.hi.data, c10.hi.data)
    assert torch.equal(c7.lo.data, c10.lo.data)
    words = F.sr_words(c7.seed, torch.tensor([1, 3]), H, P, N, torch.zeros(2, dtype=torch.int64),
                       0, 7)
    assert torch.equal(c7.hi.data[[1, 3]], F.encode(S, "fp16", "sr", words).data)


def test_blocks_and_patch_pass_the_rounds():
    from replayssm_lp.nn import GDNDecodeBlock, Mamba2DecodeBlock
    assert Mamba2DecodeBlock(2, 8, 32, precision="fp16sr", philox_rounds=6).cache.philox_rounds == 6
    assert GDNDecodeBlock(1, 2, 32, 16, precision="fp16sr",
                          philox_rounds=12).cache.philox_rounds == 12
    pytest.importorskip("transformers")
    from replayssm_lp.integrations.transformers import patch
    with pytest.raises(ValueError, match="philox_rounds must be"):
        patch(torch.nn.Linear(2, 2), philox_rounds=0)


def test_builds_key_the_rounds_only_with_sr():
    from cute_kernels import common
    assert common.philox_rounds_for("nvfp4/fp16sr", 7) == 7
    assert common.philox_rounds_for("nvfp4/fp16sr", None) == F.PHILOX_ROUNDS
    for rn_pair in ("fp32", "fp8/fp32", "bf16/fp32", "nvfp4/fp32", "fp8rn"):
        assert common.philox_rounds_for(rn_pair, 7) == F.PHILOX_ROUNDS, rn_pair
    with pytest.raises(ValueError, match="philox_rounds must be"):
        common.philox_rounds_for("fp16sr", 20)
    from cute_kernels import state_codec as SC
    with pytest.raises(ValueError, match="philox_rounds must be"):
        SC._enc_key("fp16", "sr", 0, 8, 32, 0)
    assert SC._enc_key("fp16", "rn", 0, 8, 32, 0) == SC._enc_key("fp16", "rn", 0, 8, 32)


def _mul_wide(ptx):
    return len(re.findall(r"mul\.wide\.u32", ptx))


@pytest.mark.skipif(os.environ.get("CUTE_DSL_ARCH") != "sm_90a" and not torch.cuda.is_available(),
                    reason="CuTe compile needs CUTE_DSL_ARCH=sm_90a (CPU) or a GPU")
@pytest.mark.parametrize("family", ["codec", "m2_decode", "m2_split_flush", "m2_verify",
                                    "gdn_decode", "gdn_split_flush", "gdn_verify"])
def test_every_sr_kernel_family_bakes_the_rounds(family):
    """Each family's SR build compiles for sm_90a with 7 rounds, and its PTX has fewer Philox
    multiplies than the 10-round build (the rounds reach the generator, unrolled or rolled);
    RN builds do not depend on the rounds."""
    from cute_kernels import common
    from cute_kernels import gdn_replay as GR
    from cute_kernels import gdn_verify as GV
    from cute_kernels import mamba2_replay as MR
    from cute_kernels import mamba2_verify as MV
    from cute_kernels import state_codec as SC

    def build(rounds, pair="nvfp4/fp16sr"):
        if family == "codec":
            return SC.compile_only("encode", "fp16", 8, 32, "sr", 0, philox_rounds=rounds)[1]
        if family == "m2_decode":
            return MR.compile_only(pair, H=8, P=16, N=32, G=1, heads_per_cta=1,
                                   philox_rounds=rounds)[1]
        if family == "m2_split_flush":
            with common.dump_ptx() as d:
                MR.compile_mamba2_replay(pair, "bfloat16", "float32", 8, 16, 32, 1, 16, 17, True,
                                         False, True, True, 1, True, row_order=True, rows=2,
                                         flush_positions=4, dump=d, philox_rounds=rounds)
                ptx = d.read()
                d.cleanup()
            return ptx
        if family == "m2_verify":
            return MV.compile_only(pair, H=8, P=16, N=32, G=1, T=2, philox_rounds=rounds)[1]
        if family == "gdn_decode":
            return GR.compile_only(pair, H=1, HV=2, keep_ptx=True, philox_rounds=rounds)[1]
        if family == "gdn_split_flush":
            return GR.compile_only(pair, H=1, HV=2, keep_ptx=True, row_order=True, rows=2,
                                   philox_rounds=rounds)[1]
        return GV.compile_only(pair, H=1, HV=2, T=2, keep_ptx=True, philox_rounds=rounds)[1]

    p7, p10 = build(7), build(10)
    assert p7 and p10
    print(family, _mul_wide(p7), _mul_wide(p10))
    assert _mul_wide(p7) < _mul_wide(p10), (family, _mul_wide(p7), _mul_wide(p10))
    if family != "codec":
        rn = "fp8/fp32"
        assert re.sub(r"kernel_\w+", "K", build(7, rn)) == re.sub(r"kernel_\w+", "K", build(10, rn))


def test_bench_philox_rounds_option(tmp_path, monkeypatch):
    """``replayssm-bench spec --philox-rounds`` (or its variable) reaches the caches and the JSON;
    a bad value stops the command naming the option / variable."""
    import json

    from bench.__main__ import main
    base = ["spec", "--tiny", "--device", "cpu", "--pairs", "fp16sr", "--batches", "2", "--T", "2",
            "--L", "4", "--replays", "1", "--no-plots", "--out", str(tmp_path)]
    with pytest.raises(SystemExit, match="--philox-rounds must be in 1..16"):
        main(base + ["--philox-rounds", "17"])
    monkeypatch.setenv("REPLAYSSM_BENCH_PHILOX_ROUNDS", "seven")
    with pytest.raises(SystemExit, match="REPLAYSSM_BENCH_PHILOX_ROUNDS must be an integer"):
        main(base)
    monkeypatch.setenv("REPLAYSSM_BENCH_PHILOX_ROUNDS", "5")
    assert main(base) == 0
    assert json.load(open(tmp_path / "spec.json"))["meta"]["philox_rounds"] == 5
    assert main(base + ["--philox-rounds", "3"]) == 0          # the option wins
    assert json.load(open(tmp_path / "spec.json"))["meta"]["philox_rounds"] == 3
