"""Shared plumbing of the examples: options, decoders, negatives, metrics, timing, reports.

Nothing here is specific to one example; each example script keeps only its model and its
training step. Not a public API: the examples import it as a sibling module.
"""
import argparse
import copy
import json
import math
import platform
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

import pyg_edgedot

DECODERS = ("edgedot", "eager")
ENCODERS = ("gcn", "sage")
NEG_SAMPLING = ("edgedot", "pyg", "uniform")
LOSSES = ("bce", "fused")
NumNodes = Union[int, Tuple[int, int]]
ScoreFn = Callable[[Tensor], Tensor]  # edge_label_index [2, E] -> scores [E]


class ExampleError(RuntimeError):
    """A problem the user can fix (bad option, missing file or package): no traceback."""


def run(main: Callable[[], object]) -> None:
    """Runs ``main`` and turns an :class:`ExampleError` into ``error: ...`` and exit code 1."""
    try:
        main()
    except ExampleError as err:
        sys.exit(f"{Path(sys.argv[0]).name}: error: {err}")


# Options ##################################################################################

def make_parser(doc: str) -> argparse.ArgumentParser:
    """A parser whose description is the module docstring and whose help shows defaults."""
    return argparse.ArgumentParser(description=doc,
                                   formatter_class=_HelpFormatter)


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter,
                     argparse.RawDescriptionHelpFormatter):
    """Keeps the docstring's layout; shows defaults, except None and on/off flags."""

    def _get_help_string(self, action):
        if action.default is None or isinstance(action.default, bool):
            return action.help
        return super()._get_help_string(action)


def add_training_args(parser: argparse.ArgumentParser, *, epochs: int, lr: float,
                      hidden_channels: int = 128, out_channels: int = 64,
                      decoder_help: Optional[str] = None, neg_sampling: bool = True) -> None:
    """Options every example shares: model size, optimization, evaluation and output."""
    group = parser.add_argument_group("training")
    group.add_argument("--epochs", type=int, default=epochs, help="training epochs")
    group.add_argument("--lr", type=float, default=lr, help="Adam learning rate")
    group.add_argument("--hidden-channels", type=int, default=hidden_channels,
                       help="hidden width of the encoder")
    group.add_argument("--out-channels", type=int, default=out_channels,
                       help="embedding dimension: the length of every scored dot product")
    group.add_argument("--seed", type=int, default=0,
                       help="seed of the split, the initialization and the negatives")
    group.add_argument("--decoder", default="edgedot", choices=DECODERS,
                       help=decoder_help or "'edgedot': pyg_edgedot.EdgeDotScore (fused "
                       "kernel); 'eager': PyG's expression (z[src] * z[dst]).sum(-1)")
    if neg_sampling:
        group.add_argument("--neg-sampling", default="edgedot", choices=NEG_SAMPLING,
                           help="fresh training negatives each epoch, one per positive: "
                                "'edgedot': pyg_edgedot.NegativeSampler, built once per "
                                "training graph, exact (never a training edge, always as "
                                "many as asked), on the device; 'pyg': "
                                "torch_geometric.utils.negative_sampling (the same "
                                "distribution, rebuilt every call; runs on the CPU in "
                                "Python, slow past ~1M edges); 'uniform': uniform random "
                                "pairs drawn on the device, unfiltered")
        group.add_argument("--loss", default="bce", choices=LOSSES,
                           help="'bce': score the positives and the sampled negatives with "
                                "--decoder, then BCEWithLogitsLoss; 'fused': "
                                "pyg_edgedot.EdgeDotLoss, the same BCE with its negatives "
                                "drawn inside the loss (from the --neg-sampling edgedot "
                                "sampler, or unfiltered with uniform; not with pyg), never "
                                "materialized; --decoder then only scores validation and "
                                "test edges")

    group = parser.add_argument_group("evaluation")
    group.add_argument("--num-rank-negatives", type=int, default=100,
                       help="random negative destinations per positive test edge for MRR "
                            "and Hits@K")
    group.add_argument("--hits-k", type=int, nargs="+", default=[10, 50],
                       help="the K of the Hits@K metrics")

    add_run_args(parser)


def add_run_args(parser: argparse.ArgumentParser) -> None:
    """--device, --no-progress and --json, as every example takes them."""
    group = parser.add_argument_group("run")
    group.add_argument("--device", default=None,
                       help="torch device (default: cuda if available, else cpu)")
    group.add_argument("--no-progress", dest="progress", action="store_false",
                       help="no progress bar")
    group.add_argument("--json", type=Path, default=None, metavar="PATH",
                       help="write the final metrics, timings and configuration here")


