"""Exact negative sampling for link prediction: drop-ins for ``torch_geometric.utils``'s
``negative_sampling``, ``batched_negative_sampling``, ``structured_negative_sampling`` and
``structured_negative_sampling_feasible``, plus a reusable :class:`NegativeSampler`.

Everything runs on ``edge_index``'s device (CPU or CUDA). The draw of
:meth:`NegativeSampler.sample` (one graph) is the op ``negative_sample`` (schema in
``csrc/negative_sampling.cpp``; this module is its op group): on the CPU the fused C++ kernel
(``csrc/cpu/negative_sampling_kernel.cpp``: a radix sort of the i.i.d. ranks with their draw
indices, one merge), on CUDA the CUDA kernel (``csrc/cuda/negative_sampling_kernel.cu``: the
same draws by a CUB radix sort, a scan and searches through a bucket index), and without
a compiled library for the device this module's pure-PyTorch path (:func:`_draw_keys`),
registered as the op's fallback; :mod:`pyg_edgedot._backend` decides which. The op draws
from one int64 seed taken from torch's generator (``generator=``, else the default CPU
generator), so ``torch.manual_seed`` reproduces a draw on every path. For the same seed the
two kernels give the same draws, bit for bit, on either device; the pure-PyTorch path gives
different draws from the same distribution. The batched and structured samplers are pure
PyTorch.

How it works (no rejection loop)
--------------------------------
Every candidate pair is a *key* in ``[0, P)``: ``src * C + dst'`` for directed pairs (``C``
is ``N_dst``, or ``N - 1`` when self-loops are not candidates, with ``dst' = dst - (dst >
src)``), or the index of ``(i < j)`` in the strict upper triangle for undirected pairs. The
pairs that may not be drawn (the edges; self-loops are simply not keys) are the sorted,
unique *excluded* keys ``e_0 < e_1 < ...``. The complement holds ``M = P - |excluded|``
keys; its ``r``-th smallest key (its *rank* ``r``) is::

    key(r) = r + #{i : adj_i <= r},   adj_i = e_i - i   (non-decreasing)
           = r + searchsorted(adj, r, right=True)

because exactly the ``e_i`` with ``e_i - i <= r`` lie below the answer. So sampling
negatives is sampling ranks in ``[0, M)``: every rank is a non-edge, nothing is rejected,
and the count is exact whenever ``M`` holds it. Cost: ``O(E log E)`` once to sort the
excluded keys (kept by :class:`NegativeSampler`), then ``O(k log k + k log E)`` for ``k``
draws (the C++ kernel: linear passes, ``O(k + E)``; the CUDA kernel: one radix sort and a
bucket-index search per draw); memory ``O(E + k)`` (never ``O(N^2)``;
PyG's ``method="dense"`` asks 931 GiB at one million nodes).

Distinct ranks, uniformly, in random order: see :func:`_draw_distinct` (and the C++
kernel's header for its own argument, which the CUDA kernel's draws share).
"""
import contextlib
import warnings
from typing import List, Optional, Tuple, Union

import torch
from torch import Tensor

from .. import _checks
from . import _chunked
from ._chunked import exclusive_cumsum

__all__ = ["NegativeSampler", "negative_sampling", "batched_negative_sampling",
           "structured_negative_sampling", "structured_negative_sampling_feasible"]

NAME = "negative_sampling"  # the op group: csrc/negative_sampling.cpp

NumNodes = Union[int, Tuple[int, int]]

_RAND_HIGH = 2 ** 62         # raw draws for per-block ranks: bias of `% m` is <= m / 2**62
# Above these sizes, ranks are sorted before the searchsorted that maps them to keys:
# random queries into a large sorted array miss the cache on every step of the binary
# search (2M random queries into 2M keys: ~1.1 s on 2 CPU cores vs ~0.15 s sorted).
_SORT_QUERIES_MIN_KEYS = 1 << 15
_SORT_QUERIES_MIN_RANKS = 1 << 12
# A block whose request is at least this fraction of its complement enumerates the whole
# complement (cost M <= k / _DENSE_FRACTION) instead of drawing i.i.d. ranks.
_DENSE_FRACTION = 0.25


def _num_nodes_of(name: str, edge_index: Tensor, original, num_nodes
                  ) -> Tuple[int, int, bool]:
    """(N_src, N_dst, bipartite) from ``num_nodes``, PyG's way when it is None."""
    if num_nodes is not None:
        return _checks.sampling_num_nodes(name, num_nodes)
    get_sparse_size = getattr(original, "get_sparse_size", None)
    if get_sparse_size is not None and type(original) is not Tensor:
        size = max(int(s) for s in get_sparse_size())  # PyG's maybe_num_nodes
    else:
        size = int(edge_index.max()) + 1 if edge_index.numel() > 0 else 0
    return size, size, False


def _index_dtype(dtype: torch.dtype, num_src: int, num_dst: int) -> torch.dtype:
    """``edge_index``'s index dtype for the sampler's output, int64 where int32 cannot
    hold every node id (an int32 ``edge_index`` with ``num_nodes`` past 2**31 - 1)."""
    if dtype == torch.int32 and max(num_src, num_dst) > torch.iinfo(torch.int32).max + 1:
        return torch.int64
    return dtype


# ---------------------------------------------------------------------------------------
# Keys: encode/decode of the three key spaces. n_src/n_dst may be ints or per-element
# int64 tensors (the batched form gives every graph its own sizes).
# ---------------------------------------------------------------------------------------

_DIRECTED, _NO_LOOPS, _UNDIRECTED = _checks.SAMPLING_MODES


def _row_width(mode: str, n_dst):
    return n_dst - 1 if mode == _NO_LOOPS else n_dst


def _num_keys(mode: str, n_src, n_dst):
    if mode == _UNDIRECTED:
        return n_src * (n_src - 1) // 2
    return n_src * _row_width(mode, n_dst)


def _tri_row_start(row, n):
    # first key of row i in the strict upper triangle: sum_{a<i} (n - 1 - a)
    return row * (2 * n - row - 1) // 2


def _encode(mode: str, src: Tensor, dst: Tensor, n_src, n_dst, not_a_key: int) -> Tensor:
    """int64 keys of the pairs; a pair that is no key (a self-loop) gets ``not_a_key``. One
    buffer updated in place (fresh CPU buffers pay their page faults: a pass each)."""
    if mode == _DIRECTED:
        return (src * n_dst).add_(dst)
    if mode == _NO_LOOPS:
        keys = (src * (n_dst - 1)).add_(dst).sub_((dst > src).long())
    else:
        row, col = torch.minimum(src, dst), torch.maximum(src, dst)
        keys = _tri_row_start(row, n_src).add_(col).sub_(row).sub_(1)
    return keys.masked_fill_(src == dst, not_a_key)


