"""``replayssm-bench accuracy``: numerical study of every precision pair against FP32 (DESIGN §4).

No model weights: synthetic decode traces of one Mamba-2 or GDN layer built from the real
initialisations, teacher-forced (every arm sees identical inputs), compared with an FP32 ReplaySSM
arm of the same backend.

Trace (per seed; the layer parameters are drawn from the seed):

* Mamba-2 (``state-spaces/mamba`` init): ``A = -exp(A_log)``, ``A_log = log U[1, 16]``;
  ``dt_bias = softplus^-1(dt0)``, ``dt0 = exp(U[log 1e-3, log 0.1])`` floored at 1e-4; ``D = 1``;
  per token ``dt_raw ~ N(0, 0.5^2)``, ``x, B, C ~ N(0, 1)``.
* GDN (FLA init): ``A ~ U[0, 16]`` (``A_log = log A``), the same ``dt_bias``; per token
  ``a ~ N(0, 0.5^2)``, ``b ~ N(0, 1)`` (``beta = sigmoid(b)``), ``q, k ~ N(0, 1)`` L2-normalised in the
  kernel, ``v ~ N(0, 1)``.
* Head classes repeat ``init, init, slow, ultra`` over the (value) heads: ``init`` heads keep the
  random init (per-token decay ~0.2..0.999), ``slow`` / ``ultra`` heads get ``A = -1`` (``A_log = 0``)
  and ``dt_bias`` set so that the decay is ``slow_alpha`` (0.999) / ``ultra_alpha`` (0.9999).
* Rows (independent sequences, batched in every step): the first ``rows_per_regime`` are *dense*,
  the next *bursty*: each token is large with probability ``burst_p`` (0.02), otherwise small —
  Mamba-2 scales x by ``burst_small`` (0.01); GDN shifts b by ``log(burst_small)`` (beta ~ 1 %, a weak
  write).
* Initial state (a prefill state, quantized by ``init_from_state`` into every arm): N(0, 1) scaled to
  the steady-state size of each head (Mamba-2: ``dt0 * sqrt(E[x^2] / (1 - alpha^2))``; GDN:
  ``0.5 / sqrt(K)``).
* Activations (x, B, C / q, k, v) are rounded to ``act_dtype`` (bf16 by default) once and fed to every
  arm, and every arm's output is rounded to it too (what the layer would hand on).

Seeds are batched: each seed is its own layer (parameters, input stream, initial state), and the
seeds are stacked along the head axis of one cache per arm (heads never interact, so this is exact),
so one launch per step serves every (seed, row) trace. Inputs are drawn per seed in chunks of
``--chunk`` steps (default 512) on the run's device; the stream depends only on the seeds, the
device type and the chunk length, so every arm, both backends on one device, and graph / eager
runs see identical tokens. On CUDA every chunk after the first is replayed as one CUDA graph
(``--no-graph``: eager); per-step metrics accumulate on the device, states are compared at the
grid points only.

Arms: the FP32 ReplaySSM reference ``fp32``; every precision pair of
``precision_pairs(include_extra=True)`` (same buffer length, own SR seed); controls
``ctrl:fp32-replay`` (a second fp32 replay cache — same arithmetic, so it measures run-to-run
determinism), ``ctrl:std-fp32`` (the standard fp32 recurrence through the public
``*_standard_decode`` op — the CuTe kernel on GPU: different fp32 arithmetic; the fp32-vs-fp32
control arm), ``ctrl:std-fp64`` (the exact recurrence, torch; default on the torch backend only)
and ``ctrl:fp32-torchref`` (the torch reference of the fp32 replay inside a GPU run: it
synchronises, so it disables CUDA graphs). ``--agree-len N`` instead runs the whole configuration a
second time on the torch reference (same device, inputs, SR seeds and readout temperature) for N
tokens and reports GPU-vs-reference agreement (see :func:`agreement`).

Metrics, on the log grid of lengths t = 1, 2, 4, ..., max_len (t = decode tokens so far):

* ``state_worst`` / ``state_median``: per (row, head) relative Frobenius error of ``materialize()``
  against the fp32 arm after step t; worst and median over heads, rows and seeds (also the worst per
  head class).
* ``out_rel_mean`` / ``out_rel_max``: per-row relative error of the layer output over the steps in
  the bin (t/2, t].
* A fixed random readout ``W ~ N(0, 1/d)`` (``vocab`` x d, d = heads * headdim) on the RMS-normalised
  output of each row, temperature ``tau`` calibrated once on the fp32 arm (first seed) so that p_fp32
  has ``target_entropy`` nats: ``kl_mean`` = KL(p_fp32 || p_arm), ``dlogp_p95`` = p95 of
  |log p_fp32(tok) - log p_arm(tok)| with tok = argmax p_fp32, ``top1_agree``; on up to
  ``kl_samples`` steps per bin within the first chunk and ``chunk_samples`` per chunk after it;
  computed in fp64.
* ``first_nonfinite``: the first step whose output (or grid-point state) is not finite.

Outputs (under ``out``): ``accuracy.json`` (config + every number), ``accuracy.md`` (tables: per
pair metrics at a few lengths and ratios vs the shared ``nvfp4sr``), ``kl_vs_length.png``,
``state_err_vs_length.png`` (log-log, one curve per arm). ``--merge`` joins the JSONs of a study
split over ``--pairs`` (``bench/run_accuracy_gpu.sh`` runs the parts in parallel processes so the
CuTe JIT compiles overlap), ``--summary`` prints the short table and the issue's target checks,
``--render`` writes it into README.md's accuracy section.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import zlib
from dataclasses import asdict, dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

import torch

import replayssm_lp as R
from replayssm_lp import reference as ref
from replayssm_lp.backends import cute_unavailable_reason, resolve
from replayssm_lp.pairs import precision_pairs

from . import cli_checks
from .plotting import save_figure
from .traffic import SHAPES

__all__ = ["register", "run_accuracy", "StudyConfig", "SMALL_DIMS", "REAL_DEFAULT_SHAPE",
           "CONTROLS", "HEAD_PATTERN", "log_grid", "write_outputs"]

LAYERS = ("mamba2", "gdn")
SMALL_DIMS = {"mamba2": dict(H=8, P=16, N=64, G=2), "gdn": dict(H=2, HV=4, K=64, V=64)}
REAL_DEFAULT_SHAPE = {"mamba2": "nemotron3-super", "gdn": "qwen3.5-4b"}
HEAD_PATTERN = ("init", "init", "slow", "ultra")
HEAD_CLASSES = ("init", "slow", "ultra")
REGIMES = ("dense", "bursty")
REF = "fp32"
BASELINE = "nvfp4sr"
CONTROLS = ("ctrl:fp32-replay", "ctrl:std-fp32", "ctrl:std-fp64", "ctrl:fp32-torchref")
_ACT = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
_READOUT_SEED = 0x5EED


# ----------------------------------------------------------------------------------------------
# Configuration
# ----------------------------------------------------------------------------------------------
@dataclass
class StudyConfig:
    layer: str
    dims: Dict[str, int]
    pairs: List[str]
    controls: List[str]
    max_len: int
    seeds: List[int]
    rows_per_regime: int = 4
    regimes: List[str] = field(default_factory=lambda: list(REGIMES))
    buffer_len: int = 16
    backend: str = "torch"
    device: str = "cpu"
    act_dtype: str = "bf16"
    vocab: int = 4096
    target_entropy: float = 3.0
    kl_samples: int = 32
    calib_steps: int = 256
    slow_alpha: float = 0.999
    ultra_alpha: float = 0.9999
    dt_noise: float = 0.5
    burst_p: float = 0.02
    burst_small: float = 0.01
    D: float = 1.0
    chunk: int = 512
    chunk_samples: int = 8
    graph: bool = False

    @property
    def rows(self) -> int:
        return self.rows_per_regime * len(self.regimes)

    @property
    def state_heads(self) -> int:
        return self.dims["H"] if self.layer == "mamba2" else self.dims["HV"]


def log_grid(max_len: int) -> List[int]:
    """1, 2, 4, ... up to max_len (max_len appended when it is not a power of two)."""
    g, t = [], 1
    while t <= max_len:
        g.append(t)
        t *= 2
    if g[-1] != max_len:
        g.append(max_len)
    return g


def _softplus_inv(x: torch.Tensor) -> torch.Tensor:
    return x + torch.log(-torch.expm1(-x))


def head_classes(nheads: int) -> List[str]:
    return [HEAD_PATTERN[h % len(HEAD_PATTERN)] for h in range(nheads)]


# ----------------------------------------------------------------------------------------------
# Synthetic layers: parameters, per-step inputs, replay / standard steps
# ----------------------------------------------------------------------------------------------
class _Layer:
    """Parameters and input streams of one synthetic layer **per seed**, with the seeds stacked
    along the head axis: seed s owns heads [s*Hs, (s+1)*Hs) (and its groups / key heads), so every
    cache row serves one sequence of every seed and one launch per step serves all of them. Heads
    (and, for Mamba-2, groups) never interact, so this is exactly ``len(seeds)`` independent layers.

    Inputs are generated in chunks of ``cfg.chunk`` steps (chunk k = steps k*chunk+1 ..
    (k+1)*chunk) from one generator per seed on ``cfg.device``: the stream depends only on the
    seed, the device type and the chunk length, so every arm, both backends on one device and
    graph / eager runs see the same tokens."""

    def __init__(self, cfg: StudyConfig):
        self.cfg = cfg
        self.dev = torch.device(cfg.device)
        self.act = _ACT[cfg.act_dtype]
        self.B = cfg.rows
        self.S = len(cfg.seeds)
        Hs = cfg.state_heads
        self.Hs = Hs
        self.classes = head_classes(Hs)              # per seed (the same pattern for every seed)
        A_logs, dt0s = [], []
        for seed in cfg.seeds:
            g = torch.Generator().manual_seed(1_000_003 * seed + 17)
            dt0 = torch.exp(torch.empty(Hs).uniform_(math.log(1e-3), math.log(0.1), generator=g))
            dt0 = torch.clamp(dt0, min=1e-4)
            if cfg.layer == "mamba2":
                A_log = torch.log(torch.empty(Hs).uniform_(1.0, 16.0, generator=g))
            else:
                A_log = torch.log(torch.clamp(torch.empty(Hs).uniform_(0.0, 16.0, generator=g),
                                              min=1e-4))
            for h, c in enumerate(self.classes):
                if c != "init":
                    A_log[h] = 0.0
                    dt0[h] = -math.log(cfg.slow_alpha if c == "slow" else cfg.ultra_alpha)
            A_logs.append(A_log)
            dt0s.append(dt0)
        self.dt0 = torch.stack(dt0s)                  # [S, Hs]
        self.A_log = torch.stack(A_logs)
        self.alpha0 = torch.exp(-torch.exp(self.A_log) * self.dt0)   # decay at dt_raw = 0
        self.row_regime = [cfg.regimes[i // cfg.rows_per_regime] for i in range(self.B)]
        nb = torch.tensor([r == "bursty" for r in self.row_regime])
        self.bursty_rows = nb
        self.gens = [torch.Generator(device=self.dev).manual_seed(7_919 * s + 3) for s in cfg.seeds]
        self.init_gens = [torch.Generator().manual_seed(104_729 * s + 5) for s in cfg.seeds]
        d = dict(cfg.dims)
        S = self.S
        if cfg.layer == "mamba2":
            self.tot = dict(H=d["H"] * S, P=d["P"], N=d["N"], G=d["G"] * S)
            self.out_shape = (self.B, d["H"] * S, d["P"])
            self.state_shape = (self.B, d["H"] * S, d["P"], d["N"])
        else:
            self.tot = dict(H=d["H"] * S, HV=d["HV"] * S, K=d["K"], V=d["V"])
            self.out_shape = (self.B, d["HV"] * S, d["V"])
            self.state_shape = (self.B, d["HV"] * S, d["V"], d["K"])
        f32 = dict(dtype=torch.float32, device=self.dev)
        self.A = (-torch.exp(self.A_log)).reshape(-1).to(**f32)
        self.Dv = torch.full((Hs * S,), float(cfg.D)).to(**f32)
        self.A_log_d = self.A_log.reshape(-1).to(**f32)
        self.dt_bias_d = _softplus_inv(self.dt0).reshape(-1).to(**f32)
        self.bursty_d = nb.to(self.dev)

    # -- initial (prefill) state, fp32 [B, S*Hs, R, C]
    def init_state(self) -> torch.Tensor:
        cfg = self.cfg
        per = (self.B, self.Hs) + tuple(self.state_shape[2:])
        out = []
        for s, g in enumerate(self.init_gens):
            z = torch.randn(per, generator=g)
            if cfg.layer == "mamba2":
                ex2 = torch.where(self.bursty_rows,
                                  cfg.burst_p + (1 - cfg.burst_p) * cfg.burst_small ** 2,
                                  torch.ones(()))
                scale = self.dt0[s][None] * torch.sqrt(ex2[:, None] / (1 - self.alpha0[s][None] ** 2))
                out.append(z * scale[:, :, None, None])
            else:
                out.append(z * (0.5 / math.sqrt(cfg.dims["K"])))
        return torch.cat(out, 1).to(self.dev)

    def alloc_inputs(self, n: int) -> Dict[str, torch.Tensor]:
        """Static input buffers for ``n`` steps ([n, B, ...] per input)."""
        B, dev, act, t = self.B, self.dev, self.act, self.tot
        e = lambda *s, dt=act: torch.empty(*s, dtype=dt, device=dev)  # noqa: E731
        if self.cfg.layer == "mamba2":
            return dict(x=e(n, B, t["H"], t["P"]), dt=e(n, B, t["H"], dt=torch.float32),
                        B=e(n, B, t["G"], t["N"]), C=e(n, B, t["G"], t["N"]))
        return dict(q=e(n, B, t["H"], t["K"]), k=e(n, B, t["H"], t["K"]),
                    v=e(n, B, t["HV"], t["V"]), a=e(n, B, t["HV"], dt=torch.float32),
                    b=e(n, B, t["HV"], dt=torch.float32))

    def fill_inputs(self, bufs: Dict[str, torch.Tensor]) -> None:
        """Draw the next chunk of every seed's stream into ``bufs`` (in place)."""
        cfg, B, dev, act = self.cfg, self.B, self.dev, self.act
        d = cfg.dims
        n = next(iter(bufs.values())).shape[0]
        for s, gen in enumerate(self.gens):
            rn = lambda *sh: torch.randn(*sh, generator=gen, device=dev)  # noqa: E731
            big = torch.rand(n, B, generator=gen, device=dev) < cfg.burst_p
            small = self.bursty_d[None] & ~big                                   # [n, B]
            if cfg.layer == "mamba2":
                H, G = d["H"], d["G"]
                hs, gs = slice(s * H, (s + 1) * H), slice(s * G, (s + 1) * G)
                xs = torch.where(small, cfg.burst_small, 1.0)
                bufs["x"][:, :, hs] = (rn(n, B, H, d["P"]) * xs[..., None, None]).to(act)
                bufs["dt"][:, :, hs] = (rn(n, B, H) * cfg.dt_noise).to(act).float()
                bufs["B"][:, :, gs] = rn(n, B, G, d["N"]).to(act)
                bufs["C"][:, :, gs] = rn(n, B, G, d["N"]).to(act)
            else:
                H, HV = d["H"], d["HV"]
                hs, vs = slice(s * H, (s + 1) * H), slice(s * HV, (s + 1) * HV)
                shift = math.log(cfg.burst_small) if cfg.burst_small > 0 else float("-inf")
                bufs["q"][:, :, hs] = rn(n, B, H, d["K"]).to(act)
                bufs["k"][:, :, hs] = rn(n, B, H, d["K"]).to(act)
                bufs["v"][:, :, vs] = rn(n, B, HV, d["V"]).to(act)
                bufs["a"][:, :, vs] = (rn(n, B, HV) * cfg.dt_noise).to(act).float()
                b = rn(n, B, HV) + torch.where(small, shift, 0.0)[..., None]
                bufs["b"][:, :, vs] = b.to(act).float()

    # -- one decode token on a replay cache (writes ``out``)
    def replay_step(self, cache, inp, backend, out):
        if self.cfg.layer == "mamba2":
            R.mamba2_decode(cache, inp["x"], inp["dt"], self.A, inp["B"], inp["C"], D=self.Dv,
                            dt_bias=self.dt_bias_d, dt_softplus=True, out=out, backend=backend)
        else:
            R.gdn_decode(cache, inp["q"], inp["k"], inp["v"], A_log=self.A_log_d, a=inp["a"],
                         dt_bias=self.dt_bias_d, b=inp["b"], use_qk_l2norm_in_kernel=True, out=out,
                         backend=backend)

    # -- one token of the standard recurrence (in place on ``state``), output into ``out``
    def std_step(self, state, inp, out, backend):
        if state.dtype == torch.float32:   # the public op: the CuTe kernel on GPU, else the reference
            if self.cfg.layer == "mamba2":
                R.mamba2_standard_decode(state, inp["x"], inp["dt"], self.A, inp["B"], inp["C"],
                                         D=self.Dv, dt_bias=self.dt_bias_d, dt_softplus=True,
                                         out=out, backend=backend)
            else:
                R.gdn_standard_decode(state, inp["q"], inp["k"], inp["v"], A_log=self.A_log_d,
                                      a=inp["a"], dt_bias=self.dt_bias_d, b=inp["b"],
                                      use_qk_l2norm_in_kernel=True, out=out, state_layout="vk",
                                      backend=backend)
            return
        cd = state.dtype
        if self.cfg.layer == "mamba2":
            y = ref.mamba2_standard_step(state, inp["x"], inp["dt"], self.A, inp["B"], inp["C"],
                                         self.Dv, None, self.dt_bias_d, True, None, None, cd)
        else:
            g, beta = ref.gdn_gates(None, None, self.A_log_d, inp["a"], self.dt_bias_d, inp["b"],
                                    dtype=cd)
            y = ref.gdn_standard_step(state, inp["q"], inp["k"], inp["v"], g, beta, None, True, None,
                                      None, "vk", cd)
        out.copy_(y.to(out.dtype))

    def log_decay(self, inp) -> torch.Tensor:
        """[..., S*Hs] log decay of the tokens in ``inp`` (for the realised-alpha report)."""
        if self.cfg.layer == "mamba2":
            return self.A * ref.mamba2_process_dt(inp["dt"], self.dt_bias_d, True)
        g, _ = ref.gdn_gates(None, None, self.A_log_d, inp["a"], self.dt_bias_d, inp["b"])
        return g

    def make_cache(self, precision, sr_seed):
        cfg, t = self.cfg, self.tot
        if cfg.layer == "mamba2":
            return R.Mamba2ReplayCache(self.B, t["H"], t["P"], t["N"], t["G"], precision=precision,
                                       buffer_len=cfg.buffer_len, act_dtype=self.act,
                                       device=self.dev, seed=sr_seed)
        return R.GDNReplayCache(self.B, t["H"], t["HV"], t["K"], t["V"], precision=precision,
                                buffer_len=cfg.buffer_len, act_dtype=self.act, device=self.dev,
                                seed=sr_seed)

    @property
    def op(self):
        return "mamba2_decode" if self.cfg.layer == "mamba2" else "gdn_decode"