def setup(args: argparse.Namespace) -> torch.device:
    """The device of ``--device``, after seeding Python, NumPy and torch with ``--seed``."""
    from torch_geometric import seed_everything
    seed_everything(args.seed)
    return resolve_device(args.device)


def resolve_device(name: Optional[str]) -> torch.device:
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ExampleError(f"invalid --device {name!r}: {err}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ExampleError(f"--device {name} was asked for, but CUDA is not available "
                           "(pass --device cpu)")
    return device


# Models ###################################################################################

def add_encoder_args(parser: argparse.ArgumentParser, *, model: str = "gcn",
                     dropout: float = 0.0) -> None:
    """Options of :func:`make_encoder`."""
    group = parser.add_argument_group("encoder")
    group.add_argument("--model", default=model, choices=ENCODERS,
                       help="encoder: torch_geometric.nn.models.GCN or GraphSAGE")
    group.add_argument("--num-layers", type=int, default=2, help="message-passing layers")
    group.add_argument("--dropout", type=float, default=dropout,
                       help="dropout between the encoder's layers")


def make_encoder(args: argparse.Namespace, in_channels: int) -> torch.nn.Module:
    """PyG's GCN or GraphSAGE model, ``in_channels -> hidden -> ... -> out_channels``."""
    from torch_geometric.nn.models import GCN, GraphSAGE
    model = {"gcn": GCN, "sage": GraphSAGE}[args.model]
    return model(in_channels, args.hidden_channels, args.num_layers, args.out_channels,
                 dropout=args.dropout)


class EagerDotScore(torch.nn.Module):
    """PyG's own expression ``(x_src[src] * x_dst[dst]).sum(-1)``, with the interface of
    :class:`pyg_edgedot.EdgeDotScore`, for side-by-side comparisons."""

    def __init__(self, sigmoid: bool = False) -> None:
        super().__init__()
        self.sigmoid = sigmoid

    def forward(self, x: Union[Tensor, Tuple[Tensor, Tensor]],
                edge_label_index: Tensor) -> Tensor:
        x_src, x_dst = (x, x) if isinstance(x, Tensor) else x
        out = (x_src[edge_label_index[0]] * x_dst[edge_label_index[1]]).sum(dim=-1)
        return out.sigmoid() if self.sigmoid else out


# Negatives and the training loss ##########################################################

def _negative_sampler(method: str, edge_index: Tensor,
                      num_nodes: NumNodes) -> Callable[[int], Tensor]:
    """``draw(num_samples) -> [2, num_samples]`` negatives of ``edge_index``'s graph."""
    if method == "edgedot":
        sampler = pyg_edgedot.NegativeSampler(edge_index, num_nodes)  # built once
        return lambda num_samples: sampler.sample(num_samples)
    if method == "pyg":
        from torch_geometric.utils import negative_sampling
        return lambda num_samples: negative_sampling(edge_index, num_nodes=num_nodes,
                                                     num_neg_samples=num_samples)
    if method == "uniform":
        num_src, num_dst = (num_nodes, num_nodes) if isinstance(num_nodes, int) else num_nodes
        device = edge_index.device
        return lambda num_samples: torch.stack([
            torch.randint(num_src, (num_samples,), device=device),
            torch.randint(num_dst, (num_samples,), device=device)])
    raise ExampleError(f"unknown negative sampling {method!r} (choose from {NEG_SAMPLING})")


