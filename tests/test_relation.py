"""Relation-weighted scores (DistMult), long rows in the backward, and heterogeneous dicts."""
import numpy as np
import pytest
import torch

from pyg_edgedot import EdgeDotScore, edge_dot
from pyg_edgedot.ops import edge_dot_rel as edge_dot_rel_ops
from _helpers import (DEVICES, FLOAT_DTYPES, INDEX_DTYPES, SHAPE_IDS, SHAPES, _f64,
                      assert_close, cuda_kernel_on_cuda, dtype_id, randint, randn,
                      random_edge_index, run_backward, scores_bitwise_alike)


def ref_rel(x_src, x_dst, rel, edge_index, edge_type):
    ei, t = edge_index.detach().cpu().long(), edge_type.detach().cpu().long()
    return (_f64(x_src)[ei[0]] * _f64(rel)[t] * _f64(x_dst)[ei[1]]).sum(-1)


def ref_rel_grads(x_src, x_dst, rel, edge_index, edge_type, grad_out):
    """(d/dx_src, d/dx_dst, d/drel) of sum(grad_out * out), written out with index_add_."""
    ei, t = edge_index.detach().cpu().long(), edge_type.detach().cpu().long()
    xs, xd, r, g = _f64(x_src), _f64(x_dst), _f64(rel), _f64(grad_out)[:, None]
    grad_src = torch.zeros_like(xs).index_add_(0, ei[0], g * r[t] * xd[ei[1]])
    grad_dst = torch.zeros_like(xd).index_add_(0, ei[1], g * r[t] * xs[ei[0]])
    grad_rel = torch.zeros_like(r).index_add_(0, t, g * xs[ei[0]] * xd[ei[1]])
    return grad_src, grad_dst, grad_rel


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_rel_forward_backward(shape, dtype, index_dtype, device, gen):
    num_src, num_dst, feat_dim, num_edges = shape
    num_rel = 5
    x_src = randn(gen, num_src, feat_dim, dtype=dtype, device=device).requires_grad_(True)
    x_dst = randn(gen, num_dst, feat_dim, dtype=dtype, device=device).requires_grad_(True)
    rel = randn(gen, num_rel, feat_dim, dtype=dtype, device=device).requires_grad_(True)
    ei = random_edge_index(gen, num_src, num_dst, num_edges, index_dtype, device)
    edge_type = randint(gen, num_rel, num_edges, index_dtype, device)
    out = edge_dot(x_src, x_dst, ei, rel, edge_type)
    assert out.dtype == dtype and out.shape == (num_edges,)
    assert_close(out, ref_rel(x_src, x_dst, rel, ei, edge_type), dtype)
    grad_out = run_backward(out, gen)
    refs = ref_rel_grads(x_src, x_dst, rel, ei, edge_type, grad_out)
    # The relation gradient sums E / R products per row: rounding of the bf16/fp16 output
    # row is the error there too, so the same tolerance holds.
    for name, x, ref in zip(("x_src", "x_dst", "rel"), (x_src, x_dst, rel), refs):
        assert x.grad is not None and x.grad.dtype == dtype
        assert_close(x.grad, ref, dtype, f"grad {name}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("feat_dim", [8, 32, 128, 256, 515])
@pytest.mark.parametrize("num_edges", [300, 20000])
def test_rel_of_ones_scores_plain_bits(num_edges, feat_dim, dtype, device, gen):
    # A relation row of ones multiplies each product by 1 (exact), so DistMult's forward, which
    # keeps the loop form with every product in flight, gives the plain forward's bits. On
    # CUDA that checks the plain forward's other forms against it: the small-E kernel (300
    # edges) and the pipelined rounds where one pass covers a row (D <= 128 fp32, <= 256
    # 16-bit); on the CPU, the plain and DistMult loops adding in one order.
    if device == "cuda" and not cuda_kernel_on_cuda("edge_dot"):
        pytest.skip("the claim is the compiled CUDA kernels' (the fallback on CUDA sums with "
                    "torch's reductions)")
    x_src = randn(gen, 70, feat_dim, dtype=dtype, device=device)
    x_dst = randn(gen, 90, feat_dim, dtype=dtype, device=device)
    ei = random_edge_index(gen, 70, 90, num_edges, torch.int64, device)
    ones = torch.ones(1, feat_dim, dtype=dtype, device=device)
    plain = edge_dot(x_src, x_dst, ei)
    rel = edge_dot(x_src, x_dst, ei, ones, torch.zeros(num_edges, dtype=torch.long,
                                                       device=device))
    assert torch.equal(plain, rel)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rel_shape", ["1d", "1xD"])
def test_single_relation_without_edge_type(rel_shape, device, gen):
    x_src = randn(gen, 10, 8, device=device)
    x_dst = randn(gen, 12, 8, device=device)
    rel = randn(gen, 8, device=device) if rel_shape == "1d" else randn(gen, 1, 8, device=device)
    rel = rel.requires_grad_(True)
    ei = random_edge_index(gen, 10, 12, 50, torch.int64, device)
    out = edge_dot(x_src, x_dst, ei, rel)
    zeros = torch.zeros(50, dtype=torch.long)
    assert_close(out, ref_rel(x_src, x_dst, rel.reshape(1, 8), ei, zeros), torch.float32)
    grad_out = run_backward(out, gen)
    ref = ref_rel_grads(x_src, x_dst, rel.reshape(1, 8), ei, zeros, grad_out)[2]
    assert rel.grad.shape == rel.shape
    assert_close(rel.grad.reshape(1, 8), ref, torch.float32, "grad rel")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype,type_dtype", [(torch.int64, torch.int32),
                                                    (torch.int32, torch.int64)], ids=str)
