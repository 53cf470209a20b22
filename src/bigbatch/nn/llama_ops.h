// The element-wise steps of a Llama layer (transformers' LlamaRMSNorm, apply_rotary_pos_emb,
// LlamaMLP's act_fn(gate) * up and the residual adds) as functions that run one autograd node
// each on the CPU kernels of llama_kernels.h for float32 CPU tensors (and bfloat16 ones for the
// rotary embeddings, SwiGLU and the residual adds' branches, as CPU autocast makes them), and the
// composite formula (one ATen operation and autograd node per step) everywhere else: float64, a
// GPU, or model.block_kernel = "composite" (nn::BlockKernel::kComposite). The fused nodes have no
// second derivative: a backward with create_graph through them throws, naming the way out.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <initializer_list>

namespace bigbatch::nn {

/// Whether the Llama steps on `tensors` run fused: every one is a float32 CPU tensor and
/// block_kernel() is not kComposite.
bool use_fused_llama_ops(std::initializer_list<const torch::Tensor*> tensors);

/// RMSNorm as LlamaRMSNorm computes it: in float32, x * rsqrt(mean(x^2) + eps) over the last
/// dimension, cast back to x's dtype, then times `weight`.
/// x (..., C), weight (C) -> (..., C)
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

/// Rotary position embeddings on a projection's output, in transformers' rotate-half form:
/// the heads split off and moved before time, then y = x * cos + rotate_half(x) * sin.
/// cos and sin take no gradient (they are functions of the positions). Fused for x float32 or
/// bfloat16 with float32 cos and sin: y is float32, the dtype the formula promotes to, within
/// float32 rounding; x's gradient is rounded to bfloat16 once (the formula rounds each of its two
/// terms). With `rounded` and a bfloat16 x, y is that result rounded once to bfloat16, the
/// values a bf16 product reading it takes (CPU autocast's attention rounds its queries and keys
/// so), without a float32 copy between; its gradient then comes in bfloat16.
/// x (B, T, H*D), cos and sin (T, D) -> (B, H, T, D)
torch::Tensor rotary_embedding(const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, int64_t heads, bool rounded = false);

/// residual + branch, a layer's float32 residual stream plus its attention's or MLP's output as
/// at::add computes it (in the promoted dtype). Fused for a contiguous float32 residual and a
/// bfloat16 branch of its sizes (CPU autocast's products): one pass, the bf16 values widened as
/// they are added, bitwise at::add's sums; the branch's gradient is the residual's rounded to
/// bfloat16, as autograd rounds it.
/// residual (...), branch (the same sizes) -> (...)
torch::Tensor residual_add(const torch::Tensor& residual, const torch::Tensor& branch);

/// SwiGLU, LlamaMLP's gating: silu(gate) * up, element-wise. Fused for both float32 or both
/// bfloat16; in bfloat16 it computes in float32 and rounds the result (and each gradient) once,
/// where the formula rounds silu(gate) first.
/// gate (...), up (the same sizes) -> (...)
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace bigbatch::nn
