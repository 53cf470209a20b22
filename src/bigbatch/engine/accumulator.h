// The heart of bigbatch: exact gradient accumulation over a window of micro-batches.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "bigbatch/engine/lr_schedule.h"

namespace bigbatch::engine {

/// What a loss is averaged over.
enum class LossUnit {
  kSample,  ///< one loss value per sample (classification, regression, an n-gram MLP)
  kToken,   ///< one loss value per real (non-ignored) token of a sequence
};

/// How much a batch (or a window) holds.
struct Counts {
  int64_t samples = 0;  ///< samples (rows of the batch)
  int64_t tokens = 0;   ///< loss terms that count: non-ignored tokens; equals samples for kSample

  /// The count that normalises a loss of the given unit.
  int64_t units(LossUnit unit) const { return unit == LossUnit::kToken ? tokens : samples; }
  Counts& operator+=(const Counts& other) {
    samples += other.samples;
    tokens += other.tokens;
    return *this;
  }
  bool operator==(const Counts& other) const {
    return samples == other.samples && tokens == other.tokens;
  }
};

/// The one rule of exact accumulation. A micro-batch's *summed* loss enters the backward pass
/// divided by the units of the whole window, so the window gradient is the gradient of the
/// window's mean loss whatever the split: equal or uneven micro-batches, a short last window,
/// micro-batches with different numbers of padding tokens.
///     micro_loss_for_backward = micro_loss_sum / window_units
inline torch::Tensor window_normalised_loss(const torch::Tensor& micro_loss_sum,
                                            int64_t window_units) {
  return micro_loss_sum / static_cast<double>(window_units);
}

/// Accumulator settings.
struct AccumulatorOptions {
  /// The unit the loss is averaged over.
  TORCH_ARG(LossUnit, unit) = LossUnit::kSample;
  /// Clip the window gradient to this global L2 norm at the boundary; 0 disables clipping.
  TORCH_ARG(double, max_grad_norm) = 0.0;
};

/// What one optimizer step (one window) did.
struct WindowResult {
  int64_t step = 0;           ///< optimizer steps taken, this one included (1-based)
  double mean_loss = 0.0;     ///< the window's true mean loss: sum of losses / window units
  Counts counts;              ///< samples and tokens in the window
  int64_t micro_batches = 0;  ///< backward passes in the window
  double grad_norm = 0.0;     ///< global L2 norm of the window gradient before clipping
  bool clipped = false;       ///< whether clipping scaled the gradient down
  double lr = 0.0;            ///< learning rate used by this step
};

/// Accumulates the gradients of a window of micro-batches exactly and steps once at the window
/// boundary: clip the window gradient (optional), set the step's learning rate from the schedule
/// (optional), optimizer step, zero (free) the gradients. Usable in any LibTorch loop:
///
///   GradientAccumulator acc(model->parameters(), optimizer, &schedule,
///                           AccumulatorOptions().unit(LossUnit::kToken).max_grad_norm(1.0));
///   for (auto& window : windows) {
///     acc.begin_window(counts_of(window));         // samples and real tokens it holds
///     for (auto& micro : window) {
///       torch::Tensor loss_sum = loss_fn(model, micro);  // reduction = sum
///       acc.backward(loss_sum, counts_of(micro));
///     }
///     WindowResult r = acc.step();                 // r.mean_loss, r.grad_norm, r.lr ...
///   }
///
/// Gradients must be zero (or undefined) when the first window begins: the accumulator owns them
/// from then on.
class GradientAccumulator {
 public:
  /// `schedule` may be null: the optimizer's own learning rate is then left as it is.
  GradientAccumulator(std::vector<torch::Tensor> parameters, torch::optim::Optimizer& optimizer,
                      const LrSchedule* schedule, AccumulatorOptions options = {});

  /// Opens a window that will hold exactly `window` samples and tokens.
  void begin_window(const Counts& window);
  /// Backward of one micro-batch: `loss_sum` is the sum of its per-unit losses (a scalar),
  /// `micro` what it holds. Gradients accumulate into the parameters' .grad.
  void backward(const torch::Tensor& loss_sum, const Counts& micro);
  /// Closes the window: clip, step, schedule, zero. Throws std::logic_error if the micro-batches
  /// did not add up to the counts declared by begin_window.
  WindowResult step();

  /// Abandons the open window: its partial gradients are freed and nothing is stepped, so the
  /// same window can be run again (for example with smaller micro-batches after running out of
  /// memory). Does nothing when no window is open.
  void abort_window();

  /// Optimizer steps taken so far.
  int64_t steps_taken() const { return steps_taken_; }
  /// Continues counting from `steps` (for resuming); the schedule follows.
  void set_steps_taken(int64_t steps) { steps_taken_ = steps; }
  /// Whether a window is open.
  bool window_open() const { return window_open_; }
  /// The options in use.
  const AccumulatorOptions& options() const { return options_; }

 private:
  void free_gradients();

  std::vector<torch::Tensor> parameters_;
  torch::optim::Optimizer& optimizer_;
  const LrSchedule* schedule_;
  AccumulatorOptions options_;
  int64_t steps_taken_ = 0;
  bool window_open_ = false;
  Counts declared_;
  Counts seen_;
  int64_t micro_batches_ = 0;
  torch::Tensor loss_sum_;  // () float64 on the loss's device: sum of the micro-batch loss sums
};

/// Global L2 norm of the gradients of `parameters` (undefined gradients skipped), as
/// torch::nn::utils::clip_grad_norm_ computes it.
double gradient_norm(const std::vector<torch::Tensor>& parameters);

/// Scales the gradients so their global norm is at most `max_norm`, given their current norm
/// (PyTorch's rule: coefficient max_norm / (norm + 1e-6), applied when below 1). Returns whether
/// it scaled.
bool clip_gradients(const std::vector<torch::Tensor>& parameters, double norm, double max_norm);

}  // namespace bigbatch::engine
