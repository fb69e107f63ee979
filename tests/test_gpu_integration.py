"""transformers integration on an sm_90+ GPU with backend="cute": tiny random-initialised models
(no downloads) of Mamba2, NemotronH (Mamba-2 + attention), Qwen3.5 and Qwen3-Next (GDN +
attention), fp32 weights and activations.

(a) the fp32 pair reproduces the unpatched model over >= 3L generated tokens (greedy tokens
    identical, logits within fp32 rounding; an nvfp4 read copy is a negative control);
(b) every precision pair generates;
(c) a CUDA-graph decode loop (one captured decode step, replayed for >= 3L steps) reproduces the
    eager decode loop of the same patched model on the same StaticCache: the same kernels on the
    same inputs, and SR bits come from the seed and the device-side flush counters, so every pair
    is expected bit for bit (asserted: fp32 rounding for the fp32 pair, 1% of the logit scale for
    the others; the share of bit-identical logits is printed).

The GPU machine ships transformers 5.17 (too old); stage 5.24 first (tools/stage_transformers.sh
packs .device/hf/transformers.tar.xz):

    mkdir -p /tmp/hf && tar xJf .device/hf/transformers.tar.xz -C /tmp/hf
    PYTHONPATH=/tmp/hf:$PYTHONPATH python -m pytest -q -rs -s tests/test_gpu_integration.py

(``REPLAYSSM_TEST_BUDGET_S=200`` skips the tests that would start after 200 s.)
"""
import os
import sys
import time

import pytest
import torch

from .conftest import requires_sm90

pytestmark = requires_sm90

transformers = pytest.importorskip("transformers")

from packaging.version import Version  # noqa: E402

from replayssm_lp.integrations import transformers as rt  # noqa: E402

if Version(transformers.__version__) < Version(rt.MIN_TRANSFORMERS_VERSION):
    pytest.skip(f"transformers {transformers.__version__} (from {transformers.__file__}) is older "
                f"than {rt.MIN_TRANSFORMERS_VERSION}: stage 5.24 with tools/stage_transformers.sh "
                f"and put it first on PYTHONPATH (see this file's docstring)",
                allow_module_level=True)

import replayssm_lp  # noqa: E402
from replayssm_lp.integrations.transformers import (  # noqa: E402
    graph_generate, patch, unpatch)

needs_graph_path = pytest.mark.skipif(
    Version(transformers.__version__) < Version("5.24"),
    reason=f"the CUDA-graph decode path is written for transformers >= 5.24, this is "
           f"{transformers.__version__}")

L = 4                  # buffer length
N_NEW = 3 * L + 2      # generated tokens: >= 3L decode steps, >= 3 flushes per row
VOCAB = 128

# Mamba-2 mixers share one shape (H8 P64 N128 G2) and the GDN layers another (H2 HV4 K=V=128, the
# small shape of tests/gpu_scripts/check_gdn.py), so the kernels compile once per pair for all
# models of a kind.
_SPECS = {
    "mamba2": ("Mamba2Config", "Mamba2ForCausalLM", dict(
        hidden_size=256, num_hidden_layers=2, num_heads=8, head_dim=64, expand=2, state_size=128,
        n_groups=2, conv_kernel=4, chunk_size=16)),
    "nemotron_h": ("NemotronHConfig", "NemotronHForCausalLM", dict(
        hidden_size=256, num_hidden_layers=3, layers_block_type=["mamba", "attention", "mamba"],
        mamba_num_heads=8, mamba_head_dim=64, ssm_state_size=128, n_groups=2,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, intermediate_size=256,
        chunk_size=16)),
    "qwen3_5": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", dict(
        hidden_size=128, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, intermediate_size=256,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=128,
        linear_value_head_dim=128)),
    "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM", dict(
        hidden_size=128, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, intermediate_size=256,
        moe_intermediate_size=64, num_experts=4, num_experts_per_tok=2,
        shared_expert_intermediate_size=64, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=128, linear_value_head_dim=128)),
}
# from_config arguments: the MoE block with batched_mm (any dtype, no host sync, capturable)
_FROM_CONFIG = {"qwen3_next": dict(experts_implementation="batched_mm")}
FAMILIES = list(_SPECS)
PAIRS = list(replayssm_lp.precision_pairs())


_START = time.monotonic()
_BUDGET_S = float(os.environ.get("REPLAYSSM_TEST_BUDGET_S", "0") or 0)


