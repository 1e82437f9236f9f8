// CUDA kernels of candidate scoring and ranking.
//
// Work item = (source row n, tile of its candidates); one warp per item, grid-stride over
// items. Tiles are the whole row unless N is too small to fill the GPU, then the row is cut
// into tiles of a multiple of 32 candidates. The warp stages x_src[src_index[n]] once in
// shared memory, in opmath (from global memory when the row is too long for the shared
// budget), then takes its candidates 32 at a time: lane l loads the index of candidate l and
// groups of G lanes score G of them, EPG rows in flight per group, 16-byte loads of the
// candidate rows (scalars when rows are not aligned), and a butterfly reduction per group.
// Traffic: N * D source + N * K * D candidate elements read, N * K indices read,
// N * K scores (score_candidates) or N ranks (rank_candidates) written.
//
// rank_candidates scores the positive with the same group arithmetic (so a negative equal to
// the positive ties exactly, and scores equal score_candidates' bitwise), rounds scores to the
// input dtype, and counts negatives > and >= the positive with warp ballots. With several
// tiles per row, each tile adds its counts into an O(N) buffer and a second kernel writes
// the ranks.
#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <limits>

#include "common.h"
#include "vec.cuh"

namespace pyg_edgedot {

namespace {

using namespace ::pyg_edgedot::cuda;
constexpr int kMaxWarpsPerBlock = 8;
constexpr unsigned kFullMask = 0xffffffffu;
// Candidate rows whose loads are in flight together per group (as edge_dot's forward).
constexpr int kCandidatesInFlight = 4;
// Shared memory for staged source rows, per block: the default limit, so no opt-in is needed.
constexpr int64_t kStageBytesPerBlock = 48 * 1024;
// Fewer warps per block than this to fit the staged rows: read the source from global instead.
constexpr int kMinStagedWarpsPerBlock = 4;
// Set in a row's "greater" count when the row holds an index out of range (multi-tile ranks).
constexpr unsigned long long kBadRowBit = 1ull << 63;

// The source row of a work item: staged in shared memory (opmath, 16-byte aligned) or, when
// `staged` is null, read from global memory, where it stays L1-resident across candidates.
template <typename scalar_t, int VEC>
struct SourceRow {
  using acc_t = at::opmath_type<scalar_t>;
  const acc_t* staged;   // [D] shared, or nullptr
  const scalar_t* row;   // [D] global

