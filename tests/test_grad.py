"""Gradients of ``edge_dot``: values, layouts, the same tensor twice, gradcheck, determinism."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch_geometric import EdgeIndex

from pyg_edgedot import edge_dot
from _helpers import (DEVICES, EI_LAYOUTS, FLOAT_DTYPES, HAS_CUDA, INDEX_DTYPES, SHAPE_IDS,
                      SHAPES, TOL, X_LAYOUTS, _f64, assert_close, cuda_kernel_on_cuda,
                      cuda_kernels_of, dtype_id, make_edge_index, make_x, randint, randn,
                      random_edge_index, ref_base_grad, ref_edge_dot, ref_grads, run_backward,
                      scores_bitwise_alike)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_backward_grid(shape, dtype, index_dtype, device, gen):
    num_src, num_dst, feat_dim, num_edges = shape
    x_src = randn(gen, num_src, feat_dim, dtype=dtype, device=device).requires_grad_(True)
    x_dst = randn(gen, num_dst, feat_dim, dtype=dtype, device=device).requires_grad_(True)
    ei = random_edge_index(gen, num_src, num_dst, num_edges, index_dtype, device)
    out = edge_dot(x_src, x_dst, ei)
    grad_out = run_backward(out, gen)
    ref_src, ref_dst = ref_grads(x_src, x_dst, ei, grad_out)
    for x in (x_src, x_dst):
        assert x.grad is not None and x.grad.dtype == dtype and x.grad.device == x.device
    assert_close(x_src.grad, ref_src, dtype, "grad x_src")
    assert_close(x_dst.grad, ref_dst, dtype, "grad x_dst")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("feat_dim", [1, 3, 33, 128, 130, 515])
@pytest.mark.parametrize("graph", ["sorted", "sparse", "hub"])
def test_forward_backward_row_patterns(graph, feat_dim, dtype, device, gen):
    # Edge orders and degrees that take the kernels' other paths: sources sorted (the forward
    # reuses a source row across consecutive edges), most rows empty with a few dense ones
    # (the backward's walk writes zero rows between), and a hub past the backward's piece
    # length next to short rows; row widths that leave lanes idle (1, 3, 33, 130, 515).
    num_nodes, num_edges = 700, 6000
    ei = random_edge_index(gen, num_nodes, num_nodes, num_edges, torch.int64, device)
    if graph == "sorted":
        ei = ei[:, (ei[0] * num_nodes + ei[1]).argsort()]
    elif graph == "sparse":
        ei[0] = ei[0] % 9 * 77
    else:
        ei[0, :2500] = 3
    x_src = randn(gen, num_nodes, feat_dim, dtype=dtype, device=device).requires_grad_(True)
    x_dst = randn(gen, num_nodes, feat_dim, dtype=dtype, device=device).requires_grad_(True)
    out = edge_dot(x_src, x_dst, ei)
    assert_close(out, ref_edge_dot(x_src, x_dst, ei), dtype, "output")
    grad_out = run_backward(out, gen)
    ref_src, ref_dst = ref_grads(x_src, x_dst, ei, grad_out)
    assert_close(x_src.grad, ref_src, dtype, "grad x_src")
    assert_close(x_dst.grad, ref_dst, dtype, "grad x_dst")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("feat_dim", [16, 7])
@pytest.mark.parametrize("layout", X_LAYOUTS)
def test_backward_x_layouts(layout, feat_dim, dtype, device, gen):
    # Gradients flow back through the strided view onto its base.
    base_src, view_src, x_src = make_x(gen, layout, 23, feat_dim, dtype, device, True)
    base_dst, view_dst, x_dst = make_x(gen, layout, 18, feat_dim, dtype, device, True)
    ei = random_edge_index(gen, 23, 18, 211, torch.int64, device)
    out = edge_dot(x_src, x_dst, ei)
    grad_out = run_backward(out, gen)
    ref_src, ref_dst = ref_grads(x_src, x_dst, ei, grad_out)
    # An expanded view's base gradient is autograd's sum of the 23 (or 18) row gradients,
    # each already rounded to the low-precision dtype: that sum, not the kernel, sets the
    # error (seen on the H200: 1.4e-2 in bf16). Eager PyTorch rounds the same way.
    tol = None
    if layout == "expanded" and dtype in (torch.float16, torch.bfloat16):
        tol = 3 * TOL[dtype]
    assert_close(base_src.grad, ref_base_grad(base_src, view_src, ref_src), dtype, "grad x_src",
                 tol)
    assert_close(base_dst.grad, ref_base_grad(base_dst, view_dst, ref_dst), dtype, "grad x_dst",
                 tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("layout", ["contiguous", "row_step", "col_strided", "offset_misaligned"])
def test_backward_same_tensor_self_loops_duplicates(layout, dtype, device, gen):
    base, view, x = make_x(gen, layout, 12, 33, dtype, device, True)
    ei = random_edge_index(gen, 12, 12, 150, torch.int64, device)
    loops = torch.arange(12, device=device).repeat(2, 1)
    ei = torch.cat([ei, loops, ei[:, :40], loops, ei[:, 7:8].repeat(1, 25)], dim=1)
    out = edge_dot(x, x, ei)
    grad_out = run_backward(out, gen)
    assert_close(out, ref_edge_dot(x, x, ei), dtype)
    ref_src, ref_dst = ref_grads(x, x, ei, grad_out)
    # x is both sides: its gradient is the sum of the source and destination gradients.
    assert_close(base.grad, ref_base_grad(base, view, ref_src + ref_dst), dtype, "grad x")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("layout", EI_LAYOUTS + ["EdgeIndex"])
def test_backward_edge_index_layouts(layout, index_dtype, device, gen):
    x_src = randn(gen, 30, 12, device=device).requires_grad_(True)
    x_dst = randn(gen, 25, 12, device=device).requires_grad_(True)
    plain = random_edge_index(gen, 30, 25, 333, index_dtype, device)
    if layout == "EdgeIndex":
        ei = EdgeIndex(plain, sparse_size=(30, 25))
    else:
        ei = make_edge_index(plain, layout)
    out = edge_dot(x_src, x_dst, ei)
    grad_out = run_backward(out, gen)
    ref_src, ref_dst = ref_grads(x_src, x_dst, plain, grad_out)
    assert_close(x_src.grad, ref_src, torch.float32, "grad x_src")
    assert_close(x_dst.grad, ref_dst, torch.float32, "grad x_dst")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_backward_empty(dtype, device, gen):
    x_src = randn(gen, 5, 8, dtype=dtype, device=device).requires_grad_(True)
    x_dst = randn(gen, 3, 8, dtype=dtype, device=device).requires_grad_(True)
    ei = torch.empty(2, 0, dtype=torch.int64, device=device)
    out = edge_dot(x_src, x_dst, ei)
    out.sum().backward()
    assert torch.equal(x_src.grad.cpu(), torch.zeros(5, 8, dtype=dtype))
    assert torch.equal(x_dst.grad.cpu(), torch.zeros(3, 8, dtype=dtype))


class _OpLog(TorchDispatchMode):
    """Records the ops dispatched (the registered op shows up as one entry)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append((str(func), args))
        return func(*args, **(kwargs or {}))

    def gradient_rows(self):
        """The row count of each gradient computed: edge_dot_grad's num_rows (argument 4), or
        both of edge_dot_pair_grad's (x_src's rows, x_dst's)."""
        rows = []
        for name, args in self.calls:
            if name.startswith("pyg_edgedot.edge_dot_grad"):
                rows.append(int(args[4]))
            elif name.startswith("pyg_edgedot.edge_dot_pair_grad"):
                rows += [args[1].shape[0], args[2].shape[0]]
        return rows

    def count(self, op):
        return sum(name.startswith(f"pyg_edgedot.{op}.") for name, _ in self.calls)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("needs", ["both", "src", "dst", "none"])
