r"""``edge_dot_loss``: the link-prediction loss over positives and sampled negatives, fused.

Schemas in ``csrc/edge_dot_loss.cpp``; kernels in ``csrc/cpu/edge_dot_loss_kernel.cpp`` and
``csrc/cuda/edge_dot_loss_kernel.cu``, which draw the negatives in-kernel with the generator
below (per-element code shared by both in ``csrc/edge_dot_loss_common.h``). This module holds
the public function, the negative generator in torch ops, the fake kernels, the autograd, and
the composite implementation of both ops on top of ``edge_dot`` and ``edge_dot_grad`` (the
same negatives; each device runs edge_dot's fused kernels), which serves a device without a
compiled kernel (``FALLBACK = "composite"``, see :mod:`pyg_edgedot._backend`).

The negatives: a counter-based generator
----------------------------------------
Negative ``k`` of positive ``e`` (``0 <= k < K``) of a call is a pure function of
``(seed, e, k)``, so the backward regenerates the negatives instead of saving them, chunking
never changes them, and a CUDA/C++ kernel can draw the very same ones in-kernel::

    mix64(z)   = splitmix64's finalizer: z ^= z >> 30; z *= 0xBF58476D1CE4E5B9;
                 z ^= z >> 27; z *= 0x94D049BB133111EB; z ^= z >> 31   (uint64, wrapping)
    bits(e, k) = mix64(mix64(seed) + (e * K + k + 1) * 0x9E3779B97F4A7C15)
               = output e*K+k of splitmix64 (Vigna's SplittableRandom) seeded with mix64(seed)
    u(e, k)    = (bits >> 11) * 2**-53                                 (float64 in [0, 1))
    rank(e, k) = min(floor(u * M), M - 1)   (one float64 multiply, round to nearest; M as
                                             float64)

``M`` is the number of candidates the rank is drawn from, and the rank becomes a pair as in
:class:`~pyg_edgedot.NegativeSampler` (``key = rank + searchsorted(adj, rank, right=True)``
over the sorted excluded keys, then decoded; nothing excluded without a sampler):

* ``"uniform"``: ``M`` = all candidate pairs (``N_src * N_dst``, or ``N * (N - 1)`` with a
  homogeneous sampler, which never draws self-loops) minus the excluded ones; the pair is
  ``decode(key)``. Exactly :meth:`NegativeSampler.sample` with ``replace=True``.
* ``"structured"``: the positive's source ``i`` is kept; ``M = free_i``, the candidate
  destinations of ``i`` (``N_dst`` without a sampler); ``rank = start_i + that``, the
  destination ``decode(key)[1]``. Exactly :meth:`NegativeSampler.sample_per_source`.

In int64 torch ops: multiplications wrap (two's complement), ``>>`` is arithmetic, so the
logical shift is ``(z >> s) & (2**(64 - s) - 1)``. Ranks are exact for ``M <= 2**53``
(beyond, only multiples of about ``M / 2**53`` are drawn).
"""
import weakref
from typing import Iterator, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor

from .. import _checks
from . import _chunked
from .negative_sampling import (_DIRECTED, _NO_LOOPS, NegativeSampler, _decode, _draw_seed,
                                _index_dtype, _rank_to_key)

NAME = "edge_dot_loss"
FALLBACK = "composite"  # elsewhere: implemented in Python over edge_dot's ops

NumNodes = Union[int, Tuple[int, int]]

# ---------------------------------------------------------------------------------------
# The counter-based generator
# ---------------------------------------------------------------------------------------


def _int64(value: int) -> int:
    """A uint64 constant as the int64 with the same bits."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >> 63 else value


GOLDEN_GAMMA = _int64(0x9E3779B97F4A7C15)
_MIX_1 = _int64(0xBF58476D1CE4E5B9)
_MIX_2 = _int64(0x94D049BB133111EB)


def _shift_right(z: Tensor, bits: int) -> Tensor:
    """Logical (unsigned) right shift of int64 bits."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def mix64(z: Tensor) -> Tensor:
    """splitmix64's finalizer on int64 tensors (uint64 arithmetic, wrapping)."""
    z = (z ^ _shift_right(z, 30)) * _MIX_1
    z = (z ^ _shift_right(z, 27)) * _MIX_2
    return z ^ _shift_right(z, 31)


