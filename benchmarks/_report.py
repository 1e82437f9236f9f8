"""The output of the benchmarks: JSON (written atomically, NaN-free), the table, the PNG, and
what the device and the software were."""
import datetime as _dt
import json
import math
import os
import platform
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

import torch

from _host import format_host_table
from _peers import METHOD_KEYS
from _workloads import GB, MB

RESULTS_DIR = Path(__file__).resolve().parent / "results"

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
    if counts_host_bound(r):
        return _fmt(r["ms"], ".3f", width - 1) + "*"
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
        "  Features: separate x_src and x_dst tensors (same N unless bipartite), torch.randn; "
        "edges torch.randint (uniform); 'sorted' = same edges in (src, dst) order.",
        f"  fwd = forward under no_grad; f+b = forward with requires_grad + out.backward(grad) "
        f"(grads of x_src and x_dst). Times: median ms ({s['clock']}), after warm-up, "
        f"{s['flush_bytes'] / MB:.0f} MB cache flush before each rep"
        + (f", then a {s['queue_us'] / 1e3:g} ms GPU sleep (the host's launches stay out of "
           f"the span; a rep in which the GPU still reached the call before its last launch "
           f"is dropped)." if s.get("queue_us") else "."),
        f"  xE = speed-up over PyG eager in the same order. Peak MB = extra memory during one "
        f"call: {s['memory_kind']}.",
        "  xOut = peak / output size (fwd) and peak / (output + gradients) (f+b). "
        f"GB/s = (2*E*D*isz + 2*E*idx_isz + E*isz) / fwd time; measured copy bandwidth "
        f"{bw['gbps']:,.0f} GB/s ({bw['bytes'] / GB:.2f} GB, read+write).",
        "  chk = output (and gradients) vs float64 on sampled edges/rows. * = the median counts "
        "host-bound reps (the GPU reached the call before its last launch, and too few reps "
        "were free of that to drop them; a call that waits for the GPU always is): the span "
        "includes the GPU's waits for the host.",
    ]
    if doc["pyg_edgedot"]["backends"].get(doc["device"]["type"]) == "python":
        lines.append("  WARNING: pyg_edgedot runs its pure-PyTorch fallback on this device, "
                     "not the fused kernel (python -m pyg_edgedot says why)")
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


def _md_ms(ms: Optional[float]) -> str:
    """README's time cells: 2 significant figures under 0.1 ms, else 3 (thousands with commas)."""
    if ms is None:
        return "-"
    if ms >= 1000:
        return f"{ms:,.0f}"
    digits = (1 if ms < 0.1 else 2) - math.floor(math.log10(ms))
    return f"{ms:.{max(digits, 0)}f}"


def _md_bytes(nbytes: Optional[float]) -> str:
    if nbytes is None:
        return "-"
    if nbytes >= GB:
        return f"{nbytes / GB:.1f} GB" if nbytes < 10 * GB else f"{nbytes / GB:.0f} GB"
    return f"{nbytes / MB:.1f} MB" if nbytes < 10 * MB else f"{nbytes / MB:.0f} MB"


def counts_host_bound(rec: Dict[str, Any]) -> bool:
    """Whether the median counts host-bound repetitions: too few others were device-bound
    for ``_timing.device_bound`` to drop them (none, for a call that waits for the GPU)."""
    return bool(rec.get("host_bound_reps")) and not rec.get("dropped_reps")


