// A Linear as one autograd node, with or without a bias: the pair of Functions every custom
// Linear of nn/ needs, since LibTorch 1.13's Function::apply takes no undefined tensors.
#pragma once

#include <torch/torch.h>

namespace bigbatch::nn {

/// Computes a Linear's output (bias undefined for none), saving what its backward needs in ctx.
using LinearForward = torch::Tensor (*)(torch::autograd::AutogradContext* ctx,
                                        const torch::Tensor& input, const torch::Tensor& weight,
                                        const torch::Tensor& bias);
/// Its gradients {input, weight, bias}; the bias's is ignored where `with_bias` is false.
using LinearBackward =
    torch::autograd::variable_list (*)(torch::autograd::AutogradContext* ctx,
                                       const torch::autograd::variable_list& grads, bool with_bias);

/// The node of apply_linear with a bias.
template <LinearForward Forward, LinearBackward Backward>
struct LinearWithBias : torch::autograd::Function<LinearWithBias<Forward, Backward>> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight, const torch::Tensor& bias) {
    return Forward(ctx, input, weight, bias);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return Backward(ctx, grads, /*with_bias=*/true);
  }
};

/// The node of apply_linear without a bias.
template <LinearForward Forward, LinearBackward Backward>
struct LinearNoBias : torch::autograd::Function<LinearNoBias<Forward, Backward>> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& weight) {
    return Forward(ctx, input, weight, torch::Tensor());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    torch::autograd::variable_list result = Backward(ctx, grads, /*with_bias=*/false);
    result.resize(2);
    return result;
  }
};

/// input W^T + bias (bias may be undefined) as one autograd node running Forward and Backward.
template <LinearForward Forward, LinearBackward Backward>
torch::Tensor apply_linear(const torch::Tensor& input, const torch::Tensor& weight,
                           const torch::Tensor& bias) {
  return bias.defined() ? LinearWithBias<Forward, Backward>::apply(input, weight, bias)
                        : LinearNoBias<Forward, Backward>::apply(input, weight);
}

}  // namespace bigbatch::nn
