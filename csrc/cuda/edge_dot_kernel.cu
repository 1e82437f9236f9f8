// CUDA kernels of the edge_dot group: a fused forward and a fused, deterministic backward.
// The relation-weighted ops (edge_dot_rel, edge_dot_rel_grad; schemas in edge_dot_rel.cpp) are
// these same kernels with a third row per edge (template parameters REL and TRIPLE), so they
// live here too.
//
// Forward: a group of G lanes (a power of two <= 32) scores EPG edges at once; each lane
// reads 16-byte vectors of both rows (scalars when rows are not aligned), kept packed until
// used, accumulates in opmath, and the group reduces with shuffles. Both rows are loaded for
// every edge: with edges sorted by source, L1/L2 serve the repeated source rows, and keeping
// a repeated source row in registers instead measured slower. Traffic: 2 * E * D
// elements gathered (less from DRAM with sorted sources), E indices of each side, E scores.
// No [E, D] intermediate.
//
// Backward (one side, out[scatter[e]] += grad[e] * x_gather[gather[e]]): the edges are
// radix-sorted by scatter index (CUB, only the bits that the row count needs) carrying their
// gather index and upstream gradient along, a CSR row pointer is built from the sorted keys,
// and one group per stretch of consecutive output rows walks their edges in sorted order,
// writing each row once, in the output dtype (rows past a length limit are summed in pieces
// by other kernels; the sort and these kernels are grad_walk.cuh's, which edge_dot_loss's
// backward shares). No atomics, so the result is bitwise deterministic; traffic: E * D
// gathered elements + N * D written + the sort of (key, gather index, gradient). Small E
// (at most 2^16 edges onto at most 8192 rows) skips the sort: a plan kernel puts the edge ids
// in the order of a stable sort by row (each block places its own rows' edges), then a warp
// per row sums them, the same bits as the sorted path in two launches per side instead of ~11;
// at most 2^15 edges onto rows that fit one wave of 16- or 32-row blocks take one launch for
// both sides (edge_dot_grad_small_fused_kernel: each block orders its rows' edges in shared
// memory and sums them itself).
// Small E in the forward: a group per edge, one wave (edge_dot_fwd_small_kernel), same bits.
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

#include "common.h"
#include "grad_walk.cuh"
#include "vec.cuh"

namespace pyg_edgedot {
namespace {

using namespace ::pyg_edgedot::cuda;

template <typename T>
struct TypeTag {
  using type = T;
};

// The four template instances of a kernel with two compile-time choices, picked at run time:
// f(A{} or B{} as `first` says, std::true_type{} or std::false_type{} as `flag` says).
template <typename A, typename B, typename F>
void dispatch_choices(bool first, bool flag, F&& f) {
  if (flag) {
    if (first) f(A{}, std::true_type{});
    else f(B{}, std::true_type{});
  } else {
    if (first) f(A{}, std::false_type{});
    else f(B{}, std::false_type{});
  }
}

// ---------------------------------------------------------------------------------------
// Forward
// ---------------------------------------------------------------------------------------

// A warp takes C consecutive edges at a time (a chunk; C = 32, or fewer for small E, see
// chunk_edges_for): lane l < C loads the two indices of edge l (one coalesced load per side,
// issued one chunk ahead so index latency hides behind the row loads). A group of G lanes
// then scores min(G, C) of those edges, EPG at a time: the indices come by shuffle, each lane
// loads 16-byte pieces of the 2 * EPG rows, and the group reduces. Lane l keeps the score of
// edge l, so the chunk's scores are stored in one coalesced write. Every loop is
// warp-uniform, so the full-mask shuffles are safe.
//
// With REL, each product also takes the edge's relation row: sum_k a[k] * r[k] * b[k]
// (DistMult). The relation table is small, so its rows come from L1/L2.
// Edges whose row loads are in flight together per group, and the blocks per SM the register
// cap is set for. Measured on the H200 (benchmarks/NOTES.md, CUDA forward): 2 edges at 4 blocks
// per SM tied 4 edges at 3 blocks in random order and was 6-8% faster sorted by source, where
// half the row loads hit L1 and more warps keep more DRAM reads in flight; 8 edges was slower
// than 4 (1.8x in bf16). DistMult's three rows take the same: 4 edges needed 110 registers
// (2 blocks per SM), 2 edges fit 64 and were 2% faster in fp32, 3% in bf16 (H100, NOTES).
constexpr int kForwardEdgesInFlight = 2;
constexpr int kForwardBlocksPerSm = 4;

template <typename scalar_t, typename index_t, int VEC, int EPG, bool REL, bool PIPELINED>
__global__ void __launch_bounds__(kThreads, kForwardBlocksPerSm) edge_dot_fwd_kernel(
    const scalar_t* __restrict__ x_src, int64_t src_row_stride, int64_t num_src,  // [N_src, D]
    const scalar_t* __restrict__ x_dst, int64_t dst_row_stride, int64_t num_dst,  // [N_dst, D]
    const scalar_t* __restrict__ rel, int64_t rel_row_stride, int64_t num_rel,    // [R, D]
    const index_t* __restrict__ src_index, int64_t src_index_stride,              // [E]
    const index_t* __restrict__ dst_index, int64_t dst_index_stride,              // [E]
    const index_t* __restrict__ rel_index, int64_t rel_index_stride,              // [E]
    scalar_t* __restrict__ out,                                                   // [E]
    unsigned long long* __restrict__ first_bad,  // [1]: smallest bad edge, or all ones; or null
    int64_t num_edges, int64_t feat_dim, int group_size, int chunk_edges) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  const int64_t warp_stride = static_cast<int64_t>(gridDim.x) * blockDim.x / kWarp * chunk_edges;
  const int lane_in_warp = threadIdx.x % kWarp;
  const bool lane_has_edge = lane_in_warp < chunk_edges;
  const int lane = lane_in_warp % group_size;
  const int group_first_edge = lane_in_warp - lane;  // edges [first, first + G) of the chunk
  const int group_edges = group_size < chunk_edges ? group_size : chunk_edges;

  auto load_index = [&](int64_t e, int64_t& s, int64_t& d, int64_t& t) {
    s = d = -1;
    t = 0;
    if (e < num_edges) {
      s = static_cast<int64_t>(src_index[e * src_index_stride]);
      d = static_cast<int64_t>(dst_index[e * dst_index_stride]);
      if constexpr (REL) t = static_cast<int64_t>(rel_index[e * rel_index_stride]);
    }
  };
  int64_t next_s, next_d, next_t;
  // Lanes past the chunk's edges load none (indices -1: nothing scored, nothing reported).
  auto lane_edge = [&](int64_t chunk) { return lane_has_edge ? chunk + lane_in_warp : num_edges; };
  load_index(lane_edge(warp * chunk_edges), next_s, next_d, next_t);

