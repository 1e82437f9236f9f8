"""Bad inputs: the exception type, a message that starts with ``edge_dot:`` and names the
argument; out-of-range indices with and without ``validate``."""
import numpy as np
import pytest
import torch

from pyg_edgedot import EdgeDotScore, edge_dot
from _helpers import (DEVICES, FLOAT_DTYPES, HAS_CUDA, INDEX_DTYPES, _expect, _has_number,
                      assert_close, dtype_id, op_edge_dot, randn, random_edge_index, ref_edge_dot,
                      ref_grads)


def _data(gen, device, dtype=torch.float32):
    x_src = randn(gen, 6, 4, dtype=dtype, device=device)
    x_dst = randn(gen, 5, 4, dtype=dtype, device=device)
    ei = random_edge_index(gen, 6, 5, 9, torch.int64, device)
    return x_src, x_dst, ei


@pytest.mark.parametrize("device", DEVICES)
def test_type_errors(device, gen):
    x_src, x_dst, ei = _data(gen, device)
    _expect(TypeError, "edge_dot", ["x_src"], lambda: edge_dot(x_src.long(), x_dst, ei))
    _expect(TypeError, "edge_dot", ["x_dst"], lambda: edge_dot(x_src, x_dst.int(), ei))
    _expect(TypeError, "edge_dot", ["x_src"], lambda: edge_dot(x_src.bool(), x_dst, ei))
    _expect(TypeError, "edge_dot", ["x_src"],
            lambda: edge_dot(x_src.to(torch.complex64), x_dst, ei))
    _expect(TypeError, "edge_dot", ["x_src", "x_dst"], lambda: edge_dot(x_src, x_dst.double(), ei))
    _expect(TypeError, "edge_dot", ["x_src", "x_dst"],
            lambda: edge_dot(x_src.half(), x_dst.bfloat16(), ei))
    _expect(TypeError, "edge_dot", ["edge_index"], lambda: edge_dot(x_src, x_dst, ei.float()))
    _expect(TypeError, "edge_dot", ["edge_index"],
            lambda: edge_dot(x_src, x_dst, ei.to(torch.int16)))
    _expect(TypeError, "edge_dot", ["edge_index"], lambda: edge_dot(x_src, x_dst, ei.bool()))
    # Not a Tensor at all.
    _expect(TypeError, "edge_dot", ["x_src"], lambda: edge_dot(x_src.tolist(), x_dst, ei))
    _expect(TypeError, "edge_dot", ["x_src"], lambda: edge_dot(x_src.cpu().numpy(), x_dst, ei))
    _expect(TypeError, "edge_dot", ["x_dst"], lambda: edge_dot(x_src, None, ei))
    _expect(TypeError, "edge_dot", ["edge_index"], lambda: edge_dot(x_src, x_dst, ei.tolist()))
    _expect(TypeError, "edge_dot", ["edge_index"],
            lambda: edge_dot(x_src, x_dst, np.zeros((2, 3), dtype=np.int64)))
    # Sparse and nested tensors: named, not the dispatcher's "could not run" error.
    _expect(TypeError, "edge_dot", ["x_src", "dense", "sparse_coo"],
            lambda: edge_dot(x_src.to_sparse(), x_dst, ei))
    _expect(TypeError, "edge_dot", ["x_dst", "dense", "sparse_csr"],
            lambda: edge_dot(x_src, x_dst.to_sparse_csr(), ei))
    _expect(TypeError, "edge_dot", ["edge_index", "dense"],
            lambda: edge_dot(x_src, x_dst, ei.to_sparse()))
    nested = torch.nested.nested_tensor([x_src[:2], x_src[2:5]])
    _expect(TypeError, "edge_dot", ["x_src", "nested"], lambda: edge_dot(nested, x_dst, ei))
    # validate is a bool: None (or 0) would skip the index check silently, "no" would not.
    for value in (None, 0, 1, "no"):
        _expect(TypeError, "edge_dot", ["validate", "bool"],
                lambda: edge_dot(x_src, x_dst, ei, validate=value))


