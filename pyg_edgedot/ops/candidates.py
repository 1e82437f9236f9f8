r"""Candidate scoring and ranking for OGB-style evaluation: ``score_candidates`` and
``rank_candidates``.

Schemas in ``csrc/candidates.cpp``; kernels in ``csrc/cpu/candidates_kernel.cpp`` and
``csrc/cuda/candidates_kernel.cu``. This module holds the public functions, the fake
kernels, the autograd and the pure-PyTorch fallback.

``first_bad`` (both ops) is a one-element int64 tensor: the first source row ``n`` that holds
an index out of range (``src_index[n]``, ``pos_index[n]`` or any entry of row ``n`` of the
candidate matrix), or -1; the public functions find which entry and raise.
"""
from typing import Tuple

import torch
from torch import Tensor

from .. import _checks
from . import _chunked, _dispatch
from .edge_dot import pair_grads

NAME = "candidates"


def score_candidates(x_src: Tensor, x_dst: Tensor, src_index: Tensor, cand_index: Tensor, *,
                     validate: bool = True) -> Tensor:
    r"""Scores every source against its own list of ``K`` candidates, in one fused pass.

    .. math::
        \mathrm{out}_{n,k} = \sum_{d} x^{src}_{s_n, d} \, x^{dst}_{c_{n,k}, d},
        \qquad s_n = \mathrm{src\_index}[n], \; c_{n,k} = \mathrm{cand\_index}[n, k]

    The same as ``(x_src[src_index].unsqueeze(1) * x_dst[cand_index]).sum(-1)`` (and as
    :func:`pyg_edgedot.edge_dot` on the ``N * K`` flattened pairs), without the ``[N, K, D]``
    intermediate: each source row is read once per row of ``cand_index``, each candidate row
    once per pair. Typical use: scoring the positive and the sampled negatives of each
    evaluation edge (``cand_index = torch.cat([pos[:, None], neg], 1)``).

    Differentiable in ``x_src`` and ``x_dst``; only the gradients that are needed are
    computed. The backward runs ``edge_dot``'s gradient op on the ``N * K`` flattened pairs:
    bitwise deterministic on the C++, CUDA and Triton kernels always, and on the
    pure-PyTorch fallback under ``torch.use_deterministic_algorithms(True)``. Twice
    differentiable, through that gradient op's own autograd.

    Args:
        x_src (Tensor): source features ``[N_src, D]``; float32, float64, float16 or
            bfloat16. Any row stride; a column stride other than 1 costs one copy.
        x_dst (Tensor): candidate features ``[N_dst, D]``, same dtype, device and ``D``.
            May be the same tensor as ``x_src``.
        src_index (Tensor): ``[N]`` int64 or int32, rows of ``x_src``.
        cand_index (Tensor): ``[N, K]``, the dtype of ``src_index``, rows of ``x_dst``; any
            strides (e.g. a transposed view).
        validate (bool): raise ``IndexError`` for an index out of range. The kernels always
            check bounds as they read and record the first bad row; ``validate`` decides
            whether the host reads that number back (free on the CPU; on CUDA one
            device-to-host synchronization, paid once per unchanged index tensor as in
            :func:`pyg_edgedot.edge_dot`; skipped inside ``torch.compile``, on meta tensors
            and during CUDA graph capture). Unchecked, a pair with an index out of range
            scores NaN (every pair of a row whose ``src_index`` is out of range) and
            contributes no gradient. No memory outside the inputs is ever read.

    Returns:
        Tensor: ``[N, K]`` scores in the dtype of the inputs (accumulated in float32, or
        float64 for float64 inputs).

    Raises:
        TypeError / ValueError: wrong types, shapes, dtypes, devices or feature dimensions
            (metadata only, no cost). IndexError: an index out of range, naming
            ``src_index`` or ``cand_index`` and the position, for the first row that holds
            one (``src_index[n]`` is reported before ``cand_index[n, :]``).
    """
    op = "score_candidates"
    _checks.check_features(x_src, x_dst, op)
    _checks.check_candidate_index(op, src_index, "src_index", "[N]", x_src)
    _checks.check_candidate_index(op, cand_index, "cand_index", "[N, K]", x_src,
                                  src_index.size(0), like=src_index)
    _checks.check_bool(op, "validate", validate)
    _checks.check_no_forward_ad(op, [("x_src", x_src), ("x_dst", x_dst)])
    out, first_bad = _dispatch.call(torch.ops.pyg_edgedot.score_candidates, (x_src, x_dst),
                                    x_src, x_dst, src_index, cand_index)
    num_src, num_dst = x_src.size(0), x_dst.size(0)
    _checks.raise_if_out_of_range(
        op, validate, first_bad, [(src_index, (num_src,)), (cand_index, (num_dst,))],
        lambda: [_checks.Bound("src_index", src_index, "x_src", num_src),
                 _checks.Bound("cand_index", cand_index, "x_dst", num_dst)], "position")
    return out


