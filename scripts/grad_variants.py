"""A/B of the CUDA backward's row kernels (v5 in benchmarks/NOTES.md), in one process.

PYG_EDGEDOT_GRAD_VARIANT picks the kernel that sums each output row (read by the extension at
every call): 0 = v4's one group per row; 1 = the walking kernel, 8 edges in flight, at most
128 registers; 2 = walking, 4 edges, <= 128 registers; 3 = walking, 8 edges, <= 85 registers;
4 = walking, 4 edges, <= 85 registers. All sum each row's edges in sorted order from zero, so
every variant must give the same bits as variant 0: checked first, on small cases (every
dtype, odd and wide D, hubs past the piece length, out-of-range-free random graphs), then
timed on W3 / W4 / W6 (one gradient op, and forward + backward), plus the forward alone in
random and source-sorted order, and DistMult's forward + backward at W3's size.

Usage: python scripts/grad_variants.py OUT.json

Ran once (results/h200_grad_variants_20261202.json) on a build whose edge_dot_cuda.cu read
PYG_EDGEDOT_GRAD_VARIANT; after it, variant 1 (two-factor) and 2's 4 edges (three-factor)
became the only kernel and the variable is no longer read, so today every variant runs the
same kernel and the script is a bitwise self-check plus timings of that kernel.
"""
import json
import os
import sys

import torch

import pyg_edgedot

VARIANTS = [0, 1, 2, 3, 4]
ops = torch.ops.pyg_edgedot
flush_buf = None


def set_variant(v):
    os.environ["PYG_EDGEDOT_GRAD_VARIANT"] = str(v)


