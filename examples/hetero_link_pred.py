"""Heterogeneous link prediction (users rate items) with pyg_edgedot's EdgeDotScore.

A user-item graph is generated (users have latent tastes over genres, items a genre, and
ratings follow tastes; no download) and made undirected with ToUndirected(), which adds the
reverse ('item', 'rev_rates', 'user') edges. RandomLinkSplit holds out ratings (and their
reverse edges) for validation and testing. A two-layer GraphSAGE encoder, turned
heterogeneous with torch_geometric.nn.to_hetero, embeds users and items, and
EdgeDotScore() scores (user, item) pairs on (x_dict['user'], x_dict['item']). Every epoch
draws fresh negative (user, item) pairs from a bipartite pyg_edgedot.NegativeSampler built
once on the training ratings (--loss fused: inside pyg_edgedot.EdgeDotLoss); the model
with the best validation ROC-AUC is tested with ROC-AUC, AP, and MRR/Hits@K against random
items.

examples:
  python examples/hetero_link_pred.py
  python examples/hetero_link_pred.py --decoder eager --neg-sampling pyg
  python examples/hetero_link_pred.py --loss fused
  python examples/hetero_link_pred.py --device cuda --num-users 1000000 --num-items 200000 \\
      --avg-ratings 10 --neg-sampling uniform --epochs 10 --json hetero.json
"""
import torch
import torch_geometric.transforms as T
from torch_geometric.nn import SAGEConv, to_hetero
from pyg_edgedot import EdgeDotScore

import _common
import _data

RATES = ("user", "rates", "item")
REV_RATES = ("item", "rev_rates", "user")


class Encoder(torch.nn.Module):
    """Two SAGEConv layers with lazy input sizes; ``to_hetero`` makes one per edge type."""

    def __init__(self, hidden_channels: int, out_channels: int) -> None:
        super().__init__()
        self.conv1 = SAGEConv((-1, -1), hidden_channels)
        self.conv2 = SAGEConv((-1, -1), out_channels)

    def forward(self, x, edge_index):
        x = self.conv1(x, edge_index).relu()
        return self.conv2(x, edge_index)


def parse_args(argv=None):
    parser = _common.make_parser(__doc__)
    _data.add_user_item_args(parser)
    _data.add_split_args(parser, val_ratio=0.1, test_ratio=0.1)
    parser.add_argument("--disjoint-train-ratio", type=float, default=0.0,
                        help="fraction of the training ratings used only as supervision, "
                             "not for message passing (curbs overfitting to seen edges)")
    _common.add_training_args(parser, epochs=100, lr=0.01, hidden_channels=64,
                              out_channels=64)
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    device = _common.setup(args)  # --device, and seeds everything with --seed
    data = T.ToUndirected()(_data.load_user_item(args))  # adds ('item', 'rev_rates', 'user')
    split = T.RandomLinkSplit(num_val=args.val_ratio, num_test=args.test_ratio,
                              disjoint_train_ratio=args.disjoint_train_ratio,
                              add_negative_train_samples=False,
                              edge_types=RATES, rev_edge_types=REV_RATES)
    train_data, val_data, test_data = (d.to(device) for d in split(data))
    num_nodes = (data["user"].num_nodes, data["item"].num_nodes)

    model = to_hetero(Encoder(args.hidden_channels, args.out_channels), data.metadata(),
                      aggr="sum").to(device)
    with torch.no_grad():  # materialize the lazy (-1) input sizes before building Adam
        model(train_data.x_dict, train_data.edge_index_dict)
    decoder = EdgeDotScore() if args.decoder == "edgedot" else _common.EagerDotScore()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    # Negatives avoid every training rating, including those kept out of message passing.
    train_ratings = torch.cat([train_data[RATES].edge_index,
                               train_data[RATES].edge_label_index], dim=1)
    objective = _common.LinkObjective(args, decoder, train_ratings, num_nodes)

    def train_epoch(timer: _common.EpochTimer) -> float:
        model.train()
        edge_label_index, edge_label = objective.draw(train_data[RATES].edge_label_index)
        timer.lap("sample")
        optimizer.zero_grad()
        z = model(train_data.x_dict, train_data.edge_index_dict)
        loss = objective.loss((z["user"], z["item"]), edge_label_index, edge_label)
        loss.backward()
        optimizer.step()
        return loss.item()

    @torch.no_grad()
    def user_item_embeddings(split):
        model.eval()
        z = model(split.x_dict, split.edge_index_dict)
        return z["user"], z["item"]

    def validate() -> float:
        store = val_data[RATES]
        scores = decoder(user_item_embeddings(val_data), store.edge_label_index)
        return _common.binary_metrics(scores, store.edge_label)["auc"]

    result = _common.fit(model, train_epoch, validate, epochs=args.epochs, device=device,
                         progress=args.progress, desc=f"hetero+{args.decoder}")
    z = user_item_embeddings(test_data)
    store = test_data[RATES]
    metrics = _common.link_metrics(lambda index: decoder(z, index), store.edge_label_index,
                                   store.edge_label, num_nodes[1], args)
    return _common.report(
        "hetero_link_pred", args, device, metrics=metrics, fit_result=result,
        data=dict(_data.describe(data), name="generated user-item graph",
                  scored_edges_per_epoch=2 * train_data[RATES].edge_label_index.size(1)),
        title=f"users rate items, to_hetero(GraphSAGE) encoder, {args.decoder} decoder, "
              f"{args.neg_sampling} negatives, {args.loss} loss",
        extra={"negatives": objective.describe()})


if __name__ == "__main__":
    _common.run(main)
