#!/usr/bin/env python
"""Benchmark ``pyg_edgedot.edge_dot`` against its peers, side by side (issue 3).

One run, one table: every workload x edge order x method, forward and forward+backward.

Methods (``--methods``, comma-separated keys):

  pyg_edgedot                 edge_dot(x_src, x_dst, edge_index); validate=True (the default)
                              costs one device-to-host sync per call on CUDA
  pyg_edgedot_novalidate      edge_dot(..., validate=False)
  pyg_edgedot_deterministic   edge_dot under torch.use_deterministic_algorithms(True); only on
                              the workloads flagged for it (W3; C2 and Q1 on the CPU)
  eager                       (x_src[src] * x_dst[dst]).sum(-1), as PyG's InnerProductDecoder
  compile                     torch.compile of that expression (dynamic=False, default mode);
                              the first call of each phase (the compile) is not timed
  cusparse                    torch.sparse.sampled_addmm(csr, x_src, x_dst.T, beta=0) on a CSR
                              mask of the edges, built (sorted, duplicate edges merged, as
                              PyTorch's CSR invariants ask) outside the timed region; forward
                              only, float32 only; output in CSR order, E_unique <= E values
  cusparse_sort               the same including the CSR build (torch.unique = sort + dedupe)
                              and the gather back to edge order; random order only

Workloads: W1-W7 on CUDA (W1-W6 in 'random' and 'sorted' edge order, W7 random only), C1-C2 with
``--device cpu``, Q1-Q2 with ``--quick``; plus 'giant', one forward call over 2^31 + 1 edges
(int32 indices, bf16, D=64) checked against a float64 reference on 4096 sampled edges (scaled
down on the CPU and with --quick).

Conventions (also written into the JSON and the table header):

* x_src and x_dst are separate tensors; homogeneous workloads give both the same number of
  rows N, bipartite ones (W1) different numbers. Features ``torch.randn``, edges
  ``torch.randint`` (uniform), the gradient of the output a fixed ``torch.randn`` of shape [E].
* 'sorted' is the same edge set sorted by (source, destination), i.e. CSR order, as
  ``torch_geometric.utils.sort_edge_index`` gives; the gradient is permuted with it.
* fwd = forward under ``torch.no_grad()`` (inference); fwd+bwd = forward with
  ``requires_grad`` inputs, then ``out.backward(grad)`` computing the gradients of both x_src
  and x_dst (set to None between repetitions, outside the timed region).
* Times are medians over repetitions after warm-up: CUDA events on CUDA, ``perf_counter`` on
  the CPU. Before every repetition, outside the timed region, a buffer (256 MB on CUDA) is
  written to flush the L2 cache. The number of repetitions adapts to ~0.4 s per measurement
  (``--reps`` fixes it).
* Peak extra memory: CUDA: ``max_memory_allocated()`` during one call minus
  ``memory_allocated()`` before it (the inputs), so the output and gradients count. CPU: the
  growth of the process RSS sampled every 0.5 ms (approximate; see the table header).
* Effective bandwidth: (2*E*D*itemsize + 2*E*index_itemsize + E*itemsize) / forward time, next
  to a device-to-device copy bandwidth measured once at the start (read + write bytes).
* Every method's output (and gradients) is checked on sampled edges (rows) against a float64
  reference, outside the timed region.

Outputs: a table on stdout, a JSON (written after every workload, so a killed run leaves its
results) and a PNG of speed-ups over eager. On CUDA, no new workload starts after
``--time-budget`` seconds (default 420, counted after the import of pyg_edgedot, which may
compile its kernels once per machine); what was skipped is listed. Examples::

    python benchmarks/bench_edge_dot.py                       # CUDA, everything (~8 min)
    python benchmarks/bench_edge_dot.py --workloads W1,W3 --methods pyg_edgedot,eager
    python benchmarks/bench_edge_dot.py --device cpu          # CPU sizes
    python benchmarks/bench_edge_dot.py --quick               # tiny sizes, a smoke test
    python benchmarks/bench_edge_dot.py --floors              # the floor table for NOTES.md
    python benchmarks/bench_edge_dot.py --from-json benchmarks/results/h200_20250101.json
"""
import argparse
import contextlib
import ctypes
import datetime as _dt
import gc
import json
import math
import os
import platform
import re
import statistics
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SCHEMA = "pyg_edgedot-bench/1"
H200_COPY_GBPS = 4300.0  # the H200's measured device-to-device copy bandwidth, for --floors
MB = 1e6
GB = 1e9
# torch.OutOfMemoryError (CUDA and CPU allocators) where it exists, else the CUDA one.
OutOfMemoryError = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)


# --------------------------------------------------------------------------------------------
# Workloads
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Device plumbing: synchronisation, cache flush, timing, peak memory
# --------------------------------------------------------------------------------------------