def test_edge_type_dtype_differs_from_edge_index(index_dtype, type_dtype, device, gen):
    x = randn(gen, 10, 6, device=device).requires_grad_()
    rel = randn(gen, 3, 6, device=device).requires_grad_()
    ei = random_edge_index(gen, 10, 10, 40, index_dtype, device)
    edge_type = randint(gen, 3, 40, type_dtype, device)
    out = edge_dot(x, x, ei, rel, edge_type)
    ref = ref_rel(x.detach(), x.detach(), rel.detach(), ei, edge_type)
    assert_close(out, ref, torch.float32)
    grad = randn(gen, 40, device=device)
    gx, grel = torch.autograd.grad(out, (x, rel), grad)
    ref_src, ref_dst, ref_grel = ref_rel_grads(x, x, rel, ei, edge_type, grad)
    assert_close(gx, ref_src + ref_dst, torch.float32, "grad x")
    assert_close(grel, ref_grel, torch.float32, "grad rel")
    if type_dtype == torch.int64:
        # a type past int32's range is out of range, not wrapped onto a valid relation
        for bad in (2 ** 32 + 1, -2 ** 32):
            wide = edge_type.clone()
            wide[5] = bad
            with pytest.raises(IndexError, match=f"edge_type holds an index out of range at "
                                                 f"edge 5: {bad}"):
                edge_dot(x, x, ei, rel, wide)


def test_rel_gradcheck(gen):
    x_src = randn(gen, 6, 5, dtype=torch.float64).requires_grad_(True)
    x_dst = randn(gen, 7, 5, dtype=torch.float64).requires_grad_(True)
    rel = randn(gen, 3, 5, dtype=torch.float64).requires_grad_(True)
    ei = random_edge_index(gen, 6, 7, 30, torch.int64)
    edge_type = randint(gen, 3, 30)
    assert torch.autograd.gradcheck(lambda a, b, r: edge_dot(a, b, ei, r, edge_type),
                                    (x_src, x_dst, rel))


@pytest.mark.parametrize("device", DEVICES)
def test_rel_opcheck(device, gen):
    x_src = randn(gen, 9, 6, device=device).requires_grad_(True)
    x_dst = randn(gen, 8, 6, device=device).requires_grad_(True)
    rel = randn(gen, 4, 6, device=device).requires_grad_(True)
    ei = random_edge_index(gen, 9, 8, 33, torch.int64, device)
    t = randint(gen, 4, 33, torch.int64, device)
    torch.library.opcheck(torch.ops.pyg_edgedot.edge_dot_rel.default,
                          (x_src, x_dst, rel, ei[0], ei[1], t))
    torch.library.opcheck(torch.ops.pyg_edgedot.edge_dot_rel.default,
                          (x_src, x_dst, rel, ei[0], ei[1], t, False))
    grad = randn(gen, 33, device=device)
    torch.library.opcheck(torch.ops.pyg_edgedot.edge_dot_rel_grad.default,
                          (grad, rel.detach(), x_dst.detach(), ei[0], t, ei[1], 9))


