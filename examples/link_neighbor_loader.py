"""Mini-batch link prediction with LinkNeighborLoader and pyg_edgedot's EdgeDotScore.

LinkNeighborLoader draws batches of training edges, adds negatives in 'binary' mode
(--neg-ratio per positive, fresh every epoch), and samples each batch's --num-neighbors
neighborhood; the encoder runs on that subgraph and EdgeDotScore scores the batch's
edge_label_index against edge_label with BCEWithLogitsLoss. For evaluation, a NeighborLoader
embeds every node with the same fan-out, then the validation and test edges are scored as in
link_pred.py (ROC-AUC, AP, MRR and Hits@K). The model with the best validation ROC-AUC is
tested.

PyG samples neighbors with 'pyg-lib' (or the older 'torch-sparse'); without either (neither
has wheels on PyPI), this example says so and passes both loaders a pure-PyTorch
NeighborSampler from _sampler.py (PyG's own sampler with only the sampling step replaced).

examples:
  python examples/link_neighbor_loader.py
  python examples/link_neighbor_loader.py --dataset Cora --root data/Planetoid
  python examples/link_neighbor_loader.py --device cuda --num-nodes 1000000 --avg-degree 20 \\
      --batch-size 65536 --num-workers 4 --epochs 3 --json lnl.json
"""
import warnings

import torch
from torch_geometric.data import Data
from pyg_edgedot import EdgeDotScore

import _common
import _data
import _sampler


def neighbor_sampler(data: Data, num_neighbors):
    """None (PyG builds its own sampler) when pyg-lib or torch-sparse is installed; else
    the pure-PyTorch one from _sampler.py."""
    if _sampler.have_native_sampler():
        return None
    with warnings.catch_warnings():  # PyG's "install pyg-lib" warning: said once, in main
        warnings.filterwarnings("ignore", message=".*without a 'pyg-lib' installation")
        return _sampler.TorchNeighborSampler(data, num_neighbors=num_neighbors)


def parse_args(argv=None):
    parser = _common.make_parser(__doc__)
    _data.add_graph_args(parser)
    _data.add_split_args(parser)
    _common.add_encoder_args(parser, model="sage")
    _common.add_training_args(parser, epochs=20, lr=0.01, neg_sampling=False)
    group = parser.add_argument_group("mini-batches")
    group.add_argument("--batch-size", type=int, default=1024,
                       help="positive training edges per batch")
    group.add_argument("--num-neighbors", type=int, nargs="+", default=[10, 10],
                       help="neighbors sampled per node and hop (one number per layer; "
                            "-1 takes all)")
    group.add_argument("--neg-ratio", type=float, default=1.0,
                       help="negatives per positive edge ('binary' negative sampling)")
    group.add_argument("--eval-batch-size", type=int, default=4096,
                       help="nodes per batch when embedding all nodes for evaluation")
    group.add_argument("--num-workers", type=int, default=0, help="DataLoader workers")
    args = parser.parse_args(argv)
    if len(args.num_neighbors) != args.num_layers:
        parser.error(f"--num-neighbors needs one number per layer ({args.num_layers}), "
                     f"got {args.num_neighbors}")
    return args


def main(argv=None) -> dict:
    args = parse_args(argv)
    from torch_geometric.loader import LinkNeighborLoader, NeighborLoader
    if not _sampler.have_native_sampler():
        print("note: neither pyg-lib nor torch-sparse is installed; sampling neighbors with "
              "_sampler.TorchNeighborSampler (pure PyTorch, slower than pyg-lib)", flush=True)

    device = _common.setup(args)  # --device, and seeds everything with --seed
    data, name = _data.load_graph(args)
    train_data, val_data, test_data = _data.split_edges(data, args)  # loaders sample on CPU

    model = _common.make_encoder(args, data.num_features).to(device)
    decoder = EdgeDotScore() if args.decoder == "edgedot" else _common.EagerDotScore()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    criterion = torch.nn.BCEWithLogitsLoss()
    # Batches of training edges, each with as many fresh negatives ('binary' mode) and the
    # sampled neighborhood of their endpoints.
    train_loader = LinkNeighborLoader(
        train_data, num_neighbors=args.num_neighbors,
        edge_label_index=train_data.edge_label_index,
        neg_sampling=dict(mode="binary", amount=args.neg_ratio),
        batch_size=args.batch_size, shuffle=True, num_workers=args.num_workers,
        persistent_workers=args.num_workers > 0,
        neighbor_sampler=neighbor_sampler(train_data, args.num_neighbors))

    def train_epoch(timer: _common.EpochTimer) -> float:
        model.train()
        total_loss = total_edges = 0.0
        for batch in train_loader:  # each batch: a sampled subgraph + labelled edges
            batch = batch.to(device, non_blocking=True)
            timer.lap("sample")
            optimizer.zero_grad()
            z = model(batch.x, batch.edge_index)
            loss = criterion(decoder(z, batch.edge_label_index), batch.edge_label)
            loss.backward()
            optimizer.step()
            num_edges = batch.edge_label.numel()
            total_loss += loss.item() * num_edges
            total_edges += num_edges
            timer.lap("step")
        return total_loss / max(total_edges, 1)

    def node_loader(split) -> NeighborLoader:
        """Every node of ``split``'s message-passing graph, with sampled neighborhoods."""
        graph = Data(x=split.x, edge_index=split.edge_index, num_nodes=split.num_nodes)
        return NeighborLoader(graph, num_neighbors=args.num_neighbors,
                              batch_size=args.eval_batch_size, shuffle=False,
                              num_workers=args.num_workers,
                              neighbor_sampler=neighbor_sampler(graph, args.num_neighbors))

    val_loader, test_loader = node_loader(val_data), node_loader(test_data)

    @torch.no_grad()
    def embed(loader: NeighborLoader) -> torch.Tensor:
        """Embeddings of all nodes, computed batch by batch on sampled neighborhoods."""
        model.eval()
        z = torch.empty(data.num_nodes, args.out_channels, device=device)
        for batch in loader:
            batch = batch.to(device, non_blocking=True)
            out = model(batch.x, batch.edge_index)[:batch.batch_size]
            z[batch.n_id[:batch.batch_size]] = out
        return z

    def validate() -> float:
        z = embed(val_loader)
        index = val_data.edge_label_index.to(device)
        return _common.binary_metrics(decoder(z, index), val_data.edge_label)["auc"]

    result = _common.fit(model, train_epoch, validate, epochs=args.epochs, device=device,
                         progress=args.progress, desc=f"loader+{args.decoder}")
    z = embed(test_loader)
    metrics = _common.link_metrics(lambda index: decoder(z, index),
                                   test_data.edge_label_index.to(device),
                                   test_data.edge_label.to(device), test_data.num_nodes, args)
    num_pos = train_data.edge_label_index.size(1)
    return _common.report(
        "link_neighbor_loader", args, device, metrics=metrics, fit_result=result,
        data=dict(_data.describe(data), name=name,
                  scored_edges_per_epoch=num_pos + int(args.neg_ratio * num_pos)),
        title=f"{name}, {args.model.upper()} encoder on sampled subgraphs "
              f"({args.num_neighbors}), {args.decoder} decoder")


if __name__ == "__main__":
    _common.run(main)
