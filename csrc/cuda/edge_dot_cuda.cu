// CUDA kernels of pyg_edgedot: a fused forward and a fused, deterministic backward.
//
// Forward: a group of G lanes (a power of two <= 32) scores EPG edges at once; each lane
// reads 16-byte vectors of both rows (scalars when rows are not aligned), accumulates in
// opmath, and the group reduces with shuffles. Traffic: 2 * E * D elements gathered, E
// indices of each side, E scores written. No [E, D] intermediate.
//
// Backward (one side, out[scatter[e]] += grad[e] * x_gather[gather[e]]): the edges are
// radix-sorted by scatter index (CUB, only the bits that the row count needs) carrying their
// gather index and upstream gradient along, a CSR row pointer is built from the sorted keys,
// and one group per output row sums its edges in sorted order and writes the row once, in
// the output dtype. No atomics, so the result is bitwise deterministic; traffic: E * D
// gathered elements + N * D written + the sort of (key, gather index, gradient).
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cub/cub.cuh>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "common.h"

namespace pyg_edgedot {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T val[N];
};

template <int VEC, typename scalar_t>
__device__ __forceinline__ void load_vec(const scalar_t* __restrict__ ptr, scalar_t (&out)[VEC]) {
  if constexpr (VEC == 1) {
    out[0] = __ldg(ptr);
  } else {
    const Vec<scalar_t, VEC> v = *reinterpret_cast<const Vec<scalar_t, VEC>*>(ptr);
#pragma unroll
    for (int i = 0; i < VEC; ++i) out[i] = v.val[i];
  }
}

template <int VEC, typename scalar_t, typename acc_t>
__device__ __forceinline__ void store_vec(scalar_t* __restrict__ ptr, const acc_t (&acc)[VEC]) {
  if constexpr (VEC == 1) {
    ptr[0] = static_cast<scalar_t>(acc[0]);
  } else {
    Vec<scalar_t, VEC> v;
#pragma unroll
    for (int i = 0; i < VEC; ++i) v.val[i] = static_cast<scalar_t>(acc[i]);
    *reinterpret_cast<Vec<scalar_t, VEC>*>(ptr) = v;
  }
}

// Lanes per group: enough that one pass of 16-byte loads covers the row, at most a warp.
inline int group_size_for(int64_t feat_dim, int vec) {
  const int64_t lanes_needed = std::max<int64_t>(1, (feat_dim + vec - 1) / vec);
  int group = 1;
  while (group < kWarp && group < lanes_needed) group *= 2;
  return group;
}

inline int64_t grid_for(int64_t num_warps_needed) {
  const int64_t warps_per_block = kThreads / kWarp;
  const int64_t blocks = (num_warps_needed + warps_per_block - 1) / warps_per_block;
  int device = 0, num_sms = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t max_blocks = static_cast<int64_t>(num_sms) * 32;
  return std::max<int64_t>(1, std::min(blocks, max_blocks));
}

inline bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// 16-byte vectors are used when every row starts on a 16-byte boundary.
inline bool rows_vectorizable(const at::Tensor& x, int vec) {
  return vec > 1 && x.size(1) % vec == 0 && x.stride(0) % vec == 0 && aligned16(x.const_data_ptr());
}

// ---------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------

