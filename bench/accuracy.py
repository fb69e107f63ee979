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

Arms: the FP32 ReplaySSM reference ``fp32``; every precision pair of
``precision_pairs(include_extra=True)`` (same buffer length, own SR seed); controls
``ctrl:fp32-replay`` (a second fp32 replay cache — same arithmetic, so it measures run-to-run
determinism), ``ctrl:std-fp32`` (the standard fp32 recurrence: different fp32 arithmetic),
``ctrl:std-fp64`` (the exact recurrence) and, with the cute backend, ``ctrl:fp32-torchref`` (the
torch reference of the fp32 replay: kernel vs spec).

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
  ``kl_samples`` steps per bin; computed in fp64.
* ``first_nonfinite``: the first step whose output (or grid-point state) is not finite.

Outputs (under ``out``): ``accuracy.json`` (config + every number), ``accuracy.md`` (tables: per
pair metrics at a few lengths and ratios vs the shared ``nvfp4sr``), ``kl_vs_length.png``,
``state_err_vs_length.png`` (log-log, one curve per arm).
"""
from __future__ import annotations

import argparse
import json
import math
import os
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
    """Parameters of one synthetic layer (drawn from ``seed``) and its input stream."""

    def __init__(self, cfg: StudyConfig, seed: int):
        self.cfg = cfg
        self.dev = torch.device(cfg.device)
        self.act = _ACT[cfg.act_dtype]
        self.B = cfg.rows
        g = torch.Generator().manual_seed(1_000_003 * seed + 17)
        Hs = cfg.state_heads
        self.classes = head_classes(Hs)
        dt0 = torch.exp(torch.empty(Hs).uniform_(math.log(1e-3), math.log(0.1), generator=g))
        dt0 = torch.clamp(dt0, min=1e-4)
        if cfg.layer == "mamba2":
            A_log = torch.log(torch.empty(Hs).uniform_(1.0, 16.0, generator=g))
        else:
            A_log = torch.log(torch.clamp(torch.empty(Hs).uniform_(0.0, 16.0, generator=g), min=1e-4))
        for h, c in enumerate(self.classes):
            if c != "init":
                A_log[h] = 0.0
                dt0[h] = -math.log(cfg.slow_alpha if c == "slow" else cfg.ultra_alpha)
        self.dt0, self.A_log = dt0, A_log
        self.dt_bias = _softplus_inv(dt0)
        self.alpha0 = torch.exp(-torch.exp(A_log) * dt0)           # decay at dt_raw = 0
        self.row_regime = [cfg.regimes[i // cfg.rows_per_regime] for i in range(self.B)]
        nb = torch.tensor([r == "bursty" for r in self.row_regime])
        self.bursty_rows = nb
        self.gen = torch.Generator(device=self.dev).manual_seed(7_919 * seed + 3)
        self.init_gen = torch.Generator().manual_seed(104_729 * seed + 5)
        d = cfg.dims
        f32 = dict(dtype=torch.float32, device=self.dev)
        if cfg.layer == "mamba2":
            self.A = (-torch.exp(A_log)).to(**f32)
            self.Dv = torch.full((Hs,), float(cfg.D)).to(**f32)
            self.out_shape = (self.B, Hs, d["P"])
            self.state_shape = (self.B, Hs, d["P"], d["N"])
        else:
            self.out_shape = (self.B, Hs, d["V"])
            self.state_shape = (self.B, Hs, d["V"], d["K"])
        self.A_log_d = A_log.to(**f32)
        self.dt_bias_d = self.dt_bias.to(**f32)
        self.bursty_d = nb.to(self.dev)

    # -- initial (prefill) state, fp32 [B, Hs, R, C]
    def init_state(self) -> torch.Tensor:
        cfg = self.cfg
        z = torch.randn(self.state_shape, generator=self.init_gen)
        if cfg.layer == "mamba2":
            ex2 = torch.where(self.bursty_rows, cfg.burst_p + (1 - cfg.burst_p) * cfg.burst_small ** 2,
                              torch.ones(()))
            scale = self.dt0[None] * torch.sqrt(ex2[:, None] / (1 - self.alpha0[None] ** 2))
            S = z * scale[:, :, None, None]
        else:
            S = z * (0.5 / math.sqrt(cfg.dims["K"]))
        return S.to(self.dev)

    def _small(self):
        """[B] bool: this row's token is small (bursty rows, no burst this token)."""
        big = torch.rand(self.B, generator=self.gen, device=self.dev) < self.cfg.burst_p
        return self.bursty_d & ~big

    def next_inputs(self) -> Dict[str, torch.Tensor]:
        cfg, B, dev, act, gen = self.cfg, self.B, self.dev, self.act, self.gen
        d = cfg.dims
        rn = lambda *s: torch.randn(*s, generator=gen, device=dev)  # noqa: E731
        small = self._small()
        if cfg.layer == "mamba2":
            H, P, N, G = d["H"], d["P"], d["N"], d["G"]
            xs = torch.where(small, cfg.burst_small, 1.0)
            x = (rn(B, H, P) * xs[:, None, None]).to(act)
            dt = (rn(B, H) * cfg.dt_noise).to(act).float()
            return dict(x=x, dt=dt, B=rn(B, G, N).to(act), C=rn(B, G, N).to(act))
        H, HV, K, V = d["H"], d["HV"], d["K"], d["V"]
        a = (rn(B, HV) * cfg.dt_noise).to(act).float()
        shift = math.log(cfg.burst_small) if cfg.burst_small > 0 else float("-inf")
        b = rn(B, HV) + torch.where(small, shift, 0.0)[:, None]
        return dict(q=rn(B, H, K).to(act), k=rn(B, H, K).to(act), v=rn(B, HV, V).to(act),
                    a=a, b=b.to(act).float())

    # -- one decode token on a replay cache; returns the output rounded to act, as fp32
    def replay_step(self, cache, inp, backend, out):
        if self.cfg.layer == "mamba2":
            R.mamba2_decode(cache, inp["x"], inp["dt"], self.A, inp["B"], inp["C"], D=self.Dv,
                            dt_bias=self.dt_bias_d, dt_softplus=True, out=out, backend=backend)
        else:
            R.gdn_decode(cache, inp["q"], inp["k"], inp["v"], A_log=self.A_log_d, a=inp["a"],
                         dt_bias=self.dt_bias_d, b=inp["b"], use_qk_l2norm_in_kernel=True, out=out,
                         backend=backend)
        return out.float()

    # -- one token of the standard recurrence (in place on ``state``, compute in its dtype)
    def std_step(self, state, inp):
        cd = state.dtype
        if self.cfg.layer == "mamba2":
            y = ref.mamba2_standard_step(state, inp["x"], inp["dt"], self.A, inp["B"], inp["C"],
                                         self.Dv, None, self.dt_bias_d, True, None, None, cd)
        else:
            g, beta = ref.gdn_gates(None, None, self.A_log_d, inp["a"], self.dt_bias_d, inp["b"],
                                    dtype=cd)
            y = ref.gdn_standard_step(state, inp["q"], inp["k"], inp["v"], g, beta, None, True, None,
                                      None, "vk", cd)
        return y.to(self.act).float()

    def log_decay(self, inp) -> torch.Tensor:
        """[B, Hs] log decay of this token (for the realised-alpha report)."""
        if self.cfg.layer == "mamba2":
            return self.A[None] * ref.mamba2_process_dt(inp["dt"], self.dt_bias_d, True)
        g, _ = ref.gdn_gates(None, None, self.A_log_d, inp["a"], self.dt_bias_d, inp["b"])
        return g

    def make_cache(self, precision, sr_seed):
        cfg, d = self.cfg, self.cfg.dims
        if cfg.layer == "mamba2":
            return R.Mamba2ReplayCache(self.B, d["H"], d["P"], d["N"], d["G"], precision=precision,
                                       buffer_len=cfg.buffer_len, act_dtype=self.act,
                                       device=self.dev, seed=sr_seed)
        return R.GDNReplayCache(self.B, d["H"], d["HV"], d["K"], d["V"], precision=precision,
                                buffer_len=cfg.buffer_len, act_dtype=self.act, device=self.dev,
                                seed=sr_seed)

    @property
    def op(self):
        return "mamba2_decode" if self.cfg.layer == "mamba2" else "gdn_decode"


