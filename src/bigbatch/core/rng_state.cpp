#include "bigbatch/core/rng_state.h"

#include <mutex>
#include <optional>

#include "bigbatch/core/check.h"
#include "bigbatch/core/device.h"

namespace bigbatch {
namespace {

/// The default generator of `device` (the generator that random ops without an explicit
/// generator draw from).
at::Generator default_generator(const torch::Device& device) {
  return at::globalContext().defaultGenerator(device);
}

}  // namespace

RngState::Snapshot RngState::snapshot(const torch::Device& device) {
  at::Generator generator = default_generator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return {device, generator.get_state()};
}

RngState RngState::capture(const torch::nn::Module& model) {
  return capture(device_of(model));
}

RngState RngState::capture(const torch::Device& device) {
  RngState result;
  result.cpu_ = snapshot(torch::kCPU);
#ifdef BIGBATCH_WITH_CUDA
  if (device.is_cuda()) {
    // A tensor's CUDA device always has an index; -1 would mean "current", which may change
    // between capture and restore.
    BB_CHECK(device.has_index(), "RngState::capture needs a CUDA device with an index, got ",
             device);
    result.accelerator_ = snapshot(device);
  }
#else
  (void)device;  // CPU-only build: only the CPU generator exists.
#endif
  return result;
}

void RngState::restore() const {
  for (const Snapshot* saved : {&cpu_, &accelerator_}) {
    if (!saved->state.defined())
      continue;
    at::Generator generator = default_generator(saved->device);
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(saved->state);
  }
}

std::vector<std::pair<std::string, torch::Tensor>> RngState::states() const {
  std::vector<std::pair<std::string, torch::Tensor>> result;
  for (const Snapshot* saved : {&cpu_, &accelerator_}) {
    if (saved->state.defined())
      result.emplace_back(saved->device.str(), saved->state);
  }
  return result;
}

RngState RngState::from_states(const std::vector<std::pair<std::string, torch::Tensor>>& states) {
  RngState result;
  for (const auto& [name, state] : states) {
    BB_CHECK_INPUT(state.defined() && state.dim() == 1 && state.scalar_type() == torch::kByte,
                   "the random generator state of ", name, " is not a uint8 vector");
    std::optional<torch::Device> device;
    try {
      device = torch::Device(name);
    } catch (const c10::Error&) {
      BB_CHECK_INPUT(false, "unknown device \"", name, "\" for a random generator state");
    }
    if (device->is_cpu()) {
      result.cpu_ = {*device, state.clone()};
      continue;
    }
#ifdef BIGBATCH_WITH_CUDA
    BB_CHECK_INPUT(device->is_cuda() && device->has_index(), "a random generator state of ", name,
                   " cannot be restored: expected cpu or cuda:N");
    result.accelerator_ = {*device, state.clone()};
#else
    BB_CHECK_INPUT(false, "a random generator state of ", name,
                   " cannot be restored: this bigbatch is built without CUDA");
#endif
  }
  return result;
}

}  // namespace bigbatch