// A warp takes 32 consecutive edges at a time: lane l loads the two indices of edge l (one
// coalesced load per side, issued one chunk ahead so index latency hides behind the row
// loads). A group of G lanes then scores G of those edges, EPG at a time: the indices come
// by shuffle, each lane loads 16-byte pieces of the 2 * EPG rows, and the group reduces.
// Lane l keeps the score of edge l, so the chunk's 32 scores are stored in one coalesced
// write. Every loop is warp-uniform, so the full-mask shuffles are safe.
template <typename scalar_t, typename index_t, int VEC, int EPG>
__global__ void __launch_bounds__(kThreads) edge_dot_fwd_kernel(
    const scalar_t* __restrict__ x_src, int64_t src_row_stride, int64_t num_src,  // [N_src, D]
    const scalar_t* __restrict__ x_dst, int64_t dst_row_stride, int64_t num_dst,  // [N_dst, D]
    const index_t* __restrict__ src_index, int64_t src_index_stride,              // [E]
    const index_t* __restrict__ dst_index, int64_t dst_index_stride,              // [E]
    scalar_t* __restrict__ out,                                                   // [E]
    unsigned long long* __restrict__ first_bad,  // [1]: smallest bad edge, or all ones
    int64_t num_edges, int64_t feat_dim, int group_size) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t warp_stride = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp * kWarp;
  const int lane_in_warp = threadIdx.x % kWarp;
  const int lane = lane_in_warp % group_size;
  const int group_first_edge = lane_in_warp - lane;  // edges [first, first + G) of the chunk
  const int batch = EPG < group_size ? EPG : group_size;

  auto load_index = [&](int64_t e, int64_t& s, int64_t& d) {
    s = d = -1;
    if (e < num_edges) {
      s = static_cast<int64_t>(src_index[e * src_index_stride]);
      d = static_cast<int64_t>(dst_index[e * dst_index_stride]);
    }
  };
  int64_t next_s, next_d;
  load_index(warp * kWarp + lane_in_warp, next_s, next_d);

  for (int64_t chunk = warp * kWarp; chunk < num_edges; chunk += warp_stride) {
    const int64_t my_s = next_s, my_d = next_d;
    load_index(chunk + warp_stride + lane_in_warp, next_s, next_d);  // prefetch
    const int64_t my_edge = chunk + lane_in_warp;
    const bool my_valid = my_s >= 0 && my_s < num_src && my_d >= 0 && my_d < num_dst;
    if (!my_valid && my_edge < num_edges) {
      atomicMin(first_bad, static_cast<unsigned long long>(my_edge));
    }
    acc_t my_score = std::numeric_limits<acc_t>::quiet_NaN();

    for (int t0 = 0; t0 < group_size; t0 += batch) {
      const scalar_t* src_row[EPG];
      const scalar_t* dst_row[EPG];
      bool valid[EPG];
      acc_t acc[EPG];
#pragma unroll
      for (int j = 0; j < EPG; ++j) {
        const int source_lane = group_first_edge + t0 + (j < batch ? j : 0);
        const int64_t s = __shfl_sync(0xffffffffu, my_s, source_lane);
        const int64_t d = __shfl_sync(0xffffffffu, my_d, source_lane);
        valid[j] = j < batch && s >= 0 && s < num_src && d >= 0 && d < num_dst;
        src_row[j] = x_src + (valid[j] ? s : 0) * src_row_stride;
        dst_row[j] = x_dst + (valid[j] ? d : 0) * dst_row_stride;
        acc[j] = acc_t(0);
      }
      for (int64_t k = static_cast<int64_t>(lane) * VEC; k < feat_dim;
           k += static_cast<int64_t>(group_size) * VEC) {
        scalar_t a[EPG][VEC], b[EPG][VEC];
#pragma unroll
        for (int j = 0; j < EPG; ++j) {
          if (valid[j]) {
            load_vec<VEC>(src_row[j] + k, a[j]);
            load_vec<VEC>(dst_row[j] + k, b[j]);
          }
        }
#pragma unroll
        for (int j = 0; j < EPG; ++j) {
          if (valid[j]) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
              acc[j] += static_cast<acc_t>(a[j][i]) * static_cast<acc_t>(b[j][i]);
            }
          }
        }
      }
#pragma unroll
      for (int j = 0; j < EPG; ++j) {
        for (int offset = group_size / 2; offset > 0; offset /= 2) {
          acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], offset);
        }
        if (j < batch && lane == t0 + j && valid[j]) my_score = acc[j];
      }
    }
    if (my_edge < num_edges) out[my_edge] = static_cast<scalar_t>(my_score);
  }
}

// Edges whose row loads are in flight together per group. Measured on the H200 at W3/W4
// (benchmarks/NOTES.md): 8 was no faster in fp32 and 1.8x slower in bf16 than 4.
constexpr int kForwardEdgesInFlight = 4;

