// The 16 x 16 transpose of 32-bit values in AVX-512 registers that the bf16 attention kernels
// (nn/bf16_attention.cpp) and the bf16 transpose (nn/transpose_kernels.cpp) share. Include it
// only from x86-64 GCC code built for AVX-512 (a `target` attribute that includes avx512f), after
// the pragmas those files put before their headers.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace bigbatch::nn::kernels {

/// Stores the transpose of rows[0..15] (16 x 16 32-bit values): row c of it, rows[i][c] for i <
/// 16, at dst + c * dst_row_bytes. Unpacks of 32 and 64 bits, then two shuffles of 128-bit lanes.
__attribute__((target("avx512f"), always_inline)) inline void store_transposed_16x16(
    const __m512i* rows, void* dst, int64_t dst_row_bytes) {
  __m512i pairs[16], quads[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    pairs[i] = _mm512_unpacklo_epi32(rows[i], rows[i + 1]);
    pairs[i + 1] = _mm512_unpackhi_epi32(rows[i], rows[i + 1]);
  }
  // quads[4 g + c]: columns c, c + 4, c + 8, c + 12 (one per 128-bit lane) of rows 4 g .. 4 g + 3.
#pragma GCC unroll 4
  for (int g = 0; g < 16; g += 4) {
    quads[g] = _mm512_unpacklo_epi64(pairs[g], pairs[g + 2]);
    quads[g + 1] = _mm512_unpackhi_epi64(pairs[g], pairs[g + 2]);
    quads[g + 2] = _mm512_unpacklo_epi64(pairs[g + 1], pairs[g + 3]);
    quads[g + 3] = _mm512_unpackhi_epi64(pairs[g + 1], pairs[g + 3]);
  }
  char* out = static_cast<char*>(dst);
  const auto row = [out, dst_row_bytes](int c) { return out + c * dst_row_bytes; };
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512i even_0 = _mm512_shuffle_i32x4(quads[c], quads[4 + c], 0x88);  // c, c + 8
    const __m512i odd_0 = _mm512_shuffle_i32x4(quads[c], quads[4 + c], 0xdd);   // c + 4, c + 12
    const __m512i even_1 = _mm512_shuffle_i32x4(quads[8 + c], quads[12 + c], 0x88);
    const __m512i odd_1 = _mm512_shuffle_i32x4(quads[8 + c], quads[12 + c], 0xdd);
    _mm512_storeu_si512(row(c), _mm512_shuffle_i32x4(even_0, even_1, 0x88));
    _mm512_storeu_si512(row(c + 8), _mm512_shuffle_i32x4(even_0, even_1, 0xdd));
    _mm512_storeu_si512(row(c + 4), _mm512_shuffle_i32x4(odd_0, odd_1, 0x88));
    _mm512_storeu_si512(row(c + 12), _mm512_shuffle_i32x4(odd_0, odd_1, 0xdd));
  }
}

}  // namespace bigbatch::nn::kernels
