// The sorted backward of edge_dot's gradients (out[scatter[e]] += grad[e] * x_gather[gather[e]],
// one side per call), from its sort input on: edge_dot_kernel.cu fills that input from the
// index tensors, edge_dot_loss_kernel.cu from its pair generator (so the loss's pairs are never
// materialized). A fill kernel writes, for edge e at position e, the key (the output row,
// sort_key) and the payload (gather row, -1 when an index is out of range, and the upstream
// gradient in opmath); sort_and_walk then radix-sorts by key (CUB, stable, only the bits the
// row count needs), builds the CSR row pointer, and one group per stretch of consecutive rows
// walks their sorted edges, writing each row once; rows longer than piece_edges are summed in
// pieces, each from zero, and the pieces added in order. No atomics: every row is summed in
// its edges' fill order from zero, so the result is bitwise deterministic and depends only on
// the filled input and E (the piece length).
#pragma once

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <c10/cuda/CUDAException.h>

#include <cub/cub.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "vec.cuh"

namespace pyg_edgedot {
namespace cuda {

// What travels with each edge through the sort: its gather row (-1 if any of its indices is
// out of range), its upstream gradient and, for the three-factor gradients of edge_dot_rel,
// the row of the other factor; so the walking and piece kernels read it in sorted order, coalesced.
template <typename acc_t, typename key_t, bool TRIPLE>
struct EdgePayload {
  acc_t grad;
  key_t gather;
};

template <typename acc_t, typename key_t>
struct EdgePayload<acc_t, key_t, true> {
  acc_t grad;
  key_t gather;
  key_t other;
};

// An edge's sort key: its output row, or num_rows for a row out of range (sorted last, never
// read).
template <typename key_t>
__device__ __forceinline__ key_t sort_key(int64_t row, int64_t num_rows) {
  return static_cast<key_t>((row >= 0 && row < num_rows) ? row : num_rows);
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

// The summing kernels split the grid into groups of group_size lanes (a power of two <= 32):
// this thread's group, the number of groups, and its lane in the group.
struct GroupOfThread {
  int64_t group, num_groups;
  int lane;
};

__device__ __forceinline__ GroupOfThread group_of_thread(int group_size) {
  const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  return {thread / group_size, static_cast<int64_t>(gridDim.x) * blockDim.x / group_size,
          static_cast<int>(threadIdx.x % group_size)};
}

// Where the walking and piece kernels read their inputs.
template <typename scalar_t>
struct GatherRows {
  const scalar_t* __restrict__ x_gather;  // [N_gather, D]
  int64_t gather_stride;
  const scalar_t* __restrict__ x_other;   // [N_other, D] (three-factor gradients only)
  int64_t other_stride;
};

// A group lane's share (VEC columns from k) of sum over sorted edges [begin, end) of
// grad * (x_other[other] *) x_gather[gather]. EPG edges' rows in flight per lane; every lane
// of the group reads the same payloads (one broadcast). Edges are added in sorted order, one
// at a time: the same sum on every run.
constexpr int kGradEdgesInFlight = 8;

// acc += weight * (other *) vals, element by element: one edge's term of a gradient row.
template <bool TRIPLE, typename acc_t, typename scalar_t, int VEC>
__device__ __forceinline__ void add_edge(acc_t (&acc)[VEC], acc_t weight,
                                         const Packed<scalar_t, VEC>& vals,
                                         const Packed<scalar_t, VEC>& other) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) {
    if constexpr (TRIPLE) {
      acc[i] += weight * other.get(i) * vals.get(i);
    } else {
      acc[i] += weight * vals.get(i);
    }
  }
}

// Adds EPG edges' terms to acc, in order: edge j, where use[j], is weight[j] *
// (x_other[other[j]] *) x_gather[gather[j]] at columns [k, k + VEC). Their rows load first,
// all in flight together.
template <int EPG, bool TRIPLE, typename scalar_t, int VEC>
__device__ __forceinline__ void add_edges(at::opmath_type<scalar_t> (&acc)[VEC],
                                          const GatherRows<scalar_t>& in, int64_t k,
                                          const bool (&use)[EPG],
                                          const at::opmath_type<scalar_t> (&weight)[EPG],
                                          const int64_t (&gather)[EPG],
                                          const int64_t (&other)[EPG]) {
  Packed<scalar_t, VEC> vals[EPG], other_vals[TRIPLE ? EPG : 1];
#pragma unroll
  for (int j = 0; j < EPG; ++j) {
    if (use[j]) {
      vals[j].load(in.x_gather + gather[j] * in.gather_stride + k);
      if constexpr (TRIPLE) other_vals[j].load(in.x_other + other[j] * in.other_stride + k);
    }
  }
#pragma unroll
  for (int j = 0; j < EPG; ++j) {
    if (use[j]) add_edge<TRIPLE>(acc, weight[j], vals[j], other_vals[TRIPLE ? j : 0]);
  }
}

template <typename scalar_t, typename Payload, int VEC, bool TRIPLE>
__device__ __forceinline__ void sum_sorted_edges(const Payload* __restrict__ payload,
                                                 int64_t begin, int64_t end,
                                                 const GatherRows<scalar_t>& in, int64_t k,
                                                 at::opmath_type<scalar_t> (&acc)[VEC]) {
  using acc_t = at::opmath_type<scalar_t>;
  constexpr int EPG = kGradEdgesInFlight;
  for (int64_t pos = begin; pos < end; pos += EPG) {
    acc_t weight[EPG];
    int64_t gather[EPG], other[EPG];
    bool use[EPG];
#pragma unroll
    for (int j = 0; j < EPG; ++j) {
      const auto edge = pos + j < end ? payload[pos + j] : Payload{};
      use[j] = pos + j < end && edge.gather >= 0;
      weight[j] = use[j] ? edge.grad : acc_t(0);
      gather[j] = static_cast<int64_t>(edge.gather);
      other[j] = 0;
      if constexpr (TRIPLE) other[j] = static_cast<int64_t>(edge.other);
    }
    add_edges<EPG, TRIPLE>(acc, in, k, use, weight, gather, other);
  }
}

// The rows [row, row_end), whose edges are the sorted positions [pos, pos_end), at columns
// [k, k + VEC): the group walks those edges across row boundaries (so a row of 10 edges does
// not wait on a half-empty second round), G edges per window: lane l loads the payload and
// key of the window's edge l (one coalesced load, the next window's in flight while this
// one's rows load) and the group takes them by shuffle, EPG edges' rows in flight at a time.
// A row is written when the walk passes its last edge (zeros for a row with no edge). Each
// row's edges are added in sorted order from zero: the sums sum_sorted_edges makes row by
// row, bit for bit. Every branch is uniform over the group, so its lanes meet at each shuffle.
template <typename scalar_t, typename Payload, typename key_t, int VEC, bool TRIPLE, int EPG>
__device__ __forceinline__ void walk_rows(const Payload* __restrict__ payload,
                                          const key_t* __restrict__ keys,
                                          const GatherRows<scalar_t>& in,
                                          scalar_t* __restrict__ out, int64_t row,
                                          int64_t row_end, int64_t pos, int64_t pos_end,
                                          int64_t k, int64_t feat_dim, bool active, int lane,
                                          int group_size, unsigned group_mask) {
  using acc_t = at::opmath_type<scalar_t>;
  acc_t acc[VEC];
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc[i] = acc_t(0);
  // Writes the row being summed, then zeros to each row before `until`, leaving acc at zero
  // for row `until`.
  auto write_rows_before = [&](int64_t until) {
#pragma unroll 1
    for (; row < until; ++row) {
      if (active) store_vec<VEC>(out + row * feat_dim + k, acc);
#pragma unroll
      for (int i = 0; i < VEC; ++i) acc[i] = acc_t(0);
    }
  };
  Payload next{};
  key_t next_key = 0;
  if (pos + lane < pos_end) {
    next = payload[pos + lane];
    next_key = keys[pos + lane];
  }
#pragma unroll 1
  for (int64_t window = pos; window < pos_end; window += group_size) {
    const Payload mine = next;
    const key_t my_key = next_key;
    if (window + group_size + lane < pos_end) {
      next = payload[window + group_size + lane];
      next_key = keys[window + group_size + lane];
    }
    const int64_t window_edges = pos_end - window;
#pragma unroll 1
    for (int step = 0; step < group_size && step < window_edges; step += EPG) {
      acc_t weight[EPG];
      key_t key[EPG];
      bool load[EPG];
      Packed<scalar_t, VEC> vals[EPG], other_vals[TRIPLE ? EPG : 1];
#pragma unroll
      for (int j = 0; j < EPG; ++j) {
        const int from = (step + j) % group_size;
        const auto gather = __shfl_sync(group_mask, mine.gather, from, group_size);
        weight[j] = __shfl_sync(group_mask, mine.grad, from, group_size);
        key[j] = __shfl_sync(group_mask, my_key, from, group_size);
        load[j] = active && step + j < group_size && step + j < window_edges && gather >= 0;
        if constexpr (TRIPLE) {
          const auto other = __shfl_sync(group_mask, mine.other, from, group_size);
          if (load[j]) {
            other_vals[j].load(in.x_other + static_cast<int64_t>(other) * in.other_stride + k);
          }
        }
        if (load[j]) vals[j].load(in.x_gather + static_cast<int64_t>(gather) * in.gather_stride + k);
      }
#pragma unroll
      for (int j = 0; j < EPG; ++j) {
        if (step + j < group_size && step + j < window_edges) {
          write_rows_before(static_cast<int64_t>(key[j]));
          if (load[j]) add_edge<TRIPLE>(acc, weight[j], vals[j], other_vals[TRIPLE ? j : 0]);
        }
      }
    }
  }
  write_rows_before(row_end);
}

// Edges whose rows are in flight per step of the walk, and blocks per SM the register budget
// is set for (2: at most 128 registers). Measured on the H200 (benchmarks/NOTES.md): 8
// edges for two-factor gradients (W3 forward + backward 19.4 ms against 21.0-22.0 with 4
// edges or 3 blocks), 4 for three-factor ones (DistMult 36.1 ms against 40.1 with 8).
template <bool TRIPLE>
constexpr int kWalkEdgesInFlight = TRIPLE ? 4 : 8;
constexpr int kWalkMinBlocks = 2;

template <typename scalar_t, typename Payload, typename key_t, int VEC, bool TRIPLE, int EPG>
__global__ void __launch_bounds__(kThreads, kWalkMinBlocks) edge_dot_grad_walk_kernel(
    const Payload* __restrict__ payload,     // [E] sorted
    const key_t* __restrict__ keys,          // [E] sorted
    const GatherRows<scalar_t> in,
    const key_t* __restrict__ rowptr,        // [num_rows + 1]
    scalar_t* __restrict__ out,              // [num_rows, D]
    int64_t num_rows, int64_t feat_dim, int group_size, int64_t piece_edges,
    int64_t stretch_rows) {
  const auto [group, num_groups, lane] = group_of_thread(group_size);
  const int64_t num_stretches = (num_rows + stretch_rows - 1) / stretch_rows;
  const unsigned group_mask =
      group_size == kWarp ? 0xffffffffu
                          : ((1u << group_size) - 1u) << (threadIdx.x % kWarp - lane);

  for (int64_t stretch = group; stretch < num_stretches; stretch += num_groups) {
    const int64_t first = stretch * stretch_rows;
    const int64_t last = first + stretch_rows < num_rows ? first + stretch_rows : num_rows;
    const bool whole = rowptr[last] - rowptr[first] <= piece_edges;
    // Every lane of the group takes every column step (a lane past the last column only
    // shuffles), so the group stays together for the walk's shuffles.
    for (int64_t k0 = 0; k0 < feat_dim; k0 += static_cast<int64_t>(group_size) * VEC) {
      const int64_t k = k0 + static_cast<int64_t>(lane) * VEC;
      const bool active = k < feat_dim;
      // The whole stretch in one walk, or row by row, skipping the long rows.
      for (int64_t row = first; row < last;) {
        const int64_t row_end = whole ? last : row + 1;
        const int64_t begin = static_cast<int64_t>(rowptr[row]);
        const int64_t end = static_cast<int64_t>(rowptr[row_end]);
        if (whole || end - begin <= piece_edges) {
          walk_rows<scalar_t, Payload, key_t, VEC, TRIPLE, EPG>(payload, keys, in, out, row,
                                                                row_end, begin, end, k,
                                                                feat_dim, active, lane,
                                                                group_size, group_mask);
        }
        row = row_end;
      }
    }
  }
}

// Long rows are cut into pieces of piece_edges edges. pieces[r] = the number of pieces of
// row r (0 for a row the walking kernel writes); an inclusive scan turns it into piece_end.
template <typename key_t>
__global__ void count_pieces_kernel(const key_t* __restrict__ rowptr, int64_t num_rows,
                                    int64_t piece_edges, int64_t* __restrict__ pieces) {
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < num_rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t degree = static_cast<int64_t>(rowptr[r + 1]) - static_cast<int64_t>(rowptr[r]);
    pieces[r] = degree > piece_edges ? (degree + piece_edges - 1) / piece_edges : 0;
  }
}

