// Weight gradients added straight into .grad. Under bf16 autocast a product's weight gradient
// comes out in bf16; handed to autograd, it is cast to a float32 copy and that copy added to the
// float32 weight's .grad: two passes and a temporary the size of the weight, per weight and
// micro-batch. Inside a backward() into .grad the fused transformer blocks can instead widen and
// add it in one pass themselves (the same float32 sums, bitwise) and hand autograd nothing for
// that weight.
#pragma once

#include <torch/torch.h>

namespace bigbatch::nn {

/// While one is open on this thread, the fused blocks add their bf16 weight gradients into the
/// weights' .grad themselves (add_to_weight_grad) instead of returning them. Open it only around
/// a backward() into .grad, as the engine's GradientAccumulator::backward does; never around
/// torch::autograd::grad, whose caller expects every gradient returned. Nestable.
class DirectWeightGradScope {
 public:
  DirectWeightGradScope();
  ~DirectWeightGradScope();
  DirectWeightGradScope(const DirectWeightGradScope&) = delete;
  DirectWeightGradScope& operator=(const DirectWeightGradScope&) = delete;
};

/// Whether a DirectWeightGradScope is open on this thread.
bool direct_weight_grads();

/// How many gradients add_to_weight_grad has added on this thread so far.
int64_t direct_weight_grads_added();

/// Adds `grad` (bf16, contiguous, weight's shape) into weight.grad() as autograd's accumulation
/// would, widened to float32 in the same pass, where a DirectWeightGradScope is open on this
/// thread and the weight allows it: a contiguous float32 CPU leaf whose gradient no hook watches
/// (Tensor::register_hook, a post-accumulate-grad hook, a pre-hook on its accumulator; post-hooks
/// on the accumulator, which run after it, still do) and whose .grad is undefined (it is then
/// made) or a contiguous float32 tensor of its shape that needs no gradient itself. Returns whether
/// it did; if not, the caller returns the gradient to autograd as usual.
bool add_to_weight_grad(const torch::Tensor& weight, const torch::Tensor& grad);

}  // namespace bigbatch::nn
