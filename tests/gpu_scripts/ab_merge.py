"""One table of an A/B device call's grids (CPU or device): for each grid n, the bench JSON of the
two trees at ``OUT/g<n>_<name>/<name>/{sweep,spec}.json``, cell by cell, with their ratio.

    python tests/gpu_scripts/ab_merge.py OUT BASE NEW N [N ...]

(``BASE`` / ``NEW``: the two settings' names, e.g. ``base new``; ``N``: the grid numbers.) The
standard-decode anchors are left out."""
import json
import os
import sys


def cells_of(out: str, n: str, name: str) -> dict:
    got = {}
    for f in ("sweep.json", "spec.json"):
        p = os.path.join(out, f"g{n}_{name}", name, f)
        if os.path.exists(p):
            for c in json.load(open(p))["cells"]:
                # (a spec cell has both L and T: both are in the key, or T4 and T8 would collide)
                lt = "/".join(str(c[x]) if x == "L" else f"T{c[x]}" for x in ("L", "T") if x in c)
                k = (c.get("shape", c.get("layer")), c["batch"], lt, c["name"])
                got[k] = c.get("median_us")
    return got


def main(out: str, base: str, new: str, grids) -> None:
    print(f"| shape | batch | L / T | kernel | {base} | {new} | {new}/{base} |\n"
          "|---|---:|---:|---|---:|---:|---:|")
    for n in grids:
        a_cells, b_cells = cells_of(out, n, base), cells_of(out, n, new)
        for k in list(a_cells) + [k for k in b_cells if k not in a_cells]:
            if k[3].startswith("standard"):
                continue
            a, b = a_cells.get(k), b_cells.get(k)
            r = f"{b / a:.3f}x" if a and b else "-"
            print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {a and round(a, 1)} | "
                  f"{b and round(b, 1)} | {r} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])
