"""``edge_dot``: argument checks, then the registered op."""
from typing import Optional, Tuple

import torch
from torch import Tensor

from ._reference import out_of_range_message

SUPPORTED_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int64, torch.int32)


def _as_plain_index(edge_index) -> Tensor:
    # PyG's EdgeIndex is a Tensor subclass; the kernels want the plain [2, E] data.
    as_tensor = getattr(edge_index, "as_tensor", None)
    if callable(as_tensor) and type(edge_index) is not Tensor:
        return as_tensor()
    return edge_index


def check_features(x_src: Tensor, x_dst: Tensor, op: str = "edge_dot") -> None:
    """Checks that x_src and x_dst are 2-D float tensors of one dtype, device and width."""
    for name, x in (("x_src", x_src), ("x_dst", x_dst)):
        if not isinstance(x, Tensor):
            raise TypeError(f"{op}: {name} must be a Tensor (got {type(x).__name__})")
        if x.dim() != 2:
            raise ValueError(f"{op}: {name} must be 2-D [num_nodes, feat_dim] "
                             f"(got shape {tuple(x.shape)})")
        if x.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"{op}: {name} must be float32, float64, float16 or bfloat16 "
                            f"(got {x.dtype})")
    if x_src.dtype != x_dst.dtype:
        raise TypeError(f"{op}: x_src and x_dst must have the same dtype "
                        f"(got {x_src.dtype} and {x_dst.dtype})")
    if x_src.device != x_dst.device:
        raise ValueError(f"{op}: x_src and x_dst must be on the same device "
                         f"(got {x_src.device} and {x_dst.device})")
    if x_src.size(1) != x_dst.size(1):
        raise ValueError(f"{op}: x_src and x_dst must have the same feature dimension "
                         f"(got {x_src.size(1)} and {x_dst.size(1)})")


def should_read_first_bad(validate: bool, first_bad: Tensor) -> bool:
    """Whether to read ``first_bad`` back (validation's one host synchronization): never
    inside a compiled graph or while a CUDA graph is captured."""
    return validate and not torch.compiler.is_compiling() and not (
        first_bad.is_cuda and torch.cuda.is_current_stream_capturing())


def check_inputs(x_src: Tensor, x_dst: Tensor, edge_index: Tensor,
                 op: str = "edge_dot") -> Tuple[Tensor, Tensor]:
    """Checks shapes, dtypes and devices; returns ``(src_index, dst_index)`` as views.

    The C++ ops check the same at their boundary (csrc/common.h), for direct callers; these
    checks come first so that users get Python exceptions without relying on C++ exceptions
    crossing into Python (which crash on some toolchain images: see scripts/throw_bisect.py).
    """
    check_features(x_src, x_dst, op)
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"{op}: edge_index must be a Tensor of shape [2, E] "
                        f"(got {type(edge_index).__name__})")
    edge_index = _as_plain_index(edge_index)
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"{op}: edge_index must have shape [2, E] "
                         f"(got {tuple(edge_index.shape)})")
    if edge_index.dtype not in INDEX_DTYPES:
        raise TypeError(f"{op}: edge_index must be int64 or int32 (got {edge_index.dtype})")
    if edge_index.device != x_src.device:
        raise ValueError(f"{op}: x_src and edge_index must be on the same device "
                         f"(got {x_src.device} and {edge_index.device})")
    return edge_index[0], edge_index[1]


def check_relation(x_src: Tensor, src_index: Tensor, rel: Optional[Tensor],
                   edge_type: Optional[Tensor], op: str = "edge_dot") -> Tuple[Tensor, Tensor]:
    """Checks ``rel`` and ``edge_type`` (``src_index`` as :func:`check_inputs` returns it);
    returns ``(rel [R, D], rel_index [E])``."""
    num_edges = src_index.size(0)
    if rel is None:
        raise ValueError(f"{op}: edge_type was given without rel; pass rel=[R, D] relation "
                         "vectors too")
    if not isinstance(rel, Tensor):
        raise TypeError(f"{op}: rel must be a Tensor (got {type(rel).__name__})")
    if rel.dim() == 1 and edge_type is None:
        rel = rel.unsqueeze(0)
    if rel.dim() != 2:
        raise ValueError(f"{op}: rel must be 2-D [num_relations, feat_dim] (or 1-D [feat_dim] "
                         f"without edge_type) (got shape {tuple(rel.shape)})")
    if rel.dtype != x_src.dtype:
        raise TypeError(f"{op}: rel and x_src must have the same dtype "
                        f"(got {rel.dtype} and {x_src.dtype})")
    if rel.device != x_src.device:
        raise ValueError(f"{op}: rel and x_src must be on the same device "
                         f"(got {rel.device} and {x_src.device})")
    if rel.size(1) != x_src.size(1):
        raise ValueError(f"{op}: rel and x_src must have the same feature dimension "
                         f"(got {rel.size(1)} and {x_src.size(1)})")
    if edge_type is None:
        if rel.size(0) != 1:
            raise ValueError(f"{op}: rel has {rel.size(0)} relations, so edge_type [E] is "
                             "required to say which one each edge uses")
        # One relation for every edge: a stride-0 view, no [E] index is materialized.
        return rel, src_index.new_zeros(1).expand(num_edges)
    if not isinstance(edge_type, Tensor):
        raise TypeError(f"{op}: edge_type must be a Tensor (got {type(edge_type).__name__})")
    if edge_type.dim() != 1 or edge_type.size(0) != num_edges:
        raise ValueError(f"{op}: edge_type must have shape [E] = [{num_edges}] "
                         f"(got {tuple(edge_type.shape)})")
    if edge_type.dtype not in INDEX_DTYPES:
        raise TypeError(f"{op}: edge_type must be int64 or int32 (got {edge_type.dtype})")
    if edge_type.device != x_src.device:
        raise ValueError(f"{op}: x_src and edge_type must be on the same device "
                         f"(got {x_src.device} and {edge_type.device})")
    return rel, edge_type.to(src_index.dtype)


