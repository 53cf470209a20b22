#include "bigbatch/engine/optimizer.h"

#include <cmath>

#include "bigbatch/core/check.h"
#include "bigbatch/core/torch_compat.h"
#include "bigbatch/engine/fused_adamw.h"

namespace bigbatch::engine {

OptimizerKind parse_optimizer_kind(const std::string& text, const std::string& field) {
  if (text == "adamw")
    return OptimizerKind::kAdamW;
  if (text == "sgd")
    return OptimizerKind::kSgd;
  throw InputError(
      cat(field, " = \"", text, "\" is not an optimizer; expected \"adamw\" or \"sgd\""));
}

std::string to_string(OptimizerKind kind) {
  return kind == OptimizerKind::kAdamW ? "adamw" : "sgd";
}

OptimizerKernel parse_optimizer_kernel(const std::string& text, const std::string& field) {
  if (text == "auto")
    return OptimizerKernel::kAuto;
  if (text == "fused")
    return OptimizerKernel::kFused;
  if (text == "per_tensor")
    return OptimizerKernel::kPerTensor;
  throw InputError(
      cat(field, " must be \"auto\", \"fused\" or \"per_tensor\", got \"", text, "\""));
}

std::string to_string(OptimizerKernel kernel) {
  switch (kernel) {
    case OptimizerKernel::kAuto:
      return "auto";
    case OptimizerKernel::kFused:
      return "fused";
    case OptimizerKernel::kPerTensor:
      return "per_tensor";
  }
  return "?";
}

OptimizerKernel resolve_optimizer_kernel(OptimizerKernel kernel) {
  if (kernel != OptimizerKernel::kAuto)
    return kernel;
  return compat::kHasFusedAdamW ? OptimizerKernel::kFused : OptimizerKernel::kPerTensor;
}

namespace {

void check_options(const OptimizerOptions& o) {
  BB_CHECK_INPUT(std::isfinite(o.lr()) && o.lr() > 0, "OptimizerOptions.lr = ", o.lr(),
                 " must be positive");
  BB_CHECK_INPUT(o.weight_decay() >= 0, "OptimizerOptions.weight_decay = ", o.weight_decay(),
                 " must be >= 0");
  BB_CHECK_INPUT(o.beta1() >= 0 && o.beta1() < 1, "OptimizerOptions.beta1 = ", o.beta1(),
                 " must be in [0, 1)");
  BB_CHECK_INPUT(o.beta2() >= 0 && o.beta2() < 1, "OptimizerOptions.beta2 = ", o.beta2(),
                 " must be in [0, 1)");
  BB_CHECK_INPUT(o.eps() > 0, "OptimizerOptions.eps = ", o.eps(), " must be positive");
  BB_CHECK_INPUT(o.momentum() >= 0 && o.momentum() < 1,
                 "OptimizerOptions.momentum = ", o.momentum(), " must be in [0, 1)");
  BB_CHECK_INPUT(!o.nesterov() || o.momentum() > 0,
                 "OptimizerOptions.nesterov = true needs OptimizerOptions.momentum > 0, got ",
                 o.momentum());
}

template <typename GroupOptions>
std::vector<torch::optim::OptimizerParamGroup> split_by_decay(const torch::nn::Module& module,
                                                              const GroupOptions& decayed) {
  std::vector<torch::Tensor> decay;
  std::vector<torch::Tensor> no_decay;
  for (const torch::Tensor& parameter : module.parameters()) {
    if (!parameter.requires_grad())
      continue;
    (parameter.dim() >= 2 ? decay : no_decay).push_back(parameter);
  }
  GroupOptions undecayed = decayed;
  undecayed.weight_decay(0.0);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decay.empty())
    groups.emplace_back(decay, std::make_unique<GroupOptions>(decayed));
  if (!no_decay.empty())
    groups.emplace_back(no_decay, std::make_unique<GroupOptions>(undecayed));
  BB_CHECK_INPUT(!groups.empty(), "the model has no trainable parameters");
  return groups;
}

}  // namespace

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const torch::nn::Module& module,
                                                        const OptimizerOptions& options) {
  check_options(options);
  if (options.kind() == OptimizerKind::kAdamW) {
    auto group = torch::optim::AdamWOptions(options.lr())
                     .betas({options.beta1(), options.beta2()})
                     .eps(options.eps())
                     .weight_decay(options.weight_decay());
    if (resolve_optimizer_kernel(options.kernel()) == OptimizerKernel::kFused)
      return std::make_unique<FusedAdamW>(split_by_decay(module, group), group);
    return std::make_unique<torch::optim::AdamW>(split_by_decay(module, group), group);
  }
  auto group = torch::optim::SGDOptions(options.lr())
                   .momentum(options.momentum())
                   .nesterov(options.nesterov())
                   .weight_decay(options.weight_decay());
  return std::make_unique<torch::optim::SGD>(split_by_decay(module, group), group);
}

void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups())
    group.options().set_lr(lr);
}

}  // namespace bigbatch::engine
