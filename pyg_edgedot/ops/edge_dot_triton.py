"""Triton kernels of the core ops, for CUDA devices where the CUDA extension cannot be built.

Same semantics as the fallback (:mod:`pyg_edgedot.ops._chunked`) and the CUDA kernels:
float32, float64, float16 and bfloat16 features accumulated in float32 (float64 for float64),
int32 or int64 indices with any stride, any row stride of the features, 64-bit offsets
throughout. An index out of range is never read: its edge scores NaN, contributes no gradient,
and the smallest such edge is reported in ``first_bad`` (-1 if none).

Forward: one program scores ``BLOCK_E`` consecutive edges. It loads the two index vectors,
gathers ``[BLOCK_E, BLOCK_D]`` tiles of both row sets (16-byte loads where the row stride
and alignment allow), accumulates the products in a tile over the column blocks and reduces
it once. Traffic: 2 * E * D gathered elements, the 2 * E indices and E scores.

Backward (one side, ``out[scatter[e]] += grad[e] * x_gather[gather[e]]``): the edges are
sorted by scatter row (``torch.sort``, stable, on the narrowest key type that holds the row
count), a CSR row pointer comes from ``torch.searchsorted``, and one program per output row
walks its sorted edges ``BLOCK_K`` at a time (edge id -> gather index and gradient -> row
tile) and writes the row once. Rows longer than ``HUB_SEGMENT_EDGES`` are first split into
segments summed by separate programs into a float32 buffer, which the row program then sums
in segment order. Every sum has a fixed order, and there are no atomics: the gradient is
bitwise equal from run to run. No host synchronization in either op.

Block sizes (:func:`forward_config`, :func:`backward_config`; tune the constants below): a
column block covers up to ``ROW_BLOCK_BYTES`` of a row (128 float32 columns), and a tile holds
about ``FWD_TILE_BYTES`` (forward, per operand) or ``GRAD_TILE_BYTES`` (backward) gathered
bytes, halved when D is not a multiple of 16 bytes (no 16-byte loads, so one address per
element); 8 warps from 8 KB tiles, else 4. Float32, D = 128: forward 32 edges x 128 columns,
8 warps; backward 16 edges x 128 columns, 4 warps.

Under ``TRITON_INTERPRET=1`` (set before triton is imported) the same functions run on CPU
tensors, which is how the tests check them without a GPU.
"""
import contextlib
from typing import Optional, Tuple

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl
    _IMPORT_ERROR: Optional[str] = None
except ImportError as err:  # the module stays importable; unavailable() says why
    triton = tl = None
    _IMPORT_ERROR = str(err)

# ---------------------------------------------------------------------------------------
# Tuning knobs
# ---------------------------------------------------------------------------------------

