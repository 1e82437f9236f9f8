#!/usr/bin/env python
"""Benchmark what no peer does: ranking with many negatives, candidate scoring,
relation-weighted (DistMult) scores, and the Triton path; each side by side with the way
people do it today, in one run.

Sections (``--sections``, comma-separated):

  ranking     OGB-style evaluation: N sources x K negatives over a node table (default: the
              ogbl-citation2 test split's shape, N = 86,956, K = 1,000, 2,927,963 nodes,
              D = 128 fp32). Methods:
                ogb_batched      the OGB example's way: the positives, then
                                 ``src.view(-1, 1).repeat(1, K).view(-1)`` and a score per
                                 pair, ``(h[src] * h[dst]).sum(-1)``, in batches of 64 * 1024
                                 pairs (the example's batch size), then the evaluator's rank
                                 formula. Kept on the GPU (the example also copies every
                                 batch to the host, which would only make it slower).
                ogb_batched_1M   the same with batches of 2^20 pairs
                edge_dot_pairs   pyg_edgedot.edge_dot on the N * K flattened pairs, then the
                                 formula
                score_candidates pyg_edgedot.score_candidates -> [N, K], then the formula
                rank_candidates  pyg_edgedot.rank_candidates: ranks without an [N, K] tensor
              Every method's ranks are compared with ogb_batched's (the fraction equal).
  candidates  score_candidates against edge_dot on the same N * K pairs (sources repeated,
              the flattened index built outside the timed region), against the expression
              people write, ``(h[src].unsqueeze(1) * h[cand]).sum(-1)``, eager and under
              torch.compile (static shapes); fp32 and bf16.
  distmult    sum(x_src[s] * rel[t] * x_dst[d]) at W3's size (2.93M nodes, E = 30M, D = 128
              fp32, R = 16 relations): pyg_edgedot.edge_dot(..., rel, edge_type) against
              eager and torch.compile of that expression; forward, and forward + backward
              (gradients of x and rel).
  triton      the Triton path (what CUDA tensors take without nvcc) against the CUDA
              extension at W3 (E = 30M, D = 128 fp32): forward, and forward + backward,
              through the public ``edge_dot``. Where this process has the CUDA extension,
              the Triton rows come from a child process run with PYG_EDGEDOT_CUDA=0 (the
              documented switch to the Triton path) on the same inputs (same seeds); each
              row's scores are checked against float64 on sampled edges.

Times are medians of CUDA events (perf_counter on the CPU) after warm-up, with the L2 flushed
before each repetition outside the timed region; peak extra memory is
``max_memory_allocated`` during one call minus what was allocated before it (the timing and
memory helpers are benchmarks/_timing.py's, as in bench_edge_dot.py). Output: a table
on stdout and a JSON (``--out``; default ``benchmarks/results/<device>_beyond_<date>.json``).

    python benchmarks/bench_beyond.py                   # CUDA, every section (~3 min)
    python benchmarks/bench_beyond.py --device cpu      # CPU sizes (below), ~2 min on 2 cores
    python benchmarks/bench_beyond.py --quick           # tiny sizes, a smoke test (CPU ok)

On the CPU the sizes are CPU_SIZES: 2,000 sources x 500 candidates of 100,000 nodes, D = 128,
and DistMult at 100,000 nodes, E = 2M.
"""
import argparse
import datetime as _dt
import functools
import json
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import default_out_path, device_info, software_info, write_json  # noqa: E402
from _timing import Bench, Options, failure, measure  # noqa: E402
from _workloads import GB, edge_reference, normalised_error, tolerance  # noqa: E402

SCHEMA = "pyg_edgedot-bench-beyond/1"
SECTIONS = ["ranking", "candidates", "distmult", "triton"]
OPTIONS = Options(warmups=3, max_reps=30, target_s=0.4)

FULL = dict(rank_nodes=2_927_963, rank_sources=86_956, rank_k=1000, dim=128,
            w3_nodes=2_927_963, w3_edges=30_000_000, relations=16)
QUICK = dict(rank_nodes=5000, rank_sources=300, rank_k=50, dim=32,
             w3_nodes=5000, w3_edges=40_000, relations=4)
CPU_SIZES = dict(rank_nodes=100_000, rank_sources=2000, rank_k=500, dim=128,
                 w3_nodes=100_000, w3_edges=2_000_000, relations=16)


def ogb_rank(pos: torch.Tensor, neg: torch.Tensor) -> torch.Tensor:
    """ogb.linkproppred.Evaluator's ranking: 1 + 0.5 * (#neg > pos + #neg >= pos)."""
    pos = pos.view(-1, 1)
    optimistic = (neg > pos).sum(dim=1)
    pessimistic = (neg >= pos).sum(dim=1)
    return 0.5 * (optimistic + pessimistic) + 1


