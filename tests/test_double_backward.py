"""Second derivatives: the gradient ops ``edge_dot_grad`` and ``edge_dot_rel_grad`` have
autograd of their own, so ``create_graph=True`` (gradient penalties, Hessian-vector products)
differentiates through them instead of treating them as constants.

gradgradcheck in float64 for every differentiable op and input, the same tensor on both
sides, gradient penalties against the eager expression, indices out of range with
``validate=False``, opcheck of the gradient ops with inputs that need gradients,
``torch.compile(fullgraph=True)``, and all of it again through the pure-PyTorch fallback.
"""
import os
import subprocess
import sys

import pytest
import torch
from torch import autograd

import pyg_edgedot
from pyg_edgedot import _backend, edge_dot, score_candidates
from _helpers import DEVICES, randint, randn, random_edge_index

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
F64 = torch.float64


def _leaves(gen, device, *shapes):
    return [randn(gen, *shape, dtype=F64, device=device).requires_grad_(True)
            for shape in shapes]


# ---- gradgradcheck ---------------------------------------------------------------------------

# Where an op runs the pure-PyTorch fallback on CUDA (the relation and candidate ops on the
# Triton path; every op under PYG_EDGEDOT_FORCE_FALLBACK=1), its scatter is index_add_, bitwise
# repeatable only under torch.use_deterministic_algorithms(True); gradgradcheck's reentrancy
# check needs that, so these tests run under it.

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
@pytest.mark.usefixtures("deterministic_algorithms")
def test_gradgradcheck_edge_dot(index_dtype, device, gen):
    x_src, x_dst = _leaves(gen, device, (7, 5), (6, 5))
    ei = random_edge_index(gen, 7, 6, 29, index_dtype, device)
    ei[:, 3] = ei[:, 0]  # a duplicate edge
    assert autograd.gradgradcheck(lambda a, b: edge_dot(a, b, ei), (x_src, x_dst))
    assert autograd.gradgradcheck(lambda a: edge_dot(a, x_dst.detach(), ei), (x_src,))
    assert autograd.gradgradcheck(lambda b: edge_dot(x_src.detach(), b, ei), (x_dst,))
    # The same tensor on both sides, with self loops; D = 1.
    x, x1 = _leaves(gen, device, (7, 5), (7, 1))
    loops = torch.cat([random_edge_index(gen, 7, 7, 20, index_dtype, device),
                       torch.arange(3, dtype=index_dtype, device=device).repeat(2, 1)], 1)
    assert autograd.gradgradcheck(lambda a: edge_dot(a, a, loops), (x,))
    assert autograd.gradgradcheck(lambda a: edge_dot(a, a, loops), (x1,))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.usefixtures("deterministic_algorithms")
def test_gradgradcheck_edge_dot_pair_grad(device, gen):
    # The pair op's own autograd (edge_dot's backward when both gradients are needed), on
    # every input: grad_out, x_src and x_dst, with an index out of range and a duplicate edge.
    grad_out, x_src, x_dst = _leaves(gen, device, (31,), (7, 5), (6, 5))
    ei = random_edge_index(gen, 7, 6, 31, torch.int64, device)
    ei[:, 3] = ei[:, 0]
    ei[1, 8] = 6

    def pair(g, a, b):
        return torch.ops.pyg_edgedot.edge_dot_pair_grad(g, a, b, ei[0], ei[1])

    assert autograd.gradcheck(pair, (grad_out, x_src, x_dst))
    assert autograd.gradgradcheck(pair, (grad_out, x_src, x_dst))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.usefixtures("deterministic_algorithms")
def test_gradgradcheck_edge_dot_rel(device, gen):
    x_src, x_dst, rel = _leaves(gen, device, (7, 4), (6, 4), (3, 4))
    ei = random_edge_index(gen, 7, 6, 25, torch.int64, device)
    edge_type = randint(gen, 3, 25, torch.int64, device)
    assert autograd.gradgradcheck(lambda a, b, r: edge_dot(a, b, ei, r, edge_type),
                                  (x_src, x_dst, rel))
    # Each input alone (the others constant), the same tensor on both sides, one [D] rel.
    for i in range(3):
        def f(leaf, i=i):
            args = [x_src.detach(), x_dst.detach(), rel.detach()]
            args[i] = leaf
            return edge_dot(args[0], args[1], ei, args[2], edge_type)
        assert autograd.gradgradcheck(f, ((x_src, x_dst, rel)[i],))
    x, = _leaves(gen, device, (7, 4))
    loops = random_edge_index(gen, 7, 7, 25, torch.int64, device)
    assert autograd.gradgradcheck(lambda a, r: edge_dot(a, a, loops, r, edge_type), (x, rel))
    assert autograd.gradgradcheck(lambda a, r: edge_dot(a, a, loops, r[1]), (x, rel))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.usefixtures("deterministic_algorithms")
