#!/usr/bin/env python
"""examples/link_pred.py's three pipelines side by side on the CPU: the runs behind
examples/README.md's "Our negatives and loss against PyG's pipeline (CPU)".

Pipelines (each a fresh ``python examples/link_pred.py --device cpu --no-progress`` process,
``OMP_NUM_THREADS=1``, the GCN encoder, the example's defaults otherwise):

  ours    the default: ``NegativeSampler`` negatives, ``EdgeDotScore``, BCE
  pyg     ``--neg-sampling pyg --decoder eager``: ``torch_geometric.utils.negative_sampling``
          and ``(z[src] * z[dst]).sum(-1)``
  fused   ``--loss fused``: ``EdgeDotLoss`` draws and scores the negatives inside the loss

Sections (``--sections``, comma-separated):

  quality  test ROC-AUC at the default 200 epochs, seeds 0 / 1 / 2, on Cora and on the
           generated graph (2,000 nodes): each pipeline against PyG's per seed
  time     Cora, 100 epochs, three runs of each pipeline taken in turn (ours, pyg, fused,
           three times): mean epoch time (the first epoch excluded) and its ``sample`` /
           ``step`` split
  large    the generated graph at ``--num-nodes 100000 --avg-degree 20 --epochs 4
           --num-rank-negatives 20`` (2M directed edges), one run of each

Cora's rows need ``--root DIR`` with ``DIR/Cora/raw`` (the Planetoid raw files; copied to a
temporary root, as PyG writes ``processed/`` beside them), else they are skipped.

    python benchmarks/bench_examples_cpu.py --root ../shared/data/Planetoid \\
        --out benchmarks/results/cpu_examples.json            # ~10 min on 2 cores

Output: the tables on stdout and every run's JSON report (metrics, timing, configuration)
under ``--out``.
"""
import argparse
import datetime as _dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

ROOT = Path(__file__).resolve().parent.parent
PIPELINES = {"ours": [], "pyg": ["--neg-sampling", "pyg", "--decoder", "eager"],
             "fused": ["--loss", "fused"]}
SECTIONS = ("quality", "time", "large")
LARGE = ["--num-nodes", "100000", "--avg-degree", "20", "--epochs", "4",
         "--num-rank-negatives", "20"]