def rank_candidates(x_src: Tensor, x_dst: Tensor, src_index: Tensor, pos_index: Tensor,
                    neg_index: Tensor, *, validate: bool = True) -> Tensor:
    r"""The rank of each positive pair's score among the scores of its ``K`` negatives.

    With :math:`p_n = \langle x^{src}_{s_n}, x^{dst}_{\mathrm{pos}_n} \rangle` and
    :math:`q_{n,k} = \langle x^{src}_{s_n}, x^{dst}_{\mathrm{neg}_{n,k}} \rangle`, both
    rounded to the dtype of the inputs,

    .. math::
        \mathrm{rank}_n = 1 + \tfrac{1}{2}\Big(\#\{k : q_{n,k} > p_n\}
                                + \#\{k : q_{n,k} \ge p_n\}\Big)

    the mean of the optimistic and the pessimistic rank, OGB's tie rule
    (``ogb.linkproppred.Evaluator._eval_mrr``). The result equals that evaluator applied to
    ``y_pred_pos = score_candidates(x_src, x_dst, src_index, pos_index[:, None])[:, 0]`` and
    ``y_pred_neg = score_candidates(x_src, x_dst, src_index, neg_index)`` (bitwise on the
    C++ and CUDA kernels, which score both ops the same way), but the ``[N, K]`` scores are
    never materialized: memory is O(N). A negative equal to the positive candidate always
    ties with it. NaN scores compare false, as in OGB.

    Forward only: the inputs are detached and the result has no gradient.

    Args:
        x_src (Tensor): source features ``[N_src, D]``; float32, float64, float16 or
            bfloat16.
        x_dst (Tensor): candidate features ``[N_dst, D]``, same dtype, device and ``D``.
            May be the same tensor as ``x_src``.
        src_index (Tensor): ``[N]`` int64 or int32, rows of ``x_src``.
        pos_index (Tensor): ``[N]``, the dtype of ``src_index``, the positive candidate of
            each source (a row of ``x_dst``).
        neg_index (Tensor): ``[N, K]``, the dtype of ``src_index``, the negatives of each
            source (rows of ``x_dst``); any strides.
        validate (bool): as in :func:`score_candidates`; unchecked, a row with an index out
            of range ranks NaN.

    Returns:
        Tensor: ``[N]`` float32 ranks in ``[1, K + 1]``, multiples of 0.5 (``K = 0`` gives
        rank 1).

    Raises:
        TypeError / ValueError: wrong types, shapes, dtypes, devices or feature dimensions.
        IndexError: an index out of range, naming ``src_index``, ``pos_index`` or
            ``neg_index`` and the position, for the first row that holds one.
    """
    op = "rank_candidates"
    _checks.check_features(x_src, x_dst, op)
    _checks.check_candidate_index(op, src_index, "src_index", "[N]", x_src)
    num_rows = src_index.size(0)
    _checks.check_candidate_index(op, pos_index, "pos_index", "[N]", x_src, num_rows,
                                  like=src_index)
    _checks.check_candidate_index(op, neg_index, "neg_index", "[N, K]", x_src, num_rows,
                                  like=src_index)
    _checks.check_bool(op, "validate", validate)
    rank, first_bad = torch.ops.pyg_edgedot.rank_candidates(
        x_src.detach(), x_dst.detach(), src_index, pos_index, neg_index)
    num_src, num_dst = x_src.size(0), x_dst.size(0)
    _checks.raise_if_out_of_range(
        op, validate, first_bad,
        [(src_index, (num_src,)), (pos_index, (num_dst,)), (neg_index, (num_dst,))],
        lambda: [_checks.Bound("src_index", src_index, "x_src", num_src),
                 _checks.Bound("pos_index", pos_index, "x_dst", num_dst),
                 _checks.Bound("neg_index", neg_index, "x_dst", num_dst)], "position")
    return rank


# ---------------------------------------------------------------------------------------
# The registered ops' Python side
# ---------------------------------------------------------------------------------------

def _check_candidate_op_args(op, x_src, x_dst, src_index, *cand) -> None:
    """``cand``: ``(name, index, shape)``, ``shape`` ``"[N]"`` or ``"[N, K]"``, the shape the
    op's schema gives that argument."""
    _checks.check_op_args(op, [("x_src", x_src), ("x_dst", x_dst)], [("src_index", src_index)])
    for name, index, shape in cand:
        _checks.check_candidate_index(op, index, name, shape, x_src, src_index.size(0),
                                      like=src_index)


def _rows_per_chunk(num_cand: int, feat_dim: int) -> int:
    return _chunked.chunk_size(num_cand * feat_dim)


