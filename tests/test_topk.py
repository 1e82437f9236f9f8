"""topk_dst: against a dense reference (the full float64 score matrix, the exclusion mask, a
stable descending sort), on both implementations (the registered op: the C++ kernel on the
CPU; and the pure-PyTorch fallback, called directly with tiny tiles so that ties and
exclusions cross tile boundaries); padding, empty inputs, ties, NaN, layouts, PyG's link
prediction metrics, opcheck, torch.compile and bad input."""
import warnings

import pytest
import torch

from pyg_edgedot import topk_dst
from pyg_edgedot.ops import _chunked, topk as topk_mod
from _helpers import (DEVICES, FLOAT_DTYPES, INDEX_DTYPES, LOW_PRECISION, TOL, _expect,
                      cpp_kernel_on_cpu, dtype_id, randn, script_result)

BACKENDS = ["op", "fallback"]
OP = torch.ops.pyg_edgedot.topk_dst.default


@pytest.fixture
def tiny_tiles(monkeypatch):
    """The fallback in tiles of 7 destinations and a few source rows."""
    monkeypatch.setattr(topk_mod, "DST_TILE", 7)
    monkeypatch.setattr(_chunked, "DEFAULT_CHUNK_ELEMS", 200)


def run(backend, x_src, x_dst, k, src_index=None, exclude=None, sorted=True):
    """``topk_dst`` through the registered op, or the fallback called directly (the same CSR
    of ``exclude`` the public function builds)."""
    if backend == "op":
        return topk_dst(x_src, x_dst, k, src_index=src_index, exclude=exclude, sorted=sorted)
    if src_index is None:
        src_index = torch.arange(x_src.size(0), device=x_src.device)
    ptr, dst = topk_mod.exclude_csr("topk_dst", exclude, x_src, x_dst)
    scores, index, first_bad = topk_mod.fallback_impls()["topk_dst"](
        x_src, x_dst, src_index, ptr, dst, k, sorted)
    assert first_bad.tolist() == [-1]
    return scores, index


def int_features(gen, rows, cols, dtype, device, low=-3, high=4):
    """Small integers: every score is exact in float32 and in the input dtype, and ties are
    frequent."""
    x = torch.randint(low, high, (rows, cols), generator=gen, dtype=torch.int64)
    return x.to(dtype).to(device)


def random_pairs(gen, num_src, num_dst, count, dtype=torch.int64, device="cpu"):
    src = torch.randint(0, num_src, (count,), generator=gen)
    dst = torch.randint(0, num_dst, (count,), generator=gen)
    return torch.stack([src, dst]).to(dtype).to(device)


def dense_reference(x_src, x_dst, k, src_index=None, exclude=None):
    """``(index [N, k], score [N, N_dst])``: the full float64 score matrix of the same inputs,
    excluded pairs masked, a stable descending sort (NaN as -inf; ties keep the lower index)
    with the excluded entries last, cut to k and padded with N_dst."""
    xs, xd = x_src.detach().cpu().double(), x_dst.detach().cpu().double()
    num_src, num_dst = xs.size(0), xd.size(0)
    src = torch.arange(num_src) if src_index is None else src_index.cpu().long()
    score = xs[src] @ xd.t()
    excluded = torch.zeros(num_src, num_dst, dtype=torch.bool)
    if exclude is not None:
        ex = exclude.as_tensor() if hasattr(exclude, "as_tensor") else exclude
        ex = ex.cpu().long()
        excluded[ex[0], ex[1]] = True
    allowed = ~excluded[src]
    key = torch.where(torch.isnan(score), float("-inf"), score)
    order = torch.sort(key, dim=1, descending=True, stable=True).indices
    by_allowed = torch.sort(allowed.gather(1, order).to(torch.uint8), dim=1, descending=True,
                            stable=True).indices
    order = order.gather(1, by_allowed)
    index = torch.where(allowed.gather(1, order), order, num_dst)[:, :k]
    if index.size(1) < k:
        pad = torch.full((index.size(0), k - index.size(1)), num_dst, dtype=torch.int64)
        index = torch.cat([index, pad], 1)
    return index, score


