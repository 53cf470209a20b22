#include "bigbatch/dist/communicator.h"

#include <functional>
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

namespace {

/// Runs `collective` once per dtype on `tensors` flattened into one tensor, and copies the
/// result back into them.
void over_flattened(const std::vector<torch::Tensor>& tensors,
                    const std::function<void(torch::Tensor& flat, torch::ScalarType)>& collective) {
  const torch::NoGradGuard no_grad;
  std::map<torch::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const torch::Tensor& tensor : tensors)
    by_dtype[tensor.scalar_type()].push_back(tensor.detach());
  for (auto& [dtype, group] : by_dtype) {
    std::vector<torch::Tensor> flat_parts;
    for (const torch::Tensor& tensor : group)
      flat_parts.push_back(tensor.reshape({-1}));
    torch::Tensor flat = torch::cat(flat_parts);  // (sum of numels)
    collective(flat, dtype);
    int64_t offset = 0;
    for (torch::Tensor& tensor : group) {
      tensor.copy_(flat.narrow(0, offset, tensor.numel()).view_as(tensor));
      offset += tensor.numel();
    }
  }
}

}  // namespace

void broadcast_module(Communicator& communicator, torch::nn::Module& module) {
  std::vector<torch::Tensor> tensors = module.parameters();
  for (const torch::Tensor& buffer : module.buffers())
    tensors.push_back(buffer);
  over_flattened(tensors, [&](torch::Tensor& flat, torch::ScalarType dtype) {
    communicator.broadcast(
        flat, 0, cat("broadcast of rank 0's ", c10::toString(dtype), " parameters and buffers"));
  });
}

void average_buffers(Communicator& communicator, torch::nn::Module& module) {
  std::vector<torch::Tensor> buffers;
  for (const torch::Tensor& buffer : module.buffers()) {
    if (buffer.is_floating_point())
      buffers.push_back(buffer);
  }
  over_flattened(buffers, [&](torch::Tensor& flat, torch::ScalarType) {
    communicator.all_reduce(flat, Traffic::kControl, "all-reduce of the buffers");
    flat.div_(static_cast<double>(communicator.world_size()));
  });
}

}  // namespace bigbatch::dist