@pytest.mark.parametrize("device", DEVICES)
def test_rel_compile_fullgraph(device, gen, fresh_dynamo):
    x_src = randn(gen, 9, 6, device=device).requires_grad_(True)
    x_dst = randn(gen, 8, 6, device=device).requires_grad_(True)
    rel = randn(gen, 4, 6, device=device).requires_grad_(True)
    ei = random_edge_index(gen, 9, 8, 33, torch.int64, device)
    t = randint(gen, 4, 33, torch.int64, device)

    def loss_fn(a, b, r):
        return (edge_dot(a, b, ei, r, t) ** 2).sum()

    compiled = torch.compile(loss_fn, fullgraph=True)
    loss = compiled(x_src, x_dst, rel)
    grads = torch.autograd.grad(loss, (x_src, x_dst, rel))
    loss_ref = loss_fn(x_src, x_dst, rel)
    grads_ref = torch.autograd.grad(loss_ref, (x_src, x_dst, rel))
    torch.testing.assert_close(loss, loss_ref)
    for g, g_ref in zip(grads, grads_ref):
        torch.testing.assert_close(g, g_ref)


@pytest.mark.parametrize("device", DEVICES)
def test_rel_matches_fallback(device, gen):
    x_src = randn(gen, 9, 6, device=device)
    x_dst = randn(gen, 8, 6, device=device)
    rel = randn(gen, 4, 6, device=device)
    ei = random_edge_index(gen, 9, 8, 33, torch.int64, device)
    t = randint(gen, 4, 33, torch.int64, device)
    t[5] = 4  # out of range: NaN, reported as the first bad edge
    out, bad = torch.ops.pyg_edgedot.edge_dot_rel(x_src, x_dst, rel, ei[0], ei[1], t)
    fallback = edge_dot_rel_ops.fallback_impls()
    out_ref, bad_ref = fallback["edge_dot_rel"](x_src, x_dst, rel, ei[0], ei[1], t)
    assert int(bad) == int(bad_ref) == 5
    assert torch.isnan(out[5]) and torch.isnan(out_ref[5])
    torch.testing.assert_close(out, out_ref, equal_nan=True)
    # Not reported: the same scores, first_bad empty.
    for op in (torch.ops.pyg_edgedot.edge_dot_rel, fallback["edge_dot_rel"]):
        unreported, none = op(x_src, x_dst, rel, ei[0], ei[1], t, False)
        assert none.shape == (0,) and none.dtype == torch.int64
        assert torch.equal(unreported.isnan(), out.isnan())
        torch.testing.assert_close(unreported, out, equal_nan=True)
    grad = randn(gen, 33, device=device)
    for args in ((grad, rel, x_dst, ei[0], t, ei[1], 9), (grad, x_src, x_dst, t, ei[0], ei[1], 4)):
        got = torch.ops.pyg_edgedot.edge_dot_rel_grad(*args)
        want = fallback["edge_dot_rel_grad"](*args)
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want)


