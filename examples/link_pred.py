"""Link prediction with a GNN encoder and pyg_edgedot's EdgeDotScore decoder.

A GCN (or GraphSAGE) encoder embeds the nodes; EdgeDotScore scores each candidate edge by
the dot product of its endpoint embeddings, in one fused pass and O(E) memory, where PyG's
usual (z[src] * z[dst]).sum(-1) builds two [E, D] tensors. The edges are split with
RandomLinkSplit; every epoch draws fresh negatives, one per training edge, from a
pyg_edgedot.NegativeSampler built once on the training graph, and trains with
BCEWithLogitsLoss (or, with --loss fused, pyg_edgedot.EdgeDotLoss, which draws the
negatives inside the loss). The model with the best validation ROC-AUC is tested: ROC-AUC
and AP on the test edges, and MRR and Hits@K ranking each positive test edge against random
negatives, as OGB does.

examples:
  python examples/link_pred.py                         # generated graph, no download
  python examples/link_pred.py --dataset Cora --root data/Planetoid  # data/Planetoid/Cora/raw
  python examples/link_pred.py --neg-sampling pyg --decoder eager
                                                       # PyG's own pipeline, side by side
  python examples/link_pred.py --loss fused            # fused loss: EdgeDotLoss + sampler
  python examples/link_pred.py --device cuda --num-nodes 1000000 --avg-degree 20 \\
      --neg-sampling uniform --epochs 20 --no-progress --json big.json
                                                       # ~17M scored edges per epoch
"""
import torch
from pyg_edgedot import EdgeDotScore

import _common
import _data


def parse_args(argv=None, doc: str = __doc__):
    parser = _common.make_parser(doc)
    _data.add_graph_args(parser)
    _data.add_split_args(parser)
    _common.add_encoder_args(parser, dropout=0.5)
    _common.add_training_args(parser, epochs=200, lr=0.01)
    return parser.parse_args(argv)


def main(argv=None) -> dict:
    args = parse_args(argv)
    device = _common.setup(args)  # --device, and seeds everything with --seed
    data, name = _data.load_graph(args)
    train_data, val_data, test_data = (d.to(device) for d in _data.split_edges(data, args))

    model = _common.make_encoder(args, data.num_features).to(device)
    decoder = EdgeDotScore() if args.decoder == "edgedot" else _common.EagerDotScore()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    # Negatives avoid the training edges; the sampler over them is built once, here.
    objective = _common.LinkObjective(args, decoder, train_data.edge_index,
                                      train_data.num_nodes)

    def train_epoch(timer: _common.EpochTimer) -> float:
        model.train()
        edge_label_index, edge_label = objective.draw(train_data.edge_label_index)
        timer.lap("sample")
        optimizer.zero_grad()
        z = model(train_data.x, train_data.edge_index)
        loss = objective.loss(z, edge_label_index, edge_label)
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
    return _common.report(
        "link_pred", args, device, metrics=metrics, fit_result=result,
        data=dict(_data.describe(data), name=name,
                  scored_edges_per_epoch=2 * train_data.edge_label_index.size(1)),
        title=f"{name}, {args.model.upper()} encoder, {args.decoder} decoder, "
              f"{args.neg_sampling} negatives, {args.loss} loss",
        extra={"negatives": objective.describe()})


if __name__ == "__main__":
    _common.run(main)