  __device__ __forceinline__ void load(int64_t k, acc_t (&out)[VEC]) const {
    if (staged != nullptr) {
      if constexpr (VEC == 1) {
        out[0] = staged[k];
      } else {
        constexpr int kPiece = 16 / sizeof(acc_t);  // opmath elements per 16-byte load
#pragma unroll
        for (int i = 0; i < VEC; i += kPiece) {
          const Vec<acc_t, kPiece> v = *reinterpret_cast<const Vec<acc_t, kPiece>*>(staged + k + i);
#pragma unroll
          for (int j = 0; j < kPiece; ++j) out[i + j] = v.val[j];
        }
      }
    } else {
      scalar_t raw[VEC];
      load_vec<VEC>(row + k, raw);
#pragma unroll
      for (int i = 0; i < VEC; ++i) out[i] = static_cast<acc_t>(raw[i]);
    }
  }
};

// The G lanes of a group dot EPG candidate rows with the source row: lane `lane` covers
// features lane * VEC + i * G * VEC, then a butterfly leaves every lane of the group with the
// same sums (each step adds the same two values on both lanes). Every call runs the same
// sequence of operations per row whatever EPG is, so any row scores bitwise the same.
// All 32 lanes of the warp must call it (full-mask shuffles). The candidate rows stay packed
// in their 16-byte loads (Packed<>) until each product: unpacked into scalar_t[VEC] they took
// a register per element, 93 in bf16 (2 blocks of 256 per SM) against 64 packed; packed
// scored the bf16 candidates 16% faster on an H100, fp32 the same (benchmarks/NOTES.md).
template <int EPG, int VEC, typename scalar_t>
__device__ __forceinline__ void group_dot(const SourceRow<scalar_t, VEC>& src,
                                          const scalar_t* const (&rows)[EPG],
                                          const bool (&valid)[EPG], int lane, int group_size,
                                          int64_t feat_dim,
                                          at::opmath_type<scalar_t> (&acc)[EPG]) {
  using acc_t = at::opmath_type<scalar_t>;
#pragma unroll
  for (int j = 0; j < EPG; ++j) acc[j] = acc_t(0);
  for (int64_t k = static_cast<int64_t>(lane) * VEC; k < feat_dim;
       k += static_cast<int64_t>(group_size) * VEC) {
    Packed<scalar_t, VEC> b[EPG];
#pragma unroll
    for (int j = 0; j < EPG; ++j) {
      if (valid[j]) b[j].load(rows[j] + k);
    }
    acc_t a[VEC];
    src.load(k, a);
#pragma unroll
    for (int j = 0; j < EPG; ++j) {
      if (valid[j]) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[j] += a[i] * b[j].get(i);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < EPG; ++j) {
    for (int offset = group_size / 2; offset > 0; offset /= 2) {
      acc[j] += __shfl_xor_sync(kFullMask, acc[j], offset);
    }
  }
}

// Scores one chunk of up to 32 candidates: lane l of the warp holds the row of candidate l
// (-1 for none or out of range) and gets its score back (NaN for -1). The group of lane l
// scores candidates [l - l % G, l - l % G + G), EPG at a time; indices travel by shuffle.
template <int VEC, typename scalar_t>
__device__ __forceinline__ at::opmath_type<scalar_t> score_chunk(
    const SourceRow<scalar_t, VEC>& src, const scalar_t* __restrict__ x_dst,
    int64_t dst_row_stride, int64_t my_row, int group_size, int64_t feat_dim) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int EPG = kCandidatesInFlight;
  const int lane_in_warp = threadIdx.x % kWarp;
  const int lane = lane_in_warp % group_size;
  const int group_first = lane_in_warp - lane;
  const int batch = EPG < group_size ? EPG : group_size;
  acc_t my_score = std::numeric_limits<acc_t>::quiet_NaN();
  for (int t0 = 0; t0 < group_size; t0 += batch) {
    const scalar_t* rows[EPG];
    bool valid[EPG];
#pragma unroll
    for (int j = 0; j < EPG; ++j) {
      const int64_t row = __shfl_sync(kFullMask, my_row, group_first + t0 + (j < batch ? j : 0));
      valid[j] = j < batch && row >= 0;
      rows[j] = x_dst + (valid[j] ? row : 0) * dst_row_stride;
    }
    acc_t acc[EPG];
    group_dot<EPG, VEC>(src, rows, valid, lane, group_size, feat_dim, acc);
#pragma unroll
    for (int j = 0; j < EPG; ++j) {
      if (j < batch && lane == t0 + j && valid[j]) my_score = acc[j];
    }
  }
  return my_score;
}

// The source row of a work item, first copied into this warp's shared buffer (opmath) when
// it has one; the first __syncwarp keeps the previous item's readers ahead of the overwrite.
template <int VEC, typename scalar_t>
__device__ __forceinline__ SourceRow<scalar_t, VEC> source_row(
    const scalar_t* __restrict__ row, int64_t feat_dim, at::opmath_type<scalar_t>* staged) {
  if (staged != nullptr) {
    __syncwarp();
    for (int64_t d = threadIdx.x % kWarp; d < feat_dim; d += kWarp) {
      staged[d] = static_cast<at::opmath_type<scalar_t>>(row[d]);
    }
    __syncwarp();
  }
  return SourceRow<scalar_t, VEC>{staged, row};
}

struct Tiling {
  int64_t num_rows, num_cand, tile, tiles_per_row;
  __device__ __forceinline__ void item(int64_t item, int64_t& n, int64_t& k_begin,
                                       int64_t& k_end) const {
    n = item / tiles_per_row;
    k_begin = (item - n * tiles_per_row) * tile;
    k_end = k_begin + tile < num_cand ? k_begin + tile : num_cand;
  }
};

// A warp's share of the work items (grid-stride: first, first + stride, ... below count) and
// its buffer for staged source rows in shared memory (null when rows are not staged).
template <typename acc_t>
struct WarpItems {
  acc_t* staged;
  int64_t first, stride, count;
};

template <typename acc_t>
__device__ __forceinline__ WarpItems<acc_t> warp_items(const Tiling& tiling,
                                                       int64_t staged_stride) {
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  WarpItems<acc_t> items;
  items.staged = staged_stride > 0 ? reinterpret_cast<acc_t*>(shared_bytes) +
                                         (threadIdx.x / kWarp) * staged_stride
                                   : nullptr;
  items.first = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  items.stride = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp;
  items.count = tiling.num_rows * tiling.tiles_per_row;
  return items;
}

template <typename scalar_t, typename index_t, int VEC>
__global__ void __launch_bounds__(kMaxWarpsPerBlock * kWarp) score_candidates_kernel(
    const scalar_t* __restrict__ x_src, int64_t src_row_stride, int64_t num_src,  // [N_src, D]
    const scalar_t* __restrict__ x_dst, int64_t dst_row_stride, int64_t num_dst,  // [N_dst, D]
    const index_t* __restrict__ src_index, int64_t src_stride,                    // [N]
    const index_t* __restrict__ cand_index, int64_t cand_stride0,                 // [N, K]
    int64_t cand_stride1,
    scalar_t* __restrict__ out,                                                   // [N, K]
    unsigned long long* __restrict__ first_bad,  // [1]: smallest bad row, or all ones
    Tiling tiling, int64_t feat_dim, int group_size, int64_t staged_stride) {
  using acc_t = at::opmath_type<scalar_t>;
  const WarpItems<acc_t> items = warp_items<acc_t>(tiling, staged_stride);
  const int lane = threadIdx.x % kWarp;
  const int64_t num_cand = tiling.num_cand;
  const scalar_t nan = static_cast<scalar_t>(std::numeric_limits<acc_t>::quiet_NaN());

  for (int64_t item = items.first; item < items.count; item += items.stride) {
    int64_t n, k_begin, k_end;
    tiling.item(item, n, k_begin, k_end);
    const int64_t s = static_cast<int64_t>(src_index[n * src_stride]);
    scalar_t* out_row = out + n * num_cand;
    if (s < 0 || s >= num_src) {
      for (int64_t k = k_begin + lane; k < k_end; k += kWarp) out_row[k] = nan;
      if (lane == 0) atomicMin(first_bad, static_cast<unsigned long long>(n));
      continue;
    }
    if (k_begin >= k_end) continue;
    // Lane l loads the index of candidate l of the chunk, one chunk ahead (the first one
    // while the source row is staged).
    auto load_cand = [&](int64_t k) -> int64_t {
      return k < k_end ? static_cast<int64_t>(cand_index[n * cand_stride0 + k * cand_stride1])
                       : -1;
    };
    int64_t next_c = load_cand(k_begin + lane);
    const auto src = source_row<VEC>(x_src + s * src_row_stride, feat_dim, items.staged);
    for (int64_t chunk = k_begin; chunk < k_end; chunk += kWarp) {
      const int64_t k = chunk + lane;
      int64_t c = next_c;
      next_c = load_cand(chunk + kWarp + lane);
      const bool bad = k < k_end && (c < 0 || c >= num_dst);
      if (bad) c = -1;
      if (__any_sync(kFullMask, bad) && lane == 0) {
        atomicMin(first_bad, static_cast<unsigned long long>(n));
      }
      const acc_t score = score_chunk<VEC>(src, x_dst, dst_row_stride, c, group_size, feat_dim);
      if (k < k_end) out_row[k] = static_cast<scalar_t>(score);
    }
  }
}

template <typename scalar_t, typename index_t, int VEC>
__global__ void __launch_bounds__(kMaxWarpsPerBlock * kWarp) rank_candidates_kernel(
    const scalar_t* __restrict__ x_src, int64_t src_row_stride, int64_t num_src,  // [N_src, D]
    const scalar_t* __restrict__ x_dst, int64_t dst_row_stride, int64_t num_dst,  // [N_dst, D]
    const index_t* __restrict__ src_index, int64_t src_stride,                    // [N]
    const index_t* __restrict__ pos_index, int64_t pos_stride,                    // [N]
    const index_t* __restrict__ neg_index, int64_t neg_stride0,                   // [N, K]
    int64_t neg_stride1,
    float* __restrict__ rank,                   // [N], written here when tiles_per_row == 1
    unsigned long long* __restrict__ counts,    // [2, N] (> | kBadRowBit, >=), else
    unsigned long long* __restrict__ first_bad,  // [1]: smallest bad row, or all ones
    Tiling tiling, int64_t feat_dim, int group_size, int64_t staged_stride) {
  using acc_t = at::opmath_type<scalar_t>;
  const WarpItems<acc_t> items = warp_items<acc_t>(tiling, staged_stride);
  const int lane_in_warp = threadIdx.x % kWarp;
  auto rounded = [](acc_t score) { return static_cast<acc_t>(static_cast<scalar_t>(score)); };

  for (int64_t item = items.first; item < items.count; item += items.stride) {
    int64_t n, k_begin, k_end;
    tiling.item(item, n, k_begin, k_end);
    const int64_t s = static_cast<int64_t>(src_index[n * src_stride]);
    const int64_t p = static_cast<int64_t>(pos_index[n * pos_stride]);
    bool row_bad = s < 0 || s >= num_src || p < 0 || p >= num_dst;
    unsigned long long greater = 0, greater_equal = 0;
    if (!row_bad && k_begin < k_end) {
      auto load_neg = [&](int64_t k) -> int64_t {
        return k < k_end ? static_cast<int64_t>(neg_index[n * neg_stride0 + k * neg_stride1])
                         : -1;
      };
      int64_t next_c = load_neg(k_begin + lane_in_warp);  // one chunk ahead, as above
      const auto src = source_row<VEC>(x_src + s * src_row_stride, feat_dim, items.staged);
      // Every group scores the positive exactly as it scores a candidate.
      const scalar_t* pos_row[1] = {x_dst + p * dst_row_stride};
      const bool pos_valid[1] = {true};
      acc_t pos_acc[1];
      group_dot<1, VEC>(src, pos_row, pos_valid, lane_in_warp % group_size, group_size,
                        feat_dim, pos_acc);
      const acc_t pos = rounded(pos_acc[0]);
      for (int64_t chunk = k_begin; chunk < k_end; chunk += kWarp) {
        const int64_t k = chunk + lane_in_warp;
        const bool in_tile = k < k_end;
        const int64_t c = next_c;
        next_c = load_neg(chunk + kWarp + lane_in_warp);
        if (__any_sync(kFullMask, in_tile && (c < 0 || c >= num_dst))) {
          row_bad = true;  // its rank is NaN whatever the other negatives score
          break;
        }
        const acc_t neg =
            rounded(score_chunk<VEC>(src, x_dst, dst_row_stride, c, group_size, feat_dim));
        greater += __popc(__ballot_sync(kFullMask, in_tile && neg > pos));
        greater_equal += __popc(__ballot_sync(kFullMask, in_tile && neg >= pos));
      }
    }
    if (lane_in_warp == 0) {
      if (row_bad) atomicMin(first_bad, static_cast<unsigned long long>(n));
      if (tiling.tiles_per_row == 1) {
        // OGB: 0.5 * (optimistic + pessimistic) + 1, in float32.
        rank[n] = row_bad ? std::numeric_limits<float>::quiet_NaN()
                          : 0.5f * static_cast<float>(greater + greater_equal) + 1.0f;
      } else if (row_bad) {
        atomicOr(counts + n, kBadRowBit);
      } else {
        atomicAdd(counts + n, greater);
        atomicAdd(counts + tiling.num_rows + n, greater_equal);
      }
    }
  }
}

__global__ void ranks_from_counts_kernel(const unsigned long long* __restrict__ counts,  // [2, N]
                                         float* __restrict__ rank, int64_t num_rows) {  // [N]
  for (int64_t n = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < num_rows;
       n += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const unsigned long long greater = counts[n];
    rank[n] = (greater & kBadRowBit)
                  ? std::numeric_limits<float>::quiet_NaN()
                  : 0.5f * static_cast<float>(greater + counts[num_rows + n]) + 1.0f;
  }
}

// ---------------------------------------------------------------------------------------
// Launch configuration
// ---------------------------------------------------------------------------------------

struct Plan {
  Tiling tiling;
  int threads;
  int64_t grid;
  int64_t staged_stride;  // opmath elements per warp's staged row (0: not staged)
  size_t shared_bytes;
};

Plan plan_launch(int64_t num_rows, int64_t num_cand, int64_t feat_dim, size_t acc_size) {
  Plan plan;
  const int64_t sms = num_sms();
  // Staged rows padded to 4 opmath elements, so each warp's row starts 16-byte aligned.
  const int64_t padded = (feat_dim + 3) / 4 * 4;
  const int64_t row_bytes = std::max<int64_t>(1, padded * static_cast<int64_t>(acc_size));
  int64_t warps = std::min<int64_t>(kMaxWarpsPerBlock, kStageBytesPerBlock / row_bytes);
  if (warps >= kMinStagedWarpsPerBlock && feat_dim > 0) {
    plan.staged_stride = padded;
  } else {
    warps = kMaxWarpsPerBlock;
    plan.staged_stride = 0;
  }
  plan.threads = static_cast<int>(warps * kWarp);
  plan.shared_bytes = static_cast<size_t>(warps * plan.staged_stride) * acc_size;

  // One tile per row when there are enough rows to keep every SM busy (64 resident warps per
  // SM); otherwise cut rows into tiles of a multiple of 32 candidates, at least 32.
  const int64_t target_items = sms * 64;
  int64_t tiles_per_row = 1;
  if (num_rows < target_items && num_cand > kWarp) {
    const int64_t wanted = (target_items + num_rows - 1) / std::max<int64_t>(1, num_rows);
    tiles_per_row = std::min<int64_t>(wanted, (num_cand + kWarp - 1) / kWarp);
  }
  int64_t tile = (num_cand + tiles_per_row - 1) / tiles_per_row;
  tile = (tile + kWarp - 1) / kWarp * kWarp;
  if (tile > 0) tiles_per_row = (num_cand + tile - 1) / tile;
  plan.tiling = Tiling{num_rows, num_cand, tile, std::max<int64_t>(1, tiles_per_row)};

  const int64_t items = num_rows * plan.tiling.tiles_per_row;
  const int64_t blocks = (items + warps - 1) / warps;
  plan.grid = std::max<int64_t>(1, std::min<int64_t>(blocks, sms * 32));
  return plan;
}

// The kernel's template arguments: the dtypes of x_src and src_index, and the vector width.
template <typename scalar_t_, typename index_t_, int VEC>
struct KernelTypes {
  using scalar_t = scalar_t_;
  using index_t = index_t_;
  static constexpr int vec = VEC;
};

// What both ops set up alike: the device guard, rows with unit column stride and the
// first_bad flag, -1 (all ones as unsigned) until a row with an index out of range lowers it.
struct CandidateOp {
  const c10::cuda::OptionalCUDAGuard guard;
  const at::Tensor x_src, x_dst, first_bad;
  unsigned long long* const first_bad_ptr;
  const cudaStream_t stream;