def test_gradients_only_where_needed(needs, device, gen):
    num_src, num_dst = 11, 7
    x_src = randn(gen, num_src, 5, device=device).requires_grad_(needs in ("both", "src"))
    x_dst = randn(gen, num_dst, 5, device=device).requires_grad_(needs in ("both", "dst"))
    ei = random_edge_index(gen, num_src, num_dst, 60, torch.int64, device)
    out = edge_dot(x_src, x_dst, ei)
    if needs == "none":
        assert not out.requires_grad
        return
    grad_out = randn(gen, 60, device=device)
    with _OpLog() as log:
        out.backward(grad_out)
    rows = sorted(log.gradient_rows())
    expected = {"both": [num_dst, num_src], "src": [num_src], "dst": [num_dst]}[needs]
    assert rows == sorted(expected), f"the gradient ops computed gradients with rows {rows}"
    # Both gradients in one call (edge_dot_pair_grad), one in edge_dot_grad.
    assert log.count("edge_dot_pair_grad") == (needs == "both")
    assert log.count("edge_dot_grad") == (needs != "both")
    ref_src, ref_dst = ref_grads(x_src, x_dst, ei, grad_out)
    if needs in ("both", "src"):
        assert_close(x_src.grad, ref_src, torch.float32, "grad x_src")
    else:
        assert x_src.grad is None
    if needs in ("both", "dst"):
        assert_close(x_dst.grad, ref_dst, torch.float32, "grad x_dst")
    else:
        assert x_dst.grad is None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
