// micro_batch = "auto": the largest micro-batch that fits a memory budget, in few trials.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace bigbatch::engine {

/// Search settings.
struct MicroBatchSearchOptions {
  /// The global batch: the largest micro-batch worth trying.
  TORCH_ARG(int64_t, global_batch) = 64;
  /// Tensor bytes allowed in all on `device` (memory::set_budget_bytes); must be positive.
  TORCH_ARG(int64_t, budget_bytes) = 0;
  /// Where the trials run and their memory is measured: the CPU (memory::MemoryTracker) or a GPU
  /// (its caching allocator).
  TORCH_ARG(c10::Device, device) = c10::Device(c10::kCPU);
  /// Bytes that training will hold but a trial does not yet (optimizer state before the first
  /// step); reserved during the confirming trials.
  TORCH_ARG(int64_t, reserved_bytes) = 0;
  /// The prediction aims at this share of the budget, leaving room for what it cannot see.
  TORCH_ARG(double, target_fraction) = 0.97;
  /// Confirming trials at most (each may run out of memory).
  TORCH_ARG(int64_t, max_trials) = 3;
};

/// One trial of a micro-batch size.
struct MicroBatchProbe {
  int64_t micro_batch = 0;
  int64_t peak_bytes = 0;  ///< tracker peak during the trial (absolute); 0 if it ran out
  bool out_of_memory = false;
};

/// What the search found and how.
struct MicroBatchSearchResult {
  int64_t micro_batch = 0;       ///< the chosen size
  int64_t bytes_per_sample = 0;  ///< measured slope of peak memory per sample
  int64_t fixed_bytes = 0;       ///< measured peak at zero samples (weights, gradients, ...)
  int64_t predicted = 0;         ///< the size the linear prediction gave
  int64_t out_of_memory_trials = 0;
  std::vector<MicroBatchProbe> probes;
  /// One line for the plan table: "24 (predicted 26 from 1.2 MiB/sample; 1 OOM trial)".
  std::string describe() const;
};

/// Finds the largest micro-batch whose forward + backward fits the budget. `trial(b)` runs one
/// forward and backward pass on b samples and frees the gradients again; it may throw
/// c10::OutOfMemoryError. The tracker must be installed. Two unbudgeted probes (1 and a few
/// samples) measure peak memory as fixed + b * per_sample; the size predicted for
/// target_fraction of the budget is then tried under the budget. A size that fits refines the
/// line (its slope from the larger probe) and a larger prediction is tried next; a size that runs
/// out is followed by one 10% smaller. At most max_trials sizes are tried under the budget.
/// The budget in force before the call is restored. Throws InputError when even a micro-batch of
/// 1 needs more than the budget, naming the measured need and the budget.
MicroBatchSearchResult find_micro_batch(const std::function<void(int64_t)>& trial,
                                        const MicroBatchSearchOptions& options);

}  // namespace bigbatch::engine
