// What the CPU kernels that score rows share (edge_dot_kernel.cpp, edge_dot_loss_kernel.cpp):
// the row dot product, so that both give a pair the same score bit for bit, its four-pair AVX2
// form (edge_dot's forward), and the run-time choice of their AVX2 clones.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "prefetch.h"

namespace pyg_edgedot {

// Hot loops are compiled twice: for the baseline ISA the extension is built for, and
// (GCC/Clang on x86-64) with AVX2 for CPUs that have it, chosen at run time, so one build
// runs anywhere and uses 256-bit vectors where it can. Both are built with
// -ffp-contract=off (no FMA contraction), so they give the same bits.
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define PYG_EDGEDOT_AVX2_CLONE 1
#define PYG_EDGEDOT_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#include <immintrin.h>
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

// Eight elements of a row, widened to float exactly (as static_cast<float> does).
PYG_EDGEDOT_AVX2_TARGET PYG_EDGEDOT_INLINE __m256 load8(const float* x) {
  return _mm256_loadu_ps(x);
}
PYG_EDGEDOT_AVX2_TARGET PYG_EDGEDOT_INLINE __m256 load8(const c10::BFloat16* x) {
  const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16));
}
PYG_EDGEDOT_AVX2_TARGET PYG_EDGEDOT_INLINE __m256 load8(const c10::Half* x) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}

// The rows four_dots takes: float, bf16 or fp16 (opmath float), whole vectors of 8.
template <typename scalar_t>
constexpr bool kFourDots = std::is_same_v<scalar_t, float> ||
                           std::is_same_v<scalar_t, c10::BFloat16> ||
                           std::is_same_v<scalar_t, c10::Half>;
inline bool four_dots_fit(int64_t dim) { return dim % 8 == 0; }

// row_dot of four pairs (a[j], b[j]) at once, lane j of the result: four accumulators keep
// four pairs' row loads in flight together, and one horizontal-add tree reduces the four.
// Lane i of accumulator j is row_dot's part[i] for pair j (the same products added in the
// same order, no FMA: -ffp-contract=off), and the tree adds ((p0 + p1) + (p2 + p3)) +
// ((p4 + p5) + (p6 + p7)) as row_dot does, so each score has row_dot's bits. dim: a multiple
// of 8 (four_dots_fit).
template <typename scalar_t>
PYG_EDGEDOT_AVX2_TARGET PYG_EDGEDOT_INLINE __m128 four_dots(const scalar_t* const* a,
                                                           const scalar_t* const* b,
                                                           int64_t dim) {
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0;
  for (int64_t k = 0; k < dim; k += 8) {
    c0 = _mm256_add_ps(c0, _mm256_mul_ps(load8(a[0] + k), load8(b[0] + k)));
    c1 = _mm256_add_ps(c1, _mm256_mul_ps(load8(a[1] + k), load8(b[1] + k)));
    c2 = _mm256_add_ps(c2, _mm256_mul_ps(load8(a[2] + k), load8(b[2] + k)));
    c3 = _mm256_add_ps(c3, _mm256_mul_ps(load8(a[3] + k), load8(b[3] + k)));
  }
  // hadd(x, y) = [x0+x1, x2+x3, y0+y1, y2+y3 | x4+x5, x6+x7, y4+y5, y6+y7]: twice, then the
  // two 128-bit halves added.
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(c0, c1), _mm256_hadd_ps(c2, c3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// The four scores in `out`'s dtype (rounded as static_cast<scalar_t> rounds a float).
template <typename scalar_t>
PYG_EDGEDOT_AVX2_TARGET PYG_EDGEDOT_INLINE void store4(__m128 score, scalar_t* out) {
  if constexpr (std::is_same_v<scalar_t, float>) {
    _mm_storeu_ps(out, score);
  } else {
    alignas(16) float part[4];
    _mm_store_ps(part, score);
    for (int j = 0; j < 4; ++j) out[j] = static_cast<scalar_t>(part[j]);
  }
}
#endif

}  // namespace pyg_edgedot
