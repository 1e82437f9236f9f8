// Pieces shared by the CUDA kernels of pyg_edgedot: 16-byte vectors, the choice of vector
// width and lanes per group for a row length, the current device's SM count, the block size
// and grid rule of the edge_dot and edge_dot_loss kernels, the ops' first_bad output, the
// scoring loop of the forward kernels that give a group of lanes one edge at a time
// (edge_dot_kernel.cu, edge_dot_loss_kernel.cu), the bucket index over a graph's excluded
// keys (edge_dot_loss_kernel.cu, negative_sampling_kernel.cu), and the once-per-device
// permit for dynamic shared memory past 48 KB (edge_dot_kernel.cu, topk_kernel.cu).
#pragma once

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "counter_rng.h"

namespace pyg_edgedot {
namespace cuda {

constexpr int kWarp = 32;

// The ops' first_bad output: [1] int64 holding -1 (all ones, the identity of the kernels'
// atomicMin on it), set by a memset on the current stream rather than a fill kernel: at the
// seed's size (E = 16K) the forward is two device activities, this and the kernel.
inline at::Tensor new_first_bad(const at::Tensor& like) {
  const c10::cuda::CUDAGuard guard(like.device());  // the stream of like's device
  at::Tensor first_bad = at::empty({1}, like.options().dtype(at::kLong));
  C10_CUDA_CHECK(cudaMemsetAsync(first_bad.mutable_data_ptr(), 0xFF, sizeof(int64_t),
                                 c10::cuda::getCurrentCUDAStream()));
  return first_bad;
}

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

// VEC elements of a row kept packed as loaded (one 16-byte vector in four 32-bit registers,
// or one scalar) and widened to opmath only where used. Copying a 16-bit vector into a
// scalar_t[VEC] array puts every element in a register of its own; packed, the bf16 forward
// needs 80 registers instead of 112, which is the difference between 3 and 2 blocks per SM.
template <typename scalar_t, int VEC>
struct Packed {
  static_assert(VEC * sizeof(scalar_t) == 16, "a packed vector is 16 bytes");
  static constexpr int kWidth = VEC;
  uint4 raw;

  __device__ __forceinline__ void load(const scalar_t* __restrict__ ptr) {
    raw = *reinterpret_cast<const uint4*>(ptr);
  }
  __device__ __forceinline__ uint32_t word(int w) const {
    return w == 0 ? raw.x : w == 1 ? raw.y : w == 2 ? raw.z : raw.w;
  }
  // Element i (a compile-time constant in unrolled loops), in opmath.
  __device__ __forceinline__ at::opmath_type<scalar_t> get(int i) const {
    if constexpr (std::is_same_v<scalar_t, float>) {
      return __uint_as_float(word(i));
    } else if constexpr (std::is_same_v<scalar_t, double>) {
      return __hiloint2double(static_cast<int>(word(2 * i + 1)), static_cast<int>(word(2 * i)));
    } else if constexpr (std::is_same_v<scalar_t, at::BFloat16>) {
      const uint32_t w = word(i / 2);
      return __uint_as_float(i % 2 ? (w & 0xffff0000u) : (w << 16));
    } else {
      const uint32_t w = word(i / 2);
      return __half2float(__ushort_as_half(static_cast<unsigned short>(i % 2 ? w >> 16 : w)));
    }
  }
};

template <typename scalar_t>
struct Packed<scalar_t, 1> {
  static constexpr int kWidth = 1;
  scalar_t raw;
  __device__ __forceinline__ void load(const scalar_t* __restrict__ ptr) { raw = __ldg(ptr); }
  __device__ __forceinline__ at::opmath_type<scalar_t> get(int) const {
    return static_cast<at::opmath_type<scalar_t>>(raw);
  }
};

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

// The indices of edge `source_lane` of the warp's chunk, shuffled from the lane that holds
// them (t = 0 without REL). The caller's valid(s, d, t) stays outside: passing it in here
// made DistMult's forward spill (ptxas, sm_90).
template <bool REL>
__device__ __forceinline__ void group_edge(int64_t my_s, int64_t my_d, int64_t my_t,
                                           int source_lane, int64_t& s, int64_t& d,
                                           int64_t& t) {
  s = __shfl_sync(0xffffffffu, my_s, source_lane);
  d = __shfl_sync(0xffffffffu, my_d, source_lane);
  t = 0;
  if constexpr (REL) t = __shfl_sync(0xffffffffu, my_t, source_lane);
}

// acc += a . b (or a . r . b with REL) over the lane's VEC elements, in element order.
template <bool REL, typename acc_t, typename P>
__device__ __forceinline__ void add_products(acc_t& acc, const P& a, const P& b, const P& r) {
#pragma unroll
  for (int i = 0; i < P::kWidth; ++i) {
    if constexpr (REL) {
      acc += a.get(i) * r.get(i) * b.get(i);
    } else {
      acc += a.get(i) * b.get(i);
    }
  }
}

// Sums each of a round's EPG partials over the group's lanes (one butterfly each) and keeps,
// in my_score, the sum of the lane's own edge (edge t0 + j of the group).
template <int EPG, typename acc_t>
__device__ __forceinline__ void keep_own_sum(acc_t (&acc)[EPG], const bool (&scored)[EPG],
                                             int batch, int t0, int lane, int group_size,
                                             acc_t& my_score) {
#pragma unroll
  for (int j = 0; j < EPG; ++j) {
    for (int offset = group_size / 2; offset > 0; offset /= 2) {
      acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], offset);
    }
    if (j < batch && lane == t0 + j && scored[j]) my_score = acc[j];
  }
}

