// Capture and replay of the default random generators' states.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

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
  /// The current states of the generators `model`'s computations draw from (dropout): those of
  /// the device of its first parameter (the CPU for a model without parameters).
  static RngState capture(const torch::nn::Module& model);
  /// Sets the generators back to the captured states.
  void restore() const;

  /// The captured states by device name ("cpu", "cuda:0"), to save in a checkpoint: each a (N)
  /// uint8 tensor, the generator's own serialised state.
  std::vector<std::pair<std::string, torch::Tensor>> states() const;
  /// A snapshot made of saved states(). Throws InputError for a device this build cannot
  /// address (a CUDA state in a CPU-only build) or a state that is not a uint8 vector.
  static RngState from_states(const std::vector<std::pair<std::string, torch::Tensor>>& states);

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
