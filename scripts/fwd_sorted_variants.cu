// Experimental copies of the CUDA forward (csrc/cuda/edge_dot_cuda.cu, v6), built only by
// scripts/fwd_sorted_probe.py to find why torch.compile's Triton kernel is 6-15% faster in
// source-sorted order (benchmarks/NOTES.md, v6). Not part of the package. Each variant is the
// v6 loop with one thing changed:
//   EPG   edges whose rows are in flight together per group (v6: 4)
//   MINB  __launch_bounds__ minimum blocks per SM, i.e. the register cap (v6: 3)
//   HINT  cache hints on the row loads: 0 plain (v6), 1 destination rows not allocated in L1
//         and source rows kept there (L1::no_allocate / L1::evict_last), 2 destination rows
//         evict-first (ld.global.cs)
//   grid  "persistent" (v6: at most 32 blocks per SM, each warp strides over chunks) or
//         "full" (one chunk of 32 edges per warp, as Triton's grid of one block per tile)
// No relation rows, no bounds recording (indices are valid here), 16-byte rows only.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include <cstdint>
#include <limits>
#include <type_traits>

namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;

template <int HINT, bool SRC>
__device__ __forceinline__ uint4 load_row16(const void* ptr) {
  uint4 v;
  if constexpr (HINT == 1 && SRC) {
    asm volatile("ld.global.nc.L1::evict_last.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(ptr));
  } else if constexpr (HINT == 1 && !SRC) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(ptr));
  } else if constexpr (HINT == 2 && !SRC) {
    v = __ldcs(reinterpret_cast<const uint4*>(ptr));
  } else {
    v = *reinterpret_cast<const uint4*>(ptr);
  }
  return v;
}

template <typename scalar_t>
__device__ __forceinline__ at::opmath_type<scalar_t> elem(const uint4& raw, int i) {
  auto word = [&](int w) { return w == 0 ? raw.x : w == 1 ? raw.y : w == 2 ? raw.z : raw.w; };
  if constexpr (std::is_same_v<scalar_t, float>) {
    return __uint_as_float(word(i));
  } else {
    const uint32_t w = word(i / 2);
    return __uint_as_float(i % 2 ? (w & 0xffff0000u) : (w << 16));  // bfloat16
  }
}

template <typename scalar_t, int EPG, int MINB, int HINT>
__global__ void __launch_bounds__(kThreads, MINB) fwd_kernel(
    const scalar_t* __restrict__ x_src, const scalar_t* __restrict__ x_dst,
    const int64_t* __restrict__ src_index, const int64_t* __restrict__ dst_index,
    scalar_t* __restrict__ out, int64_t num_edges, int64_t feat_dim, int group_size) {
  constexpr int VEC = 16 / sizeof(scalar_t);
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t warp_stride = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp * kWarp;
  const int lane_in_warp = threadIdx.x % kWarp;
  const int lane = lane_in_warp % group_size;
  const int group_first_edge = lane_in_warp - lane;
  const int batch = EPG < group_size ? EPG : group_size;

  auto load_index = [&](int64_t e, int64_t& s, int64_t& d) {
    s = d = 0;
    if (e < num_edges) {
      s = src_index[e];
      d = dst_index[e];
    }
  };
  int64_t next_s, next_d;
  load_index(warp * kWarp + lane_in_warp, next_s, next_d);
  for (int64_t chunk = warp * kWarp; chunk < num_edges; chunk += warp_stride) {
    const int64_t my_s = next_s, my_d = next_d;
    load_index(chunk + warp_stride + lane_in_warp, next_s, next_d);
    const int64_t my_edge = chunk + lane_in_warp;
    acc_t my_score = acc_t(0);
    for (int t0 = 0; t0 < group_size; t0 += batch) {
      const scalar_t* src_row[EPG];
      const scalar_t* dst_row[EPG];
      acc_t acc[EPG];
#pragma unroll
      for (int j = 0; j < EPG; ++j) {
        const int source_lane = group_first_edge + t0 + (j < batch ? j : 0);
        src_row[j] = x_src + __shfl_sync(0xffffffffu, my_s, source_lane) * feat_dim;
        dst_row[j] = x_dst + __shfl_sync(0xffffffffu, my_d, source_lane) * feat_dim;
        acc[j] = acc_t(0);
      }
      for (int64_t k = static_cast<int64_t>(lane) * VEC; k < feat_dim;
           k += static_cast<int64_t>(group_size) * VEC) {
        uint4 a[EPG], b[EPG];
#pragma unroll
        for (int j = 0; j < EPG; ++j) {
          a[j] = load_row16<HINT, true>(src_row[j] + k);
          b[j] = load_row16<HINT, false>(dst_row[j] + k);
        }
#pragma unroll
        for (int j = 0; j < EPG; ++j) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) acc[j] += elem<scalar_t>(a[j], i) * elem<scalar_t>(b[j], i);
        }
      }
#pragma unroll
      for (int j = 0; j < EPG; ++j) {
        for (int offset = group_size / 2; offset > 0; offset /= 2) {
          acc[j] += __shfl_xor_sync(0xffffffffu, acc[j], offset);
        }
        if (j < batch && lane == t0 + j) my_score = acc[j];
      }
    }
    if (my_edge < num_edges) out[my_edge] = static_cast<scalar_t>(my_score);
  }
}