class LinkObjective:
    """The training loss of the examples: BCE over the positive edges and as many fresh
    negatives, drawn anew at every call.

    Negatives (``--neg-sampling``): ``'edgedot'`` draws distinct pairs that are not edges of
    ``known_edge_index`` from a :class:`pyg_edgedot.NegativeSampler` built once here, exactly
    as many as asked; ``'pyg'`` calls :func:`torch_geometric.utils.negative_sampling` (the
    same distribution, rebuilt from ``known_edge_index`` at each call, by rejection, so it may
    return a few fewer); ``'uniform'`` draws uniform pairs without checking them.

    Loss (``--loss``): ``'bce'`` scores the positives and the negatives with ``decoder`` and
    applies :class:`torch.nn.BCEWithLogitsLoss`; ``'fused'`` is
    :class:`pyg_edgedot.EdgeDotLoss` (one uniform negative per positive, drawn inside the
    loss from the same sampler, or unchecked with ``'uniform'``), which never builds the
    negatives' index or their scores. Both compute the mean of ``softplus(-score)`` over the
    positives and ``softplus(score)`` over the negatives.

    Per step::

        edge_label_index, edge_label = objective.draw(pos_edge_index)  # timed as 'sample'
        loss = objective.loss(z, edge_label_index, edge_label)
    """

    def __init__(self, args: argparse.Namespace, decoder: torch.nn.Module,
                 known_edge_index: Tensor, num_nodes: NumNodes) -> None:
        self.method, self.kind, self.decoder = args.neg_sampling, args.loss, decoder
        if self.kind not in LOSSES:
            raise ExampleError(f"unknown --loss {self.kind!r} (choose from {LOSSES})")
        if self.kind == "fused" and self.method == "pyg":
            raise ExampleError("--loss fused draws its negatives inside the loss, from "
                               "pyg_edgedot's sampler: pass --neg-sampling edgedot (or "
                               "uniform), not pyg")
        if self.kind == "fused":
            sampler = (pyg_edgedot.NegativeSampler(known_edge_index, num_nodes)
                       if self.method == "edgedot" else None)
            self.sampler = sampler
            self.fused = pyg_edgedot.EdgeDotLoss(
                num_negatives=1, negatives="uniform", sampler=sampler,
                num_nodes=None if sampler is not None else num_nodes)
        else:
            self._draw = _negative_sampler(self.method, known_edge_index, num_nodes)
            self.criterion = torch.nn.BCEWithLogitsLoss()

    def draw(self, pos_edge_index: Tensor) -> Tuple[Tensor, Optional[Tensor]]:
        """The edges to score and their 1/0 labels: ``pos_edge_index`` followed by fresh
        negatives. With ``--loss fused``, ``(pos_edge_index, None)``: the loss draws them."""
        if self.kind == "fused":
            return pos_edge_index, None
        neg = self._draw(pos_edge_index.size(1))
        edge_label_index = torch.cat([pos_edge_index, neg.to(pos_edge_index.dtype)], dim=1)
        edge_label = torch.cat([pos_edge_index.new_ones(pos_edge_index.size(1)),
                                neg.new_zeros(neg.size(1))]).float()
        return edge_label_index, edge_label

    def loss(self, x: Union[Tensor, Tuple[Tensor, Tensor]], edge_label_index: Tensor,
             edge_label: Optional[Tensor]) -> Tensor:
        """The scalar loss of one step, on the embeddings ``x`` (or a source/destination
        pair) and what :meth:`draw` returned."""
        if self.kind == "fused":
            return self.fused(x, edge_label_index)
        return self.criterion(self.decoder(x, edge_label_index), edge_label)

    def describe(self) -> Dict[str, object]:
        """For the JSON report: the negative sampling and the loss actually used."""
        return {"neg_sampling": self.method, "loss": self.kind,
                "negatives_per_positive": 1,
                "fused_loss": repr(self.fused) if self.kind == "fused" else None}


# Metrics ##################################################################################

def binary_metrics(scores: Tensor, labels: Tensor) -> Dict[str, float]:
    """ROC-AUC and average precision (scikit-learn) of scores against 0/1 labels."""
    from sklearn.metrics import average_precision_score, roc_auc_score
    y = labels.detach().cpu().numpy()
    s = scores.detach().float().cpu().numpy()
    return {"auc": float(roc_auc_score(y, s)), "ap": float(average_precision_score(y, s))}


