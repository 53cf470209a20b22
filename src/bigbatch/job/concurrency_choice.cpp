#include "bigbatch/job/concurrency_choice.h"

#include <algorithm>
#include <cmath>

#include "bigbatch/core/check.h"
#include "bigbatch/core/system_info.h"
#include "bigbatch/models/model_info.h"
#include "bigbatch/nn/bf16_matmul.h"

namespace bigbatch::job {

std::string dropout_concurrency_need(const std::string& key, double probability) {
  return cat(key, " = 0, got ", probability,
             ": concurrent micro-batches would draw their dropout masks in an order that depends "
             "on the threads' timing");
}

double pass_flops(const Workload& w, int64_t micro_batch) {
  const int64_t parameters = models::parameter_count(*w.module) - w.lookup_parameters;
  const int64_t positions =
      w.positions_per_sample > 0 ? w.positions_per_sample : std::max<int64_t>(1, w.attention_keys);
  const int64_t rows = micro_batch * positions;
  return 6.0 * static_cast<double>(parameters) * static_cast<double>(rows);
}

double most_flops_for_concurrent_passes(nn::Precision precision,
                                        const std::set<std::string>& cpu_flags) {
  const bool native_bf16 =
      nn::resolve_bf16_matmul(nn::Bf16Matmul::kAuto, cpu_flags) == nn::Bf16Matmul::kNative;
  return precision == nn::Precision::kBf16 && native_bf16 ? 2.0 * kMostFlopsForConcurrentPasses
                                                          : kMostFlopsForConcurrentPasses;
}

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
  const double flops = pass_flops(w, plan.micro_batch);
  const double most_flops = most_flops_for_concurrent_passes(options.precision, this_cpu_flags());
  if (flops > most_flops) {
    return one(cat("one at a time: a pass is large (about ", std::lround(flops / 1e9),
                   " GFLOP as 6 x parameters x rows estimates it, over the ",
                   std::lround(most_flops / 1e9), " of two at once in ",
                   nn::to_string(options.precision),
                   "), a second one at once would add its activations for little"));
  }
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