# Bytes of one row covered by a column block: 512 = one warp of 16-byte loads
# (128 float32, 256 float16/bfloat16, 64 float64 columns).
ROW_BLOCK_BYTES = 512
# Forward: bytes of one operand tile [BLOCK_E, BLOCK_D]; each program keeps two in flight.
FWD_TILE_BYTES = 16384
FWD_MIN_EDGES, FWD_MAX_EDGES = 16, 1024
FWD_NUM_STAGES = 1  # the column loop usually runs once; no software pipelining
# Backward: bytes of one gathered tile [BLOCK_K, BLOCK_D] (plus an accumulator tile).
GRAD_TILE_BYTES = 8192
GRAD_MIN_EDGES, GRAD_MAX_EDGES = 8, 64
# H200, W3 fp32 fwd+bwd (bench_beyond.py, sorted payload): 2 warps 25.8 ms, 4 warps 32.8 ms.
GRAD_NUM_WARPS = 2
GRAD_NUM_STAGES = 1
# Rows with more edges than this are summed in segments of this many edges by their own
# programs first, so one hub row does not serialize the whole backward.
HUB_SEGMENT_EDGES = 1024
# torch.sort on CUDA takes at most INT_MAX elements; the backward sorts at most this many
# edges at a time and adds the chunks' rows in chunk order (still deterministic).
SORT_CHUNK_EDGES = 1 << 30
# Rows per grid column of the row kernel (grid x); more rows spill into grid y.
_ROWS_PER_GRID_X = 1 << 20


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def _tile(feat_dim: int, dtype: torch.dtype, tile_bytes: int, min_rows: int,
          max_rows: int) -> Tuple[int, int, int]:
    """``(rows, BLOCK_D, num_warps)`` of a tile of about ``tile_bytes`` gathered bytes."""
    elem_size = dtype.itemsize
    block_d = min(_next_pow2(max(feat_dim, 1)), max(1, ROW_BLOCK_BYTES // elem_size))
    if feat_dim % max(1, 16 // elem_size) != 0:
        # Rows that cannot take 16-byte loads: one 64-bit address per element, so half the
        # tile keeps the registers (and the occupancy) in bounds.
        tile_bytes //= 2
    rows = _clamp(_next_pow2(max(1, tile_bytes // (block_d * elem_size))), min_rows, max_rows)
    num_warps = 8 if rows * block_d * elem_size >= 8192 else 4
    return rows, block_d, num_warps


def forward_config(feat_dim: int, dtype: torch.dtype) -> Tuple[int, int, int, int]:
    """``(BLOCK_E, BLOCK_D, num_warps, num_stages)`` of the forward kernel."""
    block_e, block_d, num_warps = _tile(feat_dim, dtype, FWD_TILE_BYTES, FWD_MIN_EDGES,
                                        FWD_MAX_EDGES)
    return block_e, block_d, num_warps, FWD_NUM_STAGES


def backward_config(feat_dim: int, dtype: torch.dtype) -> Tuple[int, int, int, int]:
    """``(BLOCK_K, BLOCK_D, num_warps, num_stages)`` of the backward row kernels."""
    block_k, block_d, _ = _tile(feat_dim, dtype, GRAD_TILE_BYTES, GRAD_MIN_EDGES,
                                GRAD_MAX_EDGES)
    # One program per row, most rows short: few warps (more programs resident per SM).
    return block_k, block_d, GRAD_NUM_WARPS, GRAD_NUM_STAGES


def unavailable() -> Optional[str]:
    """None if the Triton kernels can run here, else the reason they cannot, as a sentence.
    (``PYG_EDGEDOT_TRITON=0`` is read with the other switches, in ``pyg_edgedot._config``.)"""
    if _IMPORT_ERROR is not None:
        return f"triton could not be imported ({_IMPORT_ERROR})"
    if torch.version.cuda is None:
        return "this torch build has no CUDA (torch.version.cuda is None)"
    if not torch.cuda.is_available():
        return "no CUDA device is available (torch.cuda.is_available() is False)"
    return None


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    # _chunked.acc_dtype's rule, kept here: the tests load this module by path, outside the
    # package (tests/test_triton.py, load_interpreted_module), so it imports none of it.
    return torch.float64 if dtype == torch.float64 else torch.float32


def _device_guard(t: Tensor):
    # Triton launches on the current device; make it the tensors' device (CPU tensors only
    # reach the kernels under TRITON_INTERPRET=1).
    return torch.cuda.device(t.device) if t.is_cuda else contextlib.nullcontext()


def _unit_column_stride(x: Tensor) -> Tensor:
    # The kernels read rows through a row stride; only a column stride other than 1 copies.
    return x if x.size(1) <= 1 or x.stride(1) == 1 else x.contiguous()


# ---------------------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------------------

if triton is not None:
    _TL_ACC = {torch.float32: tl.float32, torch.float64: tl.float64}

    # Sizes that are only compared are not specialized (fewer recompiles as E and N change);
    # strides and feat_dim are, so that 16-byte loads are used where rows allow them.
    @triton.jit(do_not_specialize=["num_edges", "num_src", "num_dst"])
    def _edge_dot_fwd_kernel(
        x_src_ptr, x_dst_ptr,            # [N_src, D], [N_dst, D]; column stride 1
        src_index_ptr, dst_index_ptr,    # [E] int32/int64, strided
        out_ptr,                         # [E] dtype of x
        first_bad_ptr,                   # [1] int64: -1, or the smallest bad edge (REPORT_BAD)
        num_edges, num_src, num_dst, feat_dim,
        src_row_stride, dst_row_stride, src_index_stride, dst_index_stride,
        ACC_DTYPE: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_D: tl.constexpr,
        REPORT_BAD: tl.constexpr,
    ):
        # One program: BLOCK_E consecutive edges; the tile loop walks the columns.
        edges = tl.program_id(0).to(tl.int64) * BLOCK_E + tl.arange(0, BLOCK_E)
        in_range = edges < num_edges
        src = tl.load(src_index_ptr + edges * src_index_stride, mask=in_range,
                      other=0).to(tl.int64)
        dst = tl.load(dst_index_ptr + edges * dst_index_stride, mask=in_range,
                      other=0).to(tl.int64)
        valid = in_range & (src >= 0) & (src < num_src) & (dst >= 0) & (dst < num_dst)
        # Each bad edge lowers first_bad itself (no block-wide reduction, nothing executed when
        # every edge is in range). -1 is the largest value as unsigned, so an unsigned min keeps
        # the smallest bad edge.
        if REPORT_BAD:
            first_bad_slot = first_bad_ptr.to(tl.pointer_type(tl.uint64)) + tl.zeros_like(edges)
            outside = (src < 0) | (src >= num_src) | (dst < 0) | (dst >= num_dst)
            # (not in_range & ~valid: Triton 3.1's interpreter, torch 2.5's, has no ~ on a bool)
            tl.atomic_min(first_bad_slot, edges.to(tl.uint64), mask=in_range & outside)
        src_rows = x_src_ptr + tl.where(valid, src, 0) * src_row_stride
        dst_rows = x_dst_ptr + tl.where(valid, dst, 0) * dst_row_stride
        acc = tl.zeros((BLOCK_E, BLOCK_D), dtype=ACC_DTYPE)
        for col0 in range(0, feat_dim, BLOCK_D):
            cols = col0 + tl.arange(0, BLOCK_D)
            mask = valid[:, None] & (cols < feat_dim)[None, :]
            a = tl.load(src_rows[:, None] + cols[None, :], mask=mask, other=0.0)
            b = tl.load(dst_rows[:, None] + cols[None, :], mask=mask, other=0.0)
            acc += a.to(ACC_DTYPE) * b.to(ACC_DTYPE)
        score = tl.where(valid, tl.sum(acc, axis=1), float("nan"))
        tl.store(out_ptr + edges, score.to(out_ptr.dtype.element_ty), mask=in_range)

    @triton.jit
    def _sum_sorted_edges(
        acc, pos_begin, pos_end, gather_ptr, gather_stride, grad_ptr, grad_stride,
        x_ptr, x_row_stride, num_gather, cols, col_mask,
        ACC_DTYPE: tl.constexpr, BLOCK_K: tl.constexpr,
    ):
        # acc[j] += grad * row for the sorted edges pos_begin + j, + j + BLOCK_K, ...: a fixed
        # order; the caller reduces acc over j with tl.sum (also a fixed order). gather_ptr
        # and grad_ptr hold the edges in sorted order, so these reads are contiguous.
        for pos0 in range(pos_begin, pos_end, BLOCK_K):
            # [BLOCK_K, 1] columns rather than [BLOCK_K] vectors: with 1-D vectors next to
            # the 2-D tile, Triton 3.6's layout pass fails on float64 (an H200 compile error,
            # reproduced with scratch compiles for sm_90).
            pos = pos0 + tl.arange(0, BLOCK_K)[:, None]
            in_row = pos < pos_end
            gather = tl.load(gather_ptr + pos * gather_stride, mask=in_row,
                             other=-1).to(tl.int64)
            ok = in_row & (gather >= 0) & (gather < num_gather)
            weight = tl.load(grad_ptr + pos * grad_stride, mask=in_row, other=0.0)
            weight = tl.where(ok, weight.to(ACC_DTYPE), 0.0)
            rows = x_ptr + tl.where(ok, gather, 0) * x_row_stride
            vals = tl.load(rows + cols[None, :], mask=ok & col_mask[None, :], other=0.0)
            acc += weight * vals.to(ACC_DTYPE)
        return acc

    @triton.jit(do_not_specialize=["num_gather", "num_rows"])
    def _edge_dot_grad_segments_kernel(
        rowptr_ptr,                      # [num_rows + 1] int32: CSR over the sorted edges
        seg_end_ptr,                     # [num_rows] int32: inclusive cumsum of segments
        seg_row_ptr,                     # [max_segments] int32: row of each segment
        gather_ptr, gather_stride,       # [E] int32/int64, in sorted order
        grad_ptr, grad_stride,           # [E], in sorted order
        x_ptr, x_row_stride, num_gather,  # [N_gather, D]; column stride 1
        partial_ptr,                     # [max_segments, D] accumulator dtype
        num_rows, feat_dim,
        SEGMENT: tl.constexpr, ACC_DTYPE: tl.constexpr,
        BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr,
    ):
        # One program per segment of SEGMENT sorted edges of a hub row (programs past the
        # last segment have seg_row == num_rows and do nothing).
        seg = tl.program_id(0).to(tl.int64)
        row = tl.load(seg_row_ptr + seg).to(tl.int64)
        if row < num_rows:
            begin = tl.load(rowptr_ptr + row).to(tl.int64)
            end = tl.load(rowptr_ptr + row + 1).to(tl.int64)
            num_segs = (end - begin + SEGMENT - 1) // SEGMENT
            first_seg = tl.load(seg_end_ptr + row).to(tl.int64) - num_segs
            seg_begin = begin + (seg - first_seg) * SEGMENT
            seg_end = tl.minimum(seg_begin + SEGMENT, end)
            for col0 in range(0, feat_dim, BLOCK_D):
                cols = col0 + tl.arange(0, BLOCK_D)
                col_mask = cols < feat_dim
                acc = tl.zeros((BLOCK_K, BLOCK_D), dtype=ACC_DTYPE)
                acc = _sum_sorted_edges(acc, seg_begin, seg_end, gather_ptr,
                                        gather_stride, grad_ptr, grad_stride, x_ptr,
                                        x_row_stride, num_gather, cols, col_mask,
                                        ACC_DTYPE, BLOCK_K)
                tl.store(partial_ptr + seg * feat_dim + cols, tl.sum(acc, axis=0),
                         mask=col_mask)

    @triton.jit(do_not_specialize=["num_gather", "num_rows"])
    def _edge_dot_grad_rows_kernel(
        rowptr_ptr,                      # [num_rows + 1] int32: CSR over the sorted edges
        seg_end_ptr,                     # [num_rows] int32 (HAS_HUBS only)
        partial_ptr,                     # [max_segments, D] accumulator dtype (HAS_HUBS)
        gather_ptr, gather_stride,       # [E] int32/int64, in sorted order
        grad_ptr, grad_stride,           # [E], in sorted order
        x_ptr, x_row_stride, num_gather,  # [N_gather, D]; column stride 1
        prev_ptr,                        # [num_rows, D] accumulator dtype (HAS_PREV only)
        out_ptr,                         # [num_rows, D] contiguous, any float dtype
        num_rows, feat_dim,
        SEGMENT: tl.constexpr, HAS_HUBS: tl.constexpr, HAS_PREV: tl.constexpr,
        ACC_DTYPE: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_D: tl.constexpr,
        ROWS_PER_GRID_X: tl.constexpr,
    ):
        # One program per output row: sums the row's sorted edges (or, for a hub row, its
        # segments' partial sums, in order), adds prev (earlier sort chunks), writes once.
        row = tl.program_id(1).to(tl.int64) * ROWS_PER_GRID_X + tl.program_id(0)
        if row < num_rows:
            begin = tl.load(rowptr_ptr + row).to(tl.int64)
            end = tl.load(rowptr_ptr + row + 1).to(tl.int64)
            for col0 in range(0, feat_dim, BLOCK_D):
                cols = col0 + tl.arange(0, BLOCK_D)
                col_mask = cols < feat_dim
                acc = tl.zeros((BLOCK_K, BLOCK_D), dtype=ACC_DTYPE)
                if HAS_HUBS:
                    if end - begin > SEGMENT:
                        seg_stop = tl.load(seg_end_ptr + row).to(tl.int64)
                        seg_start = seg_stop - (end - begin + SEGMENT - 1) // SEGMENT
                        for seg0 in range(seg_start, seg_stop, BLOCK_K):
                            segs = seg0 + tl.arange(0, BLOCK_K)
                            seg_mask = segs < seg_stop
                            acc += tl.load(
                                partial_ptr + segs[:, None] * feat_dim + cols[None, :],
                                mask=seg_mask[:, None] & col_mask[None, :], other=0.0)
                    else:
                        acc = _sum_sorted_edges(acc, begin, end, gather_ptr,
                                                gather_stride, grad_ptr, grad_stride, x_ptr,
                                                x_row_stride, num_gather, cols, col_mask,
                                                ACC_DTYPE, BLOCK_K)
                else:
                    acc = _sum_sorted_edges(acc, begin, end, gather_ptr,
                                            gather_stride, grad_ptr, grad_stride, x_ptr,
                                            x_row_stride, num_gather, cols, col_mask,
                                            ACC_DTYPE, BLOCK_K)
                total = tl.sum(acc, axis=0)
                if HAS_PREV:
                    total += tl.load(prev_ptr + row * feat_dim + cols, mask=col_mask,
                                     other=0.0)
                tl.store(out_ptr + row * feat_dim + cols, total.to(out_ptr.dtype.element_ty),
                         mask=col_mask)


def _require_triton() -> None:
    if triton is None:
        raise RuntimeError(f"pyg_edgedot: the Triton kernels need triton ({_IMPORT_ERROR})")


# ---------------------------------------------------------------------------------------
# Ops
# ---------------------------------------------------------------------------------------

def edge_dot(x_src: Tensor, x_dst: Tensor, src_index: Tensor, dst_index: Tensor,
             report_bad: bool = True) -> Tuple[Tensor, Tensor]:
    """out[e] = sum_k x_src[src_index[e], k] * x_dst[dst_index[e], k].

    Returns ``(out, first_bad)``: ``out`` [E] in the dtype of x (NaN for an edge with an
    index out of range), ``first_bad`` [1] int64, the smallest such edge or -1; empty, and
    not computed, without ``report_bad``.
    """
    _require_triton()
    x_src, x_dst = _unit_column_stride(x_src), _unit_column_stride(x_dst)
    num_edges = src_index.size(0)
    num_src, num_dst, feat_dim = x_src.size(0), x_dst.size(0), x_src.size(1)
    out = torch.empty(num_edges, dtype=x_src.dtype, device=x_src.device)
    if report_bad:
        first_bad = torch.full((1,), -1, dtype=torch.int64, device=x_src.device)
    else:
        first_bad = torch.empty(0, dtype=torch.int64, device=x_src.device)
    if num_edges == 0:
        return out, first_bad
    if num_src == 0 or num_dst == 0:  # every edge is out of range, edge 0 first
        return out.fill_(float("nan")), first_bad.fill_(0)
    block_e, block_d, num_warps, num_stages = forward_config(feat_dim, x_src.dtype)
    grid = (triton.cdiv(num_edges, block_e),)
    with _device_guard(x_src):
        _edge_dot_fwd_kernel[grid](
            x_src, x_dst, src_index, dst_index, out, first_bad,
            num_edges, num_src, num_dst, feat_dim,
            x_src.stride(0), x_dst.stride(0), src_index.stride(0), dst_index.stride(0),
            ACC_DTYPE=_TL_ACC[_acc_dtype(x_src.dtype)], BLOCK_E=block_e, BLOCK_D=block_d,
            REPORT_BAD=report_bad, num_warps=num_warps, num_stages=num_stages)
    return out, first_bad


def _sort_key_dtype(num_rows: int) -> torch.dtype:
    # The narrowest key that holds -1 .. num_rows: fewer radix-sort passes.
    if num_rows + 1 < (1 << 15):
        return torch.int16
    if num_rows + 1 < (1 << 31):
        return torch.int32
    return torch.int64


def _sorted_by_row(scatter_index: Tensor, num_rows: int) -> Tuple[Tensor, Tensor]:
    """``(perm, rowptr)``: edge ids sorted (stably) by scatter row, and the CSR row pointer
    over them. Edges with a row out of range sort before rowptr[0] or after rowptr[-1]."""
    key_dtype = _sort_key_dtype(num_rows)
    keys = scatter_index
    if keys.element_size() > key_dtype.itemsize:
        keys = keys.clamp(-1, num_rows)  # rows out of range sort first (-1) or last
    keys = keys.to(key_dtype)
    sorted_keys, perm = torch.sort(keys, stable=True)
    boundaries = torch.arange(num_rows + 1, dtype=key_dtype, device=keys.device)
    rowptr = torch.searchsorted(sorted_keys, boundaries,
                                out_int32=sorted_keys.numel() < (1 << 31) - 1)
    return perm, rowptr


def _grad_chunk(grad_out: Tensor, x_gather: Tensor, scatter_index: Tensor,
                gather_index: Tensor, num_rows: int, prev: Optional[Tensor],
                out: Tensor) -> None:
    """out = (prev if given) + the gradient of these edges, one row program per row."""
    num_edges, feat_dim = grad_out.size(0), x_gather.size(1)
    acc_dtype = _acc_dtype(x_gather.dtype)
    block_k, block_d, num_warps, num_stages = backward_config(feat_dim, x_gather.dtype)
    perm, rowptr = _sorted_by_row(scatter_index, num_rows)
    # Gather indices and gradients put in sorted order once (two coalesced-write gathers),
    # so the row kernels read them contiguously instead of through perm.
    gather_index = gather_index[perm]
    grad_out = grad_out[perm]

    segment = HUB_SEGMENT_EDGES
    has_hubs = num_edges > segment  # else no row can be longer than a segment
    seg_end, partial = rowptr, out  # placeholders, not read without hubs
    if has_hubs:
        degree = rowptr[1:] - rowptr[:-1]
        num_segs = torch.where(degree > segment, (degree + segment - 1) // segment, 0)
        seg_end = torch.cumsum(num_segs, 0, dtype=torch.int32)
        # Hub rows have > segment edges each, so they hold fewer than 2 * E / segment segments.
        max_segments = 2 * triton.cdiv(num_edges, segment)
        seg_row = torch.searchsorted(
            seg_end, torch.arange(max_segments, dtype=torch.int32, device=out.device),
            right=True, out_int32=True)
        partial = torch.empty(max_segments, feat_dim, dtype=acc_dtype, device=out.device)
        _edge_dot_grad_segments_kernel[(max_segments,)](
            rowptr, seg_end, seg_row, gather_index, gather_index.stride(0),
            grad_out, grad_out.stride(0), x_gather, x_gather.stride(0), x_gather.size(0),
            partial, num_rows, feat_dim,
            SEGMENT=segment, ACC_DTYPE=_TL_ACC[acc_dtype], BLOCK_K=block_k, BLOCK_D=block_d,
            num_warps=num_warps, num_stages=num_stages)

    grid = (min(num_rows, _ROWS_PER_GRID_X), triton.cdiv(num_rows, _ROWS_PER_GRID_X))
    _edge_dot_grad_rows_kernel[grid](
        rowptr, seg_end, partial, gather_index, gather_index.stride(0),
        grad_out, grad_out.stride(0), x_gather, x_gather.stride(0), x_gather.size(0),
        prev if prev is not None else out, out, num_rows, feat_dim,
        SEGMENT=segment, HAS_HUBS=has_hubs, HAS_PREV=prev is not None,
        ACC_DTYPE=_TL_ACC[acc_dtype], BLOCK_K=block_k, BLOCK_D=block_d,
        ROWS_PER_GRID_X=_ROWS_PER_GRID_X, num_warps=num_warps, num_stages=num_stages)


def edge_dot_grad(grad_out: Tensor, x_gather: Tensor, scatter_index: Tensor,
                  gather_index: Tensor, num_rows: int) -> Tensor:
    """out[scatter_index[e], :] += grad_out[e] * x_gather[gather_index[e], :].

    Edges with an index out of range contribute nothing. Accumulates in float32 (float64
    for float64) and returns ``[num_rows, D]`` in the dtype of ``x_gather``. Deterministic
    (sorted, no atomics). The arguments are checked by the caller
    (``pyg_edgedot.ops.edge_dot``).
    """
    _require_triton()
    x_gather = _unit_column_stride(x_gather)
    num_edges, feat_dim = grad_out.size(0), x_gather.size(1)
    num_rows = int(num_rows)
    if num_edges == 0 or num_rows == 0 or feat_dim == 0 or x_gather.size(0) == 0:
        return torch.zeros(num_rows, feat_dim, dtype=x_gather.dtype, device=x_gather.device)
    out = torch.empty(num_rows, feat_dim, dtype=x_gather.dtype, device=x_gather.device)
    starts = list(range(0, num_edges, SORT_CHUNK_EDGES))
    running = None  # float32/float64 sum over the sort chunks so far, when there are several
    acc = _acc_dtype(x_gather.dtype)
    with _device_guard(x_gather):
        for start in starts:
            stop = min(start + SORT_CHUNK_EDGES, num_edges)
            target = out if stop == num_edges else (running if running is not None else
                                                    torch.empty_like(out, dtype=acc))
            _grad_chunk(grad_out[start:stop], x_gather, scatter_index[start:stop],
                        gather_index[start:stop], num_rows, running, target)
            running = target
    return out