def uniform(seed: Tensor, counter: Tensor) -> Tensor:
    """float64 ``u`` in [0, 1) for each int64 ``counter`` (``e * K + k``); see the module
    docstring."""
    bits = mix64(mix64(seed) + (counter + 1) * GOLDEN_GAMMA)
    return _shift_right(bits, 11).to(torch.float64) * 2.0 ** -53


def _scaled(u: Tensor, count) -> Tensor:
    """min(floor(u * count), count - 1) as int64; ``count`` an int or an int64 tensor."""
    if isinstance(count, Tensor):
        return torch.minimum(torch.floor(u * count.to(torch.float64)).long(), count - 1)
    return torch.floor(u * float(count)).long().clamp_(max=count - 1)


class _Space(NamedTuple):
    """Where the negatives come from: the op's arguments after ``seed``."""
    seed: Tensor           # [] int64, CPU or the features' device
    excluded_adj: Tensor   # [A] int64, adj_i = e_i - i of the sorted excluded keys
    row_ptr: Tensor        # [N_src + 1] int64 excluded keys before each row, or [0]
    num_negatives: int
    num_src_nodes: int
    num_dst_nodes: int
    self_loops: bool       # whether (i, i) is a candidate (always, without a sampler)
    structured: bool
    adj_index: Optional[Tensor] = None  # the sampler's kept bucket index (see the ops)


# Functions, not properties of _Space: torch.compile (dynamo) in torch 2.5 cannot read a
# property of a NamedTuple (fullgraph=True fails on it).
def _width(space: _Space) -> int:
    """The candidate destinations of one source."""
    return space.num_dst_nodes if space.self_loops else space.num_dst_nodes - 1


def _num_keys(space: _Space) -> int:
    """The candidate pairs: every source times :func:`_width`."""
    return space.num_src_nodes * _width(space)


def negatives_of(space: _Space, src_index: Tensor, first: int) -> Tuple[Tensor, Tensor]:
    """The negatives of positives ``first .. first + c - 1`` whose sources are
    ``src_index`` ``[c]``: ``(neg_src, neg_dst)``, each ``[c, K]`` int64."""
    num_pos, k = src_index.numel(), space.num_negatives
    device = src_index.device
    counter = torch.arange(first * k, (first + num_pos) * k, device=device).view(num_pos, k)
    u = uniform(space.seed, counter)
    width = _width(space)
    mode = _DIRECTED if space.self_loops else _NO_LOOPS
    if space.structured:
        src = src_index.long()
        if space.row_ptr.numel() == 0:
            rank = (src * width).unsqueeze(1) + _scaled(u, width)
        else:
            # positives out of range (reported by first_bad) read a clamped row, never past it
            row = src.clamp(0, space.num_src_nodes - 1)
            before, after = space.row_ptr[row], space.row_ptr[row + 1]
            free = (width - (after - before)).unsqueeze(1)
            rank = (row * width - before).unsqueeze(1) + _scaled(u, free)
        key = _rank_to_key(space.excluded_adj, rank.view(-1), ranks_sorted=False)
        _, dst = _decode(mode, key, space.num_src_nodes, space.num_dst_nodes)
        return src.unsqueeze(1).expand(num_pos, k), dst.view(num_pos, k)
    rank = _scaled(u, _num_keys(space) - space.excluded_adj.numel())
    key = _rank_to_key(space.excluded_adj, rank.view(-1), ranks_sorted=False)
    src, dst = _decode(mode, key, space.num_src_nodes, space.num_dst_nodes)
    return src.view(num_pos, k), dst.view(num_pos, k)


# ---------------------------------------------------------------------------------------
# The public function
# ---------------------------------------------------------------------------------------

_ALL_SOURCES_FEASIBLE: "weakref.WeakKeyDictionary[NegativeSampler, bool]" = \
    weakref.WeakKeyDictionary()