def test_gradgradcheck_score_candidates(device, gen):
    x_src, x_dst = _leaves(gen, device, (6, 5), (7, 5))
    src = randint(gen, 6, 8, torch.int64, device)
    src[3] = src[0]  # a repeated source
    cand = randint(gen, 7, 8 * 4, torch.int64, device).view(8, 4)
    assert autograd.gradgradcheck(lambda a, b: score_candidates(a, b, src, cand),
                                  (x_src, x_dst))
    x, = _leaves(gen, device, (7, 5))
    cand_t = cand.t().contiguous().t()
    assert autograd.gradgradcheck(lambda a: score_candidates(a, a, src, cand_t), (x,))


# ---- gradient penalties against the eager expression -------------------------------------------

def _eager_dot(z, ei):
    return (z[ei[0]] * z[ei[1]]).sum(-1)


def _penalized_grad(score, x, W):
    """d/dW of loss + ||d loss / dz||^2 with z = x @ W and loss = sum(sigmoid(score(z)))."""
    z = x @ W
    loss = score(z).sigmoid().sum()
    grad_z, = autograd.grad(loss, z, create_graph=True)
    grad_W, = autograd.grad(loss + (grad_z ** 2).sum(), W)
    return grad_W


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_penalty_matches_eager(device):
    # A gradient penalty through edge_dot(z, z, ei): its d/dW needs the gradient op's own
    # derivative, so it equals the eager expression's only if that op is differentiated, not
    # taken as a constant.
    torch.manual_seed(0)
    x = torch.randn(6, 3, dtype=F64, device=device)
    ei = torch.tensor([[0, 1, 2, 4], [1, 2, 3, 5]], device=device)
    W = torch.randn(3, 3, dtype=F64, device=device, requires_grad=True)
    ours = _penalized_grad(lambda z: edge_dot(z, z, ei), x, W)
    eager = _penalized_grad(lambda z: _eager_dot(z, ei), x, W)
    torch.testing.assert_close(ours, eager, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("device", DEVICES)
def test_gradient_penalty_distmult_and_candidates_match_eager(device, gen):
    x, W = randn(gen, 9, 4, dtype=F64, device=device), *_leaves(gen, device, (4, 4))
    rel, = _leaves(gen, device, (3, 4))
    ei = random_edge_index(gen, 9, 9, 30, torch.int64, device)
    edge_type = randint(gen, 3, 30, torch.int64, device)
    src, cand = ei[0, :6], ei[1].view(6, 5)
    cases = [
        (lambda z: edge_dot(z, z, ei, rel, edge_type),
         lambda z: (z[ei[0]] * rel[edge_type] * z[ei[1]]).sum(-1)),
        (lambda z: score_candidates(z, z, src, cand),
         lambda z: (z[src].unsqueeze(1) * z[cand]).sum(-1)),
    ]
    for ours, eager in cases:
        torch.testing.assert_close(_penalized_grad(ours, x, W), _penalized_grad(eager, x, W),
                                   rtol=1e-12, atol=1e-12)
    # d/drel of a penalty on d/dz: rel's second derivatives, through edge_dot_rel_grad.
    grads = []
    for score in (cases[0][0], cases[0][1]):
        z = x @ W
        grad_z, = autograd.grad(score(z).sigmoid().sum(), z, create_graph=True)
        grads.append(autograd.grad((grad_z ** 2).sum(), (rel, W)))
    for ours, eager in zip(*grads):
        torch.testing.assert_close(ours, eager, rtol=1e-12, atol=1e-12)


# ---- indices out of range, validate=False --------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op, bad", [("edge_dot", 0), ("edge_dot", 1), ("distmult", 0),
                                     ("distmult", 1), ("distmult", "edge_type")])
def test_double_backward_out_of_range_contributes_nothing(op, bad, device, gen):
    # An edge out of range scores NaN and contributes no gradient, so its derivative through
    # the gradient op is 0 (not the NaN that the forward op scores it). The upstream gradient
    # depends on a parameter (weight), so a NaN leaking from the bad edge shows in its grad.
    x, rel = _leaves(gen, device, (8, 3), (2, 3))
    weight = torch.tensor(0.7, dtype=F64, device=device, requires_grad=True)
    ei = random_edge_index(gen, 8, 8, 12, torch.int64, device)
    edge_type = randint(gen, 2, 12, torch.int64, device)
    coef = randn(gen, 12, dtype=F64, device=device)
    bad_ei, bad_type = ei.clone(), edge_type.clone()
    (bad_type if bad == "edge_type" else bad_ei[bad])[5] = 99
    good = torch.arange(12, device=device) != 5

    def grads(index, types, upstream, validate):
        out = (edge_dot(x, x, index, rel, types, validate=validate) if op == "distmult"
               else edge_dot(x, x, index, validate=validate))
        grad_x, = autograd.grad(out, x, grad_outputs=weight * upstream, create_graph=True)
        return autograd.grad((grad_x ** 2).sum(), (weight, x, rel), allow_unused=True)

    ours = grads(bad_ei, bad_type, coef, validate=False)
    ref = grads(ei[:, good], edge_type[good], coef[good], validate=True)
    for got, want, name in zip(ours, ref, ("weight", "x", "rel")):
        if want is None:
            assert got is None, name
            continue
        assert torch.isfinite(got).all(), f"{name}: a NaN leaked from the bad edge: {got}"
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12, msg=name)


