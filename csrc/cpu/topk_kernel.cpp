// CPU kernel of topk_dst (schema in csrc/topk.cpp): the k best destinations of every source,
// excluded pairs left out, without the [N, M] score matrix.
//
// Parallel over blocks of kBlockRows sources (at::parallel_for). Each task scores its block
// against one tile of kTileCols destinations at a time with at::mm (single-threaded inside
// the parallel region) into a thread-local buffer of scores about the size of L2, then
// scans every source's row of the tile against that source's running k-th best key: almost
// every candidate fails that one compare (sixteen at a time, with AVX2 where the CPU has
// it), and the few that pass walk the source's sorted excluded destinations (a pointer that
// only moves forward, as the tiles ascend) and replace the worst entry of the source's heap
// of min(k, N_dst) entries.
//
// The order: key = the float32 score (float64 for float64 inputs), NaN as -inf; higher key
// first, then lower index. Destinations arrive in ascending order, so a candidate whose key
// equals the k-th best's loses the tie and is skipped by the same strict compare.
// Traffic: x_dst is read once per block of sources (from L3 at catalogue sizes), x_src once,
// the output written once; the scores never leave the cache.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>
#include <limits>
#include <vector>

#include "common.h"
#include "first_bad.h"
#include "row_dot.h"  // the AVX2 target and its run-time choice (use_avx2)

namespace pyg_edgedot {

namespace {

// Scores of a block by a tile: 256 x 1024 float32, 1 MB, about one core's L2 here (AMD EPYC,
// 1 MB L2 per core). Single-threaded MKL sgemm (one tile, repeated) measured ~90 GFLOP/s at
// 256 x 1024 and 256 x 2048 (D = 64), 87 at 128 x 1024, 70 at 512 x 4096 (C spills to L3).
constexpr int64_t kBlockRows = 256;   // sources per task
constexpr int64_t kTileCols = 1024;   // destinations per tile
constexpr int64_t kHeapEntries = 1 << 21;  // per task, at most: fewer sources for a large k

template <typename acc_t>
struct Entry {
  acc_t key;     // the score, NaN as -inf
  acc_t score;   // the score as computed (NaN kept)
  int64_t index;
};

// a ranks below b: lower key, or the same key and the higher index.
template <typename acc_t>
inline bool worse(const Entry<acc_t>& a, const Entry<acc_t>& b) {
  return a.key < b.key || (a.key == b.key && a.index > b.index);
}

// The running top-k of one source: a binary heap whose top is its worst entry.
template <typename acc_t>
struct RowHeap {
  Entry<acc_t>* heap;
  int64_t size, capacity;

  void sift_down(int64_t i) {
    const Entry<acc_t> item = heap[i];
    for (;;) {
      int64_t child = 2 * i + 1;
      if (child >= size) break;
      if (child + 1 < size && worse(heap[child + 1], heap[child])) ++child;
      if (!worse(heap[child], item)) break;
      heap[i] = heap[child];
      i = child;
    }
    heap[i] = item;
  }

  void push(const Entry<acc_t>& item) {
    if (size < capacity) {
      int64_t i = size++;
      while (i > 0) {
        const int64_t parent = (i - 1) / 2;
        if (!worse(item, heap[parent])) break;
        heap[i] = heap[parent];
        i = parent;
      }
      heap[i] = item;
    } else if (worse(heap[0], item)) {
      heap[0] = item;
      sift_down(0);
    }
  }
};

// The excluded destinations of one source, ascending; `next` only moves forward.
struct ExcludedWalk {
  const int64_t* next;
  const int64_t* end;

