"""Argument checks and their messages, for every op: the one module users' errors come from.

Every public function checks its arguments here first, in Python, with messages that start
with the function name and name the argument. The C++ kernels keep only the asserts that
protect memory: a C++ exception thrown from the JIT-built extension crashed the process on
the GPU machine's image instead of reaching Python (benchmarks/NOTES.md, "Why Python raises
the errors"), so users must never depend on one. The kernels never throw for an index out of
range either: they skip it and report the first bad position in ``first_bad``, which
:func:`raise_if_out_of_range` reads.

Reading ``first_bad`` back is a device-to-host synchronization on CUDA. To keep it out of
the steady state, an index tensor found in range is remembered (:data:`VALIDATED`) by
identity, version counter and the row counts it was checked against; a later call with the
same unchanged tensor and row counts at least as large skips the read.
"""
import math
import numbers
import operator
import weakref
from collections import OrderedDict
from typing import Callable, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import Tensor
from torch.autograd import forward_ad

FLOAT_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int64, torch.int32)


def as_plain_index(index: Tensor) -> Tensor:
    """PyG's ``EdgeIndex`` is a Tensor subclass; the kernels want its plain data."""
    as_tensor = getattr(index, "as_tensor", None)
    if callable(as_tensor) and type(index) is not Tensor:
        return as_tensor()
    return index


def check_dense(op: str, name: str, value: Tensor) -> None:
    """Sparse and nested tensors have no strided rows for the kernels to read."""
    if value.layout != torch.strided or value.is_nested:
        kind = "a nested Tensor" if value.is_nested else f"layout {value.layout}"
        raise TypeError(f"{op}: {name} must be a dense (strided) Tensor (got {kind})")


