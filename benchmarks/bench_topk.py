#!/usr/bin/env python
"""Top-k retrieval, side by side in one run: for every source, the k destinations with the
highest dot product, the seen (source, destination) pairs excluded.

    python benchmarks/bench_topk.py --device cpu --out benchmarks/results/topk_cpu.json
    python benchmarks/bench_topk.py --small            # a quick size
    python benchmarks/bench_topk.py --device cuda      # H200: 100K x 1M, fp32 and bf16

Sizes: CPU 10,000 sources x 100,000 destinations, D = 64, k = 20, 100 seen destinations per
source (1M excluded pairs); CUDA 100,000 x 1,000,000, 10M excluded pairs, fp32 and bf16;
--small 1,000 x 10,000, 20 per source. Features torch.randn; the excluded pairs are uniform
random (source, destination) pairs, duplicates merged.

Methods:
  ours          pyg_edgedot.topk_dst(x_src, x_dst, k, exclude=seen): its CSR of the
                excluded pairs is built inside every call (``backend`` in the JSON says which
                implementation ran: 'cpp' / 'cuda' kernel or the pure-PyTorch 'python' one)
  chunked@C     the hand-written way, for each chunk of C sources:
                ``torch.mm(x_src[chunk], x_dst.t(), out=buffer)`` -> [C, M] in the input
                dtype, the chunk's seen pairs set to -inf, ``torch.topk(k)``; the seen pairs
                come sorted by source, prepared once outside the timed region (free for this
                peer); C in --chunks, the best one is "chunked (best)"
  faiss         PyG's torch_geometric.nn.pool.MIPSKNNIndex (faiss IndexFlatIP, exact inner
                product): x_dst added once (``faiss_add`` in the JSON, not in the search
                time), ``search(x_src, k, exclude_links=seen)``: over-fetches k + the largest
                number of seen pairs of a source, then drops the seen ones. faiss computes in
                fp32 (bf16 inputs are converted before, outside the timed region); on CUDA
                it needs faiss built with GPU support (``faiss-gpu``), else the row says
                "not installed". faiss uses torch's thread count.
  mm floor      the bare FLOPs: the chunked ``torch.mm`` into the buffer with nothing else,
                at each chunk size, and on the CPU also in cache-sized blocks of sources x
                destinations (mm_floor@RxT); the fastest is the floor, what any exact
                method pays.

Every method is warmed up once (the first call's time is kept), then the methods run in
turn, --reps rounds, so that a burst of other work on the machine hits them alike; the table
gives the median and the minimum (CUDA: synchronized perf_counter around each call). Peak
extra memory: one more call each (CUDA max_memory_allocated; CPU RSS growth, approximate),
beyond the product buffer that the chunked and mm-floor methods share (allocated once, the
largest chunk's; they run one at a time).

Check, on the benchmark's own data: ours against the best chunked run (and faiss): the rows
whose indices are identical, and the rows "equivalent": their k scores, recomputed in
float64, equal within a tolerance (rows can differ only where two scores tie to within
rounding: ours accumulates in fp32 and orders ties by the lower index; torch.mm/torch.topk
and faiss round and break ties their own way); and that no method returns a seen pair.
"""
import argparse
import datetime as _dt
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import default_out_path, device_info, software_info, write_json  # noqa: E402
from _timing import Bench, failure, short_error  # noqa: E402

SCHEMA = "pyg_edgedot-bench-topk/1"
SIZES = {
    "cpu": dict(num_src=10_000, num_dst=100_000, dim=64, k=20, seen_per_src=100,
                dtypes=["float32"], chunks=[256, 1024, 4096], tiles=[(1024, 512)]),
    "cuda": dict(num_src=100_000, num_dst=1_000_000, dim=64, k=20, seen_per_src=100,
                 dtypes=["float32", "bfloat16"], chunks=[1024, 4096, 8192]),
    "small": dict(num_src=1_000, num_dst=10_000, dim=64, k=20, seen_per_src=20,
                  dtypes=["float32"], chunks=[128, 512], tiles=[(256, 4096), (1024, 512)]),
}
GB, MB = 1e9, 1 << 20


