// Facts about a model that the plan table and the CLI print.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace bigbatch::models {

/// Total number of scalar parameters in `module` and all its submodules (buffers excluded).
int64_t parameter_count(const torch::nn::Module& module);

/// Scalar parameters that train (requires_grad): all of them, or with LoRA the adapters and the
/// modules trained in full.
int64_t trainable_parameter_count(const torch::nn::Module& module);

}  // namespace bigbatch::models
