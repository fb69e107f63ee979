"""``replayssm-bench sweep``: decode latency across precision pairs × batch × L, with the standard
decode baselines (ours fp32/bf16, mamba_ssm's Triton SSU / FLA's fused_recurrent for GDN) timed in
the same run.

Method (DESIGN §4): CUDA-graph replays of whole L-cycles; rows at staggered buffer positions
(slot s starts at write_pos = s mod L, so every step has ~batch/L flush rows and one step's time is
the amortized cost); slot sets rotated so the timed state is several times the 60 MB L2; median of
replays. Effective GB/s = traffic model bytes (bench/traffic.py) / time, against the copy bandwidth
measured in the same run.
"""
from __future__ import annotations

import json
import os
import time
from typing import Dict, List, Optional

import torch

from replayssm_lp import GDNReplayCache, Mamba2ReplayCache, parse_pair
from replayssm_lp import ops
from replayssm_lp.formats import PHILOX_ROUNDS

from .plotting import save_figure
from . import cli_checks, traffic, warmup
from .timing import (DeadlineProgress, DeadlineReached, copy_bandwidth_gbs, graph_time_us,
                     pool_rotation, progress)

DEFAULT_PAIRS = ["fp32", "nvfp4/fp16sr", "nvfp4/fp8sr", "nvfp4/fp32", "fp8/fp16sr", "fp8/fp32",
                 "fp16/fp32", "bf16/fp32", "fp16sr", "bf16sr", "fp8sr", "nvfp4sr"]


def _mamba2_inputs(batch, H, P, N, G, act, dev):
    g = torch.Generator(device=dev).manual_seed(0)
    r = lambda *s: torch.randn(*s, device=dev, generator=g)  # noqa: E731
    return dict(x=r(batch, H, P).to(act), dt=r(batch, H) * 0.5 - 2.0, A=-torch.rand(H, device=dev) * 4 - 0.5,
                B=r(batch, G, N).to(act), C=r(batch, G, N).to(act), D=r(H), dt_bias=r(H) * 0.1)


def _stagger(cache, L):
    s = torch.arange(cache.num_slots, device=cache.device, dtype=torch.int32)
    cache.write_pos.copy_(s % L)
    cache.ring_origin.zero_()


def mamba2_cells(shape: str, pairs: List[str], batches: List[int], Ls: List[int], replays: int,
                 peers: bool, progress, phases: bool = False, cells: Optional[List[Dict]] = None,
                 order: bool = False, max_draft: int = 0, philox_rounds: int = PHILOX_ROUNDS) -> List[Dict]:
    dims = traffic.SHAPES[shape]
    H, P, N, G = dims["H"], dims["P"], dims["N"], dims["G"]
    dev, act = torch.device("cuda"), torch.bfloat16
    cells = [] if cells is None else cells
    for batch in batches:
        inp = _mamba2_inputs(batch, H, P, N, G, act, dev)
        out = torch.empty(batch, H, P, dtype=act, device=dev)
        # --- standard decode baselines
        for sd, name in ((torch.float32, "standard fp32"), (torch.bfloat16, "standard bf16")):
            sbytes = traffic.mamba2_standard_bytes(H, P, N, G, state_bytes=sd.itemsize)
            rot = pool_rotation(sbytes, batch)
            state = (torch.randn(rot * batch, H, P, N, device=dev) * 0.1).to(sd)
            sets = [torch.arange(r * batch, (r + 1) * batch, device=dev, dtype=torch.int32) for r in range(rot)]

            def step(i, state=state, sets=sets):
                ops.mamba2_standard_decode(state, inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"],
                                           inp["D"], None, inp["dt_bias"], True, sets[i % len(sets)],
                                           out=out, backend="cute")
            t = graph_time_us(step, max(rot, 8), replays)
            cells.append(dict(shape=shape, kind="standard", name=name, batch=batch, L=None,
                              bytes=sbytes * batch, **t))
            if peers and sd == torch.float32:
                try:
                    from mamba_ssm.ops.triton.selective_state_update import selective_state_update
                    A3 = inp["A"][:, None, None].expand(H, P, N)
                    dt3 = inp["dt"][..., None].expand(batch, H, P)
                    D2 = inp["D"][:, None].expand(H, P)
                    db2 = inp["dt_bias"][:, None].expand(H, P)

                    def step_ms(i, state=state, sets=sets):
                        selective_state_update(state, inp["x"], dt3, A3, inp["B"], inp["C"], D2, None,
                                               db2, True, sets[i % len(sets)])
                    t = graph_time_us(step_ms, max(rot, 8), replays)
                    cells.append(dict(shape=shape, kind="peer", name="mamba_ssm triton fp32", batch=batch,
                                      L=None, bytes=sbytes * batch, **t))
                except Exception as e:  # noqa: BLE001
                    print(f"# mamba_ssm peer unavailable: {type(e).__name__}: {e}")
            del state
            progress.update(1)
        # --- ReplaySSM, every pair and L
        def make(pair, L, slots):
            return Mamba2ReplayCache(slots, H, P, N, G, precision=pair, buffer_len=L, act_dtype=act,
                                     max_draft=max_draft, device=dev, seed=1234,
                                     philox_rounds=philox_rounds)

        def decode(cache, sbi):
            ops.mamba2_decode(cache, inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], inp["D"], None,
                              inp["dt_bias"], True, sbi, out=out, backend="cute")
        for L in Ls:
            for pair in pairs:
                cells += _replay_cells(shape, pair, batch, L, traffic.mamba2_bytes(pair, H, P, N, G, L),
                                       make, decode, replays, phases, order)
                progress.update(1)
    return cells


