// CPU kernels of candidate scoring and ranking: parallel over source rows (at::parallel_for);
// each source row is read once into an opmath buffer and dotted with its K candidate rows.
// Traffic: N * D source + N * K * D candidate elements read, N * K scores (or N ranks) written.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <vector>

#include "common.h"
#include "prefetch.h"

namespace pyg_edgedot {

namespace {

// The candidate rows: prefetch(cands, stride, k, count) asks for the row of the candidate a
// few places after k in this source's list (see prefetch.h), if there is one in range.
template <typename scalar_t>
struct CandidateRows {
  const scalar_t* rows;
  int64_t row_stride, num_rows, row_bytes, distance;

  CandidateRows(const scalar_t* rows, int64_t row_stride, int64_t num_rows, int64_t feat_dim)
      : rows(rows), row_stride(row_stride), num_rows(num_rows),
        row_bytes(feat_dim * static_cast<int64_t>(sizeof(scalar_t))),
        distance(prefetch_distance(row_bytes)) {}

  template <typename index_t>
  PYG_EDGEDOT_INLINE void prefetch(const index_t* cands, int64_t stride, int64_t k,
                                   int64_t count) const {
    const int64_t ahead = k + distance;
    if (ahead >= count) return;
    const int64_t c = static_cast<int64_t>(cands[ahead * stride]);
    if (c >= 0 && c < num_rows) prefetch_lines(rows + c * row_stride, row_bytes);
  }
};

// Dot product of an opmath row with a row of the input dtype, eight partial sums so the
// compiler can vectorize it. Scores and ranks both use it, so a negative equal to the
// positive candidate scores bitwise the same.
template <typename acc_t, typename scalar_t>
inline acc_t buffered_dot(const acc_t* a, const scalar_t* b, int64_t n) {
  acc_t part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int j = 0; j < 8; ++j) part[j] += a[k + j] * static_cast<acc_t>(b[k + j]);
  }
  for (; k < n; ++k) part[0] += a[k] * static_cast<acc_t>(b[k]);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

inline void record_bad_row(std::atomic<int64_t>& first_bad, int64_t row) {
  int64_t seen = first_bad.load();
  while (row < seen && !first_bad.compare_exchange_weak(seen, row)) {
  }
}

inline at::Tensor first_bad_tensor(const std::atomic<int64_t>& first_bad,
                                   const at::Tensor& like_index) {
  const int64_t bad = first_bad.load();
  const int64_t first = bad == std::numeric_limits<int64_t>::max() ? -1 : bad;
  return at::full({1}, first, like_index.options().dtype(at::kLong));
}

inline int64_t grain_rows(int64_t num_cand, int64_t feat_dim) {
  return std::max<int64_t>(1, 32768 / std::max<int64_t>(1, (num_cand + 1) * feat_dim));
}

template <typename scalar_t, typename index_t>
void score_candidates_cpu_impl(const at::Tensor& x_src, const at::Tensor& x_dst,
                               const at::Tensor& src_index, const at::Tensor& cand_index,
                               at::Tensor& out, std::atomic<int64_t>& first_bad) {
  using acc_t = at::opmath_type<scalar_t>;
  const scalar_t* src_rows = x_src.const_data_ptr<scalar_t>();    // [N_src, D], row stride
  const scalar_t* dst_rows = x_dst.const_data_ptr<scalar_t>();    // [N_dst, D], row stride
  const index_t* src_ptr = src_index.const_data_ptr<index_t>();   // [N], strided
  const index_t* cand_ptr = cand_index.const_data_ptr<index_t>(); // [N, K], strided
  scalar_t* out_ptr = out.mutable_data_ptr<scalar_t>();           // [N, K]
  const int64_t src_row_stride = x_src.stride(0), dst_row_stride = x_dst.stride(0);
  const int64_t src_stride = src_index.stride(0);
  const int64_t cand_stride0 = cand_index.stride(0), cand_stride1 = cand_index.stride(1);
  const int64_t num_src = x_src.size(0), num_dst = x_dst.size(0);
  const int64_t num_rows = out.size(0), num_cand = out.size(1), feat_dim = x_src.size(1);
  const scalar_t nan = static_cast<scalar_t>(std::numeric_limits<acc_t>::quiet_NaN());

  const CandidateRows<scalar_t> cand_rows{dst_rows, dst_row_stride, num_dst, feat_dim};
  at::parallel_for(0, num_rows, grain_rows(num_cand, feat_dim), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> source(feat_dim);
    for (int64_t n = begin; n < end; ++n) {
      const int64_t s = static_cast<int64_t>(src_ptr[n * src_stride]);
      const bool source_ok = s >= 0 && s < num_src;
      bool row_bad = !source_ok;
      if (source_ok) {
        const scalar_t* row = src_rows + s * src_row_stride;
        for (int64_t d = 0; d < feat_dim; ++d) source[d] = static_cast<acc_t>(row[d]);
      }
      scalar_t* out_row = out_ptr + n * num_cand;
      for (int64_t k = 0; k < num_cand; ++k) {
        cand_rows.prefetch(cand_ptr + n * cand_stride0, cand_stride1, k, num_cand);
        const int64_t c = static_cast<int64_t>(cand_ptr[n * cand_stride0 + k * cand_stride1]);
        if (!source_ok || c < 0 || c >= num_dst) {
          out_row[k] = nan;
          row_bad = true;
          continue;
        }
        out_row[k] = static_cast<scalar_t>(
            buffered_dot<acc_t, scalar_t>(source.data(), dst_rows + c * dst_row_stride, feat_dim));
      }
      if (row_bad) record_bad_row(first_bad, n);
    }
  });
}

