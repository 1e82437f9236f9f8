r"""Top-k retrieval for recommendation: ``topk_dst``, the ``k`` best destinations of every
source by dot product, seen edges excluded, without the ``[N, M]`` score matrix.

Schema in ``csrc/topk.cpp``; the CPU kernel in ``csrc/cpu/topk_kernel.cpp`` (tiles of the
score matrix computed into a thread-local buffer, scanned against each source's running
k-th best score); the CUDA kernel in ``csrc/cuda/topk_kernel.cu`` (a fused tiled product:
a block scores its tile of sources against tiles of destinations in registers and keeps
each source's running top-k in shared memory; float64, and ``k`` above 128 or ``D`` above
256, take tiles of ``at::mm`` merged by stable sorts; its per-element rules are in
``csrc/topk_order.h``). Without a compiled library (or with the CPU-only one,
for CUDA tensors) this module's pure-PyTorch implementation runs (:func:`_fallback_topk`:
tiles of ``torch.mm`` merged into a running top-k).

The order every implementation returns (``sorted=True``) is the same total order: by score
descending (a NaN score ranks as -inf), ties by the lower destination index; then padding.
The score is the float32 accumulation (float64 for float64 inputs) before it is rounded to
the input dtype.
"""
from typing import Optional, Tuple

import torch
from torch import Tensor

from .. import _checks
from . import _chunked

NAME = "topk"          # the op group: csrc/topk.cpp

# The fallback's tiles: DST_TILE destinations at a time, and as many source rows as keep a
# tile within _chunked.DEFAULT_CHUNK_ELEMS elements. Read at call time (tests shrink them).
DST_TILE = 1 << 16

_LOW32 = (1 << 32) - 1
_PAD = -(1 << 31)      # the fallback's order key of an excluded or padding entry