def launch_overhead(shape: str) -> Dict[str, float]:
    """Host µs per eager call at batch 1: the public op (validation + dispatch) and the kernel
    launcher alone (the TVM-FFI fast path)."""
    from .timing import host_overhead_us
    dims = traffic.SHAPES[shape]
    H, P, N, G = dims["H"], dims["P"], dims["N"], dims["G"]
    dev, act = torch.device("cuda"), torch.bfloat16
    inp = _mamba2_inputs(1, H, P, N, G, act, dev)
    out = torch.empty(1, H, P, dtype=act, device=dev)
    sbi = torch.zeros(1, dtype=torch.int32, device=dev)
    cache = Mamba2ReplayCache(2, H, P, N, G, precision="nvfp4/fp16sr", buffer_len=16, act_dtype=act,
                              device=dev)
    state = torch.zeros(2, H, P, N, device=dev)
    a = (inp["x"], inp["dt"], inp["A"], inp["B"], inp["C"], inp["D"], None, inp["dt_bias"], True, sbi)
    from cute_kernels.mamba2_replay import mamba2_replay_decode_cute
    from cute_kernels.mamba2_standard import mamba2_standard_decode_cute
    res = {
        "mamba2_decode (public op)": host_overhead_us(lambda: ops.mamba2_decode(cache, *a, out=out, backend="cute")),
        "mamba2_replay_decode_cute (launcher)": host_overhead_us(lambda: mamba2_replay_decode_cute(cache, *a, -1, out)),
        "mamba2_standard_decode (public op)": host_overhead_us(
            lambda: ops.mamba2_standard_decode(state, *a, out=out, backend="cute")),
        "mamba2_standard_decode_cute (launcher)": host_overhead_us(
            lambda: mamba2_standard_decode_cute(state, *a, -1, out)),
    }
    return res


def gdn_launch_overhead(shape: str) -> Dict[str, float]:
    """Host µs per eager call at batch 1 of the GDN ops (as :func:`launch_overhead`)."""
    from .timing import host_overhead_us
    dims = traffic.SHAPES[shape]
    H, HV, K, V = dims["H"], dims["HV"], dims["K"], dims["V"]
    dev, act = torch.device("cuda"), torch.bfloat16
    inp = _gdn_inputs(1, H, HV, K, V, act, dev)
    gates = dict(A_log=inp["A_log"], a=inp["a"], dt_bias=inp["dt_bias"], b=inp["b"])
    out = torch.empty(1, HV, V, dtype=act, device=dev)
    sbi = torch.zeros(1, dtype=torch.int32, device=dev)
    cache = GDNReplayCache(2, H, HV, K, V, precision="nvfp4/fp16sr", buffer_len=16, act_dtype=act,
                           device=dev)
    state = torch.zeros(2, HV, V, K, device=dev)
    q, k, v = inp["q"], inp["k"], inp["v"]
    return {
        "gdn_decode (public op)": host_overhead_us(lambda: ops.gdn_decode(
            cache, q, k, v, **gates, state_batch_indices=sbi, out=out, backend="cute")),
        "gdn_standard_decode (public op)": host_overhead_us(lambda: ops.gdn_standard_decode(
            state, q, k, v, **gates, state_batch_indices=sbi, out=out, backend="cute")),
    }