def test_gradcheck(index_dtype, device, gen):
    x_src = randn(gen, 6, 5, dtype=torch.float64, device=device).requires_grad_(True)
    x_dst = randn(gen, 4, 5, dtype=torch.float64, device=device).requires_grad_(True)
    ei = random_edge_index(gen, 6, 4, 15, index_dtype, device)
    ei = torch.cat([ei, ei[:, :3]], dim=1)  # duplicates
    assert torch.autograd.gradcheck(lambda a, b: edge_dot(a, b, ei), (x_src, x_dst))
    # Only one side differentiable.
    assert torch.autograd.gradcheck(lambda a: edge_dot(a, x_dst.detach(), ei), (x_src,))
    assert torch.autograd.gradcheck(lambda b: edge_dot(x_src.detach(), b, ei), (x_dst,))
    # D = 1 and a transposed edge_index.
    x1 = randn(gen, 6, 1, dtype=torch.float64, device=device).requires_grad_(True)
    eit = ei.t().contiguous().t()
    assert torch.autograd.gradcheck(lambda a: edge_dot(a, x_dst[:, :1].detach(), eit), (x1,))


@pytest.mark.parametrize("device", DEVICES)
def test_gradcheck_same_tensor(device, gen):
    x = randn(gen, 5, 4, dtype=torch.float64, device=device).requires_grad_(True)
    ei = random_edge_index(gen, 5, 5, 12, torch.int64, device)
    loops = torch.arange(5, device=device).repeat(2, 1)
    ei = torch.cat([ei, loops, ei[:, :4]], dim=1)  # self loops and duplicates
    assert torch.autograd.gradcheck(lambda a: edge_dot(a, a, ei), (x,))
    # Through a column-strided view of the same tensor.
    base = randn(gen, 4, 5, dtype=torch.float64, device=device).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda b: edge_dot(b.t(), b.t(), ei), (base,))


def _contended_problem(gen, dtype, device):
    # Many edges onto few rows: an atomics-based scatter would vary run to run.
    x_src = randn(gen, 3, 48, dtype=dtype, device=device).requires_grad_(True)
    x_dst = randn(gen, 5, 48, dtype=dtype, device=device).requires_grad_(True)
    ei = random_edge_index(gen, 3, 5, 20000, torch.int64, device)
    grad_out = randn(gen, 20000, dtype=dtype, device=device)
    return x_src, x_dst, ei, grad_out


def _grads(x_src, x_dst, ei, grad_out):
    x_src.grad = x_dst.grad = None
    edge_dot(x_src, x_dst, ei).backward(grad_out)
    return [x.grad.clone() for x in {id(x_src): x_src, id(x_dst): x_dst}.values()]


