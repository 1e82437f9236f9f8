"""``edge_dot``: the fused edge dot product and its gradient op.

Schemas in ``csrc/edge_dot.cpp``; kernels in ``csrc/cpu/edge_dot_kernel.cpp``,
``csrc/cuda/edge_dot_kernel.cu`` and, for CUDA without nvcc, :mod:`.edge_dot_triton`. This
module holds the public function, the fake kernels, the autograd and the pure-PyTorch
fallback.
"""
from typing import Optional

import torch
from torch import Tensor

from .. import _checks
from . import _chunked, _dispatch
from .edge_dot_rel import edge_dot_rel

NAME = "edge_dot"


def edge_dot(x_src: Tensor, x_dst: Tensor, edge_index: Tensor, rel: Optional[Tensor] = None,
             edge_type: Optional[Tensor] = None, *, validate: bool = True) -> Tensor:
    r"""Scores each edge by the dot product of its endpoint features, in one fused pass.

    .. math::
        \mathrm{out}_e = \sum_{k} x^{src}_{s_e, k} \, x^{dst}_{d_e, k},
        \qquad (s_e, d_e) = (\mathrm{edge\_index}[0, e], \mathrm{edge\_index}[1, e])

    The same as ``(x_src[edge_index[0]] * x_dst[edge_index[1]]).sum(-1)``, without the two
    ``[E, D]`` intermediates: memory is O(E) and each row is read once per edge.
    Differentiable in ``x_src`` and ``x_dst``; only the gradients that are needed are
    computed. The backward is deterministic (bitwise equal run to run) on the C++, CUDA and
    Triton kernels, and on the pure-PyTorch fallback under
    ``torch.use_deterministic_algorithms(True)`` (its scatter is ``index_add_``).
    Twice differentiable too (``create_graph=True``, e.g. a gradient penalty): the gradient
    op has autograd of its own, written with the same fused ops, so every order stays O(E).

    With ``rel``, each edge is scored through a relation vector (DistMult):

    .. math::
        \mathrm{out}_e = \sum_{k} x^{src}_{s_e, k} \, r_{t_e, k} \, x^{dst}_{d_e, k},
        \qquad t_e = \mathrm{edge\_type}[e]

    the same as ``(x_src[src] * rel[edge_type] * x_dst[dst]).sum(-1)``, fused, and
    differentiable in ``rel`` as well.

    Args:
        x_src (Tensor): source features ``[N_src, D]``; float32, float64, float16 or
            bfloat16. Any row stride; a column stride other than 1 costs one copy.
        x_dst (Tensor): destination features ``[N_dst, D]``, same dtype and device.
            May be the same tensor as ``x_src``.
        edge_index (Tensor): ``[2, E]`` int64 or int32 (a plain tensor or PyG's
            ``EdgeIndex``; any strides). Row 0 indexes ``x_src``, row 1 ``x_dst``.
        rel (Tensor, optional): relation vectors ``[R, D]`` (same dtype and device), or
            one vector ``[D]`` used for every edge.
        edge_type (Tensor, optional): ``[E]`` int64 or int32, the row of ``rel`` each edge
            uses; required when ``R > 1`` (converted to ``edge_index``'s dtype if it differs).
        validate (bool): raise ``IndexError`` naming the first edge whose index is out
            of range (negative or too large). The kernel always checks bounds as it reads;
            when the host will read the first bad edge back, the kernel records it. On the
            CPU that is free. On CUDA it is one device-to-host synchronization, paid once
            per index tensor: an ``edge_index`` (and ``edge_type``) found in range is
            remembered, and later calls with the same tensor, not modified in place since
            and indexing at least as many rows, skip the read and the recording. Skipped
            inside ``torch.compile`` graphs, on meta tensors and while a CUDA graph is
            captured. Unchecked, an out-of-range edge scores NaN and
            contributes no gradient. Either way, no memory outside the inputs is ever read
            and the CUDA context stays usable.

    Returns:
        Tensor: ``[E]`` scores in the dtype of the inputs (accumulated in float32, or
        float64 for float64 inputs).

    Raises:
        TypeError / ValueError: wrong types, shapes, dtypes or devices (metadata only,
            no cost). IndexError: an index out of range (see ``validate``).
    """
    _checks.check_features(x_src, x_dst, NAME)
    edge_index = _checks.check_edge_index(x_src, edge_index, NAME)
    # Not just truthy: validate=None would skip the index check without a word.
    _checks.check_bool(NAME, "validate", validate)
    _checks.check_no_forward_ad(NAME, [("x_src", x_src), ("x_dst", x_dst), ("rel", rel)])
    if rel is not None or edge_type is not None:
        return edge_dot_rel(x_src, x_dst, edge_index, rel, edge_type, validate)
    src_index, dst_index = edge_index[0], edge_index[1]
    # Whether first_bad will be read, decided before the call: the op fills it only then (on
    # CUDA a memset and the kernel's atomics; an edge_index already validated needs neither).
    keys = _checks.edge_keys(edge_index, x_src, x_dst)
    report = _checks.reads_first_bad(validate, x_src.device, keys)
    out, first_bad = _dispatch.call(torch.ops.pyg_edgedot.edge_dot, (x_src, x_dst), x_src, x_dst,
                                    src_index, dst_index, report)
    if report:
        _checks.raise_if_reported(NAME, first_bad, keys,
                                  _checks.edge_bounds(edge_index, x_src, x_dst), "edge")
    return out