def _gdn_inputs(batch, H, HV, K, V, act, dev):
    g = torch.Generator(device=dev).manual_seed(0)
    r = lambda *s: torch.randn(*s, device=dev, generator=g)  # noqa: E731
    return dict(q=r(batch, H, K).to(act), k=r(batch, H, K).to(act), v=r(batch, HV, V).to(act),
                A_log=r(HV) * 0.5, a=r(batch, HV), dt_bias=r(HV) * 0.3, b=r(batch, HV))


def gdn_cells(shape: str, pairs: List[str], batches: List[int], Ls: List[int], replays: int,
              peers: bool, progress, phases: bool = False, cells: Optional[List[Dict]] = None,
              order: bool = False, max_draft: int = 0, philox_rounds: int = PHILOX_ROUNDS) -> List[Dict]:
    dims = traffic.SHAPES[shape]
    H, HV, K, V = dims["H"], dims["HV"], dims["K"], dims["V"]
    dev, act = torch.device("cuda"), torch.bfloat16
    cells = [] if cells is None else cells
    for batch in batches:
        inp = _gdn_inputs(batch, H, HV, K, V, act, dev)
        out = torch.empty(batch, HV, V, dtype=act, device=dev)
        gates = dict(A_log=inp["A_log"], a=inp["a"], dt_bias=inp["dt_bias"], b=inp["b"])
        for sd, name in ((torch.float32, "standard fp32"), (torch.bfloat16, "standard bf16")):
            sbytes = traffic.gdn_standard_bytes(H, HV, K, V, state_bytes=sd.itemsize)
            rot = pool_rotation(sbytes, batch)
            state = (torch.randn(rot * batch, HV, V, K, device=dev) * 0.1).to(sd)
            sets = [torch.arange(r * batch, (r + 1) * batch, device=dev, dtype=torch.int32) for r in range(rot)]

            def step(i, state=state, sets=sets):
                ops.gdn_standard_decode(state, inp["q"], inp["k"], inp["v"], **gates,
                                        state_batch_indices=sets[i % len(sets)], out=out, backend="cute")
            t = graph_time_us(step, max(rot, 8), replays)
            cells.append(dict(shape=shape, kind="standard", name=name, batch=batch, L=None,
                              bytes=sbytes * batch, **t))
            if peers and sd == torch.float32:
                try:
                    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
                    from replayssm_lp.reference import gdn_gates
                    gg, bb = gdn_gates(None, None, inp["A_log"], inp["a"], inp["dt_bias"], inp["b"])
                    q4, k4, v4 = inp["q"][:, None], inp["k"][:, None], inp["v"][:, None]
                    g4, b4 = gg[:, None].contiguous(), bb[:, None].to(act).contiguous()
                    inits = [torch.randn(batch, HV, K, V, device=dev) * 0.1 for _ in range(rot)]

                    def step_fla(i, inits=inits):
                        fused_recurrent_gated_delta_rule(q4, k4, v4, g=g4, beta=b4,
                                                         initial_state=inits[i % len(inits)],
                                                         output_final_state=True,
                                                         use_qk_l2norm_in_kernel=True)
                    t = graph_time_us(step_fla, max(rot, 8), replays)
                    cells.append(dict(shape=shape, kind="peer", name="FLA fused_recurrent fp32",
                                      batch=batch, L=None, bytes=sbytes * batch, **t))
                    del inits
                except Exception as e:  # noqa: BLE001
                    print(f"# FLA peer unavailable: {type(e).__name__}: {e}")
            del state
            progress.update(1)
        def make(pair, L, slots):
            return GDNReplayCache(slots, H, HV, K, V, precision=pair, buffer_len=L, act_dtype=act,
                                  max_draft=max_draft, device=dev, seed=1234,
                                  philox_rounds=philox_rounds)

        def decode(cache, sbi):
            ops.gdn_decode(cache, inp["q"], inp["k"], inp["v"], **gates, state_batch_indices=sbi,
                           out=out, backend="cute")
        for L in Ls:
            for pair in pairs:
                cells += _replay_cells(shape, pair, batch, L, traffic.gdn_bytes(pair, H, HV, K, V, L),
                                       make, decode, replays, phases, order)
                progress.update(1)
    return cells


