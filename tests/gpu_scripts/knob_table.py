"""The table of a knob grid (tests/gpu_scripts/run_knob_grid.sh; CPU or device): every cell's
median per setting, from ``OUT/<NAME>/{sweep,spec}.json`` and, with several timing rounds,
``OUT/<NAME>.r<k>/`` (k = 2..ROUNDS).

    python tests/gpu_scripts/knob_table.py OUT ROUNDS NAME:ENV [NAME:ENV ...]

With two settings the table has their ratio. With ROUNDS > 1 a setting's value is the median of
its rounds' medians, and a last column gives the cell's round spread: the largest (max / min - 1)
over the settings' rounds, in %. The settings of a round run back to back, so an A/B ratio
below that spread is not a measured difference (session 43 saw 1-4 % between identical builds
timed one after the other)."""
import json
import os
import statistics
import sys


def round_dir(out: str, name: str, r: int) -> str:
    return os.path.join(out, name if r == 1 else f"{name}.r{r}")


def cells(path: str) -> dict:
    got = {}
    for f in ("sweep.json", "spec.json"):
        p = os.path.join(path, f)
        if os.path.exists(p):
            for c in json.load(open(p))["cells"]:
                k = (c.get("layer", c.get("shape")), c["batch"], c.get("T", c.get("L")), c["name"])
                got[k] = c.get("median_us")          # (None: the cell failed, see its log)
    return got


def table(out: str, rounds: int, settings) -> str:
    names = [s.split(":", 1)[0] for s in settings]
    res, order = {}, []
    for n in names:
        for r in range(1, rounds + 1):
            for k, v in cells(round_dir(out, n, r)).items():
                if k not in res:
                    res[k] = {}
                    order.append(k)
                res[k].setdefault(n, []).append(v)
    ab = len(names) == 2                       # two settings: their ratio too
    lines = ["settings: " + "; ".join(settings) + (f" ({rounds} rounds)" if rounds > 1 else ""),
             "| layer/shape | batch | T/L | kernel | " + " | ".join(names)
             + (f" | {names[0]}/{names[1]}" if ab else "")
             + (" | round spread |" if rounds > 1 else " |"),
             "|---|---:|---:|---|" + "---:|" * (len(names) + ab + (rounds > 1))]
    for k in order:
        got = [[x for x in res[k].get(n, []) if x is not None] for n in names]
        v = [statistics.median(g) if g else None for g in got]
        row = f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | " + " | ".join(
            f"{x:.1f}" if x is not None else "-" for x in v)
        if ab:
            row += " | " + (f"{v[0] / v[1]:.3f}x" if None not in v else "-")
        if rounds > 1:
            sp = [max(g) / min(g) - 1 for g in got if len(g) > 1]
            row += " | " + (f"{100 * max(sp):.1f} %" if sp else "-")
        lines.append(row + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(sys.argv[1], int(sys.argv[2]), sys.argv[3:]))
