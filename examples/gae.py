"""Graph auto-encoder (torch_geometric.nn.GAE) with pyg_edgedot.InnerProductDecoder.

pyg_edgedot.InnerProductDecoder is PyG's InnerProductDecoder with the edge scores computed by
the fused kernel (forward(z, edge_index, sigmoid=True); forward_all(z, sigmoid=True) is the
dense z @ z.t(), as PyG's), so GAE takes it as decoder= with nothing around it. Training uses
GAE.recon_loss, which draws fresh negatives every call, and evaluation GAE.test (ROC-AUC and
AP); MRR and Hits@K rank each positive test edge against random negatives. The model with the
best validation ROC-AUC is tested.

examples:
  python examples/gae.py                                   # generated graph, no download
  python examples/gae.py --dataset Cora --root data/Planetoid
  python examples/gae.py --decoder eager                   # PyG's InnerProductDecoder
"""
import torch
from torch import Tensor
from torch_geometric.nn import GAE
from torch_geometric.nn.models import InnerProductDecoder
import pyg_edgedot

import _common
import _data


def parse_args(argv=None):
    parser = _common.make_parser(__doc__)
    _data.add_graph_args(parser)
    _data.add_split_args(parser)
    _common.add_encoder_args(parser, dropout=0.5)
    _common.add_training_args(
        parser, epochs=200, lr=0.01, neg_sampling=False,
        decoder_help="'edgedot': pyg_edgedot.InnerProductDecoder; "
                     "'eager': torch_geometric.nn.models.InnerProductDecoder")
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    device = _common.setup(args)  # --device, and seeds everything with --seed
    data, name = _data.load_graph(args)
    # split_labels=True gives pos_edge_label_index / neg_edge_label_index, as GAE.test wants.
    train_data, val_data, test_data = (
        d.to(device) for d in _data.split_edges(data, args, split_labels=True))

    decoder = (pyg_edgedot.InnerProductDecoder() if args.decoder == "edgedot"
               else InnerProductDecoder())
    model = GAE(_common.make_encoder(args, data.num_features), decoder).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    def train_epoch(timer: _common.EpochTimer) -> float:
        model.train()
        optimizer.zero_grad()
        z = model.encode(train_data.x, train_data.edge_index)
        loss = model.recon_loss(z, train_data.pos_edge_label_index)  # samples negatives
        loss.backward()
        optimizer.step()
        return loss.item()

    @torch.no_grad()
    def embed(split) -> Tensor:
        model.eval()
        return model.encode(split.x, split.edge_index)

    def validate() -> float:
        auc, _ = model.test(embed(val_data), val_data.pos_edge_label_index,
                            val_data.neg_edge_label_index)
        return auc

    result = _common.fit(model, train_epoch, validate, epochs=args.epochs, device=device,
                         progress=args.progress, desc=f"gae+{args.decoder}")
    z = embed(test_data)
    auc, ap = model.test(z, test_data.pos_edge_label_index, test_data.neg_edge_label_index)
    # Rank on logits: probabilities saturate at 1.0 in float32 and would tie.
    sums = _common.ranking_sums(lambda index: model.decoder(z, index, sigmoid=False),
                                test_data.pos_edge_label_index, test_data.num_nodes,
                                args.num_rank_negatives, args.hits_k, seed=args.seed)
    metrics = {"test_auc": float(auc), "test_ap": float(ap)}
    metrics.update({f"test_{k}": v for k, v in _common.ranking_metrics(sums, args.hits_k).items()})
    return _common.report(
        "gae", args, device, metrics=metrics, fit_result=result,
        data=dict(_data.describe(data), name=name,
                  scored_edges_per_epoch=2 * train_data.pos_edge_label_index.size(1)),
        title=f"{name}, GAE with {args.model.upper()} encoder, {args.decoder} decoder")


if __name__ == "__main__":
    _common.run(main)