# ---------------------------------------------------------------------------------------
# The registered ops' Python side
# ---------------------------------------------------------------------------------------

def _check_forward_args(x_src, x_dst, src_index, dst_index) -> None:
    _checks.check_op_args("edge_dot", [("x_src", x_src), ("x_dst", x_dst)],
                          [("src_index", src_index), ("dst_index", dst_index)])


def _check_grad_args(grad_out, x_gather, scatter_index, gather_index, num_rows) -> int:
    _checks.check_op_args("edge_dot_grad", [("x_gather", x_gather)],
                          [("scatter_index", scatter_index), ("gather_index", gather_index)],
                          grad_out)
    return _checks.check_num_rows("edge_dot_grad", num_rows)


def _fallback_forward(x_src, x_dst, src_index, dst_index, report_bad=True):
    """out[e] = sum_k x_src[src_index[e], k] * x_dst[dst_index[e], k], in chunks; returns
    ``(out, first_bad)``."""
    _check_forward_args(x_src, x_dst, src_index, dst_index)
    return _chunked.scores(x_src, x_dst, src_index, dst_index, report_bad=report_bad)


def _fallback_grad(grad_out, x_gather, scatter_index, gather_index, num_rows):
    """out[scatter_index[e], :] += grad_out[e] * x_gather[gather_index[e], :], in chunks."""
    num_rows = _check_grad_args(grad_out, x_gather, scatter_index, gather_index, num_rows)
    return _chunked.scatter(grad_out, x_gather, scatter_index, gather_index, num_rows)


def _check_pair_grad_args(grad_out, x_src, x_dst, src_index, dst_index) -> None:
    _checks.check_op_args("edge_dot_pair_grad", [("x_src", x_src), ("x_dst", x_dst)],
                          [("src_index", src_index), ("dst_index", dst_index)], grad_out)


def _by_sides(grad):
    """``edge_dot_pair_grad`` from a one-sided gradient implementation ``grad``."""
    def pair_grad(grad_out, x_src, x_dst, src_index, dst_index):
        _check_pair_grad_args(grad_out, x_src, x_dst, src_index, dst_index)
        return (grad(grad_out, x_dst, src_index, dst_index, x_src.shape[0]),
                grad(grad_out, x_src, dst_index, src_index, x_dst.shape[0]))
    return pair_grad


