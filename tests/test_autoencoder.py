"""``pyg_edgedot.InnerProductDecoder`` as PyG's auto-encoders' ``decoder=``: PyG's own
``test/nn/models/test_autoencoder.py`` (GAE, VGAE, ARGA, ARGVA) with this decoder, and
parity with ``torch_geometric.nn.models.InnerProductDecoder`` (values, gradients,
``recon_loss`` and ``test`` under the same seed)."""
import pytest
import torch
from torch import Tensor as T
from torch_geometric import seed_everything
from torch_geometric.data import Data
from torch_geometric.nn import ARGA, ARGVA, GAE, VGAE
from torch_geometric.nn.models import InnerProductDecoder as PyGInnerProductDecoder
from torch_geometric.transforms import RandomLinkSplit

from pyg_edgedot import InnerProductDecoder
from _helpers import DEVICES, _expect, leaf, randn, random_edge_index


# ---- PyG's test_autoencoder.py, with decoder=InnerProductDecoder() --------------------------

def _split_path_graph():
    edge_index = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
                               [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]])
    data = Data(edge_index=edge_index, num_nodes=11)
    transform = RandomLinkSplit(split_labels=True, add_negative_train_samples=False)
    return transform(data)


def test_gae():
    model = GAE(encoder=lambda x: x, decoder=InnerProductDecoder())
    model.reset_parameters()

    x = torch.Tensor([[1, -1], [1, 2], [2, 1]])
    z = model.encode(x)
    assert z.tolist() == x.tolist()

    adj = model.decoder.forward_all(z)
    assert adj.tolist() == torch.sigmoid(
        torch.Tensor([[+2, -1, +1], [-1, +5, +4], [+1, +4, +5]])).tolist()

    edge_index = torch.tensor([[0, 1], [1, 2]])
    value = model.decode(z, edge_index)
    assert value.tolist() == torch.sigmoid(torch.Tensor([-1, 4])).tolist()
    assert model.decode(z, edge_index, sigmoid=False).tolist() == [-1, 4]

    train_data, val_data, _ = _split_path_graph()
    z = torch.randn(11, 16)
    loss = model.recon_loss(z, train_data.pos_edge_label_index)
    assert loss.item() > 0

    auc, ap = model.test(z, val_data.pos_edge_label_index, val_data.neg_edge_label_index)
    assert 0 <= auc <= 1 and 0 <= ap <= 1


def test_vgae():
    model = VGAE(encoder=lambda x: (x, x), decoder=InnerProductDecoder())

    x = torch.Tensor([[1, -1], [1, 2], [2, 1]])
    z = model.encode(x)
    assert model.kl_loss().item() > 0
    assert model.recon_loss(z, torch.tensor([[0, 1], [1, 2]])).item() > 0

    model.eval()
    assert model.encode(x).tolist() == x.tolist()  # the mean, in eval mode


def test_arga():
    model = ARGA(encoder=lambda x: x, discriminator=lambda x: T([0.5]),
                 decoder=InnerProductDecoder())
    model.reset_parameters()

    x = torch.Tensor([[1, -1], [1, 2], [2, 1]])
    z = model.encode(x)

    assert model.reg_loss(z).item() > 0
    assert model.discriminator_loss(z).item() > 0
    assert model.decode(z, torch.tensor([[0], [2]]), sigmoid=False).tolist() == [1]


def test_argva():
    model = ARGVA(encoder=lambda x: (x, x), discriminator=lambda x: T([0.5]),
                  decoder=InnerProductDecoder())

    x = torch.Tensor([[1, -1], [1, 2], [2, 1]])
    model.encode(x)
    z = model.reparametrize(model.__mu__, model.__logstd__)
    assert model.kl_loss().item() > 0
    assert model.recon_loss(z, torch.tensor([[0, 1], [1, 2]])).item() > 0


def test_init():
    encoder = torch.nn.Linear(16, 32)
    discriminator = torch.nn.Linear(32, 1)
    decoder = InnerProductDecoder()

    for model in (GAE(encoder, decoder), VGAE(encoder, decoder),
                  ARGA(encoder, discriminator, decoder), ARGVA(encoder, discriminator, decoder)):
        assert model.decoder is decoder
        model.reset_parameters()  # GAE resets its decoder too: it has nothing to reset