std::tuple<at::Tensor, at::Tensor> score_candidates_cpu(const at::Tensor& x_src_in,
                                                        const at::Tensor& x_dst_in,
                                                        const at::Tensor& src_index,
                                                        const at::Tensor& cand_index) {
  const at::Tensor x_src = unit_column_stride(x_src_in);
  const at::Tensor x_dst = unit_column_stride(x_dst_in);
  at::Tensor out = at::empty({cand_index.size(0), cand_index.size(1)}, x_src.options());
  std::atomic<int64_t> first_bad{std::numeric_limits<int64_t>::max()};
  if (src_index.size(0) > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_src.scalar_type(), "score_candidates_cpu", [&] {
      AT_DISPATCH_INDEX_TYPES(src_index.scalar_type(), "score_candidates_cpu", [&] {
        score_candidates_cpu_impl<scalar_t, index_t>(x_src, x_dst, src_index, cand_index, out,
                                                     first_bad);
      });
    });
  }
  return {out, first_bad_tensor(first_bad, src_index)};
}

// One task per range of source rows: the positive and the K negatives are scored by the same
// buffered_dot, rounded to the input dtype, and counted; nothing of size K is kept.
template <typename scalar_t, typename index_t>
void rank_candidates_cpu_impl(const at::Tensor& x_src, const at::Tensor& x_dst,
                              const at::Tensor& src_index, const at::Tensor& pos_index,
                              const at::Tensor& neg_index, at::Tensor& rank,
                              std::atomic<int64_t>& first_bad) {
  using acc_t = at::opmath_type<scalar_t>;
  const scalar_t* src_rows = x_src.const_data_ptr<scalar_t>();   // [N_src, D], row stride
  const scalar_t* dst_rows = x_dst.const_data_ptr<scalar_t>();   // [N_dst, D], row stride
  const index_t* src_ptr = src_index.const_data_ptr<index_t>();  // [N], strided
  const index_t* pos_ptr = pos_index.const_data_ptr<index_t>();  // [N], strided
  const index_t* neg_ptr = neg_index.const_data_ptr<index_t>();  // [N, K], strided
  float* rank_ptr = rank.mutable_data_ptr<float>();              // [N]
  const int64_t src_row_stride = x_src.stride(0), dst_row_stride = x_dst.stride(0);
  const int64_t src_stride = src_index.stride(0), pos_stride = pos_index.stride(0);
  const int64_t neg_stride0 = neg_index.stride(0), neg_stride1 = neg_index.stride(1);
  const int64_t num_src = x_src.size(0), num_dst = x_dst.size(0);
  const int64_t num_rows = src_index.size(0), num_cand = neg_index.size(1);
  const int64_t feat_dim = x_src.size(1);
  auto rounded = [](acc_t score) { return static_cast<acc_t>(static_cast<scalar_t>(score)); };

  const CandidateRows<scalar_t> cand_rows{dst_rows, dst_row_stride, num_dst, feat_dim};
  at::parallel_for(0, num_rows, grain_rows(num_cand, feat_dim), [&](int64_t begin, int64_t end) {
    std::vector<acc_t> source(feat_dim);
    for (int64_t n = begin; n < end; ++n) {
      const int64_t s = static_cast<int64_t>(src_ptr[n * src_stride]);
      const int64_t p = static_cast<int64_t>(pos_ptr[n * pos_stride]);
      bool row_bad = s < 0 || s >= num_src || p < 0 || p >= num_dst;
      int64_t greater = 0, greater_equal = 0;
      if (!row_bad && num_cand > 0) {
        const scalar_t* row = src_rows + s * src_row_stride;
        for (int64_t d = 0; d < feat_dim; ++d) source[d] = static_cast<acc_t>(row[d]);
        const acc_t pos = rounded(buffered_dot<acc_t, scalar_t>(
            source.data(), dst_rows + p * dst_row_stride, feat_dim));
        for (int64_t k = 0; k < num_cand; ++k) {
          cand_rows.prefetch(neg_ptr + n * neg_stride0, neg_stride1, k, num_cand);
          const int64_t c = static_cast<int64_t>(neg_ptr[n * neg_stride0 + k * neg_stride1]);
          if (c < 0 || c >= num_dst) {
            row_bad = true;
            break;
          }
          const acc_t neg = rounded(buffered_dot<acc_t, scalar_t>(
              source.data(), dst_rows + c * dst_row_stride, feat_dim));
          greater += neg > pos;
          greater_equal += neg >= pos;
        }
      }
      if (row_bad) {
        rank_ptr[n] = std::numeric_limits<float>::quiet_NaN();
        record_bad_row(first_bad, n);
      } else {
        // OGB: 0.5 * (optimistic + pessimistic) + 1, in float32.
        rank_ptr[n] = 0.5f * static_cast<float>(greater + greater_equal) + 1.0f;
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor> rank_candidates_cpu(
    const at::Tensor& x_src_in, const at::Tensor& x_dst_in, const at::Tensor& src_index,
    const at::Tensor& pos_index, const at::Tensor& neg_index) {
  const at::Tensor x_src = unit_column_stride(x_src_in);
  const at::Tensor x_dst = unit_column_stride(x_dst_in);
  at::Tensor rank = at::empty({src_index.size(0)}, x_src.options().dtype(at::kFloat));
  std::atomic<int64_t> first_bad{std::numeric_limits<int64_t>::max()};
  if (src_index.size(0) > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_src.scalar_type(), "rank_candidates_cpu", [&] {
      AT_DISPATCH_INDEX_TYPES(src_index.scalar_type(), "rank_candidates_cpu", [&] {
        rank_candidates_cpu_impl<scalar_t, index_t>(x_src, x_dst, src_index, pos_index,
                                                    neg_index, rank, first_bad);
      });
    });
  }
  return {rank, first_bad_tensor(first_bad, src_index)};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_edgedot, CPU, m) {
  impl_candidate_ops<&score_candidates_cpu, &rank_candidates_cpu>(m);
}

}  // namespace pyg_edgedot