def _decode(mode: str, key: Tensor, n_src, n_dst) -> Tuple[Tensor, Tensor]:
    if mode == _DIRECTED:
        return key // n_dst, key % n_dst
    if mode == _NO_LOOPS:
        width = n_dst - 1
        src, col = key // width, key % width
        return src, col + (col >= src).long()
    # Strict upper triangle: count from the last key, r = T - 1 - key; the rows from the
    # end hold 1, 2, 3, ... keys, so t = floor((sqrt(8r + 1) - 1) / 2) rows from the end.
    # In float64 that is off by at most one for any int64 r (the error in 8r + 1 is tiny
    # against its square root's slope), where the quadratic formula from the first key
    # loses the last rows of ~1e9-node graphs; +-1 steps against the exact row starts fix it.
    last = n_src * (n_src - 1) // 2 - 1
    r = (last - key).double()
    row = (n_src - 2) - torch.floor((torch.sqrt(8.0 * r + 1.0) - 1.0) / 2.0).long()
    for _ in range(2):
        row = row - (_tri_row_start(row, n_src) > key).long()
        row = row + (_tri_row_start(row + 1, n_src) <= key).long()
    col = key - _tri_row_start(row, n_src) + row + 1
    return row, col


# ---------------------------------------------------------------------------------------
# Ranks -> keys
# ---------------------------------------------------------------------------------------

def _excluded_keys_fallback(keys: Tensor, key_bound: int) -> Tuple[Tensor, Tensor]:
    """The op ``excluded_keys`` in PyTorch ops: the sorted distinct keys below key_bound and
    their adj_i = e_i - i."""
    _checks.check_int64_vectors("excluded_keys", [("keys", keys)], keys.device)
    if not 0 <= key_bound < _checks.MAX_KEYS:
        raise ValueError(f"excluded_keys: key_bound must be in [0, 2**62) (got {key_bound})")
    keys = torch.unique(keys)
    keys = keys[: int(torch.searchsorted(keys, key_bound))]
    return keys, keys - torch.arange(keys.numel(), device=keys.device)


def _excluded_edge_keys_fallback(edge_index: Tensor, mode: str, num_src_nodes: int,
                                 num_dst_nodes: int) -> Tuple[Tensor, Tensor, Tensor]:
    """The op ``excluded_edge_keys`` in PyTorch ops: ``excluded_keys`` of the edges' keys, a
    column out of range dropped and the first one in ``first_bad`` ([1] on the CPU, -1:
    none)."""
    op = "excluded_edge_keys"
    if (edge_index.dim() != 2 or edge_index.size(0) != 2
            or edge_index.dtype not in _checks.INDEX_DTYPES):
        raise ValueError(f"{op}: edge_index must be a [2, E] int32 or int64 tensor (got shape "
                         f"{tuple(edge_index.shape)}, {edge_index.dtype})")
    key_bound = _num_keys(mode, num_src_nodes, num_dst_nodes)
    _checks.check_sampling_op_args(op, mode, num_src_nodes, num_dst_nodes, key_bound)
    src, dst = edge_index[0].long(), edge_index[1].long()
    bad = ~(_chunked.in_range(src, num_src_nodes) & _chunked.in_range(dst, num_dst_nodes))
    keys = _encode(mode, src, dst, num_src_nodes, num_dst_nodes, key_bound)
    excluded, adj = _excluded_keys_fallback(keys.masked_fill_(bad, key_bound), key_bound)
    return excluded, adj, _chunked.first_true(bad).cpu()


def _excluded_edge_keys(*args) -> Tuple[Tensor, Tensor, Tensor]:
    """The registered op ``excluded_edge_keys``: the device's kernel or the fallback, as the
    backend table says (the tests swap in the fallback here)."""
    return torch.ops.pyg_edgedot.excluded_edge_keys(*args)


def _rank_to_key(adj: Tensor, ranks: Tensor, ranks_sorted: bool) -> Tensor:
    """key(r) = r + searchsorted(adj, r, right=True); see the module docstring."""
    if adj.numel() == 0:
        return ranks
    if (ranks_sorted or adj.numel() < _SORT_QUERIES_MIN_KEYS
            or ranks.numel() < _SORT_QUERIES_MIN_RANKS):
        return ranks + torch.searchsorted(adj, ranks, right=True)
    sorted_ranks, order = torch.sort(ranks, stable=True)
    keys = torch.empty_like(ranks)
    keys[order] = sorted_ranks + torch.searchsorted(adj, sorted_ranks, right=True)
    return keys


# ---------------------------------------------------------------------------------------
# Drawing ranks. Blocks: the complement is cut into B consecutive rank ranges (one per
# graph of a batch; B = 1 otherwise), block b holding free[b] ranks from start[b].
# ---------------------------------------------------------------------------------------

def _randint_below(high: Tensor, generator, device) -> Tensor:
    """One uniform integer in [0, high[i]) per element (high >= 1)."""
    raw = torch.randint(0, _RAND_HIGH, high.shape, generator=generator, device=device)
    return raw % high


def _iid_draw_count(want: Tensor, free: Tensor) -> Tensor:
    # n i.i.d. draws from m values hit m(1 - (1 - 1/m)^n) >= m(1 - e^{-n/m}) distinct
    # ones on average, so n = -m log(1 - k/m) expects >= k; the +4 sqrt(k) + 8 covers the
    # spread (the distinct count's variance is below n), so the top-up rarely runs.
    want_f, free_f = want.double(), free.double()
    mean = -free_f * torch.log1p(-want_f / free_f)
    count = torch.ceil(mean + 4.0 * torch.sqrt(want_f) + 8.0).long()
    return torch.where(want > 0, count, torch.zeros_like(count))


def _segment_ids(counts: Tensor) -> Tensor:
    return torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device),
                                   counts)


