"""The host-overhead table of benchmarks/bench_edge_dot.py (``--sections host``).

At W1 (1,024 x 768 nodes, E = 16,384, D = 128 fp32) every method's GPU work is a few
microseconds, so what a training loop pays per call is mostly the host's: Python, dispatch,
autograd, launches, and any wait for the GPU. Each method and phase ('fwd' under no_grad,
'fwdbwd' = forward + ``out.backward(grad)`` into both inputs' grads, which are set to None
before each call so that they never accumulate) is called N times back to back on the same
inputs and the same ``edge_index``, as a loop scoring a fixed edge set would. Per call:

host_us     wall time of the N calls / N. The clock starts after a synchronize and stops
            when the N-th call returns, before the closing synchronize, so only the Python
            calls are timed. N = 50 calls queue a few hundred kernels at most, well under the
            CUDA launch queue's ~1,000 entries, so a call never waits for queue space: with
            GPU work shorter than the host's, the GPU keeps up and stays idle between
            launches, and the loop times the host. A call that reads a result back (the
            default validate=True reads one flag) waits for the GPU inside the call: that is
            that setting's cost, and it is in host_us. Median of ROUNDS rounds.
gpu_us      CUDA events around the N calls / N, with a ``torch.cuda._sleep`` queued ahead of
            them for about twice the host's time, so that the host has queued every call
            before the GPU reaches the first: the span is then the GPU's own time per call,
            back to back, not the host's launch rate. A call that synchronizes defeats this;
            ``gpu_span_host_bound`` says so (the start event had completed before the host
            finished queuing), and the span then includes the GPU's waits for launches.
kernel_us   the sum of the device activities' durations per call (kernels, memsets, copies),
            from torch.profiler over N calls; ``kernels_per_call`` counts them.

On the CPU only host_us exists; the GPU columns are None (n/a).
"""
import gc
import statistics
import time
from typing import Any, Callable, Dict, List, Optional

import torch

from _peers import Method
from _timing import Bench, failure
from _workloads import Case, Workload, make_inputs

HOST_METHODS = ("pyg_edgedot", "pyg_edgedot_novalidate", "eager", "compile")
CALLS = 50
ROUNDS = 5
WARMUPS = 3
GPU_ROUNDS = 3
PHASES = ("fwd", "fwdbwd")

def _host_us(bench: Bench, call: Callable[[], Any], calls: int, rounds: int) -> List[float]:
    times = []
    for _ in range(rounds):
        bench.sync()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls * 1e6)
        bench.sync()
    return times


def _gpu_us(bench: Bench, call: Callable[[], Any], calls: int, host_us: float):
    sleep_us = 2 * host_us * calls + 1000
    spans, host_bound = [], False
    for _ in range(GPU_ROUNDS):
        bench.sync()
        bench.gpu_sleep(sleep_us)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            call()
        end.record()
        host_bound = host_bound or start.query()  # the GPU got there before the last launch
        bench.sync()
        spans.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(spans), host_bound


def _kernel_us(bench: Bench, call: Callable[[], Any], calls: int):
    from torch.profiler import ProfilerActivity, profile

    bench.sync()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            call()
        bench.sync()
    device = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_name: Dict[str, List[float]] = {}
    for e in device:
        by_name.setdefault(e.name, []).append(e.device_time_total)
    # where the device time goes: each activity's time and count per call, largest first
    activities = sorted(({"name": name, "us": sum(times) / calls, "count": len(times) / calls}
                         for name, times in by_name.items()), key=lambda a: -a["us"])
    return sum(e.device_time_total for e in device) / calls, len(device) / calls, activities


def measure_row(bench: Bench, method: Method, case: Case, phase: str, calls: int = CALLS,
                rounds: int = ROUNDS) -> Dict[str, Any]:
    phase_call = method.phase_call(case, phase)

    def call() -> None:
        case.clear_grads()
        phase_call()

    for _ in range(WARMUPS):  # torch.compile compiles in the first
        call()
    gc_enabled = gc.isenabled()
    gc.disable()  # as in Bench.time_reps: no collection inside a timed loop
    try:
        host = _host_us(bench, call, calls, rounds)
        row: Dict[str, Any] = {"status": "ok", "host_us": statistics.median(host),
                               "host_us_min": min(host), "gpu_us": None,
                               "gpu_span_host_bound": None, "kernel_us": None,
                               "kernels_per_call": None}
        if bench.is_cuda:
            row["gpu_us"], row["gpu_span_host_bound"] = _gpu_us(bench, call, calls,
                                                                row["host_us"])
            try:
                row["kernel_us"], row["kernels_per_call"], row["activities"] = _kernel_us(
                    bench, call, calls)
            except Exception as err:  # noqa: BLE001 -- the profiler is a bonus column
                row["profiler_error"] = f"{type(err).__name__}: {err}"[:300]
    finally:
        if gc_enabled:
            gc.enable()
        case.clear_grads()
    return row