def check_tensor(op: str, name: str, value: object, ndim: int, shape: str,
                 dtypes: Sequence[torch.dtype], dtype_text: str) -> None:
    """``value`` a Tensor of ``ndim`` dimensions (``shape`` says which, e.g. "2-D [N, D]")
    and one of ``dtypes`` (``dtype_text`` names them)."""
    if not isinstance(value, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor (got {type(value).__name__})")
    check_dense(op, name, value)
    if value.dim() != ndim:
        raise ValueError(f"{op}: {name} must be {shape} (got shape {tuple(value.shape)})")
    if value.dtype not in dtypes:
        raise TypeError(f"{op}: {name} must be {dtype_text} (got {value.dtype})")


def check_features(x_src: Tensor, x_dst: Tensor, op: str,
                   names: Tuple[str, str] = ("x_src", "x_dst")) -> None:
    """x_src and x_dst: 2-D float tensors of one dtype, device and width; ``names`` are
    theirs in the messages."""
    for name, x in zip(names, (x_src, x_dst)):
        check_feature_tensor(op, name, x)
    check_alike(op, names[0], x_src, names[1], x_dst)


def check_feature_tensor(op: str, name: str, x: object) -> None:
    """One 2-D float feature tensor; a module checks its one tensor for both sides
    (``InnerProductDecoder``'s ``z``) under its own name before :func:`check_features` would
    call it ``x_src``."""
    check_tensor(op, name, x, 2, "2-D [num_nodes, feat_dim]", FLOAT_DTYPES,
                 "float32, float64, float16 or bfloat16")


def check_alike(op: str, a_name: str, a: Tensor, b_name: str, b: Tensor) -> None:
    """Two 2-D float tensors of one dtype, device and feature dimension."""
    if a.dtype != b.dtype:
        raise TypeError(f"{op}: {a_name} and {b_name} must have the same dtype "
                        f"(got {a.dtype} and {b.dtype})")
    if a.device != b.device:
        raise ValueError(f"{op}: {a_name} and {b_name} must be on the same device "
                         f"(got {a.device} and {b.device})")
    if a.size(1) != b.size(1):
        raise ValueError(f"{op}: {a_name} and {b_name} must have the same feature dimension "
                         f"(got {a.size(1)} and {b.size(1)})")


def check_pairs(op: str, name: str, pairs: object) -> Tensor:
    """``pairs``: a dense ``[2, E]`` Tensor of node pairs; returns the plain tensor (PyG's
    ``EdgeIndex`` as its data). Its dtype and device are the caller's to check."""
    if not isinstance(pairs, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor of shape [2, E] "
                        f"(got {type(pairs).__name__})")
    pairs = as_plain_index(pairs)
    check_dense(op, name, pairs)
    if pairs.dim() != 2 or pairs.size(0) != 2:
        raise ValueError(f"{op}: {name} must have shape [2, E] (got {tuple(pairs.shape)})")
    return pairs


def check_edge_index(x_src: Tensor, edge_index: Tensor, op: str, name: str = "edge_index",
                     x_name: str = "x_src") -> Tensor:
    """``edge_index``: ``[2, E]`` int64/int32 on the features' device; returns the plain
    tensor (the one whose validation is remembered). ``name`` and ``x_name`` are the two
    arguments' names in the messages."""
    edge_index = check_pairs(op, name, edge_index)
    check_index_dtype_device(op, name, edge_index, x_src, x_name)
    return edge_index


def check_index_dtype_device(op: str, name: str, index: Tensor, x_src: Tensor,
                             x_name: str = "x_src") -> None:
    """An index tensor: int64 or int32, on the device of ``x_src`` (named ``x_name``)."""
    if index.dtype not in INDEX_DTYPES:
        raise TypeError(f"{op}: {name} must be int64 or int32 (got {index.dtype})")
    if index.device != x_src.device:
        raise ValueError(f"{op}: {x_name} and {name} must be on the same device "
                         f"(got {x_src.device} and {index.device})")


def check_relation(x_src: Tensor, num_edges: int, rel: Optional[Tensor],
                   edge_type: Optional[Tensor], op: str) -> Tuple[Tensor, Optional[Tensor]]:
    """``rel`` ``[R, D]`` (or ``[D]`` without ``edge_type``) and ``edge_type`` ``[E]``;
    returns ``(rel [R, D], edge_type or None)``."""
    if rel is None:
        raise ValueError(f"{op}: edge_type was given without rel; pass rel=[R, D] relation "
                         "vectors too")
    if not isinstance(rel, Tensor):
        raise TypeError(f"{op}: rel must be a Tensor (got {type(rel).__name__})")
    check_dense(op, "rel", rel)
    if rel.dim() == 1 and edge_type is None:
        rel = rel.unsqueeze(0)
    if rel.dim() != 2:
        raise ValueError(f"{op}: rel must be 2-D [num_relations, feat_dim] (or 1-D [feat_dim] "
                         f"without edge_type) (got shape {tuple(rel.shape)})")
    check_alike(op, "rel", rel, "x_src", x_src)
    if edge_type is None:
        if rel.size(0) != 1:
            raise ValueError(f"{op}: rel has {rel.size(0)} relations, so edge_type [E] is "
                             "required to say which one each edge uses")
        return rel, None
    if not isinstance(edge_type, Tensor):
        raise TypeError(f"{op}: edge_type must be a Tensor (got {type(edge_type).__name__})")
    check_dense(op, "edge_type", edge_type)
    if edge_type.dim() != 1 or edge_type.size(0) != num_edges:
        raise ValueError(f"{op}: edge_type must have shape [E] = [{num_edges}] "
                         f"(got {tuple(edge_type.shape)})")
    check_index_dtype_device(op, "edge_type", edge_type, x_src)
    return rel, edge_type


def check_edge_type_not_sigmoid(op: str, edge_type: object) -> None:
    """``EdgeDotScore``'s third positional argument is ``edge_type``; PyG's
    ``InnerProductDecoder`` takes ``sigmoid`` there, and a bool would pass for relation 0 or 1
    (``bool`` is an ``int``)."""
    if isinstance(edge_type, bool):
        raise TypeError(
            f"{op}: the third positional argument is edge_type, and got a bool "
            f"({edge_type}); PyG's InnerProductDecoder takes sigmoid there. Pass "
            f"sigmoid={edge_type} by keyword, or use pyg_edgedot.InnerProductDecoder, whose "
            "forward is (z, edge_index, sigmoid=True)")


def relation_size(op: str, num_relations, channels) -> Optional[Tuple[int, int]]:
    """A relational module's ``(num_relations, channels)``: both ints >= 1, or both None
    (None: no relation vectors)."""
    if (num_relations is None) != (channels is None):
        raise ValueError(f"{op}: num_relations and channels go together (got "
                         f"num_relations={num_relations}, channels={channels})")
    if num_relations is None:
        return None
    num_relations = as_int(op, "num_relations", num_relations)
    channels = as_int(op, "channels", channels)
    if num_relations < 1 or channels < 1:
        raise ValueError(f"{op}: num_relations and channels must be >= 1 (got "
                         f"num_relations={num_relations}, channels={channels})")
    return num_relations, channels


def check_no_edge_type(op: str, edge_type: object) -> None:
    """A module without relation vectors takes no ``edge_type``."""
    if edge_type is not None:
        raise ValueError(f"{op}: edge_type needs relation vectors; construct "
                         f"{op}(num_relations=R, channels=D)")


def relation_id(op: str, edge_type: object, num_relations: int) -> int:
    """One relation for every edge: an int in ``[0, num_relations)``."""
    edge_type = as_int(op, "edge_type", edge_type, "an int or an [E] Tensor")
    if not 0 <= edge_type < num_relations:
        raise IndexError(f"{op}: edge_type={edge_type} is out of range "
                         f"(num_relations={num_relations})")
    return edge_type


def check_not_mapping(op: str, edge_label_index: object) -> None:
    """Homogeneous features take one ``edge_label_index``, not a dict of them."""
    if isinstance(edge_label_index, Mapping):
        raise TypeError(f"{op}: edge_label_index is a dict, so x must be a dict of node "
                        f"features too")


def check_hetero_inputs(op: str, x_dict: Mapping, edge_label_index_dict: object,
                        edge_type_dict: object) -> None:
    """Dict inputs: ``edge_label_index`` a dict keyed by edge types ``(src_type, relation,
    dst_type)`` whose node types ``x_dict`` has; ``edge_type`` None or a dict. Each edge
    type's features and index are checked here, under the names the user gave them
    (``x['user']``, ``edge_label_index[key]``), before ``edge_dot`` would call them
    ``x_src`` and ``edge_index``."""
    if not isinstance(edge_label_index_dict, Mapping):
        raise TypeError(f"{op}: x is a dict of node features, so edge_label_index must be a "
                        f"dict {{(src_type, relation, dst_type): [2, E]}} (got "
                        f"{type(edge_label_index_dict).__name__})")
    if edge_type_dict is not None and not isinstance(edge_type_dict, Mapping):
        raise TypeError(f"{op}: with dict inputs, edge_type must be a dict "
                        f"{{edge_type: [E] tensor or int}} (got {type(edge_type_dict).__name__})")
    for key in edge_label_index_dict:
        if not (isinstance(key, tuple) and len(key) == 3):
            raise ValueError(f"{op}: edge_label_index keys must be edge types "
                             f"(src_type, relation, dst_type) (got {key!r})")
        for node_type in (key[0], key[2]):
            if node_type not in x_dict:
                raise KeyError(f"{op}: edge type {key} needs x[{node_type!r}], which x does "
                               f"not have (it has {sorted(x_dict)})")
        names = (f"x[{key[0]!r}]", f"x[{key[2]!r}]")
        check_features(x_dict[key[0]], x_dict[key[2]], op, names)
        check_edge_index(x_dict[key[0]], edge_label_index_dict[key], op,
                         f"edge_label_index[{key!r}]", names[0])


def check_candidate_index(op: str, index: Tensor, name: str, shape: str, x_src: Tensor,
                          num_rows: Optional[int] = None,
                          like: Optional[Tensor] = None) -> None:
    """``shape`` is ``"[N]"`` or ``"[N, K]"``; ``num_rows`` the N it must match, if known;
    ``like`` the ``src_index`` whose dtype it must have."""
    dims = shape.count(",") + 1
    if not isinstance(index, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor of shape {shape} "
                        f"(got {type(index).__name__})")
    check_dense(op, name, index)
    if index.dim() != dims:
        raise ValueError(f"{op}: {name} must be {dims}-D {shape} (got shape {tuple(index.shape)})")
    check_index_dtype_device(op, name, index, x_src)
    if num_rows is not None and index.size(0) != num_rows:
        raise ValueError(f"{op}: {name} must have one row per entry of src_index "
                         f"(got {index.size(0)} rows and {num_rows} sources)")
    if like is not None and index.dtype != like.dtype:
        raise TypeError(f"{op}: src_index and {name} must have the same dtype "
                        f"(got {like.dtype} and {index.dtype})")


def check_real(op: str, name: str, values: Tensor) -> None:
    """``values``: a Tensor of real numbers (ranks or scores), any shape."""
    if not isinstance(values, Tensor):
        raise TypeError(f"{op}: {name} must be a Tensor (got {type(values).__name__})")
    check_dense(op, name, values)
    if values.dtype == torch.bool or values.is_complex():
        raise TypeError(f"{op}: {name} must hold real numbers (got {values.dtype})")


def check_no_forward_ad(op: str, inputs: Sequence[Tuple[str, object]]) -> None:
    """Forward-mode AD (``torch.func.jvp``, ``jacfwd``, ``torch.autograd.forward_ad`` dual
    tensors) of the differentiable ``inputs``: the ops register backward formulas only
    (``torch.library`` has no forward-mode rule for them), and PyTorch would drop the
    tangents without a word, giving an output with no tangent (a zero derivative). A dual
    input is refused instead. One global read while no dual level is open."""
    if forward_ad._current_level < 0:
        return
    for name, value in inputs:
        if isinstance(value, Tensor) and forward_ad.unpack_dual(value).tangent is not None:
            raise NotImplementedError(
                f"{op}: forward-mode AD is not supported ({name} has a tangent, from "
                f"torch.func.jvp, jacfwd or torch.autograd.forward_ad); the tangent would be "
                f"dropped. Use reverse mode (backward, torch.autograd.grad)")


def check_k(op: str, k, minimum: int = 1, int64: bool = False):
    """A cut-off ``k``: an int (a ``SymInt`` under ``torch.compile``) >= ``minimum``; with
    ``int64``, below 2**63 (an op's int argument: past it, the dispatcher's cast error)."""
    if isinstance(k, bool) or not isinstance(k, (numbers.Integral, torch.SymInt)):
        raise TypeError(f"{op}: k must be an int (got {type(k).__name__})")
    if k < minimum:
        raise ValueError(f"{op}: k must be >= {minimum} (got {k})")
    if int64 and k >= 2 ** 63:
        raise ValueError(f"{op}: k must be below 2**63 (got {k})")
    return k if isinstance(k, torch.SymInt) else int(k)


def check_bool(op: str, name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{op}: {name} must be a bool (got {type(value).__name__})")


def as_int(op: str, name: str, value, expected: str = "an int") -> int:
    """``value`` as an int: a Python or numpy int or a 0-dim integer Tensor; never a bool, a
    float (2.5 is not silently 2) or a string. ``expected`` is what the error says ``name``
    must be."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise TypeError(f"{op}: {name} must be {expected} (got {type(value).__name__} {value!r})")


def check_op_args(op: str, features: Sequence[Tuple[str, Tensor]],
                  indices: Sequence[Tuple[str, Tensor]],
                  grad_out: Optional[Tensor] = None) -> None:
    """What a registered op implemented in Python (Triton, fallback) relies on to index
    memory safely, for callers of ``torch.ops.pyg_edgedot.*`` that bypass the public
    functions: 2-D features of one float dtype, device and width; 1-D indices of one index
    dtype and length; ``grad_out`` ``[E]`` in the features' dtype. Metadata only."""
    (x_name, x), (i_name, first) = features[0], indices[0]
    for name, feat in features:
        if feat.dim() != 2:
            raise ValueError(f"{op}: {name} must be 2-D [num_nodes, feat_dim] "
                             f"(got shape {tuple(feat.shape)})")
        if feat.dtype not in FLOAT_DTYPES or feat.dtype != x.dtype:
            raise TypeError(f"{op}: {name} must be float32, float64, float16 or bfloat16, "
                            f"the dtype of {x_name} (got {feat.dtype} and {x.dtype})")
        if feat.device != x.device or feat.size(1) != x.size(1):
            raise ValueError(f"{op}: {x_name} and {name} must have the same device and feature "
                             f"dimension (got {x.device}, {x.size(1)} and {feat.device}, "
                             f"{feat.size(1)})")
    for name, index in indices:
        if index.dtype not in INDEX_DTYPES or index.dtype != first.dtype:
            raise TypeError(f"{op}: {name} must be int64 or int32, the dtype of {i_name} "
                            f"(got {index.dtype} and {first.dtype})")
        if index.dim() != 1 or index.shape != first.shape or index.device != x.device:
            raise ValueError(f"{op}: {name} must be 1-D [E] like {i_name}, on the device of "
                             f"{x_name} (got shape {tuple(index.shape)} on {index.device}; "
                             f"{i_name} {tuple(first.shape)}, {x_name} on {x.device})")
    if grad_out is not None:
        if grad_out.dtype != x.dtype:
            raise TypeError(f"{op}: grad_out and {x_name} must have the same dtype "
                            f"(got {grad_out.dtype} and {x.dtype})")
        if grad_out.shape != first.shape or grad_out.device != x.device:
            raise ValueError(f"{op}: grad_out must be [E] like {i_name}, on the device of "
                             f"{x_name} (got shape {tuple(grad_out.shape)} on "
                             f"{grad_out.device})")


def check_fake_devices(op: str, tensors: Sequence[Tuple[str, Tensor]]) -> None:
    """A registered op's fake kernel: every tensor on the device of the first. A call that
    mixes meta tensors with real ones dispatches to the fake kernel, which would otherwise
    return uninitialized tensors for the real device; this raises ``RuntimeError`` instead,
    as the kernels' own checks do."""
    first_name, first = tensors[0]
    for name, t in tensors[1:]:
        torch._check(t.device == first.device,
                     lambda: f"{op}: {name} must be on the device of {first_name} "
                             f"(got {t.device} and {first.device})")


def check_int64_vectors(op: str, tensors: Sequence[Tuple[str, Tensor]],
                        device: torch.device) -> None:
    """Tensors a registered op takes as 1-D int64 on ``device`` (a sampler's keys, CSR
    pointers), for its direct callers. Metadata only."""
    for name, t in tensors:
        if t.dim() != 1 or t.dtype != torch.int64 or t.device != device:
            raise ValueError(f"{op}: {name} must be 1-D int64 on {device} (got shape "
                             f"{tuple(t.shape)}, {t.dtype} on {t.device})")


def feature_pair(op: str, x: object, expected: str) -> Tuple[Tensor, Tensor]:
    """A module's ``x``: one Tensor (both sides) or a pair ``(x_src, x_dst)``; ``expected``
    is what the error says ``x`` must be."""
    if isinstance(x, Tensor):
        return x, x
    if not (isinstance(x, (tuple, list)) and len(x) == 2):
        got = (f"a {type(x).__name__} of {len(x)}" if isinstance(x, (tuple, list))
               else type(x).__name__)
        raise TypeError(f"{op}: x must be {expected} (got {got})")
    return x[0], x[1]


def check_num_rows(op: str, num_rows: int) -> int:
    if num_rows < 0:
        raise ValueError(f"{op}: num_rows must be >= 0 (got {num_rows})")
    return int(num_rows)


# ---------------------------------------------------------------------------------------
# Indices out of range
# ---------------------------------------------------------------------------------------

class Bound:
    """One index argument and the rows it indexes, for the out-of-range message:
    ``name`` (as the user passed it, e.g. ``edge_index[1]``), the index tensor (1-D, entry
    ``position``; or 2-D, row ``position``), and the indexed tensor's name and row count."""
    __slots__ = ("name", "index", "rows_name", "num_rows")

    def __init__(self, name: str, index: Tensor, rows_name: str, num_rows: int) -> None:
        self.name, self.index, self.rows_name, self.num_rows = name, index, rows_name, num_rows


def out_of_range_message(op: str, position: int, bounds: Iterable[Bound], unit: str) -> str:
    """The message for the first bad ``position`` (an edge, or a row of candidates): names
    the first argument in ``bounds`` that holds a bad index there, its value and the range."""
    for b in bounds:
        limit = b.num_rows
        if b.index.dim() == 1:
            value, where = int(b.index[position]), f"{unit} {position}"
        else:
            values = b.index[position]
            bad = ((values < 0) | (values >= limit)).nonzero()
            if bad.numel() == 0:
                continue
            col = int(bad[0, 0])
            value, where = int(values[col]), f"{unit} ({position}, {col})"
        if value < 0 or value >= limit:
            return (f"{op}: {b.name} holds an index out of range at {where}: {value} "
                    f"({b.rows_name} has {limit} rows; valid range is [0, {limit}))")
    return f"{op}: {unit} {position} holds an index out of range"


def version_of(tensor: Tensor) -> Optional[int]:
    """``tensor``'s version counter (every in-place change bumps it), or None for an
    inference tensor, which keeps none (so it is never remembered as checked)."""
    try:
        return tensor._version
    except RuntimeError:
        return None


class _Validated:
    """Index tensors found in range: ``id -> (weakref, version, row counts)``, the most
    recent ``capacity`` of them. An entry holds only a weak reference, so it never keeps a
    tensor alive, and a new tensor at a reused address or id never matches it."""

    def __init__(self, capacity: int = 256) -> None:
        self.capacity = capacity
        self._entries: "OrderedDict[int, Tuple[weakref.ref, int, Tuple[int, ...]]]" = OrderedDict()

    def covers(self, keys: Sequence[Tuple[Tensor, Tuple[int, ...]]]) -> bool:
        for index, rows in keys:
            entry = self._entries.get(id(index))
            if entry is None:
                return False
            ref, version, checked_rows = entry
            if (ref() is not index or version != version_of(index)
                    or any(now < then for now, then in zip(rows, checked_rows))):
                return False
        return True

    def add(self, keys: Sequence[Tuple[Tensor, Tuple[int, ...]]]) -> None:
        for index, rows in keys:
            version = version_of(index)
            if version is None:
                continue
            self._entries[id(index)] = (weakref.ref(index), version, tuple(rows))
            self._entries.move_to_end(id(index))
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)


VALIDATED = _Validated()


def reads_first_bad(validate: bool, device: torch.device,
                    keys: Sequence[Tuple[Tensor, Tuple[int, ...]]]) -> bool:
    """Whether :func:`raise_if_out_of_range` will read ``first_bad`` for a call on ``device``
    with these ``keys``: not without ``validate``, inside a compiled graph, on meta tensors,
    nor on CUDA while a CUDA graph is captured or once every key is remembered. Decided
    before the op runs, so that an op told it will not be read (``report_bad=False``) does no
    work for it."""
    if not validate or torch.compiler.is_compiling() or device.type == "meta":
        return False
    if device.type == "cuda":
        return not (torch.cuda.is_current_stream_capturing() or VALIDATED.covers(keys))
    return True


def raise_if_out_of_range(op: str, validate: bool, first_bad: Tensor,
                          keys: Sequence[Tuple[Tensor, Tuple[int, ...]]],
                          bounds: Callable[[], List[Bound]], unit: str) -> None:
    """Raises ``IndexError`` if ``first_bad`` (a kernel's ``[1]`` report) holds a position,
    read (on CUDA a synchronization) only where :func:`reads_first_bad` says so: see
    :func:`raise_if_reported` for the arguments."""
    if reads_first_bad(validate, first_bad.device, keys):
        raise_if_reported(op, first_bad, keys, bounds, unit)


def raise_if_reported(op: str, first_bad: Tensor,
                      keys: Sequence[Tuple[Tensor, Tuple[int, ...]]],
                      bounds: Callable[[], List[Bound]], unit: str) -> None:
    """Reads ``first_bad`` and raises ``IndexError`` if it holds a position: for an op called
    with ``report_bad=reads_first_bad(...)`` true (a wrapper that decided before the call).

    ``keys``: the user's index tensors with the row counts they index, remembered once found
    in range. ``bounds``: builds the message's arguments, called only to raise.
    """
    position = int(first_bad.item())
    if position < 0:
        if first_bad.is_cuda:
            VALIDATED.add(keys)
        return
    raise IndexError(out_of_range_message(op, position, bounds(), unit))


def edge_keys(edge_index: Tensor, x_src: Tensor, x_dst: Tensor) -> list:
    """The ``keys`` of :func:`raise_if_out_of_range` for a ``[2, E]`` ``edge_index`` whose rows
    index ``x_src`` and ``x_dst``."""
    return [(edge_index, (x_src.size(0), x_dst.size(0)))]


def edge_bounds(edge_index: Tensor, x_src: Tensor, x_dst: Tensor,
                name: str = "edge_index") -> Callable[[], List[Bound]]:
    """The ``bounds`` of :func:`raise_if_out_of_range` for a ``[2, E]`` ``edge_index`` (the
    argument ``name``) whose rows index ``x_src`` and ``x_dst``."""
    num_src, num_dst = x_src.size(0), x_dst.size(0)
    return lambda: [Bound(f"{name}[0]", edge_index[0], "x_src", num_src),
                    Bound(f"{name}[1]", edge_index[1], "x_dst", num_dst)]


def raise_if_edge_out_of_range(op: str, validate: bool, first_bad: Tensor, edge_index: Tensor,
                               x_src: Tensor, x_dst: Tensor, name: str = "edge_index") -> None:
    """:func:`raise_if_out_of_range` for a ``[2, E]`` ``edge_index`` (the argument ``name``)
    whose rows index ``x_src`` and ``x_dst`` (``first_bad`` an edge)."""
    raise_if_out_of_range(op, validate, first_bad, edge_keys(edge_index, x_src, x_dst),
                          edge_bounds(edge_index, x_src, x_dst, name), "edge")


# ---------------------------------------------------------------------------------------
# edge_dot_loss: options, seed, sampler and the registered ops' extra arguments
# ---------------------------------------------------------------------------------------

LOSS_CHOICES = {"negatives": ("structured", "uniform"), "loss": ("bce", "bpr"),
                "reduction": ("mean", "sum")}


def check_loss_options(op: str, num_negatives, **choices: str) -> int:
    """``num_negatives`` an int >= 1; each of ``negatives``, ``loss``, ``reduction`` one of
    :data:`LOSS_CHOICES`. Returns ``num_negatives``."""
    num_negatives = as_int(op, "num_negatives", num_negatives)
    if not 1 <= num_negatives < 2 ** 62:  # the kernels' 1 + K and E * K stay in int64
        raise ValueError(f"{op}: num_negatives must be >= 1 and below 2**62 "
                         f"(got {num_negatives})")
    for name, value in choices.items():
        if value not in LOSS_CHOICES[name]:
            allowed = " or ".join(repr(c) for c in LOSS_CHOICES[name])
            raise ValueError(f"{op}: {name} must be {allowed} (got {value!r})")
    return num_negatives


def check_seed(op: str, seed, device: torch.device) -> Tensor:
    """``seed``: an int (any size; taken modulo 2**64) or a 0-dim int64 tensor on the CPU or
    on ``device``. Returns the 0-dim int64 tensor."""
    if isinstance(seed, Tensor):
        if seed.dim() != 0 or seed.dtype != torch.int64:
            raise ValueError(f"{op}: seed as a Tensor must be 0-dim int64 (got shape "
                             f"{tuple(seed.shape)}, {seed.dtype})")
        if seed.device.type != "cpu" and seed.device != device:
            raise ValueError(f"{op}: seed must be on the CPU or on the features' device "
                             f"(got {seed.device} and {device})")
        return seed
    seed = as_int(op, "seed", seed, "an int, a 0-dim int64 Tensor or None")
    seed = ((seed + (1 << 63)) % (1 << 64)) - (1 << 63)   # two's complement int64
    return torch.tensor(seed, dtype=torch.int64)


def node_pair(num_nodes) -> tuple:
    """``num_nodes`` as PyG gives it, an int or a ``(N_src, N_dst)`` pair, as a tuple."""
    return tuple(num_nodes) if isinstance(num_nodes, (tuple, list)) else (num_nodes,) * 2


def check_sampler(op: str, sampler) -> None:
    """``sampler``: a :class:`pyg_edgedot.NegativeSampler` or None."""
    from .ops.negative_sampling import NegativeSampler
    if sampler is not None and not isinstance(sampler, NegativeSampler):
        raise TypeError(f"{op}: sampler must be a pyg_edgedot.NegativeSampler or None "
                        f"(got {type(sampler).__name__})")


def check_loss_nodes(op: str, x_src: Tensor, x_dst: Tensor, num_nodes,
                     sampler) -> Tuple[int, int]:
    """The candidate node counts ``(N_src, N_dst)``: the sampler's (which must match the
    features' rows), else ``num_nodes`` (an int or a pair, at most the rows), else the rows."""
    rows = (x_src.size(0), x_dst.size(0))
    if sampler is not None:
        check_sampler(op, sampler)
        nodes = (sampler.num_src_nodes, sampler.num_dst_nodes)
        if nodes != rows:
            raise ValueError(f"{op}: sampler was built for (N_src, N_dst) = {nodes} nodes "
                             f"but x_src and x_dst have {rows} rows")
        if num_nodes is not None and node_pair(num_nodes) != nodes:
            raise ValueError(f"{op}: num_nodes={num_nodes} disagrees with the sampler's "
                             f"{nodes}; leave num_nodes=None with a sampler")
        if sampler.device != x_src.device:
            raise ValueError(f"{op}: sampler and x_src must be on the same device "
                             f"(got {sampler.device} and {x_src.device})")
        return nodes
    if num_nodes is None:
        if min(rows) < 1:
            raise ValueError(f"{op}: x_src and x_dst must each have at least one row, the "
                             f"nodes negatives are drawn from (got {rows} rows)")
        return rows
    pair = node_pair(num_nodes)
    expected = f"an int or a pair of ints (got {num_nodes!r})"
    if len(pair) != 2:
        raise TypeError(f"{op}: num_nodes must be {expected}")
    # numpy and 0-dim Tensor ints too, as the samplers take them
    pair = tuple(as_int(op, "num_nodes", n, expected) for n in pair)
    if any(n < 1 or n > r for n, r in zip(pair, rows)):
        raise ValueError(f"{op}: num_nodes={num_nodes} must be >= 1 and at most the rows of "
                         f"x_src and x_dst {rows}")
    return pair


def check_loss_sources(op: str, free_per_source: Tensor, src_index: Tensor) -> None:
    """Structured negatives from a sampler: every positive's source has a negative
    destination. One host read of the sources' free counts."""
    free = free_per_source[src_index.long().clamp(0, max(free_per_source.numel() - 1, 0))]
    check_has_negative(op, free, src_index, ", or use negatives='uniform'")


def check_has_negative(op: str, free: Tensor, src_index: Tensor, hint: str = "") -> None:
    """Structured negatives: ``free[i]``, the count of negative destinations of source
    ``src_index[i]``, is not 0. One host read; ``hint`` ends the message's advice."""
    full = free == 0
    if bool(full.any()):
        node = int(src_index[full.nonzero()[0, 0]])
        raise ValueError(f"{op}: node {node} is connected to all its candidate destinations, "
                         f"so it has no structured negative (see "
                         f"structured_negative_sampling_feasible{hint})")


# ---------------------------------------------------------------------------------------
# Negative sampling
# ---------------------------------------------------------------------------------------

MAX_KEYS = 2 ** 62   # the samplers' int64 keys, ranks and their sums stay far from overflow


def sampling_edge_index(op: str, edge_index: object) -> Tensor:
    """A sampler's ``edge_index`` (:func:`check_pairs`), int32 or int64, with values (the
    draws read which pairs are edges); returns the plain tensor."""
    edge_index = check_pairs(op, "edge_index", edge_index)
    if edge_index.device.type == "meta":
        raise NotImplementedError(f"{op}: edge_index is on the meta device; sampling "
                                  f"needs its values (which pairs are edges)")
    if edge_index.dtype not in INDEX_DTYPES:
        raise TypeError(f"{op}: edge_index must be int32 or int64 (got {edge_index.dtype})")
    return edge_index


def as_count(op: str, name: str, value) -> int:
    """A sampler's count or node count: an int (:func:`as_int`) in ``[0, 2**62)``."""
    value = as_int(op, name, value)
    if value < 0:
        raise ValueError(f"{op}: {name} must be >= 0 (got {value})")
    if value >= MAX_KEYS:
        raise ValueError(f"{op}: {name} must be below 2**62 (got {value})")
    return value


def check_generator(op: str, generator, device: torch.device) -> None:
    """``generator``: None or a ``torch.Generator`` of ``device``'s type."""
    if generator is None:
        return
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"{op}: generator must be a torch.Generator "
                        f"(got {type(generator).__name__})")
    if generator.device.type != device.type:
        raise ValueError(f"{op}: generator must be on edge_index's device type "
                         f"(got a {generator.device.type} generator for {device} tensors)")