def time_ms(fn, reps=10, flush=True, warmups=1):
    """Median of CUDA-event times; the L2 flushed (a 256 MB fill) before each rep if flush."""
    global flush_buf
    if flush_buf is None:
        flush_buf = torch.empty(64 * 1024 * 1024, dtype=torch.float32, device="cuda")
    for _ in range(warmups):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if flush:
            flush_buf.fill_(1.0)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def check_bits():
    """Every variant's gradient equals variant 0's, bit for bit, and the float64 reference."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    failures, cases = [], 0
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        for feat_dim in (1, 3, 32, 128, 130, 515):
            for kind in ("random", "hub", "sparse"):
                n, e = 3000, 20000
                src = torch.randint(0, n, (e,), device="cuda", generator=gen)
                dst = torch.randint(0, n, (e,), device="cuda", generator=gen)
                if kind == "hub":  # rows far past the 2048-edge piece length
                    src[: e // 2] = 7
                    src[e // 2: e // 2 + 5000] = 2999
                if kind == "sparse":  # most rows empty
                    src = src % 50 * 60
                x = torch.randn(n, feat_dim, device="cuda", generator=gen).to(dtype)
                grad = torch.randn(e, device="cuda", generator=gen).to(dtype)
                rel = torch.randn(5, feat_dim, device="cuda", generator=gen).to(dtype)
                rel_index = torch.randint(0, 5, (e,), device="cuda", generator=gen)
                outs = {}
                for v in VARIANTS:
                    set_variant(v)
                    outs[v] = (ops.edge_dot_grad(grad, x, src, dst, n, True),
                               ops.edge_dot_rel_grad(grad, rel, x, src, rel_index, dst, n, True),
                               ops.edge_dot_rel_grad(grad, x, x, rel_index, src, dst, 5, True))
                ref = torch.zeros(n, feat_dim, dtype=torch.float64, device="cuda")
                ref.index_add_(0, src, grad.double()[:, None] * x.double()[dst])
                err = ((outs[0][0].double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
                tol = {torch.float64: 1e-12, torch.float32: 1e-5}.get(dtype, 1e-2)
                cases += 1
                if err > tol:
                    failures.append(f"{dtype} D={feat_dim} {kind}: variant 0 vs float64 {err:.2e}")
                for v in VARIANTS[1:]:
                    for which, (a, b) in enumerate(zip(outs[0], outs[v])):
                        if not torch.equal(a, b):
                            diff = (a.double() - b.double()).abs().max().item()
                            failures.append(f"{dtype} D={feat_dim} {kind} op{which}: variant {v} "
                                            f"differs from 0 (max {diff:.3e})")
    return cases, failures


WORKLOADS = {  # num_nodes, num_edges, feat_dim, dtype
    "W3": (2_930_000, 30_000_000, 128, torch.float32),
    "W4": (2_930_000, 30_000_000, 128, torch.bfloat16),
    "W6": (1_000_000, 30_000_000, 32, torch.float32),
}


def make_inputs(n, e, d, dtype, gen):
    """Features of both sides, random edges, and the same edges sorted by (src, dst)."""
    xs = torch.randn(n, d, device="cuda", generator=gen).to(dtype)
    xd = torch.randn(n, d, device="cuda", generator=gen).to(dtype)
    ei = torch.stack([torch.randint(0, n, (e,), device="cuda", generator=gen),
                      torch.randint(0, n, (e,), device="cuda", generator=gen)])
    return xs, xd, ei, ei[:, (ei[0] * n + ei[1]).argsort()].contiguous()


def bench(results):
    for name, (n, e, d, dtype) in WORKLOADS.items():
        gen = torch.Generator(device="cuda").manual_seed(0)
        xs, xd, ei, ei_sorted = make_inputs(n, e, d, dtype, gen)
        grad = torch.randn(e, device="cuda", generator=gen).to(dtype)
        row = {}
        with torch.no_grad():
            row["fwd_random"] = time_ms(lambda: pyg_edgedot.edge_dot(xs, xd, ei, validate=False))
            row["fwd_sorted"] = time_ms(
                lambda: pyg_edgedot.edge_dot(xs, xd, ei_sorted, validate=False))
        xs.requires_grad_()
        xd.requires_grad_()

        def fwd_bwd():
            xs.grad = xd.grad = None
            pyg_edgedot.edge_dot(xs, xd, ei, validate=False).backward(grad)

        for v in VARIANTS:
            set_variant(v)
            row[f"grad_one_side_v{v}"] = time_ms(
                lambda: ops.edge_dot_grad(grad, xd.detach(), ei[0], ei[1], n, False))
            row[f"fwd_bwd_v{v}"] = time_ms(fwd_bwd)
        results[name] = row
        print(name, json.dumps({k: round(t, 3) for k, t in row.items()}), flush=True)
        del xs, xd, ei, grad, ei_sorted
        torch.cuda.empty_cache()

    # DistMult at W3's size, R = 16.
    n, e, d, r = 2_930_000, 30_000_000, 128, 16
    gen = torch.Generator(device="cuda").manual_seed(0)
    xs = torch.randn(n, d, device="cuda", generator=gen).requires_grad_()
    xd = torch.randn(n, d, device="cuda", generator=gen).requires_grad_()
    rel = torch.randn(r, d, device="cuda", generator=gen).requires_grad_()
    ei = torch.stack([torch.randint(0, n, (e,), device="cuda", generator=gen),
                      torch.randint(0, n, (e,), device="cuda", generator=gen)])
    et = torch.randint(0, r, (e,), device="cuda", generator=gen)
    grad = torch.randn(e, device="cuda", generator=gen)
    row = {}
    with torch.no_grad():
        row["fwd"] = time_ms(lambda: pyg_edgedot.edge_dot(xs, xd, ei, rel, et, validate=False))

    def rel_fwd_bwd():
        xs.grad = xd.grad = rel.grad = None
        pyg_edgedot.edge_dot(xs, xd, ei, rel, et, validate=False).backward(grad)

    for v in VARIANTS:
        set_variant(v)
        row[f"fwd_bwd_v{v}"] = time_ms(rel_fwd_bwd)
    results["distmult_W3_R16"] = row
    print("distmult_W3_R16", json.dumps({k: round(t, 3) for k, t in row.items()}), flush=True)


def main(path):
    print("backends", pyg_edgedot.backends(), torch.cuda.get_device_name())
    cases, failures = check_bits()
    print(f"bitwise check: {cases} cases x 3 ops x {len(VARIANTS) - 1} variants, "
          f"{len(failures)} failures", flush=True)
    for f in failures[:30]:
        print("  FAIL", f)
    results = {"check_cases": cases, "check_failures": failures}
    bench(results)
    with open(path, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "grad_variants.json")
