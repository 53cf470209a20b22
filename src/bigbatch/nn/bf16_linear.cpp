#include "bigbatch/nn/bf16_linear.h"

#include <c10/util/intrusive_ptr.h>

#include <optional>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/bf16_add_kernels.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/fp32_matmul.h"
#include "bigbatch/nn/fused_block.h"
#include "bigbatch/nn/fused_block_parts.h"
#include "bigbatch/nn/precision.h"
#include "bigbatch/nn/row_split_products.h"
#include "bigbatch/nn/weight_copies.h"

namespace bigbatch::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

/// The float32 input this thread cast last and its cast, both held weakly: while the cast lives
/// (saved for backward by the products that read it) and the input is unchanged, the next
/// product of the same input reads the same cast. Nothing is kept alive by it.
struct LastInputCast {
  std::optional<WeakImpl> source;
  uint32_t version = 0;
  std::optional<WeakImpl> cast;
};

thread_local LastInputCast last_input_cast;

/// The weight-gradient products here run through gemms_side_by_side: perhaps on one thread each.
constexpr block_parts::ProductThreads kMaybeOneThread = block_parts::ProductThreads::kMaybeOne;

/// `input` in bf16: itself, the cast made for the previous product of the same unchanged input,
/// or a new cast (the values autocast's own cast would make).
torch::Tensor input_in_bf16(const torch::Tensor& input) {
  if (input.scalar_type() == torch::kBFloat16)
    return input;
  LastInputCast& last = last_input_cast;
  if (last.source && last.cast && !last.source->expired() &&
      last.source->_unsafe_get_target() == input.unsafeGetTensorImpl() &&
      last.version == input._version()) {
    c10::intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl> cast = last.cast->lock();
    if (cast && cast->sizes() == input.sizes())
      return torch::Tensor(std::move(cast));
  }
  torch::Tensor cast = input.to(torch::kBFloat16);  // (..., in)
  last.source = WeakImpl(input.getIntrusivePtr());
  last.version = input._version();
  last.cast = WeakImpl(cast.getIntrusivePtr());
  return cast;
}

/// Throws where a backward records a graph (create_graph): the nodes have no second derivative.
void check_no_second_derivative() {
  BB_CHECK(!torch::GradMode::is_enabled(),
           "nn::linear under CPU bf16 autocast runs as one node and has no second derivative "
           "(backward with create_graph); run it with model.block_kernel = \"composite\" "
           "(nn::BlockKernel::kComposite)");
}

