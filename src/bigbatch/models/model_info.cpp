#include "bigbatch/models/model_info.h"

namespace bigbatch::models {

int64_t parameter_count(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& parameter : module.parameters(/*recurse=*/true)) {
    count += parameter.numel();
  }
  return count;
}

int64_t trainable_parameter_count(const torch::nn::Module& module) {
  int64_t count = 0;
  for (const auto& parameter : module.parameters(/*recurse=*/true)) {
    if (parameter.requires_grad())
      count += parameter.numel();
  }
  return count;
}

}  // namespace bigbatch::models
