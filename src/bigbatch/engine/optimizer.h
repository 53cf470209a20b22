// Building the optimizer from options: AdamW or SGD with momentum.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

namespace bigbatch::engine {

/// Which update rule.
enum class OptimizerKind { kAdamW, kSgd };

/// Parses "adamw" | "sgd"; throws InputError naming `field` otherwise.
OptimizerKind parse_optimizer_kind(const std::string& text, const std::string& field = "optimizer");
/// The config spelling of an optimizer kind.
std::string to_string(OptimizerKind kind);

/// How AdamW's update is computed.
enum class OptimizerKernel {
  kAuto,       ///< kFused where LibTorch has the fused kernel, kPerTensor elsewhere
  kFused,      ///< FusedAdamW: each group in one fused kernel (LibTorch 2.4 and later)
  kPerTensor,  ///< LibTorch's torch::optim::AdamW, one tensor operation at a time
};

/// Parses "auto" | "fused" | "per_tensor"; throws InputError naming `field` otherwise.
OptimizerKernel parse_optimizer_kernel(const std::string& text, const std::string& field);
/// The config spelling of an optimizer kernel.
std::string to_string(OptimizerKernel kernel);
/// `kernel` with kAuto decided for this LibTorch: kFused or kPerTensor.
OptimizerKernel resolve_optimizer_kernel(OptimizerKernel kernel);

/// Optimizer settings. Weight decay applies to matrices and embeddings (tensors of two or more
/// dimensions) only, never to biases or normalisation gains, as in GPT-2 and nanoGPT.
struct OptimizerOptions {
  TORCH_ARG(OptimizerKind, kind) = OptimizerKind::kAdamW;
  /// Initial learning rate; the schedule overrides it at every step.
  TORCH_ARG(double, lr) = 4e-3;
  TORCH_ARG(double, weight_decay) = 0.1;
  /// AdamW moment decay rates.
  TORCH_ARG(double, beta1) = 0.9;
  TORCH_ARG(double, beta2) = 0.99;
  TORCH_ARG(double, eps) = 1e-8;
  /// AdamW's kernel; kFused without the fused kernel in this LibTorch is an InputError.
  TORCH_ARG(OptimizerKernel, kernel) = OptimizerKernel::kAuto;
  /// SGD momentum and Nesterov flag.
  TORCH_ARG(double, momentum) = 0.9;
  TORCH_ARG(bool, nesterov) = false;
};

/// Builds the optimizer over `module`'s parameters in two groups (decayed, not decayed; an empty
/// group is left out). Throws InputError for values out of range, naming them.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const torch::nn::Module& module,
                                                        const OptimizerOptions& options);

/// Sets the learning rate of every parameter group.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace bigbatch::engine
