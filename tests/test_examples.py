"""The examples run end to end on tiny data on the CPU and write sane JSON reports.

Each example runs once as a user would run it, in a subprocess (``sys.executable``), for a
few epochs, and the test checks the JSON it wrote. Other runs happen in this process, by
calling the script's ``main(argv)``, since starting Python with torch and PyG costs ~5-10 s
on two cores. The shared helpers of ``examples/`` get direct unit tests where a bug would
otherwise be silent (ranking ties, the generators).
"""
import contextlib
import importlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
CORA_RAW = REPO.parent / "shared" / "data" / "Planetoid" / "Cora" / "raw"
SCRIPTS = ("link_pred.py", "hetero_link_pred.py", "link_neighbor_loader.py", "gae.py",
           "ddp_link_pred.py")
TIMEOUT = 900  # generous: the first import on a machine may compile the kernels

TINY_GRAPH = ["--num-nodes", "300", "--avg-degree", "8", "--feat-dim", "16",
              "--num-blocks", "4", "--hidden-channels", "16", "--out-channels", "16"]
TINY_EVAL = ["--num-rank-negatives", "20", "--hits-k", "3", "10"]


def _command(script, *args, json_path, torchrun_procs=None):
    cmd = [sys.executable]
    if torchrun_procs:
        cmd += ["-m", "torch.distributed.run", "--standalone",  # free port, chosen by torchrun
                "--nproc_per_node", str(torchrun_procs)]
    return cmd + [str(EXAMPLES / script), "--device", "cpu", "--no-progress",
                  "--json", str(json_path), *map(str, args)]


def _run(cmd, cwd):
    """``subprocess.run`` in a session of its own, killed as a whole on timeout or interrupt.

    torchrun's workers are its children: killing torchrun alone (what ``subprocess.run`` does
    on a timeout) would leave them running, holding a core each. The session of its own also
    keeps a Ctrl-C of pytest from reaching them, hence the kill on any exception.
    """
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT)
        except BaseException as error:
            with contextlib.suppress(ProcessLookupError):  # the whole group already ended
                os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            if not isinstance(error, subprocess.TimeoutExpired):
                raise
            pytest.fail(f"{cmd[1:]} ran past {TIMEOUT} s\n--- stdout\n{stdout[-4000:]}\n"
                        f"--- stderr\n{stderr[-6000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def run_example(tmp_path, script, *args, torchrun_procs=None, expect_ok=True):
    """Runs an example in ``tmp_path``; returns (its JSON report or None, the process)."""
    json_path = tmp_path / f"{Path(script).stem}.json"
    proc = _run(_command(script, *args, json_path=json_path, torchrun_procs=torchrun_procs),
                cwd=tmp_path)
    if not expect_ok:
        return None, proc
    assert proc.returncode == 0, (
        f"{script} exited with {proc.returncode}\n--- stdout\n{proc.stdout}\n"
        f"--- stderr\n{proc.stderr[-6000:]}")
    assert json_path.is_file(), f"{script} did not write {json_path}\n{proc.stdout}"
    return json.loads(json_path.read_text()), proc


def check_report(doc, *, example, epochs, hits_k=(3, 10)):
    """The JSON report has every key, finite metrics in [0, 1] and a consistent history."""
    assert doc["example"] == example
    metrics = doc["metrics"]
    expected = {"test_auc", "test_ap", "test_mrr", "best_val_auc",
                *(f"test_hits@{k}" for k in hits_k)}
    assert expected <= metrics.keys(), f"missing metrics: {expected - metrics.keys()}"
    for key in expected:
        value = metrics[key]
        assert isinstance(value, float) and math.isfinite(value) and 0.0 <= value <= 1.0, \
            f"{key} = {value!r}"
    hits = [metrics[f"test_hits@{k}"] for k in sorted(hits_k)]
    assert hits == sorted(hits), f"Hits@K must grow with K: {hits}"
    for k in hits_k:  # a positive within the top k adds at least 1/k to the MRR
        assert metrics["test_mrr"] >= metrics[f"test_hits@{k}"] / k - 1e-9
    assert 1 <= metrics["best_epoch"] <= epochs
    history = doc["history"]
    assert [h["epoch"] for h in history] == list(range(1, epochs + 1))
    assert all(math.isfinite(h["loss"]) and h["loss"] > 0 for h in history)
    assert max(h["val_auc"] for h in history) == pytest.approx(metrics["best_val_auc"])
    assert math.isfinite(doc["mean_epoch_time_s"]) and doc["mean_epoch_time_s"] > 0
    assert doc["timing"]["mean_epoch_time_s"] == doc["mean_epoch_time_s"]
    config = doc["config"]
    assert config["epochs"] == epochs and config["device"] == "cpu"
    assert config["hits_k"] == list(hits_k)
    assert doc["env"]["device"] == "cpu" and "cpu" in doc["env"]["pyg_edgedot_backends"]
    assert doc["data"]["scored_edges_per_epoch"] > 0


def import_example(name):
    """An example script (or helper) imported from ``examples/`` (on ``sys.path``)."""
    module = importlib.import_module(name)
    assert Path(module.__file__).resolve().parent == EXAMPLES, (
        f"{name} was imported from {module.__file__}, not from {EXAMPLES}")
    return module


@pytest.fixture
def examples_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))


