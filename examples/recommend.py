"""Recommendation: LightGCN trained with the BPR loss, evaluated by top-k retrieval.

A user-item graph of implicit feedback is generated from a latent-factor model (no
download): users and items have latent factors and items a popularity, and each user picks
items with probability growing with their affinity. A share of every user's items is held
out for testing. PyG's LightGCN (torch_geometric.nn.models.LightGCN) embeds users and items
by propagating over the training interactions and is trained with the BPR loss, in
mini-batches of training interactions with one fresh negative item each:
pyg_edgedot.EdgeDotLoss(loss="bpr", negatives="structured", sampler=NegativeSampler(...))
by default, whose negatives are never a training interaction of the user and are drawn and
scored inside the loss; --loss pyg is LightGCN.recommendation_loss on explicitly scored
positive and negative pairs (PyG's LightGCN example), for a side-by-side.

Evaluation is retrieval: pyg_edgedot.topk_dst(z_user, z_item, k, src_index=test_users,
exclude=train_edges) returns every test user's k best items that it has not seen in
training, without the [users, items] score matrix, and feeds PyG's
torch_geometric.metrics.LinkPredRecall / LinkPredNDCG / LinkPredPrecision / LinkPredMAP.
Baselines: a random ranking (in expectation, exactly) and the most popular unseen items
(topk_dst again, on degree "embeddings"). --compare-dense adds LightGCN.recommend (a dense
score matrix, no exclusion of seen items) and the dense matrix with the training pairs
masked to -inf (PyG's LightGCN example), timed, and checks that the latter returns the same
items as topk_dst.

examples:
  python examples/recommend.py                       # generated graph, no download
  python examples/recommend.py --loss pyg            # LightGCN.recommendation_loss
  python examples/recommend.py --compare-dense       # also LightGCN.recommend, masked dense
  python examples/recommend.py --dataset MovieLens100K --root data/MovieLens100K
                                                     # data/MovieLens100K/raw/u1.base, ...
  python examples/recommend.py --device cuda --num-users 100000 --num-items 50000 \\
      --batch-size 65536 --epochs 20 --no-progress --json rec.json
"""
import json
import math
import time
from typing import Dict, List, Sequence

import torch
from torch import Tensor
from torch_geometric.metrics import (LinkPredMAP, LinkPredMetricCollection, LinkPredNDCG,
                                     LinkPredPrecision, LinkPredRecall)
from torch_geometric.nn.models import LightGCN

import pyg_edgedot
from pyg_edgedot import EdgeDotLoss, NegativeSampler, topk_dst

import _common
import _data

LOSSES = ("fused", "pyg")
NEG_SAMPLING = ("edgedot", "uniform")
DATASETS = ("generated", "MovieLens100K")
METRICS = {"recall": LinkPredRecall, "ndcg": LinkPredNDCG, "precision": LinkPredPrecision,
           "map": LinkPredMAP}
DENSE_LIMIT = 1 << 28  # --compare-dense: at most this many entries in a dense score matrix


