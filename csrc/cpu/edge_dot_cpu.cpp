// CPU kernels of pyg_edgedot: fused, parallel with at::parallel_for, no [E, D] intermediate.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <limits>

#include "common.h"

namespace pyg_edgedot {
namespace {

// Dot product of two rows with eight partial sums, so the compiler can vectorize it.
template <typename scalar_t, typename acc_t>
inline acc_t row_dot(const scalar_t* a, const scalar_t* b, int64_t n) {
  acc_t part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int j = 0; j < 8; ++j) {
      part[j] += static_cast<acc_t>(a[k + j]) * static_cast<acc_t>(b[k + j]);
    }
  }
  for (; k < n; ++k) part[0] += static_cast<acc_t>(a[k]) * static_cast<acc_t>(b[k]);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// One task per range of edges; each edge reads its two rows once and writes one score.
template <typename scalar_t, typename index_t>
void edge_dot_cpu_impl(const at::Tensor& x_src, const at::Tensor& x_dst,
                       const at::Tensor& src_index, const at::Tensor& dst_index,
                       at::Tensor& out, std::atomic<int64_t>& first_bad) {
  using acc_t = at::opmath_type<scalar_t>;
  const scalar_t* src_rows = x_src.const_data_ptr<scalar_t>();  // [N_src, D], row stride
  const scalar_t* dst_rows = x_dst.const_data_ptr<scalar_t>();  // [N_dst, D], row stride
  const index_t* src_ptr = src_index.const_data_ptr<index_t>();  // [E], strided
  const index_t* dst_ptr = dst_index.const_data_ptr<index_t>();  // [E], strided
  scalar_t* out_ptr = out.mutable_data_ptr<scalar_t>();          // [E]
  const int64_t src_row_stride = x_src.stride(0), dst_row_stride = x_dst.stride(0);
  const int64_t src_stride = src_index.stride(0), dst_stride = dst_index.stride(0);
  const int64_t num_src = x_src.size(0), num_dst = x_dst.size(0);
  const int64_t feat_dim = x_src.size(1);
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, feat_dim));
  const scalar_t nan = static_cast<scalar_t>(std::numeric_limits<acc_t>::quiet_NaN());

  if (out.numel() == 0) return;
  at::parallel_for(0, out.size(0), grain, [&](int64_t begin, int64_t end) {
    for (int64_t e = begin; e < end; ++e) {
      const int64_t s = static_cast<int64_t>(src_ptr[e * src_stride]);
      const int64_t d = static_cast<int64_t>(dst_ptr[e * dst_stride]);
      if (s < 0 || s >= num_src || d < 0 || d >= num_dst) {
        out_ptr[e] = nan;
        int64_t seen = first_bad.load();
        while (e < seen && !first_bad.compare_exchange_weak(seen, e)) {
        }
        continue;
      }
      out_ptr[e] = static_cast<scalar_t>(row_dot<scalar_t, acc_t>(
          src_rows + s * src_row_stride, dst_rows + d * dst_row_stride, feat_dim));
    }
  });
}

std::tuple<at::Tensor, at::Tensor> edge_dot_cpu(const at::Tensor& x_src_in,
                                                const at::Tensor& x_dst_in,
                                                const at::Tensor& src_index,
                                                const at::Tensor& dst_index) {
  check_edge_dot_args(x_src_in, x_dst_in, src_index, dst_index);
  const at::Tensor x_src = unit_column_stride(x_src_in);
  const at::Tensor x_dst = unit_column_stride(x_dst_in);
  at::Tensor out = at::empty({src_index.size(0)}, x_src.options());
  std::atomic<int64_t> first_bad{std::numeric_limits<int64_t>::max()};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_src.scalar_type(), "edge_dot_cpu", [&] {
    AT_DISPATCH_INDEX_TYPES(src_index.scalar_type(), "edge_dot_cpu", [&] {
      edge_dot_cpu_impl<scalar_t, index_t>(x_src, x_dst, src_index, dst_index, out, first_bad);
    });
  });
  const int64_t bad = first_bad.load();
  const int64_t first = bad == std::numeric_limits<int64_t>::max() ? -1 : bad;
  return {out, at::full({1}, first, src_index.options().dtype(at::kLong))};
}

// Parallel over blocks of columns, serial over edges within a block: each output element is
// summed by one thread in edge order, so the result is deterministic without atomics.
template <typename scalar_t, typename index_t>
void edge_dot_grad_cpu_impl(const at::Tensor& grad_out, const at::Tensor& x_gather,
                            const at::Tensor& scatter_index, const at::Tensor& gather_index,
                            at::Tensor& acc /* [num_rows, D] opmath, zeroed */) {
  using acc_t = at::opmath_type<scalar_t>;
  const scalar_t* grad_ptr = grad_out.const_data_ptr<scalar_t>();   // [E], strided
  const scalar_t* rows = x_gather.const_data_ptr<scalar_t>();       // [N_gather, D], row stride
  const index_t* scatter_ptr = scatter_index.const_data_ptr<index_t>();  // [E], strided
  const index_t* gather_ptr = gather_index.const_data_ptr<index_t>();    // [E], strided
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
    for (int64_t e = 0; e < num_edges; ++e) {
      const int64_t s = static_cast<int64_t>(scatter_ptr[e * scatter_stride]);
      const int64_t g = static_cast<int64_t>(gather_ptr[e * gather_stride]);
      if (s < 0 || s >= num_rows || g < 0 || g >= num_gather) continue;
      const acc_t weight = static_cast<acc_t>(grad_ptr[e * grad_stride]);
      const scalar_t* row = rows + g * row_stride;
      acc_t* target = acc_ptr + s * feat_dim;
      for (int64_t k = k0; k < k1; ++k) target[k] += weight * static_cast<acc_t>(row[k]);
    }
  });
}

at::Tensor edge_dot_grad_cpu(const at::Tensor& grad_out, const at::Tensor& x_gather_in,
                             const at::Tensor& scatter_index, const at::Tensor& gather_index,
                             int64_t num_rows, bool deterministic) {
  (void)deterministic;  // always deterministic on the CPU
  check_edge_dot_grad_args(grad_out, x_gather_in, scatter_index, gather_index, num_rows);
  const at::Tensor x_gather = unit_column_stride(x_gather_in);
  const auto acc_type = at::toOpMathType(x_gather.scalar_type());
  at::Tensor acc = at::zeros({num_rows, x_gather.size(1)}, x_gather.options().dtype(acc_type));
  if (acc.numel() == 0 || grad_out.numel() == 0) return acc.to(x_gather.scalar_type());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_gather.scalar_type(), "edge_dot_grad_cpu", [&] {
    AT_DISPATCH_INDEX_TYPES(scatter_index.scalar_type(), "edge_dot_grad_cpu", [&] {
      edge_dot_grad_cpu_impl<scalar_t, index_t>(grad_out, x_gather, scatter_index,
                                                gather_index, acc);
    });
  });
  return acc.scalar_type() == x_gather.scalar_type() ? acc : acc.to(x_gather.scalar_type());
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_edgedot, CPU, m) {
  m.impl("edge_dot", &edge_dot_cpu);
  m.impl("edge_dot_grad", &edge_dot_grad_cpu);
}

}  // namespace pyg_edgedot
