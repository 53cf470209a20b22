// The heart of bigbatch: exact gradient accumulation over a window of micro-batches.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bigbatch/dist/communicator.h"
#include "bigbatch/dist/gradient_reducer.h"
#include "bigbatch/engine/loss_scaler.h"
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

/// What to do with a window whose mean loss, or (without a loss scaler) whose gradient, is
/// inf or NaN.
enum class NonFinitePolicy {
  kSkip,   ///< drop the window: no optimizer step, weights and optimizer state unchanged
  kAbort,  ///< throw NonFiniteError naming the step
};

/// Parses "skip" | "abort"; throws InputError naming `field` otherwise.
NonFinitePolicy parse_nonfinite_policy(const std::string& text, const std::string& field);
/// The config spelling of a policy.
std::string to_string(NonFinitePolicy policy);

/// Accumulator settings.
struct AccumulatorOptions {
  /// The unit the loss is averaged over.
  TORCH_ARG(LossUnit, unit) = LossUnit::kSample;
  /// Clip the window gradient to this global L2 norm at the boundary; 0 disables clipping.
  TORCH_ARG(double, max_grad_norm) = 0.0;
  /// A non-finite window loss, or a non-finite gradient without a loss scaler. A gradient
  /// overflow under a loss scaler with a finite loss is always skipped (the scaler's backoff),
  /// whatever this says.
  TORCH_ARG(NonFinitePolicy, on_nonfinite) = NonFinitePolicy::kSkip;
};

/// Why a window was skipped.
enum class SkipReason {
  kNone,               ///< not skipped
  kNonFiniteLoss,      ///< the window's mean loss was inf or NaN
  kNonFiniteGradient,  ///< the loss was finite but a gradient held inf or NaN (with a loss
                       ///< scaler: an overflow of the scaled gradients)
};

/// The spelling of a skip reason in metrics: "", "nonfinite_loss", "nonfinite_gradient".
std::string to_string(SkipReason reason);

/// What one window did: an optimizer step, or a skipped window.
struct WindowResult {
  /// Optimizer steps taken, this one included (1-based). A skipped window carries the step it
  /// would have been (steps taken + 1), the number the next window then tries again.
  int64_t step = 0;
  double mean_loss = 0.0;     ///< the window's true mean loss: sum of losses / window units
  Counts counts;              ///< samples and tokens in the window
  int64_t micro_batches = 0;  ///< backward passes in the window
  double grad_norm = 0.0;     ///< global L2 norm of the (unscaled) window gradient before
                              ///< clipping; 0 for a skipped window
  bool clipped = false;       ///< whether clipping scaled the gradient down
  double lr = 0.0;            ///< learning rate used by this step; 0 for a skipped window
  bool skipped = false;  ///< no optimizer step: weights, optimizer state and schedule as before
  SkipReason skip_reason = SkipReason::kNone;  ///< why it was skipped
  double loss_scale = 0.0;  ///< the scale the window's losses were multiplied by; 0: no scaler
  /// Data parallel: a rank abandoned the window (abort_window(), after running out of memory),
  /// so no rank stepped; run the window again. `abandoned_by` lists those ranks.
  bool restarted = false;
  std::vector<int64_t> abandoned_by;
};

/// One micro-batch's gradients, computed by GradientAccumulator::gradients_of() without touching
/// the parameters' .grad, and added to them by GradientAccumulator::accumulate().
struct MicroBatchGradients {
  /// One per parameter of the accumulator, in its order; undefined where the loss does not
  /// depend on the parameter (or it does not require grad). Each has its parameter's shape and
  /// dtype, or is the bf16 weight gradient of a float32 parameter that a fused block kept
  /// (nn::KeptWeightGradScope), which accumulate() widens as it adds.
  std::vector<torch::Tensor> gradients;
  torch::Tensor loss_sum;  ///< () float64, detached: the micro-batch's summed loss
  Counts counts;           ///< what the micro-batch held
};

/// A non-finite window under NonFinitePolicy::kAbort, or too many skipped windows in a row.
class NonFiniteError : public std::runtime_error {
 public:
  /// `step` is the 1-based optimizer step the window would have been.
  NonFiniteError(const std::string& message, int64_t step)
      : std::runtime_error(message), step_(step) {}
  /// The optimizer step the failing window would have been (1-based).
  int64_t step() const { return step_; }