class _ReplayArm:
    def __init__(self, layer: _Layer, precision: str, backend: str, sr_seed: int, S0):
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
        self.slots = list(range(layer.B))
        self.cache.init_from_state(self.slots, S0)
        self.out = torch.empty(layer.out_shape, dtype=layer.act, device=layer.dev)

    def step(self, inp):
        return self.layer.replay_step(self.cache, inp, self.backend, self.out)

    def state(self):
        return self.cache.materialize(self.slots)


class _StdArm:
    def __init__(self, layer: _Layer, dtype, S0):
        self.layer = layer
        self.S = S0.to(dtype).clone()
        self.impl = "torch"

    def step(self, inp):
        return self.layer.std_step(self.S, inp)

    def state(self):
        return self.S


def sr_seed(seed: int, pair: str) -> int:
    """The cache SR seed of ``pair`` in trace ``seed`` (independent of which other pairs run)."""
    return (seed + 1) * 1_000_003 + zlib.crc32(pair.encode()) % 1_000_000


def _make_arms(cfg: StudyConfig, layer: _Layer, S0, seed: int):
    arms = {REF: _ReplayArm(layer, "fp32", cfg.backend, 0, S0)}
    for name in cfg.pairs:
        arms[name] = _ReplayArm(layer, name, cfg.backend, sr_seed(seed, name), S0)
    for c in cfg.controls:
        if c == "ctrl:fp32-replay":
            arms[c] = _ReplayArm(layer, "fp32", cfg.backend, 0, S0)
        elif c == "ctrl:fp32-torchref":
            arms[c] = _ReplayArm(layer, "fp32", "torch", 0, S0)
        elif c == "ctrl:std-fp32":
            arms[c] = _StdArm(layer, torch.float32, S0)
        elif c == "ctrl:std-fp64":
            arms[c] = _StdArm(layer, torch.float64, S0)
        else:
            raise ValueError(f"unknown control {c!r}; valid: {', '.join(CONTROLS)}")
    return arms