// One group per piece: the piece's partial sum, in opmath, to partial[piece].
template <typename scalar_t, typename Payload, typename key_t, int VEC, bool TRIPLE>
__global__ void __launch_bounds__(kThreads) edge_dot_grad_pieces_kernel(
    const Payload* __restrict__ payload, const GatherRows<scalar_t> in,
    const key_t* __restrict__ rowptr,          // [num_rows + 1]
    const int64_t* __restrict__ piece_end,     // [num_rows], inclusive scan of pieces
    at::opmath_type<scalar_t>* __restrict__ partial,  // [max_pieces, D]
    int64_t num_rows, int64_t max_pieces, int64_t feat_dim, int group_size,
    int64_t piece_edges) {
  using acc_t = at::opmath_type<scalar_t>;
  const auto [group, num_groups, lane] = group_of_thread(group_size);
  const int64_t total = piece_end[num_rows - 1] < max_pieces ? piece_end[num_rows - 1] : max_pieces;

  for (int64_t piece = group; piece < total; piece += num_groups) {
    int64_t lo = 0, hi = num_rows - 1;  // the row: the first r with piece_end[r] > piece
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (piece_end[mid] > piece) hi = mid; else lo = mid + 1;
    }
    const int64_t first_piece = lo == 0 ? 0 : piece_end[lo - 1];
    const int64_t begin = static_cast<int64_t>(rowptr[lo]) + (piece - first_piece) * piece_edges;
    const int64_t row_end = static_cast<int64_t>(rowptr[lo + 1]);
    const int64_t end = begin + piece_edges < row_end ? begin + piece_edges : row_end;
    for (int64_t k = static_cast<int64_t>(lane) * VEC; k < feat_dim;
         k += static_cast<int64_t>(group_size) * VEC) {
      acc_t acc[VEC];
#pragma unroll
      for (int i = 0; i < VEC; ++i) acc[i] = acc_t(0);
      sum_sorted_edges<scalar_t, Payload, VEC, TRIPLE>(payload, begin, end, in, k, acc);
      store_vec<VEC>(partial + piece * feat_dim + k, acc);
    }
  }
}

