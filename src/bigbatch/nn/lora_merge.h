// Folding LoRA adapters into their base weights: after training, W + (alpha / r) B A is one plain
// weight that computes what the adapted layer did, for export or for inference without adapters.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "bigbatch/nn/lora.h"

namespace bigbatch::nn {

/// The weight of `layer` with its adapter folded in: W + scale B A, in W's layout ((out, in) for
/// kOutIn, (in, out) for kInOut), computed in float64 and returned in `dtype` on W's device;
/// W converted to `dtype` when the layer has no adapter. Computes no gradient.
torch::Tensor merged_lora_weight(const AdaptedLinearImpl& layer, torch::Dtype dtype);

/// Folds the adapter of every AdaptedLinear of `module` into its weight (merged_lora_weight, kept
/// in the weight's dtype: a weight stored in bfloat16 by store_frozen_weights stays bfloat16 and
/// is rounded once) and removes the adapter: the `lora_A` and `lora_B` submodules are
/// unregistered, so their parameters leave parameters() and state_tensors(), and the layer's
/// lora_A / lora_B become undefined (has_lora() false). The module then computes the same
/// function with plain weights (dropout of the adapters' inputs aside, which only trains).
/// An optimizer built before still holds the removed tensors: merge after training. Returns the
/// merged modules' names, in named_modules() order.
std::vector<std::string> merge_lora(torch::nn::Module& module);

}  // namespace bigbatch::nn
