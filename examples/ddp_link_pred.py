"""Distributed data-parallel link prediction with pyg_edgedot's EdgeDotScore.

Every rank holds the whole graph and a replica of the encoder wrapped in
DistributedDataParallel. Each step, each rank scores its share (1 / world size) of the
training edges plus as many fresh negatives (from a pyg_edgedot.NegativeSampler each rank
builds once; --loss fused draws them inside pyg_edgedot.EdgeDotLoss), and DDP averages the
gradients. Validation and
test edges are shared out the same way: the ranks all_gather their scores for ROC-AUC and
AP, and all_reduce their ranking sums for MRR and Hits@K. Rank 0 prints the summary and
writes --json, with the world size and the slowest rank's mean epoch time.

Runs under torchrun, with gloo on the CPU or NCCL on GPUs (rank r uses cuda:LOCAL_RANK), or
as one plain process (world size 1).

examples:
  torchrun --standalone --nproc_per_node 2 examples/ddp_link_pred.py --device cpu
  torchrun --standalone --nproc_per_node 4 examples/ddp_link_pred.py --device cuda \\
      --num-nodes 1000000 --avg-degree 20 --neg-sampling uniform --epochs 20 --json ddp.json
  python examples/ddp_link_pred.py                     # one process, world size 1
"""
import collections
import os
from typing import Optional, Tuple

import torch
import torch.distributed as dist
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from torch_geometric import seed_everything
from pyg_edgedot import EdgeDotScore

import _common
import _data
import link_pred


def parse_args(argv=None):
    return link_pred.parse_args(argv, doc=__doc__)  # the same options as link_pred.py


def init_distributed(device_arg) -> Tuple[int, int, torch.device, str]:
    """Joins torchrun's process group (env://), or makes a one-process group without it."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # set by torchrun
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        kwargs = dict(init_method="env://")
    else:
        rank, world_size, local_rank = 0, 1, 0
        kwargs = dict(store=dist.HashStore())
    device = _common.resolve_device(device_arg)
    if device.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise _common.ExampleError(
                f"local rank {local_rank} has no GPU ({torch.cuda.device_count()} visible); "
                "use --nproc_per_node <= the number of GPUs")
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
        kwargs["device_id"] = device
    else:
        backend = "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world_size, **kwargs)
    return rank, world_size, device, backend


# The tensors of the last collectives stay referenced from Python until the process group is
# destroyed. With torch < 2.8, destroying a Gloo group holds the GIL while it joins its worker
# threads, and a worker still freeing a finished collective whose tensors Python has dropped
# needs the GIL to free their Python objects: a deadlock at exit (seen with torch 2.5.1 on
# rank 0's last all_gather; pytorch/pytorch#154976 releases the GIL there, in torch 2.8).
# The last 16, not all: a worker frees a collective once it gets the GIL, which each later
# collective's wait releases, and all of them would keep every epoch's validation scores.
_RECENT_COLLECTIVES = collections.deque(maxlen=16)


def all_reduce(tensor: Tensor) -> None:
    dist.all_reduce(tensor)
    _RECENT_COLLECTIVES.append(tensor)


def all_gather_cat(tensor: Tensor) -> Tensor:
    """Concatenation of every rank's 1-D ``tensor`` (lengths may differ), on every rank."""
    world_size = dist.get_world_size()
    if world_size == 1:
        return tensor
    size = torch.tensor([tensor.numel()], device=tensor.device)
    sizes = [torch.empty_like(size) for _ in range(world_size)]
    dist.all_gather(sizes, size)
    longest = int(max(sizes))
    padded = tensor.new_zeros(longest)
    padded[:tensor.numel()] = tensor
    parts = [torch.empty_like(padded) for _ in range(world_size)]
    dist.all_gather(parts, padded)
    _RECENT_COLLECTIVES.append((size, sizes, padded, parts))
    return torch.cat([part[:int(n)] for part, n in zip(parts, sizes)])


def main(argv=None) -> Optional[dict]:
    """Trains and tests on every rank; returns the report on rank 0, None elsewhere."""
    args = parse_args(argv)
    rank, world_size, device, backend = init_distributed(args.device)
    try:
        return train_and_test(args, rank, world_size, device, backend)
    finally:
        dist.destroy_process_group()
        _RECENT_COLLECTIVES.clear()


