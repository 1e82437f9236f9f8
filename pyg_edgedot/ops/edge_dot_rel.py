"""Relation-weighted scores (DistMult): ``edge_dot(..., rel, edge_type)`` and its gradient op.

Schemas in ``csrc/edge_dot_rel.cpp``; kernels in ``csrc/cpu/edge_dot_kernel.cpp`` and
``csrc/cuda/edge_dot_kernel.cu`` (they share the plain dot product's templates). This module
holds the checks, the fake kernels, the autograd and the pure-PyTorch fallback; the public
entry point is :func:`pyg_edgedot.edge_dot` with ``rel``.
"""
from typing import Optional

import torch
from torch import Tensor

from .. import _checks
from . import _chunked, _dispatch

NAME = "edge_dot_rel"


def edge_dot_rel(x_src: Tensor, x_dst: Tensor, edge_index: Tensor, rel: Optional[Tensor],
                 edge_type: Optional[Tensor], validate: bool) -> Tensor:
    """``edge_dot`` with ``rel``: ``x_src``, ``x_dst`` and ``edge_index`` already checked
    (``edge_index`` plain)."""
    op = "edge_dot"
    src_index, dst_index = edge_index[0], edge_index[1]
    rel, edge_type = _checks.check_relation(x_src, src_index.size(0), rel, edge_type, op)
    if edge_type is None:
        # One relation for every edge: a stride-0 view, no [E] index is materialized.
        rel_index = src_index.new_zeros(1).expand(src_index.size(0))
    elif edge_type.dtype == src_index.dtype or edge_type.dtype == torch.int32:
        rel_index = edge_type.to(src_index.dtype)
    else:
        # An int64 edge_type with an int32 edge_index: the kernels take one index dtype,
        # and narrowing edge_type would wrap a type past int32's range into a valid one.
        src_index, dst_index, rel_index = src_index.long(), dst_index.long(), edge_type
    num_rel = rel.size(0)
    keys = _checks.edge_keys(edge_index, x_src, x_dst)
    if edge_type is not None:
        keys.append((edge_type, (num_rel,)))
    report = _checks.reads_first_bad(validate, x_src.device, keys)  # as in edge_dot
    out, first_bad = _dispatch.call(torch.ops.pyg_edgedot.edge_dot_rel, (x_src, x_dst, rel),
                                    x_src, x_dst, rel, src_index, dst_index, rel_index, report)
    if report:
        edge_bounds = _checks.edge_bounds(edge_index, x_src, x_dst)
        _checks.raise_if_reported(
            op, first_bad, keys,
            lambda: edge_bounds() + [_checks.Bound("edge_type", rel_index, "rel", num_rel)],
            "edge")
    return out


# ---------------------------------------------------------------------------------------
# The registered ops' Python side
# ---------------------------------------------------------------------------------------

def _fallback_forward(x_src, x_dst, rel, src_index, dst_index, rel_index, report_bad=True):
    """out[e] = sum_k x_src[s_e, k] * rel[t_e, k] * x_dst[d_e, k], in chunks."""
    _checks.check_op_args("edge_dot_rel", [("x_src", x_src), ("x_dst", x_dst), ("rel", rel)],
                          [("src_index", src_index), ("dst_index", dst_index),
                           ("rel_index", rel_index)])
    return _chunked.scores(x_src, x_dst, src_index, dst_index, rel, rel_index, report_bad)


def _fallback_grad(grad_out, x_a, x_b, scatter_index, a_index, b_index, num_rows):
    """out[scatter[e], :] += grad_out[e] * x_a[a_index[e], :] * x_b[b_index[e], :]."""
    _checks.check_op_args("edge_dot_rel_grad", [("x_b", x_b), ("x_a", x_a)],
                          [("scatter_index", scatter_index), ("a_index", a_index),
                           ("b_index", b_index)], grad_out)
    num_rows = _checks.check_num_rows("edge_dot_rel_grad", num_rows)
    return _chunked.scatter(grad_out, x_b, scatter_index, b_index, num_rows, x_a, a_index)


def fallback_impls() -> dict:
    return {"edge_dot_rel": _fallback_forward, "edge_dot_rel_grad": _fallback_grad}


def register_fake_and_autograd() -> None:
    @torch.library.register_fake("pyg_edgedot::edge_dot_rel")
    def _edge_dot_rel_fake(x_src, x_dst, rel, src_index, dst_index, rel_index,
                           report_bad=True):
        _checks.check_fake_devices("edge_dot_rel", [
            ("x_src", x_src), ("x_dst", x_dst), ("rel", rel), ("src_index", src_index),
            ("dst_index", dst_index), ("rel_index", rel_index)])
        torch._check(x_src.dim() == 2 and x_dst.dim() == 2 and rel.dim() == 2)
        torch._check(src_index.dim() == 1 and dst_index.shape == src_index.shape)
        torch._check(rel_index.shape == src_index.shape)
        return (x_src.new_empty(src_index.shape),
                src_index.new_empty(1 if report_bad else 0, dtype=torch.int64))

    @torch.library.register_fake("pyg_edgedot::edge_dot_rel_grad")
    def _edge_dot_rel_grad_fake(grad_out, x_a, x_b, scatter_index, a_index, b_index,
                                num_rows):
        _checks.check_fake_devices("edge_dot_rel_grad", [
            ("x_b", x_b), ("x_a", x_a), ("grad_out", grad_out),
            ("scatter_index", scatter_index), ("a_index", a_index), ("b_index", b_index)])
        torch._check(x_a.dim() == 2 and x_b.dim() == 2)
        return x_b.new_empty((num_rows, x_b.shape[1]))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:6])
        ctx.set_materialize_grads(False)  # no zero tensor (a fill kernel) for first_bad

    def backward(ctx, grad_out, _grad_first_bad):
        if grad_out is None:
            return None, None, None, None, None, None, None
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
        return grad_src, grad_dst, grad_rel, None, None, None, None

    torch.library.register_autograd("pyg_edgedot::edge_dot_rel", backward,
                                    setup_context=setup_context)

    def setup_grad_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:6])

    def grad_backward(ctx, grad_rows):
        # out = edge_dot_rel_grad(g, a, b, s, i, j, n), out[s_e] += g_e * a[i_e] * b[j_e], is
        # trilinear in (g, a, b): d/dg_e = sum_k grad_rows[s_e, k] a[i_e, k] b[j_e, k] is
        # edge_dot_rel's forward (a as rel) and d/da, d/db the same gradient op, re-indexed.
        grad_out, x_a, x_b, scatter_index, a_index, b_index = ctx.saved_tensors
        grads = [None, None, None]
        if ctx.needs_input_grad[0]:
            score, _ = torch.ops.pyg_edgedot.edge_dot_rel(grad_rows, x_b, x_a, scatter_index,
                                                          b_index, a_index, False)
            grads[0] = _chunked.zero_out_of_range(
                score, (scatter_index, grad_rows.shape[0]), (a_index, x_a.shape[0]),
                (b_index, x_b.shape[0]))
        factors = ((x_a, a_index), (x_b, b_index))
        for i, (x, index) in enumerate(factors):
            if ctx.needs_input_grad[1 + i]:
                other, other_index = factors[1 - i]
                grads[1 + i] = torch.ops.pyg_edgedot.edge_dot_rel_grad(
                    grad_out, grad_rows, other, index, scatter_index, other_index, x.shape[0])
        return (*grads, None, None, None, None)

    torch.library.register_autograd("pyg_edgedot::edge_dot_rel_grad", grad_backward,
                                    setup_context=setup_grad_context)
