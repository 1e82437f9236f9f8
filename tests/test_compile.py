"""``torch.compile(fullgraph=True)`` traces ``edge_dot`` forward and backward with no graph
break, statically and with ``dynamic=True`` over two edge counts. Few and small: compiling
is slow on a small CPU."""
import pytest
import torch

from pyg_edgedot import EdgeDotScore, edge_dot
from _helpers import (DEVICES, RecordingBackend, assert_close, leaf, randn, random_edge_index,
                      ref_edge_dot, ref_grads)


def _score(x_src, x_dst, edge_index):
    return edge_dot(x_src, x_dst, edge_index).tanh()


class _Scorer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)
        self.score = EdgeDotScore()

    def forward(self, x, edge_label_index):
        h = self.lin(x).relu()
        return self.score(h, edge_label_index)


def _problem(gen, device, num_edges, num_src=10, num_dst=12, feat_dim=8):
    x_src = randn(gen, num_src, feat_dim, device=device)
    x_dst = randn(gen, num_dst, feat_dim, device=device)
    ei = random_edge_index(gen, num_src, num_dst, num_edges, torch.int64, device)
    return x_src, x_dst, ei


def _run(fn, x_src, x_dst, ei, grad_out):
    a, b = leaf(x_src), leaf(x_dst)
    out = fn(a, b, ei)
    out.backward(grad_out)
    return out.detach(), a.grad, b.grad


def _check_against_reference(result, x_src, x_dst, ei, grad_out):
    out, grad_src, grad_dst = result
    logits = ref_edge_dot(x_src, x_dst, ei)
    ref = logits.tanh()
    assert_close(out, ref, torch.float32)
    ref_src, ref_dst = ref_grads(x_src, x_dst, ei, grad_out.double().cpu() * (1 - ref ** 2))
    assert_close(grad_src, ref_src, torch.float32, "grad x_src")
    assert_close(grad_dst, ref_dst, torch.float32, "grad x_dst")


@pytest.mark.parametrize("device", DEVICES)
def test_explain_no_graph_break(device, gen, fresh_dynamo):
    x_src, x_dst, ei = _problem(gen, device, 40)
    explanation = torch._dynamo.explain(_score)(x_src, x_dst, ei)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1
    torch._dynamo.reset()
    model = _Scorer().to(device)
    ei = random_edge_index(gen, 10, 10, 40, torch.int32, device)
    explanation = torch._dynamo.explain(model)(x_src, ei)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    assert explanation.graph_count == 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("same", [False, True], ids=["two-tensors", "same-tensor"])
def test_forward_and_backward_graphs(same, device, gen, fresh_dynamo):
    # fullgraph=True fails on any graph break; the recorded graphs show that both the
    # forward op and the backward op were traced (not run eagerly).
    x_src, x_dst, ei = _problem(gen, device, 50, num_dst=10)
    recorder = RecordingBackend()
    if same:
        def fn(a, b, edge_index):
            return edge_dot(a, a, edge_index).tanh()
        x_dst = x_src
    else:
        fn = _score
    compiled = torch.compile(fn, backend=recorder.backend, fullgraph=True)
    grad_out = randn(gen, 50, device=device)
    result = _run(compiled, x_src, x_dst, ei, grad_out)
    assert len(recorder.forward_graphs) == 1 and len(recorder.backward_graphs) == 1
    assert "pyg_edgedot.edge_dot.default" in recorder.forward_graphs[0]
    # Both sides' scatters in one op (summed when both sides are the same tensor).
    backward = recorder.backward_graphs[0]
    assert backward.count("pyg_edgedot.edge_dot_pair_grad.default") == 1, backward
    assert "pyg_edgedot.edge_dot_grad.default" not in backward, backward
    eager = _run(fn, x_src, x_dst, ei, grad_out)
    for got, expected in zip(result[:2] if same else result, eager):
        assert_close(got, expected.double().cpu(), torch.float32)
    if same:
        assert result[2] is None
        ref = ref_edge_dot(x_src, x_src, ei).tanh()
        assert_close(result[0], ref, torch.float32)
        ref_src, ref_dst = ref_grads(x_src, x_src, ei, grad_out.double().cpu() * (1 - ref ** 2))
        assert_close(result[1], ref_src + ref_dst, torch.float32, "grad x")
    else:
        _check_against_reference(result, x_src, x_dst, ei, grad_out)


@pytest.mark.parametrize("device", DEVICES)
def test_dynamic_two_edge_counts_one_graph(device, gen, fresh_dynamo):
    recorder = RecordingBackend()
    compiled = torch.compile(_score, backend=recorder.backend, fullgraph=True, dynamic=True)
    for num_edges in (37, 91):
        x_src, x_dst, ei = _problem(gen, device, num_edges)
        grad_out = randn(gen, num_edges, device=device)
        result = _run(compiled, x_src, x_dst, ei, grad_out)
        _check_against_reference(result, x_src, x_dst, ei, grad_out)
    # One symbolic graph serves both sizes: no recompilation.
    assert len(recorder.forward_graphs) == 1, "recompiled for the second edge count"
    assert len(recorder.backward_graphs) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_inductor_dynamic(device, gen, fresh_dynamo):
    # The default backend (Inductor), dynamic shapes, two edge counts; values and gradients
    # against eager and the float64 reference.
    compiled = torch.compile(_score, fullgraph=True, dynamic=True)
    for num_edges in (37, 91):
        x_src, x_dst, ei = _problem(gen, device, num_edges)
        grad_out = randn(gen, num_edges, device=device)
        result = _run(compiled, x_src, x_dst, ei, grad_out)
        eager = _run(_score, x_src, x_dst, ei, grad_out)
        for got, expected in zip(result, eager):
            assert_close(got, expected.double().cpu(), torch.float32)
        _check_against_reference(result, x_src, x_dst, ei, grad_out)


@pytest.mark.parametrize("device", DEVICES)
def test_inductor_module(device, gen, fresh_dynamo):
    x = randn(gen, 20, 8, device=device)
    ei = random_edge_index(gen, 20, 20, 64, torch.int32, device)
    model = _Scorer().to(device)
    reference_model = _Scorer().to(device)
    reference_model.load_state_dict(model.state_dict())
    compiled = torch.compile(model, fullgraph=True)
    grad_out = randn(gen, 64, device=device)

    out = compiled(x, ei)
    out.backward(grad_out)
    expected = reference_model(x, ei)
    expected.backward(grad_out)
    assert_close(out, expected.detach().double().cpu(), torch.float32)
    h = reference_model.lin(x).relu()
    assert_close(out, ref_edge_dot(h, h, ei), torch.float32)
    for p, q in zip(model.parameters(), reference_model.parameters()):
        assert_close(p.grad, q.grad.double().cpu(), torch.float32, "parameter grad")
