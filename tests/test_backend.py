"""The loader's pieces: schemas read from csrc, the backend table, the switches, and the
memory of validated index tensors that keeps the host synchronization out of the steady
state."""
import gc

import pytest
import torch

import pyg_edgedot
from pyg_edgedot import _backend, _build, _checks
from pyg_edgedot._config import Config
from pyg_edgedot.ops import GROUPS

from _helpers import HAS_CUDA, fallback_on_cuda, randn, random_edge_index


def test_every_group_has_its_schema_file_and_fallback():
    declared = _build.schemas()
    assert set(declared) == {group.NAME for group in GROUPS}
    for group in GROUPS:
        assert declared[group.NAME], f"csrc/{group.NAME}.cpp defines no op"
        assert set(group.fallback_impls()) == set(declared[group.NAME])


def test_schemas_are_the_registered_ones():
    # Whether the library was compiled (the C++ m.def) or not (defined from the same text),
    # the registered schema is the text of csrc/<group>.cpp.
    for ops in _build.schemas().values():
        for name, schema in ops.items():
            registered = str(getattr(torch.ops.pyg_edgedot, name).default._schema)
            assert registered == f"pyg_edgedot::{schema}", (registered, schema)


def test_config_reads_each_switch():
    assert Config.from_env({}) == Config(force_fallback=False, build_cuda=True, use_triton=True)
    assert Config.from_env({"PYG_EDGEDOT_FORCE_FALLBACK": "1"}).force_fallback
    assert not Config.from_env({"PYG_EDGEDOT_CUDA": "0"}).build_cuda
    assert not Config.from_env({"PYG_EDGEDOT_TRITON": "0"}).use_triton


GROUPS_WITH_TRITON = {"edge_dot": _backend.Group(triton=True), "edge_dot_rel": _backend.Group(),
                      "candidates": _backend.Group()}


def test_decide_with_the_cuda_extension():
    table = _backend.decide(_build.BuildResult("cuda", "/x.so"), None, GROUPS_WITH_TRITON)
    for group in GROUPS_WITH_TRITON:
        assert table[group, "cpu"] == ("cpp", None)
        assert table[group, "cuda"] == ("cuda", None)


def test_decide_without_nvcc():
    build = _build.BuildResult("cpu", "/x.so", cuda_error="nvcc was not found")
    table = _backend.decide(build, None, GROUPS_WITH_TRITON)
    assert table["edge_dot", "cuda"] == ("triton", "nvcc was not found")
    assert table["candidates", "cuda"].impl == "python"
    assert "no Triton kernels" in table["candidates", "cuda"].reason
    table = _backend.decide(build, "PYG_EDGEDOT_TRITON=0 is set", GROUPS_WITH_TRITON)
    assert table["edge_dot", "cuda"].impl == "python"
    assert "PYG_EDGEDOT_TRITON=0" in table["edge_dot", "cuda"].reason
    assert table["edge_dot", "cpu"] == ("cpp", None)


def test_decide_without_a_build():
    reason = "PYG_EDGEDOT_FORCE_FALLBACK=1 is set"
    build = _build.BuildResult(cuda_error=reason, cpu_error=reason)
    table = _backend.decide(build, reason, GROUPS_WITH_TRITON)
    for group in GROUPS_WITH_TRITON:
        assert table[group, "cpu"] == ("python", reason)
        assert table[group, "cuda"].impl == "python"


def test_decide_cpu_only_group():
    # A group with a C++ kernel and no CUDA one: its Python implementation serves CUDA
    # tensors, whatever was built.
    groups = dict(GROUPS_WITH_TRITON, cpu_only=_backend.Group(frozenset({"cpu"})))
    for build in (_build.BuildResult("cuda", "/x.so"),
                  _build.BuildResult("cpu", "/x.so", cuda_error="nvcc was not found")):
        table = _backend.decide(build, None, groups)
        assert table["cpu_only", "cpu"] == ("cpp", None)
        assert table["cpu_only", "cuda"] == ("python", "this op group has no CUDA kernel")
        assert table["edge_dot", "cuda"].impl in ("cuda", "triton")