def _pick_per_block(block: Tensor, have: Tensor, want: Tensor, generator) -> Tensor:
    """Indices into a block-sorted array of sum(have) items: for each block a uniform
    random want[b]-subset of its have[b] items, in uniform random order, blocks in order.

    randperm puts all items in uniform random order; a stable sort by block keeps that
    order inside each block; the first want[b] of a uniformly ordered block are a uniform
    want[b]-subset in uniform order.
    """
    total = block.numel()
    perm = torch.randperm(total, generator=generator, device=block.device)
    if have.numel() == 1:
        return perm[:int(want[0])]
    order = torch.sort(block[perm], stable=True).indices
    perm, perm_block = perm[order], block[perm][order]
    position = torch.arange(total, device=block.device) - exclusive_cumsum(have)[perm_block]
    return perm[position < want[perm_block]]


def _draw_distinct(start: Tensor, free: Tensor, want: Tensor, generator,
                   first_round: int = -1) -> Tuple[Tensor, Tensor]:
    """Distinct complement ranks: per block b, a uniform want[b]-subset of
    [start[b], start[b] + free[b]) (want <= free), in uniform random order.
    ``first_round`` >= 0: the i.i.d. draws of each sparse block's first round (tests pass
    fewer than needed, to exercise the top-up); -1: :func:`_iid_draw_count`'s.

    Returns (ranks, pick): ``ranks`` sorted ascending (so the caller maps them to keys
    with cache-friendly sorted queries), ``ranks[pick]`` the result, blocks in order.

    Why it is uniform (the choice points):
    * Dense blocks (want >= free / 4): take all free ranks and pick want of them with
      :func:`_pick_per_block`; cost free <= 4 want, so O(want) and never O(N^2).
    * Sparse blocks: draw ~want i.i.d. uniform ranks, keep the distinct ones. The law of
      an i.i.d. sequence is invariant under any permutation of the values, so given its
      size the distinct set is a uniform subset. If a block is short (rare, see
      _iid_draw_count), top it up: draw from the complement of what it already holds
      (the same rank -> key trick, with the held ranks as the excluded set), so every
      round adds at least one new rank (the loop ends after at most `want` rounds; in
      practice one) and, by the same symmetry, held + new is a uniform subset of its
      size. Then pick a uniform want[b]-subset of it in random order (a uniform subset
      of a uniform subset is uniform).
    """
    device = start.device
    dense = (want > 0) & (want.double() >= _DENSE_FRACTION * free.double())
    sparse = (want > 0) & ~dense
    parts_ranks: List[Tensor] = []
    parts_block: List[Tensor] = []

    if bool(dense.any()):
        count = torch.where(dense, free, torch.zeros_like(free))
        block = _segment_ids(count)
        offset = torch.arange(block.numel(), device=device) - exclusive_cumsum(count)[block]
        parts_ranks.append(start[block] + offset)
        parts_block.append(block)

    if bool(sparse.any()):
        held = torch.empty(0, dtype=torch.long, device=device)   # sorted, distinct
        held_block = torch.empty(0, dtype=torch.long, device=device)
        have = torch.zeros_like(free)
        need = torch.where(sparse, want, torch.zeros_like(want))
        first = True
        while True:
            # Free ranks of each block once `held` is removed: block b's start shifts
            # down by the held ranks of earlier blocks.
            free_now = free - have
            count = _iid_draw_count(need, torch.clamp(free_now, min=1))
            if first and first_round >= 0:
                count = torch.where(need > 0, torch.full_like(count, first_round), count * 0)
            first = False
            held_before = exclusive_cumsum(have)
            if free.numel() == 1:
                # one graph: scalar bounds, no per-draw block bookkeeping (at 2M draws
                # it costs ~100 ms of gathers on the CPU)
                ranks = torch.randint(int(start[0]), int(start[0]) + int(free_now[0]),
                                      (int(count[0]),), generator=generator, device=device)
                ranks = torch.unique(ranks)
                block = torch.zeros_like(ranks)
            else:
                block = _segment_ids(count)
                base = (start - held_before)[block]
                ranks = base + _randint_below(free_now[block], generator, device)
                ranks = torch.unique(ranks)  # sorted; block order follows rank order
                block = torch.searchsorted(start - held_before, ranks, right=True) - 1
            if held.numel() > 0:
                ranks = _rank_to_key(held - torch.arange(held.numel(), device=device),
                                     ranks, ranks_sorted=True)
                held, order = torch.sort(torch.cat([held, ranks]), stable=True)
                held_block = torch.cat([held_block, block])[order]
            else:
                held, held_block = ranks, block
            have = torch.bincount(held_block, minlength=free.numel())
            need = torch.clamp(torch.where(sparse, want, torch.zeros_like(want)) - have,
                               min=0)
            if not bool((need > 0).any()):
                break
        parts_ranks.append(held)
        parts_block.append(held_block)

    if not parts_ranks:
        empty = torch.empty(0, dtype=torch.long, device=device)
        return empty, empty
    if len(parts_ranks) == 1:
        ranks, block = parts_ranks[0], parts_block[0]
    else:
        ranks, order = torch.sort(torch.cat(parts_ranks), stable=True)
        block = torch.cat(parts_block)[order]
    if free.numel() == 1:
        return ranks, torch.randperm(ranks.numel(), generator=generator,
                                     device=device)[:int(want[0])]
    have = torch.bincount(block, minlength=free.numel())
    return ranks, _pick_per_block(block, have, want, generator)


# ---------------------------------------------------------------------------------------
# The op negative_sample: one graph's draw (NegativeSampler.sample)
# ---------------------------------------------------------------------------------------

def _draw_keys(adj: Tensor, num_ranks: int, count: int, replace: bool, generator,
               first_round: int = -1) -> Tensor:
    """The pure-PyTorch draw of one graph: ``count`` keys of the ``num_ranks``-key
    complement whose excluded keys have ``adj``, i.i.d. (``replace``) or distinct, in
    uniform random order."""
    device = adj.device
    if count == 0:
        return torch.empty(0, dtype=torch.long, device=device)
    if replace:
        ranks = torch.randint(0, num_ranks, (count,), generator=generator, device=device)
        return _rank_to_key(adj, ranks, ranks_sorted=False)
    start, free, want = torch.tensor([[0], [num_ranks], [count]], dtype=torch.long,
                                     device=device)
    ranks, pick = _draw_distinct(start, free, want, generator, first_round)
    return _rank_to_key(adj, ranks, ranks_sorted=True)[pick]


def _pairs(mode: str, keys: Tensor, n_src: int, n_dst: int, dtype: torch.dtype) -> Tensor:
    """[2, k] pairs of the keys; undirected: [2, 2k], the pairs (i < j) then the mirrors."""
    src, dst = _decode(mode, keys, n_src, n_dst)
    if mode == _UNDIRECTED:
        src, dst = torch.cat([src, dst]), torch.cat([dst, src])
    return torch.stack([src, dst]).to(dtype)