def check_sampling_method(op: str, method: str) -> None:
    if method not in ("sparse", "dense"):
        raise ValueError(f"{op}: method must be 'sparse' or 'dense' (got {method!r})")


def check_int_num_nodes(op: str, num_nodes) -> None:
    """The structured samplers take one node count (PyG's signature), not a pair."""
    if isinstance(num_nodes, (tuple, list)):
        raise TypeError(f"{op}: num_nodes must be an int (got {tuple(num_nodes)})")


def sampling_num_nodes(op: str, num_nodes) -> Tuple[int, int, bool]:
    """``num_nodes`` given (not None) as ``(N_src, N_dst, bipartite)``: an int, or a pair
    ``(N_src, N_dst)`` for a bipartite graph."""
    if isinstance(num_nodes, (tuple, list)):
        if len(num_nodes) != 2:
            raise ValueError(f"{op}: num_nodes must be an int or a pair (N_src, N_dst) "
                             f"(got {tuple(num_nodes)})")
        return (as_count(op, "num_nodes[0]", num_nodes[0]),
                as_count(op, "num_nodes[1]", num_nodes[1]), True)
    size = as_count(op, "num_nodes", num_nodes)
    return size, size, False


def sample_count(op: str, num_samples, num_edges: int) -> int:
    """PyG's ``num_neg_samples``: None -> E, a float -> int(ratio * E), an int -> itself."""
    if num_samples is None:
        return num_edges
    if isinstance(num_samples, float):
        if not math.isfinite(num_samples) or num_samples < 0:
            raise ValueError(f"{op}: num_neg_samples as a ratio must be finite and "
                             f">= 0 (got {num_samples})")
        # Past the key space no graph has that many pairs: the complement is returned.
        return min(int(num_samples * num_edges), MAX_KEYS - 1)
    return as_count(op, "num_neg_samples", num_samples)


