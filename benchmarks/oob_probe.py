"""Out-of-range indices on CUDA, for `compute-sanitizer --tool memcheck` (must report 0 errors;
run by `bash benchmarks/gpu_run.sh sanitizer`).

Runs the forward with validate=True (must raise IndexError) and validate=False (must score
NaN), the backward through edges whose indices are out of range on either side, and then a
normal call, which must still work: the CUDA context survives.
"""
import sys

import torch

import pyg_edgedot


def main() -> int:
    dev = "cuda"
    gen = torch.Generator(device=dev).manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for index_dtype in (torch.int64, torch.int32):
            x_src = torch.randn(1000, 128, device=dev, dtype=dtype, generator=gen)
            x_dst = torch.randn(700, 128, device=dev, dtype=dtype, generator=gen)
            edge_index = torch.stack([
                torch.randint(0, 1000, (5000,), device=dev, generator=gen),
                torch.randint(0, 700, (5000,), device=dev, generator=gen)]).to(index_dtype)
            bad = edge_index.clone()
            bad[0, 17] = 1000            # one past the end
            bad[1, 33] = -1              # negative
            bad[0, 4000] = 2**31 - 1     # far out
            try:
                pyg_edgedot.edge_dot(x_src, x_dst, bad)
                print("FAIL: no IndexError")
                return 1
            except IndexError as err:
                print("raised as expected:", err)
            xs = x_src.clone().requires_grad_()
            xd = x_dst.clone().requires_grad_()
            out = pyg_edgedot.edge_dot(xs, xd, bad, validate=False)
            assert torch.isnan(out[[17, 33, 4000]]).all(), "bad edges must score NaN"
            good = torch.ones(out.numel(), dtype=torch.bool, device=dev)
            good[[17, 33, 4000]] = False
            assert torch.isfinite(out[good]).all()
            out.nan_to_num(0.0).sum().backward()
            assert torch.isfinite(xs.grad).all() and torch.isfinite(xd.grad).all()
            ref = (x_src[edge_index[0].long()].float() * x_dst[edge_index[1].long()].float()).sum(-1)
            got = pyg_edgedot.edge_dot(x_src, x_dst, edge_index).float()
            rel = ((got - ref).norm() / ref.norm()).item()
            assert rel < 2e-2, rel
    torch.cuda.synchronize()
    print("OOB probe passed; CUDA context still healthy")
    return 0


if __name__ == "__main__":
    sys.exit(main())
