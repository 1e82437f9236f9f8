"""How benchmarks/bench_edge_dot.py runs its table: one phase of one method on one case, the
workloads in turn under a time budget, the giant check and the sampled_addmm probe."""
import math
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch

from _peers import Method
from _report import format_table, write_json
from _timing import (Bench, Options, OutOfMemoryError, failure, format_profile, is_oom,
                     measure, profile_once, short_error)
from _workloads import (GB, MB, Case, GiantSpec, Reference, Workload, edge_reference, floors,
                        make_inputs, normalised_error, sort_by_source, sparse_csr, tolerance)

def _should_inject(opts: Options, method: Method, case: Case, phase: str) -> bool:
    if not opts.inject_oom:
        return False
    target = opts.inject_oom.split(":")
    key, _, wl = target[0].partition("@")
    return (key == method.key and wl in ("", case.wl.name)
            and (len(target) == 1 or target[1] == phase))


def run_phase(bench: Bench, case: Case, method: Method, phase: str, ref: Reference,
              opts: Options, log: Callable[[str], None]) -> Dict[str, Any]:
    """One phase ('fwd' or 'fwdbwd') of one method on one case: measured, checked, logged."""
    inject = _should_inject(opts, method, case, phase)
    slot: Dict[str, Any] = {}
    phase_call = method.phase_call(case, phase)

    def call() -> None:
        if inject:
            raise OutOfMemoryError("injected by --inject-oom (test of the OOM path)")
        slot["out"] = phase_call()

    def before() -> None:  # outside the timed region
        slot.clear()
        case.clear_grads()
        bench.flush_cache()

    checked: Dict[str, float] = {}

    def check() -> None:  # the peak-memory call's output and gradients, against float64
        err = ref.check_scores(method.scores(slot["out"], case))
        if phase == "fwdbwd":
            err = max(err, ref.check_grads())
        checked["err"] = err

    failed = False
    try:
        rec = measure(bench, call, before, opts, method.context, check)
        err = checked["err"]
        rec["check"] = {"max_err": err if math.isfinite(err) else None, "tol": ref.tol,
                        "ok": bool(err <= ref.tol)}
        if opts.profile:
            try:
                with method.context():
                    rec["profile"] = profile_once(call, bench.device, top=20, before=before)
            except Exception as perr:  # noqa: BLE001 -- the profile must not cost the timing
                rec["profile_error"] = short_error(perr)
    except Exception as err:  # noqa: BLE001 -- one failing method must not stop the run
        failed = True
        rec = failure(err)
    finally:
        slot.clear()
        case.clear_grads()
    bench.free(collect=failed)  # after the except block: no traceback holds tensors now
    log(_phase_line(case, method, phase, rec))
    if "profile" in rec:
        log(format_profile(f"{case.wl.name}/{case.order} {method.key} {phase}", rec["profile"]))
    return rec


def _dropped(rec: Dict[str, Any]) -> str:
    """How many repetitions were host-bound, and whether the median leaves them out."""
    bound = rec.get("host_bound_reps", 0)
    if not bound:
        return ""
    if rec.get("dropped_reps"):
        return f" (+{rec['dropped_reps']} host-bound, dropped)"
    if bound == rec["reps"]:
        return " (all host-bound: the span includes the GPU's waits for the host)"
    return f" ({bound} host-bound, kept: too few others to drop them)"


def _phase_line(case: Case, method: Method, phase: str, rec: Dict[str, Any]) -> str:
    head = f"{case.wl.name}/{case.order:<6} {method.key:<26} {phase:<6}"
    if rec["status"] != "ok":
        return f"{head} {rec['status'].upper()}: {rec.get('message', '')}"
    chk = rec["check"]
    err = "nan/inf" if chk["max_err"] is None else f"{chk['max_err']:.1e}"
    peak = rec["peak_extra_bytes"]
    peak = "n/a" if peak is None else f"{peak / MB:,.1f} MB"
    return (f"{head} 1st call {rec['first_call_s']:.3f} s, {rec['warmups']} warm-up(s), "
            f"{rec['reps']} reps{_dropped(rec)}: median {rec['ms']:.3f} ms, peak +{peak}, "
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
                msg = f"prepare failed: {short_error(err)}"
                mrec.update({p: {"status": "oom" if is_oom(err) else "error", "message": msg}
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
        rec.update(failure(err))
        run.log(f"giant: {rec['status'].upper()}: {rec['message']}")
        if rec.pop("fatal", False):
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
        res.update(status="error", message=short_error(err))
    return res