def check(scores, index, x_src, x_dst, k, src_index=None, exclude=None, exact=True,
          tol=0.0, sorted=True):
    """Compares with :func:`dense_reference`: the same indices (``exact``), or the same up to
    swaps of entries whose float64 scores are within ``tol``; the scores are the reference's
    rounded to the input dtype (exactly for ``exact``); padding is ``(N_dst, -inf)``."""
    num_rows = x_src.size(0) if src_index is None else src_index.size(0)
    num_dst = x_dst.size(0)
    assert index.shape == (num_rows, k) and scores.shape == (num_rows, k)
    assert index.dtype == torch.int64 and scores.dtype == x_src.dtype
    assert index.device == x_src.device and scores.device == x_src.device
    assert not scores.requires_grad and not index.requires_grad
    ref_index, ref_score = dense_reference(x_src, x_dst, k, src_index, exclude)
    index, scores = index.cpu(), scores.cpu()
    if not sorted:
        # any order of the same set: compare both in ascending index order (padding last)
        order = torch.argsort(index, dim=1, stable=True)
        index, scores = index.gather(1, order), scores.gather(1, order)
        ref_index = torch.sort(ref_index, dim=1).values
    pad = index == num_dst
    if exact:
        assert torch.equal(index, ref_index), f"indices differ:\n{index}\n{ref_index}"
    else:
        diff = index != ref_index
        assert not bool((diff & (pad | (ref_index == num_dst))).any()), "padding differs"
        got = ref_score.gather(1, index.clamp(max=num_dst - 1))
        want = ref_score.gather(1, ref_index.clamp(max=num_dst - 1))
        gap = (got - want).abs()[diff]
        assert bool((gap <= tol).all()), f"a swap of scores {gap.max()} apart (tol {tol})"
    # no excluded pair, no repeated destination in a row
    if exclude is not None:
        ex = exclude.as_tensor() if hasattr(exclude, "as_tensor") else exclude
        src = torch.arange(x_src.size(0)) if src_index is None else src_index.cpu().long()
        excluded = set(zip(ex[0].cpu().tolist(), ex[1].cpu().tolist()))
        for n, row in enumerate(index.tolist()):
            assert not any((int(src[n]), j) in excluded for j in row if j != num_dst)
    for row in index.tolist():
        real = [j for j in row if j != num_dst]
        assert len(set(real)) == len(real)
    assert bool(torch.isneginf(scores[pad]).all()), "padding scores must be -inf"
    if num_dst and bool((~pad).any()):
        expected = ref_score.gather(1, index.clamp(max=num_dst - 1))[~pad]
        got = scores[~pad].double()
        if exact:
            same = (got == expected.to(x_src.dtype).double()) | (got.isnan() & expected.isnan())
            assert bool(same.all()), f"scores differ:\n{got}\n{expected}"
        else:   # float16 / bfloat16: the rounding of the output dominates
            low = x_src.dtype in LOW_PRECISION
            rtol, atol = (TOL[x_src.dtype],) * 2 if low else (1e-5, 1e-4)
            torch.testing.assert_close(got, expected, rtol=rtol, atol=atol)


# (N_src, N_dst, D, k, E)
SHAPES = [
    (6, 9, 1, 3, 0),          # D = 1, nothing excluded
    (13, 40, 5, 7, 60),       # odd D
    (11, 37, 3, 40, 100),     # k > N_dst: padding in every row
    (8, 30, 33, 30, 200),     # k = N_dst with exclusion: padding after the survivors
    (21, 1100, 7, 20, 3000),  # N_dst over one C++ tile (1024)
]
SHAPE_IDS = [f"ns{a}-nd{b}-d{c}-k{k}-e{e}" for a, b, c, k, e in SHAPES]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_integer_features_match_dense_reference(shape, dtype, index_dtype, backend, device, gen,
                                                tiny_tiles):
    num_src, num_dst, dim, k, num_excl = shape
    x_src = int_features(gen, num_src, dim, dtype, device)
    x_dst = int_features(gen, num_dst, dim, dtype, device)
    exclude = random_pairs(gen, num_src, num_dst, num_excl, index_dtype, device)
    src_index = torch.randint(0, num_src, (17,), generator=gen).to(index_dtype).to(device)
    for ex in (None, exclude):
        scores, index = run(backend, x_src, x_dst, k, exclude=ex)
        check(scores, index, x_src, x_dst, k, exclude=ex)
        scores, index = run(backend, x_src, x_dst, k, src_index=src_index, exclude=ex)
        check(scores, index, x_src, x_dst, k, src_index=src_index, exclude=ex)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=dtype_id)
@pytest.mark.parametrize("shape", [(30, 200, 16, 10, 500), (25, 2100, 64, 20, 4000)],
                         ids=["small", "over-two-tiles"])
