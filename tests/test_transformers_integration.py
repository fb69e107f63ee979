"""replayssm_lp.integrations.transformers on tiny random-initialised models (no downloads), CPU,
backend="torch": the fp32 pair reproduces the unpatched model, every pair generates, unpatch
restores, unsupported models / versions are refused clearly."""
import inspect

import pytest
import torch

transformers = pytest.importorskip("transformers")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

import replayssm_lp  # noqa: E402
from replayssm_lp.integrations import transformers as rt  # noqa: E402
from replayssm_lp.integrations.transformers import (  # noqa: E402
    UnsupportedModelError, patch, unpatch)


L = 4          # buffer length used throughout
VOCAB = 64

# family -> (config class, model class, config kwargs); built only when the installed
# transformers has the classes.
_SPECS = {
    "mamba2": ("Mamba2Config", "Mamba2ForCausalLM", dict(
        hidden_size=32, num_hidden_layers=2, num_heads=4, head_dim=16, expand=2, state_size=16,
        n_groups=2, conv_kernel=4, chunk_size=8)),
    "nemotron_h": ("NemotronHConfig", "NemotronHForCausalLM", dict(
        hidden_size=32, num_hidden_layers=3, layers_block_type=["mamba", "attention", "mamba"],
        mamba_num_heads=4, mamba_head_dim=8, ssm_state_size=16, n_groups=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, intermediate_size=64, chunk_size=8)),
    "qwen3_next": ("Qwen3NextConfig", "Qwen3NextForCausalLM", dict(
        hidden_size=32, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, intermediate_size=64,
        moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2,
        shared_expert_intermediate_size=16, linear_num_key_heads=2, linear_num_value_heads=4,
        linear_key_head_dim=16, linear_value_head_dim=8)),
    "qwen3_5": ("Qwen3_5TextConfig", "Qwen3_5ForCausalLM", dict(
        hidden_size=32, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, intermediate_size=64,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=8)),
    "qwen3_5_moe": ("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM", dict(
        hidden_size=32, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
        num_attention_heads=2, num_key_value_heads=1, head_dim=16, moe_intermediate_size=16,
        shared_expert_intermediate_size=16, num_experts=4, num_experts_per_tok=2,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
        linear_value_head_dim=8)),
}
FAMILIES = list(_SPECS)