def parse_args(argv=None):
    parser = _common.make_parser(__doc__)
    group = parser.add_argument_group("data")
    group.add_argument("--dataset", default="generated", choices=DATASETS,
                       help="'generated': a latent-factor model made on the fly (no "
                            "download); 'MovieLens100K': PyG's dataset read from --root")
    group.add_argument("--root", default="data/MovieLens100K",
                       help="MovieLens100K: ROOT/raw holds GroupLens' ml-100k files "
                            "(u.item, u.user, u1.base, u1.test); never downloads; needs "
                            "pandas")
    group.add_argument("--num-users", type=int, default=2_000, help="number of users")
    group.add_argument("--num-items", type=int, default=1_000, help="number of items")
    group.add_argument("--avg-ratings", type=float, default=20.0,
                       help="items per user on average")
    group.add_argument("--latent-dim", type=int, default=8,
                       help="dimension of the generating latent factors")
    group.add_argument("--sharpness", type=float, default=2.0,
                       help="weight of the user-item affinity in the choices (0: popularity "
                            "alone)")
    group.add_argument("--popularity", type=float, default=1.0,
                       help="weight of the item popularity in the choices (0: none)")
    group.add_argument("--graph-seed", type=int, default=0,
                       help="seed of the graph and of the split (fixed, independent of "
                            "--seed)")
    group.add_argument("--test-ratio", type=float, default=0.2,
                       help="share of every user's items held out for testing")

    group = parser.add_argument_group("model and training")
    group.add_argument("--embedding-dim", type=int, default=64,
                       help="LightGCN's embedding dimension")
    group.add_argument("--num-layers", type=int, default=3, help="LightGCN's layers")
    group.add_argument("--epochs", type=int, default=30, help="passes over the training "
                                                              "interactions")
    group.add_argument("--batch-size", type=int, default=4096,
                       help="training interactions per step (each step propagates over "
                            "the whole training graph, as PyG's LightGCN example does)")
    group.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    group.add_argument("--lambda-reg", type=float, default=1e-4,
                       help="L2 regularization of the layer-0 embeddings of each batch's "
                            "nodes, as LightGCN.recommendation_loss")
    group.add_argument("--num-negatives", type=int, default=1,
                       help="negative items per positive interaction")
    group.add_argument("--loss", default="fused", choices=LOSSES,
                       help="'fused': pyg_edgedot.EdgeDotLoss(loss='bpr', "
                            "negatives='structured'): each positive's user against negative "
                            "items drawn and scored inside the loss, never materialized; "
                            "'pyg': LightGCN.recommendation_loss (BPRLoss) on the scores of "
                            "explicitly drawn (user, item) pairs")
    group.add_argument("--neg-sampling", default="edgedot", choices=NEG_SAMPLING,
                       help="'edgedot': negatives from a pyg_edgedot.NegativeSampler built "
                            "once on the training interactions: never an item the user has "
                            "in training; 'uniform': uniform random items, unchecked (PyG's "
                            "LightGCN example)")
    group.add_argument("--seed", type=int, default=0,
                       help="seed of the initialization, the batches and the negatives")

    group = parser.add_argument_group("evaluation")
    group.add_argument("--k", type=int, nargs="+", default=[10, 20],
                       help="the k of Recall@k, NDCG@k, Precision@k and MAP@k")
    group.add_argument("--eval-every", type=int, default=5,
                       help="also evaluate every this many epochs (0: only at the end); "
                            "the model tested is the last one")
    group.add_argument("--compare-dense", action="store_true",
                       help="also retrieve with LightGCN.recommend (dense scores, seen items "
                            "not excluded) and with the dense scores masked at the training "
                            "pairs (PyG's LightGCN example); check that the latter returns "
                            "topk_dst's items")

    _common.add_run_args(parser)
    return parser.parse_args(argv)


def load(args):
    """``(num_users, num_items, train [2, E], test [2, E'], description)``, on the CPU."""
    if args.dataset == "MovieLens100K":
        data, train, test = _data.load_movielens100k(args.root)
        return (data["user"].num_nodes, data["movie"].num_nodes, train, test,
                "MovieLens 100K (u1 split, every rating an interaction)")
    data = _data.latent_factor_graph(
        num_users=args.num_users, num_items=args.num_items, avg_ratings=args.avg_ratings,
        latent_dim=args.latent_dim, sharpness=args.sharpness, popularity=args.popularity,
        seed=args.graph_seed)
    train, test = _data.split_per_user(data["user", "rates", "item"].edge_index,
                                       args.num_users, args.test_ratio, seed=args.graph_seed)
    return (args.num_users, args.num_items, train, test,
            f"generated latent-factor graph (L={args.latent_dim}, sharpness={args.sharpness}, "
            f"popularity={args.popularity})")


# Evaluation ###############################################################################

def retrieval_metrics(index: Tensor, label_index: Tensor, ks: Sequence[int]) -> Dict[str, float]:
    """PyG's metrics of top-k lists ``index [N, max k]`` against ``label_index [2, E]`` (row 0
    the row of ``index``, row 1 an item); averaged over the rows that have labels."""
    collection = LinkPredMetricCollection({f"{name}@{k}": cls(k) for k in ks
                                           for name, cls in METRICS.items()})
    collection.update(index, label_index)
    return {name: float(value) for name, value in collection.compute().items()}


