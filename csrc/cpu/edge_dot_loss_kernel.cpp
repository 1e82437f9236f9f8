// CPU kernels of edge_dot_loss (schemas in csrc/edge_dot_loss.cpp): the negatives are drawn
// inside the kernels from the counter-based generator (csrc/edge_dot_loss_common.h, the same
// per-element functions as the CUDA kernels), never materialized beyond a block of pairs.
//
// Forward: fixed blocks of positives (kBlockPairs pairs, a function of K only), in parallel
// with at::parallel_for. A block writes its pairs (the positive, then its K negatives) to a
// small per-task buffer, scores them with the row dot product edge_dot uses (csrc/cpu/
// row_dot.h, so a pair scores the same bits as under edge_dot; the score is rounded to the
// features' dtype, as edge_dot returns it), and turns them into the loss terms and
// dloss/dscore (score_grad). Each block's terms are summed in order in opmath, and the blocks'
// sums are added in block order in float64: the loss has the same bits on any number of
// threads. A positive with an index out of range lowers first_bad (atomically: the minimum
// does not depend on the order), adds NaN to the loss and zeros to score_grad.
//
// Backward: chunks of positives (kGradChunkPairs pairs). Each chunk's pairs and weights
// grad_loss * score_grad (/ count for "mean", rounded to the features' dtype as the composite
// and edge_dot_grad's input are) are written in parallel to a chunk-sized buffer, then the
// feature columns are cut into one slice per thread and each thread adds every pair of the
// chunk, in order, into its columns of both gradients: each output element is summed by one
// thread in pair order, as edge_dot_grad's CPU kernel does, so the gradients are bitwise
// deterministic whatever the number of threads (the column split changes who adds, never the
// order). Memory: the opmath gradients plus one chunk's pairs; no [E * K] buffer.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "adj_index.h"
#include "common.h"
#include "edge_dot_loss_common.h"
#include "first_bad.h"
#include "prefetch.h"
#include "row_dot.h"