def edge_dot(x_src: Tensor, x_dst: Tensor, edge_index: Tensor, rel: Optional[Tensor] = None,
             edge_type: Optional[Tensor] = None, *, validate: bool = True) -> Tensor:
    r"""Scores each edge by the dot product of its endpoint features, in one fused pass.

    .. math::
        \mathrm{out}_e = \sum_{k} x^{src}_{s_e, k} \, x^{dst}_{d_e, k},
        \qquad (s_e, d_e) = (\mathrm{edge\_index}[0, e], \mathrm{edge\_index}[1, e])

    The same as ``(x_src[edge_index[0]] * x_dst[edge_index[1]]).sum(-1)``, without the two
    ``[E, D]`` intermediates: memory is O(E) and each row is read once per edge.
    Differentiable in ``x_src`` and ``x_dst``; only the gradients that are needed are
    computed. The backward is deterministic on every backend (bitwise equal run to run).

    With ``rel``, each edge is scored through a relation vector (DistMult):

    .. math::
        \mathrm{out}_e = \sum_{k} x^{src}_{s_e, k} \, r_{t_e, k} \, x^{dst}_{d_e, k},
        \qquad t_e = \mathrm{edge\_type}[e]

    the same as ``(x_src[src] * rel[edge_type] * x_dst[dst]).sum(-1)``, fused, and
    differentiable in ``rel`` as well.

    Args:
        x_src (Tensor): source features ``[N_src, D]``; float32, float64, float16 or
            bfloat16. Any row stride; a column stride other than 1 costs one copy.
        x_dst (Tensor): destination features ``[N_dst, D]``, same dtype and device.
            May be the same tensor as ``x_src``.
        edge_index (Tensor): ``[2, E]`` int64 or int32 (a plain tensor or PyG's
            ``EdgeIndex``; any strides). Row 0 indexes ``x_src``, row 1 ``x_dst``.
        rel (Tensor, optional): relation vectors ``[R, D]`` (same dtype and device), or
            one vector ``[D]`` used for every edge.
        edge_type (Tensor, optional): ``[E]`` int64 or int32, the row of ``rel`` each edge
            uses; required when ``R > 1`` (converted to ``edge_index``'s dtype if it differs).
        validate (bool): raise ``IndexError`` naming the first edge whose index is out
            of range (negative or too large). The kernel always checks bounds as it reads
            and records the first bad edge; ``validate`` only decides whether the host
            reads that one number back. On the CPU that is free; on CUDA it is one
            device-to-host synchronization per call. It is skipped inside
            ``torch.compile`` graphs and while a CUDA graph is captured. Unchecked, an
            out-of-range edge scores NaN and contributes no gradient. Either way, no memory
            outside the inputs is ever read and the CUDA context stays usable.

    Returns:
        Tensor: ``[E]`` scores in the dtype of the inputs (accumulated in float32, or
        float64 for float64 inputs).

    Raises:
        TypeError / ValueError: wrong types, shapes, dtypes or devices (metadata only,
            no cost). IndexError: an index out of range (see ``validate``).
    """
    src_index, dst_index = check_inputs(x_src, x_dst, edge_index)
    rel_index = None
    if rel is None and edge_type is None:
        out, first_bad = torch.ops.pyg_edgedot.edge_dot(x_src, x_dst, src_index, dst_index)
    else:
        rel, rel_index = check_relation(x_src, src_index, rel, edge_type)
        out, first_bad = torch.ops.pyg_edgedot.edge_dot_rel(x_src, x_dst, rel, src_index,
                                                            dst_index, rel_index)
    if should_read_first_bad(validate, first_bad):
        bad = int(first_bad.item())
        if bad >= 0:
            raise IndexError(out_of_range_message(
                "edge_dot", bad, src_index, dst_index, x_src.size(0), x_dst.size(0),
                rel_index, 0 if rel is None else rel.size(0)))
    return out
