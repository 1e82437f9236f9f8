#!/usr/bin/env python
"""The fused link-prediction loss (pyg_edgedot.edge_dot_loss) side by side with the unfused
PyG-style pipeline, in one run: forward, and forward + backward (gradient of z).

Problem: a homogeneous node table z [N, D] (requires grad), E random positive edges, K
structured negatives per positive, BCE with logits, mean reduction. Methods:

  pyg_randint        the usual training step: neg_dst = torch.randint(N, (E*K,)), the sources
                     repeated, cat([pos, neg], 1), (z[src] * z[dst]).sum(-1), then
                     F.binary_cross_entropy_with_logits against cat([ones, zeros])
  pyg_sampler        the same with exact negatives: NegativeSampler.sample_per_source (never
                     an edge of the positives' graph, no self-loop); sampler built untimed
  edge_dot_unfused   pyg_randint's negatives and cat, scored by pyg_edgedot.edge_dot
  ours               pyg_edgedot.edge_dot_loss (structured, no sampler: unchecked negatives)
  ours_sampler       pyg_edgedot.edge_dot_loss with the NegativeSampler (exact negatives)
  edge_dot_positives pyg_edgedot.edge_dot on the E positives alone, .sum() as the loss:
                     the yardstick of the target "loss fwd+bwd <= 2.2x edge_dot fwd+bwd" at K=1
  ours_sampler_batch ours_sampler on one mini-batch: the first 65,536 positives (or E)
  ours_sampler_batch_index_per_call
                     the same with the sampler's kept bucket index withheld, so the kernels
                     build one per call, forward and backward

``check`` for ours / ours_sampler: |loss - eager loss on the same negatives| / |eager loss|
(the negatives materialized with loss_negatives, scored eagerly in float64; the first 2^20
positives).

Times are medians (CUDA events; perf_counter on the CPU) after two warm-up calls, with the L2
flushed before each CUDA repetition; peak extra memory as in bench_edge_dot.py. Output: a
table on stdout and a JSON (``--out``).

    python benchmarks/bench_edge_dot_loss.py --device cuda        # W3: 2.93M nodes, E = 30M
    python benchmarks/bench_edge_dot_loss.py --device cpu         # 100K nodes, E = 250K, D = 64
"""
import argparse
import datetime as _dt
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import device_info, software_info, write_json  # noqa: E402
from _timing import Bench, Options, failure, measure  # noqa: E402

SCHEMA = "pyg_edgedot-bench-edge-dot-loss/1"
SIZES = {"cuda": dict(nodes=2_927_963, edges=30_000_000, dim=128),
         "cpu": dict(nodes=100_000, edges=250_000, dim=64)}
METHODS = ["pyg_randint", "pyg_sampler", "edge_dot_unfused", "ours", "ours_sampler",
           "edge_dot_positives", "ours_sampler_batch", "ours_sampler_batch_index_per_call"]
BATCH = 1 << 16


def eager_bce(z: torch.Tensor, pairs: torch.Tensor, num_pos: int) -> torch.Tensor:
    logits = (z[pairs[0]] * z[pairs[1]]).sum(-1)
    labels = torch.zeros_like(logits)
    labels[:num_pos] = 1
    return F.binary_cross_entropy_with_logits(logits, labels)


def methods(z, pos, sampler, k) -> Dict[str, Callable[[], torch.Tensor]]:
    import pyg_edgedot
    from pyg_edgedot import edge_dot, edge_dot_loss

    num_nodes, num_pos = z.size(0), pos.size(1)

    def randint_pairs():
        neg_dst = torch.randint(0, num_nodes, (num_pos * k,), device=z.device)
        return torch.cat([pos, torch.stack([pos[0].repeat_interleave(k), neg_dst])], 1)

    def sampler_pairs():
        neg_dst = sampler.sample_per_source(pos[0], k).view(-1)
        return torch.cat([pos, torch.stack([pos[0].repeat_interleave(k), neg_dst])], 1)

    def edge_dot_bce():
        pairs = randint_pairs()
        logits = edge_dot(z, z, pairs)
        labels = torch.zeros_like(logits)
        labels[:num_pos] = 1
        return F.binary_cross_entropy_with_logits(logits, labels)

    batch = pos[:, :BATCH]

    def batch_index_per_call():
        space = sampler._directed
        space.adj_index = lambda: None  # shadows the method: no kept index for this call
        try:
            return edge_dot_loss(z, z, batch, num_negatives=k, sampler=sampler)
        finally:
            del space.adj_index

    assert pyg_edgedot.backends()[z.device.type] in ("cpp", "cuda")
    return {
        "pyg_randint": lambda: eager_bce(z, randint_pairs(), num_pos),
        "pyg_sampler": lambda: eager_bce(z, sampler_pairs(), num_pos),
        "edge_dot_unfused": edge_dot_bce,
        "ours": lambda: edge_dot_loss(z, z, pos, num_negatives=k),
        "ours_sampler": lambda: edge_dot_loss(z, z, pos, num_negatives=k, sampler=sampler),
        "edge_dot_positives": lambda: edge_dot(z, z, pos).sum(),
        "ours_sampler_batch": lambda: edge_dot_loss(z, z, batch, num_negatives=k,
                                                    sampler=sampler),
        "ours_sampler_batch_index_per_call": batch_index_per_call,
    }


