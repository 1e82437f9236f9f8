"""Data for the examples: generated graphs (no download) and offline Planetoid.

* :func:`sbm_graph`: a homogeneous, undirected stochastic block model whose node features
  are noisy views of each node's block, so links are predictable from both structure and
  features. Any size, seconds to generate, e.g. 1M nodes and 10M edges for GPU timing.
* :func:`user_item_graph`: a bipartite ``user -rates-> item`` graph for heterogeneous
  examples: users have latent tastes over genres, items belong to one genre, ratings follow
  tastes, and the features of both are noisy views of these latents.
* :func:`latent_factor_graph`: implicit feedback for recommendation: users and items have
  latent factors and a popularity, and each user picks items with probability growing with
  their affinity; :func:`split_per_user` holds out a share of every user's items.
* :func:`load_planetoid`: Cora, CiteSeer or PubMed from raw files already on disk. It never
  downloads; it says which files are missing instead. :func:`load_movielens100k` likewise.

Everything is generated from a fixed seed with a private :class:`torch.Generator`, so a
graph depends only on its arguments, never on the global RNG state.
"""
import argparse
from pathlib import Path
from typing import Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.utils import coalesce, remove_self_loops, to_undirected

from _common import ExampleError

PLANETOID = ("Cora", "CiteSeer", "PubMed")
_PLANETOID_RAW = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


def _pick_in_group(group: Tensor, num_groups: int, wanted: Tensor,
                   generator: torch.Generator) -> Tensor:
    """For each entry of ``wanted`` (a group id), a uniformly random member of that group.

    ``group[i]`` is the group of item ``i``. O(N log N + M) time and memory; groups must not
    be empty where they are wanted.
    """
    order = torch.argsort(group)
    counts = torch.bincount(group, minlength=num_groups)
    starts = torch.cumsum(counts, 0) - counts
    offset = (torch.rand(wanted.numel(), generator=generator) * counts[wanted]).long()
    offset = torch.minimum(offset, counts[wanted] - 1)  # guards against rand() rounding to 1
    return order[starts[wanted] + offset]


def _noisy_view(signal: Tensor, feat_dim: int, snr: float,
                generator: torch.Generator) -> Tensor:
    """Projects ``signal`` [N, L] to ``feat_dim`` random directions and adds unit noise."""
    proj = torch.randn(signal.size(1), feat_dim, generator=generator)
    proj = proj / proj.norm(dim=1, keepdim=True)  # each latent dimension gets norm ``snr``
    x = snr * (signal @ proj)
    return x + torch.randn(x.shape, generator=generator)


def _num_edges(num_nodes: int, avg_degree: float, num_edges: Optional[int]) -> int:
    if num_edges is None:
        num_edges = int(round(num_nodes * avg_degree / 2))
    if num_nodes < 2 or num_edges < 1:
        raise ExampleError(f"need at least 2 nodes and 1 edge (got {num_nodes} nodes and "
                           f"{num_edges} edges)")
    return num_edges