  CandidateOp(const at::Tensor& x_src_in, const at::Tensor& x_dst_in)
      : guard(x_src_in.device()),
        x_src(unit_column_stride(x_src_in)),
        x_dst(unit_column_stride(x_dst_in)),
        first_bad(new_first_bad(x_src)),
        first_bad_ptr(reinterpret_cast<unsigned long long*>(first_bad.mutable_data_ptr<int64_t>())),
        stream(c10::cuda::getCurrentCUDAStream()) {}

  // run(plan, KernelTypes<...>{}) for the dtypes of x_src and src_index, unless there are
  // no rows. The plan and vector width are chosen the same way for both ops, so that their
  // scores agree bitwise; the source is read vectorized only when it is not staged.
  template <typename Launch>
  void launch(const at::Tensor& src_index, int64_t num_rows, int64_t num_cand,
              Launch&& run) const {
    if (num_rows == 0) return;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_src.scalar_type(), "candidates_cuda", [&] {
      AT_DISPATCH_INDEX_TYPES(src_index.scalar_type(), "candidates_cuda", [&] {
        constexpr int kVec = 16 / sizeof(scalar_t);
        const Plan plan = plan_launch(num_rows, num_cand, x_src.size(1),
                                      sizeof(at::opmath_type<scalar_t>));
        const bool vectorized = rows_vectorizable(x_dst, kVec) &&
                                (plan.staged_stride > 0 || rows_vectorizable(x_src, kVec));
        if (vectorized) {
          run(plan, KernelTypes<scalar_t, index_t, kVec>{});
        } else {
          run(plan, KernelTypes<scalar_t, index_t, 1>{});
        }
      });
    });
  }
};

// ---------------------------------------------------------------------------------------
// Ops
// ---------------------------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> score_candidates_cuda(const at::Tensor& x_src_in,
                                                         const at::Tensor& x_dst_in,
                                                         const at::Tensor& src_index,
                                                         const at::Tensor& cand_index) {
  const CandidateOp op(x_src_in, x_dst_in);
  const int64_t num_rows = cand_index.size(0), num_cand = cand_index.size(1);
  at::Tensor out = at::empty({num_rows, num_cand}, op.x_src.options());
  op.launch(src_index, num_rows, num_cand, [&](const Plan& plan, auto types) {
    using T = decltype(types);
    using scalar_t = typename T::scalar_t;
    using index_t = typename T::index_t;
    const int64_t feat_dim = op.x_src.size(1);
    score_candidates_kernel<scalar_t, index_t, T::vec>
        <<<plan.grid, plan.threads, plan.shared_bytes, op.stream>>>(
            op.x_src.const_data_ptr<scalar_t>(), op.x_src.stride(0), op.x_src.size(0),
            op.x_dst.const_data_ptr<scalar_t>(), op.x_dst.stride(0), op.x_dst.size(0),
            src_index.const_data_ptr<index_t>(), src_index.stride(0),
            cand_index.const_data_ptr<index_t>(), cand_index.stride(0), cand_index.stride(1),
            out.mutable_data_ptr<scalar_t>(), op.first_bad_ptr, plan.tiling, feat_dim,
            group_size_for(feat_dim, T::vec), plan.staged_stride);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {out, op.first_bad};
}

std::tuple<at::Tensor, at::Tensor> rank_candidates_cuda(
    const at::Tensor& x_src_in, const at::Tensor& x_dst_in, const at::Tensor& src_index,
    const at::Tensor& pos_index, const at::Tensor& neg_index) {
  const CandidateOp op(x_src_in, x_dst_in);
  const int64_t num_rows = src_index.size(0), num_cand = neg_index.size(1);
  at::Tensor rank = at::empty({num_rows}, op.x_src.options().dtype(at::kFloat));
  op.launch(src_index, num_rows, num_cand, [&](const Plan& plan, auto types) {
    using T = decltype(types);
    using scalar_t = typename T::scalar_t;
    using index_t = typename T::index_t;
    const int64_t feat_dim = op.x_src.size(1);
    at::Tensor counts;  // [2, N], only when rows are cut into several tiles
    unsigned long long* counts_ptr = nullptr;
    if (plan.tiling.tiles_per_row > 1) {
      counts = at::zeros({2, num_rows}, op.first_bad.options());
      counts_ptr = reinterpret_cast<unsigned long long*>(counts.mutable_data_ptr<int64_t>());
    }
    rank_candidates_kernel<scalar_t, index_t, T::vec>
        <<<plan.grid, plan.threads, plan.shared_bytes, op.stream>>>(
            op.x_src.const_data_ptr<scalar_t>(), op.x_src.stride(0), op.x_src.size(0),
            op.x_dst.const_data_ptr<scalar_t>(), op.x_dst.stride(0), op.x_dst.size(0),
            src_index.const_data_ptr<index_t>(), src_index.stride(0),
            pos_index.const_data_ptr<index_t>(), pos_index.stride(0),
            neg_index.const_data_ptr<index_t>(), neg_index.stride(0), neg_index.stride(1),
            rank.mutable_data_ptr<float>(), counts_ptr, op.first_bad_ptr, plan.tiling,
            feat_dim, group_size_for(feat_dim, T::vec), plan.staged_stride);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (counts_ptr != nullptr) {
      constexpr int kThreads = 256;
      const int64_t blocks = std::min<int64_t>((num_rows + kThreads - 1) / kThreads,
                                               num_sms() * 32);
      ranks_from_counts_kernel<<<blocks, kThreads, 0, op.stream>>>(
          counts_ptr, rank.mutable_data_ptr<float>(), num_rows);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
  });
  return {rank, op.first_bad};
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_edgedot, CUDA, m) {
  impl_candidate_ops<&score_candidates_cuda, &rank_candidates_cuda>(m);
}

}  // namespace pyg_edgedot
