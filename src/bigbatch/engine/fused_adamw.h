// AdamW whose step updates every parameter of a group in one fused kernel.
#pragma once

#include <torch/torch.h>

namespace bigbatch::engine {

/// torch::optim::AdamW with a step that runs at::_fused_adamw_ (LibTorch 2.4 and later) over the
/// parameters of each group at once: one pass over each parameter, its gradient and both moments,
/// where LibTorch's AdamW makes about ten, one tensor operation at a time. The update is the same
/// up to the rounding of its last bit, and so is the state (AdamWParamState, keyed as AdamW keys
/// it), so a checkpoint of either loads into the other. AMSGrad is not supported.
///
///   FusedAdamW optimizer(groups, torch::optim::AdamWOptions(lr));
///   loss.backward();
///   optimizer.step();  // parameters without a gradient are left alone, as by AdamW
class FusedAdamW : public torch::optim::AdamW {
 public:
  /// Throws InputError where this LibTorch has no fused kernel (compat::kHasFusedAdamW) or a
  /// group asks for AMSGrad.
  FusedAdamW(std::vector<torch::optim::OptimizerParamGroup> param_groups,
             torch::optim::AdamWOptions defaults);

  /// One AdamW step of every parameter that has a gradient. A closure, if given, is evaluated
  /// first with gradients enabled and its loss returned.
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace bigbatch::engine
