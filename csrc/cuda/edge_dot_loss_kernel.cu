// CUDA kernels of edge_dot_loss (schemas in csrc/edge_dot_loss.cpp). The negatives are drawn
// per lane from the counter-based generator of csrc/edge_dot_loss_common.h (the functions the
// CPU kernels use), so both devices and the composite draw the same pairs.
//
// Forward, three kernels:
//   1. scores: the E * (1 + K) pairs, pair p = e * (1 + K) + j (j = 0 the positive, j >= 1 its
//      negative j - 1), scored like edge_dot's forward: lane l of a warp draws pair l of a
//      chunk of 32 (a chunk ahead, so the draw and its search in adj hide behind the row
//      loads), groups of G lanes score them with 16-byte loads and shuffles. The scores go to
//      score_grad [E, 1 + K] itself (its layout is the pair index), in the features' dtype
//      as edge_dot returns them.
//   2. terms: one thread per positive turns its row of scores into the loss terms and
//      dloss/dscore in place, and reports first_bad; a block sums a fixed tile of positives
//      (threads in opmath, the block's tree in float64, in a fixed order).
//   3. the tiles' sums added by one block in a fixed order, divided for "mean".
// No grid-stride loop decides what a block sums, so the loss has the same bits on every run
// and every GPU. Traffic beyond edge_dot's over the same pairs: the [E, 1 + K] scores written,
// read and written again (8 bytes a pair in fp32 against 2 * D * 4 gathered).
//
// Backward: chunks of positives (as the composite's: max(2^24 pairs, the gradients' bytes /
// 48)); per chunk and gradient needed, one kernel regenerates the chunk's pairs and their
// weights grad_loss * score_grad (/ count for "mean", in the features' dtype as the composite
// hands them on) straight into the sort input of edge_dot_grad's sorted backward
// (grad_walk.cuh: key = the pair's row on the gradient's side, payload = its row on the other
// side and its weight), which sorts it by row and walks the rows; chunks are added in order.
// No pair index tensor exists: beyond the gradients, the memory is the sort's (24 bytes a pair
// with 32-bit keys and fp32 weights), as in edge_dot's backward. Chunks of at most 2^16 pairs
// go to edge_dot_grad (through the dispatcher) as index tensors instead, for its small-E path;
// both routes give the same bits.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>

#include "common.h"
#include "edge_dot_loss_common.h"
#include "grad_walk.cuh"
#include "vec.cuh"

