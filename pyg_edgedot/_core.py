"""The core op group: ``edge_dot`` and ``edge_dot_grad`` (schemas in csrc/edge_dot.cpp)."""
import torch

from . import _reference

SCHEMAS = {
    "edge_dot": "edge_dot(Tensor x_src, Tensor x_dst, Tensor src_index, Tensor dst_index) "
                "-> (Tensor out, Tensor first_bad)",
    "edge_dot_grad": "edge_dot_grad(Tensor grad_out, Tensor x_gather, Tensor scatter_index, "
                     "Tensor gather_index, SymInt num_rows) -> Tensor",
}

FALLBACK = {
    "edge_dot": _reference.edge_dot,
    "edge_dot_grad": _reference.edge_dot_grad,
}


def triton_impls() -> dict:
    from . import _triton  # imports triton: only on the CUDA-without-nvcc path
    return {"edge_dot": _triton.edge_dot, "edge_dot_grad": _triton.edge_dot_grad}


def register_python_side() -> None:
    @torch.library.register_fake("pyg_edgedot::edge_dot")
    def _edge_dot_fake(x_src, x_dst, src_index, dst_index):
        torch._check(x_src.dim() == 2 and x_dst.dim() == 2)
        torch._check(src_index.dim() == 1 and dst_index.shape == src_index.shape)
        return x_src.new_empty(src_index.shape), src_index.new_empty(1, dtype=torch.int64)

    @torch.library.register_fake("pyg_edgedot::edge_dot_grad")
    def _edge_dot_grad_fake(grad_out, x_gather, scatter_index, gather_index, num_rows):
        torch._check(x_gather.dim() == 2)
        return x_gather.new_empty((num_rows, x_gather.shape[1]))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, grad_out, _grad_first_bad):
        x_src, x_dst, src_index, dst_index = ctx.saved_tensors
        grad_src = grad_dst = None
        grad_out = grad_out.contiguous()
        if ctx.needs_input_grad[0]:
            grad_src = torch.ops.pyg_edgedot.edge_dot_grad(
                grad_out, x_dst, src_index, dst_index, x_src.shape[0])
        if ctx.needs_input_grad[1]:
            grad_dst = torch.ops.pyg_edgedot.edge_dot_grad(
                grad_out, x_src, dst_index, src_index, x_dst.shape[0])
        return grad_src, grad_dst, None, None

    torch.library.register_autograd("pyg_edgedot::edge_dot", backward,
                                    setup_context=setup_context)