@torch.no_grad()
def ranking_sums(score: ScoreFn, pos_edge_index: Tensor, num_dst_nodes: int,
                 num_negatives: int = 100, hits_k: Sequence[int] = (10, 50), seed: int = 0,
                 chunk_edges: int = 1 << 22) -> Tensor:
    """OGB-style ranking of each positive edge against random negative destinations.

    Each positive ``(s, d)`` is ranked against ``num_negatives`` edges ``(s, d')`` with
    ``d'`` uniform over the destination nodes (not filtered, as in OGB's
    ``ogbl-citation2``). Ties count half, as in OGB's evaluator:
    ``rank = 1 + (#{neg > pos} + #{neg >= pos}) / 2``.

    Returns ``float64`` sums ``[count, sum(1 / rank), #(rank <= k) for k in hits_k]`` so
    that shards of the positives (for example one per DDP rank) can be added up before
    :func:`ranking_metrics` turns them into MRR and Hits@K. Works in chunks of about
    ``chunk_edges`` scored edges; the negatives depend only on ``seed``.
    """
    device = pos_edge_index.device
    gen = torch.Generator().manual_seed(seed)
    sums = torch.zeros(2 + len(hits_k), dtype=torch.float64, device=device)
    ks = torch.tensor(list(hits_k), device=device)
    step = max(1, chunk_edges // (num_negatives + 1))
    for start in range(0, pos_edge_index.size(1), step):
        pos = pos_edge_index[:, start:start + step]
        n = pos.size(1)
        neg_dst = torch.randint(num_dst_nodes, (n * num_negatives,), generator=gen)
        neg = torch.stack([pos[0].repeat_interleave(num_negatives), neg_dst.to(device)])
        pos_score = score(pos).float().view(n, 1)
        neg_score = score(neg).float().view(n, num_negatives)
        rank = 1.0 + 0.5 * ((neg_score > pos_score).sum(1) + (neg_score >= pos_score).sum(1))
        sums[0] += n
        sums[1] += rank.reciprocal().sum(dtype=torch.float64)
        sums[2:] += (rank.view(-1, 1) <= ks.view(1, -1)).sum(0)
    return sums


def ranking_metrics(sums: Tensor, hits_k: Sequence[int]) -> Dict[str, float]:
    """MRR and Hits@K from :func:`ranking_sums` (or the sum of several)."""
    sums = sums.cpu()
    count = max(float(sums[0]), 1.0)
    out = {"mrr": float(sums[1]) / count}
    out.update({f"hits@{k}": float(v) / count for k, v in zip(hits_k, sums[2:])})
    return out


def link_metrics(score: ScoreFn, edge_label_index: Tensor, edge_label: Tensor,
                 num_dst_nodes: int, args: argparse.Namespace,
                 prefix: str = "test_") -> Dict[str, float]:
    """ROC-AUC and AP on a labelled split, MRR and Hits@K on its positive edges."""
    with torch.no_grad():
        out = binary_metrics(score(edge_label_index), edge_label)
    pos = edge_label_index[:, edge_label == 1]
    sums = ranking_sums(score, pos, num_dst_nodes, args.num_rank_negatives, args.hits_k,
                        seed=args.seed)
    out.update(ranking_metrics(sums, args.hits_k))
    return {prefix + k: v for k, v in out.items()}


# Training loop and timing #################################################################

class EpochTimer:
    """Wall-clock time of each epoch, split into named phases.

    On CUDA the device is synchronized before every clock read, so each phase includes
    the kernels it launched. ``lap(name)`` charges the time since the previous lap (or
    since ``start()``) to ``name``; ``stop()`` charges the rest to ``'step'``.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.epochs: List[Dict[str, float]] = []

    def _now(self) -> float:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def start(self) -> None:
        self._phases: Dict[str, float] = defaultdict(float)
        self._start = self._last = self._now()

    def lap(self, phase: str) -> None:
        now = self._now()
        self._phases[phase] += now - self._last
        self._last = now

    def stop(self) -> float:
        self.lap("step")
        total = self._last - self._start
        self.epochs.append({"total": total, **self._phases})
        return total

    def summary(self) -> Dict[str, object]:
        """Means over the epochs after the first (the first warms up), or over the only one."""
        if not self.epochs:
            return {"mean_epoch_time_s": float("nan"), "epochs_timed": 0}
        timed = self.epochs[1:] if len(self.epochs) > 1 else self.epochs
        phases = sorted({k for epoch in timed for k in epoch if k != "total"})
        return {
            "mean_epoch_time_s": sum(e["total"] for e in timed) / len(timed),
            "first_epoch_time_s": self.epochs[0]["total"],
            "epochs_timed": len(timed),
            "mean_phase_time_s": {p: sum(e.get(p, 0.0) for e in timed) / len(timed)
                                  for p in phases},
        }


def progress_bar(iterable: Iterable, *, enabled: bool, desc: str, **kwargs):
    from tqdm.auto import tqdm
    return tqdm(iterable, desc=desc, disable=not enabled, dynamic_ncols=True, **kwargs)


def fit(model: torch.nn.Module, train_epoch: Callable[[EpochTimer], float],
        validate: Callable[[], float], *, epochs: int, device: torch.device,
        progress: bool = True, desc: str = "train") -> Dict[str, object]:
    """The epoch loop of every example, with model selection on the validation AUC.

    ``train_epoch(timer)`` runs one epoch and returns its mean loss; it may call
    ``timer.lap(phase)`` to split the epoch's time. ``validate()`` returns the validation
    ROC-AUC (it is not timed). At the end, ``model`` holds the parameters of the epoch with
    the best validation AUC. Returns ``best_val_auc``, ``best_epoch``, ``timing`` (see
    :meth:`EpochTimer.summary`) and the per-epoch ``history``.
    """
    if epochs < 1:
        raise ExampleError(f"--epochs must be at least 1 (got {epochs})")
    timer = EpochTimer(device)
    best_auc, best_epoch, best_state = -math.inf, 0, None
    history = []
    bar = progress_bar(range(1, epochs + 1), enabled=progress, desc=desc, unit="epoch")
    for epoch in bar:
        timer.start()
        loss = float(train_epoch(timer))
        seconds = timer.stop()
        val_auc = float(validate())
        history.append({"epoch": epoch, "loss": loss, "val_auc": val_auc, "time_s": seconds})
        if not math.isfinite(loss):
            raise ExampleError(f"the loss diverged at epoch {epoch} ({loss}); "
                               "try a smaller --lr")
        if val_auc > best_auc:
            best_auc, best_epoch = val_auc, epoch
            best_state = copy.deepcopy(model.state_dict())
        bar.set_postfix(loss=f"{loss:.4f}", val_auc=f"{val_auc:.4f}", best=f"{best_auc:.4f}")
    bar.close()
    if best_state is not None:
        model.load_state_dict(best_state)
    return {"best_val_auc": best_auc, "best_epoch": best_epoch,
            "timing": timer.summary(), "history": history}


# Reports ##################################################################################

def environment(device: torch.device) -> Dict[str, object]:
    import torch_geometric
    if device.type == "cuda":
        device_name = torch.cuda.get_device_name(device)
    else:
        device_name = platform.processor() or platform.machine()
    return {"torch": torch.__version__, "torch_geometric": torch_geometric.__version__,
            "pyg_edgedot": pyg_edgedot.__version__,
            "pyg_edgedot_backends": pyg_edgedot.backends(), "device": str(device),
            "device_name": device_name, "cpu_threads": torch.get_num_threads()}


def _finite_or_none(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def report(example: str, args: argparse.Namespace, device: torch.device, *,
           metrics: Dict[str, float], fit_result: Dict[str, object], data: Dict[str, object],
           title: str, extra: Optional[Dict[str, object]] = None) -> Dict[str, object]:
    """Prints the final summary and writes ``--json``; returns the JSON document.

    The document holds ``metrics`` (test ROC-AUC/AP/MRR/Hits@K, best validation AUC and
    its epoch), ``mean_epoch_time_s`` and the rest of ``timing``, ``data`` sizes, the
    ``config`` (every option) and the software ``env``. Non-finite numbers become null.
    """
    metrics = dict(metrics, best_val_auc=fit_result["best_val_auc"],
                   best_epoch=fit_result["best_epoch"])
    timing = fit_result["timing"]
    doc = {"example": example, "metrics": metrics,
           "mean_epoch_time_s": timing["mean_epoch_time_s"], "timing": timing,
           "data": data, "config": vars(args), "env": environment(device),
           "history": fit_result["history"]}
    doc.update(extra or {})

    ks = getattr(args, "hits_k", [])
    hits = "  ".join(f"Hits@{k} {metrics[f'test_hits@{k}']:.4f}" for k in ks
                     if f"test_hits@{k}" in metrics)
    phases = ", ".join(f"{name} {1e3 * sec:.1f} ms"
                       for name, sec in timing.get("mean_phase_time_s", {}).items())
    print(f"{example}: {title}")
    print(f"  best val ROC-AUC {metrics['best_val_auc']:.4f} at epoch "
          f"{metrics['best_epoch']} of {len(fit_result['history'])}")
    print(f"  test ROC-AUC {metrics['test_auc']:.4f}  AP {metrics['test_ap']:.4f}"
          + (f"  MRR {metrics['test_mrr']:.4f}  {hits}" if "test_mrr" in metrics else "")
          + (f"  (vs {args.num_rank_negatives} random negatives each)"
             if "test_mrr" in metrics else ""))
    print(f"  mean epoch time {1e3 * timing['mean_epoch_time_s']:.1f} ms"
          + (f" ({phases})" if phases else "")
          + f" over {timing['epochs_timed']} epoch(s) on {device}")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(_finite_or_none(doc), indent=2, allow_nan=False) + "\n")
        print(f"  wrote {args.json}")
    return doc
