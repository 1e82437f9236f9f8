"""Shared test helpers: devices, dtypes, tolerances, seeded data and the float64 reference.

Every check compares against a float64 reference computed on the CPU from the *same*
inputs the kernel saw (low-precision inputs are upcast, never regenerated), by relative
error ``||out - ref|| / ||ref||``.
"""
import os
import re
import subprocess
import sys
import zlib
from typing import Mapping, Optional, Tuple

import pytest
import torch
from torch import Tensor

HAS_CUDA = torch.cuda.is_available()

# CPU always; CUDA when present (skipped, not silently dropped, otherwise).
DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda", id="cuda",
                 marks=pytest.mark.skipif(not HAS_CUDA, reason="CUDA is not available")),
]

FLOAT_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INDEX_DTYPES = [torch.int32, torch.int64]
LOW_PRECISION = (torch.float16, torch.bfloat16)

# (N_src, N_dst, D, E)
SHAPES = [
    (6, 6, 4, 0),          # no edges
    (9, 9, 1, 64),         # D = 1
    (11, 11, 3, 37),       # odd D
    (13, 9, 7, 300),       # odd D, N_src != N_dst
    (21, 31, 33, 257),     # odd D > 32, N_src < N_dst
    (40, 17, 515, 300),    # large odd D
    (50, 70, 64, 200),     # vector-friendly D
    (64, 48, 128, 4099),   # many edges: several CPU chunks / CUDA blocks
]
SHAPE_IDS = [f"ns{a}-nd{b}-d{c}-e{e}" for a, b, c, e in SHAPES]

# Relative-error tolerances per dtype (output rounding dominates for fp16/bf16).
TOL = {
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    torch.float16: 2e-3,
    torch.bfloat16: 1e-2,
}


def dtype_id(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def seed_for(text: str) -> int:
    """A stable seed from a string (e.g. a pytest node id); not Python's salted hash()."""
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def make_gen(seed: int) -> torch.Generator:
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    return gen


def randn(gen: torch.Generator, *shape: int, dtype=torch.float32, device="cpu") -> Tensor:
    """Fresh N(0, 1) data drawn on the CPU (so CPU and CUDA runs see the same values)."""
    data = torch.randn(*shape, generator=gen, dtype=torch.float64)
    return data.to(dtype).to(device)


def randint(gen: torch.Generator, high: int, size: int, dtype=torch.int64,
            device="cpu") -> Tensor:
    return torch.randint(0, high, (size,), generator=gen, dtype=torch.int64).to(
        dtype).to(device)


def random_edge_index(gen: torch.Generator, num_src: int, num_dst: int, num_edges: int,
                      dtype=torch.int64, device="cpu") -> Tensor:
    """[2, E] with row 0 in [0, num_src) and row 1 in [0, num_dst)."""
    src = torch.randint(0, max(num_src, 1), (num_edges,), generator=gen)
    dst = torch.randint(0, max(num_dst, 1), (num_edges,), generator=gen)
    return torch.stack([src, dst]).to(dtype).to(device)


def _f64(t: Tensor) -> Tensor:
    return t.detach().to("cpu").to(torch.float64)


def ref_edge_dot(x_src: Tensor, x_dst: Tensor, edge_index: Tensor) -> Tensor:
    """float64 CPU reference of the forward, from the exact inputs (upcast)."""
    ei = edge_index.detach().to("cpu").long()
    xs, xd = _f64(x_src), _f64(x_dst)
    return (xs[ei[0]] * xd[ei[1]]).sum(-1)


def ref_grads(x_src: Tensor, x_dst: Tensor, edge_index: Tensor,
              grad_out: Tensor) -> Tuple[Tensor, Tensor]:
    """float64 CPU reference of (d/dx_src, d/dx_dst) for sum(grad_out * out).

    Written out with index_add_ (not autograd) so it is independent of the op under test.
    When x_src is x_dst, the gradient of that tensor is the sum of the two.
    """
    ei = edge_index.detach().to("cpu").long()
    xs, xd, g = _f64(x_src), _f64(x_dst), _f64(grad_out)
    grad_src = torch.zeros_like(xs).index_add_(0, ei[0], g[:, None] * xd[ei[1]])
    grad_dst = torch.zeros_like(xd).index_add_(0, ei[1], g[:, None] * xs[ei[0]])
    return grad_src, grad_dst


def rel_err(out: Tensor, ref: Tensor, scale: Optional[Tensor] = None) -> float:
    diff = (_f64(out) - ref).norm().item()
    return diff / (ref if scale is None else scale).norm().item()


def assert_close(out: Tensor, ref: Tensor, dtype: torch.dtype, what: str = "output",
                 tol: Optional[float] = None, scale: Optional[Tensor] = None) -> None:
    """Relative-error check against a float64 CPU reference, with shape checks.

    scale: the same reference computed on the inputs' absolute values. A sum's rounding error
    is bounded by the sum of its terms' magnitudes, not by its value, so where terms cancel
    (a gradient row summing hundreds of edges to nearly zero) the error is measured against
    that bound; a wrong kernel is still off by the terms' size.
    """
    tol = TOL[dtype] if tol is None else tol
    assert out is not None, f"{what}: got None"
    assert tuple(out.shape) == tuple(ref.shape), (
        f"{what}: shape {tuple(out.shape)} != reference {tuple(ref.shape)}")
    if ref.numel() == 0:
        return
    out64 = _f64(out)
    assert torch.isfinite(out64).all(), f"{what}: non-finite values {out64}"
    if ref.norm().item() == 0.0:
        assert torch.equal(out64, ref), f"{what}: expected exact zeros"
        return
    err = rel_err(out, ref, scale)
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e} ({dtype})"