# ----------------------------------------------------------------------------------------------
# Readout
# ----------------------------------------------------------------------------------------------
def _readout_matrix(vocab: int, d: int, device) -> torch.Tensor:
    g = torch.Generator().manual_seed(_READOUT_SEED)
    return (torch.randn(vocab, d, generator=g, dtype=torch.float64) / math.sqrt(d)).to(device)


def _unit_logits(y: torch.Tensor, W: torch.Tensor) -> torch.Tensor:
    """Logits at temperature 1 of the RMS-normalised output rows (fp64)."""
    z = y.reshape(y.shape[0], -1).double()
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
    """Run the fp32 arm of the first seed for ``calib_steps`` and pick the readout temperature."""
    layer = _Layer(cfg, cfg.seeds[0])
    arm = _ReplayArm(layer, "fp32", cfg.backend, 0, layer.init_state())
    zs, lam = [], torch.zeros(layer.B, cfg.state_heads, dtype=torch.float64, device=layer.dev)
    n = max(1, min(cfg.calib_steps, cfg.max_len))
    for _ in range(n):
        inp = layer.next_inputs()
        zs.append(_unit_logits(arm.step(inp), W))
        lam += layer.log_decay(inp).double()
    z = torch.cat(zs)
    tau = calibrate_temperature(z, cfg.target_entropy)
    alpha = torch.exp(lam / n)                                         # geometric-mean decay
    return dict(tau=tau, steps=n, entropy=float(_entropy(z / tau).mean()),
                alpha_mean_per_head=alpha.mean(0).tolist(),
                alpha_init_per_head=layer.alpha0.tolist())


# ----------------------------------------------------------------------------------------------
# One seed
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