// acc = the partial sums of pieces [first, last) at columns [k, k + VEC), added in piece order
// from zero: a long row's gradient, as the finishing kernel writes it (the small-E kernel's
// sum_piece_slots adds its pieces the same way). The loads go through L2 (__ldcg).
template <int VEC, typename acc_t>
__device__ __forceinline__ void sum_pieces(const acc_t* __restrict__ partial, int64_t first,
                                           int64_t last, int64_t feat_dim, int64_t k,
                                           acc_t (&acc)[VEC]) {
#pragma unroll
  for (int i = 0; i < VEC; ++i) acc[i] = acc_t(0);
#pragma unroll 4
  for (int64_t p = first; p < last; ++p) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) acc[i] += __ldcg(partial + p * feat_dim + k + i);
  }
}

// The long rows' gradients: a warp reads the degrees of 32 consecutive rows at once (most
// rows are short and end there), then sums each long row among them, its lanes over the
// columns: the row's pieces' partial sums added in piece order from zero (sum_pieces), written
// once. Which lane takes a column does not change its sum.
template <typename scalar_t, typename key_t, int VEC>
__global__ void __launch_bounds__(kThreads) edge_dot_grad_finish_kernel(
    const at::opmath_type<scalar_t>* __restrict__ partial,  // [max_pieces, D]
    const key_t* __restrict__ rowptr, const int64_t* __restrict__ piece_end,
    scalar_t* __restrict__ out, int64_t num_rows, int64_t feat_dim, int64_t piece_edges) {
  using acc_t = at::opmath_type<scalar_t>;
  const auto [warp, num_warps, lane] = group_of_thread(kWarp);
  for (int64_t first_row = warp * kWarp; first_row < num_rows; first_row += num_warps * kWarp) {
    const int64_t mine = first_row + lane;
    const bool long_row =
        mine < num_rows &&
        static_cast<int64_t>(rowptr[mine + 1]) - static_cast<int64_t>(rowptr[mine]) > piece_edges;
    for (unsigned rows = __ballot_sync(0xffffffffu, long_row); rows != 0; rows &= rows - 1) {
      const int64_t row = first_row + __ffs(rows) - 1;
      const int64_t first = row == 0 ? 0 : piece_end[row - 1], last = piece_end[row];
      for (int64_t k = static_cast<int64_t>(lane) * VEC; k < feat_dim;
           k += static_cast<int64_t>(kWarp) * VEC) {
        acc_t acc[VEC];
        sum_pieces<VEC>(partial, first, last, feat_dim, k, acc);
        store_vec<VEC>(out + row * feat_dim + k, acc);
      }
    }
  }
}


