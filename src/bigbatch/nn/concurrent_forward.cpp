#include "bigbatch/nn/concurrent_forward.h"

#include <utility>

#include "bigbatch/core/check.h"

namespace bigbatch::nn {
namespace {

/// The innermost scope of this thread, which collects deferred writes; nullptr outside one
/// (in_concurrent_forward() is false).
thread_local ConcurrentForwardScope* innermost = nullptr;

}  // namespace

bool in_concurrent_forward() {
  return innermost != nullptr;
}

void defer_state_write(StateWrite write) {
  BB_CHECK(innermost != nullptr,
           "defer_state_write() outside a ConcurrentForwardScope: nothing would make the write");
  innermost->writes_.push_back(std::move(write));
}

ConcurrentForwardScope::ConcurrentForwardScope() : outer_(innermost) {
  innermost = this;
}

ConcurrentForwardScope::~ConcurrentForwardScope() {
  innermost = outer_;
}

std::vector<StateWrite> ConcurrentForwardScope::take_state_writes() {
  return std::exchange(writes_, {});
}

}  // namespace bigbatch::nn
