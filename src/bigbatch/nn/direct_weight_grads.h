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

/// While one is open on this thread (the innermost of it and DirectWeightGradScope), the fused
/// blocks keep their bf16 weight gradients here instead of returning them (add_to_weight_grad), for
/// a backward whose gradients the caller adds to .grad later with add_weight_grad: no float32 copy
/// is made, and the sums come out bitwise those of autograd's cast and add. For
/// torch::autograd::grad on a thread that runs its own graph (CPU). Nestable with
/// DirectWeightGradScope: the innermost open decides whether a gradient is added or kept.
///
///   KeptWeightGradScope kept;
///   auto grads = torch::autograd::grad(...);     // kept weights' entries undefined
///   auto bf16 = kept.take();                      // those gradients, by weight
class KeptWeightGradScope {
 public:
  KeptWeightGradScope();
  ~KeptWeightGradScope();
  KeptWeightGradScope(const KeptWeightGradScope&) = delete;
  KeptWeightGradScope& operator=(const KeptWeightGradScope&) = delete;

  /// The gradients kept since the scope opened, by weight (its TensorImpl): bf16, contiguous, of
  /// the weight's shape; each weight's first gradient only (a later one went to autograd).
  std::unordered_map<const c10::TensorImpl*, torch::Tensor> take();

 private:
  friend bool add_to_weight_grad(const torch::Tensor& weight, const torch::Tensor& grad);

  std::unordered_map<const c10::TensorImpl*, torch::Tensor> kept_;
  KeptWeightGradScope* outer_;  // the scope open before this one, if any
  int direct_outside_;          // DirectWeightGradScopes open outside this one
};

/// Whether a DirectWeightGradScope is open on this thread.
bool direct_weight_grads();

/// How many gradients add_to_weight_grad has added on this thread so far.
int64_t direct_weight_grads_added();

/// Adds `grad` (bf16, contiguous, weight's shape) into weight.grad() as autograd's accumulation
/// would, widened to float32 in the same pass, where a DirectWeightGradScope is open on this
/// thread (or keeps it, where a KeptWeightGradScope is, and the weight has none kept yet) and the
/// weight allows it: a contiguous float32 CPU leaf whose gradient no hook watches
/// (Tensor::register_hook, a post-accumulate-grad hook, a pre-hook on its accumulator; post-hooks
/// on the accumulator, which run after it, still do) and whose .grad is undefined (it is then
/// made) or a contiguous float32 tensor of its shape that needs no gradient itself. Returns whether
/// it did; if not, the caller returns the gradient to autograd as usual.
bool add_to_weight_grad(const torch::Tensor& weight, const torch::Tensor& grad);

/// Adds `grad` (of weight's shape, in its dtype or a bf16 gradient of a float32 weight; sparse
/// only once .grad is defined) into weight.grad() as autograd's accumulation does: .grad made
/// from the first (a copy laid out like the weight), added to in place after. bf16 into a
/// contiguous float32 .grad is widened in the same pass; the sums are bitwise those of a cast and
/// an add either way. For a thread that owns the weight's .grad (no backward into it running
/// elsewhere).
void add_weight_grad(const torch::Tensor& weight, const torch::Tensor& grad);

}  // namespace bigbatch::nn
