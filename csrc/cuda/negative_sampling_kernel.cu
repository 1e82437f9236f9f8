// CUDA kernel of negative_sample (schema in csrc/negative_sampling.cpp): the CPU kernel's draws
// (csrc/cpu/negative_sampling_kernel.cpp), bit for bit. Both draw from the counter-based
// generator of negative_sampling_common.h, where every random number belongs to a position
// (a counter), so this kernel computes the same numbers by parallel steps:
//
//   replace=True: one thread per output column t: rank t of the rank stream, its key through
//     the bucket index over adj (vec.cuh's build_adj_index, per call or the caller's kept
//     negative_sample_index), its pair. No sort, no host sync.
//   replace=False, count < M / 4 (sparse): the first `count` distinct ranks of the rank stream
//     in order of first appearance. n draws (ranks 0 .. n - 1) as words, the top bits of the
//     rank above the draw index, sorted by CUB's radix sort on those top bits only: whole
//     8-bit digits holding n / 2 values or more (every bit of the rank where it has fewer), so
//     a run of equal top bits holds a few draws on average, and the stable sort keeps each run
//     in draw order. A draw's full rank is recomputed from its index (a counter); it is the
//     rank's first appearance where no earlier draw of its run has the same rank. One pass in
//     sorted order (the bucket index's cache lines shared by neighbouring ranks) puts at each
//     draw index the key of a first appearance, or -1 for a repeat; CUB's select compacts the
//     keys in draw order (their count stays on the device), and one thread per output column
//     writes the pair of the column's key. The number of distinct ranks is read back once (the
//     one host sync); when it is below `count` (rare: the CPU kernel's sizes and checks) the
//     draw runs again with more draws of the same stream, which gives the same first
//     appearances.
//   replace=False, count >= M / 4 (dense): the CPU kernel's permutation of the whole
//     complement, reproduced with sorts: for more than kInCacheShuffle keys, every key's
//     bucket from the bucket stream and a stable radix sort by bucket (= the CPU's stable
//     scatter); then the Fisher-Yates shuffle of each bucket (or of the whole array), in
//     parallel: step g swaps g with j_g = g + below(g, end - g) (the CPU's draw at counter g),
//     and the key that ends at position i is found by following writers back in time:
//       out[i] = V(j_i, i),  V(p, t) = the key at p before step t
//       V(p, t) = V(k, k) for k = the last step before t with j_k = p, else keys[p].
//     One stable sort of the steps by target gives, for every step, the previous step with
//     the same target (prev) and, for every position p, the last step k < p targeting it
//     (last); then out[i] = keys[j_i] if prev[i] < 0, else keys[k] at the end of the chain
//     k = prev[i], k = last[k], ... (strictly decreasing; 0.5 links per key on average). One
//     host sync reads the permutation's last used bucket when more than kInCacheShuffle keys
//     are permuted and count is fewer.
// Sizes and int64 overflow are checked by the shared check_negative_sample, and the sparse
// rounds are bounded (kMaxTopUpRounds), as on the CPU.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cub/cub.cuh>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>
#include <type_traits>

#include "negative_sampling_common.h"
#include "vec.cuh"

namespace pyg_edgedot {
namespace {

using namespace negsample;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = int64_t{1} << 20;  // grid-stride loops beyond

#define PYG_EDGEDOT_GRID_LOOP(i, n)                                                    \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

template <typename Kernel, typename... Args>
void launch(Kernel kernel, int64_t n, cudaStream_t stream, Args... args) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks);
  kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(args...);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// ---------------------------------------------------------------------------------------
// Kernels
// ---------------------------------------------------------------------------------------

// Column t of the [2, columns] output: the pair of `key`; "undirected" also writes its mirror
// in column count + t.
template <Mode mode, typename index_t>
__device__ __forceinline__ void write_pair(const Decoder& decoder, int64_t key, int64_t t,
                                           int64_t count, index_t* __restrict__ out,
                                           int64_t columns) {
  int64_t src, dst;
  decoder.decode<mode>(key, src, dst);
  out[t] = static_cast<index_t>(src);
  out[columns + t] = static_cast<index_t>(dst);
  if (mode == Mode::kUndirected) {
    out[count + t] = static_cast<index_t>(dst);
    out[columns + count + t] = static_cast<index_t>(src);
  }
}

// replace=True: column t = the pair of rank t of the rank stream.
template <Mode mode, typename index_t>
__global__ void iid_pairs_kernel(int64_t count, Stream ranks, int64_t num_ranks,
                                 const int64_t* __restrict__ adj, int64_t num_adj,
                                 AdjIndex adj_index, Decoder decoder, index_t* __restrict__ out,
                                 int64_t columns) {
  PYG_EDGEDOT_GRID_LOOP(t, count) {
    const int64_t r = static_cast<int64_t>(ranks.below(static_cast<uint64_t>(t),
                                                       static_cast<uint64_t>(num_ranks)));
    write_pair<mode>(decoder, rank_to_key(adj, num_adj, adj_index, r), t, count, out, columns);
  }
}

// The sparse draw's words (see the top of the file): draw i of the rank stream as
// (rank >> low_bits) << index_bits | i, the top bits of its rank above its index. The full rank
// is recomputed from the index (a counter of the generator) where it is needed.
struct DrawWords {
  Stream ranks;
  int64_t num_ranks;
  int low_bits, index_bits;

