"""A/B of the forward's source-row carry (v5 in benchmarks/NOTES.md), in one process.

PYG_EDGEDOT_FWD_CARRY=0 keeps a source row slice only within a batch of 4 edges (and the
kernel's register cap at 3 blocks per SM without spilling); 1 (the default) keeps it across
batches and chunks. Both must give the same bits. Forward times at W3 / W4 / W6, edges in
random and in source-sorted order; forward + backward at W3 once.

Usage: python scripts/fwd_carry_ab.py OUT.json
"""
import json
import os
import sys

import torch

import pyg_edgedot

sys.path.insert(0, os.path.dirname(__file__))
from grad_variants import WORKLOADS, make_inputs, time_ms  # noqa: E402


def main(path):
    results = {}
    for name, (n, e, d, dtype) in WORKLOADS.items():
        gen = torch.Generator(device="cuda").manual_seed(0)
        xs, xd, ei, ei_sorted = make_inputs(n, e, d, dtype, gen)
        row = {}
        outs = {}
        with torch.no_grad():
            for carry in ("0", "1"):
                os.environ["PYG_EDGEDOT_FWD_CARRY"] = carry
                for order, idx in (("random", ei), ("sorted", ei_sorted)):
                    outs[carry, order] = pyg_edgedot.edge_dot(xs, xd, idx, validate=False)
                    row[f"fwd_{order}_carry{carry}"] = time_ms(
                        lambda: pyg_edgedot.edge_dot(xs, xd, idx, validate=False))
        row["bitwise_equal"] = all(torch.equal(outs["0", o], outs["1", o])
                                   for o in ("random", "sorted"))
        if name == "W3":
            grad = torch.randn(e, device="cuda", generator=gen)
            xs.requires_grad_()
            xd.requires_grad_()

            def fwd_bwd():
                xs.grad = xd.grad = None
                pyg_edgedot.edge_dot(xs, xd, ei, validate=False).backward(grad)

            row["fwd_bwd"] = time_ms(fwd_bwd)
        results[name] = row
        print(name, json.dumps({k: (round(v, 3) if isinstance(v, float) else v)
                                for k, v in row.items()}), flush=True)
        del xs, xd, ei, ei_sorted, outs
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fwd_carry_ab.json")