def _expect(exc_type, op: str, names, fn) -> str:
    """Calls ``fn``, which must raise ``exc_type`` with a message that starts with ``op:`` and
    names each of ``names``; returns the message."""
    with pytest.raises(exc_type) as info:
        fn()
    message = str(info.value)
    assert message.startswith(f"{op}:"), f"message does not start with {op!r}: {message!r}"
    for name in names:
        assert name in message, f"message does not name {name!r}: {message!r}"
    return message


def _has_number(message: str, number: int) -> bool:
    """Whether ``message`` holds ``number`` as a number of its own (not part of another)."""
    return re.search(rf"(?<![\w.-]){re.escape(str(number))}(?![\w.])", message) is not None


def run_backward(out: Tensor, gen: torch.Generator) -> Tensor:
    """Backward with a random (nonzero) upstream gradient; returns that gradient."""
    grad_out = randn(gen, out.shape[0], dtype=out.dtype, device=out.device)
    out.backward(grad_out)
    return grad_out


def leaf(t: Tensor) -> Tensor:
    return t.detach().clone().requires_grad_(True)


# Feature layouts: (base shape, view) for N rows and D features. ``x = view(base)``;
# gradients are checked on ``base`` so they flow back through the view.
X_LAYOUTS = [
    "contiguous",         # plain [N, D]
    "row_slice",          # big[:, :D]   row stride D + 5
    "row_step",           # big[::2]     row stride 2D
    "col_strided",        # big.t() of [D, N]: column stride N, row stride 1
    "col_step",           # big[:, ::2]  column stride 2
    "offset_rows",        # big[1:]      contiguous, storage offset D elements
    "offset_misaligned",  # flat[1:].view(N, D): contiguous, offset 1 element (breaks 16B loads)
    "expanded",           # row.expand(N, D): row stride 0
]


