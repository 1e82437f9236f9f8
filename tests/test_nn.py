"""``EdgeDotScore``: the module API, PyG's ``InnerProductDecoder`` parity, and a tiny
GCN link-prediction model trained with it."""
import copy

import pytest
import torch
import torch_geometric.transforms as T
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv, InnerProductDecoder
from torch_geometric.utils import to_undirected

from pyg_edgedot import EdgeDotScore
from _helpers import (DEVICES, FLOAT_DTYPES, INDEX_DTYPES, assert_close, dtype_id, leaf, randn,
                      random_edge_index, ref_edge_dot, ref_grads)


def test_repr():
    assert repr(EdgeDotScore()) == "EdgeDotScore(sigmoid=False)"
    assert repr(EdgeDotScore(sigmoid=True)) == "EdgeDotScore(sigmoid=True)"
    assert EdgeDotScore().sigmoid is False
    assert list(EdgeDotScore().parameters()) == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("sigmoid", [False, True])
def test_matches_inner_product_decoder(sigmoid, dtype, index_dtype, device, gen):
    # Scaled so the logits stay O(1) and the sigmoid does not saturate.
    z = (randn(gen, 40, 33, dtype=torch.float64) * 0.4).to(dtype).to(device)
    ei = random_edge_index(gen, 40, 40, 300, index_dtype, device)
    z_ours, z_pyg = leaf(z), leaf(z)
    out = EdgeDotScore(sigmoid=sigmoid)(z_ours, ei)
    expected = InnerProductDecoder()(z_pyg, ei.long(), sigmoid=sigmoid)
    assert out.dtype == dtype and out.shape == (300,)
    logits = ref_edge_dot(z, z, ei)
    ref = logits.sigmoid() if sigmoid else logits
    assert_close(out, ref, dtype)
    assert_close(expected, ref, dtype, "InnerProductDecoder")  # the reference is right
    if sigmoid:
        assert ((out >= 0) & (out <= 1)).all()
    grad_out = randn(gen, 300, dtype=dtype, device=device)
    out.backward(grad_out)
    expected.backward(grad_out)
    # d sigmoid(l) / dl = s (1 - s), applied in float64 before the scatter.
    grad_logits = grad_out.double().cpu() * (ref * (1 - ref) if sigmoid else 1)
    ref_src, ref_dst = ref_grads(z, z, ei, grad_logits)
    assert_close(z_ours.grad, ref_src + ref_dst, dtype, "grad z")
    assert_close(z_pyg.grad, ref_src + ref_dst, dtype, "grad z (InnerProductDecoder)")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("pair_type", [tuple, list])
def test_pair_input(pair_type, dtype, device, gen):
    # Bipartite: row 0 indexes x_src (e.g. users), row 1 x_dst (e.g. movies).
    x_src = randn(gen, 17, 8, dtype=dtype, device=device).requires_grad_(True)
    x_dst = randn(gen, 29, 8, dtype=dtype, device=device).requires_grad_(True)
    ei = random_edge_index(gen, 17, 29, 120, torch.int64, device)
    out = EdgeDotScore()(pair_type([x_src, x_dst]), ei)
    assert_close(out, ref_edge_dot(x_src, x_dst, ei), dtype)
    probs = EdgeDotScore(sigmoid=True)(pair_type([x_src, x_dst]), ei)
    assert_close(probs, ref_edge_dot(x_src, x_dst, ei).sigmoid(), dtype)
    grad_out = randn(gen, 120, dtype=dtype, device=device)
    out.backward(grad_out)
    ref_src, ref_dst = ref_grads(x_src, x_dst, ei, grad_out)
    assert_close(x_src.grad, ref_src, dtype, "grad x_src")
    assert_close(x_dst.grad, ref_dst, dtype, "grad x_dst")


@pytest.mark.parametrize("device", DEVICES)
def test_empty_edge_label_index(device, gen):
    z = randn(gen, 5, 4, device=device)
    out = EdgeDotScore(sigmoid=True)(z, torch.empty(2, 0, dtype=torch.int64, device=device))
    assert out.shape == (0,)


# ---- a tiny GCN link predictor -------------------------------------------------------------

class _Encoder(torch.nn.Module):
    def __init__(self, in_channels, hidden, out_channels):
        super().__init__()
        self.conv1 = GCNConv(in_channels, hidden)
        self.conv2 = GCNConv(hidden, out_channels)

    def forward(self, x, edge_index):
        return self.conv2(self.conv1(x, edge_index).relu(), edge_index)