def timed(bench: Bench, fn: Callable[[], Any],
          before: Callable[[], None] = lambda: None) -> Dict[str, Any]:
    """_timing.measure of ``fn``; an OOM or error is reported in the record, not raised."""
    try:
        return measure(bench, fn, before, OPTIONS)
    except Exception as err:  # noqa: BLE001  (reported in the table, the run goes on)
        rec = failure(err)
        rec["traceback"] = traceback.format_exc()[-2000:]
    bench.free(collect=True)
    return rec


def _record(section: str, case: str, method: str, phase: str, rec: Dict[str, Any],
            **extra) -> Dict[str, Any]:
    out = {"section": section, "case": case, "method": method, "phase": phase}
    out.update(rec)
    out.update(extra)
    return out


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------

def section_ranking(bench: Bench, sizes: Dict[str, int], device) -> List[Dict[str, Any]]:
    from pyg_edgedot import edge_dot, rank_candidates, score_candidates

    n_nodes, n, k, d = (sizes["rank_nodes"], sizes["rank_sources"], sizes["rank_k"],
                        sizes["dim"])
    gen = torch.Generator(device="cpu").manual_seed(0)
    h = torch.randn(n_nodes, d, generator=gen).to(device)
    src = torch.randint(0, n_nodes, (n,), generator=gen).to(device)
    pos = torch.randint(0, n_nodes, (n,), generator=gen).to(device)
    neg = torch.randint(0, n_nodes, (n, k), generator=gen).to(device)
    case = f"N={n:,} K={k:,} nodes={n_nodes:,} D={d} float32"

    def ogb_batched(batch: int) -> Callable[[], torch.Tensor]:
        def run():
            pos_pred = torch.cat([(h[src[i:i + batch]] * h[pos[i:i + batch]]).sum(-1)
                                  for i in range(0, n, batch)])
            flat_src = src.view(-1, 1).repeat(1, k).view(-1)
            flat_neg = neg.view(-1)
            neg_pred = torch.cat([(h[flat_src[i:i + batch]] * h[flat_neg[i:i + batch]]).sum(-1)
                                  for i in range(0, n * k, batch)]).view(-1, k)
            return ogb_rank(pos_pred, neg_pred)
        return run

    def edge_dot_pairs():
        pos_pred = edge_dot(h, h, torch.stack([src, pos]))
        flat = torch.stack([src.view(-1, 1).expand(n, k).reshape(-1), neg.reshape(-1)])
        return ogb_rank(pos_pred, edge_dot(h, h, flat).view(n, k))

    def score_then_rank():
        pos_pred = edge_dot(h, h, torch.stack([src, pos]))
        return ogb_rank(pos_pred, score_candidates(h, h, src, neg))

    methods = {
        "ogb_batched": ogb_batched(64 * 1024),
        "ogb_batched_1M": ogb_batched(1 << 20),
        "edge_dot_pairs": edge_dot_pairs,
        "score_candidates": score_then_rank,
        "rank_candidates": lambda: rank_candidates(h, h, src, pos, neg),
    }
    with torch.no_grad():
        reference = methods["ogb_batched"]()
        records = []
        for name, fn in methods.items():
            rec = timed(bench, fn, bench.flush_cache)
            if rec["status"] == "ok":
                ranks = fn()
                rec["ranks_equal_to_ogb_batched"] = float((ranks == reference).float().mean())
                rec["mrr"] = float((1.0 / ranks.float()).mean())
                del ranks
            records.append(_record("ranking", case, name, "fwd", rec))
            bench.free()
    return records


def section_candidates(bench: Bench, sizes: Dict[str, int], device) -> List[Dict[str, Any]]:
    from pyg_edgedot import edge_dot, score_candidates

    def expression(h, src, cand):
        return (h[src].unsqueeze(1) * h[cand]).sum(-1)

    n_nodes, n, k, d = (sizes["rank_nodes"], sizes["rank_sources"], sizes["rank_k"],
                        sizes["dim"])
    records = []
    for dtype in (torch.float32, torch.bfloat16):
        gen = torch.Generator(device="cpu").manual_seed(1)
        h = torch.randn(n_nodes, d, generator=gen).to(dtype).to(device)
        src = torch.randint(0, n_nodes, (n,), generator=gen).to(device)
        cand = torch.randint(0, n_nodes, (n, k), generator=gen).to(device)
        flat = torch.stack([src.view(-1, 1).expand(n, k).reshape(-1), cand.reshape(-1)])
        case = f"N={n:,} K={k:,} nodes={n_nodes:,} D={d} {str(dtype).replace('torch.', '')}"
        torch._dynamo.reset()
        compiled = torch.compile(expression, dynamic=False)
        with torch.no_grad():
            expect = edge_dot(h, h, flat).view(n, k)
            for name, fn in (("edge_dot", lambda: edge_dot(h, h, flat)),
                             ("score_candidates", lambda: score_candidates(h, h, src, cand)),
                             ("eager", lambda: expression(h, src, cand)),
                             ("compile", lambda: compiled(h, src, cand))):
                rec = timed(bench, fn, bench.flush_cache)
                if rec["status"] == "ok":
                    got = fn().view(n, k).float()
                    rec["max_abs_diff_vs_edge_dot"] = float((got - expect.float()).abs().max())
                records.append(_record("candidates", case, name, "fwd", rec))
        del h, src, cand, flat, expect, compiled
        bench.free()
    return records