  for (int64_t chunk = warp * chunk_edges; chunk < num_edges; chunk += warp_stride) {
    const int64_t my_s = next_s, my_d = next_d, my_t = next_t;
    load_index(lane_edge(chunk + warp_stride), next_s, next_d, next_t);  // prefetch
    const int64_t my_edge = lane_edge(chunk);
    const bool my_valid = my_s >= 0 && my_s < num_src && my_d >= 0 && my_d < num_dst &&
                          my_t >= 0 && my_t < num_rel;
    if (!my_valid && my_edge < num_edges && first_bad != nullptr) {
      atomicMin(first_bad, static_cast<unsigned long long>(my_edge));
    }
    const acc_t my_score = score_group_edges<scalar_t, VEC, EPG, REL, PIPELINED>(
        x_src, src_row_stride, x_dst, dst_row_stride, rel, rel_row_stride, my_s, my_d, my_t, lane,
        group_first_edge, group_size, group_edges, feat_dim,
        [&](int64_t s, int64_t d, int64_t t) {
          return s >= 0 && s < num_src && d >= 0 && d < num_dst && t >= 0 && t < num_rel;
        });
    if (my_edge < num_edges) out[my_edge] = static_cast<scalar_t>(my_score);
  }
}

// Edges per warp chunk. A chunk of 32 costs 32 / (32 / G * EPG) rounds of dependent row loads
// per warp; when E / 32 warps would not fill the GPU's resident warps (E below ~100K on the
// H200), the time is those rounds' latency, so the chunk shrinks (down to one round per
// group: (32 / G) * EPG edges) until the warps fill it.
int chunk_edges_for(int64_t num_edges, int group, int blocks_per_sm, int edges_in_flight) {
  const int64_t resident_warps = num_sms() * blocks_per_sm * (kThreads / kWarp);
  const int batch = std::min(edges_in_flight, group);
  const int smallest = (kWarp / group) * batch;
  int chunk = kWarp;
  while (chunk > smallest && (num_edges + chunk - 1) / chunk < resident_warps) chunk /= 2;
  return chunk;
}

// Small E (W1: 16K edges): edge_dot_fwd_kernel's warps each take a chunk of edges (down to
// one round of EPG rows per group), and at E = 16K its grid is two waves of 4 blocks per SM
// of two dependent loads each (index, rows). This kernel gives each edge its own group of
// G / 4 lanes, each lane loading 4 vectors of each row at once (the G lanes' vectors of
// edge_dot_fwd_kernel), so the whole grid is one wave and every row load is in flight
// together. The score is the same bits as edge_dot_fwd_kernel's: lane l keeps the four
// partial sums of that kernel's lanes l + j * G / 4 (each from zero, in the same order),
// adds them as that kernel's first two butterfly steps do (x + y is commutative, and every
// lane of a butterfly ends with the same bits), then shuffles over its G / 4 lanes.
constexpr int kSmallForwardSplit = 4;  // vectors per row and lane (U)

template <typename scalar_t, typename index_t, int VEC>
__global__ void __launch_bounds__(kThreads, kForwardBlocksPerSm) edge_dot_fwd_small_kernel(
    const scalar_t* __restrict__ x_src, int64_t src_row_stride, int64_t num_src,  // [N_src, D]
    const scalar_t* __restrict__ x_dst, int64_t dst_row_stride, int64_t num_dst,  // [N_dst, D]
    const index_t* __restrict__ src_index, int64_t src_index_stride,              // [E]
    const index_t* __restrict__ dst_index, int64_t dst_index_stride,              // [E]
    scalar_t* __restrict__ out,                                                   // [E]
    unsigned long long* __restrict__ first_bad,  // [1]: smallest bad edge, or all ones; or null
    int64_t num_edges, int64_t feat_dim, int lanes) {  // lanes = G / U, a power of two
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int U = kSmallForwardSplit;
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // Shifts, not a division: the edge's index loads wait for e, and a division by a value
  // known only at run time takes two ~20-instruction sequences ahead of them.
  const int64_t e = thread >> (__ffs(lanes) - 1);
  if (e >= num_edges) return;  // the whole group (edges of a warp are consecutive)
  const int lane = static_cast<int>(thread) & (lanes - 1);
  const unsigned group_mask =
      lanes == kWarp ? 0xffffffffu : ((1u << lanes) - 1u) << (threadIdx.x % kWarp - lane);
  // Every lane of the group loads the edge's indices (one transaction for the group).
  const int64_t s = static_cast<int64_t>(src_index[e * src_index_stride]);
  const int64_t d = static_cast<int64_t>(dst_index[e * dst_index_stride]);
  const bool valid = s >= 0 && s < num_src && d >= 0 && d < num_dst;
  if (!valid && lane == 0 && first_bad != nullptr) {
    atomicMin(first_bad, static_cast<unsigned long long>(e));
  }
  const scalar_t* src_row = x_src + (valid ? s : 0) * src_row_stride;
  const scalar_t* dst_row = x_dst + (valid ? d : 0) * dst_row_stride;
  Packed<scalar_t, VEC> a[U], b[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t k = static_cast<int64_t>(lane + u * lanes) * VEC;
    if (valid && k < feat_dim) {
      a[u].load(src_row + k);
      b[u].load(dst_row + k);
    }
  }
  acc_t acc[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    acc[u] = acc_t(0);
    const int64_t k = static_cast<int64_t>(lane + u * lanes) * VEC;
    if (valid && k < feat_dim) add_products<false>(acc[u], a[u], b[u], a[u]);
  }
  // edge_dot_fwd_kernel's butterfly steps at offsets G / 2 and G / 4, within the lane.
#pragma unroll
  for (int step = U / 2; step > 0; step /= 2) {
#pragma unroll
    for (int u = 0; u < step; ++u) acc[u] += acc[u + step];
  }
  for (int offset = lanes / 2; offset > 0; offset /= 2) {
    acc[0] += __shfl_xor_sync(group_mask, acc[0], offset);
  }
  if (lane == 0) {
    out[e] = static_cast<scalar_t>(valid ? acc[0] : std::numeric_limits<acc_t>::quiet_NaN());
  }
}

// Whether edge_dot_fwd_small_kernel takes this forward: a lane's 4 vectors per row cover the
// row with G / 4 >= 1 lanes (D <= 32 vectors), and its grid is one wave at the blocks per SM
// edge_dot_fwd_kernel keeps (beyond that, the chunked kernel's prefetch pays).
int small_forward_lanes(int64_t num_edges, int64_t feat_dim, int vec) {
  const int group = group_size_for(feat_dim, vec);
  if (feat_dim > int64_t{kWarp} * vec || group < kSmallForwardSplit) return 0;
  const int lanes = group / kSmallForwardSplit;
  const int64_t resident_threads = num_sms() * kForwardBlocksPerSm * kThreads;
  return num_edges * lanes <= resident_threads ? lanes : 0;
}

// rel / rel_index undefined: the plain dot product.
template <typename scalar_t, typename index_t, int VEC, bool REL>
void launch_forward(const at::Tensor& x_src, const at::Tensor& x_dst, const at::Tensor& rel,
                    const at::Tensor& src_index, const at::Tensor& dst_index,
                    const at::Tensor& rel_index, at::Tensor& out,
                    unsigned long long* first_bad) {
  const int64_t num_edges = out.size(0), feat_dim = x_src.size(1);
  const auto stream = c10::cuda::getCurrentCUDAStream();
  if constexpr (!REL) {
    const int lanes = small_forward_lanes(num_edges, feat_dim, VEC);
    if (lanes > 0) {
      const int64_t grid = (num_edges * lanes + kThreads - 1) / kThreads;
      edge_dot_fwd_small_kernel<scalar_t, index_t, VEC><<<grid, kThreads, 0, stream>>>(
          x_src.const_data_ptr<scalar_t>(), x_src.stride(0), x_src.size(0),
          x_dst.const_data_ptr<scalar_t>(), x_dst.stride(0), x_dst.size(0),
          src_index.const_data_ptr<index_t>(), src_index.stride(0),
          dst_index.const_data_ptr<index_t>(), dst_index.stride(0),
          out.mutable_data_ptr<scalar_t>(), first_bad, num_edges, feat_dim, lanes);
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
  }
  const int group = group_size_for(feat_dim, VEC);
  const int chunk_edges = chunk_edges_for(num_edges, group, kForwardBlocksPerSm,
                                          kForwardEdgesInFlight);
  const int64_t grid = grid_for((num_edges + chunk_edges - 1) / chunk_edges);
  // The pipelined rounds where one pass covers a row (score_group_edges says why); not for
  // DistMult, nor for the unaligned (VEC = 1) rows, which keep one kernel each.
  auto kernel = edge_dot_fwd_kernel<scalar_t, index_t, VEC, kForwardEdgesInFlight, REL, false>;
  if constexpr (!REL && VEC > 1) {
    if (feat_dim <= static_cast<int64_t>(group) * VEC) {
      kernel = edge_dot_fwd_kernel<scalar_t, index_t, VEC, kForwardEdgesInFlight, REL, true>;
    }
  }
  kernel<<<grid, kThreads, 0, stream>>>(
      x_src.const_data_ptr<scalar_t>(), x_src.stride(0), x_src.size(0),
      x_dst.const_data_ptr<scalar_t>(), x_dst.stride(0), x_dst.size(0),
      REL ? rel.const_data_ptr<scalar_t>() : nullptr, REL ? rel.stride(0) : 0,
      REL ? rel.size(0) : 1,
      src_index.const_data_ptr<index_t>(), src_index.stride(0),
      dst_index.const_data_ptr<index_t>(), dst_index.stride(0),
      REL ? rel_index.const_data_ptr<index_t>() : nullptr, REL ? rel_index.stride(0) : 0,
      out.mutable_data_ptr<scalar_t>(), first_bad, num_edges, feat_dim, group, chunk_edges);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The forward of edge_dot and edge_dot_rel (rel, rel_index undefined for edge_dot).
std::tuple<at::Tensor, at::Tensor> edge_dot_cuda(
    const at::Tensor& x_src_in, const at::Tensor& x_dst_in, const at::Tensor& rel_in,
    const at::Tensor& src_index, const at::Tensor& dst_index, const at::Tensor& rel_index,
    bool report_bad) {
  const c10::cuda::OptionalCUDAGuard guard(x_src_in.device());
  const at::Tensor x_src = unit_column_stride(x_src_in);
  const at::Tensor x_dst = unit_column_stride(x_dst_in);
  const bool has_rel = rel_in.defined();
  const at::Tensor rel = has_rel ? unit_column_stride(rel_in) : rel_in;
  at::Tensor out = at::empty({src_index.size(0)}, x_src.options());
  // Reported: -1 (all ones as unsigned) until an edge with an index out of range lowers it
  // (a memset, then the kernel's atomicMin). Not reported (the caller will not read it, e.g.
  // an edge_index already validated): an empty tensor and a null pointer, so the forward is
  // the kernel alone; bad edges still score NaN.
  at::Tensor first_bad = report_bad ? new_first_bad(x_src)
                                    : at::empty({0}, x_src.options().dtype(at::kLong));
  if (out.numel() == 0) return {out, first_bad};
  auto* first_bad_ptr =
      report_bad ? reinterpret_cast<unsigned long long*>(first_bad.mutable_data_ptr<int64_t>())
                 : nullptr;

  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_src.scalar_type(), "edge_dot_cuda", [&] {
    AT_DISPATCH_INDEX_TYPES(src_index.scalar_type(), "edge_dot_cuda", [&] {
      constexpr int kVec = 16 / sizeof(scalar_t);
      const bool vectorized = rows_vectorizable(x_src, kVec) && rows_vectorizable(x_dst, kVec) &&
                              (!has_rel || rows_vectorizable(rel, kVec));
      auto launch = [&](auto vec_tag, auto rel_tag) {
        launch_forward<scalar_t, index_t, decltype(vec_tag)::value, decltype(rel_tag)::value>(
            x_src, x_dst, rel, src_index, dst_index, rel_index, out, first_bad_ptr);
      };
      dispatch_choices<std::integral_constant<int, kVec>, std::integral_constant<int, 1>>(
          vectorized, has_rel, launch);
    });
  });
  return {out, first_bad};
}

// ---------------------------------------------------------------------------------------
// Backward (one side): the sort input (the sort and the walk are grad_walk.cuh's)
// ---------------------------------------------------------------------------------------

// Edge e's key (its scatter row, or num_rows when out of range) and payload at position e.
template <typename scalar_t, typename index_t, typename key_t, bool TRIPLE>
__global__ void make_sort_input_kernel(
    const index_t* __restrict__ scatter_index, int64_t scatter_stride, int64_t num_rows,  // [E]
    const index_t* __restrict__ gather_index, int64_t gather_stride, int64_t num_gather,  // [E]
    const index_t* __restrict__ other_index, int64_t other_stride, int64_t num_other,     // [E]
    const scalar_t* __restrict__ grad_out,                                                // [E]
    int64_t num_edges, key_t* __restrict__ keys,                                          // [E]
    EdgePayload<at::opmath_type<scalar_t>, key_t, TRIPLE>* __restrict__ payload) {        // [E]
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < num_edges;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = static_cast<int64_t>(scatter_index[e * scatter_stride]);
    const int64_t g = static_cast<int64_t>(gather_index[e * gather_stride]);
    bool ok = g >= 0 && g < num_gather;
    keys[e] = sort_key<key_t>(row, num_rows);
    payload[e].grad = static_cast<at::opmath_type<scalar_t>>(grad_out[e]);
    if constexpr (TRIPLE) {
      const int64_t o = static_cast<int64_t>(other_index[e * other_stride]);
      ok = ok && o >= 0 && o < num_other;
      payload[e].other = static_cast<key_t>(ok ? o : 0);
    }
    payload[e].gather = static_cast<key_t>(ok ? g : -1);
  }
}

// ---------------------------------------------------------------------------------------
// Backward for small E (no sort; one gradient side per launch, or both of edge_dot's)
// ---------------------------------------------------------------------------------------

// At small E (the seed's W1: 16K edges onto 1K and 768 rows) the sorted path's ~11 launches
// per side (sort input, radix passes, row pointer, walk, long rows) cost more than the work.
// Here one gradient side (edge_dot_grad, edge_dot_rel_grad) or both sides of
// edge_dot_pair_grad take two launches in all, and no sort:
// 1. plan: the edges of each side in the order of a stable sort by row, each edge's weight
//    (grad_out in opmath) and gather (and other) row written at its position, so that the sum
//    reads them in order, with the row pointer and the long rows' pieces. A block of 1024
//    threads owns R <= 128 rows of one side (R sized for about kSmallPlanBlocks blocks over
//    all the sides; blocks [0, B0) plan the first side, the rest the second) and reads every
//    scatter index of its side (at most 2^16, 512 KB, from L2), in three steps:
//    - count and rank: warp w reads a contiguous slice of the edges, 32 (a window) per load,
//      8 windows in flight, and counts the valid edges on rows before the block's. In each
//      window that holds an owned edge (a ballot), the lanes on the same row find each other
//      (__match_any_sync) and the group's first lane adds the group to the row's count in the
//      slice (a shared atomicAdd, whose old value is the group's base); so an edge's rank
//      among its row's edges in the slice is the base + its rank among the group's lanes,
//      kept in a scratch array (slice_rank, by edge id) by the lane, which also notes the
//      window in a 64-bit mask.
//    - scan: per owned row, a warp scans the row's 32 slice counts (lane = slice): the row's
//      edges in the slices before each slice, and its degree; then warp 0 scans the degrees
//      from the edges before: the rows' CSR starts, the row pointer and the pieces.
//    - place: each lane takes its own owned edges (its mask), 4 at a time with their loads
//      (rank, weight, gather and other index) in flight together, and writes each at its
//      row's start + the row's edges in the slices before + its rank. Slices are in edge
//      order, windows in order, lanes in order: increasing edge id within a row.
//    No block waits on another (no zeroed counters, no memset, no grid-wide sync), and the
//    writes spread over the blocks: a single block doing all of it took 22 us at W1 (one
//    SM's index loads, 16K shared atomics, 16K scattered stores).
// 2. sum, a warp per row and one per piece of a long row, of every side (items [0, I0) the
//    first side's): the row's positions are read in order, 32 at a time (lane l loads
//    position l's weight and rows, coalesced), the warp takes them by shuffle,
//    kWalkEdgesInFlight rows in flight through add_edges, and the row is written once.
// The sums are the sorted path's, bit for bit: CUB's radix sort is stable, so that path too
// adds a row's edges in increasing id order from zero with add_edge, and a row of more than
// piece_edges_for(E) edges is summed there in pieces of that many edges (in order), each
// from zero, and the pieces added in order from zero (sum_pieces). Here each piece of such a
// row has its own warp, which stores its partial sum, and the warp that finishes a row's last
// piece (an atomic ticket per row: who adds, not what is added) adds the pieces in order from
// zero; a hub row is thus spread over warps as in the sorted path. So the gradient does not
// depend on which path E and the row count select, nor on whether a side is planned alone or
// with the other, and is the same on every run.
// Edges whose scatter index is out of range are in no row; those with a gather (or other)
// index out of range are ordered with their row but add nothing, as in the sorted path.
constexpr int64_t kSmallMaxEdges = int64_t{1} << 16;
constexpr int64_t kSmallMaxRows = 8192;
constexpr int kSmallPlanThreads = 1024;
constexpr int kSmallPlanWarps = kSmallPlanThreads / kWarp;
// Windows of 32 scatter indices in flight per warp in the plan's count step, and a lane's
// owned edges in flight in its place step (at W1 a lane owns under one on average).
constexpr int kSmallCountBatch = 8;
constexpr int kSmallPlaceBatch = 4;
// Rows per plan block, at most (its slice counts are 128 x 33 int32, 17 KB of shared memory;
// slice_rank keeps a row in 8 bits), and the plan grid aimed at over all sides: every block
// reads all E scatter indices of its side, so more blocks cost L2 traffic (64 x 128 KB at W1)
// and fewer give each block more rows to rank and place.
constexpr int64_t kSmallPlanMaxRows = 128;
constexpr int64_t kSmallPlanBlocks = 64;
constexpr int kSmallThreads = 128;
static_assert(kSmallMaxEdges <= int64_t{64} * kWarp * kSmallPlanWarps,
              "a plan warp's windows fit one 64-bit mask");
static_assert(kSmallPlanWarps == kWarp, "the scan's lanes are the plan block's slices");
static_assert(kSmallPlanMaxRows <= 256 && kSmallMaxEdges / kSmallPlanWarps < (1 << 23),
              "slice_rank holds a block's row in 8 bits and a rank in the slice above them");

// Whether the small-E backward takes this gradient: E and the rows within the plan's bounds,
// and one lane's VEC columns covering a row.
bool small_grad_fits(int64_t num_edges, int64_t num_rows, int64_t feat_dim, int vec) {
  return num_edges <= kSmallMaxEdges && num_rows <= kSmallMaxRows &&
         feat_dim <= int64_t{kWarp} * vec;
}

// The slot of piece q of a long row whose edges start at CSR position `start` (P = piece_edges):
// with k the P-bucket of the piece's first position, 2k for the piece of the row that holds
// position k * P, 2k + 1 for the first piece of a long row that starts inside (kP, (k + 1)P).
// A position is in one row, and a long row that starts inside a bucket ends past it, so
// distinct pieces get distinct slots, fewer than 2 * ceil(E / P): a plan block places its
// rows' pieces knowing only their start positions.
__host__ __device__ __forceinline__ int64_t small_piece_slot(int64_t start, int64_t q,
                                                             int64_t piece_edges) {
  const int64_t bucket = (start + q * piece_edges) / piece_edges;
  return 2 * bucket + (start <= bucket * piece_edges ? 0 : 1);
}

inline int64_t small_max_pieces(int64_t num_edges, int64_t piece_edges) {
  return num_edges > piece_edges ? 2 * ((num_edges + piece_edges - 1) / piece_edges) : 0;
}

// What the plan kernel leaves for the sum kernel. The edge arrays are by CSR position: the
// edges grouped by row, in increasing id order within a row.
template <typename acc_t>
struct SmallGradLists {
  acc_t* weight;       // [E]: the edge's grad_out
  int64_t* gather;     // [E]: its gather row, -1 when one of its indices is out of range
  int64_t* other;      // [E]: its other-factor row (three-factor gradients only)
  int32_t* rowptr;     // [num_rows + 1]: row r's edges are positions [rowptr[r], rowptr[r + 1])
  int32_t* piece_row;  // [max_pieces]: the long row whose piece has this slot (see
  int32_t* piece_q;    // small_piece_slot) and the piece's index in it; slots no piece
                       // has are never written: the sum kernel checks a slot against its row
  int32_t* tickets;    // [max_pieces], at the slot of a row's piece 0: its pieces finished
  int32_t* slice_rank;  // [E] by edge id, the plan's own scratch: an owned edge's row in its
                        // block (8 bits) and its rank among the row's edges in its slice
};

// A side's lists live in one int64 buffer: gather, other (TRIPLE), the weights (one slot
// each), then the int32 arrays (two per slot). small_lists_slots is its length.
inline int64_t small_lists_slots(int64_t num_edges, int64_t num_rows, int64_t max_pieces,
                                 bool triple) {
  return num_edges * (triple ? 3 : 2) + (num_rows + 1 + 3 * max_pieces + num_edges + 1) / 2;
}

template <typename acc_t>
SmallGradLists<acc_t> small_lists_at(int64_t* slots, int64_t num_edges, int64_t num_rows,
                                     int64_t max_pieces, bool triple) {
  static_assert(sizeof(acc_t) <= sizeof(int64_t), "a weight fits one slot");
  SmallGradLists<acc_t> lists;
  lists.gather = slots;
  lists.other = triple ? slots + num_edges : nullptr;
  lists.weight = reinterpret_cast<acc_t*>(slots + num_edges * (triple ? 2 : 1));
  lists.rowptr = reinterpret_cast<int32_t*>(slots + num_edges * (triple ? 3 : 2));
  lists.piece_row = lists.rowptr + num_rows + 1;
  lists.piece_q = lists.piece_row + max_pieces;
  lists.tickets = lists.piece_q + max_pieces;
  lists.slice_rank = lists.tickets + max_pieces;
  return lists;
}

// One gradient side of a small-E launch, out[scatter[e]] += grad_out[e] * (x_other[other[e]]
// *) x_gather[gather[e]], as the kernels read it (the other factor only with TRIPLE).
template <typename scalar_t, typename index_t>
struct SmallSide {
  const index_t* scatter_index;  // [E], strided
  const index_t* gather_index;   // [E], strided
  const index_t* other_index;    // [E], strided
  int64_t scatter_stride, gather_stride, other_stride;
  int64_t num_rows, num_gather, num_other;
  GatherRows<scalar_t> in;
  SmallGradLists<at::opmath_type<scalar_t>> lists;
  at::opmath_type<scalar_t>* partial;  // [max_pieces, D]: the long rows' piece sums
  scalar_t* out;                       // [num_rows, D]
};

__device__ __forceinline__ int warp_inclusive_sum(int v, int lane) {
#pragma unroll
  for (int offset = 1; offset < kWarp; offset *= 2) {
    const int up = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += up;
  }
  return v;
}

// Calls f(j, row, offset, owned) for the lane's edge of each window j of 32 edges in
// [w_begin, w_end), in order (warp-uniformly: every lane, every window), where row is its
// scatter row (-1 past E), offset = row - first_row as unsigned and owned = offset < owned_u.
// The scatter rows of BATCH windows load together.
template <int BATCH, typename scalar_t, typename index_t, typename F>
__device__ __forceinline__ void for_each_window_edge(const SmallSide<scalar_t, index_t>& side,
                                                     int w_begin, int w_end, int64_t num_edges,
                                                     int lane, uint64_t first_u,
                                                     uint64_t owned_u, F&& f) {
  for (int j0 = w_begin; j0 < w_end; j0 += BATCH) {  // warp-uniform
    int64_t row[BATCH];
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
      const int64_t e = static_cast<int64_t>(j0 + b) * kWarp + lane;
      row[b] = j0 + b < w_end && e < num_edges
                   ? static_cast<int64_t>(side.scatter_index[e * side.scatter_stride]) : -1;
    }
#pragma unroll
    for (int b = 0; b < BATCH; ++b) {
      const uint64_t offset = static_cast<uint64_t>(row[b]) - first_u;
      f(j0 + b, row[b], offset, offset < owned_u);
    }
  }
}