def test_decide_composite_group():
    # A group without kernels: its implementation over the other groups' ops serves both
    # devices, whatever was built; with kernels, they serve and the composite is the fallback.
    groups = dict(GROUPS_WITH_TRITON, loss=_backend.Group(frozenset(), fallback="composite"),
                  loss_kernels=_backend.Group(fallback="composite"))
    built = _build.BuildResult("cuda", "/x.so")
    nothing = _build.BuildResult(cuda_error="no compiler", cpu_error="no compiler")
    for build in (built, nothing):
        table = _backend.decide(build, None, groups)
        assert {table["loss", device].impl for device in _backend.DEVICES} == {"composite"}
    assert _backend.decide(built, None, groups)["loss_kernels", "cuda"] == ("cuda", None)
    assert _backend.decide(nothing, None, groups)["loss_kernels", "cpu"] == ("composite",
                                                                             "no compiler")


def test_describe_reads_each_group():
    from pyg_edgedot.ops import edge_dot, edge_dot_loss
    assert _backend.describe(edge_dot) == _backend.Group(triton=True)
    assert _backend.describe(edge_dot_loss).fallback == "composite"


def test_backends_reads_the_table():
    table = _backend.loaded().table
    assert pyg_edgedot.backends() == {"cpu": table["edge_dot", "cpu"].impl,
                                      "cuda": table["edge_dot", "cuda"].impl}
    assert {group for group, _ in table} == {group.NAME for group in GROUPS}


# ---- the memory of validated index tensors ---------------------------------------------------

def test_validated_remembers_identity_version_and_rows():
    memory = _checks._Validated()
    index = torch.tensor([[0, 1], [2, 3]])
    key = [(index, (4, 5))]
    assert not memory.covers(key)
    memory.add(key)
    assert memory.covers(key)
    assert memory.covers([(index, (10, 5))]), "more rows than checked is still in range"
    assert not memory.covers([(index, (3, 5))]), "fewer rows must be checked again"
    assert not memory.covers([(index.clone(), (4, 5))]), "another tensor is not remembered"
    index[0, 0] = 1  # an in-place write bumps the version counter
    assert not memory.covers(key)


def test_validated_holds_no_tensor_alive():
    memory = _checks._Validated()
    index = torch.tensor([0, 1])
    memory.add([(index, (2,))])
    ident = id(index)
    del index
    gc.collect()
    entry = memory._entries[ident]
    assert entry[0]() is None
    # A new tensor that happens to get the same id does not match the dead entry.
    assert not memory.covers([(torch.tensor([5]), (2,))])


def test_validated_forgets_the_oldest():
    memory = _checks._Validated(capacity=3)
    tensors = [torch.tensor([i]) for i in range(5)]
    for t in tensors:
        memory.add([(t, (10,))])
    assert not memory.covers([(tensors[0], (10,))])
    assert memory.covers([(tensors[4], (10,))])


def test_inference_tensors_are_never_remembered():
    memory = _checks._Validated()
    with torch.inference_mode():
        index = torch.tensor([0, 1])
    memory.add([(index, (2,))])
    assert not memory.covers([(index, (2,))])


def test_reads_first_bad_is_decided_before_the_call():
    # The wrappers ask before calling an op (its report_bad) and read first_bad only on that
    # answer (raise_if_reported); raise_if_out_of_range asks the same question. On the CPU the
    # read is free: every validated call reads.
    index = torch.tensor([[0, 1], [2, 3]])
    key = [(index, (4, 5))]
    assert _checks.reads_first_bad(True, torch.device("cpu"), key)
    assert not _checks.reads_first_bad(False, torch.device("cpu"), key)
    assert not _checks.reads_first_bad(True, torch.device("meta"), key)
    # Not reading, raise_if_out_of_range does not look at first_bad (here empty).
    _checks.raise_if_edge_out_of_range("edge_dot", False, torch.empty(0, dtype=torch.int64),
                                       index, torch.empty(4, 1), torch.empty(5, 1))