def _space_of(op: str, device: torch.device, nodes: Tuple[int, int], src_index: Tensor, seed,
              num_negatives: int, negatives: str, sampler: Optional[NegativeSampler],
              validate: bool) -> _Space:
    num_src, num_dst = nodes
    if seed is None:
        seed = _draw_seed()
    else:
        seed = _checks.check_seed(op, seed, device)
    structured = negatives == "structured"
    empty = torch.empty(0, dtype=torch.int64, device=device)
    if sampler is None:
        return _Space(seed, empty, empty, num_negatives, num_src, num_dst, True, structured)
    space = sampler._directed
    # A traced graph cannot build the sampler's row pointer and bucket index and keep them on
    # it (a sampler not drawn from yet has neither): it computes the row pointer in the graph
    # and passes the index only if kept (else the kernels build one per call; the same
    # negatives).
    tracing = torch.compiler.is_compiling()
    row_ptr = sampler._source_rows(keep=not tracing) if structured else empty
    if structured and validate and not tracing:
        # [N_src] per call would cost more than a small batch: once per sampler, then only
        # where some source has no negative
        if sampler not in _ALL_SOURCES_FEASIBLE:
            _ALL_SOURCES_FEASIBLE[sampler] = bool((sampler._free_per_source() > 0).all())
        if not _ALL_SOURCES_FEASIBLE[sampler]:
            _checks.check_loss_sources(op, sampler._free_per_source(), src_index)
    return _Space(seed, space.adj, row_ptr, num_negatives, num_src, num_dst,
                  space.mode == _DIRECTED, structured,
                  space._adj_index if tracing else space.adj_index())


