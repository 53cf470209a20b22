// train.concurrent_micro_batches = "auto": how many passes of a window run at once on this
// machine, for this workload and plan.
#pragma once

#include <cstdint>
#include <set>
#include <string>

#include "bigbatch/engine/plan.h"
#include "bigbatch/job/training_job.h"
#include "bigbatch/job/workload.h"
#include "bigbatch/nn/precision.h"

namespace bigbatch::job {

/// Workload::concurrency_need of a dropout set by `key` to `probability` (> 0): "gpt.dropout = 0,
/// got 0.1: concurrent micro-batches would draw their dropout masks in an order that depends on
/// the threads' timing".
std::string dropout_concurrency_need(const std::string& key, double probability);

/// The largest estimated pass (pass_flops) auto runs two of at once: below it a second pass gained
/// 7-95% on 2 cores (the Llama and MiniLM of bench/compare at micro-batch 2, 15 and 17 GFLOP as
/// estimated before lookup tables were left out, 18% and 8%), above it (60 GFLOP and more) 0-6%
/// for a whole pass's activations more (docs/TRAINING.md).
constexpr double kMostFlopsForConcurrentPasses = 20e9;

/// The largest estimated pass auto runs two of at once in `precision` on a CPU with `cpu_flags`
/// (/proc/cpuinfo's): kMostFlopsForConcurrentPasses, twice that in bf16 on a CPU with native bf16
/// (avx512_bf16 or amx_bf16), whose kernels do a pass of the same FLOPs in about half the time.
/// There the ResNet's 23 GFLOP pass (4 x 64) gained 1.35x from two at once, against nothing in
/// fp32; the Llama's 60 GFLOP bf16 pass 0-10% (docs/TRAINING.md).
double most_flops_for_concurrent_passes(nn::Precision precision,
                                        const std::set<std::string>& cpu_flags);

/// A forward + backward pass's FLOPs as 6 x parameters x rows, the parameters less
/// Workload::lookup_parameters, rows = micro_batch x positions:
/// Workload::positions_per_sample (pixels), else Workload::attention_keys (tokens), else 1. An
/// upper bound for a convolutional net, whose later layers see fewer positions.
double pass_flops(const Workload& w, int64_t micro_batch);

/// What "auto" chose and why, for the plan table.
struct ConcurrencyChoice {
  int64_t passes = 1;  ///< engine::TrainerOptions::concurrent_micro_batches
  std::string why;     ///< "auto: ..." in one line
};

/// auto's rule: 2 passes at once on the CPU when the workload allows it (Workload::
/// concurrency_need empty), a rank's window holds 2 or more micro-batches, a pass is small
/// (pass_flops <= most_flops_for_concurrent_passes of this CPU), no memory budget is set
/// (a budget puts memory first: one pass's activations at a time), the threads are automatic, and
/// the process has `cores` >= 2 (its share of the machine: available_cores() / ranks on it); 1
/// otherwise. On 2 cores two
/// one-thread passes beat one two-thread pass at every size measured (docs/TRAINING.md).
ConcurrencyChoice choose_concurrent_micro_batches(const TrainingJobOptions& options,
                                                  const Workload& w, const engine::Plan& plan,
                                                  int64_t cores);

}  // namespace bigbatch::job