def test_random_features_match_dense_reference(shape, dtype, backend, device, gen, tiny_tiles):
    # Random scores: the float32 sums of the implementation and the float64 reference may
    # order two scores within rounding differently; any other difference fails.
    num_src, num_dst, dim, k, num_excl = shape
    x_src = randn(gen, num_src, dim, dtype=dtype, device=device)
    x_dst = randn(gen, num_dst, dim, dtype=dtype, device=device)
    exclude = random_pairs(gen, num_src, num_dst, num_excl, torch.int64, device)
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    for ex in (None, exclude):
        scores, index = run(backend, x_src, x_dst, k, exclude=ex)
        check(scores, index, x_src, x_dst, k, exclude=ex, exact=False, tol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_all_scores_tie_lower_index_first(dtype, backend, device, gen, tiny_tiles):
    # Every score is the same: the answer is the lowest indices not excluded, across the
    # fallback's tiles of 7 and the C++ kernel's tiles of 1024.
    num_dst = 2500
    x_src = torch.ones(3, 4, dtype=dtype, device=device)
    x_dst = torch.ones(num_dst, 4, dtype=dtype, device=device)
    exclude = torch.tensor([[0, 0, 0, 1, 1, 2], [0, 2, 5, 1, 1, 3]], device=device)
    scores, index = run(backend, x_src, x_dst, 6, exclude=exclude)
    assert index.tolist() == [[1, 3, 4, 6, 7, 8], [0, 2, 3, 4, 5, 6], [0, 1, 2, 4, 5, 6]]
    assert bool((scores == 4).all())
    # ties among the best across a tile boundary: the best score sits at 1023 and 1030..
    x_dst = torch.zeros(num_dst, 4, dtype=dtype, device=device)
    best = [2400, 1030, 1023, 1024, 6, 2]
    x_dst[best] = 1
    scores, index = run(backend, x_src, x_dst, 8, exclude=exclude)
    assert index[0].tolist() == [6, 1023, 1024, 1030, 2400, 1, 3, 4]    # 0, 2, 5 excluded
    assert index[1].tolist() == [2, 6, 1023, 1024, 1030, 2400, 0, 3]    # 1 excluded
    assert scores[0].tolist() == [4, 4, 4, 4, 4, 0, 0, 0]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_padding_when_fewer_than_k_remain(backend, device, tiny_tiles):
    x_src = torch.tensor([[1.0], [2.0], [-1.0]], device=device)
    x_dst = torch.tensor([[3.0], [1.0], [2.0], [-5.0]], device=device)
    # source 0 keeps 1 and 3; source 1 everything excluded; source 2 keeps all four
    exclude = torch.tensor([[0, 0, 1, 1, 1, 1, 1], [0, 2, 0, 1, 2, 3, 3]], device=device)
    scores, index = run(backend, x_src, x_dst, 6, exclude=exclude)
    inf = float("-inf")
    assert index.tolist() == [[1, 3, 4, 4, 4, 4], [4, 4, 4, 4, 4, 4], [3, 1, 2, 0, 4, 4]]
    assert scores.tolist() == [[1, -5, inf, inf, inf, inf], [inf] * 6, [5, -1, -2, -3, inf, inf]]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_inputs(backend, device, gen):
    x_src = randn(gen, 5, 3, device=device)
    x_dst = randn(gen, 8, 3, device=device)
    empty_src = torch.empty(0, dtype=torch.int64, device=device)
    scores, index = run(backend, x_src, x_dst, 4, src_index=empty_src)
    assert scores.shape == (0, 4) and index.shape == (0, 4)
    scores, index = run(backend, x_src, x_dst, 0)
    assert scores.shape == (5, 0) and index.shape == (5, 0)
    # E = 0 is no exclusion
    no_edges = torch.empty(2, 0, dtype=torch.int64, device=device)
    s1, i1 = run(backend, x_src, x_dst, 4, exclude=no_edges)
    s2, i2 = run(backend, x_src, x_dst, 4)
    assert torch.equal(i1, i2) and torch.equal(s1, s2)
    # no destinations: all padding; no sources
    scores, index = run(backend, x_src, x_dst[:0], 3)
    assert index.tolist() == [[0, 0, 0]] * 5 and bool(torch.isneginf(scores).all())
    scores, index = run(backend, x_src[:0], x_dst, 3)
    assert scores.shape == (0, 3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_duplicates_unsorted_and_edge_index(backend, device, gen, tiny_tiles):
    from torch_geometric import EdgeIndex
    x_src = int_features(gen, 9, 4, torch.float32, device)
    x_dst = int_features(gen, 50, 4, torch.float32, device)
    exclude = random_pairs(gen, 9, 50, 120, torch.int64, device)
    doubled = torch.cat([exclude, exclude.flip(1), exclude[:, :40]], 1)   # repeats, any order
    expected = run(backend, x_src, x_dst, 12, exclude=exclude)
    for ex in (doubled, EdgeIndex(doubled, sparse_size=(9, 50))):
        scores, index = run(backend, x_src, x_dst, 12, exclude=ex)
        assert torch.equal(index, expected[1]) and torch.equal(scores, expected[0])
        check(scores, index, x_src, x_dst, 12, exclude=doubled)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["col_strided", "row_step", "expanded_src"])
def test_non_contiguous_inputs(layout, backend, device, gen, tiny_tiles):
    x_src = int_features(gen, 10, 6, torch.float32, device)
    x_dst = int_features(gen, 40, 6, torch.float32, device)
    exclude = random_pairs(gen, 10, 40, 80, torch.int64, device)
    src_index = torch.randint(0, 10, (24,), generator=gen).to(device)
    if layout == "col_strided":
        xs, xd = x_src.t().contiguous().t(), x_dst.t().contiguous().t()
        assert xs.stride() == (1, 10)
    elif layout == "row_step":
        xs = torch.stack([x_src, x_src], 1).view(20, 6)[::2]
        xd = torch.stack([x_dst, x_dst], 1).view(80, 6)[::2]
        assert xd.stride() == (12, 1)
    else:
        xs, xd = x_src[:1].expand(10, 6), x_dst
        x_src = xs.contiguous()
    src_strided = torch.stack([src_index, src_index], 1)[:, 0]
    ex_strided = exclude.t().contiguous().t()
    assert not src_strided.is_contiguous() and not ex_strided.is_contiguous()
    scores, index = run(backend, xs, xd, 9, src_index=src_strided, exclude=ex_strided)
    check(scores, index, x_src, x_dst, 9, src_index=src_index, exclude=exclude)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_unsorted_returns_the_same_set(backend, device, gen, tiny_tiles):
    x_src = int_features(gen, 12, 5, torch.float32, device)
    x_dst = int_features(gen, 60, 5, torch.float32, device)
    exclude = random_pairs(gen, 12, 60, 150, torch.int64, device)
    scores, index = run(backend, x_src, x_dst, 15, exclude=exclude, sorted=False)
    check(scores, index, x_src, x_dst, 15, exclude=exclude, sorted=False)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_nan_scores_rank_as_minus_inf(dtype, backend, device, tiny_tiles):
    # a NaN score is returned (as NaN) only where it ranks: below every number, ties by index
    # (float16 / bfloat16 on CUDA: the tensor cores' NaN and inf, 0 * inf and NaN * 0 included)
    x_src = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=dtype, device=device)
    x_dst = torch.tensor([[1.0, float("nan")], [-1.0, 0.0], [float("-inf"), 0.0], [2.0, 3.0]],
                         dtype=dtype, device=device)
    scores, index = run(backend, x_src, x_dst, 4)
    # source 0 scores: nan, -1, -inf, 2 ; source 1: nan, 0, nan (0 * -inf), 3
    assert index.tolist() == [[3, 1, 0, 2], [3, 1, 0, 2]]
    s = scores.cpu()
    assert s[0, :2].tolist() == [2, -1] and s[0, 2].isnan() and s[0, 3] == float("-inf")
    assert s[1, :2].tolist() == [3, 0] and s[1, 2:].isnan().all()
    check(scores, index, x_src, x_dst, 4)


