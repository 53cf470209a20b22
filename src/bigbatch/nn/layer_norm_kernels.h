// CPU kernels of the fused transformer blocks' LayerNorms under bf16 autocast, and of their
// bias gradients: the LayerNorm of float32 rows rounded once to bfloat16 (what the block's
// products read; where the composite steps write the float32 result and then cast it), its
// backward from a bfloat16 gradient with the residual's gradient added (where they cast the
// gradient to float32, run LayerNorm's backward and add), the column sums of a bfloat16
// gradient in float32, and a float32 gradient rounded to bfloat16 with those sums. One pass over
// the rows each; nn/fused_block_parts runs them.
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>

#include "bigbatch/nn/row_shape.h"

namespace bigbatch::nn::kernels {

/// LayerNorm's forward over the rows of x (M, C): mean and rstd = 1 / sqrt(var + eps) per row
/// (the biased variance), then y = (x * rstd - mean * rstd) * weight + bias in float32 (ATen's
/// order of operations), rounded once to the nearest even bfloat16.
struct LayerNormToBf16Rows {
  const float* input = nullptr;     ///< x (M, C)
  const float* weight = nullptr;    ///< (C)
  const float* bias = nullptr;      ///< (C)
  c10::BFloat16* output = nullptr;  ///< y (M, C)
  /// y^T (C, M), row-major, or nullptr for none: written chunk by chunk of rows while they are
  /// in cache (kernels::transpose_bf16), the layout a weight gradient's product reads fastest.
  c10::BFloat16* output_transposed = nullptr;
  float* mean = nullptr;  ///< (M), kept for backward
  float* rstd = nullptr;  ///< (M), kept for backward
  RowShape shape;
  float eps = 1e-5f;
};
/// Runs `args` over its rows on the OpenMP threads.
void layer_norm_to_bf16_rows(const LayerNormToBf16Rows& args);

/// LayerNorm's backward from a bfloat16 dy (widened exactly), in float32: with
/// ds = sum(dy * weight * x) and db = sum(dy * weight) per row,
/// dx = rstd * dy * weight + b * x + c, b = (db * mean - ds) * rstd^3 / C, c = -b * mean -
/// db * rstd / C (ATen's formula), plus the residual's gradient where given; d_weight and d_bias
/// are the column sums of dy * (x - mean) * rstd and of dy.
struct LayerNormBackwardFromBf16Rows {
  const c10::BFloat16* grad_output = nullptr;  ///< dy (M, C)
  const float* input = nullptr;                ///< x (M, C)
  const float* weight = nullptr;               ///< (C)
  const float* mean = nullptr;                 ///< (M), from the forward
  const float* rstd = nullptr;                 ///< (M), from the forward
  const float* residual = nullptr;             ///< (M, C) added to dx, or nullptr for nothing
  float* grad_input = nullptr;  ///< dx (M, C), or nullptr for none (then residual is unused)
  /// d_weight (C) and d_bias (C), each or both nullptr for none: summed per chunk of rows in
  /// float, the chunks in order in double, so the result does not depend on the thread count.
  float* grad_weight = nullptr;
  float* grad_bias = nullptr;
  RowShape shape;
};
/// Runs `args` over its rows on the OpenMP threads.
void layer_norm_backward_from_bf16_rows(const LayerNormBackwardFromBf16Rows& args);

/// sums (C) = the column sums of values (M, C), each bfloat16 widened exactly: in float per chunk
/// of rows, the chunks in order in double, so the result does not depend on the thread count.
void bf16_column_sums(const c10::BFloat16* values, RowShape shape, float* sums);

/// out (M, C) = values (M, C) rounded to the nearest even bfloat16 (as c10::BFloat16 rounds), and
/// sums (C) = the column sums of out, bitwise bf16_column_sums(out) (nullptr: none), in one pass:
/// a float32 gradient in a product's dtype with the product's bias gradient.
void bf16_rows_and_column_sums(const float* values, RowShape shape, c10::BFloat16* out,
                               float* sums);

}  // namespace bigbatch::nn::kernels
