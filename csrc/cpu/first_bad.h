// The CPU kernels' first_bad: the smallest position (edge, row or column) with an index out of
// range, kept in a std::atomic<int64_t> that the parallel tasks lower, so that the result does
// not depend on the order in which they run.
#pragma once

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <limits>

namespace pyg_edgedot {

// The value first_bad_tensor reads as no bad position recorded: a first_bad's start.
constexpr int64_t kNoBadRow = std::numeric_limits<int64_t>::max();

// Lowers first_bad to `row` if `row` is smaller.
inline void record_bad_row(std::atomic<int64_t>& first_bad, int64_t row) {
  int64_t seen = first_bad.load();
  while (row < seen && !first_bad.compare_exchange_weak(seen, row)) {
  }
}

// The ops' first_bad output: [1] int64 on like_index's device, the first bad position or -1.
inline at::Tensor first_bad_tensor(const std::atomic<int64_t>& first_bad,
                                   const at::Tensor& like_index) {
  const int64_t bad = first_bad.load();
  const int64_t first = bad == kNoBadRow ? -1 : bad;
  return at::full({1}, first, like_index.options().dtype(at::kLong));
}

}  // namespace pyg_edgedot