  __device__ __forceinline__ int64_t rank(int64_t draw) const {
    return static_cast<int64_t>(ranks.below(static_cast<uint64_t>(draw),
                                            static_cast<uint64_t>(num_ranks)));
  }
  __device__ __forceinline__ int64_t word(int64_t draw) const {
    return ((rank(draw) >> low_bits) << index_bits) | draw;
  }
  __device__ __forceinline__ int64_t run(int64_t word) const { return word >> index_bits; }
  __device__ __forceinline__ int64_t draw(int64_t word) const {
    return word & ((int64_t{1} << index_bits) - 1);
  }
};

__global__ void draw_words_kernel(int64_t* __restrict__ words, int64_t n, DrawWords layout) {
  PYG_EDGEDOT_GRID_LOOP(i, n) { words[i] = layout.word(i); }
}

// Sparse draws, in the sorted words' order (coalesced reads; neighbouring ranks share the
// bucket index's cache lines): keys[draw index] = the key of the draw's rank where no earlier
// draw of its run (equal top bits, in draw order) has that rank, i.e. at the rank's first
// appearance, else -1. One random 8-byte store per draw; the scan back through the run
// recomputes a few ranks on average.
__global__ void first_keys_kernel(const int64_t* __restrict__ words, int64_t n, DrawWords layout,
                                  const int64_t* __restrict__ adj, int64_t num_adj,
                                  AdjIndex adj_index, int64_t* __restrict__ keys) {
  PYG_EDGEDOT_GRID_LOOP(q, n) {
    const int64_t word = words[q], run = layout.run(word), draw = layout.draw(word);
    const int64_t rank = layout.rank(draw);
    bool first = true;
    for (int64_t p = q - 1; first && p >= 0; --p) {
      const int64_t earlier = words[p];
      if (layout.run(earlier) != run) break;
      first = layout.rank(layout.draw(earlier)) != rank;
    }
    keys[draw] = first ? rank_to_key(adj, num_adj, adj_index, rank) : int64_t{-1};
  }
}

// Column t < count: the pair of keys[t] (the compacted first appearances, in draw order), when
// the round holds count of them (else a top-up round follows and writes every column). One
// thread per column: coalesced reads and stores.
template <Mode mode, typename index_t>
__global__ void key_pairs_kernel(const int64_t* __restrict__ keys,
                                 const int64_t* __restrict__ num_keys, int64_t count,
                                 Decoder decoder, index_t* __restrict__ out, int64_t columns) {
  if (*num_keys < count) return;
  PYG_EDGEDOT_GRID_LOOP(t, count) { write_pair<mode>(decoder, keys[t], t, count, out, columns); }
}

// Dense draws: keys[i] = the key of rank i (the whole complement, in rank order).
__global__ void all_keys_kernel(int64_t* __restrict__ keys, int64_t n,
                                const int64_t* __restrict__ adj, int64_t num_adj,
                                AdjIndex adj_index) {
  PYG_EDGEDOT_GRID_LOOP(i, n) { keys[i] = rank_to_key(adj, num_adj, adj_index, i); }
}

// The permutation's bucket of every position (log_buckets <= 31 bits).
__global__ void bucket_kernel(uint32_t* __restrict__ label, int64_t n, Stream stream, int drop) {
  PYG_EDGEDOT_GRID_LOOP(i, n) { label[i] = static_cast<uint32_t>(bucket_of(stream, i, drop)); }
}

// bucket_end[b] = one past the last position of bucket b in the bucket-sorted order (left
// unset for an empty bucket, which no position reads).
template <typename pos_t>
__global__ void bucket_end_kernel(const uint32_t* __restrict__ sorted_label, int64_t n,
                                  pos_t* __restrict__ bucket_end) {
  PYG_EDGEDOT_GRID_LOOP(g, n) {
    if (g + 1 == n || sorted_label[g + 1] != sorted_label[g]) {
      bucket_end[sorted_label[g]] = static_cast<pos_t>(g + 1);
    }
  }
}

// Fisher-Yates targets of positions [0, span): j[g] = g + below(g, end - g) where the CPU's
// shuffle takes a step at g, else g; position[g] = g (the payload of the sort by target).
// One run (sorted_label null): [0, run_end), steps at g < steps_end. Buckets: the run of g
// is its bucket, ending at bucket_end[sorted_label[g]], with a step at every position but
// the bucket's last.
template <typename pos_t>
__global__ void targets_kernel(pos_t* __restrict__ target, pos_t* __restrict__ position,
                               int64_t span, Stream shuffle, int64_t run_end, int64_t steps_end,
                               const uint32_t* __restrict__ sorted_label,
                               const pos_t* __restrict__ bucket_end) {
  PYG_EDGEDOT_GRID_LOOP(g, span) {
    int64_t end = run_end, limit = steps_end;
    if (sorted_label != nullptr) {
      end = bucket_end[sorted_label[g]];
      limit = end - 1;
    }
    target[g] = static_cast<pos_t>(g < limit ? fisher_yates_target(shuffle, g, end) : g);
    position[g] = static_cast<pos_t>(g);
  }
}

// From the steps sorted by (target, position): prev[k], the previous step with k's target
// (-1: none), and last[p], the last step k < p with target p (left at -1: none). A target's
// steps k all satisfy k <= p; k == p (no swap, or no step) sorts last and is not a writer.
template <typename pos_t>
__global__ void link_kernel(const pos_t* __restrict__ sorted_target,
                            const pos_t* __restrict__ sorted_position, int64_t span,
                            pos_t* __restrict__ prev, pos_t* __restrict__ last) {
  PYG_EDGEDOT_GRID_LOOP(q, span) {
    const pos_t p = sorted_target[q], k = sorted_position[q];
    prev[k] = (q > 0 && sorted_target[q - 1] == p) ? sorted_position[q - 1] : pos_t(-1);
    if (k != p && (q + 1 == span || sorted_target[q + 1] != p || sorted_position[q + 1] == p)) {
      last[p] = k;
    }
  }
}

// Output column t < count: the pair of the key the permutation puts at position t (see the
// top of the file).
template <Mode mode, typename index_t, typename pos_t>
__global__ void pairs_kernel(const int64_t* __restrict__ data, const pos_t* __restrict__ target,
                             const pos_t* __restrict__ prev, const pos_t* __restrict__ last,
                             int64_t count, Decoder decoder, index_t* __restrict__ out,
                             int64_t columns) {
  PYG_EDGEDOT_GRID_LOOP(t, count) {
    int64_t from = prev[t];
    if (from < 0) {
      from = target[t];
    } else {
      for (int64_t w = last[from]; w >= 0; w = last[w]) from = w;
    }
    write_pair<mode>(decoder, data[from], t, count, out, columns);
  }
}

// ---------------------------------------------------------------------------------------
// Sorts (CUB), on the bits the values need
// ---------------------------------------------------------------------------------------

template <typename T>
using Bits = std::make_unsigned_t<T>;

// CUB's onesweep radix sort (sm_90) moves the keys once per digit of this many bits.
constexpr int kSortDigitBits = 8;

// values[0, n) (non-negative) sorted stably by their bits [begin_bit, end_bit), those above
// zero: the input when there is nothing to sort, else a new tensor, or with `overwrite` the
// input or one more buffer (the input's content is then lost; CUB sorts between the two, so
// its scratch is small instead of a third copy).
at::Tensor sort_keys(const at::Tensor& values, int64_t n, int begin_bit, int end_bit,
                     bool overwrite, cudaStream_t stream) {
  if (n < 2 || end_bit <= begin_bit) return values;
  at::Tensor out = at::empty({n}, values.options());
  auto* sorted = reinterpret_cast<uint64_t*>(out.mutable_data_ptr<int64_t>());
  const at::TensorOptions byte_options = values.options().dtype(at::kByte);
  size_t temp_bytes = 0;
  if (overwrite) {
    cub::DoubleBuffer<uint64_t> buffers(
        reinterpret_cast<uint64_t*>(values.mutable_data_ptr<int64_t>()), sorted);
    C10_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, buffers, n, begin_bit,
                                                  end_bit, stream));
    at::Tensor temp = at::empty({static_cast<int64_t>(temp_bytes)}, byte_options);
    C10_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(temp.mutable_data_ptr(), temp_bytes, buffers,
                                                  n, begin_bit, end_bit, stream));
    return buffers.selector == 0 ? values : out;
  }
  const auto* in = reinterpret_cast<const uint64_t*>(values.const_data_ptr<int64_t>());
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, in, sorted, n, begin_bit,
                                                end_bit, stream));
  at::Tensor temp = at::empty({static_cast<int64_t>(temp_bytes)}, byte_options);
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(temp.mutable_data_ptr(), temp_bytes, in, sorted,
                                                n, begin_bit, end_bit, stream));
  return out;
}

