// Progress on the console: a redrawn bar on a terminal, plain lines otherwise.
#pragma once

#include <cstdint>
#include <ostream>

#include "bigbatch/metrics/sink.h"

namespace bigbatch::metrics {

/// Console progress settings.
struct ProgressOptions {
  /// Redraw one line in place (a terminal) instead of printing lines (a log file, a pipe).
  bool interactive = false;
  /// Plain mode prints every this many steps (and the first and last).
  int64_t log_every = 10;
  /// Throughput in tokens ("tok/s") rather than samples ("samples/s").
  bool count_tokens = true;
};

/// Shows, per optimizer step: step/total, the window's mean loss, the learning rate, throughput
/// and the estimated time to finish, then the loss scale (with a loss scaler) and the count of
/// skipped windows (once there is one); evaluation results and notices (a skipped window is one)
/// on lines of their own. Skipped windows draw no step line.
class ProgressPrinter : public MetricsSink {
 public:
  ProgressPrinter(std::ostream& out, ProgressOptions options);
  void on_window(const WindowRecord& record) override;
  void on_eval(const EvalRecord& record) override;
  void on_notice(const std::string& message) override;
  void on_finish() override;

 private:
  void end_bar_line();
  std::ostream& out_;
  ProgressOptions options_;
  bool bar_drawn_ = false;
};

/// Whether a file descriptor is a terminal (for ProgressOptions::interactive).
bool is_terminal(int fd);

}  // namespace bigbatch::metrics