def random_ranking_metrics(num_items: int, train: Tensor, label_index: Tensor,
                           users: Tensor, ks: Sequence[int]) -> Dict[str, float]:
    """The expected Recall@k and NDCG@k of a uniformly random ranking of each user's unseen
    items (exact, no sampling): ``C`` candidates, ``n`` of them relevant, each position a hit
    with probability ``n / C``."""
    seen = torch.bincount(train[0], minlength=int(users.max()) + 1)[users].double()
    candidates = (num_items - seen).clamp(min=1)
    relevant = torch.bincount(label_index[0], minlength=users.numel()).double()
    has = relevant > 0
    candidates, relevant = candidates[has], relevant[has]
    out = {}
    for k in ks:
        hits = torch.minimum(torch.full_like(candidates, k), candidates) * relevant / candidates
        out[f"recall@{k}"] = float((hits / relevant).mean())
        discount = 1.0 / torch.arange(2, k + 2, dtype=torch.float64).log2()
        shown = torch.arange(k).view(1, -1) < candidates.view(-1, 1)
        dcg = (shown * discount).sum(1) * relevant / candidates
        idcg = torch.cumsum(discount, 0)[relevant.clamp(max=k).long() - 1]
        out[f"ndcg@{k}"] = float((dcg / idcg).mean())
    return out


