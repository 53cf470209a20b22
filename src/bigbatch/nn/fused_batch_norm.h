// Training-mode batch normalisation, residual add and ReLU as one autograd node on the CPU: the
// norm, add and ReLU of a ResNet block read and write their activations once each way, and the
// batch statistics come back for nn::BatchNorm's running statistics without another pass.
// nn::BatchNorm::forward_with() runs it; measured in docs/BENCHMARKS.md.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "bigbatch/nn/precision.h"

namespace bigbatch::nn {

/// What follows a batch normalisation in the same step: y = norm(x) (+ residual), then ReLU.
struct BatchNormEpilogue {
  /// Added to the normalised input when defined: the input's sizes.
  torch::Tensor residual;
  /// Whether max(y, 0) follows (after the residual).
  bool relu = false;
};

/// fused_batch_norm_train()'s output and the batch statistics it normalised with.
struct FusedBatchNorm {
  torch::Tensor output;  ///< the input's sizes, dtype and memory format
  torch::Tensor mean;    ///< (C) float64: the batch mean per channel
  torch::Tensor m2;      ///< (C) float64: the sum of squared deviations from it per channel
  int64_t count = 0;     ///< values per channel: B (x H x W)
};

/// Whether fused_batch_norm_train() runs on these tensors: a CPU float32 or bfloat16 input (B, C)
/// contiguous or (B, C, H, W) channels-last contiguous, with at least two values per channel;
/// weight and bias CPU float32 (C); a residual undefined or of the input's dtype, sizes and
/// strides. A bfloat16 input is what a convolution under CPU autocast hands on.
bool fused_batch_norm_supported(const torch::Tensor& input, const torch::Tensor& weight,
                                const torch::Tensor& bias, const BatchNormEpilogue& epilogue);

/// Whether the training BatchNorms of a model with float32 parameters on `device`, its forward
/// passes in `precision`, see inputs of a dtype fused_batch_norm_supported() takes: the CPU in
/// fp32, or under bf16 autocast (a convolution then hands on bfloat16). Where it holds, their
/// running-statistics writes can be deferred (what concurrent passes need).
bool fused_batch_norm_covers(Precision precision, c10::DeviceType device);

/// Training-mode batch normalisation followed by `epilogue`, as one autograd node:
///   y = x_hat * weight + bias (+ residual), then max(y, 0) when epilogue.relu,
///   x_hat = (x - mean) / sqrt(var + eps),
/// mean and biased var per channel over the batch (and space), as torch::batch_norm in training
/// computes them, within float rounding. A bfloat16 input gives a bfloat16 output and input and
/// residual gradients, each rounded once from float32 arithmetic (LibTorch's batch_norm, add and
/// relu round after each); the statistics and the weight and bias gradients are float32 or wider
/// either way. Gradients flow to the input, weight, bias and residual
/// (through the statistics too). Saved for backward: the input, and the output when there is a
/// ReLU. A backward with create_graph throws: there is no second derivative (nn::BatchNorm's
/// forward() has one). Throws std::logic_error unless fused_batch_norm_supported().
/// input (B, C[, H, W]), weight (C), bias (C) -> output like input; mean, m2 (C)
FusedBatchNorm fused_batch_norm_train(const torch::Tensor& input, const torch::Tensor& weight,
                                      const torch::Tensor& bias, double eps,
                                      const BatchNormEpilogue& epilogue);

}  // namespace bigbatch::nn
