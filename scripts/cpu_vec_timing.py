"""CPU forward timings behind the AVX2 clone of the forward loop (benchmarks/NOTES.md, "CPU:
an AVX2 clone of the forward").

C1 (10K nodes, E = 200K, D = 64) and C2 (100K nodes, E = 2M, D = 128), random and sorted by
source, float32 and bfloat16: edge_dot's forward (validate=False) next to torch.compile of
PyG's expression. Medians of time.perf_counter over 7 calls after one warm-up. Build the
"before" into another cache (TORCH_EXTENSIONS_DIR) to compare.

Usage: PYG_EDGEDOT_CUDA=0 python scripts/cpu_vec_timing.py OUT.json

Ran 2026-12-03 on the 2-core CI-class machine: the clone at commit 897ee7d against 27f9af7
(a git worktree on PYTHONPATH, its own build cache), alternating, twice each
(benchmarks/results/cpu_avx2_clone_20261203/). No gain beyond the machine's noise, so the
clone was reverted (142ca55); scripts/cpu_forward_min_timing.py then measured it steadily
(one thread, minimum of many calls) and it came back.
"""
import json
import os
import sys

import torch

import pyg_edgedot

sys.path.insert(0, os.path.dirname(__file__))
from cpu_prefetch_timing import median_ms as _median_ms  # noqa: E402

SHAPES = {"C1": (10_000, 200_000, 64), "C2": (100_000, 2_000_000, 128)}


def median_ms(fn, reps=7):
    return round(_median_ms(fn, reps), 3)


def eager(a, b, i):
    return (a[i[0]] * b[i[1]]).sum(-1)


def main(path):
    compiled = torch.compile(eager, dynamic=False)
    results = {"threads": torch.get_num_threads()}
    for name, (n, e, d) in SHAPES.items():
        torch.manual_seed(0)
        for dtype in (torch.float32, torch.bfloat16):
            xs, xd = torch.randn(n, d).to(dtype), torch.randn(n, d).to(dtype)
            ei = torch.randint(0, n, (2, e))
            ei_sorted = ei[:, (ei[0] * n + ei[1]).argsort()].contiguous()
            for order, idx in (("random", ei), ("sorted", ei_sorted)):
                key = f"{name} {str(dtype)[6:]} {order}"
                ref = eager(xs.double(), xd.double(), idx)
                out = pyg_edgedot.edge_dot(xs, xd, idx, validate=False)
                row = {
                    "edgedot": median_ms(lambda: pyg_edgedot.edge_dot(xs, xd, idx,
                                                                      validate=False)),
                    "compile": median_ms(lambda: compiled(xs, xd, idx)),
                    "max_abs_err_vs_float64": float((out.double() - ref).abs().max()),
                }
                results[key] = row
                print(key, row, flush=True)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