def fallback_impls() -> dict:
    return {"edge_dot": _fallback_forward, "edge_dot_grad": _fallback_grad,
            "edge_dot_pair_grad": _by_sides(_fallback_grad)}


def pair_grads(needs_input_grad, grad_out: Tensor, x_src: Tensor, x_dst: Tensor,
               src_index: Tensor, dst_index: Tensor):
    """The gradients of ``sum_e grad_out[e] * <x_src[src_index[e]], x_dst[dst_index[e]]>``
    for x_src and x_dst (None where not needed): one ``edge_dot_pair_grad`` for both, one
    ``edge_dot_grad`` for one. Shared by every op whose scores are such pairs (``edge_dot``,
    ``score_candidates``)."""
    # Called from a backward: the inputs need a gradient only under create_graph=True.
    ops, inputs = torch.ops.pyg_edgedot, (grad_out, x_src, x_dst)
    if needs_input_grad[0] and needs_input_grad[1]:
        return _dispatch.call(ops.edge_dot_pair_grad, inputs, grad_out, x_src, x_dst,
                              src_index, dst_index)
    grad_src = grad_dst = None
    if needs_input_grad[0]:
        grad_src = _dispatch.call(ops.edge_dot_grad, inputs, grad_out, x_dst, src_index,
                                  dst_index, x_src.shape[0])
    if needs_input_grad[1]:
        grad_dst = _dispatch.call(ops.edge_dot_grad, inputs, grad_out, x_src, dst_index,
                                  src_index, x_dst.shape[0])
    return grad_src, grad_dst


def triton_impls() -> dict:
    from . import edge_dot_triton  # imports triton: only on the CUDA-without-nvcc path

    def forward(x_src, x_dst, src_index, dst_index, report_bad=True):
        _check_forward_args(x_src, x_dst, src_index, dst_index)
        return edge_dot_triton.edge_dot(x_src, x_dst, src_index, dst_index, report_bad)

    def grad(grad_out, x_gather, scatter_index, gather_index, num_rows):
        num_rows = _check_grad_args(grad_out, x_gather, scatter_index, gather_index, num_rows)
        return edge_dot_triton.edge_dot_grad(grad_out, x_gather, scatter_index, gather_index,
                                             num_rows)

    return {"edge_dot": forward, "edge_dot_grad": grad, "edge_dot_pair_grad": _by_sides(grad)}


