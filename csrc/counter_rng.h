// What the kernels that draw random pairs share (edge_dot_loss's in-kernel negatives and
// negative_sample's draw): the counter-based generator's core (splitmix64's increment and
// finalizer) and the rank -> key search over a graph's excluded keys, as host/device functions.
#pragma once

#include <cmath>
#include <cstdint>

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

}  // namespace rng
}  // namespace pyg_edgedot