def check_sampling_range(op: str, edge_index: Tensor, num_src: int, num_dst: int,
                         batch: Optional[Tuple[str, str]] = None) -> None:
    """``edge_index`` within the node counts, which come from ``num_nodes``, or, for the
    batched sampler, from the lengths of the ``batch`` tensors that ``batch`` names (source
    side, destination side). Host reads of the extremes."""
    if edge_index.numel() == 0:
        return
    lo = int(edge_index.min())
    if lo < 0:
        raise IndexError(f"{op}: edge_index holds a negative index ({lo})")
    for row, bound, what in ((0, num_src, "source"), (1, num_dst, "destination")):
        hi = int(edge_index[row].max())
        if hi < bound:
            continue
        if batch is None:
            raise IndexError(f"{op}: edge_index holds {what} index {hi} but num_nodes "
                             f"gives only {bound} {what} nodes; num_nodes must be at "
                             f"least max index + 1")
        arg, per = batch[row], "node" if batch[0] == batch[1] else f"{what} node"
        raise IndexError(f"{op}: edge_index holds {what} index {hi} but {arg} has only "
                         f"{bound} entries (one per {per}); {arg} must be at least max "
                         f"index + 1 long")


def check_key_space(op: str, edge_index: Tensor, num_src: int, num_dst: int) -> None:
    """``N_src x N_dst`` pairs fit the samplers' int64 keys (an index out of range in
    ``edge_index`` is named first)."""
    if num_src * max(num_dst, 1) >= MAX_KEYS:
        check_sampling_range(op, edge_index, num_src, num_dst)
        raise ValueError(f"{op}: num_nodes {(num_src, num_dst)} gives more than "
                         f"2**62 pairs; int64 keys would overflow")