inline int sort_end_bit(int64_t max_key) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) <= max_key) ++bits;
  return bits;
}

// Edges per piece of a long row: a function of E only, so the summation order (and so the
// result) is the same on every run. sqrt(E) balances a piece's serial walk against the
// finishing walk over a row's pieces when one row holds every edge.
inline int64_t piece_edges_for(int64_t num_edges) {
  int64_t root = static_cast<int64_t>(std::sqrt(static_cast<double>(num_edges)));
  return std::max<int64_t>(2048, root);
}

// An upper bound on the pieces of all long rows (0: no row can be long). Each long row has
// more than piece_edges edges and ceil(degree / piece_edges) < 2 * degree / piece_edges
// pieces, so there are fewer than 2 * E / piece_edges in all.
inline int64_t max_pieces_for(int64_t num_edges, int64_t piece_edges) {
  return num_edges > piece_edges ? 2 * num_edges / piece_edges + 1 : 0;
}

// Keys are the output rows: 32-bit (int) or 64-bit (long) tensors on the device of `like`.
template <typename key_t>
at::TensorOptions key_options(const at::Tensor& like) {
  return like.options().dtype(sizeof(key_t) == 4 ? at::kInt : at::kLong);
}

// Whether 32-bit keys serve: every key (a row, or num_rows), every CSR position (up to E) and
// every gather (and other) row fits int32.
inline bool keys_fit_int32(int64_t num_rows, int64_t num_edges, int64_t num_gather,
                           int64_t num_other) {
  const int64_t int32_max = std::numeric_limits<int32_t>::max();
  return num_rows < int32_max && num_edges <= int32_max && num_gather <= int32_max &&
         num_other <= int32_max;
}