// (keys, values)[0, n) sorted by key (keys in [0, 2^bits)), stably: equal keys keep their
// values' order. Returns the inputs when there is nothing to sort.
template <typename key_t, typename value_t>
std::tuple<at::Tensor, at::Tensor> sort_pairs(const at::Tensor& keys, const at::Tensor& values,
                                              int64_t n, int bits, cudaStream_t stream) {
  if (n < 2 || bits == 0) return {keys, values};
  at::Tensor keys_out = at::empty_like(keys), values_out = at::empty_like(values);
  const auto* k_in = reinterpret_cast<const Bits<key_t>*>(keys.const_data_ptr<key_t>());
  auto* k_out = reinterpret_cast<Bits<key_t>*>(keys_out.mutable_data_ptr<key_t>());
  const value_t* v_in = values.const_data_ptr<value_t>();
  value_t* v_out = values_out.mutable_data_ptr<value_t>();
  size_t temp_bytes = 0;
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, k_in, k_out, v_in, v_out,
                                                 n, 0, bits, stream));
  at::Tensor temp = at::empty({static_cast<int64_t>(temp_bytes)},
                              keys.options().dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.mutable_data_ptr(), temp_bytes, k_in,
                                                 k_out, v_in, v_out, n, 0, bits, stream));
  return {keys_out, values_out};
}