  // Whether j is excluded, for j not below any earlier query.
  bool excludes(int64_t j) {
    while (next != end && *next < j) ++next;
    return next != end && *next == j;
  }
};

template <typename acc_t>
inline acc_t order_key(acc_t score) {
  return std::isnan(score) ? -std::numeric_limits<acc_t>::infinity() : score;
}

// The first position p >= t, a multiple of kSkip from t, whose kSkip scores hold one above
// the threshold (or where fewer than kSkip are left): the scan's hot loop, where almost every
// score fails. A NaN fails the compare, so it never passes once the heap is full.
constexpr int64_t kSkip = 16;

template <typename acc_t>
int64_t skip_below(const acc_t* scores, int64_t t, int64_t count, acc_t threshold) {
  for (; t + kSkip <= count; t += kSkip) {
    bool any = false;
    for (int64_t u = 0; u < kSkip; ++u) any |= scores[t + u] > threshold;
    if (any) return t;
  }
  return t;
}

#if PYG_EDGEDOT_AVX2_CLONE
// The float32 scan with 256-bit compares, chosen at run time as the scoring loops choose
// theirs (row_dot.h's use_avx2: the CPU has AVX2 and PYG_EDGEDOT_CPU_AVX2 is not 0).
PYG_EDGEDOT_AVX2_TARGET int64_t skip_below_avx2(const float* scores, int64_t t, int64_t count,
                                                float threshold) {
  const __m256 limit = _mm256_set1_ps(threshold);
  for (; t + kSkip <= count; t += kSkip) {
    const __m256 a = _mm256_cmp_ps(_mm256_loadu_ps(scores + t), limit, _CMP_GT_OQ);
    const __m256 b = _mm256_cmp_ps(_mm256_loadu_ps(scores + t + 8), limit, _CMP_GT_OQ);
    const __m256 any = _mm256_or_ps(a, b);
    if (!_mm256_testz_ps(any, any)) return t;
  }
  return t;
}
#endif

template <typename acc_t>
inline int64_t skip(const acc_t* scores, int64_t t, int64_t count, acc_t threshold) {
#if PYG_EDGEDOT_AVX2_CLONE
  if constexpr (std::is_same<acc_t, float>::value) {
    if (use_avx2()) return skip_below_avx2(scores, t, count, threshold);
  }
#endif
  return skip_below(scores, t, count, threshold);
}

// One source's row of a tile: scores[t] is destination j0 + t.
template <typename acc_t>
void scan_row(const acc_t* scores, int64_t count, int64_t j0, RowHeap<acc_t>& heap,
              ExcludedWalk& excluded) {
  int64_t t = 0;
  // Until the heap is full every candidate that is not excluded goes in.
  for (; t < count && heap.size < heap.capacity; ++t) {
    if (!excluded.excludes(j0 + t)) heap.push({order_key(scores[t]), scores[t], j0 + t});
  }
  acc_t threshold = heap.size > 0 ? heap.heap[0].key : acc_t(0);
  while (t < count) {
    t = skip(scores, t, count, threshold);
    const int64_t end = std::min(t + kSkip, count);
    for (; t < end; ++t) {
      if (scores[t] > threshold && !excluded.excludes(j0 + t)) {
        heap.push({scores[t], scores[t], j0 + t});   // passed the compare: not NaN
        threshold = heap.heap[0].key;
      }
    }
  }
}

template <typename scalar_t, typename index_t>
void topk_dst_cpu_impl(const at::Tensor& x_src, const at::Tensor& x_dst,
                       const at::Tensor& src_index, const at::Tensor& exclude_ptr,
                       const at::Tensor& exclude_dst, int64_t k, bool sorted, at::Tensor& scores,
                       at::Tensor& index, std::atomic<int64_t>& first_bad) {
  using acc_t = at::opmath_type<scalar_t>;
  const scalar_t* src_rows = x_src.const_data_ptr<scalar_t>();   // [N_src, D], row stride
  const scalar_t* dst_rows = x_dst.const_data_ptr<scalar_t>();   // [N_dst, D], row stride
  const index_t* src_ptr = src_index.const_data_ptr<index_t>();  // [N], strided
  scalar_t* score_out = scores.mutable_data_ptr<scalar_t>();     // [N, k]
  int64_t* index_out = index.mutable_data_ptr<int64_t>();        // [N, k]
  const int64_t src_row_stride = x_src.stride(0), dst_row_stride = x_dst.stride(0);
  const int64_t src_stride = src_index.stride(0);
  const int64_t num_src = x_src.size(0), num_dst = x_dst.size(0), feat_dim = x_src.size(1);
  const int64_t num_rows = src_index.size(0);
  const bool has_excluded = exclude_ptr.numel() > 0;
  const int64_t* excl_ptr = has_excluded ? exclude_ptr.const_data_ptr<int64_t>() : nullptr;
  const int64_t* excl_dst = exclude_dst.const_data_ptr<int64_t>();
  const int64_t num_excl = exclude_dst.numel();
  // fp32 / fp64 rows with a unit column stride are multiplied in place; fp16 / bf16 tiles are
  // converted to the accumulation type first.
  constexpr bool kDirect = std::is_same<scalar_t, acc_t>::value;
  const auto acc_options = x_src.options().dtype(c10::CppTypeToScalarType<acc_t>::value);

  // A source holds at most N_dst entries; the rest of a longer row is padding.
  const int64_t capacity = std::min(k, num_dst);
  const int64_t threads = std::max<int64_t>(1, at::get_num_threads());
  // Every thread gets a block while there are enough sources (N / threads), and a task's
  // heaps stay within kHeapEntries.
  const int64_t block_rows = std::clamp<int64_t>(
      std::min((num_rows + threads - 1) / threads,
               kHeapEntries / std::max<int64_t>(capacity, 1)),
      1, kBlockRows);
  const int64_t num_blocks = (num_rows + block_rows - 1) / block_rows;
  const int64_t tile_cols = std::min<int64_t>(kTileCols, std::max<int64_t>(num_dst, 1));

  at::parallel_for(0, num_blocks, 1, [&](int64_t block_begin, int64_t block_end) {
    at::Tensor block = at::zeros({block_rows, feat_dim}, acc_options);
    at::Tensor tile_buffer = kDirect ? at::Tensor() : at::empty({tile_cols, feat_dim}, acc_options);
    at::Tensor tile_scores = at::empty({block_rows, tile_cols}, acc_options);
    std::vector<Entry<acc_t>> heap_store(block_rows * capacity);
    std::vector<RowHeap<acc_t>> heaps(block_rows);
    std::vector<ExcludedWalk> walks(block_rows);
    std::vector<char> row_ok(block_rows);
    acc_t* block_data = block.mutable_data_ptr<acc_t>();

    for (int64_t b = block_begin; b < block_end; ++b) {
      const int64_t n0 = b * block_rows, rows = std::min(block_rows, num_rows - n0);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t s = static_cast<int64_t>(src_ptr[(n0 + r) * src_stride]);
        row_ok[r] = s >= 0 && s < num_src;
        acc_t* dst_row = block_data + r * feat_dim;
        heaps[r] = RowHeap<acc_t>{heap_store.data() + r * capacity, 0, capacity};
        walks[r] = ExcludedWalk{excl_dst, excl_dst};
        if (!row_ok[r]) {
          record_bad_row(first_bad, n0 + r);
          std::fill(dst_row, dst_row + feat_dim, acc_t(0));
          continue;
        }
        const scalar_t* row = src_rows + s * src_row_stride;
        for (int64_t d = 0; d < feat_dim; ++d) dst_row[d] = static_cast<acc_t>(row[d]);
        if (has_excluded) {
          // Clamped: a malformed CSR excludes the wrong pairs, never reads outside.
          const int64_t lo = std::clamp<int64_t>(excl_ptr[s], 0, num_excl);
          const int64_t hi = std::clamp<int64_t>(excl_ptr[s + 1], lo, num_excl);
          walks[r] = ExcludedWalk{excl_dst + lo, excl_dst + hi};
        }
      }
      const at::Tensor block_view = block.narrow(0, 0, rows);
      if (capacity > 0) {
        for (int64_t j0 = 0; j0 < num_dst; j0 += tile_cols) {
          const int64_t cols = std::min(tile_cols, num_dst - j0);
          at::Tensor tile;
          if constexpr (kDirect) {
            tile = x_dst.narrow(0, j0, cols);
          } else {
            acc_t* buffer = tile_buffer.mutable_data_ptr<acc_t>();
            for (int64_t c = 0; c < cols; ++c) {
              const scalar_t* row = dst_rows + (j0 + c) * dst_row_stride;
              for (int64_t d = 0; d < feat_dim; ++d) {
                buffer[c * feat_dim + d] = static_cast<acc_t>(row[d]);
              }
            }
            tile = tile_buffer.narrow(0, 0, cols);
          }
          at::Tensor out = tile_scores.narrow(0, 0, rows).narrow(1, 0, cols);
          at::mm_out(out, block_view, tile.t());
          const acc_t* out_data = out.const_data_ptr<acc_t>();
          const int64_t out_stride = out.stride(0);
          for (int64_t r = 0; r < rows; ++r) {
            if (row_ok[r]) scan_row(out_data + r * out_stride, cols, j0, heaps[r], walks[r]);
          }
        }
      }
      // The heaps, best first (when sorted), then padding: index N_dst, score -inf.
      for (int64_t r = 0; r < rows; ++r) {
        RowHeap<acc_t>& heap = heaps[r];
        if (sorted) {
          std::sort(heap.heap, heap.heap + heap.size,
                    [](const Entry<acc_t>& a, const Entry<acc_t>& b) { return worse(b, a); });
        }
        scalar_t* score_row = score_out + (n0 + r) * k;
        int64_t* index_row = index_out + (n0 + r) * k;
        for (int64_t i = 0; i < heap.size; ++i) {
          score_row[i] = static_cast<scalar_t>(heap.heap[i].score);
          index_row[i] = heap.heap[i].index;
        }
        for (int64_t i = heap.size; i < k; ++i) {
          score_row[i] = static_cast<scalar_t>(-std::numeric_limits<acc_t>::infinity());
          index_row[i] = num_dst;
        }
      }
    }
  });
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> topk_dst_cpu(
    const at::Tensor& x_src_in, const at::Tensor& x_dst_in, const at::Tensor& src_index,
    const at::Tensor& exclude_ptr_in, const at::Tensor& exclude_dst_in, int64_t k,
    bool sorted) {
  const char* op = "topk_dst";
  check_topk_args(op, x_src_in, x_dst_in, src_index, exclude_ptr_in, exclude_dst_in, k);
  // Detached: the kernel's own at::mm_out calls (on worker threads, where no guard set here
  // applies) take views of x_dst, which may require gradients; the op is not differentiable.
  const at::Tensor x_src = unit_column_stride(x_src_in.detach());
  const at::Tensor x_dst = unit_column_stride(x_dst_in.detach());
  const at::Tensor exclude_ptr = exclude_ptr_in.contiguous();
  const at::Tensor exclude_dst = exclude_dst_in.contiguous();
  const int64_t num_rows = src_index.size(0);
  at::Tensor scores = at::empty({num_rows, k}, x_src.options());
  at::Tensor index = at::empty({num_rows, k}, x_src.options().dtype(at::kLong));
  std::atomic<int64_t> first_bad{kNoBadRow};
  if (num_rows > 0) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_src.scalar_type(), "topk_dst_cpu", [&] {
      AT_DISPATCH_INDEX_TYPES(src_index.scalar_type(), "topk_dst_cpu", [&] {
        topk_dst_cpu_impl<scalar_t, index_t>(x_src, x_dst, src_index, exclude_ptr, exclude_dst,
                                             k, sorted, scores, index, first_bad);
      });
    });
  }
  return {scores, index, first_bad_tensor(first_bad, src_index)};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_edgedot, CPU, m) {
  m.impl("topk_dst", &topk_dst_cpu);
}

}  // namespace pyg_edgedot
