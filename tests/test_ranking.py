"""Candidate scoring and ranking (``pyg_edgedot.ops.candidates``): values against a float64
reference, ranks against OGB's formula (with real ties), metrics, gradients, opcheck,
torch.compile, bad inputs and the pure-PyTorch fallback."""
import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pyg_edgedot import edge_dot, hits_at_k, mrr, rank_candidates, score_candidates
from pyg_edgedot.ops import _chunked, candidates as candidates_ops

FALLBACK = candidates_ops.fallback_impls()
fallback_score, fallback_rank = FALLBACK["score_candidates"], FALLBACK["rank_candidates"]
from _helpers import (DEVICES, FLOAT_DTYPES, HAS_CUDA, INDEX_DTYPES, LOW_PRECISION,
                      OPCHECK_CASES, OPCHECK_IDS, TOL, X_LAYOUTS, RecordingBackend, _expect, _f64,
                      _has_number, assert_close, cpp_kernel_on_cpu, dtype_id, leaf, make_x, randn,
                      ref_base_grad, ref_grads, scores_bitwise_alike)


# ---- references ------------------------------------------------------------------------

def ref_scores(x_src, x_dst, src_index, cand_index):
    """float64 CPU reference: out[n, k] = <x_src[src[n]], x_dst[cand[n, k]]>."""
    src, cand = src_index.cpu().long(), cand_index.cpu().long()
    return (_f64(x_src)[src].unsqueeze(1) * _f64(x_dst)[cand]).sum(-1)


def ogb_eval_mrr(y_pred_pos, y_pred_neg):
    """ogb.linkproppred.Evaluator._eval_mrr (torch branch), written out."""
    y_pred_pos = y_pred_pos.view(-1, 1)
    optimistic_rank = (y_pred_neg > y_pred_pos).sum(dim=1)
    pessimistic_rank = (y_pred_neg >= y_pred_pos).sum(dim=1)
    ranking_list = 0.5 * (optimistic_rank + pessimistic_rank) + 1
    return {
        "ranking_list": ranking_list,
        "hits@1_list": (ranking_list <= 1).to(torch.float),
        "hits@3_list": (ranking_list <= 3).to(torch.float),
        "hits@10_list": (ranking_list <= 10).to(torch.float),
        "mrr_list": 1. / ranking_list.to(torch.float),
    }


def ogb_rank(y_pred_pos, y_pred_neg):
    return ogb_eval_mrr(y_pred_pos, y_pred_neg)["ranking_list"]


def rand_index(gen, high, shape, dtype, device):
    return torch.randint(0, max(high, 1), shape, generator=gen).to(dtype).to(device)


def small_int_features(gen, rows, feat_dim, dtype, device, low=-2, high=3):
    """Small integers: every score is exact in every dtype, so ties are real ties."""
    return torch.randint(low, high, (rows, feat_dim), generator=gen).to(dtype).to(device)


def assert_equal_nan(out, expected, what="output"):
    out, expected = out.cpu(), expected.cpu()
    assert out.shape == expected.shape, f"{what}: shape {tuple(out.shape)} != {tuple(expected.shape)}"
    assert out.dtype == expected.dtype, f"{what}: dtype {out.dtype} != {expected.dtype}"
    same = (out == expected) | (torch.isnan(out) & torch.isnan(expected))
    assert bool(same.all()), f"{what}: {int((~same).sum())} entries differ:\n{out}\n{expected}"


# (N, K, D, N_src, N_dst)
SHAPES = [
    (0, 5, 4, 6, 7),        # no sources
    (7, 0, 4, 6, 7),        # no candidates
    (9, 1, 3, 6, 7),        # K = 1
    (11, 6, 1, 13, 9),      # D = 1
    (13, 9, 7, 5, 21),      # odd D
    (8, 5, 515, 10, 12),    # large odd D
    (25, 70, 33, 30, 40),   # D > 32, K > 64 (several chunks of 32)
    (40, 33, 64, 50, 60),   # vector-friendly D
]
SHAPE_IDS = [f"n{n}-k{k}-d{d}" for n, k, d, _, _ in SHAPES]


# ---- score_candidates: forward ----------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_score_grid(shape, dtype, index_dtype, device, gen):
    num_rows, num_cand, feat_dim, num_src, num_dst = shape
    x_src = randn(gen, num_src, feat_dim, dtype=dtype, device=device)
    x_dst = randn(gen, num_dst, feat_dim, dtype=dtype, device=device)
    src = rand_index(gen, num_src, (num_rows,), index_dtype, device)
    cand = rand_index(gen, num_dst, (num_rows, num_cand), index_dtype, device)
    out = score_candidates(x_src, x_dst, src, cand)
    assert out.shape == (num_rows, num_cand) and out.dtype == dtype
    assert out.device.type == device
    assert_close(out, ref_scores(x_src, x_dst, src, cand), dtype)
    # The same numbers as edge_dot on the flattened pairs (up to accumulation order).
    pairs = torch.stack([src.unsqueeze(1).expand(num_rows, num_cand).reshape(-1),
                         cand.reshape(-1)])
    by_edge_dot = edge_dot(x_src, x_dst, pairs)
    assert_close(out.reshape(-1), _f64(by_edge_dot), dtype, "vs edge_dot", tol=2 * TOL[dtype])
    if device == "cpu" and cpp_kernel_on_cpu("candidates") and cpp_kernel_on_cpu("edge_dot"):
        # The C++ kernels score a pair with the same row_dot: the same bits.
        assert torch.equal(out.reshape(-1), by_edge_dot)


def _cand_layout(cand, layout):
    """Views of the same [N, K] values with other strides."""
    num_rows, num_cand = cand.shape
    if layout == "contiguous":
        out = cand.contiguous()
    elif layout == "transposed":
        out = cand.t().contiguous().t()
        assert num_rows <= 1 or num_cand <= 1 or out.stride() == (1, num_rows)
    elif layout == "col_step":
        big = torch.full((num_rows, 2 * num_cand + 1), -7, dtype=cand.dtype, device=cand.device)
        big[:, 1::2] = cand
        out = big[:, 1::2]
        assert out.stride() == (2 * num_cand + 1, 2) and out.storage_offset() == 1
    elif layout == "expanded":
        out = cand[:1].expand(num_rows, num_cand)
        assert out.stride(0) == 0
        return out
    else:
        raise ValueError(layout)
    assert torch.equal(out, cand)
    return out


CAND_LAYOUTS = ["contiguous", "transposed", "col_step", "expanded"]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("layout", CAND_LAYOUTS)
def test_score_cand_index_layouts(layout, index_dtype, device, gen):
    x_src = randn(gen, 15, 12, device=device)
    x_dst = randn(gen, 19, 12, device=device)
    src = rand_index(gen, 15, (23,), index_dtype, device)
    cand = _cand_layout(rand_index(gen, 19, (23, 37), index_dtype, device), layout)
    src_strided = torch.stack([src, src], dim=1)[:, 1]  # stride 2
    for src_index in (src, src_strided):
        out = score_candidates(x_src, x_dst, src_index, cand)
        assert_close(out, ref_scores(x_src, x_dst, src_index, cand), torch.float32)
    # rank_candidates reads the same strides.
    pos = rand_index(gen, 19, (23,), index_dtype, device)
    rank = rank_candidates(x_src, x_dst, src, pos, cand)
    pos_scores = score_candidates(x_src, x_dst, src, pos.unsqueeze(1))[:, 0]
    neg_scores = score_candidates(x_src, x_dst, src, cand.contiguous())
    assert_equal_nan(rank, ogb_rank(pos_scores, neg_scores))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("feat_dim", [16, 7])