/// native_bf16_linears' node. Inputs: the input, then the weights, then the biases (none, or one
/// per weight); one output per weight.
struct Bf16LinearsFunction : torch::autograd::Function<Bf16LinearsFunction> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& input,
                               at::TensorList weights, at::TensorList biases) {
    const block_parts::KernelScope scope;
    ctx->set_materialize_grads(false);  // an unused output's gradient stays undefined: no product
    const torch::Tensor input_bf16 = input_in_bf16(input);                     // (..., in)
    const torch::Tensor rows = input_bf16.reshape({-1, input_bf16.size(-1)});  // (N, in)
    bool any_weight_grad = false;
    variable_list saved;
    variable_list outputs;
    std::vector<ProductOperands> products;  // rows @ W_j^T, without biases
    for (size_t j = 0; j < weights.size(); ++j) {
      any_weight_grad = any_weight_grad || weights[j].requires_grad();
      const torch::Tensor weight_bf16 = weight_in_dtype(weights[j], torch::kBFloat16);  // (out, in)
      saved.push_back(weight_bf16);
      if (biases.empty()) {
        products.emplace_back(rows, weight_bf16.t());
        continue;
      }
      outputs.push_back(
          gemm_bias(weight_in_dtype(biases[j], torch::kBFloat16), rows, weight_bf16.t()));
    }
    if (biases.empty())
      outputs = gemms_side_by_side(products);  // independent products: side by side where faster
    std::vector<int64_t> sizes = input.sizes().vec();
    for (size_t j = 0; j < weights.size(); ++j) {
      sizes.back() = weights[j].size(0);
      outputs[j] = outputs[j].view(sizes);  // (..., out)
    }
    // The input only where a weight takes a gradient (a frozen one's backward reads none).
    saved.push_back(any_weight_grad ? rows : torch::Tensor());
    ctx->save_for_backward(saved);
    ctx->saved_data["weights"] = weights.vec();
    ctx->saved_data["input_sizes"] = input.sizes().vec();
    ctx->saved_data["input_dtype"] = static_cast<int64_t>(input.scalar_type());
    ctx->saved_data["with_bias"] = !biases.empty();
    ctx->saved_data["bias_dtype"] =
        static_cast<int64_t>(biases.empty() ? torch::kFloat : biases[0].scalar_type());
    return outputs;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    check_no_second_derivative();
    const block_parts::KernelScope scope;
    const variable_list saved = ctx->get_saved_variables();
    const std::vector<torch::Tensor> weights = ctx->saved_data["weights"].toTensorVector();
    const size_t count = weights.size();
    const torch::Tensor& rows = saved[count];  // (N, in); undefined where no weight takes a grad
    const auto input_dtype = static_cast<torch::ScalarType>(ctx->saved_data["input_dtype"].toInt());
    const auto bias_dtype = static_cast<torch::ScalarType>(ctx->saved_data["bias_dtype"].toInt());
    const bool with_bias = ctx->saved_data["with_bias"].toBool();
    variable_list result(1 + count + count);  // input, weights, biases (unused where none)
    std::vector<ProductOperands> operands;    // input gradients' products, the last output's first
    torch::Tensor rows_transposed;            // rows^T (in, N), made once where a weight uses it
    std::vector<block_parts::WeightProduct> weight_products;  // of the weights in `weight_of`
    std::vector<size_t> weight_of;
    for (size_t j = count; j-- > 0;) {
      if (!grads[j].defined())
        continue;
      const torch::Tensor& weight_bf16 = saved[j];
      const torch::Tensor grad = block_parts::in_dtype(grads[j], torch::kBFloat16)
                                     .reshape({-1, weight_bf16.size(0)});  // (N, out)
      if (ctx->needs_input_grad(0))
        operands.emplace_back(grad, weight_bf16);  // the input's gradient from this output
      if (ctx->needs_input_grad(1 + j)) {
        torch::Tensor input = rows;
        if (block_parts::transposed_input_pays(grad.size(0), grad.size(1), rows.size(1))) {
          if (!rows_transposed.defined())
            rows_transposed = block_parts::transposed_copy(rows);
          input = rows_transposed.t();  // taken instead of a copy of its own
        }
        weight_products.push_back(
            block_parts::weight_product_operands(grad, input, kMaybeOneThread));
        weight_of.push_back(j);
      }
      if (with_bias && ctx->needs_input_grad(1 + count + j))
        result[1 + count + j] = block_parts::in_dtype(grad.sum(0), bias_dtype);  // (out)
    }
    // Every product here is independent of the others: side by side where that is faster.
    const size_t input_products = operands.size();
    for (const block_parts::WeightProduct& product : weight_products)
      operands.emplace_back(product.a, product.b);
    const std::vector<torch::Tensor> products = gemms_side_by_side(operands);
    const std::vector<torch::Tensor> input_grads(products.begin(),
                                                 products.begin() + input_products);  // (N, in)
    for (size_t p = 0; p < weight_products.size(); ++p) {
      const torch::Tensor& weight = weights[weight_of[p]];
      result[1 + weight_of[p]] =
          block_parts::weight_grad_from_product(weight_products[p], products[input_products + p],
                                                weight.scalar_type(), weight);  // (out, in)
    }
    if (!input_grads.empty())
      result[0] = sum_input_grads(input_grads, input_dtype)
                      .view(ctx->saved_data["input_sizes"].toIntVector());  // (..., in)
    return result;
  }

  /// The sum of the products' input gradients in `dtype`, in the order autograd sums separate
  /// nodes' gradients: each rounded to `dtype`, then added one by one in the order given.
  static torch::Tensor sum_input_grads(const std::vector<torch::Tensor>& parts,
                                       torch::ScalarType dtype) {
    if (dtype == torch::kFloat) {
      torch::Tensor sum = at::empty(parts[0].sizes(), parts[0].options().dtype(dtype));  // (N, in)
      std::vector<const c10::BFloat16*> pointers;
      for (const torch::Tensor& part : parts)
        pointers.push_back(part.data_ptr<at::BFloat16>());
      kernels::sum_bf16_to_float(pointers, sum.data_ptr<float>(), sum.numel());
      return sum;
    }
    torch::Tensor sum = block_parts::in_dtype(parts[0], dtype);
    for (size_t p = 1; p < parts.size(); ++p)
      sum = sum + block_parts::in_dtype(parts[p], dtype);
    return sum;
  }
};

