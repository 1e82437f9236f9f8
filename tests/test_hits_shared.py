"""``hits_at_k_shared``: Hits@K against one shared set of negatives (ogbl-collab, ogbl-ddi,
ogbl-ppa), against ``ogb.linkproppred.Evaluator._eval_hits``'s formula (written out below from
ogb's source) and, when ``ogb`` is installed, against the real Evaluator."""
import numpy as np
import pytest
import torch

import pyg_edgedot
from pyg_edgedot import edge_dot, hits_at_k_shared
from _helpers import DEVICES, randn, random_edge_index


def ogb_eval_hits(y_pred_pos, y_pred_neg, k):
    """``Evaluator._eval_hits`` of ogb 1.3.6, both of its branches (torch and numpy)."""
    if len(y_pred_neg) < k:
        return 1.0, 1.0
    kth = torch.topk(y_pred_neg, k)[0][-1]
    torch_hits = float(torch.sum(y_pred_pos > kth).cpu()) / len(y_pred_pos)
    pos, neg = y_pred_pos.cpu().numpy(), y_pred_neg.cpu().numpy()
    numpy_hits = float(np.sum(pos > np.sort(neg)[-k])) / len(pos)
    return torch_hits, numpy_hits


def test_strictly_above_the_kth_negative():
    neg = torch.tensor([5.0, 4.0, 1.0, 4.0, 3.0])
    # K = 2: the 2nd highest negative is 4.0 (tied with the 3rd). 4.0 is a miss, 4.5 a hit.
    pos = torch.tensor([4.0, 4.5, 5.0, 3.0])
    assert hits_at_k_shared(pos, neg, 2).item() == 0.5
    assert hits_at_k_shared(pos, neg, 3).item() == 0.5   # 3rd highest: 4.0 again
    assert hits_at_k_shared(pos, neg, 4).item() == 0.75  # 4th: 3.0; 3.0 itself is a miss
    assert hits_at_k_shared(pos, neg, 1).item() == 0.0   # nothing above 5.0
    assert hits_at_k_shared(pos, neg, 5).item() == 1.0   # 1.0
    for k in (1, 2, 3, 4, 5):
        expected, _ = ogb_eval_hits(pos, neg, k)
        assert hits_at_k_shared(pos, neg, k).item() == pytest.approx(expected)


def test_fewer_negatives_than_k_is_one_and_shapes():
    pos, neg = torch.tensor([0.1, 0.2]), torch.tensor([0.9, 0.8])
    out = hits_at_k_shared(pos, neg, 3)
    assert out.item() == 1.0 and out.dtype == torch.float32 and out.dim() == 0
    assert hits_at_k_shared(pos, neg[:0], 1).item() == 1.0
    assert torch.isnan(hits_at_k_shared(pos[:0], neg, 1))  # OGB divides by zero
    # Any shape, flattened; integer scores; a NaN positive is a miss, a NaN negative the top.
    assert hits_at_k_shared(torch.tensor([[3, 1], [2, 0]]), torch.tensor([1, 2]), 2).item() == 0.5
    nan = float("nan")
    assert hits_at_k_shared(torch.tensor([nan, 2.0]), torch.tensor([1.0]), 1).item() == 0.5
    assert hits_at_k_shared(torch.tensor([3.0]), torch.tensor([nan, 1.0]), 1).item() == 0.0


def test_scores_of_two_dtypes_compare_in_their_common_dtype():
    # The K-th negative is a 0-dim tensor: compared against pos as it is, it would be cast to
    # pos's dtype (-1 wraps to 255 in uint8, 300 to 44 in int8, 2**32 + 1 to 1 in int32, 0.999
    # rounds to 1.0 in bfloat16), so hits came out wrong; the numpy branch of OGB's formula
    # promotes, as here.
    cases = [
        (torch.tensor([200], dtype=torch.uint8), torch.tensor([-1, -2]), 1.0),
        (torch.tensor([100], dtype=torch.int8), torch.tensor([300, -2]), 0.0),
        (torch.tensor([5], dtype=torch.int32), torch.tensor([2 ** 32 + 1]), 0.0),
        (torch.tensor([1.0], dtype=torch.bfloat16), torch.tensor([0.999, 0.5]), 1.0),
        (torch.tensor([1.0], dtype=torch.float16), torch.tensor([0.9999], dtype=torch.float64),
         1.0),
        (torch.tensor([0.999]), torch.tensor([1.0], dtype=torch.bfloat16), 0.0),
    ]
    for pos, neg, expected in cases:
        assert hits_at_k_shared(pos, neg, 1).item() == expected, (pos, neg)
        numpy_hits = float(np.sum(pos.double().numpy() > np.sort(neg.double().numpy())[-1]))
        assert numpy_hits == expected