// One edge as a lane holds it for the warp's sum: gather -1 when an index is out of range.
template <typename acc_t>
struct SmallEdge {
  acc_t weight;
  int64_t gather, other;
};

// Edge e's weight (grad_out[e] in opmath) and rows as the sum reads them: gather -1 when its
// gather (or other) index is out of range, other 0 then; the edge keeps its place in its row.
template <bool TRIPLE, typename scalar_t, typename index_t>
__device__ __forceinline__ SmallEdge<at::opmath_type<scalar_t>> read_small_edge(
    const SmallSide<scalar_t, index_t>& side, const scalar_t* __restrict__ grad_out,
    int64_t e) {
  SmallEdge<at::opmath_type<scalar_t>> edge{static_cast<at::opmath_type<scalar_t>>(grad_out[e]),
                                            -1, 0};
  const int64_t g = static_cast<int64_t>(side.gather_index[e * side.gather_stride]);
  bool ok = g >= 0 && g < side.num_gather;
  if constexpr (TRIPLE) {
    const int64_t o = static_cast<int64_t>(side.other_index[e * side.other_stride]);
    ok = ok && o >= 0 && o < side.num_other;
    edge.other = ok ? o : 0;
  }
  edge.gather = ok ? g : -1;
  return edge;
}

// A plan block's shared memory.
struct SmallPlanShared {
  // Per owned row and slice (warp): the row's edges in the slice; after the scan, those in
  // the slices before. Row-major with a pad column: the scan's lanes (one row, lane = slice)
  // hit 32 banks.
  int32_t slice_count[kSmallPlanMaxRows][kSmallPlanWarps + 1];
  int32_t row_start[kSmallPlanMaxRows];  // owned rows: degree, then CSR position
  int32_t edges_before;                  // valid edges on rows before the block's
};