@pytest.fixture(autouse=True)
def _time_budget():
    """REPLAYSSM_TEST_BUDGET_S=<seconds>: tests that would start after that many seconds (from
    collection) skip with the reason, so a time-limited run still ends with a summary (the most
    important tests come first; the kernels compile on first use, several seconds per pair)."""
    if _BUDGET_S and time.monotonic() - _START > _BUDGET_S:
        pytest.skip(f"REPLAYSSM_TEST_BUDGET_S={_BUDGET_S:g} s spent")


@pytest.fixture(autouse=True, scope="module")
def _exact_fp32():
    """fp32 means fp32: no TF32 in cuBLAS / cuDNN (the conv of the decode step runs in cuDNN), so
    two runs that differ by fp32 rounding do not get amplified by a TF32 rounding flip."""
    from transformers.utils import logging as hf_logging
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
             hf_logging.get_verbosity())
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    hf_logging.set_verbosity_error()
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
    hf_logging.set_verbosity(saved[2])


_PEERS = ("mamba_ssm", "fla", "causal_conv1d")


def _import_model_classes():
    """Import the modeling modules with HF's pure-torch fallbacks for the peer kernels (mamba_ssm,
    fla, causal_conv1d; HF picks them when its modeling module is imported), so the unpatched
    reference and the prefill do not depend on those packages' Triton kernels working with this
    machine's Triton. REPLAYSSM_HF_PEER_KERNELS=1 keeps whatever is installed."""
    names = [v[1] for v in _SPECS.values() if hasattr(transformers, v[0])]
    if os.environ.get("REPLAYSSM_HF_PEER_KERNELS") == "1":
        return [getattr(transformers, n) for n in names]
    saved = {m: sys.modules.get(m) for m in _PEERS}
    try:
        for m in _PEERS:
            sys.modules[m] = None          # import -> ImportError -> HF's torch path
        return [getattr(transformers, n) for n in names]
    finally:
        for m, v in saved.items():
            if v is None:
                sys.modules.pop(m, None)
            else:
                sys.modules[m] = v


@pytest.fixture(scope="module")
def models():
    _import_model_classes()
    return {}


def _model(models, family):
    if family not in models:
        cfg_name, model_name, kw = _SPECS[family]
        if not hasattr(transformers, cfg_name):
            pytest.skip(f"transformers {transformers.__version__} has no {model_name}")
        torch.manual_seed(0)
        cfg = getattr(transformers, cfg_name)(vocab_size=VOCAB, initializer_range=0.1, **kw)
        cls = getattr(transformers, model_name)
        m = cls._from_config(cfg, **_FROM_CONFIG.get(family, {})).to("cuda").eval()
        m.generation_config.eos_token_id = None     # always generate the full length
        m.generation_config.pad_token_id = 0
        models[family] = m
    return models[family]


def _prompt():
    # no token 0 (the pad id): generate() would mask it out, the StaticCache loop does not
    g = torch.Generator().manual_seed(1)
    return torch.randint(1, VOCAB, (2, 6), generator=g).cuda()


def _generate(model, n):
    with torch.no_grad():
        out = model.generate(_prompt(), max_new_tokens=n, do_sample=False, output_logits=True,
                             return_dict_in_generate=True)
    return out.sequences, torch.stack(out.logits).float()


def _same_inputs(seq_a, seq_b, n):
    """How many leading logits of two greedy runs were computed from the same tokens."""
    plen = seq_a.shape[1] - n
    diff = (seq_a[:, plen:] != seq_b[:, plen:]).any(0).nonzero()
    return n if diff.numel() == 0 else int(diff[0]) + 1


def _tol(ref):
    return 3e-5 * max(1.0, ref.abs().max().item())


def _err(a, b):
    return (a.float() - b.float()).abs().max().item()


# ---------------------------------------------------------------------------------------------
# (a) fp32 pair == unpatched model
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("family", FAMILIES)
def test_fp32_pair_matches_unpatched_on_cute(models, family):
    model = _model(models, family)
    seq0, log0 = _generate(model, N_NEW)
    handle = patch(model, precision="fp32", buffer_len=L, backend="cute")
    try:
        seq1, log1 = _generate(model, N_NEW)
        stats = handle.stats()
        flushes = {n: int(b.cache.flush_count[:2].min()) for n, b in handle.blocks().items()}
    finally:
        unpatch(model)
    assert torch.equal(seq0, seq1), "greedy tokens differ"
    assert _err(log1, log0) <= _tol(log0), (_err(log1, log0), _tol(log0))
    for name, c in stats.items():
        assert c["prefill"] == 1 and c["decode"] == N_NEW - 1 and c["fallback"] == 0, (name, c)
    assert all(f >= 4 for f in flushes.values()), flushes        # init + >= 3 flushes


