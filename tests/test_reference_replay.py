"""ReplaySSM reference (fp32 pair) against the exact fp64 recurrence; every pair dispatches."""
import pytest
import torch

from replayssm_lp import precision_pairs

from .harness import gdn_trace, mamba2_trace


@pytest.mark.parametrize("L", [1, 4, 16])
@pytest.mark.parametrize("T", [0, 1, 2, 4, 8])
def test_mamba2_fp32_pair_equals_exact_recurrence(L, T, seed):
    steps = 3 * L + 4
    out_err, state_err, cache = mamba2_trace(L, T, steps)
    assert out_err <= 1e-5, (seed, out_err)
    assert state_err <= 1e-5, (seed, state_err)
    assert int(cache.flush_count.max()) >= 2  # flushes happened


@pytest.mark.parametrize("L", [1, 4, 16])
@pytest.mark.parametrize("T", [0, 1, 2, 4, 8])
def test_gdn_fp32_pair_equals_exact_recurrence(L, T, seed):
    steps = 3 * L + 4
    out_err, state_err, cache = gdn_trace(L, T, steps, raw_gates=(T % 2 == 0))
    assert out_err <= 1e-5, (seed, out_err)
    assert state_err <= 1e-5, (seed, state_err)


# loose sanity bounds: the read copy's format sets the output error, the recurrence format the state's.
# fp8 outputs: the worst step of a 10-step Mamba-2 trace is heavy-tailed (a step with one or two
# valid rows and a small output norm): 1500 seeds per fp8 pair gave p99.9 0.07 (RN) / 0.10 (SR),
# max 0.125 / 0.151, and CI seed 1843787251 0.181 for fp8sr/fp32 (GDN: max 0.05) -- 0.25 = two
# e4m3 ulps of relative error
_OUT_TOL = {"fp32": 1e-5, "fp16": 3e-3, "bf16": 2e-2, "fp8": 0.25, "nvfp4": 0.35}
_STATE_TOL = {"fp32": 1e-5, "fp16": 3e-3, "bf16": 2e-2, "fp8": 0.12, "nvfp4": 0.35}


@pytest.mark.parametrize("name", list(precision_pairs(include_extra=True)))
@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_every_pair_dispatches_on_torch(name, kind, seed):
    pair = precision_pairs(include_extra=True)[name]
    trace = mamba2_trace if kind == "mamba2" else gdn_trace
    out_err, state_err, cache = trace(4, 2, 10, precision=name)
    assert out_err < _OUT_TOL[pair.read_fmt] + _OUT_TOL[pair.rec_fmt], (name, out_err)
    assert state_err < _STATE_TOL[pair.rec_fmt], (name, state_err)
    assert cache.pair.name == name


@pytest.mark.parametrize("kind", ["mamba2", "gdn"])
def test_bf16_activations(kind, seed):
    """bf16 activations against the exact recurrence of the same (bf16-rounded) inputs: the
    outputs' bf16 rounding (<= 2^-8 relative) and fp32 arithmetic; 151 seeds: at most 0.0033 /
    2.3e-7. (Against the unrounded inputs it measured input rounding: CI seed 3540864009 gave
    0.0302 over the former 3e-2 bound.)"""
    trace = mamba2_trace if kind == "mamba2" else gdn_trace
    out_err, state_err, _ = trace(4, 0, 12, act=torch.bfloat16)
    assert out_err < 1e-2 and state_err < 1e-4, (seed, out_err, state_err)