# ---- parity with PyG's InnerProductDecoder --------------------------------------------------

def test_repr_and_no_parameters():
    assert repr(InnerProductDecoder()) == "InnerProductDecoder()"
    assert list(InnerProductDecoder().parameters()) == []


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("sigmoid", [True, False])
def test_matches_pyg_decoder(sigmoid, device, gen):
    z = randn(gen, 30, 8, dtype=torch.float64, device=device) * 0.5
    ei = random_edge_index(gen, 30, 30, 90, torch.int64, device)
    ours, pyg = InnerProductDecoder(), PyGInnerProductDecoder()
    for method, args in (("forward", (ei,)), ("forward_all", ())):
        z_ours, z_pyg = leaf(z), leaf(z)
        out = getattr(ours, method)(z_ours, *args, sigmoid=sigmoid)
        expected = getattr(pyg, method)(z_pyg, *args, sigmoid=sigmoid)
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
        grad_out = randn(gen, *out.shape, dtype=torch.float64, device=device)
        out.backward(grad_out)
        expected.backward(grad_out)
        torch.testing.assert_close(z_ours.grad, z_pyg.grad, rtol=1e-12, atol=1e-12)
    # PyG's positional form, decoder(z, edge_index, sigmoid), and the default (sigmoid=True).
    torch.testing.assert_close(ours(z, ei, sigmoid), pyg(z, ei, sigmoid))
    torch.testing.assert_close(ours(z, ei), pyg(z, ei))


@pytest.mark.parametrize("device", DEVICES)
def test_bad_z_is_named_z(device, gen):
    # The message names the decoder's argument, z, not edge_dot's x_src.
    z = randn(gen, 6, 4, device=device)
    ei = random_edge_index(gen, 6, 6, 9, torch.int64, device)
    decoder = InnerProductDecoder()
    for bad, exc in (((z, z), TypeError), (z.tolist(), TypeError), (z.long(), TypeError),
                     (z[:, 0], ValueError), (z[None], ValueError)):
        _expect(exc, "InnerProductDecoder", ["z"], lambda: decoder(bad, ei))
    _expect(TypeError, "edge_dot", ["edge_index"], lambda: decoder(z, ei.float()))


@pytest.mark.parametrize("device", DEVICES)
def test_gae_and_vgae_losses_match_pyg_decoder(device, gen):
    # recon_loss draws its negatives at random: the same seed must give the same loss and the
    # same gradients; GAE.test the same ROC-AUC and AP.
    x = randn(gen, 40, 12, device=device)
    pos = random_edge_index(gen, 40, 40, 120, torch.int64, device)
    neg = random_edge_index(gen, 40, 40, 120, torch.int64, device)
    encoder = torch.nn.Linear(12, 8).to(device)
    for cls in (GAE, VGAE):
        results = []
        for decoder in (InnerProductDecoder(), PyGInnerProductDecoder()):
            seed_everything(0)  # GAE() resets the encoder's parameters
            if cls is VGAE:
                model = VGAE(lambda x: (encoder(x), encoder(x) * 0.1), decoder)
            else:
                model = GAE(encoder, decoder)
            encoder.zero_grad()
            seed_everything(1)  # negative_sampling draws from Python's and NumPy's RNGs too
            z = model.encode(x)
            loss = model.recon_loss(z, pos)
            if cls is VGAE:
                loss = loss + model.kl_loss() / x.size(0)
            loss.backward()
            with torch.no_grad():
                auc, ap = model.test(model.encode(x), pos, neg)
            results.append((loss.detach(), encoder.weight.grad.clone(), auc, ap))
        (loss_a, grad_a, auc_a, ap_a), (loss_b, grad_b, auc_b, ap_b) = results
        torch.testing.assert_close(loss_a, loss_b)
        torch.testing.assert_close(grad_a, grad_b)
        assert auc_a == pytest.approx(auc_b) and ap_a == pytest.approx(ap_b)
