// The CPU kernels' bucket index over a graph's excluded keys (counter_rng.h's AdjIndex): the
// one a caller keeps (negative_sample_index_cpu builds it; NegativeSampler passes it back as
// `adj_index`), else one built for the call. Without it, a rank -> key search over tens of
// millions of keys misses the cache at every level of a binary search; building it costs a
// pass over adj, which a small batch scored against a large graph cannot afford per call.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#include "counter_rng.h"

namespace pyg_edgedot {
namespace cpu {

// bucket[b] = #{i : adj[i] < b << shift} for the planned `index`, in one pass over adj and
// the buckets; points index.bucket at the returned tensor.
inline at::Tensor fill_adj_index(const at::Tensor& adj, rng::AdjIndex& index) {
  at::Tensor bucket = at::empty({index.num_buckets + 1}, adj.options());
  int64_t* out = bucket.mutable_data_ptr<int64_t>();
  const int64_t* a = adj.const_data_ptr<int64_t>();
  const int64_t num_adj = adj.numel();
  int64_t i = 0;
  for (int64_t b = 0; b <= index.num_buckets; ++b) {
    const int64_t bound = b << index.shift;
    while (i < num_adj && a[i] < bound) ++i;
    out[b] = i;
  }
  index.bucket = out;
  return bucket;
}

// The index in the kept plan (counter_rng.h), the values negative_sample_index returns on
// either device. Undefined (index.bucket null) where adj is too short to index.
inline at::Tensor build_kept_adj_index(const at::Tensor& adj, int64_t num_ranks,
                                       rng::AdjIndex& index) {
  if (!rng::plan_kept_adj_index(adj.numel(), num_ranks, index)) return at::Tensor();
  return fill_adj_index(adj, index);
}

// The index of an op's call: the caller's kept one (`given`; counter_rng.h checks it), else
// built for this call. Returns the tensor that holds it (undefined where adj is too
// short to index).
inline at::Tensor adj_index_of(const char* op, const at::Tensor& adj, int64_t num_ranks,
                               const at::Tensor* given, rng::AdjIndex& index) {
  if (given == nullptr) return build_kept_adj_index(adj, num_ranks, index);
  return rng::use_kept_adj_index(op, adj, num_ranks, *given, index);
}

}  // namespace cpu
}  // namespace pyg_edgedot
