"""Forward values of ``edge_dot`` and of the registered ops, against a float64 reference."""
import pytest
import torch
from torch_geometric import EdgeIndex

import pyg_edgedot
from pyg_edgedot import edge_dot, score_candidates
from _helpers import (DEVICES, EI_LAYOUTS, FLOAT_DTYPES, INDEX_DTYPES, OPCHECK_CASES,
                      OPCHECK_IDS, SHAPE_IDS, SHAPES, X_LAYOUTS, assert_close, cuda_kernels_of,
                      dtype_id, gradient_bits_repeat, make_edge_index, make_x, op_edge_dot,
                      randint, randn, random_edge_index, ref_edge_dot, ref_grads, script_result)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
def test_forward_grid(shape, dtype, index_dtype, device, gen):
    num_src, num_dst, feat_dim, num_edges = shape
    x_src = randn(gen, num_src, feat_dim, dtype=dtype, device=device)
    x_dst = randn(gen, num_dst, feat_dim, dtype=dtype, device=device)
    ei = random_edge_index(gen, num_src, num_dst, num_edges, index_dtype, device)
    out = edge_dot(x_src, x_dst, ei)
    assert out.dtype == dtype and out.device.type == device and out.dim() == 1
    assert_close(out, ref_edge_dot(x_src, x_dst, ei), dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("feat_dim", [16, 7])
@pytest.mark.parametrize("layout", X_LAYOUTS)
def test_forward_x_layouts(layout, feat_dim, dtype, device, gen):
    _, _, x_src = make_x(gen, layout, 23, feat_dim, dtype, device)
    _, _, x_dst = make_x(gen, layout, 18, feat_dim, dtype, device)
    ei = random_edge_index(gen, 23, 18, 211, torch.int64, device)
    out = edge_dot(x_src, x_dst, ei)
    assert_close(out, ref_edge_dot(x_src, x_dst, ei), dtype)
    # Mixed: a strided source with a contiguous destination, and the other way round.
    assert_close(edge_dot(x_src, x_dst.contiguous(), ei), ref_edge_dot(x_src, x_dst, ei), dtype)
    assert_close(edge_dot(x_src.contiguous(), x_dst, ei), ref_edge_dot(x_src, x_dst, ei), dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("layout", EI_LAYOUTS)
def test_forward_edge_index_layouts(layout, index_dtype, device, gen):
    x_src = randn(gen, 30, 12, device=device)
    x_dst = randn(gen, 25, 12, device=device)
    ei = make_edge_index(random_edge_index(gen, 30, 25, 333, index_dtype, device), layout)
    assert_close(edge_dot(x_src, x_dst, ei), ref_edge_dot(x_src, x_dst, ei), torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
def test_forward_pyg_edge_index(index_dtype, device, gen):
    x_src = randn(gen, 14, 9, device=device)
    x_dst = randn(gen, 10, 9, device=device)
    plain = random_edge_index(gen, 14, 10, 120, index_dtype, device)
    ei = EdgeIndex(plain, sparse_size=(14, 10))
    out = edge_dot(x_src, x_dst, ei)
    assert type(out) is torch.Tensor
    assert_close(out, ref_edge_dot(x_src, x_dst, plain), torch.float32)
    # A sorted EdgeIndex, as PyG produces it.
    sorted_ei, _ = ei.sort_by("row")
    assert_close(edge_dot(x_src, x_dst, sorted_ei),
                 ref_edge_dot(x_src, x_dst, sorted_ei.as_tensor()), torch.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_forward_same_tensor_self_loops_duplicates(dtype, device, gen):
    x = randn(gen, 12, 33, dtype=dtype, device=device)
    ei = random_edge_index(gen, 12, 12, 150, torch.int64, device)
    loops = torch.arange(12, device=device).repeat(2, 1)
    ei = torch.cat([ei, loops, ei[:, :40], loops], dim=1)  # self loops and duplicates
    out = edge_dot(x, x, ei)
    assert_close(out, ref_edge_dot(x, x, ei), dtype)
    assert_close(out[162:202], ref_edge_dot(x, x, ei[:, :40]), dtype, "duplicates")
    assert_close(out[150:162], ref_edge_dot(x, x, loops), dtype, "self loops")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=dtype_id)
def test_low_precision_accumulates_in_fp32(dtype, device, gen):
    # Positive terms: a float16/bfloat16 running sum stalls long before 2048 terms.
    feat_dim = 2048
    x_src = (randn(gen, 5, feat_dim, dtype=torch.float64).abs() + 0.5).to(dtype).to(device)
    x_dst = (randn(gen, 6, feat_dim, dtype=torch.float64).abs() + 0.5).to(dtype).to(device)
    ei = random_edge_index(gen, 5, 6, 40, torch.int64, device)
    assert_close(edge_dot(x_src, x_dst, ei), ref_edge_dot(x_src, x_dst, ei), dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_float16_partial_sums_beyond_fp16_range(device):
    # Each product (40000) fits in float16, a partial sum (80000) does not; the result (200)
    # does. Accumulating in float16 gives inf or nan.
    x_src = torch.tensor([[200.0, 200.0, -200.0, -200.0]], dtype=torch.float16, device=device)
    x_dst = torch.tensor([[200.0, 200.0, 200.0, 199.0]], dtype=torch.float16, device=device)
    ei = torch.zeros(2, 3, dtype=torch.int64, device=device)
    out = edge_dot(x_src, x_dst, ei)
    assert out.dtype == torch.float16
    assert torch.equal(out.cpu(), torch.full((3,), 200.0, dtype=torch.float16))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_empty(dtype, device, gen):
    x_src = randn(gen, 5, 8, dtype=dtype, device=device)
    x_dst = randn(gen, 3, 8, dtype=dtype, device=device)
    for index_dtype in INDEX_DTYPES:
        ei = torch.empty(2, 0, dtype=index_dtype, device=device)
        out = edge_dot(x_src, x_dst, ei)
        assert out.shape == (0,) and out.dtype == dtype and out.device.type == device
    # No nodes at all on one side, no edges.
    none = torch.empty(0, 8, dtype=dtype, device=device)
    ei = torch.empty(2, 0, dtype=torch.int64, device=device)
    assert edge_dot(none, x_dst, ei).shape == (0,)
    assert edge_dot(x_src, none, ei).shape == (0,)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_forward_does_not_modify_inputs(dtype, device, gen):
    x_src = randn(gen, 10, 7, dtype=dtype, device=device)
    x_dst = randn(gen, 8, 7, dtype=dtype, device=device)
    ei = random_edge_index(gen, 10, 8, 50, torch.int32, device)
    copies = [t.clone() for t in (x_src, x_dst, ei)]
    edge_dot(x_src, x_dst, ei)
    for before, after in zip(copies, (x_src, x_dst, ei)):
        assert torch.equal(before, after)


# ---- the registered ops, called directly -------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_op_edge_dot(dtype, index_dtype, device, gen):
    x_src = randn(gen, 17, 19, dtype=dtype, device=device)
    x_dst = randn(gen, 13, 19, dtype=dtype, device=device)
    ei = random_edge_index(gen, 17, 13, 222, index_dtype, device)
    out, first_bad = op_edge_dot(x_src, x_dst, ei[0], ei[1])
    assert out.dtype == dtype and first_bad.item() == -1
    assert_close(out, ref_edge_dot(x_src, x_dst, ei), dtype)
    # Out-of-range edges: NaN scores, the first one reported, the others unaffected.
    ei[1, 150] = 13
    ei[0, 171] = -1
    ei[0, 200] = 17
    out, first_bad = op_edge_dot(x_src, x_dst, ei[0], ei[1])
    assert first_bad.item() == 150
    good = torch.ones(222, dtype=torch.bool)
    good[[150, 171, 200]] = False
    assert torch.isnan(out.cpu()[~good]).all()
    assert_close(out.cpu()[good], ref_edge_dot(x_src, x_dst, ei.cpu()[:, good]), dtype)
    # No edges.
    out, first_bad = op_edge_dot(x_src, x_dst, ei[0, :0], ei[1, :0])
    assert out.shape == (0,) and first_bad.item() == -1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_op_edge_dot_grad(dtype, index_dtype, device, gen):
    # out[scatter[e]] += grad_out[e] * x_gather[gather[e]]; rows 30..39 receive nothing.
    x_gather = randn(gen, 21, 11, dtype=dtype, device=device)
    grad_out = randn(gen, 400, dtype=dtype, device=device)
    ei = random_edge_index(gen, 30, 21, 400, index_dtype, device)
    out = torch.ops.pyg_edgedot.edge_dot_grad(grad_out, x_gather, ei[0], ei[1], 40)
    assert out.dtype == dtype and out.shape == (40, 11) and out.device.type == device
    # ref_grads(x_src=<any [40, D]>, x_dst=x_gather) gives the scatter onto the source rows.
    placeholder = torch.zeros(40, 11, dtype=torch.float64)
    ref, _ = ref_grads(placeholder, x_gather, ei, grad_out)
    assert_close(out, ref, dtype)
    assert torch.equal(out[30:].cpu(), torch.zeros(10, 11, dtype=dtype))


@pytest.mark.parametrize("device", DEVICES)
def test_op_edge_dot_grad_empty(device, gen):
    x_gather = randn(gen, 5, 3, device=device)
    empty_index = torch.empty(0, dtype=torch.int64, device=device)
    grad_out = torch.empty(0, device=device)
    out = torch.ops.pyg_edgedot.edge_dot_grad(grad_out, x_gather, empty_index, empty_index, 7)
    assert out.shape == (7, 3) and torch.equal(out.cpu(), torch.zeros(7, 3))
    out = torch.ops.pyg_edgedot.edge_dot_grad(grad_out, x_gather, empty_index, empty_index, 0)
    assert out.shape == (0, 3)


# ---- torch.library.opcheck -----------------------------------------------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_edges", [0, 37])
@pytest.mark.parametrize("dtypes", OPCHECK_CASES, ids=OPCHECK_IDS)
def test_opcheck_edge_dot(dtypes, num_edges, device, gen):
    dtype, index_dtype = dtypes
    x_src = randn(gen, 9, 5, dtype=dtype, device=device).requires_grad_(True)
    x_dst = randn(gen, 7, 5, dtype=dtype, device=device).requires_grad_(True)
    # A transposed (non-contiguous) edge_index, as PyG often hands it over.
    ei = random_edge_index(gen, 9, 7, num_edges, index_dtype, device).t().contiguous().t()
    torch.library.opcheck(torch.ops.pyg_edgedot.edge_dot.default, (x_src, x_dst, ei[0], ei[1]))
    torch.library.opcheck(torch.ops.pyg_edgedot.edge_dot.default, (x_src, x_src, ei[0], ei[0]))
    torch.library.opcheck(torch.ops.pyg_edgedot.edge_dot.default,
                          (x_src, x_dst, ei[0], ei[1], False))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_edges", [0, 37, 3000])
def test_op_without_report(num_edges, device, gen):
    # report_bad=False (the wrapper's call once edge_index is validated, or with
    # validate=False): the same scores, NaN where an index is out of range, and first_bad an
    # empty tensor.
    x_src = randn(gen, 9, 5, device=device)
    x_dst = randn(gen, 7, 5, device=device)
    ei = random_edge_index(gen, 9, 7, num_edges, torch.int64, device)
    if num_edges:
        ei[1, num_edges // 2], ei[0, num_edges - 1] = 7, -1
    out, first_bad = torch.ops.pyg_edgedot.edge_dot(x_src, x_dst, ei[0], ei[1])
    assert first_bad.tolist() == [num_edges // 2 if num_edges else -1]
    unreported, none = torch.ops.pyg_edgedot.edge_dot(x_src, x_dst, ei[0], ei[1], False)
    assert none.shape == (0,) and none.dtype == torch.int64 and none.device == out.device
    assert torch.equal(unreported.isnan(), out.isnan())
    assert int(out.isnan().sum()) == (2 if num_edges else 0)
    torch.testing.assert_close(unreported, out, equal_nan=True, rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("num_edges", [0, 37])
@pytest.mark.parametrize("dtypes", OPCHECK_CASES, ids=OPCHECK_IDS)
@pytest.mark.parametrize("op", ["edge_dot_grad", "edge_dot_pair_grad"])
def test_opcheck_grad_ops(op, dtypes, num_edges, device, gen):
    dtype, index_dtype = dtypes
    grad_out = randn(gen, num_edges, dtype=dtype, device=device)
    x_src = randn(gen, 9, 5, dtype=dtype, device=device)
    x_dst = randn(gen, 7, 5, dtype=dtype, device=device)
    ei = random_edge_index(gen, 9, 7, num_edges, index_dtype, device)
    args = ((grad_out, x_dst, ei[0], ei[1], 9) if op == "edge_dot_grad"
            else (grad_out, x_src, x_dst, ei[0], ei[1]))
    torch.library.opcheck(getattr(torch.ops.pyg_edgedot, op).default, args)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("num_edges", [0, 300, 5000])
def test_pair_grad_is_the_two_grads(num_edges, dtype, device, gen, request):
    # edge_dot_pair_grad gives the bits of the two one-sided calls (on CUDA at small E, both
    # sides in the same launches), indices out of range included.
    gradient_bits_repeat("edge_dot", device, request)
    grad_out = randn(gen, num_edges, dtype=dtype, device=device)
    x_src = randn(gen, 40, 32, dtype=dtype, device=device)
    x_dst = randn(gen, 30, 32, dtype=dtype, device=device)
    ei = random_edge_index(gen, 40, 30, num_edges, torch.int64, device)
    if num_edges:
        ei[0, 7], ei[1, 11] = 40, -1
    grad_src, grad_dst = torch.ops.pyg_edgedot.edge_dot_pair_grad(grad_out, x_src, x_dst,
                                                                  ei[0], ei[1])
    assert torch.equal(grad_src, torch.ops.pyg_edgedot.edge_dot_grad(grad_out, x_dst, ei[0],
                                                                     ei[1], 40))
    assert torch.equal(grad_dst, torch.ops.pyg_edgedot.edge_dot_grad(grad_out, x_src, ei[1],
                                                                     ei[0], 30))


def test_backends():
    backends = pyg_edgedot.backends()
    assert set(backends) == {"cpu", "cuda"}
    assert backends["cpu"] in ("cpp", "python")
    assert backends["cuda"] in ("cuda", "python")


_ISA_SCRIPT = """
import sys
import torch
import pyg_edgedot
g = torch.Generator().manual_seed(0)
empty = torch.empty(0, dtype=torch.int64)
outs = []
for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
    # E = 303: the AVX2 loop's groups of four edges and a tail of three; 70,000 source rows
    # of D = 64 put the fp32/bf16/fp16 tables over the size from which it prefetches rows.
    # D = 8, 24, 40: the loops' last half block of 8 (row_dot.h).
    for n_src, d in ((50, 1), (50, 7), (50, 8), (50, 64), (50, 129), (50, 24), (50, 40),
                     (70_000, 64)):
        xs = torch.randn(n_src, d, generator=g).to(dtype)
        xd = torch.randn(40, d, generator=g).to(dtype)
        ei = torch.stack([torch.randint(0, n_src, (303,), generator=g),
                          torch.randint(0, 40, (303,), generator=g)])
        rel = torch.randn(3, d, generator=g).to(dtype)
        edge_type = torch.randint(0, 3, (303,), generator=g)
        outs.append(pyg_edgedot.edge_dot(xs, xd, ei))
        outs.append(pyg_edgedot.edge_dot(xs, xd, ei.int()))
        outs.append(pyg_edgedot.edge_dot(xs, xd, ei, rel=rel, edge_type=edge_type))
        # Strided indices, and indices out of range inside a group (NaN, the first reported).
        wide = torch.stack([ei, ei], dim=-1).reshape(2, -1)[:, ::2]
        outs.append(pyg_edgedot.edge_dot(xs, xd, wide))
        bad = ei.clone()
        bad[1, 101], bad[0, 205] = 40, -1
        outs.extend(torch.ops.pyg_edgedot.edge_dot(xs, xd, bad[0], bad[1]))
        # edge_dot_loss's forward has its AVX2 clone too.
        outs.extend(torch.ops.pyg_edgedot.edge_dot_loss(
            xs, xd, ei[0], ei[1], torch.tensor(7), empty, empty, 3, n_src, 40, True, "uniform",
            "bce", "sum"))
        # score_candidates / rank_candidates: four candidates at a time, K % 4 = 3, strided
        # candidates, and an index out of range inside a group of four.
        src, cand = ei[0, :11], ei[1].reshape(3, 101)[:, :99].reshape(11, 27)
        outs.append(pyg_edgedot.score_candidates(xs, xd, src, cand))
        outs.append(pyg_edgedot.score_candidates(xs, xd, src, cand.t().contiguous().t()))
        outs.append(pyg_edgedot.rank_candidates(xs, xd, src, ei[1, 11:22], cand))
        bad_cand = cand.clone()
        bad_cand[4, 9] = 40
        outs.extend(torch.ops.pyg_edgedot.score_candidates(xs, xd, src, bad_cand))
        outs.extend(torch.ops.pyg_edgedot.rank_candidates(xs, xd, src, ei[1, 11:22], bad_cand))
torch.save(outs, sys.argv[1])
"""


@pytest.mark.skipif(pyg_edgedot.backends()["cpu"] != "cpp", reason="needs the C++ CPU kernel")
def test_cpu_isa_loops_give_the_baseline_bits(tmp_path):
    """The CPU scoring loops (edge_dot's forward, four edges at a time, edge_dot_loss's
    pairs, and the candidates of score_candidates and rank_candidates) are compiled for the
    baseline ISA, again for AVX2 and (the four-pair loops) for AVX-512, chosen at run time;
    PYG_EDGEDOT_CPU_AVX512=0 forces AVX2 and PYG_EDGEDOT_CPU_AVX2=0 the baseline. All must give
    the same bits (on a CPU without AVX-512 or AVX2 two or three runs take the same loop, and
    the test checks nothing more)."""
    results = [script_result(_ISA_SCRIPT, tmp_path / f"avx2_{avx2}_avx512_{avx512}.pt",
                             {"PYG_EDGEDOT_CPU_AVX2": avx2, "PYG_EDGEDOT_CPU_AVX512": avx512})
               for avx2, avx512 in (("1", "1"), ("1", "0"), ("0", "0"))]
    assert len(results[0]) == 4 * 8 * 16
    for other in results[1:]:
        assert len(other) == len(results[0])
        for a, b in zip(results[0], other):  # the bytes: a bad edge's NaN is one constant
            assert torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


# ---- the CUDA forward's small-E kernel against its chunked kernel ----------------------------

# csrc/cuda/edge_dot_kernel.cu scores E edges with edge_dot_fwd_small_kernel (a group of G / 4
# lanes per edge, 4 vectors per lane and row) when the groups fit one wave at 4 blocks of 256
# per SM (E * G / 4 <= SMs * 1024), and with edge_dot_fwd_kernel (chunks of edges per warp)
# otherwise: 1,000 edges take the first, the same edges repeated 300 times the second, and
# every edge must score the same bits in both (the kernel file says why).
def _small_and_chunked_problem(gen, feat_dim, dtype, index_dtype=torch.int64):
    if not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    from _helpers import cuda_kernel_on_cuda
    if not cuda_kernel_on_cuda("edge_dot"):
        pytest.skip("the compiled CUDA kernels do not serve edge_dot here")
    x_src = randn(gen, 50, feat_dim, dtype=dtype, device="cuda")
    x_dst = randn(gen, 40, feat_dim, dtype=dtype, device="cuda")
    ei = random_edge_index(gen, 50, 40, 1000, index_dtype, "cuda")
    return x_src, x_dst, ei, ei.repeat(1, 300)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("feat_dim", [128, 64, 32, 7, 3])
def test_cuda_small_forward_matches_chunked_bitwise(feat_dim, dtype, index_dtype, gen):
    x_src, x_dst, ei, big_ei = _small_and_chunked_problem(gen, feat_dim, dtype, index_dtype)
    small, small_bad = torch.ops.pyg_edgedot.edge_dot(x_src, x_dst, ei[0], ei[1])
    assert_close(small, ref_edge_dot(x_src, x_dst, ei), dtype)
    chunked, _ = torch.ops.pyg_edgedot.edge_dot(x_src, x_dst, big_ei[0], big_ei[1])
    assert torch.equal(small, chunked[:1000]) and int(small_bad) == -1
    # An index out of range: NaN and the first such edge, as the chunked kernel reports it.
    ei[1, 700], ei[0, 900] = 40, -1
    small, small_bad = torch.ops.pyg_edgedot.edge_dot(x_src, x_dst, ei[0], ei[1])
    assert int(small_bad) == 700 and small[[700, 900]].isnan().all()
    assert not small[:700].isnan().any()


def test_cuda_small_forward_path(gen):
    # The premise of the test above: which kernel each size takes (D = 128 float32, W1's).
    x_src, x_dst, ei, big_ei = _small_and_chunked_problem(gen, 128, torch.float32)
    torch.ops.pyg_edgedot.edge_dot(x_src, x_dst, ei[0], ei[1])  # warm-up
    small = cuda_kernels_of(lambda: torch.ops.pyg_edgedot.edge_dot(x_src, x_dst, ei[0], ei[1]))
    if not small:
        pytest.skip("the profiler recorded no CUDA activity here")
    assert any("edge_dot_fwd_small_kernel" in name for name in small), small
    chunked = cuda_kernels_of(
        lambda: torch.ops.pyg_edgedot.edge_dot(x_src, x_dst, big_ei[0], big_ei[1]))
    assert not any("edge_dot_fwd_small_kernel" in name for name in chunked), chunked
    assert any("edge_dot_fwd_kernel" in name for name in chunked), chunked


def test_cuda_forward_activities(gen):
    # Through the wrapper: a call that reads first_bad back (an edge_index not yet validated)
    # fills it (a memset, the kernel, the read); once edge_index is remembered, and with
    # validate=False, the kernel is the whole forward.
    x_src, x_dst, ei, _ = _small_and_chunked_problem(gen, 128, torch.float32)
    edge_dot(x_src, x_dst, ei.clone())  # warm-up
    checked = cuda_kernels_of(lambda: edge_dot(x_src, x_dst, ei))
    if not checked:
        pytest.skip("the profiler recorded no CUDA activity here")
    assert any("Memset" in name for name in checked), checked
    remembered = cuda_kernels_of(lambda: edge_dot(x_src, x_dst, ei))
    fresh = ei.clone()
    unchecked = cuda_kernels_of(lambda: edge_dot(x_src, x_dst, fresh, validate=False))
    for names in (remembered, unchecked):
        assert len(names) == 1 and "edge_dot_fwd_small_kernel" in names[0], names


@pytest.mark.parametrize("device", DEVICES)
def test_grad_fn_exactly_where_a_gradient_can_flow(device, gen):
    # The wrappers enter their ops below the Autograd key when no gradient can flow
    # (ops/_dispatch.py): each output must track a gradient exactly when eager's would.
    x_src = randn(gen, 7, 5, device=device)
    x_dst = randn(gen, 6, 5, device=device)
    rel = randn(gen, 3, 5, device=device)
    ei = random_edge_index(gen, 7, 6, 11, torch.int64, device)
    edge_type = randint(gen, 3, 11, torch.int64, device)
    cand = randint(gen, 6, 4 * 11, torch.int64, device).view(11, 4)
    calls = {
        "edge_dot": lambda a, b, r: edge_dot(a, b, ei),
        "edge_dot_rel": lambda a, b, r: edge_dot(a, b, ei, r, edge_type),
        "score_candidates": lambda a, b, r: score_candidates(a, b, ei[0], cand),
    }
    for name, call in calls.items():
        for needs in ([False] * 3, [True, False, False], [False, True, False],
                      [False, False, True]):
            a, b, r = (t.clone().requires_grad_(n) for t, n in zip((x_src, x_dst, rel), needs))
            expect = (needs[0] or needs[1] or (needs[2] and name == "edge_dot_rel"))
            out = call(a, b, r)
            assert out.requires_grad == expect and (out.grad_fn is not None) == expect, name
            with torch.no_grad():
                assert not call(a, b, r).requires_grad, name
            if expect:
                grads = torch.autograd.grad(out.sum(), [t for t in (a, b, r) if t.requires_grad])
                assert all(g is not None for g in grads), name
