// The qualifier of the per-element functions that the CPU and CUDA kernels share, so the CPU
// kernels (and their tests) run the very code the CUDA kernels run, and the math functions
// such code calls.
#pragma once

#if defined(__CUDACC__)
#define PYG_EDGEDOT_HD __host__ __device__ __forceinline__
#else
#define PYG_EDGEDOT_HD inline __attribute__((always_inline))
#endif

// std:: (its float overloads) on the host, CUDA's overloads of the global names on the device.
#if defined(__CUDA_ARCH__)
#define PYG_EDGEDOT_MATH(fn) ::fn
#else
#define PYG_EDGEDOT_MATH(fn) std::fn
#endif