namespace pyg_edgedot {
namespace {

using loss::Loss;
using loss::Space;

constexpr int64_t kBlockPairs = 4096;         // pairs per forward block, at least one positive
constexpr int64_t kGradChunkPairs = 1 << 16;  // pairs per backward chunk
constexpr int64_t kColumnBlock = 16;          // backward column slices are multiples of this

// A pair to score; src < 0: its positive has an index out of range and is skipped.
struct Pair {
  int64_t src, dst;
};

template <typename scalar_t, typename index_t>
struct Args {
  const scalar_t* src_rows;  // [N_src, D], row stride src_row_stride
  const scalar_t* dst_rows;  // [N_dst, D]
  const index_t* src_ptr;    // [E], strided
  const index_t* dst_ptr;    // [E], strided
  int64_t src_row_stride, dst_row_stride, src_stride, dst_stride;
  int64_t num_src_rows, num_dst_rows, feat_dim, ahead;
  Space space;
};

// The pairs of positives [e0, e1) into pairs[(e - e0) * (1 + K) + j]: j = 0 the positive,
// j >= 1 its negative j - 1. With a sampler the draws are interleaved in passes over the
// block, each prefetching what the next one reads (the source's row_ptr entries, the rank's
// bucket, its stretch of adj): the misses of many negatives overlap instead of queueing.
// Every pass computes what loss::negative does, so the pairs are the same.
template <typename scalar_t, typename index_t>
PYG_EDGEDOT_INLINE void make_pairs(const Args<scalar_t, index_t>& p, int64_t e0, int64_t e1,
                                   Pair* pairs, std::atomic<int64_t>* first_bad) {
  const Space& sp = p.space;
  const int64_t k_neg = sp.num_negatives, width = 1 + k_neg;
  const bool staged = sp.row_ptr != nullptr || sp.adj_index.bucket != nullptr;
  for (int64_t e = e0; e < e1; ++e) {
    Pair* out = pairs + (e - e0) * width;
    const int64_t s = static_cast<int64_t>(p.src_ptr[e * p.src_stride]);
    const int64_t d = static_cast<int64_t>(p.dst_ptr[e * p.dst_stride]);
    if (s < 0 || s >= p.num_src_rows || d < 0 || d >= p.num_dst_rows) {
      for (int64_t j = 0; j <= k_neg; ++j) out[j] = Pair{-1, -1};
      if (first_bad != nullptr) record_bad_row(*first_bad, e);
      continue;
    }
    out[0] = Pair{s, d};
    if (!staged) {
      for (int64_t k = 0; k < k_neg; ++k) {
        loss::negative(sp, e, k, s, out[k + 1].src, out[k + 1].dst);
      }
    } else if (sp.row_ptr != nullptr && s < sp.num_src) {
      prefetch_lines(sp.row_ptr + s, 2 * sizeof(int64_t));
    }
  }
  if (!staged) return;
  const loss::AdjIndex& index = sp.adj_index;
  // ranks (in .src; .dst keeps the positive's source), their buckets prefetched
  for (int64_t e = e0; e < e1; ++e) {
    Pair* out = pairs + (e - e0) * width;
    if (out[0].src < 0) continue;
    for (int64_t k = 0; k < k_neg; ++k) {
      const int64_t rank = loss::negative_rank(sp, e, k, out[0].src);
      out[k + 1] = Pair{rank, out[0].src};
      if (index.bucket != nullptr && rank >= 0 && (rank >> index.shift) < index.num_buckets) {
        prefetch_lines(index.bucket + (rank >> index.shift), 2 * sizeof(int64_t));
      }
    }
  }
  // the stretches of adj prefetched
  if (index.bucket != nullptr) {
    for (int64_t i = 0; i < (e1 - e0) * width; ++i) {
      if (i % width == 0 || pairs[i - i % width].src < 0) continue;
      const int64_t rank = pairs[i].src;
      if (rank >= 0 && (rank >> index.shift) < index.num_buckets) {
        // clamped as rank_to_key clamps: a caller's index may hold any values
        const int64_t lo = std::min(std::max<int64_t>(index.bucket[rank >> index.shift], 0),
                                    sp.num_adj);
        prefetch_lines(sp.adj + lo, sizeof(int64_t));
      }
    }
  }
  // keys, pairs
  for (int64_t i = 0; i < (e1 - e0) * width; ++i) {
    if (i % width == 0 || pairs[i - i % width].src < 0) continue;
    const int64_t rank = pairs[i].src, pos_src = pairs[i].dst;
    loss::negative_pair(sp, loss::rank_to_key(sp.adj, sp.num_adj, index, rank), pos_src,
                        pairs[i].src, pairs[i].dst);
  }
}

// A pair's rows, asked for ahead of their use (nothing for a pair with an index out of range).
template <typename scalar_t, typename index_t>
PYG_EDGEDOT_INLINE void prefetch_pair(const Args<scalar_t, index_t>& p, const Pair& pair,
                                      int64_t row_bytes) {
  if (pair.src < 0) return;
  prefetch_lines(p.src_rows + pair.src * p.src_row_stride, row_bytes);
  prefetch_lines(p.dst_rows + pair.dst * p.dst_row_stride, row_bytes);
}

// Block [e0, e1) of the forward: its pairs, scores, score_grad rows; returns its terms' sum.
// Dots: one pair at a time, or four (row_dot.h's four-pair forms, the same bits). Four at a
// time in AVX-512 against the AVX2 one-pair loop on an Intel Xeon (2026-12-05, 100K nodes,
// 250K positives, D = 64, one thread, min of 15, two rounds): K = 1 fp32 20.4-23.9 ms against
// 24.4-24.9, bf16 15.8-17.7 against 18.8-22.1; K = 4 (an A/B in one process) fp32 56 against
// 69, bf16 45 against 55. The four-pair AVX2 form measured no gain on an AMD EPYC
// (benchmarks/NOTES.md, tried and rejected), so the AVX2 clone keeps one at a time.
template <typename scalar_t, typename index_t, typename Dots = OnePairAtATime>
inline at::opmath_type<scalar_t> forward_block(
    const Args<scalar_t, index_t>& p, Loss loss, int64_t e0, int64_t e1, Pair* pairs,
    at::opmath_type<scalar_t>* scores, scalar_t* score_grad, std::atomic<int64_t>* first_bad) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t width = 1 + p.space.num_negatives;
  const int64_t n = (e1 - e0) * width;
  const int64_t row_bytes = p.feat_dim * static_cast<int64_t>(sizeof(scalar_t));
  make_pairs(p, e0, e1, pairs, first_bad);
  auto score_one = [&](int64_t i) {  // rounded to the features' dtype, as edge_dot returns it
    const acc_t dot = row_dot<scalar_t, acc_t>(p.src_rows + pairs[i].src * p.src_row_stride,
                                               p.dst_rows + pairs[i].dst * p.dst_row_stride,
                                               p.feat_dim);
    scores[i] = static_cast<acc_t>(static_cast<scalar_t>(dot));
  };
  int64_t i = 0;
  if constexpr (!std::is_same_v<Dots, OnePairAtATime>) {
    for (; i + 4 <= n; i += 4) {
      for (int j = 0; j < 4; ++j) {
        prefetch_pair(p, pairs[std::min(i + p.ahead + j, n - 1)], row_bytes);
      }
      const scalar_t* a[4];
      const scalar_t* b[4];
      bool bad = false;
      for (int j = 0; j < 4; ++j) {
        const Pair& pair = pairs[i + j];
        bad |= pair.src < 0;
        a[j] = p.src_rows + std::max<int64_t>(pair.src, 0) * p.src_row_stride;
        b[j] = p.dst_rows + std::max<int64_t>(pair.dst, 0) * p.dst_row_stride;
      }
      if (bad) {
        for (int j = 0; j < 4; ++j) {
          if (pairs[i + j].src >= 0) score_one(i + j);
        }
        continue;
      }
      scalar_t four[4];
      Dots::score4(a, b, p.feat_dim, four);
      for (int j = 0; j < 4; ++j) scores[i + j] = static_cast<acc_t>(four[j]);
    }
  }
  for (; i < n; ++i) {
    if (i + p.ahead < n) prefetch_pair(p, pairs[i + p.ahead], row_bytes);
    if (pairs[i].src >= 0) score_one(i);
  }
  acc_t sum = 0;
  for (int64_t e = e0; e < e1; ++e) {
    const int64_t first = (e - e0) * width;
    const acc_t* s = scores + first;
    scalar_t* grad = score_grad + e * width;
    if (pairs[first].src < 0) {
      sum += std::numeric_limits<acc_t>::quiet_NaN();
      for (int64_t j = 0; j < width; ++j) grad[j] = scalar_t(0);
      continue;
    }
    sum += loss::positive_terms<acc_t>(loss, s, grad, width);
  }
  return sum;
}

// The forward's block loop (row_dot.h's IsaClones compiles it per ISA).
struct ForwardBlocks {
  template <typename Dots, typename scalar_t, typename index_t>
  static at::opmath_type<scalar_t> run(const Args<scalar_t, index_t>& p, Loss loss, int64_t e0,
                                       int64_t e1, Pair* pairs,
                                       at::opmath_type<scalar_t>* scores, scalar_t* score_grad,
                                       std::atomic<int64_t>* first_bad) {
    return forward_block<scalar_t, index_t, Dots>(p, loss, e0, e1, pairs, scores, score_grad,
                                                  first_bad);
  }
};

// The call's bucket index over adj (adj_index.h): the caller's kept one, else built for the
// call (one pass over adj) when adj is long enough that binary searches would miss the cache.
at::Tensor call_adj_index(const char* op, const loss::Call& call, loss::AdjIndex& index) {
  return cpu::adj_index_of(op, call.adj, call.space.num_ranks,
                           call.adj_index.defined() ? &call.adj_index : nullptr, index);
}

// What both ops read: the op's arguments as Args, the seed read from its CPU tensor.
template <typename scalar_t, typename index_t>
Args<scalar_t, index_t> make_args(const loss::Call& call, const loss::AdjIndex& index) {
  const at::Tensor &x_src = call.x_src, &x_dst = call.x_dst;
  const at::Tensor &src_index = call.src_index, &dst_index = call.dst_index;
  const at::Tensor &adj = call.adj, &row_ptr = call.row_ptr;
  Space space = call.space;
  Args<scalar_t, index_t> p;
  p.src_rows = x_src.const_data_ptr<scalar_t>();
  p.dst_rows = x_dst.const_data_ptr<scalar_t>();
  p.src_ptr = src_index.const_data_ptr<index_t>();
  p.dst_ptr = dst_index.const_data_ptr<index_t>();
  p.src_row_stride = x_src.stride(0);
  p.dst_row_stride = x_dst.stride(0);
  p.src_stride = src_index.stride(0);
  p.dst_stride = dst_index.stride(0);
  p.num_src_rows = x_src.size(0);
  p.num_dst_rows = x_dst.size(0);
  p.feat_dim = x_src.size(1);
  p.ahead = prefetch_distance(2 * p.feat_dim * static_cast<int64_t>(sizeof(scalar_t)));
  space.adj = adj.const_data_ptr<int64_t>();
  space.row_ptr = row_ptr.numel() > 0 ? row_ptr.const_data_ptr<int64_t>() : nullptr;
  space.adj_index = index;
  space.key = loss::mix64(static_cast<uint64_t>(call.seed.item<int64_t>()));
  p.space = space;
  return p;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> edge_dot_loss_cpu(const loss::Call& call) {
  const loss::Options& options = call.options;
  const at::Tensor &x_src = call.x_src, &src_index = call.src_index;
  const int64_t num_edges = call.num_edges, width = call.width;
  loss::AdjIndex index;
  const at::Tensor bucket = call_adj_index("edge_dot_loss", call, index);
  at::Tensor score_grad = at::empty({num_edges, width}, x_src.options());
  const int64_t block_pos = std::max<int64_t>(1, kBlockPairs / width);
  const int64_t num_blocks = (num_edges + block_pos - 1) / block_pos;
  std::vector<double> partial(num_blocks, 0.0);
  std::atomic<int64_t> first_bad{kNoBadRow};
  const auto acc_type = at::toOpMathType(x_src.scalar_type());
  double total = 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_src.scalar_type(), "edge_dot_loss_cpu", [&] {
    AT_DISPATCH_INDEX_TYPES(src_index.scalar_type(), "edge_dot_loss_cpu", [&] {
      using acc_t = at::opmath_type<scalar_t>;
      const auto p = make_args<scalar_t, index_t>(call, index);
      scalar_t* grad_ptr = score_grad.mutable_data_ptr<scalar_t>();
      using Clones = IsaClones<ForwardBlocks,
                               acc_t(const Args<scalar_t, index_t>&, Loss, int64_t, int64_t,
                                     Pair*, acc_t*, scalar_t*, std::atomic<int64_t>*)>;
      // The AVX2 clone scores one pair at a time (forward_block says why).
      const auto block = Clones::template pick<scalar_t, /*kFourInAvx2=*/false>();
      at::parallel_for(0, num_blocks, 1, [&](int64_t b0, int64_t b1) {
        std::vector<Pair> pairs(block_pos * width);
        std::vector<acc_t> scores(block_pos * width);
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t e0 = b * block_pos, e1 = std::min(num_edges, e0 + block_pos);
          partial[b] = static_cast<double>(block(p, options.loss, e0, e1, pairs.data(),
                                                 scores.data(), grad_ptr, &first_bad));
        }
      });
    });
  });
  for (const double part : partial) total += part;  // block order: the same on any threads
  if (options.mean) total /= static_cast<double>(call.num_terms);
  at::Tensor out = at::scalar_tensor(total, x_src.options().dtype(acc_type))
                       .to(x_src.scalar_type());
  return {out, first_bad_tensor(first_bad, src_index), score_grad};
}