/// Whether `t` is a CPU float32 or bf16 tensor (undefined passes).
bool float_or_bf16_on_cpu(const torch::Tensor& t) {
  return !t.defined() ||
         (t.device().is_cpu() && t.layout() == torch::kStrided &&
          (t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kBFloat16));
}

}  // namespace

bool native_bf16_linear_applies(const torch::Tensor& input, const torch::Tensor& weight,
                                const torch::Tensor& bias) {
  return block_kernel() != BlockKernel::kComposite && cpu_autocast_to_bf16() &&
         bf16_matmul() == Bf16Matmul::kNative && input.defined() && input.dim() >= 2 &&
         weight.defined() && weight.dim() == 2 && input.size(-1) == weight.size(1) &&
         (!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0))) &&
         float_or_bf16_on_cpu(input) && float_or_bf16_on_cpu(weight) && float_or_bf16_on_cpu(bias);
}

bool native_bf16_linears_apply(const torch::Tensor& input,
                               const std::vector<torch::Tensor>& weights,
                               const std::vector<torch::Tensor>& biases) {
  if (weights.empty() || !(biases.empty() || biases.size() == weights.size()))
    return false;
  for (size_t j = 0; j < weights.size(); ++j) {
    const torch::Tensor bias = biases.empty() ? torch::Tensor() : biases[j];
    if (!bias.defined() && !biases.empty())
      return false;
    if (!native_bf16_linear_applies(input, weights[j], bias))
      return false;
  }
  return true;
}

std::vector<torch::Tensor> native_bf16_linears(const torch::Tensor& input,
                                               const std::vector<torch::Tensor>& weights,
                                               const std::vector<torch::Tensor>& biases) {
  BB_CHECK(native_bf16_linears_apply(input, weights, biases),
           "native_bf16_linears: needs CPU bf16 autocast on the native kernels, CPU float32 or "
           "bf16 operands, at least one weight and a bias for each weight or none, got ",
           weights.size(), " weights and ", biases.size(), " biases for an input of ",
           input.sizes());
  return Bf16LinearsFunction::apply(input, at::TensorList(weights), at::TensorList(biases));
}

torch::Tensor native_bf16_linear(const torch::Tensor& input, const torch::Tensor& weight,
                                 const torch::Tensor& bias) {
  BB_CHECK(native_bf16_linear_applies(input, weight, bias),
           "native_bf16_linear: needs CPU bf16 autocast on the native kernels and CPU float32 or "
           "bf16 operands input (..., in), weight (out, in), bias (out), got ",
           input.sizes(), " ", input.scalar_type(), ", ", weight.sizes(), " ", weight.scalar_type(),
           ", ", bias.defined() ? bias.sizes() : c10::IntArrayRef{});
  // One weight of the node of several: the same products, roundings and gradients.
  const std::vector<torch::Tensor> biases =
      bias.defined() ? std::vector<torch::Tensor>{bias} : std::vector<torch::Tensor>{};
  return Bf16LinearsFunction::apply(input, at::TensorList(weight), at::TensorList(biases)).front();
}

}  // namespace bigbatch::nn
