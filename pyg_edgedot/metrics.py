"""Metrics of ``ogb.linkproppred.Evaluator`` computed from ranks (e.g. from
:func:`pyg_edgedot.rank_candidates`)."""
import numbers

import torch
from torch import Tensor


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
