"""The Triton kernels (``pyg_edgedot/ops/edge_dot_triton.py``) against the float64 reference.

Each check below takes the module under test and a device, so it runs twice over:

* here, on CPU tensors through Triton's interpreter (``TRITON_INTERPRET=1``), in
  subprocesses that run this file as a script: the interpreter must be chosen before triton
  is imported, and this pytest process imports triton for real (torch.compile/inductor);
* on CUDA, with the compiled kernels, when a GPU is present (skipped otherwise).

The interpreter runs every program of every kernel in Python, so its cases stay small.
"""
import os
import sys

if __name__ == "__main__":  # interpreter worker: before anything imports triton
    os.environ["TRITON_INTERPRET"] = "1"

import importlib.util  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
from contextlib import contextmanager  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from _helpers import (EI_LAYOUTS, FLOAT_DTYPES, HAS_CUDA, INDEX_DTYPES, SHAPE_IDS,  # noqa: E402
                      SHAPES, X_LAYOUTS, _f64, assert_close, dtype_id, make_edge_index,
                      make_gen, make_x, randn, random_edge_index, ref_edge_dot, ref_grads,
                      seed_for)

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
TRITON_PY = os.path.join(os.path.dirname(TESTS_DIR), "pyg_edgedot", "ops", "edge_dot_triton.py")


# ---------------------------------------------------------------------------------------
# Checks, shared by the interpreter cases and the CUDA tests
# ---------------------------------------------------------------------------------------

@contextmanager
def module_setting(ops, name, value):
    """Temporarily sets a tuning constant of the module under test."""
    old = getattr(ops, name)
    setattr(ops, name, value)
    try:
        yield
    finally:
        setattr(ops, name, old)


def both_grads(ops, grad_out, x_src, x_dst, ei):
    grad_src = ops.edge_dot_grad(grad_out, x_dst, ei[0], ei[1], x_src.size(0))
    grad_dst = ops.edge_dot_grad(grad_out, x_src, ei[1], ei[0], x_dst.size(0))
    for grad, x in ((grad_src, x_src), (grad_dst, x_dst)):
        assert grad.dtype == x.dtype and grad.device == x.device, (grad.dtype, grad.device)
        assert grad.shape == x.shape, f"gradient shape {tuple(grad.shape)} != {tuple(x.shape)}"
    return grad_src, grad_dst


def check_values(ops, x_src, x_dst, ei, gen, what=""):
    """Forward and both gradients of in-range edges against the float64 reference."""
    dtype = x_src.dtype
    out, first_bad = ops.edge_dot(x_src, x_dst, ei[0], ei[1])
    assert out.dtype == dtype and out.device == x_src.device and out.shape == (ei.size(1),)
    assert first_bad.dtype == torch.int64 and first_bad.shape == (1,)
    assert first_bad.device == x_src.device
    assert first_bad.tolist() == [-1], f"{what}: first_bad {first_bad.tolist()} with no bad edge"
    assert_close(out, ref_edge_dot(x_src, x_dst, ei), dtype, f"{what} forward")
    grad_out = randn(gen, ei.size(1), dtype=dtype, device=x_src.device)
    grad_src, grad_dst = both_grads(ops, grad_out, x_src, x_dst, ei)
    ref_src, ref_dst = ref_grads(x_src, x_dst, ei, grad_out)
    assert_close(grad_src, ref_src, dtype, f"{what} grad x_src")
    assert_close(grad_dst, ref_dst, dtype, f"{what} grad x_dst")


def check_shape(ops, device, gen, dtype, index_dtype, shape):
    num_src, num_dst, feat_dim, num_edges = shape
    x_src = randn(gen, num_src, feat_dim, dtype=dtype, device=device)
    x_dst = randn(gen, num_dst, feat_dim, dtype=dtype, device=device)
    ei = random_edge_index(gen, num_src, num_dst, num_edges, index_dtype, device)
    check_values(ops, x_src, x_dst, ei, gen, f"shape {shape}")