def _check_deterministic(gen, dtype, device):
    x_src, x_dst, ei, grad_out = _contended_problem(gen, dtype, device)
    first = _grads(x_src, x_dst, ei, grad_out)
    ref_src, ref_dst = ref_grads(x_src, x_dst, ei, grad_out)
    assert_close(first[0], ref_src, dtype, "grad x_src")
    assert_close(first[1], ref_dst, dtype, "grad x_dst")
    for _ in range(3):
        again = _grads(x_src, x_dst, ei, grad_out)
        assert torch.equal(again[0], first[0]), "grad x_src differs between two backward passes"
        assert torch.equal(again[1], first[1]), "grad x_dst differs between two backward passes"
    # The same tensor on both sides: both scatters land in one gradient.
    ei_same = ei % 3
    first = _grads(x_src, x_src, ei_same, grad_out)
    ref_src, ref_dst = ref_grads(x_src, x_src, ei_same, grad_out)
    assert_close(first[0], ref_src + ref_dst, dtype, "grad x")
    for _ in range(3):
        again = _grads(x_src, x_src, ei_same, grad_out)
        assert torch.equal(again[0], first[0]), "grad x differs between two backward passes"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=dtype_id)
def test_backward_bitwise_deterministic(dtype, device, gen):
    if not scores_bitwise_alike("edge_dot", device):
        pytest.skip("the fallback's index_add_ on CUDA is deterministic only under "
                    "torch.use_deterministic_algorithms(True) (the test below)")
    _check_deterministic(gen, dtype, device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=dtype_id)
def test_backward_bitwise_deterministic_flag(dtype, device, gen, deterministic_algorithms):
    assert torch.are_deterministic_algorithms_enabled()
    _check_deterministic(gen, dtype, device)


# ---- the CUDA backward's small-E path against its sorted path ---------------------------------

# csrc/cuda/edge_dot_kernel.cu takes the small-E kernels (no sort) for at most 2**16 edges onto
# at most 8192 rows, with D within one pass of a warp's lanes (D <= 32 in every dtype), and
# CUB's radix sort otherwise: one fused launch for at most 2**15 edges whose rows fit one wave
# of 16- or 32-row blocks, else a plan launch and a sum launch. An edge whose scatter index is
# out of range adds nothing, so the same problem padded past 2**16 edges with such edges is
# summed by the sorted path: every path must write the same bits (each row in increasing edge
# order, a row longer than a piece of 2,048 edges in pieces, as the kernel file says). The
# graphs marked "_2" take the two-launch path: more than 2**15 edges, or more rows than one
# wave of blocks holds on a GPU of at most 255 SMs (8,192 rows: 256 blocks of 32).
SMALL_MAX_EDGES = 1 << 16
SMALL_GRAPHS = ["random", "hub", "one_row", "random_2", "one_row_2", "many_rows_2"]


def _needs_cuda_kernels(group: str) -> None:
    if not HAS_CUDA:
        pytest.skip("CUDA is not available")
    if not cuda_kernel_on_cuda(group):
        pytest.skip(f"the compiled CUDA kernels do not serve {group} here")