# Inputs ###################################################################################

def make_inputs(num_src, num_dst, dim, seen_per_src, dtype, device, seed=0):
    """Features (randn, then cast) and the excluded pairs, coalesced (sorted by source)."""
    gen = torch.Generator().manual_seed(seed)
    x_src = torch.randn(num_src, dim, generator=gen)
    x_dst = torch.randn(num_dst, dim, generator=gen)
    num_seen = seen_per_src * num_src
    src = torch.randint(num_src, (num_seen,), generator=gen)
    dst = torch.randint(num_dst, (num_seen,), generator=gen)
    key = torch.unique(src * num_dst + dst)  # sorted: by source, then destination
    seen = torch.stack([key // num_dst, key % num_dst])
    return (x_src.to(device=device, dtype=dtype), x_dst.to(device=device, dtype=dtype),
            seen.to(device))


# Methods ##################################################################################

def ours(x_src, x_dst, k, seen):
    from pyg_edgedot import topk_dst
    return lambda: topk_dst(x_src, x_dst, k, exclude=seen)[1]


def view_of(scratch, rows, cols):
    """A contiguous ``[rows, cols]`` buffer at the start of ``scratch``."""
    return scratch[:rows * cols].view(rows, cols)


def chunked(x_src, x_dst, k, seen, chunk, scratch):
    """``x_src[chunk] @ x_dst.t()`` into a reused buffer (the front of ``scratch``), seen
    pairs -inf, ``torch.topk``."""
    num_src, num_dst = x_src.size(0), x_dst.size(0)
    ptr = torch.searchsorted(seen[0], torch.arange(0, num_src + chunk, chunk,
                                                   device=seen.device).clamp(max=num_src))
    ptr = ptr.tolist()  # per chunk, its slice of the (source-sorted) seen pairs
    buffer = view_of(scratch, min(chunk, num_src), num_dst)
    x_dst_t = x_dst.t()

    def run():
        out = torch.empty(num_src, k, dtype=torch.int64, device=x_src.device)
        for c, start in enumerate(range(0, num_src, chunk)):
            end = min(start + chunk, num_src)
            scores = torch.mm(x_src[start:end], x_dst_t, out=buffer[:end - start])
            lo, hi = ptr[c], ptr[c + 1]
            scores[seen[0, lo:hi] - start, seen[1, lo:hi]] = float("-inf")
            out[start:end] = torch.topk(scores, min(k, num_dst), dim=1).indices
        return out
    return run


def mm_floor(x_src, x_dst, chunk, scratch, tile=None):
    """The product alone, ``chunk`` sources x ``tile`` destinations (default: all of them)
    at a time, into a reused buffer (the front of ``scratch``): the FLOPs any exact method
    pays, and no more."""
    num_src, num_dst = x_src.size(0), x_dst.size(0)
    tile = min(tile or num_dst, num_dst)
    buffer = view_of(scratch, min(chunk, num_src), tile)

    def run():
        for start in range(0, num_src, chunk):
            end = min(start + chunk, num_src)
            for j in range(0, num_dst, tile):
                stop = min(j + tile, num_dst)
                torch.mm(x_src[start:end], x_dst[j:stop].t(),
                         out=buffer[:end - start, :stop - j])
        return None
    return run


def faiss_status(device) -> Optional[str]:
    """None if faiss can run on ``device``, else why not."""
    try:
        import faiss
    except ImportError:
        return ("not installed (pip install faiss-cpu; on CUDA faiss-gpu)"
                if device.type == "cpu" else "faiss-gpu not installed")
    if device.type == "cuda" and not hasattr(faiss, "StandardGpuResources"):
        return "faiss-gpu not installed (this faiss has no GPU support)"
    if device.type not in ("cpu", "cuda"):
        return f"faiss does not run on {device.type}"
    return None


def faiss_search(x_src, x_dst, k, seen, threads):
    """PyG's MIPSKNNIndex; returns (search call, seconds the add took)."""
    import faiss
    from torch_geometric.nn.pool import MIPSKNNIndex
    faiss.omp_set_num_threads(threads)
    x_src32, x_dst32 = x_src.float().contiguous(), x_dst.float().contiguous()
    start = time.perf_counter()
    index = MIPSKNNIndex(x_dst32)
    add_s = time.perf_counter() - start
    return (lambda: index.search(x_src32, k, exclude_links=seen).index), add_s


# Timing ###################################################################################

def timed_in_turn(bench: Bench, methods: Dict[str, Callable[[], Any]], reps: int,
                  log: Callable[[str], None]) -> Dict[str, Dict[str, Any]]:
    """A first call each (kept), one call for peak memory, then ``reps`` rounds in turn."""
    recs: Dict[str, Dict[str, Any]] = {}
    for name, fn in methods.items():
        try:
            recs[name] = {"status": "ok", "first_call_s": bench.wall(fn)}
            recs[name]["peak_extra_bytes"] = bench.peak_extra(fn)[0]
        except Exception as err:  # noqa: BLE001 -- one failing method must not stop the run
            recs[name] = failure(err)
            recs[name]["traceback"] = traceback.format_exc()[-2000:]
            bench.free(collect=True)
        log(f"  {name:<18} first call {_s(recs[name].get('first_call_s'))}"
            + ("" if recs[name]["status"] == "ok" else f" {recs[name]['message']}"))
    alive = [n for n, r in recs.items() if r["status"] == "ok"]
    times: Dict[str, List[float]] = {n: [] for n in alive}
    for _ in range(reps):
        for name in alive:
            times[name].append(1e3 * bench.wall(methods[name]))
    for name in alive:
        recs[name].update(ms=statistics.median(times[name]), ms_min=min(times[name]),
                          ms_all=times[name], reps=reps)
    return recs


def _s(value: Optional[float]) -> str:
    return "-" if value is None else f"{value:.3f} s"


# Check ####################################################################################

def tolerance(dtype: torch.dtype, max_abs: float) -> float:
    """How far two sets' float64 scores may differ and still count as ties: a few roundings
    of a score (the peers' output dtype) plus fp32 accumulation over D terms."""
    eps = torch.finfo(dtype).eps
    return 4 * eps * max_abs + 1e-5 * max_abs


@torch.no_grad()
def compare(x_src, x_dst, seen, ours_index, other_index, step=4096) -> Dict[str, Any]:
    """Rows identical, rows equivalent (sorted float64 scores within tolerance), and how
    many seen pairs each returned."""
    num_src, num_dst = x_src.size(0), x_dst.size(0)
    seen_key = seen[0] * num_dst + seen[1]
    identical = equivalent = 0
    worst = 0.0
    seen_ours = seen_other = 0
    max_abs = 0.0
    for start in range(0, num_src, step):
        rows = torch.arange(start, min(start + step, num_src), device=x_src.device)
        a, b = ours_index[rows], other_index[rows]
        identical += int((a == b).all(dim=1).sum())
        query = x_src[rows].double().unsqueeze(1)

        def scores(index):
            pad = (index < 0) | (index >= num_dst)
            s = (query * x_dst[index.clamp(0, num_dst - 1)].double()).sum(-1)
            return s.masked_fill(pad, float("-inf")), pad

        sa, pad_a = scores(a)
        sb, pad_b = scores(b)
        finite = torch.cat([sa[~pad_a], sb[~pad_b]])
        if finite.numel():
            max_abs = max(max_abs, float(finite.abs().max()))
        sa, sb = sa.sort(dim=1, descending=True).values, sb.sort(dim=1, descending=True).values
        same_pad = (sa == float("-inf")) == (sb == float("-inf"))
        diff = torch.where(same_pad & (sa > float("-inf")), (sa - sb).abs(),
                           torch.zeros_like(sa))
        diff = torch.where(same_pad, diff, torch.full_like(sa, float("inf")))
        row_diff = diff.max(dim=1).values if diff.numel() else diff.new_zeros(rows.numel())
        worst = max(worst, float(row_diff.max()) if row_diff.numel() else 0.0)
        tol = tolerance(x_src.dtype, max(max_abs, 1.0))
        equivalent += int((row_diff <= tol).sum())
        for index, pad in ((a, pad_a), (b, pad_b)):
            key = (rows.view(-1, 1) * num_dst + index)[~pad]
            hits = int(torch.isin(key, seen_key).sum())
            if index is a:
                seen_ours += hits
            else:
                seen_other += hits
    tol = tolerance(x_src.dtype, max(max_abs, 1.0))
    return {"rows": num_src, "rows_identical": identical / max(num_src, 1),
            "rows_equivalent": equivalent / max(num_src, 1), "max_score_diff": worst,
            "tol": tol, "seen_returned_ours": seen_ours, "seen_returned_other": seen_other,
            "ok": bool(equivalent == num_src and seen_ours == 0 and seen_other == 0)}


# One case #################################################################################

def run_case(bench: Bench, sizes: Dict[str, Any], dtype_name: str, reps: int, threads: int,
             log: Callable[[str], None]) -> Dict[str, Any]:
    device = bench.device
    dtype = getattr(torch, dtype_name)
    n, m, d, k = sizes["num_src"], sizes["num_dst"], sizes["dim"], sizes["k"]
    x_src, x_dst, seen = make_inputs(n, m, d, sizes["seen_per_src"], dtype, device)
    max_seen = int(torch.bincount(seen[0], minlength=n).max()) if seen.numel() else 0
    flops = 2.0 * n * m * d
    rec: Dict[str, Any] = {"num_src": n, "num_dst": m, "dim": d, "k": k, "dtype": dtype_name,
                           "num_excluded": int(seen.size(1)), "max_seen_per_src": max_seen,
                           "mm_flops": flops, "methods": {}}
    log(f"== {n:,} x {m:,}, D={d}, k={k}, {dtype_name}, {seen.size(1):,} excluded pairs "
        f"(at most {max_seen} per source)")
    # One product buffer for every chunked and mm_floor method: they run one at a time, and a
    # buffer each (three chunk sizes, two methods) took 106 GB at float32, past an H100's 80.
    scratch = torch.empty(max([min(c, n) * m for c in sizes["chunks"]]
                              + [min(c, n) * min(t, m) for c, t in sizes.get("tiles", [])]
                              + [0]), dtype=dtype, device=device)
    methods: Dict[str, Callable[[], Any]] = {"ours": ours(x_src, x_dst, k, seen)}
    for chunk in sizes["chunks"]:
        methods[f"chunked@{chunk}"] = chunked(x_src, x_dst, k, seen, chunk, scratch)
    why_not = faiss_status(device)
    if why_not is None:
        try:
            methods["faiss"], rec["faiss_add_s"] = faiss_search(x_src, x_dst, k, seen, threads)
        except Exception as err:  # noqa: BLE001
            why_not = f"MIPSKNNIndex failed: {short_error(err)}"
    for chunk in sizes["chunks"]:
        methods[f"mm_floor@{chunk}"] = mm_floor(x_src, x_dst, chunk, scratch)
    for chunk, tile in sizes.get("tiles", []):  # cache-sized output blocks
        methods[f"mm_floor@{chunk}x{tile}"] = mm_floor(x_src, x_dst, chunk, scratch, tile)
    recs = timed_in_turn(bench, methods, reps, log)
    if why_not is not None:
        recs["faiss"] = {"status": "n/a", "message": why_not}
    rec["methods"] = recs

    def best(prefix):
        ok = {name: r for name, r in recs.items()
              if name.startswith(prefix) and r["status"] == "ok"}
        return min(ok, key=lambda name: ok[name]["ms"]) if ok else None

    best_chunked, best_floor = best("chunked@"), best("mm_floor@")
    rec["best_chunked"], rec["best_floor"] = best_chunked, best_floor
    ms = {name: r["ms"] for name, r in recs.items() if r["status"] == "ok"}
    if best_floor:
        rec["floor_ms"] = ms[best_floor]
        rec["floor_gflops"] = flops / (ms[best_floor] * 1e-3) / 1e9
    if "ours" in ms:
        rec["speedup_vs_best_chunked"] = ms[best_chunked] / ms["ours"] if best_chunked else None
        rec["speedup_vs_faiss"] = ms["faiss"] / ms["ours"] if "faiss" in ms else None
        rec["ours_vs_floor"] = ms["ours"] / ms[best_floor] if best_floor else None

    # The check, on this data: one more call of each, outside the timed region.
    rec["check"] = {}
    if "ours" in ms:
        mine = methods["ours"]()
        for name in [best_chunked, "faiss" if "faiss" in ms else None]:
            if name is None:
                continue
            try:
                rec["check"][name] = compare(x_src, x_dst, seen, mine, methods[name]())
            except Exception as err:  # noqa: BLE001
                rec["check"][name] = {"ok": False, "error": short_error(err)}
            c = rec["check"][name]
            log(f"  check ours vs {name}: " + (c.get("error") or
                f"identical rows {100 * c['rows_identical']:.2f}%, equivalent "
                f"{100 * c['rows_equivalent']:.2f}% (max float64 score diff "
                f"{c['max_score_diff']:.2e}, tol {c['tol']:.1e}), seen pairs returned: ours "
                f"{c['seen_returned_ours']}, {name} {c['seen_returned_other']} -> "
                f"{'ok' if c['ok'] else 'FAIL'}"))
        del mine
    del x_src, x_dst, seen, methods, scratch
    bench.free(collect=True)
    return rec


# Report ###################################################################################

def format_table(doc: Dict[str, Any]) -> str:
    lines = []
    for rec in doc["cases"]:
        lines.append(f"\n{rec['num_src']:,} sources x {rec['num_dst']:,} destinations, "
                     f"D={rec['dim']}, k={rec['k']}, {rec['dtype']}, "
                     f"{rec['num_excluded']:,} excluded pairs; {doc['device']['name']}, "
                     f"{doc['threads']} thread(s), topk backend '{doc['topk_backend']}'")
        lines.append(f"  {'method':<24}{'median ms':>11}{'min ms':>11}{'t / ours':>9}"
                     f"{'peak MB':>10}  note")
        ours_ms = rec["methods"].get("ours", {}).get("ms")
        for name, r in rec["methods"].items():
            label = name + (" (best)" if name in (rec.get("best_chunked"),
                                                   rec.get("best_floor")) else "")
            if r["status"] != "ok":
                lines.append(f"  {label:<24}{r['status'].upper():>11}{'':>11}{'':>9}{'':>10}"
                             f"  {r.get('message', '')[:70]}")
                continue
            ratio = f"{r['ms'] / ours_ms:8.2f}x" if ours_ms else f"{'-':>9}"
            peak = r.get("peak_extra_bytes")
            peak = f"{peak / MB:10,.0f}" if peak is not None else f"{'-':>10}"
            note = (f"+ {rec['faiss_add_s'] * 1e3:.0f} ms to add x_dst once"
                    if name == "faiss" and "faiss_add_s" in rec else "")
            lines.append(f"  {label:<24}{r['ms']:11.1f}{r['ms_min']:11.1f}{ratio}{peak}"
                         f"  {note}")
        summary = []
        if rec.get("speedup_vs_best_chunked"):
            summary.append(f"ours {rec['speedup_vs_best_chunked']:.2f}x the best chunked "
                           f"({rec['best_chunked']})")
        if rec.get("speedup_vs_faiss"):
            summary.append(f"{rec['speedup_vs_faiss']:.2f}x faiss")
        if rec.get("ours_vs_floor"):
            summary.append(f"{rec['ours_vs_floor']:.2f}x the mm floor "
                           f"({rec['floor_gflops']:.0f} GFLOP/s)")
        if summary:
            lines.append("  " + "; ".join(summary))
        for name, c in rec["check"].items():
            if "error" in c:
                lines.append(f"  check vs {name}: ERROR {c['error']}")
                continue
            lines.append(f"  check vs {name}: {'ok' if c['ok'] else 'FAIL'} (identical rows "
                         f"{100 * c['rows_identical']:.2f}%, equivalent "
                         f"{100 * c['rows_equivalent']:.2f}%, seen returned "
                         f"{c['seen_returned_ours']}/{c['seen_returned_other']})")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--small", action="store_true", help="1,000 x 10,000 (a quick size)")
    for name in ("num_src", "num_dst", "dim", "k", "seen_per_src"):
        p.add_argument(f"--{name.replace('_', '-')}", type=int, default=None,
                       help="override the size's value")
    p.add_argument("--dtypes", default=None, help="comma list (default: float32 on the CPU, "
                                                  "float32,bfloat16 on CUDA)")
    p.add_argument("--chunks", default=None, help="comma list of chunk sizes (sources)")
    p.add_argument("--tiles", default=None, help="comma list of RxT blocks for the mm floor "
                                                 "(e.g. 1024x512; '' for none)")
    p.add_argument("--reps", type=int, default=5, help="rounds of every method in turn")
    p.add_argument("--threads", type=int, default=None,
                   help="torch.set_num_threads (CPU; faiss gets the same); default: torch's")
    p.add_argument("--out", type=Path, default=None, help="JSON path (default: "
                   "benchmarks/results/<device>_topk[_quick]_<date>.json)")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sizes = dict(SIZES["small" if args.small else ("cuda" if device.type == "cuda" else "cpu")])
    for name in ("num_src", "num_dst", "dim", "k", "seen_per_src"):
        if getattr(args, name) is not None:
            sizes[name] = getattr(args, name)
    if args.dtypes:
        sizes["dtypes"] = args.dtypes.split(",")
    if args.chunks:
        sizes["chunks"] = [int(c) for c in args.chunks.split(",")]
    if args.tiles is not None:
        sizes["tiles"] = [tuple(int(v) for v in t.split("x")) for t in args.tiles.split(",")
                          if t]
    import pyg_edgedot  # builds or loads the kernels before anything is timed
    from pyg_edgedot import _backend

    bench = Bench(device, flush_bytes=0)
    quick = args.small or any(getattr(args, n) is not None for n in ("num_src", "num_dst"))
    doc: Dict[str, Any] = {
        "schema": SCHEMA, "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name] + (argv if argv is not None
                                                         else sys.argv[1:])),
        "device": device_info(device), "software": software_info(),
        "backends": pyg_edgedot.backends(),
        "topk_backend": _backend.loaded().table["topk", device.type].impl,
        "threads": torch.get_num_threads(), "platform": platform.platform(),
        "sizes": sizes, "reps": args.reps, "loadavg_start": list(os.getloadavg()),
        "cases": []}
    try:
        import faiss
        doc["software"]["faiss"] = faiss.__version__
    except ImportError:
        doc["software"]["faiss"] = None
    if args.out is None:
        args.out = default_out_path(doc["device"]["name"], device.type, quick, "topk")
    start = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - start:7.1f} s] {msg}", flush=True)

    log(f"device {doc['device']['name']}, {doc['threads']} thread(s), topk backend "
        f"'{doc['topk_backend']}', faiss {doc['software']['faiss']}, loadavg "
        f"{doc['loadavg_start']}")
    status = 0
    for dtype_name in sizes["dtypes"]:
        try:
            doc["cases"].append(run_case(bench, sizes, dtype_name, args.reps, doc["threads"],
                                         log))
        except Exception as err:  # noqa: BLE001
            doc["cases"].append({"dtype": dtype_name, "status": "error",
                                 "message": short_error(err),
                                 "traceback": traceback.format_exc()[-3000:], "methods": {},
                                 "check": {}})
            status = 1
            log(f"ERROR {dtype_name}: {short_error(err)}")
        write_json(args.out, doc)
    doc["loadavg_end"] = list(os.getloadavg())
    doc["elapsed_s"] = round(time.perf_counter() - start, 1)
    write_json(args.out, doc)
    print(format_table({**doc, "cases": [c for c in doc["cases"] if "num_src" in c]}))
    print(f"\nloadavg start {doc['loadavg_start']}, end {doc['loadavg_end']}; wrote {args.out}")
    failed = [name for c in doc["cases"] for name, chk in c["check"].items() if not chk["ok"]]
    return status or (2 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