def check_layouts(ops, device, gen, dtype, x_layout, ei_layout, feat_dim):
    _, _, x_src = make_x(gen, x_layout, 7, feat_dim, dtype, device)
    _, _, x_dst = make_x(gen, x_layout, 5, feat_dim, dtype, device)
    ei = random_edge_index(gen, 7, 5, 40, torch.int64, device)
    ei = make_edge_index(ei, ei_layout)
    check_values(ops, x_src, x_dst, ei, gen, f"x {x_layout}, edge_index {ei_layout}")


def check_same_tensor(ops, device, gen, dtype, index_dtype):
    # x_src is x_dst; self loops and duplicate edges (each duplicate counts).
    num_nodes, feat_dim = 6, 9
    x = randn(gen, num_nodes, feat_dim, dtype=dtype, device=device)
    ei = random_edge_index(gen, num_nodes, num_nodes, 30, torch.int64, "cpu")
    loops = torch.arange(num_nodes).repeat(2, 1)
    dups = ei[:, :5].repeat(1, 3)
    ei = torch.cat([ei, loops, dups, loops[:, :2]], 1)
    ei = ei[:, torch.randperm(ei.size(1), generator=gen)].to(index_dtype).to(device)
    check_values(ops, x, x, ei, gen, "same tensor")


BAD_CASES = {
    # name: {edge: (side, value)}; first_bad is the smallest edge listed
    "several": {700: (1, "n"), 800: (1, "huge"), 1000: (0, -3), 1150: (0, "n+100")},
    "first_edge": {0: (0, -1), 600: (1, "n")},
    "last_edge": {1199: (1, "huge")},
}


def check_out_of_range(ops, device, gen, dtype, index_dtype, case):
    """Bad edges score NaN, report the smallest bad edge, and contribute no gradient (not
    even NaN from their upstream gradient); nothing outside the inputs is read."""
    # Several forward programs; more edges than a hub segment, so the segment kernel runs.
    num_src, num_dst, feat_dim, num_edges = 12, 9, 5, 1200
    x_src = randn(gen, num_src, feat_dim, dtype=dtype, device=device)
    x_dst = randn(gen, num_dst, feat_dim, dtype=dtype, device=device)
    ei = random_edge_index(gen, num_src, num_dst, num_edges, torch.int64, "cpu")
    huge = torch.iinfo(index_dtype).max
    for edge, (side, value) in BAD_CASES[case].items():
        rows = (num_src, num_dst)[side]
        ei[side, edge] = {"n": rows, "n+100": rows + 100, "huge": huge}.get(value, value)
    ei = ei.to(index_dtype).to(device)
    bad = torch.zeros(num_edges, dtype=torch.bool)
    bad[list(BAD_CASES[case])] = True

    out, first_bad = ops.edge_dot(x_src, x_dst, ei[0], ei[1])
    assert first_bad.tolist() == [min(BAD_CASES[case])], first_bad.tolist()
    unreported, none = ops.edge_dot(x_src, x_dst, ei[0], ei[1], False)  # first_bad not asked
    assert none.shape == (0,) and none.dtype == torch.int64
    torch.testing.assert_close(unreported, out, rtol=0, atol=0, equal_nan=True)
    out = out.cpu()
    assert torch.isnan(out[bad]).all(), f"bad edges scored {out[bad]}"
    good_ei = ei.cpu()[:, ~bad]
    assert_close(out[~bad], ref_edge_dot(x_src, x_dst, good_ei), dtype, "forward, good edges")

    grad_out = randn(gen, num_edges, dtype=dtype, device=device)
    grad_out[bad.to(device)] = float("nan")
    grad_src, grad_dst = both_grads(ops, grad_out, x_src, x_dst, ei)
    ref_src, ref_dst = ref_grads(x_src, x_dst, good_ei, grad_out.cpu()[~bad])
    assert_close(grad_src, ref_src, dtype, "grad x_src, good edges")
    assert_close(grad_dst, ref_dst, dtype, "grad x_dst, good edges")