def edge_dot_loss(x_src: Tensor, x_dst: Tensor, edge_index: Tensor, *, num_negatives: int = 1,
                  negatives: str = "structured", loss: str = "bce", reduction: str = "mean",
                  sampler: Optional[NegativeSampler] = None,
                  num_nodes: Optional[NumNodes] = None,
                  seed: Optional[Union[int, Tensor]] = None, validate: bool = True) -> Tensor:
    r"""The link-prediction loss of dot-product scores over the positive edges and
    ``K = num_negatives`` sampled negatives per positive, without materializing the
    negatives' ``[2, E * K]`` index.

    With :math:`s(i, j) = \langle x^{src}_i, x^{dst}_j \rangle`, positives
    :math:`(i_e, j_e)` and negatives :math:`(i'_{e,k}, j'_{e,k})`:

    * ``loss="bce"``: binary cross-entropy with logits, label 1 for the positives and 0 for
      the negatives, :math:`\sum_e \mathrm{softplus}(-s(i_e, j_e)) + \sum_{e,k}
      \mathrm{softplus}(s(i'_{e,k}, j'_{e,k}))`, divided by :math:`E (1 + K)` for
      ``reduction="mean"``: the same as ``F.binary_cross_entropy_with_logits(cat([pos,
      neg]), cat([ones, zeros]))``.
    * ``loss="bpr"``: :math:`\sum_{e,k} -\log\sigma(s(i_e, j_e) - s(i'_{e,k}, j'_{e,k}))`
      (LightGCN's BPR loss; :math:`-\log\sigma(x) = \mathrm{softplus}(-x)`), divided by
      :math:`E K` for ``"mean"``.

    One fused kernel per device draws each positive's negatives in-kernel, scores the pairs
    (the dot product :func:`pyg_edgedot.edge_dot` computes, rounded to the features' dtype as
    it returns it) and computes the terms and ``dloss/dscore``; the backward regenerates the
    same negatives and scatters deterministically. The loss and the gradients are bitwise
    equal run to run, and on the CPU whatever the number of threads. Memory: ``O(E * (1 +
    K))`` scalars for ``dloss/dscore``; on the CPU, a block of pairs per thread beyond that;
    on CUDA, the backward's pairs of a chunk of positives (a chunk is at most ``max(2**24
    pairs, the gradients' bytes / 48)`` pairs). Without a compiled kernel, the same
    computation is composed of ``edge_dot``'s ops, positives in such chunks (on CUDA tensors
    bitwise repeatable only under ``torch.use_deterministic_algorithms(True)``, as
    ``edge_dot``'s fallback). Second derivatives are not supported.

    Negatives (see :mod:`pyg_edgedot.ops.edge_dot_loss` for the exact generator):
    ``"structured"`` keeps each positive's source and draws a destination; ``"uniform"``
    draws (source, destination) pairs. With ``sampler`` (a
    :class:`~pyg_edgedot.NegativeSampler` built on the edges to exclude) they are i.i.d.
    uniform over its complement: never an edge of its graph, never a self-loop in the
    homogeneous case (unless built with ``self_loops=True``), as
    :meth:`~pyg_edgedot.NegativeSampler.sample_per_source` and ``sample(replace=True)``.
    Without one they are uniform over all destinations / pairs (self-loops and true edges
    included): cheaper, unchecked, PyG's usual ``torch.randint`` negatives.

    Seeds: negative ``(e, k)`` is a pure function of ``(seed, e, k)``. With ``seed=None``
    one int64 is drawn from torch's default CPU generator (``torch.manual_seed``
    reproduces it; no device synchronization). Under ``DistributedDataParallel`` each
    process draws from its own CPU generator: processes seeded alike (the usual
    ``torch.manual_seed(s)`` everywhere) draw the same seed, and their ``e``-th positives
    get negatives from the same ``u(e, k)``; seed each process differently
    (``torch.manual_seed(s + rank)``) or pass ``seed=hash((step, rank))`` for independent
    negatives. Under ``torch.compile`` with Inductor, the default seed comes from the
    compiled graph's own RNG (pass ``seed`` to get eager's draws).

    Args:
        x_src (Tensor): source features ``[N_src, D]``; float32, float64, float16 or
            bfloat16.
        x_dst (Tensor): destination features ``[N_dst, D]``, same dtype, device and ``D``
            (may be ``x_src``).
        edge_index (Tensor): ``[2, E]`` positive edges, int64 or int32 (or ``EdgeIndex``).
        num_negatives (int): ``K >= 1``, negatives per positive.
        negatives (str): ``"structured"`` or ``"uniform"``.
        loss (str): ``"bce"`` or ``"bpr"``.
        reduction (str): ``"mean"`` or ``"sum"``; the mean of ``E = 0`` is NaN, as in
            PyTorch.
        sampler (NegativeSampler, optional): built for ``(N_src, N_dst)`` = the rows of
            ``x_src`` and ``x_dst``, on their device.
        num_nodes (int or Tuple[int, int], optional): without a sampler, draw only from the
            first ``N_src`` / ``N_dst`` rows (default: all rows).
        seed (int or Tensor, optional): an int, or a 0-dim int64 tensor on the CPU or the
            features' device (a device tensor, updated in place between steps, also works
            under CUDA graphs). Default: drawn as above.
        validate (bool): raise ``IndexError`` for a positive index out of range, as
            :func:`pyg_edgedot.edge_dot` (unchecked: the loss is NaN and that positive and
            its negatives contribute no gradient); with a structured ``sampler``, also raise
            ``ValueError`` for a source with no negative destination (one check per
            sampler, repeated per call only if its graph has such nodes; unchecked, such a
            source's negatives are edges of the sampler's graph).

    Returns:
        Tensor: ``[]`` the loss, in the dtype of the features (accumulated in float32, or
        float64 for float64 inputs).
    """
    op = NAME
    _checks.check_features(x_src, x_dst, op)
    edge_index = _checks.check_edge_index(x_src, edge_index, op)
    # Not just truthy: validate=None would skip the index check without a word.
    _checks.check_bool(op, "validate", validate)
    _checks.check_no_forward_ad(op, [("x_src", x_src), ("x_dst", x_dst)])
    num_negatives = _checks.check_loss_options(op, num_negatives, negatives=negatives,
                                               loss=loss, reduction=reduction)
    src_index, dst_index = edge_index[0], edge_index[1]
    nodes = _checks.check_loss_nodes(op, x_src, x_dst, num_nodes, sampler)
    space = _space_of(op, x_src.device, nodes, src_index, seed, num_negatives, negatives,
                      sampler, validate)
    # (the kernels check these too, for direct callers; here they raise the errors users see)
    _checks.check_loss_op_args(op, x_src, x_dst, space.seed, space.excluded_adj, space.row_ptr,
                               space.num_src_nodes, space.num_dst_nodes, _num_keys(space))
    out, first_bad, _ = torch.ops.pyg_edgedot.edge_dot_loss(
        x_src, x_dst, src_index, dst_index, *space[:3], num_negatives, space.num_src_nodes,
        space.num_dst_nodes, space.self_loops, negatives, loss, reduction,
        adj_index=space.adj_index)
    _checks.raise_if_edge_out_of_range(op, validate, first_bad, edge_index, x_src, x_dst)
    return out


