// CUDA kernel of topk_dst (schema in csrc/topk.cpp): the k best destinations of every source,
// excluded pairs left out, without the [N, M] score matrix.
//
// Fused path (float32, float16, bfloat16 inputs; k <= kMaxFusedK; D <= kMaxFusedDim; fewer
// than 2^31 - 1 destinations; the shared memory fits): a block of 256 threads owns a tile of
// kBM = 64 sources, whose rows it stages once in shared memory, and walks the destinations in
// tiles of kBN = 64, computing each 64 x 64 tile of scores in registers with one of two
// products:
//  * float16 / bfloat16 (sm_80 and later): tensor cores. The rows stay in the input dtype,
//    padded with zeros to a multiple of kMmaK = 16 features: the sources once, each
//    destination tile into one of two buffers (cp.async, 16 bytes a copy, when D, the row
//    stride and the pointer allow; plain loads otherwise) while the other is multiplied. Each
//    of the 8 warps computes 16 sources x 32 destinations with mma.sync.m16n8k16 (fp32
//    accumulators; fragments by ldmatrix, the warp's source fragments of the first 64
//    features kept in registers for the whole walk). A score is then the fp32 sum of the
//    tensor cores: every product exact, added in the MMA's order and rounding, the same bits
//    run to run but not always those of an ascending-order fp32 sum (equal for small-integer
//    features, where every partial sum is exact). Why: the SIMT product costs as much at 16
//    bits as at 32 (one FMA per feature and score), several times a tensor-core mm, while
//    with tensor cores the product is cheap next to staging the tiles and the compare.
//  * float32 (and float16 / bfloat16 before sm_80): a register-blocked SIMT micro-kernel, the
//    sources staged as float32, transposed, the destination tile kBK features at a time, 4 x 4
//    scores per thread, float32 FMAs in ascending feature order (no TF32: float32 results stay
//    those of an fp32 dot product).
// Every thread then compares its 16 scores with their sources' current k-th best (one
// lexicographic compare of (key, index), the key being the score with NaN as -inf, behind a
// plain score < threshold that almost every score fails; with tensor cores, first the max of a
// lane's 8 scores of a source). The few that pass go to a per-source candidate buffer in shared
// memory, and after a barrier one thread per source checks them against the source's excluded
// destinations (a cursor into the source's sorted excluded list that only moves forward, as the
// tiles ascend, and a scan of the few excluded destinations inside the tile) and inserts the
// survivors into the source's running top-k: a list of min(k, N_dst) (score, index) entries
// sorted best first, in shared memory, initially all empty slots (-inf, kEmptyIndex) that rank
// below every real candidate. The order is a total order, so the result does not depend on the
// order in which candidates reach the list: deterministic. The scores never leave the SM.
// Sources past N (or out of range) and destinations past N_dst are zero rows in the stages; the
// former admit nothing, the latter are never offered.
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
#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>
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
constexpr int kFusedThreads = 256;
constexpr int kMaxFusedK = 128;
constexpr int64_t kMaxFusedDim = 256;
// The SIMT product (float32)
constexpr int kBK = 32;        // features per staged slice of a destination tile
constexpr int kPad = 4;        // floats of padding per shared row (keeps float4 alignment)
constexpr int kMicro = 4;      // a thread's scores: kMicro sources x kMicro destinations
// The tensor-core product (float16, bfloat16)
constexpr int kMmaK = 16;      // features per mma.m16n8k16
constexpr int kMmaPad = 8;     // 16-bit elements of padding per shared row: the row stride
                               // an odd multiple of 16 bytes, so the 8 rows of an ldmatrix
                               // matrix (16 bytes each) fall on distinct banks
constexpr int kRegSteps = 4;   // steps of kMmaK features whose source fragments stay in
                               // registers for the whole walk (D <= 64: all of them)
