// What the trainer minimises: a model's forward pass and a summed loss with its counts.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>

#include "bigbatch/data/dataset.h"
#include "bigbatch/engine/accumulator.h"
#include "bigbatch/nn/precision.h"

namespace bigbatch::engine {

/// Adapts a module holder (models::Gpt, models::Mlp, any TORCH_MODULE with forward(Tensor)) into
/// the forward callable an objective takes; the callable shares the module.
template <typename ModuleHolder>
std::function<torch::Tensor(const torch::Tensor&)> forward_of(ModuleHolder model) {
  return [model](const torch::Tensor& inputs) mutable { return model->forward(inputs); };
}

/// What an evaluation pass over one batch yields.
struct EvalSums {
  torch::Tensor loss_sum;  ///< scalar: the loss summed over the batch's counted units
  /// Counted units whose prediction (the arg-max of the logits) equals the target; -1 when the
  /// objective has no notion of a correct prediction.
  int64_t correct = -1;
};

/// A training objective over batches. The trainer counts every micro-batch of a window before
/// the first forward pass, so it can normalise each micro-batch by the whole window.
class Objective {
 public:
  virtual ~Objective() = default;
  /// The unit the loss is averaged over.
  virtual LossUnit unit() const = 0;
  /// What `batch` holds, from its targets alone (no forward pass).
  virtual Counts count(const data::Batch& batch) const = 0;
  /// Forward pass and the loss summed over the batch's counted units: a scalar tensor.
  virtual torch::Tensor loss_sum(const data::Batch& batch) = 0;
  /// For evaluation (no gradients needed): the loss sum and, where it means something, the
  /// number of correct predictions, from one forward pass. The default has no accuracy.
  virtual EvalSums evaluate(const data::Batch& batch) { return {loss_sum(batch), -1}; }
};

/// Cross-entropy of logits against integer targets. Targets (B) are one class per sample
/// (unit kSample); targets (B, T) are one per token (unit kToken), and tokens equal to
/// `ignore_index` (padding) count nowhere.
class CrossEntropyObjective : public Objective {
 public:
  /// `forward` maps inputs (B, ...) to logits (B, [T,] V).
  CrossEntropyObjective(std::function<torch::Tensor(const torch::Tensor&)> forward, LossUnit unit,
                        int64_t ignore_index = -100);

  LossUnit unit() const override { return unit_; }
  Counts count(const data::Batch& batch) const override;
  torch::Tensor loss_sum(const data::Batch& batch) override;
  /// Also counts the units (samples or non-padding tokens) whose arg-max logit is the target.
  EvalSums evaluate(const data::Batch& batch) override;

 private:
  /// The summed loss of `logits` (B, [T,] V) against the batch's targets.
  torch::Tensor loss_of(const torch::Tensor& logits, const data::Batch& batch) const;

  std::function<torch::Tensor(const torch::Tensor&)> forward_;
  LossUnit unit_;
  int64_t ignore_index_;
};

/// Mixed precision for any objective: runs the inner objective's forward pass and loss under
/// autocast (nn::AutocastGuard) and returns the loss in float32, so that backward, accumulation
/// and reporting see a float32 loss while Linear/matmul compute in `precision`. The guard is left
/// before loss_sum returns: backward and the optimizer never run under autocast. kFp32 passes
/// straight through.
class AutocastObjective : public Objective {
 public:
  /// Throws InputError when `precision` cannot autocast `device_type` (fp16 on CPU).
  AutocastObjective(std::unique_ptr<Objective> inner, nn::Precision precision,
                    torch::DeviceType device_type = torch::kCPU);

  LossUnit unit() const override { return inner_->unit(); }
  Counts count(const data::Batch& batch) const override { return inner_->count(batch); }
  torch::Tensor loss_sum(const data::Batch& batch) override;
  EvalSums evaluate(const data::Batch& batch) override;
  /// The precision forward passes run in.
  nn::Precision precision() const { return precision_; }

 private:
  std::unique_ptr<Objective> inner_;
  nn::Precision precision_;
  torch::DeviceType device_type_;
};

}  // namespace bigbatch::engine