// The sort's input: [2, E] keys and payloads, both halves of CUB's double buffers. A fill
// kernel writes edge e's key (sort_key) and payload at position e of the first halves (keys,
// payload): CUB's radix sort is stable, so each row's edges stay in that order.
template <typename key_t, typename Payload>
struct SortInput {
  at::Tensor key_storage, payload_storage;
  key_t* keys;       // [E]
  Payload* payload;  // [E]
  int64_t num_edges;
};

template <typename key_t, typename Payload>
SortInput<key_t, Payload> new_sort_input(int64_t num_edges, const at::Tensor& like) {
  at::Tensor keys = at::empty({2, num_edges}, key_options<key_t>(like));
  at::Tensor payload = at::empty({2 * num_edges * static_cast<int64_t>(sizeof(Payload))},
                                 like.options().dtype(at::kByte));
  key_t* keys_ptr = keys.mutable_data_ptr<key_t>();
  auto* payload_ptr = reinterpret_cast<Payload*>(payload.mutable_data_ptr());
  return SortInput<key_t, Payload>{keys, payload, keys_ptr, payload_ptr, num_edges};
}

// The edges sorted by output row: keys[i] is the row of sorted edge i (num_rows for an index
// out of range, sorted last and never read), payload[i] what the summing kernels read of it.
// The storage is the input's; keys and payload point into the half that holds the result.
template <typename key_t, typename Payload>
struct SortedEdges {
  at::Tensor key_storage, payload_storage;
  const key_t* keys;        // [E]
  const Payload* payload;   // [E]
};