static_assert(kBM == 16 * kMicro && kBN == 16 * kMicro && kFusedThreads == 256,
              "SIMT: 16 x 16 threads of 4 x 4 scores");
static_assert(kBM == 4 * 16 && kBN == 2 * 32 && kFusedThreads == 8 * kWarp,
              "tensor cores: 4 x 2 warps of 16 sources x 32 destinations");
static_assert(kBN <= 256, "candidate columns are stored as uint8");

// Shared memory of the fused kernel, carved from one dynamic buffer (16-byte aligned pieces).
struct FusedLayout {
  bool mma;           // the tensor-core product: 16-bit stages; else the SIMT one, float32
  int64_t dim_pad;    // features rounded up to kMmaK (tensor cores) or kBK (SIMT)
  int list_k;         // entries per source's running top-k
  size_t src_stage, dst_stage, list_score, list_index, cand_score, cand_col, thr_key, thr_index,
      cand_count, row_src, cursor, cursor_end, bytes;

  static size_t round16(size_t x) { return (x + 15) / 16 * 16; }

  FusedLayout(int64_t feat_dim, int list_k_, bool mma_) : mma(mma_), list_k(list_k_) {
    const int64_t step = mma ? kMmaK : kBK;
    dim_pad = std::max<int64_t>(step, (feat_dim + step - 1) / step * step);
    size_t at = 0;
    auto take = [&](size_t size) {
      const size_t offset = at;
      at = round16(at + size);
      return offset;
    };
    row_src = take(sizeof(int64_t) * kBM);
    cursor = take(sizeof(int64_t) * kBM);
    cursor_end = take(sizeof(int64_t) * kBM);
    if (mma) {   // [kBM][dim_pad + kMmaPad], and two buffers of [kBN][dim_pad + kMmaPad]
      src_stage = take(sizeof(uint16_t) * kBM * (dim_pad + kMmaPad));
      dst_stage = take(sizeof(uint16_t) * 2 * kBN * (dim_pad + kMmaPad));
    } else {     // [dim_pad][kBM + kPad] and [kBK][kBN + kPad]
      src_stage = take(sizeof(float) * dim_pad * (kBM + kPad));
      dst_stage = take(sizeof(float) * kBK * (kBN + kPad));
    }
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

// The per-source state of the fused kernel in shared memory and the steps around the product,
// the same for both products: a row tile's setup, the threshold compare, the merge, the
// write-out.
struct FusedLists {
  int64_t* row_src;     // [kBM], -1: no source
  int64_t* cursor;      // [kBM]
  int64_t* cursor_end;  // [kBM]
  float* list_score;    // [kBM][list_k]
  int32_t* list_index;  // [kBM][list_k]
  float* cand_score;    // [kBM][kBN]
  uint8_t* cand_col;    // [kBM][kBN]
  float* thr_key;       // [kBM]
  int32_t* thr_index;   // [kBM]
  int32_t* cand_count;  // [kBM]
  int list_k;

  __device__ __forceinline__ FusedLists(unsigned char* smem, const FusedLayout& layout)
      : row_src(shared_at<int64_t>(smem, layout.row_src)),
        cursor(shared_at<int64_t>(smem, layout.cursor)),
        cursor_end(shared_at<int64_t>(smem, layout.cursor_end)),
        list_score(shared_at<float>(smem, layout.list_score)),
        list_index(shared_at<int32_t>(smem, layout.list_index)),
        cand_score(shared_at<float>(smem, layout.cand_score)),
        cand_col(shared_at<uint8_t>(smem, layout.cand_col)),
        thr_key(shared_at<float>(smem, layout.thr_key)),
        thr_index(shared_at<int32_t>(smem, layout.thr_index)),
        cand_count(shared_at<int32_t>(smem, layout.cand_count)),
        list_k(layout.list_k) {}

  // Row r of the tile gets source s (-1: none or out of range), its cursor and an empty list;
  // a missing source admits nothing (its threshold (+inf, -1) ranks above every candidate).
  __device__ __forceinline__ void setup(int r, int64_t s, const int64_t* __restrict__ excl_ptr,
                                        int64_t num_excl) const {
    const float inf = std::numeric_limits<float>::infinity();
    row_src[r] = s;
    int64_t lo = 0, hi = 0;
    if (s >= 0) excluded_range(excl_ptr, num_excl, s, lo, hi);
    cursor[r] = lo;
    cursor_end[r] = hi;
    for (int i = 0; i < list_k; ++i) {
      list_score[r * list_k + i] = -inf;
      list_index[r * list_k + i] = kEmptyIndex;
    }
    thr_key[r] = s >= 0 ? -inf : inf;
    thr_index[r] = s >= 0 ? kEmptyIndex : -1;
    cand_count[r] = 0;
  }

  // The threshold compare of the score of row r and tile column c against the row's current
  // k-th best (tk, ti): one lexicographic compare of (key, index), behind a plain score < tk
  // that almost every score fails (a NaN score goes on: its key is -inf). The few that pass
  // go to the row's candidate buffer.
  __device__ __forceinline__ void offer(float score, int r, int c, int64_t j0, int64_t num_dst,
                                        float tk, int32_t ti) const {
    if (score < tk) return;
    const int64_t j = j0 + c;
    if (j < num_dst && topk::ranks_above(topk::order_key(score), static_cast<int32_t>(j), tk, ti)) {
      const int slot = atomicAdd(cand_count + r, 1);
      cand_score[r * kBN + slot] = score;
      cand_col[r * kBN + slot] = static_cast<uint8_t>(c);
    }
  }

  // The merge of row r's candidates from tile j0 (after the barrier that ends the compare):
  // they are checked against the source's excluded destinations (a cursor that only moves
  // forward, as the tiles ascend, and a scan of the few excluded ones inside the tile) and the
  // survivors inserted into the running top-k.
  __device__ __forceinline__ void merge(int r, const int64_t* __restrict__ excl_dst,
                                        int64_t j0) const {
    const int count = cand_count[r];
    if (count == 0) return;
    const int64_t end = cursor_end[r];
    const int64_t pos = topk::advance_past(excl_dst, cursor[r], end, j0);
    cursor[r] = pos;
    const int64_t tile_end = j0 + kBN;
    float* scores = list_score + r * list_k;
    int32_t* indices = list_index + r * list_k;
    for (int q = 0; q < count; ++q) {
      const int64_t j = j0 + cand_col[r * kBN + q];
      if (topk::excluded_in_tile(excl_dst, pos, end, tile_end, j)) continue;
      topk::insert_sorted(scores, indices, list_k, cand_score[r * kBN + q],
                          static_cast<int32_t>(j));
    }
    thr_key[r] = topk::order_key(scores[list_k - 1]);
    thr_index[r] = indices[list_k - 1];
    cand_count[r] = 0;
  }

  // The lists of rows [n0, n0 + rows), best first, then padding (index N_dst, score -inf);
  // coalesced writes. (The output was filled with padding; the columns past list_k keep it.)
  template <typename scalar_t>
  __device__ __forceinline__ void write(int64_t n0, int64_t rows, int64_t k, int64_t num_dst,
                                        scalar_t* __restrict__ scores_out,
                                        int64_t* __restrict__ index_out) const {
    for (int64_t e = threadIdx.x; e < rows * list_k; e += kFusedThreads) {
      const int r = static_cast<int>(e / list_k);
      const int i = static_cast<int>(e % list_k);
      const int64_t out = (n0 + r) * k + i;
      const int32_t idx = list_index[r * list_k + i];
      const float score = list_score[r * list_k + i];
      if (idx == kEmptyIndex) {
        index_out[out] = num_dst;
        scores_out[out] = static_cast<scalar_t>(-std::numeric_limits<float>::infinity());
      } else {
        index_out[out] = idx;
        scores_out[out] = static_cast<scalar_t>(score);
      }
    }
  }
};

// What a walk reads: the feature rows and the excluded destinations its merge checks. Built
// in the kernel from its __restrict__ parameters; the walks are inlined, so the loads keep
// their no-alias guarantee.
template <typename scalar_t>
struct WalkRows {
  const scalar_t* x_src;
  int64_t src_row_stride;
  const scalar_t* x_dst;
  int64_t dst_row_stride;
  int64_t num_dst;
  int64_t feat_dim;
  const int64_t* excl_dst;
};

// The SIMT walk (float32; float16 / bfloat16 before sm_80) of one row tile over every
// destination tile: the sources staged once, [dim_pad][kBM] in float32, each destination tile
// kBK features at a time, 16 x 16 threads of 4 x 4 float32 FMAs in ascending feature order.
template <typename scalar_t>
__device__ __forceinline__ void simt_walk(const FusedLists& lists, unsigned char* smem,
                                          const FusedLayout& layout,
                                          const WalkRows<scalar_t>& rows, int64_t dim_pad) {
  float* src_stage = shared_at<float>(smem, layout.src_stage);   // [dim_pad][kBM + kPad]
  float* dst_stage = shared_at<float>(smem, layout.dst_stage);   // [kBK][kBN + kPad]
  const int tid = threadIdx.x;
  const int ty = tid / 16, tx = tid % 16;
  constexpr int kSrcStride = kBM + kPad, kDstStride = kBN + kPad;
  // Zeros past D and for missing sources: consecutive threads read consecutive features of
  // one row.
  for (int64_t e = tid; e < dim_pad * kBM; e += kFusedThreads) {
    const int r = static_cast<int>(e / dim_pad);
    const int64_t d = e % dim_pad;
    const int64_t s = lists.row_src[r];
    float v = 0.f;
    if (s >= 0 && d < rows.feat_dim) {
      v = static_cast<float>(rows.x_src[s * rows.src_row_stride + d]);
    }
    src_stage[d * kSrcStride + r] = v;
  }
  // (the barrier at the top of the first slice orders these writes before their reads)

  for (int64_t j0 = 0; j0 < rows.num_dst; j0 += kBN) {
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
        if (j < rows.num_dst && f < rows.feat_dim) {
          v = static_cast<float>(rows.x_dst[j * rows.dst_row_stride + f]);
        }
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
#pragma unroll
    for (int i = 0; i < kMicro; ++i) {
      const int r = ty * kMicro + i;
      const float tk = lists.thr_key[r];
      const int32_t ti = lists.thr_index[r];
#pragma unroll
      for (int j = 0; j < kMicro; ++j) {
        lists.offer(acc[i][j], r, tx * kMicro + j, j0, rows.num_dst, tk, ti);
      }
    }
    __syncthreads();
    if (tid < kBM) lists.merge(tid, rows.excl_dst, j0);
    // (the barrier at the top of the next tile's first slice orders the merge before the
    // next compare)
  }
}

// ---- The tensor-core product: mma.sync.m16n8k16 (sm_80 and later), ldmatrix, cp.async ----
// The host takes this path only on such devices; a build for an older arch keeps a trap.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define PYG_EDGEDOT_TOPK_NO_MMA
#endif

__device__ __forceinline__ uint32_t shared_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 matrices of 16-bit elements; lane l gives the address of a row of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
#ifdef PYG_EDGEDOT_TOPK_NO_MMA
  __trap();
#else
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
#endif
}

// d += a (16 x 16, row) x b (16 x 8, col), float32 accumulators.
template <typename scalar_t>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
#ifdef PYG_EDGEDOT_TOPK_NO_MMA
  __trap();
#else
  if constexpr (std::is_same_v<scalar_t, at::BFloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(std::is_same_v<scalar_t, at::Half>, "tensor cores: float16 or bfloat16");
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#endif
}

// 16 bytes from global to shared memory, asynchronously; src_bytes = 0 writes zeros and reads
// nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
#ifdef PYG_EDGEDOT_TOPK_NO_MMA
  __trap();
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#ifndef PYG_EDGEDOT_TOPK_NO_MMA
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits for this thread's copies (none in flight: returns at once); a barrier then publishes
// them to the block.
__device__ __forceinline__ void cp_async_wait_all() {
#ifndef PYG_EDGEDOT_TOPK_NO_MMA
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#endif
}

// A thread's share of the cells of a [kBM][cols] grid (kBM = kBN): the cells r * cols + c
// that are kFusedThreads apart, from its first one on, the next by a carry, not a division.
// Built once per walk, run for every tile.
struct CellWalk {
  int cols, r0, c0, dr, dc;