// The scores of a group's edges, for the forward kernels where lane i of a warp holds edge i
// of its chunk (my_s, my_d, my_t; my_t only with REL) and the group of G lanes that lane
// belongs to scores the group's first group_edges edges, EPG at a time with all their rows in
// flight, each as a dot product over the G lanes (VEC-wide packed loads, one shuffle butterfly).
// Returns the score of the lane's own edge, NaN where valid(s, d, t) said no (its rows are
// never read). REL multiplies by the relation row (DistMult).
//
// PIPELINED (only where one pass of the G lanes covers a row, feat_dim <= G * VEC): the next
// round's index shuffles and row loads are issued before this round's butterfly, so a warp's
// loads do not wait out the round's dependent shuffles. Each lane adds the same products
// in the same order and the butterfly is the same, so the score is the same bits. Measured on
// an H100 (benchmarks/NOTES.md, the kernels): 4-13% faster sorted by source, level in random
// order; DistMult's three rows spilled in this form, so REL keeps the loop.
template <typename scalar_t, int VEC, int EPG, bool REL, bool PIPELINED, typename Valid>
__device__ __forceinline__ at::opmath_type<scalar_t> score_group_edges(
    const scalar_t* __restrict__ x_src, int64_t src_row_stride,
    const scalar_t* __restrict__ x_dst, int64_t dst_row_stride,
    const scalar_t* __restrict__ rel, int64_t rel_row_stride, int64_t my_s, int64_t my_d,
    int64_t my_t, int lane, int group_first_edge, int group_size, int group_edges,
    int64_t feat_dim, Valid valid_edge) {
  using acc_t = at::opmath_type<scalar_t>;
  static_assert(!(PIPELINED && REL), "DistMult's pipelined rounds spill");
  const int batch = EPG < group_size ? EPG : group_size;
  acc_t my_score = std::numeric_limits<acc_t>::quiet_NaN();
  if constexpr (PIPELINED) {
    const int64_t k = static_cast<int64_t>(lane) * VEC;
    const bool active = k < feat_dim;
    Packed<scalar_t, VEC> a[EPG], b[EPG];
    bool scored[EPG];
    auto issue = [&](int t0) {  // round t0's indices and rows
#pragma unroll
      for (int j = 0; j < EPG; ++j) {
        int64_t s, d, t;
        group_edge<REL>(my_s, my_d, my_t, group_first_edge + t0 + (j < batch ? j : 0), s, d, t);
        scored[j] = j < batch && valid_edge(s, d, t);
        if (scored[j] && active) {
          a[j].load(x_src + s * src_row_stride + k);
          b[j].load(x_dst + d * dst_row_stride + k);
        }
      }
    };
    issue(0);
    for (int t0 = 0; t0 < group_edges; t0 += batch) {  // warp-uniform
      acc_t acc[EPG];
      bool round_scored[EPG];
#pragma unroll
      for (int j = 0; j < EPG; ++j) {
        acc[j] = acc_t(0);
        round_scored[j] = scored[j];
        if (scored[j] && active) add_products<REL>(acc[j], a[j], b[j], a[j]);
      }
      if (t0 + batch < group_edges) issue(t0 + batch);
      keep_own_sum(acc, round_scored, batch, t0, lane, group_size, my_score);
    }
  } else {
    for (int t0 = 0; t0 < group_edges; t0 += batch) {
      const scalar_t* src_row[EPG];
      const scalar_t* dst_row[EPG];
      const scalar_t* rel_row[REL ? EPG : 1];
      bool scored[EPG];
      acc_t acc[EPG];
#pragma unroll
      for (int j = 0; j < EPG; ++j) {
        int64_t s, d, t;
        group_edge<REL>(my_s, my_d, my_t, group_first_edge + t0 + (j < batch ? j : 0), s, d, t);
        scored[j] = j < batch && valid_edge(s, d, t);
        src_row[j] = x_src + (scored[j] ? s : 0) * src_row_stride;
        dst_row[j] = x_dst + (scored[j] ? d : 0) * dst_row_stride;
        if constexpr (REL) rel_row[j] = rel + (scored[j] ? t : 0) * rel_row_stride;
        acc[j] = acc_t(0);
      }
      for (int64_t k = static_cast<int64_t>(lane) * VEC; k < feat_dim;
           k += static_cast<int64_t>(group_size) * VEC) {
        Packed<scalar_t, VEC> a[EPG], b[EPG], r[REL ? EPG : 1];
#pragma unroll
        for (int j = 0; j < EPG; ++j) {
          if (scored[j]) {
            a[j].load(src_row[j] + k);
            b[j].load(dst_row[j] + k);
            if constexpr (REL) r[j].load(rel_row[j] + k);
          }
        }
#pragma unroll
        for (int j = 0; j < EPG; ++j) {
          if (scored[j]) add_products<REL>(acc[j], a[j], b[j], r[REL ? j : 0]);
        }
      }
      keep_own_sum(acc, scored, batch, t0, lane, group_size, my_score);
    }
  }
  return my_score;
}

