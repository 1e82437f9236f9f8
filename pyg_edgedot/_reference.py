"""Pure-PyTorch implementations of the two ops, chunked over edges.

Used only when the C++/CUDA extension cannot be built. Each function computes what the
fused kernel computes, in chunks of ``chunk_size`` edges, so memory stays
O(E + chunk_size * D) instead of O(E * D). The semantics match the kernels exactly,
including out-of-range indices: the edge scores NaN, contributes no gradient, and its
position is reported in ``first_bad`` (the wrapper in ``functional.py`` raises from it);
no memory outside the inputs is ever read.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

# Edges per chunk: chunk_size * D elements are materialized at a time.
DEFAULT_CHUNK_ELEMS = 1 << 24


def _chunk_size(feat_dim: int) -> int:
    return max(1, DEFAULT_CHUNK_ELEMS // max(1, feat_dim))


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def out_of_range_message(
    op: str, edge: int, src_index: Tensor, dst_index: Tensor, num_src: int, num_dst: int,
    rel_index: Optional[Tensor] = None, num_rel: int = 0,
) -> str:
    """The message for the first bad edge, naming the argument that holds the bad index."""
    s, d = int(src_index[edge]), int(dst_index[edge])
    if s < 0 or s >= num_src:
        return (f"{op}: edge_index[0] holds an index out of range at edge {edge}: "
                f"{s} (x_src has {num_src} rows; valid range is [0, {num_src}))")
    if rel_index is not None and not (d < 0 or d >= num_dst):
        t = int(rel_index[edge])
        return (f"{op}: edge_type holds an index out of range at edge {edge}: "
                f"{t} (rel has {num_rel} rows; valid range is [0, {num_rel}))")
    return (f"{op}: edge_index[1] holds an index out of range at edge {edge}: "
            f"{d} (x_dst has {num_dst} rows; valid range is [0, {num_dst}))")


def _valid_and_clamped(index: Tensor, num_rows: int) -> Tuple[Tensor, Tensor]:
    valid = (index >= 0) & (index < num_rows)
    return valid, index.clamp(0, max(num_rows - 1, 0)).long()


def _scores(x_src: Tensor, x_dst: Tensor, src_index: Tensor, dst_index: Tensor,
            rel: Optional[Tensor] = None,
            rel_index: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    """out[e] = sum_k x_src[s_e, k] (* rel[t_e, k]) * x_dst[d_e, k], in chunks; the relation
    factor only when ``rel`` is given. Returns ``(out, first_bad)``."""
    num_edges = src_index.numel()
    num_src, num_dst = x_src.size(0), x_dst.size(0)
    num_rel = 1 if rel is None else rel.size(0)
    out = torch.empty(num_edges, dtype=x_src.dtype, device=x_src.device)
    first_bad = torch.full((1,), -1, dtype=torch.int64, device=x_src.device)
    acc = _acc_dtype(x_src.dtype)
    step = _chunk_size(x_src.size(1))
    for start in range(0, num_edges, step):
        src_ok, src = _valid_and_clamped(src_index[start:start + step], num_src)
        dst_ok, dst = _valid_and_clamped(dst_index[start:start + step], num_dst)
        ok = src_ok & dst_ok
        if rel is not None:
            rel_ok, typ = _valid_and_clamped(rel_index[start:start + step], num_rel)
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
        if bool(first_bad < 0) and not bool(ok.all()):
            first_bad.fill_(start + int((~ok).nonzero()[0, 0]))
    return out, first_bad


def edge_dot(x_src: Tensor, x_dst: Tensor, src_index: Tensor,
             dst_index: Tensor) -> Tuple[Tensor, Tensor]:
    """out[e] = sum_k x_src[src_index[e], k] * x_dst[dst_index[e], k], in chunks.

    Returns ``(out, first_bad)``, ``first_bad`` the first edge with an index out of range
    (as a one-element int64 tensor), or -1.
    """
    return _scores(x_src, x_dst, src_index, dst_index)


def _scatter(grad_out: Tensor, x_gather: Tensor, scatter_index: Tensor,
             gather_index: Tensor, num_rows: int, x_other: Optional[Tensor] = None,
             other_index: Optional[Tensor] = None) -> Tensor:
    """out[scatter[e], :] += grad_out[e] * x_gather[gather[e], :] (* x_other[other[e], :]),
    in chunks; the last factor only when ``x_other`` is given."""
    feat_dim = x_gather.size(1)
    acc = _acc_dtype(x_gather.dtype)
    out = torch.zeros(num_rows, feat_dim, dtype=acc, device=x_gather.device)
    num_edges = scatter_index.numel()
    if (num_edges == 0 or num_rows == 0 or x_gather.size(0) == 0
            or (x_other is not None and x_other.size(0) == 0)):
        return out.to(x_gather.dtype)
    step = _chunk_size(feat_dim)
    for start in range(0, num_edges, step):
        sc_ok, sc = _valid_and_clamped(scatter_index[start:start + step], num_rows)
        ga_ok, ga = _valid_and_clamped(gather_index[start:start + step], x_gather.size(0))
        ok = sc_ok & ga_ok
        contrib = x_gather[ga].to(acc) * grad_out[start:start + step].to(acc).unsqueeze(-1)
        if x_other is not None:
            ot_ok, ot = _valid_and_clamped(other_index[start:start + step], x_other.size(0))
            ok = ok & ot_ok
            contrib = contrib * x_other[ot].to(acc)
        contrib = contrib.masked_fill(~ok.unsqueeze(-1), 0)
        out.index_add_(0, sc, contrib)
    return out.to(x_gather.dtype)


def edge_dot_grad(grad_out: Tensor, x_gather: Tensor, scatter_index: Tensor,
                  gather_index: Tensor, num_rows: int, deterministic: bool = False) -> Tensor:
    """out[scatter_index[e], :] += grad_out[e] * x_gather[gather_index[e], :], in chunks.

    Edges with an index out of range contribute nothing. Accumulates in float32
    (float64 for float64) and returns the dtype of ``x_gather``. ``deterministic`` is
    honoured by PyTorch's own ``index_add_`` under ``torch.use_deterministic_algorithms``.
    """
    return _scatter(grad_out, x_gather, scatter_index, gather_index, num_rows)


def edge_dot_rel(x_src: Tensor, x_dst: Tensor, rel: Tensor, src_index: Tensor,
                 dst_index: Tensor, rel_index: Tensor) -> Tuple[Tensor, Tensor]:
    """out[e] = sum_k x_src[s_e, k] * rel[t_e, k] * x_dst[d_e, k], in chunks."""
    return _scores(x_src, x_dst, src_index, dst_index, rel, rel_index)


def edge_dot_rel_grad(grad_out: Tensor, x_a: Tensor, x_b: Tensor, scatter_index: Tensor,
                      a_index: Tensor, b_index: Tensor, num_rows: int,
                      deterministic: bool = False) -> Tensor:
    """out[scatter[e], :] += grad_out[e] * x_a[a_index[e], :] * x_b[b_index[e], :], chunked."""
    return _scatter(grad_out, x_b, scatter_index, b_index, num_rows, x_a, a_index)
