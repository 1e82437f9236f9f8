"""Per-kernel GPU time of edge_dot's forward and backward (torch.profiler), for NOTES.md.

Usage: python scripts/profile_kernels.py [W3|W4|W6 ...]
"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import pyg_edgedot

WORKLOADS = {  # num_nodes, num_edges, feat_dim, dtype
    "W3": (2_930_000, 30_000_000, 128, torch.float32),
    "W4": (2_930_000, 30_000_000, 128, torch.bfloat16),
    "W6": (1_000_000, 30_000_000, 32, torch.float32),
}


def main(names):
    for name in names:
        num_nodes, num_edges, feat_dim, dtype = WORKLOADS[name]
        gen = torch.Generator(device="cuda").manual_seed(0)
        x_src = torch.randn(num_nodes, feat_dim, device="cuda", generator=gen).to(dtype)
        x_dst = torch.randn(num_nodes, feat_dim, device="cuda", generator=gen).to(dtype)
        x_src.requires_grad_()
        x_dst.requires_grad_()
        ei = torch.stack([torch.randint(0, num_nodes, (num_edges,), device="cuda", generator=gen),
                          torch.randint(0, num_nodes, (num_edges,), device="cuda", generator=gen)])
        grad = torch.randn(num_edges, device="cuda", generator=gen).to(dtype)
        for _ in range(3):
            pyg_edgedot.edge_dot(x_src, x_dst, ei, validate=False).backward(grad)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                x_src.grad = x_dst.grad = None
                pyg_edgedot.edge_dot(x_src, x_dst, ei, validate=False).backward(grad)
            torch.cuda.synchronize()
        print(f"== {name}: N={num_nodes} E={num_edges} D={feat_dim} {dtype}; 5 iterations")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14,
                                        max_name_column_width=70))
        del x_src, x_dst, ei, grad
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:] or ["W3", "W4", "W6"])
