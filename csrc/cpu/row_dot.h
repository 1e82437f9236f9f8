// What the CPU kernels that score rows share (edge_dot_kernel.cpp, edge_dot_loss_kernel.cpp,
// candidates_kernel.cpp): the row dot product, so that all give a pair the same score bit for
// bit, its four-pair AVX2 and AVX-512 forms, and the loops' ISA clones with the run-time
// choice among them (IsaClones; topk_kernel.cpp's scan takes the same choice, use_avx2).
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "prefetch.h"

namespace pyg_edgedot {

// Hot loops are compiled for the baseline ISA the extension is built for and again (GCC/Clang
// on x86-64) with AVX2 and, for the four-pair loops (edge_dot's forward, the loss's pairs,
// the candidates' scores), AVX-512, chosen at run time, so one build runs anywhere and uses
// the widest vectors it can.
// All are built with -ffp-contract=off (no FMA contraction) and add in ordered_sum's order, so
// they give the same bits.
#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define PYG_EDGEDOT_AVX2_CLONE 1
#define PYG_EDGEDOT_AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#define PYG_EDGEDOT_AVX512_TARGET __attribute__((target("avx512f,avx2,fma,f16c")))
#include <immintrin.h>
#else
#define PYG_EDGEDOT_AVX2_CLONE 0
#define PYG_EDGEDOT_AVX2_TARGET
#define PYG_EDGEDOT_AVX512_TARGET
#endif

// term(0) + ... + term(n - 1) in sixteen partial sums, so the compiler can vectorize it and
// one 512-bit register (or two 256-bit ones) holds a pair's sums: part[j] adds terms j, j + 16,
// j + 32, ... in order, then a last half block of 8 goes to part[0..7] and the last n % 8
// terms to part[0..n % 8 - 1] (a half block cut short, so a vector loop adds it with masked
// loads); the sums are reduced as q[j] = part[j] + part[j + 8], then
// ((q0 + q1) + (q2 + q3)) + ((q4 + q5) + (q6 + q7)). Every loop that scores rows on the CPU
// keeps this order.
template <typename acc_t, typename Term>
PYG_EDGEDOT_INLINE acc_t ordered_sum(int64_t n, Term term) {
  acc_t part[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) {
    for (int j = 0; j < 16; ++j) part[j] += term(k + j);
  }
  if (k + 8 <= n) {
    for (int j = 0; j < 8; ++j) part[j] += term(k + j);
    k += 8;
  }
  for (int j = 0; k + j < n; ++j) part[j] += term(k + j);
  acc_t q[8];
  for (int j = 0; j < 8; ++j) q[j] = part[j] + part[j + 8];
  return ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
}

// Dot product of two rows, in ordered_sum's order.
template <typename scalar_t, typename acc_t>
PYG_EDGEDOT_INLINE acc_t row_dot(const scalar_t* a, const scalar_t* b, int64_t n) {
  return ordered_sum<acc_t>(
      n, [&](int64_t k) { return static_cast<acc_t>(a[k]) * static_cast<acc_t>(b[k]); });
}

// DistMult's sum of a[k] * r[k] * b[k] (the product as (a * r) * b), in ordered_sum's order.
template <typename scalar_t, typename acc_t>
PYG_EDGEDOT_INLINE acc_t row_dot3(const scalar_t* a, const scalar_t* r, const scalar_t* b,
                                  int64_t n) {
  return ordered_sum<acc_t>(n, [&](int64_t k) {
    return static_cast<acc_t>(a[k]) * static_cast<acc_t>(r[k]) * static_cast<acc_t>(b[k]);
  });
}

#if PYG_EDGEDOT_AVX2_CLONE
// PYG_EDGEDOT_CPU_AVX2=0 keeps the baseline loops, PYG_EDGEDOT_CPU_AVX512=0 the AVX2 ones
// (tests/test_edge_dot.py compares the three).
inline bool env_is_zero(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr && std::string(env) == "0";
}

inline bool use_avx2() {
  static const bool use = !env_is_zero("PYG_EDGEDOT_CPU_AVX2") &&
                          __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return use;
}

inline bool use_avx512() {
  static const bool use =
      use_avx2() && !env_is_zero("PYG_EDGEDOT_CPU_AVX512") && __builtin_cpu_supports("avx512f");
  return use;
}

// Eight (sixteen) elements of a row, widened to float exactly (as static_cast<float> does).
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
PYG_EDGEDOT_AVX512_TARGET PYG_EDGEDOT_INLINE __m512 load16(const float* x) {
  return _mm512_loadu_ps(x);
}
PYG_EDGEDOT_AVX512_TARGET PYG_EDGEDOT_INLINE __m512 load16(const c10::BFloat16* x) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}
PYG_EDGEDOT_AVX512_TARGET PYG_EDGEDOT_INLINE __m512 load16(const c10::Half* x) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
}