def x_layout(layout: str, num_rows: int, feat_dim: int):
    n, d = num_rows, feat_dim
    return {
        "contiguous": ((n, d), lambda b: b),
        "row_slice": ((n, d + 5), lambda b: b[:, :d]),
        "row_step": ((2 * n, d), lambda b: b[::2]),
        "col_strided": ((d, n), lambda b: b.t()),
        "col_step": ((n, 2 * d), lambda b: b[:, ::2]),
        "offset_rows": ((n + 1, d), lambda b: b[1:]),
        "offset_misaligned": ((n * d + 1,), lambda b: b[1:].view(n, d)),
        "expanded": ((1, d), lambda b: b.expand(n, d)),
    }[layout]


def check_layout(layout: str, x: Tensor) -> None:
    """Asserts the view really has the layout it is named after (so the test tests it)."""
    n, d = x.shape
    if layout == "contiguous":
        assert x.is_contiguous()
    elif layout == "row_slice":
        assert x.stride() == (d + 5, 1)
    elif layout == "row_step":
        assert x.stride() == (2 * d, 1)
    elif layout == "col_strided":
        assert x.stride() == (1, n)
    elif layout == "col_step":
        assert x.stride() == (2 * d, 2)
    elif layout == "offset_rows":
        assert x.is_contiguous() and x.storage_offset() == d
    elif layout == "offset_misaligned":
        assert x.is_contiguous() and x.storage_offset() == 1
        assert x.data_ptr() % 16 != 0
    elif layout == "expanded":
        assert x.stride() == (0, 1)


def make_x(gen: torch.Generator, layout: str, num_rows: int, feat_dim: int, dtype,
           device, requires_grad: bool = False):
    """Returns (base, view_fn, x) with x = view_fn(base) in the given layout."""
    shape, view = x_layout(layout, num_rows, feat_dim)
    base = randn(gen, *shape, dtype=dtype, device=device)
    if requires_grad:
        base.requires_grad_(True)
    x = view(base)
    check_layout(layout, x)
    return base, view, x


def ref_base_grad(base: Tensor, view, ref_grad_x: Tensor) -> Tensor:
    """Maps a reference gradient w.r.t. ``view(base)`` back onto ``base`` (float64, CPU)."""
    base64 = _f64(base).requires_grad_(True)
    view(base64).backward(ref_grad_x)
    return base64.grad


# Edge-index layouts, all [2, E] views of the same values.
EI_LAYOUTS = [
    "contiguous",
    "transposed",      # ei.t().contiguous().t(): strides (1, 2)
    "col_step",        # big[:, 1::2]: column stride 2, storage offset 1
    "row_offset",      # big[1:] of [3, E]: contiguous, storage offset E
]


def make_edge_index(edge_index: Tensor, layout: str) -> Tensor:
    num_edges = edge_index.shape[1]
    if layout == "contiguous":
        out = edge_index.contiguous()
    elif layout == "transposed":
        out = edge_index.t().contiguous().t()
        assert num_edges <= 1 or out.stride() == (1, 2)
    elif layout == "col_step":
        big = torch.full((2, 2 * num_edges + 1), -7, dtype=edge_index.dtype,
                         device=edge_index.device)
        big[:, 1::2] = edge_index
        out = big[:, 1::2]
        assert out.storage_offset() == 1 and (num_edges <= 1 or out.stride(1) == 2)
    elif layout == "row_offset":
        big = torch.full((3, num_edges), -7, dtype=edge_index.dtype, device=edge_index.device)
        big[1:] = edge_index
        out = big[1:]
        assert out.storage_offset() == num_edges
    else:
        raise ValueError(layout)
    assert torch.equal(out, edge_index)
    return out


def op_edge_dot(x_src: Tensor, x_dst: Tensor, src_index: Tensor, dst_index: Tensor):
    """The registered forward op, ``edge_dot(x_src, x_dst, src_index, dst_index) ->
    (out, first_bad)``: ``first_bad`` is [1] int64, the first edge with an index out of
    range (its score is NaN), or -1. It never raises for bad indices; ``edge_dot`` does."""
    out, first_bad = torch.ops.pyg_edgedot.edge_dot(x_src, x_dst, src_index, dst_index)
    assert first_bad.dtype == torch.int64 and first_bad.shape == (1,)
    assert first_bad.device == x_src.device and out.device == x_src.device
    return out, first_bad