def train_and_test(args, rank: int, world_size: int, device: torch.device,
                   backend: str) -> Optional[dict]:
    seed_everything(args.seed)  # the same graph, split and initial weights on every rank
    data, name = _data.load_graph(args)
    train_data, val_data, test_data = (d.to(device) for d in _data.split_edges(data, args))

    encoder = _common.make_encoder(args, data.num_features).to(device)
    model = DistributedDataParallel(encoder, device_ids=[device] if device.type == "cuda"
                                    else None)
    decoder = EdgeDotScore() if args.decoder == "edgedot" else _common.EagerDotScore()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    objective = _common.LinkObjective(args, decoder, train_data.edge_index,
                                      train_data.num_nodes)
    seed_everything(args.seed + rank)  # but different negatives on each rank

    def share(tensor: Tensor) -> Tensor:  # this rank's slice of the last dimension
        return tensor[..., rank::world_size]

    train_pos = share(train_data.edge_label_index)

    def train_epoch(timer: _common.EpochTimer) -> float:
        model.train()
        edge_label_index, edge_label = objective.draw(train_pos)
        timer.lap("sample")
        optimizer.zero_grad()
        z = model(train_data.x, train_data.edge_index)
        loss = objective.loss(z, edge_label_index, edge_label)
        loss.backward()  # DDP all-reduces (averages) the gradients here
        optimizer.step()
        loss = loss.detach()
        all_reduce(loss)
        return loss.item() / world_size

    @torch.no_grad()
    def scores_and_labels(split) -> Tuple[Tensor, Tensor, Tensor]:
        model.eval()
        z = model.module(split.x, split.edge_index)  # no gradients: skip DDP's forward
        scores = decoder(z, share(split.edge_label_index))
        return z, all_gather_cat(scores), all_gather_cat(share(split.edge_label))

    def validate() -> float:
        _, scores, labels = scores_and_labels(val_data)
        return _common.binary_metrics(scores, labels)["auc"]

    result = _common.fit(model, train_epoch, validate, epochs=args.epochs, device=device,
                         progress=args.progress and rank == 0,
                         desc=f"ddp x{world_size} {args.model}+{args.decoder}")

    z, scores, labels = scores_and_labels(test_data)
    metrics = {f"test_{k}": v for k, v in _common.binary_metrics(scores, labels).items()}
    test_pos = test_data.edge_label_index[:, test_data.edge_label == 1]
    sums = _common.ranking_sums(lambda index: decoder(z, index), share(test_pos),
                                test_data.num_nodes, args.num_rank_negatives, args.hits_k,
                                seed=args.seed + rank)
    all_reduce(sums)
    metrics.update({f"test_{k}": v
                    for k, v in _common.ranking_metrics(sums, args.hits_k).items()})

    # Report the slowest rank's times: each step waits for it.
    timing = result["timing"]
    phases = sorted(timing["mean_phase_time_s"])
    mine = torch.tensor([timing["mean_epoch_time_s"]]
                        + [timing["mean_phase_time_s"][p] for p in phases],
                        dtype=torch.float64, device=device)
    every = all_gather_cat(mine).view(world_size, -1).cpu()
    slowest = int(every[:, 0].argmax())
    timing.update(mean_epoch_time_s=float(every[slowest, 0]),
                  mean_phase_time_s={p: float(every[slowest, i + 1])
                                     for i, p in enumerate(phases)},
                  slowest_rank=slowest, mean_epoch_time_s_per_rank=every[:, 0].tolist())
    if rank != 0:
        return None
    return _common.report(
        "ddp_link_pred", args, device, metrics=metrics, fit_result=result,
        data=dict(_data.describe(data), name=name,
                  scored_edges_per_epoch=2 * train_data.edge_label_index.size(1)),
        title=f"{name}, DDP x{world_size} ({backend}), {args.model.upper()} encoder, "
              f"{args.decoder} decoder, {args.neg_sampling} negatives, {args.loss} loss",
        extra={"world_size": world_size, "backend": backend,
               "negatives": objective.describe()})


if __name__ == "__main__":
    _common.run(main)
