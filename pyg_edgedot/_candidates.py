"""The candidate op group: ``score_candidates`` and ``rank_candidates`` (schemas in
csrc/candidates.cpp, kernels in csrc/cpu/candidates_cpu.cpp and csrc/cuda/candidates_cuda.cu).

``first_bad`` (both ops) is a one-element int64 tensor: the first source row ``n`` that holds
an index out of range (``src_index[n]``, ``pos_index[n]`` or any entry of row ``n`` of the
candidate matrix), or -1. The wrapper in ``ranking.py`` finds which entry and raises.

The fallbacks below are pure PyTorch, in chunks of source rows, so memory stays
O(N * K + chunk * K * D) for scores and O(N + chunk * K * D) for ranks.
"""
from typing import Tuple

import torch
from torch import Tensor

from . import _reference

SCHEMAS = {
    "score_candidates": "score_candidates(Tensor x_src, Tensor x_dst, Tensor src_index, "
                        "Tensor cand_index) -> (Tensor out, Tensor first_bad)",
    "rank_candidates": "rank_candidates(Tensor x_src, Tensor x_dst, Tensor src_index, "
                       "Tensor pos_index, Tensor neg_index) -> (Tensor rank, Tensor first_bad)",
}


def _rows_per_chunk(num_cand: int, feat_dim: int) -> int:
    # Read at call time, so that tests can shrink the chunks.
    return max(1, _reference.DEFAULT_CHUNK_ELEMS // max(1, num_cand * feat_dim))


def _chunk_scores(x_src: Tensor, x_dst: Tensor, src_index: Tensor,
                  cand_index: Tensor) -> Tuple[Tensor, Tensor]:
    """Scores of one chunk, ``[c, K]`` in opmath, NaN where an index is out of range; and
    the ``[c]`` mask of rows holding an index out of range."""
    src_ok, src = _reference._valid_and_clamped(src_index, x_src.size(0))
    cand_ok, cand = _reference._valid_and_clamped(cand_index, x_dst.size(0))
    ok = src_ok.unsqueeze(1) & cand_ok
    acc = _reference._acc_dtype(x_src.dtype)
    if x_src.size(0) == 0 or x_dst.size(0) == 0:
        score = torch.full(ok.shape, float("nan"), dtype=acc, device=x_src.device)
    else:
        # The source row is gathered once per row and broadcast over its K candidates.
        score = (x_src[src].to(acc).unsqueeze(1) * x_dst[cand].to(acc)).sum(-1)
        score = score.masked_fill(~ok, float("nan"))
    return score, ~src_ok | ~cand_ok.all(dim=1)


def _record_first_bad(first_bad: Tensor, start: int, row_bad: Tensor) -> None:
    if bool(first_bad < 0) and bool(row_bad.any()):
        first_bad.fill_(start + int(row_bad.nonzero()[0, 0]))


def score_candidates(x_src: Tensor, x_dst: Tensor, src_index: Tensor,
                     cand_index: Tensor) -> Tuple[Tensor, Tensor]:
    """out[n, k] = sum_d x_src[src_index[n], d] * x_dst[cand_index[n, k], d], in chunks of
    rows. Returns ``(out, first_bad)``."""
    num_rows, num_cand = cand_index.shape
    out = torch.empty(num_rows, num_cand, dtype=x_src.dtype, device=x_src.device)
    first_bad = torch.full((1,), -1, dtype=torch.int64, device=x_src.device)
    step = _rows_per_chunk(num_cand, x_src.size(1))
    for start in range(0, num_rows, step):
        score, row_bad = _chunk_scores(x_src, x_dst, src_index[start:start + step],
                                       cand_index[start:start + step])
        out[start:start + step] = score.to(out.dtype)
        _record_first_bad(first_bad, start, row_bad)
    return out, first_bad


def rank_candidates(x_src: Tensor, x_dst: Tensor, src_index: Tensor, pos_index: Tensor,
                    neg_index: Tensor) -> Tuple[Tensor, Tensor]:
    """rank[n] = 1 + 0.5 * (#{k: neg > pos} + #{k: neg >= pos}) with scores rounded to the
    input dtype; NaN for a row with an index out of range. Returns ``(rank, first_bad)``."""
    num_rows, num_cand = neg_index.shape
    rank = torch.empty(num_rows, dtype=torch.float32, device=x_src.device)
    first_bad = torch.full((1,), -1, dtype=torch.int64, device=x_src.device)
    step = _rows_per_chunk(num_cand + 1, x_src.size(1))
    for start in range(0, num_rows, step):
        # The positive is scored as column 0, in the same call as its negatives, so that a
        # negative equal to the positive ties exactly.
        cand = torch.cat([pos_index[start:start + step].unsqueeze(1),
                          neg_index[start:start + step]], dim=1)
        score, row_bad = _chunk_scores(x_src, x_dst, src_index[start:start + step], cand)
        score = score.to(x_src.dtype)
        pos, neg = score[:, :1], score[:, 1:]
        # OGB's Evaluator._eval_mrr, on scores in the input dtype.
        optimistic = (neg > pos).sum(dim=1)
        pessimistic = (neg >= pos).sum(dim=1)
        chunk_rank = 0.5 * (optimistic + pessimistic).to(torch.float32) + 1
        rank[start:start + step] = chunk_rank.masked_fill(row_bad, float("nan"))
        _record_first_bad(first_bad, start, row_bad)
    return rank, first_bad


FALLBACK = {
    "score_candidates": score_candidates,
    "rank_candidates": rank_candidates,
}


def register_python_side() -> None:
    @torch.library.register_fake("pyg_edgedot::score_candidates")
    def _score_candidates_fake(x_src, x_dst, src_index, cand_index):
        torch._check(x_src.dim() == 2 and x_dst.dim() == 2)
        torch._check(src_index.dim() == 1 and cand_index.dim() == 2)
        torch._check(cand_index.shape[0] == src_index.shape[0])
        return (x_src.new_empty(cand_index.shape),
                src_index.new_empty(1, dtype=torch.int64))

    @torch.library.register_fake("pyg_edgedot::rank_candidates")
    def _rank_candidates_fake(x_src, x_dst, src_index, pos_index, neg_index):
        torch._check(x_src.dim() == 2 and x_dst.dim() == 2)
        torch._check(src_index.dim() == 1 and pos_index.shape == src_index.shape)
        torch._check(neg_index.dim() == 2 and neg_index.shape[0] == src_index.shape[0])
        return (x_src.new_empty(src_index.shape, dtype=torch.float32),
                src_index.new_empty(1, dtype=torch.int64))

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, grad_out, _grad_first_bad):
        # The flattened pairs (src_index[n], cand_index[n, k]) are edges of edge_dot, whose
        # gradient op scatters them; pairs with an index out of range contribute nothing.
        x_src, x_dst, src_index, cand_index = ctx.saved_tensors
        src_pairs = src_index.unsqueeze(1).expand(cand_index.shape).reshape(-1)
        cand_pairs = cand_index.reshape(-1)
        grad_pairs = grad_out.contiguous().reshape(-1)
        grad_src = grad_dst = None
        if ctx.needs_input_grad[0]:
            grad_src = torch.ops.pyg_edgedot.edge_dot_grad(
                grad_pairs, x_dst, src_pairs, cand_pairs, x_src.shape[0])
        if ctx.needs_input_grad[1]:
            grad_dst = torch.ops.pyg_edgedot.edge_dot_grad(
                grad_pairs, x_src, cand_pairs, src_pairs, x_dst.shape[0])
        return grad_src, grad_dst, None, None

    torch.library.register_autograd("pyg_edgedot::score_candidates", backward,
                                    setup_context=setup_context)