@pytest.mark.parametrize("device", DEVICES)
def test_cpp_kernel_and_fallback_agree(device, gen, tiny_tiles):
    x_src = int_features(gen, 70, 16, torch.bfloat16, device, -8, 9)
    x_dst = int_features(gen, 3000, 16, torch.bfloat16, device, -8, 9)
    exclude = random_pairs(gen, 70, 3000, 20000, torch.int32, device)
    src_index = torch.randint(0, 70, (90,), generator=gen).to(torch.int32).to(device)
    for k in (1, 25, 300):
        got = run("op", x_src, x_dst, k, src_index=src_index, exclude=exclude)
        expected = run("fallback", x_src, x_dst, k, src_index=src_index, exclude=exclude)
        assert torch.equal(got[1], expected[1]) and torch.equal(got[0], expected[0])


_SCAN_SCRIPT = """
import sys, torch, pyg_edgedot
gen = torch.Generator().manual_seed(5)
x_src = torch.randint(-8, 9, (70, 16), generator=gen).float()
x_dst = torch.randint(-8, 9, (3000, 16), generator=gen).float()
exclude = torch.stack([torch.randint(0, 70, (20000,), generator=gen),
                       torch.randint(0, 3000, (20000,), generator=gen)])
torch.save([pyg_edgedot.topk_dst(x_src, x_dst, k, exclude=exclude) for k in (1, 25, 300)],
           sys.argv[1])
"""


def test_cpu_scan_without_avx2_gives_the_same_topk(tmp_path):
    """The C++ kernel's float32 scan compares sixteen scores at a time with AVX2 where the CPU
    has it, unless PYG_EDGEDOT_CPU_AVX2=0 (as the scoring loops): both find the same top k
    (on a CPU without AVX2 both runs take the baseline scan)."""
    if not cpp_kernel_on_cpu(topk_mod.NAME):
        pytest.skip("needs the C++ CPU kernel")
    results = [script_result(_SCAN_SCRIPT, tmp_path / f"avx2_{avx2}.pt",
                             {"PYG_EDGEDOT_CPU_AVX2": avx2}) for avx2 in ("1", "0")]
    for (s1, i1), (s0, i0) in zip(*results):
        assert i1.size(1) > 0 and torch.equal(i1, i0) and torch.equal(s1, s0)


# ---- the CUDA kernel's paths: tiles of 64 sources x 64 destinations, k <= 128 and D <= 256
# fused (float32 SIMT FMAs; float16 / bfloat16 tensor cores, D padded to 16), the rest
# (float64, larger k or D) at::mm + sorts ----

HAS_CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="CUDA is not available")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("k", [1, 20, 64, 128, 129, 300])
def test_ties_across_cuda_tiles(k, dtype, device, gen):
    # 150 sources (three row tiles of 64, the last partial) x 700 destinations (tiles of 64,
    # the last partial); a few scores tie at the tile edges (63 | 64, 127 | 128, 639 | 640),
    # the rest are small integers that tie often. k = 128 is the fused cap, 129 and 300 the
    # other path.
    num_src, num_dst, dim = 150, 700, 9
    x_src = int_features(gen, num_src, dim, dtype, device, -2, 3)
    x_dst = int_features(gen, num_dst, dim, dtype, device, -2, 3)
    x_dst[[63, 64, 127, 128, 639, 640, 699]] = 2
    x_src[::7] = 2
    exclude = random_pairs(gen, num_src, num_dst, 4000, torch.int64, device)
    exclude = torch.cat([exclude, torch.tensor([[0, 0, 7, 14], [64, 127, 63, 640]],
                                               device=device)], 1)
    src_index = torch.randint(0, num_src, (200,), generator=gen).to(device)
    for ex in (None, exclude):
        scores, index = topk_dst(x_src, x_dst, k, exclude=ex)
        check(scores, index, x_src, x_dst, k, exclude=ex)
        scores, index = topk_dst(x_src, x_dst, k, src_index=src_index, exclude=ex)
        check(scores, index, x_src, x_dst, k, src_index=src_index, exclude=ex)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim", [1, 31, 33, 64, 100, 256, 257, 300])
def test_feature_dims_around_cuda_slices(dim, device, gen):
    # D staged 32 features at a time (partial slices), fused up to 256, at::mm above
    x_src = int_features(gen, 70, dim, torch.float32, device, -1, 2)
    x_dst = int_features(gen, 200, dim, torch.float32, device, -1, 2)
    exclude = random_pairs(gen, 70, 200, 500, torch.int32, device)
    scores, index = topk_dst(x_src, x_dst, 10, exclude=exclude)
    check(scores, index, x_src, x_dst, 10, exclude=exclude)