def _bad_rel_cases(device):
    x = torch.randn(5, 4, device=device)
    ei = torch.tensor([[0, 1, 2], [1, 2, 3]], device=device)
    rel = torch.randn(3, 4, device=device)
    t = torch.tensor([0, 1, 2], device=device)
    return [
        ((x, x, ei, rel.double(), t), TypeError, "rel and x_src must have the same dtype"),
        ((x, x, ei, torch.randn(3, 5, device=device), t), ValueError, "feature dimension"),
        ((x, x, ei, torch.randn(2, 3, 4, device=device), t), ValueError, "rel must be 2-D"),
        ((x, x, ei, rel, None), ValueError, "edge_type [E] is required"),
        ((x, x, ei, None, t), ValueError, "edge_type was given without rel"),
        ((x, x, ei, rel, t[:2]), ValueError, "edge_type must have shape [E]"),
        ((x, x, ei, rel, t.float()), TypeError, "edge_type must be int64 or int32"),
        ((x, x, ei, rel, [0, 1, 2]), TypeError, "edge_type must be a Tensor"),
        ((x, x, ei, "rel", t), TypeError, "rel must be a Tensor"),
        # Sparse and nested: named, not the dispatcher's "could not run" error.
        ((x, x, ei, rel.to_sparse(), t), TypeError,
         "rel must be a dense (strided) Tensor (got layout torch.sparse_coo)"),
        ((x, x, ei, rel[0].to_sparse(), None), TypeError,
         "rel must be a dense (strided) Tensor (got layout torch.sparse_coo)"),
        ((x, x, ei, torch.nested.nested_tensor([rel[:1], rel[1:]]), t), TypeError,
         "rel must be a dense (strided) Tensor (got a nested Tensor)"),
        ((x, x, ei, rel, torch.tensor([0, 3, 1], device=device)), IndexError,
         "edge_type holds an index out of range at edge 1: 3 (rel has 3 rows"),
        ((x, x, ei, rel, torch.tensor([0, -1, 1], device=device)), IndexError,
         "edge_type holds an index out of range at edge 1: -1"),
    ]


@pytest.mark.parametrize("device", DEVICES)
def test_rel_bad_inputs(device):
    for args, exc, match in _bad_rel_cases(device):
        with pytest.raises(exc) as info:
            edge_dot(*args)
        assert match in str(info.value), (match, str(info.value))
    # The CUDA context (or the CPU process) is fine afterwards.
    x = torch.randn(5, 4, device=device)
    assert edge_dot(x, x, torch.tensor([[0], [1]], device=device)).isfinite().all()