template <typename scalar_t, typename index_t, int VEC>
void launch_forward(const at::Tensor& x_src, const at::Tensor& x_dst,
                    const at::Tensor& src_index, const at::Tensor& dst_index, at::Tensor& out,
                    unsigned long long* first_bad) {
  const int64_t num_edges = out.size(0), feat_dim = x_src.size(1);
  const int group = group_size_for(feat_dim, VEC);
  const int64_t grid = grid_for((num_edges + kWarp - 1) / kWarp);
  edge_dot_fwd_kernel<scalar_t, index_t, VEC, kForwardEdgesInFlight>
      <<<grid, kThreads, 0, c10::cuda::getCurrentCUDAStream()>>>(
          x_src.const_data_ptr<scalar_t>(), x_src.stride(0), x_src.size(0),
          x_dst.const_data_ptr<scalar_t>(), x_dst.stride(0), x_dst.size(0),
          src_index.const_data_ptr<index_t>(), src_index.stride(0),
          dst_index.const_data_ptr<index_t>(), dst_index.stride(0),
          out.mutable_data_ptr<scalar_t>(), first_bad, num_edges, feat_dim, group);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

std::tuple<at::Tensor, at::Tensor> edge_dot_cuda(const at::Tensor& x_src_in,
                                                 const at::Tensor& x_dst_in,
                                                 const at::Tensor& src_index,
                                                 const at::Tensor& dst_index) {
  check_edge_dot_args(x_src_in, x_dst_in, src_index, dst_index);
  const c10::cuda::OptionalCUDAGuard guard(x_src_in.device());
  const at::Tensor x_src = unit_column_stride(x_src_in);
  const at::Tensor x_dst = unit_column_stride(x_dst_in);
  at::Tensor out = at::empty({src_index.size(0)}, x_src.options());
  // -1 (all ones as unsigned) until an edge with an index out of range lowers it.
  at::Tensor first_bad = at::full({1}, -1, x_src.options().dtype(at::kLong));
  if (out.numel() == 0) return {out, first_bad};
  auto* first_bad_ptr = reinterpret_cast<unsigned long long*>(first_bad.mutable_data_ptr<int64_t>());

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_src.scalar_type(), "edge_dot_cuda", [&] {
    AT_DISPATCH_INDEX_TYPES(src_index.scalar_type(), "edge_dot_cuda", [&] {
      constexpr int kVec = 16 / sizeof(scalar_t);
      if (rows_vectorizable(x_src, kVec) && rows_vectorizable(x_dst, kVec)) {
        launch_forward<scalar_t, index_t, kVec>(x_src, x_dst, src_index, dst_index, out,
                                                first_bad_ptr);
      } else {
        launch_forward<scalar_t, index_t, 1>(x_src, x_dst, src_index, dst_index, out,
                                             first_bad_ptr);
      }
    });
  });
  return {out, first_bad};
}

// ---------------------------------------------------------------------------------------
// Backward (one side)
// ---------------------------------------------------------------------------------------

// What travels with each edge through the sort: its gather row (-1 if out of range) and its
// upstream gradient, so the row kernel reads both in sorted order, coalesced.
template <typename acc_t, typename key_t>
struct EdgePayload {
  acc_t grad;
  key_t gather;
};

// keys[e] = scatter_index[e], or num_rows for an index out of range (sorted last, ignored).
template <typename scalar_t, typename index_t, typename key_t>
__global__ void make_sort_input_kernel(
    const index_t* __restrict__ scatter_index, int64_t scatter_stride, int64_t num_rows,  // [E]
    const index_t* __restrict__ gather_index, int64_t gather_stride, int64_t num_gather,  // [E]
    const scalar_t* __restrict__ grad_out,                                                // [E]
    int64_t num_edges, key_t* __restrict__ keys,                                          // [E]
    EdgePayload<at::opmath_type<scalar_t>, key_t>* __restrict__ payload) {                // [E]
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < num_edges;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = static_cast<int64_t>(scatter_index[e * scatter_stride]);
    const int64_t g = static_cast<int64_t>(gather_index[e * gather_stride]);
    keys[e] = static_cast<key_t>((row >= 0 && row < num_rows) ? row : num_rows);
    payload[e].grad = static_cast<at::opmath_type<scalar_t>>(grad_out[e]);
    payload[e].gather = static_cast<key_t>((g >= 0 && g < num_gather) ? g : -1);
  }
}

// rowptr[r] = the first position whose sorted key is >= r, for r in [0, num_rows].
template <typename key_t>
__global__ void rowptr_from_sorted_kernel(const key_t* __restrict__ sorted_keys,  // [E]
                                          int64_t num_edges, int64_t num_rows,
                                          key_t* __restrict__ rowptr) {  // [num_rows + 1]
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i <= num_edges;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t prev = i == 0 ? -1 : static_cast<int64_t>(sorted_keys[i - 1]);
    const int64_t cur = i == num_edges ? num_rows : static_cast<int64_t>(sorted_keys[i]);
    for (int64_t r = prev + 1; r <= cur; ++r) rowptr[r] = static_cast<key_t>(i);
  }
}