def sampling_batch(op: str, batch, device: torch.device) -> Tuple[List[Tensor], List[str]]:
    """``batch``: ``[N]`` graph ids, or a pair ``([N_src], [N_dst])`` for bipartite graphs,
    1-D int32/int64 on ``device``, none negative. Returns the tensors and the names errors
    give them."""
    if isinstance(batch, Tensor):
        batches, names = [batch], ["batch"]
    elif isinstance(batch, (tuple, list)) and len(batch) == 2:
        batches, names = [batch[0], batch[1]], ["batch[0]", "batch[1]"]
    else:
        raise TypeError(f"{op}: batch must be a Tensor or a pair of Tensors")
    for name, b in zip(names, batches):
        if not isinstance(b, Tensor):
            raise TypeError(f"{op}: {name} must be a torch.Tensor (got {type(b).__name__})")
        check_dense(op, name, b)
        if b.dim() != 1 or b.dtype not in INDEX_DTYPES:
            raise ValueError(f"{op}: {name} must be a 1-D int32/int64 tensor "
                             f"(got shape {list(b.shape)}, {b.dtype})")
        if b.device != device:
            raise ValueError(f"{op}: {name} must be on {device} (got {b.device})")
        if b.numel() > 0 and int(b.min()) < 0:
            raise ValueError(f"{op}: {name} holds a negative graph id")
    return batches, names


