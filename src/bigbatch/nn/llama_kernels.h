// CPU kernels of the element-wise steps of a Llama layer on float32 rows: RMSNorm, rotary
// position embeddings and SwiGLU, forward and backward. Each is one pass over its rows where the
// composite formula takes three to ten ATen operations (and autograd nodes), each reading and
// writing the whole activation. nn::rms_norm, nn::rotary_embedding and nn::swiglu
// (llama_ops.h) run on them.
#pragma once

#include <cstdint>

#include "bigbatch/nn/row_shape.h"

namespace bigbatch::nn::kernels {

/// RMSNorm's forward over the rows of x (M, C): rstd = 1 / sqrt(mean(x^2) + eps) per row, then
/// y = weight * (x * rstd), rounded as LlamaRMSNorm's float32 steps round.
struct RmsNormRows {
  const float* input = nullptr;   ///< x (M, C)
  const float* weight = nullptr;  ///< (C)
  float* output = nullptr;        ///< y (M, C)
  float* rstd = nullptr;          ///< (M), kept for backward
  RowShape shape;
  float eps = 1e-6f;
};
/// Runs `args` over its rows on the OpenMP threads.
void rms_norm_rows(const RmsNormRows& args);

/// RMSNorm's backward: with n = x * rstd and dn = dy * weight,
/// dx = rstd * (dn - n * mean(dn * n)) per row, and d_weight = the column sums of dy * n.
struct RmsNormBackwardRows {
  const float* grad_output = nullptr;  ///< dy (M, C)
  const float* input = nullptr;        ///< x (M, C)
  const float* weight = nullptr;       ///< (C)
  const float* rstd = nullptr;         ///< (M), from the forward
  float* grad_input = nullptr;         ///< dx (M, C), or nullptr for none
  /// d_weight (C), or nullptr for none: summed per chunk of rows in float, the chunks in order
  /// in double, so the result does not depend on the thread count.
  float* grad_weight = nullptr;
  RowShape shape;
};
/// Runs `args` over its rows on the OpenMP threads.
void rms_norm_backward_rows(const RmsNormBackwardRows& args);

/// Rotary position embeddings (RoPE, the rotate-half form of transformers' Llama) with the
/// heads' transpose folded in. Forward: x (B, T, H, D) -> y (B, H, T, D) with
/// y = x * cos + rotate_half(x) * sin, rotate_half(x) = (-x[D/2:], x[:D/2]) and cos, sin (T, D).
/// Backward: dy (B, H, T, D) -> dx (B, T, H, D), the transpose of that linear map.
struct RotaryRows {
  const float* input = nullptr;  ///< forward: x (B, T, H, D); backward: dy (B, H, T, D)
  const float* cos = nullptr;    ///< (T, D)
  const float* sin = nullptr;    ///< (T, D)
  float* output = nullptr;       ///< forward: y (B, H, T, D); backward: dx (B, T, H, D)
  int64_t batch = 0;
  int64_t time = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;  ///< D, even
};
/// The forward map of `args` on the OpenMP threads.
void rotary_forward(const RotaryRows& args);
/// The backward map of `args` on the OpenMP threads.
void rotary_backward(const RotaryRows& args);

/// SwiGLU's forward: y = silu(gate) * up = gate * sigmoid(gate) * up, element-wise over `count`
/// values. The exponential is a polynomial one that vectorises (within 0.99 ulp of exp over
/// [-87, 88], every float checked).
void swiglu_forward(const float* gate, const float* up, float* output, int64_t count);

/// SwiGLU's backward: d_up = dy * silu(gate), d_gate = dy * up * s * (1 + gate * (1 - s)) with
/// s = sigmoid(gate), over `count` values.
void swiglu_backward(const float* grad_output, const float* gate, const float* up, float* grad_gate,
                     float* grad_up, int64_t count);

}  // namespace bigbatch::nn::kernels