class _ReplayArm:
    def __init__(self, layer: _Layer, precision: str, backend: str, sr_seed: int, S0, out):
        self.layer, self.backend = layer, backend
        self.cache = layer.make_cache(precision, sr_seed)
        if backend == "cute":
            try:
                resolve("cute", layer.op, self.cache)
            except RuntimeError as e:
                raise RuntimeError(f"precision {precision!r}: {e}. Use --backend auto to run the "
                                   f"torch reference for pairs without a kernel.") from e
        impl = resolve(backend, layer.op, self.cache)
        self.impl = "torch" if impl is None else "cute"
        self.capturable = self.impl == "cute"     # the torch replay reference synchronises
        self.slots = list(range(layer.B))
        self.cache.init_from_state(self.slots, S0)
        self.out = out

    def step(self, inp):
        self.layer.replay_step(self.cache, inp, self.backend, self.out)

    def state(self):
        return self.cache.materialize(self.slots)


class _StdArm:
    def __init__(self, layer: _Layer, dtype, S0, backend, out):
        self.layer = layer
        self.S = S0.to(dtype).clone().contiguous()
        self.backend = "torch" if backend == "torch" else "auto"
        self.impl = "torch"
        if dtype == torch.float32 and self.backend != "torch":
            op = "mamba2_standard_decode" if layer.cfg.layer == "mamba2" else "gdn_standard_decode"
            self.impl = "torch" if resolve("auto", op, self.S) is None else "cute"
        self.capturable = True                  # no host sync in the standard step
        self.out = out

    def step(self, inp):
        self.layer.std_step(self.S, inp, self.out, self.backend)

    def state(self):
        return self.S


