#include "bigbatch/engine/concurrent_micro_batches.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/core/threads.h"
#include "bigbatch/nn/concurrent_forward.h"
#include "bigbatch/nn/weight_copies.h"

namespace bigbatch::engine {

namespace {

/// What a helper's pass hands back: its gradients, and the module-state writes its layers
/// deferred (nn::defer_state_write), to be made in micro-batch order.
struct PassResult {
  MicroBatchGradients gradients;
  std::vector<nn::StateWrite> state_writes;
};

}  // namespace

/// One helper thread that runs one pass at a time.
class ConcurrentMicroBatches::Helper {
 public:
  /// `threads`: the OpenMP threads of the helper's passes.
  explicit Helper(int threads) : threads_(threads), thread_([this] { loop(); }) {}
  ~Helper() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  Helper(const Helper&) = delete;
  Helper& operator=(const Helper&) = delete;

  /// Runs `pass` on the helper thread; its result (or exception) arrives through the future.
  std::future<PassResult> submit(std::function<PassResult()> pass) {
    std::packaged_task<PassResult()> task(std::move(pass));
    std::future<PassResult> result = task.get_future();
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      BB_CHECK(!task_.valid(), "a helper thread got a second pass before finishing its first");
      task_ = std::move(task);
    }
    wake_.notify_one();
    return result;
  }

 private:
  void loop() {
    use_intra_op_threads_on_this_thread(threads_);  // its share of the cores, as the caller's
    for (;;) {
      std::packaged_task<PassResult()> task;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stop_ || task_.valid(); });
        if (!task_.valid())
          return;  // stopped
        task = std::move(task_);
      }
      task();  // stores the result or the exception in the future
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::packaged_task<PassResult()> task_;  // valid while a pass waits to start
  bool stop_ = false;
  const int threads_;
  std::thread thread_;  // last: starts once the members above exist
};

namespace {

/// Makes a pass's deferred module-state writes, in the order its layers deferred them.
void make_writes(std::vector<nn::StateWrite> writes) {
  for (nn::StateWrite& write : writes)
    write();
}

/// The default CPU generator's state: (5056) uint8.
torch::Tensor cpu_generator_state() {
  at::Generator generator = at::globalContext().defaultGenerator(torch::kCPU);
  const std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

}  // namespace

ConcurrentMicroBatches::ConcurrentMicroBatches(int64_t concurrency) {
  BB_CHECK_INPUT(concurrency >= 1, "concurrent micro-batches = ", concurrency, " must be >= 1");
  // Each pass gets what the calling thread has: on 2 cores split two ways, 1 thread each.
  const int threads = at::get_num_threads();
  for (int64_t i = 1; i < concurrency; ++i)
    helpers_.push_back(std::make_unique<Helper>(threads));
}

ConcurrentMicroBatches::~ConcurrentMicroBatches() = default;

void ConcurrentMicroBatches::run(GradientAccumulator& accumulator, Objective& objective,
                                 const std::vector<data::Batch>& batches,
                                 const std::vector<Counts>& counts) {
  BB_CHECK(batches.size() == counts.size(), "run() got ", batches.size(), " batches and ",
           counts.size(), " counts");
  const torch::Tensor random_state_before = cpu_generator_state();
  const at::ThreadLocalState caller_state;  // grad mode, dispatch keys: the helpers run under it
  // The caller's weight copies (a window's: nn::WeightCopyScope), which the helpers' passes share.
  const std::shared_ptr<nn::KeptWeightCopies> weight_copies = nn::shared_weight_copies();
  auto helper_pass = [&](size_t i) {
    const nn::WeightCopyScope shared_copies(weight_copies);
    nn::ConcurrentForwardScope concurrent;
    PassResult result;
    result.gradients = accumulator.gradients_of(objective.loss_sum(batches[i]), counts[i]);
    result.state_writes = concurrent.take_state_writes();
    return result;
  };
  const size_t width = helpers_.size() + 1;
  for (size_t first = 0; first < batches.size(); first += width) {
    const size_t end = std::min(batches.size(), first + width);
    std::vector<std::future<PassResult>> others;  // passes first + 1 .. end - 1
    for (size_t i = first + 1; i < end; ++i) {
      others.push_back(helpers_[i - first - 1]->submit([&, i] {
        const at::ThreadLocalStateGuard state(caller_state);
        return helper_pass(i);
      }));
    }
    // This thread takes the group's first pass and accumulates it straight into .grad, as one at
    // a time would; the helpers' gradients follow in micro-batch order, each after the state
    // writes of the passes before it. Every pass of the group has finished before an error is
    // rethrown: none still uses the window. The passes before a failed one have made their
    // writes, as one at a time they would have.
    std::exception_ptr error;
    try {
      nn::ConcurrentForwardScope concurrent;
      accumulator.backward(objective.loss_sum(batches[first]), counts[first]);
      make_writes(concurrent.take_state_writes());
    } catch (...) {
      error = std::current_exception();
    }
    for (std::future<PassResult>& other : others) {
      try {
        PassResult pass = other.get();
        if (!error) {
          make_writes(std::move(pass.state_writes));
          accumulator.accumulate(std::move(pass.gradients));
        }
      } catch (...) {
        if (!error)
          error = std::current_exception();
      }
    }
    if (error)
      std::rethrow_exception(error);
  }
  BB_CHECK_INPUT(torch::equal(random_state_before, cpu_generator_state()),
                 "the model drew random numbers (dropout?) while ", concurrency(),
                 " micro-batches ran at once; which pass gets which numbers would depend on the "
                 "threads' timing, so the run could not be reproduced or resumed exactly. Set "
                 "dropout to 0 or run one micro-batch at a time (TrainerOptions."
                 "concurrent_micro_batches = 1)");
}

}  // namespace bigbatch::engine
