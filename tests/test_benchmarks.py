"""The benchmarks run end to end on the CPU and write well-formed JSON and PNG files.

These tests never assert on times: only on the structure of the results, the statuses and the
correctness checks the scripts make. benchmarks/bench_edge_dot.py and bench_beyond.py run in a
subprocess, as a user would run them; their modules (benchmarks/_*.py) are also imported and
exercised directly on the CPU.
"""
import json
import math
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "bench_edge_dot.py"
sys.path.insert(0, str(ROOT / "benchmarks"))
import _host  # noqa: E402
import _peers  # noqa: E402
import _report  # noqa: E402
import _runner  # noqa: E402
import _timing  # noqa: E402
import _workloads  # noqa: E402
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
STATUSES = {"ok", "oom", "error", "n/a"}
PYG_METHODS = {"pyg_edgedot", "pyg_edgedot_novalidate", "pyg_edgedot_deterministic"}


def run_script(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == 0, (proc.stdout[-5000:], proc.stderr[-5000:])
    return proc


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One --device cpu --quick run, with an injected OOM to exercise that path."""
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    proc = run_script("--device", "cpu", "--quick", "--out", str(out),
                      "--inject-oom", "eager@Q2:fwdbwd")
    return json.loads(out.read_text()), out, proc


def _phases(method):
    return [(p, method[p]) for p in ("fwd", "fwdbwd") if p in method]


def test_quick_run_json_structure(quick_run):
    doc, _, _ = quick_run
    for key in ("schema", "created", "finished", "command", "device", "software",
                "pyg_edgedot", "settings", "copy_bandwidth", "host_overhead", "results", "giant",
                "sampled_addmm_probe", "skipped", "aborted"):
        assert key in doc, key
    assert doc["finished"] is True and doc["aborted"] is None and doc["skipped"] == []
    assert doc["device"]["type"] == "cpu"
    assert doc["copy_bandwidth"]["gbps"] > 0
    assert {(r["workload"], r["order"]) for r in doc["results"]} == {
        ("Q1", "random"), ("Q1", "sorted"), ("Q2", "random"), ("Q2", "sorted")}

    for rec in doc["results"]:
        for key in ("num_src", "num_dst", "num_edges", "dim", "dtype", "index_dtype",
                    "out_bytes", "out_grad_bytes", "fwd_bytes", "floor", "methods"):
            assert key in rec, key
        assert rec["out_bytes"] == rec["num_edges"] * (4 if rec["dtype"] == "float32" else 2)
        assert rec["floor"]["fwd_ms"] > 0 and rec["floor"]["fwdbwd_ms"] > rec["floor"]["fwd_ms"]
        keys = [m["method"] for m in rec["methods"]]
        assert len(keys) == len(set(keys))
        assert "eager" in keys and "pyg_edgedot" in keys
        for m in rec["methods"]:
            assert m["label"]
            for phase, r in _phases(m):
                assert r["status"] in STATUSES, r
                if r["status"] == "ok":
                    assert r["ms"] > 0 and r["reps"] >= 1 and r["warmups"] >= 1
                    assert r["min_ms"] <= r["ms"] <= r["max_ms"]
                    assert set(r["check"]) == {"max_err", "tol", "ok"}
                    assert r["check"]["ok"], (rec["workload"], m["method"], phase, r)
                    assert m[f"speedup_{phase}"] is None or m[f"speedup_{phase}"] > 0
                else:
                    assert r["message"]
                    assert m[f"speedup_{phase}"] is None


def test_quick_run_methods_per_case(quick_run):
    doc, _, _ = quick_run
    by_case = {(r["workload"], r["order"]): {m["method"]: m for m in r["methods"]}
               for r in doc["results"]}
    for (wl, order), methods in by_case.items():
        # pyg_edgedot itself must always run and be right.
        for key in PYG_METHODS & set(methods):
            for phase, r in _phases(methods[key]):
                assert r["status"] == "ok" and r["check"]["ok"], (wl, order, key, phase, r)
        # Rows that exist by design only in some cases.
        assert ("pyg_edgedot_deterministic" in methods) == (wl == "Q1")
        assert ("cusparse_sort" in methods) == (order == "random")
        assert set(methods["cusparse"]) >= {"fwd"} and "fwdbwd" not in methods["cusparse"]
        if wl == "Q2":  # bfloat16: sampled_addmm is float32 only
            assert methods["cusparse"]["fwd"]["status"] == "n/a"
        else:
            assert methods["cusparse"]["fwd"]["status"] in {"ok", "error"}
        assert methods["eager"]["speedup_fwd"] == pytest.approx(1.0)


def test_injected_oom_is_reported_not_fatal(quick_run):
    doc, _, proc = quick_run
    for rec in doc["results"]:
        eager = next(m for m in rec["methods"] if m["method"] == "eager")
        if rec["workload"] == "Q2":
            assert eager["fwdbwd"]["status"] == "oom"
            assert eager["fwd"]["status"] == "ok"
            # Without an eager fwd+bwd time there is no fwd+bwd speed-up for anyone.
            assert all(m["speedup_fwdbwd"] is None for m in rec["methods"])
        else:
            assert eager["fwdbwd"]["status"] == "ok"
    assert "OOM" in proc.stdout


def test_quick_run_giant_and_probe(quick_run):
    doc, _, _ = quick_run
    giant = doc["giant"]
    assert giant["status"] == "ok" and giant["passed"] is True and giant["scaled_down"]
    assert giant["index_dtype"] == "int32" and giant["dtype"] == "bfloat16"
    assert giant["forced_positions"][-1] == giant["num_edges"] - 1
    probe = doc["sampled_addmm_probe"]
    assert probe["status"] in {"ok", "error"}
    if probe["status"] == "ok":
        assert isinstance(probe["per_entry_dot"], bool)


def test_quick_run_outputs(quick_run):
    doc, out, proc = quick_run
    png = out.with_suffix(".png")
    assert png.exists() and png.read_bytes()[:8] == PNG_MAGIC
    assert not out.with_name(out.name + ".tmp").exists()
    # The table is on stdout, with a row per workload x order x method.
    assert "xE fwd" in proc.stdout and "peak MB f+b" in proc.stdout
    for rec in doc["results"]:
        for m in rec["methods"]:
            assert f"{rec['workload']:<8} {rec['order']:<6} {m['label']}" in proc.stdout


def test_from_json_redraws(quick_run, tmp_path):
    _, out, _ = quick_run
    png = tmp_path / "again.png"
    proc = run_script("--from-json", str(out), "--plot", str(png))
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert "Q2" in proc.stdout and "giant check" in proc.stdout
    assert "host overhead at Q1" in proc.stdout


def _record(workload, order, times, dtype="float32"):
    """A results record with fwd / fwdbwd medians per method (None: not run; a str: status)."""
    methods = []
    for key, (fwd, fwdbwd) in times.items():
        m = {"method": key}
        for phase, ms in (("fwd", fwd), ("fwdbwd", fwdbwd)):
            if isinstance(ms, str):
                m[phase] = {"status": ms}
            elif ms is not None:
                m[phase] = {"status": "ok", "ms": ms, "peak_extra_bytes": 1 << 20}
        methods.append(m)
    return {"workload": workload, "order": order, "num_src": 10, "num_dst": 10,
            "num_edges": 100, "dim": 8, "dtype": dtype, "methods": methods}


def test_readme_tables_mark_the_fastest():
    doc = {"results": [
        _record("W1", "random", {"pyg_edgedot": (0.0066, 0.0263),
                                 "pyg_edgedot_novalidate": (0.0065, 0.0262),
                                 "eager": (0.0399, 0.177), "compile": (0.0072, 0.0188),
                                 "cusparse": (0.0215, None), "cusparse_sort": (0.527, None)}),
        _record("W7", "random", {"pyg_edgedot": (35.56, 91.8), "eager": ("oom", "oom"),
                                 "compile": (35.7, 1504.5), "cusparse": (21.0, None),
                                 "cusparse_sort": (55.5, None)}, "bfloat16"),
        _record("W3", "sorted", {"pyg_edgedot": (5.111, 17.52), "compile": (4.626, 154.3),
                                 "cusparse": ("n/a", None)})]}
    random_table, sorted_table = _report.readme_tables(doc).split("\n\n")
    w1, w7 = random_table.splitlines()[2:]
    # Bold: the fastest of the shown methods per phase; validate=False is never marked.
    assert w1.split(" | ")[1:8] == ["**0.0066** / 0.0065", "0.040", "0.0072",
                                    "0.021 / 0.527", "0.026", "0.177", "**0.019**"]
    assert "W7 10 nodes, E = 100, D = 8, bfloat16" in w7
    assert "| OOM |" in w7 and "**21.0** / 55.5" in w7 and "**91.8**" in w7 and "1,504" in w7
    w3, = sorted_table.splitlines()[2:]
    assert w3.split(" | ")[1:6] == ["5.11 / -", "**4.63**", "n/a", "**17.5**", "154 |"]


def test_readme_tables_are_the_published_run():
    # README's Performance tables are readme_tables() and host_markdown() of
    # results/h100.json, row for row.
    doc = json.loads((ROOT / "benchmarks" / "results" / "h100.json").read_text())
    readme = (ROOT / "README.md").read_text()
    lines = (_report.readme_tables(doc) + "\n" + _host.host_markdown(doc["host_overhead"]))
    for line in lines.splitlines():
        assert line in readme, line


def test_host_markdown_marks_and_rounds():
    host = {"rows": [
        {"method": "pyg_edgedot", "phase": "fwd", "status": "ok", "host_us": 50.84,
         "gpu_us": 4.61, "gpu_span_host_bound": True, "kernel_us": 3.58, "kernels_per_call": 1.0},
        {"method": "pyg_edgedot", "phase": "fwdbwd", "status": "ok", "host_us": 312.7,
         "gpu_us": 93.5, "gpu_span_host_bound": False, "kernel_us": 16.04,
         "kernels_per_call": 2.0},
        {"method": "compile", "phase": "fwd", "status": "oom", "message": "x"}]}
    rows = _host.host_markdown(host).splitlines()
    assert rows[2] == "| pyg_edgedot (default) | 50.8 | 4.6* | 3.6 (1) | 313 | 93.5 | 16.0 (2) |"
    assert rows[3] == "| `torch.compile` | OOM |  |  | - |  |  |"


def run_main(capsys, *args: str) -> str:
    """bench_edge_dot.main in this process (no second torch import); returns its stdout."""
    import bench_edge_dot
    assert bench_edge_dot.main(list(args)) == 0
    return capsys.readouterr().out


def test_time_budget_stops_new_workloads(tmp_path, capsys):
    out = tmp_path / "budget.json"
    stdout = run_main(capsys, "--device", "cpu", "--quick", "--time-budget", "0", "--out",
                      str(out), "--methods", "pyg_edgedot,eager")
    doc = json.loads(out.read_text())
    assert doc["results"] == []
    assert doc["host_overhead"] is None
    assert [s["what"] for s in doc["skipped"]] == ["host", "Q1", "Q2", "giant"]
    assert all("time budget" in s["reason"] for s in doc["skipped"])
    assert "SKIPPED" in stdout
    assert out.with_suffix(".png").read_bytes()[:8] == PNG_MAGIC


def test_quick_run_host_overhead(quick_run):
    """The host-overhead section ran first, at Q1, for every method it covers; CPU: host only."""
    doc, _, proc = quick_run
    host = doc["host_overhead"]
    assert host["workload"] == "Q1" and host["calls"] >= 1 and host["rounds"] >= 1
    rows = {(r["method"], r["phase"]): r for r in host["rows"]}
    assert set(rows) == {(m, p) for m in ("pyg_edgedot", "pyg_edgedot_novalidate", "eager",
                                          "compile") for p in ("fwd", "fwdbwd")}
    for r in rows.values():
        assert r["status"] == "ok", r
        assert r["host_us"] > 0 and r["host_us_min"] <= r["host_us"]
        assert r["gpu_us"] is None and r["kernel_us"] is None and r["kernels_per_call"] is None
    assert "host overhead at Q1" in proc.stdout
    assert proc.stdout.index("host overhead at Q1") < proc.stdout.index("Q1/random")


def test_host_section_alone(tmp_path, capsys):
    out = tmp_path / "host.json"
    stdout = run_main(capsys, "--device", "cpu", "--quick", "--sections", "host", "--methods",
                      "pyg_edgedot_novalidate,eager", "--out", str(out))
    doc = json.loads(out.read_text())
    assert doc["settings"]["sections"] == ["host"]
    assert doc["results"] == [] and doc["giant"] is None and doc["finished"] is True
    assert [(r["method"], r["phase"]) for r in doc["host_overhead"]["rows"]] == [
        ("pyg_edgedot_novalidate", "fwd"), ("pyg_edgedot_novalidate", "fwdbwd"),
        ("eager", "fwd"), ("eager", "fwdbwd")]
    assert "pyg_edgedot validate=False" in stdout and "xE fwd" not in stdout


def test_profile_adds_each_phase_breakdown(tmp_path, capsys):
    out = tmp_path / "profile.json"
    stdout = run_main(capsys, "--device", "cpu", "--quick", "--workloads", "Q1", "--orders",
                      "random", "--sections", "peers", "--methods", "pyg_edgedot,eager",
                      "--profile", "--out", str(out))
    doc = json.loads(out.read_text())
    assert doc["settings"]["profile"] is True
    [result] = doc["results"]
    for rec in result["methods"]:
        for phase in ("fwd", "fwdbwd"):
            prof = rec[phase]["profile"]
            assert prof["unit"] == "ops" and prof["calls"] >= len(prof["rows"]) > 0
            assert prof["total_us"] >= sum(r["us"] for r in prof["rows"]) > 0
            assert f"profile of Q1/random {rec['method']} {phase}:" in stdout
    eager_ops = {r["name"] for r in result["methods"][1]["fwdbwd"]["profile"]["rows"]}
    assert "aten::mul" in eager_ops  # the eager expression's own op


def test_a_failed_profile_keeps_the_timing(tmp_path, capsys, monkeypatch):
    def broken_profiler(*args, **kwargs):
        raise RuntimeError("profiler unavailable")

    monkeypatch.setattr(_runner, "profile_once", broken_profiler)
    out = tmp_path / "profile.json"
    run_main(capsys, "--device", "cpu", "--quick", "--workloads", "Q1", "--orders", "random",
             "--sections", "peers", "--methods", "eager", "--profile", "--out", str(out))
    [rec] = json.loads(out.read_text())["results"][0]["methods"]
    for phase in ("fwd", "fwdbwd"):
        assert rec[phase]["status"] == "ok" and rec[phase]["ms"] > 0
        assert "profile" not in rec[phase]
        assert rec[phase]["profile_error"] == "RuntimeError: profiler unavailable"


def test_no_profile_without_the_flag(quick_run):
    doc, _, _ = quick_run
    assert doc["settings"]["profile"] is False
    assert not any("profile" in rec.get(phase, {}) for result in doc["results"]
                   for rec in result["methods"] for phase in ("fwd", "fwdbwd"))


def test_floors_table():
    proc = run_script("--floors")
    assert "| W3 |" in proc.stdout and "| W7 |" in proc.stdout
    # W3 forward: (2*30M*128*4 + 2*30M*8 + 30M*4) bytes = 31.32 GB at 4,300 GB/s = 7.284 ms.
    w3 = next(line for line in proc.stdout.splitlines() if line.startswith("| W3 |"))
    assert "| 31.32 | 7.284 |" in w3


# ---- the helpers, on the CPU ----------------------------------------------------------------

def test_floors_arithmetic():
    wl = _workloads.Workload("T", 10, 20, 100, 8)
    f = _workloads.floors(wl, 1.0)
    assert f["gather_bytes"] == 2 * 100 * 8 * 4
    assert f["fwd_bytes"] == 2 * 100 * 8 * 4 + 2 * 100 * 8 + 100 * 4
    per_grad = 100 * 8 * 4 + 2 * 100 * 8 + 100 * 4
    assert f["fwdbwd_bytes"] == f["fwd_bytes"] + 2 * per_grad + (10 + 20) * 8 * 4
    assert f["out_grad_bytes"] == 100 * 4 + (10 + 20) * 8 * 4
    assert f["fwd_ms"] == pytest.approx(f["fwd_bytes"] / 1e9 * 1e3)


def test_time_reps_and_peak_memory_on_cpu():
    b = _timing.Bench(torch.device("cpu"), flush_bytes=1 << 20)
    calls = {"before": 0, "fn": 0}

    def before():
        calls["before"] += 1

    def fn():
        calls["fn"] += 1

    times = b.time_reps(fn, before, 4)
    assert len(times) == 4 and all(t >= 0 for t in times)
    assert calls == {"before": 4, "fn": 4}
    assert b.wall(fn) >= 0

    held = []
    peak, seconds = b.peak_extra(lambda: held.append(torch.ones(16 << 20)))  # 64 MB, touched
    assert seconds >= 0
    if peak is not None:  # None where the RSS cannot be read
        assert peak >= 32e6
    bw = b.copy_bandwidth(4 << 20, reps=2)
    assert bw["gbps"] > 0 and bw["bytes"] == 4 << 20


def test_build_csr_merges_duplicates():
    src = torch.tensor([2, 0, 2, 1, 0, 2])
    dst = torch.tensor([1, 3, 1, 0, 2, 0])  # (2, 1) twice
    csr, inverse = _workloads.build_csr(src, dst, 3, 4, torch.float32)
    assert csr._nnz() == 5 and inverse.shape == (6,)
    assert csr.crow_indices().tolist() == [0, 2, 3, 5]
    assert csr.col_indices().tolist() == [2, 3, 0, 0, 1]
    x_src, x_dst = torch.randn(3, 5), torch.randn(4, 5)
    out = torch.sparse.sampled_addmm(csr, x_src, x_dst.t(), beta=0.0)
    expected = (x_src[src] * x_dst[dst]).sum(-1)
    torch.testing.assert_close(out.values()[inverse], expected)


def test_sort_by_source_permutes_grad():
    ei = torch.tensor([[2, 0, 2, 1], [1, 3, 0, 0]])
    grad = torch.tensor([10.0, 11.0, 12.0, 13.0])
    sorted_ei, sorted_grad = _workloads.sort_by_source(ei, grad, 4)
    assert sorted_ei.tolist() == [[0, 1, 2, 2], [3, 0, 0, 1]]
    assert sorted_grad.tolist() == [11.0, 13.0, 12.0, 10.0]


def test_deterministic_context_restores_the_flag():
    before = torch.are_deterministic_algorithms_enabled()
    with _peers.deterministic_algorithms():
        assert torch.are_deterministic_algorithms_enabled()
    assert torch.are_deterministic_algorithms_enabled() == before
    with pytest.raises(RuntimeError):
        with _peers.deterministic_algorithms():
            raise RuntimeError("boom")
    assert torch.are_deterministic_algorithms_enabled() == before


def test_normalised_error():
    ref = torch.tensor([1.0, -2.0], dtype=torch.float64)
    abs_sum = torch.tensor([2.0, 4.0], dtype=torch.float64)
    assert _workloads.normalised_error(torch.tensor([1.0, -2.0]), ref, abs_sum) == 0.0
    assert _workloads.normalised_error(torch.tensor([1.5, -2.0]), ref, abs_sum) == pytest.approx(0.25)
    assert _workloads.normalised_error(torch.tensor([float("nan"), -2.0]), ref, abs_sum) == math.inf


def test_reference_catches_wrong_scores_and_grads():
    wl = _workloads.Workload("T", 30, 20, 400, 8)
    x_src, x_dst, ei, grad = _workloads.make_inputs(wl, torch.device("cpu"))
    case = _workloads.Case(wl, "random", x_src, x_dst, ei, grad)
    ref = _workloads.Reference(case, num_edges=64, num_rows=8)
    out = _peers.eager_scores(x_src, x_dst, case.src, case.dst)
    assert ref.check_scores(out) <= ref.tol
    assert ref.check_scores(out.roll(1)) > 1e-2
    out.backward(grad)
    assert ref.check_grads() <= ref.tol
    x_src.grad.mul_(1.1)
    assert ref.check_grads() > 1e-2


# ---- the CUDA branches, with torch.cuda's clocks and memory statistics faked ------------------

class FakeEvent:
    def __init__(self, enable_timing: bool = False) -> None:
        self.t = None

    def record(self) -> None:
        self.t = time.perf_counter()

    def query(self) -> bool:
        return self.t is not None

    def elapsed_time(self, end: "FakeEvent") -> float:
        return (end.t - self.t) * 1e3


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda's events, sync and memory statistics, faked so that the CUDA branches of the
    helpers run here (no GPU); 'allocated' is what the fake allocator reports."""
    allocated = {"now": 1000, "peak": 1000}
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: time.sleep(1e-4))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated["now"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated",
                        lambda device=None: allocated["peak"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats",
                        lambda device=None: allocated.update(peak=allocated["now"]))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (8 << 30, 16 << 30))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace(
        name="NVIDIA H200", major=9, minor=0, total_memory=150 << 30,
        multi_processor_count=132, L2_cache_size=50 << 20))
    return allocated


