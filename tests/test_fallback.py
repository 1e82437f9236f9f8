"""The pure-PyTorch fallback: the registered fallback kernels directly (chunked), and the forced-fallback
import path (``PYG_EDGEDOT_FORCE_FALLBACK=1``) in a fresh interpreter."""
import json
import math
import re
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from pyg_edgedot import _checks
from pyg_edgedot.ops import _chunked, edge_dot as edge_dot_ops
from _helpers import (DEVICES, FLOAT_DTYPES, HAS_CUDA, INDEX_DTYPES, assert_close, dtype_id,
                      op_edge_dot, randn, random_edge_index, ref_edge_dot, ref_grads)

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
FALLBACK = edge_dot_ops.fallback_impls()
fallback_edge_dot, fallback_edge_dot_grad = FALLBACK["edge_dot"], FALLBACK["edge_dot_grad"]


@pytest.fixture
def tiny_chunks(monkeypatch):
    """Makes the fallback work in chunks of a few edges and counts the chunks it runs."""
    monkeypatch.setattr(_chunked, "DEFAULT_CHUNK_ELEMS", 20)
    counter = {"calls": 0}
    original = _chunked.valid_and_clamped

    def counting(index, num_rows):
        counter["calls"] += 1
        return original(index, num_rows)

    monkeypatch.setattr(_chunked, "valid_and_clamped", counting)
    return counter