def timed(fn, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return out, time.perf_counter() - start


class Evaluator:
    """Retrieval for the test users and PyG's metrics on the test interactions."""

    def __init__(self, args, num_users: int, num_items: int, train: Tensor, test: Tensor):
        self.ks, self.max_k = sorted(set(args.k)), max(args.k)
        self.num_users, self.num_items, self.train = num_users, num_items, train
        # Rows of the top-k lists are the test users; the labels' row 0 is that row.
        self.users, rows = torch.unique(test[0], return_inverse=True)
        self.label_index = torch.stack([rows, test[1]])

    def topk(self, z_user: Tensor, z_item: Tensor) -> Tensor:
        _, index = topk_dst(z_user, z_item, self.max_k, src_index=self.users,
                            exclude=self.train)
        return index

    def evaluate(self, z_user: Tensor, z_item: Tensor) -> Dict[str, object]:
        index, seconds = timed(lambda: self.topk(z_user, z_item), z_user.device)
        return {"metrics": retrieval_metrics(index, self.label_index, self.ks),
                "time_s": seconds, "index": index}

    def baselines(self, device) -> Dict[str, Dict[str, float]]:
        # The most popular unseen items: a 1-d "embedding" per side, the training degree.
        degree = torch.bincount(self.train[1], minlength=self.num_items).to(device)
        ones = torch.ones(self.num_users, 1, device=device)
        _, popular = topk_dst(ones, degree.view(-1, 1).float(), self.max_k,
                              src_index=self.users, exclude=self.train)
        return {"random": random_ranking_metrics(self.num_items, self.train.cpu(),
                                                 self.label_index.cpu(), self.users.cpu(),
                                                 self.ks),
                "popularity": retrieval_metrics(popular, self.label_index, self.ks)}

    def dense(self, model: LightGCN, edge_index: Tensor, z_user: Tensor, z_item: Tensor,
              topk_index: Tensor) -> Dict[str, object]:
        """LightGCN.recommend, and the dense scores masked at the training pairs."""
        entries = self.users.numel() * self.num_items
        if entries > DENSE_LIMIT:
            return {"skipped": f"{self.users.numel():,} x {self.num_items:,} = {entries:,} "
                               f"scores, more than {DENSE_LIMIT:,}"}
        device, num_users = z_user.device, self.num_users
        items = torch.arange(num_users, num_users + self.num_items, device=device)

        def recommend():  # LightGCN's own: global node ids, no exclusion of seen items
            return model.recommend(edge_index, src_index=self.users, dst_index=items,
                                   k=self.max_k) - num_users

        def masked():  # PyG's LightGCN example: [users, items] scores, seen pairs -inf
            scores = z_user[self.users] @ z_item.t()
            row_of = torch.full((num_users,), -1, dtype=torch.long, device=device)
            row_of[self.users] = torch.arange(self.users.numel(), device=device)
            rows = row_of[self.train[0]]
            keep = rows >= 0
            scores[rows[keep], self.train[1][keep]] = float("-inf")
            return torch.topk(scores, self.max_k, dim=1).indices

        with torch.no_grad():
            rec_index, rec_s = timed(recommend, device)
            mask_index, mask_s = timed(masked, device)
        same = (mask_index == topk_index).all(dim=1).float().mean()
        return {"recommend": {"metrics": retrieval_metrics(rec_index, self.label_index,
                                                           self.ks), "time_s": rec_s,
                              "what": "LightGCN.recommend: propagation + dense scores + "
                                      "topk, seen items not excluded"},
                "masked": {"metrics": retrieval_metrics(mask_index, self.label_index,
                                                        self.ks), "time_s": mask_s,
                           "what": "dense [users, items] scores, training pairs set to "
                                   "-inf, torch.topk"},
                "same_index_as_topk": float(same)}


# Training #################################################################################

class BPRObjective:
    """One step's loss on a batch of positive (user, item) training pairs (item ids local)."""

    def __init__(self, args, model: LightGCN, train: Tensor, num_users: int, num_items: int):
        self.kind, self.model, self.lambda_reg = args.loss, model, args.lambda_reg
        self.num_users, self.num_items, self.k = num_users, num_items, args.num_negatives
        if args.loss not in LOSSES or args.neg_sampling not in NEG_SAMPLING:
            raise _common.ExampleError(f"unknown --loss {args.loss!r} or --neg-sampling "
                                       f"{args.neg_sampling!r}")
        if self.k < 1:
            raise _common.ExampleError(f"--num-negatives must be >= 1 (got {self.k})")
        self.sampler = (NegativeSampler(train, (num_users, num_items))
                        if args.neg_sampling == "edgedot" else None)
        if self.kind == "fused":
            self.criterion = EdgeDotLoss(
                num_negatives=self.k, negatives="structured", loss="bpr", sampler=self.sampler,
                num_nodes=None if self.sampler is not None else (num_users, num_items))

    def describe(self) -> Dict[str, object]:
        return {"loss": self.kind, "neg_sampling": "edgedot" if self.sampler else "uniform",
                "negatives_per_positive": self.k,
                "fused_loss": repr(self.criterion) if self.kind == "fused" else None}

    def _reg(self, node_id: Tensor, batch: int) -> Tensor:
        emb = self.model.embedding.weight[node_id]
        return self.lambda_reg * emb.pow(2).sum() / batch

    def loss(self, edge_index: Tensor, pos: Tensor) -> Tensor:
        num_users = self.num_users
        if self.kind == "fused":
            z = self.model.get_embedding(edge_index)
            loss = self.criterion((z[:num_users], z[num_users:]), pos)
            # LightGCN.recommendation_loss's L2 term over the batch's users and positive
            # items (the fused loss never materializes its negatives).
            node_id = torch.cat([pos[0], pos[1] + num_users]).unique()
            return loss + self._reg(node_id, pos.size(1))
        user = pos[0].repeat_interleave(self.k)
        if self.sampler is not None:
            neg = self.sampler.sample_per_source(pos[0], k=self.k).view(-1)
        else:
            neg = torch.randint(self.num_items, (user.numel(),), device=pos.device)
        pos_item = pos[1].repeat_interleave(self.k)
        label_index = torch.stack([torch.cat([user, user]),
                                   torch.cat([pos_item, neg]) + num_users])
        rank = self.model(edge_index, label_index)
        pos_rank, neg_rank = rank.chunk(2)
        return self.model.recommendation_loss(pos_rank, neg_rank,
                                              node_id=label_index.unique(),
                                              lambda_reg=self.lambda_reg)


def main(argv=None) -> dict:
    args = parse_args(argv)
    device = _common.setup(args)  # --device, and seeds everything with --seed
    if args.epochs < 1 or args.batch_size < 1 or min(args.k) < 1:
        raise _common.ExampleError("--epochs, --batch-size and every --k must be >= 1")
    num_users, num_items, train, test, name = load(args)
    train, test = train.to(device), test.to(device)
    # LightGCN's homogeneous numbering: users 0..U-1, items U..U+I-1; both directions.
    user, item = train[0], train[1] + num_users
    edge_index = torch.stack([torch.cat([user, item]), torch.cat([item, user])])

    model = LightGCN(num_users + num_items, args.embedding_dim, args.num_layers).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    objective = BPRObjective(args, model, train, num_users, num_items)
    evaluator = Evaluator(args, num_users, num_items, train, test)

    @torch.no_grad()
    def embed():
        model.eval()
        z = model.get_embedding(edge_index)
        return z[:num_users], z[num_users:]

    timer, history = _common.EpochTimer(device), []
    first_k = min(evaluator.ks)
    bar = _common.progress_bar(range(1, args.epochs + 1), enabled=args.progress,
                               desc=f"lightgcn+{args.loss}", unit="epoch")
    for epoch in bar:
        model.train()
        timer.start()
        perm = torch.randperm(train.size(1), device=device)
        total, steps = 0.0, 0
        for start in range(0, train.size(1), args.batch_size):
            pos = train[:, perm[start:start + args.batch_size]]
            optimizer.zero_grad()
            loss = objective.loss(edge_index, pos)
            loss.backward()
            optimizer.step()
            total, steps = total + loss.item(), steps + 1
        seconds = timer.stop()
        loss = total / steps
        if not math.isfinite(loss):
            raise _common.ExampleError(f"the loss diverged at epoch {epoch} ({loss}); try a "
                                       "smaller --lr")
        entry = {"epoch": epoch, "loss": loss, "time_s": seconds}
        if args.eval_every and (epoch % args.eval_every == 0 or epoch == args.epochs):
            entry.update(evaluator.evaluate(*embed())["metrics"])
            bar.set_postfix(loss=f"{loss:.4f}",
                            recall=f"{entry[f'recall@{first_k}']:.4f}")
        else:
            bar.set_postfix(loss=f"{loss:.4f}")
        history.append(entry)
    bar.close()

    z_user, z_item = embed()
    result = evaluator.evaluate(z_user, z_item)
    baselines = evaluator.baselines(device)
    dense = (evaluator.dense(model, edge_index, z_user, z_item, result["index"])
             if args.compare_dense else None)
    timing = timer.summary()
    doc = {
        "example": "recommend",
        "metrics": result["metrics"],
        "baselines": baselines,
        "retrieval": {"method": "pyg_edgedot.topk_dst(z_user, z_item, k, src_index=test "
                                "users, exclude=training pairs)",
                      "time_s": result["time_s"], "num_queries": int(evaluator.users.numel()),
                      "k": evaluator.max_k,
                      "backend": pyg_edgedot._backend.loaded().table[
                          "topk", device.type].impl},
        "dense": dense,
        "mean_epoch_time_s": timing["mean_epoch_time_s"], "timing": timing,
        "data": {"name": name, "num_users": num_users, "num_items": num_items,
                 "num_train": int(train.size(1)), "num_test": int(test.size(1)),
                 "num_test_users": int(evaluator.users.numel())},
        "negatives": objective.describe(),
        "config": vars(args), "env": _common.environment(device), "history": history,
    }
    _print_summary(doc, args, device)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(_common._finite_or_none(doc), indent=2,
                                        allow_nan=False) + "\n")
        print(f"  wrote {args.json}")
    return doc


