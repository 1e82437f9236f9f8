"""Why torch.compile's forward beats ours in source-sorted order, and what validate=True costs.

benchmarks/NOTES.md ("Targets of issue 3 against v6") leaves two forward gaps open: in
source-sorted order torch.compile's Triton kernel is 6-15% faster than the v6 kernel at W3, W4
and W6, and the default ``validate=True`` costs 3-8% at W3/W4/W6 (one host read of a flag).
Three modes, all on the GPU:

  variants OUT.json  the v6 loop with one change at a time (scripts/fwd_sorted_variants.cu:
                     cache hints, register caps, edges in flight, grid shape), random and
                     sorted order at W2/W3/W4/W6, next to pyg_edgedot and torch.compile;
                     medians of CUDA events, L2 flushed; outputs compared with pyg_edgedot's.
  validate OUT.json  host time per call of back-to-back forwards without a flush, W1 and W3:
                     validate=False, validate=True, validate=False plus a synchronize, and the
                     raw op plus the flag's .item(); then the flushed event timing of the
                     benchmark for both validate settings.
  ncu                one call each of ours and torch.compile's kernel at W3 sorted inside
                     cudaProfilerStart/Stop, for `ncu --profile-from-start off`.

Run through scripts/h200_run.sh step fwd_sorted.
"""
import json
import os
import sys
import time

import torch
from torch.utils.cpp_extension import load

import pyg_edgedot

sys.path.insert(0, os.path.dirname(__file__))
from fwd_variants import WORKLOADS as ALL_WORKLOADS, eager  # noqa: E402
from grad_variants import make_inputs, time_ms  # noqa: E402

WORKLOADS = {k: ALL_WORKLOADS[k] for k in ("W2", "W3", "W4", "W6")}
VARIANTS = {0: "v6 copy", 1: "dst L1 no_allocate, src L1 evict_last", 2: "dst ld.global.cs",
            3: "full grid", 4: "min 4 blocks/SM", 5: "2 edges in flight, min 6 blocks/SM",
            6: "hint 1 + min 4 blocks/SM", 7: "hint 1 + full grid",
            8: "2 edges in flight, min 4 blocks/SM", 9: "1 edge in flight, min 6 blocks/SM",
            10: "hint 1 + 2 edges, min 4 blocks/SM", 11: "hint 1 + 1 edge, min 6 blocks/SM"}


def build():
    t0 = time.time()
    ext = load(name="fwd_sorted_variants",
               sources=[os.path.join(os.path.dirname(__file__), "fwd_sorted_variants.cu")],
               extra_cuda_cflags=["-O3", "-gencode=arch=compute_90,code=sm_90"],
               verbose=False)
    print(f"variants built in {time.time() - t0:.0f} s", flush=True)
    return ext


def variants(path):
    ext = build()
    compiled = torch.compile(eager, dynamic=False)
    results = {"variants": VARIANTS}
    for name, (n, e, d, dtype) in WORKLOADS.items():
        gen = torch.Generator(device="cuda").manual_seed(0)
        xs, xd, ei, ei_sorted = make_inputs(n, e, d, dtype, gen)
        row = {}
        with torch.no_grad():
            for order, idx in (("random", ei), ("sorted", ei_sorted)):
                ref = pyg_edgedot.edge_dot(xs, xd, idx, validate=False)
                row[f"{order}_ours"] = time_ms(
                    lambda: pyg_edgedot.edge_dot(xs, xd, idx, validate=False), reps=20)
                row[f"{order}_compile"] = time_ms(lambda: compiled(xs, xd, idx), reps=20)
                for v in VARIANTS:
                    out = ext.fwd(xs, xd, idx, v)
                    row[f"{order}_v{v}_equal"] = bool(torch.equal(out, ref))
                    row[f"{order}_v{v}"] = time_ms(lambda: ext.fwd(xs, xd, idx, v), reps=20)
        results[name] = row
        print(name, json.dumps(row), flush=True)
        del xs, xd, ei, ei_sorted
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


def host_ms(fn, calls=50):
    """Host time per call over back-to-back calls, one synchronize at the end."""
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / calls * 1e3)
    return round(best, 4)


def validate(path):
    results = {}
    sizes = {"W1": (1024, 16_384, 128), "W3": (2_930_000, 30_000_000, 128)}
    for name, (n, e, d) in sizes.items():
        gen = torch.Generator(device="cuda").manual_seed(0)
        xs, xd, ei, _ = make_inputs(n, e, d, torch.float32, gen)
        src, dst = ei[0], ei[1]
        row = {}
        with torch.no_grad():
            row["host_novalidate"] = host_ms(lambda: pyg_edgedot.edge_dot(xs, xd, ei,
                                                                          validate=False))
            row["host_validate"] = host_ms(lambda: pyg_edgedot.edge_dot(xs, xd, ei))

            def sync_each():
                pyg_edgedot.edge_dot(xs, xd, ei, validate=False)
                torch.cuda.synchronize()
            row["host_novalidate_sync_each"] = host_ms(sync_each)
            row["host_raw_op"] = host_ms(lambda: torch.ops.pyg_edgedot.edge_dot(xs, xd, src, dst))

            def raw_item():
                torch.ops.pyg_edgedot.edge_dot(xs, xd, src, dst)[1].item()
            row["host_raw_op_item"] = host_ms(raw_item)
            flag = torch.full((1,), -1, dtype=torch.long, device="cuda")
            row["host_item_only"] = host_ms(lambda: flag.item())
            row["event_flush_novalidate"] = time_ms(
                lambda: pyg_edgedot.edge_dot(xs, xd, ei, validate=False), reps=20)
            row["event_flush_validate"] = time_ms(lambda: pyg_edgedot.edge_dot(xs, xd, ei),
                                                  reps=20)
            row["event_noflush_novalidate"] = time_ms(
                lambda: pyg_edgedot.edge_dot(xs, xd, ei, validate=False), reps=20, flush=False)
            row["event_noflush_validate"] = time_ms(lambda: pyg_edgedot.edge_dot(xs, xd, ei),
                                                    reps=20, flush=False)
        results[name] = row
        print(name, json.dumps(row), flush=True)
        del xs, xd, ei
        torch.cuda.empty_cache()
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


def ncu():
    n, e, d, dtype = WORKLOADS["W3"]
    gen = torch.Generator(device="cuda").manual_seed(0)
    xs, xd, _, ei_sorted = make_inputs(n, e, d, dtype, gen)
    compiled = torch.compile(eager, dynamic=False)
    with torch.no_grad():
        for _ in range(3):
            pyg_edgedot.edge_dot(xs, xd, ei_sorted, validate=False)
            compiled(xs, xd, ei_sorted)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        pyg_edgedot.edge_dot(xs, xd, ei_sorted, validate=False)
        compiled(xs, xd, ei_sorted)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    print("ncu probe done", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "variants":
        variants(sys.argv[2])
    elif mode == "validate":
        validate(sys.argv[2])
    elif mode == "ncu":
        ncu()
    else:
        raise SystemExit(f"unknown mode {mode}")
