// GCC 12 reports the _mm512_undefined_* values inside its own intrinsics as uninitialized once
// they are inlined (as in bf16_attention.cpp); the pragmas must come before the headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include "bigbatch/nn/transpose_kernels.h"

#include <algorithm>

#include "bigbatch/nn/avx512bw_kernels.h"
#include "bigbatch/nn/row_parts_omp.h"

#if BB_AVX512BW_KERNELS
#include "bigbatch/nn/avx512_transpose.h"
#endif

namespace bigbatch::nn::kernels {
namespace {

using Bits = uint16_t;

/// Rows of src one register block covers (16 pairs of rows: 64 bytes of each dst row, one cache
/// line) and its columns.
constexpr int64_t kRowBlock = 32;
constexpr int64_t kColumnBlock = 16;

/// dst[c][r] = src[r][c] for r in [row_begin, row_end) and c in [col_begin, src.cols), one value
/// at a time: the edges the register blocks leave, and everything without AVX-512.
void transpose_values(const Matrix16& src, int64_t row_begin, int64_t row_end, int64_t col_begin,
                      c10::BFloat16* dst, int64_t dst_stride) {
  constexpr int64_t kTile = 16;  // square tiles keep both sides' lines in cache
  for (int64_t c0 = col_begin; c0 < src.cols; c0 += kTile)
    for (int64_t r = row_begin; r < row_end; ++r)
      for (int64_t c = c0; c < std::min(src.cols, c0 + kTile); ++c)
        dst[c * dst_stride + r] = src.data[r * src.stride + c];
}

#if BB_AVX512BW_KERNELS
/// 16 pairs (src[r][c], src[r + 1][c]) for c in [0, 16), the first in the low half: one row of
/// the transpose's 32-bit view.
BB_AVX512_TARGET inline __m512i row_pairs(const Bits* first, const Bits* second) {
  const __m512i low =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(first)));
  const __m512i high =
      _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(second)));
  return _mm512_or_si512(low, _mm512_slli_epi32(high, 16));
}

/// dst[c][r] = src[r][c] for r < 32 and c < 16: pairs of rows as 32-bit values, transposed
/// 16 x 16 in registers; dst row c then holds src's 32 rows at column c.
BB_AVX512_TARGET void transpose_block(const Bits* src, int64_t src_stride, Bits* dst,
                                      int64_t dst_stride) {
  __m512i rows[16];
  for (int i = 0; i < 16; ++i)
    rows[i] = row_pairs(src + 2 * i * src_stride, src + (2 * i + 1) * src_stride);
  store_transposed_16x16(rows, dst, dst_stride * int64_t(sizeof(Bits)));
}

/// Rows [r0, r0 + 32) of src: whole register blocks along the columns, the rest one by one.
BB_AVX512_TARGET void transpose_rows(const Matrix16& src, int64_t r0, c10::BFloat16* dst,
                                     int64_t dst_stride) {
  const Bits* from = reinterpret_cast<const Bits*>(src.data) + r0 * src.stride;
  Bits* to = reinterpret_cast<Bits*>(dst) + r0;
  const int64_t whole_cols = src.cols / kColumnBlock * kColumnBlock;
  for (int64_t c0 = 0; c0 < whole_cols; c0 += kColumnBlock)
    transpose_block(from + c0, src.stride, to + c0 * dst_stride, dst_stride);
  transpose_values(src, r0, r0 + kRowBlock, whole_cols, dst, dst_stride);
}

#endif

}  // namespace

void transpose_bf16(const Matrix16& src, c10::BFloat16* dst, int64_t dst_stride) {
  const int64_t blocks = src.rows / kRowBlock, whole_rows = blocks * kRowBlock;
  // Tasks of whole 32-row blocks of src (64 bytes of every dst row, which no other task writes),
  // at least 32K values each.
  const int64_t grain =
      std::max<int64_t>(1, (int64_t(1) << 15) / std::max<int64_t>(1, kRowBlock * src.cols));
  at::parallel_for(0, blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t block = begin; block < end; ++block) {
#if BB_AVX512BW_KERNELS
      if (has_avx512bw()) {
        transpose_rows(src, block * kRowBlock, dst, dst_stride);
        continue;
      }
#endif
      transpose_values(src, block * kRowBlock, (block + 1) * kRowBlock, 0, dst, dst_stride);
    }
  });
  transpose_values(src, whole_rows, src.rows, 0, dst, dst_stride);
}

}  // namespace bigbatch::nn::kernels
