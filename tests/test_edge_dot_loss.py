"""edge_dot_loss: the generator against a pure-Python splitmix64, the negatives against their
definition and the sampler's graph (Python sets), the loss and its gradients against the
unfused float64 computation on the same negatives, the kernels against the composite (its
Python implementation over edge_dot's ops) on the same seed, seeds, chunking, threads, empty
inputs, gradcheck, torch.compile, opcheck and the errors."""
import math
import re

import pytest
import torch

from pyg_edgedot import EdgeDotLoss, NegativeSampler, _backend, edge_dot_loss
from pyg_edgedot.ops import _chunked
from pyg_edgedot.ops import edge_dot_loss as loss_module
from pyg_edgedot.ops.edge_dot_loss import loss_negatives, mix64, uniform
from _helpers import (DEVICES, FLOAT_DTYPES, INDEX_DTYPES, assert_close, dtype_id,
                      gradient_bits_repeat, leaf, randn, random_edge_index)

MASK64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def py_mix64(z: int) -> int:
    z &= MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def py_uniform(seed: int, counter: int) -> float:
    bits = py_mix64(py_mix64(seed) + (counter + 1) * GAMMA)
    return (bits >> 11) * 2.0 ** -53


def as_int64(value: int) -> int:
    value &= MASK64
    return value - (1 << 64) if value >> 63 else value


def test_generator_is_splitmix64():
    # splitmix64's first output for state 0 (Vigna's reference implementation)
    assert mix64(torch.tensor(as_int64(GAMMA))).item() == as_int64(0xE220A8397B1DCDAF)
    values = [0, 1, -1, 2 ** 62 + 12345, -(2 ** 63), 2 ** 63 - 1, 987654321]
    z = torch.tensor(values, dtype=torch.int64)
    assert mix64(z).tolist() == [as_int64(py_mix64(v)) for v in values]
    counters = torch.tensor([0, 1, 2, 10 ** 9, 2 ** 40 + 7], dtype=torch.int64)
    for seed in (0, 7, -3, 2 ** 63 - 1):
        u = uniform(torch.tensor(seed), counters)
        assert u.dtype == torch.float64
        assert u.tolist() == [py_uniform(seed, int(c)) for c in counters]


# ---- the negatives against their definition ------------------------------------------------

def _graph(gen, num_src, num_dst, num_edges, index_dtype=torch.int64, device="cpu"):
    return random_edge_index(gen, num_src, num_dst, num_edges, index_dtype, device)


def py_negatives(edge_index, seed, k, negatives, num_src, num_dst, sampler_edges, self_loops):
    """The definition, in Python: rank = min(floor(u * M), M - 1) into the sorted candidate
    list (all pairs / destinations without a sampler; minus the edges and, homogeneous,
    self-loops with one)."""
    src_list = edge_index[0].tolist()
    out = []
    for e, i in enumerate(src_list):
        row = []
        for j in range(k):
            u = py_uniform(seed, e * k + j)
            if negatives == "structured":
                cands = [(i, d) for d in range(num_dst)]
            else:
                cands = [(s, d) for s in range(num_src) for d in range(num_dst)]
            if sampler_edges is not None:
                cands = [c for c in cands
                         if c not in sampler_edges and (self_loops or c[0] != c[1])]
            rank = min(math.floor(u * float(len(cands))), len(cands) - 1)
            row.append(cands[rank])
        out.append(row)
    return out


@pytest.mark.parametrize("negatives", ["structured", "uniform"])
@pytest.mark.parametrize("sampler_kind", ["none", "homogeneous", "self_loops", "bipartite"])
def test_negatives_follow_the_definition(sampler_kind, negatives, gen):
    num_src, num_dst = (7, 5) if sampler_kind in ("none", "bipartite") else (7, 7)
    graph = _graph(gen, num_src, num_dst, 18)
    positives = _graph(gen, num_src, num_dst, 11)
    sampler, edges, self_loops = None, None, True
    if sampler_kind != "none":
        num_nodes = (num_src, num_dst) if sampler_kind == "bipartite" else num_src
        self_loops = sampler_kind != "homogeneous"
        sampler = NegativeSampler(graph, num_nodes, self_loops=self_loops)
        edges = set(map(tuple, graph.t().tolist()))
        # sources connected to every destination have no structured negative
        positives = positives[:, sampler._free_per_source()[positives[0]] > 0]
    seed, k = 12345, 3
    got = loss_negatives(positives, seed, k, negatives=negatives, sampler=sampler,
                         num_nodes=(num_src, num_dst))
    assert got.shape == (2, positives.size(1), k) and got.dtype == positives.dtype
    pairs = [[tuple(p) for p in row] for row in got.permute(1, 2, 0).tolist()]
    assert pairs == py_negatives(positives, seed, k, negatives, num_src, num_dst, edges,
                                 self_loops)
    if negatives == "structured":
        assert torch.equal(got[0], positives[0].unsqueeze(1).expand(-1, k))


@pytest.mark.parametrize("negatives", ["structured", "uniform"])
def test_sampler_negatives_are_never_edges(negatives, gen):
    # dense enough that unchecked negatives would hit edges often
    num_nodes = 40
    graph = _graph(gen, num_nodes, num_nodes, 900)
    sampler = NegativeSampler(graph, num_nodes)
    got = loss_negatives(graph, 99, 8, negatives=negatives, sampler=sampler)
    edges = set(map(tuple, graph.t().tolist()))
    pairs = got.reshape(2, -1).t().tolist()
    assert not any(tuple(p) in edges for p in pairs)
    assert not any(s == d for s, d in pairs)
    unchecked = loss_negatives(graph, 99, 8, negatives=negatives, num_nodes=num_nodes)
    assert any(tuple(p) in edges for p in unchecked.reshape(2, -1).t().tolist())


# ---- the loss against the unfused float64 computation -------------------------------------

def _softplus(z):
    return z.clamp(min=0) + torch.log1p(torch.exp(-z.abs()))


