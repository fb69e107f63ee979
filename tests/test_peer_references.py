"""Our torch reference -- the spec every kernel is tested against -- against the peers' own torch
references on CPU: FLA's ``naive_recurrent_gated_delta_rule`` (fla-core, a test extra: only its
``naive.py`` is loaded, which needs torch and einops) and mamba_ssm's
``selective_state_update_ref`` (read from an installed mamba_ssm or the GPU bundle's sdist in
``.device/peers``; its module imports triton, so the one function is compiled from the file).
The standard decode must equal the peer step for step; the fp32 ReplaySSM pair (decode over 3L+
steps, flushes included, then ``materialize``) must equal it to fp32 rounding."""
import ast
import glob
import importlib.util
import os
import tarfile
import zipfile

import pytest
import torch
import torch.nn.functional as F

import replayssm_lp as R

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(ROOT, ".device", "peers")


def _installed_file(pkg, rel):
    spec = importlib.util.find_spec(pkg)
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], rel)
    return open(path).read() if os.path.exists(path) else None


def _archived_file(pattern, rel):
    for arc in sorted(glob.glob(os.path.join(PEERS, pattern))):
        if arc.endswith(".whl"):
            with zipfile.ZipFile(arc) as z:
                if rel in z.namelist():
                    return z.read(rel).decode()
        else:
            with tarfile.open(arc) as t:
                for m in t.getmembers():
                    if m.name.endswith(rel):
                        return t.extractfile(m).read().decode()
    return None


def _function(source, name, where):
    """``name`` compiled alone from a peer's source (its module's other imports not needed)."""
    pytest.importorskip("einops", reason="einops is needed by the peer reference")
    from einops import rearrange, repeat
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
    ns = dict(torch=torch, F=F, rearrange=rearrange, repeat=repeat)
    exec(compile(ast.Module(body=[fn], type_ignores=[]), f"<{where}:{name}>", "exec"), ns)
    return ns[name]


def _fla_naive():
    rel = "fla/ops/gated_delta_rule/naive.py"
    src = _installed_file("fla", "ops/gated_delta_rule/naive.py") or _archived_file("fla_core-*.whl", rel)
    if src is None:
        pytest.skip("FLA's naive_recurrent_gated_delta_rule not found (pip install fla-core, or "
                    "stage the GPU bundle's peers into .device/peers)")
    return _function(src, "naive_recurrent_gated_delta_rule", "fla")


def _mamba_ssm_ref():
    rel = "mamba_ssm/ops/triton/selective_state_update.py"
    src = (_installed_file("mamba_ssm", "ops/triton/selective_state_update.py")
           or _archived_file("mamba_ssm-*.tar.gz", rel))
    if src is None:
        pytest.skip("mamba_ssm's selective_state_update_ref not found (an installed mamba_ssm or "
                    "the GPU bundle's sdist in .device/peers: ../shared/device/stage.sh)")
    return _function(src, "selective_state_update_ref", "mamba_ssm")


def _close(a, b, rtol=2e-5):
    return (a - b).abs().max().item() <= rtol * max(1.0, b.abs().max().item())


H, P, N, G, L = 4, 16, 32, 2, 4


def _m2_inputs(b, gen):
    r = lambda *s: torch.randn(*s, generator=gen)  # noqa: E731
    return dict(x=r(b, H, P), dt=r(b, H) * 0.5 - 1.0, B=r(b, G, N), C=r(b, G, N), z=r(b, H, P))


def test_mamba2_matches_mamba_ssm_reference(seed):
    ref = _mamba_ssm_ref()
    gen = torch.Generator().manual_seed(seed)
    b, steps = 3, 3 * L + 2
    A, D, dt_bias = -torch.rand(H, generator=gen) - 0.2, torch.randn(H, generator=gen), \
        torch.randn(H, generator=gen) * 0.1
    S0 = torch.randn(b, H, P, N, generator=gen) * 0.5
    peer, std = S0.clone(), S0.clone()
    cache = R.Mamba2ReplayCache(b, H, P, N, G, precision="fp32", buffer_len=L,
                                act_dtype=torch.float32)
    cache.init_from_state(list(range(b)), S0)
    for _ in range(steps):
        i = _m2_inputs(b, gen)
        # mamba_ssm's per-(head, dim) parameters, tied as vLLM passes them
        o_peer = ref(peer, i["x"], i["dt"][..., None].expand(b, H, P), A[:, None, None].expand(H, P, N),
                     i["B"], i["C"], D[:, None].expand(H, P), i["z"], dt_bias[:, None].expand(H, P),
                     dt_softplus=True)
        o_std = R.mamba2_standard_decode(std, i["x"], i["dt"], A, i["B"], i["C"], D=D, z=i["z"],
                                         dt_bias=dt_bias, dt_softplus=True, backend="torch")
        o_rep = R.mamba2_decode(cache, i["x"], i["dt"], A, i["B"], i["C"], D=D, z=i["z"],
                                dt_bias=dt_bias, dt_softplus=True, backend="torch")
        assert _close(o_std, o_peer) and _close(std, peer)
        assert _close(o_rep, o_peer)
    assert int(cache.flush_count.min()) >= 3          # init + the flushes of 3L+ steps
    assert _close(cache.materialize(list(range(b))), peer)


@pytest.mark.parametrize("HV", [2, 4])
def test_gdn_matches_fla_naive_reference(seed, HV):
    """HV = 4 value heads over 2 key heads: FLA's kernels map value head i to key head
    i // (HV / H) (fused_recurrent's ``i_h = i_hv // (HV // H)``); its naive reference takes as
    many q / k heads as v heads, so it gets q / k repeated that way."""
    naive = _fla_naive()
    gen = torch.Generator().manual_seed(seed)
    Hk, K, V, b, T = 2, 32, 16, 2, 3 * L + 2
    r = lambda *s: torch.randn(*s, generator=gen)   # noqa: E731
    q, k = F.normalize(r(b, T, Hk, K), dim=-1), F.normalize(r(b, T, Hk, K), dim=-1)
    v = r(b, T, HV, V)
    g = -torch.rand(b, T, HV, generator=gen) * 0.5
    beta = torch.rand(b, T, HV, generator=gen)
    S0 = r(b, HV, K, V) * 0.3                        # FLA's [.., K, V]
    rep = HV // Hk
    o_peer, S_peer = naive(q.repeat_interleave(rep, 2), k.repeat_interleave(rep, 2), v, beta, g,
                           initial_state=S0.clone(), output_final_state=True)
    std = S0.clone()
    cache = R.GDNReplayCache(b, Hk, HV, K, V, precision="fp32", buffer_len=L,
                             act_dtype=torch.float32)
    cache.init_from_state(list(range(b)), S0, layout="kv")
    for t in range(T):
        args = (q[:, t], k[:, t], v[:, t], g[:, t], beta[:, t])
        o_std = R.gdn_standard_decode(std, *args, use_qk_l2norm_in_kernel=False,
                                      state_layout="kv", backend="torch")
        o_rep = R.gdn_decode(cache, *args, use_qk_l2norm_in_kernel=False, backend="torch")
        assert _close(o_std, o_peer[:, t]) and _close(o_rep, o_peer[:, t]), t
    assert _close(std, S_peer)
    assert int(cache.flush_count.min()) >= 3
    assert _close(cache.materialize(list(range(b)), layout="kv"), S_peer)
