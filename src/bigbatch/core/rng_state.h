// Capture and replay of the default random generators' states.
#pragma once

#include <torch/torch.h>

namespace bigbatch {

/// A snapshot of the random generators that a computation on one device draws from: the default
/// CPU generator and, in CUDA builds (BIGBATCH_WITH_CUDA) for a CUDA device, that device's
/// default CUDA generator. Usage, to run something twice with the same random draws:
///   const RngState before = RngState::capture(x.device());
///   auto a = torch::dropout(x, 0.1, true);
///   before.restore();
///   auto b = torch::dropout(x, 0.1, true);  // torch::equal(a, b)
class RngState {
 public:
  /// The current states of the generators used for tensors on `device`.
  static RngState capture(const torch::Device& device);
  /// Sets the generators back to the captured states.
  void restore() const;

 private:
  /// A copy of one generator's state.
  struct Snapshot {
    torch::Device device;
    torch::Tensor state;  // (N) uint8, the generator's serialised state
  };
  static Snapshot snapshot(const torch::Device& device);

  Snapshot cpu_{torch::kCPU, {}};
  Snapshot accelerator_{torch::kCPU, {}};  // state undefined unless a CUDA device was captured
};

}  // namespace bigbatch