def check_degenerate(ops, device, gen, dtype, index_dtype):
    feat_dim = 3
    x_src = randn(gen, 4, feat_dim, dtype=dtype, device=device)
    x_dst = randn(gen, 5, feat_dim, dtype=dtype, device=device)
    none = torch.empty(2, 0, dtype=index_dtype, device=device)
    # No edges.
    out, first_bad = ops.edge_dot(x_src, x_dst, none[0], none[1])
    assert out.shape == (0,) and out.dtype == dtype and first_bad.tolist() == [-1]
    grad = ops.edge_dot_grad(out, x_dst, none[0], none[1], 4)
    assert grad.shape == (4, feat_dim) and grad.dtype == dtype
    assert torch.equal(grad.cpu(), torch.zeros(4, feat_dim, dtype=dtype))
    # D = 0: every in-range edge scores 0.
    ei = random_edge_index(gen, 4, 5, 20, index_dtype, device)
    empty_src, empty_dst = x_src[:, :0], x_dst[:, :0]
    out, first_bad = ops.edge_dot(empty_src, empty_dst, ei[0], ei[1])
    assert torch.equal(out.cpu(), torch.zeros(20, dtype=dtype)) and first_bad.tolist() == [-1]
    grad = ops.edge_dot_grad(out, empty_dst, ei[0], ei[1], 4)
    assert grad.shape == (4, 0)
    # No source rows: every edge is out of range, edge 0 first.
    no_rows = x_src[:0]
    out, first_bad = ops.edge_dot(no_rows, x_dst, ei[0], ei[1])
    assert torch.isnan(out.cpu()).all() and first_bad.tolist() == [0]
    grad_out = randn(gen, 20, dtype=dtype, device=device)
    assert ops.edge_dot_grad(grad_out, x_dst, ei[0], ei[1], 0).shape == (0, feat_dim)
    grad = ops.edge_dot_grad(grad_out, no_rows, ei[1], ei[0], 5)
    assert torch.equal(grad.cpu(), torch.zeros(5, feat_dim, dtype=dtype))
    # More rows than any edge touches: those rows are zero.
    grad = ops.edge_dot_grad(grad_out, x_dst, ei[0], ei[1], 9)
    ref = torch.zeros(9, feat_dim, dtype=torch.float64).index_add_(
        0, ei[0].cpu().long(), _f64(grad_out)[:, None] * _f64(x_dst)[ei[1].cpu().long()])
    assert torch.equal(grad.cpu()[4:], torch.zeros(5, feat_dim, dtype=dtype))
    assert_close(grad, ref, dtype, "grad with empty rows")


def skewed_edges(gen, num_src, num_dst, degrees, device, index_dtype):
    """Edges whose source rows have the given degrees, in random order."""
    src = torch.cat([torch.full((d,), row) for row, d in enumerate(degrees)])
    dst = torch.randint(0, num_dst, (src.numel(),), generator=gen)
    order = torch.randperm(src.numel(), generator=gen)
    return torch.stack([src, dst])[:, order].to(index_dtype).to(device)


def check_hub_rows(ops, device, gen, dtype, segment, degrees, feat_dim=5):
    """Rows longer than a segment are summed in segments first; the result is the same,
    and bitwise equal from run to run."""
    num_src, num_dst = len(degrees), 7
    x_src = randn(gen, num_src, feat_dim, dtype=dtype, device=device)
    x_dst = randn(gen, num_dst, feat_dim, dtype=dtype, device=device)
    ei = skewed_edges(gen, num_src, num_dst, degrees, device, torch.int64)
    hub_edge = int((ei[0] == 0).nonzero()[0, 0])
    ei[1, hub_edge] = -1  # an out-of-range gather index in the hub row contributes nothing
    grad_out = randn(gen, ei.size(1), dtype=dtype, device=device)
    with module_setting(ops, "HUB_SEGMENT_EDGES", segment):
        grad = ops.edge_dot_grad(grad_out, x_dst, ei[0], ei[1], num_src)
        again = ops.edge_dot_grad(grad_out, x_dst, ei[0], ei[1], num_src)
    keep = ei[1].cpu() >= 0
    ref, _ = ref_grads(x_src, x_dst, ei.cpu()[:, keep], grad_out.cpu()[keep])
    assert_close(grad, ref, dtype, f"hub rows, segment {segment}")
    assert torch.equal(grad, again), "two runs differ"