// CUB 3 (CUDA 13) takes DeviceSelect's num_items as an int64 (its headers say so); older
// releases took an int, which would wrap a count past 2^31 - 1 and select from a prefix:
// refused under CUB 2 rather than guessing which of its releases changed that.
inline void check_select_items(const char* what, int64_t n) {
#if CUB_VERSION < 300000
  PYG_EDGEDOT_CHECK(n <= std::numeric_limits<int>::max(), what, ": ", std::to_string(n),
                    " items are more than this CUB's DeviceSelect takes (2^31 - 1); build "
                    "with CUDA 13 for larger graphs");
#else
  (void)what;
  (void)n;
#endif
}

// The distinct values of in[0, n) (sorted) into out, their count into *num (on the device).
void select_unique(const int64_t* in, int64_t* out, int64_t* num, int64_t n,
                   const at::TensorOptions& options, cudaStream_t stream) {
  check_select_items("negative sampling (the excluded keys)", n);
  size_t temp_bytes = 0;
  C10_CUDA_CHECK(cub::DeviceSelect::Unique(nullptr, temp_bytes, in, out, num, n, stream));
  at::Tensor temp = at::empty({static_cast<int64_t>(temp_bytes)}, options.dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceSelect::Unique(temp.mutable_data_ptr(), temp_bytes, in, out, num, n,
                                           stream));
}

// Whether a slot of first_keys_kernel's output holds a key (not -1).
struct IsKey {
  __host__ __device__ bool operator()(int64_t key) const { return key >= 0; }
};

