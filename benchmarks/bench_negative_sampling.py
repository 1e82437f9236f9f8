"""Negative sampling, side by side: PyG's negative_sampling (sparse), a plain exact
sampler, and ours (function; prebuilt NegativeSampler without / with replacement); and one
sort of the edge keys, the yardstick of the sampler's one-time build. ``ours_batch*``: one
mini-batch's draw (65,536 negatives, or E where fewer) from the prebuilt sampler; on CUDA
also ``*_index_per_call``, the same draws with the kernel building its bucket index per
call (what the one-shot function pays) instead of taking the sampler's kept one.

    python benchmarks/bench_negative_sampling.py --device cpu --threads 1 --out results.json

Graphs: Cora's size (2,708 nodes, 10,556 edges), 100K nodes / 2M edges, and on CUDA
1M nodes / 20M edges; each asks E negatives (uniform random edges, homogeneous).

``ours_*`` run the op ``negative_sample`` as registered (the fused C++ kernel on the CPU, the
CUDA kernel on CUDA, when built: ``backend`` in the output says which); ``ours_*_python`` swap
in its pure-PyTorch implementation (what a device without a compiled kernel runs).

Every method is warmed up once, then the methods run in turn, --reps rounds (so a burst of
other work on the machine hits them alike); the tables give the median and the minimum
(CUDA: events + synchronize). PyG's sampler, which takes seconds per call at 1M edges and
more, runs fewer rounds there and no warm-up (it is NumPy on the CPU, nothing to warm).

``--profile`` adds, per graph, a torch.profiler breakdown of one ``sample``, one
``sample(replace=True)`` and one build: device time by kernel (CUDA) or self CPU time by op,
and the CUDA runtime calls that wait for the device (synchronizes, device-to-host copies).
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

import torch_geometric
from torch_geometric.utils import negative_sampling as pyg_negative_sampling

from pyg_edgedot import _backend
from pyg_edgedot.ops import negative_sampling as ns_mod
from pyg_edgedot.ops.negative_sampling import NegativeSampler, negative_sampling

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import format_profile, profile_once  # noqa: E402

GRAPHS = [("cora", 2_708, 10_556), ("100k_2m", 100_000, 2_000_000),
          ("1m_20m", 1_000_000, 20_000_000)]


def plain_negative_sampling(edge_index, num_nodes, num_samples, generator=None):
    """The straightforward exact sampler: sort the edge keys once, draw random pairs,
    drop self-loops and edges (torch.searchsorted), torch.unique for distinct pairs,
    redraw until enough. Its output is SORTED by key (torch.unique), not shuffled."""
    device = edge_index.device
    keys = torch.sort(edge_index[0].long() * num_nodes + edge_index[1].long()).values
    out = torch.empty(0, dtype=torch.long, device=device)
    while out.numel() < num_samples:
        need = num_samples - out.numel()
        src = torch.randint(0, num_nodes, (int(need * 1.1) + 16,), device=device,
                            generator=generator)
        dst = torch.randint(0, num_nodes, src.shape, device=device, generator=generator)
        cand = (src * num_nodes + dst)[src != dst]
        pos = torch.searchsorted(keys, cand).clamp_(max=max(keys.numel() - 1, 0))
        if keys.numel() > 0:
            cand = cand[keys[pos] != cand]
        out = torch.unique(torch.cat([out, cand]))
    out = out[:num_samples]
    return torch.stack([out // num_nodes, out % num_nodes])


def with_draw(fn, make_draw):
    """fn with the sampler's draw (ns_mod._negative_sample) replaced by
    make_draw(the registered draw) while it runs."""
    def run():
        registered = ns_mod._negative_sample
        ns_mod._negative_sample = make_draw(registered)
        try:
            return fn()
        finally:
            ns_mod._negative_sample = registered
    return run


def python_path(fn):
    """fn with the op's pure-PyTorch implementation in place of the registered one."""
    return with_draw(fn, lambda registered: ns_mod._negative_sample_fallback)


def index_per_call(fn):
    """fn with the sampler's draw leaving out its kept bucket index (adj_index)."""
    return with_draw(fn, lambda registered: lambda *args, adj_index=None: registered(*args))


