#include "bigbatch/job/micro_batch_trial.h"

#include "bigbatch/core/device.h"
#include "bigbatch/core/rng_state.h"
#include "bigbatch/nn/norm.h"

namespace bigbatch::job {

int64_t trainable_parameter_bytes(const torch::nn::Module& module) {
  int64_t bytes = 0;
  // Frozen parameters (adapters' base weights) get no gradient and no state.
  for (const torch::Tensor& parameter : module.parameters()) {
    if (parameter.requires_grad())
      bytes += parameter.numel() * static_cast<int64_t>(parameter.element_size());
  }
  return bytes;
}

int64_t optimizer_state_bytes(const engine::OptimizerOptions& optimizer,
                              const torch::nn::Module& module) {
  const int64_t parameter_bytes = trainable_parameter_bytes(module);
  if (optimizer.kind() == engine::OptimizerKind::kAdamW)
    return 2 * parameter_bytes;
  return optimizer.momentum() > 0 ? parameter_bytes : 0;
}

engine::MicroBatchSearchResult search_micro_batch(const Workload& w,
                                                  const MicroBatchTrialOptions& options) {
  const c10::Device device = device_of(*w.module);
  const RngState rng = RngState::capture(device);
  // Training-mode trials move BatchNorm running statistics; they are put back afterwards.
  std::vector<torch::Tensor> buffers_before;
  for (const torch::Tensor& buffer : w.module->buffers())
    buffers_before.push_back(buffer.clone());
  const bool was_training = w.module->is_training();
  w.module->train(true);
  auto trial = [&](int64_t micro_batch) {
    // As from the second micro-batch of a window on: the gradients of the earlier ones are held
    // through the whole pass and the new ones are added to them.
    for (torch::Tensor& parameter : w.module->parameters()) {
      if (parameter.requires_grad())
        parameter.mutable_grad() = torch::zeros_like(parameter);
    }
    const data::Batch batch =
        data::to_device(w.train->get(w.train->costliest_samples(micro_batch)), device);
    if (options.concurrent_micro_batches() == 1) {
      w.objective->loss_sum(batch).backward();
    } else {
      // concurrent_micro_batches passes at once, as at worst in training: their graphs all
      // alive, the first one's backward into .grad, each other's gradients held until added
      // (engine::ConcurrentMicroBatches).
      std::vector<torch::Tensor> differentiated;
      for (const torch::Tensor& parameter : w.module->parameters()) {
        if (parameter.requires_grad())
          differentiated.push_back(parameter);
      }
      std::vector<torch::Tensor> losses;
      for (int64_t pass = 0; pass < options.concurrent_micro_batches(); ++pass)
        losses.push_back(w.objective->loss_sum(batch));
      losses.front().backward();
      std::vector<std::vector<torch::Tensor>> held;
      for (size_t pass = 1; pass < losses.size(); ++pass) {
        held.push_back(
            torch::autograd::grad({losses[pass]}, differentiated, {}, false, false, true));
      }
    }
    for (torch::Tensor& parameter : w.module->parameters())
      parameter.mutable_grad().reset();
  };
  engine::MicroBatchSearchResult found =
      engine::find_micro_batch(trial, engine::MicroBatchSearchOptions()
                                          .global_batch(options.global_batch())
                                          .budget_bytes(options.budget_bytes())
                                          .reserved_bytes(options.reserved_bytes())
                                          .device(device));
  w.module->train(was_training);
  {
    torch::NoGradGuard no_grad;
    const std::vector<torch::Tensor> buffers = w.module->buffers();
    for (size_t i = 0; i < buffers.size(); ++i)
      buffers[i].copy_(buffers_before[i]);
  }
  nn::discard_window(*w.module);
  rng.restore();
  return found;
}

engine::Plan even_plan(engine::BatchOptions batch, int64_t largest_micro_batch) {
  const int64_t per_rank = batch.global_batch() / std::max<int64_t>(1, batch.world_size());
  const int64_t passes = (per_rank + largest_micro_batch - 1) / largest_micro_batch;
  batch.accum_steps(0);
  return engine::resolve_plan(batch.micro_batch((per_rank + passes - 1) / passes));
}

}  // namespace bigbatch::job