def run_example(args: List[str]) -> Dict:
    """One example process; its --json report, plus the command and wall time."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run.json"
        command = ["examples/link_pred.py", "--device", "cpu", "--no-progress", *args]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        start = time.perf_counter()
        done = subprocess.run([sys.executable, *command, "--json", str(path)], cwd=ROOT,
                              env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"python {' '.join(command)} failed:\n{done.stderr[-2000:]}")
        doc = json.loads(path.read_text())
    doc.pop("history", None)  # per-epoch losses and metrics: the summary is enough here
    doc["command"] = ["python", *command]
    doc["wall_s"] = wall
    return doc


def summary(doc: Dict) -> Dict:
    phases = doc["timing"]["mean_phase_time_s"]
    return {"test_auc": doc["metrics"]["test_auc"],
            "epoch_ms": 1e3 * doc["timing"]["mean_epoch_time_s"],
            "sample_ms": 1e3 * phases.get("sample", 0.0),
            "step_ms": 1e3 * phases.get("step", 0.0)}


def quality(graphs: Dict[str, List[str]], seeds: List[int], runs: List[Dict]) -> None:
    print("\n## Test ROC-AUC, 200 epochs, seeds " + " / ".join(map(str, seeds)) + "\n")
    print("| graph | ours | PyG | fused | ours - PyG (mean) | fused - PyG (mean) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for graph, graph_args in graphs.items():
        auc: Dict[str, List[float]] = {name: [] for name in PIPELINES}
        for seed in seeds:
            for name, extra in PIPELINES.items():
                doc = run_example([*graph_args, "--seed", str(seed), *extra])
                result = summary(doc)
                runs.append({"section": "quality", "graph": graph, "pipeline": name,
                             "seed": seed, **result, "report": doc})
                auc[name].append(result["test_auc"])

        def cell(values: List[float]) -> str:
            return " / ".join(f"{v:.4f}" for v in values) + f" ({statistics.mean(values):.4f})"

        def diff(name: str) -> str:
            d = [a - b for a, b in zip(auc[name], auc["pyg"])]
            return " / ".join(f"{v:+.4f}" for v in d) + f" ({statistics.mean(d):+.4f})"

        print(f"| {graph} | {cell(auc['ours'])} | {cell(auc['pyg'])} | {cell(auc['fused'])} "
              f"| {diff('ours')} | {diff('fused')} |", flush=True)


def epoch_times(graph: str, graph_args: List[str], label: str, rounds: int, section: str,
                runs: List[Dict]) -> None:
    rows: Dict[str, List[Dict]] = {name: [] for name in PIPELINES}
    for _ in range(rounds):  # in turn, so that a slow spell of a shared machine hits all
        for name, extra in PIPELINES.items():
            doc = run_example([*graph_args, *extra])
            rows[name].append(summary(doc))
            runs.append({"section": section, "graph": graph, "pipeline": name,
                         **rows[name][-1], "report": doc})
    print(f"\n## Mean epoch time, {graph} ({label}), {rounds} run(s) each\n")
    print("| pipeline | epoch, ms (runs; mean) | sample, ms | step, ms | test ROC-AUC | "
          "PyG's epoch / this one |")
    print("| --- | --- | --- | --- | --- | --- |")
    pyg_epoch = statistics.mean(r["epoch_ms"] for r in rows["pyg"])
    for name, results in rows.items():
        epoch = statistics.mean(r["epoch_ms"] for r in results)
        print(f"| {name} | " + " / ".join(f"{r['epoch_ms']:.1f}" for r in results)
              + f" ({epoch:.1f}) | {statistics.mean(r['sample_ms'] for r in results):.2f} | "
              f"{statistics.mean(r['step_ms'] for r in results):.1f} | "
              + " / ".join(f"{r['test_auc']:.4f}" for r in results)
              + f" | {pyg_epoch / epoch:.2f}x |", flush=True)


def cpu_model() -> Optional[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name")), None)
    except OSError:
        return None


def git_commit() -> Optional[str]:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", type=Path, default=None,
                        help="a Planetoid root holding Cora/raw (omitted: no Cora rows)")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma-separated, of {', '.join(SECTIONS)}")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each pipeline (time)")
    parser.add_argument("--out", type=Path, default=None, help="JSON of every run")
    args = parser.parse_args()
    sections = [s for s in args.sections.split(",") if s]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"--sections: unknown {unknown}; choose from {list(SECTIONS)}")

    runs: List[Dict] = []
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    with tempfile.TemporaryDirectory() as tmp:
        graphs: Dict[str, List[str]] = {}
        if args.root is not None:
            raw = args.root / "Cora" / "raw"
            if not raw.is_dir():
                parser.error(f"--root: {raw} is not a directory")
            shutil.copytree(raw, Path(tmp) / "Cora" / "raw")
            graphs["Cora"] = ["--dataset", "Cora", "--root", tmp]
        else:
            print("no --root: the Cora rows are skipped")
        graphs["generated (2,000 nodes)"] = []
        if "quality" in sections:
            quality(graphs, args.seeds, runs)
        if "time" in sections and "Cora" in graphs:
            epoch_times("Cora", [*graphs["Cora"], "--epochs", "100"],
                        "--dataset Cora --root DIR --epochs 100", args.rounds, "time", runs)
        if "large" in sections:
            epoch_times("generated (100K nodes)", LARGE, " ".join(LARGE), 1, "large", runs)
    if args.out is not None:
        env = runs[0]["report"]["env"] if runs else {}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(
            {"command": ["python", "benchmarks/bench_examples_cpu.py", *sys.argv[1:]],
             "commit": git_commit(), "started": started,
             "finished": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
             "cpu_count": os.cpu_count(), "cpu_model": cpu_model(), "env": env,
             "runs": runs}, indent=1))
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