def _small_grad_problem(gen, graph, dtype, index_dtype, feat_dim, triple, device="cuda"):
    """grad_out, the gathered factors and the [scatter, gather(, other)] index columns (stride
    2 or 3: one [E, k] tensor), num_rows, for the grad ops' small-E path."""
    if graph == "random":  # rows 300..399 get no edge; short and ~33-edge rows
        num_rows, num_edges, scatter = 400, 5000, randint(gen, 300, 5000)
    elif graph == "random_2":  # the same rows, ~133 edges each, past 2**15 edges
        num_rows, num_edges, scatter = 400, 40_000, randint(gen, 300, 40_000)
    elif graph == "many_rows_2":  # 8,192 rows, most of them empty
        num_rows, num_edges, scatter = 8192, 5000, randint(gen, 8192, 5000)
    elif graph == "hub":  # row 0 past a piece (2,048), rows of ~220 edges, empty rows 50..59
        num_rows, num_edges = 60, 20_000
        scatter = randint(gen, 50, num_edges)
        scatter[torch.randperm(num_edges, generator=gen)[:9000]] = 0
    else:  # "one_row"(_2): every edge on row 1 of 5 (ten or twenty pieces), the rest empty
        num_rows, num_edges = 5, 40_000 if graph.endswith("_2") else 20_000
        scatter = torch.ones(num_edges, dtype=torch.int64)
    num_gather, num_other = 70, 9
    gather = randint(gen, num_gather, num_edges)
    other = randint(gen, num_other, num_edges)
    # Indices out of range: no row (scatter), or in a row but adding nothing (gather, other).
    scatter[3], scatter[11], gather[5], gather[9], other[13] = num_rows, -2, num_gather, -1, -1
    columns = [scatter, gather] + ([other] if triple else [])
    index = torch.stack(columns, dim=1).to(index_dtype).to(device)  # [E, k]: column strides k
    x_gather = randn(gen, num_gather, feat_dim, dtype=dtype, device=device)
    x_other = randn(gen, num_other, feat_dim, dtype=dtype, device=device)
    grad_out = randn(gen, num_edges, dtype=dtype, device=device)
    return grad_out, x_gather, x_other, [index[:, i] for i in range(index.shape[1])], num_rows


def _grad_op(triple, grad_out, x_gather, x_other, index, num_rows):
    if triple:
        scatter, gather, other = index
        return torch.ops.pyg_edgedot.edge_dot_rel_grad(grad_out, x_other, x_gather, scatter,
                                                       other, gather, num_rows)
    scatter, gather = index
    return torch.ops.pyg_edgedot.edge_dot_grad(grad_out, x_gather, scatter, gather, num_rows)


def _padded_past_small(grad_out, index, num_rows):
    """The same sums with E = 2**16 + 1: the extra edges' scatter index is num_rows."""
    pad = SMALL_MAX_EDGES + 1 - grad_out.shape[0]
    grad_out = torch.cat([grad_out, grad_out.new_ones(pad)])
    fills = [num_rows] + [0] * (len(index) - 1)
    index = [torch.cat([i, i.new_full((pad,), f)]) for i, f in zip(index, fills)]
    return grad_out, index


def _ref_small_grad(triple, grad_out, x_gather, x_other, index, num_rows):
    cols = [i.cpu().long() for i in index]
    ok = (cols[0] >= 0) & (cols[0] < num_rows) & (cols[1] >= 0) & (cols[1] < x_gather.shape[0])
    if triple:
        ok &= (cols[2] >= 0) & (cols[2] < x_other.shape[0])
    cols = [c[ok] for c in cols]
    term = _f64(grad_out)[ok][:, None] * _f64(x_gather)[cols[1]]
    if triple:
        term = term * _f64(x_other)[cols[2]]
    return torch.zeros(num_rows, x_gather.shape[1], dtype=torch.float64).index_add_(0, cols[0],
                                                                                   term)


@pytest.mark.parametrize("triple", [False, True], ids=["edge_dot_grad", "edge_dot_rel_grad"])
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("feat_dim", [7, 32])
@pytest.mark.parametrize("graph", SMALL_GRAPHS)
def test_cuda_small_backward_matches_sorted_bitwise(graph, feat_dim, dtype, index_dtype, triple,
                                                    gen):
    _needs_cuda_kernels("edge_dot_rel" if triple else "edge_dot")
    grad_out, x_gather, x_other, index, num_rows = _small_grad_problem(
        gen, graph, dtype, index_dtype, feat_dim, triple)
    small = _grad_op(triple, grad_out, x_gather, x_other, index, num_rows)
    assert small.shape == (num_rows, feat_dim) and small.dtype == dtype
    assert_close(small, _ref_small_grad(triple, grad_out, x_gather, x_other, index, num_rows),
                 dtype, "small-E gradient")
    for _ in range(2):
        assert torch.equal(_grad_op(triple, grad_out, x_gather, x_other, index, num_rows), small)
    padded_grad, padded_index = _padded_past_small(grad_out, index, num_rows)
    sorted_path = _grad_op(triple, padded_grad, x_gather, x_other, padded_index, num_rows)
    mismatch = (small != sorted_path).any(dim=1).nonzero().flatten().tolist()
    assert not mismatch, f"rows {mismatch[:10]} differ from the sorted path's bits"


