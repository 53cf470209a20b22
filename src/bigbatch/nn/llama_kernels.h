// CPU kernels of the element-wise steps of a Llama layer on float32 rows (and, for the rotary
// embeddings and SwiGLU, on the bfloat16 values of CPU autocast): RMSNorm, rotary position
// embeddings and SwiGLU, forward and backward. Each is one pass over its rows where the
// composite formula takes three to ten ATen operations (and autograd nodes), each reading and
// writing the whole activation. nn::rms_norm, nn::rotary_embedding and nn::swiglu
// (llama_ops.h) run on them.
#pragma once

#include <c10/util/BFloat16.h>

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
/// Backward: dy (B, H, T, D) -> dx (B, T, H, D), the transpose of that linear map. Products and
/// sums are float32; a bfloat16 input is widened exactly, a bfloat16 output rounded once to the
/// nearest even.
template <typename In, typename Out>
struct RotaryMap {
  const In* input = nullptr;   ///< forward: x (B, T, H, D); backward: dy (B, H, T, D)
  const float* cos = nullptr;  ///< (T, D)
  const float* sin = nullptr;  ///< (T, D)
  Out* output = nullptr;       ///< forward: y (B, H, T, D); backward: dx (B, T, H, D)
  int64_t batch = 0;
  int64_t time = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;  ///< D, even
};
/// float32 in and out.
using RotaryRows = RotaryMap<float, float>;
/// The forward map of `args` on the OpenMP threads.
void rotary_forward(const RotaryRows& args);
/// The backward map of `args` on the OpenMP threads.
void rotary_backward(const RotaryRows& args);
/// The forward map of CPU autocast's bfloat16 projections: float32 out, the dtype transformers'
/// formula promotes to with float32 cos and sin (each bf16 value widens exactly, then float32
/// products and sum).
void rotary_forward(const RotaryMap<c10::BFloat16, float>& args);
/// Its backward: a float32 dy in, dx rounded once to bfloat16.
void rotary_backward(const RotaryMap<float, c10::BFloat16>& args);
/// The forward map rounded once to bfloat16 (the values a bf16 product reading the float32
/// result would take), and its backward from a bfloat16 dy.
void rotary_forward(const RotaryMap<c10::BFloat16, c10::BFloat16>& args);
void rotary_backward(const RotaryMap<c10::BFloat16, c10::BFloat16>& args);

/// SwiGLU's forward: y = silu(gate) * up = gate * sigmoid(gate) * up, element-wise over `count`
/// values. The exponential is a polynomial one that vectorises (within 0.99 ulp of exp over
/// [-87, 88], every float checked).
void swiglu_forward(const float* gate, const float* up, float* output, int64_t count);

/// SwiGLU's backward: d_up = dy * silu(gate), d_gate = dy * up * s * (1 + gate * (1 - s)) with
/// s = sigmoid(gate), over `count` values.
void swiglu_backward(const float* grad_output, const float* gate, const float* up, float* grad_gate,
                     float* grad_up, int64_t count);

/// swiglu_forward on bfloat16 values: computed in float32, y rounded once to bfloat16 (where the
/// composite formula rounds silu(gate) first, then the product). silu(gate), and in backward its
/// slope, come from tables of every bf16 gate value, bitwise what the float32 kernels compute.
void swiglu_forward(const c10::BFloat16* gate, const c10::BFloat16* up, c10::BFloat16* output,
                    int64_t count);
/// swiglu_backward on bfloat16 values: computed in float32, each gradient rounded once.
void swiglu_backward(const c10::BFloat16* grad_output, const c10::BFloat16* gate,
                     const c10::BFloat16* up, c10::BFloat16* grad_gate, c10::BFloat16* grad_up,
                     int64_t count);

}  // namespace bigbatch::nn::kernels