// One group of G lanes per output row: the group walks the row's sorted edges EPG at a time
// (every lane reads the same payloads, served as one broadcast), keeps EPG gathered rows in
// flight per lane in 16-byte pieces, and writes the row once in the output dtype. No
// shuffles, so groups of one warp may own rows of different lengths.
constexpr int kGradEdgesInFlight = 8;

template <typename scalar_t, typename key_t, int VEC>
__global__ void __launch_bounds__(kThreads) edge_dot_grad_rows_kernel(
    const EdgePayload<at::opmath_type<scalar_t>, key_t>* __restrict__ payload,  // [E] sorted
    const scalar_t* __restrict__ x_gather, int64_t row_stride,                  // [N_gather, D]
    const key_t* __restrict__ rowptr,                                           // [num_rows + 1]
    scalar_t* __restrict__ out,                                                 // [num_rows, D]
    int64_t num_rows, int64_t feat_dim, int group_size) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int EPG = kGradEdgesInFlight;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t group = thread / group_size;
  const int64_t num_groups = static_cast<int64_t>(gridDim.x) * blockDim.x / group_size;
  const int lane = threadIdx.x % group_size;

  for (int64_t row = group; row < num_rows; row += num_groups) {
    const int64_t begin = static_cast<int64_t>(rowptr[row]);
    const int64_t end = static_cast<int64_t>(rowptr[row + 1]);
    for (int64_t k = static_cast<int64_t>(lane) * VEC; k < feat_dim;
         k += static_cast<int64_t>(group_size) * VEC) {
      acc_t acc[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) acc[i] = acc_t(0);
      for (int64_t pos = begin; pos < end; pos += EPG) {
        acc_t weight[EPG];
        const scalar_t* rows[EPG];
#pragma unroll
        for (int j = 0; j < EPG; ++j) {
          weight[j] = acc_t(0);
          rows[j] = nullptr;
          if (pos + j < end) {
            const auto edge = payload[pos + j];
            if (edge.gather >= 0) {
              weight[j] = edge.grad;
              rows[j] = x_gather + static_cast<int64_t>(edge.gather) * row_stride;
            }
          }
        }
        scalar_t vals[EPG][VEC];
#pragma unroll
        for (int j = 0; j < EPG; ++j) {
          if (rows[j] != nullptr) load_vec<VEC>(rows[j] + k, vals[j]);
        }
        // Edges are added in sorted order, one at a time: the same sum on every run.
#pragma unroll
        for (int j = 0; j < EPG; ++j) {
          if (rows[j] != nullptr) {
#pragma unroll
            for (int i = 0; i < VEC; ++i) acc[i] += weight[j] * static_cast<acc_t>(vals[j][i]);
          }
        }
      }
      store_vec<VEC>(out + row * feat_dim + k, acc);
    }
  }
}

inline int sort_end_bit(int64_t max_key) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) <= max_key) ++bits;
  return bits;
}

