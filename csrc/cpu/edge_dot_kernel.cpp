// CPU kernels of the edge_dot group: fused, parallel with at::parallel_for, no [E, D]
// intermediate. The relation-weighted ops (edge_dot_rel, edge_dot_rel_grad; schemas in
// edge_dot_rel.cpp) are these same kernels with a third row per edge, so they live here too.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <type_traits>

#include "common.h"
#include "first_bad.h"
#include "prefetch.h"
#include "row_dot.h"

namespace pyg_edgedot {
namespace {

// What the forward reads and writes. rel_rows null: the plain dot product.
template <typename scalar_t, typename index_t>
struct ForwardArgs {
  const scalar_t* src_rows;  // [N_src, D], row stride src_row_stride
  const scalar_t* dst_rows;  // [N_dst, D]
  const scalar_t* rel_rows;  // [R, D] or null
  const index_t* src_ptr;    // [E], strided
  const index_t* dst_ptr;    // [E], strided
  const index_t* rel_ptr;    // [E], strided, or null
  scalar_t* out_ptr;         // [E]
  int64_t src_row_stride, dst_row_stride, rel_row_stride;
  int64_t src_stride, dst_stride, rel_stride;
  int64_t num_src, num_dst, num_rel, feat_dim, row_bytes, ahead;
  std::atomic<int64_t>* first_bad;  // null: not reported
};

// Asks for edge f's two rows ahead of their use; an index out of range asks for nothing.
template <typename scalar_t, typename index_t>
PYG_EDGEDOT_INLINE void prefetch_edge_rows(const ForwardArgs<scalar_t, index_t>& p,
                                           int64_t f) {
  const int64_t ps = static_cast<int64_t>(p.src_ptr[f * p.src_stride]);
  const int64_t pd = static_cast<int64_t>(p.dst_ptr[f * p.dst_stride]);
  if (ps >= 0 && ps < p.num_src) prefetch_lines(p.src_rows + ps * p.src_row_stride, p.row_bytes);
  if (pd >= 0 && pd < p.num_dst) prefetch_lines(p.dst_rows + pd * p.dst_row_stride, p.row_bytes);
}

// Edges [begin, end): each edge reads its two rows once and writes one score; an edge with
// an index out of range gets NaN and lowers first_bad (if reported).
template <typename scalar_t, typename index_t>
PYG_EDGEDOT_INLINE void forward_range(const ForwardArgs<scalar_t, index_t>& p, int64_t begin,
                                      int64_t end) {
  using acc_t = at::opmath_type<scalar_t>;
  const scalar_t nan = static_cast<scalar_t>(std::numeric_limits<acc_t>::quiet_NaN());
  const bool has_rel = p.rel_rows != nullptr;
  for (int64_t e = begin; e < end; ++e) {
    if (e + p.ahead < end) prefetch_edge_rows(p, e + p.ahead);
    const int64_t s = static_cast<int64_t>(p.src_ptr[e * p.src_stride]);
    const int64_t d = static_cast<int64_t>(p.dst_ptr[e * p.dst_stride]);
    const int64_t t = has_rel ? static_cast<int64_t>(p.rel_ptr[e * p.rel_stride]) : 0;
    if (s < 0 || s >= p.num_src || d < 0 || d >= p.num_dst || t < 0 || t >= p.num_rel) {
      p.out_ptr[e] = nan;
      if (p.first_bad != nullptr) record_bad_row(*p.first_bad, e);
      continue;
    }
    const scalar_t* a = p.src_rows + s * p.src_row_stride;
    const scalar_t* b = p.dst_rows + d * p.dst_row_stride;
    p.out_ptr[e] = static_cast<scalar_t>(
        has_rel ? row_dot3<scalar_t, acc_t>(a, p.rel_rows + t * p.rel_row_stride, b, p.feat_dim)
                : row_dot<scalar_t, acc_t>(a, b, p.feat_dim));
  }
}

// Four edges at a time: Dots::score4 scores them with row_dot.h's four-pair forms, the same
// bits as forward_range. Measured on an AMD EPYC (2 threads, min of 15 calls, the AVX2 form
// against the one-edge loop): E = 200K, D = 64, rows in cache: random 1.4 -> 1.2-1.3 ms,
// sorted 1.3 -> 0.8-0.9 ms (torch.compile 1.3 and 0.9-1.0); E = 2M, D = 128: random 105 ->
// 97-100 ms, sorted level (47-51). On an Intel Xeon (2026-12-05, float32, no prefetch, min
// of 11-41 calls in turn), the AVX-512 form against the AVX2 one: E = 200K, D = 64: random
// 1.66 -> 1.53 ms, sorted 1.01 -> 0.93 (torch.compile 1.72 and 1.11); E = 2M, D = 128:
// random 87 -> 86, sorted 47 -> 42 (compile 89 and 47). Any D: rows whose D is not a
// multiple of 8 end in masked loads (E = 2M, 100K nodes, against compile in the same process:
// D = 100 random 67.9 ms / 72.6, sorted 36.4 / 40.4; D = 127 79.6 / 85.4, 40.2 / 45.5; the
// one-edge loop took 77.1 / 67.9, 40.2 / 36.3 and 103.7 / 87.2, 64.4 / 45.9). DistMult's
// rows too (score4_rel; Intel Xeon, 100K nodes, E = 2M, D = 128, R = 16, against compile in
// the same process: fp32 54.6 ms / 58.3-59.2, bf16 46.8-48.0 / 51.6-52.2; the one-edge loop
// took 69.7 against 60.8 in bench_beyond's run; with AVX2 four at a time 71.1-71.7 / 60.1-60.9).
// A group with an index out of range, and the last E % 4 edges, take forward_range.
template <typename Dots, typename scalar_t, typename index_t>
inline void forward_range_by4(const ForwardArgs<scalar_t, index_t>& p, int64_t begin,
                              int64_t end) {
  const uint64_t num_src = static_cast<uint64_t>(p.num_src);
  const uint64_t num_dst = static_cast<uint64_t>(p.num_dst);
  // Edge e's indices as unsigned: one compare tells a negative index too.
  auto src_of = [&](int64_t i) {
    return static_cast<uint64_t>(static_cast<int64_t>(p.src_ptr[i * p.src_stride]));
  };
  auto dst_of = [&](int64_t i) {
    return static_cast<uint64_t>(static_cast<int64_t>(p.dst_ptr[i * p.dst_stride]));
  };
  const bool has_rel = p.rel_rows != nullptr;
  const uint64_t num_rel = static_cast<uint64_t>(p.num_rel);
  int64_t e = begin;
  for (; e + 4 <= end; e += 4) {
    if (p.ahead > 0) {  // the rows of the edges `ahead` on
      for (int j = 0; j < 4; ++j) prefetch_edge_rows(p, std::min(e + p.ahead + j, end - 1));
    }
    const scalar_t* a[4];
    const scalar_t* b[4];
    const scalar_t* r[4];
    bool bad = false;
    for (int j = 0; j < 4; ++j) {
      const uint64_t s = src_of(e + j), d = dst_of(e + j);
      const uint64_t t = has_rel ? static_cast<uint64_t>(static_cast<int64_t>(
                                       p.rel_ptr[(e + j) * p.rel_stride]))
                                 : 0;
      bad |= (s >= num_src) | (d >= num_dst) | (t >= num_rel);
      a[j] = p.src_rows + static_cast<int64_t>(s) * p.src_row_stride;
      b[j] = p.dst_rows + static_cast<int64_t>(d) * p.dst_row_stride;
      r[j] = has_rel ? p.rel_rows + static_cast<int64_t>(t) * p.rel_row_stride : nullptr;
    }
    if (bad) {
      forward_range(p, e, e + 4);
      continue;
    }
    if (has_rel) {
      Dots::score4_rel(a, r, b, p.feat_dim, p.out_ptr + e);
    } else {
      Dots::score4(a, b, p.feat_dim, p.out_ptr + e);
    }
  }
  forward_range(p, e, end);
}

// The forward's loop, one edge at a time or four (row_dot.h's IsaClones compiles it per ISA).
struct ForwardEdges {
  template <typename Dots, typename scalar_t, typename index_t>
  static void run(const ForwardArgs<scalar_t, index_t>& p, int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<Dots, OnePairAtATime>) {
      forward_range(p, begin, end);
    } else {
      forward_range_by4<Dots>(p, begin, end);
    }
  }
};

// Prefetching rows costs instructions that only pay when the rows come from DRAM, and not
// for every dtype on every CPU. Measured with the AVX2 four-edge loop, 2 threads, E = 2M
// (the AVX-512 loop on the Intel Xeon likewise):
// - AMD EPYC (1 MB L2 per core, 32 MB L3), float32: 5 MB of feature rows 8-50% faster
//   without (E = 200K, D = 32 / 64), 20 MB level, 41 MB 7-15% slower without, 102 MB
//   (D = 128) sorted 20-40% slower without.
// - Intel Xeon (2 MB L2 per core, 480 MB L3; 2026-12-05, min of 9-15 calls, in turn):
//   float32 faster without at every size tried: 100K nodes, D = 128 random 86-95 ms without
//   against 99-119 with, sorted 41-52 against 53-75; 1M nodes, D = 64: 103 / 110 random,
//   62 / 65 sorted; D = 256: 315 / 575, 201 / 340; 2M nodes, D = 128: 180 / 230, 120 / 138.
//   One line per row, 4 to 32 edges ahead, or L2-only hints were slower than none too.
//   bfloat16 and float16 faster with: 100K nodes, D = 128, bf16 random 55 with against 66
//   without, sorted 30 / 36; fp16 49 / 74, 30 / 41; bf16 D = 256 121 / 162, 77 / 81.
//   A likely reason: widening 16-bit rows takes more instructions per byte, so the
//   out-of-order window holds fewer rows' loads without the prefetch.
// The backward's prefetch pays on both (Intel, E = 2M, D = 128 fp32, forward + backward:
// random 460 ms with, 700 without).
constexpr int64_t kPrefetchMinRowBytes = int64_t{16} << 20;

#if PYG_EDGEDOT_AVX2_CLONE
template <typename scalar_t>
bool forward_prefetch_pays() {
  static const bool intel = __builtin_cpu_is("intel");
  return !(intel && std::is_same_v<scalar_t, float>);
}
#endif

// One task per range of edges (at::parallel_for).
template <typename scalar_t, typename index_t>
void edge_dot_cpu_impl(const at::Tensor& x_src, const at::Tensor& x_dst,
                       const at::Tensor& src_index, const at::Tensor& dst_index,
                       const at::Tensor& rel, const at::Tensor& rel_index,
                       at::Tensor& out, std::atomic<int64_t>* first_bad) {
  if (out.numel() == 0) return;
  const bool has_rel = rel.defined();
  ForwardArgs<scalar_t, index_t> p;
  p.src_rows = x_src.const_data_ptr<scalar_t>();
  p.dst_rows = x_dst.const_data_ptr<scalar_t>();
  p.rel_rows = has_rel ? rel.const_data_ptr<scalar_t>() : nullptr;
  p.src_ptr = src_index.const_data_ptr<index_t>();
  p.dst_ptr = dst_index.const_data_ptr<index_t>();
  p.rel_ptr = has_rel ? rel_index.const_data_ptr<index_t>() : nullptr;
  p.out_ptr = out.mutable_data_ptr<scalar_t>();
  p.src_row_stride = x_src.stride(0);
  p.dst_row_stride = x_dst.stride(0);
  p.rel_row_stride = has_rel ? rel.stride(0) : 0;
  p.src_stride = src_index.stride(0);
  p.dst_stride = dst_index.stride(0);
  p.rel_stride = has_rel ? rel_index.stride(0) : 0;
  p.num_src = x_src.size(0);
  p.num_dst = x_dst.size(0);
  p.num_rel = has_rel ? rel.size(0) : 1;
  p.feat_dim = x_src.size(1);
  p.row_bytes = p.feat_dim * static_cast<int64_t>(sizeof(scalar_t));
  p.ahead = prefetch_distance(2 * p.row_bytes);
  p.first_bad = first_bad;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, p.feat_dim));
  using Clones =
      IsaClones<ForwardEdges, void(const ForwardArgs<scalar_t, index_t>&, int64_t, int64_t)>;
  const auto range = Clones::template pick<scalar_t, /*kFourInAvx2=*/true>();