def _negative_sample_fallback(excluded_adj: Tensor, num_ranks: int, count: int, seed: int,
                              replace: bool, mode: str, num_src_nodes: int,
                              num_dst_nodes: int, dtype: torch.dtype, first_round: int = -1,
                              adj_index: Optional[Tensor] = None) -> Tensor:
    """``negative_sample`` in pure PyTorch (any device without a compiled kernel): the draw
    from a torch generator seeded with ``seed`` (not the kernels' counter-based generator:
    the same distribution, other draws). It searches ``excluded_adj`` with
    ``torch.searchsorted`` and takes no index (``adj_index`` is ignored)."""
    _checks.check_negative_sample_op_args(
        excluded_adj, num_ranks, count, replace, mode, num_src_nodes, num_dst_nodes,
        _num_keys(mode, num_src_nodes, num_dst_nodes), dtype, first_round)
    generator = torch.Generator(device=excluded_adj.device)
    generator.manual_seed(seed)
    keys = _draw_keys(excluded_adj, num_ranks, count, replace, generator, first_round)
    return _pairs(mode, keys, num_src_nodes, num_dst_nodes, dtype)


def _negative_sample(*args, **kwargs) -> Tensor:
    """The registered op: the device's kernel (C++ or CUDA) or the fallback, as the backend
    table says (the tests swap in the fallback here to run both)."""
    return torch.ops.pyg_edgedot.negative_sample(*args, **kwargs)


def _negative_sample_index_fallback(excluded_adj: Tensor, num_ranks: int) -> Tensor:
    """``negative_sample_index`` where the fallback serves: its draw and the composite loss
    search no index, so ``[0]``."""
    _checks.check_int64_vectors("negative_sample_index", [("excluded_adj", excluded_adj)],
                                excluded_adj.device)
    if num_ranks < 0:
        raise ValueError(f"negative_sample_index: num_ranks must be >= 0 (got {num_ranks})")
    return excluded_adj.new_empty(0)


def _draw_seed(generator: Optional[torch.Generator] = None) -> Tensor:
    """A 0-dim int64 seed for the ops' counter-based generator (the samplers' and the
    loss's): from ``generator`` (on its device), else from torch's default CPU generator (no
    device sync; ``torch.manual_seed`` sets it)."""
    device = generator.device if generator is not None else torch.device("cpu")
    return torch.randint(0, 2 ** 63 - 1, (), dtype=torch.int64, generator=generator,
                         device=device)


def fallback_impls() -> dict:
    return {"negative_sample": _negative_sample_fallback,
            "negative_sample_index": _negative_sample_index_fallback,
            "excluded_keys": _excluded_keys_fallback,
            "excluded_edge_keys": _excluded_edge_keys_fallback}


def register_fake_and_autograd() -> None:
    # Integer output: no autograd.
    @torch.library.register_fake("pyg_edgedot::negative_sample")
    def _negative_sample_fake(excluded_adj, num_ranks, count, seed, replace, mode,
                              num_src_nodes, num_dst_nodes, dtype, first_round=-1,
                              adj_index=None):
        columns = 2 * count if mode == _UNDIRECTED else count
        return excluded_adj.new_empty((2, columns), dtype=dtype)

    @torch.library.register_fake("pyg_edgedot::negative_sample_index")
    def _negative_sample_index_fake(excluded_adj, num_ranks):
        # its size depends on the backend: the kept plan's buckets from a compiled kernel,
        # [0] from the fallback
        return excluded_adj.new_empty(torch.library.get_ctx().new_dynamic_size())

    @torch.library.register_fake("pyg_edgedot::excluded_keys")
    def _excluded_keys_fake(keys, key_bound):
        size = torch.library.get_ctx().new_dynamic_size()
        return keys.new_empty(size), keys.new_empty(size)

    @torch.library.register_fake("pyg_edgedot::excluded_edge_keys")
    def _excluded_edge_keys_fake(edge_index, mode, num_src_nodes, num_dst_nodes):
        size = torch.library.get_ctx().new_dynamic_size()
        keys = edge_index.new_empty(size, dtype=torch.int64)
        return keys, torch.empty_like(keys), torch.empty(1, dtype=torch.int64)


# ---------------------------------------------------------------------------------------
# One key space over a graph (or a batch of graphs laid out block after block)
# ---------------------------------------------------------------------------------------

def _kept_tensors():
    """Where a NegativeSampler builds the tensors it keeps (its keys, row pointer and bucket
    index): outside inference mode, even when called inside it (a first use in a validation
    loop under ``torch.inference_mode``), because ``edge_dot_loss`` saves them for backward
    in later training steps, which an inference tensor cannot be."""
    if torch.is_inference_mode_enabled():
        return torch.inference_mode(False)
    return contextlib.nullcontext()