@pytest.mark.parametrize("device", DEVICES)
def test_value_errors(device, gen):
    x_src, x_dst, ei = _data(gen, device)
    _expect(ValueError, "edge_dot", ["x_src"], lambda: edge_dot(x_src[:, 0], x_dst, ei))   # 1-D
    _expect(ValueError, "edge_dot", ["x_dst"], lambda: edge_dot(x_src, x_dst[:, 0], ei))
    _expect(ValueError, "edge_dot", ["x_src"], lambda: edge_dot(x_src[None], x_dst, ei))   # 3-D
    _expect(ValueError, "edge_dot", ["x_src", "x_dst"], lambda: edge_dot(x_src[:, :3], x_dst, ei))
    _expect(ValueError, "edge_dot", ["edge_index"],
            lambda: edge_dot(x_src, x_dst, torch.cat([ei, ei[:1]])))           # [3, E]
    _expect(ValueError, "edge_dot", ["edge_index"], lambda: edge_dot(x_src, x_dst, ei[0]))  # 1-D
    _expect(ValueError, "edge_dot", ["edge_index"],
            lambda: edge_dot(x_src, x_dst, ei.t()))  # [E, 2]
    _expect(ValueError, "edge_dot", ["edge_index"], lambda: edge_dot(x_src, x_dst, ei[None]))  # 3-D
    # A 1-D feature tensor is a shape problem even when it is also not float.
    _expect(ValueError, "edge_dot", ["x_src"], lambda: edge_dot(x_src[:, 0].long(), x_dst, ei))


@pytest.mark.skipif(not HAS_CUDA, reason="CUDA is not available")
def test_device_errors(gen):
    x_src, x_dst, ei = _data(gen, "cuda")
    _expect(ValueError, "edge_dot", ["x_src", "x_dst"], lambda: edge_dot(x_src, x_dst.cpu(), ei))
    _expect(ValueError, "edge_dot", ["x_src", "x_dst"], lambda: edge_dot(x_src.cpu(), x_dst, ei))
    _expect(ValueError, "edge_dot", ["edge_index"], lambda: edge_dot(x_src, x_dst, ei.cpu()))
    _expect(ValueError, "edge_dot", ["edge_index"], lambda: edge_dot(x_src.cpu(), x_dst.cpu(), ei))


@pytest.mark.parametrize("device", DEVICES)
def test_module_rejects_bad_x(device, gen):
    x_src, x_dst, ei = _data(gen, device)
    with pytest.raises(TypeError, match="EdgeDotScore"):
        EdgeDotScore()((x_src, x_dst, x_dst), ei)
    with pytest.raises(TypeError, match="EdgeDotScore"):
        EdgeDotScore()(x_src.tolist(), ei)