class _LinkPredictor(torch.nn.Module):
    def __init__(self, encoder, decoder):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(self, x, edge_index, edge_label_index):
        return self.decoder(self.encoder(x, edge_index), edge_label_index)


class _EagerDecoder(torch.nn.Module):
    def forward(self, z, edge_label_index):
        return InnerProductDecoder()(z, edge_label_index, sigmoid=False)


def _tiny_graph(gen, device):
    num_nodes = 60
    x = randn(gen, num_nodes, 16)
    # Two communities, so there is something to learn.
    ei = random_edge_index(gen, num_nodes // 2, num_nodes // 2, 150)
    ei = torch.cat([ei, ei + num_nodes // 2], dim=1)
    ei = ei[:, ei[0] != ei[1]]
    data = Data(x=x, edge_index=to_undirected(ei, num_nodes=num_nodes), num_nodes=num_nodes)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        train, val, _ = T.RandomLinkSplit(num_val=0.1, num_test=0.1, is_undirected=True)(data)
    return train.to(device), val.to(device)


def _train(model, train, val, steps=20):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        logits = model(train.x, train.edge_index, train.edge_label_index)
        loss = loss_fn(logits, train.edge_label)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        val_logits = model(val.x, val.edge_index, val.edge_label_index)
    return losses, val_logits


@pytest.mark.parametrize("device", DEVICES)
def test_tiny_link_prediction_model(device, gen):
    train, val, = _tiny_graph(gen, device)
    assert train.edge_label.min() == 0 and train.edge_label.max() == 1  # negatives sampled
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        encoder = _Encoder(16, 32, 16).to(device)
    ours = _LinkPredictor(copy.deepcopy(encoder), EdgeDotScore())
    eager = _LinkPredictor(copy.deepcopy(encoder), _EagerDecoder())
    losses, val_logits = _train(ours, train, val)
    eager_losses, eager_val_logits = _train(eager, train, val)

    assert losses[-1] < 0.9 * losses[0], f"the loss did not decrease: {losses}"
    for step, (a, b) in enumerate(zip(losses, eager_losses)):
        assert abs(a - b) <= 1e-4 * abs(b) + 1e-6, f"step {step}: loss {a} vs eager {b}"
    assert_close(val_logits, eager_val_logits.double().cpu(), torch.float32, tol=1e-4)
    for p, q in zip(ours.parameters(), eager.parameters()):
        assert_close(p, q.detach().double().cpu(), torch.float32, "parameters", tol=1e-4)


# ---- sigmoid per call; PyG's positional sigmoid ---------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
def test_sigmoid_keyword_overrides_per_call(device, gen):
    z = randn(gen, 12, 6, dtype=torch.float64, device=device)
    ei = random_edge_index(gen, 12, 12, 40, torch.int64, device)
    logits = ref_edge_dot(z, z, ei)
    for module_sigmoid in (False, True):
        decoder = EdgeDotScore(sigmoid=module_sigmoid)
        assert_close(decoder(z, ei, sigmoid=True), logits.sigmoid(), torch.float64)
        assert_close(decoder(z, ei, sigmoid=False), logits, torch.float64)
        assert_close(decoder(z, ei, sigmoid=None),
                     logits.sigmoid() if module_sigmoid else logits, torch.float64)
        assert decoder.sigmoid is module_sigmoid  # the module's setting is unchanged
    key = ("a", "to", "b")
    out = EdgeDotScore()({"a": z, "b": z}, {key: ei}, sigmoid=True)
    assert_close(out[key], logits.sigmoid(), torch.float64)


@pytest.mark.parametrize("flag", [False, True])
@pytest.mark.parametrize("relations", [None, 2])
def test_positional_bool_third_argument_says_what_happened(relations, flag, gen):
    # PyG's InnerProductDecoder is called decoder(z, edge_index, False); EdgeDotScore's third
    # positional is edge_type, and a bool is an int (relation 0 or 1) to Python.
    z = randn(gen, 5, 4)
    ei = random_edge_index(gen, 5, 5, 7)
    decoder = EdgeDotScore(num_relations=relations, channels=relations and 4)
    with pytest.raises(TypeError, match=r"^EdgeDotScore: the third positional argument is "
                                        r"edge_type, and got a bool \((True|False)\).*"
                                        rf"sigmoid={flag} by keyword.*InnerProductDecoder"):
        decoder(z, ei, flag)