// ---------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------

template <typename acc_t>
struct WeightedPair {
  int64_t src, dst;  // src < 0: skipped
  acc_t weight;
};

// The chunk's pairs and both gradients (either may be null), for scatter_columns.
template <typename scalar_t>
struct ScatterArgs {
  const WeightedPair<at::opmath_type<scalar_t>>* pairs;
  int64_t n;
  const scalar_t* src_rows;
  int64_t src_row_stride;
  const scalar_t* dst_rows;
  int64_t dst_row_stride;
  at::opmath_type<scalar_t>* grad_src;
  at::opmath_type<scalar_t>* grad_dst;
  int64_t feat_dim;
};

// Columns [k0, k1) of both gradients from the chunk's pairs, in order. The arguments come by
// value, so the loop keeps them in registers whatever the gradient stores might alias.
template <typename scalar_t>
PYG_EDGEDOT_INLINE void scatter_columns(const ScatterArgs<scalar_t> a, int64_t k0, int64_t k1) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t slice = k1 - k0;
  const int64_t sides = (a.grad_src != nullptr) + (a.grad_dst != nullptr);
  const int64_t ahead = prefetch_distance(sides * slice * (sizeof(scalar_t) + sizeof(acc_t)));
  for (int64_t i = 0; i < a.n; ++i) {
    if (i + ahead < a.n && a.pairs[i + ahead].src >= 0) {
      const int64_t ps = a.pairs[i + ahead].src, pd = a.pairs[i + ahead].dst;
      if (a.grad_src != nullptr) {
        prefetch_lines(a.dst_rows + pd * a.dst_row_stride + k0, slice * sizeof(scalar_t));
        prefetch_lines(a.grad_src + ps * a.feat_dim + k0, slice * sizeof(acc_t), true);
      }
      if (a.grad_dst != nullptr) {
        prefetch_lines(a.src_rows + ps * a.src_row_stride + k0, slice * sizeof(scalar_t));
        prefetch_lines(a.grad_dst + pd * a.feat_dim + k0, slice * sizeof(acc_t), true);
      }
    }
    const int64_t s = a.pairs[i].src, d = a.pairs[i].dst;
    if (s < 0) continue;
    const acc_t w = a.pairs[i].weight;
    if (a.grad_src != nullptr) {
      const scalar_t* row = a.dst_rows + d * a.dst_row_stride;
      acc_t* target = a.grad_src + s * a.feat_dim;
      for (int64_t k = k0; k < k1; ++k) target[k] += w * static_cast<acc_t>(row[k]);
    }
    if (a.grad_dst != nullptr) {
      const scalar_t* row = a.src_rows + s * a.src_row_stride;
      acc_t* target = a.grad_dst + d * a.feat_dim;
      for (int64_t k = k0; k < k1; ++k) target[k] += w * static_cast<acc_t>(row[k]);
    }
  }
}