// The rows the four-pair loops take: float, bf16 or fp16 (opmath float).
template <typename scalar_t>
constexpr bool kFourDots = std::is_same_v<scalar_t, float> ||
                           std::is_same_v<scalar_t, c10::BFloat16> ||
                           std::is_same_v<scalar_t, c10::Half>;

// The last count < 8 elements of a row as a vector, zeros after them (masked loads never read
// past the row); adding their products to part[0..7] adds +0 in the lanes past count, which
// leaves those sums as they are (a running sum from +0 is never -0).
PYG_EDGEDOT_AVX2_TARGET PYG_EDGEDOT_INLINE __m256 load8_first(const float* x, int64_t count) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_maskload_ps(x, _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                                                  lanes));
}
template <typename scalar_t>
PYG_EDGEDOT_AVX2_TARGET PYG_EDGEDOT_INLINE __m256 load8_first(const scalar_t* x, int64_t count) {
  alignas(32) float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < count; ++i) part[i] = static_cast<float>(x[i]);
  return _mm256_load_ps(part);
}

// The products the loops add: a * b, or with a relation row (kRel) (a * r) * b, row_dot3's.
template <bool kRel>
PYG_EDGEDOT_AVX2_TARGET PYG_EDGEDOT_INLINE __m256 product8(__m256 a, __m256 r, __m256 b) {
  return kRel ? _mm256_mul_ps(_mm256_mul_ps(a, r), b) : _mm256_mul_ps(a, b);
}
template <bool kRel>
PYG_EDGEDOT_AVX512_TARGET PYG_EDGEDOT_INLINE __m512 product16(__m512 a, __m512 r, __m512 b) {
  return kRel ? _mm512_mul_ps(_mm512_mul_ps(a, r), b) : _mm512_mul_ps(a, b);
}

// row_dot's (row_dot3's) half block and tail from element k on (dim - k < 16), added to
// lo = part[0..7]; r is read only with kRel.
template <bool kRel, typename scalar_t>
PYG_EDGEDOT_AVX2_TARGET PYG_EDGEDOT_INLINE __m256 add_last(__m256 lo, const scalar_t* a,
                                                          const scalar_t* r, const scalar_t* b,
                                                          int64_t k, int64_t dim) {
  if (k + 8 <= dim) {
    const __m256 rk = kRel ? load8(r + k) : _mm256_setzero_ps();
    lo = _mm256_add_ps(lo, product8<kRel>(load8(a + k), rk, load8(b + k)));
    k += 8;
  }
  if (k < dim) {
    const __m256 rk = kRel ? load8_first(r + k, dim - k) : _mm256_setzero_ps();
    lo = _mm256_add_ps(lo, product8<kRel>(load8_first(a + k, dim - k), rk,
                                          load8_first(b + k, dim - k)));
  }
  return lo;
}

// The four pairs' q (row_dot's part[j] + part[j + 8]) reduced as row_dot reduces it, lane j
// of the result: hadd(x, y) = [x0+x1, x2+x3, y0+y1, y2+y3 | x4+x5, x6+x7, y4+y5, y6+y7],
// twice, then the two 128-bit halves added.
PYG_EDGEDOT_AVX2_TARGET PYG_EDGEDOT_INLINE __m128 reduce_four(__m256 q0, __m256 q1, __m256 q2,
                                                             __m256 q3) {
  const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(q0, q1), _mm256_hadd_ps(q2, q3));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// row_dot of four pairs (a[j], b[j]) at once (with kRel, row_dot3 of (a[j], r[j], b[j])),
// lane j of the result, with 256-bit vectors: pair j's part[0..7] in lo[j] and part[8..15] in
// hi[j] (the same products added in the same order, no FMA: -ffp-contract=off); eight
// accumulators keep four pairs' row loads in flight together.
template <bool kRel, typename scalar_t>
PYG_EDGEDOT_AVX2_TARGET PYG_EDGEDOT_INLINE __m128 four_dots_avx2(const scalar_t* const* a,
                                                                const scalar_t* const* r,
                                                                const scalar_t* const* b,
                                                                int64_t dim) {
  __m256 lo[4], hi[4];
  for (int j = 0; j < 4; ++j) lo[j] = hi[j] = _mm256_setzero_ps();
  const __m256 zero = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= dim; k += 16) {
    for (int j = 0; j < 4; ++j) {
      lo[j] = _mm256_add_ps(lo[j], product8<kRel>(load8(a[j] + k),
                                                  kRel ? load8(r[j] + k) : zero,
                                                  load8(b[j] + k)));
      hi[j] = _mm256_add_ps(hi[j], product8<kRel>(load8(a[j] + k + 8),
                                                  kRel ? load8(r[j] + k + 8) : zero,
                                                  load8(b[j] + k + 8)));
    }
  }
  if (k < dim) {
    for (int j = 0; j < 4; ++j) {
      lo[j] = add_last<kRel>(lo[j], a[j], kRel ? r[j] : a[j], b[j], k, dim);
    }
  }
  return reduce_four(_mm256_add_ps(lo[0], hi[0]), _mm256_add_ps(lo[1], hi[1]),
                     _mm256_add_ps(lo[2], hi[2]), _mm256_add_ps(lo[3], hi[3]));
}

