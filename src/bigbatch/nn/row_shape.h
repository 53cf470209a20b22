// The shape the CPU row kernels (batch_norm_kernels.h, llama_kernels.h) work on.
#pragma once

#include <cstdint>

namespace bigbatch::nn::kernels {

/// An (M, C) row-major float32 matrix's shape.
struct RowShape {
  int64_t rows = 0;      ///< M: the positions (B, or B x H x W, or B x T)
  int64_t channels = 0;  ///< C: the values of one row
};

}  // namespace bigbatch::nn::kernels