#if PYG_EDGEDOT_AVX2_CLONE
  if constexpr (kFourDots<scalar_t>) {
    if (use_avx2() && ((p.num_src + p.num_dst) * p.row_bytes < kPrefetchMinRowBytes ||
                       !forward_prefetch_pays<scalar_t>())) {
      p.ahead = 0;  // the four-edge loops
    }
  }
#endif
  at::parallel_for(0, out.size(0), grain,
                   [&](int64_t begin, int64_t end) { range(p, begin, end); });
}

// The forward of edge_dot and edge_dot_rel (rel, rel_index undefined for edge_dot).
std::tuple<at::Tensor, at::Tensor> edge_dot_cpu(
    const at::Tensor& x_src_in, const at::Tensor& x_dst_in, const at::Tensor& rel_in,
    const at::Tensor& src_index, const at::Tensor& dst_index, const at::Tensor& rel_index,
    bool report_bad) {
  const at::Tensor x_src = unit_column_stride(x_src_in);
  const at::Tensor x_dst = unit_column_stride(x_dst_in);
  const at::Tensor rel = rel_in.defined() ? unit_column_stride(rel_in) : rel_in;
  at::Tensor out = at::empty({src_index.size(0)}, x_src.options());
  std::atomic<int64_t> first_bad{kNoBadRow};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_src.scalar_type(), "edge_dot_cpu", [&] {
    AT_DISPATCH_INDEX_TYPES(src_index.scalar_type(), "edge_dot_cpu", [&] {
      edge_dot_cpu_impl<scalar_t, index_t>(x_src, x_dst, src_index, dst_index, rel, rel_index,
                                           out, report_bad ? &first_bad : nullptr);
    });
  });
  if (!report_bad) return {out, at::empty({0}, src_index.options().dtype(at::kLong))};
  return {out, first_bad_tensor(first_bad, src_index)};
}