def _fallback_score(x_src: Tensor, x_dst: Tensor, src_index: Tensor,
                    cand_index: Tensor) -> Tuple[Tensor, Tensor]:
    """out[n, k] = sum_d x_src[src_index[n], d] * x_dst[cand_index[n, k], d], in chunks of
    rows, memory O(N * K + chunk * K * D). Returns ``(out, first_bad)``."""
    _check_candidate_op_args("score_candidates", x_src, x_dst, src_index,
                             ("cand_index", cand_index, "[N, K]"))
    num_rows, num_cand = cand_index.shape
    out = torch.empty(num_rows, num_cand, dtype=x_src.dtype, device=x_src.device)
    first_bad = _chunked.new_first_bad(x_src)
    step = _rows_per_chunk(num_cand, x_src.size(1))
    for start in range(0, num_rows, step):
        score, row_bad = _chunked.candidate_scores(x_src, x_dst, src_index[start:start + step],
                                                   cand_index[start:start + step])
        out[start:start + step] = score.to(out.dtype)
        _chunked.record_first_bad(first_bad, start, row_bad)
    return out, first_bad


def _fallback_rank(x_src: Tensor, x_dst: Tensor, src_index: Tensor, pos_index: Tensor,
                   neg_index: Tensor) -> Tuple[Tensor, Tensor]:
    """rank[n] = 1 + 0.5 * (#{k: neg > pos} + #{k: neg >= pos}) with scores rounded to the
    input dtype; NaN for a row with an index out of range; memory O(N + chunk * K * D).
    Returns ``(rank, first_bad)``."""
    _check_candidate_op_args("rank_candidates", x_src, x_dst, src_index,
                             ("pos_index", pos_index, "[N]"),
                             ("neg_index", neg_index, "[N, K]"))
    num_rows, num_cand = neg_index.shape
    rank = torch.empty(num_rows, dtype=torch.float32, device=x_src.device)
    first_bad = _chunked.new_first_bad(x_src)
    step = _rows_per_chunk(num_cand + 1, x_src.size(1))
    for start in range(0, num_rows, step):
        # The positive is scored as column 0, in the same call as its negatives, so that a
        # negative equal to the positive ties exactly.
        cand = torch.cat([pos_index[start:start + step].unsqueeze(1),
                          neg_index[start:start + step]], dim=1)
        score, row_bad = _chunked.candidate_scores(x_src, x_dst,
                                                   src_index[start:start + step], cand)
        score = score.to(x_src.dtype)
        pos, neg = score[:, :1], score[:, 1:]
        # OGB's Evaluator._eval_mrr, on scores in the input dtype.
        optimistic = (neg > pos).sum(dim=1)
        pessimistic = (neg >= pos).sum(dim=1)
        chunk_rank = 0.5 * (optimistic + pessimistic).to(torch.float32) + 1
        rank[start:start + step] = chunk_rank.masked_fill(row_bad, float("nan"))
        _chunked.record_first_bad(first_bad, start, row_bad)
    return rank, first_bad


def fallback_impls() -> dict:
    return {"score_candidates": _fallback_score, "rank_candidates": _fallback_rank}


def register_fake_and_autograd() -> None:
    @torch.library.register_fake("pyg_edgedot::score_candidates")
    def _score_candidates_fake(x_src, x_dst, src_index, cand_index):
        _checks.check_fake_devices("score_candidates", [
            ("x_src", x_src), ("x_dst", x_dst), ("src_index", src_index),
            ("cand_index", cand_index)])
        torch._check(x_src.dim() == 2 and x_dst.dim() == 2)
        torch._check(src_index.dim() == 1 and cand_index.dim() == 2)
        torch._check(cand_index.shape[0] == src_index.shape[0])
        return (x_src.new_empty(cand_index.shape),
                src_index.new_empty(1, dtype=torch.int64))

    @torch.library.register_fake("pyg_edgedot::rank_candidates")
    def _rank_candidates_fake(x_src, x_dst, src_index, pos_index, neg_index):
        _checks.check_fake_devices("rank_candidates", [
            ("x_src", x_src), ("x_dst", x_dst), ("src_index", src_index),
            ("pos_index", pos_index), ("neg_index", neg_index)])
        torch._check(x_src.dim() == 2 and x_dst.dim() == 2)
        torch._check(src_index.dim() == 1 and pos_index.shape == src_index.shape)
        torch._check(neg_index.dim() == 2 and neg_index.shape[0] == src_index.shape[0])
        return (x_src.new_empty(src_index.shape, dtype=torch.float32),
                src_index.new_empty(1, dtype=torch.int64))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.set_materialize_grads(False)  # no zero tensor (a fill kernel) for first_bad

    def backward(ctx, grad_out, _grad_first_bad):
        if grad_out is None:
            return None, None, None, None
        # The flattened pairs (src_index[n], cand_index[n, k]) are edges of edge_dot, whose
        # gradient op scatters them; pairs with an index out of range contribute nothing.
        x_src, x_dst, src_index, cand_index = ctx.saved_tensors
        src_pairs = src_index.unsqueeze(1).expand(cand_index.shape).reshape(-1)
        cand_pairs = cand_index.reshape(-1)
        grad_pairs = grad_out.contiguous().reshape(-1)
        return (*pair_grads(ctx.needs_input_grad, grad_pairs, x_src, x_dst, src_pairs,
                            cand_pairs), None, None)

    torch.library.register_autograd("pyg_edgedot::score_candidates", backward,
                                    setup_context=setup_context)
