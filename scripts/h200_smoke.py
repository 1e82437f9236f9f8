"""First look on a GPU: correctness of every kernel path against float64, determinism, and
W3 (2.93M nodes, E = 30M, D = 128, fp32) forward and forward + backward time and peak
memory next to PyG's eager expression. The full comparison is benchmarks/bench_edge_dot.py.
"""
import json
import sys

import torch

import pyg_edgedot


def rel_err(out, ref):
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def check_paths(dev):
    gen = torch.Generator(device=dev).manual_seed(1)
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
    worst = {}
    for dtype in tol:
        for index_dtype in (torch.int64, torch.int32):
            for feat_dim, offset in ((128, 0), (128, 1), (1, 0), (33, 0), (515, 0), (32, 0)):
                big = torch.randn(3000, feat_dim + offset, device=dev, generator=gen).to(dtype)
                x_src = big[:2000, offset:]          # offset 1 breaks 16-byte alignment
                x_dst = big[1000:, offset:]
                ei = torch.stack([torch.randint(0, 2000, (20000,), device=dev, generator=gen),
                                  torch.randint(0, 2000, (20000,), device=dev, generator=gen)])
                ei = ei.to(index_dtype)
                xs = x_src.detach().clone().requires_grad_()
                xd = x_dst.detach().clone().requires_grad_()
                out = pyg_edgedot.edge_dot(xs, xd, ei)
                grad = torch.randn(out.shape, device=dev, generator=gen).to(dtype)
                out.backward(grad)
                rs = x_src.double().requires_grad_()
                rd = x_dst.double().requires_grad_()
                ref = (rs[ei[0].long()] * rd[ei[1].long()]).sum(-1)
                ref.backward(grad.double())
                errs = (rel_err(out, ref), rel_err(xs.grad, rs.grad), rel_err(xd.grad, rd.grad))
                key = f"{dtype} {index_dtype} D={feat_dim} off={offset}"
                worst[key] = max(errs)
                assert max(errs) < tol[dtype], (key, errs)
                g1 = xs.grad.clone()
                xs.grad = None
                pyg_edgedot.edge_dot(xs, xd, ei).backward(grad)
                assert torch.equal(g1, xs.grad), f"backward not deterministic: {key}"
    return worst


def time_ms(fn, reps=20):
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def w3(dev):
    gen = torch.Generator(device=dev).manual_seed(3)
    num_nodes, num_edges, feat_dim = 2_930_000, 30_000_000, 128
    x_src = torch.randn(num_nodes, feat_dim, device=dev, generator=gen).requires_grad_()
    x_dst = torch.randn(num_nodes, feat_dim, device=dev, generator=gen).requires_grad_()
    ei = torch.stack([torch.randint(0, num_nodes, (num_edges,), device=dev, generator=gen),
                      torch.randint(0, num_nodes, (num_edges,), device=dev, generator=gen)])
    grad = torch.randn(num_edges, device=dev, generator=gen)
    methods = {
        "edgedot": lambda: pyg_edgedot.edge_dot(x_src, x_dst, ei),
        "edgedot(validate=False)": lambda: pyg_edgedot.edge_dot(x_src, x_dst, ei, validate=False),
        "eager": lambda: (x_src[ei[0]] * x_dst[ei[1]]).sum(-1),
    }
    rows = {}
    for name, fwd in methods.items():
        def fwd_bwd():
            x_src.grad = x_dst.grad = None
            fwd().backward(grad)
        with torch.no_grad():
            t_fwd = time_ms(fwd)
        t_both = time_ms(fwd_bwd, reps=10)
        x_src.grad = x_dst.grad = None
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        with torch.no_grad():
            fwd()
        peak_fwd = torch.cuda.max_memory_allocated() - base
        torch.cuda.reset_peak_memory_stats()
        fwd_bwd()
        peak_both = torch.cuda.max_memory_allocated() - base
        x_src.grad = x_dst.grad = None
        rows[name] = dict(fwd_ms=t_fwd, fwd_bwd_ms=t_both, peak_fwd_gb=peak_fwd / 1e9,
                          peak_fwd_bwd_gb=peak_both / 1e9)
        print(f"{name:<26} fwd {t_fwd:8.2f} ms  fwd+bwd {t_both:8.2f} ms  "
              f"peak fwd {peak_fwd / 1e9:6.2f} GB  peak fwd+bwd {peak_both / 1e9:6.2f} GB",
              flush=True)
    return rows


def main():
    dev = "cuda"
    print(torch.__version__, torch.cuda.get_device_name(), pyg_edgedot.backends(), flush=True)
    worst = check_paths(dev)
    print("all paths correct; worst rel. error per dtype:",
          {k: f"{v:.1e}" for k, v in worst.items() if "D=128 off=0" in k}, flush=True)
    rows = w3(dev)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "w3": rows, "worst_rel_err": worst}, f, indent=1)


if __name__ == "__main__":
    main()
