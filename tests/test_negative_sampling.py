"""Tests of pyg_edgedot.ops.negative_sampling: guarantees checked against Python sets on
random graphs, uniformity by chi-square, edge cases, errors, and PyG's own functions."""
import bisect
import warnings

import pytest
import torch
from scipy import stats

import pyg_edgedot  # noqa: F401  (builds/loads the package the way users do)
from pyg_edgedot.ops import negative_sampling as ns_mod
from pyg_edgedot.ops.negative_sampling import (NegativeSampler, batched_negative_sampling,
                                               negative_sampling,
                                               structured_negative_sampling,
                                               structured_negative_sampling_feasible)
from _helpers import DEVICES, HAS_CUDA, INDEX_DTYPES, dtype_id, make_gen

import torch_geometric.utils as pyg_utils


def random_graph(gen, num_src, num_dst, num_edges, dtype=torch.int64, device="cpu"):
    src = torch.randint(0, max(num_src, 1), (num_edges,), generator=gen)
    dst = torch.randint(0, max(num_dst, 1), (num_edges,), generator=gen)
    return torch.stack([src, dst]).to(dtype=dtype, device=device)


def pair_set(edge_index):
    return set(map(tuple, edge_index.t().cpu().tolist()))


def complement(edge_index, num_src, num_dst, loops_allowed):
    edges = pair_set(edge_index)
    return {(i, j) for i in range(num_src) for j in range(num_dst)
            if (i, j) not in edges and (loops_allowed or i != j)}


def check_negatives(neg, edge_index, num_src, num_dst, homogeneous, count=None,
                    dtype=torch.int64):
    # dtype: int64 for the PyG functions (as PyG's), edge_index's for NegativeSampler
    assert neg.dim() == 2 and neg.size(0) == 2
    assert neg.dtype == dtype and neg.device == edge_index.device
    pairs = neg.t().cpu().tolist()
    edges = pair_set(edge_index)
    assert not any(tuple(p) in edges for p in pairs), "a sampled pair is an edge"
    assert len(set(map(tuple, pairs))) == len(pairs), "sampled pairs repeat"
    if homogeneous:
        assert all(i != j for i, j in pairs), "a self-loop was sampled"
    if pairs:
        assert min(min(p) for p in pairs) >= 0
        assert max(p[0] for p in pairs) < num_src and max(p[1] for p in pairs) < num_dst
    if count is not None:
        assert len(pairs) == count


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# NegativeSampler.sample's draw is the op negative_sample: the registered implementation (the
# C++ kernel on the CPU, the CUDA kernel on CUDA, when they were built) or the pure-PyTorch
# fallback, swapped in.
BACKENDS = ["op", "fallback"]
_TABLE = pyg_edgedot._backend.loaded().table
OP_IMPL = "cpp" if _TABLE["negative_sampling", "cpu"].impl == "cpp" else "python"
CUDA_OP_IMPL = _TABLE["negative_sampling", "cuda"].impl


def kernel_built(device) -> bool:
    """Whether the op's compiled kernel serves `device` (else its pure-PyTorch fallback)."""
    return OP_IMPL == "cpp" if device == "cpu" else CUDA_OP_IMPL == "cuda"


