// Facts about a model that the plan table and the CLI print.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace bigbatch::models {

/// Total number of scalar parameters in `module` and all its submodules (buffers excluded).
int64_t parameter_count(const torch::nn::Module& module);

}  // namespace bigbatch::models
