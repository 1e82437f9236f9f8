// CUDA kernel of negative_sample (schema in csrc/negative_sampling.cpp): the CPU kernel's draws
// (csrc/cpu/negative_sampling_kernel.cpp), bit for bit. Both draw from the counter-based
// generator of negative_sampling_common.h, where every random number belongs to a position
// (a counter), so this kernel computes the same numbers by parallel steps:
//
//   replace=True: one thread per output column t: rank t of the rank stream, its key through
//     the bucket index over adj (vec.cuh's build_adj_index), its pair. No sort, no host sync.
//   replace=False, count < M / 4 (sparse): the first `count` distinct ranks of the rank stream
//     in order of first appearance. n draws (ranks 0 .. n - 1), sorted by (rank, draw index)
//     with CUB's radix sort on the rank bits only (rank << index_bits | index in one word where
//     it fits, else the index as a payload: a stable sort keeps equal ranks in draw order);
//     the first of each run of equal ranks is marked at its draw index; an inclusive scan of
//     the marks in draw order gives each first appearance its output column; the firsts with a
//     column below `count` go to their key (a search through the bucket index, in rank order)
//     and their pair. The number of distinct ranks is read back once (the one host sync);
//     when it is below `count` (rare: the CPU kernel's sizes and checks) the draw runs again
//     with more draws of the same stream, which gives the same first appearances.
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

// The sparse draw's words (see the top of the file): rank i of the rank stream as
// rank << shift | i (index null), or as the rank with index[i] = i.
template <typename pos_t>
__global__ void draw_words_kernel(int64_t* __restrict__ words, pos_t* __restrict__ index,
                                  int64_t n, Stream ranks, int64_t num_ranks, int shift) {
  PYG_EDGEDOT_GRID_LOOP(i, n) {
    const int64_t r = static_cast<int64_t>(ranks.below(static_cast<uint64_t>(i),
                                                       static_cast<uint64_t>(num_ranks)));
    if (index == nullptr) {
      words[i] = (r << shift) | i;
    } else {
      words[i] = r;
      index[i] = static_cast<pos_t>(i);
    }
  }
}

// Sorted words: the rank and the draw index of position q.
template <typename pos_t>
struct SortedWords {
  const int64_t* __restrict__ words;
  const pos_t* __restrict__ index;  // null: packed
  int shift;

  __device__ __forceinline__ int64_t rank(int64_t q) const { return words[q] >> shift; }
  __device__ __forceinline__ int64_t draw(int64_t q) const {
    return index == nullptr ? words[q] & ((int64_t{1} << shift) - 1)
                            : static_cast<int64_t>(index[q]);
  }
  // Whether position q holds its rank's first appearance (the first of its run).
  __device__ __forceinline__ bool first(int64_t q) const {
    return q == 0 || rank(q - 1) != rank(q);
  }
};

// is_first[draw index] = 1 for a rank's first appearance, else 0.
template <typename pos_t>
__global__ void mark_first_kernel(SortedWords<pos_t> sorted, int64_t n,
                                  pos_t* __restrict__ is_first) {
  PYG_EDGEDOT_GRID_LOOP(q, n) { is_first[sorted.draw(q)] = sorted.first(q) ? 1 : 0; }
}

// First appearances, in rank order: column[draw index] - 1 is the column (the inclusive scan of
// is_first in draw order); below count, the pair of the rank's key.
template <Mode mode, typename index_t, typename pos_t>
__global__ void first_pairs_kernel(SortedWords<pos_t> sorted, int64_t n,
                                   const pos_t* __restrict__ column, int64_t count,
                                   const int64_t* __restrict__ adj, int64_t num_adj,
                                   AdjIndex adj_index, Decoder decoder,
                                   index_t* __restrict__ out, int64_t columns) {
  PYG_EDGEDOT_GRID_LOOP(q, n) {
    if (!sorted.first(q)) continue;
    const int64_t t = static_cast<int64_t>(column[sorted.draw(q)]) - 1;
    if (t < count) {
      write_pair<mode>(decoder, rank_to_key(adj, num_adj, adj_index, sorted.rank(q)), t, count,
                       out, columns);
    }
  }
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

// values[0, n) (non-negative) sorted stably by their bits [begin_bit, end_bit), those above
// zero (the input when there is nothing to sort).
at::Tensor sort_keys(const at::Tensor& values, int64_t n, int begin_bit, int end_bit,
                     cudaStream_t stream) {
  if (n < 2 || end_bit <= begin_bit) return values;
  at::Tensor out = at::empty({n}, values.options());
  const auto* in = reinterpret_cast<const uint64_t*>(values.const_data_ptr<int64_t>());
  auto* sorted = reinterpret_cast<uint64_t*>(out.mutable_data_ptr<int64_t>());
  size_t temp_bytes = 0;
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, in, sorted, n, begin_bit,
                                                end_bit, stream));
  at::Tensor temp = at::empty({static_cast<int64_t>(temp_bytes)},
                              values.options().dtype(at::kByte));
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