int num_sms() {
  int device = 0, count = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

template <typename scalar_t, int EPG, int MINB, int HINT>
void launch(const at::Tensor& xs, const at::Tensor& xd, const at::Tensor& si,
            const at::Tensor& di, at::Tensor& out, bool full_grid) {
  constexpr int VEC = 16 / sizeof(scalar_t);
  const int64_t e = out.size(0), d = xs.size(1);
  int group = 1;
  while (group < kWarp && group * VEC < d) group *= 2;
  const int64_t warps = (e + kWarp - 1) / kWarp;
  int64_t blocks = (warps + kThreads / kWarp - 1) / (kThreads / kWarp);
  if (!full_grid) blocks = std::min<int64_t>(blocks, num_sms() * 32);
  fwd_kernel<scalar_t, EPG, MINB, HINT><<<blocks, kThreads, 0,
                                          c10::cuda::getCurrentCUDAStream()>>>(
      xs.const_data_ptr<scalar_t>(), xd.const_data_ptr<scalar_t>(),
      si.const_data_ptr<int64_t>(), di.const_data_ptr<int64_t>(),
      out.mutable_data_ptr<scalar_t>(), e, d, group);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// variant: 0 v6 | 1 hint 1 | 2 hint 2 | 3 full grid | 4 MINB 4 | 5 EPG 2, MINB 6 |
//          6 hint 1 + MINB 4 | 7 hint 1 + full grid | 8 EPG 2, MINB 4 | 9 EPG 1, MINB 6 |
//          10 hint 1 + EPG 2, MINB 4 | 11 hint 1 + EPG 1, MINB 6
template <typename scalar_t>
void dispatch(int variant, const at::Tensor& xs, const at::Tensor& xd, const at::Tensor& si,
              const at::Tensor& di, at::Tensor& out) {
  switch (variant) {
    case 0: return launch<scalar_t, 4, 3, 0>(xs, xd, si, di, out, false);
    case 1: return launch<scalar_t, 4, 3, 1>(xs, xd, si, di, out, false);
    case 2: return launch<scalar_t, 4, 3, 2>(xs, xd, si, di, out, false);
    case 3: return launch<scalar_t, 4, 3, 0>(xs, xd, si, di, out, true);
    case 4: return launch<scalar_t, 4, 4, 0>(xs, xd, si, di, out, false);
    case 5: return launch<scalar_t, 2, 6, 0>(xs, xd, si, di, out, false);
    case 6: return launch<scalar_t, 4, 4, 1>(xs, xd, si, di, out, false);
    case 7: return launch<scalar_t, 4, 3, 1>(xs, xd, si, di, out, true);
    case 8: return launch<scalar_t, 2, 4, 0>(xs, xd, si, di, out, false);
    case 9: return launch<scalar_t, 1, 6, 0>(xs, xd, si, di, out, false);
    case 10: return launch<scalar_t, 2, 4, 1>(xs, xd, si, di, out, false);
    case 11: return launch<scalar_t, 1, 6, 1>(xs, xd, si, di, out, false);
    default: TORCH_CHECK(false, "variant must be 0..11");
  }
}

at::Tensor fwd(const at::Tensor& xs, const at::Tensor& xd, const at::Tensor& ei, int64_t variant) {
  TORCH_CHECK(xs.is_contiguous() && xd.is_contiguous() && ei.is_contiguous());
  TORCH_CHECK(ei.scalar_type() == at::kLong && ei.size(0) == 2);
  TORCH_CHECK(xs.size(1) * xs.element_size() % 16 == 0, "rows must be whole 16-byte vectors");
  const at::Tensor si = ei[0], di = ei[1];
  at::Tensor out = at::empty({ei.size(1)}, xs.options());
  if (out.numel() == 0) return out;
  if (xs.scalar_type() == at::kFloat) {
    dispatch<float>(static_cast<int>(variant), xs, xd, si, di, out);
  } else {
    TORCH_CHECK(xs.scalar_type() == at::kBFloat16, "float32 or bfloat16");
    dispatch<at::BFloat16>(static_cast<int>(variant), xs, xd, si, di, out);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("fwd", &fwd); }
