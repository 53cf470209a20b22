// The batch plan: what the user asked for (global batch, micro-batch or accumulation steps,
// learning-rate scaling), resolved and validated once, before anything is built.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bigbatch/core/table.h"

namespace bigbatch::engine {

/// How the learning rate follows the global batch, relative to `base_batch`.
enum class LrScaling {
  kNone,    ///< lr = base_lr
  kLinear,  ///< lr = base_lr * global_batch / base_batch (Goyal et al., SGD)
  kSqrt,    ///< lr = base_lr * sqrt(global_batch / base_batch) (Krizhevsky; common for Adam)
};

/// Parses "none" | "linear" | "sqrt"; throws InputError naming `field` otherwise.
LrScaling parse_lr_scaling(const std::string& text, const std::string& field = "lr_scaling");
/// The config spelling of a scaling rule.
std::string to_string(LrScaling scaling);

/// What the user set. Give `micro_batch` or `accum_steps` (or both, consistently); 0 = unset.
struct BatchOptions {
  /// Samples per optimizer step, over all micro-batches and all ranks.
  TORCH_ARG(int64_t, global_batch) = 64;
  /// Samples per forward/backward pass; the largest that fits in memory.
  TORCH_ARG(int64_t, micro_batch) = 0;
  /// Micro-batches per optimizer step.
  TORCH_ARG(int64_t, accum_steps) = 0;
  /// Data-parallel processes (ranks): global_batch = micro_batch x accum_steps x world_size.
  TORCH_ARG(int64_t, world_size) = 1;
  /// The learning rate tuned at `base_batch`.
  TORCH_ARG(double, base_lr) = 4e-3;
  /// The rule that adapts base_lr to global_batch.
  TORCH_ARG(LrScaling, lr_scaling) = LrScaling::kNone;
  /// The batch size at which base_lr was tuned; 0 means global_batch (no scaling).
  TORCH_ARG(int64_t, base_batch) = 0;
};

/// The resolved plan. Within a window (with several ranks: within a rank's shard of it) the
/// micro-batches are `micro_batch` samples each except the last, which holds the remainder (64 as
/// 12 gives 12,12,12,12,12,4); a window cut short at the end of an epoch is split the same way and
/// normalised by what it actually holds.
struct Plan {
  int64_t global_batch = 0;
  int64_t micro_batch = 0;
  int64_t accum_steps = 0;
  int64_t world_size = 1;
  int64_t base_batch = 0;
  double base_lr = 0.0;
  LrScaling lr_scaling = LrScaling::kNone;
  /// The learning rate after the scaling rule: the schedule's peak.
  double lr = 0.0;

  /// Samples one rank handles per optimizer step: global_batch / world_size.
  int64_t rank_batch() const { return global_batch / world_size; }
  /// Micro-batch sizes for `window_samples` (at most global_batch) samples: a single process's
  /// window or a rank's shard of it; empty for 0 samples.
  std::vector<int64_t> split_window(int64_t window_samples) const;
  /// Uses micro-batches of `size` (in [1, rank_batch()]) from now on; accum_steps follows.
  void set_micro_batch(int64_t size);
  /// Appends the plan's rows (batch quantities and learning rate) to a table.
  void describe(Table& table) const;
};

/// Resolves and validates the user's batch settings. Each rank takes global_batch / world_size
/// samples of every window and splits them into micro-batches. Throws InputError naming the field
/// and the value for: non-positive sizes, a global batch that is not a multiple of the world
/// size, micro_batch or accum_steps larger than the per-rank batch, micro_batch * accum_steps
/// != the per-rank batch when both are given, a non-positive or non-finite learning rate.
Plan resolve_plan(const BatchOptions& options);

}  // namespace bigbatch::engine
