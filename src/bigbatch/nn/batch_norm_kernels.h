// CPU kernels of training-mode batch normalisation on rows: the (M, C) matrix whose rows are the
// positions of a (B, C) or channels-last (B, C, H, W) tensor, of float32 or bfloat16 values (the
// statistics and the arithmetic in float32 or wider either way). Each kernel is one pass over its
// rows, with the residual add and ReLU that follow a ResNet's norms folded in, so a norm, an add
// and a ReLU read and write their activations once each way instead of once per operation.
// nn::fused_batch_norm_train (fused_batch_norm.h) runs on them. T is float or c10::BFloat16.
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>

#include "bigbatch/nn/row_shape.h"

namespace bigbatch::nn::kernels {

/// Per-channel batch moments of x (M, C): `mean` (C) and `m2` (C), the sum of squared
/// deviations from the mean, both in double. Chunks of rows are reduced in float with two passes
/// (mean, then squared deviations from it, from cache) and merged in double with Chan et al.'s
/// pairwise rule, so no sum of squares cancels. Deterministic for a given OpenMP thread count.
template <typename T>
void channel_moments(const T* x, RowShape shape, double* mean, double* m2);

/// The forward pass after the statistics: y = x * scale + shift (+ residual), then max(y, 0)
/// when `relu`, per channel, in float and rounded to T once.
template <typename T>
struct NormalizeRows {
  const T* input = nullptr;      ///< x (M, C)
  const T* residual = nullptr;   ///< (M, C), or nullptr for none
  const float* scale = nullptr;  ///< (C): weight * invstd
  const float* shift = nullptr;  ///< (C): bias - mean * scale
  T* output = nullptr;           ///< y (M, C)
  RowShape shape;
  bool relu = false;
};
/// Runs `args` over its rows on the OpenMP threads.
template <typename T>
void normalize_rows(const NormalizeRows<T>& args);

/// What the backward pass reads. g is the gradient reaching the normalisation: grad_output, zero
/// where the ReLU's output is not positive (when `output` is given).
template <typename T>
struct BackwardRows {
  const T* grad_output = nullptr;  ///< dL/dy (M, C)
  const T* output = nullptr;       ///< y (M, C) for the ReLU's mask, or nullptr: no ReLU
  const T* input = nullptr;        ///< x (M, C)
  const float* mean = nullptr;     ///< (C): the batch mean the forward used
  RowShape shape;
};

/// Per-channel sums of the backward pass: `sum_g` (C) = sum of g, `sum_gx` (C) = sum of
/// g * (x - mean), in double. Writes g itself to `g_out` (M, C) unless it is nullptr (the
/// residual's gradient; exact in T, since g is a value of grad_output or zero).
template <typename T>
void backward_sums(const BackwardRows<T>& args, double* sum_g, double* sum_gx, T* g_out);

/// dx = p * g - q * x + r per channel (p, q, r each (C)): batch normalisation's input gradient,
/// with g read from `g` (M, C) when given (backward_sums wrote it) or formed from the
/// gradient and mask of `args` otherwise. Writes `grad_input` (M, C), rounded to T once.
template <typename T>
struct InputGradient {
  const float* p = nullptr;  ///< (C)
  const float* q = nullptr;  ///< (C)
  const float* r = nullptr;  ///< (C)
  const T* g = nullptr;      ///< (M, C), or nullptr
  T* grad_input = nullptr;
};
/// Runs the input gradient of `args` over its rows on the OpenMP threads.
template <typename T>
void input_gradient(const BackwardRows<T>& args, const InputGradient<T>& gradient);

}  // namespace bigbatch::nn::kernels