def check(z, pos, sampler, k) -> float:
    """Our loss against the eager float64 loss on the same (materialized) negatives."""
    from pyg_edgedot import edge_dot_loss
    from pyg_edgedot.ops.edge_dot_loss import loss_negatives

    pos = pos[:, :1 << 20]   # the float64 reference gathers [E * (1 + K), D]
    with torch.no_grad():
        ours = edge_dot_loss(z, z, pos, num_negatives=k, sampler=sampler, seed=123)
        negs = loss_negatives(pos, 123, k, sampler=sampler,
                              num_nodes=z.size(0)).reshape(2, -1)
        ref = eager_bce(z.double(), torch.cat([pos, negs], 1), pos.size(1))
    return abs(ours.item() - ref.item()) / abs(ref.item())


def run(args) -> Dict[str, Any]:
    import pyg_edgedot
    from pyg_edgedot import NegativeSampler

    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    sizes = dict(SIZES[device.type])
    for key in ("nodes", "edges", "dim"):
        if getattr(args, key) is not None:
            sizes[key] = getattr(args, key)
    sizes["num_negatives"] = args.num_negatives
    gen = torch.Generator().manual_seed(0)
    n, e, d, k = sizes["nodes"], sizes["edges"], sizes["dim"], args.num_negatives
    z = torch.randn(n, d, generator=gen).to(device).requires_grad_(True)
    pos = torch.randint(0, n, (2, e), generator=gen).to(device)
    sampler = NegativeSampler(pos, n)
    sampler._source_rows()
    bench = Bench(device, flush_bytes=(256 << 20) if device.type == "cuda" else 0)
    doc = {"schema": SCHEMA, "date": _dt.datetime.now().isoformat(timespec="seconds"),
           "command": " ".join(sys.argv), "device": device_info(device),
           "software": software_info(), "backends": pyg_edgedot.backends(),
           "threads": torch.get_num_threads(), "loadavg_before": _loadavg(), "sizes": sizes,
           "results": []}
    fns = methods(z, pos, sampler, k)
    for name in args.methods.split(","):
        fn = fns[name]

        def clear():
            z.grad = None

        def fwd_bwd(fn=fn):
            fn().backward()

        for phase, call in (("forward", fn), ("forward+backward", fwd_bwd)):
            try:
                rec = measure(bench, call, clear, Options(reps=args.reps))
            except Exception as err:  # noqa: BLE001  (OOM or error: in the table, go on)
                bench.free(collect=True)
                rec = failure(err)
            rec.update(method=name, phase=phase)
            doc["results"].append(rec)
            print(_row(rec), flush=True)
            bench.free()
    for name, samp in (("ours", None), ("ours_sampler", sampler)):
        if name in args.methods.split(","):
            doc["results"].append({"method": name, "phase": "check",
                                   "rel_err_vs_eager_f64": check(z, pos, samp, k)})
    doc["loadavg_after"] = _loadavg()
    return doc


def _loadavg():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def _row(rec: Dict[str, Any]) -> str:
    if rec.get("status") != "ok":
        return f"{rec['method']:<33} {rec['phase']:<17} {rec.get('status')}: {rec.get('message')}"
    peak = rec.get("peak_extra_bytes")
    peak = f"{peak / 2 ** 20:10.0f}" if peak is not None else f"{'n/a':>10}"
    return f"{rec['method']:<33} {rec['phase']:<17} {rec['ms']:10.3f} {peak}"


def summary(doc: Dict[str, Any]) -> List[str]:
    ms = {(r["method"], r["phase"]): r["ms"] for r in doc["results"] if r.get("status") == "ok"}
    lines = []
    for phase in ("forward", "forward+backward"):
        base = ms.get(("pyg_randint", phase))
        for name in ("ours", "ours_sampler"):
            if base and (name, phase) in ms:
                lines.append(f"{phase}: pyg_randint / {name} = {base / ms[name, phase]:.2f}x")
    yard = ms.get(("edge_dot_positives", "forward+backward"))
    for name in ("ours", "ours_sampler"):
        if yard and (name, "forward+backward") in ms:
            lines.append(f"fwd+bwd: {name} / edge_dot on the positives = "
                         f"{ms[name, 'forward+backward'] / yard:.2f}x (target <= 2.2x at K=1)")
    for r in doc["results"]:
        if r.get("phase") == "check":
            lines.append(f"check {r['method']}: rel. error vs eager float64 on the same "
                         f"negatives = {r['rel_err_vs_eager_f64']:.2e}")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--nodes", type=int)
    p.add_argument("--edges", type=int)
    p.add_argument("--dim", type=int)
    p.add_argument("--num-negatives", type=int, default=1)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=0,
                   help="torch.set_num_threads (CPU; 0: torch's default)")
    p.add_argument("--out", type=Path, default=None, help="JSON path")
    args = p.parse_args(argv)
    print(f"{'method':<33} {'phase':<17} {'ms':>10} {'peak MiB':>10}")
    doc = run(args)
    doc["summary"] = summary(doc)
    print("\n".join(doc["summary"]))
    print(f"threads {doc['threads']}, loadavg before {doc['loadavg_before']}, after "
          f"{doc['loadavg_after']}")
    out = args.out or (Path(__file__).resolve().parent / "results" /
                       f"{args.device}_edge_dot_loss.json")
    write_json(out, doc)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