def time_once(fn, device):
    """(ms, fn's output)."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        out = fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end), out
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1e3, out


def timed_in_turn(methods, reps, device):
    """{method: ([ms per round], last output)}: a warm-up each (but a method with a reps entry
    of its own, fewer than `reps`), then `reps` rounds of every method in turn (a method with
    a reps entry of its own stops after that many)."""
    times = {name: [] for name in methods}
    last = {}
    for fn, method_reps in methods.values():
        if method_reps >= reps:
            fn()
    for round_ in range(reps):
        for name, (fn, method_reps) in methods.items():
            if round_ < method_reps:
                ms, last[name] = time_once(fn, device)
                times[name].append(ms)
    return {name: (times[name], last[name]) for name in methods}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--graphs", default=None, help="comma list of " +
                        ",".join(g[0] for g in GRAPHS))
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (CPU); default: torch's")
    parser.add_argument("--out", default=None)
    parser.add_argument("--profile", action="store_true",
                        help="print a torch.profiler breakdown of one sample, one "
                             "sample(replace=True) and one build per graph")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    wanted = args.graphs.split(",") if args.graphs else [
        g[0] for g in GRAPHS if device.type == "cuda" or g[0] != "1m_20m"]

    results = {"device": str(device), "torch": torch.__version__,
               "backend": _backend.loaded().table["negative_sampling", device.type].impl,
               "torch_geometric": torch_geometric.__version__,
               "threads": torch.get_num_threads(), "platform": platform.platform(),
               "cpu": platform.processor(), "reps": args.reps, "graphs": [],
               # other work on the machine skews CPU medians (OpenMP waits for threads)
               "loadavg_start": list(os.getloadavg())}
    if device.type == "cuda":
        results["gpu"] = torch.cuda.get_device_name(device)
    print(f"device={device} threads={torch.get_num_threads()} torch={torch.__version__} "
          f"pyg={torch_geometric.__version__} reps={args.reps} "
          f"negative_sample backend={results['backend']} loadavg={results['loadavg_start']}")
    for name, num_nodes, num_edges in GRAPHS:
        if name not in wanted:
            continue
        gen = torch.Generator().manual_seed(0)
        edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=gen).to(device)
        num = num_edges
        batch = min(num, 1 << 16)
        torch.manual_seed(0)
        sampler = NegativeSampler(edge_index, num_nodes)
        # PyG's sampler takes seconds per call at 1M edges, ~50 s at 20M
        slow = 1 if num >= 10_000_000 else 3 if num >= 1_000_000 else args.reps
        methods = {
            "pyg_sparse": (lambda: pyg_negative_sampling(edge_index, num_nodes, num), slow),
            "plain_exact": (lambda: plain_negative_sampling(edge_index, num_nodes, num),
                            args.reps),
            # one sort of the edge keys, the plain sampler's first step: what the
            # sampler's one-time build is held to
            "key_sort": (lambda: torch.sort(edge_index[0].long() * num_nodes
                                            + edge_index[1].long()).values, args.reps),
            "ours_function": (lambda: negative_sampling(edge_index, num_nodes, num), args.reps),
            "ours_sampler_build": (lambda: NegativeSampler(edge_index, num_nodes), args.reps),
            "ours_sampler": (lambda: sampler.sample(num), args.reps),
            "ours_sampler_replace": (lambda: sampler.sample(num, replace=True), args.reps),
            "ours_sampler_python": (python_path(lambda: sampler.sample(num)), args.reps),
            "ours_sampler_replace_python": (
                python_path(lambda: sampler.sample(num, replace=True)), args.reps),
            "ours_batch": (lambda: sampler.sample(batch), args.reps),
            "ours_batch_replace": (lambda: sampler.sample(batch, replace=True), args.reps),
        }
        if device.type == "cuda":
            methods["ours_batch_index_per_call"] = (
                index_per_call(lambda: sampler.sample(batch)), args.reps)
            methods["ours_batch_replace_index_per_call"] = (
                index_per_call(lambda: sampler.sample(batch, replace=True)), args.reps)
        row = {"graph": name, "num_nodes": num_nodes, "num_edges": num_edges,
               "num_samples": num, "ms": {}, "ms_min": {}, "ms_all": {}, "returned": {}}
        for method, (all_times, out) in timed_in_turn(methods, args.reps, device).items():
            row["ms"][method] = statistics.median(all_times)
            row["ms_min"][method] = min(all_times)
            row["ms_all"][method] = all_times
            if isinstance(out, torch.Tensor) and out.dim() == 2:
                row["returned"][method] = int(out.size(1))
        plain = row["ms"]["plain_exact"]
        row["speedup_vs_plain"] = {m: plain / t for m, t in row["ms"].items()
                                   if m.startswith("ours") and m != "ours_sampler_build"
                                   and not m.startswith("ours_batch")}
        results["graphs"].append(row)
        row["batch"] = batch
        print(f"\n{name}: N={num_nodes:,} E={num_edges:,} negatives={num:,} (batch {batch:,})")
        print(f"  {'method':<35}{'median ms':>11}{'min ms':>11}{'returned':>11}{'x plain':>9}")
        for method, t in row["ms"].items():
            speed = row["speedup_vs_plain"].get(method)
            speed = f"{speed:8.2f}x" if speed else ""
            print(f"  {method:<35}{t:11.3f}{row['ms_min'][method]:11.3f}"
                  f"{row['returned'].get(method, 0):11,}{speed:>9}")
        row["build_vs_key_sort"] = row["ms"]["ours_sampler_build"] / row["ms"]["key_sort"]
        print(f"  the sampler's build / one sort of the edge keys = "
              f"{row['build_vs_key_sort']:.2f}x (target <= 1)")
        if args.profile:
            row["profile"] = {}
            for label, fn in (("sample", lambda: sampler.sample(num)),
                              ("sample_replace", lambda: sampler.sample(num, replace=True)),
                              ("build", lambda: NegativeSampler(edge_index, num_nodes))):
                row["profile"][label] = profile_once(fn, device)
                print(format_profile(label, row["profile"][label]))
    results["loadavg_end"] = list(os.getloadavg())
    print(f"\nloadavg at end: {results['loadavg_end']}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