def loss_negatives(edge_index: Tensor, seed: Union[int, Tensor], num_negatives: int = 1, *,
                   negatives: str = "structured", sampler: Optional[NegativeSampler] = None,
                   num_nodes: Optional[NumNodes] = None) -> Tensor:
    """The negatives :func:`edge_dot_loss` draws for ``edge_index`` with this ``seed`` and
    these options, materialized: ``[2, E, K]`` (source, destination), ``edge_index``'s dtype
    (int64 where int32 cannot hold the node ids).
    ``num_nodes`` is ``(N_src, N_dst)`` (the features' rows) when there is no ``sampler``.
    For inspection and tests; the loss never builds this tensor."""
    op = "loss_negatives"
    edge_index = _checks.as_plain_index(edge_index)
    num_negatives = _checks.check_loss_options(op, num_negatives, negatives=negatives)
    if sampler is not None:
        nodes = (sampler.num_src_nodes, sampler.num_dst_nodes)
    elif num_nodes is None:
        raise ValueError(f"{op}: num_nodes is required without a sampler")
    else:
        nodes = _checks.node_pair(num_nodes)
    space = _space_of(op, edge_index.device, nodes, edge_index[0], seed, num_negatives,
                      negatives, sampler, True)
    neg_src, neg_dst = negatives_of(space, edge_index[0], 0)
    return torch.stack([neg_src, neg_dst]).to(_index_dtype(edge_index.dtype, *nodes))


# ---------------------------------------------------------------------------------------
# The registered ops' Python side: the composite implementation (the fallback of a device
# without a compiled kernel, and what tests compare the kernels with), fake kernels, autograd
# ---------------------------------------------------------------------------------------

# A chunk's temporaries cost about this many bytes per scored pair (int64 pair indices, the
# generator's int64/float64 temporaries, scores).
_BYTES_PER_PAIR = 48


