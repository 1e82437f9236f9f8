"""A pure-PyTorch neighbor sampler for machines without pyg-lib or torch-sparse.

PyG's NeighborSampler calls pyg-lib (or torch-sparse) to sample; PyG has no pure-PyTorch
path, and neither library has wheels on PyPI. TorchNeighborSampler is PyG's NeighborSampler
with only its sampling step (`_sample`) replaced, for the homogeneous, directional,
uniform-without-replacement case that link_neighbor_loader.py uses: everything else
(CSC conversion, negative sampling, batching, subgraph filtering) is PyG's own. It follows
torch-sparse's `neighbor_sample`: the seeds come first, each hop takes every in-neighbor of a
node with at most k of them and k distinct ones at random otherwise (k = -1: all), new nodes
are numbered in order of first appearance, and `edge` holds CSC positions (PyG maps them
back to edge ids). Vectorized, so it is usable at example sizes; pyg-lib is still faster.
"""
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.sampler import NeighborSampler, SamplerOutput
from torch_geometric.sampler.base import SubgraphType


def have_native_sampler() -> bool:
    """Whether PyG can sample neighbors itself (pyg-lib or torch-sparse installed)."""
    import torch_geometric.typing
    return torch_geometric.typing.WITH_PYG_LIB or torch_geometric.typing.WITH_TORCH_SPARSE


class TorchNeighborSampler(NeighborSampler):
    """PyG's NeighborSampler with a pure-PyTorch sampling step (homogeneous graphs)."""

    def _sample(self, seed, seed_time: Optional[Tensor] = None, **kwargs) -> SamplerOutput:
        if (isinstance(seed, dict) or seed_time is not None or self.disjoint or self.replace
                or getattr(self, "edge_weight", None) is not None
                or self.subgraph_type != SubgraphType.directional
                or self.sample_direction != "forward"):
            raise NotImplementedError(
                "TorchNeighborSampler covers homogeneous, directional, forward sampling "
                "without replacement, time or weights; install pyg-lib for the rest")
        colptr, row = self.colptr.long(), self.row.long()
        seed = seed.long()
        local = torch.full((self.num_nodes,), -1, dtype=torch.long)  # global -> local id
        local[seed] = torch.arange(seed.numel())
        nodes = [seed]
        rows, cols, edges = [], [], []
        num_sampled_nodes, num_sampled_edges = [seed.numel()], []
        frontier, begin = seed, 0  # the nodes this hop expands; local ids from begin on
        for k in self.num_neighbors.get_mapped_values():
            start = colptr[frontier]
            degree = colptr[frontier + 1] - start
            first = torch.cumsum(degree, 0) - degree  # where each node's edges start
            owner = torch.repeat_interleave(torch.arange(frontier.numel()), degree)
            offset = torch.arange(owner.numel()) - first[owner]
            position = start[owner] + offset  # CSC positions of all in-edges of the frontier
            if k >= 0 and bool((degree > k).any()):
                # k distinct edges per node, uniformly: shuffle within each node, keep k.
                order = torch.argsort(torch.rand(owner.numel()))
                order = order[torch.argsort(owner[order], stable=True)]
                position = position[order]  # owner[order] == owner: segments keep their place
                keep = offset < k
                owner, position = owner[keep], position[keep]
            neighbor = row[position]
            new = neighbor[local[neighbor] < 0]
            end = begin + frontier.numel()  # local ids so far
            frontier = new  # empty if nothing new
            if new.numel() > 0:
                unique, inverse = torch.unique(new, return_inverse=True)
                first_seen = torch.full((unique.numel(),), new.numel(), dtype=torch.long)
                first_seen.scatter_reduce_(0, inverse, torch.arange(new.numel()), "amin")
                frontier = unique[torch.argsort(first_seen)]
                local[frontier] = torch.arange(end, end + frontier.numel())
                nodes.append(frontier)
            rows.append(local[neighbor])
            cols.append(owner + begin)
            edges.append(position)
            num_sampled_nodes.append(frontier.numel())
            num_sampled_edges.append(position.numel())
            begin = end
        empty = torch.empty(0, dtype=torch.long)
        return SamplerOutput(
            node=torch.cat(nodes), row=torch.cat(rows) if rows else empty,
            col=torch.cat(cols) if cols else empty, edge=torch.cat(edges) if edges else empty,
            batch=None, num_sampled_nodes=num_sampled_nodes,
            num_sampled_edges=num_sampled_edges)