template <typename scalar_t, typename index_t, typename key_t>
void grad_one_side(const at::Tensor& grad_out, const at::Tensor& x_gather,
                   const at::Tensor& scatter_index, const at::Tensor& gather_index,
                   at::Tensor& out) {
  using acc_t = at::opmath_type<scalar_t>;
  using Payload = EdgePayload<acc_t, key_t>;
  const int64_t num_edges = grad_out.size(0), num_rows = out.size(0);
  const int64_t feat_dim = x_gather.size(1);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  const auto key_opts = grad_out.options().dtype(sizeof(key_t) == 4 ? at::kInt : at::kLong);

  // Sort (key, payload) by key; CUB's double buffers avoid a second pair of copies.
  at::Tensor keys = at::empty({2, num_edges}, key_opts);
  at::Tensor payload = at::empty({2 * num_edges * static_cast<int64_t>(sizeof(Payload))},
                                 grad_out.options().dtype(at::kByte));
  key_t* keys_ptr = keys.mutable_data_ptr<key_t>();
  auto* payload_ptr = reinterpret_cast<Payload*>(payload.mutable_data_ptr());
  make_sort_input_kernel<scalar_t, index_t, key_t>
      <<<grid_for((num_edges + kWarp - 1) / kWarp), kThreads, 0, stream>>>(
          scatter_index.const_data_ptr<index_t>(), scatter_index.stride(0), num_rows,
          gather_index.const_data_ptr<index_t>(), gather_index.stride(0), x_gather.size(0),
          grad_out.const_data_ptr<scalar_t>(), num_edges, keys_ptr, payload_ptr);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  cub::DoubleBuffer<key_t> key_buf(keys_ptr, keys_ptr + num_edges);
  cub::DoubleBuffer<Payload> payload_buf(payload_ptr, payload_ptr + num_edges);
  const int end_bit = sort_end_bit(num_rows);
  size_t temp_bytes = 0;
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, key_buf, payload_buf,
                                                 num_edges, 0, end_bit, stream));
  at::Tensor temp = at::empty({static_cast<int64_t>(temp_bytes)}, grad_out.options().dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.mutable_data_ptr(), temp_bytes, key_buf,
                                                 payload_buf, num_edges, 0, end_bit, stream));

  at::Tensor rowptr = at::empty({num_rows + 1}, key_opts);
  rowptr_from_sorted_kernel<key_t><<<grid_for((num_edges + kWarp) / kWarp), kThreads, 0, stream>>>(
      key_buf.Current(), num_edges, num_rows, rowptr.mutable_data_ptr<key_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();

  constexpr int kVec = 16 / sizeof(scalar_t);
  const bool vectorized = rows_vectorizable(x_gather, kVec) && aligned16(out.const_data_ptr());
  const int group = group_size_for(feat_dim, vectorized ? kVec : 1);
  const int64_t rows_per_warp = kWarp / group;
  const int64_t grid = grid_for((num_rows + rows_per_warp - 1) / rows_per_warp);
  auto launch = [&](auto vec_tag) {
    constexpr int V = decltype(vec_tag)::value;
    edge_dot_grad_rows_kernel<scalar_t, key_t, V><<<grid, kThreads, 0, stream>>>(
        payload_buf.Current(), x_gather.const_data_ptr<scalar_t>(), x_gather.stride(0),
        rowptr.const_data_ptr<key_t>(), out.mutable_data_ptr<scalar_t>(), num_rows, feat_dim,
        group);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  if (vectorized) {
    launch(std::integral_constant<int, kVec>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
}

at::Tensor edge_dot_grad_cuda(const at::Tensor& grad_out_in, const at::Tensor& x_gather_in,
                              const at::Tensor& scatter_index, const at::Tensor& gather_index,
                              int64_t num_rows, bool deterministic) {
  (void)deterministic;  // the sorted backward is always deterministic
  check_edge_dot_grad_args(grad_out_in, x_gather_in, scatter_index, gather_index, num_rows);
  const c10::cuda::OptionalCUDAGuard guard(x_gather_in.device());
  const at::Tensor x_gather = unit_column_stride(x_gather_in);
  const at::Tensor grad_out = grad_out_in.contiguous();
  const int64_t num_edges = grad_out.size(0);
  if (num_edges == 0 || num_rows == 0 || x_gather.size(1) == 0) {
    return at::zeros({num_rows, x_gather.size(1)}, x_gather.options());
  }
  at::Tensor out = at::empty({num_rows, x_gather.size(1)}, x_gather.options());
  // 32-bit keys, edge ids and gather indices where every value fits.
  const int64_t int32_max = std::numeric_limits<int32_t>::max();
  const bool small_keys = num_rows < int32_max && num_edges <= int32_max &&
                          x_gather.size(0) <= int32_max;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_gather.scalar_type(), "edge_dot_grad_cuda", [&] {
    AT_DISPATCH_INDEX_TYPES(scatter_index.scalar_type(), "edge_dot_grad_cuda", [&] {
      if (small_keys) {
        grad_one_side<scalar_t, index_t, int32_t>(grad_out, x_gather, scatter_index,
                                                  gather_index, out);
      } else {
        grad_one_side<scalar_t, index_t, int64_t>(grad_out, x_gather, scatter_index,
                                                  gather_index, out);
      }
    });
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_edgedot, CUDA, m) {
  m.impl("edge_dot", &edge_dot_cuda);
  m.impl("edge_dot_grad", &edge_dot_grad_cuda);
}

}  // namespace pyg_edgedot
