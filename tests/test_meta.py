"""Meta tensors (shapes without data, e.g. to size a model before materializing it): models
with ``EdgeDotScore`` or ``InnerProductDecoder``, the ranking ops, and first and second
derivatives give the right shapes and never read an index (there is none to read); the
samplers, whose output depends on the edges, say so."""
import pytest
import torch
from torch_geometric.nn import GAE, SAGEConv

from pyg_edgedot import (EdgeDotScore, InnerProductDecoder, NegativeSampler, edge_dot,
                         negative_sampling, rank_candidates, score_candidates,
                         structured_negative_sampling)

META = torch.device("meta")


def _index(*shape):
    return torch.empty(*shape, dtype=torch.int64, device=META)


class _Model(torch.nn.Module):
    def __init__(self, decoder):
        super().__init__()
        self.conv = SAGEConv(16, 8)  # GCNConv's normalization calls nonzero(), which meta lacks
        self.decoder = decoder

    def forward(self, x, edge_index, edge_label_index, *args, **kwargs):
        return self.decoder(self.conv(x, edge_index).relu(), edge_label_index, *args, **kwargs)


def test_models_on_meta():
    x, edge_index, label_index = torch.empty(30, 16, device=META), _index(2, 90), _index(2, 41)
    for decoder, args, kwargs in ((EdgeDotScore(), (), {}),
                                  (EdgeDotScore(sigmoid=True), (), {"sigmoid": False}),
                                  (EdgeDotScore(num_relations=3, channels=8), (_index(41),), {}),
                                  (InnerProductDecoder(), (), {"sigmoid": False})):
        model = _Model(decoder).to(META)
        out = model(x, edge_index, label_index, *args, **kwargs)
        assert out.shape == (41,) and out.device == META and out.dtype == torch.float32
        out.sum().backward()
        for name, param in model.named_parameters():
            assert param.grad is not None and param.grad.shape == param.shape, name
            assert param.grad.device == META, name


def test_gae_and_hetero_on_meta():
    model = GAE(torch.nn.Linear(16, 8), InnerProductDecoder()).to(META)
    z = model.encode(torch.empty(30, 16, device=META))
    assert model.decode(z, _index(2, 12)).shape == (12,)
    assert model.decoder.forward_all(z).shape == (30, 30)
    key = ("user", "rates", "item")
    x_dict = {"user": torch.empty(5, 8, device=META), "item": torch.empty(7, 8, device=META)}
    out = EdgeDotScore()(x_dict, {key: _index(2, 9)})
    assert out[key].shape == (9,) and out[key].device == META


def test_sampling_on_meta_says_why():
    # the samplers' output depends on which pairs are edges: no meta shapes to give
    edge_index = _index(2, 20)
    for call in (lambda: negative_sampling(edge_index, 12),
                 lambda: NegativeSampler(edge_index, 12),
                 lambda: structured_negative_sampling(edge_index, 12)):
        with pytest.raises(NotImplementedError, match="edge_index is on the meta device"):
            call()


def test_ops_and_double_backward_on_meta():
    x_src = torch.empty(12, 6, device=META, requires_grad=True)
    x_dst = torch.empty(9, 6, device=META, requires_grad=True)
    rel = torch.empty(4, 6, device=META, requires_grad=True)
    src, cand = _index(5), _index(5, 3)
    assert score_candidates(x_src, x_dst, src, cand).shape == (5, 3)
    rank = rank_candidates(x_src, x_dst, src, _index(5), cand)
    assert rank.shape == (5,) and rank.dtype == torch.float32 and rank.device == META
    for out in (edge_dot(x_src, x_dst, _index(2, 20)),
                edge_dot(x_src, x_dst, _index(2, 20), rel, _index(20)),
                score_candidates(x_src, x_dst, src, cand)):
        grads = torch.autograd.grad(out.sum(), (x_src, x_dst), create_graph=True)
        second = torch.autograd.grad(sum((g ** 2).sum() for g in grads), (x_src, x_dst, rel),
                                     allow_unused=True)
        for grad, like in zip(grads + second, (x_src, x_dst, x_src, x_dst, rel)):
            assert grad is None or (grad.shape == like.shape and grad.device == META)


def _mixed_meta_calls():
    """Each registered op with one argument on the meta device and the rest on the CPU."""
    ops = torch.ops.pyg_edgedot
    x, rel, grad = torch.randn(6, 4), torch.randn(3, 4), torch.randn(9)
    index, cand = torch.randint(0, 3, (9,)), torch.randint(0, 3, (9, 2))
    meta = lambda t: t.to(META)  # noqa: E731
    return [
        ("edge_dot", lambda: ops.edge_dot(x, x, index, meta(index))),
        ("edge_dot", lambda: ops.edge_dot(x, meta(x), index, index)),
        ("edge_dot_grad", lambda: ops.edge_dot_grad(meta(grad), x, index, index, 6)),
        ("edge_dot_pair_grad", lambda: ops.edge_dot_pair_grad(grad, x, x, meta(index), index)),
        ("edge_dot_rel", lambda: ops.edge_dot_rel(x, x, meta(rel), index, index, index)),
        ("edge_dot_rel_grad",
         lambda: ops.edge_dot_rel_grad(grad, rel, x, index, index, meta(index), 6)),
        ("score_candidates", lambda: ops.score_candidates(x, x, meta(index), meta(cand))),
        ("rank_candidates", lambda: ops.rank_candidates(x, x, index, index, meta(cand))),
    ]


@pytest.mark.parametrize("op,call", _mixed_meta_calls(),
                         ids=[f"{op}-{i}" for i, (op, _) in enumerate(_mixed_meta_calls())])
def test_ops_mixing_meta_and_cpu_raise(op, call):
    # Such a call dispatches to the fake kernel, which must not hand back uninitialized
    # tensors on the CPU as if it had computed them.
    with pytest.raises(RuntimeError, match=rf"^{op}: \w+ must be on the device of \w+ "
                                           r"\(got (meta and cpu|cpu and meta)\)"):
        call()
