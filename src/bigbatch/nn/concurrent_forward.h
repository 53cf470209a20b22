// Marks the forward passes that run at the same time as others on the same model
// (engine::ConcurrentMicroBatches), so that layers which write module state can defer the write
// to a point where it is made in micro-batch order, or refuse.
#pragma once

#include <functional>
#include <vector>

namespace bigbatch::nn {

/// Whether the calling thread is running one of several forward passes that share a model at the
/// same time. A training forward that writes module state (nn::BatchNorm's running statistics)
/// would race with the others, so such layers defer the write (defer_state_write) or throw
/// InputError while this is true.
bool in_concurrent_forward();

/// A write to module state that a concurrent pass leaves to whoever runs the passes.
using StateWrite = std::function<void()>;

/// Keeps `write` for the calling thread's innermost ConcurrentForwardScope, to be made after its
/// pass, in the order of the passes' micro-batches (ConcurrentForwardScope::take_state_writes).
/// Throws std::logic_error outside such a scope.
void defer_state_write(StateWrite write);

/// Marks the calling thread as running a concurrent forward pass (and its backward) for the
/// scope's lifetime, and collects the state writes its layers defer; nests (the innermost scope
/// collects).
class ConcurrentForwardScope {
 public:
  ConcurrentForwardScope();
  ~ConcurrentForwardScope();
  ConcurrentForwardScope(const ConcurrentForwardScope&) = delete;
  ConcurrentForwardScope& operator=(const ConcurrentForwardScope&) = delete;

  /// The writes deferred in this scope so far, in the order they were deferred; the scope keeps
  /// none of them. Make them (call each) after every earlier micro-batch's writes.
  std::vector<StateWrite> take_state_writes();

 private:
  friend void defer_state_write(StateWrite write);

  ConcurrentForwardScope* outer_;  // the scope this one nests in, or nullptr
  std::vector<StateWrite> writes_;
};

}  // namespace bigbatch::nn
