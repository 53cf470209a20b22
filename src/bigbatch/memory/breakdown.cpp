#include "bigbatch/memory/breakdown.h"

#include <algorithm>
#include <unordered_set>

namespace bigbatch::memory {
namespace {

int64_t bytes_of(const torch::Tensor& tensor) {
  return tensor.defined() ? static_cast<int64_t>(tensor.nbytes()) : 0;
}

/// The bytes of the state tensors of one parameter, for the optimizers LibTorch ships.
int64_t state_bytes(const torch::optim::OptimizerParamState& state) {
  namespace optim = torch::optim;
  if (const auto* s = dynamic_cast<const optim::AdamWParamState*>(&state))
    return bytes_of(s->exp_avg()) + bytes_of(s->exp_avg_sq()) + bytes_of(s->max_exp_avg_sq());
  if (const auto* s = dynamic_cast<const optim::AdamParamState*>(&state))
    return bytes_of(s->exp_avg()) + bytes_of(s->exp_avg_sq()) + bytes_of(s->max_exp_avg_sq());
  if (const auto* s = dynamic_cast<const optim::SGDParamState*>(&state))
    return bytes_of(s->momentum_buffer());
  if (const auto* s = dynamic_cast<const optim::AdagradParamState*>(&state))
    return bytes_of(s->sum());
  if (const auto* s = dynamic_cast<const optim::RMSpropParamState*>(&state))
    return bytes_of(s->square_avg()) + bytes_of(s->momentum_buffer()) + bytes_of(s->grad_avg());
  return 0;
}

}  // namespace

MemoryBreakdown breakdown(const torch::nn::Module& module, const torch::optim::Optimizer* optimizer,
                          int64_t peak_during_step) {
  MemoryBreakdown result;
  std::unordered_set<const void*> seen;
  for (const torch::Tensor& parameter : module.parameters()) {
    if (!seen.insert(parameter.unsafeGetTensorImpl()).second)
      continue;
    result.parameters += bytes_of(parameter);
    const torch::Tensor& grad = parameter.grad();
    if (grad.defined())
      result.gradients += bytes_of(grad);
    else if (parameter.requires_grad())
      result.gradients += bytes_of(parameter);
  }
  for (const torch::Tensor& buffer : module.buffers())
    if (seen.insert(buffer.unsafeGetTensorImpl()).second)
      result.parameters += bytes_of(buffer);
  if (optimizer != nullptr)
    for (const auto& entry : optimizer->state())
      if (entry.second)
        result.optimizer_state += state_bytes(*entry.second);
  result.peak = peak_during_step;
  result.activations = std::max<int64_t>(
      peak_during_step - result.parameters - result.gradients - result.optimizer_state, 0);
  return result;
}

}  // namespace bigbatch::memory