def _replay_cells(shape, pair, batch, L, tb, make, decode, replays, phases, order=False):
    """Time one ReplaySSM configuration: a pool of rotated slot sets (state >> L2), rows staggered
    over the L-cycle, a graph of whole cycles; optionally the pinned non-flush / flush phases and
    the grid-order experiment (:func:`_order_cells`)."""
    dev = torch.device("cuda")
    rot = pool_rotation(tb.amortized, batch)
    cache = make(pair, L, rot * batch)
    cache.init_from_state(list(range(cache.num_slots)),
                          torch.randn(cache.num_slots, cache.state_heads, cache.rows, cache.cols,
                                      device=dev) * 0.1)
    _stagger(cache, L)
    sets = [torch.arange(r * batch, (r + 1) * batch, device=dev, dtype=torch.int32) for r in range(rot)]

    def step(i):
        decode(cache, sets[i % len(sets)])
    t = graph_time_us(step, rot * L, replays)
    cells = [dict(shape=shape, kind="replay", name=pair, batch=batch, L=L, bytes=tb.amortized * batch, **t)]
    if phases:
        cells += _phase_cells(shape, pair, batch, L, tb, cache, sets, step, replays)
    if order:
        cells += _order_cells(shape, pair, batch, L, tb, cache, sets, decode, replays)
    del cache
    torch.cuda.empty_cache()
    return cells


def _phase_cells(shape, pair, batch, L, tb, cache, sets, step, replays):
    """Non-flush-only and flush-only steps: every row pinned at one buffer position."""
    cells = []
    for phase, pos, nbytes in (("nonflush", L // 2, tb.nonflush), ("flush", L, tb.flush)):
        held = torch.full_like(cache.write_pos, pos)

        def step_phase(i, held=held):
            if i % len(sets) == 0:
                cache.write_pos.copy_(held)
            step(i)
        t = graph_time_us(step_phase, len(sets), replays)
        cells.append(dict(shape=shape, kind="phase", name=f"{pair} [{phase} only]",
                          batch=batch, L=L, bytes=nbytes * batch, **t))
    return cells


def flush_order_sets(sets: List[torch.Tensor], L: int):
    """Slot order of every step of one L-cycle over the rotated ``sets`` (step ``v·rot + r`` uses
    set ``r`` for the ``v``-th time) when the cycle starts from ``write_pos = (s mod L) + 1``: each
    slot then flushes exactly once per cycle, at the visit ``v`` with ``(s mod L) + 1 + v ≡ 0
    (mod L)``. Returns ``(grid, flush_first)``: per step the set as it is, and the same slots with
    the ones that flush at that step first (their CTAs are then the first the GPU schedules)."""
    grid, first = [], []
    for v in range(L):
        for s in sets:
            fl = (((s % L) + 1 + v) % L) == 0
            grid.append(s)
            first.append(torch.cat([s[fl], s[~fl]]).contiguous())
    return grid, first


def _order_cells(shape, pair, batch, L, tb, cache, sets, decode, replays):
    """The same staggered cycle (every slot flushes once per L steps) with the batch rows in grid
    order and with the flushing rows first: a flush CTA lives ~10x a non-flush one, and one that
    starts late holds the step open (``tests/gpu_scripts/prof_mamba2_replay.py``)."""
    held = (torch.arange(cache.num_slots, device=cache.device, dtype=torch.int32) % L) + 1
    cells = []
    for name, seq in zip(("grid order", "flush rows first"), flush_order_sets(sets, L)):
        def step_o(i, seq=seq):
            if i == 0:
                cache.write_pos.copy_(held)
            decode(cache, seq[i])
        t = graph_time_us(step_o, len(seq), replays)
        cells.append(dict(shape=shape, kind="order", name=f"{pair} [{name}]", batch=batch, L=L,
                          bytes=tb.amortized * batch, **t))
    return cells


def render(cells: List[Dict], copy_gbs: float) -> str:
    """Markdown: one row per (shape, batch, L, name)."""
    lines = [f"Copy bandwidth measured in this run: {copy_gbs:,.0f} GB/s (read + write).", "",
             "| shape | batch | L | kernel | µs/step | vs standard fp32 | GB/s (model) | % copy BW |",
             "|---|---:|---:|---|---:|---:|---:|---:|"]
    std = {(c["shape"], c["batch"]): c["median_us"] for c in cells if c["name"] == "standard fp32"}
    for c in cells:
        gbs = c["bytes"] / (c["median_us"] * 1e-6) / 1e9
        base = std.get((c["shape"], c["batch"]))
        sp = f"{base / c['median_us']:.2f}x" if base else "-"
        lines.append(f"| {c['shape']} | {c['batch']} | {c['L'] or '-'} | {c['name']} | "
                     f"{c['median_us']:.1f} | {sp} | {gbs:,.0f} | {100 * gbs / copy_gbs:.0f}% |")
    return "\n".join(lines)


def plot(cells: List[Dict], out_dir: str, device: str = "") -> List[str]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    paths = []
    for shape in sorted({c["shape"] for c in cells}):
        for L in sorted({c["L"] for c in cells if c["L"]}):
            fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, 5))
            std = {c["batch"]: c["median_us"] for c in cells if c["shape"] == shape and c["name"] == "standard fp32"}
            names = [n for n in dict.fromkeys(c["name"] for c in cells
                                              if c["shape"] == shape and c["kind"] != "phase")
                     if any(c["name"] == n and (c["L"] in (None, L)) for c in cells)]
            for n in names:
                pts = sorted((c["batch"], c["median_us"]) for c in cells
                             if c["shape"] == shape and c["name"] == n and c["L"] in (None, L))
                if not pts:
                    continue
                b, t = zip(*pts)
                style = "--" if any(c["kind"] != "replay" and c["name"] == n for c in cells) else "-"
                a1.plot(b, t, style, marker="o", label=n)
                a2.plot(b, [std[x] / y for x, y in pts if x in std], style, marker="o", label=n)
            for a, yl in ((a1, "µs per step (amortized over the L-cycle)"), (a2, "speedup vs standard fp32")):
                a.set_xscale("log", base=2)
                a.set_xlabel("batch")
                a.set_ylabel(yl)
                a.grid(True, alpha=0.3)
            a1.set_yscale("log")
            a2.legend(fontsize=7, ncol=2)
            fig.suptitle(f"{shape}, L={L}, bf16 activations" + (f", {device}" if device else ""))
            p = os.path.join(out_dir, f"sweep_{shape}_L{L}.png")
            fig.tight_layout()
            save_figure(fig, p)
            plt.close(fig)
            paths.append(p)
    return paths


