// The interface through which the trainer reports what happens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace bigbatch::metrics {

/// One accumulation window: an optimizer step, or a skipped (non-finite) window.
struct WindowRecord {
  int64_t step = 0;                 ///< optimizer steps taken, this one included; a skipped
                                    ///< window carries the step it would have been
  int64_t total_steps = 0;          ///< planned optimizer steps
  int64_t epoch = 0;                ///< 0-based epoch the window was drawn from
  double loss = 0.0;                ///< the window's true mean loss
  double lr = 0.0;                  ///< learning rate of this step; 0 for a skipped window
  double grad_norm = 0.0;           ///< window-gradient norm before clipping; 0 when skipped
  bool clipped = false;             ///< whether clipping acted
  int64_t samples = 0;              ///< samples in the window
  int64_t tokens = 0;               ///< counted tokens in the window (samples for sample losses)
  int64_t micro_batches = 0;        ///< backward passes in the window
  int64_t peak_bytes = 0;           ///< peak tensor memory during the window (0: not tracked)
  int64_t micro_batch = 0;          ///< samples per micro-batch in effect
  double step_seconds = 0.0;        ///< wall time of this window
  double elapsed_seconds = 0.0;     ///< wall time since training started
  double samples_per_second = 0.0;  ///< over this window
  double tokens_per_second = 0.0;   ///< over this window
  bool skipped = false;             ///< no optimizer step: weights and lr schedule unchanged
  std::string skip_reason;          ///< "nonfinite_loss" or "nonfinite_gradient"; "" if taken
  int64_t skipped_steps = 0;        ///< windows skipped so far, this one included
  double loss_scale = 0.0;          ///< the window's loss scale; 0: no loss scaling
  /// Data parallel: ranks in the job (samples and tokens above are over all of them) and this
  /// rank's communication in the window; the comm_ fields stay 0 in a single process.
  int64_t world_size = 1;
  int64_t comm_calls = 0;            ///< collectives issued (gradient buckets and control)
  int64_t comm_bytes = 0;            ///< bytes handed to them
  int64_t gradient_bytes = 0;        ///< of which in gradient buckets
  double comm_seconds = 0.0;         ///< time gradient buckets were in flight
  double comm_hidden_seconds = 0.0;  ///< of that, the part behind the last backward
};

/// One evaluation on the held-out split.
struct EvalRecord {
  int64_t step = 0;      ///< optimizer steps taken when evaluated
  double loss = 0.0;     ///< mean loss per unit over the evaluated samples
  int64_t samples = 0;   ///< samples evaluated
  int64_t tokens = 0;    ///< counted tokens evaluated
  double seconds = 0.0;  ///< wall time of the evaluation
  /// Share of counted units (samples, or tokens for token losses) predicted correctly, in [0, 1];
  /// empty when the objective has no notion of a correct prediction.
  std::optional<double> accuracy;
};

/// Receives training events; implementations write files or draw progress.
class MetricsSink {
 public:
  virtual ~MetricsSink() = default;
  /// After every optimizer step.
  virtual void on_window(const WindowRecord& record) = 0;
  /// After every evaluation.
  virtual void on_eval(const EvalRecord& record) = 0;
  /// Something the user should know that changes the run, for example a smaller micro-batch
  /// after running out of memory.
  virtual void on_notice(const std::string& message) { (void)message; }
  /// Once, when training ends normally.
  virtual void on_finish() {}
};

}  // namespace bigbatch::metrics
