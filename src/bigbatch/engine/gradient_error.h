// How far an accumulated window gradient is from the exact one: the window gradient under a
// compute precision and a number of micro-batches, against a float64 reference.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "bigbatch/data/dataset.h"
#include "bigbatch/engine/objective.h"
#include "bigbatch/nn/precision.h"

namespace bigbatch::engine {

/// Which window gradients to compare with the reference.
struct GradientErrorOptions {
  /// Micro-batches per window; each must divide the window's size.
  TORCH_ARG(std::vector<int64_t>, accum_steps) = std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64};
  /// Compute precisions of the forward passes (autocast on CPU).
  TORCH_ARG(std::vector<nn::Precision>, precisions) = std::vector<nn::Precision>{
      nn::Precision::kFp32, nn::Precision::kBf16};
};

/// One comparison.
struct GradientError {
  nn::Precision precision = nn::Precision::kFp32;
  int64_t accum_steps = 1;
  int64_t micro_batch = 0;
  /// ||g - g_ref|| / ||g_ref|| over all parameters' gradients as one vector.
  double relative_error = 0.0;
};

/// For each precision and accum_steps: the window gradient of `window` accumulated over that many
/// equal micro-batches (each micro-batch's summed loss over the window's units, backward into
/// float32 .grad, forward under nn::AutocastGuard), compared with the reference: the same
/// weights cast to float64, the whole window in one pass, no autocast.
///
/// `model` must be float32 and is left as it was, also when this throws (weights bit-identical:
/// float32 -> float64 -> float32 is exact; gradients reset; mode restored). It runs in eval mode so
/// dropout cannot differ between passes. `objective` computes loss_sum through `model` without
/// autocast of its own. Throws InputError when an accum_steps does not divide the window or a
/// precision is not available on CPU.
std::vector<GradientError> window_gradient_errors(torch::nn::Module& model, Objective& objective,
                                                  const data::Batch& window,
                                                  const GradientErrorOptions& options);

}  // namespace bigbatch::engine