def sr_seed(seed: int, pair: str) -> int:
    """The cache SR seed of ``pair`` for a study whose first trace seed is ``seed``."""
    return (seed + 1) * 1_000_003 + zlib.crc32(pair.encode()) % 1_000_000


def _make_arms(cfg: StudyConfig, layer: _Layer, S0, Y):
    """Arms in output order: Y[0] is the fp32 reference, Y[i] arm i."""
    names = [REF] + list(cfg.pairs) + list(cfg.controls)
    seed0 = cfg.seeds[0]
    arms = {}
    for i, name in enumerate(names):
        out = Y[i]
        if name == REF:
            arms[name] = _ReplayArm(layer, "fp32", cfg.backend, 0, S0, out)
        elif name == "ctrl:fp32-replay":
            arms[name] = _ReplayArm(layer, "fp32", cfg.backend, 0, S0, out)
        elif name == "ctrl:fp32-torchref":
            arms[name] = _ReplayArm(layer, "fp32", "torch", 0, S0, out)
        elif name == "ctrl:std-fp32":
            arms[name] = _StdArm(layer, torch.float32, S0, cfg.backend, out)
        elif name == "ctrl:std-fp64":
            arms[name] = _StdArm(layer, torch.float64, S0, cfg.backend, out)
        elif name.startswith("ctrl:"):
            raise ValueError(f"unknown control {name!r}; valid: {', '.join(CONTROLS)}")
        else:
            arms[name] = _ReplayArm(layer, name, cfg.backend, sr_seed(seed0, name), S0, out)
    return arms


# ----------------------------------------------------------------------------------------------
# Readout
# ----------------------------------------------------------------------------------------------
def _readout_matrix(vocab: int, d: int, device) -> torch.Tensor:
    g = torch.Generator().manual_seed(_READOUT_SEED)
    return (torch.randn(vocab, d, generator=g, dtype=torch.float64) / math.sqrt(d)).to(device)


