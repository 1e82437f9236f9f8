"""The workloads of benchmarks/bench_edge_dot.py, their bandwidth floors, their inputs and the
float64 reference every method's output is checked against."""
import math
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import torch

H200_COPY_GBPS = 4300.0  # the H200's measured device-to-device copy bandwidth, for --floors
MB = 1e6
GB = 1e9

@dataclass(frozen=True)
class Workload:
    name: str
    num_src: int
    num_dst: int
    num_edges: int
    dim: int
    dtype: str = "float32"
    bipartite: bool = False
    orders: Tuple[str, ...] = ("random", "sorted")
    deterministic_row: bool = False  # also time pyg_edgedot under deterministic algorithms
    index_dtype: str = "int64"

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def itemsize(self) -> int:
        return torch.empty((), dtype=self.torch_dtype).element_size()

    @property
    def index_itemsize(self) -> int:
        return torch.empty((), dtype=getattr(torch, self.index_dtype)).element_size()

    def describe(self) -> str:
        nodes = (f"{self.num_src:,} src x {self.num_dst:,} dst nodes (bipartite)"
                 if self.bipartite else f"{self.num_src:,} nodes")
        return (f"{nodes}, E={self.num_edges:,}, D={self.dim}, {self.dtype}, "
                f"{self.index_dtype} indices")


@dataclass(frozen=True)
class GiantSpec:
    num_nodes: int
    num_edges: int
    dim: int = 64
    dtype: str = "bfloat16"
    index_dtype: str = "int32"
    num_samples: int = 4096
    scaled_down: bool = False


M = 1_000_000
WORKLOADS: Dict[str, Workload] = {w.name: w for w in [
    # CUDA workloads.
    Workload("W1", 1024, 768, 16_384, 128, bipartite=True),
    Workload("W2", 100_000, 100_000, 2 * M, 128),
    Workload("W3", 2_930_000, 2_930_000, 30 * M, 128, deterministic_row=True),
    Workload("W4", 2_930_000, 2_930_000, 30 * M, 128, dtype="bfloat16"),
    Workload("W5", 1 * M, 1 * M, 10 * M, 256),
    Workload("W6", 1 * M, 1 * M, 30 * M, 32),
    Workload("W7", 2_930_000, 2_930_000, 150 * M, 128, orders=("random",)),
    # CPU workloads (--device cpu).
    Workload("C1", 10_000, 10_000, 200_000, 64),
    Workload("C2", 100_000, 100_000, 2 * M, 128, deterministic_row=True),
    # Tiny workloads (--quick): a smoke test of every code path.
    Workload("Q1", 64, 48, 512, 16, bipartite=True, deterministic_row=True),
    Workload("Q2", 300, 300, 2_000, 8, dtype="bfloat16"),
]}
DEFAULT_WORKLOADS = {
    "cuda": ["W1", "W2", "W3", "W4", "W5", "W6", "W7"],
    "cpu": ["C1", "C2"],
    "quick": ["Q1", "Q2"],
}
GIANT = {
    "cuda": GiantSpec(num_nodes=1 * M, num_edges=2**31 + 1),
    "cpu": GiantSpec(num_nodes=100_000, num_edges=2**22 + 1, scaled_down=True),
    "quick": GiantSpec(num_nodes=1_000, num_edges=2**12 + 1, num_samples=512, scaled_down=True),
}


def floors(wl: Workload, gbps: float) -> Dict[str, float]:
    """Bytes that must move (and the time at ``gbps``) for one forward and one fwd+bwd.

    Forward: every edge gathers one row of each side from memory (2*E*D*itemsize, at random
    rows), reads its two indices and writes its score. Backward, per gradient: one gather of
    the other side's rows (E*D*itemsize), one write of the gradient (N*D*itemsize) and the
    index and grad_out traffic (2*E*index_itemsize + E*itemsize). Sort traffic is not in the
    floor; ``sort_pass_bytes`` is one radix pass over (key, int32 permutation) pairs.
    'compulsory' reads every input byte once: the floor when the inputs fit in the L2 (W1).
    """
    E, D, isz, iisz = wl.num_edges, wl.dim, wl.itemsize, wl.index_itemsize
    gather = 2 * E * D * isz
    index = 2 * E * iisz
    out = E * isz
    fwd = gather + index + out
    per_grad = [E * D * isz + n * D * isz + index + out for n in (wl.num_src, wl.num_dst)]
    fwdbwd = fwd + sum(per_grad)
    compulsory = (wl.num_src + wl.num_dst) * D * isz + index + out
    return {
        "gather_bytes": gather, "fwd_bytes": fwd, "fwdbwd_bytes": fwdbwd,
        "compulsory_fwd_bytes": compulsory, "sort_pass_bytes": 2 * E * (iisz + 4),
        "out_bytes": out, "out_grad_bytes": out + (wl.num_src + wl.num_dst) * D * isz,
        "bandwidth_gbps": gbps,
        "fwd_ms": fwd / (gbps * GB) * 1e3, "fwdbwd_ms": fwdbwd / (gbps * GB) * 1e3,
        "compulsory_fwd_ms": compulsory / (gbps * GB) * 1e3,
    }