// A plan block's work on one side: the rows [first_row, first_row + rows_per_block) (fewer at
// the side's end), the CSR positions of their edges, with each edge's weight and rows written
// at its position, the row pointer of those rows (and of num_rows, by the side's last block)
// and their pieces' slots.
template <typename scalar_t, typename index_t, bool TRIPLE>
__device__ __forceinline__ void plan_small_rows(const SmallSide<scalar_t, index_t>& side,
                                                const scalar_t* __restrict__ grad_out,
                                                int64_t first_row, int64_t num_edges,
                                                int64_t rows_per_block, int64_t piece_edges,
                                                SmallPlanShared& shared) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr unsigned kFull = 0xffffffffu;
  constexpr int kPlace = kSmallPlaceBatch;
  auto& slice_count = shared.slice_count;
  auto& row_start = shared.row_start;
  const SmallGradLists<acc_t>& lists = side.lists;
  const int t = threadIdx.x, warp = t / kWarp, lane = t % kWarp;
  const unsigned lanes_below = (1u << lane) - 1u;
  const int owned_rows = static_cast<int>(
      rows_per_block < side.num_rows - first_row ? rows_per_block : side.num_rows - first_row);
  // Row r is owned when (uint64) (r - first_row) < owned_rows, and before the block's rows
  // when 0 <= r < first_row, i.e. (uint64) r < first_row: a negative r is huge as unsigned.
  const uint64_t first_u = static_cast<uint64_t>(first_row);
  const uint64_t owned_u = static_cast<uint64_t>(owned_rows);
  for (int i = t; i < owned_rows * (kSmallPlanWarps + 1); i += kSmallPlanThreads) {
    slice_count[i / (kSmallPlanWarps + 1)][i % (kSmallPlanWarps + 1)] = 0;
  }
  if (t == 0) shared.edges_before = 0;
  __syncthreads();

  // Warp w's slice: the windows [w_begin, w_end) of 32 edges (at most 64).
  const int windows = static_cast<int>((num_edges + kWarp - 1) / kWarp);
  const int per_warp = (windows + kSmallPlanWarps - 1) / kSmallPlanWarps;
  const int w_begin = min(windows, warp * per_warp);
  const int w_end = min(windows, w_begin + per_warp);
  auto edge_of = [&](int window) { return static_cast<int64_t>(window) * kWarp + lane; };

  // Count and rank: per owned edge, its rank among its row's edges in the slice, kept in
  // lists.slice_rank until the scan has the row's start.
  uint64_t my_windows = 0;  // bit j - w_begin: the lane's edge of window j is owned
  int before = 0;
  for_each_window_edge<kSmallCountBatch>(side, w_begin, w_end, num_edges, lane, first_u,
                                         owned_u,
                                         [&](int j, int64_t row, uint64_t offset, bool owned) {
    before += static_cast<uint64_t>(row) < first_u;
    if (__ballot_sync(kFull, owned) == 0u) return;  // warp-uniform
    const int key = owned ? static_cast<int>(offset) : -1;
    const unsigned peers = __match_any_sync(kFull, key);
    const int leader = __ffs(peers) - 1;
    int base = 0;
    if (owned && lane == leader) base = atomicAdd(&slice_count[key][warp], __popc(peers));
    base = __shfl_sync(kFull, base, leader);
    if (owned) {
      lists.slice_rank[edge_of(j)] = key | (base + __popc(peers & lanes_below)) << 8;
      my_windows |= uint64_t{1} << (j - w_begin);
    }
    __syncwarp();  // this window's adds are in before the next window's
  });
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    before += __shfl_xor_sync(kFull, before, offset);
  }
  if (lane == 0 && before != 0) atomicAdd(&shared.edges_before, before);
  __syncthreads();

  // Scan: per owned row, the edges in the slices before each slice, and the degree.
  for (int r = warp; r < owned_rows; r += kSmallPlanWarps) {  // warp-uniform
    const int count = slice_count[r][lane];
    const int inclusive = warp_inclusive_sum(count, lane);
    slice_count[r][lane] = inclusive - count;
    if (lane == kWarp - 1) row_start[r] = inclusive;
  }
  __syncthreads();
  // Warp 0: the rows' CSR positions (an exclusive scan of the degrees from edges_before), the
  // row pointer and the pieces of the long rows.
  if (warp == 0) {
    int carry = shared.edges_before;
    for (int i0 = 0; i0 < owned_rows; i0 += kWarp) {  // warp-uniform
      const int i = i0 + lane;
      const int degree = i < owned_rows ? row_start[i] : 0;
      const int inclusive = warp_inclusive_sum(degree, lane);
      if (i < owned_rows) {
        const int start = carry + inclusive - degree;
        const int64_t row = first_row + i;
        row_start[i] = start;
        lists.rowptr[row] = start;
        if (degree > piece_edges) {
          const int64_t pieces = (degree + piece_edges - 1) / piece_edges;
          lists.tickets[small_piece_slot(start, 0, piece_edges)] = 0;
          for (int64_t q = 0; q < pieces; ++q) {
            const int64_t slot = small_piece_slot(start, q, piece_edges);
            lists.piece_row[slot] = static_cast<int32_t>(row);
            lists.piece_q[slot] = static_cast<int32_t>(q);
          }
        }
      }
      carry += __shfl_sync(kFull, inclusive, kWarp - 1);
    }
    if (lane == 0 && first_row + owned_rows == side.num_rows) lists.rowptr[side.num_rows] = carry;
  }
  __syncthreads();

  // Place: each lane its own owned edges, kPlace at a time (their loads in flight together),
  // at position row start + the row's edges in the slices before + the rank.
  while (my_windows != 0) {
    int64_t edge[kPlace];
    int32_t rank[kPlace];
    SmallEdge<acc_t> read[kPlace];
#pragma unroll
    for (int b = 0; b < kPlace; ++b) {
      edge[b] = my_windows != 0
                    ? edge_of(w_begin + __ffsll(static_cast<long long>(my_windows)) - 1) : -1;
      my_windows &= my_windows - 1;
      rank[b] = 0;
      read[b] = SmallEdge<acc_t>{acc_t(0), -1, 0};
      if (edge[b] >= 0) {
        rank[b] = lists.slice_rank[edge[b]];
        read[b] = read_small_edge<TRIPLE>(side, grad_out, edge[b]);
      }
    }
#pragma unroll
    for (int b = 0; b < kPlace; ++b) {
      if (edge[b] < 0) break;
      const int key = rank[b] & 0xff;
      const int pos = row_start[key] + slice_count[key][warp] + (rank[b] >> 8);
      lists.weight[pos] = read[b].weight;
      lists.gather[pos] = read[b].gather;
      if constexpr (TRIPLE) lists.other[pos] = read[b].other;
    }
  }
}