def _run_seed(cfg: StudyConfig, seed: int, tau: float, progress: Optional[Callable[[int], None]] = None):
    """All arms of one seed. Returns raw per-row numbers (CPU tensors)."""
    t0 = time.time()
    layer = _Layer(cfg, seed)
    S0 = layer.init_state()
    arms = _make_arms(cfg, layer, S0, seed)
    names = [a for a in arms if a != REF]
    dev, B = layer.dev, layer.B
    W = _readout_matrix(cfg.vocab, math.prod(layer.out_shape[1:]), dev)
    grid = log_grid(cfg.max_len)
    samples = _sample_steps(grid, cfg.kl_samples)
    nG = len(grid)
    state_err = {a: torch.full((nG, B, cfg.state_heads), float("nan"), dtype=torch.float64) for a in names}
    nA = len(names)
    out_sum = torch.zeros(nG, nA, B, dtype=torch.float64, device=dev)
    out_max = torch.zeros(nG, nA, B, dtype=torch.float64, device=dev)
    out_cnt = torch.zeros(nG, dtype=torch.float64)
    kl, dlp, top1, ent = ([[] for _ in grid] for _ in range(4))   # per bin: [nA, B] per sample
    first_nf = torch.full((nA + 1, B), -1, dtype=torch.int64, device=dev)   # row 0: the reference
    gi, pend = 0, 0
    for t in range(1, cfg.max_len + 1):
        inp = layer.next_inputs()
        Y = torch.stack([arms[REF].step(inp)] + [arms[a].step(inp) for a in names])  # [1+nA, B, ...]
        Yd = Y.flatten(2).double()
        e = (Yd[1:] - Yd[:1]).norm(dim=2) / Yd[0].norm(dim=1)                    # [nA, B]
        out_sum[gi] += e
        out_max[gi] = torch.maximum(out_max[gi], torch.nan_to_num(e, nan=float("inf")))
        bad = ~torch.isfinite(Y).flatten(2).all(2)
        first_nf = torch.where((first_nf < 0) & bad, t, first_nf)
        out_cnt[gi] += 1
        if t in samples[gi]:
            LP = torch.log_softmax(_unit_logits(Y.flatten(0, 1), W).view(nA + 1, B, -1) / tau, -1)
            lr, lq = LP[0], LP[1:]
            pr = lr.exp()
            ent[gi].append((-(pr * lr).sum(-1)).cpu())
            tok = lr.argmax(-1, keepdim=True)                                     # [B, 1]
            kl[gi].append((pr[None] * (lr[None] - lq)).sum(-1).cpu())
            dlp[gi].append((lr.gather(-1, tok)[None, :, 0]
                            - lq.gather(-1, tok[None].expand(nA, B, 1))[..., 0]).abs().cpu())
            top1[gi].append((lq.argmax(-1) == tok[None, :, 0]).cpu())
        if t == grid[gi]:
            Sr = arms[REF].state().double()
            nrm = Sr.flatten(2).norm(dim=2)
            bad = [~torch.isfinite(Sr).flatten(1).all(1)]
            for a in names:
                Sa = arms[a].state().double()
                state_err[a][gi] = ((Sa - Sr).flatten(2).norm(dim=2) / nrm).cpu()
                bad.append(~torch.isfinite(Sa).flatten(1).all(1))
            first_nf = torch.where((first_nf < 0) & torch.stack(bad), t, first_nf)
            gi += 1
        pend += 1
        if progress is not None and (pend >= 64 or t == cfg.max_len):
            progress(pend)
            pend = 0
    out_mean = (out_sum.cpu() / out_cnt[:, None, None])
    out_max = out_max.cpu()
    first_nf = first_nf.cpu()

    def per_arm(lst, i, dtype=None):
        return [torch.stack([x[i] for x in b]).to(dtype or b[0].dtype) if b else torch.zeros(0, B)
                for b in lst]
    return dict(
        seed=seed, grid=grid, names=names, row_regime=layer.row_regime, classes=layer.classes,
        impl={a: arm.impl for a, arm in arms.items()},
        state_err=state_err,
        out_mean={a: out_mean[:, i] for i, a in enumerate(names)},
        out_max={a: out_max[:, i] for i, a in enumerate(names)},
        kl={a: per_arm(kl, i) for i, a in enumerate(names)},
        dlogp={a: per_arm(dlp, i) for i, a in enumerate(names)},
        top1={a: per_arm(top1, i, torch.float32) for i, a in enumerate(names)},
        ref_entropy=[torch.stack(b) if b else torch.zeros(0, B) for b in ent],
        first_nonfinite=dict(zip([REF] + names, first_nf)),
        seconds=time.time() - t0,
    )