// Radix-sorts the filled input by key, on only the bits that num_rows needs. CUB's double
// buffers avoid a second pair of copies.
template <typename key_t, typename Payload>
SortedEdges<key_t, Payload> sort_by_row(const SortInput<key_t, Payload>& input,
                                        int64_t num_rows, cudaStream_t stream) {
  const int64_t num_edges = input.num_edges;
  cub::DoubleBuffer<key_t> key_buf(input.keys, input.keys + num_edges);
  cub::DoubleBuffer<Payload> payload_buf(input.payload, input.payload + num_edges);
  const int end_bit = sort_end_bit(num_rows);
  size_t temp_bytes = 0;
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, key_buf, payload_buf,
                                                 num_edges, 0, end_bit, stream));
  at::Tensor temp = at::empty({static_cast<int64_t>(temp_bytes)},
                              input.key_storage.options().dtype(at::kByte));
  C10_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.mutable_data_ptr(), temp_bytes, key_buf,
                                                 payload_buf, num_edges, 0, end_bit, stream));
  return SortedEdges<key_t, Payload>{input.key_storage, input.payload_storage, key_buf.Current(),
                                     payload_buf.Current()};
}

// The CSR row pointer [num_rows + 1] of the sorted keys.
template <typename key_t>
at::Tensor build_rowptr(const key_t* sorted_keys, int64_t num_edges, int64_t num_rows,
                        const at::TensorOptions& key_opts, cudaStream_t stream) {
  at::Tensor rowptr = at::empty({num_rows + 1}, key_opts);
  rowptr_from_sorted_kernel<key_t><<<grid_for((num_edges + kWarp) / kWarp), kThreads, 0, stream>>>(
      sorted_keys, num_edges, num_rows, rowptr.mutable_data_ptr<key_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return rowptr;
}

// The vector width of the summing kernels: 16-byte vectors when every row they read and the
// output start on 16-byte boundaries, else scalars.
template <typename scalar_t, bool TRIPLE>
int choose_width(const at::Tensor& x_gather, const at::Tensor& x_other, const at::Tensor& out) {
  constexpr int kVec = 16 / sizeof(scalar_t);
  const bool vectorized = rows_vectorizable(x_gather, kVec) && aligned16(out.const_data_ptr()) &&
                          (!TRIPLE || rows_vectorizable(x_other, kVec));
  return vectorized ? kVec : 1;
}

// The work sizes of the summing kernels.
struct GradPlan {
  int group;              // lanes per group
  int64_t rows_per_warp;  // groups per warp
  int64_t piece_edges;    // edges per piece of a long row
  int64_t max_pieces;     // an upper bound on the pieces of all long rows (0: no row is long)
  int64_t stretch_rows;   // rows per stretch of the walking kernel
  int64_t walk_grid;      // blocks of the walking kernel
};

inline GradPlan plan_grad(int64_t num_edges, int64_t num_rows, int64_t feat_dim, int vec) {
  GradPlan plan;
  plan.group = group_size_for(feat_dim, vec);
  plan.rows_per_warp = kWarp / plan.group;
  plan.piece_edges = piece_edges_for(num_edges);
  plan.max_pieces = max_pieces_for(num_edges, plan.piece_edges);
  // Rows per stretch of the walking kernel: about 256 edges at the mean degree, fewer when
  // that would leave resident groups idle (a stretch's walk is serial: at E = 16K, 256-edge
  // stretches made the walk 55 us of latency). Each row is summed alone, in sorted order, so
  // the stretch length never changes the result.
  const int64_t mean_degree = std::max<int64_t>(1, num_edges / num_rows);
  const int64_t resident_groups =
      num_sms() * (kThreads / kWarp) * kWalkMinBlocks * plan.rows_per_warp;
  const int64_t stretch_edges = std::clamp<int64_t>(num_edges / resident_groups, 1, 256);
  plan.stretch_rows = std::clamp<int64_t>(stretch_edges / mean_degree, 1, 256);
  const int64_t num_stretches = (num_rows + plan.stretch_rows - 1) / plan.stretch_rows;
  plan.walk_grid = grid_for((num_stretches + plan.rows_per_warp - 1) / plan.rows_per_warp);
  return plan;
}

// Every row of at most piece_edges edges, summed and written by the walking kernel.
template <typename scalar_t, int VEC, bool TRIPLE, typename key_t, typename Payload>
void launch_walk(const SortedEdges<key_t, Payload>& sorted, const GatherRows<scalar_t>& in,
                 const at::Tensor& rowptr, at::Tensor& out, const GradPlan& plan,
                 cudaStream_t stream) {
  edge_dot_grad_walk_kernel<scalar_t, Payload, key_t, VEC, TRIPLE, kWalkEdgesInFlight<TRIPLE>>
      <<<plan.walk_grid, kThreads, 0, stream>>>(
          sorted.payload, sorted.keys, in, rowptr.const_data_ptr<key_t>(),
          out.mutable_data_ptr<scalar_t>(), out.size(0), out.size(1), plan.group,
          plan.piece_edges, plan.stretch_rows);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The long rows, which the walk skips: each piece's partial sum in opmath, then each row's
// pieces added in order and written once.
template <typename scalar_t, int VEC, bool TRIPLE, typename key_t, typename Payload>
void launch_long_rows(const SortedEdges<key_t, Payload>& sorted, const GatherRows<scalar_t>& in,
                      const at::Tensor& rowptr, at::Tensor& out, const GradPlan& plan,
                      cudaStream_t stream) {
  using acc_t = at::opmath_type<scalar_t>;
  const int64_t num_rows = out.size(0), feat_dim = out.size(1);
  at::Tensor piece_end = at::empty({num_rows}, out.options().dtype(at::kLong));
  count_pieces_kernel<key_t><<<grid_for((num_rows + kWarp - 1) / kWarp), kThreads, 0, stream>>>(
      rowptr.const_data_ptr<key_t>(), num_rows, plan.piece_edges,
      piece_end.mutable_data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  piece_end.cumsum_(0);
  at::Tensor partial = at::empty({plan.max_pieces, feat_dim},
                                 out.options().dtype(at::toOpMathType(out.scalar_type())));
  const int64_t pieces_grid =
      grid_for((plan.max_pieces + plan.rows_per_warp - 1) / plan.rows_per_warp);
  edge_dot_grad_pieces_kernel<scalar_t, Payload, key_t, VEC, TRIPLE>
      <<<pieces_grid, kThreads, 0, stream>>>(
          sorted.payload, in, rowptr.const_data_ptr<key_t>(),
          piece_end.const_data_ptr<int64_t>(), partial.mutable_data_ptr<acc_t>(), num_rows,
          plan.max_pieces, feat_dim, plan.group, plan.piece_edges);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  edge_dot_grad_finish_kernel<scalar_t, key_t, VEC>
      <<<grid_for((num_rows + kWarp - 1) / kWarp), kThreads, 0, stream>>>(
          partial.const_data_ptr<acc_t>(), rowptr.const_data_ptr<key_t>(),
          piece_end.const_data_ptr<int64_t>(), out.mutable_data_ptr<scalar_t>(), num_rows,
          feat_dim, plan.piece_edges);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// One gradient from its filled sort input: the sort, the row pointer, the walk over the rows
// of at most piece_edges edges, then the long rows in pieces; every row of out [num_rows, D]
// is written. `width` is choose_width's (out's own alignment included).
template <typename scalar_t, bool TRIPLE, typename key_t, typename Payload>
void sort_and_walk(const SortInput<key_t, Payload>& input, const GatherRows<scalar_t>& in,
                   int width, at::Tensor& out, cudaStream_t stream) {
  const int64_t num_edges = input.num_edges, num_rows = out.size(0);
  const auto sorted = sort_by_row(input, num_rows, stream);
  const at::Tensor rowptr =
      build_rowptr(sorted.keys, num_edges, num_rows, key_options<key_t>(out), stream);
  auto launch = [&](auto vec_tag) {
    constexpr int V = decltype(vec_tag)::value;
    const GradPlan plan = plan_grad(num_edges, num_rows, out.size(1), V);
    launch_walk<scalar_t, V, TRIPLE>(sorted, in, rowptr, out, plan, stream);
    if (plan.max_pieces > 0) {
      launch_long_rows<scalar_t, V, TRIPLE>(sorted, in, rowptr, out, plan, stream);
    }
  };
  constexpr int kVec = 16 / sizeof(scalar_t);
  if (width == kVec) {
    launch(std::integral_constant<int, kVec>{});
  } else {
    launch(std::integral_constant<int, 1>{});
  }
}

}  // namespace cuda
}  // namespace pyg_edgedot
