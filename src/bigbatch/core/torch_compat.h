// The LibTorch APIs that differ between the versions bigbatch builds against (Debian's 1.13 and
// 2.x from the PyTorch wheel). Every version test of the code base is in this file.
#pragma once

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>

#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

/// Whether the LibTorch being compiled against is at least version major.minor.
#define BIGBATCH_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||           \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace bigbatch::compat {

// Autocast: 2.4 replaced the per-device functions (set_cpu_enabled, get_autocast_gpu_dtype, ...)
// with ones that take the device type, and deprecated the old ones.

/// Whether autocast is on for `device` (kCPU or kCUDA) in this thread.
inline bool autocast_enabled(c10::DeviceType device) {
#if BIGBATCH_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::kCPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

/// Turns autocast on or off for `device` (kCPU or kCUDA) in this thread.
inline void set_autocast_enabled(c10::DeviceType device, bool enabled) {
#if BIGBATCH_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == c10::kCPU)
    at::autocast::set_cpu_enabled(enabled);
  else
    at::autocast::set_enabled(enabled);
#endif
}

/// The dtype autocast computes in on `device` (kCPU or kCUDA).
inline c10::ScalarType autocast_dtype(c10::DeviceType device) {
#if BIGBATCH_TORCH_AT_LEAST(2, 4)
  return at::autocast::get_autocast_dtype(device);
#else
  return device == c10::kCPU ? at::autocast::get_autocast_cpu_dtype()
                             : at::autocast::get_autocast_gpu_dtype();
#endif
}

/// Sets the dtype autocast computes in on `device` (kCPU or kCUDA).
inline void set_autocast_dtype(c10::DeviceType device, c10::ScalarType dtype) {
#if BIGBATCH_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::kCPU)
    at::autocast::set_autocast_cpu_dtype(dtype);
  else
    at::autocast::set_autocast_gpu_dtype(dtype);
#endif
}

/// The entry of `impl` in an optimizer's state map, keyed by the TensorImpl's address: as the
/// address written as a string in 1.13 (c10::guts::to_string), as the address itself in 2.x.
template <typename StateMap>
auto find_optimizer_state(StateMap& state, c10::TensorImpl* impl) {
  if constexpr (std::is_same_v<typename StateMap::key_type, std::string>) {
    std::ostringstream key;
    key << impl;
    return state.find(key.str());
  } else {
    return state.find(impl);
  }
}

/// The state of `parameter` in `optimizer`, or null before its first step.
inline torch::optim::OptimizerParamState* optimizer_state_of(torch::optim::Optimizer& optimizer,
                                                             const torch::Tensor& parameter) {
  const auto found = find_optimizer_state(optimizer.state(), parameter.unsafeGetTensorImpl());
  return found == optimizer.state().end() ? nullptr : found->second.get();
}

/// What owns a parameter's gradient accumulator (the autograd node its hooks hang on):
/// std::shared_ptr in 1.13, c10::intrusive_ptr in recent 2.x.
using GradAccumulatorPtr =
    decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()));

}  // namespace bigbatch::compat
