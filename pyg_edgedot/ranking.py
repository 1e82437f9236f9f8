r"""Candidate scoring and ranking for OGB-style link-prediction evaluation.

* :func:`score_candidates`: the dot-product scores of each source against its own ``K``
  candidates, ``[N, K]``, differentiable.
* :func:`rank_candidates`: the rank of each positive among its ``K`` negatives with OGB's tie
  rule, ``[N]``, without materializing the ``[N, K]`` scores.
* :func:`mrr` and :func:`hits_at_k`: the metrics of ``ogb.linkproppred.Evaluator`` (MRR
  datasets such as ``ogbl-citation2``) computed from those ranks.

Argument checks come first, in Python, with messages that start with the op name and name
the argument; the kernels report indices out of range through a ``first_bad`` tensor that
the wrappers read (see ``validate``).
"""
import numbers
from typing import Optional

import torch
from torch import Tensor

from .functional import INDEX_DTYPES, check_features, should_read_first_bad


def _check_index(op: str, index: Tensor, name: str, shape: str, x_src: Tensor,
                 num_rows: Optional[int] = None) -> None:
    """``shape`` is ``"[N]"`` or ``"[N, K]"``; ``num_rows`` the N it must match, if known."""
    dims = shape.count(",") + 1
    if not isinstance(index, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor of shape {shape} "
                        f"(got {type(index).__name__})")
    if index.dim() != dims:
        raise ValueError(f"{op}: {name} must be {dims}-D {shape} (got shape {tuple(index.shape)})")
    if index.dtype not in INDEX_DTYPES:
        raise TypeError(f"{op}: {name} must be int64 or int32 (got {index.dtype})")
    if index.device != x_src.device:
        raise ValueError(f"{op}: x_src and {name} must be on the same device "
                         f"(got {x_src.device} and {index.device})")
    if num_rows is not None and index.size(0) != num_rows:
        raise ValueError(f"{op}: {name} must have one row per entry of src_index "
                         f"(got {index.size(0)} rows and {num_rows} sources)")


def _check_same_index_dtype(op: str, src_index: Tensor, index: Tensor, name: str) -> None:
    if index.dtype != src_index.dtype:
        raise TypeError(f"{op}: src_index and {name} must have the same dtype "
                        f"(got {src_index.dtype} and {index.dtype})")


def _out_of_range_message(op: str, row: int, x_src: Tensor, x_dst: Tensor,
                          checks) -> str:
    """The message for the first bad row: ``checks`` lists ``(name, index, side)`` in the
    order they are reported, ``index`` 1-D (entry ``row``) or 2-D (row ``row``)."""
    num_rows = {"x_src": x_src.size(0), "x_dst": x_dst.size(0)}
    for name, index, side in checks:
        limit = num_rows[side]
        if index.dim() == 1:
            value, where = int(index[row]), f"position {row}"
        else:
            values = index[row]
            bad = ((values < 0) | (values >= limit)).nonzero()
            if bad.numel() == 0:
                continue
            col = int(bad[0, 0])
            value, where = int(values[col]), f"position ({row}, {col})"
        if value < 0 or value >= limit:
            return (f"{op}: {name} holds an index out of range at {where}: {value} "
                    f"({side} has {limit} rows; valid range is [0, {limit}))")
    return f"{op}: row {row} holds an index out of range"  # not reached for valid first_bad


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
    computed. The backward runs ``edge_dot``'s gradient op on the ``N * K`` flattened pairs,
    passing ``torch.are_deterministic_algorithms_enabled()`` on: bitwise deterministic on
    the C++ and CUDA kernels always, and on the pure-PyTorch fallback under
    ``torch.use_deterministic_algorithms(True)``.

    Args:
        x_src (Tensor): source features ``[N_src, D]``; float32, float64, float16 or
            bfloat16. Any row stride; a column stride other than 1 costs one copy.
        x_dst (Tensor): candidate features ``[N_dst, D]``, same dtype, device and ``D``.
            May be the same tensor as ``x_src``.
        src_index (Tensor): ``[N]`` int64 or int32, rows of ``x_src``.
        cand_index (Tensor): ``[N, K]``, the dtype of ``src_index``, rows of ``x_dst``; any
            strides (e.g. a transposed view).
        validate (bool): raise ``IndexError`` for an index out of range. The kernels always
            check bounds as they read and record the first bad row; ``validate`` only
            decides whether the host reads that one number back (free on the CPU, one
            device-to-host synchronization on CUDA; skipped inside ``torch.compile`` and
            during CUDA graph capture). Unchecked, a pair with an index out of range scores
            NaN (every pair of a row whose ``src_index`` is out of range) and contributes no
            gradient. No memory outside the inputs is ever read.

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
    check_features(x_src, x_dst, op)
    _check_index(op, src_index, "src_index", "[N]", x_src)
    _check_index(op, cand_index, "cand_index", "[N, K]", x_src, src_index.size(0))
    _check_same_index_dtype(op, src_index, cand_index, "cand_index")
    out, first_bad = torch.ops.pyg_edgedot.score_candidates(x_src, x_dst, src_index, cand_index)
    if should_read_first_bad(validate, first_bad):
        row = int(first_bad.item())
        if row >= 0:
            raise IndexError(_out_of_range_message(
                op, row, x_src, x_dst,
                [("src_index", src_index, "x_src"), ("cand_index", cand_index, "x_dst")]))
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
    check_features(x_src, x_dst, op)
    _check_index(op, src_index, "src_index", "[N]", x_src)
    _check_index(op, pos_index, "pos_index", "[N]", x_src, src_index.size(0))
    _check_index(op, neg_index, "neg_index", "[N, K]", x_src, src_index.size(0))
    _check_same_index_dtype(op, src_index, pos_index, "pos_index")
    _check_same_index_dtype(op, src_index, neg_index, "neg_index")
    rank, first_bad = torch.ops.pyg_edgedot.rank_candidates(
        x_src.detach(), x_dst.detach(), src_index, pos_index, neg_index)
    if should_read_first_bad(validate, first_bad):
        row = int(first_bad.item())
        if row >= 0:
            raise IndexError(_out_of_range_message(
                op, row, x_src, x_dst,
                [("src_index", src_index, "x_src"), ("pos_index", pos_index, "x_dst"),
                 ("neg_index", neg_index, "x_dst")]))
    return rank