# ---------------------------------------------------------------------------------------------
# (c) CUDA-graph decode loop == eager decode loop
# ---------------------------------------------------------------------------------------------
@needs_graph_path
@pytest.mark.parametrize("pair", ["fp32", "nvfp4/fp16sr", "nvfp4/fp8sr", "fp8/fp32", "bf16sr"])
@pytest.mark.parametrize("family", FAMILIES)
def test_cuda_graph_decode_loop_matches_eager(models, family, pair):
    model = _model(models, family)
    prompt = _prompt()
    handle = patch(model, precision=pair, buffer_len=L, backend="cute")
    try:
        seq_e, log_e = graph_generate(model, prompt, N_NEW, cuda_graph=False)
        seq_g, log_g = graph_generate(model, prompt, N_NEW, cuda_graph=True)
        stats = handle.stats()
    finally:
        unpatch(model)
    torch.cuda.synchronize()
    for name, c in stats.items():
        # eager run: N_NEW - 1 decode steps; graph run: 1 eager warm-up step + 1 capture
        assert c["decode"] == N_NEW and c["captured"] == 1 and c["fallback"] == 0, (name, c)
    same = (log_g == log_e).float().mean().item()
    print(f"{family} {pair}: graph vs eager max |diff| {_err(log_g, log_e):.3g}, "
          f"bit-identical logits {100 * same:.1f}%")
    assert torch.isfinite(log_g).all()
    # expected bit for bit; asserted: fp32 rounding for the fp32 pair, 1% of the logit scale for
    # the others (should a library GEMM round differently inside the capture, a last-bit change of
    # a flush input can move one element of a low-precision copy by one unit)
    tol = _tol(log_e) if pair == "fp32" else 1e-2 * max(1.0, log_e.abs().max().item())
    assert _err(log_g, log_e) <= tol, (_err(log_g, log_e), tol)
    if pair == "fp32":
        assert torch.equal(seq_g, seq_e)
        # and the graph run is the unpatched model's greedy decode
        seq0, log0 = _generate(model, N_NEW)
        assert torch.equal(seq_g, seq0)
        assert _err(log_g, log0) <= _tol(log0), (_err(log_g, log0), _tol(log0))


@needs_graph_path
def test_graph_step_replays_in_place(models):
    """GraphDecodeStep by hand: the README recipe (prefill, first call = eager warm-up + capture,
    later calls = replays of one graph) and its refusals."""
    model = _model(models, "qwen3_5")
    prompt = _prompt()
    handle = patch(model, precision="nvfp4/fp16sr", buffer_len=L, backend="cute")
    try:
        cache = transformers.StaticCache(config=model.config, max_cache_len=prompt.shape[1] + 8)
        with torch.no_grad():
            out = model(input_ids=prompt, cache=cache, use_cache=True)
        step = handle.graph_decode_step(cache)
        tok = out.logits[:, -1:].argmax(-1)
        for i in range(6):
            logits = step(tok)
            tok = logits.argmax(-1, keepdim=True)
        assert step.captured and step.replays == 5
        assert logits.data_ptr() == step.static_logits.data_ptr()
        with pytest.raises(ValueError, match="captured for input_ids"):
            step(torch.zeros(1, 1, dtype=torch.long, device="cuda"))
        # a dynamic (growing) attention cache cannot be captured: clear refusal
        dyn = transformers.DynamicCache(config=model.config)
        with torch.no_grad():
            model(input_ids=prompt, cache=dyn, use_cache=True)
            model(input_ids=tok, cache=dyn, use_cache=True)
        with pytest.raises(RuntimeError, match="StaticCache"):
            handle.prepare_capture(dyn)
    finally:
        unpatch(model)


@needs_graph_path
def test_torch_backend_is_refused_for_capture(models):
    model = _model(models, "mamba2")
    handle = patch(model, precision="fp32", buffer_len=L, backend="torch")
    try:
        with pytest.raises(RuntimeError, match="backend='torch'"):
            graph_generate(model, _prompt(), 3, cuda_graph=True)
    finally:
        unpatch(model)


