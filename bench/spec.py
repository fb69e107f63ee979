"""``replayssm-bench spec``: speculative-decoding verify latency and memory (issue 5).

For each layer kind (Mamba-2: Nemotron-3-Super H128 P64 N128 G8; GDN: Qwen3.5-4B H16 HV32 K=V=128),
batch and draft count T, timed in one run:

* **standard fp32**: one standard decode step (``mamba2_standard_decode`` / ``gdn_standard_decode``),
  the unit every ratio is expressed in;
* **snapshot T**: the vLLM-semantics snapshot verify (``replayssm_lp.snapshot``, CuTe kernels):
  1 state read + T state writes, fp32 state, acceptance drawn in 1..T;
* **ReplaySSM verify T** per precision pair: ``ops.*_verify`` of T drafts followed by ``ops.commit``
  with random acceptance 1..T *inside the graph*, as the snapshot's (the first of the T tokens is
  the one the previous step sampled: always accepted; ``commit`` itself takes 0..T, and the tests
  fuzz that; until session 45 this drew 0..T, a lower flush rate: 0.35 against 0.39 flush rows per
  row-step at T8 L16), so rows flush at their natural rate (rows start
  staggered; the first graph pass settles them). Reported as a range: the natural mix, then
  non-flush-only (every row pinned at h = max(L − T, 0), no flush) and flush-only (pinned at h = L,
  every row flushes).

Timing (DESIGN §4, bench/timing.py): CUDA graphs, slot sets rotated so the timed state is several
times the 60 MB L2, median of replays. On CPU (``--device cpu``, torch backend, for smoke tests) the
same cells are timed with wall clock.

Memory per request: ReplaySSM (both copies + scales + ring of capacity L + T + cursors,
``cache.bytes_per_slot()``) vs T fp32 snapshots (vLLM keeps 1 + num_spec = T slots per request),
and the largest batch whose SSM state fits ``--budget-gib`` for ``--num-layers`` layers.
"""
from __future__ import annotations

import json
import math
import os
import statistics
import time
from typing import Dict, List, Optional

import torch

from replayssm_lp import GDNReplayCache, Mamba2ReplayCache, ops, parse_pair
from replayssm_lp.backends import resolve
from replayssm_lp.formats import PHILOX_ROUNDS
from replayssm_lp.snapshot import gdn_snapshot_verify, mamba2_snapshot_verify

from .plotting import save_figure
from . import cli_checks, timing, traffic, warmup
from .timing import DeadlineProgress, DeadlineReached, L2_BYTES, pool_rotation, progress

DEFAULT_PAIRS = "fp32,nvfp4/fp16sr,nvfp4/fp8sr,fp8/fp32"
SHAPES = {"mamba2": "nemotron3-super", "gdn": "qwen3.5-4b"}   # the default shape per layer kind


def spec_shapes(arg: str, layers: List[str], tiny: bool) -> Dict[str, str]:
    """``--shapes`` (comma list of `replayssm-bench traffic` shape names, at most one per layer
    kind) -> the shape timed for each of ``layers`` (default :data:`SHAPES`); ``--tiny``: the
    tiny shapes. Bad values exit with a message naming the shape."""
    names = [s for s in arg.split(",") if s]
    if tiny:
        if names:
            raise SystemExit("--shapes and --tiny exclude each other")
        return {layer: "tiny" for layer in layers}
    out: Dict[str, str] = {}
    for name in names:
        d = traffic.SHAPES.get(name)
        if d is None:
            raise SystemExit(f"--shapes: unknown layer shape {name!r} (known: "
                             f"{', '.join(traffic.SHAPES)})")
        kind = d["kind"]
        if kind not in layers:
            raise SystemExit(f"--shapes: {name} is a {kind} layer, which --layer "
                             f"{'/'.join(layers)} does not time")
        if kind in out:
            raise SystemExit(f"--shapes: one shape per layer kind ({out[kind]} and {name} are "
                             f"both {kind} layers)")
        out[kind] = name
    return {layer: out.get(layer, SHAPES[layer]) for layer in layers}