# The sampling ops' key spaces (``ops.negative_sampling`` names its modes from here).
SAMPLING_MODES = ("directed", "no_loops", "undirected")


def check_sampling_op_args(op: str, mode: str, num_src: int, num_dst: int,
                           num_keys: int) -> None:
    """The sampling ops' key space, for direct callers of their pure-PyTorch implementations
    (the C++ and CUDA kernels check the same): ``mode`` one of :data:`SAMPLING_MODES`, node
    counts >= 0 (equal unless ``"directed"``) giving ``num_keys`` (the caller's count of
    ``mode``'s keys) below 2**62."""
    if mode not in SAMPLING_MODES:
        raise ValueError(f"{op}: mode must be 'directed', 'no_loops' or 'undirected' "
                         f"(got {mode!r})")
    if num_src < 0 or num_dst < 0 or (mode != "directed" and num_src != num_dst):
        raise ValueError(f"{op}: num_src_nodes and num_dst_nodes must be >= 0, and equal "
                         f"unless mode is 'directed' (got {num_src}, {num_dst})")
    if num_keys >= MAX_KEYS:
        raise ValueError(f"{op}: {num_src} x {num_dst} nodes give 2**62 keys or more")


def check_negative_sample_op_args(excluded_adj: Tensor, num_ranks: int, count: int,
                                  replace: bool, mode: str, num_src: int, num_dst: int,
                                  num_keys: int, dtype: torch.dtype, first_round: int) -> None:
    """``negative_sample``'s arguments, for direct callers of its pure-PyTorch implementation
    (metadata only, as the kernels' checks); ``num_keys`` as in
    :func:`check_sampling_op_args`."""
    op = "negative_sample"
    check_int64_vectors(op, [("excluded_adj", excluded_adj)], excluded_adj.device)
    if dtype not in INDEX_DTYPES:
        raise TypeError(f"{op}: dtype must be int32 or int64 (got {dtype})")
    if num_ranks < 0 or count < 0 or first_round < -1:
        raise ValueError(f"{op}: num_ranks and count must be >= 0 and first_round >= -1 "
                         f"(got {num_ranks}, {count}, {first_round})")
    check_sampling_op_args(op, mode, num_src, num_dst, num_keys)
    if num_ranks + excluded_adj.numel() != num_keys:
        raise ValueError(f"{op}: num_ranks + len(excluded_adj) must be the number of {mode} "
                         f"keys of {num_src} x {num_dst} nodes (got {num_ranks} + "
                         f"{excluded_adj.numel()})")
    if count > 0 and (num_ranks == 0 if replace else count > num_ranks):
        raise ValueError(f"{op}: cannot draw {count} {'' if replace else 'distinct '}keys "
                         f"from {num_ranks}")