// The keys (>= 0) of keys[0, n) moved to its front in order (in place), their count into *num
// (on the device).
void select_keys(int64_t* keys, int64_t* num, int64_t n, const at::TensorOptions& options,
                 cudaStream_t stream) {
  check_select_items("negative_sample (the draws)", n);
  size_t temp_bytes = 0;
  C10_CUDA_CHECK(cub::DeviceSelect::If(nullptr, temp_bytes, keys, num, n, IsKey(), stream));
  at::Tensor temp = at::empty({static_cast<int64_t>(temp_bytes)}, options.dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceSelect::If(temp.mutable_data_ptr(), temp_bytes, keys, num, n,
                                       IsKey(), stream));
}

// The kernel for out's index dtype and the plan's mode: f(index_t{}, mode constant).
template <typename F>
void dispatch_pairs(const at::Tensor& out, Mode mode, F&& f) {
  AT_DISPATCH_INDEX_TYPES(out.scalar_type(), "negative_sample", [&] {
    dispatch_mode(mode, [&](auto mode_tag) { f(index_t{}, mode_tag); });
  });
}

// ---------------------------------------------------------------------------------------
// The draws
// ---------------------------------------------------------------------------------------

// replace=False, count < M / 4: out = the pairs of the first `count` distinct ranks of the rank
// stream, in order of first appearance (see the top of the file).
void first_distinct_pairs(const at::Tensor& adj, const AdjIndex& adj_index, int64_t num_ranks,
                          int64_t count, int64_t seed, int64_t first_round, const Plan& plan,
                          at::Tensor& out, cudaStream_t stream) {
  const int rank_bits = bit_width(num_ranks);
  int64_t n = first_round >= 0 ? first_round : iid_draw_count(count, num_ranks);
  for (int round = 1;; ++round) {
    int64_t distinct = 0;
    if (n > 0) {
      // The rank's top bits the sort orders: the whole digits that hold n / 2 values (a run of
      // equal top bits then holds a few draws on average), or every bit of the rank where it
      // has fewer; room for the index below them.
      const int index_bits = bit_width(n);
      const int digits = (std::max(index_bits - 1, 1) + kSortDigitBits - 1) / kSortDigitBits;
      const int sort_bits = std::min({rank_bits, digits * kSortDigitBits, 63 - index_bits});
      const DrawWords layout{Stream(seed, kRankStream), num_ranks, rank_bits - sort_bits,
                             index_bits};
      at::Tensor words = at::empty({n}, adj.options());
      launch(draw_words_kernel, n, stream, words.mutable_data_ptr<int64_t>(), n, layout);
      words = sort_keys(words, n, index_bits, index_bits + sort_bits, /*overwrite=*/true,
                        stream);
      at::Tensor keys = at::empty({n}, adj.options());
      launch(first_keys_kernel, n, stream, words.const_data_ptr<int64_t>(), n, layout,
             adj.const_data_ptr<int64_t>(), adj.numel(), adj_index,
             keys.mutable_data_ptr<int64_t>());
      words = at::Tensor();  // free before the selection's scratch
      const at::Tensor num_keys = at::empty({1}, adj.options());
      select_keys(keys.mutable_data_ptr<int64_t>(), num_keys.mutable_data_ptr<int64_t>(), n,
                  adj.options(), stream);
      dispatch_pairs(out, plan.mode, [&](auto index_tag, auto mode_tag) {
        using index_t = decltype(index_tag);
        launch(key_pairs_kernel<decltype(mode_tag)::value, index_t>, count, stream,
               keys.const_data_ptr<int64_t>(), num_keys.const_data_ptr<int64_t>(), count,
               plan.decoder, out.mutable_data_ptr<index_t>(), plan.columns);
      });
      distinct = num_keys.item<int64_t>();  // the host sync
    }
    if (distinct >= count) return;
    n += top_up_draw_count(count, distinct, num_ranks, round);
  }
}