TINY = {"mamba2": dict(kind="mamba2", H=4, P=8, N=32, G=2),
        "gdn": dict(kind="gdn", H=2, HV=4, K=32, V=16)}


# ------------------------------------------------------------------------------------------------
# timing on either device
# ------------------------------------------------------------------------------------------------
def time_us(step, steps: int, replays: int, device: torch.device) -> Dict[str, float]:
    """µs per step: CUDA-graph replays on GPU (bench.timing.graph_time_us), wall clock on CPU."""
    if device.type == "cuda":
        from .timing import graph_time_us
        return graph_time_us(step, steps, replays)
    for i in range(steps):            # warm up (and let the cursors settle)
        step(i)
    if timing.WARM_ONLY:
        return dict(timing.NOT_TIMED)
    ts = []
    for _ in range(replays):
        t0 = time.perf_counter()
        for i in range(steps):
            step(i)
        ts.append((time.perf_counter() - t0) * 1e6 / steps)
    return {"median_us": statistics.median(ts), "min_us": min(ts), "max_us": max(ts)}


# ------------------------------------------------------------------------------------------------
# inputs and layer-specific calls
# ------------------------------------------------------------------------------------------------
class _Layer:
    """Inputs and calls of one layer kind at one batch (T draft inputs are slices of max T)."""

    def __init__(self, kind, dims, batch, Tmax, act, dev, philox_rounds=PHILOX_ROUNDS):
        self.kind, self.dims, self.batch, self.act, self.dev = kind, dims, batch, act, dev
        self.philox_rounds = philox_rounds
        g = torch.Generator(device=dev).manual_seed(0)
        r = lambda *s: torch.randn(*s, device=dev, generator=g)  # noqa: E731
        b = batch
        if kind == "mamba2":
            H, P, N, G = dims["H"], dims["P"], dims["N"], dims["G"]
            self.state_shape = (H, P, N)
            self.inp = dict(x=r(b, Tmax, H, P).to(act), dt=r(b, Tmax, H) * 0.5 - 2.0,
                            B=r(b, Tmax, G, N).to(act), C=r(b, Tmax, G, N).to(act))
            self.A, self.D, self.dt_bias = -torch.rand(H, device=dev) * 4 - 0.5, r(H), r(H) * 0.1
            self.out_full = torch.empty(b, Tmax, H, P, dtype=act, device=dev)
        else:
            H, HV, K, V = dims["H"], dims["HV"], dims["K"], dims["V"]
            self.state_shape = (HV, V, K)
            self.inp = dict(q=r(b, Tmax, H, K).to(act), k=r(b, Tmax, H, K).to(act),
                            v=r(b, Tmax, HV, V).to(act), a=r(b, Tmax, HV), b=r(b, Tmax, HV))
            self.A_log, self.dt_bias = r(HV) * 0.5, r(HV) * 0.3
            self.out_full = torch.empty(b, Tmax, HV, V, dtype=act, device=dev)
        self._T = {}

    def drafts(self, T):
        """Contiguous [b, T, ...] inputs and out (cached per T)."""
        if T not in self._T:
            self._T[T] = ({k: v[:, :T].contiguous() for k, v in self.inp.items()},
                          self.out_full[:, :T].contiguous())
        return self._T[T]

    def one(self):
        """Single-token inputs for the standard decode step."""
        if "one" not in self._T:
            self._T["one"] = ({k: v[:, 0].contiguous() for k, v in self.inp.items()},
                              self.out_full[:, 0].contiguous())
        return self._T["one"]

    def standard(self, state, sbi, backend):
        d, out = self.one()
        if self.kind == "mamba2":
            ops.mamba2_standard_decode(state, d["x"], d["dt"], self.A, d["B"], d["C"], self.D, None,
                                       self.dt_bias, True, sbi, out=out, backend=backend)
        else:
            ops.gdn_standard_decode(state, d["q"], d["k"], d["v"], A_log=self.A_log, a=d["a"],
                                    dt_bias=self.dt_bias, b=d["b"], state_batch_indices=sbi, out=out,
                                    backend=backend)

    def snapshot(self, state, T, idx, acc, backend):
        d, out = self.drafts(T)
        if self.kind == "mamba2":
            mamba2_snapshot_verify(state, d["x"], d["dt"], self.A, d["B"], d["C"], self.D, None,
                                   self.dt_bias, True, idx, -1, out, backend, num_accepted_tokens=acc)
        else:
            gdn_snapshot_verify(state, d["q"], d["k"], d["v"], A_log=self.A_log, a=d["a"],
                                dt_bias=self.dt_bias, b=d["b"], state_indices=idx,
                                num_accepted_tokens=acc, out=out, backend=backend)

    def verify(self, cache, T, sbi, backend):
        d, out = self.drafts(T)
        if self.kind == "mamba2":
            ops.mamba2_verify(cache, d["x"], d["dt"], self.A, d["B"], d["C"], self.D, None, self.dt_bias,
                              True, sbi, out=out, backend=backend)
        else:
            ops.gdn_verify(cache, d["q"], d["k"], d["v"], A_log=self.A_log, a=d["a"], dt_bias=self.dt_bias,
                           b=d["b"], state_batch_indices=sbi, out=out, backend=backend)

    def cache(self, pair, L, T, slots):
        return make_cache(self.kind, self.dims, pair, L, T, slots, self.act, self.dev,
                          self.philox_rounds)