def topk_dst(x_src: Tensor, x_dst: Tensor, k: int, *, src_index: Optional[Tensor] = None,
             exclude: Optional[Tensor] = None, sorted: bool = True) -> Tuple[Tensor, Tensor]:
    r"""The ``k`` destinations with the highest dot product for every source, seen pairs
    excluded: retrieval for recommendation, in O(N·k + E) memory.

    For row ``n`` (source ``s = src_index[n]``) it returns the ``k`` rows ``j`` of ``x_dst``
    with the highest :math:`\langle x^{src}_s, x^{dst}_j \rangle`, ties broken by the lower
    ``j``, leaving out exactly the pairs ``(s, j)`` that are columns of ``exclude`` (e.g. the
    training edges). The same as ``(x_src[src_index] @ x_dst.t())``, excluded entries masked
    out, then a stable descending sort cut to ``k`` columns, but the ``[N, M]`` score matrix is
    never built: the CPU kernel scores one tile of sources by destinations at a time, in a
    buffer that stays in cache, the CUDA kernel in registers, and both keep a running top-k
    per source.

    The output is PyG's ``pred_index_mat``: ``torch_geometric.metrics.LinkPredRecall``,
    ``LinkPredNDCG``, ``LinkPredMAP`` and the other ``LinkPredMetric`` classes take
    ``index`` as it is (``metric.update(index, edge_label_index)`` with ``edge_label_index``
    row 0 the *row* ``n``, i.e. the position in ``src_index``).

    **Padding.** When fewer than ``k`` destinations are left for a source (``k > N_dst`` minus
    its excluded ones), the rest of its row is padded with index ``N_dst = x_dst.size(0)`` (one
    past the last destination) and score ``-inf``. Not ``-1`` (what PyG's ``MIPSKNNIndex``
    pads with): ``LinkPredMetric.update`` (PyG 2.8) flattens ``pred_index_mat`` as
    ``row * (max_index + 1) + index``, so a ``-1`` in row ``n`` becomes the key of row
    ``n - 1``'s largest destination and counts as a hit whenever that pair is a label; an
    index of ``N_dst`` never matches a label, so padding is never a hit and the metrics come
    out right. ``x_dst[index]`` on padding raises rather than silently reading the last row
    (so do ``LinkPredCoverage``, ``LinkPredDiversity`` and ``LinkPredAveragePopularity``,
    which index per-destination tensors with ``pred_index_mat``: keep only full rows, or map
    the padding yourself); ``index == x_dst.size(0)`` finds it.

    **Not differentiable**: the inputs may require gradients, but the outputs never do
    (``index`` is an integer choice; ``scores`` are for reporting).

    Args:
        x_src (Tensor): source features ``[N_src, D]``; float32, float64, float16 or
            bfloat16; any strides.
        x_dst (Tensor): destination features ``[N_dst, D]``, same dtype, device and ``D``.
            May be the same tensor as ``x_src``.
        k (int): how many destinations per source, ``>= 0``. ``k > N_dst`` is allowed (the
            rest is padding).
        src_index (Tensor, optional): ``[N]`` int64 or int32, the rows of ``x_src`` to
            retrieve for (repeats allowed). Default: every row, ``N = N_src``.
        exclude (Tensor, optional): ``[2, E]`` int64 or int32 (or a PyG ``EdgeIndex``), the
            pairs never returned: row 0 a source in ``x_src``'s numbering (not a position in
            ``src_index``), row 1 a destination. Duplicates and any order are fine.
        sorted (bool): each row in descending score, ties by the lower index (then padding).
            ``False`` allows any order of the same set: the C++ kernel then skips its final
            sort of each row (the CUDA kernel and the pure-PyTorch path return it sorted
            either way).

    Returns:
        (Tensor, Tensor): ``scores [N, k]`` in the dtype of the inputs (the float32 score, or
        float64 for float64 inputs, rounded: with float16/bfloat16 two scores may round to
        the same value while their order follows the unrounded ones) and ``index [N, k]``
        int64.

    Raises:
        TypeError / ValueError: wrong types, shapes, dtypes, devices, feature dimensions or
            ``k``. IndexError: ``src_index`` or ``exclude`` holding an index out of range,
            naming it, the position and the value (``exclude`` is not checked inside
            ``torch.compile``, where an entry out of range is ignored).
    """
    op = "topk_dst"
    _checks.check_features(x_src, x_dst, op)
    k = _checks.check_k(op, k, minimum=0, int64=True)
    validate = src_index is not None   # every row of x_src: in range by construction
    if src_index is None:
        src_index = torch.arange(x_src.size(0), dtype=torch.int64, device=x_src.device)
    else:
        _checks.check_candidate_index(op, src_index, "src_index", "[N]", x_src)
    _checks.check_bool(op, "sorted", sorted)
    num_src = x_src.size(0)
    exclude_ptr, exclude_dst = exclude_csr(op, exclude, x_src, x_dst)
    scores, index, first_bad = torch.ops.pyg_edgedot.topk_dst(
        x_src.detach(), x_dst.detach(), src_index, exclude_ptr, exclude_dst, k, sorted)
    _checks.raise_if_out_of_range(
        op, validate, first_bad, [(src_index, (num_src,))],
        lambda: [_checks.Bound("src_index", src_index, "x_src", num_src)], "position")
    return scores, index


