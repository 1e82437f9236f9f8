// topk_dst's per-element rules (schema in csrc/topk.cpp) as the CUDA kernel
// (csrc/cuda/topk_kernel.cu) applies them, callable on host and device (the C++ kernel,
// csrc/cpu/topk_kernel.cpp, follows the same rules with its own heap and scan):
// the total order of (score, index) pairs, a running top-k kept as a sorted list, and the walk
// over one source's excluded destinations. Plain C++ without ATen, so a host test can include
// it with host_device.h.
#pragma once

#include <cstdint>
#include <limits>

#include "host_device.h"

namespace pyg_edgedot {
namespace topk {

// The key a score ranks by: the score, NaN as -inf (x != x only for NaN; no fast-math here).
template <typename acc_t>
PYG_EDGEDOT_HD acc_t order_key(acc_t score) {
  return score != score ? -std::numeric_limits<acc_t>::infinity() : score;
}

// (key a, index ia) ranks above (key b, index ib): the higher key, then the lower index.
// Keys are already NaN-free (order_key); -0.0 and 0.0 are equal keys.
template <typename acc_t, typename idx_t>
PYG_EDGEDOT_HD bool ranks_above(acc_t a, idx_t ia, acc_t b, idx_t ib) {
  return a > b || (a == b && ia < ib);
}

// A running top-k as a list sorted best first: raw scores (NaN kept: the key is recomputed)
// and indices. An empty slot holds (-inf, kEmptyIndex): kEmptyIndex is above every real
// index, so the empty slot ranks below every real candidate, -inf and NaN scores included,
// and a list of k empty slots needs no "not full yet" case: its last entry is the threshold.
constexpr int32_t kEmptyIndex = 0x7fffffff;

// Inserts (score, index) into the list of `size` entries if it ranks above the last one
// (which falls off); returns whether it went in. O(size) shifts.
template <typename acc_t, typename idx_t>
PYG_EDGEDOT_HD bool insert_sorted(acc_t* scores, idx_t* indices, int size, acc_t score,
                                  idx_t index) {
  if (size <= 0) return false;
  const acc_t key = order_key(score);
  if (!ranks_above(key, index, order_key(scores[size - 1]), indices[size - 1])) return false;
  int pos = size - 1;
  while (pos > 0 && ranks_above(key, index, order_key(scores[pos - 1]), indices[pos - 1])) {
    scores[pos] = scores[pos - 1];
    indices[pos] = indices[pos - 1];
    --pos;
  }
  scores[pos] = score;
  indices[pos] = index;
  return true;
}

// The first position p in [pos, end) with excluded[p] >= bound (end if none): moves a source's
// cursor forward past the destinations before a tile starting at `bound`. Reads only
// [pos, end), whatever the values (a malformed list gives wrong exclusions, no stray reads).
PYG_EDGEDOT_HD int64_t advance_past(const int64_t* excluded, int64_t pos, int64_t end,
                                    int64_t bound) {
  while (pos < end && excluded[pos] < bound) ++pos;
  return pos;
}

// Whether j is among the excluded destinations in [pos, end) that lie below tile_end, with
// pos the cursor after advance_past(.., tile start): a scan of the few excluded destinations
// of one tile, in any order of the queries j within the tile.
PYG_EDGEDOT_HD bool excluded_in_tile(const int64_t* excluded, int64_t pos, int64_t end,
                                     int64_t tile_end, int64_t j) {
  for (; pos < end; ++pos) {
    const int64_t e = excluded[pos];
    if (e >= tile_end) break;
    if (e == j) return true;
  }
  return false;
}

}  // namespace topk
}  // namespace pyg_edgedot