def make_cache(kind, dims, pair, L, T, slots, act, dev, philox_rounds=PHILOX_ROUNDS):
    if kind == "mamba2":
        return Mamba2ReplayCache(slots, dims["H"], dims["P"], dims["N"], dims["G"], precision=pair,
                                 buffer_len=L, max_draft=T, act_dtype=act, device=dev, seed=1234,
                                 philox_rounds=philox_rounds)
    return GDNReplayCache(slots, dims["H"], dims["HV"], dims["K"], dims["V"], precision=pair,
                          buffer_len=L, max_draft=T, act_dtype=act, device=dev, seed=1234,
                          philox_rounds=philox_rounds)


def _bytes_model(kind, dims, pair, L):
    d = {k: v for k, v in dims.items() if k != "kind"}
    return (traffic.mamba2_bytes(pair, **d, L=L) if kind == "mamba2" else traffic.gdn_bytes(pair, **d, L=L))


def _std_bytes(kind, dims):
    d = {k: v for k, v in dims.items() if k != "kind"}
    return (traffic.mamba2_standard_bytes(**d) if kind == "mamba2" else traffic.gdn_standard_bytes(**d))


# ------------------------------------------------------------------------------------------------
# cells
# ------------------------------------------------------------------------------------------------
def _sets(rot, batch, dev, width=None):
    """``rot`` disjoint slot sets: int32 [batch], or [batch, width] (snapshot slot tables)."""
    w = 1 if width is None else width
    out = []
    for r in range(rot):
        s = torch.arange(r * batch * w, (r + 1) * batch * w, device=dev, dtype=torch.int32)
        out.append(s if width is None else s.reshape(batch, w))
    return out


def _acceptance(batch, T, lo, n, dev, seed):
    """``n`` acceptance vectors drawn in lo..T (cycled by step; see :func:`_n_acceptance`)."""
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(lo, T + 1, (batch,), generator=g, dtype=torch.int32).to(dev) for _ in range(n)]


def _n_acceptance(rot: int) -> int:
    """How many acceptance vectors to cycle: a count prime to the slot-set rotation ``rot``, so a
    row set does not meet the same vector on every visit."""
    return next(n for n in (7, 11, 13, 17) if rot % n)    # (7 * 11 * 13 = 1001 <= max_rot)


