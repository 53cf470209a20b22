#include "bigbatch/dist/communicator.h"

#include <map>

#include "bigbatch/core/check.h"

namespace bigbatch::dist {

void Communicator::all_reduce(torch::Tensor tensor, Traffic traffic, const std::string& what) {
  start_all_reduce(std::move(tensor), traffic, what)->wait();
}

bool Communicator::any(bool local, const std::string& what) {
  torch::Tensor flag = torch::full({1}, local ? 1.0 : 0.0, torch::kFloat64);  // (1)
  all_reduce(flag, Traffic::kControl, what);
  return flag.item<double>() > 0;
}

void broadcast_module(Communicator& communicator, torch::nn::Module& module) {
  const torch::NoGradGuard no_grad;
  std::map<torch::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const torch::Tensor& parameter : module.parameters())
    by_dtype[parameter.scalar_type()].push_back(parameter.detach());
  for (const torch::Tensor& buffer : module.buffers())
    by_dtype[buffer.scalar_type()].push_back(buffer.detach());
  for (auto& [dtype, tensors] : by_dtype) {
    std::vector<torch::Tensor> flat_parts;
    for (const torch::Tensor& tensor : tensors)
      flat_parts.push_back(tensor.reshape({-1}));
    torch::Tensor flat = torch::cat(flat_parts);  // (sum of numels)
    communicator.broadcast(flat, 0,
                           cat("broadcast of rank 0's ", c10::toString(dtype),
                               " parameters and "
                               "buffers"));
    int64_t offset = 0;
    for (torch::Tensor& tensor : tensors) {
      tensor.copy_(flat.narrow(0, offset, tensor.numel()).view_as(tensor));
      offset += tensor.numel();
    }
  }
}

}  // namespace bigbatch::dist
