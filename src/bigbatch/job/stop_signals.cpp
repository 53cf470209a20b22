#include "bigbatch/job/stop_signals.h"

namespace bigbatch::job {
namespace {

std::atomic<bool> stop_requested{false};
std::atomic<int> stop_signal{0};

void request_stop(int signal_number) {
  stop_signal.store(signal_number);
  stop_requested.store(true);
}

}  // namespace

StopSignals::StopSignals() {
  stop_requested.store(false);
  stop_signal.store(0);
  struct sigaction action {};
  action.sa_handler = request_stop;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &action, &previous_int_);
  sigaction(SIGTERM, &action, &previous_term_);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &previous_int_, nullptr);
  sigaction(SIGTERM, &previous_term_, nullptr);
}

const std::atomic<bool>& StopSignals::requested() {
  return stop_requested;
}

int StopSignals::signal_number() {
  return stop_signal.load();
}

}  // namespace bigbatch::job
