// `bigbatch bench memory`: peak memory and throughput against micro-batch size, with and
// without activation checkpointing, for one model and global batch.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "bigbatch/cli/train_command.h"

namespace bigbatch::cli {

/// What the command line gave `bigbatch bench memory`.
struct BenchMemoryOptions {
  TrainCommandOptions config;  ///< --config and --set, as for `bigbatch train`
  /// Micro-batch sizes to measure; empty: the powers of two below the global batch, and the
  /// global batch itself.
  std::vector<int64_t> micro_batches;
  /// Checkpointing policies ("none", "blocks", "every:N"); empty: none and blocks for the GPT,
  /// none for the MLP.
  std::vector<std::string> checkpointing;
  /// Timed optimizer steps per point, after one untimed warm-up step.
  int64_t steps = 3;
  /// Where the table, bench.json and memory.svg go; empty: runs/bench-memory-<timestamp>.
  std::string out_dir;
};

/// Trains `steps` + 1 optimizer steps of the configured model at every (checkpointing,
/// micro-batch) pair, each from the same seed and initial weights, and reports the peak tensor
/// memory (split into weights, gradients, optimizer state and activations), the time per step
/// and the throughput. Under memory.budget a point that runs out of memory is shown as such, and
/// for every policy the choice of micro_batch = "auto" is compared with the largest micro-batch
/// that trains (tried one by one downwards). Writes table.txt, bench.json, memory.svg and
/// config.toml to the output directory. Throws InputError for bad input before anything is
/// written or measured.
int run_bench_memory(const BenchMemoryOptions& options, std::ostream& out);

}  // namespace bigbatch::cli