def run(args) -> int:
    t_start = time.time()
    # every option first: a bad value stops here, not after the warm-up or in a cell
    pairs = args.pairs.split(",") if args.pairs else DEFAULT_PAIRS
    for p in pairs:
        try:
            parse_pair(p)
        except ValueError as e:
            raise SystemExit(f"--pairs: {e}") from None
    batches = cli_checks.int_list("--batches", args.batches, 1)
    Ls = cli_checks.int_list("--L", args.L, 1, 64)
    cli_checks.at_least("--replays", args.replays, 1)
    cli_checks.at_least("--deadline", args.deadline, 0)
    cli_checks.at_least("--warm-jobs", args.warm_jobs, 0)
    if not 0 <= args.max_draft <= 16:
        raise SystemExit(f"--max-draft must be in 0..16, got {args.max_draft}")
    args.philox_rounds = cli_checks.philox_rounds(args.philox_rounds)
    shapes = (args.shapes or ("nemotron3-super,nemotron3-nano-4b" if args.layer == "mamba2"
                              else "qwen3.5-4b,qwen3.5-122b")).split(",")
    cli_checks.shapes_of("--shapes", shapes, traffic.SHAPES, args.layer)
    if not torch.cuda.is_available():
        raise SystemExit("sweep needs a CUDA GPU (sm_90+): none is visible")
    if not args.warm_only:
        cli_checks.out_dir("--out", args.out)
    # the warm-up processes share this run's deadline (they start now)
    warmup.setup(args, pairs, ["--deadline", f"{args.deadline:g}"] if args.deadline else [])
    copy_gbs = None if args.warm_only else copy_bandwidth_gbs()
    total = len(shapes) * len(batches) * (2 + len(Ls) * len(pairs))
    prog = progress(total, "sweep")
    t0 = time.time()
    cells = []
    # the deadline, counted from the start of the command (warm-up included), is checked between
    # cells (progress updates): what was measured is kept
    deadline = DeadlineProgress(prog, t_start + args.deadline if args.deadline else None)
    error = None
    try:
        for shape in shapes:
            fn = mamba2_cells if args.layer == "mamba2" else gdn_cells
            fn(shape, pairs, batches, Ls, args.replays, not args.no_peers, deadline, args.phases,
               cells=cells, order=args.flush_first, max_draft=args.max_draft,
               philox_rounds=args.philox_rounds)
    except DeadlineReached:
        print(f"\n--deadline {args.deadline:g} s reached: {len(cells)} cells measured, the rest skipped")
    except Exception as e:        # keep what was measured; re-raised once it is written
        error = e
        print(f"\n{type(e).__name__} after {len(cells)} cells: {e}; writing those, then stopping")
    prog.close()
    # host overhead of the swept layer's ops, on its first shape (an env-forced heads per CTA
    # must divide its heads per group); not once the deadline has passed or a cell failed
    overhead = {}
    if error is None and not deadline.reached:
        overhead = (launch_overhead if args.layer == "mamba2" else gdn_launch_overhead)(shapes[0])
    if args.warm_only:
        if error is not None:
            raise error
        return 0
    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, copy_gbs=copy_gbs,
                seconds=time.time() - t0, replays=args.replays, host_overhead_us=overhead,
                max_draft=args.max_draft, philox_rounds=args.philox_rounds, layer=args.layer,
                shapes=shapes,
                dims={s: {k: v for k, v in traffic.SHAPES[s].items() if k != "kind"}
                      for s in shapes},
                pairs=pairs, batches=batches, L=Ls, act_dtype="bfloat16",
                units=dict(median_us="µs per step: median of CUDA-graph replays, amortized "
                                     "over the L-cycle", bytes="traffic-model bytes per step "
                                     "for the whole batch", copy_gbs="GB/s, device copy "
                                     "bandwidth measured in this run"),
                complete=not deadline.reached and error is None,
                error=None if error is None else f"{type(error).__name__}: {error}",
                **cli_checks.run_meta(getattr(args, "argv", None)))
    with open(os.path.join(args.out, "sweep.json"), "w") as f:
        json.dump(dict(meta=meta, cells=cells), f, indent=1)
    md = render(cells, copy_gbs)
    if overhead:
        md += "\n\nHost time per eager call (batch 1):\n" + "\n".join(
            f"- {k}: {v:.1f} µs" for k, v in overhead.items())
    if error is not None:
        md += f"\n\n**Incomplete:** stopped by {type(error).__name__}: {error}"
    with open(os.path.join(args.out, "sweep.md"), "w") as f:
        f.write(md + "\n")
    if not args.no_plots:
        try:
            plot(cells, args.out, meta["device"])
        except Exception as e:    # (a plot must not hide a cell's error nor lose the tables)
            if error is None:
                raise
            print(f"plots skipped: {type(e).__name__}: {e}")
    print(md)
    warmup.report(args)
    if error is not None:
        raise error
    return 0