@pytest.mark.parametrize("device", DEVICES)
def test_double_backward_score_candidates_out_of_range(device, gen):
    x, = _leaves(gen, device, (8, 3))
    weight = torch.tensor(0.7, dtype=F64, device=device, requires_grad=True)
    src = randint(gen, 8, 5, torch.int64, device)
    cand = randint(gen, 8, 15, torch.int64, device).view(5, 3)
    coef = randn(gen, 5, 3, dtype=F64, device=device)
    bad = cand.clone()
    bad[2, 1] = -1

    def grads(cand_index, upstream):
        out = score_candidates(x, x, src, cand_index, validate=False)
        grad_x, = autograd.grad(out, x, grad_outputs=weight * upstream, create_graph=True)
        return autograd.grad((grad_x ** 2).sum(), (weight, x))

    ours = grads(bad, coef)
    ref = grads(cand, coef.index_put((torch.tensor(2), torch.tensor(1)),
                                     torch.tensor(0.0, dtype=F64)))
    for got, want in zip(ours, ref):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


# ---- opcheck, torch.compile ---------------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32])
def test_opcheck_grad_ops_with_autograd(index_dtype, device, gen):
    # Inputs that need gradients make opcheck test the autograd registration as well.
    grad_out, x_a, x_b = _leaves(gen, device, (33,), (9, 6), (8, 6))
    ei = random_edge_index(gen, 9, 8, 33, index_dtype, device)
    edge_type = randint(gen, 9, 33, index_dtype, device)
    torch.library.opcheck(torch.ops.pyg_edgedot.edge_dot_grad.default,
                          (grad_out, x_b, ei[0], ei[1], 9))
    torch.library.opcheck(torch.ops.pyg_edgedot.edge_dot_pair_grad.default,
                          (grad_out, x_a, x_b, ei[0], ei[1]))
    torch.library.opcheck(torch.ops.pyg_edgedot.edge_dot_rel_grad.default,
                          (grad_out, x_a, x_b, ei[0], edge_type, ei[1], 9))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_gradient_penalty_fullgraph(device, fresh_dynamo):
    # torch.autograd.grad inside a compiled function needs dynamo's trace_autograd_ops (off by
    # default; PyTorch breaks the graph, or fails with fullgraph=True, on the eager expression
    # too). With it, the double backward traces through the registered ops' autograd.
    if not hasattr(torch._dynamo.config, "trace_autograd_ops"):
        pytest.skip(f"torch {torch.__version__}'s dynamo has no trace_autograd_ops")
    torch.manual_seed(0)
    x = torch.randn(6, 3, dtype=F64, device=device)
    ei = torch.tensor([[0, 1, 2, 4], [1, 2, 3, 5]], device=device)
    W = torch.randn(3, 3, dtype=F64, device=device, requires_grad=True)

    def penalized_loss(W):
        z = x @ W
        loss = edge_dot(z, z, ei).sigmoid().sum()
        grad_z, = autograd.grad(loss, z, create_graph=True)
        return loss + (grad_z ** 2).sum()

    with torch._dynamo.config.patch(trace_autograd_ops=True):
        compiled = torch.compile(penalized_loss, fullgraph=True, backend="aot_eager")
        grad_W, = autograd.grad(compiled(W), W)
    eager = _penalized_grad(lambda z: _eager_dot(z, ei), x, W)
    torch.testing.assert_close(grad_W, eager, rtol=1e-12, atol=1e-12)


# ---- the pure-PyTorch fallback ---------------------------------------------------------------

def test_double_backward_forced_fallback():
    # This file's tests again in a fresh interpreter where every op is the pure-PyTorch
    # fallback (PYG_EDGEDOT_FORCE_FALLBACK=1).
    if _backend.loaded().config.force_fallback:
        assert pyg_edgedot.backends() == {"cpu": "python", "cuda": "python"}
        return
    env = dict(os.environ, PYG_EDGEDOT_FORCE_FALLBACK="1")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W",
         "ignore::UserWarning", os.path.join(TESTS_DIR, os.path.basename(__file__))],
        env=env, capture_output=True, text=True, timeout=600, cwd=TESTS_DIR)
    assert proc.returncode == 0, (
        f"under the fallback:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}")
    assert " failed" not in proc.stdout and " passed" in proc.stdout, proc.stdout[-2000:]