def exclude_csr(op: str, exclude: Optional[Tensor], x_src: Tensor,
                x_dst: Tensor) -> Tuple[Tensor, Tensor]:
    """``exclude`` ``[2, E]`` as the op's CSR over the rows of ``x_src``: ``(ptr [N_src + 1],
    dst [E])``, each source's destinations ascending (duplicates kept: no data-dependent
    shape, so ``torch.compile`` traces it). Entries out of range raise ``IndexError`` (one
    host read; on CUDA skipped for a tensor already found in range; never inside
    ``torch.compile`` or on meta tensors, where such an entry is ignored). No exclusion: two
    empty tensors."""
    device, num_src, num_dst = x_src.device, x_src.size(0), x_dst.size(0)
    empty = torch.empty(0, dtype=torch.int64, device=device)
    if exclude is None:
        return empty, empty
    exclude = _checks.check_pairs(op, "exclude", exclude)
    _checks.check_index_dtype_device(op, "exclude", exclude, x_src)
    if num_src * num_dst >= _checks.MAX_KEYS:
        raise ValueError(f"{op}: x_src and x_dst have {num_src} x {num_dst} pairs, more than "
                         "2**62: the excluded pairs' int64 keys would overflow")
    if exclude.size(1) == 0:
        return empty, empty
    src, dst = exclude[0].long(), exclude[1].long()
    valid = _chunked.in_range(src, num_src) & _chunked.in_range(dst, num_dst)
    first_bad = _chunked.first_true(~valid)
    _checks.raise_if_edge_out_of_range(op, True, first_bad, exclude, x_src, x_dst, "exclude")
    if num_dst == 0:
        return empty, empty
    # An entry out of range sorts past every source's keys, so no source sees it.
    keys = torch.where(valid, src * num_dst + dst, torch.full_like(src, num_src * num_dst))
    keys = torch.sort(keys).values
    starts = torch.arange(num_src + 1, dtype=torch.int64, device=device) * num_dst
    return torch.searchsorted(keys, starts), keys % num_dst


# ---------------------------------------------------------------------------------------
# The registered op's Python side
# ---------------------------------------------------------------------------------------

def check_topk_op_args(x_src: Tensor, x_dst: Tensor, src_index: Tensor, exclude_ptr: Tensor,
                       exclude_dst: Tensor, k: int) -> None:
    """What the pure-PyTorch op relies on, for callers of ``torch.ops.pyg_edgedot.topk_dst``
    that bypass :func:`topk_dst` (metadata only)."""
    op = "topk_dst"
    _checks.check_op_args(op, [("x_src", x_src), ("x_dst", x_dst)], [("src_index", src_index)])
    _checks.check_int64_vectors(
        op, [("exclude_ptr", exclude_ptr), ("exclude_dst", exclude_dst)], x_src.device)
    if exclude_ptr.numel() not in (0, x_src.size(0) + 1):
        raise ValueError(f"{op}: exclude_ptr must be empty or have N_src + 1 = "
                         f"{x_src.size(0) + 1} entries (got {exclude_ptr.numel()})")
    _checks.check_k(op, k, minimum=0)


def _order_key(score: Tensor, index: Tensor) -> Tensor:
    """int64 keys in the op's total order, all distinct: a float32 score's order-preserving
    int32 (NaN as -inf, -0.0 as 0.0) in the high half, the complement of the index in the low
    half (so the lower index wins a tie); ``torch.topk`` on them is exact."""
    score = torch.where(torch.isnan(score), float("-inf"), score) + 0.0
    bits = score.view(torch.int32)
    ordered = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).long()
    return ordered * (1 << 32) + (_LOW32 - index)