// out[scatter[e], :] += grad[e] * (x_other[other[e], :] *) x_gather[gather[e], :], the
// bracketed factor only when x_other is defined (the relation-weighted gradients).
// Parallel over blocks of columns, serial over edges within a block: each output element is
// summed by one thread in edge order, so the result is deterministic without atomics.
template <typename scalar_t, typename index_t>
void edge_dot_grad_cpu_impl(const at::Tensor& grad_out, const at::Tensor& x_gather,
                            const at::Tensor& scatter_index, const at::Tensor& gather_index,
                            const at::Tensor& x_other, const at::Tensor& other_index,
                            at::Tensor& acc /* [num_rows, D] opmath, zeroed */) {
  using acc_t = at::opmath_type<scalar_t>;
  const scalar_t* grad_ptr = grad_out.const_data_ptr<scalar_t>();   // [E], strided
  const scalar_t* rows = x_gather.const_data_ptr<scalar_t>();       // [N_gather, D], row stride
  const index_t* scatter_ptr = scatter_index.const_data_ptr<index_t>();  // [E], strided
  const index_t* gather_ptr = gather_index.const_data_ptr<index_t>();    // [E], strided
  const bool triple = x_other.defined();
  const scalar_t* other_rows = triple ? x_other.const_data_ptr<scalar_t>() : nullptr;
  const index_t* other_ptr = triple ? other_index.const_data_ptr<index_t>() : nullptr;
  const int64_t other_row_stride = triple ? x_other.stride(0) : 0;
  const int64_t other_stride = triple ? other_index.stride(0) : 0;
  const int64_t num_other = triple ? x_other.size(0) : 1;
  acc_t* acc_ptr = acc.mutable_data_ptr<acc_t>();                   // [num_rows, D]
  const int64_t grad_stride = grad_out.stride(0), row_stride = x_gather.stride(0);
  const int64_t scatter_stride = scatter_index.stride(0), gather_stride = gather_index.stride(0);
  const int64_t num_rows = acc.size(0), num_gather = x_gather.size(0);
  const int64_t feat_dim = x_gather.size(1), num_edges = grad_out.size(0);
  constexpr int64_t kBlockCols = 16;
  const int64_t num_blocks = (feat_dim + kBlockCols - 1) / kBlockCols;

  at::parallel_for(0, num_blocks, 1, [&](int64_t block_begin, int64_t block_end) {
    const int64_t k0 = block_begin * kBlockCols;
    const int64_t k1 = std::min(feat_dim, block_end * kBlockCols);
    const int64_t slice = k1 - k0;
    const int64_t ahead = prefetch_distance(slice * (sizeof(scalar_t) + sizeof(acc_t)));
    for (int64_t e = 0; e < num_edges; ++e) {
      if (e + ahead < num_edges) {  // the gathered row slice and the target slice, ahead
        const int64_t ps = static_cast<int64_t>(scatter_ptr[(e + ahead) * scatter_stride]);
        const int64_t pg = static_cast<int64_t>(gather_ptr[(e + ahead) * gather_stride]);
        if (pg >= 0 && pg < num_gather) {
          prefetch_lines(rows + pg * row_stride + k0, slice * sizeof(scalar_t));
        }
        if (ps >= 0 && ps < num_rows) {
          prefetch_lines(acc_ptr + ps * feat_dim + k0, slice * sizeof(acc_t), true);
        }
      }
      const int64_t s = static_cast<int64_t>(scatter_ptr[e * scatter_stride]);
      const int64_t g = static_cast<int64_t>(gather_ptr[e * gather_stride]);
      const int64_t o = triple ? static_cast<int64_t>(other_ptr[e * other_stride]) : 0;
      if (s < 0 || s >= num_rows || g < 0 || g >= num_gather || o < 0 || o >= num_other) {
        continue;
      }
      const acc_t weight = static_cast<acc_t>(grad_ptr[e * grad_stride]);
      const scalar_t* row = rows + g * row_stride;
      acc_t* target = acc_ptr + s * feat_dim;
      if (triple) {
        const scalar_t* other = other_rows + o * other_row_stride;
        for (int64_t k = k0; k < k1; ++k) {
          target[k] += weight * static_cast<acc_t>(other[k]) * static_cast<acc_t>(row[k]);
        }
      } else {
        for (int64_t k = k0; k < k1; ++k) target[k] += weight * static_cast<acc_t>(row[k]);
      }
    }
  });
}

