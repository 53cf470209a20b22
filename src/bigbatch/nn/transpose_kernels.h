// A CPU transpose of 16-bit values (bfloat16's bits). The weight gradient of a bf16 product,
// grad^T input, runs on oneDNN's AMX kernels at about half the rate of the forward's products
// when grad^T is a transposed view, and at about the forward's rate when it is a row-major copy
// (docs/BENCHMARKS.md); ATen's copy into that layout takes longer than the product itself.
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>

namespace bigbatch::nn::kernels {

/// A (rows, cols) matrix of 16-bit values, row r at data + r * stride.
struct Matrix16 {
  const c10::BFloat16* data = nullptr;
  int64_t rows = 0, cols = 0, stride = 0;
};

/// dst (src.cols, src.rows) = src^T, dst's rows `dst_stride` values apart; the values are only
/// moved. On the OpenMP threads, 32 rows of src per task, in 32 x 16 blocks in AVX-512 registers
/// where the CPU has AVX-512.
void transpose_bf16(const Matrix16& src, c10::BFloat16* dst, int64_t dst_stride);

}  // namespace bigbatch::nn::kernels
