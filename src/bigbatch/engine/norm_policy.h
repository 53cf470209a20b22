// How BatchNorm meets gradient accumulation: the policy, its window hooks and the start notice.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "bigbatch/engine/plan.h"
#include "bigbatch/engine/trainer.h"

namespace bigbatch::engine {

/// What to do about BatchNorm layers when a window has several micro-batches.
enum class NormPolicy {
  /// Leave BatchNorm alone: it normalises over each micro-batch and updates its running
  /// statistics once per micro-batch (what PyTorch does under accumulation).
  kKeep,
  /// Replace BatchNorm by GroupNorm, which has no batch statistics (the model is built so; the
  /// parameter count is unchanged).
  kGroup,
  /// Ghost batch norm: normalise over each micro-batch (a ghost batch), but gather running
  /// statistics over the whole window and update them once per optimizer step
  /// (nn::RunningStatsMode::kPerWindow with BatchNormWindowHooks).
  kGhost,
};

/// Reads "keep", "group" or "ghost"; anything else throws InputError naming `field`.
NormPolicy parse_norm_policy(const std::string& text, const std::string& field);
/// The config spelling.
std::string to_string(NormPolicy policy);

/// Keeps the per-window running statistics of every nn::BatchNorm in a model in step with the
/// window: dropped when a window (re)starts or is skipped, committed once when it steps. Use with
/// nn::set_running_stats_mode(model, nn::RunningStatsMode::kPerWindow).
class BatchNormWindowHooks : public WindowHooks {
 public:
  /// `model` must outlive the hooks.
  explicit BatchNormWindowHooks(torch::nn::Module& model) : model_(model) {}
  void on_window_begin() override;
  void on_window_end(bool stepped) override;

 private:
  torch::nn::Module& model_;
};

/// What the user should know at the start about `batch_norms` BatchNorm layers under `plan` and
/// `policy`; empty when there is nothing to say (no BatchNorm).
std::string batch_norm_notice(int64_t batch_norms, const Plan& plan, NormPolicy policy);

}  // namespace bigbatch::engine
