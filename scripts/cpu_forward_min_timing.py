"""CPU forward, one thread, minimum of many calls: a steadier A/B on a noisy shared machine.

scripts/cpu_vec_timing.py (two threads, medians of 7) could not tell the AVX2 clone of the
forward from the machine's noise (benchmarks/NOTES.md, "CPU: an AVX2 clone of the forward");
this takes the minimum of 41 calls (9 at E = 2M) on one thread instead. Shapes C1 (10K nodes,
E = 200K, D = 64) and C2 (100K nodes, E = 2M, D = 128), fp32 and bf16, random and sorted.
A/B: put one checkout on PYTHONPATH with its own TORCH_EXTENSIONS_DIR, then the other.

With "candidates": score_candidates and rank_candidates instead (200K nodes, D = 128 fp32,
2,000 sources x 1,000 random candidates, minimum of 9 calls).

Usage: PYG_EDGEDOT_CUDA=0 python scripts/cpu_forward_min_timing.py [THREADS] [candidates]
"""
import os
import sys
import time

import torch

import pyg_edgedot

sys.path.insert(0, os.path.dirname(__file__))
from cpu_vec_timing import SHAPES  # noqa: E402


def min_ms(fn, reps):
    fn()
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return round(best * 1e3, 3)


def main(threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    for n, e, d in SHAPES.values():
        for dtype in (torch.float32, torch.bfloat16):
            xs, xd = torch.randn(n, d).to(dtype), torch.randn(n, d).to(dtype)
            ei = torch.randint(0, n, (2, e))
            ei_sorted = ei[:, (ei[0] * n + ei[1]).argsort()].contiguous()
            reps = 41 if e < 1_000_000 else 9
            print(n, e, d, str(dtype)[6:],
                  "random", min_ms(lambda: pyg_edgedot.edge_dot(xs, xd, ei, validate=False), reps),
                  "sorted", min_ms(lambda: pyg_edgedot.edge_dot(xs, xd, ei_sorted,
                                                                validate=False), reps),
                  flush=True)


def candidates(threads):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    n, rows, k, d = 200_000, 2000, 1000, 128
    xs, xd = torch.randn(n, d), torch.randn(n, d)
    src, pos = torch.randint(0, n, (rows,)), torch.randint(0, n, (rows,))
    neg = torch.randint(0, n, (rows, k))
    print("score_candidates", min_ms(lambda: pyg_edgedot.score_candidates(xs, xd, src, neg), 9),
          "rank_candidates",
          min_ms(lambda: pyg_edgedot.rank_candidates(xs, xd, src, pos, neg), 9), flush=True)


if __name__ == "__main__":
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    if sys.argv[2:] == ["candidates"]:
        candidates(threads)
    else:
        main(threads)