def test_cuda_branches_of_the_helpers(fake_cuda):
    b = _timing.Bench(torch.device("cuda"), flush_bytes=0)
    assert b.is_cuda and "max_memory_allocated" in b.memory_kind
    before = []
    times = b.time_reps(lambda: time.sleep(0.002), lambda: before.append(1), 3)
    assert len(times) == 3 and len(before) == 3 and all(t > 1.0 for t in times)

    def allocate():
        fake_cuda["peak"] = fake_cuda["now"] + 5000

    peak, seconds = b.peak_extra(allocate)
    assert peak == 5000 and seconds >= 0
    b.free(collect=True)

    info = _report.device_info(torch.device("cuda"))
    assert info["name"] == "NVIDIA H200" and info["capability"] == "9.0"
    path = _report.default_out_path(info["name"], "cuda", quick=False)
    assert path.parent == _report.RESULTS_DIR and path.name.startswith("h200_")
    assert _report.default_out_path("cpu", "cpu", quick=True).name.startswith("cpu_quick_")


def test_host_bound_reps_are_dropped(fake_cuda, monkeypatch):
    """A repetition in which the GPU reached the start event before the host's last launch
    (here: the fake event says so for every other one, and those calls are the slow ones)
    stays out of the median, min and max; where too few are left, all of them count."""
    pattern = iter([False, True] * 4)
    state = {"slow": False}

    class Event(FakeEvent):
        made = 0

        def __init__(self, enable_timing: bool = False) -> None:
            super().__init__(enable_timing)
            Event.made += 1
            if Event.made % 2:  # a repetition's start event: its call is slow and host-bound
                state["slow"] = self.bound = next(pattern)

        def query(self) -> bool:
            return self.bound

    monkeypatch.setattr(torch.cuda, "Event", Event)
    b = _timing.Bench(torch.device("cuda"), flush_bytes=0)

    def call():
        time.sleep(0.02 if state["slow"] else 0.001)

    rec = _timing.measure(b, call, lambda: None, _timing.Options(warmups=2, reps=8, min_reps=3))
    assert rec["host_bound_reps"] == 4 and rec["dropped_reps"] == 4 and rec["reps"] == 4
    assert rec["max_ms"] < 15  # the 20 ms calls are gone
    assert _runner._dropped(rec) == " (+4 host-bound, dropped)"

    times, late = [1.0, 9.0, 1.2, 9.5], [False, True, False, True]
    assert _timing.device_bound(times, late, min_reps=2) == [1.0, 1.2]
    assert _timing.device_bound(times, late, min_reps=3) == times  # too few left: all count
    assert _timing.device_bound(times, [True] * 4, min_reps=1) == times
    assert _runner._dropped({"host_bound_reps": 4, "dropped_reps": 0, "reps": 4}).startswith(" (all")
    assert _runner._dropped({"host_bound_reps": 3, "dropped_reps": 0, "reps": 4}) == (
        " (3 host-bound, kept: too few others to drop them)")
    assert _runner._dropped({"host_bound_reps": 0, "dropped_reps": 0}) == ""


