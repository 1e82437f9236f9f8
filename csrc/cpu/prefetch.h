// Software prefetch for the CPU kernels' random row gathers, and their always-inline macro.
#pragma once

#include <algorithm>
#include <cstdint>

namespace pyg_edgedot {

// Random rows defeat the hardware prefetcher: while scoring one edge, the kernels ask for the
// rows of an edge a few ahead (about 8 KB of rows in flight per thread). Measured at E = 2M,
// D = 128 fp32 on 2 cores: forward 232 ms without, 77 ms with 16 edges ahead (91 with 8, 84
// with 32); forward + backward 890 -> 416 ms.
inline int64_t prefetch_distance(int64_t bytes_per_edge) {
  return std::clamp<int64_t>(8192 / std::max<int64_t>(1, bytes_per_edge), 2, 16);
}

// Inlined even where the compiler would not choose to (the CPU kernels' hot loops and what
// they call, so that each ISA clone of a loop (row_dot.h) gets its own copy of each).
#if defined(__GNUC__) || defined(__clang__)
#define PYG_EDGEDOT_INLINE inline __attribute__((always_inline))
#else
#define PYG_EDGEDOT_INLINE inline
#endif

// Always inlined, and so must be any helper that wraps it (CandidateRows::prefetch): GCC 12
// judges an out-of-line function whose only effect is a prefetch to have none, and deletes
// the calls (benchmarks/NOTES.md, "CPU: software prefetch").
PYG_EDGEDOT_INLINE void prefetch_lines(const void* ptr, int64_t bytes, bool write = false) {
#if defined(__GNUC__) || defined(__clang__)
  const char* p = static_cast<const char*>(ptr);
  for (int64_t off = 0; off < bytes; off += 64) {
    if (write) {
      __builtin_prefetch(p + off, 1, 3);
    } else {
      __builtin_prefetch(p + off, 0, 3);
    }
  }
#else
  (void)ptr;
  (void)bytes;
  (void)write;
#endif
}

}  // namespace pyg_edgedot
