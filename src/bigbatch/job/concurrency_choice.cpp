#include "bigbatch/job/concurrency_choice.h"

#include "bigbatch/core/check.h"

namespace bigbatch::job {

ConcurrencyChoice choose_concurrent_micro_batches(const TrainingJobOptions& options,
                                                  const Workload& w, const engine::Plan& plan,
                                                  int64_t cores) {
  auto one = [](const std::string& reason) { return ConcurrencyChoice{1, "auto: " + reason}; };
  if (!options.device.is_cpu())
    return one(
        cat("one at a time on ", options.device.str(), " (concurrent passes share CPU cores)"));
  if (!w.concurrency_need.empty())
    return one("one at a time; passes at once need " + w.concurrency_need);
  if (plan.accum_steps < 2)
    return one("one micro-batch per window");
  if (options.memory_budget > 0)
    return one("one at a time under memory.budget: one pass's activations, not two");
  if (options.threads.openmp() != 0 || options.threads.blas() != 0)
    return one("one at a time: the threads are set by hand (train.threads, train.blas_threads)");
  if (cores < 2)
    return one(cat("one at a time: ", cores, " core per process"));
  return {2, cat("auto: 2 at once, ", cores / 2, " of ", cores,
                 " cores each; their activations exist at once (1 keeps one pass's)")};
}

}  // namespace bigbatch::job