def run_in_process(tmp_path, script, *args):
    """``main(argv)`` of an example in this process; returns the JSON report it wrote."""
    json_path = tmp_path / f"{Path(script).stem}-in-process.json"
    module = import_example(Path(script).stem)
    module.main(["--device", "cpu", "--no-progress", "--json", str(json_path),
                 *map(str, args)])
    return json.loads(json_path.read_text())


# Command lines ###########################################################################

@pytest.mark.parametrize("script", SCRIPTS)
def test_every_example_documents_its_options(script, examples_path, capsys):
    module = import_example(Path(script).stem)
    with pytest.raises(SystemExit) as exit_info:
        module.parse_args(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:"), out[:200]
    for option in ("--epochs", "--device", "--seed", "--json", "--no-progress", "--decoder",
                   "--num-rank-negatives", "--hits-k", "--lr"):
        assert option in out, f"{script} --help does not list {option}"
    assert "examples:" in out and f"examples/{script}" in out, \
        f"{script} --help shows no example command"
    if script in ("link_pred.py", "hetero_link_pred.py", "ddp_link_pred.py"):
        flat = " ".join(out.split())  # argparse wraps the help text
        assert "--neg-sampling {edgedot,pyg,uniform}" in flat, flat
        assert "--loss {bce,fused}" in flat, flat
        assert "pyg_edgedot.NegativeSampler" in flat and "(default: edgedot)" in flat
        assert "pyg_edgedot.EdgeDotLoss" in flat and "(default: bce)" in flat


def test_examples_readme_lists_every_example():
    readme = (EXAMPLES / "README.md").read_text()
    for script in SCRIPTS:
        assert f"examples/{script}" in readme, f"examples/README.md does not list {script}"


# link_pred.py ###########################################################################

@pytest.fixture(scope="module")
def link_pred_runs(tmp_path_factory):
    """link_pred.py with each decoder, same seed, on a tiny easy graph."""
    args = [*TINY_GRAPH, *TINY_EVAL, "--p-in", "0.95", "--epochs", "6", "--lr", "0.05",
            "--seed", "3"]
    runs = {}
    runs["edgedot"], _ = run_example(tmp_path_factory.mktemp("edgedot"), "link_pred.py",
                                     *args, "--decoder", "edgedot")
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.syspath_prepend(str(EXAMPLES))
        runs["eager"] = run_in_process(tmp_path_factory.mktemp("eager"), "link_pred.py",
                                       *args, "--decoder", "eager")
    return runs


def test_link_pred_writes_a_complete_report(link_pred_runs):
    doc = link_pred_runs["edgedot"]
    check_report(doc, example="link_pred", epochs=6)
    assert doc["config"]["decoder"] == "edgedot"
    # The defaults: negatives from pyg_edgedot.NegativeSampler, decoder scores + BCE.
    assert doc["config"]["neg_sampling"] == "edgedot" and doc["config"]["loss"] == "bce"
    assert doc["negatives"] == {"neg_sampling": "edgedot", "loss": "bce",
                                "negatives_per_positive": 1, "fused_loss": None}
    assert doc["data"]["num_nodes"] == 300
    assert set(doc["timing"]["mean_phase_time_s"]) == {"sample", "step"}


def test_link_pred_learns_the_generated_graph(link_pred_runs):
    # 4 communities, 95% of the edges inside them. Even an untrained GCN separates the test
    # edges from random pairs fairly well here (smoothed features), so check that training
    # helped: the loss falls well below chance (ln 2 = 0.693 for balanced BCE) and the
    # validation AUC rises. Swapped labels or a broken decoder fail this.
    doc = link_pred_runs["edgedot"]
    history, metrics = doc["history"], doc["metrics"]
    assert history[-1]["loss"] < 0.62, [h["loss"] for h in history]
    assert metrics["best_val_auc"] > history[0]["val_auc"] + 0.05, history
    assert metrics["best_epoch"] > 1
    assert metrics["test_auc"] > 0.8, metrics
    assert metrics["test_hits@10"] > 0.6, metrics  # 10 of 21 candidates is chance


def test_link_pred_decoders_agree(link_pred_runs):
    edgedot, eager = link_pred_runs["edgedot"], link_pred_runs["eager"]
    assert eager["config"]["decoder"] == "eager"
    for key in ("test_auc", "test_ap", "test_mrr", "best_val_auc"):
        assert edgedot["metrics"][key] == pytest.approx(eager["metrics"][key], abs=0.01), key
    losses = [h["loss"] for h in edgedot["history"]]
    assert losses == pytest.approx([h["loss"] for h in eager["history"]], rel=1e-3)


@pytest.mark.parametrize("options", [["--neg-sampling", "pyg", "--decoder", "eager"],
                                     ["--loss", "fused"],
                                     ["--loss", "fused", "--neg-sampling", "uniform"]],
                         ids=["pyg-pipeline", "fused", "fused-uniform"])
def test_link_pred_other_pipelines_learn(tmp_path, examples_path, options):
    # PyG's own pipeline (its negative_sampling and expression) and the fused loss train as
    # well as the default on the tiny graph of link_pred_runs.
    args = [*TINY_GRAPH, *TINY_EVAL, "--p-in", "0.95", "--epochs", "6", "--lr", "0.05",
            "--seed", "3"]
    doc = run_in_process(tmp_path, "link_pred.py", *args, *options)
    check_report(doc, example="link_pred", epochs=6)
    negatives = doc["negatives"]
    assert negatives["neg_sampling"] == doc["config"]["neg_sampling"]
    assert negatives["loss"] == doc["config"]["loss"]
    if "fused" in options:
        assert negatives["fused_loss"].startswith("EdgeDotLoss(num_negatives=1, "
                                                  "negatives='uniform'")
        assert ("sampler=NegativeSampler(" in negatives["fused_loss"]) == (
            "uniform" not in options)
    history, metrics = doc["history"], doc["metrics"]
    assert history[-1]["loss"] < 0.62, [h["loss"] for h in history]
    assert metrics["test_auc"] > 0.8, metrics


def test_fused_loss_refuses_pyg_negatives(tmp_path, examples_path):
    _common = import_example("_common")
    with pytest.raises(_common.ExampleError, match="--neg-sampling edgedot"):
        run_in_process(tmp_path, "link_pred.py", *TINY_GRAPH, "--epochs", "1",
                       "--loss", "fused", "--neg-sampling", "pyg")


@pytest.mark.parametrize("method", ["edgedot", "pyg", "uniform"])
def test_link_objective_draws_fresh_negatives(examples_path, method):
    import argparse
    _common = import_example("_common")
    known = _sampling_graph(num_nodes=40, num_edges=300).edge_index
    pos = known[:, :100]
    args = argparse.Namespace(neg_sampling=method, loss="bce")
    objective = _common.LinkObjective(args, _common.EagerDotScore(), known, 40)
    torch.manual_seed(0)
    first, label = objective.draw(pos)
    second, _ = objective.draw(pos)
    assert torch.equal(first[:, :100], pos) and not torch.equal(first, second)
    neg = first[:, 100:]
    assert torch.equal(label, torch.cat([torch.ones(100), torch.zeros(neg.size(1))]))
    assert bool((neg >= 0).all() and (neg < 40).all())
    if method == "edgedot":  # exact: as many as asked, none a known edge or a self-loop
        assert neg.size(1) == 100
        assert not set(map(tuple, neg.t().tolist())) & set(map(tuple, known.t().tolist()))
        assert not bool((neg[0] == neg[1]).any())
    z = torch.randn(40, 8)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(
        (z[first[0]] * z[first[1]]).sum(-1), label)
    torch.testing.assert_close(objective.loss(z, first, label), expected)


@pytest.mark.skipif(not CORA_RAW.is_dir(), reason=f"the Cora raw files are not at {CORA_RAW}")
def test_link_pred_on_cora(tmp_path, examples_path):
    root = tmp_path / "Planetoid"
    shutil.copytree(CORA_RAW, root / "Cora" / "raw")
    doc = run_in_process(tmp_path, "link_pred.py", "--dataset", "Cora", "--root", root,
                         "--epochs", "2", *TINY_EVAL)
    check_report(doc, example="link_pred", epochs=2)
    assert doc["data"]["num_nodes"] == 2708 and doc["data"]["num_features"] == 1433
    assert doc["config"]["dataset"] == "Cora"


def test_planetoid_without_raw_files_fails_clearly_and_never_downloads(tmp_path,
                                                                      examples_path):
    _common = import_example("_common")
    with pytest.raises(_common.ExampleError, match="never download") as error:
        run_in_process(tmp_path, "link_pred.py", "--dataset", "CiteSeer", "--root",
                       tmp_path / "empty", "--epochs", "1")
    assert "ind.citeseer.x" in str(error.value) and str(tmp_path / "empty") in str(error.value)
    assert not (tmp_path / "empty").exists()  # nothing was fetched or written


# The other examples ######################################################################

def test_hetero_link_pred(tmp_path):
    doc, _ = run_example(tmp_path, "hetero_link_pred.py", "--num-users", "200",
                         "--num-items", "100", "--avg-ratings", "5", "--num-genres", "5",
                         "--feat-dim", "16", "--hidden-channels", "16", "--out-channels", "16",
                         "--epochs", "2", *TINY_EVAL)
    check_report(doc, example="hetero_link_pred", epochs=2)
    assert doc["data"]["num_nodes"] == {"user": 200, "item": 100}
    edges = doc["data"]["num_edges"]
    assert edges["user__rates__item"] == edges["item__rev_rates__user"] > 0
    assert doc["negatives"]["neg_sampling"] == "edgedot"


def test_hetero_link_pred_fused_loss(tmp_path, examples_path):
    # A bipartite (users, items) sampler inside EdgeDotLoss, on (z['user'], z['item']).
    doc = run_in_process(tmp_path, "hetero_link_pred.py", "--num-users", "200",
                         "--num-items", "100", "--avg-ratings", "5", "--num-genres", "5",
                         "--feat-dim", "16", "--hidden-channels", "16", "--out-channels",
                         "16", "--epochs", "2", "--loss", "fused", *TINY_EVAL)
    check_report(doc, example="hetero_link_pred", epochs=2)
    assert "num_nodes=(200, 100)" in doc["negatives"]["fused_loss"]


def test_gae(tmp_path):
    doc, _ = run_example(tmp_path, "gae.py", *TINY_GRAPH, "--epochs", "2", *TINY_EVAL)
    check_report(doc, example="gae", epochs=2)
    assert set(doc["timing"]["mean_phase_time_s"]) == {"step"}


def test_link_neighbor_loader(tmp_path, examples_path):
    # With pyg-lib or torch-sparse, PyG's own sampler; without (CI: neither is on PyPI), the
    # example's pure-PyTorch one, and it says so.
    doc, proc = run_example(tmp_path, "link_neighbor_loader.py", *TINY_GRAPH, "--epochs", "2",
                            "--batch-size", "256", "--num-neighbors", "5", "5", *TINY_EVAL)
    check_report(doc, example="link_neighbor_loader", epochs=2)
    native = import_example("_sampler").have_native_sampler()
    assert ("TorchNeighborSampler" in proc.stdout) != native, proc.stdout[-2000:]
    assert "without a 'pyg-lib' installation" not in proc.stderr, proc.stderr[-2000:]


def _sampling_graph(num_nodes=60, num_edges=400, seed=0):
    from torch_geometric.data import Data
    gen = torch.Generator().manual_seed(seed)
    edge_index = torch.randint(0, num_nodes, (2, num_edges), generator=gen)
    edge_index[:, :30] = torch.stack([torch.arange(30) + 1, torch.zeros(30, dtype=torch.long)])
    return Data(edge_index=edge_index, num_nodes=num_nodes)  # node 0: in-degree >= 30


@pytest.mark.parametrize("num_neighbors", [[3, 2], [-1, 4], [0, 5], [50, 50]])
def test_torch_neighbor_sampler_follows_torch_sparse_semantics(examples_path, num_neighbors):
    sampler_mod = import_example("_sampler")
    data = _sampling_graph()
    sampler = sampler_mod.TorchNeighborSampler(data, num_neighbors=num_neighbors)
    seed = torch.tensor([0, 5, 7, 41])
    torch.manual_seed(1)
    out = sampler._sample(seed)
    node, row, col, edge = out.node, out.row, out.col, out.edge
    assert torch.equal(node[:4], seed)
    assert node.unique().numel() == node.numel()
    assert out.num_sampled_nodes[0] == 4 and sum(out.num_sampled_nodes) == node.numel()
    assert sum(out.num_sampled_edges) == row.numel() == col.numel() == edge.numel()
    # Every sampled edge is a real edge, node[row] -> node[col], with its id through perm.
    colptr = sampler.colptr
    src, dst = node[row], node[col]
    assert torch.equal(sampler.row[edge], src)
    assert bool(((edge >= colptr[dst]) & (edge < colptr[dst + 1])).all())
    edge_id = sampler.perm[edge] if sampler.perm is not None else edge
    assert torch.equal(data.edge_index[0, edge_id], src)
    assert torch.equal(data.edge_index[1, edge_id], dst)
    # Hop by hop: the targets are the previous hop's new nodes; each takes min(deg, k)
    # distinct in-edges (all of them for k = -1).
    first_node, first_edge = 0, 0
    for hop, k in enumerate(num_neighbors):
        targets = torch.arange(first_node, first_node + out.num_sampled_nodes[hop])
        hop_edges = slice(first_edge, first_edge + out.num_sampled_edges[hop])
        for t in targets.tolist():
            mine = edge[hop_edges][col[hop_edges] == t]
            degree = int(colptr[node[t] + 1] - colptr[node[t]])
            assert mine.numel() == (degree if k < 0 else min(degree, k))
            assert mine.unique().numel() == mine.numel()
        hop_targets = col[hop_edges]
        assert bool(((hop_targets >= first_node) &
                     (hop_targets < first_node + out.num_sampled_nodes[hop])).all())
        first_node += out.num_sampled_nodes[hop]
        first_edge += out.num_sampled_edges[hop]


def test_torch_neighbor_sampler_samples_uniformly(examples_path):
    # Node 0 has >= 30 in-edges; with k = 3, each of them should be drawn ~ 3/deg of the time.
    sampler_mod = import_example("_sampler")
    data = _sampling_graph()
    sampler = sampler_mod.TorchNeighborSampler(data, num_neighbors=[3])
    degree = int(sampler.colptr[1] - sampler.colptr[0])
    counts = torch.zeros(degree)
    torch.manual_seed(2)
    trials = 3000
    for _ in range(trials):
        counts[sampler._sample(torch.tensor([0])).edge] += 1
    expected = trials * 3 / degree
    assert float(counts.min()) > 0.7 * expected and float(counts.max()) < 1.3 * expected


def test_torch_neighbor_sampler_in_link_neighbor_loader(examples_path):
    from torch_geometric.loader import LinkNeighborLoader
    sampler_mod = import_example("_sampler")
    data = _sampling_graph()
    data.x = torch.randn(data.num_nodes, 4)
    loader = LinkNeighborLoader(
        data, num_neighbors=[4, 4], edge_label_index=data.edge_index[:, :64],
        neg_sampling=dict(mode="binary", amount=1.0), batch_size=16, shuffle=True,
        neighbor_sampler=sampler_mod.TorchNeighborSampler(data, num_neighbors=[4, 4]))
    edges = set(map(tuple, data.edge_index.t().tolist()))
    seen = 0
    for batch in loader:
        global_edges = batch.n_id[batch.edge_index]
        assert set(map(tuple, global_edges.t().tolist())) <= edges
        assert torch.equal(data.edge_index[:, batch.e_id], global_edges)
        assert batch.edge_label_index.max() < batch.num_nodes
        seen += int(batch.edge_label.sum())
    assert seen == 64  # every positive edge once per epoch


def test_torch_neighbor_sampler_refuses_what_it_does_not_cover(examples_path):
    sampler_mod = import_example("_sampler")
    sampler = sampler_mod.TorchNeighborSampler(_sampling_graph(), num_neighbors=[2],
                                               replace=True)
    with pytest.raises(NotImplementedError, match="pyg-lib"):
        sampler._sample(torch.tensor([0]))


def test_ddp_link_pred_two_processes(tmp_path):
    doc, proc = run_example(tmp_path, "ddp_link_pred.py", *TINY_GRAPH, "--epochs", "2",
                            "--model", "sage", *TINY_EVAL, torchrun_procs=2)
    check_report(doc, example="ddp_link_pred", epochs=2)
    assert doc["world_size"] == 2 and doc["backend"] == "gloo"
    assert doc["negatives"]["neg_sampling"] == "edgedot"
    per_rank = doc["timing"]["mean_epoch_time_s_per_rank"]
    assert len(per_rank) == 2 and doc["mean_epoch_time_s"] == max(per_rank)
    assert proc.stdout.count("wrote ") == 1  # only rank 0 reports


def test_ddp_link_pred_single_process(tmp_path, examples_path):
    doc = run_in_process(tmp_path, "ddp_link_pred.py", *TINY_GRAPH, "--epochs", "1",
                         "--loss", "fused", *TINY_EVAL)
    check_report(doc, example="ddp_link_pred", epochs=1)
    assert doc["world_size"] == 1
    assert doc["negatives"]["loss"] == "fused"


# Shared helpers ###########################################################################

def test_ranking_uses_ogb_tie_rule(examples_path):
    _common = import_example("_common")
    k = 4
    # One destination node only, so every negative is (src, 0); scores depend on dst.
    pos = torch.tensor([[0, 1, 2], [0, 5, 7]])
    by_dst = {0: 1.0, 5: 2.0, 7: 0.0}

    def score(index):
        return torch.tensor([by_dst[int(d)] for d in index[1]])

    sums = _common.ranking_sums(score, pos, num_dst_nodes=1, num_negatives=k,
                                hits_k=(1, 3))
    # (0, 0) ties its 4 negatives: rank 1 + (0 + 4) / 2 = 3; (1, 5) beats them: rank 1;
    # (2, 7) loses to them: rank 1 + (4 + 4) / 2 = 5.
    metrics = _common.ranking_metrics(sums, (1, 3))
    assert metrics["mrr"] == pytest.approx((1 / 3 + 1 + 1 / 5) / 3)
    assert metrics["hits@1"] == pytest.approx(1 / 3)
    assert metrics["hits@3"] == pytest.approx(2 / 3)


def test_eager_decoder_matches_edgedot(examples_path):
    from pyg_edgedot import EdgeDotScore
    _common = import_example("_common")
    gen = torch.Generator().manual_seed(0)
    x_src, x_dst = torch.randn(7, 5, generator=gen), torch.randn(4, 5, generator=gen)
    index = torch.stack([torch.randint(7, (30,), generator=gen),
                         torch.randint(4, (30,), generator=gen)])
    for sigmoid in (False, True):
        edgedot, eager = EdgeDotScore(sigmoid=sigmoid), _common.EagerDotScore(sigmoid=sigmoid)
        torch.testing.assert_close(edgedot((x_src, x_dst), index), eager((x_src, x_dst), index))
        torch.testing.assert_close(edgedot(x_dst, index % 4), eager(x_dst, index % 4))


def test_generated_graphs_are_seeded_and_well_formed(examples_path):
    from torch_geometric.utils import is_undirected
    _data = import_example("_data")
    a = _data.sbm_graph(num_nodes=200, avg_degree=6, feat_dim=8, num_blocks=4, seed=1)
    b = _data.sbm_graph(num_nodes=200, avg_degree=6, feat_dim=8, num_blocks=4, seed=1)
    assert torch.equal(a.edge_index, b.edge_index) and torch.equal(a.x, b.x)
    assert is_undirected(a.edge_index) and not (a.edge_index[0] == a.edge_index[1]).any()
    assert a.x.shape == (200, 8) and 0.8 * 1200 < a.edge_index.size(1) <= 1200
    inside = (a.y[a.edge_index[0]] == a.y[a.edge_index[1]]).float().mean()
    assert inside > 0.8  # p_in = 0.9 (plus chance pairs), against 1/4 for random pairs

    h = _data.user_item_graph(num_users=50, num_items=30, avg_ratings=4, feat_dim=8,
                              num_genres=3, seed=2)
    edge_index = h["user", "rates", "item"].edge_index
    assert h["user"].x.shape == (50, 8) and h["item"].x.shape == (30, 8)
    assert int(edge_index[0].max()) < 50 and int(edge_index[1].max()) < 30
    assert torch.equal(edge_index, _data.user_item_graph(
        num_users=50, num_items=30, avg_ratings=4, feat_dim=8, num_genres=3,
        seed=2)["user", "rates", "item"].edge_index)


# Recommendation: top-k retrieval ##########################################################

TINY_REC = ["--num-users", "300", "--num-items", "200", "--avg-ratings", "15",
            "--embedding-dim", "16", "--batch-size", "1024", "--k", "5", "10"]


def check_recommend_report(doc, *, epochs, ks=(5, 10)):
    assert doc["example"] == "recommend"
    metrics = doc["metrics"]
    names = {f"{m}@{k}" for m in ("recall", "ndcg", "precision", "map") for k in ks}
    assert names <= metrics.keys(), names - metrics.keys()
    for name in names:
        assert isinstance(metrics[name], float) and 0.0 <= metrics[name] <= 1.0, name
    recall = [metrics[f"recall@{k}"] for k in sorted(ks)]
    assert recall == sorted(recall), f"Recall@k must grow with k: {recall}"
    for baseline in ("random", "popularity"):
        assert {f"recall@{k}" for k in ks} <= doc["baselines"][baseline].keys()
    history = doc["history"]
    assert [h["epoch"] for h in history] == list(range(1, epochs + 1))
    assert all(math.isfinite(h["loss"]) and h["loss"] > 0 for h in history)
    if doc["config"]["eval_every"]:  # the last epoch is evaluated: the model tested
        assert history[-1][f"recall@{max(ks)}"] == pytest.approx(metrics[f"recall@{max(ks)}"])
    else:
        assert all("recall@5" not in h for h in history)
    assert math.isfinite(doc["mean_epoch_time_s"]) and doc["mean_epoch_time_s"] > 0
    retrieval = doc["retrieval"]
    assert retrieval["k"] == max(ks) and retrieval["time_s"] > 0
    assert retrieval["num_queries"] == doc["data"]["num_test_users"] > 0
    assert doc["config"]["device"] == "cpu" and doc["env"]["device"] == "cpu"


def test_recommend_learns_and_beats_random(tmp_path):
    # As a user runs it: the fused BPR loss, topk_dst retrieval, PyG's metrics, and the dense
    # comparison, which must return the very same items as topk_dst.
    doc, proc = run_example(tmp_path, "recommend.py", *TINY_REC, "--epochs", "10",
                            "--compare-dense")
    check_recommend_report(doc, epochs=10)
    metrics, random = doc["metrics"], doc["baselines"]["random"]
    for k in (5, 10):
        assert metrics[f"recall@{k}"] > 2 * random[f"recall@{k}"], (metrics, random)
        assert metrics[f"ndcg@{k}"] > 2 * random[f"ndcg@{k}"], (metrics, random)
    history = doc["history"]
    assert history[-1]["loss"] < history[0]["loss"]
    assert doc["negatives"]["loss"] == "fused"
    assert doc["negatives"]["fused_loss"].startswith(
        "EdgeDotLoss(num_negatives=1, negatives='structured', loss='bpr'")
    dense = doc["dense"]
    assert dense["same_index_as_topk"] == 1.0
    assert dense["masked"]["metrics"] == pytest.approx(metrics)
    # LightGCN.recommend does not exclude the training items: they take up its top k.
    assert dense["recommend"]["metrics"]["recall@10"] < metrics["recall@10"]
    assert "masked dense == topk_dst on 100.00% of the users" in proc.stdout


@pytest.mark.parametrize("options", [["--loss", "pyg"],
                                     ["--loss", "pyg", "--neg-sampling", "uniform"],
                                     ["--neg-sampling", "uniform", "--num-negatives", "2"]],
                         ids=["pyg-loss", "pyg-uniform", "fused-uniform-2"])
def test_recommend_other_losses_learn(tmp_path, examples_path, options):
    doc = run_in_process(tmp_path, "recommend.py", *TINY_REC, "--epochs", "8",
                         "--eval-every", "0", *options)
    check_recommend_report(doc, epochs=8)
    assert doc["negatives"]["loss"] == doc["config"]["loss"]
    assert doc["negatives"]["neg_sampling"] == doc["config"]["neg_sampling"]
    assert doc["dense"] is None
    assert doc["metrics"]["recall@10"] > 2 * doc["baselines"]["random"]["recall@10"]


def test_recommend_documents_its_options(examples_path, capsys):
    module = import_example("recommend")
    with pytest.raises(SystemExit) as exit_info:
        module.parse_args(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--epochs", "--device", "--seed", "--json", "--no-progress", "--lr",
                   "--loss", "--neg-sampling", "--k", "--compare-dense", "--root",
                   "examples:", "examples/recommend.py"):
        assert option in out, option


def test_random_ranking_metrics_are_the_expectation(examples_path):
    # The closed form against the mean of PyG's metrics over many random rankings.
    rec = import_example("recommend")
    gen = torch.Generator().manual_seed(0)
    num_items, ks = 12, (3, 5)
    train = torch.tensor([[0, 0, 1, 2, 2, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5, 0, 6, 7]])
    test = torch.tensor([[0, 1, 1, 3, 4, 4, 4, 5], [2, 3, 9, 11, 0, 1, 2, 8]])
    users, rows = torch.unique(test[0], return_inverse=True)
    label_index = torch.stack([rows, test[1]])
    expected = rec.random_ranking_metrics(num_items, train, label_index, users, ks)
    seen = {(int(u), int(i)) for u, i in train.t()}
    trials, total = 3000, {key: 0.0 for key in expected}
    for _ in range(trials):
        index = []
        for u in users.tolist():
            unseen = torch.tensor([i for i in range(num_items) if (u, i) not in seen])
            index.append(unseen[torch.randperm(unseen.numel(), generator=gen)][:max(ks)])
        got = rec.retrieval_metrics(torch.stack(index), label_index, ks)
        for key in total:
            total[key] += got[key] / trials
    for key, value in expected.items():
        assert total[key] == pytest.approx(value, abs=0.01), key


def test_latent_factor_graph_and_split(examples_path):
    _data = import_example("_data")
    a = _data.latent_factor_graph(num_users=80, num_items=50, avg_ratings=8, seed=3)
    b = _data.latent_factor_graph(num_users=80, num_items=50, avg_ratings=8, seed=3)
    edge_index = a["user", "rates", "item"].edge_index
    assert torch.equal(edge_index, b["user", "rates", "item"].edge_index)
    assert int(edge_index[0].max()) < 80 and int(edge_index[1].max()) < 50
    degree = torch.bincount(edge_index[0], minlength=80)
    assert int(degree.min()) >= 2 and int(degree.max()) <= 25
    keys = edge_index[0] * 50 + edge_index[1]
    assert keys.unique().numel() == keys.numel()  # distinct items per user
    train, test = _data.split_per_user(edge_index, 80, 0.25, seed=1)
    assert train.size(1) + test.size(1) == edge_index.size(1)
    both = torch.cat([train, test], 1)
    assert torch.equal(torch.sort(both[0] * 50 + both[1]).values, torch.sort(keys).values)
    train_degree = torch.bincount(train[0], minlength=80)
    test_degree = torch.bincount(test[0], minlength=80)
    assert bool((train_degree >= 1).all() and (test_degree >= 1).all())
    assert torch.equal(test_degree, (0.25 * degree.double()).round().long().clamp(1, None)
                       .minimum(degree - 1))


def test_movielens_without_files_fails_clearly_and_never_downloads(tmp_path, examples_path):
    _common = import_example("_common")
    with pytest.raises(_common.ExampleError, match="never download") as error:
        run_in_process(tmp_path, "recommend.py", "--dataset", "MovieLens100K", "--root",
                       tmp_path / "empty", "--epochs", "1")
    assert "u1.base" in str(error.value) and str(tmp_path / "empty") in str(error.value)
    assert not (tmp_path / "empty").exists()