def check_sort_chunks(ops, device, gen, dtype, chunk, segment):
    """The backward sorts at most SORT_CHUNK_EDGES edges at a time (torch.sort's limit on
    CUDA is INT_MAX); chunks are added in order."""
    num_src, num_dst, feat_dim = 6, 5, 4
    x_src = randn(gen, num_src, feat_dim, dtype=dtype, device=device)
    x_dst = randn(gen, num_dst, feat_dim, dtype=dtype, device=device)
    ei = skewed_edges(gen, num_src, num_dst, [20, 0, 3, 13, 9, 5], device, torch.int32)
    grad_out = randn(gen, ei.size(1), dtype=dtype, device=device)
    with module_setting(ops, "SORT_CHUNK_EDGES", chunk), \
            module_setting(ops, "HUB_SEGMENT_EDGES", segment):
        grad = ops.edge_dot_grad(grad_out, x_dst, ei[0], ei[1], num_src)
        again = ops.edge_dot_grad(grad_out, x_dst, ei[0], ei[1], num_src)
    ref, _ = ref_grads(x_src, x_dst, ei.cpu(), grad_out.cpu())
    assert_close(grad, ref, dtype, f"sort chunks of {chunk}")
    assert torch.equal(grad, again), "two runs differ"


def check_deterministic(ops, device, gen, dtype, num_nodes, num_edges, feat_dim):
    x = randn(gen, num_nodes, feat_dim, dtype=dtype, device=device)
    ei = random_edge_index(gen, num_nodes, num_nodes, num_edges, torch.int64, device)
    grad_out = randn(gen, num_edges, dtype=dtype, device=device)
    first = both_grads(ops, grad_out, x, x, ei)
    for _ in range(2):
        again = both_grads(ops, grad_out, x, x, ei)
        assert all(torch.equal(a, b) for a, b in zip(first, again)), "backward runs differ"
    out = ops.edge_dot(x, x, ei[0], ei[1])[0]
    assert torch.equal(out, ops.edge_dot(x, x, ei[0], ei[1])[0]), "forward runs differ"


_TEST_LIBRARY = []


def register_test_ops(ops):
    """The ops registered the way the loader registers them (``Library.impl`` per dispatch
    key, fake kernels from Python), under a test namespace."""
    if not _TEST_LIBRARY:
        lib = torch.library.Library("pyg_edgedot_triton_test", "DEF")
        lib.define("edge_dot(Tensor x_src, Tensor x_dst, Tensor src_index, Tensor dst_index) "
                   "-> (Tensor out, Tensor first_bad)")
        lib.define("edge_dot_grad(Tensor grad_out, Tensor x_gather, Tensor scatter_index, "
                   "Tensor gather_index, SymInt num_rows) -> Tensor")
        for key in ("CPU", "CUDA"):
            lib.impl("edge_dot", ops.edge_dot, key)
            lib.impl("edge_dot_grad", ops.edge_dot_grad, key)

        @torch.library.register_fake("pyg_edgedot_triton_test::edge_dot", lib=lib)
        def _edge_dot_fake(x_src, x_dst, src_index, dst_index):
            return x_src.new_empty(src_index.shape), src_index.new_empty(1, dtype=torch.int64)

        @torch.library.register_fake("pyg_edgedot_triton_test::edge_dot_grad", lib=lib)
        def _edge_dot_grad_fake(grad_out, x_gather, scatter_index, gather_index, num_rows):
            return x_gather.new_empty((num_rows, x_gather.shape[1]))

        _TEST_LIBRARY.append(lib)
    return torch.ops.pyg_edgedot_triton_test