def section_distmult(bench: Bench, sizes: Dict[str, int], device) -> List[Dict[str, Any]]:
    from pyg_edgedot import edge_dot

    n_nodes, e, d, r = sizes["w3_nodes"], sizes["w3_edges"], sizes["dim"], sizes["relations"]
    gen = torch.Generator(device="cpu").manual_seed(2)
    x = torch.randn(n_nodes, d, generator=gen).to(device)
    rel = torch.randn(r, d, generator=gen).to(device)
    ei = torch.randint(0, n_nodes, (2, e), generator=gen).to(device)
    t = torch.randint(0, r, (e,), generator=gen).to(device)
    grad = torch.randn(e, generator=gen).to(device)
    case = f"nodes={n_nodes:,} E={e:,} D={d} R={r} float32"

    def eager(xs, rr):
        return (xs[ei[0]] * rr[t] * xs[ei[1]]).sum(-1)

    compiled = torch.compile(eager, dynamic=False)
    methods = {
        "pyg_edgedot": lambda xs, rr: edge_dot(xs, xs, ei, rr, t),
        "eager": eager,
        "compile": compiled,
    }
    records = []
    ref = methods["eager"](x, rel)
    for name, score in methods.items():
        with torch.no_grad():
            rec = timed(bench, lambda: score(x, rel), bench.flush_cache)
            if rec["status"] == "ok":
                rec["max_abs_diff_vs_eager"] = float((score(x, rel) - ref).abs().max())
        records.append(_record("distmult", case, name, "fwd", rec))
        xg = x.detach().requires_grad_(True)
        rg = rel.detach().requires_grad_(True)

        def fwd_bwd():
            score(xg, rg).backward(grad)

        def reset():
            xg.grad = rg.grad = None
            bench.flush_cache()
        rec = timed(bench, fwd_bwd, reset)
        records.append(_record("distmult", case, name, "fwd+bwd", rec))
        del xg, rg
        bench.free()
    return records


def section_triton(bench: Bench, sizes: Dict[str, int], device,
                   child: bool = False) -> List[Dict[str, Any]]:
    """edge_dot at W3 on whichever backend serves CUDA here; the Triton path in a child
    (``child``: this process is that child, run by :func:`_triton_in_child`)."""
    import pyg_edgedot

    backend = pyg_edgedot.backends()["cuda"]
    if child and backend != "triton":
        return [_record("triton", "-", "triton", "fwd", {
            "status": "n/a", "message": f"PYG_EDGEDOT_CUDA=0 left the '{backend}' backend"})]
    name = {"cuda": "cuda_extension", "triton": "triton"}.get(backend, backend)
    records = _w3_edge_dot(bench, sizes, device, name)
    if backend == "cuda":
        records += _triton_in_child(sizes is QUICK)
    return records


def _w3_edge_dot(bench: Bench, sizes: Dict[str, int], device, name: str):
    from pyg_edgedot import edge_dot

    n_nodes, e, d = sizes["w3_nodes"], sizes["w3_edges"], sizes["dim"]
    gen = torch.Generator(device="cpu").manual_seed(3)
    x_src = torch.randn(n_nodes, d, generator=gen).to(device)
    x_dst = torch.randn(n_nodes, d, generator=gen).to(device)
    ei = torch.randint(0, n_nodes, (2, e), generator=gen).to(device)
    grad = torch.randn(e, generator=gen).to(device)
    pos = torch.randint(0, e, (4096,), generator=gen).to(device)
    ref, abs_sum = edge_reference(x_src, x_dst, ei[0], ei[1], pos)
    case = f"W3 nodes={n_nodes:,} E={e:,} D={d} float32"
    with torch.no_grad():
        rec = timed(bench, lambda: edge_dot(x_src, x_dst, ei, validate=False), bench.flush_cache)
        if rec["status"] == "ok":
            out = edge_dot(x_src, x_dst, ei, validate=False)
            rec["max_err_vs_float64"] = normalised_error(out[pos], ref, abs_sum)
            rec["tol"] = tolerance(out.dtype)
            del out
    records = [_record("triton", case, name, "fwd", rec)]
    a = x_src.detach().requires_grad_(True)
    b = x_dst.detach().requires_grad_(True)

    def reset():
        a.grad = b.grad = None
        bench.flush_cache()
    rec = timed(bench, lambda: edge_dot(a, b, ei, validate=False).backward(grad), reset)
    records.append(_record("triton", case, name, "fwd+bwd", rec))
    del a, b
    bench.free()
    return records


