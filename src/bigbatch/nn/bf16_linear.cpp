#include "bigbatch/nn/bf16_linear.h"

#include <c10/util/intrusive_ptr.h>

#include <optional>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/fp32_matmul.h"
#include "bigbatch/nn/fused_block.h"
#include "bigbatch/nn/fused_block_parts.h"
#include "bigbatch/nn/linear_function.h"
#include "bigbatch/nn/precision.h"
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

/// native_bf16_linear's forward (nn/linear_function.h): saves the bf16 input and weight, the
/// parameter itself (for add_to_weight_grad) and the dtypes the gradients go back in.
torch::Tensor native_bf16_linear_forward(AutogradContext* ctx, const torch::Tensor& input,
                                         const torch::Tensor& weight, const torch::Tensor& bias) {
  const block_parts::KernelScope scope;
  const torch::Tensor input_bf16 = input_in_bf16(input);                        // (..., in)
  const torch::Tensor weight_bf16 = weight_in_dtype(weight, torch::kBFloat16);  // (out, in)
  const torch::Tensor rows = input_bf16.reshape({-1, input_bf16.size(-1)});     // (N, in)
  // The input only where the weight takes a gradient (a frozen one's backward reads none).
  ctx->save_for_backward({weight.requires_grad() ? rows : torch::Tensor(), weight_bf16});
  ctx->saved_data["weight"] = weight;
  ctx->saved_data["input_sizes"] = input.sizes().vec();
  ctx->saved_data["input_dtype"] = static_cast<int64_t>(input.scalar_type());
  ctx->saved_data["bias_dtype"] =
      static_cast<int64_t>(bias.defined() ? bias.scalar_type() : torch::kFloat);
  const torch::Tensor output = gemm_bias(weight_in_dtype(bias, torch::kBFloat16), rows,
                                         weight_bf16.t());  // (N, out)
  std::vector<int64_t> sizes = input.sizes().vec();
  sizes.back() = weight.size(0);
  return output.view(sizes);  // (..., out)
}

/// Gradients of native_bf16_linear_forward: {input, weight, bias}, undefined where not needed (the
/// bias's when `with_bias` is false) and the weight's where add_to_weight_grad took it.
variable_list native_bf16_linear_backward(AutogradContext* ctx, const variable_list& grads,
                                          bool with_bias) {
  BB_CHECK(!torch::GradMode::is_enabled(),
           "nn::linear under CPU bf16 autocast runs as one node and has no second derivative "
           "(backward with create_graph); run it with model.block_kernel = \"composite\" "
           "(nn::BlockKernel::kComposite)");
  const block_parts::KernelScope scope;
  const variable_list saved = ctx->get_saved_variables();
  const torch::Tensor& rows = saved[0];         // (N, in); undefined for a frozen weight
  const torch::Tensor& weight_bf16 = saved[1];  // (out, in)
  const torch::Tensor grad = block_parts::in_dtype(grads[0], torch::kBFloat16)
                                 .reshape({-1, weight_bf16.size(0)});  // (N, out)
  const auto dtype = [ctx](const char* name) {
    return static_cast<torch::ScalarType>(ctx->saved_data[name].toInt());
  };
  variable_list result(3);
  if (ctx->needs_input_grad(0)) {
    result[0] = block_parts::in_dtype(gemm(grad, weight_bf16), dtype("input_dtype"))
                    .view(ctx->saved_data["input_sizes"].toIntVector());  // (..., in)
  }
  const torch::Tensor weight = ctx->saved_data["weight"].toTensor();
  result[1] = block_parts::weight_grad(ctx->needs_input_grad(1), grad, rows, weight.scalar_type(),
                                       weight);  // (out, in)
  if (with_bias && ctx->needs_input_grad(2))
    result[2] = block_parts::in_dtype(grad.sum(0), dtype("bias_dtype"));  // (out)
  return result;
}

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

torch::Tensor native_bf16_linear(const torch::Tensor& input, const torch::Tensor& weight,
                                 const torch::Tensor& bias) {
  BB_CHECK(native_bf16_linear_applies(input, weight, bias),
           "native_bf16_linear: needs CPU bf16 autocast on the native kernels and CPU float32 or "
           "bf16 operands input (..., in), weight (out, in), bias (out), got ",
           input.sizes(), " ", input.scalar_type(), ", ", weight.sizes(), " ", weight.scalar_type(),
           ", ", bias.defined() ? bias.sizes() : c10::IntArrayRef{});
  return apply_linear<native_bf16_linear_forward, native_bf16_linear_backward>(input, weight, bias);
}

}  // namespace bigbatch::nn
