// Training or evaluation mode for a scope.
#pragma once

#include <torch/torch.h>

namespace bigbatch::nn {

/// Sets a module's train/eval mode and restores the previous one when it goes out of scope.
class ModeGuard {
 public:
  ModeGuard(torch::nn::Module& module, bool train) : module_(module), was_(module.is_training()) {
    module_.train(train);
  }
  ~ModeGuard() { module_.train(was_); }
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;

 private:
  torch::nn::Module& module_;
  bool was_;
};

}  // namespace bigbatch::nn