def sbm_graph(num_nodes: int = 2_000, avg_degree: float = 10.0,
              num_edges: Optional[int] = None, feat_dim: int = 64, num_blocks: int = 50,
              p_in: float = 0.9, feature_snr: float = 1.0, seed: int = 0) -> Data:
    r"""An undirected stochastic block model with informative node features.

    Each node gets a block uniformly at random. Each edge picks a uniform source node and,
    with probability ``p_in``, a uniform destination in the same block, else a uniform
    destination anywhere. Self-loops and duplicates are dropped and both directions are
    stored, so ``edge_index`` has about ``2 * num_edges`` columns. Features are a random
    ``feat_dim``-dimensional embedding of the block one-hot vector (length ``feature_snr``
    per block) plus standard normal noise.

    Args:
        num_nodes (int): number of nodes.
        avg_degree (float): average degree; ``num_edges = num_nodes * avg_degree / 2``
            undirected edges are drawn unless ``num_edges`` is given.
        num_edges (int, optional): number of undirected edges to draw (a few duplicates
            are dropped, so slightly fewer are kept).
        feat_dim (int): node feature dimension.
        num_blocks (int): number of blocks (communities).
        p_in (float): probability that an edge stays inside its source's block.
        feature_snr (float): norm of the block signal in the features, against noise of
            norm about ``sqrt(feat_dim)``; 0 makes the features pure noise.
        seed (int): the graph depends only on its arguments.

    Returns:
        Data: ``x`` [N, feat_dim] float32, ``edge_index`` [2, ~2 * num_edges] (sorted,
        undirected), ``y`` [N] the block of each node.
    """
    num_edges = _num_edges(num_nodes, avg_degree, num_edges)
    if not 1 <= num_blocks <= num_nodes:
        raise ExampleError(f"num_blocks must be in [1, num_nodes] (got {num_blocks})")
    if not 0.0 <= p_in <= 1.0:
        raise ExampleError(f"p_in must be in [0, 1] (got {p_in})")
    gen = torch.Generator().manual_seed(seed)
    block = torch.randint(num_blocks, (num_nodes,), generator=gen)

    src = torch.randint(num_nodes, (num_edges,), generator=gen)
    inside = torch.rand(num_edges, generator=gen) < p_in
    dst = torch.randint(num_nodes, (num_edges,), generator=gen)
    dst[inside] = _pick_in_group(block, num_blocks, block[src[inside]], gen)
    edge_index, _ = remove_self_loops(torch.stack([src, dst]))
    edge_index = to_undirected(edge_index, num_nodes=num_nodes)

    one_hot = torch.nn.functional.one_hot(block, num_blocks).float()
    x = _noisy_view(one_hot, feat_dim, feature_snr, gen)
    return Data(x=x, edge_index=edge_index, y=block, num_nodes=num_nodes)


def user_item_graph(num_users: int = 2_000, num_items: int = 1_000,
                    avg_ratings: float = 10.0, feat_dim: int = 32, num_genres: int = 20,
                    taste_sharpness: float = 3.0, p_taste: float = 0.9,
                    feature_snr: float = 1.0, seed: int = 0) -> HeteroData:
    r"""A bipartite user-item graph with ``('user', 'rates', 'item')`` edges.

    Each item belongs to one of ``num_genres`` genres; each user has tastes, a distribution
    over genres ``softmax(taste_sharpness * g)`` with ``g`` standard normal (larger
    ``taste_sharpness``: fewer favourite genres). A rating picks a uniform user and, with
    probability ``p_taste``, a genre from that user's tastes and a uniform item of that
    genre, else a uniform item. Duplicate ratings are dropped. User features are a noisy
    view of the tastes, item features a noisy view of the genre (see :func:`sbm_graph`).

    Only one direction is stored; add the reverse ``('item', 'rev_rates', 'user')`` edges
    with ``torch_geometric.transforms.ToUndirected()``.

    Args:
        num_users (int), num_items (int): number of nodes of each type.
        avg_ratings (float): ratings drawn per user on average (``num_users * avg_ratings``
            in all; duplicates are dropped, so slightly fewer are kept).
        feat_dim (int): feature dimension of both node types.
        num_genres (int): number of genres (at most ``num_items``).
        taste_sharpness (float), p_taste (float), feature_snr (float): see above.
        seed (int): the graph depends only on its arguments.
    """
    num_ratings = int(round(num_users * avg_ratings))
    if num_users < 1 or num_ratings < 1 or not 1 <= num_genres <= num_items:
        raise ExampleError(f"need users, ratings and 1 <= num_genres <= num_items (got "
                           f"{num_users} users, {num_items} items, {num_ratings} ratings, "
                           f"{num_genres} genres)")
    gen = torch.Generator().manual_seed(seed)
    genre = torch.cat([torch.arange(num_genres),  # no genre without items
                       torch.randint(num_genres, (num_items - num_genres,), generator=gen)])
    genre = genre[torch.randperm(num_items, generator=gen)]
    taste = torch.softmax(taste_sharpness * torch.randn(num_users, num_genres, generator=gen),
                          dim=1)

    user = torch.randint(num_users, (num_ratings,), generator=gen)
    item = torch.randint(num_items, (num_ratings,), generator=gen)
    liked = torch.rand(num_ratings, generator=gen) < p_taste
    liked_genre = torch.multinomial(taste[user[liked]], 1, generator=gen).view(-1)
    item[liked] = _pick_in_group(genre, num_genres, liked_genre, gen)
    edge_index = coalesce(torch.stack([user, item]), num_nodes=max(num_users, num_items))

    data = HeteroData()
    data["user"].x = _noisy_view(taste, feat_dim, feature_snr, gen)
    data["item"].x = _noisy_view(torch.nn.functional.one_hot(genre, num_genres).float(),
                                 feat_dim, feature_snr, gen)
    data["item"].y = genre
    data["user", "rates", "item"].edge_index = edge_index
    return data