OUT_OF_RANGE = [
    # (row, value): value out of range for that row (x_src has 6 rows, x_dst 5).
    (0, 6), (0, 1000003), (0, -1), (0, -6), (1, 5), (1, 77777), (1, -2),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("row_value", OUT_OF_RANGE, ids=[f"row{r}_{v}" for r, v in OUT_OF_RANGE])
def test_index_out_of_range(row_value, index_dtype, device, gen):
    row, value = row_value
    x_src = randn(gen, 6, 4, device=device)
    x_dst = randn(gen, 5, 4, device=device)
    ei = random_edge_index(gen, 6, 5, 300, index_dtype, device)
    bad_edge = 213
    ei[row, bad_edge] = value
    ei[row, bad_edge + 40] = value  # a later bad edge: the message names the first one
    message = _expect(IndexError, "edge_dot", [f"edge_index[{row}]"],
                      lambda: edge_dot(x_src, x_dst, ei))
    assert _has_number(message, bad_edge), f"message does not name edge {bad_edge}: {message!r}"
    assert _has_number(message, value), f"message does not name value {value}: {message!r}"
    # The registered op reports the same first bad edge (and does not raise).
    _, first_bad = op_edge_dot(x_src, x_dst, ei[0], ei[1])
    assert first_bad.item() == bad_edge
    if device == "cuda":
        _check_cuda_context_alive(gen)


def _check_cuda_context_alive(gen):
    # After a (device-side detected) error the context must still run kernels correctly.
    torch.cuda.synchronize()
    a = randn(gen, 64, 64, dtype=torch.float64, device="cuda")
    assert torch.allclose((a @ a).cpu(), a.cpu() @ a.cpu(), rtol=1e-10, atol=1e-10)
    x = randn(gen, 8, 16, device="cuda")
    ei = random_edge_index(gen, 8, 8, 100, torch.int64, "cuda")
    assert_close(edge_dot(x, x, ei), ref_edge_dot(x, x, ei), torch.float32)
    torch.cuda.synchronize()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_validate_false_scores_nan_and_no_gradient(dtype, index_dtype, device, gen):
    num_src, num_dst, feat_dim, num_edges = 9, 7, 19, 500
    x_src = randn(gen, num_src, feat_dim, dtype=dtype, device=device).requires_grad_(True)
    x_dst = randn(gen, num_dst, feat_dim, dtype=dtype, device=device).requires_grad_(True)
    ei = random_edge_index(gen, num_src, num_dst, num_edges, index_dtype, device)
    big = 2**31 - 1 if index_dtype == torch.int32 else 2**40
    bad = {3: (0, num_src), 100: (1, num_dst), 101: (0, -1), 250: (1, -num_dst - 5),
           251: (0, big), 499: (1, big)}
    for edge, (row, value) in bad.items():
        ei[row, edge] = value
    bad_edges = torch.tensor(sorted(bad))
    good = torch.ones(num_edges, dtype=torch.bool)
    good[bad_edges] = False

    out = edge_dot(x_src, x_dst, ei, validate=False)
    assert out.shape == (num_edges,) and out.dtype == dtype
    assert torch.isnan(out.cpu()[bad_edges]).all(), "an out-of-range edge must score NaN"
    good_ei = ei.cpu()[:, good]
    assert_close(out.cpu()[good], ref_edge_dot(x_src, x_dst, good_ei), dtype)

    # A nonzero upstream gradient on every edge, the bad ones included: they contribute
    # nothing to either side (even where the other endpoint is in range).
    grad_out = randn(gen, num_edges, dtype=dtype, device=device)
    out.backward(grad_out)
    ref_src, ref_dst = ref_grads(x_src, x_dst, good_ei, grad_out.cpu()[good])
    assert_close(x_src.grad, ref_src, dtype, "grad x_src")
    assert_close(x_dst.grad, ref_dst, dtype, "grad x_dst")
    if device == "cuda":
        _check_cuda_context_alive(gen)


@pytest.mark.parametrize("device", DEVICES)
def test_validate_false_same_tensor_and_empty_side(device, gen):
    x = randn(gen, 6, 5, device=device).requires_grad_(True)
    ei = random_edge_index(gen, 6, 6, 40, torch.int64, device)
    ei[1, 17] = 6
    out = edge_dot(x, x, ei, validate=False)
    good = torch.arange(40) != 17
    assert torch.isnan(out[17]).item()
    assert_close(out.cpu()[good], ref_edge_dot(x, x, ei.cpu()[:, good]), torch.float32)
    grad_out = randn(gen, 40, device=device)
    out.backward(grad_out)
    ref_src, ref_dst = ref_grads(x, x, ei.cpu()[:, good], grad_out.cpu()[good])
    assert_close(x.grad, ref_src + ref_dst, torch.float32, "grad x")
    # No destination rows at all: every edge is out of range.
    none = torch.empty(0, 5, device=device)
    out = edge_dot(x.detach(), none, torch.zeros(2, 4, dtype=torch.int64, device=device),
                   validate=False)
    assert out.shape == (4,) and torch.isnan(out.cpu()).all()
    _expect(IndexError, "edge_dot", ["edge_index[1]"],
            lambda: edge_dot(x, none, torch.zeros(2, 4, dtype=torch.int64, device=device)))


@pytest.mark.parametrize("device", DEVICES)
def test_op_grad_negative_num_rows(device, gen):
    # Called directly (torch.ops), the gradient ops name num_rows on every backend; the C++
    # one raises RuntimeError (TORCH_CHECK), the Python ones ValueError.
    x = randn(gen, 8, 6, device=device)
    index = torch.zeros(5, dtype=torch.int64, device=device)
    grad_out = randn(gen, 5, device=device)
    ops = torch.ops.pyg_edgedot
    calls = {"edge_dot_grad": lambda: ops.edge_dot_grad(grad_out, x, index, index, -1),
             "edge_dot_rel_grad": lambda: ops.edge_dot_rel_grad(grad_out, x, x, index, index,
                                                                index, -3)}
    for op, call in calls.items():
        with pytest.raises((RuntimeError, ValueError), match=rf"^{op}: num_rows must be >= 0"):
            call()


@pytest.mark.parametrize("device", DEVICES)
def test_op_edge_dot_grad_ignores_out_of_range(device, gen):
    x_gather = randn(gen, 8, 6, device=device)
    grad_out = randn(gen, 50, device=device)
    ei = random_edge_index(gen, 10, 8, 50, torch.int64, device)
    ei[0, 5] = 10        # scatter index out of range
    ei[1, 9] = -1        # gather index out of range
    ei[0, 30] = 2**40
    ei[1, 31] = 8
    good = torch.ones(50, dtype=torch.bool)
    good[[5, 9, 30, 31]] = False
    out = torch.ops.pyg_edgedot.edge_dot_grad(grad_out, x_gather, ei[0], ei[1], 10)
    ref, _ = ref_grads(torch.zeros(10, 6), x_gather, ei.cpu()[:, good], grad_out.cpu()[good])
    assert_close(out, ref, torch.float32)
    if device == "cuda":
        _check_cuda_context_alive(gen)