def _unit_logits(y: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """Logits at temperature 1 of the RMS-normalised output vectors ``y [..., d]`` (fp64)."""
    z = y.double()
    z = z * torch.rsqrt((z * z).mean(-1, keepdim=True) + 1e-30)
    return z @ W.T


def _entropy(logits: torch.Tensor) -> torch.Tensor:
    lp = torch.log_softmax(logits, -1)
    return -(lp.exp() * lp).sum(-1)


def calibrate_temperature(z: torch.Tensor, target: float) -> float:
    """tau with mean entropy of softmax(z / tau) == target (bisection on log tau)."""
    lo, hi = math.log(1e-4), math.log(1e4)
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        if float(_entropy(z / math.exp(mid)).mean()) < target:
            lo = mid
        else:
            hi = mid
    return math.exp(0.5 * (lo + hi))


def _calibrate(cfg: StudyConfig, W) -> Dict:
    """Run the fp32 arm (all seeds) for ``calib_steps`` and pick the readout temperature."""
    layer = _Layer(cfg)
    Y = torch.empty((1,) + layer.out_shape, dtype=layer.act, device=layer.dev)
    arm = _ReplayArm(layer, "fp32", cfg.backend, 0, layer.init_state(), Y[0])
    n = max(1, min(cfg.calib_steps, cfg.max_len, cfg.chunk))
    bufs = layer.alloc_inputs(cfg.chunk)
    layer.fill_inputs(bufs)
    zs = []
    for i in range(n):
        arm.step({k: v[i] for k, v in bufs.items()})
        zs.append(_unit_logits(Y[0].reshape(layer.B, layer.S, -1), W).reshape(-1, W.shape[0]))
    z = torch.cat(zs)
    tau = calibrate_temperature(z, cfg.target_entropy)
    lam = layer.log_decay({k: v[:n] for k, v in bufs.items()}).double().mean(0)   # [B, S*Hs]
    alpha = torch.exp(lam).mean(0).reshape(layer.S, layer.Hs)             # geometric-mean decay
    return dict(tau=tau, steps=n, entropy=float(_entropy(z / tau).mean()),
                alpha_mean_per_head=alpha.tolist(), alpha_init_per_head=layer.alpha0.tolist())


# ----------------------------------------------------------------------------------------------
# The run: every seed batched, chunks of steps (CUDA graphs on the GPU)
# ----------------------------------------------------------------------------------------------
def _sample_steps(grid: List[int], k: int) -> List[set]:
    out, prev = [], 0
    for t in grid:
        n = t - prev
        if n <= k:
            s = set(range(prev + 1, t + 1))
        else:
            s = {int(round(prev + n * (i + 1) / k)) for i in range(k)}
        out.append(s)
        prev = t
    return out


def sample_plan(cfg: StudyConfig) -> List[int]:
    """Every step t whose readout is sampled: within the first chunk ``kl_samples`` per log bin
    (all steps of bins up to that size); after it ``chunk_samples`` per chunk, evenly spaced (so one
    CUDA graph serves every chunk). Bins after the first chunk therefore hold
    chunk_samples * (bin size / chunk) samples (more at long lengths)."""
    C, spc = cfg.chunk, max(1, min(cfg.chunk_samples, cfg.chunk))
    grid = log_grid(cfg.max_len)
    warm = sorted(t for s in _sample_steps([g for g in grid if g <= C] or [min(C, cfg.max_len)],
                                           cfg.kl_samples) for t in s if t <= min(C, cfg.max_len))
    local = [(j + 1) * C // spc for j in range(spc)]          # 1-based positions in a chunk
    late = [k * C + p for k in range(1, -(-cfg.max_len // C)) for p in local
            if k * C + p <= cfg.max_len]
    return warm + late


class _Run:
    """State of one run (all arms, all seeds): device accumulators and the step function."""

    def __init__(self, cfg: StudyConfig, tau: float):
        self.cfg = cfg
        self.layer = layer = _Layer(cfg)
        self.tau = tau
        S0 = layer.init_state()
        self.names = [REF] + list(cfg.pairs) + list(cfg.controls)
        nA1 = len(self.names)
        self.nA = nA1 - 1
        dev, B, S = layer.dev, layer.B, layer.S
        self.Y = torch.zeros((nA1,) + layer.out_shape, dtype=layer.act, device=dev)
        self.arms = _make_arms(cfg, layer, S0, self.Y)
        del S0
        self.W = _readout_matrix(cfg.vocab, math.prod(layer.out_shape[1:]) // S, dev)
        f64 = dict(dtype=torch.float64, device=dev)
        self.out_sum = torch.zeros(self.nA, B, S, **f64)
        self.out_max = torch.zeros(self.nA, B, S, **f64)
        self.first_nf = torch.full((nA1, B, S), -1, dtype=torch.int64, device=dev)
        self.t_dev = torch.zeros((), dtype=torch.int64, device=dev)
        ns = max(cfg.kl_samples, cfg.chunk_samples, 1)
        self.kl_buf = torch.zeros(ns, self.nA, B, S, **f64)
        self.dlp_buf = torch.zeros(ns, self.nA, B, S, **f64)
        self.top1_buf = torch.zeros(ns, self.nA, B, S, dtype=torch.float32, device=dev)
        self.ent_buf = torch.zeros(ns, B, S, **f64)
        self.bufs = layer.alloc_inputs(cfg.chunk)
        self.graph = None

    @property
    def capturable(self) -> bool:
        return all(a.capturable for a in self.arms.values())

    def step(self, i: int, slot: Optional[int]):
        """Step ``i`` of the current chunk for every arm, per-step metrics, readout into ``slot``."""
        inp = {k: v[i] for k, v in self.bufs.items()}
        self.t_dev += 1
        for a in self.arms.values():
            a.step(inp)
        B, S = self.layer.B, self.layer.S
        Yd = self.Y.view(self.nA + 1, B, S, -1).double()
        e = (Yd[1:] - Yd[:1]).norm(dim=-1) / Yd[0].norm(dim=-1)                     # [nA, B, S]
        self.out_sum += e
        torch.maximum(self.out_max, torch.nan_to_num(e, nan=float("inf")), out=self.out_max)
        bad = ~torch.isfinite(Yd).all(-1)
        self.first_nf.copy_(torch.where((self.first_nf < 0) & bad, self.t_dev, self.first_nf))
        if slot is None:
            return
        LP = torch.log_softmax(_unit_logits(Yd, self.W) / self.tau, -1)            # [nA+1, B, S, V]
        lr, lq = LP[0], LP[1:]
        pr = lr.exp()
        self.ent_buf[slot] = -(pr * lr).sum(-1)
        tok = lr.argmax(-1, keepdim=True)                                             # [B, S, 1]
        self.kl_buf[slot] = (pr[None] * (lr[None] - lq)).sum(-1)
        self.dlp_buf[slot] = (lr.gather(-1, tok)[None, ..., 0]
                              - lq.gather(-1, tok[None].expand(self.nA, B, S, 1))[..., 0]).abs()
        self.top1_buf[slot] = (lq.argmax(-1) == tok[None, ..., 0]).float()

    def run_chunk_steps(self, i0: int, i1: int, slots: Dict[int, int]):
        for i in range(i0, i1):
            self.step(i, slots.get(i))

    def capture(self, slots: Dict[int, int], stream):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, stream=stream):
            self.run_chunk_steps(0, self.cfg.chunk, slots)
        self.graph = g


def _run(cfg: StudyConfig, tau: float, progress: Optional[Callable[[int], None]] = None,
         use_graph: bool = False) -> List[dict]:
    """All arms and seeds in one batched run. Returns one raw dict per seed (CPU tensors)."""
    t0 = time.time()
    run = _Run(cfg, tau)
    layer, names, nA = run.layer, run.names[1:], run.nA
    B, S, Hs, C = layer.B, layer.S, layer.Hs, cfg.chunk
    on_cuda = layer.dev.type == "cuda"
    if use_graph and on_cuda and not run.capturable:
        eager = [a for a, arm in run.arms.items() if not arm.capturable]
        print(f"accuracy: no CUDA graphs (arms on the torch replay reference, which synchronises: "
              f"{', '.join(eager)}); every step runs eagerly", file=sys.stderr)
    use_graph = bool(use_graph and on_cuda and run.capturable)
    grid = log_grid(cfg.max_len)
    nG = len(grid)
    plan = set(sample_plan(cfg))
    state_err = {a: torch.full((nG, B, S, Hs), float("nan"), dtype=torch.float64) for a in names}
    out_mean, out_max = [], []
    kl, dlp, top1, ent = ([[] for _ in grid] for _ in range(4))
    side = torch.cuda.Stream() if use_graph else None
    if side is not None:       # the caches and buffers were written on the default stream
        side.wait_stream(torch.cuda.current_stream())
    ctx = torch.cuda.stream(side) if use_graph else _nullctx()
    t, gi, cnt, k_filled = 0, 0, 0, -1
    with ctx:
        while t < cfg.max_len:
            k = t // C
            if k != k_filled:
                layer.fill_inputs(run.bufs)
                k_filled = k
            end = min((k + 1) * C, cfg.max_len)
            if k == 0:
                end = min(end, next(g for g in grid if g > t))
            steps = range(t + 1, end + 1)
            smp = [s for s in steps if s in plan]
            slots = {s - 1 - k * C: j for j, s in enumerate(smp)}
            if use_graph and k >= 1 and end - t == C:
                if run.graph is None:
                    torch.cuda.current_stream().synchronize()
                    run.capture(slots, side)
                run.graph.replay()
            else:
                run.run_chunk_steps(t - k * C, end - k * C, slots)
            if smp:
                n = len(smp)
                kl[gi].append(run.kl_buf[:n].clone())
                dlp[gi].append(run.dlp_buf[:n].clone())
                top1[gi].append(run.top1_buf[:n].clone())
                ent[gi].append(run.ent_buf[:n].clone())
            cnt += end - t
            t = end
            if t == grid[gi]:
                out_mean.append((run.out_sum / cnt).cpu())
                out_max.append(run.out_max.cpu())
                run.out_sum.zero_()
                run.out_max.zero_()
                cnt = 0
                Sr = run.arms[REF].state()
                bad = [~torch.isfinite(Sr).view(B, S, -1).all(2)]
                Sr = Sr.double()
                nrm = Sr.flatten(2).norm(dim=2)                                        # [B, S*Hs]
                for a in names:
                    Sa = run.arms[a].state()
                    err = (Sa.double() - Sr).flatten(2).norm(dim=2) / nrm
                    state_err[a][gi] = err.view(B, S, Hs).cpu()
                    bad.append(~torch.isfinite(Sa).view(B, S, -1).all(2))
                    del Sa
                run.first_nf.copy_(torch.where((run.first_nf < 0) & torch.stack(bad), t,
                                               run.first_nf))
                gi += 1
            if on_cuda:
                torch.cuda.current_stream().synchronize()   # honest progress; cheap per chunk
            if progress is not None:
                progress(end - steps.start + 1)
    if on_cuda:
        torch.cuda.synchronize()
    first_nf = run.first_nf.cpu()
    om = torch.stack(out_mean)                                                     # [nG, nA, B, S]
    ox = torch.stack(out_max)
    cat = lambda lst: [torch.cat(b).cpu() if b else None for b in lst]  # noqa: E731
    kl, dlp, top1, ent = cat(kl), cat(dlp), cat(top1), cat(ent)
    seconds = time.time() - t0
    impl = {a: arm.impl for a, arm in run.arms.items()}
    raws = []
    for s, seed in enumerate(cfg.seeds):
        def per_arm(lst, i):
            return [b[:, i, :, s] if b is not None else torch.zeros(0, B) for b in lst]
        raws.append(dict(
            seed=seed, grid=grid, names=names, row_regime=layer.row_regime, classes=layer.classes,
            impl=impl,
            state_err={a: state_err[a][:, :, s] for a in names},
            out_mean={a: om[:, i, :, s] for i, a in enumerate(names)},
            out_max={a: ox[:, i, :, s] for i, a in enumerate(names)},
            kl={a: per_arm(kl, i) for i, a in enumerate(names)},
            dlogp={a: per_arm(dlp, i) for i, a in enumerate(names)},
            top1={a: per_arm(top1, i) for i, a in enumerate(names)},
            ref_entropy=[b[:, :, s] if b is not None else torch.zeros(0, B) for b in ent],
            first_nonfinite=dict(zip(run.names, first_nf[:, :, s])),
            seconds=seconds, graph=use_graph,
        ))
    return raws


class _nullctx:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


# ----------------------------------------------------------------------------------------------
# Aggregation
# ----------------------------------------------------------------------------------------------
def _num(x):
    x = float(x)
    return x if math.isfinite(x) else None


def _agg(raws: List[dict], arm: str, regime: str, L: int) -> Dict:
    grid = raws[0]["grid"]
    nG = len(grid)
    classes = raws[0]["classes"]
    res = dict(lengths=grid)

    def rows_of(r):
        return [i for i, g in enumerate(r["row_regime"]) if regime == "all" or g == regime]

    se = torch.cat([r["state_err"][arm][:, rows_of(r)].reshape(nG, -1) for r in raws], 1)
    # NaN (non-finite state) counts as the worst possible error
    res["state_worst"] = [_num(torch.nan_to_num(v, nan=float("inf")).max()) for v in se]
    res["state_median"] = [_num(torch.nan_to_num(v, nan=float("inf")).median()) for v in se]
    byc = {}
    for c in HEAD_CLASSES:
        hs = [h for h, k in enumerate(classes) if k == c]
        if not hs:
            continue
        v = torch.cat([r["state_err"][arm][:, rows_of(r)][:, :, hs].reshape(nG, -1) for r in raws], 1)
        v = torch.nan_to_num(v, nan=float("inf"))
        byc[c] = dict(worst=[_num(x.max()) for x in v], median=[_num(x.median()) for x in v])
    res["state_by_class"] = byc
    om = torch.cat([r["out_mean"][arm][:, rows_of(r)] for r in raws], 1)
    res["out_rel_mean"] = [_num(v.mean()) for v in om]
    ox = torch.cat([r["out_max"][arm][:, rows_of(r)] for r in raws], 1)
    res["out_rel_max"] = [_num(v.max()) for v in ox]
    for key, name, fn in (("kl", "kl_mean", lambda v: v.mean()), ("kl", "kl_max", lambda v: v.max()),
                          ("dlogp", "dlogp_p95", lambda v: torch.quantile(v, 0.95)),
                          ("dlogp", "dlogp_max", lambda v: v.max()),
                          ("top1", "top1_agree", lambda v: v.mean())):
        vals = []
        for g in range(nG):
            v = torch.cat([r[key][arm][g][:, rows_of(r)].reshape(-1) for r in raws])
            v = torch.nan_to_num(v.double(), nan=float("inf"))
            vals.append(_num(fn(v)) if v.numel() else None)
        res[name] = vals
    nf = torch.cat([r["first_nonfinite"][arm][rows_of(r)] for r in raws])
    nf = nf[nf > 0]
    res["first_nonfinite"] = int(nf.min()) if nf.numel() else None
    res["per_seed"] = {
        str(r["seed"]): dict(
            state_worst=[_num(torch.nan_to_num(v, nan=float("inf")).max())
                         for v in r["state_err"][arm][:, rows_of(r)].reshape(nG, -1)],
            kl_mean=[_num(torch.nan_to_num(x[:, rows_of(r)].double(), nan=float("inf")).mean())
                     if x.numel() else None for x in r["kl"][arm]],
            out_rel_mean=[_num(v.mean()) for v in r["out_mean"][arm][:, rows_of(r)]])
        for r in raws}
    # drift exponents: slope of log(error) vs log t over t >= 4 L (0.5: random walk, 1: bias)
    res["state_worst_slope"] = _loglog_slope(grid, res["state_worst"], 4 * L)
    for c, v in byc.items():
        v["worst_slope"] = _loglog_slope(grid, v["worst"], 4 * L)
    return res


def _loglog_slope(grid, vals, t_min):
    pts = [(math.log(t), math.log(v)) for t, v in zip(grid, vals) if t >= t_min and v and v > 0]
    if len(pts) < 2:
        return None
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    den = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / den if den else None


def _aggregate(cfg: StudyConfig, raws: List[dict], calib: Dict, seconds: float) -> Dict:
    names = raws[0]["names"]
    regimes = list(cfg.regimes) + (["all"] if len(cfg.regimes) > 1 else [])
    arms = {a: {rg: _agg(raws, a, rg, cfg.buffer_len) for rg in regimes} for a in names}
    ents = {}
    for rg in regimes:
        vals = []
        for g in range(len(raws[0]["grid"])):
            v = torch.cat([r["ref_entropy"][g][:, [i for i, x in enumerate(r["row_regime"])
                                                   if rg == "all" or x == rg]].reshape(-1) for r in raws])
            vals.append(_num(v.mean()) if v.numel() else None)
        ents[rg] = vals
    nf_ref = torch.cat([r["first_nonfinite"][REF] for r in raws])
    nf_ref = nf_ref[nf_ref > 0]
    pp = precision_pairs(include_extra=True)
    cols = cfg.dims["N"] if cfg.layer == "mamba2" else cfg.dims["K"]
    bytes_pe = {a: (pp[a].state_bytes_per_element(cols) if a in pp else None) for a in names}
    read_bpe = {a: (pp[a].read_bytes_per_element(cols) if a in pp else None) for a in names}
    return dict(
        config=asdict(cfg), grid=raws[0]["grid"], regimes=regimes, reference=REF, baseline=BASELINE,
        head_classes=raws[0]["classes"], calibration=calib, ref_entropy_mean=ents,
        ref_first_nonfinite=int(nf_ref.min()) if nf_ref.numel() else None,
        impl=raws[0]["impl"], state_bytes_per_element=bytes_pe, read_bytes_per_element=read_bpe,
        seed_seconds={str(r["seed"]): r["seconds"] for r in raws}, runtime_s=seconds,
        torch_version=torch.__version__, arms=arms,
        device_name=(torch.cuda.get_device_name(torch.device(cfg.device))
                     if torch.device(cfg.device).type == "cuda" else platform.processor() or "cpu"),
        run=cli_checks.run_meta(),
    )


# ----------------------------------------------------------------------------------------------
# Outputs
# ----------------------------------------------------------------------------------------------
def _fmt(v, kind="e"):
    if v is None:
        return "—"
    if kind == "x":
        return f"{v:.3g}x"
    if kind == "f":
        return f"{v:.3f}"
    return f"{v:.2e}"


def table_lengths(grid: List[int]) -> List[int]:
    """Three lengths for the tables: max, max/16, max/256 (those on the grid)."""
    m = grid[-1]
    ls = [t for t in grid if t in (m // 256, m // 16)] + [m]
    return sorted(set(ls)) if len(set(ls)) > 1 else [grid[len(grid) // 2], m]


def markdown(res: Dict) -> str:
    cfg = res["config"]
    grid = res["grid"]
    Ls = table_lengths(grid)
    ix = [grid.index(t) for t in Ls]
    last = len(grid) - 1
    lines = [f"# Accuracy vs FP32 — {cfg['layer']} {cfg['dims']}, backend {cfg['backend']} "
             f"({cfg['device']}), L={cfg['buffer_len']}",
             "",
             f"Teacher-forced synthetic traces up to {cfg['max_len']} tokens, seeds {cfg['seeds']}, "
             f"{cfg['rows_per_regime']} rows per regime, act {cfg['act_dtype']}; head classes "
             f"{res['head_classes']} (slow alpha {cfg['slow_alpha']}, ultra {cfg['ultra_alpha']}); "
             f"readout vocab {cfg['vocab']}, tau {res['calibration']['tau']:.4g} "
             f"(fp32 entropy {res['calibration']['entropy']:.2f} nats at calibration). "
             f"Runtime {res['runtime_s']:.0f} s.",
             "",
             "state = relative Frobenius error of the materialized state vs the fp32 arm (worst / "
             "median over heads, rows, seeds); out = mean relative output error over (t/2, t]; "
             "KL = mean KL(p_fp32 || p_arm) over (t/2, t]; dlogp95 = p95 |Δ log p| of the fp32 argmax "
             "token; top1 = argmax agreement; NaN@ = first non-finite step; "
             f"÷{BASELINE} = {BASELINE}'s value divided by the arm's at t={grid[-1]} (>1: better).",
             ""]
    for rg in res["regimes"]:
        lines += [f"## {rg} rows", ""]
        hdr = (["arm", "B/elem"] + [f"state worst @{t}" for t in Ls] + [f"state med @{Ls[-1]}",
               f"out @{Ls[-1]}"] + [f"KL @{t}" for t in Ls] +
               [f"dlogp95 @{Ls[-1]}", f"top1 @{Ls[-1]}", "NaN@", f"KL ÷{BASELINE}",
                f"state ÷{BASELINE}"])
        lines.append("| " + " | ".join(hdr) + " |")
        lines.append("|" + "---|" + "---:|" * (len(hdr) - 1))
        base = res["arms"].get(BASELINE, {}).get(rg)
        for a, per in res["arms"].items():
            m = per[rg]
            bpe = res["state_bytes_per_element"].get(a)

            def ratio(key):
                if base is None or base[key][last] is None or m[key][last] is None:
                    return None
                return base[key][last] / m[key][last] if m[key][last] > 0 else float("inf")
            row = ([a, "—" if bpe is None else f"{bpe:.3g}"] +
                   [_fmt(m["state_worst"][i]) for i in ix] +
                   [_fmt(m["state_median"][last]), _fmt(m["out_rel_mean"][last])] +
                   [_fmt(m["kl_mean"][i]) for i in ix] +
                   [_fmt(m["dlogp_p95"][last]), _fmt(m["top1_agree"][last], "f"),
                    "—" if m["first_nonfinite"] is None else str(m["first_nonfinite"]),
                    _fmt(ratio("kl_mean"), "x"), _fmt(ratio("state_worst"), "x")])
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    # per head class, all rows
    rg = res["regimes"][-1]
    lines += [f"## worst-head state error by head class at t={grid[-1]} ({rg} rows) and its growth", "",
              "| arm | " + " | ".join(HEAD_CLASSES) + " | " +
              " | ".join(f"slope {c}" for c in HEAD_CLASSES) + " |",
              "|---|" + "---:|" * (2 * len(HEAD_CLASSES))]
    sl = lambda v: "—" if v is None else f"{v:.2f}"  # noqa: E731
    for a, per in res["arms"].items():
        byc = per[rg]["state_by_class"]
        cells = [_fmt(byc[c]["worst"][last]) if c in byc else "—" for c in HEAD_CLASSES]
        cells += [sl(byc[c]["worst_slope"]) if c in byc else "—" for c in HEAD_CLASSES]
        lines.append(f"| {a} | " + " | ".join(cells) + " |")
    lines += ["", "slope = log-log slope of the worst-head error over t ≥ 4L "
              "(≈0.5: unbiased random walk, ≈1: a bias that grows with t, e.g. RN stagnation)."]
    ent = res["ref_entropy_mean"][rg]
    lines += ["", f"fp32 readout entropy (mean, nats) on the grid: " +
              ", ".join(f"{t}: {e:.2f}" for t, e in zip(grid, ent) if e is not None), ""]
    return "\n".join(lines)


def plots(res: Dict, out_dir: str) -> List[str]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        print("matplotlib is not installed: no plots (pip install matplotlib)", file=sys.stderr)
        return []
    grid = res["grid"]
    arms = list(res["arms"])
    cmap = plt.get_cmap("tab20")
    order = list(range(0, 20, 2)) + list(range(1, 20, 2))   # dark shades first
    files = []
    regs = [r for r in res["regimes"] if r != "all"] or res["regimes"]
    for key, title, fname, floor in (
            ("kl_mean", "KL(p_fp32 || p_arm), mean over (t/2, t]", "kl_vs_length.png", 1e-10),
            ("state_worst", "worst-head relative state error", "state_err_vs_length.png", 1e-8)):
        fig, axes = plt.subplots(1, len(regs), figsize=(7 * len(regs), 5.5), squeeze=False)
        for ax, rg in zip(axes[0], regs):
            for i, a in enumerate(arms):
                ys = res["arms"][a][rg][key]
                pts = [(t, y) for t, y in zip(grid, ys) if y is not None and y > 0]
                if not pts:
                    continue
                ls = "--" if a.startswith("ctrl:") else (":" if a.endswith("rn") else "-")
                lw = 2.4 if a in ("nvfp4/fp16sr", "nvfp4/fp8sr", BASELINE) else 1.2
                ax.plot([p[0] for p in pts], [p[1] for p in pts], ls, color=cmap(order[i % 20]),
                        lw=lw, marker="o", ms=2.5, label=a)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            lo, hi = ax.get_ylim()
            ax.set_ylim(max(lo, floor), hi)
            ax.set_xlabel("generated tokens t")
            ax.set_title(f"{res['config']['layer']} {rg} rows: {title}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
        axes[0][-1].legend(fontsize=7, ncol=1, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
        p = os.path.join(out_dir, fname)
        save_figure(fig, p, bbox_inches="tight")
        plt.close(fig)
        files.append(p)
    return files


def write_outputs(res: Dict, out_dir: str, make_plots: bool = True) -> List[str]:
    os.makedirs(out_dir, exist_ok=True)
    pj = os.path.join(out_dir, "accuracy.json")
    with open(pj, "w") as f:
        json.dump(res, f, indent=1)
    pm = os.path.join(out_dir, "accuracy.md")
    with open(pm, "w") as f:
        f.write(markdown(res))
        if "agreement" in res:
            f.write("\n" + agreement_markdown(res["agreement"]))
    files = [pj, pm]
    if make_plots:
        files += plots(res, out_dir)
    return files


# ----------------------------------------------------------------------------------------------
# Entry points
# ----------------------------------------------------------------------------------------------
def _default_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


def run_accuracy(layer: str = "mamba2", *, pairs: Optional[Sequence[str]] = None,
                 controls: Optional[Sequence[str]] = None, max_len: Optional[int] = None,
                 seeds: Sequence[int] = (0, 1, 2), rows_per_regime: int = 4,
                 regimes: Sequence[str] = REGIMES, shape: Optional[str] = None,
                 dims: Optional[Dict[str, int]] = None, buffer_len: int = 16,
                 backend: Optional[str] = None, device: Optional[str] = None,
                 act_dtype: str = "bf16", vocab: int = 4096, target_entropy: float = 3.0,
                 kl_samples: int = 32, calib_steps: int = 256, slow_alpha: float = 0.999,
                 ultra_alpha: float = 0.9999, burst_p: float = 0.02, burst_small: float = 0.01,
                 D: float = 1.0, chunk: int = 512, chunk_samples: int = 8,
                 graph: Optional[bool] = None, agree_len: int = 0, workers: int = 1,
                 threads: Optional[int] = None, progress: bool = False, out: Optional[str] = None,
                 make_plots: bool = True, tau: Optional[float] = None) -> Dict:
    """Run the study for one layer kind and return the results dict (what ``accuracy.json`` holds).

    ``pairs``: precision pair names (default: every pair of ``precision_pairs(include_extra=True)``
    but the fp32 reference); ``controls``: subset of :data:`CONTROLS` (default: fp32-replay and
    std-fp32, plus std-fp64 with the torch backend). ``shape``: ``"small"`` or a name of
    ``bench.traffic.SHAPES`` (default small on CPU, the real shape on CUDA); ``dims`` overrides.
    ``backend``: "torch" | "cute" | "auto" (default cute when CUDA is present); ``max_len``
    default 4096 on CPU, 131072 on CUDA. Seeds are batched (stacked along the head axis), inputs
    drawn in chunks of ``chunk`` steps; ``graph`` (default: on CUDA when every arm is capturable)
    replays each chunk after the first as one CUDA graph. ``agree_len`` > 0 (non-torch backend)
    also runs the torch reference on the same device, inputs and readout for that many tokens and
    stores the comparison under ``"agreement"``. ``threads`` sets torch's intra-op threads;
    ``workers`` is accepted for compatibility and ignored (seeds are batched). ``out``: write
    JSON / markdown / PNGs there. ``tau``: readout temperature (default: calibrated)."""
    if layer not in LAYERS:
        raise ValueError(f"layer must be one of {LAYERS}, got {layer!r}")
    device = device or _default_device()
    on_cuda = torch.device(device).type == "cuda"
    backend = backend or ("cute" if on_cuda else "torch")
    if backend not in ("torch", "cute", "auto"):
        raise ValueError(f"backend must be torch, cute or auto, got {backend!r}")
    if backend == "cute":
        why = cute_unavailable_reason(torch.device(device))
        if why is not None:
            raise RuntimeError(f"--backend cute: {why}")
    if shape is None:
        shape = REAL_DEFAULT_SHAPE[layer] if on_cuda else "small"
    if dims is None:
        if shape == "small":
            dims = dict(SMALL_DIMS[layer])
        else:
            if shape not in SHAPES or SHAPES[shape]["kind"] != layer:
                ok = [k for k, v in SHAPES.items() if v["kind"] == layer]
                raise ValueError(f"shape {shape!r} is not a {layer} shape; use small or one of {ok}")
            dims = {k: v for k, v in SHAPES[shape].items() if k != "kind"}
    need = ("H", "P", "N", "G") if layer == "mamba2" else ("H", "HV", "K", "V")
    if set(dims) != set(need):
        raise ValueError(f"{layer} dims need keys {need}, got {sorted(dims)}")
    all_pairs = [p for p in precision_pairs(include_extra=True) if p != REF]
    if pairs is None:
        pairs = all_pairs
    else:
        pairs = [R.parse_pair(p).name for p in pairs]
        pairs = [p for p in dict.fromkeys(pairs) if p != REF]
    if controls is None:
        controls = ["ctrl:fp32-replay", "ctrl:std-fp32"]
        if backend == "torch":
            controls.append("ctrl:std-fp64")
    for c in controls:
        if c not in CONTROLS:
            raise ValueError(f"unknown control {c!r}; valid: {', '.join(CONTROLS)}")
    regimes = list(regimes)
    for r in regimes:
        if r not in REGIMES:
            raise ValueError(f"regime must be in {REGIMES}, got {r!r}")
    if chunk < 1 or chunk_samples < 1:
        raise ValueError("chunk and chunk_samples must be >= 1")
    for name, v in (("max_len", max_len), ("rows_per_regime", rows_per_regime),
                    ("kl_samples", kl_samples)):
        if v is not None and (isinstance(v, bool) or int(v) != v or v < 1):
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    seeds = [int(s) for s in seeds]
    if len(set(seeds)) != len(seeds) or not seeds:
        raise ValueError(f"seeds must be distinct and non-empty, got {seeds}")
    if graph is None:
        graph = on_cuda and backend != "torch"
    cfg = StudyConfig(layer=layer, dims=dict(dims), pairs=list(pairs), controls=list(controls),
                      max_len=int((131072 if on_cuda else 4096) if max_len is None else max_len), seeds=seeds,
                      rows_per_regime=rows_per_regime, regimes=regimes, buffer_len=buffer_len,
                      backend=backend, device=str(device), act_dtype=act_dtype, vocab=vocab,
                      target_entropy=target_entropy, kl_samples=kl_samples,
                      calib_steps=calib_steps, slow_alpha=slow_alpha, ultra_alpha=ultra_alpha,
                      burst_p=burst_p, burst_small=burst_small, D=D, chunk=int(chunk),
                      chunk_samples=int(chunk_samples), graph=bool(graph))
    if vocab < 2:
        raise ValueError("vocab must be >= 2")
    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    t0 = time.time()
    try:
        d_out = math.prod(dims[k] for k in (("H", "P") if layer == "mamba2" else ("HV", "V")))
        W = _readout_matrix(vocab, d_out, device)
        if tau is None:
            calib = _calibrate(cfg, W)
        else:
            calib = dict(tau=float(tau), steps=0, entropy=None, given=True)
        bar = None
        if progress:
            try:
                from tqdm import tqdm
                bar = tqdm(total=cfg.max_len, unit="tok", mininterval=1.0,
                           desc=f"accuracy {layer} {backend} ({len(pairs) + len(controls) + 1} arms"
                                f" x {len(seeds)} seeds)")
            except ImportError:  # pragma: no cover
                bar = None
        tick = (lambda n: bar.update(n)) if bar is not None else None
        raws = _run(cfg, calib["tau"], tick, use_graph=cfg.graph)
        if bar is not None:
            bar.close()
    finally:
        torch.set_num_threads(old_threads)
    res = _aggregate(cfg, raws, calib, time.time() - t0)
    res["graph_used"] = bool(raws[0]["graph"])
    if agree_len and backend != "torch":
        n = min(int(agree_len), cfg.max_len)
        ref_res = run_accuracy(
            layer, pairs=pairs, controls=[c for c in controls if c != "ctrl:fp32-torchref"],
            max_len=n, seeds=seeds, rows_per_regime=rows_per_regime, regimes=regimes,
            dims=dims, buffer_len=buffer_len, backend="torch", device=device, act_dtype=act_dtype,
            vocab=vocab, target_entropy=target_entropy, kl_samples=kl_samples,
            calib_steps=calib_steps, slow_alpha=slow_alpha, ultra_alpha=ultra_alpha,
            burst_p=burst_p, burst_small=burst_small, D=D, chunk=chunk,
            chunk_samples=chunk_samples, graph=False, threads=threads, progress=progress,
            tau=calib["tau"], make_plots=False)
        res["agreement"] = agreement(res, ref_res, n)
    if out:
        res["files"] = write_outputs(res, out, make_plots)
    return res


# ----------------------------------------------------------------------------------------------
# GPU kernels vs the torch reference on a shared horizon
# ----------------------------------------------------------------------------------------------
AGREE_METRICS = ("kl_mean", "state_worst", "out_rel_mean")
FP32_CONTROL = "ctrl:std-fp32"


def _seed_range(per: Dict, key: str, ix: int) -> Optional[float]:
    vals = [v[key][ix] for v in per["per_seed"].values() if key in v and v[key][ix] is not None]
    return (max(vals) - min(vals)) if len(vals) > 1 else None


def agreement(res_a: Dict, res_b: Dict, horizon: int) -> Dict:
    """Compare two runs of the same configuration (``res_a``: GPU kernels, ``res_b``: the torch
    reference, same device, inputs, SR seeds and readout temperature) at the grid points <= horizon.

    Criterion, per arm, regime "all", metric m in (KL, worst-head state error, mean output error)
    at t = horizon: |m_a - m_b| <= tol, with tol = max(seed spread, fp32 control) where seed spread
    is the largest (max - min over seeds) of m in either run, and fp32 control is the larger of the
    two runs' ``ctrl:std-fp32`` value of m (the size of an fp32-vs-fp32 arithmetic difference, the
    floor below which two runs cannot be told apart). Also reported: the relative difference
    |m_a - m_b| / max(m_a, m_b) and the fp32 controls of both runs."""
    grid = [t for t in res_a["grid"] if t <= horizon]
    if horizon not in res_b["grid"] or horizon not in res_a["grid"]:
        raise ValueError(f"horizon {horizon} must be a grid point of both runs")
    ia, ib = res_a["grid"].index(horizon), res_b["grid"].index(horizon)
    rows, ok_all = {}, True
    for arm in res_a["arms"]:
        if arm not in res_b["arms"]:
            continue
        pa, pb = res_a["arms"][arm]["all"], res_b["arms"][arm]["all"]
        ent = {}
        for m in AGREE_METRICS:
            va, vb = pa[m][ia], pb[m][ib]
            if va is None or vb is None:
                ent[m] = dict(gpu=va, ref=vb, ok=va is None and vb is None)
                ok_all &= ent[m]["ok"]
                continue
            spread = [x for x in (_seed_range(pa, m, ia), _seed_range(pb, m, ib)) if x is not None]
            ctl = [r["arms"][FP32_CONTROL]["all"][m][i] for r, i in ((res_a, ia), (res_b, ib))
                   if FP32_CONTROL in r["arms"] and r["arms"][FP32_CONTROL]["all"][m][i] is not None]
            tol = max(spread + ctl + [0.0])
            diff = abs(va - vb)
            ok = diff <= tol
            ok_all &= ok
            ent[m] = dict(gpu=va, ref=vb, diff=diff, rel=diff / max(abs(va), abs(vb), 1e-300),
                          seed_spread=max(spread) if spread else None,
                          fp32_control=max(ctl) if ctl else None, tol=tol, ok=ok)
        ent["curve_kl"] = dict(gpu=pa["kl_mean"][:len(grid)], ref=pb["kl_mean"][:len(grid)])
        ent["curve_state_worst"] = dict(gpu=pa["state_worst"][:len(grid)],
                                        ref=pb["state_worst"][:len(grid)])
        rows[arm] = ent
    return dict(horizon=horizon, grid=grid, backend_gpu=res_a["config"]["backend"],
                backend_ref=res_b["config"]["backend"], device=res_b["config"]["device"],
                runtime_ref_s=res_b["runtime_s"], ok=bool(ok_all), arms=rows,
                criterion="|m_gpu - m_ref| <= max(seed spread of m, fp32 control ctrl:std-fp32's m) "
                          "at t = horizon, all rows; m in " + ", ".join(AGREE_METRICS))


def agreement_markdown(ag: Dict) -> str:
    h = ag["horizon"]
    lines = [f"## GPU kernels ({ag['backend_gpu']}) vs torch reference at t={h} "
             f"({ag['device']}, same inputs, SR seeds and readout): "
             f"{'AGREE' if ag['ok'] else 'DISAGREE'}", "",
             f"Criterion: {ag['criterion']}.", "",
             "| arm | KL gpu | KL ref | rel | tol | state gpu | state ref | rel | tol | ok |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|:-:|"]
    for arm, e in ag["arms"].items():
        k, s = e["kl_mean"], e["state_worst"]
        ok = all(e[m]["ok"] for m in AGREE_METRICS)
        lines.append(f"| {arm} | {_fmt(k['gpu'])} | {_fmt(k['ref'])} | {_fmt(k.get('rel'))} | "
                     f"{_fmt(k.get('tol'))} | {_fmt(s['gpu'])} | {_fmt(s['ref'])} | "
                     f"{_fmt(s.get('rel'))} | {_fmt(s.get('tol'))} | {'yes' if ok else '**no**'} |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------
# Summary against the issue's targets, and the README section
# ----------------------------------------------------------------------------------------------
SPLIT_TARGETS = ("nvfp4/fp16sr", "nvfp4/fp8sr")
SHARED_LOWP = ("nvfp4sr", "fp8sr", "nvfp4rn", "fp8rn")
README_BEGIN = "<!-- accuracy-results:begin (python -m bench accuracy --render ...) -->"
README_END = "<!-- accuracy-results:end -->"


def _at(res, arm, rg, key, t):
    g = res["grid"]
    if t not in g or arm not in res["arms"] or rg not in res["arms"][arm]:
        return None
    return res["arms"][arm][rg][key][g.index(t)]


def summary(res: Dict) -> Dict:
    """Numbers the issue's targets are stated in, at the longest length T and at 1K."""
    g = res["grid"]
    T = g[-1]
    t1k = 1024 if 1024 in g else None
    regs = [r for r in res["regimes"] if r != "all"]
    out = dict(layer=res["config"]["layer"], T=T, t1k=t1k, rows={}, checks=[])
    base = {rg: _at(res, BASELINE, rg, "kl_mean", T) for rg in res["regimes"]}
    for a in res["arms"]:
        kT = _at(res, a, "all", "kl_mean", T)
        k1 = _at(res, a, "all", "kl_mean", t1k) if t1k else None
        # (a KL at fp64 round-off can come out <= 0: no ratio then)
        ratios = {rg: (base[rg] / _at(res, a, rg, "kl_mean", T))
                  if base[rg] and base[rg] > 0 and (_at(res, a, rg, "kl_mean", T) or 0) > 0
                  else None for rg in res["regimes"]}
        byc = res["arms"][a]["all"]["state_by_class"]
        out["rows"][a] = dict(
            kl_T=kT, kl_1k=k1, growth=(kT / k1) if kT and k1 else None,
            kl_ratio_all=ratios.get("all"),
            kl_ratio_worst_regime=min([v for k, v in ratios.items() if k != "all" and v] or [None])
            if any(ratios.get(r) for r in regs) else None,
            state_worst_T=_at(res, a, "all", "state_worst", T),
            state_worst_by_class={c: v["worst"][-1] for c, v in byc.items()},
            dlogp95_T=_at(res, a, "all", "dlogp_p95", T), top1_T=_at(res, a, "all", "top1_agree", T),
            first_nonfinite=res["arms"][a]["all"]["first_nonfinite"])
    R_ = out["rows"]
    for p in SPLIT_TARGETS:
        if p in R_ and BASELINE in R_:
            r = R_[p]
            out["checks"].append(dict(
                target=f"{p}: KL@{T} >= 30x below {BASELINE} (all rows; worst regime)",
                value=[r["kl_ratio_all"], r["kl_ratio_worst_regime"]],
                ok=bool(r["kl_ratio_all"] and r["kl_ratio_all"] >= 30 and
                        (r["kl_ratio_worst_regime"] or 0) >= 30)))
    if t1k and t1k < T:
        for p in R_:
            if R.parse_pair(p).split if not p.startswith("ctrl:") else False:
                gr = R_[p]["growth"]
                out["checks"].append(dict(target=f"{p}: KL@{T} <= 2x KL@1K", value=gr,
                                          ok=bool(gr is not None and gr <= 2.0)))
        for p in SHARED_LOWP:
            if p in R_:
                gr = R_[p]["growth"]
                out["checks"].append(dict(target=f"{p} (shared): KL grows from 1K to {T}", value=gr,
                                          ok=bool(gr is not None and gr > 1.0)))
    if "agreement" in res:
        out["checks"].append(dict(target=f"GPU vs torch reference agree at t="
                                         f"{res['agreement']['horizon']}",
                                  value=None, ok=bool(res["agreement"]["ok"])))
    return out


def summary_markdown(results: Sequence[Dict], plot_dir: Optional[str] = None) -> str:
    """The README "Accuracy results" body for one or more runs (one per layer)."""
    lines = []
    for res in results:
        sm = summary(res)
        cfg = res["config"]
        T, t1k = sm["T"], sm["t1k"]
        lines += [f"**{cfg['layer']}** {cfg['dims']} ({cfg['backend']} on {cfg['device']}, "
                  f"{len(cfg['seeds'])} seeds x {cfg['rows_per_regime'] * len(cfg['regimes'])} rows, "
                  f"L={cfg['buffer_len']}, {T} tokens, {res['runtime_s']:.0f} s"
                  f"{' summed over %d runs' % res['merged_runs'] if res.get('merged_runs', 1) > 1 else ''}):",
                  "",
                  f"| pair | KL @1K | KL @{T} | growth | KL ÷{BASELINE} (all / worst regime) | "
                  f"state worst @{T} (init / slow / ultra) | dlogp95 | top1 | NaN@ |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for a, r in sm["rows"].items():
            byc = r["state_worst_by_class"]
            lines.append(
                f"| {a} | {_fmt(r['kl_1k'])} | {_fmt(r['kl_T'])} | {_fmt(r['growth'], 'x')} | "
                f"{_fmt(r['kl_ratio_all'], 'x')} / {_fmt(r['kl_ratio_worst_regime'], 'x')} | "
                f"{' / '.join(_fmt(byc.get(c)) for c in HEAD_CLASSES)} | {_fmt(r['dlogp95_T'])} | "
                f"{_fmt(r['top1_T'], 'f')} | "
                f"{'—' if r['first_nonfinite'] is None else r['first_nonfinite']} |")
        lines.append("")
        if sm["checks"]:
            lines.append("Targets (issue 6):")
            lines += [f"- {c['target']}: {'met' if c['ok'] else '**not met**'}"
                      + (f" ({_fmt(c['value'][0], 'x')} / {_fmt(c['value'][1], 'x')})"
                         if isinstance(c["value"], list) else
                         (f" ({_fmt(c['value'], 'x')})" if c["value"] is not None else ""))
                      for c in sm["checks"]]
            lines.append("")
        if "agreement" in res:
            ag = res["agreement"]
            worst = max((e[m].get("rel") or 0.0 for e in ag["arms"].values() for m in AGREE_METRICS),
                        default=0.0)
            lines += [f"GPU kernels vs torch reference at t={ag['horizon']}: "
                      f"{'agree' if ag['ok'] else '**disagree**'} within the seed spread / fp32 "
                      f"control (largest relative difference of any metric {worst:.2g}).", ""]
        if plot_dir:
            d = os.path.join(plot_dir, f"accuracy_{cfg['layer']}_{cfg['backend']}")
            lines += [f"![{cfg['layer']} KL vs length]({d}/kl_vs_length.png)",
                      f"![{cfg['layer']} state error vs length]({d}/state_err_vs_length.png)", ""]
    return "\n".join(lines)


def load_result(path: str) -> dict:
    """An accuracy.json (or a gzip-compressed accuracy.json.gz, how results are committed)."""
    if path.endswith(".gz"):
        import gzip
        with gzip.open(path, "rt") as f:
            return json.load(f)
    with open(path) as f:
        return json.load(f)


def render_readme(json_paths: Sequence[str], readme: str = "README.md",
                  plot_dir: Optional[str] = "bench/results", header: Optional[str] = None) -> str:
    """Replace the text between README_BEGIN / README_END in ``readme`` by the summary of the
    given accuracy.json files. Returns the new section body."""
    results = [load_result(p) for p in json_paths]
    body = summary_markdown(results, plot_dir)
    if header:
        body = header.rstrip() + "\n\n" + body
    txt = open(readme).read()
    if README_BEGIN not in txt or README_END not in txt:
        raise ValueError(f"{readme} has no accuracy markers ({README_BEGIN!r} ... {README_END!r})")
    pre, rest = txt.split(README_BEGIN, 1)
    _, post = rest.split(README_END, 1)
    with open(readme, "w") as f:
        f.write(pre + README_BEGIN + "\n" + body.rstrip() + "\n" + README_END + post)
    return body


def _parse_dims(s: Optional[str]):
    if not s:
        return None
    out = {}
    for kv in s.split(","):
        k, v = kv.split("=")
        out[k.strip()] = int(v)
    return out


def merge_results(results: Sequence[Dict]) -> Dict:
    """Union of the arms of runs that differ only in ``pairs`` / ``controls`` (a study split over
    several commands): same layer, dims, seeds, length, backend and readout temperature."""
    if not results:
        raise ValueError("nothing to merge")
    keys = ("layer", "dims", "seeds", "max_len", "rows_per_regime", "regimes", "buffer_len",
            "backend", "act_dtype", "vocab", "slow_alpha", "ultra_alpha", "burst_p", "burst_small",
            "chunk", "chunk_samples")
    base = json.loads(json.dumps(results[0]))
    for r in results[1:]:
        for k in keys:
            if r["config"].get(k) != base["config"].get(k):
                raise ValueError(f"cannot merge: config {k} differs ({r['config'].get(k)} vs "
                                 f"{base['config'].get(k)})")
        if abs(r["calibration"]["tau"] - base["calibration"]["tau"]) > 1e-9 * base["calibration"]["tau"]:
            raise ValueError("cannot merge: readout temperatures differ")
        for a, v in r["arms"].items():
            base["arms"].setdefault(a, v)
        for k in ("impl", "state_bytes_per_element", "read_bytes_per_element"):
            for a, v in r.get(k, {}).items():
                base.setdefault(k, {}).setdefault(a, v)
        base["runtime_s"] += r["runtime_s"]      # (device time of the parts, not wall time)
        base["merged_runs"] = base.get("merged_runs", 1) + r.get("merged_runs", 1)
        if "agreement" in r:
            ag = base.setdefault("agreement", r["agreement"])
            if ag is not r["agreement"]:
                for a, v in r["agreement"]["arms"].items():
                    ag["arms"].setdefault(a, v)
                ag["ok"] = bool(ag["ok"] and r["agreement"]["ok"])
                ag["runtime_ref_s"] += r["agreement"]["runtime_ref_s"]
    ag = base.get("agreement")
    if ag is not None and FP32_CONTROL in ag["arms"]:
        # parts without the fp32 control: re-apply its floor to every arm's tolerance
        c = ag["arms"][FP32_CONTROL]
        for e in ag["arms"].values():
            for m in AGREE_METRICS:
                if "diff" not in e[m]:
                    continue
                ctl = [v for v in (c[m].get("gpu"), c[m].get("ref"), e[m].get("fp32_control"))
                       if v is not None]
                e[m]["fp32_control"] = max(ctl) if ctl else None
                e[m]["tol"] = max([x for x in (e[m].get("seed_spread"), e[m]["fp32_control"])
                                   if x is not None] + [0.0])
                e[m]["ok"] = e[m]["diff"] <= e[m]["tol"]
        ag["ok"] = all(e[m]["ok"] for e in ag["arms"].values() for m in AGREE_METRICS)
    order = [p for p in precision_pairs(include_extra=True)] + list(CONTROLS)
    rank = lambda a: order.index(a) if a in order else len(order)  # noqa: E731
    base["arms"] = {a: base["arms"][a] for a in sorted(base["arms"], key=rank)}
    base["config"]["pairs"] = [a for a in base["arms"] if not a.startswith("ctrl:")]
    base["config"]["controls"] = [a for a in base["arms"] if a.startswith("ctrl:")]
    base["merged_from"] = len(results)
    return base


def graph_check(layer: str = "mamba2", *, pairs=("nvfp4/fp16sr", "nvfp4sr"), max_len: int = 1024,
                chunk: int = 128, shape: Optional[str] = None, device: str = "cuda",
                backend: str = "cute") -> Dict:
    """Run one small configuration with CUDA graphs and eagerly (same process, same kernels) and
    compare every number: the graph path must reproduce the eager one (to 1e-9 relative)."""
    kw = dict(pairs=list(pairs), controls=["ctrl:std-fp32"], max_len=max_len, seeds=[0],
              rows_per_regime=1, shape=shape, backend=backend, device=device, chunk=chunk,
              chunk_samples=4, kl_samples=8, calib_steps=64, make_plots=False)
    t0 = time.time()
    g = run_accuracy(layer, graph=True, **kw)
    e = run_accuracy(layer, graph=False, tau=g["calibration"]["tau"], **kw)
    worst, where = 0.0, None
    for a in g["arms"]:
        for rg in g["regimes"]:
            for key in ("state_worst", "kl_mean", "out_rel_mean", "out_rel_max", "dlogp_p95"):
                for x, y in zip(g["arms"][a][rg][key], e["arms"][a][rg][key]):
                    if x is None or y is None:
                        d = 0.0 if x is None and y is None else float("inf")
                    else:
                        d = abs(x - y) / max(abs(x), abs(y), 1e-30)
                    if d > worst:
                        worst, where = d, (a, rg, key)
    return dict(layer=layer, graph_used=g["graph_used"], eager_graph_used=e["graph_used"],
                worst_rel_diff=worst, where=where, ok=bool(g["graph_used"] and worst <= 1e-9),
                seconds=time.time() - t0)


def _cli(args) -> int:
    if args.graph_check:
        r = graph_check(args.layer if args.layer != "both" else "mamba2", shape=args.shape,
                        device=args.device or _default_device(), backend=args.backend or "cute")
        print(f"graph check ({r['layer']}): {'OK' if r['ok'] else 'FAILED'} — graph used "
              f"{r['graph_used']}, worst relative difference graph vs eager {r['worst_rel_diff']:.3g}"
              f" at {r['where']} ({r['seconds']:.0f} s)")
        return 0 if r["ok"] else 1
    if args.summary:
        print(summary_markdown([load_result(p) for p in args.summary], None))
        return 0
    if args.render:
        body = render_readme(args.render, args.readme, args.plot_dir, args.note)
        print(body)
        print(f"updated the accuracy section of {args.readme}")
        return 0
    if args.merge:
        res = merge_results([load_result(p) for p in args.merge])
        out = args.out or os.path.dirname(os.path.abspath(args.merge[0]))
        res["files"] = write_outputs(res, out, not args.no_plots)
        print(markdown(res))
        print("wrote: " + ", ".join(res["files"]))
        return 0
    layers = list(LAYERS) if args.layer == "both" else [args.layer]
    device = args.device or _default_device()
    backend = args.backend or ("cute" if torch.device(device).type == "cuda" else "torch")
    on_cpu = torch.device(device).type == "cpu"
    seeds = cli_checks.int_list("--seeds", args.seeds, 0)
    if len(set(seeds)) != len(seeds):
        raise SystemExit(f"--seeds: the seeds must be distinct, got {args.seeds!r}")
    # every option named as typed, before any output folder or study (run_accuracy's own checks
    # name its Python arguments)
    for opt, v, lo in (("--max-len", args.max_len, 1), ("--rows", args.rows, 1),
                       ("--L", args.L, 1), ("--vocab", args.vocab, 2),
                       ("--kl-samples", args.kl_samples, 1), ("--calib-steps", args.calib_steps, 1),
                       ("--chunk", args.chunk, 1), ("--chunk-samples", args.chunk_samples, 1),
                       ("--agree-len", args.agree_len, 0), ("--threads", args.threads, 1)):
        cli_checks.at_least(opt, v, lo)
    if args.L > 64:
        raise SystemExit(f"--L must be <= 64, got {args.L}")
    for opt, v in (("--slow-alpha", args.slow_alpha), ("--ultra-alpha", args.ultra_alpha)):
        if not 0.0 < v < 1.0:
            raise SystemExit(f"{opt} must be in (0, 1), got {v}")
    if not 0.0 <= args.burst_p <= 1.0:
        raise SystemExit(f"--burst-p must be in [0, 1], got {args.burst_p}")
    if not args.burst_small >= 0.0:
        raise SystemExit(f"--burst-small must be >= 0, got {args.burst_small}")
    if not args.entropy > 0.0:
        raise SystemExit(f"--entropy must be > 0, got {args.entropy}")
    threads = args.threads if args.threads is not None else (1 if on_cpu else None)
    rows = args.rows if args.rows is not None else (4 if on_cpu else 2)
    outs = {}
    for layer in layers:         # every output folder first, not after hours of study
        out = args.out or os.path.join("bench", "results", f"accuracy_{layer}_{backend}")
        if args.out and len(layers) > 1:
            out = os.path.join(args.out, layer)
        outs[layer] = cli_checks.out_dir("--out", out)
    for layer in layers:
        out = outs[layer]
        res = run_accuracy(
            layer, pairs=args.pairs.split(",") if args.pairs else None,
            controls=[c for c in args.controls.split(",") if c] if args.controls is not None else None,
            max_len=args.max_len, seeds=seeds, rows_per_regime=rows, shape=args.shape,
            dims=_parse_dims(args.dims), buffer_len=args.L, backend=backend, device=device,
            act_dtype=args.act_dtype, vocab=args.vocab, target_entropy=args.entropy,
            kl_samples=args.kl_samples, calib_steps=args.calib_steps, slow_alpha=args.slow_alpha,
            ultra_alpha=args.ultra_alpha, burst_p=args.burst_p, burst_small=args.burst_small,
            D=args.D, chunk=args.chunk,
            chunk_samples=args.chunk_samples, graph=False if args.no_graph else None,
            agree_len=args.agree_len, threads=threads, progress=not args.no_progress, out=out,
            make_plots=not args.no_plots)
        if not args.quiet:
            print(markdown(res))
            if "agreement" in res:
                print(agreement_markdown(res["agreement"]))
        print("wrote: " + ", ".join(res["files"]))
    return 0


def register(subparsers):
    """Add the ``accuracy`` subcommand to a ``replayssm-bench`` subparsers object."""
    p = subparsers.add_parser(
        "accuracy", help="numerical study of every precision pair against FP32 (synthetic traces)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layer", choices=list(LAYERS) + ["both"], default="both")
    p.add_argument("--backend", choices=["torch", "cute", "auto"], default=None,
                   help="default: cute when CUDA is present, else torch")
    p.add_argument("--device", default=None, help="default: cuda when present, else cpu")
    p.add_argument("--max-len", type=int, default=None,
                   help="longest generated length (default 131072 on CUDA, 4096 on CPU)")
    p.add_argument("--seeds", default="0,1,2",
                   help="comma-separated trace seeds (batched: stacked along the head axis)")
    p.add_argument("--rows", type=int, default=None,
                   help="sequences per regime (dense, bursty); default 4 on CPU, 2 on CUDA")
    p.add_argument("--shape", default=None,
                   help="small, or a real layer shape: " + ", ".join(SHAPES) +
                        " (default: small on CPU, nemotron3-super / qwen3.5-4b on CUDA)")
    p.add_argument("--dims", default=None, help="explicit dims, e.g. H=8,P=16,N=64,G=2")
    p.add_argument("--pairs", default=None, help="comma-separated pairs (default: all + extra)")
    p.add_argument("--controls", default=None,
                   help="comma-separated controls (empty string: none): " + ", ".join(CONTROLS) +
                        " (default fp32-replay, std-fp32, + std-fp64 on the torch backend)")
    p.add_argument("--L", type=int, default=16, help="ReplaySSM buffer length")
    p.add_argument("--act-dtype", choices=list(_ACT), default="bf16")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--entropy", type=float, default=3.0, help="target fp32 readout entropy (nats)")
    p.add_argument("--kl-samples", type=int, default=32,
                   help="readout samples per log bin within the first chunk")
    p.add_argument("--calib-steps", type=int, default=256,
                   help="fp32 steps used to calibrate the readout temperature")
    p.add_argument("--chunk", type=int, default=512,
                   help="steps per input chunk / CUDA graph (inputs drawn per chunk)")
    p.add_argument("--chunk-samples", type=int, default=8,
                   help="readout samples per chunk after the first chunk")
    p.add_argument("--no-graph", action="store_true",
                   help="run every step eagerly (no CUDA graphs; the default off CUDA)")
    p.add_argument("--agree-len", type=int, default=0,
                   help="also run the torch reference on the same device for this many tokens and "
                        "report GPU-vs-reference agreement (non-torch backends)")
    p.add_argument("--slow-alpha", type=float, default=0.999)
    p.add_argument("--ultra-alpha", type=float, default=0.9999)
    p.add_argument("--burst-p", type=float, default=0.02)
    p.add_argument("--burst-small", type=float, default=0.01)
    p.add_argument("--D", type=float, default=1.0, help="Mamba-2 skip weight D (init: 1)")
    p.add_argument("--workers", type=int, default=None, help="ignored (seeds are batched)")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (CPU default 1)")
    p.add_argument("--out", default=None, help="default bench/results/accuracy_<layer>_<backend>/")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--quiet", action="store_true", help="do not print the markdown tables")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                   help="merge accuracy.json files of one study split over --pairs / --controls "
                        "into --out (default: the first file's folder)")
    p.add_argument("--graph-check", action="store_true",
                   help="GPU: run a small config with CUDA graphs and eagerly, compare every number")
    p.add_argument("--summary", nargs="+", default=None, metavar="JSON",
                   help="print the short table (per pair: KL at 1K and at the end, growth, ratio to "
                        "nvfp4sr, state error by head class) and the target checks")
    p.add_argument("--render", nargs="+", default=None, metavar="JSON",
                   help="render the README accuracy section from these accuracy.json files")
    p.add_argument("--readme", default="README.md", help="README to update with --render")
    p.add_argument("--note", default=None, help="with --render: a paragraph put above the tables")
    p.add_argument("--plot-dir", default="bench/results",
                   help="with --render: folder holding accuracy_<layer>_<backend>/ plots")
    p.set_defaults(fn=_cli)
    return p


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="replayssm-bench")
    sub = ap.add_subparsers(dest="cmd", required=True)
    register(sub)
    args = ap.parse_args(["accuracy"] + list(sys.argv[1:] if argv is None else argv))
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