// Lanes per group: enough that one pass of VEC-wide loads covers the row, at most a warp.
inline int group_size_for(int64_t feat_dim, int vec) {
  const int64_t lanes_needed = std::max<int64_t>(1, (feat_dim + vec - 1) / vec);
  int group = 1;
  while (group < kWarp && group < lanes_needed) group *= 2;
  return group;
}

// Streaming multiprocessors of the current device (grid sizes, resident groups).
inline int64_t num_sms() {
  int device = 0, count = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

// The dynamic shared memory a launch of `kernel` may ask for on `device`: the device's
// per-block opt-in maximum less the kernel's static shared memory, at most `most` (what the
// largest launch asks). Past 48 KB a kernel must be allowed its dynamic shared memory, once
// per device: done here with that limit, which `cache` (zero: not yet) keeps per device.
// Setting the attribute on every launch instead costs a driver call per call. An H100 / H200
// block may opt in to 232,448 bytes, an A100's to 166,912, sm_86 / sm_89 / sm_120's to
// 101,376 (the fused small-E backward of edge_dot_kernel.cu asks up to 196,608, topk_dst's
// fused kernel up to 189,696).
inline int64_t allow_dynamic_shared(const void* kernel, int device, int64_t most,
                                    std::atomic<int64_t>* cache) {
  int64_t limit = cache[device & 63].load(std::memory_order_relaxed);
  if (limit == 0) {
    int optin = 0;
    C10_CUDA_CHECK(
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    cudaFuncAttributes attributes;
    C10_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
    limit = std::max<int64_t>(
        1, std::min<int64_t>(most, optin - static_cast<int64_t>(attributes.sharedSizeBytes)));
    if (limit > 48 * 1024) {
      C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(limit)));
    }
    cache[device & 63].store(limit, std::memory_order_relaxed);
  }
  return limit;
}

