"""Warp-stall samples of an ``ncu --page source --csv --print-source sass`` export (see
``ncu_gdn_step.py``), summed over the launches in it: the totals per stall reason, the samples
per code region (a region ends at each ``BAR.SYNC`` / ``BRA`` with samples on either side:
``--regions``), and the instructions that hold the most samples with their top reasons.

    python tests/gpu_scripts/ncu_stalls.py fp8_fp32_nonflush_sass.csv [--top 40] [--listing]
"""
import csv
import gzip
import sys
from collections import Counter, defaultdict


def read(path):
    """[(address, sass, {column: value})] per launch, in address order."""
    launches, cur, head = [], None, None
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt", newline="") as f:
        for row in csv.reader(f):
            if not row:
                continue
            if row[0] == "Kernel Name":
                cur = []
                launches.append(cur)
                head = None
                continue
            if row[0] == "Address":
                head = row
                continue
            if head is None or cur is None:
                continue
            cur.append(dict(zip(head, row)))
    return launches


def num(x):
    try:
        return float(x)
    except ValueError:
        return 0.0


def main():
    args = sys.argv[1:]
    top = 40
    if "--top" in args:
        top = int(args[args.index("--top") + 1])
    path = args[0]
    launches = read(path)
    n = len(launches)
    # sum over launches, by position in the listing (the same code each launch)
    rows = launches[0]
    reasons = [c for c in rows[0] if c.startswith("stall_") and "Not Issued" not in c]
    samp = [Counter() for _ in rows]
    total = [0.0] * len(rows)
    execd = [0.0] * len(rows)
    for L in launches:
        for i, r in enumerate(L):
            total[i] += num(r["Warp Stall Sampling (All Samples)"])
            execd[i] += num(r.get("Instructions Executed", "0"))
            for c in reasons:
                v = num(r[c])
                if v:
                    samp[i][c[6:]] += v
    allc = Counter()
    for s in samp:
        allc.update(s)
    T = sum(total)
    print(f"{path}: {n} launches, {len(rows)} instructions, {T:.0f} samples")
    print("by reason: " + ", ".join(f"{k} {v / T:.1%}" for k, v in allc.most_common(10)))
    # regions: split at barriers
    print("\nregions (split at BAR.SYNC / barrier.cluster / WARPSYNC-free exits):")
    start = 0
    acc = 0.0
    reg_c = Counter()
    for i, r in enumerate(rows):
        acc += total[i]
        reg_c.update(samp[i])
        src = r["Source"].strip()
        if ("BAR.SYNC" in src or "UCGABAR_WAIT" in src or "EXIT" in src or i == len(rows) - 1):
            if acc > 0:
                top3 = ", ".join(f"{k} {v / acc:.0%}" for k, v in reg_c.most_common(3))
                ex = max(execd[start:i + 1])
                print(f"  [{start:5d}:{i:5d}] {acc / T:6.1%}  exec<= {ex / n:6.0f}  {top3}  "
                      f"| ends {src[:50]}")
            start, acc, reg_c = i + 1, 0.0, Counter()
    order = sorted(range(len(rows)), key=lambda i: -total[i])[:top]
    print(f"\ntop {top} instructions:")
    for i in sorted(order):
        r = rows[i]
        t3 = ", ".join(f"{k} {v / total[i]:.0%}" for k, v in samp[i].most_common(2))
        print(f"  {i:5d} {total[i] / T:6.2%} exec {execd[i] / n:5.0f}  {r['Source'].strip()[:60]:60s} {t3}")
    if "--listing" in args:
        lo, hi = [int(x) for x in args[args.index("--listing") + 1].split(":")]
        for i in range(lo, hi):
            r = rows[i]
            t3 = ", ".join(f"{k} {v:.0f}" for k, v in samp[i].most_common(2))
            print(f"  {i:5d} {total[i]:6.0f} exec {execd[i] / n:5.0f}  {r['Source'].strip()[:70]:70s} {t3}")


if __name__ == "__main__":
    main()
