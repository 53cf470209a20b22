// CPU kernels of GELU (the erf form, torch.nn.GELU()'s default) on bfloat16 values. A bf16 value
// has 65,536 possible bit patterns, so GELU and its derivative are computed once for every one of
// them by LibTorch itself (at::gelu, at::gelu_backward) and then looked up: the forward is bitwise
// what at::gelu gives, and each pass reads and writes every value once. ATen's bf16 GELU runs on
// oneDNN's eltwise kernels at about half that speed (docs/BENCHMARKS.md).
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>

#include "bigbatch/nn/row_shape.h"

namespace bigbatch::nn::kernels {

/// y[i] = GELU(x[i]) for i < count: at::gelu's bf16 result for that value. On the OpenMP threads.
void bf16_gelu(const c10::BFloat16* x, c10::BFloat16* y, int64_t count);

/// dx[i] = dy[i] * GELU'(x[i]) for i < count: the product in float32 of dy widened exactly and
/// GELU' as at::gelu_backward computes it in float32, rounded to the nearest even bf16 (NaN to the
/// quiet NaN 0x7FC0, as c10::BFloat16 does). On the OpenMP threads.
void bf16_gelu_backward(const c10::BFloat16* dy, const c10::BFloat16* x, c10::BFloat16* dx,
                        int64_t count);

/// bf16_gelu_backward of (M, C) rows, and sums (C) = the column sums of dx, bitwise
/// bf16_column_sums(dx) (nn/layer_norm_kernels.h), in one pass: a feed-forward network's
/// pre-activation gradient with its fc bias gradient. On the OpenMP threads.
void bf16_gelu_backward_with_column_sums(const c10::BFloat16* dy, const c10::BFloat16* x,
                                         c10::BFloat16* dx, RowShape shape, float* sums);

}  // namespace bigbatch::nn::kernels