def _build(family, seed=0, **overrides):
    cfg_name, model_name, kw = _SPECS[family]
    if not hasattr(transformers, cfg_name):
        pytest.skip(f"transformers {transformers.__version__} has no {model_name}")
    torch.manual_seed(seed)
    cfg = getattr(transformers, cfg_name)(vocab_size=VOCAB, initializer_range=0.1,
                                          **{**kw, **overrides})
    model = getattr(transformers, model_name)(cfg).eval()
    model.generation_config.eos_token_id = None     # always generate the full length
    model.generation_config.pad_token_id = 0
    return model


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors: intra-op threads only add spin-wait contention on a busy 2-core machine."""
    n, verbosity = torch.get_num_threads(), hf_logging.get_verbosity()
    torch.set_num_threads(1)
    hf_logging.set_verbosity_error()   # the torch fallbacks of mamba_ssm / fla / causal_conv1d warn
    yield
    torch.set_num_threads(n)
    hf_logging.set_verbosity(verbosity)


@pytest.fixture(scope="module")
def models():
    return {}


def _model(models, family):
    if family not in models:
        models[family] = _build(family)
    return models[family]


PROMPT = torch.randint(0, VOCAB, (2, 5), generator=torch.Generator().manual_seed(1))


def _generate(model, n, **kw):
    with torch.no_grad():
        out = model.generate(PROMPT, max_new_tokens=n, do_sample=False, output_logits=True,
                             return_dict_in_generate=True, **kw)
    return out.sequences, torch.stack(out.logits)


def _out_cache(out):
    """The cache an output carries (``cache`` in 5.24, ``past_key_values`` / ``cache_params``
    before)."""
    for k in ("cache", "past_key_values", "cache_params"):
        c = getattr(out, k, None)
        if c is not None:
            return c
    raise AssertionError(f"no cache in {type(out).__name__}")


def _cache_kwarg(model):
    params = inspect.signature(model.forward).parameters
    return next(k for k in ("cache", "past_key_values", "cache_params") if k in params)


def _fp32_close(a, b):
    tol = 1e-5 * max(1.0, b.abs().max().item())
    return (a - b).abs().max().item() <= tol


@pytest.mark.parametrize("family", FAMILIES)
def test_fp32_pair_matches_unpatched_and_unpatch_restores(models, family):
    model = _model(models, family)
    n = 3 * L + 2                                       # >= 3L decode steps -> >= 3 flushes
    seq0, log0 = _generate(model, n)
    handle = patch(model, precision="fp32", buffer_len=L, backend="torch")
    assert model._replayssm_patch is handle and handle.layers
    seq1, log1 = _generate(model, n)
    assert torch.equal(seq0, seq1), "greedy tokens differ"
    assert _fp32_close(log1, log0), (log1 - log0).abs().max().item()
    for name, c in handle.stats().items():             # the replay op really ran
        assert c["prefill"] == 1 and c["decode"] == n - 1 and c["fallback"] == 0, (name, c)
    for name, blk in handle.blocks().items():
        assert blk.precision == "fp32"
        assert int(blk.cache.flush_count[:2].min()) >= 4, name   # init + 3 flushes
    mixers = [st.mixer_ref() for st in handle.layers]
    unpatch(model)
    assert all("forward" not in m.__dict__ for m in mixers)
    assert not hasattr(model, "_replayssm_patch")
    seq2, log2 = _generate(model, n)
    assert torch.equal(seq2, seq0) and torch.equal(log2, log0)   # bit-identical again


@pytest.mark.parametrize("pair", list(replayssm_lp.precision_pairs()))
def test_every_pair_generates(models, pair):
    n = L + 3                                            # includes a flush
    for family in FAMILIES:
        if not hasattr(transformers, _SPECS[family][1]):
            continue
        model = _model(models, family)
        if (family, n) not in models:                    # unpatched reference, once per family
            models[(family, n)] = _generate(model, n)
        seq0, log0 = models[(family, n)]
        handle = patch(model, precision=pair, buffer_len=L, backend="torch")
        try:
            seq, logits = _generate(model, n)
            stats = handle.stats()
        finally:
            unpatch(model)
        assert seq.shape == seq0.shape and torch.isfinite(logits).all(), (family, pair)
        assert all(c["decode"] == n - 1 for c in stats.values()), (family, pair, stats)
        # loose: even the shared nvfp4 study configs stay near the fp32 logits over a few tokens
        assert (logits - log0).abs().max() < 0.5 * log0.abs().max() + 1e-3, (family, pair)


@pytest.mark.parametrize("family", ["mamba2", "qwen3_5"])
def test_bf16_model(family):
    model = _build(family).to(torch.bfloat16)
    seq0, log0 = _generate(model, 2 * L)
    handle = patch(model, precision="nvfp4/fp16sr", buffer_len=L, backend="torch")
    try:
        seq1, log1 = _generate(model, 2 * L)
        blocks = handle.blocks()
    finally:
        unpatch(model)
    assert all(b.cache.act_dtype == torch.bfloat16 for b in blocks.values())
    assert torch.isfinite(log1.float()).all()
    # compare the steps whose inputs are still the same tokens (bf16 greedy paths may split)
    diff = (seq0 != seq1).any(0).nonzero()
    k = int(diff[0]) - PROMPT.shape[1] + 1 if diff.numel() else log0.shape[0]
    assert k >= 2
    assert (log1[:k].float() - log0[:k].float()).abs().max() < 0.25 * log0.float().abs().max()


def test_quantized_read_copy_is_visible(models):
    """Negative control: the fp32 tolerance above is tight enough to see an nvfp4 read copy."""
    model = _model(models, "mamba2")
    _, log0 = _generate(model, 2 * L)
    patch(model, precision="nvfp4/fp32", buffer_len=L, backend="torch")
    try:
        _, log1 = _generate(model, 2 * L)
    finally:
        unpatch(model)
    assert not _fp32_close(log1, log0)


@pytest.mark.parametrize("family", ["mamba2", "qwen3_5"])
def test_beam_search_and_multi_token_continuation(models, family):
    model = _model(models, family)

    def beams():
        with torch.no_grad():
            out = model.generate(PROMPT, max_new_tokens=2 * L, num_beams=2, do_sample=False,
                                 output_scores=True, return_dict_in_generate=True)
        return out.sequences, out.sequences_scores

    def manual():   # prefill, 3 decode steps, a 3-token chunk on the cache, 3 more decode steps
        with torch.no_grad():
            out = model(PROMPT, use_cache=True)
            cache, logits = _out_cache(out), [out.logits[:, -1]]
            tok = out.logits[:, -1:].argmax(-1)
            kw = _cache_kwarg(model)
            for step in range(7):
                inp = tok.repeat(1, 3) if step == 3 else tok
                o = model(inp, use_cache=True, **{kw: cache})
                logits.append(o.logits[:, -1])
                tok = o.logits[:, -1:].argmax(-1)
        return torch.stack(logits)

    s0, sc0 = beams()
    m0 = manual()
    handle = patch(model, precision="fp32", buffer_len=L, backend="torch")
    try:
        s1, sc1 = beams()
        m1 = manual()
        stats = handle.stats()
    finally:
        unpatch(model)
    assert torch.equal(s0, s1) and _fp32_close(sc1, sc0)
    assert _fp32_close(m1, m0)
    for c in stats.values():
        assert c["fallback"] == 1 and c["sync"] >= 2     # beam reorders + the chunk wrote back


def test_sync_writes_state_back_into_hf_cache(models):
    model = _model(models, "qwen3_5")
    with torch.no_grad():
        ref = model.generate(PROMPT, max_new_tokens=2 * L + 1, do_sample=False,
                             return_dict_in_generate=True)
        handle = patch(model, precision="fp32", buffer_len=L, backend="torch")
        try:
            out = model.generate(PROMPT, max_new_tokens=2 * L + 1, do_sample=False,
                                 return_dict_in_generate=True)
            handle.sync()
        finally:
            unpatch(model)
    li = handle.layers[0].mixer_ref().layer_idx if handle.layers else 0
    s0 = _out_cache(ref).get_recurrent_state(li)
    s1 = _out_cache(out).get_recurrent_state(li)
    assert _fp32_close(s1, s0)


# ----------------------------------------------------------------------------------------------
# CUDA-graph readiness (the capture itself runs on the GPU: tests/test_gpu_integration.py)
# ----------------------------------------------------------------------------------------------
NOPAD_PROMPT = torch.randint(1, VOCAB, (2, 5), generator=torch.Generator().manual_seed(1))


def _graph_path_version():
    from packaging.version import Version
    return Version(transformers.__version__) >= Version("5.24")


needs_graph_path = pytest.mark.skipif(
    not _graph_path_version(),
    reason=f"the CUDA-graph decode path is written and tested for transformers >= 5.24 "
           f"(StaticCache with linear-attention layers, device-side positions); this is "
           f"{transformers.__version__}")


@needs_graph_path
@pytest.mark.parametrize("family", FAMILIES)
def test_static_cache_decode_loop_matches_generate(models, family):
    """graph_generate(cuda_graph=False): the StaticCache greedy loop a CUDA graph replays gives
    the unpatched generate() result with the fp32 pair."""
    model = _model(models, family)
    n = 3 * L + 2
    with torch.no_grad():
        out = model.generate(NOPAD_PROMPT, max_new_tokens=n, do_sample=False, output_logits=True,
                             return_dict_in_generate=True)
    seq0, log0 = out.sequences, torch.stack(out.logits)
    handle = patch(model, precision="fp32", buffer_len=L, backend="torch")
    try:
        seq1, log1 = rt.graph_generate(model, NOPAD_PROMPT, n, cuda_graph=False)
        stats = handle.stats()
    finally:
        unpatch(model)
    assert torch.equal(seq0, seq1)
    assert _fp32_close(log1, log0), (log1 - log0).abs().max().item()
    assert all(c["decode"] == n - 1 and c["prefill"] == 1 for c in stats.values()), stats


_SYNC_OPS = {"aten::_local_scalar_dense", "aten::item", "aten::is_nonzero", "aten::nonzero",
             "aten::equal", "aten::unique", "aten::_unique2", "aten::masked_select"}


class _OpTrace(TorchDispatchMode):
    """Every aten op of a call: name, non-tensor arguments, tensor shapes / dtypes."""

    def __init__(self):
        super().__init__()
        self.ops, self.syncs = [], []

    @staticmethod
    def _meta(a):
        if isinstance(a, torch.Tensor):
            return ("T", tuple(a.shape), a.dtype, a.device.type)
        if isinstance(a, (list, tuple)):
            return tuple(_OpTrace._meta(x) for x in a)
        return a

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name in _SYNC_OPS:
            self.syncs.append(name)
        self.ops.append((str(func), self._meta(args),
                         tuple(sorted((k, self._meta(v)) for k, v in kwargs.items()))))
        return func(*args, **kwargs)


@needs_graph_path
@pytest.mark.parametrize("family", FAMILIES)
def test_decode_step_is_capturable_outside_the_replay_op(models, family):
    """What a CUDA graph needs from the patched decode step, checked op by op on the CPU (the
    replay op itself is the CuTe kernel on the GPU, capture-tested there; here it is stubbed):
    no op that reads a device value on the host, and two consecutive steps issue the same ops
    with the same non-tensor arguments and shapes (so one captured step serves every step)."""
    model = _model(models, family)
    handle = patch(model, precision="fp32", buffer_len=L, backend="torch")
    try:
        cache = transformers.StaticCache(config=model.config, max_cache_len=16)
        kw = {_cache_kwarg(model): cache, "use_cache": True}
        with torch.no_grad():
            tok = model(NOPAD_PROMPT, **kw).logits[:, -1:].argmax(-1)
            model(tok, **kw)                                  # eager first decode step (adopt)
            for st in handle.layers:                          # stub the replay op
                blk = st.block
                blk.forward = (lambda blk: lambda *a, **k: torch.zeros_like(
                    a[0] if blk.cache.kind == "mamba2" else a[2]))(blk)
            traces = []
            for _ in range(2):
                with _OpTrace() as tr:
                    model(tok, **kw)
                traces.append(tr)
    finally:
        unpatch(model)
    assert traces[0].syncs == [], traces[0].syncs
    assert len(traces[0].ops) == len(traces[1].ops)
    diff = [i for i, (a, b) in enumerate(zip(traces[0].ops, traces[1].ops)) if a != b]
    assert not diff, [traces[0].ops[diff[0]], traces[1].ops[diff[0]]]


@needs_graph_path
def test_prepare_capture_names_the_problems(models):
    model = _model(models, "qwen3_5")
    handle = patch(model, precision="fp32", buffer_len=L, backend="torch")
    try:
        cache = transformers.DynamicCache(config=model.config)
        kw = {_cache_kwarg(model): cache, "use_cache": True}
        with torch.no_grad():
            tok = model(NOPAD_PROMPT, **kw).logits[:, -1:].argmax(-1)
            with pytest.raises(RuntimeError, match="no eager decode step"):
                handle.prepare_capture(cache)
            model(tok, **kw)
        with pytest.raises(RuntimeError) as e:
            handle.prepare_capture(cache)
        msg = str(e.value)
        assert "backend='torch'" in msg and "StaticCache" in msg and "cpu" in msg, msg
        step = handle.graph_decode_step(cache)
        with pytest.raises(ValueError, match="CUDA device"):
            step(tok)
        with pytest.raises(ValueError, match="attention_mask"):
            handle.graph_decode_step(cache, attention_mask=torch.ones(2, 8))
    finally:
        unpatch(model)


# ----------------------------------------------------------------------------------------------
# refusals
# ----------------------------------------------------------------------------------------------
def test_model_without_ssm_layers_is_refused():
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=1, num_attention_heads=2,
                                   num_key_value_heads=1)
    model = transformers.LlamaForCausalLM(cfg)
    with pytest.raises(UnsupportedModelError, match="no SSM layer") as e:
        patch(model)
    assert "Mamba2Mixer" in str(e.value) and "Qwen3NextGatedDeltaNet" in str(e.value)
    assert rt.TESTED_TRANSFORMERS_VERSION in str(e.value)


def test_unsupported_ssm_layer_is_refused():
    if not hasattr(transformers, "MambaForCausalLM"):
        pytest.skip("no Mamba-1 in this transformers")
    cfg = transformers.MambaConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1,
                                   state_size=16)
    model = transformers.MambaForCausalLM(cfg)
    with pytest.raises(UnsupportedModelError, match="MambaMixer") as e:
        patch(model)
    assert "NemotronHMamba2Mixer" in str(e.value)
    assert not hasattr(model, "_replayssm_patch")


def test_layer_class_from_elsewhere_is_refused():
    class Mamba2Mixer(torch.nn.Module):        # same name, not transformers' class
        def __init__(self):
            super().__init__()
            self.A_log = torch.nn.Parameter(torch.zeros(4))

    with pytest.raises(UnsupportedModelError, match="does not support"):
        patch(torch.nn.Sequential(Mamba2Mixer()))


def test_old_transformers_version_is_refused(monkeypatch):
    monkeypatch.setattr(transformers, "__version__", "5.20.2")
    with pytest.raises(UnsupportedModelError, match=r"5\.21") as e:
        patch(torch.nn.Linear(2, 2))
    assert rt.TESTED_TRANSFORMERS_VERSION in str(e.value)


def test_bad_arguments_are_refused(models):
    model = _model(models, "mamba2")
    with pytest.raises(ValueError, match="unknown precision pair"):
        patch(model, precision="int4")
    with pytest.raises(ValueError, match="buffer_len"):
        patch(model, buffer_len=0)
    with pytest.raises(ValueError, match="backend"):
        patch(model, backend="triton")
    odd = _build("mamba2", state_size=8)
    with pytest.raises(ValueError, match="multiple of 16"):
        patch(odd, precision="nvfp4/fp16sr")
    assert not hasattr(model, "_replayssm_patch") and not hasattr(odd, "_replayssm_patch")
    patch(model, precision="fp32")
    try:
        with pytest.raises(RuntimeError, match="already patched"):
            patch(model)
    finally:
        unpatch(model)
    with pytest.raises(RuntimeError, match="not patched"):
        unpatch(model)


@pytest.mark.parametrize("family", ["mamba2", "qwen3_5"])
def test_deepcopy_of_patched_model_is_its_own_unpatched_model(family):
    """A deep copy's mixers run their own forwards with the copy's weights (they used to run the
    original's mixers through the copied wrapper), the copy is not patched, and the original
    stays patched and correct."""
    import copy
    model = _build(family)
    ref = _build(family)
    with torch.no_grad():
        for p in ref.parameters():
            p.mul_(0.5)
    seq_ref, log_ref = _generate(ref, L + 2)
    seq0, log0 = _generate(model, L + 2)
    handle = patch(model, precision="fp32", buffer_len=L, backend="torch")
    try:
        twin = copy.deepcopy(model)
        assert getattr(twin, "_replayssm_patch", None) is None
        with pytest.raises(RuntimeError, match="not patched"):
            unpatch(twin)
        with torch.no_grad():
            for p in twin.parameters():
                p.mul_(0.5)
        seq_t, log_t = _generate(twin, L + 2)
        assert torch.equal(seq_t, seq_ref) and _fp32_close(log_t, log_ref)
        decode_before = {n: c["decode"] for n, c in handle.stats().items()}
        seq1, log1 = _generate(model, L + 2)            # the original: still patched, own weights
        assert torch.equal(seq1, seq0) and _fp32_close(log1, log0)
        assert all(c["decode"] > decode_before[n] for n, c in handle.stats().items())
        h2 = patch(twin, precision="fp32", buffer_len=L, backend="torch")   # its own handle
        seq2, log2 = _generate(twin, L + 2)
        assert torch.equal(seq2, seq_ref) and _fp32_close(log2, log_ref)
        assert all(c["decode"] == L + 1 for c in h2.stats().values())
        unpatch(twin)
    finally:
        unpatch(model)


@pytest.mark.parametrize("family", ["mamba2", "qwen3_5"])
def test_refused_decode_step_leaves_hf_cache_untouched(family):
    """A step the replay block refuses (here backend='cute' without kernels) raises before HF's
    token count and conv state move, so retrying unpatched gives the right step."""
    from replayssm_lp.backends import cute_unavailable_reason
    if cute_unavailable_reason(torch.device("cpu")) is None:
        pytest.skip("CuTe runs on CPU tensors here")
    model = _build(family)
    kw = _cache_kwarg(model)
    with torch.no_grad():
        out = model(NOPAD_PROMPT, use_cache=True)
        tok = out.logits[:, -1:].argmax(-1)
        ref = model(tok, use_cache=True, **{kw: _out_cache(out)}).logits[:, -1]
        out = model(NOPAD_PROMPT, use_cache=True)
        cache = _out_cache(out)
        li = rt._find_layers(model)[0][0][1].layer_idx      # the first SSM mixer's layer
        def seq_len():             # (5.24 tracks no length for caches of SSM layers only)
            try:
                return int(cache.get_seq_length())
            except ValueError:
                return None
        n0 = seq_len()
        conv0 = cache.get_conv_state(li, state_idx=0).clone()
        patch(model, precision="fp32", buffer_len=L, backend="cute")
        try:
            with pytest.raises(RuntimeError, match="backend='cute'"):
                model(tok, use_cache=True, **{kw: cache})
        finally:
            unpatch(model)
        assert seq_len() == n0
        assert torch.equal(cache.get_conv_state(li, state_idx=0), conv0)
        retry = model(tok, use_cache=True, **{kw: cache}).logits[:, -1]
    assert torch.equal(retry, ref)


def test_patch_checks_seed():
    model = _build("mamba2")
    with pytest.raises(TypeError, match="seed must be an int"):
        patch(model, precision="fp32", seed="a")
    with pytest.raises(ValueError, match="seed must be in"):   # (each block adds its layer_idx)
        patch(model, precision="fp32", seed=(1 << 63) - 1)
    assert getattr(model, "_replayssm_patch", None) is None


def test_assisted_generation_falls_back_with_one_warning(models):
    """transformers >= 5.25 runs prompt-lookup assisted generation on these models with a cache
    that records its past: every step takes the original mixer (same tokens), and a one-time
    warning says ReplaySSM is not used (5.24 refuses assisted generation: skipped)."""
    import warnings as _w
    model = _model(models, "mamba2")
    try:
        with torch.no_grad():
            ref = model.generate(NOPAD_PROMPT[:1], max_new_tokens=6, do_sample=False,
                                 prompt_lookup_num_tokens=2)
    except (ValueError, NotImplementedError, TypeError) as e:
        pytest.skip(f"transformers {transformers.__version__} refuses assisted generation: {e}")
    handle = patch(model, precision="fp32", buffer_len=L, backend="torch")
    try:
        with _w.catch_warnings(record=True) as rec:
            _w.simplefilter("always")
            with torch.no_grad():
                out = model.generate(NOPAD_PROMPT[:1], max_new_tokens=6, do_sample=False,
                                     prompt_lookup_num_tokens=2)
                model.generate(NOPAD_PROMPT[:1], max_new_tokens=6, do_sample=False,
                               prompt_lookup_num_tokens=2)
        stats = handle.stats()
    finally:
        unpatch(model)
    assert torch.equal(out, ref)
    msgs = [str(w.message) for w in rec if "records its past" in str(w.message)]
    assert len(msgs) == 1, msgs
    assert all(c["decode"] == 0 and c["fallback"] > 0 for c in stats.values()), stats


@pytest.mark.parametrize("family", ["mamba2", "qwen3_5"])
def test_deepcopy_keeps_nothing_of_the_original_alive(family):
    """A deep copy's mixers hold no reference to the original's mixers nor to their replay
    caches (the copied wrapper's closure did): deleting the patched original frees both, and
    the copy, patched and unpatched, is a model of its own."""
    import copy
    import gc
    import weakref
    model = _build(family)
    seq0, log0 = _generate(model, L + 2)
    handle = patch(model, precision="fp32", buffer_len=L, backend="torch")
    _generate(model, L + 2)
    mixers = [weakref.ref(st.mixer_ref()) for st in handle.layers]
    blocks = [weakref.ref(st.block) for st in handle.layers]
    assert all(b() is not None for b in blocks)
    twin = copy.deepcopy(model)
    for m in twin.modules():
        assert "__deepcopy__" not in m.__dict__
        fwd = m.__dict__.get("forward")
        assert fwd is None or getattr(fwd, "__self__", None) is m
    del model, handle
    gc.collect()
    assert all(r() is None for r in mixers) and all(b() is None for b in blocks)
    seq1, log1 = _generate(twin, L + 2)
    assert torch.equal(seq1, seq0) and _fp32_close(log1, log0)
    h2 = patch(twin, precision="fp32", buffer_len=L, backend="torch")
    seq2, log2 = _generate(twin, L + 2)
    assert torch.equal(seq2, seq0) and _fp32_close(log2, log0)
    unpatch(twin)
    assert all("forward" not in m.__dict__ and "__deepcopy__" not in m.__dict__
               for m in twin.modules() if m.__class__.__name__.endswith(("Mixer", "DeltaNet")))
    del h2


@pytest.mark.parametrize("family", ["mamba2", "qwen3_5"])
def test_generate_under_inference_mode_then_normally(family):
    """A first generate under torch.inference_mode made the block's state inference tensors, so
    a later generate outside the mode failed writing it in place, and sync / unpatch failed
    writing HF's inference-mode state: the block is now made outside the mode and the
    write-back runs inside it when HF's state needs it."""
    import gc
    model = _build(family)
    seq0, log0 = _generate(model, L + 2)
    handle = patch(model, precision="fp32", buffer_len=L, backend="torch")
    try:
        with torch.inference_mode():
            out = model.generate(PROMPT, max_new_tokens=L + 2, do_sample=False,
                                 return_dict_in_generate=True)
        assert torch.equal(out.sequences, seq0)
        seq1, log1 = _generate(model, L + 2)          # the same blocks, outside the mode
        assert torch.equal(seq1, seq0) and _fp32_close(log1, log0)
        with torch.inference_mode():                  # and back inside it
            out = model.generate(PROMPT, max_new_tokens=L + 2, do_sample=False,
                                 return_dict_in_generate=True)
        assert torch.equal(out.sequences, seq0)
        assert all(c["decode"] == 3 * (L + 1) for c in handle.stats().values())
    finally:
        unpatch(model)                                # writes back into out's inference state
    assert not hasattr(model, "_replayssm_patch")
    del out
    gc.collect()
    seq2, log2 = _generate(model, L + 2)
    assert torch.equal(seq2, seq0) and torch.equal(log2, log0)


@pytest.mark.parametrize("family", ["mamba2", "qwen3_5"])
def test_hf_cache_and_patched_model_pickle(family):
    """An HF cache after a patched decode, and a patched model, pickle and load (the guards were
    bound methods, and the handle's closures did not pickle): the loaded cache holds the synced
    state and continues like the original; the loaded model is unpatched and its own."""
    import io
    import pickle
    model = _build(family)
    kw = _cache_kwarg(model)
    with torch.no_grad():
        out = model(NOPAD_PROMPT, use_cache=True)
        tok = out.logits[:, -1:].argmax(-1)
        out = model(tok, use_cache=True, **{kw: _out_cache(out)})
        tok2 = out.logits[:, -1:].argmax(-1)
        ref = model(tok2, use_cache=True, **{kw: _out_cache(out)}).logits[:, -1]
        seq0, log0 = _generate(model, L + 2)
        handle = patch(model, precision="fp32", buffer_len=L, backend="torch")
        try:
            out = model(NOPAD_PROMPT, use_cache=True)
            cache = _out_cache(out)
            model(tok, use_cache=True, **{kw: cache})    # a replay step: HF's state is stale
            assert all(c["decode"] == 1 for c in handle.stats().values())
            twin = pickle.loads(pickle.dumps(cache))
            buf = io.BytesIO()
            torch.save(cache, buf)
            buf.seek(0)
            twin2 = torch.load(buf, weights_only=False)
            for c in (twin, twin2):                    # the loaded caches: plain HF caches
                assert not ({"__deepcopy__", "__getstate__", "crop", "reset"} & set(c.__dict__))
            got = model(tok2, use_cache=True, **{kw: twin}).logits[:, -1]  # patched, on a copy
            buf = io.BytesIO()
            torch.save(model, buf)
            buf.seek(0)
            loaded = torch.load(buf, weights_only=False)
            assert getattr(loaded, "_replayssm_patch", None) is None
            for m in loaded.modules():                 # its mixers: as before patch()
                assert not ({"forward", "__deepcopy__", "__getstate__"} & set(m.__dict__))
            with pytest.raises(RuntimeError, match="not patched"):
                unpatch(loaded)
        finally:
            unpatch(model)
        assert _fp32_close(got, ref), (got - ref).abs().max().item()
        got2 = model(tok2, use_cache=True, **{kw: twin2}).logits[:, -1]    # unpatched
        assert _fp32_close(got2, ref)
    seq1, log1 = _generate(loaded, L + 2)
    assert torch.equal(seq1, seq0) and torch.equal(log1, log0)
    h2 = patch(loaded, precision="fp32", buffer_len=L, backend="torch")
    seq2, log2 = _generate(loaded, L + 2)
    assert torch.equal(seq2, seq0) and _fp32_close(log2, log0)
    assert all(c["decode"] == L + 1 for c in h2.stats().values())
    unpatch(loaded)


class _OwnReduceCache(transformers.DynamicCache):
    """A cache class with its own ``__reduce__`` (pickle bypasses an instance ``__getstate__``)."""

    def __reduce__(self):
        return (_new_own_reduce, (), self.__dict__)


def _new_own_reduce():
    return _OwnReduceCache.__new__(_OwnReduceCache)


@pytest.mark.parametrize("family", ["mamba2", "qwen3_5"])
def test_copy_and_pickle_mid_decode_take_the_state_and_leave_the_decode_alone(family):
    """copy.copy / pickle / copy.deepcopy of a cache mid-decode write the replay state back but
    keep the block live: a lossy pair's generation goes on bit-identically (they used to hand the
    state to HF and re-adopt it next step), and each copy holds the current state (fp32: the
    next step from it, unpatched, is the patched one's). A cache class with its own __reduce__
    is synced too (its pickles were stale)."""
    import copy
    import io
    import pickle
    model = _build(family)
    kw = _cache_kwarg(model)

    def run(precision, take):
        handle = patch(model, precision=precision, buffer_len=L, backend="torch")
        logits, taken = [], None
        try:
            with torch.no_grad():
                out = model(NOPAD_PROMPT, use_cache=True)
                cache = _out_cache(out)
                tok = out.logits[:, -1:].argmax(-1)
                for i in range(2 * L):
                    if i == 3 and take is not None:
                        taken, tok3 = take(cache), tok
                    out = model(tok, use_cache=True, **{kw: cache})
                    logits.append(out.logits[:, -1])
                    tok = out.logits[:, -1:].argmax(-1)
            stats = handle.stats()
        finally:
            unpatch(model)
        assert all(s["adopt"] == 1 for s in stats.values()), stats
        if take is None:
            return torch.stack(logits)
        assert not ({"__reduce_ex__", "crop"} & set(taken.__dict__)) or take is copy.deepcopy
        with torch.no_grad():
            after = model(tok3, use_cache=True, **{kw: taken}).logits[:, -1]
        return torch.stack(logits), after

    takes = (copy.copy, copy.deepcopy, lambda c: pickle.loads(pickle.dumps(c)))
    ref = run("nvfp4/fp16sr", None)
    for take in takes:
        assert torch.equal(run("nvfp4/fp16sr", take)[0], ref)
    ref = run("fp32", None)
    for take in takes[1:]:        # (a shallow copy shares the tensors the decode goes on writing)
        got, after = run("fp32", take)
        assert torch.equal(got, ref) and _fp32_close(after, ref[3])
    # a class with its own __reduce__ (fp32: the loaded state must be the current one exactly)
    handle = patch(model, precision="fp32", buffer_len=L, backend="torch")
    try:
        with torch.no_grad():
            cache = _OwnReduceCache(config=model.config)
            out = model(NOPAD_PROMPT, use_cache=True, **{kw: cache})
            tok = out.logits[:, -1:].argmax(-1)
            out = model(tok, use_cache=True, **{kw: cache})         # a replay step
            tok2 = out.logits[:, -1:].argmax(-1)
            buf = io.BytesIO()
            torch.save(cache, buf)
            want = model(tok2, use_cache=True, **{kw: cache}).logits[:, -1]
    finally:
        unpatch(model)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert not ({"__deepcopy__", "__reduce_ex__", "crop"} & set(loaded.__dict__))
    with torch.no_grad():
        got = model(tok2, use_cache=True, **{kw: loaded}).logits[:, -1]
    assert _fp32_close(got, want), (got - want).abs().max().item()