def register(sub):
    p = sub.add_parser("sweep", help="latency sweep across precision pairs x batch x L (GPU)")
    p.add_argument("--layer", default="mamba2", choices=["mamba2", "gdn"])
    p.add_argument("--shapes", default="", help="comma list (default: both shapes of the layer kind)")
    p.add_argument("--pairs", default="", help="comma list (default: the main pairs)")
    p.add_argument("--batches", default="1,8,32,128,256,512")
    p.add_argument("--L", default="8,16,32")
    p.add_argument("--replays", type=int, default=15)
    p.add_argument("--no-peers", action="store_true")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--phases", action="store_true",
                   help="also time non-flush-only and flush-only steps (cursors pinned)")
    p.add_argument("--flush-first", action="store_true",
                   help="also time the staggered cycle with the batch rows in grid order and with "
                        "the rows that flush first (a scheduling experiment: same work)")
    p.add_argument("--max-draft", type=int, default=0,
                   help="the ReplaySSM caches' draft capacity (0: rings of L + 1 entries); the "
                        "decode step on caches that also serve speculative verify calls")
    cli_checks.add_philox_rounds(p)
    p.add_argument("--out", default="bench/results/sweep")
    p.add_argument("--deadline", type=float, default=0.0,
                   help="stop starting new cells after this many seconds and write what was "
                        "measured (0 = no limit; counted from the start, warm-up included)")
    warmup.add_arguments(p)
    p.set_defaults(fn=run)