def test_validation_on_meta_tensors_is_skipped():
    x = torch.empty(5, 4, device="meta")
    ei = torch.empty(2, 7, dtype=torch.int64, device="meta")
    assert pyg_edgedot.edge_dot(x, x, ei).shape == (7,)


# The compiled kernels record the first bad index on the device; the pure-PyTorch fallback
# reads it back once per chunk (a sync by design).
needs_cuda_kernel = pytest.mark.skipif(
    not HAS_CUDA or fallback_on_cuda("edge_dot"),
    reason="needs CUDA and a compiled kernel for it (the fallback syncs per chunk)")


@needs_cuda_kernel
def test_cuda_no_host_sync_in_the_steady_state(gen):
    x_src = randn(gen, 50, 16, device="cuda").requires_grad_(True)
    x_dst = randn(gen, 40, 16, device="cuda").requires_grad_(True)
    ei = random_edge_index(gen, 50, 40, 300, torch.int64, "cuda")
    pyg_edgedot.edge_dot(x_src, x_dst, ei)  # the first call checks and remembers ei
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = pyg_edgedot.edge_dot(x_src, x_dst, ei)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    out.sum().backward()
    # Written in place: checked again, and the bad index is found.
    ei[1, 17] = 40
    with pytest.raises(IndexError, match=r"edge_index\[1\].*edge 17"):
        pyg_edgedot.edge_dot(x_src, x_dst, ei)
    # Checked against fewer rows than before: checked again.
    ei[1, 17] = 39
    pyg_edgedot.edge_dot(x_src, x_dst, ei)
    with pytest.raises(IndexError, match=r"edge_index\[1\]"):
        pyg_edgedot.edge_dot(x_src, x_dst[:39], ei)


@needs_cuda_kernel
@pytest.mark.parametrize("num_edges", [300, 5000])
def test_cuda_no_host_sync_in_the_backward(num_edges, gen):
    x_src = randn(gen, 50, 16, device="cuda").requires_grad_(True)
    x_dst = randn(gen, 40, 16, device="cuda").requires_grad_(True)
    ei = random_edge_index(gen, 50, 40, num_edges, torch.int64, "cuda")
    pyg_edgedot.edge_dot(x_src, x_dst, ei)
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        pyg_edgedot.edge_dot(x_src, x_dst, ei).sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode(previous)


@needs_cuda_kernel
def test_cuda_reads_first_bad_until_remembered(gen):
    index = random_edge_index(gen, 4, 5, 10, torch.int64, "cuda")
    key = [(index, (4, 5))]
    assert _checks.reads_first_bad(True, index.device, key)
    _checks.VALIDATED.add(key)
    assert not _checks.reads_first_bad(True, index.device, key)
    assert _checks.reads_first_bad(True, index.device, [(index, (3, 5))])


def test_sampler_output_is_remembered_as_valid(gen):
    edge_index = random_edge_index(gen, 30, 30, 100, torch.int64, "cpu")
    negatives = pyg_edgedot.NegativeSampler(edge_index, 30).sample(50)
    assert _checks.VALIDATED.covers([(negatives, (30, 30))])
    assert not _checks.VALIDATED.covers([(negatives, (29, 30))])


@needs_cuda_kernel
def test_cuda_scoring_sampled_negatives_makes_no_host_sync(gen):
    x = randn(gen, 60, 16, device="cuda")
    edge_index = random_edge_index(gen, 60, 60, 300, torch.int64, "cuda")
    negatives = pyg_edgedot.NegativeSampler(edge_index, 60).sample(200)
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        pyg_edgedot.edge_dot(x, x, negatives)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