// The gradients of edge_dot and edge_dot_rel (x_other, other_index undefined for edge_dot's).
at::Tensor edge_dot_grad_cpu(const at::Tensor& grad_out, const at::Tensor& x_gather_in,
                             const at::Tensor& scatter_index, const at::Tensor& gather_index,
                             const at::Tensor& x_other_in, const at::Tensor& other_index,
                             int64_t num_rows) {
  const at::Tensor x_gather = unit_column_stride(x_gather_in);
  const at::Tensor x_other = x_other_in.defined() ? unit_column_stride(x_other_in) : x_other_in;
  const auto acc_type = at::toOpMathType(x_gather.scalar_type());
  at::Tensor acc = at::zeros({num_rows, x_gather.size(1)}, x_gather.options().dtype(acc_type));
  if (acc.numel() == 0 || grad_out.numel() == 0) return acc.to(x_gather.scalar_type());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_gather.scalar_type(), "edge_dot_grad_cpu", [&] {
    AT_DISPATCH_INDEX_TYPES(scatter_index.scalar_type(), "edge_dot_grad_cpu", [&] {
      edge_dot_grad_cpu_impl<scalar_t, index_t>(grad_out, x_gather, scatter_index,
                                                gather_index, x_other, other_index, acc);
    });
  });
  return acc.scalar_type() == x_gather.scalar_type() ? acc : acc.to(x_gather.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_edgedot, CPU, m) {
  impl_edge_dot_ops<&edge_dot_cpu, &edge_dot_grad_cpu>(m);
}

}  // namespace pyg_edgedot