# ---------------------------------------------------------------------------------------------
# replayssm_lp.nn blocks in a hand-written CUDA-graph step
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pair", ["fp32", "nvfp4/fp16sr"])
def test_nn_block_cuda_graph_loop(pair):
    from replayssm_lp.nn import Mamba2DecodeBlock
    H, P, N, G, B = 8, 64, 128, 2, 4
    gen = torch.Generator(device="cuda").manual_seed(0)
    steps = 3 * L + 1
    xs = torch.randn(steps, B, H, P, device="cuda", generator=gen).bfloat16()
    dts = torch.randn(steps, B, H, device="cuda", generator=gen)
    Bs = torch.randn(steps, B, G, N, device="cuda", generator=gen).bfloat16()
    Cs = torch.randn(steps, B, G, N, device="cuda", generator=gen).bfloat16()
    A = -torch.rand(H, device="cuda") - 0.5
    D, dt_bias = torch.ones(H, device="cuda"), torch.zeros(H, device="cuda")
    S0 = torch.randn(B, H, P, N, device="cuda", generator=gen) * 0.1

    def block():
        blk = Mamba2DecodeBlock(H, P, N, G, precision=pair, buffer_len=L, num_slots=B,
                                act_dtype=torch.bfloat16, device="cuda", backend="cute")
        blk.prefill(list(range(B)), S0)
        return blk

    eager_blk = block()
    eager = [eager_blk(xs[i], dts[i], A, Bs[i], Cs[i], D=D, dt_bias=dt_bias).clone()
             for i in range(steps)]
    blk = block()
    x, dt, Bt, Ct = xs[0].clone(), dts[0].clone(), Bs[0].clone(), Cs[0].clone()
    out = torch.empty_like(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):                    # warm-up = step 0, compiles the kernel
        blk(x, dt, A, Bt, Ct, D=D, dt_bias=dt_bias, out=out)
    torch.cuda.current_stream().wait_stream(s)    # the warm-up's out before reading it here
    got = [out.clone()]
    s.wait_stream(torch.cuda.current_stream())    # and the clone before the capture on s
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        blk(x, dt, A, Bt, Ct, D=D, dt_bias=dt_bias, out=out)
    torch.cuda.current_stream().wait_stream(s)
    for i in range(1, steps):
        x.copy_(xs[i]); dt.copy_(dts[i]); Bt.copy_(Bs[i]); Ct.copy_(Cs[i])
        g.replay()
        got.append(out.clone())
    torch.cuda.synchronize()
    for i, (a, b) in enumerate(zip(got, eager)):
        assert torch.equal(a, b), (i, _err(a, b))
    assert torch.equal(blk.materialize(list(range(B))), eager_blk.materialize(list(range(B))))


@pytest.mark.parametrize("family", ["mamba2", "qwen3_5"])
def test_nvfp4_read_copy_is_visible_on_cute(models, family):
    """Negative control: the tolerance of the fp32 test is tight enough to see an nvfp4 read copy."""
    model = _model(models, family)
    _, log0 = _generate(model, N_NEW)
    patch(model, precision="nvfp4/fp32", buffer_len=L, backend="cute")
    try:
        _, log1 = _generate(model, N_NEW)
    finally:
        unpatch(model)
    assert _err(log1, log0) > _tol(log0)


# ---------------------------------------------------------------------------------------------
# (b) every pair generates
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pair", PAIRS)
def test_every_pair_generates_on_cute(models, pair):
    n = L + 3                                            # includes a flush
    for family in FAMILIES:
        if not hasattr(transformers, _SPECS[family][1]):
            continue
        model = _model(models, family)
        if (family, n) not in models:
            models[(family, n)] = _generate(model, n)
        seq0, log0 = models[(family, n)]
        handle = patch(model, precision=pair, buffer_len=L, backend="cute")
        try:
            seq, logits = _generate(model, n)
            stats = handle.stats()
        finally:
            unpatch(model)
        assert seq.shape == seq0.shape and torch.isfinite(logits).all(), (family, pair)
        assert all(c["decode"] == n - 1 for c in stats.values()), (family, pair, stats)
        # loose, over the steps whose inputs are still the same tokens (a low-precision state
        # may flip a greedy token of a random model; after that the sequences differ)
        k = _same_inputs(seq0, seq, log0.shape[0])
        assert (logits[:k] - log0[:k]).abs().max() < 0.5 * log0.abs().max() + 1e-3, (family, pair)