def register_fake_and_autograd() -> None:
    @torch.library.register_fake("pyg_edgedot::edge_dot")
    def _edge_dot_fake(x_src, x_dst, src_index, dst_index, report_bad=True):
        _checks.check_fake_devices("edge_dot", [("x_src", x_src), ("x_dst", x_dst),
                                                ("src_index", src_index),
                                                ("dst_index", dst_index)])
        torch._check(x_src.dim() == 2 and x_dst.dim() == 2)
        torch._check(src_index.dim() == 1 and dst_index.shape == src_index.shape)
        return (x_src.new_empty(src_index.shape),
                src_index.new_empty(1 if report_bad else 0, dtype=torch.int64))

    @torch.library.register_fake("pyg_edgedot::edge_dot_grad")
    def _edge_dot_grad_fake(grad_out, x_gather, scatter_index, gather_index, num_rows):
        _checks.check_fake_devices("edge_dot_grad", [("x_gather", x_gather),
                                                     ("grad_out", grad_out),
                                                     ("scatter_index", scatter_index),
                                                     ("gather_index", gather_index)])
        torch._check(x_gather.dim() == 2)
        return x_gather.new_empty((num_rows, x_gather.shape[1]))

    @torch.library.register_fake("pyg_edgedot::edge_dot_pair_grad")
    def _edge_dot_pair_grad_fake(grad_out, x_src, x_dst, src_index, dst_index):
        _checks.check_fake_devices("edge_dot_pair_grad", [
            ("x_src", x_src), ("x_dst", x_dst), ("grad_out", grad_out),
            ("src_index", src_index), ("dst_index", dst_index)])
        torch._check(x_src.dim() == 2 and x_dst.dim() == 2)
        return x_src.new_empty(x_src.shape), x_dst.new_empty(x_dst.shape)

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:4])
        # first_bad (int64) has no gradient: left undefined, not a zero tensor (a fill kernel
        # per backward on CUDA).
        ctx.set_materialize_grads(False)

    def backward(ctx, grad_out, _grad_first_bad):
        if grad_out is None:
            return None, None, None, None, None
        x_src, x_dst, src_index, dst_index = ctx.saved_tensors
        return (*pair_grads(ctx.needs_input_grad, grad_out.contiguous(), x_src, x_dst,
                            src_index, dst_index), None, None, None)

    torch.library.register_autograd("pyg_edgedot::edge_dot", backward,
                                    setup_context=setup_context)

    def setup_grad_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:4])

    def grad_backward(ctx, grad_rows):
        # out = edge_dot_grad(g, x, s, t, n), out[s_e] += g_e * x[t_e], is bilinear in (g, x):
        # d/dg_e = <grad_rows[s_e], x[t_e]> is edge_dot's forward and d/dx the same gradient
        # op with s and t swapped, so every order of derivative stays fused and O(E).
        grad_out, x_gather, scatter_index, gather_index = ctx.saved_tensors
        grad_grad_out = grad_x_gather = None
        if ctx.needs_input_grad[0]:
            score, _ = torch.ops.pyg_edgedot.edge_dot(grad_rows, x_gather, scatter_index,
                                                      gather_index, False)
            grad_grad_out = _chunked.zero_out_of_range(
                score, (scatter_index, grad_rows.shape[0]), (gather_index, x_gather.shape[0]))
        if ctx.needs_input_grad[1]:
            grad_x_gather = torch.ops.pyg_edgedot.edge_dot_grad(
                grad_out, grad_rows, gather_index, scatter_index, x_gather.shape[0])
        return grad_grad_out, grad_x_gather, None, None, None

    torch.library.register_autograd("pyg_edgedot::edge_dot_grad", grad_backward,
                                    setup_context=setup_grad_context)

    def setup_pair_grad_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def pair_grad_backward(ctx, grad_src_rows, grad_dst_rows):
        # (grad_src, grad_dst) = edge_dot_pair_grad(g, x_src, x_dst, s, d) adds g_e * x_dst[d_e]
        # to grad_src[s_e] and g_e * x_src[s_e] to grad_dst[d_e]: d/dg_e is two forward
        # scores, <grad_src_rows[s_e], x_dst[d_e]> + <x_src[s_e], grad_dst_rows[d_e]>, and
        # (d/dx_src, d/dx_dst) the pair op itself on (grad_src_rows, grad_dst_rows).
        grad_out, x_src, x_dst, src_index, dst_index = ctx.saved_tensors
        grad_grad_out = None
        if ctx.needs_input_grad[0]:
            score = (torch.ops.pyg_edgedot.edge_dot(grad_src_rows, x_dst, src_index, dst_index,
                                                    False)[0]
                     + torch.ops.pyg_edgedot.edge_dot(x_src, grad_dst_rows, src_index,
                                                      dst_index, False)[0])
            grad_grad_out = _chunked.zero_out_of_range(
                score, (src_index, x_src.shape[0]), (dst_index, x_dst.shape[0]))
        grad_x_src, grad_x_dst = pair_grads(ctx.needs_input_grad[1:3], grad_out, grad_src_rows,
                                            grad_dst_rows, src_index, dst_index)
        return grad_grad_out, grad_x_src, grad_x_dst, None, None

    torch.library.register_autograd("pyg_edgedot::edge_dot_pair_grad", pair_grad_backward,
                                    setup_context=setup_pair_grad_context)
