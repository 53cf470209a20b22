#include "bigbatch/nn/embedding.h"

#include <tuple>
#include <vector>

#include "bigbatch/core/check.h"

namespace bigbatch::nn {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

thread_local SparseEmbeddingGrad this_thread_mode = SparseEmbeddingGrad::kNever;

/// Whether a gradient for `weight` may be sparse under `mode`.
bool sparse_allowed(SparseEmbeddingGrad mode, const Tensor& weight) {
  if (mode == SparseEmbeddingGrad::kAlways)
    return true;
  if (mode == SparseEmbeddingGrad::kNever)
    return false;
  const Tensor& grad = weight.grad();
  return grad.defined() && grad.layout() == torch::kStrided &&
         grad.scalar_type() == weight.scalar_type() && grad.device() == weight.device();
}

/// The sum of the rows of `grad` (M, C) that share an index of `inverse` (M), in row order, for
/// each of `rows` indices, in float32 or wider. -> (rows, C)
Tensor summed_rows(const Tensor& grad, const Tensor& inverse, int64_t rows) {
  const Tensor g = grad.scalar_type() == torch::kDouble ? grad.contiguous()
                                                        : grad.to(torch::kFloat).contiguous();
  const Tensor sums = at::zeros({rows, g.size(1)}, g.options());
  const Tensor index = inverse.contiguous();
  const int64_t width = g.size(1), count = g.size(0);
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "summed_rows", [&] {
    const scalar_t* from = g.data_ptr<scalar_t>();
    scalar_t* to = sums.data_ptr<scalar_t>();
    const int64_t* where = index.data_ptr<int64_t>();
    for (int64_t i = 0; i < count; ++i) {
      scalar_t* row = to + where[i] * width;
      const scalar_t* add = from + i * width;
      for (int64_t j = 0; j < width; ++j)
        row[j] += add[j];
    }
  });
  return sums.to(grad.scalar_type());
}

struct Embedding : torch::autograd::Function<Embedding> {
  // weight (V, C), ids (...) -> (..., C)
  static Tensor forward(AutogradContext* ctx, const Tensor& weight, const Tensor& ids) {
    ctx->save_for_backward({ids});
    ctx->saved_data["weight"] = weight;  // for its .grad and size, not its values
    std::vector<int64_t> sizes = ids.sizes().vec();
    sizes.push_back(weight.size(1));
    return weight.index_select(0, ids.reshape({-1})).view(sizes);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const Tensor ids = ctx->get_saved_variables()[0].reshape({-1});  // (M)
    const Tensor weight = ctx->saved_data.at("weight").toTensor();
    const Tensor grad = grads[0].reshape({ids.size(0), weight.size(1)});  // (M, C)
    Tensor used, inverse;                                                 // (U) sorted, (M)
    std::tie(used, inverse, std::ignore) =
        at::_unique2(ids, /*sorted=*/true, /*return_inverse=*/true, /*return_counts=*/false);
    const Tensor sums = summed_rows(grad, inverse, used.size(0));  // (U, C)
    const std::vector<int64_t> size{weight.size(0), weight.size(1)};
    if (sparse_allowed(this_thread_mode, weight)) {
      return {at::_sparse_coo_tensor_unsafe(used.unsqueeze(0), sums, size)._coalesced_(true),
              Tensor()};
    }
    return {at::zeros(size, sums.options()).index_copy_(0, used, sums), Tensor()};
  }
};

}  // namespace

SparseEmbeddingGradScope::SparseEmbeddingGradScope(SparseEmbeddingGrad mode)
    : previous_(this_thread_mode) {
  this_thread_mode = mode;
}

SparseEmbeddingGradScope::~SparseEmbeddingGradScope() {
  this_thread_mode = previous_;
}

SparseEmbeddingGrad sparse_embedding_grad() {
  return this_thread_mode;
}

torch::Tensor embedding(const torch::Tensor& weight, const torch::Tensor& ids) {
  BB_CHECK_INPUT(weight.dim() == 2, "embedding: the weight must be (V, C), got ", weight.sizes());
  BB_CHECK_INPUT(ids.scalar_type() == torch::kLong || ids.scalar_type() == torch::kInt,
                 "embedding: ids must be int64 or int32, got ", ids.scalar_type());
  // Its backward's row sums are a CPU loop; a GPU, inference and a frozen table take LibTorch's.
  if (!weight.requires_grad() || !torch::GradMode::is_enabled() || !weight.device().is_cpu())
    return torch::embedding(weight, ids);
  return Embedding::apply(weight, ids.to(torch::kLong));
}

}  // namespace bigbatch::nn