def _triton_in_child(quick: bool) -> List[Dict[str, Any]]:
    """The triton section again in a process whose CUDA tensors take the Triton path."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "triton.json"
        cmd = [sys.executable, __file__, "--device", "cuda", "--sections", "triton",
               "--triton-child", "--out", str(out)] + (["--quick"] if quick else [])
        env = dict(os.environ, PYG_EDGEDOT_CUDA="0")
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            return [_record("triton", "-", "triton", "fwd", {
                "status": "error", "message": f"the Triton child failed (rc {proc.returncode})",
                "traceback": (proc.stdout + proc.stderr)[-3000:]})]
        return json.loads(out.read_text())["results"]


RUNNERS = {"ranking": section_ranking, "candidates": section_candidates,
           "distmult": section_distmult, "triton": section_triton}


# --------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------

def format_table(records: List[Dict[str, Any]]) -> str:
    lines = []
    section = None
    for rec in records:
        if rec["section"] != section:
            section = rec["section"]
            lines.append(f"\n== {section} ==")
            lines.append(f"{'case':<46} {'method':<18} {'phase':<8} {'ms':>10} "
                         f"{'peak extra':>11}  check")
        if rec["status"] == "ok":
            ms = f"{rec['ms']:10.3f}"
            peak = rec.get("peak_extra_bytes")
            peak = f"{peak / GB:9.3f}GB" if peak is not None else f"{'-':>11}"
        else:
            ms, peak = f"{rec['status'].upper():>10}", f"{'-':>11}"
        checks = [f"{key}={value:.4g}" for key, value in rec.items()
                  if key.startswith(("ranks_equal", "max_abs_diff", "max_err", "mrr"))]
        if rec["status"] not in ("ok",):
            checks.append(rec.get("message", "")[:80])
        lines.append(f"{rec['case'][:46]:<46} {rec['method']:<18} {rec['phase']:<8} {ms} "
                     f"{peak}  {' '.join(checks)}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--sections", default=",".join(SECTIONS))
    p.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    p.add_argument("--out", type=Path, default=None, help="JSON path")
    p.add_argument("--triton-child", action="store_true",
                   help="run by the triton section in its child process (PYG_EDGEDOT_CUDA=0)")
    args = p.parse_args(argv)

    sections = [s for s in args.sections.split(",") if s]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        p.error(f"unknown sections {unknown}; choose from {SECTIONS}")
    device = torch.device(args.device)
    sizes = QUICK if args.quick else (FULL if device.type == "cuda" else CPU_SIZES)
    import pyg_edgedot  # noqa: F401  (builds or loads the kernels before anything is timed)

    bench = Bench(device, flush_bytes=(256 << 20) if device.type == "cuda" else 0)
    doc = {"schema": SCHEMA, "date": _dt.datetime.now().isoformat(timespec="seconds"),
           "command": " ".join([Path(sys.argv[0]).name] + (argv or sys.argv[1:])),
           "device": device_info(device), "software": software_info(),
           "backends": pyg_edgedot.backends(), "sizes": sizes, "quick": args.quick,
           "results": []}
    if args.out is None:
        args.out = default_out_path(doc["device"]["name"], device.type, args.quick, "beyond")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    runners = dict(RUNNERS, triton=functools.partial(section_triton, child=args.triton_child))
    for name in sections:
        if name == "triton" and device.type != "cuda":
            doc["results"].append(_record("triton", "-", "triton", "fwd",
                                          {"status": "n/a", "message": "needs CUDA"}))
            continue
        try:
            doc["results"].extend(runners[name](bench, sizes, device))
        except Exception as err:  # noqa: BLE001
            doc["results"].append(_record(name, "-", "-", "-", {
                "status": "error", "message": f"{type(err).__name__}: {str(err)[:300]}",
                "traceback": traceback.format_exc()[-3000:]}))
        bench.free(collect=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_json(args.out, doc)
    write_json(args.out, doc)
    print(f"device: {doc['device'].get('name')}; torch {torch.__version__}; backends "
          f"{doc['backends']}")
    print(format_table(doc["results"]))
    print(f"\nwrote {args.out}")
    errors = [r for r in doc["results"] if r["status"] == "error"]
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