def test_unsigned_scores_past_uint8():
    # PyTorch has no topk, > or promotion for uint16, uint32 and uint64, so these raised its
    # NotImplementedError; they compare as their values, as numpy compares them.
    top = 2 ** 64 - 1
    cases = [
        (torch.tensor([70000, 5], dtype=torch.uint32),
         torch.tensor([3, 60000], dtype=torch.uint16), 1, 0.5),
        (torch.tensor([7, 2], dtype=torch.uint16), torch.tensor([-1, 5]), 2, 1.0),
        (torch.tensor([4000000000, 1], dtype=torch.uint32), torch.tensor([2.0 ** 31]), 1, 0.5),
        (torch.tensor([top, 2 ** 63 + 2, 5], dtype=torch.uint64),
         torch.tensor([2 ** 63 + 1, 4, top - 1], dtype=torch.uint64), 1, 1 / 3),
        (torch.tensor([top, 2 ** 63 + 2, 5], dtype=torch.uint64),
         torch.tensor([2 ** 63 + 1, 4, top - 1], dtype=torch.uint64), 2, 2 / 3),
        (torch.tensor([top, 2 ** 63 + 2, 5], dtype=torch.uint64),
         torch.tensor([2 ** 63 + 1, 4, top - 1], dtype=torch.uint64), 3, 1.0),
    ]
    for pos, neg, k, expected in cases:
        assert hits_at_k_shared(pos, neg, k).item() == pytest.approx(expected), (pos, neg, k)
        pos_np, neg_np = (t.numpy() if t.dtype == torch.uint64 else t.double().numpy()
                          for t in (pos, neg))
        assert float(np.mean(pos_np > np.sort(neg_np)[-k])) == pytest.approx(expected)
    with pytest.raises(TypeError, match="^hits_at_k_shared: pos_score and neg_score have no "
                                        "common dtype"):
        hits_at_k_shared(torch.tensor([1], dtype=torch.uint64), torch.tensor([1]), 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("k", [1, 20, 50, 100])
def test_matches_ogb_formula_with_ties(k, dtype, device, gen):
    # Scores on a coarse grid, so positives tie with negatives (and the K-th negative) often.
    pos = (randn(gen, 500) * 4).round().div(4).to(dtype).to(device)
    neg = (randn(gen, 3000) * 4).round().div(4).to(dtype).to(device)
    pos[::50] = torch.topk(neg, k).values[-1]  # ties at the K-th negative itself
    expected_torch, expected_numpy = ogb_eval_hits(pos, neg, k)
    assert expected_torch == expected_numpy
    out = hits_at_k_shared(pos, neg, k)
    assert out.device == pos.device
    assert out.item() == pytest.approx(expected_torch, rel=1e-6)


@pytest.mark.parametrize("device", DEVICES)
def test_scores_from_edge_dot(device, gen):
    z = randn(gen, 60, 8, device=device)
    pos_edge = random_edge_index(gen, 60, 60, 100, torch.int64, device)
    neg_edge = random_edge_index(gen, 60, 60, 400, torch.int64, device)
    pos, neg = edge_dot(z, z, pos_edge), edge_dot(z, z, neg_edge)
    assert hits_at_k_shared(pos, neg, 20).item() == pytest.approx(ogb_eval_hits(pos, neg, 20)[0])


@pytest.mark.parametrize("name, k", [("ogbl-collab", 50), ("ogbl-ddi", 20), ("ogbl-ppa", 100)])
def test_matches_ogb_evaluator(name, k, gen):
    linkproppred = pytest.importorskip("ogb.linkproppred")
    evaluator = linkproppred.Evaluator(name=name)
    assert evaluator.K == k
    pos = (randn(gen, 700) * 4).round()
    neg = (randn(gen, 2000) * 4).round()
    for y_pred_pos, y_pred_neg in ((pos, neg), (pos, neg[:k - 1])):
        expected = evaluator.eval({"y_pred_pos": y_pred_pos, "y_pred_neg": y_pred_neg})
        got = hits_at_k_shared(y_pred_pos, y_pred_neg, k).item()
        assert got == pytest.approx(expected[f"hits@{k}"], rel=1e-6)
        expected = evaluator.eval({"y_pred_pos": y_pred_pos.numpy(),
                                   "y_pred_neg": y_pred_neg.numpy()})
        assert got == pytest.approx(expected[f"hits@{k}"], rel=1e-6)


def test_bad_arguments():
    pos, neg = torch.rand(4), torch.rand(6)
    with pytest.raises(TypeError, match=r"^hits_at_k_shared: pos_score must be a Tensor"):
        hits_at_k_shared([0.5], neg, 1)
    with pytest.raises(TypeError, match=r"^hits_at_k_shared: neg_score must hold real numbers"):
        hits_at_k_shared(pos, neg > 0.5, 1)
    with pytest.raises(TypeError, match=r"^hits_at_k_shared: k must be an int"):
        hits_at_k_shared(pos, neg, 2.0)
    with pytest.raises(ValueError, match=r"^hits_at_k_shared: k must be >= 1 \(got 0\)"):
        hits_at_k_shared(pos, neg, 0)
    assert "hits_at_k_shared" in pyg_edgedot.__all__
