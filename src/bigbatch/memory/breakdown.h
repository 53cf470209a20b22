// Where the memory of a training step goes: parameters, gradients, optimizer state, activations.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace bigbatch::memory {

/// Bytes of one training step by kind. Parameters, gradients and optimizer state are exact
/// tensor sizes; activations is what remains of the measured step peak, so it also holds
/// temporaries, the loss and anything else alive at the peak (approximate by construction).
struct MemoryBreakdown {
  /// Parameters and buffers of the model (each tensor once, even when shared by two modules).
  int64_t parameters = 0;
  /// Gradients: the defined `.grad` tensors, and for trainable parameters without one yet the
  /// parameter size (the gradient that backward will create).
  int64_t gradients = 0;
  /// Optimizer state tensors (AdamW/Adam moments, SGD momentum, Adagrad sums, RMSprop averages).
  int64_t optimizer_state = 0;
  /// peak - parameters - gradients - optimizer_state, clamped at 0.
  int64_t activations = 0;
  /// The measured peak of the step (the `peak_during_step` given to breakdown()).
  int64_t peak = 0;
};

/// Splits `peak_during_step` (for example MemoryTracker::peak_bytes() or measure_peak() plus the
/// usage before the step, counted from before the model was created) into a MemoryBreakdown.
/// `optimizer` may be null (no state). State of optimizers other than AdamW, Adam, SGD, Adagrad
/// and RMSprop is not recognised and counts as activations.
MemoryBreakdown breakdown(const torch::nn::Module& module, const torch::optim::Optimizer* optimizer,
                          int64_t peak_during_step);

}  // namespace bigbatch::memory
