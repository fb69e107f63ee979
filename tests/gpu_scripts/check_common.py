"""Helpers shared by the replay / verify GPU checks (check_mamba2_replay.py, check_mamba2_verify.py,
check_gdn_verify.py): the per-step draws (pad rows, draft count), the timed kernel call, the
commit step of the verify checks, the command line and the table loop, and the verify
benchmark's per-T row. Not a test file: imported by the scripts (their folder is on sys.path)."""
from __future__ import annotations

import argparse
import time
import traceback

import torch

import replayssm_lp as R

ACT_NAME = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


# ----------------------------------------------------------------------------------------------
# one step
# ----------------------------------------------------------------------------------------------
def poison_unowned(c, owned, gen, cache_tensors):
    """Random bytes in every cache tensor of the slots no row owns (stray writes become visible)."""
    mask = torch.ones(c.num_slots, dtype=torch.bool)
    mask[owned.cpu()] = False
    idx = mask.nonzero().squeeze(1).to(c.device)
    if idx.numel() == 0:
        return
    for t in cache_tensors(c).values():
        sub = t[idx].contiguous()
        b = sub.view(torch.uint8)
        b.copy_(torch.randint(0, 256, b.shape, generator=gen, dtype=torch.uint8).to(c.device))
        t[idx] = sub


def draw_T(gen, max_draft, fixed_T):
    """The step's draft count: ``fixed_T``, else uniform in 1..max_draft."""
    return fixed_T if fixed_T else int(torch.randint(1, max_draft + 1, (1,), generator=gen))


def draw_rows(gen, batch, slots, use_idx, device):
    """~25 % pad rows (at least one valid row; none without state_batch_indices): (pad mask,
    state_batch_indices int32 on ``device`` or None, valid row indices on the CPU)."""
    pad = torch.rand(batch, generator=gen) < 0.25
    if bool(pad.all()):
        pad[0] = False
    if not use_idx:
        pad[:] = False
    sbi = torch.where(pad, torch.tensor(-1), slots).to(torch.int32).to(device) if use_idx else None
    return pad, sbi, (~pad).nonzero().squeeze(1)


def timed(fn, device) -> float:
    """Seconds one call of ``fn`` takes on ``device`` (synchronised around it on CUDA)."""
    cuda = torch.device(device).type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def check_commit(cr, ck, T, batch, gen, sbi, commit, res, device):
    """Commit a random accepted prefix (0..T) per row: torch on the reference cache ``cr``,
    ``commit`` (the CuTe kernel) on ours; the cursors must agree."""
    acc = torch.randint(0, T + 1, (batch,), generator=gen).to(torch.int32).to(device)
    R.commit(cr, acc, sbi, -1, backend="torch")
    commit(ck, acc, sbi)
    for name in ("write_pos", "pending"):
        if not torch.equal(getattr(cr, name), getattr(ck, name)):
            res["fail"].append(f"cursor {name} differs after commit")


def torch_commit(cache, acc, sbi):
    """The self-test's commit (the torch reference)."""
    R.commit(cache, acc, sbi, -1, backend="torch")


def cute_commit(cache, acc, sbi):
    """The CuTe commit kernel, called directly."""
    from cute_kernels.replay_commit import replay_commit_cute
    replay_commit_cute(cache.write_pos, cache.pending, acc, sbi, -1)


def stop_on_fail(res, prefix) -> bool:
    """Keep the first four failures of the step, prefixed; True when the run should stop."""
    if res["fail"]:
        res["fail"] = [f"{prefix}: {m}" for m in res["fail"][:4]]
        return True
    return False