// Threads per block of the edge_dot and edge_dot_loss kernels, and the grid of a
// grid-stride kernel that wants num_warps_needed warps: at least one block, at most 32 per SM.
constexpr int kThreads = 256;

inline int64_t grid_for(int64_t num_warps_needed) {
  const int64_t warps_per_block = kThreads / kWarp;
  const int64_t blocks = (num_warps_needed + warps_per_block - 1) / warps_per_block;
  const int64_t max_blocks = num_sms() * 32;
  return std::max<int64_t>(1, std::min(blocks, max_blocks));
}

inline bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// 16-byte vectors are used when every row starts on a 16-byte boundary.
inline bool rows_vectorizable(const at::Tensor& x, int vec) {
  return vec > 1 && x.size(1) % vec == 0 && x.stride(0) % vec == 0 && aligned16(x.const_data_ptr());
}

// bucket[b] = #{i : adj_i < b << shift}, b = 0 .. num_buckets: one search per bucket (the
// searches of neighbouring threads share their cache lines). A template: one definition for
// every file that includes this header.
template <int kUnused = 0>
__global__ void adj_index_kernel(const int64_t* __restrict__ adj, int64_t num_adj, int shift,
                                 int64_t num_entries, int64_t* __restrict__ bucket) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < num_entries;
       b += stride) {
    bucket[b] = rng::upper_bound(adj, 0, num_adj, (b << shift) - 1);
  }
}

// The bucket index over adj, in the kept plan (counter_rng.h; the CPU's has the same values):
// a rank then costs two dependent loads (its bucket, then a stretch of about 4-8 keys) instead
// of a binary search's log2(A), whose last levels miss L2 at tens of millions of keys. Built
// per call unless the caller keeps it (negative_sample_index). Returns the tensor that holds
// it (undefined, and index.bucket null, where adj is too short to index).
inline at::Tensor build_adj_index(const at::Tensor& adj, int64_t num_ranks,
                                  rng::AdjIndex& index, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t num_adj = adj.numel();
  if (!rng::plan_kept_adj_index(num_adj, num_ranks, index)) return at::Tensor();
  const int64_t num_entries = index.num_buckets + 1;
  at::Tensor bucket = at::empty({num_entries}, adj.options());
  const int64_t blocks = std::min<int64_t>((num_entries + kThreads - 1) / kThreads,
                                           num_sms() * 32);
  adj_index_kernel<<<blocks, kThreads, 0, stream>>>(adj.const_data_ptr<int64_t>(), num_adj,
                                                    index.shift, num_entries,
                                                    bucket.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  index.bucket = bucket.const_data_ptr<int64_t>();
  return bucket;
}

// The bucket index of an op's call: the caller's kept one (`given`, negative_sample_index's
// tensor; counter_rng.h checks it), else built for this call. Returns the
// tensor that holds it (undefined where adj is too short to index).
inline at::Tensor adj_index_of(const char* op, const at::Tensor& adj, int64_t num_ranks,
                               const at::Tensor* given, rng::AdjIndex& index,
                               cudaStream_t stream) {
  if (given == nullptr) return build_adj_index(adj, num_ranks, index, stream);
  return rng::use_kept_adj_index(op, adj, num_ranks, *given, index);
}

}  // namespace cuda
}  // namespace pyg_edgedot