def _malloc_trim() -> None:
    """Return freed heap memory to the OS, so that RSS growth shows new allocations."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def current_rss() -> Optional[int]:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        try:
            import psutil
            return psutil.Process().memory_info().rss
        except Exception:
            return None


class RssSampler:
    """Peak RSS growth over a block, sampled every ``interval`` seconds by a thread.

    Approximate: the allocator may reuse freed heap memory (below glibc's mmap threshold)
    without the RSS growing, and a spike shorter than the interval can be missed.
    """

    def __init__(self, interval: float = 5e-4) -> None:
        self.interval = interval
        self.base: Optional[int] = None
        self.peak: Optional[int] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = current_rss()
            if rss is not None and (self.peak is None or rss > self.peak):
                self.peak = rss
            time.sleep(self.interval)

    def __enter__(self) -> "RssSampler":
        _malloc_trim()
        self.base = self.peak = current_rss()
        if self.base is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        rss = current_rss()
        if rss is not None and self.peak is not None:
            self.peak = max(self.peak, rss)

    @property
    def peak_extra(self) -> Optional[int]:
        if self.base is None or self.peak is None:
            return None
        return max(0, self.peak - self.base)


class Bench:
    """What differs between CUDA and the CPU: sync, cache flush, clocks and memory figures."""

    def __init__(self, device: torch.device, flush_bytes: int) -> None:
        self.device = device
        self.is_cuda = device.type == "cuda"
        self.flush_bytes = flush_bytes
        self._flush_buf = (torch.empty(flush_bytes // 4, dtype=torch.float32, device=device)
                           if flush_bytes > 0 else None)
        self.memory_kind = ("cuda max_memory_allocated - memory_allocated before the call"
                            if self.is_cuda else
                            "CPU: peak growth of the process RSS, sampled every 0.5 ms "
                            "(approximate)")

    def sync(self) -> None:
        if self.is_cuda:
            torch.cuda.synchronize(self.device)

    def free(self, collect: bool = False) -> None:
        """Release cached memory; ``collect`` also runs the cycle collector (slow: ~1 s with
        torch.compile loaded), needed only after an exception, whose traceback holds frames."""
        if collect:
            gc.collect()
        if self.is_cuda:
            try:
                torch.cuda.empty_cache()
            except RuntimeError:  # a broken CUDA context: the caller reports and stops
                pass
        else:
            _malloc_trim()

    def flush_cache(self) -> None:
        if self._flush_buf is not None:
            self._flush_buf.zero_()

    def wall(self, fn: Callable[[], Any]) -> float:
        """Seconds one call takes, synchronised on both sides."""
        self.sync()
        start = time.perf_counter()
        fn()
        self.sync()
        return time.perf_counter() - start

    def time_reps(self, fn: Callable[[], Any], before: Callable[[], None],
                  reps: int) -> List[float]:
        """Milliseconds of ``reps`` calls of ``fn``, each after ``before()`` (not timed).

        The cycle collector is off meanwhile (as in ``timeit``): with torch.compile loaded a
        full collection takes about a second and would land in some repetition.
        """
        gc_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._time_reps(fn, before, reps)
        finally:
            if gc_enabled:
                gc.enable()

    def _time_reps(self, fn, before, reps):
        if self.is_cuda:
            pairs = []
            for _ in range(reps):
                before()
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                pairs.append((start, end))
            self.sync()
            return [s.elapsed_time(e) for s, e in pairs]
        times = []
        for _ in range(reps):
            before()
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return times

    def peak_extra(self, fn: Callable[[], Any]) -> Tuple[Optional[int], float]:
        """Peak bytes allocated during ``fn()`` beyond what was allocated before it, and the
        seconds the call took (synchronised; a rough figure, not a measurement)."""
        if self.is_cuda:
            self.sync()
            base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            start = time.perf_counter()
            fn()
            self.sync()
            seconds = time.perf_counter() - start
            return torch.cuda.max_memory_allocated(self.device) - base, seconds
        with RssSampler() as sampler:
            start = time.perf_counter()
            fn()
            seconds = time.perf_counter() - start
        return sampler.peak_extra, seconds

    def copy_bandwidth(self, nbytes: int, reps: int = 10) -> Dict[str, float]:
        """Device-to-device copy of an ``nbytes`` tensor; counts read + write bytes."""
        src = torch.ones(nbytes // 4, dtype=torch.float32, device=self.device)
        dst = torch.empty_like(src)
        for _ in range(2):
            dst.copy_(src)
        times = self.time_reps(lambda: dst.copy_(src), lambda: None, reps)
        del src, dst
        self.free()
        ms = statistics.median(times)
        return {"bytes": nbytes, "ms": ms, "gbps": 2 * nbytes / (ms * 1e-3) / GB, "reps": reps}


# --------------------------------------------------------------------------------------------
# Data, CSR and the float64 reference
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Methods
# --------------------------------------------------------------------------------------------

def eager_scores(x_src, x_dst, src, dst):
    """PyG's eager edge scoring (InnerProductDecoder without the sigmoid)."""
    return (x_src[src] * x_dst[dst]).sum(-1)


class Method:
    key = ""
    phases: Tuple[str, ...] = ("fwd", "fwdbwd")

    def __init__(self, bench: Bench) -> None:
        self.bench = bench

    @property
    def label(self) -> str:
        return self.key

    def applies(self, case: Case) -> bool:
        """False: by design no row for this case (e.g. cusparse_sort in sorted order)."""
        return True

    def unsupported(self, case: Case) -> Optional[str]:
        """A reason to show the row as n/a (e.g. a dtype the method lacks)."""
        return None

    def start_workload(self, wl: Workload) -> None:
        pass

    def prepare(self, case: Case) -> None:
        """Work done outside the timed region, once per case."""

    def forward(self, case: Case) -> torch.Tensor:
        raise NotImplementedError

    def scores(self, out: torch.Tensor, case: Case) -> torch.Tensor:
        """The output as one score per edge, in edge order (for the check)."""
        return out

    def context(self):
        return contextlib.nullcontext()

    def note(self, case: Case) -> str:
        return ""


class PygEdgeDot(Method):
    key = "pyg_edgedot"
    validate = True

    @property
    def label(self) -> str:
        return "pyg_edgedot" if self.validate else "pyg_edgedot validate=False"

    def forward(self, case):
        from pyg_edgedot import edge_dot
        return edge_dot(case.x_src, case.x_dst, case.edge_index, validate=self.validate)

    def note(self, case):
        if self.validate and self.bench.is_cuda:
            return "validate=True (default): one device-to-host sync per call"
        return ""


class PygEdgeDotNoValidate(PygEdgeDot):
    key = "pyg_edgedot_novalidate"
    validate = False


@contextlib.contextmanager
def deterministic_algorithms():
    """torch.use_deterministic_algorithms(True) inside; the previous setting restored after."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


class PygEdgeDotDeterministic(PygEdgeDot):
    key = "pyg_edgedot_deterministic"

    @property
    def label(self) -> str:
        return "pyg_edgedot deterministic"

    def applies(self, case):
        return case.wl.deterministic_row

    def context(self):
        return deterministic_algorithms()

    def note(self, case):
        return ("under torch.use_deterministic_algorithms(True), flag restored after; "
                "fill_uninitialized_memory left at its default (new outputs are NaN-filled)")


class Eager(Method):
    key = "eager"

    @property
    def label(self) -> str:
        return "PyG eager"

    def forward(self, case):
        return eager_scores(case.x_src, case.x_dst, case.src, case.dst)


class Compiled(Method):
    key = "compile"

    def __init__(self, bench):
        super().__init__(bench)
        self._fn = None

    @property
    def label(self) -> str:
        return "torch.compile"

    def start_workload(self, wl):
        # A fresh cache per workload: dynamic=False recompiles for every shape, and dynamo
        # falls back to eager silently past its recompile limit. Both orders share the graphs.
        torch._dynamo.reset()
        self._fn = torch.compile(eager_scores, dynamic=False)

    def forward(self, case):
        return self._fn(case.x_src, case.x_dst, case.src, case.dst)

    def note(self, case):
        return "dynamic=False, default mode; compile (first call per phase) not timed"


class CuSparse(Method):
    key = "cusparse"
    phases = ("fwd",)

    @property
    def label(self) -> str:
        return "cuSPARSE sampled_addmm" if self.bench.is_cuda else "sampled_addmm (CPU)"

    def unsupported(self, case):
        if case.wl.torch_dtype != torch.float32:
            return "float32 only"
        return None

    def prepare(self, case):
        if case.csr is None:
            case.csr, case.csr_inverse = build_csr(case.src, case.dst, case.wl.num_src,
                                                   case.wl.num_dst, case.x_src.dtype)

    def forward(self, case):
        return torch.sparse.sampled_addmm(case.csr, case.x_src, case.x_dst.t(), beta=0.0)

    def scores(self, out, case):
        return out.values()[case.csr_inverse]

    def note(self, case):
        nnz = case.csr._nnz() if case.csr is not None else None
        dup = "" if nnz is None else (
            f"; {case.wl.num_edges - nnz:,} duplicate edges merged, {nnz:,} outputs")
        return ("CSR (sorted, deduplicated) built outside the timed region; output in CSR "
                "order, a new CSR tensor (crow/col copied)" + dup)


class CuSparseSort(CuSparse):
    key = "cusparse_sort"

    @property
    def label(self) -> str:
        return "cuSPARSE + sort" if self.bench.is_cuda else "sampled_addmm + sort (CPU)"

    def applies(self, case):
        return case.order == "random"

    def prepare(self, case):
        pass

    def forward(self, case):
        csr, inverse = build_csr(case.src, case.dst, case.wl.num_src, case.wl.num_dst,
                                 case.x_src.dtype)
        out = torch.sparse.sampled_addmm(csr, case.x_src, case.x_dst.t(), beta=0.0)
        return out.values()[inverse]

    def scores(self, out, case):
        return out

    def note(self, case):
        return ("includes the CSR build (torch.unique: sort + merge duplicates) and the "
                "gather back to edge order (one score per edge)")


METHODS = [PygEdgeDot, PygEdgeDotNoValidate, PygEdgeDotDeterministic, Eager, Compiled,
           CuSparse, CuSparseSort]
METHOD_KEYS = [m.key for m in METHODS]


# --------------------------------------------------------------------------------------------
# Running one measurement
# --------------------------------------------------------------------------------------------

FATAL_MARKERS = ("illegal memory access", "device-side assert", "unspecified launch failure",
                 "misaligned address", "illegal instruction")


@dataclass
class Options:
    warmups: int = 3
    reps: Optional[int] = None
    min_reps: int = 3
    max_reps: int = 200
    target_s: float = 0.4
    slow_call_s: float = 0.25   # after a warm-up call slower than this, no more warm-ups
    inject_oom: Optional[str] = None


def _short(err: BaseException) -> str:
    lines = [ln for ln in str(err).strip().splitlines() if ln.strip()]
    return f"{type(err).__name__}: {lines[0] if lines else ''}"[:300]


def _is_oom(err: BaseException) -> bool:
    return isinstance(err, OutOfMemoryError) or "out of memory" in str(err).lower()


def _should_inject(opts: Options, method: Method, case: Case, phase: str) -> bool:
    if not opts.inject_oom:
        return False
    target = opts.inject_oom.split(":")
    key, _, wl = target[0].partition("@")
    return (key == method.key and wl in ("", case.wl.name)
            and (len(target) == 1 or target[1] == phase))


def run_phase(bench: Bench, case: Case, method: Method, phase: str, ref: Reference,
              opts: Options, log: Callable[[str], None]) -> Dict[str, Any]:
    """Warm up, measure peak memory once, check the result, then time repetitions."""
    inject = _should_inject(opts, method, case, phase)
    slot: Dict[str, Any] = {}

    def call() -> None:
        if inject:
            raise OutOfMemoryError("injected by --inject-oom (test of the OOM path)")
        if phase == "fwd":
            with torch.no_grad():
                slot["out"] = method.forward(case)
        else:
            out = method.forward(case)
            out.backward(case.grad)
            slot["out"] = out

    def before() -> None:  # outside the timed region
        slot.clear()
        case.clear_grads()
        bench.flush_cache()

    rec: Dict[str, Any] = {"status": "ok"}
    failed = False
    try:
        with method.context():
            # Warm-up 1: one-time costs (torch.compile compiles here); not an estimate.
            before()
            first = bench.wall(call)
            # Warm-up 2 measures the peak memory; its output and gradients are checked.
            before()
            peak, second = bench.peak_extra(call)
        err = ref.check_scores(method.scores(slot["out"], case))
        if phase == "fwdbwd":
            err = max(err, ref.check_grads())
        with method.context():
            warm = [second]  # more warm-ups, unless the calls are slow anyway
            while len(warm) < opts.warmups - 1 and warm[-1] < opts.slow_call_s:
                before()
                warm.append(bench.wall(call))
            estimate = max(min(warm), 1e-6)
            reps = opts.reps or int(min(opts.max_reps, max(opts.min_reps,
                                                           math.ceil(opts.target_s / estimate))))
            times = bench.time_reps(call, before, reps)
        rec.update(
            ms=statistics.median(times), min_ms=min(times), max_ms=max(times), reps=reps,
            warmups=1 + len(warm), first_call_s=first, peak_extra_bytes=peak,
            check={"max_err": err if math.isfinite(err) else None, "tol": ref.tol,
                   "ok": bool(err <= ref.tol)})
    except Exception as err:  # noqa: BLE001 -- one failing method must not stop the run
        failed = True
        if _is_oom(err):
            rec = {"status": "oom", "message": _short(err)}
        else:
            rec = {"status": "error", "message": _short(err)}
            if any(m in str(err).lower() for m in FATAL_MARKERS):
                rec["fatal"] = True
    finally:
        slot.clear()
        case.clear_grads()
    bench.free(collect=failed)  # after the except block: no traceback holds tensors now
    log(_phase_line(case, method, phase, rec))
    return rec


def _phase_line(case: Case, method: Method, phase: str, rec: Dict[str, Any]) -> str:
    head = f"{case.wl.name}/{case.order:<6} {method.key:<26} {phase:<6}"
    if rec["status"] != "ok":
        return f"{head} {rec['status'].upper()}: {rec.get('message', '')}"
    chk = rec["check"]
    err = "nan/inf" if chk["max_err"] is None else f"{chk['max_err']:.1e}"
    peak = rec["peak_extra_bytes"]
    peak = "n/a" if peak is None else f"{peak / MB:,.1f} MB"
    return (f"{head} 1st call {rec['first_call_s']:.3f} s, {rec['warmups']} warm-up(s), "
            f"{rec['reps']} reps: median {rec['ms']:.3f} ms, peak +{peak}, "
            f"check {'ok' if chk['ok'] else 'FAIL'} ({err})")


# --------------------------------------------------------------------------------------------
# Workloads, the giant check, the sampled_addmm probe
# --------------------------------------------------------------------------------------------

class Run:
    """State of one benchmark run: the JSON document, the clock, the budget and the log."""

    def __init__(self, bench: Bench, opts: Options, doc: Dict[str, Any], out_path: Path,
                 time_budget: Optional[float]) -> None:
        self.bench = bench
        self.opts = opts
        self.doc = doc
        self.out_path = out_path
        self.time_budget = time_budget
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def log(self, msg: str) -> None:
        print(f"[{self.elapsed():7.1f} s] {msg}", flush=True)

    def over_budget(self, what: str) -> bool:
        if self.time_budget is None or self.elapsed() < self.time_budget:
            return False
        reason = (f"time budget of {self.time_budget:.0f} s used up ({self.elapsed():.0f} s "
                  "elapsed): not started")
        self.doc["skipped"].append({"what": what, "reason": reason})
        self.log(f"SKIPPED {what}: {reason}")
        self.save()
        return True

    def save(self) -> None:
        self.doc["elapsed_s"] = round(self.elapsed(), 1)
        write_json(self.out_path, self.doc)


def run_workload(run: Run, wl: Workload, methods: List[Method], orders: List[str]) -> bool:
    """All orders x methods of one workload. False if the device is broken (stop the run)."""
    bench = run.bench
    wanted = [o for o in wl.orders if o in orders]
    if not wanted or run.over_budget(wl.name):
        return True
    for m in methods:
        m.start_workload(wl)
    x_src, x_dst, edge_index, grad = make_inputs(wl, bench.device)
    try:
        for order in wanted:
            if order != wanted[0] and run.over_budget(f"{wl.name}/{order}"):
                break
            if order == "sorted":
                edge_index, grad = sort_by_source(edge_index, grad, wl.num_dst)
                bench.free()
            case = Case(wl, order, x_src, x_dst, edge_index, grad)
            ok = run_case(run, case, methods)
            del case
            if not ok:
                return False
    finally:
        del x_src, x_dst, edge_index, grad
        bench.free(collect=True)
    return True


def run_case(run: Run, case: Case, methods: List[Method]) -> bool:
    bench, wl = run.bench, case.wl
    bw = run.doc["copy_bandwidth"]["gbps"]
    fl = floors(wl, bw)
    bench.sync()
    inputs = torch.cuda.memory_allocated(bench.device) if bench.is_cuda else None
    rec: Dict[str, Any] = {
        "workload": wl.name, "order": case.order, "num_src": wl.num_src,
        "num_dst": wl.num_dst, "num_edges": wl.num_edges, "dim": wl.dim, "dtype": wl.dtype,
        "index_dtype": wl.index_dtype, "bipartite": wl.bipartite,
        "features": "separate x_src and x_dst" + ("" if wl.bipartite else " of the same N"),
        "out_bytes": fl["out_bytes"], "out_grad_bytes": fl["out_grad_bytes"],
        "fwd_bytes": fl["fwd_bytes"], "floor": fl, "allocated_before_bytes": inputs,
        "methods": [],
    }
    run.log(f"== {wl.name} {case.order}: {wl.describe()}; output {fl['out_bytes'] / MB:,.1f} "
            f"MB, output+grads {fl['out_grad_bytes'] / MB:,.1f} MB; floors at {bw:,.0f} GB/s: "
            f"fwd {fl['fwd_ms']:.3f} ms, fwd+bwd {fl['fwdbwd_ms']:.3f} ms")
    ref = Reference(case)
    fatal = False
    for method in methods:
        if not method.applies(case):
            continue
        mrec: Dict[str, Any] = {"method": method.key, "label": method.label}
        reason = method.unsupported(case)
        if reason is not None:
            mrec.update(note=reason, **{p: {"status": "n/a", "message": reason}
                                        for p in method.phases})
        else:
            try:
                method.prepare(case)
            except Exception as err:  # noqa: BLE001
                msg = f"prepare failed: {_short(err)}"
                mrec.update({p: {"status": "oom" if _is_oom(err) else "error", "message": msg}
                             for p in method.phases})
                run.log(f"{wl.name}/{case.order} {method.key}: {msg}")
            else:
                for phase in method.phases:
                    mrec[phase] = run_phase(bench, case, method, phase, ref, run.opts, run.log)
                    fatal = fatal or mrec[phase].get("fatal", False)
                    if fatal:
                        break
            mrec["note"] = method.note(case)
        rec["methods"].append(mrec)
        if fatal:
            break
    case.csr = case.csr_inverse = None
    add_derived(rec)
    run.doc["results"].append(rec)
    if fatal:
        run.doc["aborted"] = (f"a fatal device error in {wl.name}/{case.order}; the CUDA "
                              "context is unusable, so the run stopped here")
    run.save()
    print(format_table([rec], run.doc), flush=True)
    return not fatal


def add_derived(rec: Dict[str, Any]) -> None:
    """Speed-ups over eager, memory ratios and bandwidth, from the raw figures."""
    eager = next((m for m in rec["methods"] if m["method"] == "eager"), None)
    for m in rec["methods"]:
        for phase, size in (("fwd", rec["out_bytes"]), ("fwdbwd", rec["out_grad_bytes"])):
            r = m.get(phase)
            ok = r is not None and r.get("status") == "ok"
            base = eager.get(phase) if eager else None
            m[f"speedup_{phase}"] = (base["ms"] / r["ms"] if ok and base
                                     and base.get("status") == "ok" else None)
            peak = r.get("peak_extra_bytes") if ok else None
            m[f"peak_ratio_{phase}"] = peak / size if peak is not None else None
        fwd = m.get("fwd")
        m["fwd_gbps"] = (rec["fwd_bytes"] / (fwd["ms"] * 1e-3) / GB
                         if fwd and fwd.get("status") == "ok" else None)


def run_giant(run: Run, spec: GiantSpec) -> None:
    """One pyg_edgedot forward over spec.num_edges edges, checked on sampled edges."""
    from pyg_edgedot import edge_dot

    bench = run.bench
    E, N, D = spec.num_edges, spec.num_nodes, spec.dim
    dtype, index_dtype = getattr(torch, spec.dtype), getattr(torch, spec.index_dtype)
    isz = torch.empty((), dtype=dtype).element_size()
    iisz = torch.empty((), dtype=index_dtype).element_size()
    rec: Dict[str, Any] = {"num_nodes": N, "num_edges": E, "dim": D, "dtype": spec.dtype,
                           "index_dtype": spec.index_dtype, "scaled_down": spec.scaled_down,
                           "num_samples": spec.num_samples}
    run.doc["giant"] = rec
    what = f"giant: E={E:,} ({'scaled down' if spec.scaled_down else '2^31 + 1'}), N={N:,}, " \
           f"D={D}, {spec.dtype}, {spec.index_dtype} indices"
    need = 2 * E * iisz + 2 * E * isz + 2 * N * D * isz + (4 << 30 if bench.is_cuda else 0)
    rec["bytes_needed_estimate"] = need
    if bench.is_cuda:
        bench.free(collect=True)
        free, _ = torch.cuda.mem_get_info(bench.device)
        if free < need:
            rec.update(status="skipped", message=f"needs ~{need / GB:.1f} GB, the GPU has "
                                                 f"{free / GB:.1f} GB free")
            run.log(f"SKIPPED {what}: {rec['message']}")
            run.save()
            return
    run.log(f"== {what}")
    slot: Dict[str, Any] = {}
    x_src = x_dst = edge_index = out = None
    try:
        gen = torch.Generator(device=bench.device).manual_seed(3)
        x_src = torch.randn(N, D, generator=gen, device=bench.device).to(dtype)
        x_dst = torch.randn(N, D, generator=gen, device=bench.device).to(dtype)
        edge_index = torch.empty(2, E, dtype=index_dtype, device=bench.device)
        chunk = 1 << 28
        for row in range(2):
            for start in range(0, E, chunk):
                edge_index[row, start:start + chunk].random_(0, N, generator=gen)

        def call():
            with torch.no_grad():
                slot["out"] = edge_dot(x_src, x_dst, edge_index)

        def before():
            slot.clear()
            bench.flush_cache()

        first = bench.wall(call)
        out = slot["out"]
        assert out.shape == (E,) and out.dtype == dtype, (out.shape, out.dtype)
        forced = [p for p in (0, 2**31 - 2, 2**31 - 1, 2**31, E - 1) if p < E]
        cpu_gen = torch.Generator().manual_seed(4)
        pos = torch.cat([torch.tensor(forced),
                         torch.randint(0, E, (spec.num_samples - len(forced),),
                                       generator=cpu_gen)]).to(bench.device)
        ref, abs_sum = edge_reference(x_src, x_dst, edge_index[0], edge_index[1], pos)
        err = normalised_error(out[pos], ref, abs_sum)
        tol = tolerance(dtype)
        out = None
        times = bench.time_reps(call, before, 3)
        ms = statistics.median(times)
        nominal = 2 * E * D * isz + 2 * E * iisz + E * isz
        rec.update(status="ok", first_call_s=first, ms=ms, reps=3, forced_positions=forced,
                   max_err=err if math.isfinite(err) else None, tol=tol,
                   passed=bool(err <= tol), fwd_gbps=nominal / (ms * 1e-3) / GB)
        run.log(f"giant: {ms:.1f} ms per forward ({rec['fwd_gbps']:,.3g} GB/s nominal), "
                f"{spec.num_samples} sampled outputs (incl. edges {forced}) vs float64: "
                f"{'PASS' if rec['passed'] else 'FAIL'} (max err {err:.1e}, tol {tol:.1e})")
    except Exception as err:  # noqa: BLE001
        status = "oom" if _is_oom(err) else "error"
        rec.update(status=status, message=_short(err))
        run.log(f"giant: {status.upper()}: {rec['message']}")
        if any(m in str(err).lower() for m in FATAL_MARKERS):
            run.doc["aborted"] = "a fatal device error in the giant check"
    finally:
        slot.clear()
    x_src = x_dst = edge_index = out = None  # noqa: F841 -- frees ~22 GB before what follows
    bench.free(collect=True)
    run.save()


def probe_sampled_addmm(bench: Bench) -> Dict[str, Any]:
    """What sampled_addmm does with duplicate and unsorted columns in a row (tiny, exact)."""
    device = bench.device
    crow = torch.tensor([0, 4, 6, 6], device=device)
    col = torch.tensor([3, 0, 3, 1, 2, 2], device=device)  # row 0: unsorted, 3 twice
    rows = torch.tensor([0, 0, 0, 0, 1, 1], device=device)
    x = torch.randn(3, 5, device=device, dtype=torch.float64).float()
    y = torch.randn(4, 5, device=device, dtype=torch.float64).float()
    expected = (x[rows].double() * y[col].double()).sum(-1)
    res: Dict[str, Any] = {}
    try:
        mask = sparse_csr(crow, col, torch.ones(6, device=device), (3, 4))
        out = torch.sparse.sampled_addmm(mask, x, y.t(), beta=0.0)
        bench.sync()
        got = out.values().double()
        res.update(status="ok", per_entry_dot=bool(torch.allclose(got, expected, atol=1e-5)),
                   values=got.tolist(), expected=expected.tolist(),
                   col_indices=out.col_indices().tolist())
        res["summary"] = ("each stored entry (duplicates and unsorted columns included) gets "
                          "its own dot product" if res["per_entry_dot"] else
                          "duplicates / unsorted columns are NOT computed per entry")
    except Exception as err:  # noqa: BLE001
        res.update(status="error", message=_short(err))
    return res


# --------------------------------------------------------------------------------------------
# Output: JSON, table, plot
# --------------------------------------------------------------------------------------------

def _finite(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def write_json(path: Path, doc: Dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_finite(doc), indent=1, allow_nan=False))
    os.replace(tmp, path)


def _fmt(value: Optional[float], spec: str, width: int) -> str:
    return f"{'-' if value is None else format(value, spec):>{width}}"


def _phase_cell(m: Dict[str, Any], phase: str, width: int = 9) -> str:
    r = m.get(phase)
    if r is None:
        return f"{'-':>{width}}"
    if r["status"] != "ok":
        return f"{r['status'].upper():>{width}}"
    return _fmt(r["ms"], ".3f", width)


def _peak_cell(m: Dict[str, Any], phase: str) -> str:
    r = m.get(phase)
    if r is None or r.get("status") != "ok" or r.get("peak_extra_bytes") is None:
        return f"{'-':>10}"
    return _fmt(r["peak_extra_bytes"] / MB, ",.1f", 10)


def _gbps_cell(gbps: Optional[float]) -> str:
    return _fmt(gbps, ",.0f" if gbps is None or gbps >= 10 else ".2f", 7)


def _check_cell(m: Dict[str, Any]) -> str:
    checks = [m[p]["check"] for p in ("fwd", "fwdbwd")
              if m.get(p) and m[p].get("status") == "ok"]
    if not checks:
        return "-"
    return "ok" if all(c["ok"] for c in checks) else "FAIL"


def table_header(doc: Dict[str, Any]) -> str:
    s = doc["settings"]
    bw = doc["copy_bandwidth"]
    lines = [
        f"pyg_edgedot benchmark on {doc['device']['name']} ({doc['device']['type']}); "
        f"pyg_edgedot backends {doc['pyg_edgedot']['backends']}",
        f"  Features: separate x_src and x_dst tensors (same N unless bipartite), torch.randn; "
        f"edges torch.randint (uniform); 'sorted' = same edges in (src, dst) order.",
        f"  fwd = forward under no_grad; f+b = forward with requires_grad + out.backward(grad) "
        f"(grads of x_src and x_dst). Times: median ms ({s['clock']}), after warm-up, "
        f"{s['flush_bytes'] / MB:.0f} MB cache flush before each rep.",
        f"  xE = speed-up over PyG eager in the same order. Peak MB = extra memory during one "
        f"call: {s['memory_kind']}.",
        "  xOut = peak / output size (fwd) and peak / (output + gradients) (f+b). "
        f"GB/s = (2*E*D*isz + 2*E*idx_isz + E*isz) / fwd time; measured copy bandwidth "
        f"{bw['gbps']:,.0f} GB/s ({bw['bytes'] / GB:.2f} GB, read+write).",
        "  chk = output (and gradients) vs float64 on sampled edges/rows.",
    ]
    if doc["pyg_edgedot"]["backends"].get(doc["device"]["type"]) == "python":
        lines.append("  WARNING: pyg_edgedot runs its pure-PyTorch fallback on this device, "
                     "not the fused kernel: " + str(doc["pyg_edgedot"]["state"]))
    return "\n".join(lines)


TABLE_COLUMNS = (f"{'workload':<8} {'order':<6} {'method':<33} {'fwd ms':>9} {'f+b ms':>9} "
                 f"{'xE fwd':>7} {'xE f+b':>7} {'peak MB fwd':>11} {'peak MB f+b':>11} "
                 f"{'xOut fwd':>8} {'xOut f+b':>8} {'GB/s':>7} {'chk':>4}")


def format_table(records: List[Dict[str, Any]], doc: Dict[str, Any],
                 header: bool = False) -> str:
    lines = [table_header(doc), ""] if header else []
    lines.append(TABLE_COLUMNS)
    notes: Dict[str, int] = {}
    for rec in records:
        lines.append(f"{rec['workload']} {rec['order']}: {rec['num_src']:,} x {rec['num_dst']:,}"
                     f" nodes, E={rec['num_edges']:,}, D={rec['dim']}, {rec['dtype']}; output "
                     f"{rec['out_bytes'] / MB:,.1f} MB, output+grads "
                     f"{rec['out_grad_bytes'] / MB:,.1f} MB; floor fwd "
                     f"{rec['floor']['fwd_ms']:.3f} ms, f+b {rec['floor']['fwdbwd_ms']:.3f} ms")
        for m in rec["methods"]:
            mark = ""
            if m.get("note"):
                mark = f" [{notes.setdefault(m['note'], len(notes) + 1)}]"
            lines.append(
                f"{rec['workload']:<8} {rec['order']:<6} {(m['label'] + mark):<33} "
                f"{_phase_cell(m, 'fwd')} {_phase_cell(m, 'fwdbwd')} "
                f"{_fmt(m.get('speedup_fwd'), '.2f', 6)}x "
                f"{_fmt(m.get('speedup_fwdbwd'), '.2f', 6)}x "
                f"{_peak_cell(m, 'fwd'):>11} {_peak_cell(m, 'fwdbwd'):>11} "
                f"{_fmt(m.get('peak_ratio_fwd'), '.2f', 8)} "
                f"{_fmt(m.get('peak_ratio_fwdbwd'), '.2f', 8)} "
                f"{_gbps_cell(m.get('fwd_gbps'))} {_check_cell(m):>4}")
            for phase in ("fwd", "fwdbwd"):
                r = m.get(phase)
                if r and r.get("status") in ("oom", "error"):
                    lines.append(f"{'':<16}{phase}: {r['status']}: {r.get('message', '')}")
    for note, num in notes.items():
        lines.append(f"  [{num}] {note}")
    return "\n".join(lines)


def format_report(doc: Dict[str, Any]) -> str:
    parts = [format_table(doc["results"], doc, header=True)]
    g = doc.get("giant")
    if g:
        head = (f"giant check: E={g['num_edges']:,}{' (scaled down)' if g['scaled_down'] else ''}"
                f", N={g['num_nodes']:,}, D={g['dim']}, {g['dtype']}, {g['index_dtype']} "
                "indices: ")
        if g.get("status") == "ok":
            parts.append(head + f"{g['ms']:.2f} ms per forward ({g['fwd_gbps']:,.3g} GB/s "
                         f"nominal), {g['num_samples']} samples vs float64: "
                         f"{'PASS' if g['passed'] else 'FAIL'} "
                         f"(max err {_fmt(g['max_err'], '.1e', 0)}, tol {g['tol']:.1e})")
        else:
            parts.append(head + f"{g.get('status', '?').upper()}: {g.get('message', '')}")
    p = doc.get("sampled_addmm_probe")
    if p:
        parts.append("sampled_addmm probe (duplicate + unsorted columns in one row): "
                     + (p.get("summary") or p.get("message", "")))
    for s in doc.get("skipped", []):
        parts.append(f"SKIPPED {s['what']}: {s['reason']}")
    if doc.get("aborted"):
        parts.append(f"ABORTED: {doc['aborted']}")
    return "\n".join(parts)


def plot(doc: Dict[str, Any], path: Path) -> None:
    """Speed-up over eager per workload and order, per method; fwd and fwd+bwd panels."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = doc["results"]
    labels: Dict[str, str] = {}
    for rec in records:
        for m in rec["methods"]:
            if m["method"] != "eager":
                labels.setdefault(m["method"], m["label"])
    keys = [k for k in METHOD_KEYS if k in labels]
    groups = [f"{r['workload']}\n{r['order']}" for r in records]
    fig, axes = plt.subplots(2, 1, figsize=(max(8.0, 1.1 * len(groups) + 2), 8.5), sharex=True)
    width = 0.8 / max(1, len(keys))
    for ax, phase, title in zip(axes, ("fwd", "fwdbwd"), ("forward", "forward + backward")):
        values = []
        for i, key in enumerate(keys):
            xs, ys = [], []
            for g, rec in enumerate(records):
                m = next((m for m in rec["methods"] if m["method"] == key), None)
                v = m.get(f"speedup_{phase}") if m else None
                if v:
                    xs.append(g - 0.4 + width * (i + 0.5))
                    ys.append(v)
            values += ys
            bars = ax.bar(xs, ys, width, label=labels[key])
            for bar, v in zip(bars, ys):
                ax.annotate(f"{v:.2g}", (bar.get_x() + bar.get_width() / 2, v), ha="center",
                            va="bottom", fontsize=6, rotation=90, xytext=(0, 2),
                            textcoords="offset points")
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_yscale("log")
        lo = min(values + [1.0]) / 1.6
        hi = max(values + [1.0]) * 2.5
        ax.set_ylim(lo, hi)
        for g, rec in enumerate(records):
            eager = next((m for m in rec["methods"] if m["method"] == "eager"), None)
            r = eager.get(phase) if eager else None
            if r is None or r.get("status") != "ok":
                why = r["status"].upper() if r else "not run"
                ax.text(g, math.sqrt(lo * hi), f"eager {why}:\nno speed-up", ha="center",
                        va="center", fontsize=7, color="dimgray")
        ax.set_ylabel(f"speed-up over PyG eager\n({title}, log scale)")
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[-1].set_xticks(range(len(groups)))
    axes[-1].set_xticklabels(groups, fontsize=8)
    handles, names = axes[0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, names, loc="lower center", ncol=min(4, len(handles)), fontsize=8)
    if not records:
        axes[0].text(0.5, 0.5, "no results", transform=axes[0].transAxes, ha="center")
    fig.suptitle(f"pyg_edgedot.edge_dot vs peers on {doc['device']['name']} "
                 f"({doc['created'][:10]}); higher is better")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    plt.close(fig)


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------

def device_info(device: torch.device) -> Dict[str, Any]:
    info: Dict[str, Any] = {"type": device.type}
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(name=props.name, capability=f"{props.major}.{props.minor}",
                    total_memory_bytes=props.total_memory,
                    multiprocessors=props.multi_processor_count,
                    l2_cache_bytes=getattr(props, "L2_cache_size", None))
    else:
        info.update(name=f"CPU {platform.processor() or platform.machine()}",
                    cores=os.cpu_count(), torch_threads=torch.get_num_threads())
    return info


def software_info() -> Dict[str, Any]:
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda}
    for name in ("triton", "torch_geometric"):
        try:
            info[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001
            info[name] = None
    return info


def default_out_path(device_name: str, device_type: str, quick: bool) -> Path:
    tag = "cpu" if device_type == "cpu" else (
        re.sub(r"[^a-z0-9]+", "_", device_name.lower()).replace("nvidia_", "").strip("_")
        or "cuda")
    if quick:
        tag += "_quick"
    stem = f"{tag}_{_dt.date.today():%Y%m%d}"
    path = RESULTS_DIR / f"{stem}.json"
    n = 2
    while path.exists():  # never overwrite an earlier run of the same day
        path = RESULTS_DIR / f"{stem}_{n}.json"
        n += 1
    return path


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cuda", "cpu"), default=None,
                   help="default: cuda if available, else cpu")
    p.add_argument("--workloads", default=None,
                   help=f"comma-separated, from {', '.join(WORKLOADS)}, giant "
                        "(default: W1-W7 + giant on cuda, C1,C2 + giant on cpu, Q1,Q2 + giant "
                        "with --quick)")
    p.add_argument("--methods", default=",".join(METHOD_KEYS),
                   help=f"comma-separated, from {', '.join(METHOD_KEYS)}")
    p.add_argument("--orders", default="random,sorted", help="random,sorted")
    p.add_argument("--reps", type=int, default=None,
                   help="timed repetitions (default: adapted to ~0.4 s per measurement)")
    p.add_argument("--warmups", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    p.add_argument("--skip-giant", action="store_true")
    p.add_argument("--time-budget", type=float, default=None,
                   help="seconds after which no new workload starts (default: 420 on cuda, "
                        "none on cpu; negative: none)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON path (default benchmarks/results/<device>_<YYYYMMDD>.json)")
    p.add_argument("--plot", type=Path, default=None, help="PNG path (default: next to JSON)")
    p.add_argument("--floors", action="store_true",
                   help="print the floor table (markdown) for W1-W7 and exit")
    p.add_argument("--bandwidth", type=float, default=H200_COPY_GBPS,
                   help="GB/s for --floors (default: the H200's 4,300)")
    p.add_argument("--from-json", type=Path, default=None,
                   help="print the table and redraw the plot of an earlier (even partial) run")
    p.add_argument("--inject-oom", default=None, help=argparse.SUPPRESS)  # METHOD@WL[:PHASE]
    return p.parse_args(argv)


def _split(text: str, valid, what: str) -> List[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in valid]
    if bad:
        sys.exit(f"unknown {what}: {', '.join(bad)} (valid: {', '.join(valid)})")
    return items


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.floors:
        print(floors_markdown(DEFAULT_WORKLOADS["cuda"], args.bandwidth))
        return 0
    if args.from_json:
        doc = json.loads(args.from_json.read_text())
        print(format_report(doc))
        plot_path = args.plot or args.from_json.with_suffix(".png")
        plot(doc, plot_path)
        print(f"plot: {plot_path}")
        return 0

    device_type = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device_type == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda: no CUDA device is available (use --device cpu)")
    device = torch.device(device_type)
    mode = "quick" if args.quick else device_type
    names = _split(args.workloads, list(WORKLOADS) + ["giant"], "workload") \
        if args.workloads else DEFAULT_WORKLOADS[mode] + ["giant"]
    if args.skip_giant:
        names = [n for n in names if n != "giant"]
    method_keys = _split(args.methods, METHOD_KEYS, "method")
    orders = _split(args.orders, ["random", "sorted"], "order")

    print("importing pyg_edgedot (the first import on a machine compiles its kernels)...",
          flush=True)
    t0 = time.perf_counter()
    import pyg_edgedot
    from pyg_edgedot import _ops
    print(f"pyg_edgedot imported in {time.perf_counter() - t0:.1f} s; backends "
          f"{pyg_edgedot.backends()}", flush=True)

    if args.quick:
        flush_bytes, copy_bytes = 4 << 20, 16 << 20
        opts = Options(warmups=min(args.warmups, 2), reps=args.reps, min_reps=2, max_reps=5,
                       target_s=0.02)
    elif device.type == "cuda":
        flush_bytes, copy_bytes = 256 << 20, 4 << 30
        opts = Options(warmups=args.warmups, reps=args.reps, max_reps=200, target_s=0.4)
    else:
        flush_bytes, copy_bytes = 32 << 20, 256 << 20
        opts = Options(warmups=args.warmups, reps=args.reps, max_reps=20, target_s=0.5)
    opts.inject_oom = args.inject_oom
    bench = Bench(device, flush_bytes)
    info = device_info(device)
    out_path = args.out or default_out_path(info["name"], device.type, args.quick)
    plot_path = args.plot or out_path.with_suffix(".png")

    doc: Dict[str, Any] = {
        "schema": SCHEMA, "created": _dt.datetime.now().isoformat(timespec="seconds"),
        "finished": False, "command": [sys.executable] + sys.argv, "mode": mode,
        "device": info, "software": software_info(),
        "pyg_edgedot": {"backends": pyg_edgedot.backends(),
                        "state": {k: v for k, v in _ops.STATE.items()}},
        "settings": {"workloads": names, "methods": method_keys, "orders": orders,
                     "warmups": opts.warmups, "reps": opts.reps, "min_reps": opts.min_reps,
                     "max_reps": opts.max_reps, "target_s_per_measurement": opts.target_s,
                     "flush_bytes": flush_bytes,
                     "clock": "CUDA events" if bench.is_cuda else "time.perf_counter",
                     "memory_kind": bench.memory_kind,
                     "fwd": "forward under torch.no_grad()",
                     "fwdbwd": "forward with requires_grad inputs + out.backward(grad); "
                               "grads of x_src and x_dst",
                     "features": "separate x_src and x_dst (same N unless bipartite)",
                     "sorted_order": "same edges sorted by (src, dst); grad permuted alike"},
        "copy_bandwidth": None, "results": [], "giant": None, "sampled_addmm_probe": None,
        "skipped": [], "aborted": None,
    }
    budget = args.time_budget
    if budget is None:
        budget = 420.0 if device.type == "cuda" and not args.quick else -1.0
    budget = budget if budget >= 0 else None
    doc["settings"]["time_budget_s"] = budget
    run = Run(bench, opts, doc, out_path, budget)
    run.log(f"device {info['name']}; results -> {out_path}; plot -> {plot_path}")
    doc["copy_bandwidth"] = bench.copy_bandwidth(copy_bytes)
    run.log(f"copy bandwidth: {doc['copy_bandwidth']['gbps']:,.0f} GB/s "
            f"({copy_bytes / GB:.2f} GB tensor, read + write)")
    print(table_header(doc), flush=True)
    run.save()

    methods = [cls(bench) for cls in METHODS if cls.key in method_keys]
    gc.freeze()  # what exists now is never garbage: keeps later collections short
    for name in names:
        if doc["aborted"]:
            break
        failed = False
        try:
            if name == "giant":
                if not run.over_budget("giant"):
                    run_giant(run, GIANT[mode])
            elif not run_workload(run, WORKLOADS[name], methods, orders):
                break
        except Exception as err:  # noqa: BLE001 -- e.g. the inputs did not fit: go on
            failed = True
            traceback.print_exc()
            doc["skipped"].append({"what": name, "reason": f"harness error: {_short(err)}"})
            run.log(f"SKIPPED {name}: harness error: {_short(err)}")
            if any(m in str(err).lower() for m in FATAL_MARKERS):
                doc["aborted"] = f"a fatal device error in {name}"
        if failed:  # outside the except block: the traceback and its tensors are gone now
            bench.free(collect=True)
            run.save()
    if not doc["aborted"] and {"cusparse", "cusparse_sort"} & set(method_keys):
        # Last: if cuSPARSE mishandled invariant-violating input, nothing else is lost.
        doc["sampled_addmm_probe"] = probe_sampled_addmm(bench)
    doc["finished"] = not doc["aborted"]
    run.save()
    print()
    print(format_report(doc), flush=True)
    plot(doc, plot_path)
    run.log(f"done: {out_path}, {plot_path}")
    return 1 if doc["aborted"] else 0


if __name__ == "__main__":
    sys.exit(main())