template <typename scalar_t>
void scatter_columns_baseline(const ScatterArgs<scalar_t> a, int64_t k0, int64_t k1) {
  scatter_columns(a, k0, k1);
}

#if PYG_EDGEDOT_AVX2_CLONE
template <typename scalar_t>
PYG_EDGEDOT_AVX2_TARGET void scatter_columns_avx2(const ScatterArgs<scalar_t> a, int64_t k0,
                                                  int64_t k1) {
  scatter_columns(a, k0, k1);
}
#endif

template <typename scalar_t, typename index_t>
void edge_dot_loss_grad_cpu_impl(const Args<scalar_t, index_t>& p, const at::Tensor& score_grad,
                                 at::opmath_type<scalar_t> scale, at::Tensor& grad_src,
                                 at::Tensor& grad_dst) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t num_edges = score_grad.size(0), width = score_grad.size(1);
  const int64_t feat_dim = p.feat_dim;
  const scalar_t* sg = score_grad.const_data_ptr<scalar_t>();
  acc_t* gs = grad_src.defined() ? grad_src.mutable_data_ptr<acc_t>() : nullptr;
  acc_t* gd = grad_dst.defined() ? grad_dst.mutable_data_ptr<acc_t>() : nullptr;
  const int64_t chunk_pos = std::max<int64_t>(1, kGradChunkPairs / width);
  const int64_t col_blocks = (feat_dim + kColumnBlock - 1) / kColumnBlock;
  const int64_t slices = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(),
                                                                col_blocks));
  const int64_t slice_cols = (col_blocks + slices - 1) / slices * kColumnBlock;
  const int64_t num_slices = (feat_dim + slice_cols - 1) / slice_cols;
  auto scatter = &scatter_columns_baseline<scalar_t>;