 private:
  int64_t step_;
};

/// Accumulates the gradients of a window of micro-batches exactly and steps once at the window
/// boundary: unscale and check (with a loss scaler) or check (without) for inf/NaN, clip the
/// window gradient (optional), set the step's learning rate from the schedule (optional),
/// optimizer step, zero (free) the gradients. A non-finite window is skipped (or aborts, see
/// AccumulatorOptions::on_nonfinite): its gradients are freed, the optimizer is not called and
/// the step count, hence the schedule, does not advance. Usable in any LibTorch loop:
///
///   GradientAccumulator acc(model->parameters(), optimizer, &schedule,
///                           AccumulatorOptions().unit(LossUnit::kToken).max_grad_norm(1.0));
///   for (auto& window : windows) {
///     acc.begin_window(counts_of(window));         // samples and real tokens it holds
///     for (auto& micro : window) {
///       torch::Tensor loss_sum = loss_fn(model, micro);  // reduction = sum
///       acc.backward(loss_sum, counts_of(micro));
///     }
///     WindowResult r = acc.step();                 // r.mean_loss, r.grad_norm, r.skipped ...
///   }
///
/// With `acc.set_loss_scaler(&scaler)` every micro-batch loss is multiplied by the scaler's scale
/// before backward, and the boundary unscales and updates the scaler once per window.
///
/// Gradients must be zero (or undefined) when the first window begins: the accumulator owns them
/// from then on.
///
/// Data parallel (set_data_parallel): every rank opens the window with its own shard's counts;
/// begin_window sums them over the ranks, so each micro-batch loss is normalised by the whole
/// job's window and the summed gradient is exactly that of the global batch, however unevenly
/// the shards split it. Micro-batches before a rank's last accumulate locally with no
/// communication; the last backward starts the gradient buckets (dist::GradientReducer), and
/// step() completes them and agrees with the other ranks in one small all-reduce on the window's
/// loss and on whether any rank abandoned it. After that every rank holds the same gradient, so
/// the inf/NaN checks, clipping, loss scaler and optimizer decide the same everywhere. Every rank
/// must end each window with step() or abort_window().
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
  /// What backward() computes, split in two so that micro-batches can run on several threads at
  /// once (engine::ConcurrentMicroBatches): the gradients of `loss_sum`, normalised and scaled as
  /// backward() does, with respect to the parameters, returned instead of accumulated
  /// (torch::autograd::grad). Reads the window's state only, so several threads may call it at
  /// once inside an open window, each on its own micro-batch's graph.
  MicroBatchGradients gradients_of(const torch::Tensor& loss_sum, const Counts& micro) const;
  /// Adds one micro-batch's gradients into .grad and counts it, as backward() would have. Given
  /// in micro-batch order, the window gradient is bitwise the one backward() accumulates: the
  /// same sums in the same order. Call on one thread. Under data parallel nothing is started
  /// early: step() reduces every gradient at the boundary.
  void accumulate(MicroBatchGradients gradients);
  /// Closes the window: check for inf/NaN, then clip, schedule, step, zero; or skip. Throws
  /// std::logic_error if the micro-batches did not add up to the counts declared by
  /// begin_window, NonFiniteError for a non-finite window under NonFinitePolicy::kAbort, and the
  /// loss scaler's std::runtime_error when it overflows at its minimum scale.
  WindowResult step();

  /// Abandons the open window: its partial gradients are freed and nothing is stepped, so the
  /// same window can be run again (for example with smaller micro-batches after running out of
  /// memory). Does nothing when no window is open, except under data parallel: there it is a
  /// collective that stands for the whole window on this rank (begin_window's count too when the
  /// window was not opened), and every other rank's step() then returns `restarted`.
  void abort_window();

  /// Sums gradients, counts and losses over the ranks of `communicator` (not owned; null: a
  /// single process again) with `reducer` (not owned; made for the same parameters; may be null
  /// only in a world of one rank, where there is nothing to reduce). Call between windows.
  void set_data_parallel(dist::Communicator* communicator, dist::GradientReducer* reducer);

  /// Optimizer steps taken so far.
  int64_t steps_taken() const { return steps_taken_; }
  /// Continues counting from `steps` (for resuming); the schedule follows.
  void set_steps_taken(int64_t steps) { steps_taken_ = steps; }
  /// Whether a window is open.
  bool window_open() const { return window_open_; }
  /// Uses `scaler` (not owned; null: no loss scaling) from the next window on.
  void set_loss_scaler(LossScaler* scaler);
  /// The loss scaler in use, or null.
  LossScaler* loss_scaler() const { return scaler_; }
  /// The options in use.
  const AccumulatorOptions& options() const { return options_; }

 private:
  void free_gradients();
  /// The loss a micro-batch's backward differentiates: `loss_sum` / the window's units, times
  /// the loss scale. Checks that a window is open and the scale unchanged.
  torch::Tensor loss_for_backward(const torch::Tensor& loss_sum) const;
  /// Counts a micro-batch into the window: its counts (checked against the declared window) and
  /// its detached float64 loss sum.
  void count(const torch::Tensor& detached_loss_sum, const Counts& micro);
  /// What the ranks agreed on at a window boundary.
  struct Agreement {
    double loss_sum = 0.0;              ///< the window's loss sum over all ranks
    std::vector<int64_t> abandoned_by;  ///< ranks that abandoned the window
  };
  /// Completes the gradient reduction (or, when `abandoning`, takes part in it only) and sums
  /// [loss, abandoned flag per rank] over the ranks; in a single process, the loss as it is
  /// (`local_loss` when the caller has read it already).
  Agreement agree(bool abandoning, std::optional<double> local_loss = std::nullopt);
  /// What a single process's boundary reads of the device, in one transfer.
  struct BoundaryReading {
    double loss_sum = 0.0;
    bool finite = true;    ///< every unscaled gradient is finite (with a loss scaler)
    double grad_norm = 0;  ///< of the unscaled gradients
  };
  /// Unscales (with a scaler) and computes the finite check and the gradient norm where the
  /// gradients are, then reads them with the window's loss sum: the boundary's one wait for the
  /// device.
  BoundaryReading read_boundary();
  /// `local` summed over the ranks.
  Counts sum_over_ranks(const Counts& local);
  /// Frees the gradients, backs the scaler off and reports the window as skipped.
  WindowResult skip(WindowResult result, SkipReason reason);
  /// Throws NonFiniteError for the window that would have been the next step.
  [[noreturn]] void abort_nonfinite(SkipReason reason, double mean_loss);

  std::vector<torch::Tensor> parameters_;
  torch::optim::Optimizer& optimizer_;
  const LrSchedule* schedule_;
  AccumulatorOptions options_;
  LossScaler* scaler_ = nullptr;
  double window_scale_ = 0.0;  // the scaler's scale when the window opened
  int64_t steps_taken_ = 0;
  bool window_open_ = false;
  dist::Communicator* communicator_;  // the ranks; a dist::LocalCommunicator in a single process
  dist::GradientReducer* reducer_ = nullptr;  // null: nothing to reduce (a world of one)
  Counts declared_;                           // this rank's part of the window
  Counts window_;                             // the whole window: declared_ summed over the ranks
  Counts seen_;
  int64_t micro_batches_ = 0;
  torch::Tensor loss_sum_;  // () float64 on the loss's device: sum of the micro-batch loss sums
};

/// Global L2 norm of the gradients of `parameters` (undefined gradients skipped), as
/// torch::nn::utils::clip_grad_norm_ computes it.
double gradient_norm(const std::vector<torch::Tensor>& parameters);

/// gradient_norm as a () tensor on the gradients' device, without the synchronisation; an
/// undefined tensor when no parameter has a gradient.
torch::Tensor gradient_norm_tensor(const std::vector<torch::Tensor>& parameters);

/// Scales the gradients so their global norm is at most `max_norm`, given their current norm
/// (PyTorch's rule: coefficient max_norm / (norm + 1e-6), applied when below 1). Returns whether
/// it scaled.
bool clip_gradients(const std::vector<torch::Tensor>& parameters, double norm, double max_norm);

}  // namespace bigbatch::engine