def _num_chunks(num_edges, feat_dim, chunk_elems=20):
    return math.ceil(num_edges / max(1, chunk_elems // feat_dim))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("feat_dim", [1, 3, 7, 33])
def test_reference_edge_dot_chunked(feat_dim, dtype, index_dtype, device, gen, tiny_chunks):
    x_src = randn(gen, 15, feat_dim, dtype=dtype, device=device)
    x_dst = randn(gen, 11, feat_dim, dtype=dtype, device=device)
    ei = random_edge_index(gen, 15, 11, 41, index_dtype, device).t().contiguous().t()
    out, first_bad = fallback_edge_dot(x_src, x_dst, ei[0], ei[1])
    assert tiny_chunks["calls"] == 2 * _num_chunks(41, feat_dim), "the chunk size was not used"
    assert out.dtype == dtype and out.device.type == device
    assert first_bad.tolist() == [-1] and first_bad.dtype == torch.int64
    assert_close(out, ref_edge_dot(x_src, x_dst, ei), dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("feat_dim", [1, 7, 33])
def test_reference_edge_dot_grad_chunked(feat_dim, dtype, index_dtype, device, gen, tiny_chunks):
    x_gather = randn(gen, 11, feat_dim, dtype=dtype, device=device)
    grad_out = randn(gen, 41, dtype=dtype, device=device)
    ei = random_edge_index(gen, 15, 11, 41, index_dtype, device)
    out = fallback_edge_dot_grad(grad_out, x_gather, ei[0], ei[1], 18)
    assert tiny_chunks["calls"] == 2 * _num_chunks(41, feat_dim)
    assert out.dtype == dtype and out.shape == (18, feat_dim)
    ref, _ = ref_grads(torch.zeros(18, feat_dim), x_gather, ei, grad_out)
    assert_close(out, ref, dtype)


@pytest.mark.parametrize("device", DEVICES)
def test_reference_out_of_range_across_chunks(device, gen, tiny_chunks):
    x_src = randn(gen, 15, 4, device=device)
    x_dst = randn(gen, 11, 4, device=device)
    ei = random_edge_index(gen, 15, 11, 60, torch.int64, device)
    ei[1, 41] = 11  # in the 9th chunk of 5 edges
    ei[0, 58] = -3
    out, first_bad = fallback_edge_dot(x_src, x_dst, ei[0], ei[1])
    assert first_bad.tolist() == [41]
    good = torch.ones(60, dtype=torch.bool)
    good[[41, 58]] = False
    assert torch.isnan(out.cpu()[~good]).all()
    assert_close(out.cpu()[good], ref_edge_dot(x_src, x_dst, ei.cpu()[:, good]), torch.float32)
    grad_out = randn(gen, 60, device=device)
    grad = fallback_edge_dot_grad(grad_out, x_dst, ei[0], ei[1], 15)
    ref, _ = ref_grads(x_src, x_dst, ei.cpu()[:, good], grad_out.cpu()[good])
    assert_close(grad, ref, torch.float32)
    message = _checks.out_of_range_message(
        "edge_dot", 41, [_checks.Bound("edge_index[0]", ei[0], "x_src", 15),
                         _checks.Bound("edge_index[1]", ei[1], "x_dst", 11)], "edge")
    assert re.match(r"^edge_dot: edge_index\[1\].*\b41\b.*\b11\b", message), message
    # A side with no rows: every edge is out of range.
    out, first_bad = fallback_edge_dot(x_src, x_dst[:0], ei[0], ei[1])
    assert first_bad.tolist() == [0] and torch.isnan(out.cpu()).all()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_reference_agrees_with_registered_op(dtype, device, gen):
    # Whatever backend is active, the fallback and the registered op compute the same thing.
    x_src = randn(gen, 20, 33, dtype=dtype, device=device)
    x_dst = randn(gen, 16, 33, dtype=dtype, device=device)
    ei = random_edge_index(gen, 20, 16, 250, torch.int32, device)
    ref = ref_edge_dot(x_src, x_dst, ei)
    out, first_bad = fallback_edge_dot(x_src, x_dst, ei[0], ei[1])
    assert first_bad.tolist() == [-1]
    assert_close(out, ref, dtype)
    assert_close(op_edge_dot(x_src, x_dst, ei[0], ei[1])[0], ref, dtype)


# ---- PYG_EDGEDOT_FORCE_FALLBACK=1 in a fresh interpreter -----------------------------------

_SCRIPT = textwrap.dedent(r"""
    import json, sys, warnings
    sys.path.insert(0, sys.argv[1])
    import torch
    if sys.argv[2] == "pretend-cuda":
        # What a machine with a GPU sees at import time (only the warnings depend on it).
        real_is_available = torch.cuda.is_available
        torch.cuda.is_available = lambda: True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import pyg_edgedot
    if sys.argv[2] == "pretend-cuda":
        torch.cuda.is_available = real_is_available
    from _helpers import (assert_close, make_gen, randn, random_edge_index, ref_edge_dot,
                          ref_grads, FLOAT_DTYPES, INDEX_DTYPES)
    checked = []
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        for dtype in FLOAT_DTYPES:
            for index_dtype in INDEX_DTYPES:
                gen = make_gen(1234)
                x_src = randn(gen, 13, 7, dtype=dtype, device=device).requires_grad_(True)
                x_dst = randn(gen, 9, 7, dtype=dtype, device=device).requires_grad_(True)
                ei = random_edge_index(gen, 13, 9, 120, index_dtype, device)
                out = pyg_edgedot.edge_dot(x_src, x_dst, ei)
                grad_out = randn(gen, 120, dtype=dtype, device=device)
                out.backward(grad_out)
                assert_close(out, ref_edge_dot(x_src, x_dst, ei), dtype)
                ref_src, ref_dst = ref_grads(x_src, x_dst, ei, grad_out)
                assert_close(x_src.grad, ref_src, dtype, "grad x_src")
                assert_close(x_dst.grad, ref_dst, dtype, "grad x_dst")
                ei[1, 77] = 9
                try:
                    pyg_edgedot.edge_dot(x_src, x_dst, ei)
                    raise AssertionError("no IndexError for an index out of range")
                except IndexError as err:
                    assert str(err).startswith("edge_dot: edge_index[1]"), str(err)
                    assert " 77" in str(err) and " 9 " in str(err), str(err)
                out = pyg_edgedot.edge_dot(x_src, x_dst, ei, validate=False)
                assert torch.isnan(out[77]).item()
                checked.append(f"{device}-{dtype}-{index_dtype}")
    print(json.dumps({
        "backends": pyg_edgedot.backends(),
        "warnings": [[w.category.__name__, str(w.message)] for w in caught],
        "library_path": pyg_edgedot._backend.loaded().build.library_path,
        "checked": checked,
    }))
""")


def _run_forced_fallback(mode):
    env = dict(os.environ, PYG_EDGEDOT_FORCE_FALLBACK="1")
    proc = subprocess.run([sys.executable, "-c", _SCRIPT, TESTS_DIR, mode], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"subprocess failed:\n{proc.stdout}\n{proc.stderr}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    fallback_warnings = [message for category, message in result["warnings"]
                         if category == "UserWarning" and "fallback" in message.lower()]
    return result, fallback_warnings, proc.stderr


def test_forced_fallback_subprocess():
    result, fallback_warnings, stderr = _run_forced_fallback("as-is")
    assert result["backends"] == {"cpu": "python", "cuda": "python"}
    assert len(fallback_warnings) == 1, (
        f"expected exactly one UserWarning about the fallback, got {fallback_warnings}")
    assert "PYG_EDGEDOT_FORCE_FALLBACK" in fallback_warnings[0]
    assert "install" not in fallback_warnings[0]  # nothing to fix: it was asked for
    # Forced fallback builds nothing.
    assert result["library_path"] is None
    assert "compiling" not in stderr
    assert len(result["checked"]) == 8 * (2 if HAS_CUDA else 1)


@pytest.mark.skipif(HAS_CUDA, reason="covered by test_forced_fallback_subprocess on this GPU")
def test_forced_fallback_subprocess_on_a_gpu_machine():
    # The same import where torch.cuda.is_available() is True (as on a GPU machine).
    result, fallback_warnings, _ = _run_forced_fallback("pretend-cuda")
    assert result["backends"] == {"cpu": "python", "cuda": "python"}
    assert len(fallback_warnings) == 1, (
        f"expected exactly one UserWarning about the fallback, got {fallback_warnings}")