#if PYG_EDGEDOT_AVX2_CLONE
  if (use_avx2()) scatter = &scatter_columns_avx2<scalar_t>;
#endif
  std::vector<WeightedPair<acc_t>> buffer(std::min(num_edges, chunk_pos) * width);
  std::vector<Pair> scratch;
  for (int64_t start = 0; start < num_edges; start += chunk_pos) {
    const int64_t stop = std::min(num_edges, start + chunk_pos);
    WeightedPair<acc_t>* pairs = buffer.data();
    at::parallel_for(start, stop, 256, [&](int64_t e0, int64_t e1) {
      std::vector<Pair> local((e1 - e0) * width);
      make_pairs(p, e0, e1, local.data(), nullptr);
      for (int64_t i = 0; i < (e1 - e0) * width; ++i) {
        const int64_t at = (e0 - start) * width + i;
        // the weight in the features' dtype, as the composite hands it to edge_dot_grad
        const acc_t w = static_cast<acc_t>(static_cast<scalar_t>(
            static_cast<acc_t>(sg[e0 * width + i]) * scale));
        pairs[at] = WeightedPair<acc_t>{local[i].src, local[i].dst, w};
      }
    });
    const ScatterArgs<scalar_t> args{pairs, (stop - start) * width, p.src_rows, p.src_row_stride,
                                     p.dst_rows, p.dst_row_stride, gs, gd, feat_dim};
    at::parallel_for(0, num_slices, 1, [&](int64_t first, int64_t last) {
      for (int64_t slice = first; slice < last; ++slice) {
        const int64_t k0 = slice * slice_cols, k1 = std::min(feat_dim, k0 + slice_cols);
        scatter(args, k0, k1);
      }
    });
  }
}

