// Compute precision of forward passes: autocast to bfloat16 or float16 while weights, gradients
// and their accumulation stay in the parameters' dtype (float32).
#pragma once

#include <torch/torch.h>

#include <string>

namespace bigbatch::nn {

/// The dtype forward passes compute in. Parameters, gradients and the optimizer stay in the
/// model's own dtype whatever this says.
enum class Precision {
  kFp32,  ///< no autocast: everything in the parameters' dtype
  kBf16,  ///< autocast to bfloat16 (CPU, and CUDA builds)
  kFp16,  ///< autocast to float16 (CUDA builds only; wants a loss scaler)
};

/// Reads "fp32" | "bf16" | "fp16"; anything else throws InputError naming `field` and `text`.
Precision parse_precision(const std::string& text, const std::string& field);
/// The config spelling: "fp32", "bf16" or "fp16".
std::string to_string(Precision precision);
/// The dtype autocast computes in: kBFloat16, kHalf, or kFloat for kFp32.
torch::ScalarType compute_dtype(Precision precision);
/// Throws InputError naming `field` unless autocast in `precision` exists on `device_type`:
/// fp16 needs CUDA (LibTorch 1.13 autocasts CPU to bfloat16 only), and CUDA needs a CUDA build.
void check_precision_supported(Precision precision, torch::DeviceType device_type,
                               const std::string& field);

/// The thread-local autocast settings of LibTorch: whether CPU (and, in CUDA builds, CUDA)
/// autocast is on and to which dtype. The nesting depth and the cast cache are not part of it.
struct AutocastState {
  bool cpu_enabled = false;
  torch::ScalarType cpu_dtype = torch::kBFloat16;
  bool cuda_enabled = false;
  torch::ScalarType cuda_dtype = torch::kHalf;

  /// The settings in effect on this thread now.
  static AutocastState capture();
  /// Whether any device autocasts.
  bool any_enabled() const { return cpu_enabled || cuda_enabled; }
};

/// Whether CPU autocast is on, to bfloat16, on this thread: where CPU products compute in bf16.
bool cpu_autocast_to_bf16();

/// Runs forward passes under autocast for its lifetime, like `with torch.autocast(...)`:
///   {
///     nn::AutocastGuard autocast(nn::Precision::kBf16, torch::kCPU);
///     loss = cross_entropy(model->forward(x), y);  // Linear/matmul in bf16, the loss in fp32
///   }
///   loss.backward();  // outside the guard; gradients of fp32 parameters are fp32
/// Apply it to forward passes only, not around backward or the optimizer step. On exit the
/// previous settings come back exactly, and leaving the outermost guard clears LibTorch's cache
/// of casted weights (so a weight updated by the optimizer is cast afresh next time). Guards nest.
/// Precision::kFp32 changes nothing.
class AutocastGuard {
 public:
  /// Autocasts `device_type` to precision's dtype. Throws InputError (before changing anything)
  /// when check_precision_supported fails.
  AutocastGuard(Precision precision, torch::DeviceType device_type);
  /// Enters exactly `state` (for instance one captured earlier, to recompute a forward pass under
  /// the settings it first ran with); autocast is off where `state` has it off.
  explicit AutocastGuard(const AutocastState& state);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  void enter(const AutocastState& state);

  AutocastState previous_;
  bool entered_ = false;
};

}  // namespace bigbatch::nn