// Block b plans rows [b * rows_per_block, ...) of `first`, or of `second` from second_block on.
// (Each side's body is inlined apart, so its fields stay kernel-parameter operands.)
template <typename scalar_t, typename index_t, bool TRIPLE>
__global__ void __launch_bounds__(kSmallPlanThreads) edge_dot_grad_small_plan_kernel(
    const scalar_t* __restrict__ grad_out,  // [E]
    const SmallSide<scalar_t, index_t> first, const SmallSide<scalar_t, index_t> second,
    int64_t second_block, int64_t num_edges, int64_t rows_per_block, int64_t piece_edges) {
  __shared__ SmallPlanShared shared;
  const int64_t block = blockIdx.x;
  if (block < second_block) {
    plan_small_rows<scalar_t, index_t, TRIPLE>(first, grad_out, block * rows_per_block,
                                               num_edges, rows_per_block, piece_edges, shared);
  } else {
    plan_small_rows<scalar_t, index_t, TRIPLE>(second, grad_out,
                                               (block - second_block) * rows_per_block,
                                               num_edges, rows_per_block, piece_edges, shared);
  }
}

// Adds the edges that lanes [0, n) hold (`mine`), in lane order, to acc at columns [k, k + VEC)
// (n warp-uniform): kWalkEdgesInFlight at a time, taken by shuffle, their rows in flight
// together (add_edges), as the sorted path adds them.
template <typename scalar_t, int VEC, bool TRIPLE>
__device__ __forceinline__ void add_lane_edges(at::opmath_type<scalar_t> (&acc)[VEC],
                                               const GatherRows<scalar_t>& in, int64_t k,
                                               bool active,
                                               const SmallEdge<at::opmath_type<scalar_t>>& mine,
                                               int n) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int EPG = kWalkEdgesInFlight<TRIPLE>;
  constexpr unsigned kFull = 0xffffffffu;
#pragma unroll 1
  for (int j0 = 0; j0 < n; j0 += EPG) {
    acc_t weight[EPG];
    int64_t gather[EPG], other[EPG];
    bool use[EPG];
#pragma unroll
    for (int j = 0; j < EPG; ++j) {
      weight[j] = __shfl_sync(kFull, mine.weight, j0 + j);
      gather[j] = __shfl_sync(kFull, mine.gather, j0 + j);
      other[j] = 0;
      if constexpr (TRIPLE) other[j] = __shfl_sync(kFull, mine.other, j0 + j);
      use[j] = active && j0 + j < n && gather[j] >= 0;
    }
    add_edges<EPG, TRIPLE>(acc, in, k, use, weight, gather, other);
  }
}

// acc = the partial sums of the pieces q = 0 .. num_pieces - 1 of the long row starting at
// CSR position `start` (slots by small_piece_slot), added in piece order from zero: the sums
// that sum_pieces makes of contiguous pieces, bit for bit. Loads through L2 (__ldcg): other
// blocks of the same launch stored them.
template <int VEC, typename acc_t>
__device__ __forceinline__ void sum_piece_slots(const acc_t* __restrict__ partial,
                                                int64_t start, int64_t num_pieces,
                                                int64_t piece_edges, int64_t feat_dim,
                                                int64_t k, acc_t (&acc)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc[i] = acc_t(0);
#pragma unroll 4
  for (int64_t q = 0; q < num_pieces; ++q) {
    const int64_t slot = small_piece_slot(start, q, piece_edges);
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[i] += __ldcg(partial + slot * feat_dim + k + i);
  }
}