_DT_NAME = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def layer_cells(kind, dims, shape, pairs, batches, Ts, L, replays, backend, snapshot_backend, dev,
                min_bytes, progress, snapshot_dtypes=(torch.float32,),
                cells: Optional[List[Dict]] = None, philox_rounds: int = PHILOX_ROUNDS) -> List[Dict]:
    """Every cell of one layer kind, appended to ``cells`` as it is measured (a deadline raised by
    ``progress`` keeps what was measured)."""
    cells = [] if cells is None else cells
    act = torch.bfloat16 if dev.type == "cuda" else torch.float32
    std_b = _std_bytes(kind, dims)
    for batch in batches:
        lay = _Layer(kind, dims, batch, max(Ts), act, dev, philox_rounds)
        # ---- one standard fp32 decode step
        rot = pool_rotation(std_b, batch, min_bytes=min_bytes)
        state = torch.randn(rot * batch, *lay.state_shape, device=dev) * 0.1
        sets = _sets(rot, batch, dev)
        t = time_us(lambda i: lay.standard(state, sets[i % rot], snapshot_backend), max(rot, 8),
                    replays, dev)
        cells.append(dict(layer=kind, shape=shape, batch=batch, T=1, name="standard fp32",
                          kind="standard", **t))
        state = None  # free the pool before the next cell
        progress.update(1)
        for T in Ts:
            # ---- snapshot baseline (T slots per row, acceptance 1..T), per state dtype
            for sd in snapshot_dtypes:
                name = f"snapshot {_DT_NAME[sd]}"
                snap_b = std_b / 2 * sd.itemsize / 4 * (1 + T)
                rot = pool_rotation(snap_b, batch, min_bytes=min_bytes)
                state = (torch.randn(rot * batch * T, *lay.state_shape, device=dev) * 0.1).to(sd)
                sets = _sets(rot, batch, dev, T)
                na = _n_acceptance(rot)
                accs = _acceptance(batch, T, 1, na, dev, seed=T)
                try:
                    t = time_us(lambda i: lay.snapshot(state, T, sets[i % rot], accs[i % na],
                                                       snapshot_backend), max(rot, 8), replays, dev)
                    cells.append(dict(layer=kind, shape=shape, batch=batch, T=T, name=name,
                                      kind="snapshot", **t))
                except Exception as e:  # noqa: BLE001
                    cells.append(dict(layer=kind, shape=shape, batch=batch, T=T, name=name,
                                      kind="snapshot", error=f"{type(e).__name__}: {e}"))
                state = None  # free the pool before the next cell
                progress.update(1)
            for pair in pairs:
                cells += _verify_cells(lay, shape, pair, batch, T, L, replays, backend, dev, min_bytes)
                progress.update(1)
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    return cells