def reference_loss(x_src, x_dst, positives, negs, loss, reduction):
    """Eager float64 on the CPU, from the same inputs and the materialized negatives."""
    xs, xd = x_src.detach().cpu().double(), x_dst.detach().cpu().double()
    same = x_src is x_dst
    xs.requires_grad_(True)
    xd = xs if same else xd.requires_grad_(True)
    p, n = positives.cpu().long(), negs.cpu().long()
    pos = (xs[p[0]] * xd[p[1]]).sum(-1)
    neg = (xs[n[0]] * xd[n[1]]).sum(-1)            # [E, K]
    if loss == "bce":
        logits = torch.cat([pos, neg.reshape(-1)])
        labels = torch.cat([torch.ones_like(pos), torch.zeros_like(neg.reshape(-1))])
        terms = _softplus(logits) - logits * labels   # = F.bce_with_logits, exactly
    else:
        terms = _softplus(neg - pos.unsqueeze(1)).reshape(-1)
    out = terms.mean() if reduction == "mean" else terms.sum()
    grads = torch.autograd.grad(out, [xs] if same else [xs, xd]) if terms.numel() else (
        torch.zeros_like(xs), torch.zeros_like(xd))
    return out.detach(), grads


def _problem(gen, sampler_kind, dtype, index_dtype, device, num_edges=40, feat_dim=7):
    if sampler_kind == "homogeneous":
        num_src = num_dst = 23
    else:
        num_src, num_dst = 19, 26
    x_src = randn(gen, num_src, feat_dim, dtype=dtype, device=device)
    x_dst = x_src if sampler_kind == "homogeneous" else randn(gen, num_dst, feat_dim,
                                                              dtype=dtype, device=device)
    positives = _graph(gen, num_src, num_dst, num_edges, index_dtype, device)
    sampler = None
    if sampler_kind != "none":
        graph = _graph(gen, num_src, num_dst, 150, index_dtype, device)
        nodes = num_src if sampler_kind == "homogeneous" else (num_src, num_dst)
        sampler = NegativeSampler(graph, nodes)
    return x_src, x_dst, positives, sampler


LOW_TOL = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 3e-3,
           torch.bfloat16: 2e-2}


