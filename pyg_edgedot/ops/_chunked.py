"""The loops every pure-PyTorch fallback is made of, chunked so memory stays bounded.

Each computes what the fused kernels compute, ``chunk`` edges (or candidate rows) at a time,
so memory is O(E + chunk * D) instead of O(E * D), with the kernels' semantics for indices
out of range: the pair scores NaN, contributes no gradient, and the first bad position is
reported in ``first_bad``; nothing outside the inputs is read.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

# Elements materialized per chunk (edges per chunk = this / D). Read at call time, so that
# tests can shrink the chunks.
DEFAULT_CHUNK_ELEMS = 1 << 24


def chunk_size(row_elems: int) -> int:
    return max(1, DEFAULT_CHUNK_ELEMS // max(1, row_elems))


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def in_range(index: Tensor, num_rows: int) -> Tensor:
    return (index >= 0) & (index < num_rows)


def valid_and_clamped(index: Tensor, num_rows: int) -> Tuple[Tensor, Tensor]:
    return in_range(index, num_rows), index.clamp(0, max(num_rows - 1, 0)).long()


def new_first_bad(like: Tensor) -> Tensor:
    return torch.full((1,), -1, dtype=torch.int64, device=like.device)


def first_true(mask: Tensor) -> Tensor:
    """``[1]`` int64 on ``mask``'s device: the position of its first True, or -1; no host
    read (``argmax`` returns the first of equal maxima)."""
    if mask.numel() == 0:
        return torch.full((1,), -1, dtype=torch.int64, device=mask.device)
    return torch.where(mask.any(), mask.to(torch.int8).argmax(), -1).view(1)


def exclusive_cumsum(x: Tensor) -> Tensor:
    """``[0, x0, x0 + x1, ...]`` without the total: where each segment of sizes ``x`` starts."""
    return torch.cumsum(x, 0) - x


def record_first_bad(first_bad: Tensor, start: int, bad: Tensor) -> None:
    if bool(first_bad < 0) and bool(bad.any()):
        first_bad.fill_(start + int(bad.nonzero()[0, 0]))


def scores(x_src: Tensor, x_dst: Tensor, src_index: Tensor, dst_index: Tensor,
           rel: Optional[Tensor] = None, rel_index: Optional[Tensor] = None,
           report_bad: bool = True) -> Tuple[Tensor, Tensor]:
    """out[e] = sum_k x_src[s_e, k] (* rel[t_e, k]) * x_dst[d_e, k]; the relation factor only
    when ``rel`` is given. Returns ``(out, first_bad)``; ``first_bad`` empty without
    ``report_bad`` (the ops' contract: no work, here no host reads, for a report nobody reads)."""
    num_edges = src_index.numel()
    num_src, num_dst = x_src.size(0), x_dst.size(0)
    num_rel = 1 if rel is None else rel.size(0)
    out = torch.empty(num_edges, dtype=x_src.dtype, device=x_src.device)
    first_bad = new_first_bad(x_src) if report_bad else src_index.new_empty(0, dtype=torch.int64)
    acc = acc_dtype(x_src.dtype)
    step = chunk_size(x_src.size(1))
    for start in range(0, num_edges, step):
        src_ok, src = valid_and_clamped(src_index[start:start + step], num_src)
        dst_ok, dst = valid_and_clamped(dst_index[start:start + step], num_dst)
        ok = src_ok & dst_ok
        if rel is not None:
            rel_ok, typ = valid_and_clamped(rel_index[start:start + step], num_rel)
            ok = ok & rel_ok
        if num_src == 0 or num_dst == 0 or num_rel == 0:
            score = torch.full(ok.shape, float("nan"), dtype=acc, device=out.device)
        else:
            rows = x_src[src].to(acc)
            if rel is not None:
                rows = rows * rel[typ].to(acc)
            score = (rows * x_dst[dst].to(acc)).sum(-1)
            score = score.masked_fill(~ok, float("nan"))
        out[start:start + step] = score.to(out.dtype)
        if report_bad:
            record_first_bad(first_bad, start, ~ok)
    return out, first_bad


def scatter(grad_out: Tensor, x_gather: Tensor, scatter_index: Tensor, gather_index: Tensor,
            num_rows: int, x_other: Optional[Tensor] = None,
            other_index: Optional[Tensor] = None) -> Tensor:
    """out[scatter[e], :] += grad_out[e] * x_gather[gather[e], :] (* x_other[other[e], :]);
    the last factor only when ``x_other`` is given. Accumulates in float32 (float64 for
    float64), returns the dtype of ``x_gather``; ``index_add_`` is deterministic under
    ``torch.use_deterministic_algorithms(True)``."""
    feat_dim = x_gather.size(1)
    acc = acc_dtype(x_gather.dtype)
    out = torch.zeros(num_rows, feat_dim, dtype=acc, device=x_gather.device)
    num_edges = scatter_index.numel()
    if (num_edges == 0 or num_rows == 0 or x_gather.size(0) == 0
            or (x_other is not None and x_other.size(0) == 0)):
        return out.to(x_gather.dtype)
    step = chunk_size(feat_dim)
    for start in range(0, num_edges, step):
        sc_ok, sc = valid_and_clamped(scatter_index[start:start + step], num_rows)
        ga_ok, ga = valid_and_clamped(gather_index[start:start + step], x_gather.size(0))
        ok = sc_ok & ga_ok
        contrib = x_gather[ga].to(acc) * grad_out[start:start + step].to(acc).unsqueeze(-1)
        if x_other is not None:
            ot_ok, ot = valid_and_clamped(other_index[start:start + step], x_other.size(0))
            ok = ok & ot_ok
            contrib = contrib * x_other[ot].to(acc)
        contrib = contrib.masked_fill(~ok.unsqueeze(-1), 0)
        out.index_add_(0, sc, contrib)
    return out.to(x_gather.dtype)


def candidate_scores(x_src: Tensor, x_dst: Tensor, src_index: Tensor,
                     cand_index: Tensor) -> Tuple[Tensor, Tensor]:
    """Scores of one chunk of candidate rows, ``[c, K]`` in opmath, NaN where an index is
    out of range; and the ``[c]`` mask of rows holding an index out of range."""
    src_ok, src = valid_and_clamped(src_index, x_src.size(0))
    cand_ok, cand = valid_and_clamped(cand_index, x_dst.size(0))
    ok = src_ok.unsqueeze(1) & cand_ok
    acc = acc_dtype(x_src.dtype)
    if x_src.size(0) == 0 or x_dst.size(0) == 0:
        score = torch.full(ok.shape, float("nan"), dtype=acc, device=x_src.device)
    else:
        # The source row is gathered once per row and broadcast over its K candidates.
        score = (x_src[src].to(acc).unsqueeze(1) * x_dst[cand].to(acc)).sum(-1)
        score = score.masked_fill(~ok, float("nan"))
    return score, ~src_ok | ~cand_ok.all(dim=1)


def zero_out_of_range(score: Tensor, *bounds: Tuple[Tensor, int]) -> Tensor:
    """``score`` where every ``(index, num_rows)`` of ``bounds`` is in range, else 0.

    The derivative of a gradient op with respect to its ``grad_out`` is a forward op's score,
    and the forward op scores a pair out of range NaN; but that pair contributed nothing to
    the gradient op, so its derivative is 0. Testing the indices (rather than ``isnan``)
    keeps a NaN that comes from the data."""
    ok = in_range(*bounds[0])
    for index, num_rows in bounds[1:]:
        ok = ok & in_range(index, num_rows)
    return torch.where(ok, score, score.new_zeros(()))