  __device__ __forceinline__ explicit CellWalk(int cols_)
      : cols(cols_),
        r0(static_cast<int>(threadIdx.x) / cols_),
        c0(static_cast<int>(threadIdx.x) % cols_),
        dr(kFusedThreads / cols_),
        dc(kFusedThreads % cols_) {}

  template <typename F>
  __device__ __forceinline__ void operator()(F f) const {
    int r = r0, c = c0;
    while (r < kBM) {
      f(r, c);
      r += dr;
      c += dc;
      if (c >= cols) {   // c < 2 cols: dc < cols
        c -= cols;
        ++r;
      }
    }
  }
};

// kBM (= kBN) rows of a 16-bit stage [kBM][ld]: row r holds row row_of(r) of x (-1: zeros),
// zeros past D up to dim_pad (cells: a CellWalk over dim_pad columns). Plain loads:
// consecutive threads read consecutive features.
template <typename RowOf>
__device__ __forceinline__ void stage_rows16(uint16_t* stage, int ld, const CellWalk& cells,
                                             int64_t feat_dim, const uint16_t* __restrict__ x,
                                             int64_t row_stride, RowOf row_of) {
  cells([&](int r, int d) {
    const int64_t row = row_of(r);
    stage[r * ld + d] = row >= 0 && d < feat_dim ? x[row * row_stride + d] : uint16_t{0};
  });
}

// Destination tile j0 into a stage [kBN][ld], rows past N_dst and features past D zero. With
// vec (D, the row stride and the pointer 16-byte aligned) by cp.async, 16 bytes a copy (cells:
// a CellWalk over dim_pad / 8 columns), that land while the other buffer is multiplied;
// otherwise by plain loads (over dim_pad columns).
__device__ __forceinline__ void stage_dst16(uint16_t* stage, int ld, const CellWalk& cells,
                                            int64_t feat_dim, const uint16_t* __restrict__ x,
                                            int64_t row_stride, int64_t j0, int64_t num_dst,
                                            bool vec) {
  if (!vec) {
    stage_rows16(stage, ld, cells, feat_dim, x, row_stride,
                 [&](int c) { return j0 + c < num_dst ? j0 + c : int64_t{-1}; });
    return;
  }
  cells([&](int c, int q) {
    const int64_t j = j0 + c;
    const bool ok = j < num_dst && q * 8 < feat_dim;
    cp_async16(shared_u32(stage + c * ld + q * 8), ok ? x + j * row_stride + q * 8 : x,
               ok ? 16 : 0);
  });
  cp_async_commit();
}

// One step of kMmaK features: acc[nt] (destinations 8 nt .. 8 nt + 8 of the warp's 32) +=
// the warp's 16 x 16 source fragment a times the destination block at b_addr (this lane's
// ldmatrix address; the second 16 destinations 16 rows further).
template <typename scalar_t>
__device__ __forceinline__ void mma_step(float (&acc)[4][4], const uint32_t (&a)[4],
                                         uint32_t b_addr, int ld) {
#pragma unroll
  for (int p = 0; p < 2; ++p) {
    uint32_t b[4];
    ldmatrix_x4(b, b_addr + p * 16 * ld * static_cast<int>(sizeof(uint16_t)));
    mma_16816<scalar_t>(acc[2 * p], a, b[0], b[1]);
    mma_16816<scalar_t>(acc[2 * p + 1], a, b[2], b[3]);
  }
}

// The tensor-core walk (float16, bfloat16) of one row tile over every destination tile: the
// sources staged once, [kBM][ld] in the input dtype (ld = dim_pad + kMmaPad), each
// destination tile as [kBN][ld] into one of two buffers while the other is multiplied. Warp w
// computes sources 16 (w % 4) .. + 16 by destinations 32 (w / 4) .. + 32: 4 mma.m16n8k16 per
// kMmaK features, float32 accumulators; its source fragments of the first kRegSteps steps are
// loaded once. The accumulators are the scores: lane l holds rows l / 4 and l / 4 + 8 of the
// warp's 16, columns 2 (l % 4) and 2 (l % 4) + 1 of each block of 8, and offers them to the
// threshold compare straight from its registers.
template <typename scalar_t>
__device__ __forceinline__ void mma_walk(const FusedLists& lists, unsigned char* smem,
                                         const FusedLayout& layout,
                                         const WalkRows<scalar_t>& rows, int dim_pad,
                                         bool dst_vec) {
  const int ld = dim_pad + kMmaPad;
  constexpr int kBytes = sizeof(uint16_t);
  uint16_t* src_stage = shared_at<uint16_t>(smem, layout.src_stage);   // [kBM][ld]
  uint16_t* dst_stage = shared_at<uint16_t>(smem, layout.dst_stage);   // 2 x [kBN][ld]
  const auto* src_bits = reinterpret_cast<const uint16_t*>(rows.x_src);
  const auto* dst_bits = reinterpret_cast<const uint16_t*>(rows.x_dst);
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int wm = warp % 4 * 16, wn = warp / 4 * 32;
  const CellWalk dst_cells(dst_vec ? dim_pad / 8 : dim_pad);
  stage_rows16(src_stage, ld, CellWalk(dim_pad), rows.feat_dim, src_bits, rows.src_row_stride,
               [&](int r) { return lists.row_src[r]; });
  stage_dst16(dst_stage, ld, dst_cells, rows.feat_dim, dst_bits, rows.dst_row_stride, 0,
              rows.num_dst, dst_vec);
  cp_async_wait_all();
  __syncthreads();
  // ldmatrix rows: lane l reads source wm + l % 16 at feature 8 (l / 16) (a, a0..a3 of the
  // 16 x 16 fragment), destination wn + 8 (l / 16) + l % 8 at feature 8 ((l / 8) % 2) (b0, b1
  // of two blocks of 8).
  const uint32_t a_addr = shared_u32(src_stage + (wm + lane % 16) * ld + lane / 16 * 8);
  const int b_off = ((wn + lane / 16 * 8 + lane % 8) * ld + lane / 8 % 2 * 8) * kBytes;
  uint32_t a_reg[kRegSteps][4] = {};
#pragma unroll
  for (int s = 0; s < kRegSteps; ++s) {
    if (s * kMmaK < dim_pad) ldmatrix_x4(a_reg[s], a_addr + s * kMmaK * kBytes);
  }
  const int g = lane / 4, t = lane % 4;
  int buf = 0;
  for (int64_t j0 = 0; j0 < rows.num_dst; j0 += kBN, buf ^= 1) {
    // The other buffer was last read by the previous tile's product, before the barrier that
    // ended it.
    if (j0 + kBN < rows.num_dst) {
      stage_dst16(dst_stage + (buf ^ 1) * kBN * ld, ld, dst_cells, rows.feat_dim, dst_bits,
                  rows.dst_row_stride, j0 + kBN, rows.num_dst, dst_vec);
    }
    const uint32_t b_addr = shared_u32(dst_stage + buf * kBN * ld) + b_off;
    float acc[4][4] = {};
#pragma unroll
    for (int s = 0; s < kRegSteps; ++s) {
      if (s * kMmaK < dim_pad) mma_step<scalar_t>(acc, a_reg[s], b_addr + s * kMmaK * kBytes, ld);
    }
    for (int d0 = kRegSteps * kMmaK; d0 < dim_pad; d0 += kMmaK) {
      uint32_t a[4];
      ldmatrix_x4(a, a_addr + d0 * kBytes);
      mma_step<scalar_t>(acc, a, b_addr + d0 * kBytes, ld);
    }
    // A row's 8 scores in this lane are offered only if their max does not rank below the
    // threshold (fmaxf skips a NaN; a NaN's key -inf ranks below any threshold but -inf, and
    // nothing is below -inf).
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = wm + g + 8 * h;
      const float tk = lists.thr_key[r];
      float best = acc[0][2 * h];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) best = fmaxf(best, fmaxf(acc[nt][2 * h], acc[nt][2 * h + 1]));
      if (best < tk) continue;
      const int32_t ti = lists.thr_index[r];
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          lists.offer(acc[nt][2 * h + e], r, wn + nt * 8 + 2 * t + e, j0, rows.num_dst, tk,
                      ti);
        }
      }
    }
    __syncthreads();
    if (tid < kBM) lists.merge(tid, rows.excl_dst, j0);
    cp_async_wait_all();
    __syncthreads();   // the next tile is staged and the merge done
  }
}

