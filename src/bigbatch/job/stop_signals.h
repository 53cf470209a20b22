// SIGINT and SIGTERM as a request to stop at the next window boundary, after a checkpoint.
#pragma once

#include <signal.h>

#include <atomic>

namespace bigbatch::job {

/// Routes SIGINT and SIGTERM to a stop request while it lives (one at a time per process).
/// SA_RESETHAND restores the default action after the first, so a second signal stops the
/// process at once.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  /// Reads true once a signal came (engine::TrainingSetup::stop_requested).
  static const std::atomic<bool>& requested();
  /// The signal that came, 0 before one did.
  static int signal_number();

 private:
  struct sigaction previous_int_ {};
  struct sigaction previous_term_ {};
};

}  // namespace bigbatch::job