// out = the pairs of the first `count` keys of the CPU kernel's permutation of keys[0, n)
// (shuffle(): buckets for n > kInCacheShuffle, Fisher-Yates), positions of type pos_t.
template <typename pos_t>
void permute_and_write(const at::Tensor& keys, int64_t n, int64_t count, int64_t seed,
                       const Plan& plan, at::Tensor& out, cudaStream_t stream) {
  const at::TensorOptions pos_options =
      keys.options().dtype(sizeof(pos_t) == 4 ? at::kInt : at::kLong);
  const Stream fy(seed, kShuffleStream);
  at::Tensor data = keys, sorted_label, bucket_end;
  int64_t span = n;                                    // positions the shuffle touches
  const int64_t steps_end = std::min(count, n - 1);    // one run: its steps
  if (n > kInCacheShuffle) {
    const int log_buckets = log_bucket_count(n);
    PYG_EDGEDOT_CHECK(log_buckets <= 31, "negative_sample: too many keys to permute (",
                      std::to_string(n), ")");
    at::Tensor label = at::empty({n}, keys.options().dtype(at::kInt));
    launch(bucket_kernel, n, stream, reinterpret_cast<uint32_t*>(label.mutable_data_ptr<int>()),
           n, Stream(seed, kBucketStream), 64 - log_buckets);
    std::tie(sorted_label, data) = sort_pairs<int32_t, int64_t>(label, keys, n, log_buckets,
                                                                stream);
    bucket_end = at::empty({int64_t{1} << log_buckets}, pos_options);
    launch(bucket_end_kernel<pos_t>, n, stream,
           reinterpret_cast<const uint32_t*>(sorted_label.const_data_ptr<int>()), n,
           bucket_end.mutable_data_ptr<pos_t>());
    if (count < n) {  // the buckets past the one holding position count - 1 are not needed
      span = bucket_end.index_select(0, sorted_label.narrow(0, count - 1, 1).to(at::kLong))
                 .item<int64_t>();
    }
  }
  at::Tensor target = at::empty({span}, pos_options), position = at::empty({span}, pos_options);
  launch(targets_kernel<pos_t>, span, stream, target.mutable_data_ptr<pos_t>(),
         position.mutable_data_ptr<pos_t>(), span, fy, n, steps_end,
         sorted_label.defined()
             ? reinterpret_cast<const uint32_t*>(sorted_label.const_data_ptr<int>())
             : nullptr,
         bucket_end.defined() ? bucket_end.const_data_ptr<pos_t>() : nullptr);
  at::Tensor sorted_target, sorted_position;
  std::tie(sorted_target, sorted_position) =
      sort_pairs<pos_t, pos_t>(target, position, span, bit_width(span), stream);
  at::Tensor prev = at::empty({span}, pos_options);
  at::Tensor last = at::full({span}, -1, pos_options);
  launch(link_kernel<pos_t>, span, stream, sorted_target.const_data_ptr<pos_t>(),
         sorted_position.const_data_ptr<pos_t>(), span, prev.mutable_data_ptr<pos_t>(),
         last.mutable_data_ptr<pos_t>());
  dispatch_pairs(out, plan.mode, [&](auto index_tag, auto mode_tag) {
    using index_t = decltype(index_tag);
    launch(pairs_kernel<decltype(mode_tag)::value, index_t, pos_t>, count, stream,
           data.const_data_ptr<int64_t>(), target.const_data_ptr<pos_t>(),
           prev.const_data_ptr<pos_t>(), last.const_data_ptr<pos_t>(), count, plan.decoder,
           out.mutable_data_ptr<index_t>(), plan.columns);
  });
}

