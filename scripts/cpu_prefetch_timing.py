"""CPU timings behind the prefetch change (benchmarks/NOTES.md, "CPU: software prefetch").

E = 2M random edges, D = 128, 100K nodes: edge_dot's forward (2 threads, then 1) and
torch.compile of PyG's expression, forward + backward of both; then score_candidates and
rank_candidates at N = 2,000 sources x K = 1,000 candidates on 200K nodes. Medians of
time.perf_counter. Build the "before" into another cache (TORCH_EXTENSIONS_DIR) to compare.

Usage: PYG_EDGEDOT_CUDA=0 python scripts/cpu_prefetch_timing.py [float32|bfloat16|...]
"""
import sys
import time

import torch

import pyg_edgedot


def median_ms(fn, reps=5):
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[reps // 2] * 1e3


def main(dtype):
    torch.manual_seed(0)
    n, e, d = 100_000, 2_000_000, 128
    xs, xd = torch.randn(n, d).to(dtype), torch.randn(n, d).to(dtype)
    ei = torch.randint(0, n, (2, e))
    print("threads", torch.get_num_threads(), dtype)
    print("edge_dot fwd", median_ms(lambda: pyg_edgedot.edge_dot(xs, xd, ei, validate=False)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    print("edge_dot fwd, 1 thread",
          median_ms(lambda: pyg_edgedot.edge_dot(xs, xd, ei, validate=False)))
    torch.set_num_threads(threads)
    compiled = torch.compile(lambda a, b, i: (a[i[0]] * b[i[1]]).sum(-1))
    print("compile fwd", median_ms(lambda: compiled(xs, xd, ei)))

    xs.requires_grad_()
    xd.requires_grad_()
    grad = torch.randn(e).to(dtype)

    def fwd_bwd(fn):
        def run():
            xs.grad = xd.grad = None
            fn().backward(grad)
        return run

    print("edge_dot fwd+bwd",
          median_ms(fwd_bwd(lambda: pyg_edgedot.edge_dot(xs, xd, ei, validate=False)), 3))
    print("compile fwd+bwd", median_ms(fwd_bwd(lambda: compiled(xs, xd, ei)), 3))

    n, rows, k = 200_000, 2000, 1000
    xs, xd = torch.randn(n, d).to(dtype), torch.randn(n, d).to(dtype)
    src, pos = torch.randint(0, n, (rows,)), torch.randint(0, n, (rows,))
    neg = torch.randint(0, n, (rows, k))
    print("score_candidates", median_ms(lambda: pyg_edgedot.score_candidates(xs, xd, src, neg)))
    print("rank_candidates",
          median_ms(lambda: pyg_edgedot.rank_candidates(xs, xd, src, pos, neg)))


if __name__ == "__main__":
    main(getattr(torch, sys.argv[1]) if len(sys.argv) > 1 else torch.float32)
