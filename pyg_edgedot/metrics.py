"""Metrics of ``ogb.linkproppred.Evaluator``: from ranks (e.g. from
:func:`pyg_edgedot.rank_candidates`) for its MRR datasets, and from scores against one shared
set of negatives for its Hits@K datasets."""
from typing import Tuple

import torch
from torch import Tensor

from . import _checks


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
    _checks.check_real("mrr", "rank", rank)
    return (1.0 / rank.to(torch.float)).mean()


def hits_at_k(rank: Tensor, k: int) -> Tensor:
    r"""Hits@K, the fraction of ranks at most ``k``:
    :math:`\frac{1}{N} \sum_n [\mathrm{rank}_n \le k]`.

    The formula of ``ogb.linkproppred.Evaluator`` for MRR datasets (``hits@K_list =
    (ranking_list <= K).to(torch.float)``, then the mean). A tie-averaged rank such as 3.5
    is not a hit at ``k = 3``. (OGB's Hits@K *datasets*, ``ogbl-collab``, ``ogbl-ddi`` and
    ``ogbl-ppa``, rank every positive against one shared set of negatives instead:
    :func:`hits_at_k_shared`.)

    Args:
        rank (Tensor): ranks of any shape, e.g. from :func:`rank_candidates`.
        k (int): the cut-off, ``>= 1``.

    Returns:
        Tensor: a float32 scalar (NaN for no ranks; a NaN rank counts as a miss).

    Raises:
        TypeError: ``rank`` is not a real-valued Tensor, or ``k`` is not an int.
        ValueError: ``k < 1``.
    """
    _checks.check_real("hits_at_k", "rank", rank)
    k = _checks.check_k("hits_at_k", k)
    if rank.is_floating_point():
        # k would be compared in rank's dtype, where it may round up (259 is 260 in
        # bfloat16, so a rank of 260 would count as a hit at k = 259): float16 and bfloat16
        # ranks are compared in float32, which holds them exactly, and k is replaced by the
        # largest float32 (float64) value at most k, which the comparison holds exactly.
        if rank.dtype in (torch.float16, torch.bfloat16):
            rank = rank.float()
        if not isinstance(k, torch.SymInt):
            k = _largest_float_at_most(k, rank.dtype)
    else:
        wraps = rank.dtype == torch.uint64  # a rank past 2**63 turns negative in int64
        rank = rank.long()  # k is compared in rank's dtype: 300 is 44 in uint8
        # Capped: past int64 a Python int does not convert, and no rank comes near 2**62.
        k = min(k, 2 ** 62)
        if wraps:
            return ((rank <= k) & (rank >= 0)).to(torch.float).mean()
    return (rank <= k).to(torch.float).mean()


def hits_at_k_shared(pos_score: Tensor, neg_score: Tensor, k: int) -> Tensor:
    r"""Hits@K against one shared set of negatives, the metric of OGB's Hits@K datasets
    (``ogbl-collab``: K = 50, ``ogbl-ddi``: K = 20, ``ogbl-ppa``: K = 100).

    A positive is a hit when its score is *strictly* above the K-th highest negative score:

    .. math::
        \frac{1}{P} \sum_p \big[\mathrm{pos}_p > \mathrm{neg}_{(K)}\big]

    with :math:`\mathrm{neg}_{(K)}` the K-th largest of all negative scores. This is
    ``ogb.linkproppred.Evaluator._eval_hits``: a positive tied with that negative is a miss,
    and with fewer than ``k`` negatives the result is 1. NaN scores follow ``torch.topk`` and
    ``>``: a NaN negative counts as the highest, a NaN positive is a miss. Scores of two
    dtypes are compared in the dtype they promote to (``torch.promote_types``).

    Args:
        pos_score (Tensor): scores of the positive edges, any shape (flattened), e.g.
            :func:`pyg_edgedot.edge_dot` of the positive ``edge_index``.
        neg_score (Tensor): scores of the shared negative edges, any shape (flattened).
        k (int): the cut-off, ``>= 1``.

    Returns:
        Tensor: a float32 scalar on ``pos_score``'s device (NaN for no positives, where OGB
        divides by zero).

    Raises:
        TypeError: a score is not a real-valued Tensor, ``k`` is not an int, or one score
            is uint64 and the other not (no dtype holds both).
        ValueError: ``k < 1``.
    """
    op = "hits_at_k_shared"
    _checks.check_real(op, "pos_score", pos_score)
    _checks.check_real(op, "neg_score", neg_score)
    k = _checks.check_k(op, k)
    pos, neg = pos_score.detach().reshape(-1), neg_score.detach().reshape(-1)
    pos, neg = _orderable_scores(op, pos, neg)
    if neg.numel() < k:
        return torch.ones((), dtype=torch.float, device=pos.device)
    # Compared in the dtype both promote to: a 0-dim tensor against pos would be cast to
    # pos's dtype (-1 is 255 in uint8, 0.999 is 1.0 in bfloat16), as in hits_at_k.
    common = torch.promote_types(pos.dtype, neg.dtype)
    kth_negative = torch.topk(neg, k).values[-1].to(device=pos.device, dtype=common)
    return (pos.to(common) > kth_negative).to(torch.float).mean()


def _orderable_scores(op: str, pos: Tensor, neg: Tensor) -> Tuple[Tensor, Tensor]:
    """``pos`` and ``neg`` in dtypes that ``topk``, ``>`` and ``torch.promote_types`` take.
    PyTorch implements none of them for uint16, uint32 and uint64: uint16 and uint32 hold in
    int64 exactly; two uint64 tensors map to int64 in the same order (the sign bit flipped);
    uint64 with another dtype has no common dtype that holds both, and is refused."""
    wide = (torch.uint16, torch.uint32)
    pos, neg = (t.long() if t.dtype in wide else t for t in (pos, neg))
    if torch.uint64 not in (pos.dtype, neg.dtype):
        return pos, neg
    if pos.dtype != neg.dtype:
        raise TypeError(f"{op}: pos_score and neg_score have no common dtype (got {pos.dtype} "
                        f"and {neg.dtype}); convert one to the other's dtype")
    flip = torch.iinfo(torch.int64).min
    return pos.view(torch.int64) ^ flip, neg.view(torch.int64) ^ flip


def _largest_float_at_most(k: int, dtype: torch.dtype) -> float:
    """The largest float32 (or, for ``dtype`` float64, float64) value at most the int
    ``k >= 1``: ``k`` with its bits past the significand's cleared. Integer arithmetic only,
    so that ``torch.compile`` traces it as a constant."""
    digits, max_exp = (53, 1024) if dtype == torch.float64 else (24, 128)
    if k.bit_length() > max_exp:  # past the largest finite value
        return float(((1 << digits) - 1) << (max_exp - digits))
    shift = max(k.bit_length() - digits, 0)
    return float((k >> shift) << shift)
