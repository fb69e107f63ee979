"""Probe: a 2-CTA cluster launch through the TVM-FFI path, each CTA reading its peer's shared
memory (``cute.arch.map_dsmem_ptr`` + ``ld.shared::cluster``) -- the exchange a flush split over
a CTA pair would use (docs/NOTES.md, session 30). Compiles on the CPU (``CUTE_DSL_ARCH=sm_90a``,
prints the cluster instructions); with a GPU it also runs and checks out[i] = in[i] + in[i ^ 1]
and times it against the same kernel launched as a cluster without the exchange (the
peer's row from global memory) and without a cluster.

    python tests/gpu_scripts/probe_cluster_pair.py
"""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import cutlass  # noqa: E402
import cutlass.cute as cute  # noqa: E402
from cutlass import Float32, Int32, const_expr  # noqa: E402
from cutlass._mlir.dialects import llvm  # noqa: E402
from cutlass.cutlass_dsl import T  # noqa: E402

from cute_kernels import common  # noqa: E402

THREADS = 128


def ld_dsmem_f32(ptr) -> Float32:
    """``ld.shared::cluster.f32`` of a ``map_dsmem_ptr`` address (a DSMEM tensor cannot be
    indexed in 4.8.1)."""
    return Float32(llvm.inline_asm(T.f32(), [ptr.toint().ir_value()],
                                   "ld.shared::cluster.f32 $0, [$1];", "=f,r",
                                   has_side_effects=True, is_align_stack=False))


class PairSum:
    def __init__(self, cluster: bool, exchange: bool = True):
        self.cluster, self.exchange = cluster, exchange

    @cute.jit
    def __call__(self, mIn: cute.Tensor, mOut: cute.Tensor, stream):
        self.kernel(mIn, mOut).launch(grid=[mIn.shape[0], 1, 1], block=[THREADS, 1, 1],
                                       cluster=[2, 1, 1] if const_expr(self.cluster) else None,
                                       stream=stream)

    @cute.kernel
    def kernel(self, mIn: cute.Tensor, mOut: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        bidx, _, _ = cute.arch.block_idx()
        smem = cutlass.utils.SmemAllocator()
        s = smem.allocate_tensor(Float32, cute.make_layout((THREADS,)), byte_alignment=16)
        s[tidx] = mIn[bidx, tidx]
        if const_expr(self.cluster and self.exchange):
            rank, _, _ = cute.arch.block_in_cluster_idx()
            cute.arch.cluster_arrive()
            cute.arch.cluster_wait()
            pv = ld_dsmem_f32(cute.arch.map_dsmem_ptr(s.iterator + tidx, Int32(1) - rank))
            mOut[bidx, tidx] = s[tidx] + pv
            cute.arch.cluster_arrive()    # the peer may still read this CTA's smem
            cute.arch.cluster_wait()
        else:
            mOut[bidx, tidx] = s[tidx] + mIn[bidx ^ 1, tidx]


def build(cluster: bool, exchange: bool = True):
    a = common.fake_tensor(Float32, (common.sym(2), THREADS), ("dyn", 1))
    b = common.fake_tensor(Float32, (common.sym(2), THREADS), ("dyn", 1))
    with common.dump_ptx() as d:
        compiled, _ = common.cute_compile(PairSum(cluster, exchange), a, b, common.fake_stream(), dump=d)
        ptx = d.read()
        d.cleanup()
    return compiled, ptx


def _has_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


def main():
    k, ptx = build(True)
    print("cluster build:", [ln.strip() for ln in ptx.splitlines()
                             if re.search(r"mapa|shared::cluster|barrier\.cluster", ln)])
    if not _has_gpu():
        print("no GPU: compiled only")
        return
    import torch
    k0, _ = build(False)
    k1, _ = build(True, exchange=False)
    n = 2 * common.num_sms()
    x = torch.randn(n, THREADS, device="cuda")
    for name, fn in (("cluster + DSMEM exchange", k), ("cluster launch, no exchange", k1),
                     ("no cluster", k0)):
        out = torch.full_like(x, float("nan"))
        fn(x, out)
        torch.cuda.synchronize()
        ref = x + x.view(n // 2, 2, THREADS).flip(1).reshape(n, THREADS)
        ok = torch.equal(out, ref)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(20):
                fn(x, out)
        g.replay()
        torch.cuda.synchronize()
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ts = []
        for _ in range(9):
            t0.record()
            g.replay()
            t1.record()
            torch.cuda.synchronize()
            ts.append(t0.elapsed_time(t1) * 1000 / 20)
        print(f"{name}: out == in[i] + in[i^1]: {ok}; {sorted(ts)[4]:.2f} us per launch (graph, "
              f"{n} CTAs)")


if __name__ == "__main__":
    main()
