// Evaluation on the held-out split: the mean loss (and accuracy) over its first samples, summed
// over the ranks of a data-parallel job.
#pragma once

#include <cstdint>

#include "bigbatch/data/dataset.h"
#include "bigbatch/dist/communicator.h"
#include "bigbatch/engine/objective.h"
#include "bigbatch/metrics/sink.h"

namespace bigbatch::engine {

/// What an evaluation runs on.
struct EvaluationInput {
  torch::nn::Module* model = nullptr;  ///< put in eval mode for the evaluation, then restored
  Objective* objective = nullptr;
  const data::Dataset* data = nullptr;
  int64_t samples = 0;  ///< the first this many samples; 0: all of them
  int64_t batch = 1;    ///< samples per forward pass
  int64_t step = 0;     ///< optimizer steps taken, for the record
  /// The ranks that share the evaluation (each its shard); dist::LocalCommunicator when alone.
  dist::Communicator* communicator = nullptr;
};

/// The mean loss per unit over the samples, without gradients; each rank evaluates its shard
/// and the sums are all-reduced. The weights must not change during the call: their compute-dtype
/// copies are made once for it (nn/weight_copies.h).
metrics::EvalRecord evaluate(const EvaluationInput& input);

}  // namespace bigbatch::engine