// Tensor cores: 3 blocks per SM (80 registers at most), as many as the shared memory of
// D = 64, k = 20 lets in; SIMT: no minimum (0), the registers ptxas picks.
template <typename scalar_t, typename index_t, bool kMma>
__global__ void __launch_bounds__(kFusedThreads, kMma ? 3 : 0)
    topk_fused_kernel(const scalar_t* __restrict__ x_src, int64_t src_row_stride, int64_t num_src,
                      const scalar_t* __restrict__ x_dst, int64_t dst_row_stride, int64_t num_dst,
                      const index_t* __restrict__ src_index, int64_t src_stride,
                      int64_t num_rows, const int64_t* __restrict__ excl_ptr,
                      const int64_t* __restrict__ excl_dst, int64_t num_excl, int64_t feat_dim,
                      int64_t dim_pad, int64_t k, bool dst_vec, FusedLayout layout,
                      scalar_t* __restrict__ scores_out, int64_t* __restrict__ index_out) {
  extern __shared__ __align__(16) unsigned char smem[];
  const FusedLists lists(smem, layout);
  const int tid = threadIdx.x;
  const int64_t num_tiles = (num_rows + kBM - 1) / kBM;
  for (int64_t tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
    const int64_t n0 = tile * kBM;
    if (tid < kBM) {
      const int64_t n = n0 + tid;
      int64_t s = -1;
      if (n < num_rows) {
        s = static_cast<int64_t>(src_index[n * src_stride]);
        if (s < 0 || s >= num_src) s = -1;
      }
      lists.setup(tid, s, excl_ptr, num_excl);
    }
    __syncthreads();
    const WalkRows<scalar_t> rows{x_src,   src_row_stride, x_dst,   dst_row_stride,
                                  num_dst, feat_dim,       excl_dst};
    if constexpr (kMma) {
      mma_walk<scalar_t>(lists, smem, layout, rows, static_cast<int>(dim_pad), dst_vec);
    } else {
      simt_walk<scalar_t>(lists, smem, layout, rows, dim_pad);
    }
    __syncthreads();
    lists.write<scalar_t>(n0, num_rows - n0 < kBM ? num_rows - n0 : kBM, k, num_dst, scores_out,
                          index_out);
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
  bool dst_vec;   // tensor cores: x_dst's rows copied 16 bytes at a time (stage_dst16)
  cudaStream_t stream;
};

// The fused kernel over every row: as many blocks as fit on the GPU at once (at most one per
// tile of kBM rows), each looping over tiles of rows.
template <typename scalar_t, typename index_t, bool kMma>
void launch_fused(const FusedArgs& a, at::Tensor& scores, at::Tensor& index) {
  auto kernel = topk_fused_kernel<scalar_t, index_t, kMma>;
  const size_t bytes = a.layout.bytes;
  static std::atomic<int64_t> limit[64];
  // The most any launch of this instance asks: the layout at the caps, k and D.
  const int64_t allowed = allow_dynamic_shared(
      reinterpret_cast<const void*>(kernel), a.x_src.get_device(),
      static_cast<int64_t>(FusedLayout(kMaxFusedDim, kMaxFusedK, kMma).bytes), limit);
  PYG_EDGEDOT_CHECK(static_cast<int64_t>(bytes) <= allowed, "topk_dst: the fused kernel's ",
                    std::to_string(bytes), " bytes of shared memory exceed the ",
                    std::to_string(allowed), " allowed");
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
      a.layout.dim_pad, a.k, a.dst_vec, a.layout, scores.mutable_data_ptr<scalar_t>(),
      index.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The fused kernel's shared memory for this case on the current device, or nullopt for the
// ATen path: float64, k above kMaxFusedK, D above kMaxFusedDim, too many destinations for the
// int32 indices of the lists, or more shared memory than a block may opt in to (at the caps,
// k = 128 and D = 256: 166,656 bytes SIMT, 189,696 with tensor cores; an H100 / H200 block may
// have 232,448). Tensor cores for float16 / bfloat16 from sm_80 on, the SIMT product before.
std::optional<FusedLayout> fused_layout(at::ScalarType dtype, int64_t feat_dim, int64_t list_k,
                                        int64_t num_dst) {
  if (dtype == at::kDouble || list_k > kMaxFusedK || feat_dim > kMaxFusedDim ||
      num_dst >= kEmptyIndex) {
    return std::nullopt;
  }
  int device = 0, optin = 0, major = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  const FusedLayout layout(feat_dim, static_cast<int>(list_k), dtype != at::kFloat && major >= 8);
  if (layout.bytes > static_cast<size_t>(optin)) return std::nullopt;
  return layout;
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
  at::Tensor first_bad = new_first_bad(x_src);
  auto* first_bad_ptr =
      reinterpret_cast<unsigned long long*>(first_bad.mutable_data_ptr<int64_t>());
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

    const std::optional<FusedLayout> layout =
        fused_layout(x_src.scalar_type(), feat_dim, list_k, num_dst);
    if (!layout) {
      topk_aten_path<index_t>(x_src, x_dst, src_index, exclude_ptr, exclude_dst, k, scores,
                              index, stream);
      return;
    }
    const bool dst_vec = feat_dim > 0 && feat_dim % 8 == 0 && x_dst.stride(0) % 8 == 0 &&
                         reinterpret_cast<uintptr_t>(x_dst.const_data_ptr()) % 16 == 0;
    const FusedArgs args{x_src, x_dst, src_index, exclude_ptr, exclude_dst, has_excluded, k,
                         *layout, dst_vec, stream};
    switch (x_src.scalar_type()) {
      case at::kFloat: launch_fused<float, index_t, false>(args, scores, index); break;
      case at::kHalf:
        (layout->mma ? launch_fused<at::Half, index_t, true>
                     : launch_fused<at::Half, index_t, false>)(args, scores, index);
        break;
      case at::kBFloat16:
        (layout->mma ? launch_fused<at::BFloat16, index_t, true>
                     : launch_fused<at::BFloat16, index_t, false>)(args, scores, index);
        break;
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
