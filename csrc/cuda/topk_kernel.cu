// CUDA kernel of topk_dst (schema in csrc/topk.cpp): the k best destinations of every source,
// excluded pairs left out, without the [N, M] score matrix.
//
// Fused path (float32, float16, bfloat16 inputs; k <= kMaxFusedK; D <= kMaxFusedDim; fewer
// than 2^31 - 1 destinations; the shared memory fits): a block owns a tile of kBM = 64
// sources, whose rows it stages once in shared memory (float32, transposed, padded to a
// multiple of kBK features), and walks the destinations in tiles of kBN = 64: each tile is
// staged kBK features at a time and multiplied by a register-blocked SIMT micro-kernel (256
// threads, 4 x 4 scores each, float32 FMAs in ascending feature order). Every thread then
// compares its 16 scores with their sources' current k-th best (one lexicographic compare of
// (key, index), the key being the score with NaN as -inf): almost every score fails. The few
// that pass go to a per-source candidate buffer in shared memory, and after a barrier one
// thread per source checks them against the source's excluded destinations (a cursor into
// the source's sorted excluded list that only moves forward, as the tiles ascend, and a scan
// of the few excluded destinations inside the tile) and inserts the survivors into the
// source's running top-k: a list of min(k, N_dst) (score, index) entries sorted best first,
// in shared memory, initially all empty slots (-inf, kEmptyIndex) that rank below every real
// candidate. The order is a total order, so the result does not depend on the order in which
// candidates reach the list: deterministic. The scores never leave the SM.
//
// Other cases (float64, k above the cap, a large D, or shared memory too small) take the ATen
// path: chunks of rows by tiles of destinations scored by at::mm in the accumulation type,
// excluded pairs marked by a small kernel, merged with the running top-k by two stable sorts
// (by key descending, then by whether the entry may be returned), as the pure-PyTorch
// fallback's float64 merge does.
//
// The per-element rules (order_key, ranks_above, insert_sorted, the exclusion cursor) are in
// csrc/topk_order.h, plain C++ that a host test can include.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "common.h"
#include "topk_order.h"
#include "vec.cuh"

namespace pyg_edgedot {
namespace {

using namespace ::pyg_edgedot::cuda;
using topk::kEmptyIndex;

constexpr int kBM = 64;        // sources per block
constexpr int kBN = 64;        // destinations per tile
constexpr int kBK = 32;        // features per staged slice of a destination tile
constexpr int kPad = 4;        // floats of padding per shared row (keeps float4 alignment)
constexpr int kFusedThreads = 256;
constexpr int kMicro = 4;      // a thread's scores: kMicro sources x kMicro destinations
constexpr int kMaxFusedK = 128;
constexpr int64_t kMaxFusedDim = 256;
static_assert(kBM == 16 * kMicro && kBN == 16 * kMicro && kFusedThreads == 256,
              "16 x 16 threads of 4 x 4 scores");
static_assert(kBN <= 256, "candidate columns are stored as uint8");

// Shared memory of the fused kernel, carved from one dynamic buffer (16-byte aligned pieces).
struct FusedLayout {
  int64_t dim_pad;    // features rounded up to kBK
  int list_k;         // entries per source's running top-k
  size_t src_stage, dst_stage, list_score, list_index, cand_score, cand_col, thr_key, thr_index,
      cand_count, row_src, cursor, cursor_end, bytes;

  static size_t round16(size_t x) { return (x + 15) / 16 * 16; }