class _KeySpace:
    """Sorted excluded keys + adj for one mode; complement ranks split into blocks.

    ``block_key_start`` [B]: first key of each block (one block for a single graph);
    ``n_src``/``n_dst``: ints, or [B] tensors for a batch. One graph's space comes from
    :meth:`of_graph` and has no block tensors (``mode``, ``n_src``, ``n_dst``, ``excluded``,
    ``adj``, ``num_free`` only).
    """

    def __init__(self, mode: str, src: Tensor, dst: Tensor, n_src, n_dst,
                 block_key_start: Tensor, edge_block: Optional[Tensor], num_keys: Tensor,
                 key_bound: int):
        self.mode = mode
        self.n_src, self.n_dst = n_src, n_dst
        self.block_key_start = block_key_start  # [B] int64
        self.num_keys = num_keys                # [B] int64 keys per block
        per_edge_n_src = n_src if edge_block is None else n_src[edge_block]
        per_edge_n_dst = n_dst if edge_block is None else n_dst[edge_block]
        # pairs that are no keys become key_bound, which the op drops
        keys = _encode(mode, src, dst, per_edge_n_src, per_edge_n_dst, key_bound)
        if edge_block is not None:
            keys = torch.where(keys < key_bound, keys + block_key_start[edge_block], key_bound)
        self.excluded, self.adj = torch.ops.pyg_edgedot.excluded_keys(keys, key_bound)
        excluded_before = torch.searchsorted(self.excluded, block_key_start)
        excluded_in = torch.searchsorted(self.excluded, block_key_start + num_keys) \
            - excluded_before
        self.free = num_keys - excluded_in                       # [B] complement sizes
        self.rank_start = block_key_start - excluded_before      # [B] first rank
        self.num_free = int(self.free.sum())                     # read once, not per draw
        self._adj_index: Optional[Tensor] = None

    @classmethod
    def of_graph(cls, name: str, mode: str, edge_index: Tensor, n_src: int,
                 n_dst: int) -> "_KeySpace":
        """One graph's key space, built by the op ``excluded_edge_keys``, which validates
        ``edge_index`` on the way: its one host sync reads back the tables' size with
        ``first_bad`` (a CPU tensor), so the build has no other. For an index out of range,
        raises :func:`_checks.check_sampling_range`'s ``IndexError``."""
        with _kept_tensors():
            excluded, adj, first_bad = _excluded_edge_keys(edge_index, mode, n_src, n_dst)
        bad = int(first_bad)  # a CPU tensor: no sync
        if bad >= 0:
            _checks.check_sampling_range(name, edge_index, n_src, n_dst)
            raise IndexError(f"{name}: edge_index holds an index out of range at edge {bad}")
        space = cls.__new__(cls)
        space.mode, space.n_src, space.n_dst = mode, n_src, n_dst
        space.excluded, space.adj = excluded, adj
        space.num_free = _num_keys(mode, n_src, n_dst) - excluded.numel()
        space._adj_index = None
        return space

    def adj_index(self) -> Tensor:
        """``negative_sample_index`` of this graph's space, built on the first draw (or the
        first loss drawn through the sampler) and kept: the CUDA draw and both devices' loss
        kernels would otherwise build it per call, which costs more than a small batch from
        a large graph."""
        if self._adj_index is None:
            with _kept_tensors():
                self._adj_index = torch.ops.pyg_edgedot.negative_sample_index(self.adj,
                                                                              self.num_free)
        return self._adj_index

    def decode(self, keys: Tensor, block: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        if block is None:
            return _decode(self.mode, keys, self.n_src, self.n_dst)
        local = keys - self.block_key_start[block]
        return _decode(self.mode, local, self.n_src[block], self.n_dst[block])


def _warn_short(name: str, asked: int, available: int, what: str, stacklevel: int) -> None:
    # stacklevel counts this frame: the warning points at the user's call
    warnings.warn(f"{name}: asked for {asked} negative {what} but the complement holds "
                  f"only {available}; returning all {available} (shuffled)", UserWarning,
                  stacklevel=stacklevel)


class NegativeSampler:
    r"""Exact uniform negative sampler over one graph, built once and drawn from many
    times: it keeps the sorted excluded keys on ``edge_index``'s device (and, from the first
    draw or :func:`edge_dot_loss` call on, a bucket index over them: one int64 per 4-8 keys,
    which the CUDA draw and the loss kernels search), so each draw, and each loss over a
    mini-batch, pays only for its own samples (``O(k log k + k log E)``).

    The candidates are all pairs ``(i, j)`` with ``0 <= i < N_src``, ``0 <= j < N_dst``
    that are not columns of ``edge_index``; in the homogeneous case (``num_nodes`` an int)
    self-loops ``(i, i)`` are not candidates unless ``self_loops=True``.

    Args:
        edge_index (Tensor): ``[2, E]`` int32 or int64 (or a PyG ``EdgeIndex``); row 0
            source, row 1 destination. Duplicates and any order are fine.
        num_nodes (int or Tuple[int, int], optional): ``N`` (homogeneous) or
            ``(N_src, N_dst)`` (bipartite). Default: ``max index + 1``
            (``max(sparse_size)`` for an ``EdgeIndex``), as in PyG.
        self_loops (bool): homogeneous only: whether ``(i, i)`` may be sampled.
            (default: ``False``)

    Draws come back in ``edge_index``'s index dtype (``index_dtype``), or int64 where an
    int32 ``edge_index`` comes with ``num_nodes`` past int32's range.

    The sampler excludes the edges as they were when it was built; for other edges, build
    another. It keeps a reference to ``edge_index`` to build the undirected pairs
    (``force_undirected=True``) on first use, and raises ``RuntimeError`` there if the tensor
    was changed in place since.
    """

    def __init__(self, edge_index: Tensor, num_nodes: Optional[NumNodes] = None, *,
                 self_loops: bool = False, _name: str = "NegativeSampler"):
        name = _name
        plain = _checks.sampling_edge_index(name, edge_index)
        num_src, num_dst, bipartite = _num_nodes_of(name, plain, edge_index, num_nodes)
        _checks.check_key_space(name, plain, num_src, num_dst)
        self._name = name
        self.num_src_nodes, self.num_dst_nodes = num_src, num_dst
        self.bipartite = bipartite
        self.self_loops = bool(self_loops) and not bipartite
        self.num_edges = int(plain.size(1))
        self.device = plain.device
        self.index_dtype = _index_dtype(plain.dtype, num_src, num_dst)
        # The undirected space is built from it on first use, so its version is kept: edges
        # changed in place since would give the two spaces different graphs.
        self._edge_index, self._edge_version = plain, _checks.version_of(plain)
        mode = _DIRECTED if (bipartite or self.self_loops) else _NO_LOOPS
        # Validates edge_index too (the op reports the first index out of range).
        self._directed = self._space(mode)
        self._undirected: Optional[_KeySpace] = None
        self._row_ptr: Optional[Tensor] = None

    def _space(self, mode: str) -> _KeySpace:
        return _KeySpace.of_graph(self._name, mode, self._edge_index, self.num_src_nodes,
                                  self.num_dst_nodes)

    @property
    def num_negatives(self) -> int:
        """Size of the complement (the number of distinct directed negatives)."""
        return self._directed.num_free

    def __repr__(self) -> str:
        size = ((self.num_src_nodes, self.num_dst_nodes) if self.bipartite
                else self.num_src_nodes)
        return (f"{self.__class__.__name__}(num_nodes={size}, num_edges={self.num_edges}, "
                f"num_negatives={self.num_negatives}, device={self.device})")

    def sample(self, num_samples: Optional[Union[int, float]] = None, *,
               replace: bool = False, force_undirected: bool = False,
               generator: Optional[torch.Generator] = None) -> Tensor:
        r"""Draws negative pairs.

        Args:
            num_samples (int or float, optional): how many; a float is a ratio of ``E``
                (``int(ratio * E)``); ``None`` means ``E``, as in PyG.
            replace (bool): ``False``: distinct pairs, a uniform random subset of the
                complement in uniform random order. ``True``: i.i.d. uniform pairs of
                the complement (may repeat; fastest).
            force_undirected (bool): homogeneous only (ignored for bipartite graphs, as
                in PyG): draw ``num_samples // 2`` unordered pairs ``{i, j}``, ``i != j``,
                neither ``(i, j)`` nor ``(j, i)`` an edge, and return both directions:
                columns ``[:k]`` are ``(i, j)`` with ``i < j`` and ``[k:]`` their mirror
                ``(j, i)``, ``2 * (num_samples // 2)`` columns in all.
            generator (torch.Generator, optional): on ``edge_index``'s device type; one
                int64 seed is drawn from it, by default from torch's default CPU generator
                (so ``torch.manual_seed`` reproduces a draw).

        Returns:
            Tensor: ``[2, k]`` in ``index_dtype``, on ``edge_index``'s device. Without
            replacement, when the complement holds fewer than ``k`` pairs, all of it is
            returned (shuffled) with one ``UserWarning``.
        """
        return self._sample(num_samples, replace, force_undirected, generator, self._name)

    def _sample(self, num_samples, replace, force_undirected, generator, name,
                dtype: Optional[torch.dtype] = None) -> Tensor:
        _checks.check_generator(name, generator, self.device)
        count = _checks.sample_count(name, num_samples, self.num_edges)
        undirected = bool(force_undirected) and not self.bipartite
        if undirected:
            count //= 2
            if self._undirected is None:
                if _checks.version_of(self._edge_index) != self._edge_version:
                    raise RuntimeError(
                        f"{name}: edge_index was changed in place after the sampler was "
                        f"built (it keeps the edges as they were then); build a new "
                        f"NegativeSampler for the new edges")
                self._undirected = self._space(_UNDIRECTED)
            space = self._undirected
        else:
            space = self._directed
        free = space.num_free
        replace = bool(replace)  # truthy, as force_undirected (the op takes a bool)
        if replace and count > 0 and free == 0:
            _warn_short(name, count, 0, "pairs", 4)
            count = 0
        elif not replace and count > free:
            _warn_short(name, count, free, "pairs", 4)
            count = free
        out = _negative_sample(space.adj, free, count, int(_draw_seed(generator)), replace,
                               space.mode, self.num_src_nodes, self.num_dst_nodes,
                               dtype or self.index_dtype,
                               adj_index=space.adj_index() if count > 0 else None)
        # In range by construction: scoring these pairs needs no validation read.
        _checks.VALIDATED.add([(out, (self.num_src_nodes, self.num_dst_nodes))])
        return out

    @property
    def _width(self) -> int:
        """Candidate destinations of a source (a row of the directed key space)."""
        return _row_width(self._directed.mode, self.num_dst_nodes)

    def _row_pointer(self) -> Tensor:
        """[N_src + 1]: excluded keys before each row of the directed key space."""
        bounds = torch.arange(self.num_src_nodes + 1, device=self.device) * self._width
        return torch.searchsorted(self._directed.excluded, bounds)

    def _source_rows(self, keep: bool = True) -> Tensor:
        """The row pointer, built once and kept; with ``keep=False`` (a traced graph, which
        cannot keep it) the kept one or one built for this call alone."""
        if self._row_ptr is None:
            if not keep:
                return self._row_pointer()
            with _kept_tensors():
                self._row_ptr = self._row_pointer()
        return self._row_ptr

    def _rows_for(self, num_queries: int) -> Optional[Tensor]:
        """A row pointer for a one-shot query of ``num_queries`` sources, or None where
        building one would cost more memory than the queries (N_src > 4 x queries; a
        binary search per source then keeps the call O(queries), as PyG's is O(E))."""
        if self._row_ptr is not None:
            return self._row_ptr
        return self._row_pointer() if self.num_src_nodes <= 4 * num_queries else None

    def _free_of(self, src: Tensor, row_ptr: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        """(negative destinations of each ``src``, excluded keys before its row), from
        ``row_ptr`` or, without one, by two binary searches per source."""
        width = self._width
        if row_ptr is not None:
            before, after = row_ptr[src], row_ptr[src + 1]
        else:
            excluded = self._directed.excluded
            before = torch.searchsorted(excluded, src * width)
            after = torch.searchsorted(excluded, (src + 1) * width)
        return width - (after - before), before

    def _free_per_source(self, row_ptr: Optional[Tensor] = None) -> Tensor:
        """[N_src]: number of negative destinations of each source (from ``row_ptr``, by
        default the kept one)."""
        if row_ptr is None:
            row_ptr = self._source_rows()
        return self._width - row_ptr.diff()

    def sample_per_source(self, src_index: Tensor, k: int = 1, *,
                          generator: Optional[torch.Generator] = None) -> Tensor:
        r"""``k`` negative destinations per given source, structured style: for each
        ``src_index[s]`` = ``i``, ``k`` i.i.d. uniform ``j`` with ``(i, j)`` not an edge
        (and ``j != i`` unless ``self_loops``). Draws for one source may repeat. The first
        call builds and keeps a row pointer over all sources (``N_src + 1`` int64, as the
        structured loss does), so later calls pay O(1) per source: memory in ``N_src``.
        The one-shot :func:`structured_negative_sampling` keeps none and stays O(E), as
        PyG's (a temporary pointer where ``N_src <= 4 E``, else a search per source).

        Args:
            src_index (Tensor): ``[S]`` int32/int64 source nodes, ``0 <= i < N_src``.
            k (int): negatives per source.
            generator (torch.Generator, optional): as in :meth:`sample`.

        Returns:
            Tensor: ``[S, k]`` destination indices in ``index_dtype``.

        Raises:
            ValueError: if a given source has no negative destination (it is connected
                to every candidate); :func:`structured_negative_sampling_feasible` tells
                beforehand.
        """
        return self._sample_per_source(src_index, k, generator, self._name)

    def _sample_per_source(self, src_index, k, generator, name,
                           dtype: Optional[torch.dtype] = None,
                           keep_rows: bool = True) -> Tensor:
        _checks.check_generator(name, generator, self.device)
        k = _checks.as_count(name, "k", k)
        _checks.check_sources(name, src_index, self.device, self.num_src_nodes)
        dtype = dtype or self.index_dtype
        src = src_index.long()
        out_shape = (src.numel(), k)
        if src.numel() == 0 or k == 0:
            return torch.empty(out_shape, dtype=dtype, device=self.device)
        space = self._directed
        width = self._width
        row_ptr = self._source_rows() if keep_rows else self._rows_for(src.numel())
        free, before = self._free_of(src, row_ptr)
        _checks.check_has_negative(name, free, src)
        # Rank of (i, 0) among all complement keys: i * width minus excluded keys before.
        start = src * width - before
        ranks = (start.unsqueeze(1)
                 + _randint_below(free.unsqueeze(1).expand(out_shape), generator,
                                  self.device))
        keys = _rank_to_key(space.adj, ranks.reshape(-1), ranks_sorted=False)
        _, dst = space.decode(keys, None)
        return dst.view(out_shape).to(dtype)


# ---------------------------------------------------------------------------------------
# PyG-compatible functions
# ---------------------------------------------------------------------------------------

def negative_sampling(edge_index: Tensor, num_nodes: Optional[NumNodes] = None,
                      num_neg_samples: Optional[Union[int, float]] = None,
                      method: str = "sparse", force_undirected: bool = False, *,
                      generator: Optional[torch.Generator] = None) -> Tensor:
    r"""Samples random negative edges of a graph: a drop-in for
    :func:`torch_geometric.utils.negative_sampling`, exact and without ``O(N^2)`` memory.

    Returns ``[2, k]`` distinct pairs ``(i, j)`` that are not columns of ``edge_index``,
    a uniform random subset of all such pairs in uniform random order (not sorted). In
    the homogeneous case there are no self-loops; bipartite when ``num_nodes`` is a pair.

    Unlike PyG (which gives up after three rounds of rejection and may return fewer),
    exactly ``k`` pairs come back whenever the complement holds ``k``; when it holds
    fewer, the whole complement is returned (shuffled) with one ``UserWarning``.

    Args:
        edge_index (Tensor): ``[2, E]`` int32/int64 (or ``EdgeIndex``); duplicates and any
            order are fine.
        num_nodes (int or Tuple[int, int], optional): ``N`` or ``(N_src, N_dst)``;
            default ``max index + 1``.
        num_neg_samples (int or float, optional): ``k``; a float is a ratio of ``E``
            (``int(ratio * E)``); ``None`` means ``E``.
        method (str): ``"sparse"`` or ``"dense"``, accepted for PyG compatibility; both
            run the same exact algorithm and give the same result.
        force_undirected (bool): return ``k // 2`` unordered negative pairs in both
            directions (``2 * (k // 2)`` columns: ``(i, j)``, ``i < j``, then the
            mirrors), PyG's layout. A pair is excluded if either direction is an edge
            (PyG only looks at the ``i < j`` half of ``edge_index``). Ignored for
            bipartite graphs, as in PyG.
        generator (torch.Generator, optional): on ``edge_index``'s device type; default
            torch's global RNG, so ``torch.manual_seed`` reproduces the draw.

    Returns:
        Tensor: ``[2, k]`` int64 (whatever ``edge_index``'s index dtype, as PyG's), on
        ``edge_index``'s device.
    """
    name = "negative_sampling"
    _checks.check_sampling_method(name, method)
    sampler = NegativeSampler(edge_index, num_nodes, _name=name)
    return sampler._sample(num_neg_samples, False, force_undirected, generator, name,
                           torch.int64)


def batched_negative_sampling(edge_index: Tensor, batch: Union[Tensor, Tuple[Tensor, Tensor]],
                              num_neg_samples: Optional[Union[int, float]] = None,
                              method: str = "sparse", force_undirected: bool = False, *,
                              generator: Optional[torch.Generator] = None) -> Tensor:
    r"""Negative sampling within each graph of a batch: a drop-in for
    :func:`torch_geometric.utils.batched_negative_sampling`, vectorized over graphs.

    For every graph ``b`` it returns what :func:`negative_sampling` would for that graph
    alone (its own ``E_b`` for ``None`` or a float ratio; the same int for every graph),
    in global node ids, graphs concatenated in order.

    Args:
        edge_index (Tensor): ``[2, E]`` int32/int64; every edge inside one graph.
        batch (Tensor or Tuple[Tensor, Tensor]): ``[N]`` graph id per node, or
            ``([N_src], [N_dst])`` for bipartite graphs. Nodes of a graph need not be
            contiguous (PyG assumes they are).
        num_neg_samples, method, force_undirected, generator: as in
            :func:`negative_sampling`.

    Returns:
        Tensor: ``[2, sum_b k_b]`` int64 (as PyG's), on ``edge_index``'s device. Graphs whose
        complement is too small give all of it, with one ``UserWarning`` for the call.
    """
    name = "batched_negative_sampling"
    _checks.check_sampling_method(name, method)
    _checks.check_generator(name, generator, edge_index.device
                            if isinstance(edge_index, Tensor) else torch.device("cpu"))
    plain = _checks.sampling_edge_index(name, edge_index)
    device = plain.device
    batches, args = _checks.sampling_batch(name, batch, device)
    bipartite = len(batches) == 2
    src_batch = batches[0].long()
    dst_batch = batches[-1].long()
    _checks.check_sampling_range(name, plain, src_batch.numel(), dst_batch.numel(),
                                 (args[0], args[-1]))
    num_graphs = max(int(b.max()) + 1 if b.numel() > 0 else 0 for b in (src_batch, dst_batch))
    if num_graphs == 0:
        return plain.new_empty((2, 0), dtype=torch.int64)
    # Graph ids past the node count leave graphs empty, and everything below is O(graphs):
    # ids such as [7, 7, 10**9] would cost gigabytes. Past that many, the ids are renumbered
    # in order (the same graphs, the same output); the empty graphs only add to the warning
    # what they asked for (see below).
    num_empty = 0
    num_nodes_given = src_batch.numel() + (dst_batch.numel() if bipartite else 0)
    if num_graphs > num_nodes_given:
        graph_ids = torch.cat([src_batch, dst_batch]) if bipartite else src_batch
        present, renumbered = torch.unique(graph_ids, return_inverse=True)
        num_empty, num_graphs = num_graphs - present.numel(), present.numel()
        src_batch, dst_batch = ((renumbered[:src_batch.numel()], renumbered[src_batch.numel():])
                                if bipartite else (renumbered, renumbered))

    # Local ids: position of a node among its graph's nodes (a stable sort by graph id
    # keeps node order, so for PyG's contiguous batches this is global - ptr).
    def local_ids(b: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
        n = torch.bincount(b, minlength=num_graphs)
        order = torch.sort(b, stable=True).indices
        local = torch.empty_like(b)
        local[order] = torch.arange(b.numel(), device=device) - exclusive_cumsum(n)[b[order]]
        return n, local, order

    n_src, src_local, src_order = local_ids(src_batch)
    if bipartite:
        n_dst, dst_local, dst_order = local_ids(dst_batch)
    else:
        n_dst, dst_local, dst_order = n_src, src_local, src_order
    src, dst = plain[0].long(), plain[1].long()
    edge_graph = src_batch[src]
    if src.numel() > 0 and bool((edge_graph != dst_batch[dst]).any()):
        raise ValueError(f"{name}: edge_index holds an edge between two different graphs "
                         f"of batch")
    num_edges = torch.bincount(edge_graph, minlength=num_graphs)

    empty_want = 0   # what each empty graph asks for: its E_b = 0 gives 0 for None or a ratio
    if num_neg_samples is None:
        want = num_edges.clone()
    elif isinstance(num_neg_samples, float):
        _checks.sample_count(name, num_neg_samples, 0)  # checks the ratio
        want = (num_neg_samples * num_edges.double()).clamp(max=_checks.MAX_KEYS - 1).long()
    else:
        empty_want = _checks.sample_count(name, num_neg_samples, 0)
        want = torch.full((num_graphs,), empty_want, dtype=torch.long, device=device)
    undirected = bool(force_undirected) and not bipartite
    if undirected:
        want = want // 2
        empty_want //= 2
    mode = _DIRECTED if bipartite else (_UNDIRECTED if undirected else _NO_LOOPS)
    num_keys = _num_keys(mode, n_src, n_dst)
    if bool((num_keys.double().sum() >= _checks.MAX_KEYS)):
        raise ValueError(f"{name}: the batch has more than 2**62 candidate pairs")
    space = _KeySpace(mode, src_local[src], dst_local[dst], n_src, n_dst,
                      exclusive_cumsum(num_keys), edge_graph, num_keys, int(num_keys.sum()))
    short = want > space.free
    num_empty_short = num_empty if empty_want > 0 else 0
    if bool(short.any()) or num_empty_short > 0:
        asked = int(want[short].sum()) + num_empty_short * empty_want
        avail = int(space.free[short].sum())
        _warn_short(name, asked, avail,
                    f"pairs in {int(short.sum()) + num_empty_short} graph(s)", 3)
        want = torch.minimum(want, space.free)

    ranks, pick = _draw_distinct(space.rank_start, space.free, want, generator)
    keys = _rank_to_key(space.adj, ranks, ranks_sorted=True)
    block = torch.searchsorted(space.block_key_start, keys, right=True) - 1
    keys, block = keys[pick], block[pick]
    src_l, dst_l = space.decode(keys, block)
    # back to global ids: the k-th node of graph b is order[ptr_b + k]
    src_g = src_order[exclusive_cumsum(n_src)[block] + src_l]
    dst_g = dst_order[exclusive_cumsum(n_dst)[block] + dst_l]
    if undirected:
        # PyG's per-graph layout: graph b's (i, j) columns, then their mirrors. A stable
        # sort by graph of [pairs, mirrors] keeps the pairs ahead within each graph.
        order = torch.sort(torch.cat([block, block]), stable=True).indices
        src_g, dst_g = torch.cat([src_g, dst_g])[order], torch.cat([dst_g, src_g])[order]
    return torch.stack([src_g, dst_g])


def structured_negative_sampling(edge_index: Tensor, num_nodes: Optional[int] = None,
                                 contains_neg_self_loops: bool = True, *,
                                 generator: Optional[torch.Generator] = None
                                 ) -> Tuple[Tensor, Tensor, Tensor]:
    r"""For every edge ``(i, j)`` a uniform ``k`` with ``(i, k)`` not an edge: a drop-in
    for :func:`torch_geometric.utils.structured_negative_sampling`.

    Args:
        edge_index (Tensor): ``[2, E]`` int32/int64 (or ``EdgeIndex``).
        num_nodes (int, optional): ``N``; default ``max index + 1``.
        contains_neg_self_loops (bool): whether ``k = i`` may be drawn (when ``(i, i)`` is
            not an edge). (default: ``True``, as in PyG)
        generator (torch.Generator, optional): as in :func:`negative_sampling`.

    Returns:
        (Tensor, Tensor, Tensor): ``(i, j, k)``, each ``[E]``: ``i`` and ``j`` the rows of
        ``edge_index``, ``k`` int64, as PyG's.

    Raises:
        ValueError: when a source node is connected to all candidates (PyG loops forever
            there); :func:`structured_negative_sampling_feasible` tells beforehand.
    """
    name = "structured_negative_sampling"
    _checks.check_int_num_nodes(name, num_nodes)
    sampler = NegativeSampler(edge_index, num_nodes, self_loops=contains_neg_self_loops,
                              _name=name)
    plain = sampler._edge_index
    neg = sampler._sample_per_source(plain[0], 1, generator, name, torch.int64,
                                     keep_rows=False).view(-1)
    # edge_index's own rows, as PyG returns them (Index objects for an EdgeIndex)
    return edge_index[0], edge_index[1], neg


def structured_negative_sampling_feasible(edge_index: Tensor,
                                          num_nodes: Optional[int] = None,
                                          contains_neg_self_loops: bool = True) -> bool:
    r"""``True`` if :func:`structured_negative_sampling` can run on this graph, i.e. no
    node is connected to all its candidates (all nodes, or all others when
    ``contains_neg_self_loops=False``); as
    :func:`torch_geometric.utils.structured_negative_sampling_feasible`.
    """
    name = "structured_negative_sampling_feasible"
    _checks.check_int_num_nodes(name, num_nodes)
    sampler = NegativeSampler(edge_index, num_nodes, self_loops=contains_neg_self_loops,
                              _name=name)
    if sampler.num_src_nodes == 0:
        return True
    # A source without edges has all its candidates: only the sources of edges can lack
    # a negative, unless a row has no candidate at all (one node, no self-loops).
    if sampler._width == 0:
        return False
    sources = sampler._edge_index[0].long()
    row_ptr = sampler._rows_for(sources.numel())
    if row_ptr is not None:
        free = sampler._free_per_source(row_ptr)
    else:
        free = sampler._free_of(torch.unique(sources), None)[0]
    return bool((free > 0).all())