TWO_LAUNCHES = ["edge_dot_grad_small_plan_kernel", "edge_dot_grad_small_kernel"]


@pytest.mark.parametrize("graph,launches", [("hub", ["edge_dot_grad_small_fused_kernel"]),
                                            ("random_2", TWO_LAUNCHES),
                                            ("many_rows_2", TWO_LAUNCHES)])
def test_cuda_small_backward_path_and_launches(graph, launches, gen):
    # The premise of the test above (which path each call takes): the fused kernel alone, or
    # the plan kernel and the summing kernel, and the sorted path past 2**16 edges.
    _needs_cuda_kernels("edge_dot")
    grad_out, x_gather, x_other, index, num_rows = _small_grad_problem(
        gen, graph, torch.float32, torch.int64, 32, False)
    _grad_op(False, grad_out, x_gather, x_other, index, num_rows)  # warm-up
    small = cuda_kernels_of(lambda: _grad_op(False, grad_out, x_gather, x_other, index,
                                            num_rows))
    if not small:
        pytest.skip("the profiler recorded no CUDA activity here")
    assert len(small) == len(launches), small
    assert all(sum(f"{kernel}<" in name for name in small) == 1 for kernel in launches), small
    padded_grad, padded_index = _padded_past_small(grad_out, index, num_rows)
    sorted_path = cuda_kernels_of(lambda: _grad_op(False, padded_grad, x_gather, x_other,
                                                   padded_index, num_rows))
    assert not any("edge_dot_grad_small" in name for name in sorted_path), sorted_path


# ---- both gradients of a small edge_dot in the same launches ----------------------------------

def _small_pair_problem(gen, graph, dtype, index_dtype, feat_dim):
    """_small_grad_problem's edges as edge_dot's (src = its scatter index, dst = its gather
    index): grad_out, x_src, x_dst, src_index, dst_index."""
    grad_out, x_dst, _, (src, dst), num_src = _small_grad_problem(gen, graph, dtype,
                                                                  index_dtype, feat_dim, False)
    x_src = randn(gen, num_src, feat_dim, dtype=dtype, device="cuda")
    return grad_out, x_src, x_dst, src, dst


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("feat_dim", [7, 32])
@pytest.mark.parametrize("graph", SMALL_GRAPHS)
def test_cuda_small_pair_grad_matches_sorted_bitwise(graph, feat_dim, dtype, index_dtype, gen):
    # edge_dot_pair_grad plans and sums both sides in the same launches: each side must give
    # the sorted path's bits (each side's reference padded past 2**16 edges on its own rows).
    _needs_cuda_kernels("edge_dot")
    grad_out, x_src, x_dst, src, dst = _small_pair_problem(gen, graph, dtype, index_dtype,
                                                           feat_dim)
    pair = torch.ops.pyg_edgedot.edge_dot_pair_grad(grad_out, x_src, x_dst, src, dst)
    for _ in range(2):
        again = torch.ops.pyg_edgedot.edge_dot_pair_grad(grad_out, x_src, x_dst, src, dst)
        assert all(torch.equal(a, b) for a, b in zip(again, pair))
    sides = ((x_dst, src, dst, x_src.shape[0]), (x_src, dst, src, x_dst.shape[0]))
    for got, (x_gather, scatter, gather, num_rows) in zip(pair, sides):
        assert got.shape == (num_rows, feat_dim) and got.dtype == dtype
        assert_close(got, _ref_small_grad(False, grad_out, x_gather, None, [scatter, gather],
                                          num_rows), dtype, "small-E pair gradient")
        padded_grad, padded_index = _padded_past_small(grad_out, [scatter, gather], num_rows)
        sorted_path = _grad_op(False, padded_grad, x_gather, None, padded_index, num_rows)
        mismatch = (got != sorted_path).any(dim=1).nonzero().flatten().tolist()
        assert not mismatch, f"rows {mismatch[:10]} differ from the sorted path's bits"