def _seed_worker(cfg_dict, seed, tau, threads, queue):
    torch.set_num_threads(threads)
    cfg = StudyConfig(**cfg_dict)
    return _run_seed(cfg, seed, tau, (lambda n: queue.put(n)) if queue is not None else None)


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
                     if x.numel() else None for x in r["kl"][arm]])
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
        fig.savefig(p, dpi=110, bbox_inches="tight")
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
                 D: float = 1.0, workers: int = 1, threads: Optional[int] = None,
                 progress: bool = False, out: Optional[str] = None, make_plots: bool = True) -> Dict:
    """Run the study for one layer kind and return the results dict (what ``accuracy.json`` holds).

    ``pairs``: precision pair names (default: every pair of ``precision_pairs(include_extra=True)``
    but the fp32 reference); ``controls``: subset of :data:`CONTROLS` (default: fp32-replay,
    std-fp32, std-fp64, plus fp32-torchref on cute). ``shape``: ``"small"`` or a name of
    ``bench.traffic.SHAPES`` (default small on CPU, the real shape on CUDA); ``dims`` overrides.
    ``backend``: "torch" | "cute" | "auto" (default cute when CUDA is present); ``max_len``
    default 4096 on CPU, 131072 on CUDA. ``workers`` > 1 runs seeds in parallel processes (CPU);
    ``threads`` sets torch's intra-op threads for the run. ``out``: write JSON / markdown / PNGs
    there."""
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
        controls = ["ctrl:fp32-replay", "ctrl:std-fp32", "ctrl:std-fp64"]
        if backend != "torch":
            controls.append("ctrl:fp32-torchref")
    for c in controls:
        if c not in CONTROLS:
            raise ValueError(f"unknown control {c!r}; valid: {', '.join(CONTROLS)}")
    regimes = list(regimes)
    for r in regimes:
        if r not in REGIMES:
            raise ValueError(f"regime must be in {REGIMES}, got {r!r}")
    cfg = StudyConfig(layer=layer, dims=dict(dims), pairs=list(pairs), controls=list(controls),
                      max_len=int(max_len or (131072 if on_cuda else 4096)), seeds=list(seeds),
                      rows_per_regime=rows_per_regime, regimes=regimes, buffer_len=buffer_len,
                      backend=backend, device=str(device), act_dtype=act_dtype, vocab=vocab,
                      target_entropy=target_entropy, kl_samples=kl_samples,
                      calib_steps=calib_steps, slow_alpha=slow_alpha, ultra_alpha=ultra_alpha,
                      burst_p=burst_p, burst_small=burst_small, D=D)
    if vocab < 2:
        raise ValueError("vocab must be >= 2")
    old_threads = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    t0 = time.time()
    try:
        d_out = math.prod(dims[k] for k in (("H", "P") if layer == "mamba2" else ("HV", "V")))
        W = _readout_matrix(vocab, d_out, device)
        calib = _calibrate(cfg, W)
        bar = None
        if progress:
            try:
                from tqdm import tqdm
                bar = tqdm(total=cfg.max_len * len(cfg.seeds), unit="tok",
                           desc=f"accuracy {layer} ({len(pairs) + len(controls) + 1} arms)")
            except ImportError:  # pragma: no cover
                bar = None
        tick = (lambda n: bar.update(n)) if bar is not None else None
        workers = max(1, min(int(workers), len(cfg.seeds)))
        if workers > 1 and not on_cuda:
            raws = _run_parallel(cfg, calib["tau"], workers, threads or 1, tick)
        else:
            raws = [_run_seed(cfg, s, calib["tau"], tick) for s in cfg.seeds]
        if bar is not None:
            bar.close()
    finally:
        torch.set_num_threads(old_threads)
    res = _aggregate(cfg, raws, calib, time.time() - t0)
    if out:
        res["files"] = write_outputs(res, out, make_plots)
    return res


