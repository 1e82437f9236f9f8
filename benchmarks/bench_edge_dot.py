#!/usr/bin/env python
"""Benchmark ``pyg_edgedot.edge_dot`` against its peers, side by side.

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

Sections (``--sections``, default ``host,peers``):

  host     first, the host-overhead table at W1 (Q1 with --quick; W1 on the CPU too): per
           call, the host's wall time over 50 back-to-back calls without a synchronize, the
           GPU's time (CUDA events around calls queued behind a GPU sleep) and the kernels'
           time (torch.profiler), for pyg_edgedot (validate=True and False), eager and
           torch.compile, forward and forward + backward; JSON key "host_overhead". How each
           column is measured: benchmarks/_host.py. On the CPU, host time only.
  peers    the table below: every workload x edge order x method, then the giant check and
           the sampled_addmm probe; JSON keys "results", "giant", "sampled_addmm_probe".

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
* ``--profile``: after each measurement, one more call (warmed up, after the cache flush)
  under torch.profiler: the kernels by device time (ops by self CPU time on the CPU), in the
  log and with the result (JSON key "profile"): where a phase's time goes, kernel by kernel.

Outputs: a table on stdout, a JSON (written after every workload, so a killed run leaves its
results) and a PNG of speed-ups over eager. On CUDA, no new workload starts after
``--time-budget`` seconds (default 420, counted after the import of pyg_edgedot, which may
compile its kernels once per machine); what was skipped is listed. Examples::

    python benchmarks/bench_edge_dot.py                       # CUDA, everything (~8 min)
    python benchmarks/bench_edge_dot.py --workloads W1,W3 --methods pyg_edgedot,eager
    python benchmarks/bench_edge_dot.py --device cpu          # CPU sizes
    python benchmarks/bench_edge_dot.py --quick               # tiny sizes, a smoke test
    python benchmarks/bench_edge_dot.py --sections host       # the host-overhead table only
    python benchmarks/bench_edge_dot.py --floors              # the floor table for NOTES.md
    python benchmarks/bench_edge_dot.py --from-json benchmarks/results/h100.json
    python benchmarks/bench_edge_dot.py --from-json benchmarks/results/h100.json --markdown
                                                              # README's Performance tables
"""
import argparse
import datetime as _dt
import gc
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Dict, List

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _host import format_host_table, host_markdown, run_host_overhead  # noqa: E402
from _peers import METHOD_KEYS, METHODS  # noqa: E402
from _report import (default_out_path, device_info, format_report, plot, readme_tables,  # noqa: E402
                     software_info, table_header)
from _runner import Run, probe_sampled_addmm, run_giant, run_workload  # noqa: E402
from _timing import FATAL_MARKERS, Bench, Options, short_error  # noqa: E402
from _workloads import (DEFAULT_WORKLOADS, GB, GIANT, H200_COPY_GBPS,  # noqa: E402
                        WORKLOADS, floors_markdown)

SCHEMA = "pyg_edgedot-bench/1"
SECTIONS = ["host", "peers"]
HOST_WORKLOAD = {"cuda": "W1", "quick": "Q1"}  # W1 on the CPU too: it is small


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
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help="comma-separated, from host (the host-overhead table at W1, Q1 with "
                        "--quick; first), peers (the workloads x methods table, the giant "
                        "check and the sampled_addmm probe); default: both")
    p.add_argument("--reps", type=int, default=None,
                   help="timed repetitions (default: adapted to ~0.4 s per measurement)")
    p.add_argument("--warmups", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test")
    p.add_argument("--skip-giant", action="store_true")
    p.add_argument("--profile", action="store_true",
                   help="after each measurement, one more call under torch.profiler: device "
                        "time by kernel (CUDA; self CPU time by op on the CPU), printed and "
                        "saved with the result (JSON key \"profile\")")
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
    p.add_argument("--markdown", action="store_true",
                   help="with --from-json: print README's Performance tables instead (the two "
                        "orders' and, where the run has it, the host-overhead table)")
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
        if args.markdown:
            print(readme_tables(doc))
            if doc.get("host_overhead"):
                print("\n" + host_markdown(doc["host_overhead"]))
            return 0
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
    sections = _split(args.sections, SECTIONS, "section")
    if "peers" not in sections:
        names = []

    print("importing pyg_edgedot (the first import on a machine compiles its kernels)...",
          flush=True)
    t0 = time.perf_counter()
    import pyg_edgedot
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
    opts.profile = args.profile
    # each repetition queued behind a 2 ms GPU sleep: W1's calls take 0.05-0.8 ms of host time
    bench = Bench(device, flush_bytes, queue_us=0.0 if args.quick else 2000.0)
    info = device_info(device)
    out_path = args.out or default_out_path(info["name"], device.type, args.quick)
    plot_path = args.plot or out_path.with_suffix(".png")

    doc: Dict[str, Any] = {
        "schema": SCHEMA, "created": _dt.datetime.now().isoformat(timespec="seconds"),
        "finished": False, "command": [sys.executable] + sys.argv, "mode": mode,
        "device": info, "software": software_info(),
        "pyg_edgedot": {"backends": pyg_edgedot.backends()},
        "settings": {"sections": sections, "workloads": names, "methods": method_keys, "orders": orders,
                     "warmups": opts.warmups, "reps": opts.reps, "min_reps": opts.min_reps,
                     "max_reps": opts.max_reps, "target_s_per_measurement": opts.target_s,
                     "profile": opts.profile,
                     "flush_bytes": flush_bytes, "queue_us": bench.queue_us,
                     "clock": "CUDA events" if bench.is_cuda else "time.perf_counter",
                     "memory_kind": bench.memory_kind,
                     "fwd": "forward under torch.no_grad()",
                     "fwdbwd": "forward with requires_grad inputs + out.backward(grad); "
                               "grads of x_src and x_dst",
                     "features": "separate x_src and x_dst (same N unless bipartite)",
                     "sorted_order": "same edges sorted by (src, dst); grad permuted alike"},
        "copy_bandwidth": None, "host_overhead": None, "results": [], "giant": None,
        "sampled_addmm_probe": None,
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
    if "host" in sections and not run.over_budget("host"):
        host_wl = WORKLOADS[HOST_WORKLOAD["quick" if args.quick else "cuda"]]
        calls = dict(calls=10, rounds=3) if args.quick else {}
        doc["host_overhead"] = run_host_overhead(bench, host_wl, methods, run.log, **calls)
        bench.free(collect=True)
        run.save()
        print(format_host_table(doc["host_overhead"]), flush=True)
        if any(r.get("fatal") for r in doc["host_overhead"]["rows"]):
            doc["aborted"] = "a fatal device error in the host-overhead section"
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
            doc["skipped"].append({"what": name, "reason": f"harness error: {short_error(err)}"})
            run.log(f"SKIPPED {name}: harness error: {short_error(err)}")
            if any(m in str(err).lower() for m in FATAL_MARKERS):
                doc["aborted"] = f"a fatal device error in {name}"
        if failed:  # outside the except block: the traceback and its tensors are gone now
            bench.free(collect=True)
            run.save()
    if not doc["aborted"] and "peers" in sections and {"cusparse", "cusparse_sort"} & set(
            method_keys):
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