@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_host_row_cuda_branches(fake_cuda):
    """measure_row's GPU columns, with the clocks faked (the tensors stay on the CPU)."""
    b = _timing.Bench(torch.device("cuda"), flush_bytes=0)
    wl = _workloads.WORKLOADS["Q1"]
    x_src, x_dst, ei, grad = _workloads.make_inputs(wl, torch.device("cpu"))
    case = _workloads.Case(wl, "random", x_src, x_dst, ei, grad)
    row = _host.measure_row(b, _peers.Eager(b), case, "fwdbwd", calls=4, rounds=2)
    assert row["status"] == "ok" and row["host_us"] > 0 and row["gpu_us"] > 0
    # FakeEvent.query is True once recorded: 'the GPU caught up', so the span is marked.
    assert row["gpu_span_host_bound"] is True
    assert (row["kernel_us"] is None) == ("profiler_error" in row)
    assert x_src.grad is None  # cleared after the measurement
    table = _host.format_host_table({
        "workload": "Q1", "num_src": 64, "num_dst": 48, "num_edges": 512, "dim": 16,
        "dtype": "float32", "calls": 4, "rounds": 2,
        "rows": [dict(row, method="eager", label="PyG eager", phase="fwdbwd"),
                 {"status": "oom", "message": "x", "method": "eager", "label": "PyG eager",
                  "phase": "fwd"}]})
    line = next(ln for ln in table.splitlines() if ln.startswith("PyG eager"))
    assert "OOM" in line and "*" in line


