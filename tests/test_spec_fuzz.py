"""Speculative-decoding fuzz on CPU (torch backend, tiny shapes): random T per call, random
acceptance 0..T, staggered rows, pad rows, scattered slots; the accepted-stream oracle (fp32 pair)
and the CPU twin (every pair listed). The fp32 Mamba-2 run covers the full 1000 steps; the others
run fewer to keep the file under a minute. The GPU variant (backend="cute", every pair) is in
tests/test_gpu_spec.py. Driver: tests/spec_fuzz.py."""
import pytest
import torch

from .spec_fuzz import FuzzMismatch, corrupt_live_entry, spec_fuzz


@pytest.fixture(autouse=True)
def one_cpu_thread():
    # tiny tensors: torch's intra-op threads cost ~70x more than the work on a 2-core runner
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("kind,steps", [("mamba2", 1000), ("gdn", 300)])
def test_fp32_pair_matches_accepted_stream(kind, steps, seed):
    r = spec_fuzz(kind, "fp32", steps, seed=seed)
    assert r.steps == steps
    assert r.flush_rows > steps // 4, r            # flushes happen at their natural rate
    assert 0 < r.accepted_tokens < r.verified_tokens, r
    assert r.worst_exact_rel <= 5e-5 and r.final_state_rel <= 5e-5, (seed, r)


@pytest.mark.parametrize("pair", ["nvfp4/fp16sr", "fp8/fp32", "fp8sr", "bf16sr"])
@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_other_pairs_match_the_twin(kind, pair, seed):
    r = spec_fuzz(kind, pair, 60, seed=seed)
    assert r.steps == 60 and r.flush_rows > 0, r


@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_more_drafts_than_buffer(kind, seed):
    # max_draft > L: every verify with T > L flushes first; bf16 activations
    r = spec_fuzz(kind, "fp32", 80, L=2, max_draft=5, act=torch.bfloat16, seed=seed, exact_rel=1e-2)
    assert r.flush_rows > 40, r


@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_teeth_twin_catches_one_corrupted_buffer_entry(kind, seed):
    hook = corrupt_live_entry(at_step=5, both=False)
    with pytest.raises(FuzzMismatch, match="buffer"):
        spec_fuzz(kind, "fp32", 60, seed=seed, corrupt=hook)
    assert hook.state["done"]


@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_teeth_accepted_stream_catches_a_corruption_the_twin_shares(kind, seed):
    # the twin gets the same damage, so only the standard decode of the accepted stream can see it
    hook = corrupt_live_entry(at_step=5, both=True)
    with pytest.raises(FuzzMismatch, match="accepted stream"):
        spec_fuzz(kind, "fp32", 80, seed=seed, corrupt=hook)
    assert hook.state["done"]


def test_teeth_pad_row_write_is_caught(seed, monkeypatch):
    # a verify that writes the outputs of pad rows must fail the fuzz
    import replayssm_lp as R
    real = R.mamba2_verify

    def leaky(cache, x, *a, out=None, **kw):
        res = real(cache, x, *a, out=out, **kw)
        out.nan_to_num_(0.0)
        return res
    monkeypatch.setattr(R, "mamba2_verify", leaky)
    with pytest.raises(FuzzMismatch, match="pad row"):
        spec_fuzz("mamba2", "fp32", 30, seed=seed)