def cuda_kernels_of(call) -> list:
    """The names of the CUDA activities (kernels, memsets) that ``call()`` launches, from
    torch.profiler (empty where the profiler records no CUDA activity)."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    return [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]


def fallback_on_cuda(group: str) -> bool:
    """Whether the pure-PyTorch fallback serves ``group``'s ops on CUDA tensors (no compiled
    or Triton kernel there): it reads index checks back per chunk (host syncs), and its sums
    follow torch's reductions and index_add_ (atomics)."""
    from pyg_edgedot import _backend
    return _backend.loaded().table[group, "cuda"].impl == "python"


def cuda_kernel_on_cuda(group: str) -> bool:
    """Whether ``group``'s compiled CUDA kernels (``csrc/cuda/``) serve its ops on CUDA tensors
    (not the Triton kernels or the fallback)."""
    from pyg_edgedot import _backend
    return _backend.loaded().table[group, "cuda"].impl == "cuda"


def cpp_kernel_on_cpu(group: str) -> bool:
    """Whether ``group``'s compiled C++ kernels (``csrc/cpu/``) serve its ops on CPU tensors
    (not the pure-PyTorch fallback)."""
    from pyg_edgedot import _backend
    return _backend.loaded().table[group, "cpu"].impl == "cpp"


def script_result(script: str, out_path, env: Mapping[str, str]):
    """What ``script`` saved with ``torch.save`` to ``sys.argv[1]`` (= ``out_path``), run in a
    fresh Python process with ``env`` added to this one's environment: for switches the
    kernels read once per process (the CPU loops' ISA choice)."""
    proc = subprocess.run([sys.executable, "-c", script, str(out_path)],
                          env=dict(os.environ, **env), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return torch.load(out_path)


def scores_bitwise_alike(group: str, device: str) -> bool:
    """Whether ``group``'s ops score pairs bitwise alike across calls of different shapes and
    sum gradients in a fixed order on ``device``: true of the C++, CUDA and Triton kernels
    and of the pure-PyTorch fallback on the CPU; not of the fallback on CUDA."""
    return not (device.startswith("cuda") and fallback_on_cuda(group))


def gradient_bits_repeat(group: str, device: str, request) -> None:
    """Makes ``group``'s gradients on ``device`` repeat their bits for a test that compares
    them bitwise: where the pure-PyTorch fallback serves CUDA tensors, its scatter
    (``index_add_``) does so only under deterministic algorithms, so that mode is turned on
    (the ``deterministic_algorithms`` fixture) for the rest of the test."""
    if not scores_bitwise_alike(group, device):
        request.getfixturevalue("deterministic_algorithms")


# ---- torch.library.opcheck and torch.compile ---------------------------------------------------

# (feature dtype, index dtype) pairs each op's opcheck test runs.
OPCHECK_CASES = [
    (torch.float32, torch.int64),
    (torch.float64, torch.int32),
    (torch.float16, torch.int64),
    (torch.bfloat16, torch.int32),
]
OPCHECK_IDS = [f"{dtype_id(a)}-{dtype_id(b)}" for a, b in OPCHECK_CASES]


class RecordingBackend:
    """An AOTAutograd backend that keeps the forward and backward graphs it is given."""

    def __init__(self):
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd
        self.forward_graphs, self.backward_graphs = [], []

        def fw_compiler(gm, example_inputs):
            self.forward_graphs.append(gm.code)
            return make_boxed_func(gm.forward)

        def bw_compiler(gm, example_inputs):
            self.backward_graphs.append(gm.code)
            return make_boxed_func(gm.forward)

        self.backend = aot_autograd(fw_compiler=fw_compiler, bw_compiler=bw_compiler)