def _excluded_in_rows(src: Tensor, ok: Tensor, exclude_ptr: Tensor, exclude_dst: Tensor,
                      num_dst: int, tile: int):
    """The excluded pairs of one chunk of rows as ``(row, dst)``, grouped by destination tile,
    and the ``[num_tiles + 1]`` boundaries of the groups (a list)."""
    device = src.device
    num_tiles = -(-num_dst // tile)
    nothing = torch.empty(0, dtype=torch.int64, device=device)
    if exclude_ptr.numel() == 0 or exclude_dst.numel() == 0:
        return nothing, nothing, [0] * (num_tiles + 1)
    num_excl = exclude_dst.numel()
    lo = exclude_ptr[src].clamp(0, num_excl)
    hi = torch.maximum(exclude_ptr[src + 1].clamp(0, num_excl), lo)
    count = torch.where(ok, hi - lo, torch.zeros_like(lo))
    total = int(count.sum())
    row = torch.repeat_interleave(torch.arange(src.numel(), device=device), count,
                                  output_size=total)
    start = _chunked.exclusive_cumsum(count)
    dst = exclude_dst[torch.arange(total, device=device) - start[row] + lo[row]]
    keep = _chunked.in_range(dst, num_dst)
    row, dst = row[keep], dst[keep]
    tile_of = dst // tile
    order = torch.sort(tile_of, stable=True).indices
    row, dst = row[order], dst[order]
    bounds = [0] + torch.cumsum(torch.bincount(tile_of, minlength=num_tiles), 0).tolist()
    return row, dst, bounds


def _fallback_topk(x_src: Tensor, x_dst: Tensor, src_index: Tensor, exclude_ptr: Tensor,
                   exclude_dst: Tensor, k: int, sorted: bool = True
                   ) -> Tuple[Tensor, Tensor, Tensor]:
    """``topk_dst`` in pure PyTorch, any device: tiles of ``R`` rows x ``DST_TILE``
    destinations scored by ``torch.mm`` in float32 (float64 for float64), excluded pairs
    marked, merged with the running top-k of each row. Memory O(N·k + E + R·DST_TILE).
    Returns ``(scores, index, first_bad)``."""
    check_topk_op_args(x_src, x_dst, src_index, exclude_ptr, exclude_dst, k)
    num_rows, num_src, num_dst = src_index.size(0), x_src.size(0), x_dst.size(0)
    device, acc = x_src.device, _chunked.acc_dtype(x_src.dtype)
    scores = torch.full((num_rows, k), float("-inf"), dtype=x_src.dtype, device=device)
    index = torch.full((num_rows, k), num_dst, dtype=torch.int64, device=device)
    first_bad = _chunked.new_first_bad(x_src)
    if num_dst >= (1 << 31) - 1:
        raise ValueError("topk_dst: the pure-PyTorch implementation takes at most 2**31 - 2 "
                         f"destinations (x_dst has {num_dst} rows)")
    tile = max(1, min(num_dst, DST_TILE))
    step = max(1, _chunked.DEFAULT_CHUNK_ELEMS // (tile + min(k, num_dst)))
    for start in range(0, num_rows, step):
        ok, src = _chunked.valid_and_clamped(src_index[start:start + step], num_src)
        _chunked.record_first_bad(first_bad, start, ~ok)
        if k == 0 or num_dst == 0 or num_src == 0:
            continue
        # a source holds at most N_dst entries; the rest of a longer row stays padding
        run_score, run_index = _rows_topk(x_src, x_dst, src, ok, exclude_ptr, exclude_dst,
                                          min(k, num_dst), tile, acc)
        scores[start:start + step, :num_dst] = run_score.to(x_src.dtype)
        index[start:start + step, :num_dst] = run_index
    return scores, index, first_bad


def _rows_topk(x_src, x_dst, src, ok, exclude_ptr, exclude_dst, k, tile, acc):
    """The top-k of one chunk of rows over every destination tile, running:
    ``(score [R, k], index [R, k])``, padding included."""
    num_dst = x_dst.size(0)
    query = x_src[src].to(acc)
    excl_row, excl_dst, bounds = _excluded_in_rows(src, ok, exclude_ptr, exclude_dst, num_dst,
                                                   tile)
    tiles = []
    for t, j0 in enumerate(range(0, num_dst, tile)):
        j1 = min(j0 + tile, num_dst)
        lo, hi = bounds[t], bounds[t + 1]
        tiles.append((j0, j1, excl_row[lo:hi], excl_dst[lo:hi] - j0))
    merge = _merge_keyed if acc == torch.float32 else _merge_sorted
    return merge(query, x_dst, ok, tiles, k, acc)


def _merge_keyed(query, x_dst, ok, tiles, k, acc):
    """float32 scores: the running top-k as :func:`_order_key` keys (the index is their low
    half), merged with each tile's keys by ``torch.topk``, exact since no two keys are equal.
    Excluded pairs and rows out of range get the padding key."""
    rows, num_dst, device = query.size(0), x_dst.size(0), query.device
    pad_key = _PAD << 32
    run_key = torch.full((rows, k), pad_key, dtype=torch.int64, device=device)
    run_score = torch.full((rows, k), float("-inf"), dtype=acc, device=device)
    for j0, j1, excl_row, excl_col in tiles:
        score = query @ x_dst[j0:j1].to(acc).t()                          # [R, T]
        key = _order_key(score, torch.arange(j0, j1, device=device))
        key[excl_row, excl_col] = pad_key
        key.masked_fill_(~ok.unsqueeze(1), pad_key)
        run_key, pick = torch.topk(torch.cat([run_key, key], 1), k, dim=1, sorted=True)
        from_run = pick < k
        run_score = torch.where(from_run, run_score.gather(1, pick.clamp(max=k - 1)),
                                score.gather(1, (pick - k).clamp(min=0)))
    pad = (run_key >> 32) == _PAD
    index = (_LOW32 - (run_key & _LOW32)).masked_fill(pad, num_dst)
    return run_score.masked_fill(pad, float("-inf")), index


def _merge_sorted(query, x_dst, ok, tiles, k, acc):
    """float64 scores do not fit an int64 key with the index: the running top-k and each
    tile, side by side, go through two stable sorts, by score (NaN as -inf; the running
    entries come first and hold the lower indices, and each part is in ascending index
    order, so a tie keeps the lower index first), then by whether the pair may be returned."""
    rows, num_dst, device = query.size(0), x_dst.size(0), query.device
    run_score = torch.full((rows, k), float("-inf"), dtype=acc, device=device)
    run_index = torch.full((rows, k), num_dst, dtype=torch.int64, device=device)
    run_ok = torch.zeros((rows, k), dtype=torch.bool, device=device)
    for j0, j1, excl_row, excl_col in tiles:
        score = query @ x_dst[j0:j1].to(acc).t()                          # [R, T]
        cand_ok = ok.unsqueeze(1).expand(rows, j1 - j0).clone()
        cand_ok[excl_row, excl_col] = False
        cand_index = torch.arange(j0, j1, device=device).expand(rows, j1 - j0)
        all_score = torch.cat([run_score, score], 1)
        all_index = torch.cat([run_index, cand_index], 1)
        all_ok = torch.cat([run_ok, cand_ok], 1)
        value = torch.where(torch.isnan(all_score), float("-inf"), all_score)
        by_score = torch.sort(value, dim=1, descending=True, stable=True).indices
        by_ok = torch.sort(all_ok.gather(1, by_score).to(torch.uint8), dim=1,
                           descending=True, stable=True).indices
        pick = by_score.gather(1, by_ok)[:, :k]
        run_score, run_index = all_score.gather(1, pick), all_index.gather(1, pick)
        run_ok = all_ok.gather(1, pick)
    return (run_score.masked_fill(~run_ok, float("-inf")),
            run_index.masked_fill(~run_ok, num_dst))


def fallback_impls() -> dict:
    return {"topk_dst": _fallback_topk}


def register_fake_and_autograd() -> None:
    @torch.library.register_fake("pyg_edgedot::topk_dst")
    def _topk_dst_fake(x_src, x_dst, src_index, exclude_ptr, exclude_dst, k, sorted=True):
        torch._check(x_src.dim() == 2 and x_dst.dim() == 2 and src_index.dim() == 1)
        torch._check(k >= 0)
        shape = (src_index.shape[0], k)
        return (x_src.new_empty(shape), x_src.new_empty(shape, dtype=torch.int64),
                x_src.new_empty((1,), dtype=torch.int64))

    # Not differentiable: registered so that inputs that require gradients are accepted
    # without a warning, and the outputs never require gradients.
    def setup_context(ctx, inputs, output):
        ctx.mark_non_differentiable(*output)

    def backward(ctx, *grads):
        raise RuntimeError("topk_dst is not differentiable")

    torch.library.register_autograd("pyg_edgedot::topk_dst", backward,
                                    setup_context=setup_context)