// The same with 512-bit vectors: pair j's sixteen sums in one register, the half block and
// the tail added to its low half, then q = low half + high half.
template <bool kRel, typename scalar_t>
PYG_EDGEDOT_AVX512_TARGET PYG_EDGEDOT_INLINE __m128 four_dots_avx512(const scalar_t* const* a,
                                                                    const scalar_t* const* r,
                                                                    const scalar_t* const* b,
                                                                    int64_t dim) {
  __m512 c[4];
  for (int j = 0; j < 4; ++j) c[j] = _mm512_setzero_ps();
  const __m512 zero = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= dim; k += 16) {
    for (int j = 0; j < 4; ++j) {
      c[j] = _mm512_add_ps(c[j], product16<kRel>(load16(a[j] + k),
                                                 kRel ? load16(r[j] + k) : zero,
                                                 load16(b[j] + k)));
    }
  }
  __m256 q[4];
  for (int j = 0; j < 4; ++j) {
    __m256 lo = _mm512_castps512_ps256(c[j]);
    if (k < dim) lo = add_last<kRel>(lo, a[j], kRel ? r[j] : a[j], b[j], k, dim);
    const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(c[j]), 1));
    q[j] = _mm256_add_ps(lo, hi);
  }
  return reduce_four(q[0], q[1], q[2], q[3]);
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

// The four-pair forms as types, for the loops templated on them (edge_dot's forward, the
// loss's pairs, the candidates): score4 writes four pairs' scores in the rows' dtype,
// score4_rel likewise for DistMult's (a[j], r[j], b[j]). IsaClones below compiles such a loop
// for each form's ISA.
struct Avx2Dots {
  template <typename scalar_t>
  PYG_EDGEDOT_AVX2_TARGET static void score4(const scalar_t* const* a, const scalar_t* const* b,
                                             int64_t dim, scalar_t* out) {
    store4(four_dots_avx2<false>(a, a, b, dim), out);
  }
  template <typename scalar_t>
  PYG_EDGEDOT_AVX2_TARGET static void score4_rel(const scalar_t* const* a,
                                                 const scalar_t* const* r,
                                                 const scalar_t* const* b, int64_t dim,
                                                 scalar_t* out) {
    store4(four_dots_avx2<true>(a, r, b, dim), out);
  }
};

struct Avx512Dots {
  template <typename scalar_t>
  PYG_EDGEDOT_AVX512_TARGET static void score4(const scalar_t* const* a,
                                               const scalar_t* const* b, int64_t dim,
                                               scalar_t* out) {
    store4(four_dots_avx512<false>(a, a, b, dim), out);
  }
  template <typename scalar_t>
  PYG_EDGEDOT_AVX512_TARGET static void score4_rel(const scalar_t* const* a,
                                                   const scalar_t* const* r,
                                                   const scalar_t* const* b, int64_t dim,
                                                   scalar_t* out) {
    store4(four_dots_avx512<true>(a, r, b, dim), out);
  }
};
#endif

// A loop templated on a four-pair form that scores one pair at a time instead.
struct OnePairAtATime {};

// A loop (Loop::run<Dots>, Dots one of the forms above) compiled for each ISA, and the
// run-time choice among the clones; Fn is the loop's function type. Each clone has its ISA's
// target and __attribute__((flatten)), which inlines the loop and the four-pair form into it:
// the loop itself has no target (GCC will not inline a function built for a wider ISA into
// one that is not), so it is plain `inline`, not always-inline.
template <typename Loop, typename Fn>
struct IsaClones;

template <typename Loop, typename R, typename... A>
struct IsaClones<Loop, R(A...)> {
  static R baseline(A... a) { return Loop::template run<OnePairAtATime>(a...); }
#if PYG_EDGEDOT_AVX2_CLONE
  template <typename Dots>
  PYG_EDGEDOT_AVX2_TARGET __attribute__((flatten)) static R avx2(A... a) {
    return Loop::template run<Dots>(a...);
  }
  PYG_EDGEDOT_AVX512_TARGET __attribute__((flatten)) static R avx512(A... a) {
    return Loop::template run<Avx512Dots>(a...);
  }
#endif

  // The clone for this CPU and scalar_t: four pairs at a time where the forms take scalar_t
  // (in AVX-512; in AVX2 only if kFourInAvx2), else one at a time, in AVX2 where the CPU has it.
  template <typename scalar_t, bool kFourInAvx2>
  static auto pick() -> R (*)(A...) {
#if PYG_EDGEDOT_AVX2_CLONE
    if constexpr (kFourDots<scalar_t>) {
      if (use_avx512()) return &avx512;
      if constexpr (kFourInAvx2) {
        if (use_avx2()) return &avx2<Avx2Dots>;
      }
    }
    if (use_avx2()) return &avx2<OnePairAtATime>;
#endif
    return &baseline;
  }
};

}  // namespace pyg_edgedot