def floors_markdown(names: List[str], gbps: float) -> str:
    lines = [
        f"Floors at {gbps:,.0f} GB/s (bytes / bandwidth; 1 GB = 1e9 B). fwd = 2·E·D·itemsize "
        "(gathers) + 2·E·index_itemsize + E·itemsize (output); fwd+bwd adds, per gradient, "
        "E·D·itemsize (gather of the other side) + N·D·itemsize (gradient write) + "
        "2·E·index_itemsize + E·itemsize (indices, grad_out). Sort traffic excluded; "
        "'sort pass' = one radix pass over (key, int32 perm) pairs. 'compulsory' = each input "
        "byte read once (the floor when the features fit in the 50 MB L2).",
        "",
        "| workload | nodes (src x dst) | E | D | dtype | gathers GB | fwd GB | fwd floor ms "
        "| compulsory fwd ms | fwd+bwd GB | fwd+bwd floor ms | sort pass ms | out MB "
        "| out+grads MB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        wl = WORKLOADS[name]
        f = floors(wl, gbps)
        nodes = (f"{wl.num_src:,} x {wl.num_dst:,}" if wl.bipartite
                 else f"{wl.num_src:,} (x2)")
        lines.append(
            f"| {wl.name} | {nodes} | {wl.num_edges:,} | {wl.dim} | {wl.dtype} "
            f"| {f['gather_bytes'] / GB:.2f} | {f['fwd_bytes'] / GB:.2f} | {f['fwd_ms']:.3f} "
            f"| {f['compulsory_fwd_ms']:.4f} | {f['fwdbwd_bytes'] / GB:.2f} "
            f"| {f['fwdbwd_ms']:.3f} | {f['sort_pass_bytes'] / GB / gbps * 1e3:.3f} "
            f"| {f['out_bytes'] / MB:,.1f} | {f['out_grad_bytes'] / MB:,.1f} |")
    return "\n".join(lines)




@dataclass
class Case:
    """One workload in one edge order: the inputs every method gets."""
    wl: Workload
    order: str
    x_src: torch.Tensor
    x_dst: torch.Tensor
    edge_index: torch.Tensor
    grad: torch.Tensor
    csr: Any = None              # built by the cusparse method, outside the timed region
    csr_inverse: Any = None      # edge -> position in the CSR values

    @property
    def src(self) -> torch.Tensor:
        return self.edge_index[0]

    @property
    def dst(self) -> torch.Tensor:
        return self.edge_index[1]

    def clear_grads(self) -> None:
        self.x_src.grad = None
        self.x_dst.grad = None


def make_inputs(wl: Workload, device: torch.device, seed: int = 0):
    """x_src, x_dst (requires_grad), edge_index (random order) and the output gradient."""
    torch.manual_seed(seed)
    dtype = wl.torch_dtype
    x_src = torch.randn(wl.num_src, wl.dim, dtype=dtype, device=device).requires_grad_()
    x_dst = torch.randn(wl.num_dst, wl.dim, dtype=dtype, device=device).requires_grad_()
    index_dtype = getattr(torch, wl.index_dtype)
    edge_index = torch.stack([
        torch.randint(0, wl.num_src, (wl.num_edges,), dtype=index_dtype, device=device),
        torch.randint(0, wl.num_dst, (wl.num_edges,), dtype=index_dtype, device=device),
    ])
    grad = torch.randn(wl.num_edges, dtype=dtype, device=device)
    return x_src, x_dst, edge_index, grad


def sort_by_source(edge_index: torch.Tensor, grad: torch.Tensor, num_dst: int):
    """The same edges in (source, destination) order, and the gradient permuted with them."""
    key = edge_index[0].long() * num_dst + edge_index[1].long()
    perm = key.argsort()
    del key
    return edge_index[:, perm], grad[perm]


def sparse_csr(crow, col, values, size) -> torch.Tensor:
    """torch.sparse_csr_tensor without invariant checks and without its 'beta' warning."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Sparse CSR tensor support is in beta.*")
        return torch.sparse_csr_tensor(crow, col, values, size=size, check_invariants=False)


def build_csr(src: torch.Tensor, dst: torch.Tensor, num_src: int, num_dst: int,
              dtype: torch.dtype):
    """A CSR mask of the unique (src, dst) pairs, and each edge's position in it.

    torch.unique sorts the pairs and merges duplicate edges (PyTorch's CSR invariants ask for
    sorted, distinct columns per row), so the mask has E_unique <= E entries; ``values[inverse]``
    gives one score per edge, in edge order. Indices are int32 where they fit (cuSPARSE's
    best case).
    """
    key = src.long() * num_dst + dst.long()
    unique, inverse = torch.unique(key, sorted=True, return_inverse=True)
    del key
    row = torch.div(unique, num_dst, rounding_mode="floor")
    col = unique - row * num_dst
    crow = torch.searchsorted(row, torch.arange(num_src + 1, device=src.device))
    index_dtype = (torch.int32 if max(unique.numel(), num_src, num_dst) < 2**31 - 1
                   else torch.int64)
    values = torch.ones(unique.numel(), dtype=dtype, device=src.device)
    csr = sparse_csr(crow.to(index_dtype), col.to(index_dtype), values, (num_src, num_dst))
    return csr, inverse


def tolerance(dtype: torch.dtype) -> float:
    """Largest |out - ref| / sum|terms| accepted: fp32 accumulation for fp32, wider for 16 bit."""
    return {torch.float64: 1e-10, torch.float32: 1e-4}.get(dtype, 2.0**-6)


def normalised_error(out: torch.Tensor, ref: torch.Tensor, abs_sum: torch.Tensor) -> float:
    """max |out - ref| / sum|terms| (condition-free; NaN or Inf counts as infinite)."""
    if out.numel() == 0:
        return 0.0
    err = (out.detach().double() - ref).abs() / (abs_sum + 1e-30)
    err = torch.nan_to_num(err, nan=math.inf, posinf=math.inf)
    return float(err.max())


class Reference:
    """float64 scores of sampled edges and float64 gradients of sampled rows, for checks."""

    def __init__(self, case: Case, num_edges: int = 4096, num_rows: int = 32,
                 seed: int = 1) -> None:
        self.case = case
        self.tol = tolerance(case.wl.torch_dtype)
        self._gen = torch.Generator().manual_seed(seed)
        E = case.edge_index.size(1)
        device = case.x_src.device
        self.pos = torch.randint(0, E, (min(num_edges, E),), generator=self._gen).to(device)
        self.fwd_ref, self.fwd_abs = edge_reference(case.x_src, case.x_dst, case.src,
                                                    case.dst, self.pos)
        self.num_rows = num_rows
        self._grads = None

    def check_scores(self, scores: torch.Tensor) -> float:
        return normalised_error(scores[self.pos], self.fwd_ref, self.fwd_abs)

    def _grad_rows(self, scatter, gather, x_gather, num_rows):
        device = x_gather.device
        k = min(self.num_rows, num_rows)
        rows = torch.randperm(num_rows, generator=self._gen)[:k].to(device)
        lut = torch.full((num_rows,), -1, dtype=torch.long, device=device)
        lut[rows] = torch.arange(k, device=device)
        slot = lut[scatter.long()]
        sel = (slot >= 0).nonzero().squeeze(1)
        slot = slot[sel]
        terms = (self.case.grad[sel].double().unsqueeze(1)
                 * x_gather.detach()[gather[sel].long()].double())
        ref = torch.zeros(k, x_gather.size(1), dtype=torch.float64, device=device)
        abs_sum = torch.zeros_like(ref)
        ref.index_add_(0, slot, terms)
        abs_sum.index_add_(0, slot, terms.abs())
        return rows, ref, abs_sum

    def check_grads(self) -> float:
        c = self.case
        if self._grads is None:
            self._grads = (self._grad_rows(c.src, c.dst, c.x_dst, c.wl.num_src),
                           self._grad_rows(c.dst, c.src, c.x_src, c.wl.num_dst))
        err = 0.0
        for x, (rows, ref, abs_sum) in zip((c.x_src, c.x_dst), self._grads):
            if x.grad is None:
                return math.inf
            err = max(err, normalised_error(x.grad[rows], ref, abs_sum))
        return err


def edge_reference(x_src, x_dst, src, dst, pos):
    """float64 scores of the edges at ``pos``, and the sums of the terms' magnitudes."""
    terms = (x_src.detach()[src[pos].long()].double()
             * x_dst.detach()[dst[pos].long()].double())
    return terms.sum(-1), terms.abs().sum(-1)


