// A Linear under CPU bf16 autocast on the native bf16 kernels (oneDNN; CPUs with avx512_bf16 or
// AMX), as one autograd node that does what autocast and autograd do with fewer passes over
// memory: each float32 weight cast to bf16 once per accumulation window (nn/weight_copies)
// instead of once per micro-batch; a float32 input read by several products (a Llama's q, k and
// v, or gate and up) cast once; bf16 weight gradients added into the float32 .grad in one pass
// inside a backward() into .grad (nn/direct_weight_grads). The products, their operands and
// their roundings are autocast's.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace bigbatch::nn {

/// Whether native_bf16_linear takes these operands: block_kernel() not kComposite, CPU autocast
/// on, to bf16, with bf16_matmul() kNative; CPU tensors, a 2-D float32 or bf16 weight, an input of
/// at least 2 dimensions and a bias (undefined: none) in float32 or bf16.
bool native_bf16_linear_applies(const torch::Tensor& input, const torch::Tensor& weight,
                                const torch::Tensor& bias);

/// input W^T + bias as autocast computes it: input, weight and bias rounded to bf16, one bf16
/// product (its bias inside the product), a bf16 result. Backward returns the input's gradient
/// in its dtype (rounded to bf16 first, as autograd through autocast's cast does), the weight's
/// as the bf16 product grad^T input widened to the weight's dtype (or added to .grad itself,
/// above), and the bias's as the bf16 column sums of grad, widened. No second derivative:
/// a backward with create_graph throws. It is native_bf16_linears' node with one weight.
/// input (..., in), weight (out, in), bias (out) -> (..., out) in bf16
torch::Tensor native_bf16_linear(const torch::Tensor& input, const torch::Tensor& weight,
                                 const torch::Tensor& bias);

/// Whether native_bf16_linears takes these operands: at least one weight, a bias for each weight
/// or none (`biases` empty), and native_bf16_linear_applies to the input with each weight.
bool native_bf16_linears_apply(const torch::Tensor& input,
                               const std::vector<torch::Tensor>& weights,
                               const std::vector<torch::Tensor>& biases);

/// native_bf16_linear of one input with each of several weights (a Llama's q, k and v, or gate
/// and up), as one autograd node: the same products, roundings and results. Its backward gives
/// what autograd gives for separate nodes, bitwise, with fewer passes: the input's gradient is the
/// products' input gradients summed in float32 in one pass (in the order autograd sums them, the
/// last output's first) instead of a float32 copy of each and an add per product, and a transposed
/// copy of the input that the weight gradients read is made once. Outputs whose gradient is
/// undefined add nothing. No second derivative.
/// input (..., in), weights (out_j, in), biases (out_j) each or none -> (..., out_j) in bf16 each
std::vector<torch::Tensor> native_bf16_linears(const torch::Tensor& input,
                                               const std::vector<torch::Tensor>& weights,
                                               const std::vector<torch::Tensor>& biases);

}  // namespace bigbatch::nn
