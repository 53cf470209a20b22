#include "bigbatch/nn/concurrent_forward.h"

#include <utility>

#include "bigbatch/core/check.h"

namespace bigbatch::nn {
namespace {

/// Whether this thread runs a concurrent forward (read by in_concurrent_forward()).
thread_local bool concurrent = false;
/// The innermost scope of this thread, which collects deferred writes; nullptr outside one.
thread_local ConcurrentForwardScope* innermost = nullptr;

}  // namespace

bool in_concurrent_forward() {
  return concurrent;
}

void defer_state_write(StateWrite write) {
  BB_CHECK(innermost != nullptr,
           "defer_state_write() outside a ConcurrentForwardScope: nothing would make the write");
  innermost->writes_.push_back(std::move(write));
}

ConcurrentForwardScope::ConcurrentForwardScope() : previous_(concurrent), outer_(innermost) {
  concurrent = true;
  innermost = this;
}

ConcurrentForwardScope::~ConcurrentForwardScope() {
  concurrent = previous_;
  innermost = outer_;
}

std::vector<StateWrite> ConcurrentForwardScope::take_state_writes() {
  return std::exchange(writes_, {});
}

}  // namespace bigbatch::nn