def check_sources(op: str, src_index: object, device: torch.device, num_src: int) -> None:
    """A per-source draw's ``src_index``: 1-D int32/int64 on ``device``, each in
    ``[0, num_src)`` (host reads of its extremes)."""
    check_tensor(op, "src_index", src_index, 1, "1-D [S]", INDEX_DTYPES, "int32 or int64")
    if src_index.device != device:
        raise ValueError(f"{op}: src_index must be on {device} (got {src_index.device})")
    if src_index.numel() > 0:
        lo, hi = int(src_index.min()), int(src_index.max())
        if lo < 0 or hi >= num_src:
            raise IndexError(f"{op}: src_index holds {lo if lo < 0 else hi}, outside "
                             f"[0, {num_src})")


def check_loss_op_args(op: str, x_src: Tensor, x_dst: Tensor, seed: Tensor,
                       excluded_adj: Tensor,
                       row_ptr: Tensor, num_src_nodes: int, num_dst_nodes: int,
                       num_keys: int) -> None:
    """What the registered loss ops rely on beyond :func:`check_op_args` (metadata only):
    the seed, the sampler's tensors and the candidate node counts."""
    if seed.dim() != 0 or seed.dtype != torch.int64:
        raise ValueError(f"{op}: seed must be a 0-dim int64 tensor (got shape "
                         f"{tuple(seed.shape)}, {seed.dtype})")
    check_int64_vectors(op, [("excluded_adj", excluded_adj), ("row_ptr", row_ptr)],
                        x_src.device)
    if row_ptr.numel() not in (0, num_src_nodes + 1):
        raise ValueError(f"{op}: row_ptr must be empty or [num_src_nodes + 1] = "
                         f"[{num_src_nodes + 1}] (got {row_ptr.numel()})")
    if not (0 < num_src_nodes <= x_src.size(0) and 0 < num_dst_nodes <= x_dst.size(0)):
        raise ValueError(f"{op}: num_src_nodes and num_dst_nodes must be >= 1 and at most the "
                         f"rows of x_src and x_dst (got {num_src_nodes}, {num_dst_nodes})")
    if excluded_adj.numel() >= num_keys:
        raise ValueError(f"{op}: no candidate pair is left to draw negatives from "
                         f"({num_keys} pairs, {excluded_adj.numel()} of them excluded)")

