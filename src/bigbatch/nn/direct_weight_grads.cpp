#include "bigbatch/nn/direct_weight_grads.h"

#include "bigbatch/core/torch_compat.h"
#include "bigbatch/nn/bf16_add_kernels.h"

namespace bigbatch::nn {
namespace {

thread_local int open_scopes = 0;
thread_local int64_t added = 0;

/// Whether `t` is a contiguous CPU tensor of `dtype` with `sizes`.
bool plain(const torch::Tensor& t, torch::ScalarType dtype, c10::IntArrayRef sizes) {
  return t.defined() && t.device().is_cpu() && t.layout() == torch::kStrided &&
         t.scalar_type() == dtype && t.is_contiguous() && t.sizes() == sizes;
}

}  // namespace

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
  if (open_scopes == 0 || !weight.defined() || !weight.is_leaf() || !weight.requires_grad() ||
      !plain(weight, torch::kFloat, weight.sizes()) ||
      !plain(grad, torch::kBFloat16, weight.sizes()) || compat::has_gradient_hooks(weight))
    return false;
  torch::Tensor& sum = weight.mutable_grad();
  const bool fresh = !sum.defined();
  if (!fresh && (!plain(sum, torch::kFloat, weight.sizes()) || sum.requires_grad()))
    return false;
  if (fresh)
    sum = at::empty_like(weight, at::MemoryFormat::Contiguous);
  float* into = sum.data_ptr<float>();
  kernels::add_bf16_to_float(grad.data_ptr<at::BFloat16>(), fresh ? nullptr : into, into,
                             grad.numel());
  if (!fresh)
    sum.unsafeGetTensorImpl()->bump_version();  // an in-place change, as autograd's add makes
  ++added;
  return true;
}

}  // namespace bigbatch::nn
