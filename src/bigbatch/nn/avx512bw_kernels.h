// What the hand-written AVX-512 paths of the bf16 row kernels (nn/transpose_kernels.cpp,
// nn/gelu_kernels.cpp, nn/llama_kernels.cpp) share: whether this build has them
// (BB_AVX512BW_KERNELS), the `target` attribute of their functions, the check at run time that
// the CPU can run them, and bf16 loads and rounding stores. Include it
// after the GCC diagnostic pragmas those files put before their headers.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include <cstdint>
#define BB_AVX512BW_KERNELS 1
// Only functions with this attribute use AVX-512; has_avx512bw() guards each call.
#define BB_AVX512_TARGET __attribute__((target("avx512f,avx512bw")))

namespace bigbatch::nn::kernels {

/// Whether this CPU has AVX-512 F and BW, what BB_AVX512_TARGET functions need.
inline bool has_avx512bw() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return has;
}

/// 16 bf16 values (bit patterns) at `at`, zero-extended to 32-bit lanes.
BB_AVX512_TARGET inline __m512i load_bf16_patterns(const uint16_t* at) {
  return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at)));
}

/// 16 bf16 values at `at` in float32.
BB_AVX512_TARGET inline __m512 load_bf16_as_float(const uint16_t* at) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(load_bf16_patterns(at), 16));
}

/// `x` rounded to the nearest even bf16 (NaN to the quiet NaN 0x7FC0), as store() in
/// row_parts_omp.h rounds, stored at `at`.
BB_AVX512_TARGET inline void store_as_bf16(uint16_t* at, __m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_srli_epi32(
      _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7FFF)), odd), 16);
  rounded = _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q),
                                  _mm512_set1_epi32(0x7FC0));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(at), _mm512_cvtepi32_epi16(rounded));
}

}  // namespace bigbatch::nn::kernels
#else
#define BB_AVX512BW_KERNELS 0
#endif