def _run_parallel(cfg, tau, workers, threads, tick):
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor
    ctx = mp.get_context("spawn")
    with ctx.Manager() as mgr:
        q = mgr.Queue()
        with ProcessPoolExecutor(workers, mp_context=ctx) as ex:
            futs = [ex.submit(_seed_worker, asdict(cfg), s, tau, threads, q) for s in cfg.seeds]
            pending = set(futs)
            while pending:
                try:
                    n = q.get(timeout=0.5)
                    if tick:
                        tick(n)
                except Exception:  # queue.Empty
                    pass
                pending = {f for f in pending if not f.done()}
            while not q.empty():
                n = q.get()
                if tick:
                    tick(n)
            return [f.result() for f in futs]


def _parse_dims(s: Optional[str]):
    if not s:
        return None
    out = {}
    for kv in s.split(","):
        k, v = kv.split("=")
        out[k.strip()] = int(v)
    return out


def _cli(args) -> int:
    layers = list(LAYERS) if args.layer == "both" else [args.layer]
    device = args.device or _default_device()
    backend = args.backend or ("cute" if torch.device(device).type == "cuda" else "torch")
    on_cpu = torch.device(device).type == "cpu"
    seeds = [int(s) for s in args.seeds.split(",")]
    workers = args.workers if args.workers is not None else (min(len(seeds), os.cpu_count() or 1)
                                                             if on_cpu else 1)
    threads = args.threads if args.threads is not None else (1 if on_cpu else None)
    for layer in layers:
        out = args.out or os.path.join("bench", "results", f"accuracy_{layer}_{backend}")
        if args.out and len(layers) > 1:
            out = os.path.join(args.out, layer)
        res = run_accuracy(
            layer, pairs=args.pairs.split(",") if args.pairs else None,
            controls=args.controls.split(",") if args.controls else None, max_len=args.max_len,
            seeds=seeds, rows_per_regime=args.rows, shape=args.shape,
            dims=_parse_dims(args.dims), buffer_len=args.L, backend=backend, device=device,
            act_dtype=args.act_dtype, vocab=args.vocab, target_entropy=args.entropy,
            kl_samples=args.kl_samples, slow_alpha=args.slow_alpha, ultra_alpha=args.ultra_alpha,
            burst_p=args.burst_p, burst_small=args.burst_small, D=args.D, workers=workers,
            threads=threads, progress=not args.no_progress, out=out, make_plots=not args.no_plots)
        print(markdown(res))
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
    p.add_argument("--seeds", default="0,1,2", help="comma-separated trace seeds")
    p.add_argument("--rows", type=int, default=4, help="sequences per regime (dense, bursty)")
    p.add_argument("--shape", default=None,
                   help="small, or a real layer shape: " + ", ".join(SHAPES) +
                        " (default: small on CPU, nemotron3-super / qwen3.5-4b on CUDA)")
    p.add_argument("--dims", default=None, help="explicit dims, e.g. H=8,P=16,N=64,G=2")
    p.add_argument("--pairs", default=None, help="comma-separated pairs (default: all + extra)")
    p.add_argument("--controls", default=None, help="comma-separated controls: " + ", ".join(CONTROLS))
    p.add_argument("--L", type=int, default=16, help="ReplaySSM buffer length")
    p.add_argument("--act-dtype", choices=list(_ACT), default="bf16")
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--entropy", type=float, default=3.0, help="target fp32 readout entropy (nats)")
    p.add_argument("--kl-samples", type=int, default=32, help="readout samples per log bin")
    p.add_argument("--slow-alpha", type=float, default=0.999)
    p.add_argument("--ultra-alpha", type=float, default=0.9999)
    p.add_argument("--burst-p", type=float, default=0.02)
    p.add_argument("--burst-small", type=float, default=0.01)
    p.add_argument("--D", type=float, default=1.0, help="Mamba-2 skip weight D (init: 1)")
    p.add_argument("--workers", type=int, default=None,
                   help="parallel seed processes (CPU; default min(#seeds, #cores))")
    p.add_argument("--threads", type=int, default=None, help="torch threads per process (CPU default 1)")
    p.add_argument("--out", default=None, help="default bench/results/accuracy_<layer>_<backend>/")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--no-progress", action="store_true")
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