def _run(x_src, x_dst, positives, **kwargs):
    """The loss and the gradients of its leaves (one leaf when x_src is x_dst)."""
    same = x_src is x_dst
    a = leaf(x_src)
    b = a if same else leaf(x_dst)
    out = edge_dot_loss(a, b, positives, **kwargs)
    out.backward()
    return out.detach(), (a.grad,) if same else (a.grad, b.grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_negatives", [1, 3])
@pytest.mark.parametrize("sampler_kind", ["none", "homogeneous", "bipartite"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("loss", ["bce", "bpr"])
@pytest.mark.parametrize("negatives", ["structured", "uniform"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_loss_matches_unfused(dtype, index_dtype, negatives, loss, reduction, sampler_kind,
                              num_negatives, device, gen):
    x_src, x_dst, positives, sampler = _problem(gen, sampler_kind, dtype, index_dtype, device)
    options = dict(num_negatives=num_negatives, negatives=negatives, sampler=sampler)
    out, grads = _run(x_src, x_dst, positives, loss=loss, reduction=reduction, seed=2024,
                      **options)
    assert out.shape == () and out.dtype == dtype
    negs = loss_negatives(positives, 2024, num_nodes=(x_src.size(0), x_dst.size(0)), **options)
    if sampler is not None:
        edges = set(map(tuple, sampler._edge_index.t().tolist()))
        assert not any(tuple(p) in edges for p in negs.reshape(2, -1).t().tolist())
    ref, ref_grads = reference_loss(x_src, x_dst, positives, negs, loss, reduction)
    tol = LOW_TOL[dtype]
    assert_close(out.reshape(1), ref.reshape(1), dtype, "loss", tol)
    for grad, ref_grad, name in zip(grads, ref_grads, ("x_src", "x_dst")):
        assert grad.dtype == dtype
        assert_close(grad, ref_grad, dtype, f"grad {name}", tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("loss", ["bce", "bpr"])
def test_no_positives(loss, reduction, device, gen):
    x_src, x_dst, positives, _ = _problem(gen, "none", torch.float32, torch.int64, device,
                                          num_edges=0)
    out, (grad_src, grad_dst) = _run(x_src, x_dst, positives, loss=loss, reduction=reduction,
                                     num_negatives=2, seed=1)
    assert math.isnan(out.item()) if reduction == "mean" else out.item() == 0.0
    assert torch.equal(grad_src, torch.zeros_like(x_src))
    assert torch.equal(grad_dst, torch.zeros_like(x_dst))


# ---- seeds, determinism and chunking -------------------------------------------------------

def _bits(result):
    out, grads = result
    return [out.view(-1)] + list(grads)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("negatives", ["structured", "uniform"])
def test_same_seed_same_bits(negatives, device, gen, monkeypatch, request):
    x_src, x_dst, positives, sampler = _problem(gen, "bipartite", torch.float32, torch.int64,
                                                device, num_edges=300, feat_dim=16)
    gradient_bits_repeat("edge_dot", device, request)   # the loss sums through edge_dot_grad
    monkeypatch.setattr(_chunked, "DEFAULT_CHUNK_ELEMS", 64)   # several chunks
    kwargs = dict(num_negatives=3, negatives=negatives, sampler=sampler)
    first = _bits(_run(x_src, x_dst, positives, seed=7, **kwargs))
    again = _bits(_run(x_src, x_dst, positives, seed=7, **kwargs))
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    # a 0-dim tensor seed is the same seed; seed=None is drawn from torch's CPU generator
    as_tensor = _bits(_run(x_src, x_dst, positives, seed=torch.tensor(7), **kwargs))
    assert all(torch.equal(a, b) for a, b in zip(first, as_tensor))
    torch.manual_seed(3)
    drawn = _bits(_run(x_src, x_dst, positives, **kwargs))
    torch.manual_seed(3)
    redrawn = _bits(_run(x_src, x_dst, positives, **kwargs))
    assert all(torch.equal(a, b) for a, b in zip(drawn, redrawn))
    assert not torch.equal(drawn[0], first[0])


@pytest.mark.parametrize("negatives", ["structured", "uniform"])
def test_different_seed_different_negatives(negatives, gen):
    positives = _graph(gen, 50, 60, 200)
    a = loss_negatives(positives, 1, 2, negatives=negatives, num_nodes=(50, 60))
    b = loss_negatives(positives, 2, 2, negatives=negatives, num_nodes=(50, 60))
    assert (a != b).any(dim=0).float().mean() > 0.9
    # the seed is taken modulo 2**64
    c = loss_negatives(positives, 1 + 2 ** 64, 2, negatives=negatives, num_nodes=(50, 60))
    assert torch.equal(a, c)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("loss", ["bce", "bpr"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=dtype_id)
def test_chunks_give_the_one_chunk_result(dtype, loss, device, gen, monkeypatch):
    x_src, x_dst, positives, sampler = _problem(gen, "homogeneous", dtype, torch.int32,
                                                device, num_edges=257, feat_dim=9)
    kwargs = dict(num_negatives=4, negatives="structured", sampler=sampler, loss=loss,
                  seed=11)
    one = _run(x_src, x_dst, positives, **kwargs)
    monkeypatch.setattr(_chunked, "DEFAULT_CHUNK_ELEMS", 35)   # 7 positives per chunk
    many = _run(x_src, x_dst, positives, **kwargs)
    tol = {torch.float64: 1e-13, torch.float32: 1e-6, torch.bfloat16: 1e-2}[dtype]
    for a, b in zip(_bits(one), _bits(many)):
        assert_close(a, b.double().cpu(), dtype, tol=tol)


# ---- the kernels against the composite on the same seed ------------------------------------

def _kernel_or_skip(device: str) -> None:
    impl = _backend.loaded().table["edge_dot_loss", device].impl
    if impl not in ("cpp", "cuda"):
        pytest.skip(f"edge_dot_loss has no compiled kernel for {device} here ({impl})")


def _op_args(x_src, x_dst, positives, sampler, num_negatives, negatives, loss, reduction,
             seed=2024, num_nodes=None):
    """The registered op's arguments, as edge_dot_loss builds them."""
    device = x_src.device
    empty = torch.empty(0, dtype=torch.int64, device=device)
    if sampler is None:
        adj, row_ptr, self_loops = empty, empty, True
        nodes = num_nodes or (x_src.size(0), x_dst.size(0))
    else:
        adj = sampler._directed.adj
        row_ptr = sampler._source_rows() if negatives == "structured" else empty
        self_loops = sampler._directed.mode == "directed"
        nodes = (sampler.num_src_nodes, sampler.num_dst_nodes)
    return (x_src, x_dst, positives[0], positives[1], torch.tensor(seed), adj, row_ptr,
            num_negatives, nodes[0], nodes[1], self_loops, negatives, loss, reduction)


def _kernel_and_composite(args, grad_loss=1.7):
    """Forward of both, and both backwards fed the *composite's* score_grad (so the gradients
    compare the negatives and the scatter alone: the sigmoid may differ by an ulp)."""
    composite = loss_module.fallback_impls()
    kernel = torch.ops.pyg_edgedot.edge_dot_loss(*args)
    ref = composite["edge_dot_loss"](*args)
    g = torch.tensor(grad_loss, dtype=args[0].dtype, device=args[0].device)
    kernel_grads = torch.ops.pyg_edgedot.edge_dot_loss_grad(g, ref[2], *args, True, True)
    ref_grads = composite["edge_dot_loss_grad"](g, ref[2], *args, True, True)
    return kernel, ref, kernel_grads, ref_grads


SCORE_GRAD_TOL = {torch.float64: 1e-15, torch.float32: 1e-6, torch.float16: 1e-3,
                  torch.bfloat16: 8e-3}


def _assert_kernel_matches(kernel, ref, kernel_grads, ref_grads, dtype, device):
    (out, first_bad, score_grad), (ref_out, ref_first_bad, ref_score_grad) = kernel, ref
    assert out.shape == () and out.dtype == dtype and score_grad.dtype == dtype
    assert torch.equal(first_bad.cpu(), ref_first_bad.cpu())
    # the same scores (edge_dot's row dot product); the terms differ by rounding only
    tol = SCORE_GRAD_TOL[dtype]
    torch.testing.assert_close(out.double().cpu(), ref_out.double().cpu(), rtol=tol * 10,
                               atol=0, equal_nan=True)
    torch.testing.assert_close(score_grad.double().cpu(), ref_score_grad.double().cpu(),
                               rtol=tol, atol=tol)
    for got, want in zip(kernel_grads, ref_grads):
        assert got.dtype == dtype and got.shape == want.shape
        if device == "cpu":   # the same pairs, weights and order: the same bits
            assert torch.equal(got, want)
        else:
            torch.testing.assert_close(got.double().cpu(), want.double().cpu(), rtol=tol,
                                       atol=tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sampler_kind", ["none", "homogeneous", "bipartite"])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("loss", ["bce", "bpr"])
@pytest.mark.parametrize("negatives", ["structured", "uniform"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_kernel_matches_composite(dtype, index_dtype, negatives, loss, reduction, sampler_kind,
                                  device, gen):
    _kernel_or_skip(device)
    x_src, x_dst, positives, sampler = _problem(gen, sampler_kind, dtype, index_dtype, device,
                                                num_edges=60, feat_dim=19)
    num_negatives = 1 if reduction == "sum" else 3
    args = _op_args(x_src, x_dst, positives, sampler, num_negatives, negatives, loss,
                    reduction)
    _assert_kernel_matches(*_kernel_and_composite(args), dtype, device)
    # through the public function and autograd: the gradients of the kernel's own score_grad
    out, grads = _run(x_src, x_dst, positives, num_negatives=num_negatives, negatives=negatives,
                      loss=loss, reduction=reduction, sampler=sampler, seed=2024)
    assert torch.equal(out, torch.ops.pyg_edgedot.edge_dot_loss(*args)[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("negatives", ["structured", "uniform"])
def test_kernel_matches_composite_edge_cases(negatives, device, gen):
    _kernel_or_skip(device)
    # strided rows, fewer candidate nodes than rows, K larger than a forward block
    big = randn(gen, 30, 24, dtype=torch.float32, device=device)
    x_src, x_dst = big[:, :10], big[3:, 5:15]
    positives = _graph(gen, 30, 27, 50, torch.int64, device)
    for k, nodes in ((5000, None), (2, (11, 17))):
        args = _op_args(x_src, x_dst, positives, None, k, negatives, "bce", "mean",
                        num_nodes=nodes)
        _assert_kernel_matches(*_kernel_and_composite(args), torch.float32, device)
    # an index out of range (validate=False): first_bad, NaN loss, no gradient from it
    bad = positives.clone()
    bad[0, 7], bad[1, 31] = -3, 27
    args = _op_args(x_src, x_dst, bad, None, 2, negatives, "bpr", "sum")
    result = _kernel_and_composite(args)
    assert result[0][1].item() == 7 and math.isnan(result[0][0].item())
    assert (result[0][2][[7, 31]] == 0).all()
    _assert_kernel_matches(*result, torch.float32, device)
    # a structured sampler whose source 0 has no negative, unvalidated: the same draws
    graph = torch.tensor([[0, 0, 0, 1], [1, 2, 3, 2]], device=device)
    sampler = NegativeSampler(graph, 4)
    x = randn(gen, 4, 3, dtype=torch.float64, device=device)
    pos = torch.tensor([[0, 1, 2, 0], [2, 3, 0, 1]], device=device)
    args = _op_args(x, x, pos, sampler, 3, negatives, "bce", "sum")
    _assert_kernel_matches(*_kernel_and_composite(args), torch.float64, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_kernel_many_blocks_and_chunks(dtype, device, gen):
    # several forward blocks (4096 pairs) and backward chunks (65536 pairs) on the CPU
    _kernel_or_skip(device)
    x_src, x_dst, positives, sampler = _problem(gen, "bipartite", dtype, torch.int32, device,
                                                num_edges=70_000, feat_dim=5)
    args = _op_args(x_src, x_dst, positives, sampler, 1, "uniform", "bce", "mean")
    _assert_kernel_matches(*_kernel_and_composite(args), dtype, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("negatives", ["structured", "uniform"])
@pytest.mark.parametrize("homogeneous", [True, False])
def test_kernel_long_excluded_list(homogeneous, negatives, device, gen):
    # over 4096 excluded keys: the C++ and CUDA kernels look ranks up through a bucket index
    _kernel_or_skip(device)
    num_src, num_dst = (300, 300) if homogeneous else (200, 350)
    graph = _graph(gen, num_src, num_dst, 30_000, torch.int64, device)
    sampler = NegativeSampler(graph, num_src if homogeneous else (num_src, num_dst))
    assert sampler._directed.adj.numel() > 4096
    x_src = randn(gen, num_src, 6, dtype=torch.float64, device=device)
    x_dst = x_src if homogeneous else randn(gen, num_dst, 6, dtype=torch.float64,
                                            device=device)
    positives = _graph(gen, num_src, num_dst, 3000, torch.int64, device)
    args = _op_args(x_src, x_dst, positives, sampler, 4, negatives, "bpr", "mean")
    _assert_kernel_matches(*_kernel_and_composite(args), torch.float64, device)


def test_kernel_same_bits_on_any_number_of_threads(gen):
    _kernel_or_skip("cpu")
    x_src, x_dst, positives, sampler = _problem(gen, "bipartite", torch.float32, torch.int64,
                                                "cpu", num_edges=20_000, feat_dim=40)
    threads = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            for negatives in ("structured", "uniform"):
                out, grads = _run(x_src, x_dst, positives, num_negatives=2, negatives=negatives,
                                  sampler=sampler, seed=9)
                args = _op_args(x_src, x_dst, positives, sampler, 2, negatives, "bce", "mean",
                                seed=9)
                results.append([out.view(1), *grads, torch.ops.pyg_edgedot.edge_dot_loss(
                    *args)[2]])
    finally:
        torch.set_num_threads(threads)
    for i in range(2, len(results)):   # 2 and 3 threads against 1, per kind of negatives
        assert all(torch.equal(a, b) for a, b in zip(results[i % 2], results[i]))


# ---- the CUDA backward without pair tensors ------------------------------------------------
# Past 2**16 pairs a chunk's pairs go straight into the sort input of edge_dot_grad's sorted
# backward; the composite materializes the same pairs and calls edge_dot_grad on them. Both
# add each row's pairs in increasing pair order from zero, in pieces of the same length, so
# the gradients must be the same bits. Reduction "sum": for "mean" the composite divides the
# scale by the count with torch's scalar division, which need not round as the kernel's does.

def _cuda_loss_kernel_or_skip() -> None:
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    _kernel_or_skip("cuda")


def _loss_grads_and_composite(args, score_grad, needs):
    g = torch.tensor(1.7, dtype=score_grad.dtype, device=score_grad.device)
    got = torch.ops.pyg_edgedot.edge_dot_loss_grad(g, score_grad, *args, *needs)
    want = loss_module.fallback_impls()["edge_dot_loss_grad"](g, score_grad, *args, *needs)
    return got, want


def _assert_same_grad_bits(got, want, needs, x_src, x_dst):
    for a, b, needed, x, name in zip(got, want, needs, (x_src, x_dst), ("x_src", "x_dst")):
        assert a.dtype == x.dtype and a.shape == (x.size(0) if needed else 0, x.size(1))
        bad = (a != b).any(dim=1).nonzero().flatten().tolist()
        assert not bad, f"grad {name}: rows {bad[:10]} differ from the composite's bits"


@pytest.mark.parametrize("needs", [(True, True), (True, False), (False, True)],
                         ids=["both", "src", "dst"])
@pytest.mark.parametrize("negatives", ["structured", "uniform"])
@pytest.mark.parametrize("feat_dim", [19, 32])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16], ids=dtype_id)
def test_cuda_loss_grad_direct_fill_matches_composite_bitwise(dtype, index_dtype, feat_dim,
                                                             negatives, needs, gen):
    _cuda_loss_kernel_or_skip()
    num_src, num_dst, num_edges, k = 300, 40, 20_000, 3   # 80,000 pairs, one chunk
    x_src = randn(gen, num_src, feat_dim, dtype=dtype, device="cuda")
    x_dst = randn(gen, num_dst, feat_dim, dtype=dtype, device="cuda")
    positives = _graph(gen, num_src, num_dst, num_edges, index_dtype, "cuda")
    # Rows longer than a piece (2,048 pairs): source 7's 1,000 positives and, structured, their
    # negatives (4,000 pairs); destination 5's 3,000 positives; about 2,000 pairs per
    # destination row besides.
    positives[0, :1000] = 7
    positives[1, 1000:4000] = 5
    sampler = NegativeSampler(_graph(gen, num_src, num_dst, 2000, index_dtype, "cuda"),
                              (num_src, num_dst))
    args = _op_args(x_src, x_dst, positives, sampler, k, negatives, "bce", "sum")
    score_grad = randn(gen, num_edges, 1 + k, dtype=dtype, device="cuda")
    got, want = _loss_grads_and_composite(args, score_grad, needs)
    _assert_same_grad_bits(got, want, needs, x_src, x_dst)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_cuda_loss_grad_chunks_on_both_routes_match_composite_bitwise(dtype, gen):
    # K = 1: a chunk of 2**23 positives (2**24 pairs, the sort input filled directly), then one
    # of 20,000 (40,000 pairs: index tensors through edge_dot_grad's small-E path); the chunks'
    # gradients added in order (in float32 for bfloat16).
    _cuda_loss_kernel_or_skip()
    num_src, num_dst, num_edges, feat_dim = 5000, 3000, (1 << 23) + 20_000, 8
    x_src = randn(gen, num_src, feat_dim, dtype=dtype, device="cuda")
    x_dst = randn(gen, num_dst, feat_dim, dtype=dtype, device="cuda")
    assert loss_module._positives_per_chunk(x_src, x_dst, 1) == 1 << 23
    positives = _graph(gen, num_src, num_dst, num_edges, torch.int64, "cuda")
    args = _op_args(x_src, x_dst, positives, None, 1, "uniform", "bpr", "sum")
    score_grad = randn(gen, num_edges, 2, dtype=dtype, device="cuda")
    needs = (True, True)
    got, want = _loss_grads_and_composite(args, score_grad, needs)
    _assert_same_grad_bits(got, want, needs, x_src, x_dst)


def test_cuda_loss_grad_allocates_no_pair_tensors(gen):
    # No [2, E * (1 + K)] tensor of pairs. Beyond its outputs the backward holds one sort input
    # at a time (24 bytes a pair: [2, n] int32 keys, [2, n] (float, int32) payloads) and CUB's
    # scratch; the pairs as index tensors and weights would add 12 bytes a pair (24 MiB here).
    _cuda_loss_kernel_or_skip()
    num_nodes, num_edges, feat_dim = 1 << 14, 1 << 20, 8
    x_src = randn(gen, num_nodes, feat_dim, device="cuda")
    x_dst = randn(gen, num_nodes, feat_dim, device="cuda")
    positives = _graph(gen, num_nodes, num_nodes, num_edges, torch.int64, "cuda")
    args = _op_args(x_src, x_dst, positives, None, 1, "uniform", "bce", "sum")
    score_grad = randn(gen, num_edges, 2, device="cuda")
    g = torch.tensor(1.0, device="cuda")
    torch.ops.pyg_edgedot.edge_dot_loss_grad(g, score_grad, *args, True, True)  # warm-up
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    grads = torch.ops.pyg_edgedot.edge_dot_loss_grad(g, score_grad, *args, True, True)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    outputs = sum(t.numel() * t.element_size() for t in grads)
    sort_input = 24 * 2 * num_edges
    assert peak <= outputs + sort_input + (6 << 20), (
        f"peak extra {peak / 2**20:.1f} MiB: outputs {outputs / 2**20:.1f} MiB + one sort "
        f"input {sort_input / 2**20:.1f} MiB + 6 MiB of scratch allowed")


# ---- gradcheck, torch.compile, opcheck -----------------------------------------------------

@pytest.mark.parametrize("loss", ["bce", "bpr"])
@pytest.mark.parametrize("negatives", ["structured", "uniform"])
def test_gradcheck(negatives, loss, gen):
    x_src, x_dst, positives, sampler = _problem(gen, "bipartite", torch.float64, torch.int64,
                                                "cpu", num_edges=12, feat_dim=3)

    def fn(a, b):
        return edge_dot_loss(a, b, positives, num_negatives=2, negatives=negatives, loss=loss,
                             sampler=sampler, seed=5)

    assert torch.autograd.gradcheck(fn, (leaf(x_src), leaf(x_dst)))


@pytest.mark.parametrize("device", DEVICES)
def test_second_derivatives_refused(device, gen, request):
    # gradgradcheck's promise: right or refused, never a silent zero
    x_src, x_dst, positives, sampler = _problem(gen, "bipartite", torch.float64, torch.int64,
                                                device, num_edges=12, feat_dim=3)
    # the loss's gradients sum through edge_dot_grad; the check at the end compares bits
    gradient_bits_repeat("edge_dot", device, request)
    a = leaf(x_src)
    loss = edge_dot_loss(a, x_dst, positives, num_negatives=2, sampler=sampler, seed=5)
    g, = torch.autograd.grad(loss, a, create_graph=True)
    with pytest.raises(RuntimeError, match="edge_dot_loss: second derivatives are not"):
        g.pow(2).sum().backward()
    # first derivatives under create_graph=True are the plain ones
    g1, = torch.autograd.grad(edge_dot_loss(a, x_dst, positives, num_negatives=2,
                                            sampler=sampler, seed=5), a)
    assert torch.equal(g.detach(), g1)


@pytest.mark.parametrize("device", DEVICES)
def test_forward_mode_ad_refused(device, gen):
    # The loss has a backward formula only: a tangent would be dropped without a word (a zero
    # derivative), so forward-mode AD raises instead.
    from torch.autograd import forward_ad
    from torch.func import jvp

    x_src, x_dst, positives, sampler = _problem(gen, "bipartite", torch.float64, torch.int64,
                                                device, num_edges=12, feat_dim=3)
    calls = [("x_src", lambda a: edge_dot_loss(a, x_dst, positives, sampler=sampler, seed=5)),
             ("x_dst", lambda a: edge_dot_loss(x_src, a, positives, sampler=sampler, seed=5))]
    for name, fn in calls:
        primal = x_src if name == "x_src" else x_dst
        with pytest.raises(NotImplementedError,
                           match=rf"^edge_dot_loss: forward-mode AD .*{name}"):
            jvp(fn, (primal,), (torch.ones_like(primal),))
        with forward_ad.dual_level():
            dual = forward_ad.make_dual(primal, torch.ones_like(primal))
            with pytest.raises(NotImplementedError,
                               match=rf"^edge_dot_loss: forward-mode AD .*{name}"):
                fn(dual)
            # inside a dual level, inputs without a tangent still work
            assert torch.equal(fn(primal), fn(primal.clone()))


class _Model(torch.nn.Module):
    def __init__(self, feat_dim, sampler):
        super().__init__()
        self.lin = torch.nn.Linear(feat_dim, feat_dim, dtype=torch.float64)
        self.criterion = EdgeDotLoss(num_negatives=3, loss="bce", sampler=sampler)

    def forward(self, x, edge_label_index):
        return self.criterion(self.lin(x).tanh(), edge_label_index, seed=17)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph(backend, gen, fresh_dynamo):
    x, _, positives, sampler = _problem(gen, "homogeneous", torch.float64, torch.int64, "cpu")
    model = _Model(x.size(1), sampler)

    def step(fn):
        model.zero_grad()
        out = fn(x, positives)
        out.backward()
        return out.detach(), model.lin.weight.grad.clone()

    eager = step(model)
    compiled = step(torch.compile(model, fullgraph=True, backend=backend))
    assert torch.allclose(compiled[0], eager[0], rtol=1e-12, atol=0)
    assert torch.allclose(compiled[1], eager[1], rtol=1e-10, atol=1e-14)


@pytest.mark.parametrize("negatives", ["structured", "uniform"])
@pytest.mark.parametrize("form", ["module", "function"])
def test_compile_fullgraph_before_any_eager_call(form, negatives, gen, fresh_dynamo):
    # A sampler not drawn from yet keeps no row pointer or bucket index: the first call is the
    # compiled one, which must trace without building them on the sampler.
    x, _, positives, _ = _problem(gen, "homogeneous", torch.float64, torch.int64, "cpu")
    graph = _graph(gen, x.size(0), x.size(0), 150, torch.int64, "cpu")

    def run(compile_it):
        sampler = NegativeSampler(graph, x.size(0))
        if form == "module":
            fn = EdgeDotLoss(num_negatives=3, negatives=negatives, sampler=sampler)
        else:
            def fn(z, edges, seed):
                return edge_dot_loss(z, z, edges, num_negatives=3, negatives=negatives,
                                     sampler=sampler, seed=seed)
        if compile_it:
            fn = torch.compile(fn, fullgraph=True, backend="aot_eager")
        z = leaf(x)
        out = fn(z, positives, seed=17)
        out.backward()
        return out.detach(), z.grad

    compiled, eager = run(True), run(False)
    assert torch.allclose(compiled[0], eager[0], rtol=1e-12, atol=0)
    assert torch.allclose(compiled[1], eager[1], rtol=1e-10, atol=1e-14)


# The sampler's kept bucket index (negative_sample_index, passed as adj_index; the kernels
# build one per call without it): the same bits as the index built per call, its checks, and
# no read outside adj whatever its values.

def _kept_index_problem(gen, device, negatives="uniform"):
    graph = _graph(gen, 300, 300, 30_000, torch.int64, device)
    sampler = NegativeSampler(graph, 300)
    x = randn(gen, 300, 6, dtype=torch.float32, device=device)
    positives = _graph(gen, 300, 300, 3000, torch.int64, device)
    args = _op_args(x, x, positives, sampler, 4, negatives, "bce", "mean")
    return args, sampler._directed.adj_index()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("negatives", ["structured", "uniform"])
def test_kernel_kept_index_same_bits(negatives, device, gen):
    _kernel_or_skip(device)
    args, index = _kept_index_problem(gen, device, negatives)
    assert args[5].numel() > 4096 and index.numel() > 0
    plain = torch.ops.pyg_edgedot.edge_dot_loss(*args)
    kept = torch.ops.pyg_edgedot.edge_dot_loss(*args, adj_index=index)
    assert all(torch.equal(a, b) for a, b in zip(plain, kept))
    g = torch.tensor(1.3, device=device)
    grads = torch.ops.pyg_edgedot.edge_dot_loss_grad(g, plain[2], *args, True, True)
    kept_grads = torch.ops.pyg_edgedot.edge_dot_loss_grad(g, plain[2], *args, True, True,
                                                          adj_index=index)
    assert all(torch.equal(a, b) for a, b in zip(grads, kept_grads))


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_kept_index_checks(device, gen):
    _kernel_or_skip(device)
    args, index = _kept_index_problem(gen, device)
    wrong = torch.zeros(index.numel() + 2, dtype=torch.int64, device=device)
    g = torch.tensor(1.0, device=device)
    score_grad = torch.ops.pyg_edgedot.edge_dot_loss(*args)[2]
    for bad in (wrong, index.int()):
        with pytest.raises(RuntimeError, match="edge_dot_loss: adj_index must be "
                                               "negative_sample_index"):
            torch.ops.pyg_edgedot.edge_dot_loss(*args, adj_index=bad)
        with pytest.raises(RuntimeError, match="edge_dot_loss_grad: adj_index must be "
                                               "negative_sample_index"):
            torch.ops.pyg_edgedot.edge_dot_loss_grad(g, score_grad, *args, True, True,
                                                     adj_index=bad)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_kept_index_bad_values_no_bad_access(device, gen):
    _kernel_or_skip(device)
    args, index = _kept_index_problem(gen, device)
    bad = torch.randint(-2 ** 40, 2 ** 40, index.shape, generator=gen).to(device)
    out, first_bad, score_grad = torch.ops.pyg_edgedot.edge_dot_loss(*args, adj_index=bad)
    grads = torch.ops.pyg_edgedot.edge_dot_loss_grad(torch.tensor(1.0, device=device),
                                                     score_grad, *args, True, True,
                                                     adj_index=bad)
    if device == "cuda":
        torch.cuda.synchronize()
    assert bool(torch.isfinite(out)) and int(first_bad) == -1
    assert all(bool(torch.isfinite(grad).all()) for grad in grads)


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_kept_index(device, gen):
    args, index = _kept_index_problem(gen, device)
    x_src = args[0].detach().requires_grad_(True)
    x_dst = args[1].detach().clone().requires_grad_(True)
    args = (x_src, x_dst) + args[2:]
    torch.library.opcheck(torch.ops.pyg_edgedot.edge_dot_loss.default, args,
                          {"adj_index": index})
    _, _, score_grad = torch.ops.pyg_edgedot.edge_dot_loss(*args, adj_index=index)
    grad_args = (torch.tensor(1.0, device=device), score_grad.detach(), x_src.detach(),
                 x_dst.detach()) + args[2:] + (True, True)
    torch.library.opcheck(torch.ops.pyg_edgedot.edge_dot_loss_grad.default, grad_args,
                          {"adj_index": index})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_edges", [0, 23])
@pytest.mark.parametrize("dtypes", [(torch.float32, torch.int64), (torch.float64, torch.int32),
                                    (torch.bfloat16, torch.int64)], ids=str)
def test_opcheck(dtypes, num_edges, device, gen):
    dtype, index_dtype = dtypes
    x_src, x_dst, positives, sampler = _problem(gen, "bipartite", dtype, index_dtype, device,
                                                num_edges=num_edges)
    x_src.requires_grad_(True)
    x_dst.requires_grad_(True)
    seed = torch.tensor(3)
    space = sampler._directed
    args = (x_src, x_dst, positives[0], positives[1], seed, space.adj, sampler._source_rows(),
            2, x_src.size(0), x_dst.size(0), True, "structured", "bpr",
            "mean" if num_edges else "sum")   # (opcheck compares NaN as unequal)
    torch.library.opcheck(torch.ops.pyg_edgedot.edge_dot_loss.default, args)
    _, _, score_grad = torch.ops.pyg_edgedot.edge_dot_loss(*args)
    grad_args = (torch.tensor(1.0, dtype=dtype, device=device), score_grad.detach(),
                 x_src.detach(), x_dst.detach()) + args[2:] + (True, False)
    torch.library.opcheck(torch.ops.pyg_edgedot.edge_dot_loss_grad.default, grad_args)


# ---- errors --------------------------------------------------------------------------------

def test_bad_arguments(gen):
    x_src, x_dst, positives, sampler = _problem(gen, "bipartite", torch.float32, torch.int64,
                                                "cpu")
    cases = [
        (dict(num_negatives=0), ValueError, "num_negatives must be >= 1"),
        (dict(num_negatives=2 ** 63 - 1), ValueError, "num_negatives must be >= 1 and below"),
        (dict(num_negatives=1.5), TypeError, "num_negatives must be an int"),
        (dict(negatives="random"), ValueError, "negatives must be 'structured' or 'uniform'"),
        (dict(loss="hinge"), ValueError, "loss must be 'bce' or 'bpr'"),
        (dict(reduction="none"), ValueError, "reduction must be 'mean' or 'sum'"),
        (dict(seed=1.0), TypeError, "seed must be an int"),
        (dict(seed=torch.tensor([1, 2])), ValueError, "seed as a Tensor must be 0-dim int64"),
        (dict(sampler="graph"), TypeError, "sampler must be a pyg_edgedot.NegativeSampler"),
        (dict(num_nodes=(100, 5)), ValueError, "num_nodes=(100, 5) must be >= 1 and at most"),
        # not just truthy: validate=None would skip the index check without a word
        (dict(validate=None), TypeError, "validate must be a bool"),
        (dict(validate=0), TypeError, "validate must be a bool"),
        (dict(sampler=sampler, num_nodes=3), ValueError, "num_nodes=3 disagrees with the sampler"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=r"^edge_dot_loss: " + message.replace("(", r"\(")
                           .replace(")", r"\)")):
            edge_dot_loss(x_src, x_dst, positives, **kwargs)
    small = NegativeSampler(positives[:, :0], (5, 5))
    with pytest.raises(ValueError, match=r"edge_dot_loss: sampler was built for \(N_src, "
                                         r"N_dst\) = \(5, 5\) nodes but x_src and x_dst"):
        edge_dot_loss(x_src, x_dst, positives, sampler=small)
    # integers of other types are ints, as negative_sampling takes them
    np = pytest.importorskip("numpy")
    seeded = dict(num_negatives=2, seed=7)
    assert torch.equal(edge_dot_loss(x_src, x_dst, positives, **seeded),
                       edge_dot_loss(x_src, x_dst, positives, num_negatives=np.int64(2),
                                     seed=np.int64(7)))
    assert torch.equal(edge_dot_loss(x_src, x_dst, positives, num_nodes=(15, 20), **seeded),
                       edge_dot_loss(x_src, x_dst, positives, **seeded,
                                     num_nodes=(np.int64(15), torch.tensor(20))))
    for bad in (2.0, (15, True), "15", (15, 20, 5)):
        with pytest.raises(TypeError, match="edge_dot_loss: num_nodes must be an int or a "
                                            "pair of ints"):
            edge_dot_loss(x_src, x_dst, positives, num_nodes=bad)
    with pytest.raises(TypeError, match="edge_dot_loss: x_src and x_dst must have the same"):
        edge_dot_loss(x_src, x_dst.double(), positives)
    with pytest.raises(ValueError, match=r"edge_dot_loss: edge_index must have shape \[2, E\]"):
        edge_dot_loss(x_src, x_dst, positives[0])
    with pytest.raises(ValueError, match="^EdgeDotLoss: loss must be"):
        EdgeDotLoss(loss="mse")
    empty = positives[:, :0]
    with pytest.raises(ValueError, match=r"^edge_dot_loss: x_src and x_dst must each have at "
                                         r"least one row, .* \(got \(5, 0\) rows\)"):
        edge_dot_loss(x_src[:5], x_dst[:0], empty)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("row", [0, 1])
def test_index_out_of_range(row, device, gen, monkeypatch):
    x_src, x_dst, positives, _ = _problem(gen, "bipartite", torch.float32, torch.int64, device)
    monkeypatch.setattr(_chunked, "DEFAULT_CHUNK_ELEMS", 12)   # the bad edge in a later chunk
    bad = positives.clone()
    bad[row, 29] = x_src.size(0) + 50 if row == 0 else -1
    name = f"edge_index[{row}]"
    with pytest.raises(IndexError, match=rf"edge_dot_loss: {re.escape(name)} holds an index "
                                         r"out of range at edge 29"):
        edge_dot_loss(x_src, x_dst, bad, num_negatives=2, seed=0)
    # unchecked: the loss is NaN, and the bad positive and its negatives add no gradient
    for loss in ("bce", "bpr"):
        out, (grad_src, grad_dst) = _run(x_src, x_dst, bad, num_negatives=2, seed=0,
                                         loss=loss, negatives="uniform", validate=False)
        assert math.isnan(out.item())
        assert torch.isfinite(grad_src).all() and torch.isfinite(grad_dst).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("negatives", ["structured", "uniform"])
def test_sampler_first_used_in_inference_mode(negatives, device, gen):
    # A sampler built, drawn from and used by the loss first under torch.inference_mode (a
    # validation loop) keeps normal tensors, which later training steps save for backward.
    graph = _graph(gen, 60, 60, 400, torch.int64, device)
    x = randn(gen, 60, 5, dtype=torch.float64, device=device).requires_grad_(True)
    with torch.inference_mode():
        sampler = NegativeSampler(graph, 60)
        sampler.sample(10)
        sampler.sample(10, force_undirected=True)
        edge_dot_loss(x, x, graph, sampler=sampler, negatives=negatives, seed=5)
    kept = [sampler._directed.adj, sampler._undirected.adj, sampler._directed.adj_index()]
    if negatives == "structured":
        kept.append(sampler._row_ptr)
    assert not any(torch.is_inference(t) for t in kept)
    edge_dot_loss(x, x, graph, sampler=sampler, negatives=negatives, seed=5).backward()
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())


def test_structured_sampler_needs_a_negative_per_source():
    # node 0 is connected to every other node: no structured negative for it
    edge_index = torch.tensor([[0, 0, 0, 1], [1, 2, 3, 2]])
    sampler = NegativeSampler(edge_index, 4)
    x = torch.randn(4, 3)
    with pytest.raises(ValueError, match="edge_dot_loss: node 0 is connected to all its "
                                         "candidate destinations"):
        edge_dot_loss(x, x, edge_index, sampler=sampler, seed=0)
    ok = torch.tensor([[1, 2], [3, 0]])   # sources 1 and 2 have negatives
    assert torch.isfinite(edge_dot_loss(x, x, ok, sampler=sampler, seed=0))
    complete = torch.tensor([[i for i in range(3) for j in range(3) if i != j],
                             [j for i in range(3) for j in range(3) if i != j]])
    with pytest.raises(ValueError, match="edge_dot_loss: no candidate pair is left"):
        edge_dot_loss(x[:3], x[:3], complete, negatives="uniform",
                      sampler=NegativeSampler(complete, 3), seed=0)


def test_loss_negatives_past_int32_node_ids():
    # an int32 edge_index with ids past int32's range: int64 negatives, never wrapped
    edge_index = torch.tensor([[0], [0]], dtype=torch.int32)
    neg = loss_negatives(edge_index, 3, 64, negatives="uniform", num_nodes=(1, 3_000_000_000))
    assert neg.dtype == torch.int64 and int(neg.min()) >= 0 and int(neg.max()) > 2 ** 31
    small = loss_negatives(edge_index, 3, 4, negatives="uniform", num_nodes=(1, 30))
    assert small.dtype == torch.int32


def test_module_bad_arguments():
    x = torch.randn(4, 3)
    edge_index = torch.tensor([[0, 1], [2, 3]])
    with pytest.raises(TypeError, match="EdgeDotLoss: sampler must be a "
                                        "pyg_edgedot.NegativeSampler or None \\(got int\\)"):
        EdgeDotLoss(sampler=5)
    for bad, got in (([x], "a list of 1"), ((x, x, x), "a tuple of 3"), ("x", "str")):
        with pytest.raises(TypeError, match=f"EdgeDotLoss: x must be a Tensor or a pair "
                                            f"\\(x_src, x_dst\\) \\(got {got}\\)"):
            EdgeDotLoss()(bad, edge_index, seed=0)


def test_module_is_the_function(gen):
    x_src, x_dst, positives, sampler = _problem(gen, "bipartite", torch.float32, torch.int64,
                                                "cpu")
    criterion = EdgeDotLoss(num_negatives=2, negatives="uniform", loss="bpr", sampler=sampler)
    assert "EdgeDotLoss(num_negatives=2, negatives='uniform', loss='bpr'" in repr(criterion)
    expected = edge_dot_loss(x_src, x_dst, positives, num_negatives=2, negatives="uniform",
                             loss="bpr", sampler=sampler, seed=4)
    assert torch.equal(criterion((x_src, x_dst), positives, seed=4), expected)