def _check_rank(op: str, rank: Tensor) -> None:
    if not isinstance(rank, Tensor):
        raise TypeError(f"{op}: rank must be a Tensor (got {type(rank).__name__})")
    if rank.dtype == torch.bool or rank.is_complex():
        raise TypeError(f"{op}: rank must hold real numbers (got {rank.dtype})")


def mrr(rank: Tensor) -> Tensor:
    r"""Mean reciprocal rank, :math:`\frac{1}{N} \sum_n 1 / \mathrm{rank}_n`.

    The formula of ``ogb.linkproppred.Evaluator`` (``mrr_list = 1. / ranking_list.to(
    torch.float)``, then the mean over all evaluated edges), so
    ``mrr(rank_candidates(...))`` is OGB's MRR for those scores.

    Args:
        rank (Tensor): ranks of any shape, e.g. from :func:`rank_candidates`.

    Returns:
        Tensor: a float32 scalar (NaN for no ranks, or when a rank is NaN).

    Raises:
        TypeError: ``rank`` is not a real-valued Tensor.
    """
    _check_rank("mrr", rank)
    return (1.0 / rank.to(torch.float)).mean()


def hits_at_k(rank: Tensor, k: int) -> Tensor:
    r"""Hits@K, the fraction of ranks at most ``k``:
    :math:`\frac{1}{N} \sum_n [\mathrm{rank}_n \le k]`.

    The formula of ``ogb.linkproppred.Evaluator`` for MRR datasets (``hits@K_list =
    (ranking_list <= K).to(torch.float)``, then the mean). A tie-averaged rank such as 3.5
    is not a hit at ``k = 3``. (OGB's Hits@K *datasets*, e.g. ``ogbl-collab``, rank every
    positive against one shared set of negatives instead; that is not this function.)

    Args:
        rank (Tensor): ranks of any shape, e.g. from :func:`rank_candidates`.
        k (int): the cut-off, ``>= 1``.

    Returns:
        Tensor: a float32 scalar (NaN for no ranks; a NaN rank counts as a miss).

    Raises:
        TypeError: ``rank`` is not a real-valued Tensor, or ``k`` is not an int.
        ValueError: ``k < 1``.
    """
    _check_rank("hits_at_k", rank)
    if isinstance(k, bool) or not isinstance(k, numbers.Integral):
        raise TypeError(f"hits_at_k: k must be an int (got {type(k).__name__})")
    k = int(k)
    if k < 1:
        raise ValueError(f"hits_at_k: k must be >= 1 (got {k})")
    return (rank <= k).to(torch.float).mean()