def device_gen(seed: int, device) -> torch.Generator:
    """A seeded generator on `device` (the samplers take one on edge_index's device)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    return gen


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    if request.param == "fallback":
        monkeypatch.setattr(ns_mod, "_negative_sample", ns_mod._negative_sample_fallback)
    return request.param


def with_first_round(monkeypatch, first_round):
    """Makes sample()'s draw (whichever backend the fixture chose) take only `first_round`
    i.i.d. ranks in its first round, so that the top-up rounds run."""
    impl = ns_mod._negative_sample
    monkeypatch.setattr(ns_mod, "_negative_sample",
                        lambda *args, **kwargs: impl(*args, first_round, **kwargs))


# ---------------------------------------------------------------------------------------
# negative_sampling: guarantees on random graphs
# ---------------------------------------------------------------------------------------

# (N, E, num): sparse i.i.d. path, dense (enumerating) path, and in between
HOMO_CASES = [(50, 200, None), (50, 200, 1000), (30, 400, 300), (12, 40, 90), (200, 1000, 0.5),
              (7, 0, 20), (1000, 3000, 3000)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", HOMO_CASES, ids=str)
def test_homogeneous_guarantees(gen, device, dtype, case, backend):
    num_nodes, num_edges, num = case
    edge_index = random_graph(gen, num_nodes, num_nodes, num_edges, dtype, device)
    free = len(complement(edge_index, num_nodes, num_nodes, loops_allowed=False))
    expected = {None: num_edges}.get(num, num)
    if isinstance(num, float):
        expected = int(num * num_edges)
    torch.manual_seed(int(torch.randint(0, 2 ** 31, (1,), generator=gen)))
    neg = quiet(negative_sampling, edge_index, num_nodes, num)
    check_negatives(neg, edge_index, num_nodes, num_nodes, True, min(expected, free))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("size", [(13, 9), (5, 40), (1, 7), (30, 30)], ids=str)
def test_bipartite_guarantees(gen, device, dtype, size, backend):
    num_src, num_dst = size
    edge_index = random_graph(gen, num_src, num_dst, 2 * (num_src + num_dst), dtype, device)
    free = len(complement(edge_index, num_src, num_dst, loops_allowed=True))
    neg = quiet(negative_sampling, edge_index, size, 40)
    check_negatives(neg, edge_index, num_src, num_dst, False, min(40, free))
    # bipartite: self-loop-shaped pairs (i, i) are ordinary candidates
    if num_src == num_dst:
        edge_index = edge_index[:, edge_index[0] != edge_index[1]]
        neg = quiet(negative_sampling, edge_index, size, num_src * num_dst)
        assert pair_set(neg) == complement(edge_index, num_src, num_dst, True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num", [10, 11, 200, 10_000])
def test_force_undirected(gen, device, num, backend):
    num_nodes = 25
    edge_index = random_graph(gen, num_nodes, num_nodes, 120, torch.int64, device)
    neg = quiet(negative_sampling, edge_index, num_nodes, num, force_undirected=True)
    half = neg.size(1) // 2
    assert neg.size(1) % 2 == 0
    fwd, bwd = neg[:, :half], neg[:, half:]
    assert torch.equal(fwd, bwd.flip(0)), "columns [k:] must mirror columns [:k]"
    assert bool((fwd[0] < fwd[1]).all())
    # neither direction of a sampled pair is an edge (PyG only checks the i < j half)
    sym = torch.cat([edge_index, edge_index.flip(0)], 1)
    check_negatives(neg, sym, num_nodes, num_nodes, True)
    free_pairs = {(min(p), max(p)) for p in complement(sym, num_nodes, num_nodes, False)}
    assert half == min(num // 2, len(free_pairs))


def test_force_undirected_ignored_for_bipartite(gen):
    edge_index = random_graph(gen, 6, 9, 20)
    neg = negative_sampling(edge_index, (6, 9), 10, force_undirected=True)
    check_negatives(neg, edge_index, 6, 9, False, 10)


@pytest.mark.parametrize("device", DEVICES)
def test_unsorted_duplicate_edges_and_self_loops(gen, device, backend):
    edge_index = random_graph(gen, 15, 15, 60)
    edge_index = torch.cat([edge_index, edge_index[:, :30], torch.arange(5).repeat(2, 1)], 1)
    edge_index = edge_index[:, torch.randperm(edge_index.size(1), generator=gen)].to(device)
    free = complement(edge_index, 15, 15, False)
    neg = quiet(negative_sampling, edge_index, 15, 10_000)
    assert pair_set(neg) == free and neg.size(1) == len(free)
    # num_neg_samples=None counts input columns, duplicates included (as PyG)
    neg = negative_sampling(edge_index, 15)
    check_negatives(neg, edge_index, 15, 15, True, edge_index.size(1))


@pytest.mark.parametrize("device", DEVICES)
def test_not_sorted_output(gen, device, backend):
    edge_index = random_graph(gen, 500, 500, 2000, device=device)
    neg = negative_sampling(edge_index, 500, 2000)
    keys = neg[0] * 500 + neg[1]
    assert not bool((keys[1:] >= keys[:-1]).all())


# ---------------------------------------------------------------------------------------
# Uniformity (chi-square, fixed seeds)
# ---------------------------------------------------------------------------------------

SMALL_EDGES = torch.tensor([[0, 0, 1, 2, 3, 3, 4, 5, 5, 2],
                            [1, 2, 3, 3, 0, 4, 4, 0, 1, 2]])


def _chi2_uniform(counts):
    counts = torch.as_tensor(counts, dtype=torch.float64)
    expected = torch.full_like(counts, counts.sum() / counts.numel())
    return stats.chisquare(counts.numpy(), expected.numpy()).pvalue


def _pair_counts(samples, universe):
    index = {p: i for i, p in enumerate(sorted(universe))}
    counts = [0] * len(index)
    for neg in samples:
        for p in map(tuple, neg.t().tolist()):
            counts[index[p]] += 1
    return counts


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["dense_path", "sparse_path", "replace", "first_column"])
def test_uniform_over_complement(device, mode, backend):
    universe = complement(SMALL_EDGES, 6, 6, False)  # 22 pairs
    gen = device_gen(1234, device)
    sampler = NegativeSampler(SMALL_EDGES.to(device), 6)
    num = {"dense_path": 9, "sparse_path": 3, "replace": 7, "first_column": 5}[mode]
    samples = [sampler.sample(num, replace=(mode == "replace"), generator=gen)
               for _ in range(1500)]
    if mode == "first_column":  # the order is uniform too: column 0 is any pair equally
        samples = [s[:, :1] for s in samples]
    assert _chi2_uniform(_pair_counts(samples, universe)) > 1e-3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("first_round", [0, 1, 3])
@pytest.mark.parametrize("num", [3, 5])
def test_uniform_with_short_first_round(monkeypatch, device, backend, first_round, num):
    # the rare top-up rounds, forced by a first round of fewer i.i.d. ranks than needed
    with_first_round(monkeypatch, first_round)
    universe = complement(SMALL_EDGES, 6, 6, False)  # 22 pairs: num < 22 / 4, sparse
    gen = device_gen(99 + first_round, device)
    sampler = NegativeSampler(SMALL_EDGES.to(device), 6)
    samples = [sampler.sample(num, generator=gen) for _ in range(1500)]
    for s in samples[:50]:
        check_negatives(s, SMALL_EDGES.to(device), 6, 6, True, num)
    assert _chi2_uniform(_pair_counts(samples, universe)) > 1e-3
    assert _chi2_uniform(_pair_counts([s[:, :1] for s in samples], universe)) > 1e-3


def test_uniform_with_forced_top_up(monkeypatch):
    # the Python path's top-up loop, every round short: draw only half of the needed i.i.d.
    # ranks each round
    monkeypatch.setattr(ns_mod, "_negative_sample", ns_mod._negative_sample_fallback)
    monkeypatch.setattr(ns_mod, "_iid_draw_count",
                        lambda want, free: torch.where(want > 0, (want + 1) // 2, want * 0))
    universe = complement(SMALL_EDGES, 6, 6, False)
    gen = make_gen(99)
    sampler = NegativeSampler(SMALL_EDGES, 6)
    samples = [sampler.sample(4, generator=gen) for _ in range(1500)]
    for s in samples[:50]:
        check_negatives(s, SMALL_EDGES, 6, 6, True, 4)
    assert _chi2_uniform(_pair_counts(samples, universe)) > 1e-3
    assert _chi2_uniform(_pair_counts([s[:, :1] for s in samples], universe)) > 1e-3


def test_uniform_per_source():
    gen = make_gen(7)
    sampler = NegativeSampler(SMALL_EDGES, 6, self_loops=False)
    src = torch.tensor([0, 3, 5])
    draws = sampler.sample_per_source(src, 3000, generator=gen)
    edges = pair_set(SMALL_EDGES)
    for row, i in enumerate(src.tolist()):
        allowed = [j for j in range(6) if j != i and (i, j) not in edges]
        counts = torch.bincount(draws[row], minlength=6)
        assert counts.sum() == counts[allowed].sum()
        assert _chi2_uniform(counts[allowed]) > 1e-3


def test_uniform_batched():
    gen = make_gen(5)
    edge_index = torch.cat([SMALL_EDGES, SMALL_EDGES[:, :4] + 6], 1)
    batch = torch.tensor([0] * 6 + [1] * 6)
    universe = complement(edge_index, 12, 12, False)
    universe = {p for p in universe if (p[0] < 6) == (p[1] < 6)}
    samples = [batched_negative_sampling(edge_index, batch, 4, generator=gen)
               for _ in range(800)]
    for first, last in ((0, 6), (6, 12)):  # per graph: complements differ in size
        part = {p for p in universe if first <= p[0] < last}
        graph_samples = [s[:, (s[0] >= first) & (s[0] < last)] for s in samples]
        assert all(s.size(1) == 4 for s in graph_samples)
        assert _chi2_uniform(_pair_counts(graph_samples, part)) > 1e-3


# ---------------------------------------------------------------------------------------
# Near-complete graphs and tiny inputs
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_complement_smaller_than_asked_warns_and_returns_it_all(device):
    full = torch.tensor([(i, j) for i in range(6) for j in range(6) if i != j]).t()
    edge_index = full[:, torch.tensor([c for c in range(full.size(1)) if c % 7 != 3])]
    edge_index = edge_index.to(device)
    free = complement(edge_index, 6, 6, False)
    with pytest.warns(UserWarning, match="negative_sampling: asked for 100"):
        neg = negative_sampling(edge_index, 6, 100)
    assert pair_set(neg) == free and neg.size(1) == len(free)
    with pytest.warns(UserWarning):
        assert negative_sampling(full.to(device), 6, 5).shape == (2, 0)


@pytest.mark.parametrize("device", DEVICES)
def test_empty_and_one_node(device):
    empty = torch.empty(2, 0, dtype=torch.long, device=device)
    assert negative_sampling(empty).shape == (2, 0)            # N = 0, k = E = 0
    assert negative_sampling(empty, 5).shape == (2, 0)         # k = E = 0
    neg = negative_sampling(empty, 5, 20)                      # all 20 pairs of 5 nodes
    assert pair_set(neg) == complement(empty, 5, 5, False)
    with pytest.warns(UserWarning):
        assert negative_sampling(empty, 1, 3).shape == (2, 0)  # one node: no pair at all
    assert negative_sampling(empty, (1, 1), 1).tolist() == [[0], [0]]
    assert NegativeSampler(empty, 1).sample_per_source(
        torch.empty(0, dtype=torch.long, device=device), 2).shape == (0, 2)
    i, j, k = structured_negative_sampling(empty, 3)
    assert i.numel() == j.numel() == k.numel() == 0
    assert batched_negative_sampling(empty, torch.tensor([0, 0, 1], device=device)).shape \
        == (2, 0)


def test_int32_edge_index_past_int32_node_ids(gen):
    # ids past 2**31 - 1 cannot be int32: the sampler's draws widen to int64, never wrap
    num_dst = 3_000_000_000
    edge_index = torch.tensor([[0, 0], [0, num_dst - 1 - 2 ** 31]], dtype=torch.int32)
    sampler = NegativeSampler(edge_index, (1, num_dst))
    assert sampler.index_dtype == torch.int64
    for neg in (sampler.sample(2000, generator=make_gen(0)),
                negative_sampling(edge_index, (1, num_dst), 2000, generator=make_gen(0))):
        assert neg.dtype == torch.int64 and neg.shape == (2, 2000)
        assert int(neg[1].min()) >= 0 and int(neg[1].max()) < num_dst
        assert int(neg[1].max()) > 2 ** 31  # 2000 uniform draws, all below 2**31: p ~ 1e-600
    dst = sampler.sample_per_source(torch.zeros(500, dtype=torch.int32), 4,
                                    generator=make_gen(1))
    assert dst.dtype == torch.int64 and int(dst.min()) >= 0 and int(dst.max()) < num_dst
    # within int32's range an int32 edge_index keeps int32 draws from the sampler
    assert NegativeSampler(edge_index, (1, 2 ** 31)).index_dtype == torch.int32


@pytest.mark.parametrize("device", DEVICES)
def test_structured_functions_memory_is_o_of_e(gen, device, monkeypatch):
    # the one-shot functions stay O(E) in memory as PyG's: a row pointer over the sources
    # only where N <= 4 E, else a binary search per source; the draws are a kept sampler's
    edge_index = random_graph(gen, 49, 50, 400) + torch.tensor([[1], [0]])
    node0 = torch.stack([torch.zeros(49, dtype=torch.long), torch.arange(1, 50)])
    edge_index = torch.cat([node0, edge_index], 1).to(device)  # node 0: only (0, 0) left
    want = {n: NegativeSampler(edge_index, n, self_loops=True).sample_per_source(
        edge_index[0], 1, generator=device_gen(5, device)).view(-1) for n in (50, 5000)}
    built = []
    row_pointer = NegativeSampler._row_pointer

    def recording(self):
        assert self.num_src_nodes <= 4 * edge_index.size(1), "an O(N) row pointer, N > 4 E"
        built.append(self.num_src_nodes)
        return row_pointer(self)
    monkeypatch.setattr(NegativeSampler, "_row_pointer", recording)
    for n in (50, 5000):  # with a row pointer, then by search
        _, _, k = structured_negative_sampling(edge_index, n, generator=device_gen(5, device))
        assert torch.equal(k, want[n])
        assert structured_negative_sampling_feasible(edge_index, n)
        # without self-loops node 0 has no candidate left at n = 50, thousands at 5000
        assert structured_negative_sampling_feasible(edge_index, n, False) == (n == 5000)
    assert built == [50, 50, 50]
    huge = torch.tensor([[0, 1, 2], [1, 2, 0]], device=device)
    _, _, k = structured_negative_sampling(huge, 2 ** 31 - 1)
    assert k.shape == (3,) and bool((k >= 0).all())
    assert structured_negative_sampling_feasible(huge, 2 ** 31 - 1)
    empty = torch.empty(2, 0, dtype=torch.long, device=device)
    assert not structured_negative_sampling_feasible(empty, 1, False)
    assert structured_negative_sampling_feasible(empty, 0)


def test_large_node_count_no_quadratic_memory(gen):
    num_nodes = 3_000_000  # N^2 keys = 9e12: any dense mask would need terabytes
    edge_index = random_graph(gen, num_nodes, num_nodes, 5000)
    neg = negative_sampling(edge_index, num_nodes, 5000, method="dense")
    check_negatives(neg, edge_index, num_nodes, num_nodes, True, 5000)
    neg = negative_sampling(edge_index, num_nodes, 500, force_undirected=True)
    assert neg.size(1) == 500 and bool((neg[0, :250] < neg[1, :250]).all())


# ---------------------------------------------------------------------------------------
# Reproducibility, EdgeIndex, NegativeSampler
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_same_seed_same_output(gen, device, backend):
    edge_index = random_graph(gen, 100, 100, 400, device=device)
    a = negative_sampling(edge_index, 100, generator=device_gen(3, device))
    b = negative_sampling(edge_index, 100, generator=device_gen(3, device))
    assert torch.equal(a, b)
    torch.manual_seed(11)
    c = negative_sampling(edge_index, 100)
    torch.manual_seed(11)
    assert torch.equal(c, negative_sampling(edge_index, 100))
    assert not torch.equal(a, negative_sampling(edge_index, 100, generator=device_gen(4, device)))
    torch.manual_seed(2)
    s1 = structured_negative_sampling(edge_index, 100)[2]
    torch.manual_seed(2)
    assert torch.equal(s1, structured_negative_sampling(edge_index, 100)[2])


def test_method_gives_same_result(gen):
    edge_index = random_graph(gen, 40, 40, 100)
    assert torch.equal(negative_sampling(edge_index, 40, method="sparse", generator=make_gen(1)),
                       negative_sampling(edge_index, 40, method="dense", generator=make_gen(1)))


def test_edge_index_input(gen):
    from torch_geometric import EdgeIndex
    plain = random_graph(gen, 8, 12, 30)
    edge_index = EdgeIndex(plain, sparse_size=(8, 12))
    neg = negative_sampling(edge_index, (8, 12), 20)
    assert type(neg) is torch.Tensor
    check_negatives(neg, plain, 8, 12, False, 20)
    neg = negative_sampling(edge_index)  # num_nodes = max(sparse_size) = 12, as PyG
    check_negatives(neg, plain, 12, 12, True, 30)
    assert int(neg.max()) <= 11
    edge_index = EdgeIndex(plain, sparse_size=(12, 12))
    i, j, k = structured_negative_sampling(edge_index)
    assert type(k) is torch.Tensor and k.numel() == 30
    # i and j are edge_index's rows as PyG returns them: Index objects for an EdgeIndex
    import torch_geometric.utils as pyg_utils
    expected = pyg_utils.structured_negative_sampling(edge_index)
    assert [type(t) for t in (i, j, k)] == [type(t) for t in expected]
    assert torch.equal(i, plain[0]) and torch.equal(j, plain[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=dtype_id)
def test_sampler_reuse_and_replace(gen, device, dtype, backend):
    edge_index = random_graph(gen, 40, 30, 300, dtype, device)
    sampler = NegativeSampler(edge_index, (40, 30))
    assert "num_nodes=(40, 30)" in repr(sampler)
    assert sampler.num_negatives == len(complement(edge_index, 40, 30, True))
    for _ in range(3):
        check_negatives(sampler.sample(500), edge_index, 40, 30, False, 500, dtype)
    many = sampler.sample(5000, replace=True)
    assert many.shape == (2, 5000) and many.dtype == dtype
    edges = pair_set(edge_index)
    assert not any(p in edges for p in map(tuple, many.t().tolist()))
    assert sampler.sample(0.5).size(1) == 150


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("self_loops", [False, True])
def test_sample_per_source(gen, device, self_loops):
    edge_index = random_graph(gen, 20, 20, 150, torch.int32, device)
    sampler = NegativeSampler(edge_index, 20, self_loops=self_loops)
    src = torch.randint(0, 20, (77,), generator=gen).to(device)
    dst = sampler.sample_per_source(src, 4)
    assert dst.shape == (77, 4) and dst.dtype == torch.int32
    edges = pair_set(edge_index)
    for i, row in zip(src.tolist(), dst.tolist()):
        for j in row:
            assert (i, j) not in edges and 0 <= j < 20 and (self_loops or i != j)


# ---------------------------------------------------------------------------------------
# The op negative_sample: large draws (the kernel's parallel and bucketed paths), seeds,
# threads, argument checks
# ---------------------------------------------------------------------------------------

def _keys_of(pairs, num_nodes):
    return pairs[0].long() * num_nodes + pairs[1].long()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("case", [(2_000, 20_000, 150_000), (300, 2_000, 70_000),
                                  (100, 500, 9_000)], ids=str)
def test_large_draw_guarantees_and_order(gen, device, backend, case, replace):
    # (N, E, k): sparse with > 2**16 draws (radix sort, parallel parts, back to draw order),
    # dense (the whole complement, then a bucketed shuffle), and a small in-cache one.
    num_nodes, num_edges, num = case
    edge_index = random_graph(gen, num_nodes, num_nodes, num_edges)
    sampler = NegativeSampler(edge_index.to(device), num_nodes)
    neg = sampler.sample(num, replace=replace, generator=device_gen(5, device))
    assert neg.shape == (2, num) and neg.dtype == torch.int64 and neg.device.type == device
    neg = neg.cpu()
    keys = _keys_of(neg, num_nodes)
    edge_keys = torch.unique(_keys_of(edge_index, num_nodes))
    pos = torch.searchsorted(edge_keys, keys).clamp(max=edge_keys.numel() - 1)
    assert not bool((edge_keys[pos] == keys).any()), "a sampled pair is an edge"
    assert not bool((neg[0] == neg[1]).any()), "a self-loop was sampled"
    assert bool((neg >= 0).all() and (neg < num_nodes).all())
    if not replace:
        assert torch.unique(keys).numel() == num, "sampled pairs repeat"
    # Random order: ascents ~ Binomial-like with mean (k - 1) / 2, and no rank correlation
    # between position and key (sorted or block-sorted output would fail both).
    ascents = int((keys[1:] > keys[:-1]).sum())
    assert abs(ascents - (num - 1) / 2) < 6 * (num / 12) ** 0.5
    ranks = torch.argsort(torch.argsort(keys)).double()
    position = torch.arange(num, dtype=torch.float64)
    corr = torch.corrcoef(torch.stack([ranks, position]))[0, 1]
    assert abs(float(corr)) < 6 / num ** 0.5


@pytest.mark.parametrize("device", DEVICES)
def test_large_draw_with_replacement_is_iid(device, backend):
    # 2**17 draws of the 22 pairs (sorted by rank for the merge, then put back in draw order):
    # uniform counts, and consecutive draws independent (chi-square over the 22 x 22
    # transitions).
    universe = sorted(complement(SMALL_EDGES, 6, 6, False))
    sampler = NegativeSampler(SMALL_EDGES.to(device), 6)
    neg = sampler.sample(1 << 17, replace=True, generator=device_gen(8, device)).cpu()
    index = {p: i for i, p in enumerate(universe)}
    lookup = torch.full((36,), -1, dtype=torch.long)
    lookup[torch.tensor([i * 6 + j for i, j in universe])] = torch.arange(len(universe))
    cell = lookup[_keys_of(neg, 6)]
    assert bool((cell >= 0).all()) and len(index) == 22
    assert _chi2_uniform(torch.bincount(cell, minlength=22)) > 1e-3
    transitions = torch.bincount(cell[:-1] * 22 + cell[1:], minlength=22 * 22)
    assert _chi2_uniform(transitions) > 1e-3


def _op_args(sampler, count, seed, replace, first_round=-1):
    space = sampler._directed
    return (space.adj, space.num_free, count, seed, replace, space.mode,
            sampler.num_src_nodes, sampler.num_dst_nodes, sampler.index_dtype, first_round)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("replace", [False, True])
def test_op_same_seed_same_output_any_threads(gen, device, backend, replace):
    edge_index = random_graph(gen, 3_000, 3_000, 30_000, device=device)
    sampler = NegativeSampler(edge_index, 3_000)
    draw = ns_mod._negative_sample
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = draw(*_op_args(sampler, 200_000, 42, replace))
        torch.set_num_threads(2)
        two = draw(*_op_args(sampler, 200_000, 42, replace))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(one, two)
    assert torch.equal(one, draw(*_op_args(sampler, 200_000, 42, replace)))
    assert not torch.equal(one, draw(*_op_args(sampler, 200_000, 43, replace)))
    # a top-up round changes the draw, not the guarantees
    short = draw(*_op_args(sampler, 1_000, 42, replace, first_round=10))
    assert short.shape == (2, 1_000)
    if not replace:
        assert torch.unique(_keys_of(short, 3_000)).numel() == 1_000


@pytest.mark.parametrize("device", DEVICES)
def test_op_opcheck(gen, device):
    edge_index = random_graph(gen, 50, 50, 300, device=device)
    sampler = NegativeSampler(edge_index, 50)
    for replace in (False, True):
        torch.library.opcheck(torch.ops.pyg_edgedot.negative_sample.default,
                              _op_args(sampler, 100, 7, replace))


# negative_sample_index: the bucket index the CUDA draw and both devices' loss kernels map
# ranks through (the same values on the CPU, whose draw merges sorted ranks and only checks
# it), which NegativeSampler builds once and passes back as negative_sample's adj_index. Graph:
# 200 nodes, 8,000 random edges, so that adj (~7K keys) is long enough to index, and 3,000
# draws are sparse, 20,000 dense (>= M / 4).

def _indexed_sampler(gen, device):
    return NegativeSampler(random_graph(gen, 200, 200, 8_000, device=device), 200)


def _expected_index(adj, num_ranks):
    """The kept index (counter_rng.h's plan): bucket b counts adj below b << shift."""
    num_adj = adj.numel()
    if num_adj < 4096:
        return adj.new_empty(0)
    shift = 0
    while (num_ranks >> shift) > num_adj // 4:
        shift += 1
    bounds = torch.arange((num_ranks >> shift) + 2, device=adj.device) << shift
    return torch.searchsorted(adj, bounds)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("replace", [False, True])
@pytest.mark.parametrize("count", [3_000, 20_000])
def test_op_kept_index_same_draws(gen, device, replace, count):
    if not kernel_built(device):
        pytest.skip(f"the {device} kernel was not built")
    sampler = _indexed_sampler(gen, device)
    space = sampler._directed
    index = torch.ops.pyg_edgedot.negative_sample_index(space.adj, space.num_free)
    assert index.dtype == torch.int64 and index.device == space.adj.device
    want = _expected_index(space.adj, space.num_free)
    assert space.adj.numel() >= 4096 and want.numel() > 0 and torch.equal(index, want)
    args = _op_args(sampler, count, 11, replace)
    without = torch.ops.pyg_edgedot.negative_sample(*args)
    with_index = torch.ops.pyg_edgedot.negative_sample(*args, adj_index=index)
    assert torch.equal(with_index, without)


@pytest.mark.parametrize("device", DEVICES)
def test_sampler_keeps_its_index(gen, device, backend):
    sampler = _indexed_sampler(gen, device)
    space = sampler._directed
    assert space._adj_index is None  # built on the first draw, not by the build
    sampler.sample(100)
    kept = space._adj_index
    assert kept is not None
    sampler.sample(100, replace=True)
    assert space.adj_index() is kept
    sampler.sample(100, force_undirected=True)
    assert sampler._undirected._adj_index is not None and space.adj_index() is kept


@pytest.mark.parametrize("device", DEVICES)
def test_op_index_opcheck(gen, device):
    sampler = _indexed_sampler(gen, device)
    space = sampler._directed
    torch.library.opcheck(torch.ops.pyg_edgedot.negative_sample_index.default,
                          (space.adj, space.num_free))
    torch.library.opcheck(torch.ops.pyg_edgedot.negative_sample.default,
                          _op_args(sampler, 100, 7, False),
                          {"adj_index": space.adj_index()})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad", ["size", "dtype", "device"])
def test_op_index_checks(gen, device, bad):
    if not kernel_built(device):
        pytest.skip(f"the {device} kernel was not built")
    sampler = _indexed_sampler(gen, device)
    space = sampler._directed
    index = space.adj_index()
    if bad == "size":
        index = torch.zeros(index.numel() + 3, dtype=torch.int64, device=device)
    elif bad == "dtype":
        index = index.int()
    else:
        if device == "cpu":
            pytest.skip("a CUDA index for a CPU adj goes to the CUDA kernel")
        index = index.cpu()
    with pytest.raises(RuntimeError, match=r"adj_index must be negative_sample_index"):
        torch.ops.pyg_edgedot.negative_sample(*_op_args(sampler, 10, 1, False),
                                              adj_index=index)
    with pytest.raises(RuntimeError, match="excluded_adj must be a 1-D int64 tensor"):
        torch.ops.pyg_edgedot.negative_sample_index(space.adj.int(), space.num_free)
    with pytest.raises(RuntimeError, match="num_ranks must be >= 0"):
        torch.ops.pyg_edgedot.negative_sample_index(space.adj, -1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("replace", [False, True])
def test_op_index_bad_values_no_bad_access(gen, device, replace):
    # An index of the right size with values past either end of adj: wrong keys at worst,
    # still in the key space (so pairs in range), no read outside adj, the device healthy.
    if not kernel_built(device) or device == "cpu":
        pytest.skip("the CUDA draw alone searches the index (the C++ one checks its size)")
    sampler = _indexed_sampler(gen, device)
    space = sampler._directed
    size = space.adj_index().numel()
    index = torch.randint(-2 ** 40, 2 ** 40, (size,), generator=gen).to(device)
    out = torch.ops.pyg_edgedot.negative_sample(*_op_args(sampler, 3_000, 3, replace),
                                                adj_index=index)
    torch.cuda.synchronize()
    assert out.shape == (2, 3_000) and bool((out >= 0).all() and (out < 200).all())
    assert not bool((out[0] == out[1]).any())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("change, match", [
    ({5: "both"}, "mode must be 'directed', 'no_loops' or 'undirected'"),
    ({1: 10_000}, "num_ranks \\+ len\\(excluded_adj\\) must be the number of no_loops keys"),
    ({0: torch.zeros(3, dtype=torch.int32)}, "excluded_adj must be a 1-D int64 tensor"),
    ({8: torch.float32}, "dtype must be int32 or int64"),
    ({2: -1}, "must be >= 0"),
    ({2: 5_000}, "cannot draw 5000 distinct keys"),
])
def test_op_checks(gen, device, change, match):
    if not kernel_built(device):
        pytest.skip(f"the {device} kernel was not built")
    sampler = NegativeSampler(random_graph(gen, 50, 50, 300, device=device), 50)
    args = list(_op_args(sampler, 10, 1, False))
    for where, value in change.items():
        args[where] = value.to(device) if isinstance(value, torch.Tensor) else value
    with pytest.raises(RuntimeError, match=match):
        torch.ops.pyg_edgedot.negative_sample(*args)


# The sampler's build: excluded_keys (sorted distinct keys below key_bound, and adj; the value
# key_bound marks a pair that is no key) against torch.unique.
EXCLUDED_KEYS_CASES = [(0, 0), (0, 5), (6, 0), (1, 1), (1, 9), (7, 1), (1000, 37),
                       (5000, 2 ** 40), (70_000, 10 ** 9), (300, 2 ** 62 - 1)]


_ADJ = torch.tensor([1, 1, 2])


def _draw(adj=_ADJ, num_ranks=6, count=1, replace=False, mode="directed", n=3,
          dtype=torch.long):
    """The pure-PyTorch ``negative_sample`` on ``n`` x ``n`` nodes (seed 1)."""
    return ns_mod._negative_sample_fallback(adj, num_ranks, count, 1, replace, mode, n, n,
                                            dtype)


@pytest.mark.parametrize("call, error, match", [
    (lambda: _draw(num_ranks=5, count=10), ValueError,
     r"num_ranks \+ len\(excluded_adj\) must be"),
    (lambda: _draw(count=10), ValueError, "cannot draw 10 distinct keys from 6"),
    (lambda: _draw(count=-1), ValueError, "count must be >= 0"),
    (lambda: _draw(mode="bogus"), ValueError, "mode must be"),
    (lambda: _draw(dtype=torch.float), TypeError, "dtype must be int32 or int64"),
    (lambda: _draw(adj=_ADJ.int()), ValueError, "excluded_adj must be 1-D int64"),
    (lambda: _draw(adj=_ADJ[:0], num_ranks=5, count=5, replace=True, mode="undirected", n=-3),
     ValueError, "num_src_nodes and num_dst_nodes must be >= 0"),
    (lambda: ns_mod._negative_sample_index_fallback(_ADJ, -7), ValueError,
     "num_ranks must be >= 0"),
    (lambda: ns_mod._excluded_keys_fallback(_ADJ, -1), ValueError, "key_bound must be in"),
    (lambda: ns_mod._excluded_keys_fallback(_ADJ.int(), 10), ValueError,
     "keys must be 1-D int64"),
    (lambda: ns_mod._excluded_edge_keys_fallback(GOOD.float(), "directed", 4, 4), ValueError,
     r"edge_index must be a \[2, E\] int32 or int64"),
    (lambda: ns_mod._excluded_edge_keys_fallback(GOOD, "bogus", 4, 4), ValueError,
     "mode must be"),
    (lambda: ns_mod._excluded_edge_keys_fallback(GOOD, "undirected", 4, 2), ValueError,
     "equal unless mode is 'directed'"),
    (lambda: ns_mod._excluded_edge_keys_fallback(GOOD, "directed", 2 ** 40, 2 ** 40),
     ValueError, "2\\*\\*62 keys or more"),
])
def test_fallback_op_checks(call, error, match):
    # the pure-PyTorch ops refuse what the kernels refuse (for direct callers of torch.ops)
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["op", "fallback"])
@pytest.mark.parametrize("n, key_bound", EXCLUDED_KEYS_CASES)
def test_excluded_keys(gen, device, impl, n, key_bound):
    keys = torch.randint(0, key_bound + 1, (n,), generator=gen)
    keys[: n // 5] = key_bound  # pairs that are no keys
    keys = torch.cat([keys, keys[: n // 3]])[torch.randperm(n + n // 3, generator=gen)]
    strided = torch.stack([keys, -keys]).t().reshape(-1)[::2]  # the same values, stride 2
    expected = torch.unique(keys[keys < key_bound])
    fn = (torch.ops.pyg_edgedot.excluded_keys if impl == "op"
          else ns_mod._excluded_keys_fallback)
    for given in (keys, strided):
        given = given.to(device)
        unique, adj = fn(given, key_bound)
        assert unique.dtype == adj.dtype == torch.int64 and unique.device == given.device
        assert torch.equal(unique.cpu(), expected)
        assert torch.equal(adj.cpu(), expected - torch.arange(expected.numel()))
        if unique.numel() > 0:
            assert unique.data_ptr() != given.data_ptr()  # never an alias of the input


@pytest.mark.parametrize("device", DEVICES)
def test_excluded_keys_opcheck(gen, device):
    keys = torch.randint(0, 1001, (500,), generator=gen).to(device)
    torch.library.opcheck(torch.ops.pyg_edgedot.excluded_keys.default, (keys, 1000))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("keys, key_bound, match", [
    (torch.zeros(3, dtype=torch.int32), 5, "keys must be a 1-D int64 tensor"),
    (torch.zeros(2, 3, dtype=torch.int64), 5, "keys must be a 1-D int64 tensor"),
    (torch.zeros(3, dtype=torch.int64), -4, "key_bound must be in \\[0, 2\\^62\\)"),
    (torch.zeros(3, dtype=torch.int64), 2 ** 62, "key_bound must be in \\[0, 2\\^62\\)"),
])
def test_excluded_keys_checks(device, keys, key_bound, match):
    if not kernel_built(device):
        pytest.skip(f"the {device} kernel was not built")
    with pytest.raises(RuntimeError, match=match):
        torch.ops.pyg_edgedot.excluded_keys(keys.to(device), key_bound)


@pytest.mark.parametrize("num_nodes", [2, 3, 1000, 2 ** 29 + 7, 2 ** 31 - 1, 3_000_000_000])
@pytest.mark.parametrize("mode", ["directed", "no_loops", "undirected"])
def test_decode_inverts_encode(gen, mode, num_nodes):
    # the Python key decoder (fallback and batched paths) at the first, last and random rows
    n = num_nodes
    edge = torch.tensor([0, 1, n // 2, n - 3, n - 2, n - 1]).clamp(0, n - 1)
    src = torch.cat([edge.repeat_interleave(6), torch.randint(0, n, (2000,), generator=gen)])
    dst = torch.cat([edge.repeat(6), torch.randint(0, n, (2000,), generator=gen)])
    if mode == "undirected":
        src, dst = torch.minimum(src, dst), torch.maximum(src, dst)
    keep = src != dst if mode != "directed" else torch.ones_like(src, dtype=torch.bool)
    src, dst = src[keep], dst[keep]
    keys = ns_mod._encode(mode, src, dst, n, n, -1)
    bound = ns_mod._num_keys(mode, n, n)
    assert bool((keys >= 0).all()) and bool((keys < bound).all())
    row, col = ns_mod._decode(mode, keys, n, n)
    assert torch.equal(row, src) and torch.equal(col, dst)
    # and every key of the last rows, where the float64 row estimate is hardest
    last = torch.arange(max(bound - 3000, 0), bound)
    row, col = ns_mod._decode(mode, last, n, n)
    assert bool((row >= 0).all()) and bool((col < n).all())
    assert torch.equal(ns_mod._encode(mode, row, col, n, n, -1), last)


# One graph's build: excluded_edge_keys (the edges validated, encoded in the mode's key space
# and made excluded_keys' tables in one op) against _encode + torch.unique.
EDGE_KEYS_CASES = [("directed", 40, 30, 300), ("directed", 7, 7, 0), ("no_loops", 50, 50, 600),
                   ("no_loops", 1, 1, 3), ("undirected", 60, 60, 500), ("undirected", 0, 0, 0),
                   ("no_loops", 3000, 3000, 70_000)]


def _expected_tables(edge_index, mode, num_src, num_dst):
    src, dst = edge_index[0].long().cpu(), edge_index[1].long().cpu()
    ok = (src >= 0) & (src < num_src) & (dst >= 0) & (dst < num_dst)
    bound = ns_mod._num_keys(mode, num_src, num_dst)
    keys = ns_mod._encode(mode, src[ok], dst[ok], num_src, num_dst, bound)
    excluded = torch.unique(keys[keys < bound])
    return excluded, excluded - torch.arange(excluded.numel())


def _edge_index_layouts(edge_index):
    """The same [2, E] as given, int32, and strided (a column-major copy)."""
    return [edge_index, edge_index.int(), edge_index.t().contiguous().t()]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["op", "fallback"])
@pytest.mark.parametrize("mode, num_src, num_dst, num_edges", EDGE_KEYS_CASES, ids=str)
def test_excluded_edge_keys(gen, device, impl, mode, num_src, num_dst, num_edges):
    edge_index = random_graph(gen, num_src, num_dst, num_edges)
    if num_src == num_dst:
        edge_index[:, : num_edges // 7] = edge_index[0, : num_edges // 7]  # self-loops
    expected = _expected_tables(edge_index, mode, num_src, num_dst)
    fn = (torch.ops.pyg_edgedot.excluded_edge_keys if impl == "op"
          else ns_mod._excluded_edge_keys_fallback)
    for given in _edge_index_layouts(edge_index):
        excluded, adj, first_bad = fn(given.to(device), mode, num_src, num_dst)
        assert excluded.dtype == adj.dtype == torch.int64 and excluded.device.type == device
        assert first_bad.device.type == "cpu" and first_bad.dtype == torch.int64
        assert first_bad.tolist() == [-1]
        assert torch.equal(excluded.cpu(), expected[0])
        assert torch.equal(adj.cpu(), expected[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["op", "fallback"])
@pytest.mark.parametrize("mode", ["directed", "no_loops", "undirected"])
def test_excluded_edge_keys_first_bad(gen, device, impl, mode):
    """A column out of range is dropped and the first one reported."""
    num_nodes, num_edges = 40, 70_000
    edge_index = random_graph(gen, num_nodes, num_nodes, num_edges)
    edge_index[1, 51_234] = num_nodes          # past the end
    edge_index[0, 60_000] = -3                 # negative
    edge_index[1, 65_000] = -1
    expected = _expected_tables(edge_index, mode, num_nodes, num_nodes)
    fn = (torch.ops.pyg_edgedot.excluded_edge_keys if impl == "op"
          else ns_mod._excluded_edge_keys_fallback)
    for given in _edge_index_layouts(edge_index):
        excluded, adj, first_bad = fn(given.to(device), mode, num_nodes, num_nodes)
        assert first_bad.tolist() == [51_234]
        assert torch.equal(excluded.cpu(), expected[0])
        assert torch.equal(adj.cpu(), expected[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["directed", "no_loops", "undirected"])
def test_excluded_edge_keys_opcheck(gen, device, mode):
    edge_index = random_graph(gen, 30, 30, 400, device=device)
    torch.library.opcheck(torch.ops.pyg_edgedot.excluded_edge_keys.default,
                          (edge_index, mode, 30, 30))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("edge_index, args, match", [
    (torch.zeros(3, dtype=torch.int64), ("directed", 4, 4), r"edge_index must be a \[2, E\]"),
    (torch.zeros(3, 2, dtype=torch.int64), ("directed", 4, 4), r"edge_index must be a \[2, E\]"),
    (torch.zeros(2, 2), ("directed", 4, 4), r"edge_index must be a \[2, E\] int32 or int64"),
    (torch.zeros(2, 2, dtype=torch.int64), ("loops", 4, 4), "mode must be 'directed'"),
    (torch.zeros(2, 2, dtype=torch.int64), ("no_loops", 4, 5), "equal unless mode"),
    (torch.zeros(2, 2, dtype=torch.int64), ("directed", -1, 5), "must be >= 0"),
    (torch.zeros(2, 2, dtype=torch.int64), ("directed", 2 ** 31, 2 ** 31), "2\\^62 keys"),
])
def test_excluded_edge_keys_checks(device, edge_index, args, match):
    if not kernel_built(device):
        pytest.skip(f"the {device} kernel was not built")
    with pytest.raises(RuntimeError, match=match):
        torch.ops.pyg_edgedot.excluded_edge_keys(edge_index.to(device), *args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("impl", ["op", "fallback"])
@pytest.mark.parametrize("num_nodes, change, match", [
    (5, (1, 2, 5), "destination index 5 but num_nodes gives only 5 destination nodes"),
    (5, (0, 3, 7), "source index 7 but num_nodes gives only 5 source nodes"),
    ((5, 8), (1, 0, 9), "destination index 9 but num_nodes gives only 8 destination nodes"),
    (5, (0, 1, -2), r"a negative index \(-2\)"),
    (None, (1, 4, -1), r"a negative index \(-1\)"),
])
def test_sampler_build_index_errors(monkeypatch, device, impl, num_nodes, change, match):
    """The build's op reports the first bad column; Python raises the message it always did
    (each layout: as given, int32, strided; both key spaces)."""
    if impl == "fallback":
        monkeypatch.setattr(ns_mod, "_excluded_edge_keys", ns_mod._excluded_edge_keys_fallback)
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 1], [1, 2, 3, 4, 0, 1]])
    row, col, value = change
    edge_index[row, col] = value
    for given in _edge_index_layouts(edge_index):
        for self_loops in (False, True):
            with pytest.raises(IndexError, match="NegativeSampler: edge_index holds " + match):
                NegativeSampler(given.to(device), num_nodes, self_loops=self_loops)
        with pytest.raises(IndexError, match="negative_sampling: edge_index holds " + match):
            negative_sampling(given.to(device), num_nodes)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("self_loops, bipartite", [(False, False), (True, False), (False, True)])
def test_sampler_tables_same_on_every_path(gen, monkeypatch, device, self_loops, bipartite):
    """NegativeSampler's tables (both key spaces) from the op, its fallback and the batched
    build (excluded_keys of _encode's keys) are the same."""
    num_nodes = (300, 200) if bipartite else 300
    edge_index = random_graph(gen, 300, 200 if bipartite else 300, 5000, device=device)
    if not bipartite:
        edge_index[:, :100] = edge_index[0, :100]  # self-loops
    tables = []
    for impl in ("op", "fallback"):
        if impl == "fallback":
            monkeypatch.setattr(ns_mod, "_excluded_edge_keys",
                                ns_mod._excluded_edge_keys_fallback)
        for given in _edge_index_layouts(edge_index):
            sampler = NegativeSampler(given, num_nodes, self_loops=self_loops)
            sampler._sample(0, False, True, None, "test")  # builds the undirected space
            spaces = [sampler._directed] + ([] if bipartite else [sampler._undirected])
            tables.append([(s.mode, s.excluded.cpu(), s.adj.cpu(), s.num_free) for s in spaces])
    src, dst = edge_index[0].cpu(), edge_index[1].cpu()
    n_src, n_dst = (300, 200) if bipartite else (300, 300)
    for mode, excluded, adj, num_free in tables[0]:
        bound = ns_mod._num_keys(mode, n_src, n_dst)
        keys = ns_mod._encode(mode, src, dst, n_src, n_dst, bound)
        expected, expected_adj = torch.ops.pyg_edgedot.excluded_keys(keys, bound)
        assert torch.equal(excluded, expected) and torch.equal(adj, expected_adj)
        assert num_free == bound - expected.numel()
    for other in tables[1:]:
        for (m0, e0, a0, f0), (m1, e1, a1, f1) in zip(tables[0], other):
            assert m0 == m1 and f0 == f1 and torch.equal(e0, e1) and torch.equal(a0, a1)


@pytest.mark.skipif(not HAS_CUDA, reason="CUDA is not available")
@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=dtype_id)
def test_cuda_sampler_build_syncs_once(gen, dtype, capfd):
    """One graph's CUDA build (both key spaces) synchronizes once each: the op's read-back of
    its size and first_bad. The sync-debug warning comes from C++: inside a custom op it is
    written to stderr rather than raised as a Python warning, so both are counted."""
    if not kernel_built("cuda"):
        pytest.skip("the CUDA kernel was not built")
    edge_index = random_graph(gen, 1000, 1000, 20_000, dtype=dtype, device="cuda")
    NegativeSampler(edge_index, 1000)  # warm-up
    torch.cuda.synchronize()
    message = "called a synchronizing CUDA operation"

    def syncs(caught):
        count = capfd.readouterr().err.count(message)
        count += sum(message in str(w.message) for w in caught)
        caught.clear()
        return count

    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            syncs(caught)
            sampler = NegativeSampler(edge_index, 1000)
            built = syncs(caught)
            sampler._space(ns_mod._UNDIRECTED)
            undirected = syncs(caught)
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    assert (built, undirected) == (1, 1)


def test_backend_is_the_kernel_when_built():
    table = pyg_edgedot._backend.loaded().table
    extension = pyg_edgedot._backend.loaded().build.extension
    if extension is not None:
        assert table["negative_sampling", "cpu"].impl == "cpp"
    # the CUDA library brings the CUDA kernel; without it CUDA tensors take the fallback
    assert table["negative_sampling", "cuda"].impl == ("cuda" if extension == "cuda"
                                                       else "python")


# ---------------------------------------------------------------------------------------
# The CUDA kernel: the CPU kernel's draws, bit for bit
# ---------------------------------------------------------------------------------------

# (N_src, N_dst or None, E, mode space, count, replace, first_round): every path of both
# kernels: sparse draws with and without top-up rounds (rank and draw index packed in one word
# or not), dense draws of part or all of the complement (in-cache, <= 2**16 keys, and bucketed
# permutations), i.i.d. draws, three modes.
SAME_DRAW_CASES = [
    (50, None, 200, "directed", 100, False, -1),        # sparse, in cache
    (50, None, 200, "directed", 100, False, 0),         # every rank from top-up rounds
    (50, None, 200, "directed", 100, False, 7),         # a short first round
    (50, None, 200, "directed", 2000, False, -1),       # dense, part of the complement
    (50, None, 200, "directed", 2250, False, -1),       # dense, all of it
    (50, None, 200, "directed", 5000, True, -1),        # i.i.d.
    (300, None, 2000, "directed", 30_000, False, -1),   # dense, bucketed, count < keys
    (2000, None, 20_000, "directed", 150_000, False, -1),  # sparse, bucketed
    (2000, None, 20_000, "directed", 150_000, True, -1),   # i.i.d., bucketed
    (2000, None, 20_000, "directed", 70_000, False, 1000),  # bucketed after top-ups
    (500, None, 5000, "directed", 60_000, False, -1),   # sparse near M / 4: ~8K repeats; the
                                                        # CUDA sort on 16 of 18 rank bits
    (40, 30, 300, "directed", 500, False, -1),          # bipartite
    (60, None, 500, "self_loops", 900, False, -1),      # directed key space with loops
    (60, None, 500, "undirected", 400, False, -1),      # undirected: [2, 2 * count]
    (400, None, 3000, "undirected", 70_000, False, -1),  # undirected, bucketed
    (2000, None, 20_000, "undirected", 150_000, False, -1),  # undirected, sparse
    (1, 1, 0, "directed", 1, False, -1),                # one key
    (2 ** 28, 2 ** 28 + 3, 50, "directed", 100, False, -1),  # rank + index bits > 63: the
    (2 ** 28, 2 ** 28 + 3, 50, "directed", 100, False, 0),   # CPU sorts the index as a
                                                             # payload, CUDA 8 of 56 rank bits
]


def _space_for(gen, case, device):
    num_src, num_dst, num_edges, space, count, replace, first_round = case
    bipartite = num_dst is not None
    edge_index = random_graph(gen, num_src, num_dst or num_src, num_edges, device=device)
    sampler = NegativeSampler(edge_index, (num_src, num_dst) if bipartite else num_src,
                              self_loops=space == "self_loops")
    if space == "undirected":
        sampler._sample(0, False, True, None, "test")  # builds the undirected key space
        key_space = sampler._undirected
    else:
        key_space = sampler._directed
    return sampler, key_space


def _op_draw(sampler, key_space, count, seed, replace, first_round, dtype=torch.int64):
    return torch.ops.pyg_edgedot.negative_sample(
        key_space.adj, key_space.num_free, count, seed, replace, key_space.mode,
        sampler.num_src_nodes, sampler.num_dst_nodes, dtype, first_round)


@pytest.mark.skipif(not HAS_CUDA, reason="CUDA is not available")
@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", SAME_DRAW_CASES, ids=str)
def test_cuda_kernel_gives_the_cpu_kernels_draws(case, dtype):
    if not (kernel_built("cpu") and kernel_built("cuda")):
        pytest.skip("needs both the C++ and the CUDA kernel")
    count, replace, first_round = case[4:]
    for seed in (0, 12345, 2 ** 62 + 7):
        draws = []
        for device in ("cpu", "cuda"):
            sampler, key_space = _space_for(make_gen(31), case, device)
            draws.append(_op_draw(sampler, key_space, min(count, key_space.num_free), seed,
                                  replace, first_round, dtype))
        assert draws[1].device.type == "cuda" and draws[1].dtype == dtype
        assert torch.equal(draws[0], draws[1].cpu()), (case, seed)


# The draw's definition in plain Python (negative_sampling_common.h's generator): the keys both
# kernels decode, in output order. replace=True: the keys of ranks 0, 1, ... of the rank stream;
# sparse replace=False (count < M / 4): the first `count` distinct ranks of that stream, in order
# of first appearance, whatever the rounds the kernels drew them in; dense: the permutation of
# the whole complement, modelled step for step as the CUDA kernel computes it (prev, last,
# chains), which shows without a GPU that its parallel reconstruction gives the CPU kernel's
# Fisher-Yates shuffle.
_M64 = (1 << 64) - 1
_GAMMA, _STEP = 0x9E3779B97F4A7C15, 0xD1B54A32D192ED03


def _mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


class _Stream:
    def __init__(self, seed, stream):
        self.key = _mix64((_mix64(seed & _M64) + stream * _STEP) & _M64)

    def bits(self, counter):
        return _mix64((self.key + (counter + 1) * _GAMMA) & _M64)

    def below(self, counter, m):
        product = self.bits(counter) * m
        attempt = 1
        while product & _M64 < (1 << 64) % m:
            retry = _mix64(self.key ^ ((attempt * _STEP) & _M64))
            product = _mix64((retry + (counter + 1) * _GAMMA) & _M64) * m
            attempt += 1
        return product >> 64


def _first_distinct(stream, num_ranks, count):
    """The first `count` distinct values of the i.i.d. stream below(0), below(1), ..."""
    seen, order, counter = set(), [], 0
    while len(order) < count:
        r = stream.below(counter, num_ranks)
        counter += 1
        if r not in seen:
            seen.add(r)
            order.append(r)
    return order


def _reference_draw(adj, num_ranks, count, seed, replace):
    """The keys the kernels decode, in output order."""
    rank_stream = _Stream(seed, 0)
    key = lambda r: r + bisect.bisect_right(adj, r)  # noqa: E731
    if replace:
        return [key(rank_stream.below(c, num_ranks)) for c in range(count)]
    if count < (num_ranks + 3) // 4:
        return [key(r) for r in _first_distinct(rank_stream, num_ranks, count)]
    keys = [key(r) for r in range(num_ranks)]
    n = len(keys)
    shuffle = _Stream(seed, 2)
    if n <= 1 << 16:  # one run, steps at g < min(count, n - 1)
        data, span = keys, n
        end, limit = [n] * n, [min(count, n - 1)] * n
    else:  # buckets: a stable sort by bucket, then a run per bucket
        log_buckets = 0
        while (1 << log_buckets) * 4096 < n:
            log_buckets += 1
        label_stream = _Stream(seed, 1)
        label = [label_stream.bits(i) >> (64 - log_buckets) for i in range(n)]
        order = sorted(range(n), key=label.__getitem__)
        data, sorted_label = [keys[i] for i in order], [label[i] for i in order]
        bucket_end = {sorted_label[g]: g + 1 for g in range(n)}
        end = [bucket_end[b] for b in sorted_label]
        limit = [e - 1 for e in end]
        span = n if count == n else end[count - 1]
    target = [g + shuffle.below(g, end[g] - g) if g < limit[g] else g for g in range(span)]
    by_target = sorted(range(span), key=target.__getitem__)  # stable
    prev, last = [-1] * span, [-1] * span
    for q, k in enumerate(by_target):
        p = target[k]
        if q > 0 and target[by_target[q - 1]] == p:
            prev[k] = by_target[q - 1]
        if k != p and (q + 1 == span or target[by_target[q + 1]] != p or by_target[q + 1] == p):
            last[p] = k
    out = []
    for t in range(count):
        source = prev[t]
        if source < 0:
            source = target[t]
        else:
            while last[source] >= 0:
                source = last[source]
        out.append(data[source])
    return out


@pytest.mark.skipif(OP_IMPL != "cpp", reason="the C++ kernel was not built")
@pytest.mark.parametrize("case", [c for c in SAME_DRAW_CASES if c[4] <= 70_000], ids=str)
def test_kernel_draws_follow_the_definition(case):
    count, replace, first_round = case[4:]
    sampler, key_space = _space_for(make_gen(31), case, "cpu")
    count = min(count, key_space.num_free)
    seed = 987654321
    keys = _reference_draw(key_space.adj.tolist(), key_space.num_free, count, seed, replace)
    expected = ns_mod._pairs(key_space.mode, torch.tensor(keys, dtype=torch.long),
                             sampler.num_src_nodes, sampler.num_dst_nodes, torch.int64)
    assert torch.equal(_op_draw(sampler, key_space, count, seed, replace, first_round),
                       expected)


@pytest.mark.skipif(OP_IMPL != "cpp", reason="the C++ kernel was not built")
@pytest.mark.parametrize("count", [1, 37, 5_000])
def test_sparse_draw_is_the_first_distinct_of_one_stream(gen, count):
    # Whatever the first round's size (0 and 1: every rank from top-up rounds; 4 * count: one
    # round with many more draws than needed), the draw is the first `count` distinct ranks of
    # the one i.i.d. stream of ranks, in order of first appearance.
    edge_index = random_graph(gen, 300, 300, 2_000)
    sampler = NegativeSampler(edge_index, 300)
    space = sampler._directed
    for seed in (3, 2 ** 62 + 1):
        ranks = torch.tensor(_first_distinct(_Stream(seed, 0), space.num_free, count))
        keys = ranks + torch.searchsorted(space.adj, ranks, right=True)
        expected = ns_mod._pairs(space.mode, keys, 300, 300, torch.int64)
        for first_round in (-1, 0, 1, count // 2, 4 * count):
            assert torch.equal(_op_draw(sampler, space, count, seed, False, first_round),
                               expected), (seed, first_round)


def _first_two_counts(draws, num_ranks):
    """Counts of the ordered pair (first, second) of each draw's ranks, num_ranks^2 cells."""
    first, second = draws[:, 0], draws[:, 1]
    return torch.bincount(first * num_ranks + second, minlength=num_ranks * num_ranks)


@pytest.mark.skipif(OP_IMPL != "cpp", reason="the C++ kernel was not built")
def test_sparse_draw_order_is_uniform():
    # 12 ranks (an empty graph of 4 nodes, no loops), 2 drawn (sparse: 2 < 12 / 4), 20,000
    # seeds: the first column is every rank equally often, and so is every ordered pair
    # (first, second) of distinct ranks (132 cells, ~150 each). The test can fail: the same
    # statistic on the pair sorted (a uniform subset in sorted order) is rejected.
    empty = torch.empty(2, 0, dtype=torch.long)
    sampler = NegativeSampler(empty, 4)
    space = sampler._directed
    num_ranks = space.num_free
    assert num_ranks == 12
    draws = torch.stack([_keys_of(_op_draw(sampler, space, 2, seed, False, -1), 4)
                         for seed in range(20_000)])
    # keys of the no-loops space: src * 4 + dst -> rank (the complement is all 12 pairs)
    key_to_rank = {k: r for r, k in enumerate(sorted(i * 4 + j for i in range(4)
                                                     for j in range(4) if i != j))}
    draws = draws.apply_(lambda k: key_to_rank[k])
    assert bool((draws[:, 0] != draws[:, 1]).all())
    assert _chi2_uniform(torch.bincount(draws[:, 0], minlength=12)) > 1e-3
    off_diagonal = ~torch.eye(12, dtype=torch.bool).view(-1)
    assert _chi2_uniform(_first_two_counts(draws, 12)[off_diagonal]) > 1e-3
    ordered = torch.sort(draws, dim=1).values
    assert _chi2_uniform(_first_two_counts(ordered, 12)[off_diagonal]) < 1e-6


# ---------------------------------------------------------------------------------------
# structured and batched
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("contains_neg_self_loops", [True, False])
def test_structured(gen, device, dtype, contains_neg_self_loops):
    edge_index = random_graph(gen, 30, 30, 200, dtype, device)
    i, j, k = structured_negative_sampling(edge_index, 30, contains_neg_self_loops)
    assert torch.equal(i, edge_index[0]) and torch.equal(j, edge_index[1])
    assert i.dtype == j.dtype == dtype  # the rows of edge_index; k int64, as PyG's
    assert k.shape == (200,) and k.dtype == torch.int64 and k.device == edge_index.device
    edges = pair_set(edge_index)
    for a, c in zip(i.tolist(), k.tolist()):
        assert (a, c) not in edges and (contains_neg_self_loops or a != c)


def test_structured_node_connected_to_all():
    # node 0 -> every other node: infeasible without self-loops, feasible with them
    edge_index = torch.tensor([[0, 0, 0, 0, 1, 2], [1, 2, 3, 4, 2, 3]])
    assert not structured_negative_sampling_feasible(edge_index, 5, False)
    assert structured_negative_sampling_feasible(edge_index, 5, True)
    with pytest.raises(ValueError, match="structured_negative_sampling: node 0 is connected"):
        structured_negative_sampling(edge_index, 5, contains_neg_self_loops=False)
    i, j, k = structured_negative_sampling(edge_index, 5, contains_neg_self_loops=True)
    assert bool((k[:4] == 0).all())  # the only negative of node 0 is its self-loop


@pytest.mark.parametrize("seed", range(6))
def test_feasible_matches_pyg(seed):
    gen = make_gen(seed)
    num_nodes = 6
    edge_index = random_graph(gen, num_nodes, num_nodes, 40)
    for loops in (True, False):
        assert (structured_negative_sampling_feasible(edge_index, num_nodes, loops)
                == pyg_utils.structured_negative_sampling_feasible(edge_index, num_nodes,
                                                                   loops))


def _per_graph_check(neg, edge_index, ptr_src, ptr_dst, bipartite, expected_counts):
    graph = torch.bucketize(neg[0], ptr_src[1:], right=True)
    assert torch.equal(torch.bucketize(neg[1], ptr_dst[1:], right=True), graph)
    assert bool((graph[1:] >= graph[:-1]).all()), "graphs must come in order"
    assert torch.bincount(graph, minlength=len(expected_counts)).tolist() == expected_counts
    check_negatives(neg, edge_index, int(ptr_src[-1]), int(ptr_dst[-1]), not bipartite)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num", [None, 3, 0.5, 400])
def test_batched(gen, device, num):
    sizes = [5, 1, 9, 3, 12]
    parts, ptr = [], [0]
    for n in sizes:
        parts.append(random_graph(gen, n, n, 3 * n) + ptr[-1])
        ptr.append(ptr[-1] + n)
    edge_index = torch.cat(parts, 1).to(device)
    batch = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes)).to(device)
    neg = quiet(batched_negative_sampling, edge_index, batch, num)
    expected = []
    for b, n in enumerate(sizes):
        e = parts[b].size(1)
        k = e if num is None else (int(num * e) if isinstance(num, float) else num)
        free = len(complement(parts[b] - ptr[b], n, n, False))
        expected.append(min(k, free))
    ptr_t = torch.tensor(ptr, device=device)
    _per_graph_check(neg, edge_index, ptr_t, ptr_t, False, expected)

    und = quiet(batched_negative_sampling, edge_index, batch, 6, force_undirected=True)
    graph = torch.bucketize(und[0], ptr_t[1:], right=True)
    for b in range(len(sizes)):
        cols = und[:, graph == b]
        half = cols.size(1) // 2
        assert torch.equal(cols[:, :half], cols[:, half:].flip(0))


def test_batched_bipartite_and_unsorted_batch(gen):
    # PyG's docstring example layout: 3 graphs of 2 sources x 4 destinations
    e1 = torch.tensor([[0, 0, 1, 1], [0, 1, 2, 3]])
    edge_index = torch.cat([e1, e1 + torch.tensor([[2], [4]]), e1 + torch.tensor([[4], [8]])], 1)
    src_batch = torch.tensor([0, 0, 1, 1, 2, 2])
    dst_batch = torch.tensor([0] * 4 + [1] * 4 + [2] * 4)
    neg = batched_negative_sampling(edge_index, (src_batch, dst_batch))
    _per_graph_check(neg, edge_index, torch.tensor([0, 2, 4, 6]), torch.tensor([0, 4, 8, 12]),
                     True, [4, 4, 4])
    # interleaved graphs (PyG requires contiguous ones): still inside each graph
    batch = torch.tensor([0, 1, 0, 1, 0, 1, 0, 1])
    edge_index = torch.tensor([[0, 2, 1, 3, 4], [2, 4, 3, 5, 6]])
    neg = quiet(batched_negative_sampling, edge_index, batch, 20)
    check_negatives(neg, edge_index, 8, 8, True)
    assert bool((batch[neg[0]] == batch[neg[1]]).all())
    assert neg.size(1) == 2 * 12 - edge_index.size(1)


def test_batched_graph_ids_past_the_node_count():
    # Graph ids with gaps leave graphs empty, and the work must stay O(nodes), not O(largest
    # id): all 4 nodes in graph 10**6, or in graph 2**40 (an array that long fits no memory),
    # draw the same as in graph 0, and the empty graphs still count in the warning.
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    for graph_id in (10 ** 6, 2 ** 40):
        torch.manual_seed(0)
        far = batched_negative_sampling(edge_index, torch.full((4,), graph_id), 2)
        torch.manual_seed(0)
        near = batched_negative_sampling(edge_index, torch.zeros(4, dtype=torch.long), 2)
        assert torch.equal(far, near)
    # graphs 1..4 empty: each asked for 2 pairs; graph 0 (one edge) holds 1 of its 2
    edge_index = torch.tensor([[0], [1]])
    batch = torch.tensor([0, 0, 5, 5])
    with pytest.warns(UserWarning, match=r"asked for 10 negative pairs in 5 graph\(s\) but "
                                         r"the complement holds only 1"):
        neg = batched_negative_sampling(edge_index, batch, 2)
    check_negatives(neg, edge_index, 4, 4, True)
    assert neg.size(1) == 3 and bool((batch[neg[0]] == batch[neg[1]]).all())
    with pytest.warns(UserWarning, match=r"asked for 12 negative pairs in 6 graph\(s\)"):
        batched_negative_sampling(edge_index, batch, 5, force_undirected=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # None and ratios ask nothing of an empty graph
        assert batched_negative_sampling(edge_index, batch).tolist() == [[1], [0]]
        assert batched_negative_sampling(edge_index, batch, 1.5).tolist() == [[1], [0]]
    # bipartite: the ids of both sides renumbered together
    with pytest.warns(UserWarning, match=r"asked for 24 negative pairs in 8 graph\(s\) but "
                                         r"the complement holds only 2"):
        neg = batched_negative_sampling(edge_index, (torch.tensor([0, 7]),
                                                     torch.tensor([7, 0, 0])), 3)
    assert sorted(map(tuple, neg.t().tolist())) == [(0, 2), (1, 0)]


def test_sampler_edges_changed_in_place():
    # The undirected space is built on first use from the edges given: changed in place
    # since, they would give it another graph than the directed draws'.
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    sampler = NegativeSampler(edge_index, 4)
    edge_index[:, 0] = torch.tensor([3, 2])
    sampler.sample(4)   # the directed space was built with the sampler: the edges as given
    with pytest.raises(RuntimeError, match=r"^NegativeSampler: edge_index was changed in "
                                           r"place after the sampler was built"):
        sampler.sample(4, force_undirected=True)
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 3]])
    sampler = NegativeSampler(edge_index, 4)
    sampler.sample(4, force_undirected=True)   # built before the change: kept
    edge_index.add_(0)
    sampler.sample(4, force_undirected=True)
    with torch.inference_mode():   # inference tensors keep no version: nothing to check
        sampler = NegativeSampler(torch.tensor([[0, 1, 2], [1, 2, 3]]), 4)
        check_negatives(sampler.sample(4, force_undirected=True),
                        torch.tensor([[0, 1, 2], [1, 2, 3]]), 4, 4, True)


def test_sampler_replace_is_truthy():
    # as force_undirected: any truthy value (the op itself takes a bool)
    sampler = NegativeSampler(torch.tensor([[0, 1, 2], [1, 2, 3]]), 4)
    for truthy, flag in ((1, True), ("yes", True), (0, False), (None, False)):
        out = sampler.sample(6, replace=truthy, generator=torch.Generator().manual_seed(3))
        ref = sampler.sample(6, replace=flag, generator=torch.Generator().manual_seed(3))
        assert torch.equal(out, ref)

# ---------------------------------------------------------------------------------------
# Against PyG's own functions: same shapes, dtype, and PyG's guarantees hold on ours
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("seed", range(4))
def test_against_pyg(seed, dtype):
    gen = make_gen(seed)
    edge_index = pyg_utils.to_undirected(random_graph(gen, 40, 40, 150)).to(dtype)
    for kwargs in ({}, {"num_nodes": 40}, {"num_nodes": (40, 50)}, {"num_neg_samples": 0.7},
                   {"force_undirected": True}, {"num_neg_samples": 33}):
        ours = negative_sampling(edge_index, **kwargs)
        theirs = pyg_utils.negative_sampling(edge_index, **kwargs)
        assert ours.dtype == theirs.dtype
        assert ours.size(0) == theirs.size(0) == 2
        assert ours.size(1) >= theirs.size(1)   # PyG may come back short, we never do
        if kwargs.get("force_undirected"):
            assert pyg_utils.is_undirected(ours) and pyg_utils.is_undirected(theirs)
        if not isinstance(kwargs.get("num_nodes"), tuple):  # bipartite (i, i) is fine
            assert not pyg_utils.contains_self_loops(ours)
    i, j, k = structured_negative_sampling(edge_index, 40, False)
    pi, pj, pk = pyg_utils.structured_negative_sampling(edge_index, 40, False)
    assert torch.equal(i, pi) and torch.equal(j, pj) and k.shape == pk.shape
    assert i.dtype == pi.dtype and j.dtype == pj.dtype and k.dtype == pk.dtype
    batch = torch.repeat_interleave(torch.arange(2), 20)
    local = edge_index[:, (edge_index < 20).all(0) | (edge_index >= 20).all(0)]
    ours = batched_negative_sampling(local, batch)
    theirs = pyg_utils.batched_negative_sampling(local, batch)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype


# ---------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------

GOOD = torch.tensor([[0, 1, 2], [1, 2, 3]])


@pytest.mark.parametrize("call, error, match", [
    (lambda: negative_sampling([[0, 1], [1, 0]]), TypeError, r"edge_index must be a Tensor of shape \[2, E\]"),
    (lambda: negative_sampling(GOOD[0]), ValueError, r"edge_index must have shape \[2, E\]"),
    (lambda: negative_sampling(GOOD.t()), ValueError, r"edge_index must have shape \[2, E\]"),
    (lambda: negative_sampling(GOOD.float()), TypeError, "edge_index must be int32 or int64"),
    (lambda: negative_sampling(GOOD, 3), IndexError, "num_nodes must be at least max index"),
    (lambda: negative_sampling(GOOD, (4, 3)), IndexError, "destination index 3"),
    (lambda: negative_sampling(GOOD - 1), IndexError, "negative index"),
    (lambda: negative_sampling(GOOD, -4), ValueError, "num_nodes must be >= 0"),
    (lambda: negative_sampling(GOOD, (4, 4, 4)), ValueError, "num_nodes must be an int or a pair"),
    (lambda: negative_sampling(GOOD, 4.0), TypeError, "num_nodes must be an int"),
    (lambda: negative_sampling(GOOD, 4, -1), ValueError, "num_neg_samples must be >= 0"),
    (lambda: negative_sampling(GOOD, 4, -0.5), ValueError, "num_neg_samples as a ratio"),
    (lambda: negative_sampling(GOOD, 4, float("nan")), ValueError, "num_neg_samples as a ratio"),
    (lambda: negative_sampling(GOOD, 4, "3"), TypeError, "num_neg_samples must be an int"),
    (lambda: negative_sampling(GOOD, 4, True), TypeError, "num_neg_samples must be an int"),
    (lambda: negative_sampling(GOOD, method="fast"), ValueError, "method must be 'sparse'"),
    (lambda: negative_sampling(GOOD, generator=3), TypeError, "generator must be a torch.Generator"),
    (lambda: NegativeSampler(GOOD, 4).sample(-2), ValueError, "NegativeSampler: num_neg_samples"),
    (lambda: NegativeSampler(GOOD, 4).sample_per_source(GOOD[0], -1), ValueError, "k must be >= 0"),
    (lambda: NegativeSampler(GOOD, 4).sample_per_source(GOOD, 1), ValueError, r"src_index must be 1-D \[S\]"),
    (lambda: NegativeSampler(GOOD, 4).sample_per_source(torch.tensor([4]), 1), IndexError, "src_index holds 4"),
    (lambda: NegativeSampler(GOOD, 4).sample_per_source(torch.tensor([0.0])), TypeError, "src_index must be int32"),
    (lambda: structured_negative_sampling(GOOD, (4, 4)), TypeError, "num_nodes must be an int"),
    (lambda: batched_negative_sampling(GOOD, torch.tensor([0, 0, 1, 1])), ValueError, "between two different graphs"),
    (lambda: batched_negative_sampling(GOOD, torch.tensor([0, 0, 0])), IndexError, r"destination index 3 but batch has only 3 entries \(one per node\); batch must be at least max index \+ 1 long"),
    (lambda: batched_negative_sampling(GOOD, (torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long))), IndexError, r"destination index 3 but batch\[1\] has only 3 entries \(one per destination node\)"),
    (lambda: batched_negative_sampling(GOOD, torch.tensor([0, 0, -1, 0])), ValueError, "negative graph id"),
    (lambda: batched_negative_sampling(GOOD, [1, 2, 3]), TypeError, "batch must be"),
    (lambda: batched_negative_sampling(GOOD, torch.zeros(4, dtype=torch.long).to_sparse()), TypeError, r"batch must be a dense \(strided\) Tensor \(got layout torch.sparse_coo\)"),
    (lambda: batched_negative_sampling(GOOD, (torch.zeros(4, dtype=torch.long), torch.zeros(4, dtype=torch.long).to_sparse())), TypeError, r"batch\[1\] must be a dense \(strided\) Tensor"),
    (lambda: negative_sampling(torch.zeros(2, 1, dtype=torch.long), 2 ** 32), ValueError, "2\\*\\*62"),
    (lambda: NegativeSampler(GOOD, 4).sample(2 ** 63, replace=True), ValueError, "num_neg_samples must be below 2\\*\\*62"),
    (lambda: NegativeSampler(GOOD, 4).sample_per_source(GOOD[0], 2 ** 62), ValueError, "k must be below"),
])
def test_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_huge_ratio_returns_the_complement():
    # a ratio past any key space gives the whole complement with the warning, batched too
    edge_index = torch.tensor([[0, 1, 2, 3, 4], [1, 2, 3, 4, 0]])
    for call in (lambda: negative_sampling(edge_index, 5, 1e19),
                 lambda: batched_negative_sampling(edge_index, torch.zeros(5, dtype=torch.long),
                                                   1e19)):
        with pytest.warns(UserWarning, match="only 15"):
            neg = call()
        assert neg.shape == (2, 15)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")
def test_generator_on_wrong_device():
    with pytest.raises(ValueError, match="generator must be on edge_index's device"):
        negative_sampling(GOOD.cuda(), generator=torch.Generator())