namespace pyg_edgedot {
namespace {

using namespace ::pyg_edgedot::cuda;
using loss::Loss;
using loss::Space;

constexpr int64_t kTermsPerThread = 4;                     // positives per thread, kernel 2
constexpr int64_t kTile = kThreads * kTermsPerThread;      // positives per block, kernel 2
constexpr int kScoreEdgesInFlight = 4;  // edge_dot's forward takes 2 at 4 blocks per SM; not tried here

// The seed: read on the device when it lives there (no host synchronization; CUDA graphs
// replay the updated value), else given.
__device__ __forceinline__ uint64_t stream_key(const Space& sp, const int64_t* seed_ptr) {
  return seed_ptr != nullptr ? loss::mix64(static_cast<uint64_t>(*seed_ptr)) : sp.key;
}

// Pair p's rows, or (-1, -1) past the end or for a positive with an index out of range.
template <typename index_t>
__device__ __forceinline__ void pair_of(const Space& sp, int64_t p, int64_t num_pairs,
                                        const index_t* __restrict__ src_index,
                                        int64_t src_index_stride,
                                        const index_t* __restrict__ dst_index,
                                        int64_t dst_index_stride, int64_t num_src_rows,
                                        int64_t num_dst_rows, int64_t& s, int64_t& d) {
  s = d = -1;
  if (p >= num_pairs) return;
  const int64_t width = 1 + sp.num_negatives;
  const int64_t e = p / width, j = p - e * width;
  const int64_t ps = static_cast<int64_t>(src_index[e * src_index_stride]);
  const int64_t pd = static_cast<int64_t>(dst_index[e * dst_index_stride]);
  if (ps < 0 || ps >= num_src_rows || pd < 0 || pd >= num_dst_rows) return;
  if (j == 0) {
    s = ps;
    d = pd;
  } else {
    loss::negative(sp, e, j - 1, ps, s, d);
  }
}

// ---------------------------------------------------------------------------------------
// Forward 1: scores
// ---------------------------------------------------------------------------------------

template <typename scalar_t, typename index_t, int VEC, int EPG>
__global__ void __launch_bounds__(kThreads, 3) loss_score_kernel(
    const scalar_t* __restrict__ x_src, int64_t src_row_stride, int64_t num_src,  // [N_src, D]
    const scalar_t* __restrict__ x_dst, int64_t dst_row_stride, int64_t num_dst,  // [N_dst, D]
    const index_t* __restrict__ src_index, int64_t src_index_stride,              // [E]
    const index_t* __restrict__ dst_index, int64_t dst_index_stride,              // [E]
    Space sp, const int64_t* __restrict__ seed_ptr,
    scalar_t* __restrict__ scores,  // [E * (1 + K)]
    int64_t num_pairs, int64_t feat_dim, int group_size) {
  using acc_t = at::opmath_type<scalar_t>;
  sp.key = stream_key(sp, seed_ptr);
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t warp_stride = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp * kWarp;
  const int lane_in_warp = threadIdx.x % kWarp;
  const int lane = lane_in_warp % group_size;
  const int group_first = lane_in_warp - lane;

  int64_t next_s, next_d;
  pair_of(sp, warp * kWarp + lane_in_warp, num_pairs, src_index, src_index_stride, dst_index,
          dst_index_stride, num_src, num_dst, next_s, next_d);
  for (int64_t chunk = warp * kWarp; chunk < num_pairs; chunk += warp_stride) {
    const int64_t my_s = next_s, my_d = next_d;
    pair_of(sp, chunk + warp_stride + lane_in_warp, num_pairs, src_index, src_index_stride,
            dst_index, dst_index_stride, num_src, num_dst, next_s, next_d);  // a chunk ahead
    const int64_t my_pair = chunk + lane_in_warp;
    // pair_of gave (-1, -1) past the end and for a positive out of range: not scored
    const acc_t my_score = score_group_edges<scalar_t, VEC, EPG, false, false>(
        x_src, src_row_stride, x_dst, dst_row_stride, x_src, 0, my_s, my_d, 0, lane, group_first,
        group_size, group_size, feat_dim,
        [](int64_t s, int64_t d, int64_t) { return s >= 0 && d >= 0; });
    if (my_pair < num_pairs) scores[my_pair] = static_cast<scalar_t>(my_score);
  }
}

// ---------------------------------------------------------------------------------------
// Forward 2 and 3: terms, dloss/dscore, the loss
// ---------------------------------------------------------------------------------------

// In-place fixed-order tree over kThreads float64 values; returns the sum in thread 0.
__device__ __forceinline__ double block_sum(double value, double* shared) {
  shared[threadIdx.x] = value;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  return shared[0];
}

template <typename scalar_t, typename index_t>
__global__ void __launch_bounds__(kThreads) loss_terms_kernel(
    const index_t* __restrict__ src_index, int64_t src_index_stride, int64_t num_src,
    const index_t* __restrict__ dst_index, int64_t dst_index_stride, int64_t num_dst,
    scalar_t* __restrict__ score_grad,  // [E, 1 + K]: scores in, dloss/dscore out
    int64_t num_edges, int64_t width, Loss loss_kind, double* __restrict__ partial,
    unsigned long long* __restrict__ first_bad) {
  using acc_t = at::opmath_type<scalar_t>;
  __shared__ double shared[kThreads];
  acc_t sum = 0;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kTile;
  for (int64_t i = threadIdx.x; i < kTile; i += kThreads) {
    const int64_t e = base + i;
    if (e >= num_edges) break;
    scalar_t* row = score_grad + e * width;
    const int64_t s = static_cast<int64_t>(src_index[e * src_index_stride]);
    const int64_t d = static_cast<int64_t>(dst_index[e * dst_index_stride]);
    if (s < 0 || s >= num_src || d < 0 || d >= num_dst) {
      atomicMin(first_bad, static_cast<unsigned long long>(e));
      sum += std::numeric_limits<acc_t>::quiet_NaN();
      for (int64_t j = 0; j < width; ++j) row[j] = scalar_t(0);
      continue;
    }
    sum += loss::positive_terms<acc_t>(loss_kind, row, row, width);
  }
  const double total = block_sum(static_cast<double>(sum), shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

template <typename scalar_t>
__global__ void __launch_bounds__(kThreads) loss_total_kernel(const double* __restrict__ partial,
                                                              int64_t num_partial, double count,
                                                              scalar_t* __restrict__ out) {
  using acc_t = at::opmath_type<scalar_t>;
  __shared__ double shared[kThreads];
  double sum = 0;
  for (int64_t i = threadIdx.x; i < num_partial; i += kThreads) sum += partial[i];
  const double total = block_sum(sum, shared);
  if (threadIdx.x == 0) {
    out[0] = static_cast<scalar_t>(static_cast<acc_t>(count > 0 ? total / count : total));
  }
}

template <typename scalar_t, typename index_t, int VEC>
void launch_scores(const at::Tensor& x_src, const at::Tensor& x_dst, const at::Tensor& src_index,
                   const at::Tensor& dst_index, const Space& sp, const int64_t* seed_ptr,
                   at::Tensor& score_grad, cudaStream_t stream) {
  const int64_t num_pairs = score_grad.numel(), feat_dim = x_src.size(1);
  const int group = group_size_for(feat_dim, VEC);
  loss_score_kernel<scalar_t, index_t, VEC, kScoreEdgesInFlight>
      <<<grid_for((num_pairs + kWarp - 1) / kWarp), kThreads, 0, stream>>>(
          x_src.const_data_ptr<scalar_t>(), x_src.stride(0), x_src.size(0),
          x_dst.const_data_ptr<scalar_t>(), x_dst.stride(0), x_dst.size(0),
          src_index.const_data_ptr<index_t>(), src_index.stride(0),
          dst_index.const_data_ptr<index_t>(), dst_index.stride(0), sp, seed_ptr,
          score_grad.mutable_data_ptr<scalar_t>(), num_pairs, feat_dim, group);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The space's device pointers and seed: a CPU seed is read here (no synchronization), a
// device seed in the kernels. `bucket` holds the adj index the space points to: the caller's
// kept one, else built for this call.
Space device_space(const char* op, const loss::Call& call, const int64_t** seed_ptr,
                   at::Tensor& bucket) {
  const at::Tensor &adj = call.adj, &row_ptr = call.row_ptr, &seed = call.seed;
  Space sp = call.space;
  sp.adj = adj.const_data_ptr<int64_t>();
  sp.row_ptr = row_ptr.numel() > 0 ? row_ptr.const_data_ptr<int64_t>() : nullptr;
  bucket = adj_index_of(op, adj, sp.num_ranks,
                        call.adj_index.defined() ? &call.adj_index : nullptr, sp.adj_index,
                        c10::cuda::getCurrentCUDAStream());
  if (seed.is_cuda()) {
    *seed_ptr = seed.const_data_ptr<int64_t>();
  } else {
    *seed_ptr = nullptr;
    sp.key = loss::mix64(static_cast<uint64_t>(seed.item<int64_t>()));
  }
  return sp;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> edge_dot_loss_cuda(const loss::Call& call) {
  const c10::cuda::OptionalCUDAGuard guard(call.x_src.device());
  const loss::Options& options = call.options;
  const at::Tensor &x_src = call.x_src, &x_dst = call.x_dst;
  const at::Tensor &src_index = call.src_index, &dst_index = call.dst_index;
  const int64_t num_edges = call.num_edges, width = call.width;
  at::Tensor score_grad = at::empty({num_edges, width}, x_src.options());
  at::Tensor first_bad = new_first_bad(x_src);
  at::Tensor out = at::empty({}, x_src.options());
  const double count = options.mean ? static_cast<double>(call.num_terms) : 0.0;
  if (num_edges == 0) {
    out.fill_(options.mean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    return {out, first_bad, score_grad};
  }
  const int64_t* seed_ptr = nullptr;
  at::Tensor bucket;
  const Space sp = device_space("edge_dot_loss", call, &seed_ptr, bucket);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const int64_t num_tiles = (num_edges + kTile - 1) / kTile;
  at::Tensor partial = at::empty({num_tiles}, x_src.options().dtype(at::kDouble));
  auto* first_bad_ptr =
      reinterpret_cast<unsigned long long*>(first_bad.mutable_data_ptr<int64_t>());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_src.scalar_type(), "edge_dot_loss_cuda", [&] {
    AT_DISPATCH_INDEX_TYPES(src_index.scalar_type(), "edge_dot_loss_cuda", [&] {
      constexpr int kVec = 16 / sizeof(scalar_t);
      if (rows_vectorizable(x_src, kVec) && rows_vectorizable(x_dst, kVec)) {
        launch_scores<scalar_t, index_t, kVec>(x_src, x_dst, src_index, dst_index, sp, seed_ptr,
                                               score_grad, stream);
      } else {
        launch_scores<scalar_t, index_t, 1>(x_src, x_dst, src_index, dst_index, sp, seed_ptr,
                                            score_grad, stream);
      }
      loss_terms_kernel<scalar_t, index_t><<<num_tiles, kThreads, 0, stream>>>(
          src_index.const_data_ptr<index_t>(), src_index.stride(0), x_src.size(0),
          dst_index.const_data_ptr<index_t>(), dst_index.stride(0), x_dst.size(0),
          score_grad.mutable_data_ptr<scalar_t>(), num_edges, width, options.loss,
          partial.mutable_data_ptr<double>(), first_bad_ptr);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      loss_total_kernel<scalar_t><<<1, kThreads, 0, stream>>>(
          partial.const_data_ptr<double>(), num_tiles, count, out.mutable_data_ptr<scalar_t>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    });
  });
  return {out, first_bad, score_grad};
}

// ---------------------------------------------------------------------------------------
// Backward
// ---------------------------------------------------------------------------------------

// Chunks of at most this many pairs go to edge_dot_grad as index tensors (under 2 MB), whose
// small-E path (no sort, a few launches per side) takes them where the rows allow, with the
// sorted path's bits. Larger chunks write their pairs straight
// into the sort input of grad_walk.cuh, so no pair index tensor exists; both routes add a
// row's pairs in increasing pair order from zero with the same piece length (a function of
// the chunk's pair count), so the route never changes the gradient's bits.
constexpr int64_t kMaterializedMaxPairs = int64_t{1} << 16;

// What the backward's pair kernels read: the positives, the negatives' space, and the
// weights' inputs.
template <typename scalar_t, typename index_t>
struct PairSource {
  const index_t* __restrict__ src_index;  // [E]
  int64_t src_index_stride, num_src;
  const index_t* __restrict__ dst_index;  // [E]
  int64_t dst_index_stride, num_dst;
  Space sp;
  const int64_t* __restrict__ seed_ptr;
  const scalar_t* __restrict__ score_grad;                 // [E * (1 + K)]
  const at::opmath_type<scalar_t>* __restrict__ grad_loss;  // [1]
  double count;                                            // "mean": the count, else 0
  int64_t num_pairs;
};

// put(i, s, d, weight) for pairs p0 + i, i in [0, n), grid-stride: (s, d) = (-1, -1) for a
// positive out of range, and the weight grad_loss * score_grad (/ count for "mean") rounded
// to the features' dtype, as the composite hands it to edge_dot_grad.
template <typename scalar_t, typename index_t, typename Put>
__device__ __forceinline__ void for_each_pair(PairSource<scalar_t, index_t> in, int64_t p0,
                                              int64_t n, Put&& put) {
  using acc_t = at::opmath_type<scalar_t>;
  in.sp.key = stream_key(in.sp, in.seed_ptr);
  // as the composite: grad_loss in opmath, divided by the count in opmath for "mean"
  acc_t scale = in.grad_loss[0];
  if (in.count > 0) scale = scale / static_cast<acc_t>(in.count);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    int64_t s, d;
    pair_of(in.sp, p0 + i, in.num_pairs, in.src_index, in.src_index_stride, in.dst_index,
            in.dst_index_stride, in.num_src, in.num_dst, s, d);
    put(i, s, d, static_cast<scalar_t>(static_cast<acc_t>(in.score_grad[p0 + i]) * scale));
  }
}

// The chunk's pairs as index tensors and weights, for edge_dot_grad (which skips the (-1, -1)
// pairs).
template <typename scalar_t, typename index_t, typename out_index_t>
__global__ void __launch_bounds__(kThreads) loss_pairs_kernel(
    const PairSource<scalar_t, index_t> in, int64_t p0, int64_t n,
    out_index_t* __restrict__ src_out,  // [n]
    out_index_t* __restrict__ dst_out,  // [n]
    scalar_t* __restrict__ weight_out) {  // [n]
  for_each_pair(in, p0, n, [&](int64_t i, int64_t s, int64_t d, scalar_t weight) {
    src_out[i] = static_cast<out_index_t>(s);
    dst_out[i] = static_cast<out_index_t>(d);
    weight_out[i] = weight;
  });
}

// The chunk's pairs as one gradient's sort input (grad_walk.cuh), pair i at position i: the
// key is the pair's row on the scatter side (the source for the source gradient), the payload
// its row on the other side and its weight, as edge_dot_grad's make_sort_input_kernel writes
// them from the index tensors.
template <typename scalar_t, typename index_t, typename key_t>
__global__ void __launch_bounds__(kThreads) loss_sort_input_kernel(
    const PairSource<scalar_t, index_t> in, int64_t p0, int64_t n, bool scatter_src,
    int64_t num_rows, int64_t num_gather,
    key_t* __restrict__ keys,                                                      // [n]
    EdgePayload<at::opmath_type<scalar_t>, key_t, false>* __restrict__ payload) {  // [n]
  for_each_pair(in, p0, n, [&](int64_t i, int64_t s, int64_t d, scalar_t weight) {
    const int64_t row = scatter_src ? s : d, g = scatter_src ? d : s;
    keys[i] = sort_key<key_t>(row, num_rows);
    payload[i].grad = static_cast<at::opmath_type<scalar_t>>(weight);
    payload[i].gather = static_cast<key_t>(g >= 0 && g < num_gather ? g : -1);
  });
}

// edge_dot_grad's CUDA kernel, through the dispatcher (below autograd).
at::Tensor edge_dot_grad_op(const at::Tensor& grad, const at::Tensor& x_gather,
                            const at::Tensor& scatter, const at::Tensor& gather,
                            int64_t num_rows) {
  static const auto handle =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("pyg_edgedot::edge_dot_grad", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, c10::SymInt)>();
  return handle.redispatch(c10::DispatchKeySet(c10::DispatchKey::CUDA), grad, x_gather, scatter,
                           gather, c10::SymInt(num_rows));
}

// A chunk's gradient added to the running one, in opmath for 16-bit types (as the composite).
void accumulate(at::Tensor& total, const at::Tensor& part) {
  if (!total.defined()) {
    total = part;
    return;
  }
  const auto acc_type = at::toOpMathType(total.scalar_type());
  if (total.scalar_type() != acc_type) total = total.to(acc_type);
  total.add_(part);
}

// A chunk's gradients through edge_dot_grad, added to grads (source, destination): its pairs
// materialized (int32 where the rows allow), then one call per gradient needed.
template <typename scalar_t, typename index_t>
void chunk_grads_materialized(const PairSource<scalar_t, index_t>& source,
                              const at::Tensor& x_src, const at::Tensor& x_dst, int64_t p0,
                              int64_t n, bool needs_src, bool needs_dst, at::Tensor (&grads)[2],
                              cudaStream_t stream) {
  const int64_t int32_max = std::numeric_limits<int32_t>::max();
  const bool small = x_src.size(0) < int32_max && x_dst.size(0) < int32_max;
  const auto index_options = x_src.options().dtype(small ? at::kInt : at::kLong);
  at::Tensor src_pairs = at::empty({n}, index_options);
  at::Tensor dst_pairs = at::empty({n}, index_options);
  at::Tensor weights = at::empty({n}, x_src.options());
  auto launch = [&](auto out_tag) {
    using out_index_t = decltype(out_tag);
    loss_pairs_kernel<scalar_t, index_t, out_index_t>
        <<<grid_for((n + kWarp - 1) / kWarp), kThreads, 0, stream>>>(
            source, p0, n, src_pairs.mutable_data_ptr<out_index_t>(),
            dst_pairs.mutable_data_ptr<out_index_t>(), weights.mutable_data_ptr<scalar_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if (small) {
    launch(int32_t{});
  } else {
    launch(int64_t{});
  }
  if (needs_src) {
    accumulate(grads[0], edge_dot_grad_op(weights, x_dst, src_pairs, dst_pairs, x_src.size(0)));
  }
  if (needs_dst) {
    accumulate(grads[1], edge_dot_grad_op(weights, x_src, dst_pairs, src_pairs, x_dst.size(0)));
  }
}

// One gradient of a chunk, its pairs written straight into the sort input: the rows of
// x_scatter receive sum weight * x_gather[other side's row].
template <typename scalar_t, typename index_t, typename key_t>
at::Tensor chunk_grad_sorted(const PairSource<scalar_t, index_t>& source, bool scatter_src,
                             const at::Tensor& x_scatter, const at::Tensor& x_gather,
                             int64_t p0, int64_t n, cudaStream_t stream) {
  using Payload = EdgePayload<at::opmath_type<scalar_t>, key_t, false>;
  at::Tensor out = at::empty({x_scatter.size(0), x_gather.size(1)}, x_gather.options());
  const auto input = new_sort_input<key_t, Payload>(n, out);
  loss_sort_input_kernel<scalar_t, index_t, key_t>
      <<<grid_for((n + kWarp - 1) / kWarp), kThreads, 0, stream>>>(
          source, p0, n, scatter_src, x_scatter.size(0), x_gather.size(0), input.keys,
          input.payload);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const GatherRows<scalar_t> in{x_gather.const_data_ptr<scalar_t>(), x_gather.stride(0),
                                nullptr, 0};
  sort_and_walk<scalar_t, false>(input, in, choose_width<scalar_t, false>(x_gather, x_gather, out),
                                 out, stream);
  return out;
}

std::tuple<at::Tensor, at::Tensor> edge_dot_loss_grad_cuda(const loss::Call& call,
                                                           bool needs_src, bool needs_dst) {
  const c10::cuda::OptionalCUDAGuard guard(call.x_src.device());
  const at::Tensor &x_src = call.x_src, &x_dst = call.x_dst, &score_grad = call.score_grad;
  const at::Tensor &src_index = call.src_index, &dst_index = call.dst_index;
  const int64_t num_edges = call.num_edges, width = call.width;
  const int64_t feat_dim = x_src.size(1);
  const at::Tensor scale_in = call.grad_loss.to(at::toOpMathType(x_src.scalar_type()));
  at::Tensor grads[2];
  const int64_t num_pairs = num_edges * width;
  if (num_pairs > 0 && feat_dim > 0 && (needs_src || needs_dst)) {
    const int64_t* seed_ptr = nullptr;
    at::Tensor bucket;
    const Space sp = device_space("edge_dot_loss_grad", call, &seed_ptr, bucket);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const double count = call.options.mean ? static_cast<double>(call.num_terms) : 0.0;
    // Chunks as the composite's: max(2^24 pairs, the gradients' bytes / 48), whole positives
    // (the sort input takes 24 bytes a pair with 32-bit keys and fp32 weights, at most half
    // the gradients' bytes above 2^24 pairs).
    const int64_t grad_bytes = (x_src.numel() + x_dst.numel()) * x_src.element_size();
    const int64_t chunk_pos = std::max<int64_t>(
        1, std::max<int64_t>(int64_t{1} << 24, grad_bytes / 48) / width);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_src.scalar_type(), "edge_dot_loss_grad_cuda", [&] {
      AT_DISPATCH_INDEX_TYPES(src_index.scalar_type(), "edge_dot_loss_grad_cuda", [&] {
        const PairSource<scalar_t, index_t> source{
            src_index.const_data_ptr<index_t>(), src_index.stride(0), x_src.size(0),
            dst_index.const_data_ptr<index_t>(), dst_index.stride(0), x_dst.size(0), sp,
            seed_ptr, score_grad.const_data_ptr<scalar_t>(),
            scale_in.const_data_ptr<at::opmath_type<scalar_t>>(), count, num_pairs};
        for (int64_t start = 0; start < num_edges; start += chunk_pos) {
          const int64_t p0 = start * width;
          const int64_t n = std::min(num_edges, start + chunk_pos) * width - p0;
          if (n <= kMaterializedMaxPairs) {
            chunk_grads_materialized(source, x_src, x_dst, p0, n, needs_src, needs_dst, grads,
                                     stream);
            continue;
          }
          for (const bool scatter_src : {true, false}) {  // one sort input at a time
            if (!(scatter_src ? needs_src : needs_dst)) continue;
            const at::Tensor& x_scatter = scatter_src ? x_src : x_dst;
            const at::Tensor& x_gather = scatter_src ? x_dst : x_src;
            auto run = [&](auto key_tag) {
              accumulate(grads[scatter_src ? 0 : 1],
                         chunk_grad_sorted<scalar_t, index_t, decltype(key_tag)>(
                             source, scatter_src, x_scatter, x_gather, p0, n, stream));
            };
            if (keys_fit_int32(x_scatter.size(0), n, x_gather.size(0), 0)) {
              run(int32_t{});
            } else {
              run(int64_t{});
            }
          }
        }
      });
    });
  }
  auto finish = [&](at::Tensor& grad, bool needed, const at::Tensor& x) {
    if (!needed) return at::empty({0, feat_dim}, x.options());
    if (!grad.defined()) return at::zeros({x.size(0), feat_dim}, x.options());
    return grad.scalar_type() == x.scalar_type() ? grad : grad.to(x.scalar_type());
  };
  return {finish(grads[0], needs_src, x_src), finish(grads[1], needs_dst, x_dst)};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_edgedot, CUDA, m) {
  loss::impl_loss_ops<&edge_dot_loss_cuda, &edge_dot_loss_grad_cuda>(m);
}

}  // namespace pyg_edgedot