def _line(metrics: Dict[str, float], ks: List[int]) -> str:
    return "  ".join(f"Recall@{k} {metrics[f'recall@{k}']:.4f}  NDCG@{k} "
                     f"{metrics[f'ndcg@{k}']:.4f}" for k in ks)


def _print_summary(doc, args, device) -> None:
    ks = sorted(set(args.k))
    data, ret, timing = doc["data"], doc["retrieval"], doc["timing"]
    print(f"recommend: {data['name']}, {data['num_users']:,} users x {data['num_items']:,} "
          f"items, {data['num_train']:,} train / {data['num_test']:,} test interactions; "
          f"LightGCN, {args.loss} BPR loss, {doc['negatives']['neg_sampling']} negatives")
    print(f"  test  {_line(doc['metrics'], ks)}  ({data['num_test_users']:,} users, seen "
          f"items excluded)")
    for label, metrics in (("popular", doc["baselines"]["popularity"]),
                           ("random", doc["baselines"]["random"])):
        print(f"  {label:<7} {_line(metrics, ks)}")
    print(f"  topk_dst retrieval: {1e3 * ret['time_s']:.1f} ms for {ret['num_queries']:,} "
          f"users, k={ret['k']} ({ret['backend']} backend)")
    if doc["dense"] is not None:
        dense = doc["dense"]
        if "skipped" in dense:
            print(f"  dense comparison skipped: {dense['skipped']}")
        else:
            for key, label in (("masked", "dense, masked"), ("recommend", "recommend()")):
                print(f"  {label:<14} {_line(dense[key]['metrics'], ks)}  "
                      f"{1e3 * dense[key]['time_s']:.1f} ms")
            print(f"  masked dense == topk_dst on {100 * dense['same_index_as_topk']:.2f}% "
                  "of the users")
    print(f"  mean epoch time {1e3 * timing['mean_epoch_time_s']:.1f} ms over "
          f"{timing['epochs_timed']} epoch(s) on {device}")


if __name__ == "__main__":
    _common.run(main)