def readme_tables(doc: Dict[str, Any]) -> str:
    """README's two Performance tables (random order; sorted order) from a run, with the
    fastest cell of each row and phase in bold (among the methods the table shows; cuSPARSE
    counts with its CSR free) and ``*`` on a time that counts host-bound repetitions."""
    def result(methods, key, phase):
        r = methods.get(key, {}).get(phase)
        return r if r and r.get("status") in ("ok", "oom", "n/a") else None

    def cell(methods, key, phase, best, what="ms"):
        r = result(methods, key, phase)
        if r is None:
            return "-"
        if r["status"] != "ok":
            return {"oom": "OOM", "n/a": "n/a"}[r["status"]]
        if what == "peak":
            return _md_bytes(r.get("peak_extra_bytes"))
        text = _md_ms(r["ms"]) + ("*" if counts_host_bound(r) else "")
        return f"**{text}**" if best is not None and key == best else text

    def fastest(methods, keys, phase):
        times = {k: result(methods, k, phase) for k in keys}
        times = {k: r["ms"] for k, r in times.items() if r and r["status"] == "ok"}
        return min(times, key=times.get) if times else None

    def ours_fwd(methods, best):  # pyg_edgedot's forward, default / validate=False
        return (f"{cell(methods, 'pyg_edgedot', 'fwd', best)} / "
                f"{cell(methods, 'pyg_edgedot_novalidate', 'fwd', None)}")

    def label(rec):
        nodes = (f"{rec['num_src']:,}" if rec["num_src"] == rec["num_dst"]
                 else f"{rec['num_src']:,} x {rec['num_dst']:,}")
        dtype = "" if rec["dtype"] == "float32" else f", {rec['dtype']}"
        return f"{rec['workload']} {nodes} nodes, E = {rec['num_edges']:,}, D = {rec['dim']}{dtype}"

    random_rows = ["| workload | pyg_edgedot fwd (default / `validate=False`) | eager fwd | compile "
                   "fwd | cuSPARSE fwd (CSR free / + sort) | pyg_edgedot fwd+bwd | eager fwd+bwd "
                   "| compile fwd+bwd | peak extra fwd: ours / eager |",
                   "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    sorted_rows = ["| workload | pyg_edgedot (default / `validate=False`) | compile | cuSPARSE | "
                   "pyg_edgedot fwd+bwd | compile fwd+bwd |",
                   "| --- | --- | --- | --- | --- | --- |"]
    for rec in doc.get("results", []):
        m = {x["method"]: x for x in rec["methods"]}
        if rec["order"] == "random":
            fwd = fastest(m, ("pyg_edgedot", "eager", "compile", "cusparse", "cusparse_sort"), "fwd")
            fb = fastest(m, ("pyg_edgedot", "eager", "compile"), "fwdbwd")
            random_rows.append("| " + " | ".join([
                label(rec),
                ours_fwd(m, fwd),
                cell(m, "eager", "fwd", fwd), cell(m, "compile", "fwd", fwd),
                f"{cell(m, 'cusparse', 'fwd', fwd)} / {cell(m, 'cusparse_sort', 'fwd', fwd)}",
                cell(m, "pyg_edgedot", "fwdbwd", fb), cell(m, "eager", "fwdbwd", fb),
                cell(m, "compile", "fwdbwd", fb),
                f"{cell(m, 'pyg_edgedot', 'fwd', None, 'peak')} / "
                f"{cell(m, 'eager', 'fwd', None, 'peak')}"]) + " |")
        else:
            fwd = fastest(m, ("pyg_edgedot", "compile", "cusparse"), "fwd")
            fb = fastest(m, ("pyg_edgedot", "compile"), "fwdbwd")
            sorted_rows.append("| " + " | ".join([
                label(rec),
                ours_fwd(m, fwd),
                cell(m, "compile", "fwd", fwd), cell(m, "cusparse", "fwd", fwd),
                cell(m, "pyg_edgedot", "fwdbwd", fb), cell(m, "compile", "fwdbwd", fb)]) + " |")
    return "\n".join(random_rows + [""] + sorted_rows)


def format_report(doc: Dict[str, Any]) -> str:
    parts = [table_header(doc)]
    if doc.get("host_overhead"):
        parts += ["", format_host_table(doc["host_overhead"])]
    if "peers" in doc["settings"].get("sections", ["peers"]):
        parts += ["", format_table(doc["results"], doc)]
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


def default_out_path(device_name: str, device_type: str, quick: bool, suite: str = "") -> Path:
    """benchmarks/results/<device>[_<suite>][_quick]_<YYYYMMDD>.json, e.g. h200_beyond_20261203;
    the published runs are then renamed to version-free names (h200.json, h200_beyond.json)."""
    tag = "cpu" if device_type == "cpu" else (
        re.sub(r"[^a-z0-9]+", "_", device_name.lower()).replace("nvidia_", "").strip("_")
        or "cuda")
    if suite:
        tag += f"_{suite}"
    if quick:
        tag += "_quick"
    stem = f"{tag}_{_dt.date.today():%Y%m%d}"
    path = RESULTS_DIR / f"{stem}.json"
    n = 2
    while path.exists():  # never overwrite an earlier run of the same day
        path = RESULTS_DIR / f"{stem}_{n}.json"
        n += 1
    return path

