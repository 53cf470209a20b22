#include "bigbatch/engine/fused_adamw.h"

#include <map>
#include <memory>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/core/torch_compat.h"

namespace bigbatch::engine {
namespace {

using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

/// The tensors of one fused call: parameters of one dtype and device, with their state.
struct FusedBatch {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
  /// One float32 scalar per distinct step count, on the parameters' device, that `steps` repeats.
  std::map<int64_t, torch::Tensor> step_tensors;
};

/// `t` with the memory layout of `p` (a copy where the strides differ): the fused kernel walks
/// the parameter, its gradient and its moments as flat arrays, so their layouts must be the same.
torch::Tensor in_layout_of(const torch::Tensor& t, const torch::Tensor& p) {
  return t.strides() == p.strides() ? t : torch::empty_like(p).copy_(t);
}

}  // namespace

FusedAdamW::FusedAdamW(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                       AdamWOptions defaults)
    : torch::optim::AdamW(std::move(param_groups), std::move(defaults)) {
  BB_CHECK_INPUT(compat::kHasFusedAdamW,
                 "OptimizerOptions.kernel = fused needs LibTorch 2.4 or later; this is ",
                 TORCH_VERSION);
  for (const auto& group : param_groups_) {
    BB_CHECK_INPUT(!static_cast<const AdamWOptions&>(group.options()).amsgrad(),
                   "the fused AdamW has no AMSGrad; use OptimizerOptions.kernel = per_tensor");
  }
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    const torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const AdamWOptions&>(group.options());
    std::map<std::string, FusedBatch> batches;  // by dtype and device
    for (const torch::Tensor& p : group.params()) {
      if (!p.grad().defined())
        continue;
      BB_CHECK(!p.grad().is_sparse(), "the fused AdamW does not support sparse gradients");
      BB_CHECK(p.is_non_overlapping_and_dense(),
               "the fused AdamW needs parameters without gaps or overlaps, got one of sizes ",
               p.sizes(), " and strides ", p.strides());
      auto found = compat::find_optimizer_state(state_, p.unsafeGetTensorImpl());
      if (found == state_.end()) {
        auto fresh = std::make_unique<AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        found = state_
                    .emplace(compat::optimizer_state_key(state_, p.unsafeGetTensorImpl()),
                             std::move(fresh))
                    .first;
      }
      auto& state = static_cast<AdamWParamState&>(*found->second);
      state.step(state.step() + 1);
      state.exp_avg(in_layout_of(state.exp_avg(), p));  // a loaded checkpoint's may differ
      state.exp_avg_sq(in_layout_of(state.exp_avg_sq(), p));
      FusedBatch& batch = batches[cat(p.scalar_type(), "@", p.device())];
      torch::Tensor& step = batch.step_tensors[state.step()];
      if (!step.defined())
        step = torch::full({}, static_cast<double>(state.step()),
                           torch::TensorOptions().dtype(torch::kFloat).device(p.device()));
      batch.params.push_back(p);
      batch.grads.push_back(in_layout_of(p.grad(), p));
      batch.exp_avgs.push_back(state.exp_avg());
      batch.exp_avg_sqs.push_back(state.exp_avg_sq());
      batch.steps.push_back(step);
    }
    for (auto& [_, batch] : batches) {
      compat::fused_adamw_(batch.params, batch.grads, batch.exp_avgs, batch.exp_avg_sqs,
                           batch.steps, options.lr(), std::get<0>(options.betas()),
                           std::get<1>(options.betas()), options.weight_decay(), options.eps());
    }
  }
  return loss;
}

}  // namespace bigbatch::engine