@pytest.mark.parametrize("device", DEVICES)
def test_every_destination_excluded_or_left_over(device, gen):
    # k = N_dst - excluded exactly, and a source with every destination excluded, across
    # destination tiles: the list's empty slots become padding.
    num_dst = 150
    x_src = int_features(gen, 3, 4, torch.float32, device)
    x_dst = int_features(gen, num_dst, 4, torch.float32, device)
    all_dst = torch.arange(num_dst)
    some = torch.arange(0, num_dst, 3)
    exclude = torch.cat([torch.stack([torch.zeros_like(all_dst), all_dst]),
                         torch.stack([torch.ones_like(some), some])], 1).to(device)
    left = num_dst - some.numel()
    for k in (left, left + 5, 200):
        scores, index = topk_dst(x_src, x_dst, k, exclude=exclude)
        check(scores, index, x_src, x_dst, k, exclude=exclude)
        assert bool((index[0] == num_dst).all())


@pytest.mark.parametrize("device", DEVICES)
def test_bad_source_rows_are_padding(device, gen):
    # the op itself: a row out of range is padding and reported, never read, on every path
    x_src, x_dst = randn(gen, 5, 3, device=device), randn(gen, 80, 3, device=device)
    src = torch.tensor([0, 7, 4, -1, 2, 5], device=device)
    ptr, dst = topk_mod.exclude_csr("topk_dst", random_pairs(gen, 5, 80, 30, device=device),
                                    x_src, x_dst)
    for k in (3, 150):    # the fused path and the other one
        scores, index, first_bad = OP(x_src, x_dst, src, ptr, dst, k, True)
        assert first_bad.tolist() == [1]
        bad = torch.tensor([1, 3, 5])
        assert bool((index[bad] == 80).all()) and bool(torch.isneginf(scores[bad]).all())
        good = OP(x_src, x_dst, src[[0, 2, 4]], ptr, dst, k, True)
        # the same rows alone: scores to rounding (the fallback's mm is not batch-invariant)
        assert torch.equal(good[1], index[[0, 2, 4]])
        torch.testing.assert_close(good[0], scores[[0, 2, 4]])
    for k in (0, 2):
        assert OP(x_src, x_dst, src, ptr, dst, k, True)[2].tolist() == [1]
    _expect(IndexError, "topk_dst", ["src_index", "position 1", "7"],
            lambda: topk_dst(x_src, x_dst, 2, src_index=src))


@pytest.mark.parametrize("device", DEVICES)
def test_malformed_csr_stays_in_bounds(device, gen):
    x_src, x_dst = randn(gen, 5, 3, device=device), randn(gen, 80, 3, device=device)
    src = torch.arange(5, device=device)
    ptr = torch.tensor([0, 100, -5, 2, 2, 7], device=device)
    dst = torch.tensor([9, -3, 1, 0, 50], device=device)
    for k in (8, 200):
        scores, index, first_bad = OP(x_src, x_dst, src, ptr, dst, k, True)
        assert index.shape == (5, k) and first_bad.tolist() == [-1]
        assert bool(((index >= 0) & (index <= 80)).all())


@needs_cuda
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
def test_cuda_kernel_matches_cpu_kernel(index_dtype, dtype, gen):
    # integer features: every score is exact, so both kernels return the same bits
    x_src = int_features(gen, 300, 24, dtype, "cpu", -4, 5)
    x_dst = int_features(gen, 2000, 24, dtype, "cpu", -4, 5)
    exclude = random_pairs(gen, 300, 2000, 30000, index_dtype)
    src_index = torch.randint(0, 300, (333,), generator=gen).to(index_dtype)
    for k in (1, 20, 128, 129, 500):
        expected = topk_dst(x_src, x_dst, k, src_index=src_index, exclude=exclude)
        got = topk_dst(x_src.cuda(), x_dst.cuda(), k, src_index=src_index.cuda(),
                       exclude=exclude.cuda())
        assert torch.equal(got[1].cpu(), expected[1]) and torch.equal(got[0].cpu(), expected[0])


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_cuda_random_features_large(dtype, gen):
    # several waves of row tiles and many destination tiles, against the fallback (tolerance:
    # the two sum in different orders)
    x_src = randn(gen, 5000, 64, dtype=dtype, device="cuda")
    x_dst = randn(gen, 20000, 64, dtype=dtype, device="cuda")
    exclude = random_pairs(gen, 5000, 20000, 100000, torch.int64, "cuda")
    scores, index = topk_dst(x_src, x_dst, 20, exclude=exclude)
    ptr, dst = topk_mod.exclude_csr("topk_dst", exclude, x_src, x_dst)
    ref_scores, ref_index, _ = topk_mod.fallback_impls()["topk_dst"](
        x_src, x_dst, torch.arange(5000, device="cuda"), ptr, dst, 20, True)
    same = (index == ref_index).float().mean().item()
    assert same > 0.99, same
    torch.testing.assert_close(scores.float(), ref_scores.float(), rtol=1e-2, atol=1e-2)
    # no excluded pair returned, rows strictly ordered
    keys = set((exclude[0] * 20000 + exclude[1]).tolist())
    got = (torch.arange(5000, device="cuda").unsqueeze(1) * 20000 + index).flatten().tolist()
    assert not keys & set(got)


@needs_cuda
@pytest.mark.parametrize("dim", [8, 24, 40, 64, 72, 100, 256])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("sizes", [(150, 1037), (70, 65), (1, 5)],
                         ids=["partial-tiles", "one-past-a-tile", "within-a-tile"])
