// Metrics as TensorBoard scalars, written as training goes.
#pragma once

#include <cstdint>
#include <string>

#include "bigbatch/metrics/sink.h"
#include "bigbatch/metrics/tfevents.h"

namespace bigbatch::metrics {

/// Where and what a TensorBoardSink writes.
struct TensorBoardOptions {
  /// The directory the event file goes to (the run directory); it must exist.
  std::string directory;
  /// Also write throughput/tokens_per_second (token losses); samples_per_second always.
  bool count_tokens = true;
  /// > 0: this run resumes after optimizer step `resumed_after_step`; the new file starts with a
  /// SessionLog START at the next step, so TensorBoard drops the points of earlier files from
  /// there on (those windows are trained again).
  int64_t resumed_after_step = 0;
};

/// Writes a new event file (see EventFileWriter) with one Event per window and per evaluation,
/// at the optimizer step, with these scalars:
///   train/loss, train/lr, train/grad_norm     a window that stepped
///   train/loss_scale                           while a loss scaler is active
///   train/skipped_steps                        every window, skipped ones too
///   throughput/samples_per_second, throughput/tokens_per_second (count_tokens)
///   memory/peak_mib                            the window's peak tensor memory, when tracked
///   val/loss, val/accuracy (classifiers)       every evaluation
/// A skipped window writes only train/skipped_steps (and train/loss_scale). Several runs of one
/// directory (a resumed run) leave several files, which TensorBoard reads as one run.
class TensorBoardSink : public MetricsSink {
 public:
  /// Creates the event file; throws std::runtime_error naming it when it cannot be written.
  explicit TensorBoardSink(const TensorBoardOptions& options);
  void on_window(const WindowRecord& record) override;
  void on_eval(const EvalRecord& record) override;
  /// The event file's path.
  const std::string& path() const { return events_.path(); }

 private:
  TensorBoardOptions options_;
  EventFileWriter events_;
};

}  // namespace bigbatch::metrics
