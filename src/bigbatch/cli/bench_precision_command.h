// `bigbatch bench precision`: the error of the accumulated window gradient against a float64
// reference, per compute precision and number of micro-batches.
#pragma once

#include <cstdint>
#include <ostream>
#include <vector>

#include "bigbatch/cli/train_command.h"

namespace bigbatch::cli {

/// What the command line gave `bigbatch bench precision`.
struct BenchPrecisionOptions {
  TrainCommandOptions config;  ///< --config and --set, as for `bigbatch train`
  /// Micro-batches per window; empty: 1, 2, 4, ... up to batch.global_batch.
  std::vector<int64_t> accum_steps;
};

/// Builds the configured model (float32, initial weights from train.seed), takes the first
/// window of batch.global_batch training samples and prints, for fp32 and bf16 forward passes
/// and every accum_steps, the relative L2 error of the accumulated window gradient against the
/// float64 reference (engine::window_gradient_errors). model.precision is ignored (both are
/// measured). Throws InputError for bad input (float64 model, an accum_steps that does not
/// divide the global batch).
int run_bench_precision(const BenchPrecisionOptions& options, std::ostream& out);

}  // namespace bigbatch::cli
