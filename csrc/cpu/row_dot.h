// What the CPU kernels that score rows share (edge_dot_kernel.cpp, edge_dot_loss_kernel.cpp):
// the row dot product, so that both give a pair the same score bit for bit, and the run-time
// choice of their AVX2 clones.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>

#include "prefetch.h"

namespace pyg_edgedot {

// Hot loops are compiled twice: for the baseline ISA the extension is built for, and
// (GCC/Clang on x86-64) with AVX2 for CPUs that have it, chosen at run time, so one build
// runs anywhere and uses 256-bit vectors where it can. Both are built with
// -ffp-contract=off (no FMA contraction), so they give the same bits.
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define PYG_EDGEDOT_AVX2_CLONE 1
#define PYG_EDGEDOT_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#else
#define PYG_EDGEDOT_AVX2_CLONE 0
#define PYG_EDGEDOT_AVX2_TARGET
#endif

// Dot product of two rows with eight partial sums, so the compiler can vectorize it.
template <typename scalar_t, typename acc_t>
PYG_EDGEDOT_INLINE acc_t row_dot(const scalar_t* a, const scalar_t* b, int64_t n) {
  acc_t part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int j = 0; j < 8; ++j) {
      part[j] += static_cast<acc_t>(a[k + j]) * static_cast<acc_t>(b[k + j]);
    }
  }
  for (; k < n; ++k) part[0] += static_cast<acc_t>(a[k]) * static_cast<acc_t>(b[k]);
  return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

#if PYG_EDGEDOT_AVX2_CLONE
// PYG_EDGEDOT_CPU_AVX2=0 keeps the baseline loops (tests/test_edge_dot.py compares the two).
inline bool use_avx2() {
  static const bool use = [] {
    const char* env = std::getenv("PYG_EDGEDOT_CPU_AVX2");
    if (env != nullptr && std::string(env) == "0") return false;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
  }();
  return use;
}
#endif

}  // namespace pyg_edgedot