@pytest.mark.parametrize("graph,launches", [("hub", 1), ("random_2", 2)])
def test_cuda_small_pair_grad_launches(graph, launches, gen):
    # Both sides in the same launches: the fused kernel, or one plan and one summing kernel.
    _needs_cuda_kernels("edge_dot")
    grad_out, x_src, x_dst, src, dst = _small_pair_problem(gen, graph, torch.float32,
                                                           torch.int64, 32)
    torch.ops.pyg_edgedot.edge_dot_pair_grad(grad_out, x_src, x_dst, src, dst)  # warm-up
    names = cuda_kernels_of(
        lambda: torch.ops.pyg_edgedot.edge_dot_pair_grad(grad_out, x_src, x_dst, src, dst))
    if not names:
        pytest.skip("the profiler recorded no CUDA activity here")
    assert len(names) == launches and all("edge_dot_grad_small" in n for n in names), names


def test_cuda_w1_forward_backward_activities(gen):
    # edge_dot at W1's shape (1,024 x 768 nodes, E = 16,384, D = 128) with its edge_index
    # validated: the forward kernel alone, then one fused launch for both gradients.
    _needs_cuda_kernels("edge_dot")
    x_src = randn(gen, 1024, 128, device="cuda").requires_grad_(True)
    x_dst = randn(gen, 768, 128, device="cuda").requires_grad_(True)
    ei = random_edge_index(gen, 1024, 768, 16384, torch.int64, "cuda")
    grad_out = randn(gen, 16384, device="cuda")

    def step():
        return torch.autograd.grad(edge_dot(x_src, x_dst, ei), (x_src, x_dst),
                                   grad_out)

    first = step()  # validates ei
    names = cuda_kernels_of(step)
    if not names:
        pytest.skip("the profiler recorded no CUDA activity here")
    assert len(names) == 2, names
    assert sum("edge_dot_fwd_small_kernel" in n for n in names) == 1, names
    assert sum("edge_dot_grad_small_fused" in n for n in names) == 1, names
    assert all(torch.equal(a, b) for a, b in zip(step(), first))


@pytest.mark.parametrize("device", DEVICES)
def test_forward_mode_ad_is_refused(device, gen):
    # The ops have backward formulas only: a tangent would be dropped without a word (a zero
    # derivative), so forward-mode AD raises instead. Reverse mode is unaffected.
    from torch.autograd import forward_ad
    from torch.func import jacfwd, jvp

    from pyg_edgedot import score_candidates

    x = randn(gen, 6, 4, dtype=torch.float64, device=device)
    rel = randn(gen, 4, dtype=torch.float64, device=device)
    ei = random_edge_index(gen, 6, 6, 9, torch.int64, device)
    calls = [("edge_dot", "x_src", lambda x: edge_dot(x, x, ei)),
             ("edge_dot", "x_dst", lambda x: edge_dot(x.detach(), x, ei)),
             ("edge_dot", "rel", lambda r: edge_dot(x, x, ei, r)),
             ("score_candidates", "x_src",
              lambda x: score_candidates(x, x, ei[0], ei[1].view(-1, 1)))]
    for op, name, fn in calls:
        primal = rel if name == "rel" else x
        for run in (lambda: jvp(fn, (primal,), (torch.ones_like(primal),)),
                    lambda: jacfwd(fn)(primal)):
            with pytest.raises(NotImplementedError, match=rf"^{op}: forward-mode AD .*{name}"):
                run()
        with forward_ad.dual_level():
            dual = forward_ad.make_dual(primal, torch.ones_like(primal))
            with pytest.raises(NotImplementedError, match=rf"^{op}: forward-mode AD .*{name}"):
                fn(dual)
            # Inside a dual level, inputs without a tangent still work.
            assert_close(edge_dot(x, x, ei), ref_edge_dot(x, x, ei), torch.float64)
