// The LibTorch APIs that differ between the versions bigbatch builds against (Debian's 1.13 and
// 2.x from the PyTorch wheel). Every version test of the code base is in this file.
#pragma once

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>

#include <optional>
#include <sstream>
#include <stdexcept>
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

/// The key of `impl`'s entry in an optimizer's state map, the TensorImpl's address: as the
/// address written as a string in 1.13 (c10::guts::to_string), as the address itself in 2.x.
template <typename StateMap>
typename StateMap::key_type optimizer_state_key(const StateMap& /*state*/, c10::TensorImpl* impl) {
  if constexpr (std::is_same_v<typename StateMap::key_type, std::string>) {
    std::ostringstream key;
    key << impl;
    return key.str();
  } else {
    return impl;
  }
}

/// The entry of `impl` in an optimizer's state map.
template <typename StateMap>
auto find_optimizer_state(StateMap& state, c10::TensorImpl* impl) {
  return state.find(optimizer_state_key(state, impl));
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

/// Whether something watches `leaf`'s gradient before or as its accumulator adds it to .grad:
/// Tensor::register_hook, 2.x's post-accumulate-grad hooks, or pre-hooks on the accumulator node.
/// Post-hooks on that node (the data-parallel reducer's) run after it and do not count.
inline bool has_gradient_hooks(const torch::Tensor& leaf) {
  namespace impl = torch::autograd::impl;
  if (!impl::hooks(leaf).empty())
    return true;
  const auto accumulator = impl::try_get_grad_accumulator(leaf);
#if BIGBATCH_TORCH_AT_LEAST(2, 1)
  if (impl::post_acc_grad_hooks(leaf))
    return true;
  return accumulator &&
         (!accumulator->pre_hooks().empty() || !accumulator->tensor_pre_hooks().empty());
#else
  return accumulator && !accumulator->pre_hooks().empty();
#endif
}

// Fused kernels of 2.x.

/// Whether at::scaled_dot_product_attention is public (2.0 and later; 1.13 has a private one).
inline constexpr bool kHasFusedAttention = BIGBATCH_TORCH_AT_LEAST(2, 0);

/// at::scaled_dot_product_attention with the default 1/sqrt(D) scale. `allowed` is a bool mask
/// broadcastable to (B, H, T, S), true where a query attends to a key, or undefined for none.
/// Throws std::logic_error where kHasFusedAttention is false.
/// q (B, H, T, D), k (B, H, S, D), v (B, H, S, D) -> (B, H, T, D)
inline at::Tensor fused_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                  const at::Tensor& allowed, double dropout, bool causal) {
#if BIGBATCH_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(
      q, k, v, allowed.defined() ? std::optional<at::Tensor>(allowed) : std::nullopt, dropout,
      causal);
#else
  (void)q, (void)k, (void)v, (void)allowed, (void)dropout, (void)causal;
  throw std::logic_error("compat::fused_attention: this LibTorch has no fused attention");
#endif
}

/// Whether at::_fused_adamw_ has CPU kernels (2.4 and later; CUDA ones since 2.0).
inline constexpr bool kHasFusedAdamW = BIGBATCH_TORCH_AT_LEAST(2, 4);

/// One AdamW step of every tensor in `params` in one call (at::_fused_adamw_, no AMSGrad): the
/// same update as torch::optim::AdamW. `steps` holds each tensor's step count, already advanced,
/// as a float32 scalar tensor that the kernel only reads. Every list has one entry per
/// parameter, all of one dtype and device; a parameter, its gradient and its moments must have
/// the same strides (the kernel walks them as flat arrays). Throws std::logic_error where
/// kHasFusedAdamW is false.
inline void fused_adamw_(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                         at::TensorList exp_avg_sqs, at::TensorList steps, double lr, double beta1,
                         double beta2, double weight_decay, double eps) {
#if BIGBATCH_TORCH_AT_LEAST(2, 4)
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1,
                    beta2, weight_decay, eps, /*amsgrad=*/false, /*maximize=*/false);
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)steps, (void)lr, (void)beta1,
      (void)beta2, (void)weight_decay, (void)eps;
  throw std::logic_error("compat::fused_adamw_: this LibTorch has no fused AdamW for the CPU");
#endif
}

}  // namespace bigbatch::compat