def _hub_graph(gen, device, index_dtype=torch.int64):
    # Row 0 of x_src holds 9,000 edges, row 1 of x_dst 6,000: more than a piece of the CUDA
    # backward (max(2048, sqrt(E)) edges), so those rows are summed in pieces.
    num_edges = 20_000
    src = randint(gen, 50, num_edges)
    dst = randint(gen, 40, num_edges)
    src[:9000] = 0
    dst[5000:11000] = 1
    perm = torch.randperm(num_edges, generator=gen)
    ei = torch.stack([src[perm], dst[perm]]).to(index_dtype).to(device)
    return ei


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_backward_long_rows(dtype, device, gen):
    ei = _hub_graph(gen, device)
    x_src = randn(gen, 50, 24, dtype=dtype, device=device).requires_grad_(True)
    x_dst = randn(gen, 40, 24, dtype=dtype, device=device).requires_grad_(True)
    out = edge_dot(x_src, x_dst, ei)
    grad_out = randn(gen, out.shape[0], dtype=dtype, device=device)
    out.backward(grad_out)
    ei64, g = ei.cpu().long(), _f64(grad_out)[:, None]
    ref_src = torch.zeros(50, 24, dtype=torch.float64).index_add_(0, ei64[0], g * _f64(x_dst)[ei64[1]])
    ref_dst = torch.zeros(40, 24, dtype=torch.float64).index_add_(0, ei64[1], g * _f64(x_src)[ei64[0]])
    assert_close(x_src.grad, ref_src, dtype, "grad x_src")
    assert_close(x_dst.grad, ref_dst, dtype, "grad x_dst")
    first = (x_src.grad.clone(), x_dst.grad.clone())
    x_src.grad = x_dst.grad = None
    edge_dot(x_src, x_dst, ei).backward(grad_out)
    if scores_bitwise_alike("edge_dot", device):  # not the fallback's index_add_ on CUDA
        assert torch.equal(first[0], x_src.grad) and torch.equal(first[1], x_dst.grad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_rel", [1, 3])
def test_rel_backward_few_relations(num_rel, device, gen):
    # The relation gradient has R rows of E / R edges each: all of them long rows.
    ei = _hub_graph(gen, device)
    x_src = randn(gen, 50, 16, device=device).requires_grad_(True)
    x_dst = randn(gen, 40, 16, device=device).requires_grad_(True)
    rel = randn(gen, num_rel, 16, device=device).requires_grad_(True)
    t = randint(gen, num_rel, ei.shape[1], torch.int64, device)
    out = edge_dot(x_src, x_dst, ei, rel, t)
    grad_out = run_backward(out, gen)
    refs = ref_rel_grads(x_src, x_dst, rel, ei, t, grad_out)
    for name, x, ref in zip(("x_src", "x_dst", "rel"), (x_src, x_dst, rel), refs):
        assert_close(x.grad, ref, torch.float32, f"grad {name}")
    if scores_bitwise_alike("edge_dot_rel", device):
        first = rel.grad.clone()
        rel.grad = None
        edge_dot(x_src, x_dst, ei, rel, t).backward(grad_out)
        assert torch.equal(first, rel.grad)


# ---------------------------------------------------------------------------------------
# EdgeDotScore with relations, and with heterogeneous dicts
# ---------------------------------------------------------------------------------------

def test_module_relations_parameters_and_repr():
    torch.manual_seed(0)
    score = EdgeDotScore(num_relations=4, channels=8)
    assert repr(score) == "EdgeDotScore(sigmoid=False, num_relations=4, channels=8)"
    assert [name for name, _ in score.named_parameters()] == ["rel"]
    assert score.rel.shape == (4, 8)
    before = score.rel.detach().clone()
    score.reset_parameters()
    assert not torch.equal(before, score.rel)
    bound = (6 / (4 + 8)) ** 0.5  # xavier uniform
    assert score.rel.abs().max() <= bound
    assert repr(EdgeDotScore()) == "EdgeDotScore(sigmoid=False)"
    with pytest.raises(ValueError, match="num_relations and channels go together"):
        EdgeDotScore(num_relations=3)
    with pytest.raises(ValueError, match="must be >= 1"):
        EdgeDotScore(num_relations=0, channels=4)
    # not silently truncated or parsed: 2.5 must not become 2 relations, "3" three, True one
    for kwargs, name in ((dict(num_relations=2.5, channels=4), "num_relations"),
                         (dict(num_relations=2, channels=3.7), "channels"),
                         (dict(num_relations="3", channels=4), "num_relations"),
                         (dict(num_relations=True, channels=4), "num_relations"),
                         (dict(num_relations=[2], channels=4), "num_relations")):
        with pytest.raises(TypeError, match=f"^EdgeDotScore: {name} must be an int"):
            EdgeDotScore(**kwargs)
    # integers of other types are ints
    assert EdgeDotScore(num_relations=np.int64(2), channels=torch.tensor(4)).rel.shape == (2, 4)
    # and so for edge_type: a numpy int is one relation; a float names the module
    module, x = EdgeDotScore(num_relations=2, channels=4), torch.randn(3, 4)
    ei = torch.tensor([[0, 1], [1, 2]])
    assert torch.equal(module(x, ei, np.int64(1)), module(x, ei, 1))
    for bad in (1.0, "1"):
        with pytest.raises(TypeError, match=r"^EdgeDotScore: edge_type must be an int or an "
                                            r"\[E\] Tensor \(got "):
            module(x, ei, bad)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sigmoid", [False, True])
def test_module_relations_forward_backward(sigmoid, device, gen):
    score = EdgeDotScore(sigmoid=sigmoid, num_relations=3, channels=8).to(device)
    x_src = randn(gen, 10, 8, device=device).requires_grad_(True)
    x_dst = randn(gen, 12, 8, device=device)
    ei = random_edge_index(gen, 10, 12, 60, torch.int64, device)
    t = randint(gen, 3, 60, torch.int64, device)
    out = score((x_src, x_dst), ei, t)
    ref = ref_rel(x_src, x_dst, score.rel, ei, t)
    assert_close(out, ref.sigmoid() if sigmoid else ref, torch.float32)
    out.sum().backward()
    assert score.rel.grad is not None and x_src.grad is not None
    # One int relation for every edge: the same as that row for each edge.
    out1 = score((x_src, x_dst), ei, 2)
    expect = ref_rel(x_src, x_dst, score.rel, ei, torch.full((60,), 2))
    assert_close(out1, expect.sigmoid() if sigmoid else expect, torch.float32)
    with pytest.raises(IndexError, match="edge_type=3 is out of range"):
        score((x_src, x_dst), ei, 3)
    with pytest.raises(ValueError, match="edge_type \\[E\\] is required"):
        score((x_src, x_dst), ei)
    with pytest.raises(ValueError, match="edge_type needs relation vectors"):
        EdgeDotScore()((x_src, x_dst), ei, t)


def _hetero_inputs(gen, device):
    x_dict = {"user": randn(gen, 10, 8, device=device), "item": randn(gen, 7, 8, device=device)}
    eli = {
        ("user", "rates", "item"): random_edge_index(gen, 10, 7, 30, torch.int64, device),
        ("item", "rev_rates", "user"): random_edge_index(gen, 7, 10, 20, torch.int64, device),
        ("user", "follows", "user"): random_edge_index(gen, 10, 10, 15, torch.int32, device),
    }
    return x_dict, eli


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sigmoid", [False, True])
def test_module_hetero_dict(sigmoid, device, gen):
    x_dict, eli = _hetero_inputs(gen, device)
    out = EdgeDotScore(sigmoid=sigmoid)(x_dict, eli)
    assert list(out) == list(eli)
    for (src, _, dst), index in eli.items():
        ref = (_f64(x_dict[src])[index.cpu().long()[0]] * _f64(x_dict[dst])[index.cpu().long()[1]]).sum(-1)
        assert_close(out[(src, _, dst)], ref.sigmoid() if sigmoid else ref, torch.float32)


@pytest.mark.parametrize("device", DEVICES)
def test_module_hetero_dict_with_relations(device, gen):
    x_dict, eli = _hetero_inputs(gen, device)
    score = EdgeDotScore(num_relations=3, channels=8).to(device)
    types = {key: i for i, key in enumerate(eli)}
    out = score(x_dict, eli, types)
    for key, index in eli.items():
        src, _, dst = key
        ref = ref_rel(x_dict[src], x_dict[dst], score.rel, index,
                      torch.full((index.shape[1],), types[key]))
        assert_close(out[key], ref, torch.float32)
    sum(v.sum() for v in out.values()).backward()
    assert score.rel.grad is not None and score.rel.grad.abs().sum() > 0


def test_module_hetero_dict_errors(gen):
    x_dict, eli = _hetero_inputs(gen, "cpu")
    score = EdgeDotScore()
    with pytest.raises(KeyError, match="needs x\\['movie'\\]"):
        score(x_dict, {("user", "rates", "movie"): eli[("user", "rates", "item")]})
    with pytest.raises(TypeError, match="edge_label_index must be a dict"):
        score(x_dict, eli[("user", "rates", "item")])
    with pytest.raises(TypeError, match="x must be a dict"):
        score(x_dict["user"], eli)
    with pytest.raises(ValueError, match="keys must be edge types"):
        score(x_dict, {"rates": eli[("user", "rates", "item")]})
    with pytest.raises(TypeError, match="edge_type must be a dict"):
        EdgeDotScore(num_relations=3, channels=8)(x_dict, eli, torch.zeros(3))
    with pytest.raises(TypeError, match="edge_type must be an int or an \\[E\\] Tensor "
                                        "\\(got bool True\\)"):
        EdgeDotScore(num_relations=3, channels=8)(x_dict, eli, {key: True for key in eli})
    # Each node type's features and each edge type's index are named as the user gave them,
    # not as edge_dot's x_src / edge_index.
    key = ("user", "rates", "item")
    bad_inputs = [
        ({"item": x_dict["user"].numpy()}, TypeError, r"x\['item'\] must be a Tensor"),
        ({"user": x_dict["user"][0]}, ValueError, r"x\['user'\] must be 2-D"),
        ({"item": x_dict["item"].double()}, TypeError,
         r"x\['user'\] and x\['item'\] must have the same dtype"),
        ({"item": x_dict["item"][:, :5]}, ValueError,
         r"x\['user'\] and x\['item'\] must have the same feature dimension"),
    ]
    for change, error, message in bad_inputs:
        with pytest.raises(error, match="^EdgeDotScore: " + message):
            score({**x_dict, **change}, eli)
    name = r"edge_label_index\[\('user', 'rates', 'item'\)\]"
    with pytest.raises(ValueError, match=rf"^EdgeDotScore: {name} must have shape \[2, E\]"):
        score(x_dict, {**eli, key: eli[key][0]})
    with pytest.raises(TypeError, match=rf"^EdgeDotScore: {name} must be int64 or int32"):
        score(x_dict, {**eli, key: eli[key].float()})
