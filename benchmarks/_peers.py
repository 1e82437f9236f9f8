"""The methods benchmarks/bench_edge_dot.py compares: pyg_edgedot (three settings), PyG's eager
expression, torch.compile of it, and cuSPARSE's sampled_addmm with and without its CSR build."""
import contextlib
from typing import Callable, Optional, Tuple

import torch

from _timing import Bench
from _workloads import Case, Workload, build_csr


def eager_scores(x_src, x_dst, src, dst):
    """PyG's eager edge scoring (InnerProductDecoder without the sigmoid)."""
    return (x_src[src] * x_dst[dst]).sum(-1)


class Method:
    key = ""
    phases: Tuple[str, ...] = ("fwd", "fwdbwd")

    def __init__(self, bench: Bench) -> None:
        self.bench = bench

    @property
    def label(self) -> str:
        return self.key

    def applies(self, case: Case) -> bool:
        """False: by design no row for this case (e.g. cusparse_sort in sorted order)."""
        return True

    def unsupported(self, case: Case) -> Optional[str]:
        """A reason to show the row as n/a (e.g. a dtype the method lacks)."""
        return None

    def start_workload(self, wl: Workload) -> None:
        pass

    def prepare(self, case: Case) -> None:
        """Work done outside the timed region, once per case."""

    def forward(self, case: Case) -> torch.Tensor:
        raise NotImplementedError

    def scores(self, out: torch.Tensor, case: Case) -> torch.Tensor:
        """The output as one score per edge, in edge order (for the check)."""
        return out

    def context(self):
        return contextlib.nullcontext()

    def note(self, case: Case) -> str:
        return ""

    def phase_call(self, case: Case, phase: str) -> Callable[[], torch.Tensor]:
        """One call of a phase: 'fwd' under no_grad, or 'fwdbwd' (forward, then
        out.backward(case.grad) into both inputs' .grad); returns the output."""
        if phase == "fwd":
            def fwd() -> torch.Tensor:
                with torch.no_grad():
                    return self.forward(case)
            return fwd

        def fwd_bwd() -> torch.Tensor:
            out = self.forward(case)
            out.backward(case.grad)
            return out
        return fwd_bwd


class PygEdgeDot(Method):
    key = "pyg_edgedot"
    validate = True

    @property
    def label(self) -> str:
        return "pyg_edgedot" if self.validate else "pyg_edgedot validate=False"

    def forward(self, case):
        from pyg_edgedot import edge_dot
        return edge_dot(case.x_src, case.x_dst, case.edge_index, validate=self.validate)

    def note(self, case):
        if self.validate and self.bench.is_cuda:
            return ("validate=True (default): the same edge_index every call, so its one "
                    "device-to-host read happens in the first (untimed) call only")
        return ""


class PygEdgeDotNoValidate(PygEdgeDot):
    key = "pyg_edgedot_novalidate"
    validate = False


@contextlib.contextmanager
def deterministic_algorithms():
    """torch.use_deterministic_algorithms(True) inside; the previous setting restored after."""
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


class PygEdgeDotDeterministic(PygEdgeDot):
    key = "pyg_edgedot_deterministic"

    @property
    def label(self) -> str:
        return "pyg_edgedot deterministic"

    def applies(self, case):
        return case.wl.deterministic_row

    def context(self):
        return deterministic_algorithms()

    def note(self, case):
        return ("under torch.use_deterministic_algorithms(True), flag restored after; "
                "fill_uninitialized_memory left at its default (new outputs are NaN-filled)")


class Eager(Method):
    key = "eager"

    @property
    def label(self) -> str:
        return "PyG eager"

    def forward(self, case):
        return eager_scores(case.x_src, case.x_dst, case.src, case.dst)


class Compiled(Method):
    key = "compile"

    def __init__(self, bench):
        super().__init__(bench)
        self._fn = None

    @property
    def label(self) -> str:
        return "torch.compile"

    def start_workload(self, wl):
        # A fresh cache per workload: dynamic=False recompiles for every shape, and dynamo
        # falls back to eager silently past its recompile limit. Both orders share the graphs.
        torch._dynamo.reset()
        self._fn = torch.compile(eager_scores, dynamic=False)

    def forward(self, case):
        return self._fn(case.x_src, case.x_dst, case.src, case.dst)

    def note(self, case):
        return "dynamic=False, default mode; compile (first call per phase) not timed"


class CuSparse(Method):
    key = "cusparse"
    phases = ("fwd",)

    @property
    def label(self) -> str:
        return "cuSPARSE sampled_addmm" if self.bench.is_cuda else "sampled_addmm (CPU)"

    def unsupported(self, case):
        if case.wl.torch_dtype != torch.float32:
            return "float32 only"
        return None

    def prepare(self, case):
        if case.csr is None:
            case.csr, case.csr_inverse = build_csr(case.src, case.dst, case.wl.num_src,
                                                   case.wl.num_dst, case.x_src.dtype)

    def forward(self, case):
        return torch.sparse.sampled_addmm(case.csr, case.x_src, case.x_dst.t(), beta=0.0)

    def scores(self, out, case):
        return out.values()[case.csr_inverse]

    def note(self, case):
        nnz = case.csr._nnz() if case.csr is not None else None
        dup = "" if nnz is None else (
            f"; {case.wl.num_edges - nnz:,} duplicate edges merged, {nnz:,} outputs")
        return ("CSR (sorted, deduplicated) built outside the timed region; output in CSR "
                "order, a new CSR tensor (crow/col copied)" + dup)


class CuSparseSort(CuSparse):
    key = "cusparse_sort"

    @property
    def label(self) -> str:
        return "cuSPARSE + sort" if self.bench.is_cuda else "sampled_addmm + sort (CPU)"

    def applies(self, case):
        return case.order == "random"

    def prepare(self, case):
        pass

    def forward(self, case):
        csr, inverse = build_csr(case.src, case.dst, case.wl.num_src, case.wl.num_dst,
                                 case.x_src.dtype)
        out = torch.sparse.sampled_addmm(csr, case.x_src, case.x_dst.t(), beta=0.0)
        return out.values()[inverse]

    def scores(self, out, case):
        return out

    def note(self, case):
        return ("includes the CSR build (torch.unique: sort + merge duplicates) and the "
                "gather back to edge order (one score per edge)")


METHODS = [PygEdgeDot, PygEdgeDotNoValidate, PygEdgeDotDeterministic, Eager, Compiled,
           CuSparse, CuSparseSort]
METHOD_KEYS = [m.key for m in METHODS]