def test_cuda_tensor_core_tiles(sizes, dtype, dim, gen):
    # The tensor-core product: D padded to 16 (D % 16 = 8 for 8, 24, 40, 72; cp.async copies
    # for D % 8 = 0, plain loads for 100), source and destination tiles cut by the edges, k up
    # to the cap, subsets of sources. Small integers: every product and partial sum is exact,
    # so indices and scores equal the float64 reference's, ties by the lower index included.
    num_src, num_dst = sizes
    x_src = int_features(gen, num_src, dim, dtype, "cuda", -2, 3)
    x_dst = int_features(gen, num_dst, dim, dtype, "cuda", -2, 3)
    exclude = random_pairs(gen, num_src, num_dst, 3 * num_src, torch.int64, "cuda")
    for index_dtype in INDEX_DTYPES:
        src_index = torch.randint(0, num_src, (97,), generator=gen).to(index_dtype).cuda()
        for k in (1, 20, 127, 128):
            for ex in (None, exclude):
                scores, index = topk_dst(x_src, x_dst, k, src_index=src_index, exclude=ex)
                check(scores, index, x_src, x_dst, k, src_index=src_index, exclude=ex)
    scores, index = topk_dst(x_src, x_dst, 128, exclude=exclude)
    check(scores, index, x_src, x_dst, 128, exclude=exclude)
    # rows out of range are padding (the op itself; the public function raises)
    src = torch.tensor([0, -1, num_src - 1, num_src], device="cuda")
    ptr, dst = topk_mod.exclude_csr("topk_dst", exclude, x_src, x_dst)
    scores, index, first_bad = OP(x_src, x_dst, src, ptr, dst, 20, True)
    assert first_bad.tolist() == [1]
    assert bool((index[[1, 3]] == num_dst).all()) and bool(torch.isneginf(scores[[1, 3]]).all())
    check(scores[[0, 2]], index[[0, 2]], x_src, x_dst, 20, src_index=src[[0, 2]],
          exclude=exclude)


@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("layout", ["offset", "offset16", "odd_stride", "row_step", "expanded"])
def test_cuda_tensor_core_layouts(layout, dtype, gen):
    # x_dst's rows are copied 16 bytes at a time only when D, the row stride and the pointer
    # allow it: a pointer 2 bytes off ("offset") or a row stride of 67 take plain loads; 16
    # bytes off, every other row ("row_step") and a row stride of 0 ("expanded") the copies.
    # The same results as contiguous inputs.
    dim, num_dst = 64, 300
    wide = int_features(gen, 2 * num_dst, dim + 8, dtype, "cuda", -2, 3)   # rows of 144 bytes
    if layout == "offset":
        x_dst = wide[:num_dst, 1:dim + 1]
    elif layout == "offset16":
        x_dst = wide[:num_dst, 8:]
    elif layout == "odd_stride":
        x_dst = int_features(gen, num_dst, dim + 3, dtype, "cuda", -2, 3)[:, :dim]
    elif layout == "row_step":
        x_dst = wide[::2, :dim]
    else:
        x_dst = wide[:1, :dim].expand(num_dst, dim)
    x_src = int_features(gen, 90, dim + 1, dtype, "cuda", -2, 3)[:, 1:]
    exclude = random_pairs(gen, 90, num_dst, 400, torch.int64, "cuda")
    scores, index = topk_dst(x_src, x_dst, 20, exclude=exclude)
    check(scores, index, x_src, x_dst, 20, exclude=exclude)
    expected = topk_dst(x_src.contiguous(), x_dst.contiguous(), 20, exclude=exclude)
    assert torch.equal(index, expected[1]) and torch.equal(scores, expected[0])


@needs_cuda
@pytest.mark.parametrize("dim", [13, 64, 200])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=dtype_id)
def test_cuda_tensor_core_random_features(dtype, dim, gen):
    # Random scores: the tensor cores' fp32 sums against the float64 reference of the same
    # inputs, the same indices wherever two scores are more than tol apart (a wrong tile is off
    # by far more), scores to the dtype's rounding; the same bits on a second run.
    num_src, num_dst = 200, 3005
    x_src = randn(gen, num_src, dim, dtype=dtype, device="cuda")
    x_dst = randn(gen, num_dst, dim, dtype=dtype, device="cuda")
    exclude = random_pairs(gen, num_src, num_dst, 20000, torch.int64, "cuda")
    src_index = torch.randint(0, num_src, (150,), generator=gen).cuda()
    for k in (20, 128):
        scores, index = topk_dst(x_src, x_dst, k, src_index=src_index, exclude=exclude)
        check(scores, index, x_src, x_dst, k, src_index=src_index, exclude=exclude,
              exact=False, tol=1e-3)
        again = topk_dst(x_src, x_dst, k, src_index=src_index, exclude=exclude)
        assert torch.equal(again[1], index) and torch.equal(again[0], scores)


@pytest.mark.parametrize("device", DEVICES)
def test_not_differentiable(device, gen):
    x_src = randn(gen, 6, 4, device=device).requires_grad_()
    x_dst = randn(gen, 9, 4, device=device).requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scores, index = topk_dst(x_src, x_dst, 3)
        empty = torch.empty(0, dtype=torch.int64, device=device)
        out = OP(x_src, x_dst, torch.arange(6, device=device), empty, empty, 3, True)
    assert not scores.requires_grad and not index.requires_grad
    assert not any(t.requires_grad for t in out)
    assert torch.equal(out[1], index) and torch.equal(out[0], scores.detach())


