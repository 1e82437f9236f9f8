// What the kernels that draw random pairs share (edge_dot_loss's in-kernel negatives and
// negative_sample's draw): the counter-based generator's core (splitmix64's increment and
// finalizer) and the rank -> key search over a graph's excluded keys (with its optional bucket
// index), as host/device functions; and the host check of a bucket index a caller kept.
#pragma once

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "check.h"
#include "host_device.h"

namespace pyg_edgedot {
namespace rng {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ULL;  // splitmix64's increment

// splitmix64's finalizer (uint64 arithmetic wraps, as the Python side's int64 ops do).
PYG_EDGEDOT_HD uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The first index in [lo, hi) whose adj exceeds r (adj non-decreasing): std::upper_bound,
// branch-light. With adj_i = e_i - i of a graph's sorted excluded keys e_i, r plus the count
// upper_bound(adj, 0, A, r) is the key of the complement's rank r.
PYG_EDGEDOT_HD int64_t upper_bound(const int64_t* adj, int64_t lo, int64_t hi, int64_t r) {
  int64_t len = hi - lo;
  while (len > 0) {
    const int64_t half = len / 2;
    const bool right = adj[lo + half] <= r;
    lo = right ? lo + half + 1 : lo;
    len = right ? len - half - 1 : half;
  }
  return lo;
}

// An optional index over adj (kernels build it per call for long adj, or take a kept one):
// bucket[b] = #{i : adj[i] < b << shift}, b = 0 .. num_buckets, so the count for r lies
// between the entries of bucket r >> shift and the next: about one cache miss each instead of
// a binary search's log2(A). The count is the same with or without it.
struct AdjIndex {
  const int64_t* bucket;  // [num_buckets + 1], or null
  int64_t num_buckets;
  int shift;
};

// Below this many keys adj stays in cache and plain binary searches serve; from it on, the
// kernels index it.
constexpr int64_t kAdjIndexMinKeys = 4096;

// The shape of the index over num_adj keys: at most max_buckets buckets (each kernel picks
// its density), covering every rank below num_ranks. Sets num_buckets and shift and leaves
// bucket null for the caller to fill; false (index all zero) when adj is too short to index.
inline bool plan_adj_index(int64_t num_adj, int64_t num_ranks, int64_t max_buckets,
                           AdjIndex& index) {
  index = AdjIndex{nullptr, 0, 0};
  if (num_adj < kAdjIndexMinKeys) return false;
  while ((num_ranks >> index.shift) > max_buckets) ++index.shift;
  index.num_buckets = (num_ranks >> index.shift) + 1;
  return true;
}

// The shape of the index a caller keeps (negative_sample_index's tensor, the same values on
// the CPU and CUDA): one bucket per 4-8 keys, 1-2 bytes per key.
inline bool plan_kept_adj_index(int64_t num_adj, int64_t num_ranks, AdjIndex& index) {
  return plan_adj_index(num_adj, num_ranks, num_adj / 4, index);
}

// The size of the kept index over num_adj keys: what negative_sample_index returns.
inline int64_t kept_adj_index_size(int64_t num_adj, int64_t num_ranks) {
  AdjIndex plan;
  return plan_kept_adj_index(num_adj, num_ranks, plan) ? plan.num_buckets + 1 : 0;
}

// The checks of a kept index that a caller passes as `adj_index` (negative_sample_index's
// tensor, to negative_sample and the loss ops): `size` is what negative_sample_index returns
// on adj's device for this adj and num_ranks.
inline void check_adj_index(const char* op, const at::Tensor& index, const at::Tensor& adj,
                            int64_t size) {
  PYG_EDGEDOT_CHECK(index.dim() == 1 && index.scalar_type() == at::kLong &&
                        index.device() == adj.device() && index.numel() == size,
                    op, ": adj_index must be negative_sample_index(excluded_adj, num_ranks): ",
                    std::to_string(size), " int64 values on ", adj.device(), " (got a ",
                    std::to_string(index.dim()), "-D ", index.scalar_type(), " tensor of ",
                    std::to_string(index.numel()), " on ", index.device(), ")");
}

// A caller's kept index (`given`, negative_sample_index's tensor) as the call's index: checked
// against the kept plan, then `index` points into the returned tensor (undefined, and
// index.bucket null, where adj is too short to index). Both devices' adj_index_of.
inline at::Tensor use_kept_adj_index(const char* op, const at::Tensor& adj, int64_t num_ranks,
                                     const at::Tensor& given, AdjIndex& index) {
  const bool planned = plan_kept_adj_index(adj.numel(), num_ranks, index);
  check_adj_index(op, given, adj, planned ? index.num_buckets + 1 : 0);
  if (!planned) return at::Tensor();
  at::Tensor bucket = given.contiguous();
  index.bucket = bucket.const_data_ptr<int64_t>();
  return bucket;
}

// The key of the complement's rank: rank + upper_bound(adj, 0, A, rank), through the index
// where there is one. A negative rank (edge_dot_loss's, for a source without negatives) is
// returned as it is (every adj_i >= 0). The bucket's bounds are clamped to [0, A]: an index
// that a caller passed (negative_sample's adj_index) can give a wrong key, never a read
// outside adj.
PYG_EDGEDOT_HD int64_t rank_to_key(const int64_t* adj, int64_t num_adj, const AdjIndex& index,
                                   int64_t rank) {
  if (rank < 0) return rank;
  const int64_t b = rank >> index.shift;
  if (index.bucket != nullptr && b < index.num_buckets) {
    int64_t lo = index.bucket[b], hi = index.bucket[b + 1];
    lo = lo < 0 ? 0 : (lo > num_adj ? num_adj : lo);
    hi = hi < lo ? lo : (hi > num_adj ? num_adj : hi);
    return rank + upper_bound(adj, lo, hi, rank);
  }
  return rank + upper_bound(adj, 0, num_adj, rank);
}

}  // namespace rng
}  // namespace pyg_edgedot
