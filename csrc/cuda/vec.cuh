// Pieces shared by the CUDA kernels of pyg_edgedot (edge_dot_cuda.cu, candidates_cuda.cu):
// 16-byte vectors, and the choice of vector width and lanes per group for a row length.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>

namespace pyg_edgedot {
namespace cuda {

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

// Lanes per group: enough that one pass of VEC-wide loads covers the row, at most a warp.
inline int group_size_for(int64_t feat_dim, int vec) {
  const int64_t lanes_needed = std::max<int64_t>(1, (feat_dim + vec - 1) / vec);
  int group = 1;
  while (group < kWarp && group < lanes_needed) group *= 2;
  return group;
}

inline bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// 16-byte vectors are used when every row starts on a 16-byte boundary.
inline bool rows_vectorizable(const at::Tensor& x, int vec) {
  return vec > 1 && x.size(1) % vec == 0 && x.stride(0) % vec == 0 && aligned16(x.const_data_ptr());
}

}  // namespace cuda
}  // namespace pyg_edgedot