def latent_factor_graph(num_users: int = 2_000, num_items: int = 1_000,
                        avg_ratings: float = 20.0, latent_dim: int = 8, sharpness: float = 2.0,
                        popularity: float = 1.0, seed: int = 0) -> HeteroData:
    r"""Implicit feedback from a latent-factor model: a bipartite ``('user', 'rates',
    'item')`` graph for recommendation.

    Users and items get latent factors :math:`u, v \sim \mathcal{N}(0, I_L / \sqrt{L})`
    (so :math:`\langle u, v \rangle` has unit variance) and items a log-popularity
    :math:`b \sim \mathcal{N}(0, 1)`. User ``i`` rates :math:`n_i` distinct items (log-normal
    around ``avg_ratings``, at least 2, at most half the catalogue), drawn without replacement
    with probability proportional to :math:`\exp(\text{sharpness} \cdot \langle u_i, v_j
    \rangle + \text{popularity} \cdot b_j)` (Gumbel top-k, in chunks of users). A model
    that recovers the factors ranks a user's held-out items high; ranking by popularity
    alone does less well unless ``sharpness`` is small.

    Args:
        num_users (int), num_items (int): number of nodes of each type.
        avg_ratings (float): items per user on average.
        latent_dim (int): ``L``, the dimension of the factors.
        sharpness (float): weight of the user-item affinity (0: only popularity).
        popularity (float): weight of the item popularity (0: none).
        seed (int): the graph depends only on its arguments.

    Returns:
        HeteroData: ``['user'].num_nodes``, ``['item'].num_nodes``, ``['user'].factor``,
        ``['item'].factor``, ``['item'].popularity`` and ``['user', 'rates',
        'item'].edge_index`` (sorted by user, then item).
    """
    if num_users < 1 or num_items < 4 or latent_dim < 1 or avg_ratings < 1:
        raise ExampleError(f"need users, at least 4 items, latent_dim >= 1 and avg_ratings "
                           f">= 1 (got {num_users} users, {num_items} items, latent_dim "
                           f"{latent_dim}, avg_ratings {avg_ratings})")
    gen = torch.Generator().manual_seed(seed)
    scale = latent_dim ** -0.25
    user = torch.randn(num_users, latent_dim, generator=gen) * scale
    item = torch.randn(num_items, latent_dim, generator=gen) * scale
    bias = torch.randn(num_items, generator=gen)
    count = (avg_ratings * torch.exp(0.5 * torch.randn(num_users, generator=gen) - 0.125))
    count = count.round().long().clamp(2, max(2, num_items // 2))
    most = int(count.max())
    step = max(1, (1 << 22) // num_items)
    rows, cols = [], []
    for start in range(0, num_users, step):
        logits = sharpness * (user[start:start + step] @ item.t()) + popularity * bias
        gumbel = -torch.log(-torch.log(torch.rand(logits.shape, generator=gen)
                                       .clamp_(1e-12, 1 - 1e-7)))
        picked = torch.topk(logits + gumbel, most, dim=1).indices
        keep = torch.arange(most).view(1, -1) < count[start:start + step].view(-1, 1)
        rows.append((torch.arange(picked.size(0)) + start).view(-1, 1).expand_as(picked)[keep])
        cols.append(picked[keep])
    edge_index = coalesce(torch.stack([torch.cat(rows), torch.cat(cols)]),
                          num_nodes=max(num_users, num_items))
    data = HeteroData()
    data["user"].num_nodes, data["item"].num_nodes = num_users, num_items
    data["user"].factor, data["item"].factor = user, item
    data["item"].popularity = bias
    data["user", "rates", "item"].edge_index = edge_index
    return data


def split_per_user(edge_index: Tensor, num_users: int, test_ratio: float,
                   seed: int = 0) -> Tuple[Tensor, Tensor]:
    """``(train, test)``: ``round(test_ratio * n)`` random items of every user with ``n >= 2``
    items go to test (at least one, never all); users with one item keep it in train."""
    if not 0.0 < test_ratio < 1.0:
        raise ExampleError(f"--test-ratio must be in (0, 1) (got {test_ratio})")
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(edge_index.size(1), generator=gen)
    edge_index = edge_index[:, perm]
    edge_index = edge_index[:, torch.sort(edge_index[0], stable=True).indices]
    degree = torch.bincount(edge_index[0], minlength=num_users)
    start = torch.cumsum(degree, 0) - degree
    rank = torch.arange(edge_index.size(1)) - start[edge_index[0]]
    num_test = (test_ratio * degree.double()).round().long()
    num_test = torch.where(degree >= 2, num_test.clamp(1, None), torch.zeros_like(degree))
    num_test = torch.minimum(num_test, (degree - 1).clamp(min=0))
    test = rank < num_test[edge_index[0]]
    return edge_index[:, ~test], edge_index[:, test]


_MOVIELENS_RAW = ("u.item", "u.user", "u1.base", "u1.test")


def load_movielens100k(root: str) -> Tuple[HeteroData, Tensor, Tensor]:
    """MovieLens 100K from ``root/raw`` (GroupLens' ``ml-100k`` files ``u.item``, ``u.user``,
    ``u1.base``, ``u1.test``), read by PyG's
    :class:`~torch_geometric.datasets.MovieLens100K` (which needs pandas and writes its cache
    to ``root/processed``); never downloads. Every rating counts as an interaction; the
    split is GroupLens' ``u1`` (80/20). Returns ``(data, train, test)``: ``[2, E]`` (user,
    movie) pairs."""
    raw = Path(root) / "raw"
    missing = [name for name in _MOVIELENS_RAW if not (raw / name).is_file()]
    if missing:
        raise ExampleError(
            f"the MovieLens 100K files are not in {raw} (missing: {', '.join(missing)}). "
            f"These examples never download: unzip GroupLens' ml-100k.zip and put its "
            f"files (u.item, u.user, u1.base, u1.test, ...) in {raw}, or pass --root DIR "
            f"where DIR/raw holds them.")
    try:
        import pandas  # noqa: F401 -- PyG's MovieLens100K.process reads the files with it
    except ImportError:
        raise ExampleError("reading MovieLens 100K needs pandas (pip install pandas)") from None
    from torch_geometric.datasets import MovieLens100K
    data = MovieLens100K(str(root))[0]
    store = data["user", "rates", "movie"]
    return data, store.edge_index, store.edge_label_index


def load_planetoid(name: str, root: str) -> Data:
    """Cora, CiteSeer or PubMed from ``root/<name>/raw``, row-normalized features.

    Reads the raw files with PyG's :class:`~torch_geometric.datasets.Planetoid` (which
    writes its processed cache to ``root/<name>/processed``); never downloads.
    """
    from torch_geometric.datasets import Planetoid
    import torch_geometric.transforms as T

    if name not in PLANETOID:
        raise ExampleError(f"unknown Planetoid dataset {name!r} (choose from {PLANETOID})")
    raw = Path(root) / name / "raw"
    missing = [f"ind.{name.lower()}.{part}" for part in _PLANETOID_RAW
               if not (raw / f"ind.{name.lower()}.{part}").is_file()]
    if missing:
        raise ExampleError(
            f"the raw {name} files are not in {raw} (missing: {', '.join(missing)}). "
            f"These examples never download: put the Planetoid raw files "
            f"(ind.{name.lower()}.x, ...) in {raw}, or pass --root DIR where "
            f"DIR/{name}/raw holds them.")
    return Planetoid(str(root), name, transform=T.NormalizeFeatures())[0]


# Command-line plumbing ####################################################################

def add_graph_args(parser: argparse.ArgumentParser) -> None:
    """Options that choose and size the homogeneous graph (see :func:`load_graph`)."""
    group = parser.add_argument_group("data")
    group.add_argument("--dataset", default="generated", choices=("generated",) + PLANETOID,
                       help="'generated': a stochastic block model made on the fly (no "
                            "download); otherwise a Planetoid dataset read from --root")
    group.add_argument("--root", default="data/Planetoid",
                       help="Planetoid root: --dataset NAME reads ROOT/NAME/raw "
                            "(never downloads)")
    group.add_argument("--num-nodes", type=int, default=2_000,
                       help="generated graph: number of nodes")
    group.add_argument("--avg-degree", type=float, default=10.0,
                       help="generated graph: average node degree")
    group.add_argument("--num-edges", type=int, default=None,
                       help="generated graph: number of undirected edges (overrides "
                            "--avg-degree); an epoch scores twice its training share "
                            "(positives plus as many negatives), so ~1.7x this many")
    group.add_argument("--feat-dim", type=int, default=64,
                       help="generated graph: node feature dimension")
    group.add_argument("--num-blocks", type=int, default=50,
                       help="generated graph: number of communities")
    group.add_argument("--p-in", type=float, default=0.9,
                       help="generated graph: fraction of edges inside a community")
    group.add_argument("--feature-snr", type=float, default=1.0,
                       help="generated graph: strength of the community signal in the "
                            "features (0: pure noise)")
    group.add_argument("--graph-seed", type=int, default=0,
                       help="generated graph: seed of the graph (fixed, independent of --seed)")


def load_graph(args: argparse.Namespace) -> Tuple[Data, str]:
    """The graph chosen by :func:`add_graph_args` options, and a one-line description."""
    if args.dataset != "generated":
        data = load_planetoid(args.dataset, args.root)
        return data, args.dataset
    data = sbm_graph(num_nodes=args.num_nodes, avg_degree=args.avg_degree,
                     num_edges=args.num_edges, feat_dim=args.feat_dim,
                     num_blocks=args.num_blocks, p_in=args.p_in,
                     feature_snr=args.feature_snr, seed=args.graph_seed)
    return data, f"generated SBM ({args.num_blocks} blocks, p_in={args.p_in})"


def add_user_item_args(parser: argparse.ArgumentParser) -> None:
    """Options that size the generated user-item graph (see :func:`user_item_graph`)."""
    group = parser.add_argument_group("data (generated user-item graph)")
    group.add_argument("--num-users", type=int, default=2_000, help="number of users")
    group.add_argument("--num-items", type=int, default=1_000, help="number of items")
    group.add_argument("--avg-ratings", type=float, default=10.0,
                       help="ratings per user on average")
    group.add_argument("--feat-dim", type=int, default=32,
                       help="feature dimension of users and items")
    group.add_argument("--num-genres", type=int, default=20, help="number of item genres")
    group.add_argument("--taste-sharpness", type=float, default=5.0,
                       help="how concentrated user tastes are (larger: fewer favourite genres)")
    group.add_argument("--feature-snr", type=float, default=3.0,
                       help="strength of the taste/genre signal in the features (0: noise)")
    group.add_argument("--graph-seed", type=int, default=0,
                       help="seed of the graph (fixed, independent of --seed)")


def load_user_item(args: argparse.Namespace) -> HeteroData:
    return user_item_graph(num_users=args.num_users, num_items=args.num_items,
                           avg_ratings=args.avg_ratings, feat_dim=args.feat_dim,
                           num_genres=args.num_genres, taste_sharpness=args.taste_sharpness,
                           feature_snr=args.feature_snr, seed=args.graph_seed)


def add_split_args(parser: argparse.ArgumentParser, *, val_ratio: float = 0.05,
                   test_ratio: float = 0.1) -> None:
    group = parser.add_argument_group("split")
    group.add_argument("--val-ratio", type=float, default=val_ratio,
                       help="fraction of the edges held out for validation")
    group.add_argument("--test-ratio", type=float, default=test_ratio,
                       help="fraction of the edges held out for testing")


def split_edges(data: Data, args: argparse.Namespace, **kwargs) -> Tuple[Data, Data, Data]:
    """``RandomLinkSplit`` of an undirected graph into train/val/test.

    Validation and test get one negative per positive; training gets none (the examples
    draw fresh ones every epoch). ``kwargs`` go to ``RandomLinkSplit``.
    """
    import torch_geometric.transforms as T
    split = T.RandomLinkSplit(num_val=args.val_ratio, num_test=args.test_ratio,
                              is_undirected=True, add_negative_train_samples=False, **kwargs)
    return split(data)


def describe(data) -> dict:
    """Sizes of a graph, for the JSON report."""
    if isinstance(data, HeteroData):
        return {"num_nodes": {k: int(v) for k, v in data.num_nodes_dict.items()},
                "num_edges": {"__".join(k): int(v.size(1))
                              for k, v in data.edge_index_dict.items()}}
    return {"num_nodes": int(data.num_nodes), "num_edges": int(data.edge_index.size(1)),
            "num_features": int(data.num_features)}
