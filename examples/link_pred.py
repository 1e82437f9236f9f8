"""Link prediction with a GNN encoder and pyg_edgedot's EdgeDotScore decoder.

A GCN (or GraphSAGE) encoder embeds the nodes; EdgeDotScore scores each candidate edge by
the dot product of its endpoint embeddings, in one fused pass and O(E) memory, where PyG's
usual (z[src] * z[dst]).sum(-1) builds two [E, D] tensors. The edges are split with
RandomLinkSplit; every epoch draws fresh negatives, one per training edge, and trains with
BCEWithLogitsLoss. The model with the best validation ROC-AUC is tested: ROC-AUC and AP on
the test edges, and MRR and Hits@K ranking each positive test edge against random
negatives, as OGB does.

examples:
  python examples/link_pred.py                                  # generated graph, ~20 s on 2 cores
  python examples/link_pred.py --dataset Cora --root data/Planetoid
  python examples/link_pred.py --decoder eager                  # PyG's expression, same seed
  python examples/link_pred.py --device cuda --num-nodes 1000000 --avg-degree 20 \\
      --neg-sampling uniform --epochs 20 --no-progress --json big.json
                                                      # ~17M scored edges per epoch
"""
import torch
import torch_geometric.transforms as T
from torch_geometric import seed_everything
from torch_geometric.nn.models import GCN, GraphSAGE

import _common
import _data

ENCODERS = {"gcn": GCN, "sage": GraphSAGE}


def add_encoder_args(parser) -> None:
    group = parser.add_argument_group("encoder")
    group.add_argument("--model", default="gcn", choices=sorted(ENCODERS),
                       help="encoder: torch_geometric.nn.models.GCN or GraphSAGE")
    group.add_argument("--num-layers", type=int, default=2, help="message-passing layers")
    group.add_argument("--dropout", type=float, default=0.0, help="encoder dropout")


def make_encoder(args, in_channels: int) -> torch.nn.Module:
    return ENCODERS[args.model](in_channels, args.hidden_channels, args.num_layers,
                                args.out_channels, dropout=args.dropout)


def split_edges(data, args):
    """RandomLinkSplit into train/val/test; val and test get one negative per positive."""
    split = T.RandomLinkSplit(num_val=args.val_ratio, num_test=args.test_ratio,
                              is_undirected=True, add_negative_train_samples=False)
    return split(data)


def add_split_args(parser) -> None:
    group = parser.add_argument_group("split")
    group.add_argument("--val-ratio", type=float, default=0.05, help="edges for validation")
    group.add_argument("--test-ratio", type=float, default=0.1, help="edges for testing")


def parse_args(argv=None):
    parser = _common.make_parser(__doc__)
    _data.add_graph_args(parser)
    add_split_args(parser)
    add_encoder_args(parser)
    _common.add_training_args(parser, epochs=100, lr=0.01)
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    device = _common.resolve_device(args.device)
    seed_everything(args.seed)
    data, name = _data.load_graph(args)
    train_data, val_data, test_data = (d.to(device) for d in split_edges(data, args))

    model = make_encoder(args, data.num_features).to(device)
    decoder = _common.make_decoder(args.decoder)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = torch.nn.BCEWithLogitsLoss()

    def train_epoch(timer: _common.EpochTimer) -> float:
        model.train()
        edge_label_index, edge_label = _common.with_negatives(
            train_data.edge_label_index, train_data.edge_index, train_data.num_nodes,
            args.neg_sampling)
        timer.lap("sample")
        optimizer.zero_grad()
        z = model(train_data.x, train_data.edge_index)
        loss = criterion(decoder(z, edge_label_index), edge_label)
        loss.backward()
        optimizer.step()
        return loss.item()

    @torch.no_grad()
    def embed(split):
        model.eval()
        return model(split.x, split.edge_index)

    def validate() -> float:
        z = embed(val_data)
        return _common.binary_metrics(decoder(z, val_data.edge_label_index),
                                      val_data.edge_label)["auc"]

    result = _common.fit(model, train_epoch, validate, epochs=args.epochs, device=device,
                         progress=args.progress, desc=f"{args.model}+{args.decoder}")
    z = embed(test_data)
    metrics = _common.link_metrics(lambda index: decoder(z, index),
                                   test_data.edge_label_index, test_data.edge_label,
                                   test_data.num_nodes, args)
    scored = train_data.edge_label_index.size(1) * 2
    return _common.report(
        "link_pred", args, device, metrics=metrics, fit_result=result,
        data=dict(_data.describe(data), name=name, scored_edges_per_epoch=scored),
        title=f"{name}, {args.model.upper()} encoder, {args.decoder} decoder")


if __name__ == "__main__":
    _common.run(main)