// The distinct values of in[0, n) (sorted) into out, their count into *num (on the device).
void select_unique(const int64_t* in, int64_t* out, int64_t* num, int64_t n,
                   const at::TensorOptions& options, cudaStream_t stream) {
  size_t temp_bytes = 0;
  C10_CUDA_CHECK(cub::DeviceSelect::Unique(nullptr, temp_bytes, in, out, num, n, stream));
  at::Tensor temp = at::empty({static_cast<int64_t>(temp_bytes)}, options.dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceSelect::Unique(temp.mutable_data_ptr(), temp_bytes, in, out, num, n,
                                           stream));
}

// The inclusive prefix sums of in[0, n), into a new tensor.
template <typename T>
at::Tensor inclusive_sum(const at::Tensor& in, int64_t n, cudaStream_t stream) {
  at::Tensor out = at::empty_like(in);
  const T* d_in = in.const_data_ptr<T>();
  T* d_out = out.mutable_data_ptr<T>();
  size_t temp_bytes = 0;
  C10_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, temp_bytes, d_in, d_out, n, stream));
  at::Tensor temp = at::empty({static_cast<int64_t>(temp_bytes)}, in.options().dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceScan::InclusiveSum(temp.mutable_data_ptr(), temp_bytes, d_in, d_out,
                                               n, stream));
  return out;
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
// stream, in order of first appearance (see the top of the file), draw indices of type pos_t.
template <typename pos_t>
void first_distinct_pairs(const at::Tensor& adj, const AdjIndex& adj_index, int64_t num_ranks,
                          int64_t count, int64_t seed, int64_t first_round, const Plan& plan,
                          at::Tensor& out, cudaStream_t stream) {
  const at::TensorOptions pos_options =
      adj.options().dtype(sizeof(pos_t) == 4 ? at::kInt : at::kLong);
  const Stream rank_stream(seed, kRankStream);
  const int rank_bits = bit_width(num_ranks);
  int64_t n = first_round >= 0 ? first_round : iid_draw_count(count, num_ranks);
  for (int round = 1;; ++round) {
    int64_t distinct = 0;
    if (n > 0) {
      PYG_EDGEDOT_CHECK(n - 1 <= static_cast<int64_t>(std::numeric_limits<pos_t>::max()),
                        "negative_sample: ", std::to_string(n), " draws overflow their index");
      const int index_bits = bit_width(n);
      const bool packed = rank_bits + index_bits <= 63;
      const int shift = packed ? index_bits : 0;
      at::Tensor words = at::empty({n}, adj.options()), index;
      if (!packed) index = at::empty({n}, pos_options);
      launch(draw_words_kernel<pos_t>, n, stream, words.mutable_data_ptr<int64_t>(),
             packed ? nullptr : index.mutable_data_ptr<pos_t>(), n, rank_stream, num_ranks,
             shift);
      if (packed) {
        words = sort_keys(words, n, shift, shift + rank_bits, stream);
      } else {
        std::tie(words, index) = sort_pairs<int64_t, pos_t>(words, index, n, rank_bits, stream);
      }
      const SortedWords<pos_t> sorted{words.const_data_ptr<int64_t>(),
                                      packed ? nullptr : index.const_data_ptr<pos_t>(), shift};
      at::Tensor is_first = at::empty({n}, pos_options);
      launch(mark_first_kernel<pos_t>, n, stream, sorted, n, is_first.mutable_data_ptr<pos_t>());
      const at::Tensor column = inclusive_sum<pos_t>(is_first, n, stream);
      dispatch_pairs(out, plan.mode, [&](auto index_tag, auto mode_tag) {
        using index_t = decltype(index_tag);
        launch(first_pairs_kernel<decltype(mode_tag)::value, index_t, pos_t>, n, stream, sorted,
               n, column.const_data_ptr<pos_t>(), count, adj.const_data_ptr<int64_t>(),
               adj.numel(), adj_index, plan.decoder, out.mutable_data_ptr<index_t>(),
               plan.columns);
      });
      distinct = column.narrow(0, n - 1, 1).item<int64_t>();  // the host sync
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
                                at::ScalarType dtype, int64_t first_round) {
  const Plan plan = check_negative_sample(excluded_adj, num_ranks, count, replace, mode_name,
                                          num_src_nodes, num_dst_nodes, dtype, first_round);
  const c10::cuda::CUDAGuard guard(excluded_adj.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  at::Tensor out = at::empty({2, plan.columns}, excluded_adj.options().dtype(dtype));
  if (count == 0) return out;

  const at::Tensor adj = excluded_adj.contiguous();
  AdjIndex adj_index;
  const at::Tensor bucket = cuda::build_adj_index(adj, num_ranks, adj_index, stream);
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
    // 32-bit draw indices while they fit (checked per round; a top-up round draws more)
    if (4 * std::max(count, first_round) < std::numeric_limits<int32_t>::max()) {
      first_distinct_pairs<int32_t>(adj, adj_index, num_ranks, count, seed, first_round, plan,
                                    out, stream);
    } else {
      first_distinct_pairs<int64_t>(adj, adj_index, num_ranks, count, seed, first_round, plan,
                                    out, stream);
    }
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
  const at::Tensor sorted = sort_keys(keys, n, 0, bits, stream);
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

TORCH_LIBRARY_IMPL(pyg_edgedot, CUDA, m) {
  m.impl("negative_sample", &negative_sample_cuda);
  m.impl("excluded_keys", &excluded_keys_cuda);
  m.impl("excluded_edge_keys", &excluded_edge_keys_cuda);
}

}  // namespace pyg_edgedot
