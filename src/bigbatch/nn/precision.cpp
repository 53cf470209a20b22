#include "bigbatch/nn/precision.h"

#include <ATen/autocast_mode.h>

#include "bigbatch/core/check.h"
#include "bigbatch/core/torch_compat.h"

namespace bigbatch::nn {
namespace {

/// Sets the thread's autocast settings; the nesting depth and the cache are left alone.
void apply(const AutocastState& state) {
  compat::set_autocast_dtype(torch::kCPU, state.cpu_dtype);
  compat::set_autocast_enabled(torch::kCPU, state.cpu_enabled);
#ifdef BIGBATCH_WITH_CUDA
  compat::set_autocast_dtype(torch::kCUDA, state.cuda_dtype);
  compat::set_autocast_enabled(torch::kCUDA, state.cuda_enabled);
#endif
}

}  // namespace

Precision parse_precision(const std::string& text, const std::string& field) {
  if (text == "fp32")
    return Precision::kFp32;
  if (text == "bf16")
    return Precision::kBf16;
  if (text == "fp16")
    return Precision::kFp16;
  throw InputError(cat(field, " must be \"fp32\", \"bf16\" or \"fp16\", got \"", text, "\""));
}

std::string to_string(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return "fp32";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp16:
      return "fp16";
  }
  return "?";
}

torch::ScalarType compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::kFp32:
      return torch::kFloat;
    case Precision::kBf16:
      return torch::kBFloat16;
    case Precision::kFp16:
      return torch::kHalf;
  }
  return torch::kFloat;
}

void check_precision_supported(Precision precision, torch::DeviceType device_type,
                               const std::string& field) {
  if (precision == Precision::kFp32)
    return;
  if (device_type == torch::kCPU) {
    BB_CHECK_INPUT(precision != Precision::kFp16, field,
                   " = \"fp16\" needs a CUDA build and device: autocast on CPU computes in "
                   "bfloat16 only (use \"bf16\")");
    return;
  }
#ifdef BIGBATCH_WITH_CUDA
  BB_CHECK_INPUT(device_type == torch::kCUDA, field, " = \"", to_string(precision),
                 "\" autocasts CPU and CUDA only, not ", c10::DeviceTypeName(device_type));
#else
  throw InputError(cat(field, " = \"", to_string(precision), "\" on ",
                       c10::DeviceTypeName(device_type),
                       " needs a CUDA build of bigbatch; this one autocasts CPU only"));
#endif
}

bool cpu_autocast_to_bf16() {
  return compat::autocast_enabled(torch::kCPU) &&
         compat::autocast_dtype(torch::kCPU) == torch::kBFloat16;
}

AutocastState AutocastState::capture() {
  AutocastState state;
  state.cpu_enabled = compat::autocast_enabled(torch::kCPU);
  state.cpu_dtype = compat::autocast_dtype(torch::kCPU);
#ifdef BIGBATCH_WITH_CUDA
  state.cuda_enabled = compat::autocast_enabled(torch::kCUDA);
  state.cuda_dtype = compat::autocast_dtype(torch::kCUDA);
#endif
  return state;
}

AutocastGuard::AutocastGuard(Precision precision, torch::DeviceType device_type) {
  if (precision == Precision::kFp32)
    return;
  check_precision_supported(precision, device_type, "precision");
  AutocastState state = AutocastState::capture();
  if (device_type == torch::kCPU) {
    state.cpu_enabled = true;
    state.cpu_dtype = compute_dtype(precision);
  } else {
    state.cuda_enabled = true;
    state.cuda_dtype = compute_dtype(precision);
  }
  enter(state);
}

AutocastGuard::AutocastGuard(const AutocastState& state) {
  enter(state);
}

void AutocastGuard::enter(const AutocastState& state) {
  previous_ = AutocastState::capture();
  apply(state);
  at::autocast::increment_nesting();
  entered_ = true;
}

AutocastGuard::~AutocastGuard() {
  if (!entered_)
    return;
  if (at::autocast::decrement_nesting() == 0)
    at::autocast::clear_cache();
  apply(previous_);
}

}  // namespace bigbatch::nn
