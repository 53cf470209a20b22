// Marks the forward passes that run at the same time as others on the same model
// (engine::ConcurrentMicroBatches), so that layers which write module state can refuse them.
#pragma once

namespace bigbatch::nn {

/// Whether the calling thread is running one of several forward passes that share a model at the
/// same time. A training forward that writes module state (nn::BatchNorm's running statistics)
/// would race with the others, so such layers throw InputError while this is true.
bool in_concurrent_forward();

/// Marks the calling thread as running a concurrent forward pass (and its backward) for the
/// scope's lifetime; nests.
class ConcurrentForwardScope {
 public:
  ConcurrentForwardScope();
  ~ConcurrentForwardScope();
  ConcurrentForwardScope(const ConcurrentForwardScope&) = delete;
  ConcurrentForwardScope& operator=(const ConcurrentForwardScope&) = delete;

 private:
  bool previous_;
};

}  // namespace bigbatch::nn