def _verify_cells(lay, shape, pair, batch, T, L, replays, backend, dev, min_bytes):
    base = dict(layer=lay.kind, shape=shape, batch=batch, T=T, L=L, name=pair, kind="replay")
    tb = _bytes_model(lay.kind, lay.dims, pair, L)
    rot = pool_rotation(tb.amortized, batch, min_bytes=min_bytes)
    cache = lay.cache(pair, L, T, rot * batch)
    try:
        if backend != "torch":
            resolve(backend, f"{lay.kind}_verify", cache)   # raises when no CuTe verify is registered
    except RuntimeError as e:
        return [dict(base, error=str(e))]
    cache.init_from_state(list(range(cache.num_slots)),
                          torch.randn(cache.num_slots, cache.state_heads, cache.rows, cache.cols,
                                      device=dev) * 0.1)
    s = torch.arange(cache.num_slots, device=dev, dtype=torch.int32)
    cache.write_pos.copy_(s % (L + 1))          # staggered rows
    sets = _sets(rot, batch, dev)
    na = _n_acceptance(rot)
    accs = _acceptance(batch, T, 1, na, dev, seed=100 + T)
    commit_backend = backend

    def step(i):
        sbi = sets[i % rot]
        lay.verify(cache, T, sbi, backend)
        ops.commit(cache, accs[i % na], sbi, backend=commit_backend)

    steps = rot * max(4, -(-L // max(T, 1)))
    cells = []
    try:
        t = time_us(step, steps, replays, dev)
        # flush rate of the natural mix, counted over one more eager pass
        fl0 = cache.flush_count.sum().item()
        for i in range(steps):
            step(i)
        frs = (cache.flush_count.sum().item() - fl0) / (steps * batch)
        cells.append(dict(base, flush_per_row_step=frs, **t))
        for phase, pos in (("nonflush", max(L - T, 0)), ("flush", L)):
            held = torch.full_like(cache.write_pos, pos)

            def pinned(i, held=held):
                if i % rot == 0:
                    cache.write_pos.copy_(held)
                step(i)
            t = time_us(pinned, rot, replays, dev)
            cells.append(dict(base, name=f"{pair} [{phase} only]", kind="phase", **t))
        if L - T < 0:
            cells[-2]["note"] = "T > L: every verify flushes"
    except Exception as e:  # noqa: BLE001
        cells.append(dict(base, error=f"{type(e).__name__}: {e}"))
    cache = None  # noqa: F841  (free the pool before the next cell)
    return cells


# ------------------------------------------------------------------------------------------------
# memory
# ------------------------------------------------------------------------------------------------
def memory_rows(kind, dims, shape, pairs, Ts, L, budget_gib, num_layers) -> List[Dict]:
    """Bytes per request (one layer) and the max batch fitting the budget over ``num_layers``."""
    rows = []
    elems = math.prod(v for k, v in dims.items() if k in (("H", "P", "N") if kind == "mamba2"
                                                            else ("HV", "V", "K")))
    budget = budget_gib * 2**30
    for T in Ts:
        for name, per in [(f"snapshot fp32 (T={T} slots)", T * elems * 4),
                          (f"snapshot bf16 (T={T} slots)", T * elems * 2)]:
            rows.append(dict(layer=kind, shape=shape, T=T, name=name, bytes_per_request=per,
                             max_batch=int(budget // (per * num_layers))))
        for pair in pairs:
            per = make_cache(kind, dims, pair, L, T, 1, torch.bfloat16, "cpu").bytes_per_slot()
            rows.append(dict(layer=kind, shape=shape, T=T, name=f"ReplaySSM {pair} (L={L})",
                             bytes_per_request=per, max_batch=int(budget // (per * num_layers))))
    return rows


# ------------------------------------------------------------------------------------------------
# report
# ------------------------------------------------------------------------------------------------
def _fmt(c):
    return "error" if "median_us" not in c else f"{c['median_us']:.1f}"


def render(cells: List[Dict], mem: List[Dict], meta: Dict) -> str:
    lines = [f"# replayssm-bench spec ({meta['device']}, backend {meta['backend']}, L={meta['L']})", "",
             "Layer shapes: " + ", ".join(f"{k} {v}" for k, v in meta.get("shapes", {}).items()),
             "",
             "Verify of T drafts + commit with random acceptance (1..T, as the snapshot's) "
             "inside the graph; range: natural flush mix [non-flush only – flush only]. Ratios: "
             "to one standard fp32 decode step of the same batch, and the fp32 snapshot "
             "baseline's time over this one.", "",
             "| layer | batch | T | kernel | µs (natural) | µs [non-flush – flush] | flush rows/step | "
             "× standard fp32 | snapshot ÷ this |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|"]
    std = {(c["layer"], c["batch"]): c.get("median_us") for c in cells if c["kind"] == "standard"}
    snap = {(c["layer"], c["batch"], c["T"]): c.get("median_us") for c in cells
            if c["kind"] == "snapshot" and c["name"] == "snapshot fp32"}
    phase = {(c["layer"], c["batch"], c["T"], c["name"]): c for c in cells if c["kind"] == "phase"}
    for c in cells:
        if c["kind"] == "phase":
            continue
        key = (c["layer"], c["batch"])
        base, sn = std.get(key), snap.get(key + (c["T"],))
        med = c.get("median_us")
        rng = "-"
        if c["kind"] == "replay" and med is not None:
            nf = phase.get(key + (c["T"], f"{c['name']} [nonflush only]"), {}).get("median_us")
            fl = phase.get(key + (c["T"], f"{c['name']} [flush only]"), {}).get("median_us")
            rng = f"{nf:.1f} – {fl:.1f}" if nf is not None and fl is not None else "-"
        ratio = f"{med / base:.2f}×" if med and base else "-"
        vs_snap = f"{sn / med:.2f}×" if (med and sn and c["kind"] == "replay") else "-"
        frs = c.get("flush_per_row_step")
        frs = f"{frs:.2f}" if frs is not None else "-"
        name = c["name"] + (f" ({c['error'][:60]})" if "error" in c else "")
        lines.append(f"| {c['layer']} | {c['batch']} | {c['T']} | {name} | {_fmt(c)} | {rng} | {frs} | "
                     f"{ratio} | {vs_snap} |")
    lines += ["", "## Targets (issue 5)", ""] + targets(cells)
    lines += ["", f"## Memory per request (one layer) and max batch in {meta['budget_gib']} GiB "
              f"over {meta['num_layers']} layer(s)", "",
              "| layer | T | state representation | MiB per request | max batch |", "|---|---:|---|---:|---:|"]
    for m in mem:
        lines.append(f"| {m['layer']} | {m['T']} | {m['name']} | {m['bytes_per_request'] / 2**20:.2f} | "
                     f"{m['max_batch']:,} |")
    return "\n".join(lines)


def targets(cells: List[Dict], batch: int = 256, T: int = 8) -> List[str]:
    """The three targets of issue 5 at batch 256, T = 8 (lines of markdown; '-' where not measured)."""
    out = []

    def get(layer, name, kind, t=T):
        for c in cells:
            if (c["layer"], c["batch"], c["T"], c["name"], c["kind"]) == (layer, batch, t, name, kind):
                return c.get("median_us")
        return None
    for layer in sorted({c["layer"] for c in cells}):
        std = get(layer, "standard fp32", "standard", 1)
        snap = get(layer, "snapshot fp32", "snapshot")
        fp32 = get(layer, "fp32", "replay")
        fp32_fl = get(layer, "fp32 [flush only]", "phase")
        nv = get(layer, "nvfp4/fp16sr", "replay")

        def line(what, val, goal, ok):
            v = "not measured" if val is None else f"{val:.2f}×"
            out.append(f"- {layer}: {what} = {v} (target {goal}) "
                       f"{'' if val is None else ('PASS' if ok(val) else 'MISS')}")
        line(f"fp32 verify of {T} / standard fp32 step, b{batch}",
             fp32 / std if fp32 and std else None, "≤ 1.0×", lambda v: v <= 1.0)
        if fp32_fl and std:
            out.append(f"  (flush-only rows: {fp32_fl / std:.2f}×)")
        line(f"snapshot / fp32 verify, T={T}, b{batch}", snap / fp32 if snap and fp32 else None,
             "≥ 4×", lambda v: v >= 4.0)
        line(f"nvfp4/fp16sr verify of {T} / standard fp32 step, b{batch}",
             nv / std if nv and std else None, "≤ 0.5×", lambda v: v <= 0.5)
    return out


def plot(cells: List[Dict], out_dir: str) -> List[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    paths = []
    for layer in sorted({c["layer"] for c in cells}):
        Ts = sorted({c["T"] for c in cells if c["layer"] == layer and c["kind"] != "standard"})
        fig, axes = plt.subplots(1, len(Ts), figsize=(4.2 * len(Ts), 4), squeeze=False)
        std = {c["batch"]: c.get("median_us") for c in cells if c["layer"] == layer and c["kind"] == "standard"}
        for ax, T in zip(axes[0], Ts):
            names = dict.fromkeys(c["name"] for c in cells if c["layer"] == layer and c["T"] == T
                                  and c["kind"] in ("snapshot", "replay"))
            for n in names:
                pts = sorted((c["batch"], c["median_us"] / std[c["batch"]]) for c in cells
                             if c["layer"] == layer and c["T"] == T and c["name"] == n
                             and c.get("median_us") and std.get(c["batch"]))
                if pts:
                    b, r = zip(*pts)
                    ax.plot(b, r, "--" if n.startswith("snapshot") else "-", marker="o", label=n)
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"T={T}")
            ax.set_xlabel("batch")
            ax.grid(True, alpha=0.3)
        axes[0][0].set_ylabel("verify time / one standard fp32 step")
        axes[0][-1].legend(fontsize=7)
        fig.suptitle(f"{layer}: speculative verify (+ commit), natural flush mix")
        fig.tight_layout()
        p = os.path.join(out_dir, f"spec_{layer}.png")
        save_figure(fig, p)
        plt.close(fig)
        paths.append(p)
    return paths


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------
def run(args) -> int:
    t_start = time.time()
    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no CUDA GPU is visible")
    backend = args.backend or ("cute" if dev.type == "cuda" else "torch")
    snapshot_backend = backend
    pairs = [p for p in args.pairs.split(",") if p]
    for p in pairs:
        try:
            parse_pair(p)
        except ValueError as e:
            raise SystemExit(f"--pairs: {e}") from None
    layers = ["mamba2", "gdn"] if args.layer == "both" else [args.layer]
    shapes = spec_shapes(args.shapes, layers, args.tiny)
    batches = cli_checks.int_list("--batches", args.batches, 1)
    Ts = cli_checks.int_list("--T", args.T, 1, 16)
    if not 1 <= args.L <= 64:
        raise SystemExit(f"--L must be in 1..64, got {args.L}")
    cli_checks.at_least("--replays", args.replays, 1)
    cli_checks.at_least("--num-layers", args.num_layers, 1)
    cli_checks.at_least("--deadline", args.deadline, 0)
    cli_checks.at_least("--warm-jobs", args.warm_jobs, 0)
    args.philox_rounds = cli_checks.philox_rounds(args.philox_rounds)
    if not args.budget_gib > 0:
        raise SystemExit(f"--budget-gib must be > 0, got {args.budget_gib}")
    if dev.type == "cpu":
        torch.set_num_threads(1)   # small CPU runs: intra-op threads cost more than they save
    min_bytes = 4 * L2_BYTES if dev.type == "cuda" else 0
    snapshot_dtypes = []
    for n in args.snapshot_dtypes.split(","):
        dt = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}.get(n)
        if dt is None:
            raise SystemExit(f"--snapshot-dtypes: unknown state dtype {n!r} (fp32, bf16, fp16)")
        snapshot_dtypes.append(dt)
    if not args.warm_only:
        cli_checks.out_dir("--out", args.out)
    # the warm-up processes share this run's deadline (they start now)
    warmup.setup(args, pairs, ["--deadline", f"{args.deadline:g}"] if args.deadline else [])
    total = len(layers) * len(batches) * (1 + len(Ts) * (len(snapshot_dtypes) + len(pairs)))
    prog = progress(total, "spec")
    # the deadline, counted from the start of the command (warm-up included), is checked between
    # cells: what was measured is kept
    deadline = DeadlineProgress(prog, t_start + args.deadline if args.deadline else None)
    t0 = time.time()
    cells, mem = [], []
    error = None
    for layer in layers:
        shape = shapes[layer]
        dims = TINY[layer] if args.tiny else traffic.SHAPES[shape]
        mem += memory_rows(layer, dims, shape, pairs, sorted(set(Ts)), args.L, args.budget_gib,
                           args.num_layers)
        if deadline.reached or error is not None:
            continue
        try:
            layer_cells(layer, dims, shape, pairs, batches, Ts, args.L, args.replays, backend,
                        snapshot_backend, dev, min_bytes, deadline, snapshot_dtypes, cells,
                        philox_rounds=args.philox_rounds)
        except DeadlineReached:
            print(f"\n--deadline {args.deadline:g} s reached: {len(cells)} cells measured, the "
                  f"rest skipped")
        except Exception as e:    # keep what was measured; re-raised once it is written
            error = e
            print(f"\n{type(e).__name__} after {len(cells)} cells: {e}; writing those, then "
                  f"stopping")
    prog.close()
    if args.warm_only:
        if error is not None:
            raise error
        return 0
    meta = dict(device=torch.cuda.get_device_name() if dev.type == "cuda" else "cpu",
                torch=torch.__version__, backend=backend, L=args.L, replays=args.replays,
                shapes=shapes,
                dims={layer: {k: v for k, v in (TINY[layer] if args.tiny
                                                  else traffic.SHAPES[shapes[layer]]).items()
                              if k != "kind"} for layer in layers},
                pairs=pairs, batches=batches, T=Ts,
                philox_rounds=args.philox_rounds,
                budget_gib=args.budget_gib, num_layers=args.num_layers, seconds=time.time() - t0,
                complete=not deadline.reached and error is None,
                error=None if error is None else f"{type(error).__name__}: {error}",
                **cli_checks.run_meta(getattr(args, "argv", None)))
    if dev.type == "cuda" and error is None:   # (after a device fault it would fault too)
        from .timing import copy_bandwidth_gbs
        meta["copy_gbs"] = copy_bandwidth_gbs()
    with open(os.path.join(args.out, "spec.json"), "w") as f:
        json.dump(dict(meta=meta, cells=cells, memory=mem), f, indent=1)
    md = render(cells, mem, meta)
    if error is not None:
        md += f"\n\n**Incomplete:** stopped by {type(error).__name__}: {error}"
    with open(os.path.join(args.out, "spec.md"), "w") as f:
        f.write(md + "\n")
    if not args.no_plots:
        try:
            plot(cells, args.out)
        except ImportError:
            pass
    print(md)
    warmup.report(args)
    if error is not None:
        raise error
    return 0


def register(sub):
    p = sub.add_parser("spec", help="speculative verify latency vs standard decode and the snapshot "
                                    "baseline, memory per request (GPU; --device cpu for a smoke run)")
    p.add_argument("--layer", default="both", choices=["mamba2", "gdn", "both"])
    p.add_argument("--shapes", default="",
                   help="comma list of layer shapes, at most one per layer kind (default: "
                        "nemotron3-super, qwen3.5-4b; `replayssm-bench traffic --help` lists them)")
    p.add_argument("--pairs", default=DEFAULT_PAIRS, help="comma list of precision pairs")
    p.add_argument("--batches", default="1,8,32,128,256,512")
    p.add_argument("--T", default="1,2,4,8", help="comma list of draft counts")
    p.add_argument("--L", type=int, default=16, help="ReplaySSM buffer length")
    p.add_argument("--replays", type=int, default=15)
    p.add_argument("--budget-gib", type=float, default=40.0,
                   help="SSM-state memory budget for the max-batch column")
    p.add_argument("--num-layers", type=int, default=1,
                   help="SSM layers sharing the budget (1: the budget is per layer)")
    p.add_argument("--snapshot-dtypes", default="fp32",
                   help="state dtypes of the snapshot baseline (comma list of fp32, bf16, fp16)")
    cli_checks.add_philox_rounds(p)
    p.add_argument("--device", default="", help="cuda (default when visible) or cpu")
    p.add_argument("--backend", default="", help="cute (GPU default) or torch")
    p.add_argument("--tiny", action="store_true", help="tiny layer shapes (CPU smoke runs)")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--out", default="bench/results/spec")
    p.add_argument("--deadline", type=float, default=0.0,
                   help="stop starting new cells after this many seconds (counted from the start, "
                        "warm-up included) and write what was measured (0 = no limit)")
    warmup.add_arguments(p)
    p.set_defaults(fn=run)