// A warp's item of one side: items [0, num_rows) are the side's rows (a long row's item
// returns at once), items num_rows + j its piece slots j (a slot that no piece has returns
// at once).
template <typename scalar_t, typename index_t, int VEC, bool TRIPLE>
__device__ __forceinline__ void sum_small_item(const SmallSide<scalar_t, index_t>& side,
                                               int64_t item, int64_t feat_dim,
                                               int64_t piece_edges, int64_t max_pieces) {
  using acc_t = at::opmath_type<scalar_t>;
  using Edge = SmallEdge<acc_t>;
  constexpr unsigned kFull = 0xffffffffu;
  const SmallGradLists<acc_t>& lists = side.lists;
  const int lane = threadIdx.x % kWarp;
  const int64_t num_rows = side.num_rows;
  int64_t row = item, piece = -1, q = 0;
  if (item >= num_rows) {
    piece = item - num_rows;
    if (piece >= max_pieces) return;  // the whole warp
    row = lists.piece_row[piece];
    q = lists.piece_q[piece];
    if (row < 0 || row >= num_rows) return;  // a slot no piece has (checked in full below)
  }
  // Positions and ranks fit 32 bits (E <= 2^16).
  const int begin = lists.rowptr[row];
  const int degree = lists.rowptr[row + 1] - begin;
  const bool long_row = degree > piece_edges;
  if (long_row != (piece >= 0)) return;  // a long row's pieces sum it; a short row is no piece
  int num_pieces = 0, lo = 0, hi = degree;  // ranks [lo, hi) of the row
  if (long_row) {
    num_pieces = static_cast<int>((degree + piece_edges - 1) / piece_edges);
    if (q < 0 || q >= num_pieces || small_piece_slot(begin, q, piece_edges) != piece) return;
    lo = static_cast<int>(q * piece_edges);
    hi = lo + piece_edges < degree ? static_cast<int>(lo + piece_edges) : degree;
  }
  const int64_t k = static_cast<int64_t>(lane) * VEC;
  const bool active = k < feat_dim;
  acc_t acc[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc[i] = acc_t(0);

  // The row's edge of rank `rank` as the plan wrote it (an empty edge past the range).
  auto load_edge = [&](int rank) {
    Edge edge{acc_t(0), -1, 0};
    if (rank < hi) {
      edge.weight = lists.weight[begin + rank];
      edge.gather = lists.gather[begin + rank];
      if constexpr (TRIPLE) edge.other = lists.other[begin + rank];
    }
    return edge;
  };
  // The ranks in windows of 32, in order (a row of at most 32 edges is one window).
#pragma unroll 1
  for (int window = lo; window < hi; window += kWarp) {  // warp-uniform
    add_lane_edges<scalar_t, VEC, TRIPLE>(acc, side.in, k, active, load_edge(window + lane),
                                          min(kWarp, hi - window));
  }

  if (!long_row) {
    if (active) store_vec<VEC>(side.out + row * feat_dim + k, acc);
    return;
  }
  if (active) store_vec<VEC>(side.partial + piece * feat_dim + k, acc);
  __threadfence();  // the partial is visible device-wide before the ticket says it is there
  __syncwarp();
  int ticket = 0;
  if (lane == 0) ticket = atomicAdd(&lists.tickets[small_piece_slot(begin, 0, piece_edges)], 1);
  if (__shfl_sync(kFull, ticket, 0) != num_pieces - 1) return;
  __threadfence();  // the other pieces' partials, read after their tickets
  if (active) {
    sum_piece_slots<VEC>(side.partial, begin, num_pieces, piece_edges, feat_dim, k, acc);
    store_vec<VEC>(side.out + row * feat_dim + k, acc);
  }
}

// A warp per item: items [0, second_item) are `first`'s, the rest `second`'s.
template <typename scalar_t, typename index_t, int VEC, bool TRIPLE>
__global__ void __launch_bounds__(kSmallThreads) edge_dot_grad_small_kernel(
    const SmallSide<scalar_t, index_t> first, const SmallSide<scalar_t, index_t> second,
    int64_t second_item, int64_t feat_dim, int64_t piece_edges, int64_t max_pieces) {
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (item < second_item) {
    sum_small_item<scalar_t, index_t, VEC, TRIPLE>(first, item, feat_dim, piece_edges,
                                                   max_pieces);
  } else {
    sum_small_item<scalar_t, index_t, VEC, TRIPLE>(second, item - second_item, feat_dim,
                                                   piece_edges, max_pieces);
  }
}

// ---------------------------------------------------------------------------------------
// Backward for small E in one launch (both sides of edge_dot_pair_grad, or one side)
// ---------------------------------------------------------------------------------------

// When the edges are few (E <= 2^15) and every side's rows fit one wave of blocks of 16 or 32
// rows, a single launch replaces the plan and the sum: a block owns those rows of one side,
// reads all E scatter indices of that side (from L2), and does in its shared memory what the
// plan does in global memory, then sums its rows itself:
// 1. compact: warp w reads a contiguous slice of the edges, a window of 32 at a time, and
//    keeps the owned edges of each window (a ballot) in edge order at the front of the slice's
//    segment (edge id and owned row), counting each row's edges in the slice;
// 2. scan: per row, the edges in the slices before each slice, and its degree; then per block
//    the rows' starts, and the items of the sum (a row, or a piece of a row longer than
//    piece_edges);
// 3. place: each warp walks its segment (only the owned edges: at W1 one window in 32 of the
//    slice), the lanes on the same row find each other (__match_any_sync), and each edge's id
//    goes to its row's start + the row's edges in the slices before + its rank so far:
//    slices, windows and lanes are in edge order, so each row's ids are in increasing order;
// 4. sum: a warp per item reads the row's ids in order, 32 at a time, loads each edge's weight
//    and gather row, and adds the edges in order from zero (add_edges, as the sum kernel and
//    the sorted path do); a long row's pieces are summed each from zero into shared memory,
//    then added in piece order from zero.
// The same bits as the two-launch path and the sorted path, in one launch and no global
// scratch (W1: 16K edges onto 1,024 and 768 rows, 16 rows per block: 112 blocks).
constexpr int64_t kFusedMaxEdges = int64_t{1} << 15;
constexpr int kFusedThreads = 512;
constexpr int kFusedWarps = kFusedThreads / kWarp;
constexpr int kFusedMaxRows = kWarp;  // the block scan's lanes are its rows
// Windows of 32 scatter indices in flight per warp in the compaction (W1: a warp's 32 windows
// in two round trips). Every block reads all E indices of its side, and the compaction is
// about a third of the kernel at W1; 16 against 8: forward + backward 1-3% faster on the H100
// (benchmarks/NOTES.md), at the same 128 registers without spills. With VEC = 1 ptxas (sm_90)
// gives 16 windows 64 registers and spills, so that path keeps 8.
template <int VEC>
constexpr int kFusedCountBatch = VEC > 1 ? 16 : kSmallCountBatch;
constexpr int kFusedNone = 0xff;
// A long row has more than piece_edges >= 2048 edges and fewer than 2 * degree / piece_edges
// pieces, so a block's pieces number fewer than 2 * 2^15 / 2048.
constexpr int kFusedMaxPieces = static_cast<int>(2 * kFusedMaxEdges / 2048);
static_assert(kFusedWarps <= kWarp, "a row's slice counts are one warp's lanes");

struct FusedShared {
  int32_t slice_count[kFusedMaxRows][kFusedWarps + 1];  // pad column: the scan reads a row
  int32_t segment_end[kFusedWarps];  // the end of warp w's owned edges in the segments
  int32_t degree[kFusedMaxRows];
  int32_t row_start[kFusedMaxRows];   // the row's first position in the block's id list
  int32_t item_start[kFusedMaxRows + 1];  // the row's first item; [kFusedMaxRows]: all items
  int32_t piece_base[kFusedMaxRows];  // a long row's first partial slot
  int32_t any_long;
};

// The dynamic shared memory of a block: the segments (a 16-bit id and a row byte per edge),
// the placed ids (16 bits per edge), and the pieces' partial sums when a row can be long.
__host__ __device__ __forceinline__ int64_t fused_round16(int64_t bytes) {
  return (bytes + 15) / 16 * 16;
}
template <typename acc_t>
inline int64_t fused_dynamic_bytes(int64_t num_edges, int64_t feat_dim, int64_t piece_edges) {
  const int64_t bytes = 2 * fused_round16(num_edges * 2) + fused_round16(num_edges);
  return bytes + (num_edges > piece_edges
                      ? int64_t{kFusedMaxPieces} * feat_dim * static_cast<int64_t>(sizeof(acc_t))
                      : 0);
}

template <typename scalar_t, typename index_t, int VEC, bool TRIPLE>
__device__ __forceinline__ void fused_small_rows(const SmallSide<scalar_t, index_t>& side,
                                                 const scalar_t* __restrict__ grad_out,
                                                 int64_t first_row, int rows_per_block,
                                                 int64_t num_edges, int64_t feat_dim,
                                                 int64_t piece_edges, FusedShared& shared,
                                                 uint16_t* seg_id, uint8_t* seg_row,
                                                 uint16_t* ids,
                                                 at::opmath_type<scalar_t>* partial) {
  using acc_t = at::opmath_type<scalar_t>;
  using Edge = SmallEdge<acc_t>;
  constexpr unsigned kFull = 0xffffffffu;
  const int t = threadIdx.x, warp = t / kWarp, lane = t % kWarp;
  const unsigned lanes_below = (1u << lane) - 1u;
  const int owned_rows = static_cast<int>(rows_per_block < side.num_rows - first_row
                                              ? rows_per_block : side.num_rows - first_row);
  const uint64_t first_u = static_cast<uint64_t>(first_row);
  const uint64_t owned_u = static_cast<uint64_t>(owned_rows);
  for (int i = t; i < kFusedMaxRows * (kFusedWarps + 1); i += kFusedThreads) {
    shared.slice_count[i / (kFusedWarps + 1)][i % (kFusedWarps + 1)] = 0;
  }
  __syncthreads();

  // Warp w's slice: the windows [w_begin, w_end) of 32 edges; its segment starts at the
  // slice's first edge and holds at most the slice's edges.
  const int windows = static_cast<int>((num_edges + kWarp - 1) / kWarp);
  const int per_warp = (windows + kFusedWarps - 1) / kFusedWarps;
  const int w_begin = min(windows, warp * per_warp);
  const int w_end = min(windows, w_begin + per_warp);
  const int segment = w_begin * kWarp;

  // 1. Compact, and count each row's edges in the slice (shared atomics: counts only).
  int kept = 0;  // warp-uniform
  for_each_window_edge<kFusedCountBatch<VEC>>(side, w_begin, w_end, num_edges, lane,
                                              first_u, owned_u,
                                              [&](int j, int64_t, uint64_t offset, bool owned) {
    const unsigned mask = __ballot_sync(kFull, owned);
    if (owned) {
      const int pos = segment + kept + __popc(mask & lanes_below);
      seg_id[pos] = static_cast<uint16_t>(j * kWarp + lane);
      seg_row[pos] = static_cast<uint8_t>(offset);
      atomicAdd(&shared.slice_count[offset][warp], 1);
    }
    kept += __popc(mask);
  });
  if (lane == 0) shared.segment_end[warp] = segment + kept;
  __syncthreads();

  // 2. Scan: per row, the edges in the slices before each slice, and the degree ...
  for (int r = warp; r < owned_rows; r += kFusedWarps) {  // warp-uniform
    const int count = lane < kFusedWarps ? shared.slice_count[r][lane] : 0;
    const int inclusive = warp_inclusive_sum(count, lane);
    if (lane < kFusedWarps) shared.slice_count[r][lane] = inclusive - count;
    if (lane == kWarp - 1) shared.degree[r] = inclusive;
  }
  __syncthreads();
  // ... then the rows' starts, items and pieces (warp 0, lane = row).
  if (warp == 0) {
    const int degree = lane < owned_rows ? shared.degree[lane] : 0;
    const bool long_row = degree > piece_edges;
    const int pieces = long_row ? static_cast<int>((degree + piece_edges - 1) / piece_edges) : 0;
    const int items = lane < owned_rows ? (long_row ? pieces : 1) : 0;
    const int start = warp_inclusive_sum(degree, lane) - degree;
    const int item_end = warp_inclusive_sum(items, lane);
    const int piece_end = warp_inclusive_sum(pieces, lane);
    shared.row_start[lane] = start;
    shared.item_start[lane] = item_end - items;
    shared.piece_base[lane] = piece_end - pieces;
    if (lane == kWarp - 1) {
      shared.item_start[kFusedMaxRows] = item_end;
      shared.any_long = piece_end > 0;
    }
  }
  __syncthreads();

  // 3. Place: each owned edge's id at its row's start + the row's edges in the slices before
  // (slice_count, advanced window by window) + its rank among the window's lanes on its row.
  const int segment_end = shared.segment_end[warp];
  for (int p0 = segment; p0 < segment_end; p0 += kWarp) {  // warp-uniform
    const int p = p0 + lane;
    const int key = p < segment_end ? seg_row[p] : kFusedNone;
    const unsigned peers = __match_any_sync(kFull, key);
    const int leader = __ffs(peers) - 1;
    int base = 0;
    if (key != kFusedNone && lane == leader) {
      base = shared.slice_count[key][warp];
      shared.slice_count[key][warp] = base + __popc(peers);
    }
    base = __shfl_sync(kFull, base, leader);
    if (key != kFusedNone) {
      ids[shared.row_start[key] + base + __popc(peers & lanes_below)] = seg_id[p];
    }
    __syncwarp();  // this window's advances are in before the next window's
  }
  __syncthreads();

  // 4. Sum: a warp per item (a short row, or a piece of a long row).
  const int64_t k = static_cast<int64_t>(lane) * VEC;
  const bool active = k < feat_dim;
  const int num_items = shared.item_start[kFusedMaxRows];
  for (int item = warp; item < num_items; item += kFusedWarps) {  // warp-uniform
    const unsigned started =
        __ballot_sync(kFull, lane < owned_rows && shared.item_start[lane] <= item);
    const int r = kWarp - 1 - __clz(started);  // the last row whose items start at or before
    const int degree = shared.degree[r];
    const bool long_row = degree > piece_edges;
    const int q = item - shared.item_start[r];
    const int lo = long_row ? static_cast<int>(q * piece_edges) : 0;
    const int hi = long_row ? static_cast<int>(min(lo + piece_edges, int64_t{degree})) : degree;
    const uint16_t* row_ids = ids + shared.row_start[r];
    acc_t acc[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[i] = acc_t(0);
#pragma unroll 1
    for (int window = lo; window < hi; window += kWarp) {  // warp-uniform
      Edge mine{acc_t(0), -1, 0};
      if (window + lane < hi) {
        mine = read_small_edge<TRIPLE>(side, grad_out, row_ids[window + lane]);
      }
      add_lane_edges<scalar_t, VEC, TRIPLE>(acc, side.in, k, active, mine,
                                            min(kWarp, hi - window));
    }
    if (!active) continue;
    if (!long_row) {
      store_vec<VEC>(side.out + (first_row + r) * feat_dim + k, acc);
    } else {
      acc_t* slot = partial + (shared.piece_base[r] + q) * feat_dim + k;
#pragma unroll
      for (int i = 0; i < VEC; ++i) slot[i] = acc[i];
    }
  }
  if (!shared.any_long) return;  // block-uniform
  __syncthreads();
  // The long rows: their pieces added in piece order from zero (sum_pieces' order).
  for (int r = warp; r < owned_rows; r += kFusedWarps) {  // warp-uniform
    const int degree = shared.degree[r];
    if (degree <= piece_edges || !active) continue;
    const int pieces = static_cast<int>((degree + piece_edges - 1) / piece_edges);
    const acc_t* first = partial + shared.piece_base[r] * feat_dim + k;
    acc_t acc[VEC];
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[i] = acc_t(0);
    for (int p = 0; p < pieces; ++p) {
#pragma unroll
      for (int i = 0; i < VEC; ++i) acc[i] += first[p * feat_dim + i];
    }
    store_vec<VEC>(side.out + (first_row + r) * feat_dim + k, acc);
  }
}

// Block b owns rows [b * rows_per_block, ...) of `first`, or of `second` from second_block on.
template <typename scalar_t, typename index_t, int VEC, bool TRIPLE>
__global__ void __launch_bounds__(kFusedThreads) edge_dot_grad_small_fused_kernel(
    const scalar_t* __restrict__ grad_out,  // [E]
    const SmallSide<scalar_t, index_t> first, const SmallSide<scalar_t, index_t> second,
    int64_t second_block, int rows_per_block, int64_t num_edges, int64_t feat_dim,
    int64_t piece_edges) {
  using acc_t = at::opmath_type<scalar_t>;
  __shared__ FusedShared shared;
  extern __shared__ __align__(16) unsigned char fused_dynamic[];
  const int64_t id_bytes = fused_round16(num_edges * 2);
  uint16_t* seg_id = reinterpret_cast<uint16_t*>(fused_dynamic);
  uint16_t* ids = reinterpret_cast<uint16_t*>(fused_dynamic + id_bytes);
  uint8_t* seg_row = fused_dynamic + 2 * id_bytes;
  acc_t* partial =
      reinterpret_cast<acc_t*>(fused_dynamic + 2 * id_bytes + fused_round16(num_edges));
  const int64_t block = blockIdx.x;
  const bool second_side = block >= second_block;
  const int64_t first_row = (second_side ? block - second_block : block) * rows_per_block;
  if (!second_side) {
    fused_small_rows<scalar_t, index_t, VEC, TRIPLE>(first, grad_out, first_row,
                                                     rows_per_block, num_edges, feat_dim,
                                                     piece_edges, shared, seg_id, seg_row, ids,
                                                     partial);
  } else {
    fused_small_rows<scalar_t, index_t, VEC, TRIPLE>(second, grad_out, first_row,
                                                     rows_per_block, num_edges, feat_dim,
                                                     piece_edges, shared, seg_id, seg_row, ids,
                                                     partial);
  }
}

// The fused launch's rows per block: 16 (a warp per row) when every side's blocks fit one
// wave, else 32 when they do; 0 when E or the rows are past it (the two-launch path).
inline int fused_rows_per_block(int64_t num_edges, const int64_t* num_rows, int num_sides) {
  if (num_edges > kFusedMaxEdges) return 0;
  for (int rows : {kFusedWarps, kFusedMaxRows}) {
    int64_t blocks = 0;
    for (int i = 0; i < num_sides; ++i) blocks += (num_rows[i] + rows - 1) / rows;
    if (blocks <= num_sms()) return rows;
  }
  return 0;
}

// A gradient side as the host holds it (x_other, other_index undefined without TRIPLE).
template <typename scalar_t>
struct SmallGradSide {
  const at::Tensor& x_gather;
  const at::Tensor& scatter_index;
  const at::Tensor& gather_index;
  const at::Tensor& x_other;
  const at::Tensor& other_index;
  GatherRows<scalar_t> in;
  at::Tensor& out;
};

// The small-E backward of one side, or of two sides that share grad_out (edge_dot_pair_grad's
// x_src and x_dst): one fused launch when E and the rows allow, else one plan launch and one
// sum launch for all of them.
template <typename scalar_t, typename index_t, int VEC, bool TRIPLE>
void launch_small_grads(const at::Tensor& grad_out, const SmallGradSide<scalar_t>* sides,
                        int num_sides, cudaStream_t stream) {
  using acc_t = at::opmath_type<scalar_t>;
  using Side = SmallSide<scalar_t, index_t>;
  using Kernel = void (*)(const scalar_t*, const Side, const Side, int64_t, int, int64_t,
                          int64_t, int64_t);
  const int64_t num_edges = grad_out.size(0), feat_dim = sides[0].out.size(1);
  const int64_t piece_edges = piece_edges_for(num_edges);
  const int64_t max_pieces = small_max_pieces(num_edges, piece_edges);
  // With one side, no block or item is the second side's.
  const int64_t never = std::numeric_limits<int64_t>::max();
  Side side[2];
  int64_t total_rows = 0, rows[2] = {0, 0};
  for (int i = 0; i < num_sides; ++i) {
    const SmallGradSide<scalar_t>& s = sides[i];
    rows[i] = s.out.size(0);
    side[i].scatter_index = s.scatter_index.template const_data_ptr<index_t>();
    side[i].gather_index = s.gather_index.template const_data_ptr<index_t>();
    side[i].other_index = TRIPLE ? s.other_index.template const_data_ptr<index_t>() : nullptr;
    side[i].scatter_stride = s.scatter_index.stride(0);
    side[i].gather_stride = s.gather_index.stride(0);
    side[i].other_stride = TRIPLE ? s.other_index.stride(0) : 0;
    side[i].num_rows = rows[i];
    side[i].num_gather = s.x_gather.size(0);
    side[i].num_other = TRIPLE ? s.x_other.size(0) : 0;
    side[i].in = s.in;
    side[i].partial = nullptr;
    side[i].out = s.out.template mutable_data_ptr<scalar_t>();
    total_rows += rows[i];
  }
  const Side& second = side[num_sides - 1];

  // One fused launch where E and the rows allow and its shared memory fits a block of this
  // device: always on sm_90; by fused_dynamic_bytes at float32, D = 128, up to E ~ 29K on an
  // A100 and ~16K on sm_86 / sm_89. The rest take the two-launch path below.
  const Kernel kernel = edge_dot_grad_small_fused_kernel<scalar_t, index_t, VEC, TRIPLE>;
  const int fused_rows = fused_rows_per_block(num_edges, rows, num_sides);
  const int64_t fused_bytes = fused_dynamic_bytes<acc_t>(num_edges, feat_dim, piece_edges);
  static std::atomic<int64_t> fused_limit[64];
  if (fused_rows != 0 &&
      fused_bytes <= allow_dynamic_shared(
                         reinterpret_cast<const void*>(kernel), grad_out.get_device(),
                         // the most any launch of this instance asks: E = 2^15, a long row,
                         // D = 32 * VEC
                         fused_dynamic_bytes<acc_t>(kFusedMaxEdges, int64_t{kWarp} * VEC,
                                                    piece_edges_for(kFusedMaxEdges)),
                         fused_limit)) {
    const int64_t first_blocks = (rows[0] + fused_rows - 1) / fused_rows;
    const int64_t blocks =
        first_blocks + (num_sides > 1 ? (rows[1] + fused_rows - 1) / fused_rows : 0);
    kernel<<<blocks, kFusedThreads, fused_bytes, stream>>>(
        grad_out.const_data_ptr<scalar_t>(), side[0], second,
        num_sides > 1 ? first_blocks : never, fused_rows, num_edges, feat_dim, piece_edges);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }

  int64_t slots = 0;
  for (int i = 0; i < num_sides; ++i) {
    slots += small_lists_slots(num_edges, sides[i].out.size(0), max_pieces, TRIPLE);
  }
  at::Tensor storage = at::empty({slots}, grad_out.options().dtype(at::kLong));
  at::Tensor partial;
  if (max_pieces > 0) {
    partial = at::empty({num_sides * max_pieces, feat_dim},
                        grad_out.options().dtype(at::toOpMathType(grad_out.scalar_type())));
  }
  const int64_t rows_per_block = std::clamp<int64_t>(
      (total_rows + kSmallPlanBlocks - 1) / kSmallPlanBlocks, 1, kSmallPlanMaxRows);
  int64_t plan_blocks[2] = {0, 0}, items[2] = {0, 0};
  int64_t* next_slot = storage.mutable_data_ptr<int64_t>();
  for (int i = 0; i < num_sides; ++i) {
    const int64_t num_rows = rows[i];
    side[i].lists = small_lists_at<acc_t>(next_slot, num_edges, num_rows, max_pieces, TRIPLE);
    next_slot += small_lists_slots(num_edges, num_rows, max_pieces, TRIPLE);
    side[i].partial =
        partial.defined() ? partial.mutable_data_ptr<acc_t>() + i * max_pieces * feat_dim : nullptr;
    plan_blocks[i] = (num_rows + rows_per_block - 1) / rows_per_block;
    items[i] = num_rows + max_pieces;
  }
  edge_dot_grad_small_plan_kernel<scalar_t, index_t, TRIPLE>
      <<<plan_blocks[0] + plan_blocks[1], kSmallPlanThreads, 0, stream>>>(
          grad_out.const_data_ptr<scalar_t>(), side[0], second,
          num_sides > 1 ? plan_blocks[0] : never, num_edges, rows_per_block, piece_edges);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const int64_t warps_per_block = kSmallThreads / kWarp;
  edge_dot_grad_small_kernel<scalar_t, index_t, VEC, TRIPLE>
      <<<(items[0] + items[1] + warps_per_block - 1) / warps_per_block, kSmallThreads, 0,
         stream>>>(side[0], second, num_sides > 1 ? items[0] : never, feat_dim, piece_edges,
                   max_pieces);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// One side: grad_one_side's small-E path.
template <typename scalar_t, typename index_t, int VEC, bool TRIPLE>
void launch_small_grad(const at::Tensor& grad_out, const at::Tensor& x_gather,
                       const at::Tensor& scatter_index, const at::Tensor& gather_index,
                       const at::Tensor& x_other, const at::Tensor& other_index,
                       const GatherRows<scalar_t>& in, at::Tensor& out, cudaStream_t stream) {
  const SmallGradSide<scalar_t> side{x_gather, scatter_index, gather_index, x_other,
                                     other_index, in, out};
  launch_small_grads<scalar_t, index_t, VEC, TRIPLE>(grad_out, &side, 1, stream);
}

// out[scatter[e]] += grad[e] * (x_other[other[e]] *) x_gather[gather[e]], one call per
// gradient; x_other / other_index only with TRIPLE.
template <typename scalar_t, typename index_t, typename key_t, bool TRIPLE>
void grad_one_side(const at::Tensor& grad_out, const at::Tensor& x_gather,
                   const at::Tensor& scatter_index, const at::Tensor& gather_index,
                   const at::Tensor& x_other, const at::Tensor& other_index, at::Tensor& out) {
  const int64_t num_edges = grad_out.size(0), num_rows = out.size(0);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
  const GatherRows<scalar_t> in{
      x_gather.const_data_ptr<scalar_t>(), x_gather.stride(0),
      TRIPLE ? x_other.const_data_ptr<scalar_t>() : nullptr, TRIPLE ? x_other.stride(0) : 0};
  constexpr int kVec = 16 / sizeof(scalar_t);
  const int width = choose_width<scalar_t, TRIPLE>(x_gather, x_other, out);
  if (small_grad_fits(num_edges, num_rows, out.size(1), width)) {
    if (width == kVec) {
      launch_small_grad<scalar_t, index_t, kVec, TRIPLE>(
          grad_out, x_gather, scatter_index, gather_index, x_other, other_index, in, out, stream);
    } else {
      launch_small_grad<scalar_t, index_t, 1, TRIPLE>(
          grad_out, x_gather, scatter_index, gather_index, x_other, other_index, in, out, stream);
    }
    return;
  }
  using Payload = EdgePayload<at::opmath_type<scalar_t>, key_t, TRIPLE>;
  const auto input = new_sort_input<key_t, Payload>(num_edges, grad_out);
  make_sort_input_kernel<scalar_t, index_t, key_t, TRIPLE>
      <<<grid_for((num_edges + kWarp - 1) / kWarp), kThreads, 0, stream>>>(
          scatter_index.const_data_ptr<index_t>(), scatter_index.stride(0), num_rows,
          gather_index.const_data_ptr<index_t>(), gather_index.stride(0), x_gather.size(0),
          TRIPLE ? other_index.const_data_ptr<index_t>() : nullptr,
          TRIPLE ? other_index.stride(0) : 0, TRIPLE ? x_other.size(0) : 0,
          grad_out.const_data_ptr<scalar_t>(), num_edges, input.keys, input.payload);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  sort_and_walk<scalar_t, TRIPLE>(input, in, width, out, stream);
}

// The gradients of edge_dot and edge_dot_rel (x_other, other_index undefined for edge_dot's).
at::Tensor edge_dot_grad_cuda(const at::Tensor& grad_out_in, const at::Tensor& x_gather_in,
                              const at::Tensor& scatter_index, const at::Tensor& gather_index,
                              const at::Tensor& x_other_in, const at::Tensor& other_index,
                              int64_t num_rows) {
  const c10::cuda::OptionalCUDAGuard guard(x_gather_in.device());
  const at::Tensor x_gather = unit_column_stride(x_gather_in);
  const bool triple = x_other_in.defined();
  const at::Tensor x_other = triple ? unit_column_stride(x_other_in) : x_other_in;
  const at::Tensor grad_out = grad_out_in.contiguous();
  const int64_t num_edges = grad_out.size(0);
  if (num_edges == 0 || num_rows == 0 || x_gather.size(1) == 0) {
    return at::zeros({num_rows, x_gather.size(1)}, x_gather.options());
  }
  at::Tensor out = at::empty({num_rows, x_gather.size(1)}, x_gather.options());
  // 32-bit keys, edge ids and gather indices where every value fits.
  const bool small_keys =
      keys_fit_int32(num_rows, num_edges, x_gather.size(0), triple ? x_other.size(0) : 0);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_gather.scalar_type(), "edge_dot_grad_cuda", [&] {
    AT_DISPATCH_INDEX_TYPES(scatter_index.scalar_type(), "edge_dot_grad_cuda", [&] {
      auto run = [&](auto key_tag, auto triple_tag) {
        using key_t = typename decltype(key_tag)::type;
        grad_one_side<scalar_t, index_t, key_t, decltype(triple_tag)::value>(
            grad_out, x_gather, scatter_index, gather_index, x_other, other_index, out);
      };
      dispatch_choices<TypeTag<int32_t>, TypeTag<int64_t>>(small_keys, triple, run);
    });
  });
  return out;
}

// Both gradients of edge_dot. When both sides take the small-E path at one vector width, one
// plan and one sum launch serve the two (launch_small_grads); otherwise each side is
// edge_dot_grad_cuda's. The same bits either way.
std::tuple<at::Tensor, at::Tensor> edge_dot_pair_grad_cuda(const at::Tensor& grad_out_in,
                                                           const at::Tensor& x_src_in,
                                                           const at::Tensor& x_dst_in,
                                                           const at::Tensor& src_index,
                                                           const at::Tensor& dst_index) {
  const c10::cuda::OptionalCUDAGuard guard(x_src_in.device());
  const at::Tensor x_src = unit_column_stride(x_src_in);
  const at::Tensor x_dst = unit_column_stride(x_dst_in);
  const at::Tensor grad_out = grad_out_in.contiguous();
  const int64_t num_edges = grad_out.size(0), feat_dim = x_src.size(1);
  const int64_t num_src = x_src.size(0), num_dst = x_dst.size(0);
  const at::Tensor none;
  auto by_sides = [&] {
    return std::make_tuple(
        edge_dot_grad_cuda(grad_out, x_dst, src_index, dst_index, none, none, num_src),
        edge_dot_grad_cuda(grad_out, x_src, dst_index, src_index, none, none, num_dst));
  };
  const int widest = 16 / static_cast<int>(x_src.element_size());
  if (num_edges == 0 || num_src == 0 || num_dst == 0 || feat_dim == 0 ||
      !small_grad_fits(num_edges, std::max(num_src, num_dst), feat_dim, widest)) {
    return by_sides();
  }
  at::Tensor grad_src = at::empty({num_src, feat_dim}, x_src.options());
  at::Tensor grad_dst = at::empty({num_dst, feat_dim}, x_dst.options());
  bool together = false;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x_src.scalar_type(), "edge_dot_pair_grad_cuda", [&] {
    AT_DISPATCH_INDEX_TYPES(src_index.scalar_type(), "edge_dot_pair_grad_cuda", [&] {
      const int width = choose_width<scalar_t, false>(x_dst, none, grad_src);
      if (width != choose_width<scalar_t, false>(x_src, none, grad_dst) ||
          !small_grad_fits(num_edges, std::max(num_src, num_dst), feat_dim, width)) {
        return;
      }
      const SmallGradSide<scalar_t> sides[2] = {
          {x_dst, src_index, dst_index, none, none,
           GatherRows<scalar_t>{x_dst.const_data_ptr<scalar_t>(), x_dst.stride(0), nullptr, 0},
           grad_src},
          {x_src, dst_index, src_index, none, none,
           GatherRows<scalar_t>{x_src.const_data_ptr<scalar_t>(), x_src.stride(0), nullptr, 0},
           grad_dst}};
      const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
      constexpr int kVec = 16 / sizeof(scalar_t);
      if (width == kVec) {
        launch_small_grads<scalar_t, index_t, kVec, false>(grad_out, sides, 2, stream);
      } else {
        launch_small_grads<scalar_t, index_t, 1, false>(grad_out, sides, 2, stream);
      }
      together = true;
    });
  });
  return together ? std::make_tuple(grad_src, grad_dst) : by_sides();
}

}  // namespace

TORCH_LIBRARY_IMPL(pyg_edgedot, CUDA, m) {
  impl_edge_dot_ops<&edge_dot_cuda, &edge_dot_grad_cuda, &edge_dot_pair_grad_cuda>(m);
}

}  // namespace pyg_edgedot