def test_meta_shapes():
    x_src = torch.empty(7, 5, device="meta")
    x_dst = torch.empty(11, 5, device="meta")
    scores, index = topk_dst(x_src, x_dst, 4, exclude=torch.zeros(2, 3, dtype=torch.int64,
                                                                   device="meta"))
    assert scores.shape == (7, 4) and index.shape == (7, 4) and index.dtype == torch.int64


# ---- PyG's link prediction metrics ----------------------------------------------------------

def _recall_by_hand(index, labels, num_rows):
    hits, rows = 0.0, 0
    for n in range(num_rows):
        truth = {int(d) for s, d in labels.t().tolist() if s == n}
        if truth:
            hits += len(truth & set(index[n].tolist())) / len(truth)
            rows += 1
    return hits / rows


@pytest.mark.parametrize("backend", BACKENDS)
def test_plugs_into_linkpred_recall(backend, gen, tiny_tiles):
    from torch_geometric.metrics import LinkPredNDCG, LinkPredRecall
    num_src, num_dst, k = 20, 30, 10
    x_src = int_features(gen, num_src, 6, torch.float32, "cpu")
    x_dst = int_features(gen, num_dst, 6, torch.float32, "cpu")
    train = random_pairs(gen, num_src, num_dst, 150)
    test = random_pairs(gen, num_src, num_dst, 80)
    seen = {tuple(p) for p in train.t().tolist()}
    test = test[:, torch.tensor([tuple(p) not in seen for p in test.t().tolist()])]
    test = torch.unique(test, dim=1)   # PyG counts a repeated label twice
    # source 3 has only 2 destinations left, so its row is padded; source 2's label is the
    # largest destination (a -1 in row 3 would be read as that pair by PyG and count as a hit)
    train = train[:, (train[0] != 3) & ~((train[0] == 2) & (train[1] == num_dst - 1))]
    train = torch.cat([train, torch.stack([torch.full((28,), 3), torch.arange(28)])], 1)
    test = test[:, test[0] != 3]
    test = torch.cat([test, torch.tensor([[2, 3], [num_dst - 1, 28]])], 1)
    _, index = run(backend, x_src, x_dst, k, exclude=train)
    assert index[3, 2:].eq(num_dst).all() and not index[3, :2].eq(num_dst).any()
    ref_index, _ = dense_reference(x_src, x_dst, k, exclude=train)
    for metric_type in (LinkPredRecall, LinkPredNDCG):
        got, ref = metric_type(k), metric_type(k)
        got.update(index, test)
        ref.update(ref_index, test)
        assert torch.equal(got.compute(), ref.compute())
    recall = LinkPredRecall(k)
    recall.update(index, test)
    assert recall.compute().item() == pytest.approx(_recall_by_hand(index, test, num_src))
    # what -1 padding would have done: a false hit in row 3
    minus_one = index.masked_fill(index == num_dst, -1)
    wrong = LinkPredRecall(k)
    wrong.update(minus_one, test)
    assert wrong.compute().item() > recall.compute().item()


# ---- opcheck, torch.compile -----------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
def test_opcheck(index_dtype, device, gen):
    x_src = randn(gen, 9, 5, device=device).requires_grad_()
    x_dst = randn(gen, 14, 5, device=device).requires_grad_()
    src_index = torch.randint(0, 9, (11,), generator=gen).to(index_dtype).to(device)
    exclude = random_pairs(gen, 9, 14, 30, torch.int64, device)
    ptr, dst = topk_mod.exclude_csr("topk_dst", exclude, x_src, x_dst)
    empty = torch.empty(0, dtype=torch.int64, device=device)
    torch.library.opcheck(OP, (x_src, x_dst, src_index, ptr, dst, 4, True))
    torch.library.opcheck(OP, (x_src, x_dst, src_index, empty, empty, 20, False))
    torch.library.opcheck(OP, (x_src.detach(), x_dst.detach(), src_index[:0], ptr, dst, 3, True))
    torch.library.opcheck(OP, (x_src.detach(), x_dst.detach(), src_index, ptr, dst, 0, True))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph(device, gen, fresh_dynamo):
    def recommend(x_src, x_dst, src_index, exclude):
        scores, index = topk_dst(x_src, x_dst, 5, src_index=src_index, exclude=exclude)
        return scores * 2, index

    compiled = torch.compile(recommend, fullgraph=True)
    x_src = int_features(gen, 10, 8, torch.float32, device)
    x_dst = int_features(gen, 40, 8, torch.float32, device)
    src_index = torch.randint(0, 10, (13,), generator=gen).to(device)
    exclude = random_pairs(gen, 10, 40, 60, torch.int64, device)
    got, expected = compiled(x_src, x_dst, src_index, exclude), recommend(x_src, x_dst,
                                                                         src_index, exclude)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    check(got[0] / 2, got[1], x_src, x_dst, 5, src_index=src_index, exclude=exclude)
    # Inside the graph exclude is not read back: an entry out of range is ignored (eagerly it
    # raises, see test_bad_input).
    bad = exclude.clone()
    bad[1, 0] = 40
    got = compiled(x_src, x_dst, src_index, bad)
    expected = recommend(x_src, x_dst, src_index, exclude[:, 1:])
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


# ---- bad input ------------------------------------------------------------------------------

