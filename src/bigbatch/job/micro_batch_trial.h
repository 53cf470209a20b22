// `micro_batch = "auto"` for a workload: forward + backward trials under the memory budget, and
// the even plan of the size found.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "bigbatch/engine/micro_batch_search.h"
#include "bigbatch/engine/optimizer.h"
#include "bigbatch/engine/plan.h"
#include "bigbatch/job/workload.h"

namespace bigbatch::job {

/// Bytes of the trainable parameters: what their gradients take in a window.
int64_t trainable_parameter_bytes(const torch::nn::Module& module);

/// Bytes of optimizer state that exist from the first step on: two moments per trainable
/// parameter (AdamW) or one momentum buffer (SGD with momentum); frozen parameters have none.
int64_t optimizer_state_bytes(const engine::OptimizerOptions& optimizer,
                              const torch::nn::Module& module);

/// What the trials of search_micro_batch run under.
struct MicroBatchTrialOptions {
  /// Samples of a rank's window: the largest micro-batch tried.
  TORCH_ARG(int64_t, global_batch) = 64;
  /// Tensor bytes the trials must fit in (> 0).
  TORCH_ARG(int64_t, budget_bytes) = 0;
  /// Bytes kept free for what exists from the first step on (optimizer_state_bytes).
  TORCH_ARG(int64_t, reserved_bytes) = 0;
  /// Passes whose graphs and gradients exist at once (TrainerOptions::concurrent_micro_batches).
  TORCH_ARG(int64_t, concurrent_micro_batches) = 1;
};

/// Runs the micro-batch search with forward + backward trials on the costliest training samples
/// (data::Dataset::costliest_samples), with gradients already held as inside a window (with
/// concurrent_micro_batches = N, N passes' graphs and gradients at once), leaving the model, its
/// gradients and buffers and the random generators as they were. The memory tracker must be
/// installed.
engine::MicroBatchSearchResult search_micro_batch(const Workload& w,
                                                  const MicroBatchTrialOptions& options);

/// The plan for `batch` when at most `largest_micro_batch` samples fit: as many passes as that
/// size needs, with micro-batches as even as possible (64 with room for 21 runs as 4 x 16, not
/// 3 x 21 + 1).
engine::Plan even_plan(engine::BatchOptions batch, int64_t largest_micro_batch);

}  // namespace bigbatch::job
