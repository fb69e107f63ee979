"""replayssm-bench: latency sweeps, speculative verify, accuracy study, traffic model."""
from __future__ import annotations

import argparse
import sys


def _traffic(args):
    from replayssm_lp.pairs import precision_pairs
    from .traffic import SHAPES, gdn_bytes, gdn_standard_bytes, mamba2_bytes, mamba2_standard_bytes
    shape = SHAPES[args.shape]
    kind = shape["kind"]
    dims = {k: v for k, v in shape.items() if k != "kind"}
    std = (mamba2_standard_bytes(**dims, state_bytes=4, act_bytes=args.act_bytes) if kind == "mamba2"
           else gdn_standard_bytes(**dims, state_bytes=4, act_bytes=args.act_bytes))
    print(f"# {args.shape} ({kind}, {dims}), L={args.L}, bytes per sequence per step")
    print(f"| pair | non-flush (mean) | flush | amortized | vs standard fp32 |")
    print(f"|---|---:|---:|---:|---:|")
    print(f"| standard fp32 | {std:,.0f} | {std:,.0f} | {std:,.0f} | 1.00x |")
    for name in precision_pairs():
        fn = mamba2_bytes if kind == "mamba2" else gdn_bytes
        b = fn(name, **dims, L=args.L, act_bytes=args.act_bytes)
        print(f"| {name} | {b.nonflush:,.0f} | {b.flush:,.0f} | {b.amortized:,.0f} | "
              f"{std / b.amortized:.2f}x |")


def _buffer_len(text):
    v = int(text)
    if not 1 <= v <= 64:
        raise argparse.ArgumentTypeError(f"must be in 1..64, got {v}")
    return v


def main(argv=None):
    ap = argparse.ArgumentParser(prog="replayssm-bench", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("traffic", help="print the traffic model (bytes per step) for a layer shape")
    t.add_argument("--shape", default="nemotron3-super",
                   choices=["nemotron3-super", "nemotron3-nano-4b", "qwen3.5-4b", "qwen3.5-122b"])
    t.add_argument("--L", type=_buffer_len, default=16, help="buffer length, 1..64 (default 16)")
    t.add_argument("--act-bytes", type=int, default=2, choices=(1, 2, 4),
                   help="bytes per activation element (default 2: bf16 / fp16)")
    t.set_defaults(fn=_traffic)
    from . import sweep_cli  # noqa: F401  (registers GPU commands when present)
    sweep_cli.register(sub)
    from . import spec
    spec.register(sub)
    args = ap.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # re-run by --warm-jobs (warmup.py)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
