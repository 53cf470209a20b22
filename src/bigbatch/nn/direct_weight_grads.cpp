#include "bigbatch/nn/direct_weight_grads.h"

#include "bigbatch/core/torch_compat.h"
#include "bigbatch/nn/bf16_add_kernels.h"

namespace bigbatch::nn {
namespace {

thread_local int open_scopes = 0;
thread_local int64_t added = 0;
thread_local KeptWeightGradScope* kept_scope = nullptr;  // the innermost open

/// Whether `t` is a contiguous CPU tensor of `dtype` with `sizes`.
bool plain(const torch::Tensor& t, torch::ScalarType dtype, c10::IntArrayRef sizes) {
  return t.defined() && t.device().is_cpu() && t.layout() == torch::kStrided &&
         t.scalar_type() == dtype && t.is_contiguous() && t.sizes() == sizes;
}

/// Whether `weight` is a float32 leaf whose gradient may bypass autograd: contiguous on the CPU,
/// and no hook watches it.
bool bypassable(const torch::Tensor& weight) {
  return weight.defined() && weight.is_leaf() && weight.requires_grad() &&
         plain(weight, torch::kFloat, weight.sizes()) && !compat::has_gradient_hooks(weight);
}

/// Widens bf16 `grad` into `sum` (float32, contiguous, its shape): made where undefined, added
/// to in place otherwise.
void widen_into(torch::Tensor& sum, const torch::Tensor& weight, const torch::Tensor& grad) {
  const bool fresh = !sum.defined();
  if (fresh)
    sum = at::empty_like(weight, at::MemoryFormat::Contiguous);
  float* into = sum.data_ptr<float>();
  kernels::add_bf16_to_float(grad.data_ptr<at::BFloat16>(), fresh ? nullptr : into, into,
                             grad.numel());
  if (!fresh)
    sum.unsafeGetTensorImpl()->bump_version();  // an in-place change, as autograd's add makes
}

/// Whether `sum` can take widen_into: undefined, or a contiguous float32 buffer of `weight`'s
/// shape that needs no gradient itself.
bool widenable_into(const torch::Tensor& sum, const torch::Tensor& weight) {
  return !sum.defined() || (plain(sum, torch::kFloat, weight.sizes()) && !sum.requires_grad());
}

}  // namespace

KeptWeightGradScope::KeptWeightGradScope() : outer_(kept_scope), direct_outside_(open_scopes) {
  kept_scope = this;
  open_scopes = 0;  // the innermost scope decides
}

KeptWeightGradScope::~KeptWeightGradScope() {
  kept_scope = outer_;
  open_scopes = direct_outside_;
}

std::unordered_map<const c10::TensorImpl*, torch::Tensor> KeptWeightGradScope::take() {
  return std::move(kept_);
}

DirectWeightGradScope::DirectWeightGradScope() {
  ++open_scopes;
}

DirectWeightGradScope::~DirectWeightGradScope() {
  --open_scopes;
}

bool direct_weight_grads() {
  return open_scopes > 0;
}

int64_t direct_weight_grads_added() {
  return added;
}

bool add_to_weight_grad(const torch::Tensor& weight, const torch::Tensor& grad) {
  if ((open_scopes == 0 && kept_scope == nullptr) || !bypassable(weight) ||
      !plain(grad, torch::kBFloat16, weight.sizes()))
    return false;
  if (open_scopes == 0) {  // kept: the caller adds it to .grad later
    return kept_scope->kept_.emplace(weight.unsafeGetTensorImpl(), grad).second;
  }
  torch::Tensor& sum = weight.mutable_grad();
  if (!widenable_into(sum, weight))
    return false;
  widen_into(sum, weight, grad);
  ++added;
  return true;
}

void add_weight_grad(const torch::Tensor& weight, const torch::Tensor& grad) {
  torch::Tensor& sum = weight.mutable_grad();
  if (plain(weight, torch::kFloat, weight.sizes()) &&
      plain(grad, torch::kBFloat16, weight.sizes()) && widenable_into(sum, weight)) {
    widen_into(sum, weight, grad);
    return;
  }
  // As LibTorch's AccumulateGrad does: the first gradient is copied into a buffer laid out like
  // the weight (a returned gradient may be an expanded view, or shared by two weights), later
  // ones are added to it in place.
  if (sum.defined())
    sum.add_(grad);
  else
    sum = torch::empty_like(weight).copy_(grad);
}

}  // namespace bigbatch::nn