def check_compile(ops, device, gen, backend, mode=None):
    """Inside a torch.compile graph (dynamic shapes, no graph break), the same results."""
    test_ops = register_test_ops(ops)

    def score_and_grad(x_src, x_dst, ei, grad_out):
        out, first_bad = test_ops.edge_dot(x_src, x_dst, ei[0], ei[1])
        grad = test_ops.edge_dot_grad(grad_out, x_dst, ei[0], ei[1], x_src.shape[0])
        return out * 2, first_bad, grad + 1

    torch._dynamo.reset()
    compiled = torch.compile(score_and_grad, backend=backend, mode=mode, fullgraph=True,
                             dynamic=True)
    x_src = randn(gen, 9, 6, device=device)
    x_dst = randn(gen, 7, 6, device=device)
    for num_edges in (30, 45, 45):
        ei = random_edge_index(gen, 9, 7, num_edges, torch.int64, device)
        ei[1, 3] = 7  # out of range: NaN, first_bad, no gradient, also when compiled
        grad_out = randn(gen, num_edges, device=device)
        expected = score_and_grad(x_src, x_dst, ei, grad_out)
        got = compiled(x_src, x_dst, ei, grad_out)
        assert got[1].tolist() == [3] and torch.isnan(got[0][3])
        for a, b in zip(got, expected):  # bitwise, NaN included
            torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True,
                                       msg=f"compiled and eager differ (E={num_edges})")
    torch._dynamo.reset()


CHECKS = {
    "shape": check_shape, "layouts": check_layouts, "same_tensor": check_same_tensor,
    "out_of_range": check_out_of_range, "degenerate": check_degenerate,
    "hub_rows": check_hub_rows, "sort_chunks": check_sort_chunks,
    "deterministic": check_deterministic, "compile": check_compile,
}


# ---------------------------------------------------------------------------------------
# Interpreter cases: (check, kwargs) by name; dtypes travel as names
# ---------------------------------------------------------------------------------------

def _interpreter_cases():
    cases = {}
    f32, i64 = "float32", "int64"
    for dtype in FLOAT_DTYPES:
        for index_dtype in INDEX_DTYPES:
            for shape in [(6, 6, 4, 0), (9, 9, 1, 64), (7, 5, 3, 37)]:
                shape_id = "ns{}-nd{}-d{}-e{}".format(*shape)
                cases[f"shape-{dtype_id(dtype)}-{dtype_id(index_dtype)}-{shape_id}"] = (
                    "shape", dict(dtype=dtype_id(dtype), index_dtype=dtype_id(index_dtype),
                                  shape=shape))
        cases[f"same_tensor-{dtype_id(dtype)}"] = (
            "same_tensor", dict(dtype=dtype_id(dtype), index_dtype="int32"))
        cases[f"degenerate-{dtype_id(dtype)}"] = (
            "degenerate", dict(dtype=dtype_id(dtype), index_dtype="int64"))
    cases["shape-float32-int64-d64"] = ("shape", dict(dtype=f32, index_dtype=i64,
                                                      shape=(5, 6, 64, 50)))
    # D = 515: several column blocks (float32: 128 columns each, bfloat16: 256).
    for dtype in ("float32", "bfloat16"):
        cases[f"shape-{dtype}-int32-d515"] = ("shape", dict(dtype=dtype, index_dtype="int32",
                                                            shape=(4, 3, 515, 20)))
    for layout in X_LAYOUTS:
        cases[f"layouts-x_{layout}"] = ("layouts", dict(dtype=f32, x_layout=layout,
                                                        ei_layout="contiguous", feat_dim=6))
    for layout in EI_LAYOUTS[1:]:
        cases[f"layouts-ei_{layout}"] = ("layouts", dict(dtype="bfloat16", x_layout="row_slice",
                                                         ei_layout=layout, feat_dim=16))
    for case, index_dtype in [("several", "int32"), ("several", "int64"),
                              ("first_edge", "int64"), ("last_edge", "int32")]:
        cases[f"out_of_range-{case}-{index_dtype}"] = (
            "out_of_range", dict(dtype=f32, index_dtype=index_dtype, case=case))
    cases["out_of_range-several-float16"] = ("out_of_range", dict(
        dtype="float16", index_dtype=i64, case="several"))
    for dtype in ("float32", "bfloat16", "float64"):
        cases[f"hub_rows-{dtype}"] = ("hub_rows", dict(
            dtype=dtype, segment=8, degrees=[100, 0, 9, 8, 17, 3]))
    cases["hub_rows-float32-d33"] = ("hub_rows", dict(
        dtype=f32, segment=4, degrees=[40, 5, 4, 0, 1], feat_dim=33))
    cases["sort_chunks-float32"] = ("sort_chunks", dict(dtype=f32, chunk=16, segment=1024))
    cases["sort_chunks-bfloat16-hubs"] = ("sort_chunks", dict(dtype="bfloat16", chunk=25,
                                                              segment=4))
    cases["deterministic-float32"] = ("deterministic", dict(dtype=f32, num_nodes=5,
                                                            num_edges=1200, feat_dim=3))
    cases["compile-aot_eager"] = ("compile", dict(backend="aot_eager"))
    return cases


