// What the hand-written AVX-512 paths of the bf16 row kernels (nn/transpose_kernels.cpp,
// nn/gelu_kernels.cpp) share: whether this build has them (BB_AVX512BW_KERNELS), the `target`
// attribute of their functions, and the check at run time that the CPU can run them. Include it
// after the GCC diagnostic pragmas those files put before their headers.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define BB_AVX512BW_KERNELS 1
// Only functions with this attribute use AVX-512; has_avx512bw() guards each call.
#define BB_AVX512_TARGET __attribute__((target("avx512f,avx512bw")))

namespace bigbatch::nn::kernels {

/// Whether this CPU has AVX-512 F and BW, what BB_AVX512_TARGET functions need.
inline bool has_avx512bw() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return has;
}

}  // namespace bigbatch::nn::kernels
#else
#define BB_AVX512BW_KERNELS 0
#endif