@pytest.mark.parametrize("layout", X_LAYOUTS)
def test_score_x_layouts(layout, feat_dim, dtype, device, gen):
    _, _, x_src = make_x(gen, layout, 14, feat_dim, dtype, device)
    _, _, x_dst = make_x(gen, layout, 17, feat_dim, dtype, device)
    src = rand_index(gen, 14, (20,), torch.int64, device)
    cand = rand_index(gen, 17, (20, 9), torch.int64, device)
    ref = ref_scores(x_src, x_dst, src, cand)
    assert_close(score_candidates(x_src, x_dst, src, cand), ref, dtype)
    assert_close(score_candidates(x_src.contiguous(), x_dst, src, cand), ref, dtype)
    assert_close(score_candidates(x_src, x_dst.contiguous(), src, cand), ref, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_score_same_tensor_both_sides(dtype, device, gen):
    x = randn(gen, 12, 33, dtype=dtype, device=device)
    src = rand_index(gen, 12, (30,), torch.int64, device)
    cand = rand_index(gen, 12, (30, 8), torch.int64, device)
    cand[:, 3] = src  # each source is one of its own candidates
    cand[:, 5] = cand[:, 1]  # and a duplicate candidate
    out = score_candidates(x, x, src, cand)
    assert_close(out, ref_scores(x, x, src, cand), dtype)
    assert torch.equal(out[:, 5], out[:, 1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", LOW_PRECISION, ids=dtype_id)
def test_score_low_precision_accumulates_in_fp32(dtype, device, gen):
    feat_dim = 2048
    x_src = (randn(gen, 4, feat_dim, dtype=torch.float64).abs() + 0.5).to(dtype).to(device)
    x_dst = (randn(gen, 6, feat_dim, dtype=torch.float64).abs() + 0.5).to(dtype).to(device)
    src = rand_index(gen, 4, (5,), torch.int64, device)
    cand = rand_index(gen, 6, (5, 7), torch.int64, device)
    assert_close(score_candidates(x_src, x_dst, src, cand), ref_scores(x_src, x_dst, src, cand),
                 dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_score_long_rows_small_n(device, gen):
    # Few sources with many candidates (CUDA cuts such rows into tiles) and a D too long to
    # stage in shared memory (CUDA reads the source row from global memory instead).
    for num_rows, num_cand, feat_dim in ((3, 2500, 8), (2, 40, 13000)):
        x_src = randn(gen, 5, feat_dim, device=device)
        x_dst = randn(gen, 50, feat_dim, device=device)
        src = rand_index(gen, 5, (num_rows,), torch.int64, device)
        cand = rand_index(gen, 50, (num_rows, num_cand), torch.int64, device)
        assert_close(score_candidates(x_src, x_dst, src, cand),
                     ref_scores(x_src, x_dst, src, cand), torch.float32)
        pos = rand_index(gen, 50, (num_rows,), torch.int64, device)
        if not scores_bitwise_alike("candidates", device):
            continue
        pos_scores = score_candidates(x_src, x_dst, src, pos.unsqueeze(1))[:, 0]
        assert_equal_nan(rank_candidates(x_src, x_dst, src, pos, cand),
                         ogb_rank(pos_scores, score_candidates(x_src, x_dst, src, cand)))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
def test_long_rows_with_an_index_out_of_range(index_dtype, device, gen):
    # Rows long enough for CUDA to cut into tiles; a bad index in a late tile of one row
    # makes only that row's rank NaN (its other tiles still count) and only that pair NaN.
    num_rows, num_cand = 3, 3000
    x_src = small_int_features(gen, 4, 6, torch.float32, device)
    x_dst = small_int_features(gen, 60, 6, torch.float32, device)
    src = rand_index(gen, 4, (num_rows,), index_dtype, device)
    pos = rand_index(gen, 60, (num_rows,), index_dtype, device)
    neg = rand_index(gen, 60, (num_rows, num_cand), index_dtype, device)
    expected = ogb_rank(ref_scores(x_src, x_dst, src, pos.unsqueeze(1))[:, 0],
                        ref_scores(x_src, x_dst, src, neg))
    assert_equal_nan(rank_candidates(x_src, x_dst, src, pos, neg), expected)
    neg[1, 2900] = 60
    rank = rank_candidates(x_src, x_dst, src, pos, neg, validate=False)
    expected[1] = float("nan")
    assert_equal_nan(rank, expected)
    _expect(IndexError, "rank_candidates", ["neg_index", "(1, 2900)"],
            lambda: rank_candidates(x_src, x_dst, src, pos, neg))
    out = score_candidates(x_src, x_dst, src, neg, validate=False)
    assert torch.isnan(out).nonzero().tolist() == [[1, 2900]]
    _expect(IndexError, "score_candidates", ["cand_index", "(1, 2900)"],
            lambda: score_candidates(x_src, x_dst, src, neg))


@pytest.mark.parametrize("device", DEVICES)
def test_score_does_not_modify_inputs(device, gen):
    x_src = randn(gen, 10, 7, device=device)
    x_dst = randn(gen, 8, 7, device=device)
    src = rand_index(gen, 10, (6,), torch.int32, device)
    cand = rand_index(gen, 8, (6, 5), torch.int32, device)
    pos = rand_index(gen, 8, (6,), torch.int32, device)
    copies = [t.clone() for t in (x_src, x_dst, src, cand, pos)]
    score_candidates(x_src, x_dst, src, cand)
    rank_candidates(x_src, x_dst, src, pos, cand)
    for before, after in zip(copies, (x_src, x_dst, src, cand, pos)):
        assert torch.equal(before, after)


# ---- score_candidates: backward -----------------------------------------------------------

def ref_score_grads(x_src, x_dst, src_index, cand_index, grad_out):
    """float64 reference gradients through the flattened pairs."""
    num_rows, num_cand = cand_index.shape
    pairs = torch.stack([src_index.cpu().long().unsqueeze(1).expand(num_rows, num_cand).reshape(-1),
                         cand_index.cpu().long().reshape(-1)])
    return ref_grads(x_src, x_dst, pairs, grad_out.reshape(-1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_backward_grid(shape, dtype, index_dtype, device, gen):
    num_rows, num_cand, feat_dim, num_src, num_dst = shape
    x_src = randn(gen, num_src, feat_dim, dtype=dtype, device=device).requires_grad_(True)
    x_dst = randn(gen, num_dst, feat_dim, dtype=dtype, device=device).requires_grad_(True)
    src = rand_index(gen, num_src, (num_rows,), index_dtype, device)
    cand = rand_index(gen, num_dst, (num_rows, num_cand), index_dtype, device).t().contiguous().t()
    out = score_candidates(x_src, x_dst, src, cand)
    grad_out = randn(gen, num_rows * num_cand, dtype=dtype, device=device).view(num_rows, num_cand)
    out.backward(grad_out)
    ref_src, ref_dst = ref_score_grads(x_src, x_dst, src, cand, grad_out)
    assert x_src.grad.dtype == dtype and x_dst.grad.dtype == dtype
    assert_close(x_src.grad, ref_src, dtype, "grad x_src")
    assert_close(x_dst.grad, ref_dst, dtype, "grad x_dst")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("layout", ["row_step", "col_strided", "offset_misaligned"])
def test_backward_same_tensor_and_views(layout, dtype, device, gen):
    base, view, x = make_x(gen, layout, 12, 9, dtype, device, requires_grad=True)
    src = rand_index(gen, 12, (15,), torch.int64, device)
    cand = rand_index(gen, 12, (15, 6), torch.int64, device)
    cand[:, 0] = src
    out = score_candidates(x, x, src, cand)
    grad_out = randn(gen, 15, 6, dtype=dtype, device=device)
    out.backward(grad_out)
    ref_src, ref_dst = ref_score_grads(x, x, src, cand, grad_out)
    assert_close(base.grad, ref_base_grad(base, view, ref_src + ref_dst), dtype, "grad x")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
def test_gradcheck(index_dtype, device, gen):
    x_src = randn(gen, 6, 5, dtype=torch.float64, device=device).requires_grad_(True)
    x_dst = randn(gen, 7, 5, dtype=torch.float64, device=device).requires_grad_(True)
    src = rand_index(gen, 6, (8,), index_dtype, device)
    src[3] = src[0]  # a repeated source
    cand = rand_index(gen, 7, (8, 4), index_dtype, device)
    assert torch.autograd.gradcheck(lambda a, b: score_candidates(a, b, src, cand),
                                    (x_src, x_dst))
    assert torch.autograd.gradcheck(lambda a: score_candidates(a, x_dst.detach(), src, cand),
                                    (x_src,))
    assert torch.autograd.gradcheck(lambda b: score_candidates(x_src.detach(), b, src, cand),
                                    (x_dst,))
    # The same tensor on both sides, a transposed cand_index, D = 1.
    x = randn(gen, 7, 1, dtype=torch.float64, device=device).requires_grad_(True)
    cand_t = cand.t().contiguous().t()
    assert torch.autograd.gradcheck(lambda a: score_candidates(a, a, src, cand_t), (x,))
    # Second order: tests/test_double_backward.py.


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_empty(device, gen):
    x_src = randn(gen, 4, 3, dtype=torch.float64, device=device).requires_grad_(True)
    x_dst = randn(gen, 5, 3, dtype=torch.float64, device=device).requires_grad_(True)
    for num_rows, num_cand in ((0, 4), (3, 0)):
        src = rand_index(gen, 4, (num_rows,), torch.int64, device)
        cand = rand_index(gen, 5, (num_rows, num_cand), torch.int64, device)
        out = score_candidates(x_src, x_dst, src, cand)
        out.sum().backward()
        assert torch.equal(x_src.grad.cpu(), torch.zeros(4, 3, dtype=torch.float64))
        assert torch.equal(x_dst.grad.cpu(), torch.zeros(5, 3, dtype=torch.float64))
        x_src.grad = x_dst.grad = None


class _RecordGradOps(TorchDispatchMode):
    """Counts the gradients the gradient ops compute (edge_dot_pair_grad computes two)."""

    def __init__(self):
        super().__init__()
        self.gradients = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.pyg_edgedot.edge_dot_grad.default:
            self.gradients += 1
        elif func is torch.ops.pyg_edgedot.edge_dot_pair_grad.default:
            self.gradients += 2
        return func(*args, **(kwargs or {}))


def _run_backward(x_src, x_dst, src, cand, grad_out):
    a, b = leaf(x_src), leaf(x_dst)
    recorder = _RecordGradOps()
    out = score_candidates(a, b, src, cand)
    with recorder:
        out.backward(grad_out)
    return a.grad, b.grad, recorder.gradients


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("deterministic", [False, True])
def test_backward_uses_edge_dot_grad(deterministic, device, gen, deterministic_algorithms):
    torch.use_deterministic_algorithms(deterministic)
    x_src = randn(gen, 3, 40, device=device)
    x_dst = randn(gen, 6, 40, device=device)
    src = rand_index(gen, 3, (500,), torch.int64, device)
    cand = rand_index(gen, 6, (500, 20), torch.int64, device)
    grad_out = randn(gen, 500, 20, device=device)
    grad_src, grad_dst, gradients = _run_backward(x_src, x_dst, src, cand, grad_out)
    assert gradients == 2, gradients
    ref_src, ref_dst = ref_score_grads(x_src, x_dst, src, cand, grad_out)
    assert_close(grad_src, ref_src, torch.float32, "grad x_src")
    assert_close(grad_dst, ref_dst, torch.float32, "grad x_dst")
    if deterministic:
        again = _run_backward(x_src, x_dst, src, cand, grad_out)
        assert torch.equal(again[0], grad_src) and torch.equal(again[1], grad_dst)


# ---- rank_candidates ----------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_rank_matches_ogb_with_ties(dtype, index_dtype, device, gen):
    # Small-integer features: scores are exact in every dtype, many negatives tie with the
    # positive, and some negatives are the positive itself.
    num_rows, num_cand, feat_dim = 300, 40, 5
    x_src = small_int_features(gen, 9, feat_dim, dtype, device)
    x_dst = small_int_features(gen, 11, feat_dim, dtype, device)
    src = rand_index(gen, 9, (num_rows,), index_dtype, device)
    pos = rand_index(gen, 11, (num_rows,), index_dtype, device)
    neg = rand_index(gen, 11, (num_rows, num_cand), index_dtype, device)
    neg[::3, 7] = pos[::3]
    neg[::5, :4] = pos[::5].unsqueeze(1)
    rank = rank_candidates(x_src, x_dst, src, pos, neg)
    assert rank.dtype == torch.float32 and rank.shape == (num_rows,) and rank.device.type == device

    pos_scores = ref_scores(x_src, x_dst, src, pos.unsqueeze(1))[:, 0]
    neg_scores = ref_scores(x_src, x_dst, src, neg)
    ties = (neg_scores == pos_scores.unsqueeze(1)).sum().item()
    assert ties > num_rows, f"the test needs many ties (got {ties})"
    expected = ogb_rank(pos_scores, neg_scores)
    assert (expected != expected.floor()).any(), "no half ranks: ties are not exercised"
    assert_equal_nan(rank, expected, "rank")
    # The positive among its negatives always ties with itself.
    assert (rank.cpu()[::5] >= 1 + 0.5 * 4).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("feat_dim", [1, 7, 64, 515])
def test_rank_equals_ogb_on_score_candidates(feat_dim, dtype, index_dtype, device, gen):
    # Random data: the kernels score the positive and the negatives exactly as
    # score_candidates does, rounded to the input dtype (fp16/bf16 rounding makes ties too).
    num_rows, num_cand = 120, 50
    x_src = randn(gen, 20, feat_dim, dtype=dtype, device=device)
    x_dst = randn(gen, 30, feat_dim, dtype=dtype, device=device)
    src = rand_index(gen, 20, (num_rows,), index_dtype, device)
    pos = rand_index(gen, 30, (num_rows,), index_dtype, device)
    neg = rand_index(gen, 30, (num_rows, num_cand), index_dtype, device)
    neg[::4, 0] = pos[::4]
    rank = rank_candidates(x_src, x_dst, src, pos, neg)
    pos_scores = score_candidates(x_src, x_dst, src, pos.unsqueeze(1))[:, 0]
    neg_scores = score_candidates(x_src, x_dst, src, neg)
    if scores_bitwise_alike("candidates", device):
        assert_equal_nan(rank, ogb_rank(pos_scores, neg_scores), "rank")
    # And close to the ranks of the float64 scores (they differ only by near-ties).
    ref = ogb_rank(ref_scores(x_src, x_dst, src, pos.unsqueeze(1))[:, 0],
                   ref_scores(x_src, x_dst, src, neg))
    assert (rank.cpu() - ref).abs().mean() < 0.5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype, tiny", [(torch.bfloat16, 2.0 ** -9), (torch.float16, 2.0 ** -12)],
                         ids=["bfloat16", "float16"])
def test_rank_rounds_scores_to_input_dtype(dtype, tiny, device):
    # In float32 the negative (1 + tiny) beats the positive (1); rounded to the input dtype
    # both are 1.0: a tie, rank 1.5, as OGB gives on scores computed in that dtype.
    x_src = torch.tensor([[1.0, 1.0]], dtype=dtype, device=device)
    x_dst = torch.tensor([[1.0, 0.0], [1.0, tiny]], dtype=dtype, device=device)
    src = torch.zeros(1, dtype=torch.int64, device=device)
    pos = torch.zeros(1, dtype=torch.int64, device=device)
    neg = torch.tensor([[1]], device=device)
    assert x_dst[1, 1].item() == tiny  # representable
    assert (1.0 + tiny) > 1.0 and torch.tensor(1.0 + tiny).to(dtype).item() == 1.0
    assert rank_candidates(x_src, x_dst, src, pos, neg).tolist() == [1.5]
    # float32 keeps them apart.
    assert rank_candidates(x_src.float(), x_dst.float(), src, pos, neg).tolist() == [2.0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_rank_shapes(shape, index_dtype, device, gen):
    num_rows, num_cand, feat_dim, num_src, num_dst = shape
    x_src = small_int_features(gen, num_src, feat_dim, torch.float32, device)
    x_dst = small_int_features(gen, num_dst, feat_dim, torch.float32, device)
    src = rand_index(gen, num_src, (num_rows,), index_dtype, device)
    pos = rand_index(gen, num_dst, (num_rows,), index_dtype, device)
    neg = rand_index(gen, num_dst, (num_rows, num_cand), index_dtype, device)
    rank = rank_candidates(x_src, x_dst, src, pos, neg)
    expected = ogb_rank(ref_scores(x_src, x_dst, src, pos.unsqueeze(1))[:, 0],
                        ref_scores(x_src, x_dst, src, neg))
    assert_equal_nan(rank, expected.to(torch.float32))
    if num_cand == 0:
        assert torch.equal(rank.cpu(), torch.ones(num_rows))


@pytest.mark.parametrize("device", DEVICES)
def test_rank_nan_and_inf_scores_follow_ogb(device):
    # NaN compares false both ways (a NaN positive ranks first, a NaN negative never beats).
    x_src = torch.tensor([[1.0], [float("nan")], [float("inf")]], device=device)
    x_dst = torch.tensor([[1.0], [2.0], [float("nan")], [-1.0], [0.0]], device=device)
    src = torch.tensor([0, 1, 0, 2, 2], device=device)
    pos = torch.tensor([0, 0, 2, 0, 4], device=device)
    neg = torch.tensor([[1, 2, 3], [1, 3, 0], [0, 1, 3], [1, 3, 4], [0, 1, 3]], device=device)
    pos_scores = ref_scores(x_src, x_dst, src, pos.unsqueeze(1))[:, 0].float()
    neg_scores = ref_scores(x_src, x_dst, src, neg).float()
    assert_equal_nan(rank_candidates(x_src, x_dst, src, pos, neg),
                     ogb_rank(pos_scores, neg_scores))


@pytest.mark.parametrize("device", DEVICES)
def test_rank_is_forward_only(device, gen):
    x_src = randn(gen, 5, 4, device=device).requires_grad_(True)
    x_dst = randn(gen, 6, 4, device=device).requires_grad_(True)
    src = rand_index(gen, 5, (7,), torch.int64, device)
    pos = rand_index(gen, 6, (7,), torch.int64, device)
    neg = rand_index(gen, 6, (7, 3), torch.int64, device)
    rank = rank_candidates(x_src, x_dst, src, pos, neg)
    assert not rank.requires_grad and rank.grad_fn is None


# ---- mrr / hits_at_k ----------------------------------------------------------------------

def test_metrics_by_hand():
    rank = torch.tensor([1.0, 2.5, 4.0, 10.0, 10.5])
    assert mrr(rank).item() == pytest.approx((1 + 1 / 2.5 + 1 / 4 + 1 / 10 + 1 / 10.5) / 5)
    assert hits_at_k(rank, 1).item() == pytest.approx(1 / 5)
    assert hits_at_k(rank, 3).item() == pytest.approx(2 / 5)  # 2.5 <= 3
    assert hits_at_k(rank, 10).item() == pytest.approx(4 / 5)  # 10.5 is a miss
    assert mrr(rank).dtype == torch.float32 and hits_at_k(rank, 3).dtype == torch.float32
    assert mrr(torch.tensor([[1, 2], [4, 4]])).item() == pytest.approx(0.5)  # int ranks
    assert torch.isnan(mrr(torch.tensor([1.0, float("nan")])))
    assert hits_at_k(torch.tensor([1.0, float("nan")]), 1).item() == 0.5
    # integer ranks against a k their dtype cannot hold, and a k past int64
    assert hits_at_k(torch.tensor([200, 250], dtype=torch.uint8), 300).item() == 1.0
    assert hits_at_k(torch.tensor([3, 5], dtype=torch.int32), 2 ** 32 + 4).item() == 1.0
    assert hits_at_k(torch.tensor([3, 5], dtype=torch.int16), 4).item() == 0.5
    assert hits_at_k(torch.tensor([3, 2 ** 63, 2 ** 64 - 1], dtype=torch.uint64), 5).item() == \
        pytest.approx(1 / 3)
    assert hits_at_k(torch.tensor([3.0, 5.0]), 2 ** 70).item() == 1.0
    # float ranks against a k their dtype would round up: 259 is 260 in bfloat16, 2051 is
    # 2052 in float16, 2**24 + 3 is 2**24 + 4 in float32; those ranks are misses
    for value, below, dtype, k in ((260, 258, torch.bfloat16, 259),
                                   (2052, 2050, torch.float16, 2051),
                                   (2 ** 24 + 4, 2 ** 24, torch.float32, 2 ** 24 + 3),
                                   (2 ** 60 + 256, 2 ** 60, torch.float64, 2 ** 60 + 255)):
        rank = torch.tensor([value, below], dtype=torch.float64).to(dtype)
        assert hits_at_k(rank, k).item() == 0.5, (dtype, k)
        assert hits_at_k(rank, value).item() == 1.0, (dtype, value)
    assert hits_at_k(torch.tensor([3.4e38, float("inf")]), 10 ** 400).item() == 0.5


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_metrics_equal_ogb(dtype, device, gen):
    x_src = small_int_features(gen, 30, 4, dtype, device)
    x_dst = small_int_features(gen, 40, 4, dtype, device)
    src = rand_index(gen, 30, (500,), torch.int64, device)
    pos = rand_index(gen, 40, (500,), torch.int64, device)
    neg = rand_index(gen, 40, (500, 20), torch.int64, device)
    rank = rank_candidates(x_src, x_dst, src, pos, neg)
    pos_scores = score_candidates(x_src, x_dst, src, pos.unsqueeze(1))[:, 0]
    neg_scores = score_candidates(x_src, x_dst, src, neg)
    ogb = ogb_eval_mrr(pos_scores, neg_scores)
    assert torch.equal(mrr(rank).cpu(), ogb["mrr_list"].mean().cpu())
    for k in (1, 3, 10):
        assert torch.equal(hits_at_k(rank, k).cpu(), ogb[f"hits@{k}_list"].mean().cpu())
    assert 0 < hits_at_k(rank, 3).item() < 1


# ---- registered ops: first_bad, opcheck -----------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_op_score_candidates_first_bad(dtype, index_dtype, device, gen):
    x_src = randn(gen, 9, 6, dtype=dtype, device=device)
    x_dst = randn(gen, 7, 6, dtype=dtype, device=device)
    src = rand_index(gen, 9, (50,), index_dtype, device)
    cand = rand_index(gen, 7, (50, 5), index_dtype, device)
    out, first_bad = torch.ops.pyg_edgedot.score_candidates(x_src, x_dst, src, cand)
    assert first_bad.dtype == torch.int64 and first_bad.shape == (1,)
    assert first_bad.device == x_src.device and first_bad.item() == -1
    big = 2**31 - 1 if index_dtype == torch.int32 else 2**40
    cand[31, 2] = 7
    cand[40, 0] = -1
    src[12] = 9       # the whole row is bad
    src[45] = -big
    cand[46, 4] = big
    out, first_bad = torch.ops.pyg_edgedot.score_candidates(x_src, x_dst, src, cand)
    assert first_bad.item() == 12
    bad = torch.zeros(50, 5, dtype=torch.bool)
    bad[[31, 40, 46], [2, 0, 4]] = True
    bad[[12, 45]] = True
    assert torch.isnan(out.cpu()[bad]).all()
    good_rows = ~bad.any(1)
    assert_close(out.cpu()[good_rows], ref_scores(x_src, x_dst, src.cpu()[good_rows],
                                                  cand.cpu()[good_rows]), dtype)
    assert_close(out.cpu()[31, :2], ref_scores(x_src, x_dst, src.cpu()[31:32],
                                               cand.cpu()[31:32, :2])[0], dtype)
    # A bad source with no candidates is still reported.
    _, first_bad = torch.ops.pyg_edgedot.score_candidates(x_src, x_dst, src, cand[:, :0])
    assert first_bad.item() == 12


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
def test_op_rank_candidates_first_bad(index_dtype, device, gen):
    x_src = randn(gen, 9, 6, device=device)
    x_dst = randn(gen, 7, 6, device=device)
    src = rand_index(gen, 9, (50,), index_dtype, device)
    pos = rand_index(gen, 7, (50,), index_dtype, device)
    neg = rand_index(gen, 7, (50, 5), index_dtype, device)
    rank, first_bad = torch.ops.pyg_edgedot.rank_candidates(x_src, x_dst, src, pos, neg)
    assert first_bad.item() == -1 and not torch.isnan(rank).any()
    neg[20, 4] = 7
    pos[33] = -3
    src[41] = 9
    rank, first_bad = torch.ops.pyg_edgedot.rank_candidates(x_src, x_dst, src, pos, neg)
    assert first_bad.item() == 20
    bad = torch.zeros(50, dtype=torch.bool)
    bad[[20, 33, 41]] = True
    assert torch.isnan(rank.cpu()[bad]).all() and not torch.isnan(rank.cpu()[~bad]).any()
    good_rank, _ = torch.ops.pyg_edgedot.rank_candidates(x_src, x_dst, src[~bad.to(device)],
                                                         pos[~bad.to(device)],
                                                         neg[~bad.to(device)])
    assert torch.equal(rank.cpu()[~bad], good_rank.cpu())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_rows", [0, 13])
@pytest.mark.parametrize("dtypes", OPCHECK_CASES, ids=OPCHECK_IDS)
def test_opcheck(dtypes, num_rows, device, gen):
    dtype, index_dtype = dtypes
    x_src = randn(gen, 9, 5, dtype=dtype, device=device).requires_grad_(True)
    x_dst = randn(gen, 7, 5, dtype=dtype, device=device).requires_grad_(True)
    src = rand_index(gen, 9, (num_rows,), index_dtype, device)
    pos = rand_index(gen, 7, (num_rows,), index_dtype, device)
    cand = rand_index(gen, 7, (num_rows, 6), index_dtype, device).t().contiguous().t()
    score_op = torch.ops.pyg_edgedot.score_candidates.default
    rank_op = torch.ops.pyg_edgedot.rank_candidates.default
    torch.library.opcheck(score_op, (x_src, x_dst, src, cand))
    torch.library.opcheck(score_op, (x_src, x_src, src, cand % 9))
    torch.library.opcheck(score_op, (x_src, x_dst, src, cand[:, :0]))
    # Forward only: called with detached inputs, as rank_candidates does.
    torch.library.opcheck(rank_op, (x_src.detach(), x_dst.detach(), src, pos, cand))
    torch.library.opcheck(rank_op, (x_src.detach(), x_dst.detach(), src, pos, cand[:, :0]))


# ---- torch.compile ----------------------------------------------------------------------------

def _score_loss_fn(x_src, x_dst, src, cand):
    return score_candidates(x_src, x_dst, src, cand).sigmoid()


@pytest.mark.parametrize("device", DEVICES)
def test_compile_score_forward_backward(device, gen, fresh_dynamo):
    x_src = randn(gen, 10, 8, device=device)
    x_dst = randn(gen, 12, 8, device=device)
    src = rand_index(gen, 10, (15,), torch.int64, device)
    cand = rand_index(gen, 12, (15, 6), torch.int64, device)
    grad_out = randn(gen, 15, 6, device=device)
    recorder = RecordingBackend()
    compiled = torch.compile(_score_loss_fn, backend=recorder.backend, fullgraph=True)

    def run(fn):
        a, b = leaf(x_src), leaf(x_dst)
        out = fn(a, b, src, cand)
        out.backward(grad_out)
        return out.detach(), a.grad, b.grad

    got, expected = run(compiled), run(_score_loss_fn)
    assert len(recorder.forward_graphs) == 1 and len(recorder.backward_graphs) == 1
    assert "pyg_edgedot.score_candidates.default" in recorder.forward_graphs[0]
    assert recorder.backward_graphs[0].count("pyg_edgedot.edge_dot_pair_grad.default") == 1
    for g, e in zip(got, expected):
        assert_close(g, _f64(e), torch.float32)
    ref = ref_scores(x_src, x_dst, src, cand).sigmoid()
    assert_close(got[0], ref, torch.float32)
    ref_src, ref_dst = ref_score_grads(x_src, x_dst, src, cand,
                                       grad_out.double().cpu() * ref * (1 - ref))
    assert_close(got[1], ref_src, torch.float32, "grad x_src")
    assert_close(got[2], ref_dst, torch.float32, "grad x_dst")


@pytest.mark.parametrize("device", DEVICES)
def test_compile_inductor_score_and_rank(device, gen, fresh_dynamo):
    def evaluate(x_src, x_dst, src, pos, neg):
        scores = score_candidates(x_src, x_dst, src, neg)
        rank = rank_candidates(x_src, x_dst, src, pos, neg)
        return scores.sum(), mrr(rank), hits_at_k(rank, 3)

    compiled = torch.compile(evaluate, fullgraph=True)
    x_src = small_int_features(gen, 10, 8, torch.float32, device)
    x_dst = small_int_features(gen, 12, 8, torch.float32, device)
    src = rand_index(gen, 10, (30,), torch.int64, device)
    pos = rand_index(gen, 12, (30,), torch.int64, device)
    neg = rand_index(gen, 12, (30, 7), torch.int64, device)
    for got, expected in zip(compiled(x_src, x_dst, src, pos, neg),
                             evaluate(x_src, x_dst, src, pos, neg)):
        assert torch.allclose(got, expected)
    # Inside the graph, an index out of range is not read back: NaN scores and ranks.
    neg[4, 2] = 12
    scores_sum, mrr_value, _ = compiled(x_src, x_dst, src, pos, neg)
    assert torch.isnan(scores_sum) and torch.isnan(mrr_value)


# ---- bad inputs --------------------------------------------------------------------------------

def _data(gen, device):
    x_src = randn(gen, 6, 4, device=device)
    x_dst = randn(gen, 5, 4, device=device)
    src = rand_index(gen, 6, (9,), torch.int64, device)
    pos = rand_index(gen, 5, (9,), torch.int64, device)
    cand = rand_index(gen, 5, (9, 3), torch.int64, device)
    return x_src, x_dst, src, pos, cand


@pytest.mark.parametrize("device", DEVICES)
def test_type_errors(device, gen):
    x_src, x_dst, src, pos, cand = _data(gen, device)
    sc, rc = "score_candidates", "rank_candidates"
    for op, fn in ((sc, lambda a, b, s, c: score_candidates(a, b, s, c)),
                   (rc, lambda a, b, s, c: rank_candidates(a, b, s, pos, c))):
        _expect(TypeError, op, ["x_src"], lambda: fn(x_src.long(), x_dst, src, cand))
        _expect(TypeError, op, ["x_dst"], lambda: fn(x_src, x_dst.int(), src, cand))
        _expect(TypeError, op, ["x_src"], lambda: fn(x_src.to(torch.complex64), x_dst, src, cand))
        _expect(TypeError, op, ["x_src", "x_dst"], lambda: fn(x_src, x_dst.double(), src, cand))
        _expect(TypeError, op, ["x_src"], lambda: fn(x_src.tolist(), x_dst, src, cand))
        _expect(TypeError, op, ["x_dst"], lambda: fn(x_src, None, src, cand))
        _expect(TypeError, op, ["src_index"], lambda: fn(x_src, x_dst, src.float(), cand))
        _expect(TypeError, op, ["src_index"], lambda: fn(x_src, x_dst, src.tolist(), cand))
        _expect(TypeError, op, ["src_index"],
                lambda: fn(x_src, x_dst, src.to(torch.int16), cand.to(torch.int16)))
    # validate is a bool: None (or 0) would skip the index check silently.
    for value in (None, 0, "no"):
        _expect(TypeError, sc, ["validate", "bool"],
                lambda: score_candidates(x_src, x_dst, src, cand, validate=value))
        _expect(TypeError, rc, ["validate", "bool"],
                lambda: rank_candidates(x_src, x_dst, src, pos, cand, validate=value))
    _expect(TypeError, sc, ["cand_index"], lambda: score_candidates(x_src, x_dst, src, cand.float()))
    _expect(TypeError, sc, ["cand_index"],
            lambda: score_candidates(x_src, x_dst, src, np.zeros((9, 3), dtype=np.int64)))
    _expect(TypeError, sc, ["src_index", "cand_index"],
            lambda: score_candidates(x_src, x_dst, src, cand.int()))
    _expect(TypeError, rc, ["pos_index"], lambda: rank_candidates(x_src, x_dst, src, pos.bool(), cand))
    _expect(TypeError, rc, ["pos_index"], lambda: rank_candidates(x_src, x_dst, src, None, cand))
    _expect(TypeError, rc, ["src_index", "pos_index"],
            lambda: rank_candidates(x_src, x_dst, src, pos.int(), cand))
    _expect(TypeError, rc, ["neg_index"], lambda: rank_candidates(x_src, x_dst, src, pos, cand.float()))
    _expect(TypeError, rc, ["src_index", "neg_index"],
            lambda: rank_candidates(x_src, x_dst, src, pos, cand.int()))
    # Sparse indices: named, not the dispatcher's "could not run" error.
    _expect(TypeError, sc, ["src_index", "dense", "sparse_coo"],
            lambda: score_candidates(x_src, x_dst, src.to_sparse(), cand))
    _expect(TypeError, sc, ["cand_index", "dense", "sparse_coo"],
            lambda: score_candidates(x_src, x_dst, src, cand.to_sparse()))
    _expect(TypeError, rc, ["pos_index", "dense", "sparse_coo"],
            lambda: rank_candidates(x_src, x_dst, src, pos.to_sparse(), cand))
    _expect(TypeError, rc, ["neg_index", "dense", "sparse_csr"],
            lambda: rank_candidates(x_src, x_dst, src, pos, cand.to_sparse_csr()))
    _expect(TypeError, "mrr", ["rank"], lambda: mrr([1.0, 2.0]))
    _expect(TypeError, "mrr", ["rank"], lambda: mrr(torch.ones(3, dtype=torch.bool)))
    _expect(TypeError, "hits_at_k", ["rank"], lambda: hits_at_k(np.ones(3), 1))
    _expect(TypeError, "hits_at_k", ["k"], lambda: hits_at_k(torch.ones(3), 2.5))
    _expect(TypeError, "hits_at_k", ["k"], lambda: hits_at_k(torch.ones(3), True))


@pytest.mark.parametrize("device", DEVICES)
def test_value_errors(device, gen):
    x_src, x_dst, src, pos, cand = _data(gen, device)
    sc, rc = "score_candidates", "rank_candidates"
    for op, fn in ((sc, lambda a, b, s, c: score_candidates(a, b, s, c)),
                   (rc, lambda a, b, s, c: rank_candidates(a, b, s, pos, c))):
        _expect(ValueError, op, ["x_src"], lambda: fn(x_src[:, 0], x_dst, src, cand))
        _expect(ValueError, op, ["x_dst"], lambda: fn(x_src, x_dst[None], src, cand))
        _expect(ValueError, op, ["x_src", "x_dst", "feature"],
                lambda: fn(x_src[:, :3], x_dst, src, cand))
        _expect(ValueError, op, ["src_index"], lambda: fn(x_src, x_dst, src[:, None], cand))
        _expect(ValueError, op, ["src_index"], lambda: fn(x_src, x_dst, src[0], cand))
    _expect(ValueError, sc, ["cand_index"], lambda: score_candidates(x_src, x_dst, src, cand[:, 0]))
    _expect(ValueError, sc, ["cand_index"], lambda: score_candidates(x_src, x_dst, src, cand[None]))
    _expect(ValueError, sc, ["cand_index", "src_index"],
            lambda: score_candidates(x_src, x_dst, src, cand[:-1]))
    _expect(ValueError, rc, ["pos_index"], lambda: rank_candidates(x_src, x_dst, src, pos[:, None], cand))
    _expect(ValueError, rc, ["pos_index", "src_index"],
            lambda: rank_candidates(x_src, x_dst, src, pos[:-1], cand))
    _expect(ValueError, rc, ["neg_index"], lambda: rank_candidates(x_src, x_dst, src, pos, cand[:, 0]))
    _expect(ValueError, rc, ["neg_index", "src_index"],
            lambda: rank_candidates(x_src, x_dst, src, pos, cand[1:]))
    _expect(ValueError, "hits_at_k", ["k"], lambda: hits_at_k(torch.ones(3), 0))


@pytest.mark.skipif(not HAS_CUDA, reason="CUDA is not available")
def test_device_errors(gen):
    x_src, x_dst, src, pos, cand = _data(gen, "cuda")
    sc, rc = "score_candidates", "rank_candidates"
    _expect(ValueError, sc, ["x_src", "x_dst"], lambda: score_candidates(x_src, x_dst.cpu(), src, cand))
    _expect(ValueError, sc, ["src_index"], lambda: score_candidates(x_src, x_dst, src.cpu(), cand))
    _expect(ValueError, sc, ["cand_index"], lambda: score_candidates(x_src, x_dst, src, cand.cpu()))
    _expect(ValueError, rc, ["pos_index"], lambda: rank_candidates(x_src, x_dst, src, pos.cpu(), cand))
    _expect(ValueError, rc, ["neg_index"], lambda: rank_candidates(x_src, x_dst, src, pos, cand.cpu()))


# (argument, position, value): x_src has 6 rows, x_dst 5; there are 300 sources, K = 4.
OUT_OF_RANGE = [
    ("src_index", 213, 6), ("src_index", 213, -1), ("src_index", 17, 10**6),
    ("cand_index", (213, 2), 5), ("cand_index", (0, 0), -5), ("cand_index", (299, 3), 77777),
]
RANK_OUT_OF_RANGE = [
    ("src_index", 150, 6), ("pos_index", 150, 5), ("pos_index", 0, -1),
    ("neg_index", (150, 1), 5), ("neg_index", (299, 3), -2),
]


def _index_problem(gen, device, index_dtype):
    x_src = randn(gen, 6, 4, device=device)
    x_dst = randn(gen, 5, 4, device=device)
    src = rand_index(gen, 6, (300,), index_dtype, device)
    pos = rand_index(gen, 5, (300,), index_dtype, device)
    cand = rand_index(gen, 5, (300, 4), index_dtype, device)
    return x_src, x_dst, src, pos, cand


def _position_text(position):
    return f"({position[0]}, {position[1]})" if isinstance(position, tuple) else str(position)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", OUT_OF_RANGE, ids=[f"{a}-{v}" for a, _, v in OUT_OF_RANGE])
def test_score_index_out_of_range(case, index_dtype, device, gen):
    name, position, value = case
    x_src, x_dst, src, _, cand = _index_problem(gen, device, index_dtype)
    target = src if name == "src_index" else cand
    target[position] = value
    if position != (299, 3):  # a later bad entry: the message names the first one
        (src if name == "src_index" else cand)[-1] = value
    message = _expect(IndexError, "score_candidates", [name, _position_text(position)],
                      lambda: score_candidates(x_src, x_dst, src, cand))
    assert _has_number(message, value), f"message does not name value {value}: {message!r}"
    out = score_candidates(x_src, x_dst, src, cand, validate=False)
    if name == "src_index":
        assert torch.isnan(out[position]).all()
    else:
        assert torch.isnan(out[position]).item()
    # Through the fallback, the same message.
    _, first_bad = fallback_score(x_src, x_dst, src, cand)
    assert first_bad.item() == (position if name == "src_index" else position[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", RANK_OUT_OF_RANGE, ids=[f"{a}-{v}" for a, _, v in RANK_OUT_OF_RANGE])
def test_rank_index_out_of_range(case, index_dtype, device, gen):
    name, position, value = case
    x_src, x_dst, src, pos, neg = _index_problem(gen, device, index_dtype)
    {"src_index": src, "pos_index": pos, "neg_index": neg}[name][position] = value
    message = _expect(IndexError, "rank_candidates", [name, _position_text(position)],
                      lambda: rank_candidates(x_src, x_dst, src, pos, neg))
    assert _has_number(message, value), f"message does not name value {value}: {message!r}"
    rank = rank_candidates(x_src, x_dst, src, pos, neg, validate=False)
    row = position[0] if isinstance(position, tuple) else position
    assert torch.isnan(rank[row]).item() and int(torch.isnan(rank).sum()) == 1
    _, first_bad = fallback_rank(x_src, x_dst, src, pos, neg)
    assert first_bad.item() == row


@pytest.mark.parametrize("device", DEVICES)
def test_first_bad_row_order_in_message(device, gen):
    # In the first bad row, src_index is named before cand_index; rows come in order.
    x_src, x_dst, src, pos, cand = _index_problem(gen, device, torch.int64)
    cand[40, 1] = 5
    src[40] = 6
    src[90] = -1
    _expect(IndexError, "score_candidates", ["src_index", "position 40"],
            lambda: score_candidates(x_src, x_dst, src, cand))
    src[40] = 0
    _expect(IndexError, "score_candidates", ["cand_index", "(40, 1)"],
            lambda: score_candidates(x_src, x_dst, src, cand))
    # No candidates: a bad source is still an error.
    _expect(IndexError, "score_candidates", ["src_index", "position 90"],
            lambda: score_candidates(x_src, x_dst, src, cand[:, :0]))
    _expect(IndexError, "rank_candidates", ["src_index", "position 90"],
            lambda: rank_candidates(x_src, x_dst, src, pos, cand[:, :0]))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_validate_false_nan_and_no_gradient(dtype, device, gen):
    x_src = randn(gen, 9, 19, dtype=dtype, device=device).requires_grad_(True)
    x_dst = randn(gen, 7, 19, dtype=dtype, device=device).requires_grad_(True)
    src = rand_index(gen, 9, (60,), torch.int64, device)
    cand = rand_index(gen, 7, (60, 5), torch.int64, device)
    src[3] = 9
    cand[10, 2] = -1
    cand[59, 4] = 2**40
    out = score_candidates(x_src, x_dst, src, cand, validate=False)
    bad = torch.zeros(60, 5, dtype=torch.bool)
    bad[3] = True
    bad[10, 2] = bad[59, 4] = True
    assert torch.isnan(out.detach().cpu()[bad]).all()
    assert not torch.isnan(out.detach().cpu()[~bad]).any()
    grad_out = randn(gen, 60, 5, dtype=dtype, device=device)
    out.backward(grad_out)
    grad_good = grad_out.cpu().masked_fill(bad, 0)
    ref_src, ref_dst = ref_score_grads(x_src, x_dst, src.cpu().clamp(0, 8), cand.cpu().clamp(0, 6),
                                       grad_good)
    assert_close(x_src.grad, ref_src, dtype, "grad x_src")
    assert_close(x_dst.grad, ref_dst, dtype, "grad x_dst")


@pytest.mark.parametrize("device", DEVICES)
def test_no_rows_on_one_side(device, gen):
    x = randn(gen, 6, 5, device=device)
    none = torch.empty(0, 5, device=device)
    src = torch.zeros(4, dtype=torch.int64, device=device)
    cand = torch.zeros(4, 3, dtype=torch.int64, device=device)
    assert torch.isnan(score_candidates(x, none, src, cand, validate=False)).all()
    assert torch.isnan(score_candidates(none, x, src, cand, validate=False)).all()
    assert torch.isnan(rank_candidates(x, none, src, src, cand, validate=False)).all()
    _expect(IndexError, "score_candidates", ["cand_index", "(0, 0)"],
            lambda: score_candidates(x, none, src, cand))
    _expect(IndexError, "rank_candidates", ["src_index", "position 0"],
            lambda: rank_candidates(none, x, src, src, cand))
    # Nothing to score: no error.
    assert score_candidates(none, none, src[:0], cand[:0]).shape == (0, 3)
    assert rank_candidates(none, none, src[:0], src[:0], cand[:0]).shape == (0,)


# ---- the pure-PyTorch fallback -----------------------------------------------------------------

@pytest.fixture
def tiny_chunks(monkeypatch):
    """Makes the fallback work in chunks of a few rows and counts the chunks."""
    monkeypatch.setattr(_chunked, "DEFAULT_CHUNK_ELEMS", 40)
    counter = {"calls": 0}
    original = _chunked.candidate_scores

    def counting(*args):
        counter["calls"] += 1
        return original(*args)

    monkeypatch.setattr(_chunked, "candidate_scores", counting)
    return counter


def _num_chunks(num_rows, per_row_elems, chunk_elems=40):
    step = max(1, chunk_elems // max(1, per_row_elems))
    return -(-num_rows // step)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", [(23, 3, 2), (11, 5, 9), (0, 3, 2), (7, 0, 3)],
                         ids=["small", "row-per-chunk", "n0", "k0"])
def test_fallback_score_chunked(shape, dtype, index_dtype, device, gen, tiny_chunks):
    num_rows, num_cand, feat_dim = shape
    x_src = randn(gen, 8, feat_dim, dtype=dtype, device=device)
    x_dst = randn(gen, 10, feat_dim, dtype=dtype, device=device)
    src = rand_index(gen, 8, (num_rows,), index_dtype, device)
    cand = rand_index(gen, 10, (num_rows, num_cand), index_dtype, device).t().contiguous().t()
    out, first_bad = fallback_score(x_src, x_dst, src, cand)
    assert tiny_chunks["calls"] == _num_chunks(num_rows, num_cand * feat_dim)
    assert out.dtype == dtype and out.shape == (num_rows, num_cand)
    assert first_bad.tolist() == [-1] and first_bad.dtype == torch.int64
    assert_close(out, ref_scores(x_src, x_dst, src, cand), dtype)
    # The registered op agrees, whatever backend it is.
    op_out, _ = torch.ops.pyg_edgedot.score_candidates(x_src, x_dst, src, cand)
    assert_close(op_out, _f64(out), dtype, tol=2 * TOL[dtype])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_fallback_rank_chunked_with_ties(dtype, index_dtype, device, gen, tiny_chunks):
    num_rows, num_cand, feat_dim = 57, 6, 3
    x_src = small_int_features(gen, 8, feat_dim, dtype, device)
    x_dst = small_int_features(gen, 10, feat_dim, dtype, device)
    src = rand_index(gen, 8, (num_rows,), index_dtype, device)
    pos = rand_index(gen, 10, (num_rows,), index_dtype, device)
    neg = rand_index(gen, 10, (num_rows, num_cand), index_dtype, device)
    neg[::2, 1] = pos[::2]
    rank, first_bad = fallback_rank(x_src, x_dst, src, pos, neg)
    assert tiny_chunks["calls"] == _num_chunks(num_rows, (num_cand + 1) * feat_dim)
    assert first_bad.tolist() == [-1]
    expected = ogb_rank(ref_scores(x_src, x_dst, src, pos.unsqueeze(1))[:, 0],
                        ref_scores(x_src, x_dst, src, neg))
    assert (expected != expected.floor()).any()
    assert_equal_nan(rank, expected)
    assert_equal_nan(torch.ops.pyg_edgedot.rank_candidates(x_src, x_dst, src, pos, neg)[0],
                     expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_fallback_rank_equals_ogb_on_fallback_scores(dtype, device, gen):
    x_src = randn(gen, 20, 33, dtype=dtype, device=device)
    x_dst = randn(gen, 30, 33, dtype=dtype, device=device)
    src = rand_index(gen, 20, (80,), torch.int64, device)
    pos = rand_index(gen, 30, (80,), torch.int64, device)
    neg = rand_index(gen, 30, (80, 25), torch.int64, device)
    neg[::3, 2] = pos[::3]
    rank, _ = fallback_rank(x_src, x_dst, src, pos, neg)
    pos_scores, _ = fallback_score(x_src, x_dst, src, pos.unsqueeze(1))
    neg_scores, _ = fallback_score(x_src, x_dst, src, neg)
    assert_equal_nan(rank, ogb_rank(pos_scores[:, 0], neg_scores))


@pytest.mark.parametrize("device", DEVICES)
def test_fallback_ops_check_each_index_shape(device, gen):
    # The registered ops' fallback: a candidate matrix given as [N] (or a positive as
    # [N, 1]) is named, as in the public functions, not an unpacking error.
    x = randn(gen, 6, 4, device=device)
    src = rand_index(gen, 6, (5,), torch.int64, device)
    pos = rand_index(gen, 6, (5,), torch.int64, device)
    neg = rand_index(gen, 6, (5, 3), torch.int64, device)
    _expect(ValueError, "score_candidates", ["cand_index", "2-D [N, K]"],
            lambda: fallback_score(x, x, src, pos))
    _expect(ValueError, "rank_candidates", ["neg_index", "2-D [N, K]"],
            lambda: fallback_rank(x, x, src, pos, pos))
    _expect(ValueError, "rank_candidates", ["pos_index", "1-D [N]"],
            lambda: fallback_rank(x, x, src, pos[:, None], neg))


@pytest.mark.parametrize("device", DEVICES)
def test_fallback_out_of_range_across_chunks(device, gen, tiny_chunks):
    x_src = randn(gen, 8, 4, device=device)
    x_dst = randn(gen, 10, 4, device=device)
    src = rand_index(gen, 8, (40,), torch.int64, device)
    pos = rand_index(gen, 10, (40,), torch.int64, device)
    cand = rand_index(gen, 10, (40, 3), torch.int64, device)
    cand[27, 2] = 10   # in the 10th chunk of 3 rows
    src[33] = -2
    out, first_bad = fallback_score(x_src, x_dst, src, cand)
    assert first_bad.tolist() == [27]
    assert torch.isnan(out[27, 2]) and torch.isnan(out[33]).all()
    assert int(torch.isnan(out).sum()) == 4
    rank, first_bad = fallback_rank(x_src, x_dst, src, pos, cand)
    assert first_bad.tolist() == [27]
    assert torch.isnan(rank[[27, 33]]).all() and int(torch.isnan(rank).sum()) == 2
    # A side with no rows: every row is bad.
    out, first_bad = fallback_score(x_src, x_dst[:0], src, cand)
    assert first_bad.tolist() == [0] and torch.isnan(out).all()
    rank, first_bad = fallback_rank(x_src[:0], x_dst, src, pos, cand)
    assert first_bad.tolist() == [0] and torch.isnan(rank).all()