def run_host_overhead(bench: Bench, wl: Workload, methods: List[Method],
                      log: Callable[[str], None], calls: int = CALLS,
                      rounds: int = ROUNDS) -> Dict[str, Any]:
    """The host_overhead record of the JSON: one row per method (of HOST_METHODS) and phase."""
    x_src, x_dst, edge_index, grad = make_inputs(wl, bench.device)
    case = Case(wl, "random", x_src, x_dst, edge_index, grad)
    doc: Dict[str, Any] = {
        "workload": wl.name, "num_src": wl.num_src, "num_dst": wl.num_dst,
        "num_edges": wl.num_edges, "dim": wl.dim, "dtype": wl.dtype, "calls": calls,
        "rounds": rounds, "unit": "microseconds per call",
        "method": {"host_us": "wall time of N back-to-back calls without a synchronize / N; "
                              "median of rounds",
                   "gpu_us": "CUDA events around N calls queued behind a GPU sleep / N",
                   "kernel_us": "sum of device activity per call (torch.profiler)"},
        "rows": []}
    for method in methods:
        if method.key not in HOST_METHODS:
            continue
        method.start_workload(wl)
        for phase in PHASES:
            try:
                row = measure_row(bench, method, case, phase, calls, rounds)
            except Exception as err:  # noqa: BLE001 -- one failing method must not stop the run
                row = failure(err)
            row.update(method=method.key, label=method.label, phase=phase)
            doc["rows"].append(row)
            log(f"host/{wl.name} {method.key:<26} {phase:<6} " + _row_summary(row))
            for act in row.get("activities", []):
                log(f"    {act['us']:8.2f} us {act['count']:5.1f}x  {act['name'][:100]}")
            if row.get("fatal"):
                return doc
    return doc


def _row_summary(row: Dict[str, Any]) -> str:
    if row["status"] != "ok":
        return f"{row['status'].upper()}: {row.get('message', '')}"
    return (f"host {row['host_us']:.1f} us, GPU {_us(row['gpu_us'])}, "
            f"kernels {_us(row['kernel_us'])}")


def _us(value: Optional[float], width: int = 0) -> str:
    return f"{'n/a' if value is None else format(value, '.1f'):>{width}}"


def _rows_by_method(host: Dict[str, Any]) -> Dict[str, Dict[str, Dict[str, Any]]]:
    """The host table's rows as {method: {phase: row}}, methods in the run's order."""
    by_method: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for row in host["rows"]:
        by_method.setdefault(row["method"], {})[row["phase"]] = row
    return by_method


def format_host_table(host: Dict[str, Any]) -> str:
    lines = [
        f"host overhead at {host['workload']}: {host['num_src']:,} x {host['num_dst']:,} nodes, "
        f"E={host['num_edges']:,}, D={host['dim']}, {host['dtype']}, the same edge_index every "
        f"call; us per call over {host['calls']} back-to-back calls",
        "  host = wall time of the calls, no synchronize inside / N (median of "
        f"{host['rounds']}); GPU = CUDA events around N calls queued behind a GPU sleep / N "
        "(* = the GPU caught up with the host: the span includes its waits for launches); "
        "kern = device time per call (torch.profiler), # = kernels per call",
        f"{'method':<28} {'fwd host':>9} {'fwd GPU':>9} {'fwd kern':>9} {'#':>4} "
        f"{'f+b host':>9} {'f+b GPU':>9} {'f+b kern':>9} {'#':>4}",
    ]
    labels = {row["method"]: row["label"] for row in host["rows"]}
    for key, phases in _rows_by_method(host).items():
        cells = []
        for phase in PHASES:
            row = phases.get(phase)
            if row is None or row["status"] != "ok":
                status = "-" if row is None else row["status"].upper()
                cells.append(f"{status:>9} {'':>9} {'':>9} {'':>4}")
                continue
            gpu = _us(row["gpu_us"]) + ("*" if row.get("gpu_span_host_bound") else "")
            count = row.get("kernels_per_call")
            cells.append(f"{_us(row['host_us'], 9)} {gpu:>9} {_us(row['kernel_us'], 9)} "
                         f"{'n/a' if count is None else format(count, '.3g'):>4}")
        lines.append(f"{labels[key]:<28} " + " ".join(cells))
    return "\n".join(lines)


# README's names of the host table's methods
_MD_LABELS = {"pyg_edgedot": "pyg_edgedot (default)",
              "pyg_edgedot_novalidate": "pyg_edgedot `validate=False`",
              "eager": "PyG eager", "compile": "`torch.compile`"}


def host_markdown(host: Dict[str, Any]) -> str:
    """README's host-overhead table: per method and phase, host and GPU µs per call (one
    decimal under 100, none above; ``*`` where the GPU span was host-bound) and the kernels'
    µs (count)."""
    def num(value: Optional[float]) -> str:
        return "n/a" if value is None else format(value, ".1f" if value < 100 else ".0f")

    rows = ["| method | fwd host | fwd GPU | fwd kernels (count) | fwd+bwd host | fwd+bwd GPU "
            "| fwd+bwd kernels (count) |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for key, phases in _rows_by_method(host).items():
        cells = [_MD_LABELS.get(key, key)]
        for phase in PHASES:
            row = phases.get(phase)
            if row is None or row["status"] != "ok":
                cells += ["-" if row is None else row["status"].upper(), "", ""]
                continue
            count = row.get("kernels_per_call")
            cells += [num(row["host_us"]),
                      num(row["gpu_us"]) + ("*" if row.get("gpu_span_host_bound") else ""),
                      f"{_us(row['kernel_us'])} ({'n/a' if count is None else f'{count:.3g}'})"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)