  FusedLayout(int64_t feat_dim, int list_k_) : list_k(list_k_) {
    dim_pad = std::max<int64_t>(kBK, (feat_dim + kBK - 1) / kBK * kBK);
    size_t at = 0;
    auto take = [&](size_t size) {
      const size_t offset = at;
      at = round16(at + size);
      return offset;
    };
    row_src = take(sizeof(int64_t) * kBM);
    cursor = take(sizeof(int64_t) * kBM);
    cursor_end = take(sizeof(int64_t) * kBM);
    src_stage = take(sizeof(float) * dim_pad * (kBM + kPad));
    dst_stage = take(sizeof(float) * kBK * (kBN + kPad));
    list_score = take(sizeof(float) * kBM * list_k);
    list_index = take(sizeof(int32_t) * kBM * list_k);
    cand_score = take(sizeof(float) * kBM * kBN);
    thr_key = take(sizeof(float) * kBM);
    thr_index = take(sizeof(int32_t) * kBM);
    cand_count = take(sizeof(int32_t) * kBM);
    cand_col = take(sizeof(uint8_t) * kBM * kBN);
    bytes = at;
  }
};

template <typename T>
__device__ __forceinline__ T* shared_at(unsigned char* base, size_t offset) {
  return reinterpret_cast<T*>(base + offset);
}

// first_bad: the smallest row n whose src_index[n] is out of range (all ones if none).
template <typename index_t>
__global__ void first_bad_kernel(const index_t* __restrict__ src_index, int64_t src_stride,
                                 int64_t num_rows, int64_t num_src,
                                 unsigned long long* __restrict__ first_bad) {
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < num_rows;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = static_cast<int64_t>(src_index[n * src_stride]);
    if (s < 0 || s >= num_src) atomicMin(first_bad, static_cast<unsigned long long>(n));
  }
}

// The excluded range [lo, hi) of source s, clamped to [0, num_excl] (a malformed CSR excludes
// the wrong pairs, never reads outside it); empty without exclusion.
__device__ __forceinline__ void excluded_range(const int64_t* __restrict__ excl_ptr,
                                               int64_t num_excl, int64_t s, int64_t& lo,
                                               int64_t& hi) {
  if (excl_ptr == nullptr) {
    lo = hi = 0;
    return;
  }
  const int64_t a = excl_ptr[s], b = excl_ptr[s + 1];
  lo = a < 0 ? 0 : (a > num_excl ? num_excl : a);
  hi = b < lo ? lo : (b > num_excl ? num_excl : b);
}

template <typename scalar_t, typename index_t>
__global__ void __launch_bounds__(kFusedThreads)
    topk_fused_kernel(const scalar_t* __restrict__ x_src, int64_t src_row_stride, int64_t num_src,
                      const scalar_t* __restrict__ x_dst, int64_t dst_row_stride, int64_t num_dst,
                      const index_t* __restrict__ src_index, int64_t src_stride,
                      int64_t num_rows, const int64_t* __restrict__ excl_ptr,
                      const int64_t* __restrict__ excl_dst, int64_t num_excl, int64_t feat_dim,
                      int64_t dim_pad, int64_t k, FusedLayout layout,
                      scalar_t* __restrict__ scores_out, int64_t* __restrict__ index_out) {
  extern __shared__ __align__(16) unsigned char smem[];
  int64_t* row_src = shared_at<int64_t>(smem, layout.row_src);        // [kBM], -1: no source
  int64_t* cursor = shared_at<int64_t>(smem, layout.cursor);          // [kBM]
  int64_t* cursor_end = shared_at<int64_t>(smem, layout.cursor_end);  // [kBM]
  float* src_stage = shared_at<float>(smem, layout.src_stage);        // [dim_pad][kBM + kPad]
  float* dst_stage = shared_at<float>(smem, layout.dst_stage);        // [kBK][kBN + kPad]
  float* list_score = shared_at<float>(smem, layout.list_score);      // [kBM][list_k]
  int32_t* list_index = shared_at<int32_t>(smem, layout.list_index);  // [kBM][list_k]
  float* cand_score = shared_at<float>(smem, layout.cand_score);      // [kBM][kBN]
  uint8_t* cand_col = shared_at<uint8_t>(smem, layout.cand_col);      // [kBM][kBN]
  float* thr_key = shared_at<float>(smem, layout.thr_key);            // [kBM]
  int32_t* thr_index = shared_at<int32_t>(smem, layout.thr_index);    // [kBM]
  int32_t* cand_count = shared_at<int32_t>(smem, layout.cand_count);  // [kBM]
  const int list_k = layout.list_k;
  const int tid = threadIdx.x;
  const int ty = tid / 16, tx = tid % 16;
  constexpr int kSrcStride = kBM + kPad, kDstStride = kBN + kPad;
  const float inf = std::numeric_limits<float>::infinity();

  const int64_t num_tiles = (num_rows + kBM - 1) / kBM;
  for (int64_t tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    const int64_t n0 = tile * kBM;
    // The tile's sources, their cursors, empty lists; a missing or bad source admits nothing
    // (its threshold (+inf, -1) ranks above every candidate).
    if (tid < kBM) {
      const int64_t n = n0 + tid;
      int64_t s = -1;
      if (n < num_rows) {
        s = static_cast<int64_t>(src_index[n * src_stride]);
        if (s < 0 || s >= num_src) s = -1;
      }
      row_src[tid] = s;
      int64_t lo = 0, hi = 0;
      if (s >= 0) excluded_range(excl_ptr, num_excl, s, lo, hi);
      cursor[tid] = lo;
      cursor_end[tid] = hi;
      for (int i = 0; i < list_k; ++i) {
        list_score[tid * list_k + i] = -inf;
        list_index[tid * list_k + i] = kEmptyIndex;
      }
      thr_key[tid] = s >= 0 ? -inf : inf;
      thr_index[tid] = s >= 0 ? kEmptyIndex : -1;
      cand_count[tid] = 0;
    }
    __syncthreads();
    // Stage the sources, [dim_pad][kBM] in float32, zeros past D and for missing sources:
    // consecutive threads read consecutive features of one row.
    for (int64_t e = tid; e < dim_pad * kBM; e += kFusedThreads) {
      const int r = static_cast<int>(e / dim_pad);
      const int64_t d = e % dim_pad;
      const int64_t s = row_src[r];
      float v = 0.f;
      if (s >= 0 && d < feat_dim) v = static_cast<float>(x_src[s * src_row_stride + d]);
      src_stage[d * kSrcStride + r] = v;
    }
    // (the barrier at the top of the first slice orders these writes before their reads)

    for (int64_t j0 = 0; j0 < num_dst; j0 += kBN) {
      float acc[kMicro][kMicro];
#pragma unroll
      for (int i = 0; i < kMicro; ++i) {
#pragma unroll
        for (int j = 0; j < kMicro; ++j) acc[i][j] = 0.f;
      }
      for (int64_t d0 = 0; d0 < dim_pad; d0 += kBK) {
        __syncthreads();   // the previous slice (or the merge) is done with dst_stage
#pragma unroll
        for (int u = 0; u < kBK * kBN / kFusedThreads; ++u) {
          const int e = tid + u * kFusedThreads;
          const int c = e / kBK, d = e % kBK;
          const int64_t j = j0 + c, f = d0 + d;
          float v = 0.f;
          if (j < num_dst && f < feat_dim) v = static_cast<float>(x_dst[j * dst_row_stride + f]);
          dst_stage[d * kDstStride + c] = v;
        }
        __syncthreads();
#pragma unroll 8
        for (int d = 0; d < kBK; ++d) {
          const float4 a = *reinterpret_cast<const float4*>(
              src_stage + (d0 + d) * kSrcStride + ty * kMicro);
          const float4 b = *reinterpret_cast<const float4*>(
              dst_stage + d * kDstStride + tx * kMicro);
          const float av[kMicro] = {a.x, a.y, a.z, a.w};
          const float bv[kMicro] = {b.x, b.y, b.z, b.w};
#pragma unroll
          for (int i = 0; i < kMicro; ++i) {
#pragma unroll
            for (int j = 0; j < kMicro; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
          }
        }
      }
      // The threshold compare: one lexicographic compare per score.
#pragma unroll
      for (int i = 0; i < kMicro; ++i) {
        const int r = ty * kMicro + i;
        const float tk = thr_key[r];
        const int32_t ti = thr_index[r];
#pragma unroll
        for (int j = 0; j < kMicro; ++j) {
          const int c = tx * kMicro + j;
          const int64_t jj = j0 + c;
          if (jj < num_dst &&
              topk::ranks_above(topk::order_key(acc[i][j]), static_cast<int32_t>(jj), tk, ti)) {
            const int slot = atomicAdd(cand_count + r, 1);
            cand_score[r * kBN + slot] = acc[i][j];
            cand_col[r * kBN + slot] = static_cast<uint8_t>(c);
          }
        }
      }
      __syncthreads();
      // The merge: one thread per source, for the few sources with candidates.
      if (tid < kBM) {
        const int count = cand_count[tid];
        if (count > 0) {
          const int64_t end = cursor_end[tid];
          const int64_t pos = topk::advance_past(excl_dst, cursor[tid], end, j0);
          cursor[tid] = pos;
          const int64_t tile_end = j0 + kBN;
          float* scores = list_score + tid * list_k;
          int32_t* indices = list_index + tid * list_k;
          for (int q = 0; q < count; ++q) {
            const int64_t j = j0 + cand_col[tid * kBN + q];
            if (topk::excluded_in_tile(excl_dst, pos, end, tile_end, j)) continue;
            topk::insert_sorted(scores, indices, list_k, cand_score[tid * kBN + q],
                                static_cast<int32_t>(j));
          }
          thr_key[tid] = topk::order_key(scores[list_k - 1]);
          thr_index[tid] = indices[list_k - 1];
          cand_count[tid] = 0;
        }
      }
      // (the barrier at the top of the next tile's first slice orders the merge before the
      // next compare)
    }
    __syncthreads();
    // The lists, best first, then padding (index N_dst, score -inf); coalesced writes.
    // (the output was filled with padding; the columns past list_k keep it)
    const int64_t rows = num_rows - n0 < kBM ? num_rows - n0 : kBM;
    for (int64_t e = tid; e < rows * list_k; e += kFusedThreads) {
      const int r = static_cast<int>(e / list_k);
      const int i = static_cast<int>(e % list_k);
      const int64_t out = (n0 + r) * k + i;
      const int32_t idx = list_index[r * list_k + i];
      const float score = list_score[r * list_k + i];
      if (idx == kEmptyIndex) {
        index_out[out] = num_dst;
        scores_out[out] = static_cast<scalar_t>(-inf);
      } else {
        index_out[out] = idx;
        scores_out[out] = static_cast<scalar_t>(score);
      }
    }
    __syncthreads();   // the next tile's setup overwrites the lists
  }
}

// ---------------------------------------------------------------------------------------
// The ATen path
// ---------------------------------------------------------------------------------------

// For rows [0, rows) of a chunk: the source (clamped to 0 when out of range), whether it is
// in range, and its excluded range.
template <typename index_t>
__global__ void chunk_rows_kernel(const index_t* __restrict__ src_index, int64_t src_stride,
                                  int64_t rows, int64_t num_src,
                                  const int64_t* __restrict__ excl_ptr, int64_t num_excl,
                                  int64_t* __restrict__ src_out, bool* __restrict__ ok_out,
                                  int64_t* __restrict__ lo_out, int64_t* __restrict__ hi_out) {
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < rows;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t s = static_cast<int64_t>(src_index[n * src_stride]);
    const bool ok = s >= 0 && s < num_src;
    int64_t lo = 0, hi = 0;
    if (ok) excluded_range(excl_ptr, num_excl, s, lo, hi);
    src_out[n] = ok ? s : 0;
    ok_out[n] = ok;
    lo_out[n] = lo;
    hi_out[n] = hi;
  }
}

// allowed[n, c] = false for a row out of range and for the excluded destinations j0 + c of
// row n's source (allowed starts all true). One thread per row: a binary search for the
// first excluded destination >= j0 (within the row's range whatever its values), then a walk.
__global__ void mark_excluded_kernel(const bool* __restrict__ ok, const int64_t* __restrict__ lo,
                                     const int64_t* __restrict__ hi,
                                     const int64_t* __restrict__ excl_dst, int64_t rows,
                                     int64_t j0, int64_t cols, bool* __restrict__ allowed) {
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < rows;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    bool* row = allowed + n * cols;
    if (!ok[n]) {
      for (int64_t c = 0; c < cols; ++c) row[c] = false;
      continue;
    }
    int64_t a = lo[n], b = hi[n];
    const int64_t end = b;
    while (a < b) {
      const int64_t mid = a + (b - a) / 2;
      if (excl_dst[mid] < j0) a = mid + 1;
      else b = mid;
    }
    for (int64_t p = a; p < end; ++p) {
      const int64_t j = excl_dst[p];
      if (j >= j0 + cols) break;
      if (j >= j0) row[j - j0] = false;
    }
  }
}

