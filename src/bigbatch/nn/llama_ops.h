// The element-wise steps of a Llama layer (transformers' LlamaRMSNorm, apply_rotary_pos_emb and
// LlamaMLP's act_fn(gate) * up) as functions that run one autograd node each on the CPU kernels
// of llama_kernels.h for float32 CPU tensors, and the composite formula (one ATen operation and
// autograd node per step) everywhere else: float64, bf16 under autocast, a GPU, or
// model.block_kernel = "composite" (nn::BlockKernel::kComposite). The fused nodes have no
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
/// cos and sin take no gradient (they are functions of the positions).
/// x (B, T, H*D), cos and sin (T, D) -> (B, H, T, D)
torch::Tensor rotary_embedding(const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, int64_t heads);

/// SwiGLU, LlamaMLP's gating: silu(gate) * up, element-wise.
/// gate (...), up (the same sizes) -> (...)
torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace bigbatch::nn