# ----------------------------------------------------------------------------------------------
# command line and table
# ----------------------------------------------------------------------------------------------
def arg_parser(doc, steps_help="steps = factor * L + 5 (>= 3L)", bench_pairs=None):
    """The scripts' common options (--pairs, --quick, --full, --steps-factor, --seed, --self-test;
    with ``bench_pairs`` also --bench, --bench-pairs, --bench-batch)."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("--pairs", default=None, help="comma-separated pair names (default: all, extras too)")
    ap.add_argument("--quick", action="store_true", help="one configuration per pair")
    ap.add_argument("--full", action="store_true", help="every configuration for every pair")
    ap.add_argument("--steps-factor", type=int, default=3, help=steps_help)
    ap.add_argument("--seed", type=int, default=0)
    if bench_pairs is not None:
        ap.add_argument("--bench", action="store_true", help="CUDA-graph timings instead of the checks")
        ap.add_argument("--bench-pairs", default=bench_pairs)
        ap.add_argument("--bench-batch", type=int, default=256)
    ap.add_argument("--self-test", action="store_true",
                    help="CPU: compare the torch reference with itself (checks this script)")
    return ap


def level(a) -> str:
    return "quick" if a.quick else ("full" if a.full else "default")


def no_cuda(self_test=True) -> bool:
    """True (after saying so) when the checks need a GPU and there is none."""
    if torch.cuda.is_available():
        return False
    print("no CUDA device: run on the GPU machine (or --self-test on CPU)" if self_test
          else "no CUDA device")
    return True


def run_table(cfgs, hdr, run_one, row):
    """Print ``hdr``, then per configuration ``row(cfg, res, ok)`` for ``res = run_one(i, cfg)``
    (an exception is a failure, traceback printed). Returns the number of failed ones."""
    print(hdr)
    print("-" * len(hdr))
    nfail = 0
    for i, cfg in enumerate(cfgs):
        try:
            res = run_one(i, cfg)
        except Exception as e:  # noqa: BLE001
            res = {"fail": [f"exception: {e!r}"], "flush_rows": 0, "Ts": set()}
            traceback.print_exc()
        ok = not res["fail"]
        nfail += not ok
        print(row(cfg, res) + f"  {'ok' if ok else 'FAIL: ' + ' | '.join(res['fail'])}",
              flush=True)
    return nfail


def t_range(res) -> str:
    """The draft counts a run met: ``lo..hi``, one value or ``-``."""
    ts = sorted(res.get("Ts", ()))
    return f"{ts[0]}..{ts[-1]}" if len(ts) > 1 else (str(ts[0]) if ts else "-")


def copy_frac(res, k) -> str:
    """Fraction of differing bytes of stored copy ``k`` (``-`` without one)."""
    n = res.get(f"{k}_bytes", 0)
    return f"{res.get(f'{k}_bytes_diff', 0) / n:.2e}" if n else "-"


def copy_units(res, k) -> str:
    """Largest difference of stored copy ``k``: relative (fp32 copies) or in units of its format."""
    if f"{k}_max_rel" in res:
        return f"{res[f'{k}_max_rel']:.0e}"
    return f"{res.get(f'{k}_max_units', 0.0):.2f}" if f"{k}_bytes" in res else "-"


# ----------------------------------------------------------------------------------------------
# verify benchmark
# ----------------------------------------------------------------------------------------------
def bench_header(std_us):
    print(f"standard decode fp32 (one token): {std_us:8.1f} us")
    print(f"{'pair':16s} {'T':>2s} {'verify nonflush':>16s} {'verify+commit cycle':>20s} "
          f"{'x std':>6s} {'per token':>10s}")


def bench_row(pair, cache, verify, T, L, batch, sbi, g, std_us):
    """One row of the verify benchmark: verify-only with every row non-flush (staggered h,
    h + T <= L, cursors pinned: no commit) and whole cycles of verify + commit of all T (rows
    staggered over 0..L-1: the flush amortised)."""
    from bench.timing import graph_time_us
    from cute_kernels.replay_commit import replay_commit_cute

    dev = cache.device
    acc = torch.full((batch,), T, dtype=torch.int32, device=dev)
    cache.write_pos.copy_(torch.randint(0, L - T + 1, (batch,), device=dev,
                                        generator=g).to(torch.int32))
    cache.pending.zero_()
    nf = graph_time_us(lambda i: verify(), 8)
    cache.write_pos.copy_(torch.randint(0, L, (batch,), device=dev, generator=g).to(torch.int32))
    cache.pending.zero_()
    steps = max(1, -(-L // T)) * 2

    def cycle(i):
        verify()
        replay_commit_cute(cache.write_pos, cache.pending, acc, sbi, -1)
    cy = graph_time_us(cycle, steps)
    ratio = cy["median_us"] / std_us
    print(f"{pair:16s} {T:2d} {nf['median_us']:13.1f} us {cy['median_us']:17.1f} us "
          f"{ratio:6.2f} {cy['median_us'] / T:7.1f} us", flush=True)