def test_giant_is_skipped_when_the_gpu_lacks_memory(fake_cuda, tmp_path):
    b = _timing.Bench(torch.device("cuda"), flush_bytes=0)
    doc = {"giant": None, "skipped": [], "results": []}
    run = _runner.Run(b, _timing.Options(), doc, tmp_path / "r.json", time_budget=None)
    run_giant_spec = _workloads.GIANT["cuda"]
    assert run_giant_spec.num_edges == 2**31 + 1 and run_giant_spec.index_dtype == "int32"
    _runner.run_giant(run, run_giant_spec)  # 8 GiB free (faked) < ~30 GB needed
    assert doc["giant"]["status"] == "skipped" and "GB free" in doc["giant"]["message"]
    assert json.loads((tmp_path / "r.json").read_text())["giant"]["status"] == "skipped"


def test_bench_beyond_quick_cpu(tmp_path):
    """benchmarks/bench_beyond.py --quick on the CPU: every section reports, ranks agree."""
    out = tmp_path / "beyond.json"
    script = ROOT / "benchmarks" / "bench_beyond.py"
    proc = subprocess.run([sys.executable, str(script), "--quick", "--device", "cpu",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, (proc.stdout[-5000:], proc.stderr[-5000:])
    doc = json.loads(out.read_text())
    assert doc["schema"] == "pyg_edgedot-bench-beyond/1" and doc["quick"]
    by_section = {}
    for rec in doc["results"]:
        by_section.setdefault(rec["section"], []).append(rec)
    assert set(by_section) == {"ranking", "candidates", "distmult", "triton"}
    assert [r["status"] for r in by_section["triton"]] == ["n/a"]  # needs CUDA
    ranking = {r["method"]: r for r in by_section["ranking"]}
    assert set(ranking) == {"ogb_batched", "ogb_batched_1M", "edge_dot_pairs",
                            "score_candidates", "rank_candidates"}
    for rec in ranking.values():
        assert rec["status"] == "ok" and rec["ms"] > 0
        assert rec["ranks_equal_to_ogb_batched"] >= 0.99
    assert {r["method"] for r in by_section["candidates"]} == {
        "edge_dot", "score_candidates", "eager", "compile"}
    for rec in by_section["candidates"]:
        # Ours accumulate in fp32; the peers' bf16 expression rounds each product to bf16
        # (scores of magnitude ~8 at D = 32: an ulp is 0.0625).
        ours = rec["method"] in ("edge_dot", "score_candidates")
        tol = 1e-2 if ours or "float32" in rec["case"] else 0.5
        assert rec["status"] == "ok" and rec["max_abs_diff_vs_edge_dot"] <= tol
        # The shared _timing.measure record.
        assert {"ms", "min_ms", "max_ms", "reps", "warmups", "peak_extra_bytes"} <= set(rec)
    phases = {(r["method"], r["phase"]) for r in by_section["distmult"]}
    assert phases == {(m, p) for m in ("pyg_edgedot", "eager", "compile")
                      for p in ("fwd", "fwd+bwd")}
    assert all(r["status"] == "ok" for r in by_section["distmult"])
    assert "== ranking ==" in proc.stdout


def test_bench_topk_tiny_cpu(tmp_path):
    """benchmarks/bench_topk.py at a tiny size on the CPU: every method reports (faiss: ok
    where it is installed, else n/a), and ours returns the chunked reference's indices."""
    out = tmp_path / "topk.json"
    script = ROOT / "benchmarks" / "bench_topk.py"
    proc = subprocess.run([sys.executable, str(script), "--device", "cpu", "--small",
                           "--num-src", "300", "--num-dst", "2000", "--k", "10",
                           "--seen-per-src", "30", "--chunks", "64,256", "--reps", "2",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, (proc.stdout[-5000:], proc.stderr[-5000:])
    doc = json.loads(out.read_text())
    assert doc["schema"] == "pyg_edgedot-bench-topk/1"
    assert doc["topk_backend"] in ("cpp", "python")
    [case] = doc["cases"]
    assert (case["num_src"], case["num_dst"], case["k"], case["dtype"]) == (300, 2000, 10,
                                                                           "float32")
    assert 0 < case["num_excluded"] <= 300 * 30
    methods = case["methods"]
    assert set(methods) == {"ours", "chunked@64", "chunked@256", "faiss", "mm_floor@64",
                            "mm_floor@256", "mm_floor@256x4096", "mm_floor@1024x512"}
    for name, rec in methods.items():
        if name == "faiss" and rec["status"] == "n/a":
            assert "not installed" in rec["message"]
            continue
        assert rec["status"] == "ok", (name, rec)
        assert rec["ms_min"] <= rec["ms"] and len(rec["ms_all"]) == 2
    assert case["best_chunked"] in ("chunked@64", "chunked@256")
    assert case["speedup_vs_best_chunked"] > 0 and case["floor_gflops"] > 0
    check = case["check"][case["best_chunked"]]
    assert check["ok"] and check["rows_identical"] == 1.0 and check["rows_equivalent"] == 1.0
    assert check["seen_returned_ours"] == check["seen_returned_other"] == 0
    if methods["faiss"]["status"] == "ok":
        assert case["check"]["faiss"]["ok"]
    assert "check vs chunked@" in proc.stdout and ": ok" in proc.stdout


def test_bench_topk_compare_catches_a_seen_pair_and_a_wrong_item():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_topk
    x_src, x_dst, seen = bench_topk.make_inputs(20, 50, 8, 5, torch.float32, "cpu")
    ref = bench_topk.chunked(x_src, x_dst, 4, seen, 8, torch.empty(8 * 50))()
    assert bench_topk.compare(x_src, x_dst, seen, ref, ref)["ok"]
    wrong = ref.clone()
    wrong[3, 0] = seen[1, seen[0] == 3][0]  # a seen pair
    got = bench_topk.compare(x_src, x_dst, seen, wrong, ref)
    assert not got["ok"] and got["seen_returned_ours"] == 1
    worse = ref.clone()
    scores = x_src[5] @ x_dst.t()
    worse[5, 0] = int(scores.argmin())  # a far worse item
    got = bench_topk.compare(x_src, x_dst, seen, worse, ref)
    assert not got["ok"] and got["rows_equivalent"] == 19 / 20