def test_bad_input(gen):
    x_src, x_dst = randn(gen, 5, 3), randn(gen, 8, 3)
    ex = torch.tensor([[0, 1], [2, 3]])
    _expect(ValueError, "topk_dst", ["k", ">= 0"], lambda: topk_dst(x_src, x_dst, -1))
    _expect(TypeError, "topk_dst", ["k"], lambda: topk_dst(x_src, x_dst, 2.0))
    _expect(TypeError, "topk_dst", ["k"], lambda: topk_dst(x_src, x_dst, True))
    _expect(ValueError, "topk_dst", ["k", "2**63"], lambda: topk_dst(x_src, x_dst, 2 ** 63))
    _expect(ValueError, "topk_dst", ["feature dimension"],
            lambda: topk_dst(x_src, randn(gen, 8, 4), 2))
    _expect(TypeError, "topk_dst", ["dtype"], lambda: topk_dst(x_src, x_dst.double(), 2))
    _expect(TypeError, "topk_dst", ["x_src"], lambda: topk_dst(x_src.long(), x_dst.long(), 2))
    _expect(ValueError, "topk_dst", ["x_dst", "2-D"], lambda: topk_dst(x_src, x_dst[0], 2))
    _expect(TypeError, "topk_dst", ["x_src"], lambda: topk_dst(None, x_dst, 2))
    _expect(TypeError, "topk_dst", ["src_index"],
            lambda: topk_dst(x_src, x_dst, 2, src_index=[0, 1]))
    _expect(TypeError, "topk_dst", ["src_index", "int64 or int32"],
            lambda: topk_dst(x_src, x_dst, 2, src_index=torch.zeros(3)))
    _expect(ValueError, "topk_dst", ["src_index"],
            lambda: topk_dst(x_src, x_dst, 2, src_index=torch.zeros(3, 1, dtype=torch.long)))
    _expect(IndexError, "topk_dst", ["src_index", "position 2", "5"],
            lambda: topk_dst(x_src, x_dst, 2, src_index=torch.tensor([0, 4, 5, -1])))
    _expect(IndexError, "topk_dst", ["src_index", "position 1", "-1"],
            lambda: topk_dst(x_src, x_dst, 0, src_index=torch.tensor([0, -1])))
    _expect(ValueError, "topk_dst", ["exclude", "[2, E]"],
            lambda: topk_dst(x_src, x_dst, 2, exclude=ex[0]))
    _expect(ValueError, "topk_dst", ["exclude", "[2, E]"],
            lambda: topk_dst(x_src, x_dst, 2, exclude=torch.zeros(3, 4, dtype=torch.long)))
    _expect(TypeError, "topk_dst", ["exclude"],
            lambda: topk_dst(x_src, x_dst, 2, exclude=ex.float()))
    _expect(TypeError, "topk_dst", ["exclude"],
            lambda: topk_dst(x_src, x_dst, 2, exclude=[[0], [1]]))
    _expect(IndexError, "topk_dst", ["exclude[1]", "edge 1", "8", "x_dst has 8 rows"],
            lambda: topk_dst(x_src, x_dst, 2, exclude=torch.tensor([[0, 1], [2, 8]])))
    _expect(IndexError, "topk_dst", ["exclude[0]", "edge 0", "-2", "x_src has 5 rows"],
            lambda: topk_dst(x_src, x_dst, 2, exclude=torch.tensor([[-2, 1], [2, 3]])))
    _expect(TypeError, "topk_dst", ["sorted"], lambda: topk_dst(x_src, x_dst, 2, sorted="yes"))
    # sparse indices: named, not the dispatcher's "could not run" error
    _expect(TypeError, "topk_dst", ["src_index", "dense", "sparse_coo"],
            lambda: topk_dst(x_src, x_dst, 2, src_index=torch.tensor([0, 1]).to_sparse()))
    _expect(TypeError, "topk_dst", ["exclude", "dense", "sparse_coo"],
            lambda: topk_dst(x_src, x_dst, 2, exclude=ex.to_sparse()))


def test_bad_op_arguments(gen):
    # direct callers of the registered op get errors, not reads out of bounds
    x_src, x_dst = randn(gen, 5, 3), randn(gen, 8, 3)
    src = torch.arange(5)
    empty = torch.empty(0, dtype=torch.int64)
    with pytest.raises(Exception, match="exclude_ptr"):
        OP(x_src, x_dst, src, torch.zeros(3, dtype=torch.int64), empty, 2, True)
    with pytest.raises(Exception, match="k must be >= 0"):
        OP(x_src, x_dst, src, empty, empty, -1, True)
    # a malformed CSR (out-of-range pointers and destinations) never reads outside it
    ptr = torch.tensor([0, 100, -5, 2, 2, 7])
    dst = torch.tensor([9, -3, 1, 0, 50])
    for impl in (OP, topk_mod.fallback_impls()["topk_dst"]):
        scores, index, first_bad = impl(x_src, x_dst, src, ptr, dst, 8, True)
        assert index.shape == (5, 8) and first_bad.tolist() == [-1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_device_mismatch(gen):
    x_src, x_dst = randn(gen, 5, 3), randn(gen, 8, 3, device="cuda")
    _expect(ValueError, "topk_dst", ["device"], lambda: topk_dst(x_src, x_dst, 2))
    _expect(ValueError, "topk_dst", ["exclude", "device"],
            lambda: topk_dst(x_dst, x_dst, 2, exclude=torch.zeros(2, 1, dtype=torch.long)))
