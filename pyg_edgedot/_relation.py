"""The relation-weighted op group (DistMult): ``edge_dot_rel`` and ``edge_dot_rel_grad``
(schemas in csrc/relation.cpp)."""
import torch

from . import _reference

SCHEMAS = {
    "edge_dot_rel": "edge_dot_rel(Tensor x_src, Tensor x_dst, Tensor rel, Tensor src_index, "
                    "Tensor dst_index, Tensor rel_index) -> (Tensor out, Tensor first_bad)",
    "edge_dot_rel_grad": "edge_dot_rel_grad(Tensor grad_out, Tensor x_a, Tensor x_b, "
                         "Tensor scatter_index, Tensor a_index, Tensor b_index, "
                         "SymInt num_rows) -> Tensor",
}

FALLBACK = {
    "edge_dot_rel": _reference.edge_dot_rel,
    "edge_dot_rel_grad": _reference.edge_dot_rel_grad,
}


def register_python_side() -> None:
    @torch.library.register_fake("pyg_edgedot::edge_dot_rel")
    def _edge_dot_rel_fake(x_src, x_dst, rel, src_index, dst_index, rel_index):
        torch._check(x_src.dim() == 2 and x_dst.dim() == 2 and rel.dim() == 2)
        torch._check(src_index.dim() == 1 and dst_index.shape == src_index.shape)
        torch._check(rel_index.shape == src_index.shape)
        return x_src.new_empty(src_index.shape), src_index.new_empty(1, dtype=torch.int64)

    @torch.library.register_fake("pyg_edgedot::edge_dot_rel_grad")
    def _edge_dot_rel_grad_fake(grad_out, x_a, x_b, scatter_index, a_index, b_index, num_rows):
        torch._check(x_a.dim() == 2 and x_b.dim() == 2)
        return x_b.new_empty((num_rows, x_b.shape[1]))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, grad_out, _grad_first_bad):
        x_src, x_dst, rel, src_index, dst_index, rel_index = ctx.saved_tensors
        grad = torch.ops.pyg_edgedot.edge_dot_rel_grad
        grad_out = grad_out.contiguous()
        grad_src = grad_dst = grad_rel = None
        if ctx.needs_input_grad[0]:
            grad_src = grad(grad_out, rel, x_dst, src_index, rel_index, dst_index,
                            x_src.shape[0])
        if ctx.needs_input_grad[1]:
            grad_dst = grad(grad_out, rel, x_src, dst_index, rel_index, src_index,
                            x_dst.shape[0])
        if ctx.needs_input_grad[2]:
            grad_rel = grad(grad_out, x_src, x_dst, rel_index, src_index, dst_index,
                            rel.shape[0])
        return grad_src, grad_dst, grad_rel, None, None, None

    torch.library.register_autograd("pyg_edgedot::edge_dot_rel", backward,
                                    setup_context=setup_context)