at::Tensor negative_sample_cuda(const at::Tensor& excluded_adj, int64_t num_ranks, int64_t count,
                                int64_t seed, bool replace, c10::string_view mode_name,
                                int64_t num_src_nodes, int64_t num_dst_nodes,
                                at::ScalarType dtype, int64_t first_round,
                                const std::optional<at::Tensor>& given_index) {
  const Plan plan = check_negative_sample(excluded_adj, num_ranks, count, replace, mode_name,
                                          num_src_nodes, num_dst_nodes, dtype, first_round);
  const c10::cuda::CUDAGuard guard(excluded_adj.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  at::Tensor out = at::empty({2, plan.columns}, excluded_adj.options().dtype(dtype));
  if (count == 0) return out;

  const at::Tensor adj = excluded_adj.contiguous();
  AdjIndex adj_index;
  const at::Tensor bucket = cuda::adj_index_of("negative_sample", adj, num_ranks,
                                               given_index ? &*given_index : nullptr,
                                               adj_index, stream);
  const int64_t* adj_data = adj.const_data_ptr<int64_t>();
  const int64_t num_adj = adj.numel();
  if (replace) {
    dispatch_pairs(out, plan.mode, [&](auto index_tag, auto mode_tag) {
      using index_t = decltype(index_tag);
      launch(iid_pairs_kernel<decltype(mode_tag)::value, index_t>, count, stream, count,
             Stream(seed, kRankStream), num_ranks, adj_data, num_adj, adj_index, plan.decoder,
             out.mutable_data_ptr<index_t>(), plan.columns);
    });
  } else if (count < (num_ranks + 3) / 4) {
    first_distinct_pairs(adj, adj_index, num_ranks, count, seed, first_round, plan, out,
                         stream);
  } else {  // count >= M / 4: the CPU kernel's permutation of the whole complement
    at::Tensor keys = at::empty({num_ranks}, adj.options());
    launch(all_keys_kernel, num_ranks, stream, keys.mutable_data_ptr<int64_t>(), num_ranks,
           adj_data, num_adj, adj_index);
    if (num_ranks <= std::numeric_limits<int32_t>::max()) {
      permute_and_write<int32_t>(keys, num_ranks, count, seed, plan, out, stream);
    } else {
      permute_and_write<int64_t>(keys, num_ranks, count, seed, plan, out, stream);
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------
// The build: excluded_keys and excluded_edge_keys
// ---------------------------------------------------------------------------------------

// keys[e] = the key of edge e, or encoder.num_keys (dropped) for a pair that is no key or has
// an index out of range; the first such out-of-range edge lowers *first_bad (all ones: none).
template <Mode mode, typename index_t>
__global__ void encode_edges_kernel(const index_t* __restrict__ src,
                                    const index_t* __restrict__ dst, int64_t step, int64_t n,
                                    Encoder encoder, int64_t* __restrict__ keys,
                                    unsigned long long* __restrict__ first_bad) {
  PYG_EDGEDOT_GRID_LOOP(e, n) {
    const int64_t s = static_cast<int64_t>(src[e * step]);
    const int64_t d = static_cast<int64_t>(dst[e * step]);
    const bool ok = encoder.in_range(s, d);
    keys[e] = ok ? encoder.key<mode>(s, d) : encoder.num_keys;
    if (!ok) atomicMin(first_bad, static_cast<unsigned long long>(e));
  }
}

// *size = the distinct values below key_bound of sorted[0, n) (n >= 1): Unique's count less
// the dropped key_bound, which sorts last.
__global__ void size_kernel(const int64_t* __restrict__ sorted, int64_t n, int64_t key_bound,
                            const int64_t* __restrict__ num_unique, int64_t* __restrict__ size) {
  *size = *num_unique - (sorted[n - 1] == key_bound ? 1 : 0);
}

__global__ void adj_kernel(const int64_t* __restrict__ excluded, int64_t n,
                           int64_t* __restrict__ adj) {
  PYG_EDGEDOT_GRID_LOOP(i, n) { adj[i] = excluded[i] - i; }
}

// The tables of both builds from keys[0, n) (values in [0, key_bound]): a CUB radix sort on the
// key bits, DeviceSelect::Unique, the size without key_bound (one thread), then the one host
// sync: stats, int64 on the device, (Unique's count, the size[, first_bad]) written by the
// kernels, read back together; adj (exactly the size) by one elementwise kernel after it.
// Returns (excluded, adj, first_bad as read back, or -1 without that slot).
std::tuple<at::Tensor, at::Tensor, int64_t> excluded_tables(const at::Tensor& keys, int64_t n,
                                                            int64_t key_bound, int bits,
                                                            const at::Tensor& stats,
                                                            cudaStream_t stream) {
  const at::TensorOptions options = keys.options();
  if (n == 0) return {at::empty({0}, options), at::empty({0}, options), -1};
  const at::Tensor sorted = sort_keys(keys, n, 0, bits, /*overwrite=*/false, stream);
  at::Tensor unique = at::empty({n}, options);
  const int64_t* data = sorted.const_data_ptr<int64_t>();
  int64_t* slots = stats.mutable_data_ptr<int64_t>();
  select_unique(data, unique.mutable_data_ptr<int64_t>(), slots, n, options, stream);
  size_kernel<<<1, 1, 0, stream>>>(data, n, key_bound, slots, slots + 1);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const at::Tensor host = stats.cpu();  // the one host sync: the output's size (and first_bad)
  const int64_t* read = host.const_data_ptr<int64_t>();
  const int64_t size = read[1];
  unique = unique.narrow(0, 0, size);
  at::Tensor adj = at::empty({size}, options);
  launch(adj_kernel, size, stream, unique.const_data_ptr<int64_t>(), size,
         adj.mutable_data_ptr<int64_t>());
  return {unique, adj, stats.numel() > 2 ? read[2] : -1};
}

std::tuple<at::Tensor, at::Tensor> excluded_keys_cuda(const at::Tensor& keys, int64_t key_bound) {
  const int bits = check_excluded_keys(keys, key_bound);
  const c10::cuda::CUDAGuard guard(keys.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const at::Tensor in = keys.contiguous();
  at::Tensor unique, adj;
  int64_t first_bad;
  std::tie(unique, adj, first_bad) =
      excluded_tables(in, in.numel(), key_bound, bits, at::empty({2}, in.options()), stream);
  return {unique, adj};
}

// excluded_edge_keys: one kernel validates and encodes the edges (the PyTorch ops of the
// Python build: the range checks' reductions and reads, the key arithmetic, the self-loop
// mask), then excluded_keys' tables; first_bad is read back with the size.
std::tuple<at::Tensor, at::Tensor, at::Tensor> excluded_edge_keys_cuda(
    const at::Tensor& edge_index, c10::string_view mode_name, int64_t num_src_nodes,
    int64_t num_dst_nodes) {
  const EdgeKeys plan = check_excluded_edge_keys(edge_index, mode_name, num_src_nodes,
                                                 num_dst_nodes);
  const c10::cuda::CUDAGuard guard(edge_index.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int64_t n = edge_index.size(1);
  const at::TensorOptions options = edge_index.options().dtype(at::kLong);
  const at::Tensor keys = at::empty({n}, options);
  const at::Tensor stats = at::empty({3}, options);
  if (n > 0) {
    C10_CUDA_CHECK(cudaMemsetAsync(stats.mutable_data_ptr<int64_t>() + 2, 0xFF, sizeof(int64_t),
                                   stream));  // first_bad: all ones, atomicMin's identity
    auto* first_bad = reinterpret_cast<unsigned long long*>(stats.mutable_data_ptr<int64_t>() + 2);
    AT_DISPATCH_INDEX_TYPES(edge_index.scalar_type(), "excluded_edge_keys", [&] {
      const index_t* src = edge_index.const_data_ptr<index_t>();
      const index_t* dst = src + edge_index.stride(0);
      const int64_t step = edge_index.stride(1);
      int64_t* out = keys.mutable_data_ptr<int64_t>();
      dispatch_mode(plan.mode, [&](auto mode_tag) {
        launch(encode_edges_kernel<decltype(mode_tag)::value, index_t>, n, stream, src, dst,
               step, n, plan.encoder, out, first_bad);
      });
    });
  }
  at::Tensor unique, adj;
  int64_t first_bad;
  std::tie(unique, adj, first_bad) =
      excluded_tables(keys, n, plan.encoder.num_keys, plan.bits, stats, stream);
  return {unique, adj, at::full({1}, first_bad, at::kLong)};
}

}  // namespace

at::Tensor negative_sample_index_cuda(const at::Tensor& excluded_adj, int64_t num_ranks) {
  check_negative_sample_index(excluded_adj, num_ranks);
  const c10::cuda::CUDAGuard guard(excluded_adj.device());
  AdjIndex index;
  const at::Tensor bucket = cuda::build_adj_index(excluded_adj.contiguous(), num_ranks, index,
                                                  c10::cuda::getCurrentCUDAStream());
  return bucket.defined() ? bucket : at::empty({0}, excluded_adj.options());
}

TORCH_LIBRARY_IMPL(pyg_edgedot, CUDA, m) {
  m.impl("negative_sample", &negative_sample_cuda);
  m.impl("negative_sample_index", &negative_sample_index_cuda);
  m.impl("excluded_keys", &excluded_keys_cuda);
  m.impl("excluded_edge_keys", &excluded_edge_keys_cuda);
}

}  // namespace pyg_edgedot