std::tuple<at::Tensor, at::Tensor> edge_dot_loss_grad_cpu(const loss::Call& call,
                                                          bool needs_src, bool needs_dst) {
  const at::Tensor &x_src = call.x_src, &x_dst = call.x_dst;
  const int64_t num_edges = call.num_edges;
  const int64_t feat_dim = x_src.size(1);
  const auto acc_type = at::toOpMathType(x_src.scalar_type());
  const auto acc_options = x_src.options().dtype(acc_type);
  at::Tensor grad_src = needs_src ? at::zeros({x_src.size(0), feat_dim}, acc_options)
                                  : at::Tensor();
  at::Tensor grad_dst = needs_dst ? at::zeros({x_dst.size(0), feat_dim}, acc_options)
                                  : at::Tensor();
  if (num_edges > 0 && feat_dim > 0 && (needs_src || needs_dst)) {
    loss::AdjIndex index;
    const at::Tensor bucket = call_adj_index("edge_dot_loss_grad", call, index);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_src.scalar_type(), "edge_dot_loss_cpu", [&] {
      AT_DISPATCH_INDEX_TYPES(call.src_index.scalar_type(), "edge_dot_loss_cpu", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        const auto p = make_args<scalar_t, index_t>(call, index);
        // as the composite: grad_loss in opmath, divided by the count in opmath for "mean"
        acc_t scale = call.grad_loss.to(acc_type).item<acc_t>();
        if (call.options.mean) scale = scale / static_cast<acc_t>(call.num_terms);
        edge_dot_loss_grad_cpu_impl<scalar_t, index_t>(p, call.score_grad, scale, grad_src,
                                                       grad_dst);
      });
    });
  }
  auto finish = [&](const at::Tensor& grad, bool needed, const at::Tensor& x) {
    if (!needed) return at::empty({0, feat_dim}, x.options());
    return grad.scalar_type() == x.scalar_type() ? grad : grad.to(x.scalar_type());
  };
  return {finish(grad_src, needs_src, x_src), finish(grad_dst, needs_dst, x_dst)};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_edgedot, CPU, m) {
  loss::impl_loss_ops<&edge_dot_loss_cpu, &edge_dot_loss_grad_cpu>(m);
}

}  // namespace pyg_edgedot