INTERPRETER_CASES = _interpreter_cases()
_DTYPES = {dtype_id(t): t for t in FLOAT_DTYPES + INDEX_DTYPES}


def run_case(ops, name, device):
    """Runs one interpreter case by name; the arguments name dtypes as strings."""
    check, kwargs = INTERPRETER_CASES[name]
    kwargs = {key: _DTYPES.get(value, value) if isinstance(value, str) else value
              for key, value in kwargs.items()}
    CHECKS[check](ops, device, make_gen(seed_for(name)), **kwargs)


def load_interpreted_module():
    """``edge_dot_triton.py`` loaded by path (not through the package, which builds the
    extension)."""
    assert os.environ.get("TRITON_INTERPRET") == "1"
    spec = importlib.util.spec_from_file_location("pyg_edgedot_triton_interpreted", TRITON_PY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _worker(names, result_path):
    import traceback
    ops = load_interpreted_module()
    results = {}
    for name in names:
        try:
            run_case(ops, name, "cpu")
            results[name] = None
        except Exception:  # noqa: BLE001 - reported to the parent test, which fails
            results[name] = traceback.format_exc(limit=6)
    with open(result_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    _worker(sys.argv[2:], sys.argv[1])
    sys.exit(0)


# ---------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------

try:
    import triton  # noqa: F401
    HAS_TRITON = True
except ImportError:
    HAS_TRITON = False

needs_triton = pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")

# Importable without triton: unavailable() then says why.
from pyg_edgedot.ops import edge_dot_triton as _triton  # noqa: E402


def run_interpreter_cases():
    """Runs every interpreter case once, split over a few subprocesses; returns
    ``{case: None or the traceback}``."""
    names = sorted(INTERPRETER_CASES)
    num_workers = max(1, min(4, os.cpu_count() or 1))
    # One thread per worker: the interpreter is Python-bound, and the workers share the cores.
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    results, procs = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for worker in range(num_workers):
            path = os.path.join(tmp, f"worker{worker}.json")
            cmd = [sys.executable, os.path.abspath(__file__), path, *names[worker::num_workers]]
            procs.append((path, subprocess.Popen(cmd, env=env, cwd=TESTS_DIR,
                                                 stdout=subprocess.PIPE,
                                                 stderr=subprocess.STDOUT, text=True)))
        for path, proc in procs:
            output, _ = proc.communicate(timeout=900)
            assert proc.returncode == 0 and os.path.exists(path), (
                f"interpreter worker failed (exit {proc.returncode}):\n{output[-5000:]}")
            with open(path) as f:
                results.update(json.load(f))
    return results


@pytest.fixture(scope="session")
def interpreter_results(tmp_path_factory):
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return run_interpreter_cases()
    # Under pytest-xdist, the first worker to get here runs the cases for all of them.
    from filelock import FileLock
    path = tmp_path_factory.getbasetemp().parent / "triton_interpreter_results.json"
    with FileLock(f"{path}.lock"):
        if not path.is_file():
            path.write_text(json.dumps(run_interpreter_cases()))
        return json.loads(path.read_text())


@needs_triton
@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="a GPU is present: the same checks run on the real Triton compiler "
                           "(test_cuda_*); the interpreter of older Triton releases (3.6, on the "
                           "H200 image) cannot run these kernels' loops over runtime bounds")
@pytest.mark.parametrize("name", sorted(INTERPRETER_CASES))
def test_interpreter(name, interpreter_results):
    assert name in interpreter_results, f"case {name} did not run"
    error = interpreter_results[name]
    assert error is None, f"{name} failed under TRITON_INTERPRET=1:\n{error}"


def test_unavailable_says_why_not():
    reason = _triton.unavailable()
    if HAS_CUDA and HAS_TRITON:
        assert reason is None
    else:
        assert isinstance(reason, str) and reason, reason


def test_env_switch():
    from pyg_edgedot._backend import triton_unusable
    from pyg_edgedot._config import Config
    assert triton_unusable(Config.from_env({"PYG_EDGEDOT_TRITON": "0"})) == \
        "PYG_EDGEDOT_TRITON=0 is set"
    assert triton_unusable(Config.from_env({"PYG_EDGEDOT_FORCE_FALLBACK": "1"})) == \
        "PYG_EDGEDOT_FORCE_FALLBACK=1 is set"


def test_unavailable_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    if HAS_TRITON and torch.version.cuda is not None:
        assert "torch.cuda.is_available() is False" in _triton.unavailable()
    else:
        assert _triton.unavailable() is not None


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("feat_dim", [0, 1, 3, 64, 128, 515, 4096])
def test_block_configs(feat_dim, dtype):
    elem = dtype.itemsize
    for config in (_triton.forward_config, _triton.backward_config):
        block_rows, block_d, num_warps, num_stages = config(feat_dim, dtype)
        for block in (block_rows, block_d):
            assert block >= 1 and block & (block - 1) == 0, f"{config.__name__}: {block}"
        assert block_d * elem <= max(elem, _triton.ROW_BLOCK_BYTES)
        assert block_d >= min(max(feat_dim, 1), _triton.ROW_BLOCK_BYTES // elem)
        assert num_warps in (1, 2, 4, 8, 16) and num_stages >= 1


@pytest.mark.parametrize("num_rows", [1, 9, (1 << 15) - 2, (1 << 15) + 3])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
def test_sorted_by_row(index_dtype, num_rows, gen):
    # Pure torch: the stable sort by row and the CSR pointer, rows out of range excluded.
    scatter = torch.randint(-3, num_rows + 3, (500,), generator=gen)
    scatter[:3] = torch.tensor([-(1 << 30), num_rows, (1 << 31) - 1])
    scatter_strided = scatter.to(index_dtype).repeat_interleave(2)[::2]
    perm, rowptr = _triton._sorted_by_row(scatter_strided, num_rows)
    assert rowptr.shape == (num_rows + 1,)
    in_range = (scatter >= 0) & (scatter < num_rows)
    expected = torch.argsort(torch.where(in_range, scatter, num_rows), stable=True)
    begin, end = int(rowptr[0]), int(rowptr[-1])
    assert end - begin == int(in_range.sum())
    kept = perm[begin:end]
    assert torch.equal(kept, expected[:end - begin]), "not a stable sort of the in-range edges"
    counts = torch.bincount(scatter[in_range], minlength=num_rows)
    assert torch.equal((rowptr[1:] - rowptr[:-1]).long(), counts)


# CUDA: the compiled kernels, the same checks on larger grids.

needs_triton_cuda = pytest.mark.skipif(
    not (HAS_CUDA and HAS_TRITON), reason="needs CUDA and triton")


@pytest.fixture
def cuda_ops():
    reason = _triton.unavailable()
    if reason is not None:
        pytest.skip(reason)
    return _triton


@needs_triton_cuda
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES + [(3000, 2000, 128, 100_000), (500, 700, 96, 5000)],
                         ids=SHAPE_IDS + ["large-d128", "d96"])
def test_cuda_shapes(shape, dtype, index_dtype, cuda_ops, gen):
    check_shape(cuda_ops, "cuda", gen, dtype, index_dtype, shape)


@needs_triton_cuda
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("feat_dim", [16, 7, 128])
@pytest.mark.parametrize("ei_layout", EI_LAYOUTS)
@pytest.mark.parametrize("x_layout", X_LAYOUTS)
def test_cuda_layouts(x_layout, ei_layout, feat_dim, dtype, cuda_ops, gen):
    check_layouts(cuda_ops, "cuda", gen, dtype, x_layout, ei_layout, feat_dim)


@needs_triton_cuda
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_cuda_same_tensor(dtype, index_dtype, cuda_ops, gen):
    check_same_tensor(cuda_ops, "cuda", gen, dtype, index_dtype)


@needs_triton_cuda
@pytest.mark.parametrize("case", list(BAD_CASES))
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_cuda_out_of_range(dtype, index_dtype, case, cuda_ops, gen):
    check_out_of_range(cuda_ops, "cuda", gen, dtype, index_dtype, case)
    torch.cuda.synchronize()  # no illegal access surfaced late


@needs_triton_cuda
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_cuda_degenerate(dtype, index_dtype, cuda_ops, gen):
    check_degenerate(cuda_ops, "cuda", gen, dtype, index_dtype)


@needs_triton_cuda
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("segment,degrees", [
    (8, [100, 0, 9, 8, 17, 3]),
    (1024, [300_000, 1024, 1025, 0, 2049, 7]),  # the default segment: hubs and edge cases
])
@pytest.mark.parametrize("feat_dim", [128, 130])
def test_cuda_hub_rows(feat_dim, segment, degrees, dtype, cuda_ops, gen):
    check_hub_rows(cuda_ops, "cuda", gen, dtype, segment, degrees, feat_dim)


@needs_triton_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
@pytest.mark.parametrize("chunk,segment", [(16, 1024), (25, 4), (7, 2)])
def test_cuda_sort_chunks(chunk, segment, dtype, cuda_ops, gen):
    check_sort_chunks(cuda_ops, "cuda", gen, dtype, chunk, segment)


@needs_triton_cuda
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("num_nodes", [300, 3000])
def test_cuda_deterministic(num_nodes, dtype, cuda_ops, gen):
    # Many edges per row (300 nodes: hub rows, 3000: long plain rows): any atomics or
    # unordered sums would show.
    check_deterministic(cuda_ops, "cuda", gen, dtype, num_nodes, 500_000, 64)


@needs_triton_cuda
@pytest.mark.parametrize("backend,mode", [("aot_eager", None), ("inductor", None),
                                          ("inductor", "reduce-overhead")])
def test_cuda_compile(backend, mode, cuda_ops, gen):
    # reduce-overhead captures CUDA graphs: no host synchronization inside the ops.
    check_compile(cuda_ops, "cuda", gen, backend, mode)


@needs_triton_cuda
def test_cuda_other_device(cuda_ops, gen):
    # Tensors on a device other than the current one (the kernels must follow the tensors).
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    with torch.cuda.device(0):
        check_shape(cuda_ops, "cuda:1", gen, torch.float32, torch.int64, (50, 70, 64, 2000))


@pytest.mark.parametrize("backend", ["triton", "python"])
def test_argument_checks(backend, gen):
    # The registered Python implementations (Triton, fallback) check what they rely on to
    # index memory before any kernel runs, so this runs on CPU tensors.
    if backend == "triton" and not HAS_TRITON:
        pytest.skip("triton is not installed")
    from pyg_edgedot.ops import edge_dot as edge_dot_ops
    impls = edge_dot_ops.triton_impls() if backend == "triton" else edge_dot_ops.fallback_impls()
    forward, grad = impls["edge_dot"], impls["edge_dot_grad"]
    x = randn(gen, 4, 3)
    ei = random_edge_index(gen, 4, 4, 6)
    with pytest.raises(TypeError, match="edge_dot: x_dst must be float32"):
        forward(x, x.double(), ei[0], ei[1])
    with pytest.raises(ValueError, match="edge_dot: x_src must be 2-D"):
        forward(x[0], x, ei[0], ei[1])
    with pytest.raises(ValueError, match="same device and feature dimension"):
        forward(x, x[:, :2], ei[0], ei[1])
    with pytest.raises(TypeError, match="edge_dot: dst_index must be int64 or int32"):
        forward(x, x, ei[0], ei[1].int())
    with pytest.raises(ValueError, match="edge_dot: dst_index must be 1-D"):
        forward(x, x, ei[0], ei[1, :5])
    with pytest.raises(TypeError, match="edge_dot_grad: grad_out and x_gather"):
        grad(torch.ones(6, dtype=torch.float64), x, ei[0], ei[1], 4)
    with pytest.raises(ValueError, match="edge_dot_grad: grad_out must be"):
        grad(torch.ones(5), x, ei[0], ei[1], 4)
    with pytest.raises(ValueError, match="num_rows must be >= 0"):
        grad(torch.ones(6), x, ei[0], ei[1], -1)