def _positives_per_chunk(x_src: Tensor, x_dst: Tensor, num_negatives: int) -> int:
    """Positives per chunk: a chunk's temporaries stay below max(2**24 pairs, the bytes of
    the gradients the backward returns), so memory keeps the order of edge_dot's own."""
    grad_bytes = (x_src.numel() + x_dst.numel()) * x_src.element_size()
    pairs = max(_chunked.DEFAULT_CHUNK_ELEMS, grad_bytes // _BYTES_PER_PAIR)
    return max(1, pairs // (1 + num_negatives))


def _space_from_args(op: str, x_src, x_dst, src_index, dst_index, seed, excluded_adj, row_ptr,
                     num_negatives, num_src_nodes, num_dst_nodes, self_loops, negatives, loss,
                     reduction) -> _Space:
    _checks.check_op_args(op, [("x_src", x_src), ("x_dst", x_dst)],
                          [("src_index", src_index), ("dst_index", dst_index)])
    _checks.check_loss_options(op, num_negatives, negatives=negatives, loss=loss,
                               reduction=reduction)
    space = _Space(seed, excluded_adj, row_ptr, num_negatives, num_src_nodes, num_dst_nodes,
                   self_loops, negatives == "structured")
    _checks.check_loss_op_args(op, x_src, x_dst, seed, excluded_adj, row_ptr, num_src_nodes,
                               num_dst_nodes, _num_keys(space))
    return space


def _chunks(space: _Space, x_src: Tensor, x_dst: Tensor, src_index: Tensor,
            dst_index: Tensor) -> Iterator[Tuple[int, int, Tensor, Tensor, Tensor]]:
    """``(start, stop, src_pairs, dst_pairs, valid)`` per chunk of positives: the pairs
    ``[c * (1 + K)]`` laid out as ``[c, 1 + K]`` (the positive, then its negatives), and the
    ``[c]`` mask of positives whose indices are in range."""
    step = _positives_per_chunk(x_src, x_dst, space.num_negatives)
    for start in range(0, src_index.numel(), step):
        src, dst = src_index[start:start + step], dst_index[start:start + step]
        neg_src, neg_dst = negatives_of(space, src, start)
        src_pairs = torch.cat([src.unsqueeze(1), neg_src.to(src.dtype)], 1).view(-1)
        dst_pairs = torch.cat([dst.unsqueeze(1), neg_dst.to(dst.dtype)], 1).view(-1)
        valid = _chunked.in_range(src, x_src.size(0)) & _chunked.in_range(dst, x_dst.size(0))
        yield start, start + src.numel(), src_pairs, dst_pairs, valid


def _softplus(z: Tensor) -> Tensor:
    # exact (torch's softplus returns z itself above its threshold)
    return z.clamp(min=0) + torch.log1p(torch.exp(-z.abs()))


def _terms_and_grad(scores: Tensor, loss: str) -> Tuple[Tensor, Tensor]:
    """Per-pair losses and dloss/dscore (before the reduction) of ``[c, 1 + K]`` scores."""
    if loss == "bce":
        # label 1: softplus(-s), d/ds = -sigmoid(-s); label 0: softplus(s), d/ds = sigmoid(s)
        signed = torch.cat([-scores[:, :1], scores[:, 1:]], 1)
        grad = torch.sigmoid(signed)
        return _softplus(signed), torch.cat([-grad[:, :1], grad[:, 1:]], 1)
    diff = scores[:, 1:] - scores[:, :1]   # -log sigmoid(pos - neg) = softplus(neg - pos)
    grad = torch.sigmoid(diff)
    return _softplus(diff), torch.cat([-grad.sum(1, keepdim=True), grad], 1)


def _count(loss: str, num_edges: int, num_negatives: int) -> int:
    return num_edges * (num_negatives + (loss == "bce"))


def _loss_forward(x_src, x_dst, src_index, dst_index, seed, excluded_adj, row_ptr,
                  num_negatives, num_src_nodes, num_dst_nodes, self_loops, negatives, loss,
                  reduction, adj_index=None):
    args = (x_src, x_dst, src_index, dst_index)
    space = _space_from_args("edge_dot_loss", *args, seed, excluded_adj, row_ptr,
                             num_negatives, num_src_nodes, num_dst_nodes, self_loops,
                             negatives, loss, reduction)
    acc = _chunked.acc_dtype(x_src.dtype)
    width = 1 + num_negatives
    total = torch.zeros((), dtype=acc, device=x_src.device)
    first_bad = _chunked.new_first_bad(x_src)
    score_grad = x_src.new_empty((src_index.numel(), width))
    for start, stop, src_pairs, dst_pairs, valid in _chunks(space, *args):
        scores, pair_bad = torch.ops.pyg_edgedot.edge_dot(x_src, x_dst, src_pairs, dst_pairs)
        terms, grad = _terms_and_grad(scores.view(-1, width).to(acc), loss)
        total = total + terms.sum()
        score_grad[start:stop] = grad.masked_fill(~valid.unsqueeze(1), 0)
        chunk_bad = torch.where(pair_bad >= 0, start + pair_bad // width, -1)
        first_bad = torch.where(first_bad >= 0, first_bad, chunk_bad)
    if reduction == "mean":
        total = total / _count(loss, src_index.numel(), num_negatives)
    return total.to(x_src.dtype), first_bad, score_grad


def _accumulate(total: Optional[Tensor], part: Tensor) -> Tensor:
    """Chunk gradients summed in chunk order (deterministic), in float32 for half types."""
    if total is None:
        return part
    if total.dtype != _chunked.acc_dtype(total.dtype):
        total = total.to(_chunked.acc_dtype(total.dtype))
    return total.add_(part)


def _loss_grad(grad_loss, score_grad, x_src, x_dst, src_index, dst_index, seed, excluded_adj,
               row_ptr, num_negatives, num_src_nodes, num_dst_nodes, self_loops, negatives,
               loss, reduction, needs_src, needs_dst, adj_index=None):
    args = (x_src, x_dst, src_index, dst_index)
    space = _space_from_args("edge_dot_loss_grad", *args, seed, excluded_adj, row_ptr,
                             num_negatives, num_src_nodes, num_dst_nodes, self_loops,
                             negatives, loss, reduction)
    acc = _chunked.acc_dtype(x_src.dtype)
    scale = grad_loss.to(acc)
    if reduction == "mean":
        scale = scale / _count(loss, src_index.numel(), num_negatives)
    grads = [None, None]
    for start, stop, src_pairs, dst_pairs, _ in _chunks(space, *args):
        grad_pairs = (score_grad[start:stop].to(acc) * scale).to(x_src.dtype).view(-1)
        if needs_src:
            grads[0] = _accumulate(grads[0], torch.ops.pyg_edgedot.edge_dot_grad(
                grad_pairs, x_dst, src_pairs, dst_pairs, x_src.size(0)))
        if needs_dst:
            grads[1] = _accumulate(grads[1], torch.ops.pyg_edgedot.edge_dot_grad(
                grad_pairs, x_src, dst_pairs, src_pairs, x_dst.size(0)))
    out = []
    for grad, needed, x in zip(grads, (needs_src, needs_dst), (x_src, x_dst)):
        if not needed:
            out.append(x.new_empty((0, x.size(1))))
        elif grad is None:   # no positives
            out.append(torch.zeros_like(x, memory_format=torch.contiguous_format))
        else:
            out.append(grad.to(x.dtype))
    return tuple(out)


def fallback_impls() -> dict:
    """The composite implementation of both ops (registered where no kernel serves; it maps
    ranks to keys with ``torch.searchsorted`` and ignores ``adj_index``)."""
    return {"edge_dot_loss": _loss_forward, "edge_dot_loss_grad": _loss_grad}


def register_fake_and_autograd() -> None:
    @torch.library.register_fake("pyg_edgedot::edge_dot_loss")
    def _edge_dot_loss_fake(x_src, x_dst, src_index, dst_index, seed, excluded_adj, row_ptr,
                            num_negatives, num_src_nodes, num_dst_nodes, self_loops,
                            negatives, loss, reduction, adj_index=None):
        torch._check(x_src.dim() == 2 and x_dst.dim() == 2)
        torch._check(src_index.dim() == 1 and dst_index.shape == src_index.shape)
        return (x_src.new_empty(()), src_index.new_empty(1, dtype=torch.int64),
                x_src.new_empty((src_index.shape[0], 1 + num_negatives)))

    @torch.library.register_fake("pyg_edgedot::edge_dot_loss_grad")
    def _edge_dot_loss_grad_fake(grad_loss, score_grad, x_src, x_dst, src_index, dst_index,
                                 seed, excluded_adj, row_ptr, num_negatives, num_src_nodes,
                                 num_dst_nodes, self_loops, negatives, loss, reduction,
                                 needs_src, needs_dst, adj_index=None):
        return (x_src.new_empty((x_src.shape[0] if needs_src else 0, x_src.shape[1])),
                x_dst.new_empty((x_dst.shape[0] if needs_dst else 0, x_dst.shape[1])))

    def setup_context(ctx, inputs, output):
        # inputs: the schema's 15 arguments (defaults filled): 7 tensors, 7 options, adj_index
        ctx.save_for_backward(output[2], *inputs[:7], inputs[14])
        ctx.options = inputs[7:14]

    def backward(ctx, grad_loss, _grad_first_bad, _grad_score_grad):
        score_grad, *tensors, adj_index = ctx.saved_tensors
        needs_src, needs_dst = ctx.needs_input_grad[:2]
        grad_src, grad_dst = torch.ops.pyg_edgedot.edge_dot_loss_grad(
            grad_loss, score_grad, *tensors, *ctx.options, needs_src, needs_dst,
            adj_index=adj_index)
        return ((grad_src if needs_src else None, grad_dst if needs_dst else None)
                + (None,) * 13)

    torch.library.register_autograd("pyg_edgedot::edge_dot_loss", backward,
                                    setup_context=setup_context)

    # Second derivatives are refused, not silently zero: with create_graph=True the
    # gradients carry this node, and differentiating them again raises.
    def grad_setup_context(ctx, inputs, output):
        pass

    def grad_backward(ctx, *grads):
        raise RuntimeError("edge_dot_loss: second derivatives are not supported (the "
                           "gradients of edge_dot_loss were differentiated again, e.g. a "
                           "gradient penalty through create_graph=True); write the penalty "
                           "on edge_dot's scores instead, whose second derivatives are fused")

    torch.library.register_autograd("pyg_edgedot::edge_dot_loss_grad", grad_backward,
                                    setup_context=grad_setup_context)