inline int64_t grid_for(int64_t items, int threads) {
  return std::max<int64_t>(1, std::min<int64_t>((items + threads - 1) / threads, num_sms() * 32));
}

template <typename index_t>
void topk_aten_path(const at::Tensor& x_src, const at::Tensor& x_dst, const at::Tensor& src_index,
                    const at::Tensor& exclude_ptr, const at::Tensor& exclude_dst, int64_t k,
                    at::Tensor& scores, at::Tensor& index, cudaStream_t stream) {
  const int64_t num_rows = src_index.size(0), num_src = x_src.size(0), num_dst = x_dst.size(0);
  const int64_t list_k = std::min(k, num_dst);
  const at::ScalarType acc = x_src.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const auto long_opts = x_src.options().dtype(at::kLong);
  const bool has_excluded = exclude_ptr.numel() > 0 && exclude_dst.numel() > 0;
  const int64_t num_excl = exclude_dst.numel();
  const int64_t tile = std::min<int64_t>(num_dst, 8192);
  const int64_t step = std::max<int64_t>(1, (int64_t(1) << 22) / (tile + list_k));
  constexpr int kThreads = 256;
  for (int64_t start = 0; start < num_rows; start += step) {
    const int64_t rows = std::min(step, num_rows - start);
    at::Tensor src = at::empty({rows}, long_opts);
    at::Tensor ok = at::empty({rows}, x_src.options().dtype(at::kBool));
    at::Tensor lo = at::empty({rows}, long_opts), hi = at::empty({rows}, long_opts);
    chunk_rows_kernel<index_t><<<grid_for(rows, kThreads), kThreads, 0, stream>>>(
        src_index.const_data_ptr<index_t>() + start * src_index.stride(0), src_index.stride(0),
        rows, num_src, has_excluded ? exclude_ptr.const_data_ptr<int64_t>() : nullptr, num_excl,
        src.mutable_data_ptr<int64_t>(), ok.mutable_data_ptr<bool>(),
        lo.mutable_data_ptr<int64_t>(), hi.mutable_data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    const at::Tensor query = x_src.index_select(0, src).to(acc);
    at::Tensor run_score = at::full({rows, list_k}, -std::numeric_limits<double>::infinity(),
                                    x_src.options().dtype(acc));
    at::Tensor run_index = at::full({rows, list_k}, num_dst, long_opts);
    at::Tensor run_ok = at::zeros({rows, list_k}, x_src.options().dtype(at::kBool));
    for (int64_t j0 = 0; j0 < num_dst; j0 += tile) {
      const int64_t cols = std::min(tile, num_dst - j0);
      const at::Tensor score = at::mm(query, x_dst.narrow(0, j0, cols).to(acc).t());
      at::Tensor allowed = at::ones({rows, cols}, x_src.options().dtype(at::kBool));
      // (without exclusion every range is empty: only rows out of range are marked)
      mark_excluded_kernel<<<grid_for(rows, kThreads), kThreads, 0, stream>>>(
          ok.const_data_ptr<bool>(), lo.const_data_ptr<int64_t>(), hi.const_data_ptr<int64_t>(),
          exclude_dst.const_data_ptr<int64_t>(), rows, j0, cols, allowed.mutable_data_ptr<bool>());
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      const at::Tensor cand_index =
          at::arange(j0, j0 + cols, long_opts).unsqueeze(0).expand({rows, cols});
      const at::Tensor all_score = at::cat({run_score, score}, 1);
      const at::Tensor all_index = at::cat({run_index, cand_index}, 1);
      const at::Tensor all_ok = at::cat({run_ok, allowed}, 1);
      const at::Tensor value =
          all_score.masked_fill(at::isnan(all_score), -std::numeric_limits<double>::infinity());
      // Stable sorts: by key descending (the running entries come first and hold the lower
      // indices, each part ascends in index, so ties keep the lower index first), then by
      // whether the entry may be returned.
      const at::Tensor by_score = std::get<1>(at::sort(value, true, 1, true));
      const at::Tensor by_ok =
          std::get<1>(at::sort(all_ok.gather(1, by_score).to(at::kByte), true, 1, true));
      const at::Tensor pick = by_score.gather(1, by_ok).narrow(1, 0, list_k);
      run_score = all_score.gather(1, pick);
      run_index = all_index.gather(1, pick);
      run_ok = all_ok.gather(1, pick);
    }
    const at::Tensor not_ok = run_ok.logical_not();
    scores.narrow(0, start, rows).narrow(1, 0, list_k).copy_(
        run_score.masked_fill(not_ok, -std::numeric_limits<double>::infinity()));
    index.narrow(0, start, rows).narrow(1, 0, list_k).copy_(run_index.masked_fill(not_ok, num_dst));
  }
}

struct FusedArgs {
  const at::Tensor &x_src, &x_dst, &src_index, &exclude_ptr, &exclude_dst;
  bool has_excluded;
  int64_t k;
  const FusedLayout& layout;
  cudaStream_t stream;
};

// The fused kernel over every row: as many blocks as fit on the GPU at once (at most one per
// tile of kBM rows), each looping over tiles of rows.
template <typename scalar_t, typename index_t>
void launch_fused(const FusedArgs& a, at::Tensor& scores, at::Tensor& index) {
  auto kernel = topk_fused_kernel<scalar_t, index_t>;
  const size_t bytes = a.layout.bytes;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(bytes)));
  int per_sm = 0;
  C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kFusedThreads,
                                                               bytes));
  const int64_t num_rows = a.src_index.size(0);
  const int64_t tiles = (num_rows + kBM - 1) / kBM;
  const int64_t grid =
      std::max<int64_t>(1, std::min<int64_t>(tiles, num_sms() * std::max(per_sm, 1)));
  kernel<<<grid, kFusedThreads, bytes, a.stream>>>(
      a.x_src.const_data_ptr<scalar_t>(), a.x_src.stride(0), a.x_src.size(0),
      a.x_dst.const_data_ptr<scalar_t>(), a.x_dst.stride(0), a.x_dst.size(0),
      a.src_index.const_data_ptr<index_t>(), a.src_index.stride(0), num_rows,
      a.has_excluded ? a.exclude_ptr.const_data_ptr<int64_t>() : nullptr,
      a.exclude_dst.const_data_ptr<int64_t>(), a.exclude_dst.numel(), a.x_src.size(1),
      a.layout.dim_pad, a.k, a.layout, scores.mutable_data_ptr<scalar_t>(),
      index.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// ---------------------------------------------------------------------------------------
// The op
// ---------------------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor, at::Tensor> topk_dst_cuda(
    const at::Tensor& x_src_in, const at::Tensor& x_dst_in, const at::Tensor& src_index,
    const at::Tensor& exclude_ptr_in, const at::Tensor& exclude_dst_in, int64_t k,
    bool sorted) {
  const char* op = "topk_dst";
  check_topk_args(op, x_src_in, x_dst_in, src_index, exclude_ptr_in, exclude_dst_in, k);
  (void)sorted;   // every path returns each row sorted, which any order allows
  const c10::cuda::OptionalCUDAGuard guard(x_src_in.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  // Detached: the ATen path's ops must not record autograd history; not differentiable.
  const at::Tensor x_src = unit_column_stride(x_src_in.detach());
  const at::Tensor x_dst = unit_column_stride(x_dst_in.detach());
  const at::Tensor exclude_ptr = exclude_ptr_in.contiguous();
  const at::Tensor exclude_dst = exclude_dst_in.contiguous();
  const int64_t num_rows = src_index.size(0), num_src = x_src.size(0), num_dst = x_dst.size(0);
  const int64_t feat_dim = x_src.size(1);
  at::Tensor first_bad = at::full({1}, -1, x_src.options().dtype(at::kLong));
  auto* first_bad_ptr = reinterpret_cast<unsigned long long*>(first_bad.mutable_data_ptr<int64_t>());
  const int64_t list_k = std::min(k, num_dst);
  // Padding everywhere a list does not reach (all of it when no destination can be returned).
  at::Tensor scores = at::full({num_rows, k}, -std::numeric_limits<double>::infinity(),
                               x_src.options());
  at::Tensor index = at::full({num_rows, k}, num_dst, x_src.options().dtype(at::kLong));
  if (num_rows == 0) return {scores, index, first_bad};
  const bool has_excluded = exclude_ptr.numel() > 0 && exclude_dst.numel() > 0;

  AT_DISPATCH_INDEX_TYPES(src_index.scalar_type(), "topk_dst_cuda", [&] {
    constexpr int kThreads = 256;
    first_bad_kernel<index_t><<<grid_for(num_rows, kThreads), kThreads, 0, stream>>>(
        src_index.const_data_ptr<index_t>(), src_index.stride(0), num_rows, num_src,
        first_bad_ptr);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (list_k == 0 || num_src == 0) return;

    bool fused = x_src.scalar_type() != at::kDouble && list_k <= kMaxFusedK &&
                 feat_dim <= kMaxFusedDim && num_dst < kEmptyIndex;
    const FusedLayout layout(feat_dim, static_cast<int>(std::min<int64_t>(list_k, kMaxFusedK)));
    if (fused) {
      int device = 0, optin = 0;
      C10_CUDA_CHECK(cudaGetDevice(&device));
      C10_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
      fused = layout.bytes <= static_cast<size_t>(optin);
    }
    if (!fused) {
      topk_aten_path<index_t>(x_src, x_dst, src_index, exclude_ptr, exclude_dst, k, scores,
                              index, stream);
      return;
    }
    const FusedArgs args{x_src, x_dst, src_index, exclude_ptr, exclude_dst, has_excluded, k,
                         layout, stream};
    switch (x_src.scalar_type()) {
      case at::kFloat: launch_fused<float, index_t>(args, scores, index); break;
      case at::kHalf: launch_fused<at::Half, index_t>(args, scores, index); break;
      case at::kBFloat16: launch_fused<at::BFloat16, index_t>(args, scores, index); break;
      default: PYG_EDGEDOT_CHECK(false, op, ": no fused kernel for ", x_src.scalar_type());
    }
  });
  return {scores, index, first_bad};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_edgedot, CUDA, m) {
  m.impl("topk_dst", &topk_dst_cuda);
}

}  // namespace pyg_edgedot
