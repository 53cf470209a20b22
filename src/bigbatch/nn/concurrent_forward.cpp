#include "bigbatch/nn/concurrent_forward.h"

namespace bigbatch::nn {
namespace {

/// Whether this thread runs a concurrent forward (read by in_concurrent_forward()).
thread_local bool concurrent = false;

}  // namespace

bool in_concurrent_forward() {
  return concurrent;
}

ConcurrentForwardScope::ConcurrentForwardScope() : previous_(concurrent) {
  concurrent = true;
}

ConcurrentForwardScope::~ConcurrentForwardScope() {
  concurrent = previous_;
}

}  // namespace bigbatch::nn
