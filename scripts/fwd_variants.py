"""A/B of the CUDA forward (v6 in benchmarks/NOTES.md), in one process, with torch.compile.

The full benchmark (results/h200_20261203_v5.*) found the v5 forward slower than v3's in
source-sorted order (W3 5.20 vs 4.87 ms, W6 1.25 vs 1.15, validate=False) and behind
torch.compile there. PYG_EDGEDOT_FWD_VARIANT (read by an experimental build at every call):
0 = v5 (a source row reused within a batch of 4 edges), 1 = no reuse, 4 edges in flight
(v3's loop with v5's packed loads), 2 = no reuse, 8 edges, 3 = reuse, 8 edges. All give the
same bits (checked). Forward medians (ms, 20 reps, L2 flushed) at W2-W6 in random and
sorted order next to torch.compile of PyG's expression; then W1's forward + backward without
a flush (launch-bound), pyg_edgedot vs eager, to see where its time goes.

Usage: python scripts/fwd_variants.py OUT.json

Ran once (results/h200_fwd_variants_20261203.{json,log}) at commit 33f601e, whose
edge_dot_cuda.cu read PYG_EDGEDOT_FWD_VARIANT. Variant 1 won (or tied) everywhere and became
the only forward; the variable is no longer read, so today every variant runs the same kernel.
"""
import json
import os
import sys

import torch

import pyg_edgedot

sys.path.insert(0, os.path.dirname(__file__))
from grad_variants import make_inputs, time_ms  # noqa: E402

WORKLOADS = {  # num_nodes, num_edges, feat_dim, dtype
    "W2": (100_000, 2_000_000, 128, torch.float32),
    "W3": (2_930_000, 30_000_000, 128, torch.float32),
    "W4": (2_930_000, 30_000_000, 128, torch.bfloat16),
    "W5": (1_000_000, 10_000_000, 256, torch.float32),
    "W6": (1_000_000, 30_000_000, 32, torch.float32),
}
VARIANTS = ("0", "1", "2", "3")


def eager(xs, xd, ei):
    return (xs[ei[0]] * xd[ei[1]]).sum(-1)


def main(path):
    results = {}
    compiled = torch.compile(eager, dynamic=False)
    for name, (n, e, d, dtype) in WORKLOADS.items():
        gen = torch.Generator(device="cuda").manual_seed(0)
        xs, xd, ei, ei_sorted = make_inputs(n, e, d, dtype, gen)
        row = {}
        outs = {}
        with torch.no_grad():
            for order, idx in (("random", ei), ("sorted", ei_sorted)):
                for v in VARIANTS:
                    os.environ["PYG_EDGEDOT_FWD_VARIANT"] = v
                    outs[v, order] = pyg_edgedot.edge_dot(xs, xd, idx, validate=False)
                    row[f"{order}_v{v}"] = time_ms(
                        lambda: pyg_edgedot.edge_dot(xs, xd, idx, validate=False), reps=20)
                os.environ["PYG_EDGEDOT_FWD_VARIANT"] = "0"
                row[f"{order}_v0_validate"] = time_ms(
                    lambda: pyg_edgedot.edge_dot(xs, xd, idx), reps=20)
                row[f"{order}_compile"] = time_ms(lambda: compiled(xs, xd, idx), reps=20)
        row["bitwise_equal"] = all(torch.equal(outs["0", o], outs[v, o])
                                   for o in ("random", "sorted") for v in VARIANTS)
        results[name] = row
        print(name, json.dumps({k: (round(v, 3) if isinstance(v, float) else v)
                                for k, v in row.items()}), flush=True)
        del xs, xd, ei, ei_sorted, outs
        torch.cuda.empty_cache()
        torch._dynamo.reset()

    # W1: 16K edges, launch-bound. No flush; 200 reps; median of CUDA-event times.
    gen = torch.Generator(device="cuda").manual_seed(0)
    xs = torch.randn(1024, 128, device="cuda", generator=gen, requires_grad=True)
    xd = torch.randn(768, 128, device="cuda", generator=gen, requires_grad=True)
    ei = torch.stack([torch.randint(0, 1024, (16384,), device="cuda", generator=gen),
                      torch.randint(0, 768, (16384,), device="cuda", generator=gen)])
    grad = torch.randn(16384, device="cuda", generator=gen)

    def events(fn):
        return time_ms(fn, reps=200, flush=False, warmups=10)

    def fb(fn):
        def run():
            xs.grad = xd.grad = None
            fn().backward(grad)
        return run

    w1 = {
        "fwd_edgedot": events(lambda: pyg_edgedot.edge_dot(xs.detach(), xd.detach(), ei)),
        "fwd_edgedot_novalidate": events(
            lambda: pyg_edgedot.edge_dot(xs.detach(), xd.detach(), ei, validate=False)),
        "fwd_eager": events(lambda: eager(xs.detach(), xd.detach(), ei)),
        "fwdbwd_edgedot": events(fb(lambda: pyg_edgedot.edge_dot(xs, xd, ei))),
        "fwdbwd_edgedot_novalidate": events(
            fb(lambda: pyg_edgedot.edge_dot(xs, xd, ei, validate=False))),
        "fwdbwd_eager": events(fb(lambda: eager(xs, xd, ei))),
    }
    results["W1_noflush"] = w1
    print("W1_noflush", json.dumps({k: round(v, 4) for k, v in w1.items()}), flush=True)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fb(lambda: pyg_edgedot.edge_dot(xs, xd, ei, validate=False))()
        torch.cuda.synchronize()
    table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
    print(table)
    results["W1_profile"] = table
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fwd_variants.json")
