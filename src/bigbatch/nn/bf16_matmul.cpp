#include "bigbatch/nn/bf16_matmul.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>

#include "bigbatch/core/check.h"
#include "bigbatch/core/system_info.h"
#include "bigbatch/nn/bf16_linear.h"
#include "bigbatch/nn/fp32_matmul.h"
#include "bigbatch/nn/linear_function.h"
#include "bigbatch/nn/precision.h"

namespace bigbatch::nn {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<Bf16Matmul> process_choice{Bf16Matmul::kAuto};

/// What kAuto means on this machine, read from /proc/cpuinfo once.
Bf16Matmul automatic_choice() {
  static const Bf16Matmul resolved = resolve_bf16_matmul(Bf16Matmul::kAuto, this_cpu_flags());
  return resolved;
}

/// Whether autocast would run a product of these operands as a bf16 CPU kernel that the fp32
/// kernels should replace: CPU autocast on, to bf16, and every operand a CPU float32 or bfloat16
/// tensor (autocast leaves float64 alone; undefined operands are skipped).
bool use_fp32_kernels(std::initializer_list<const torch::Tensor*> operands) {
  if (!cpu_autocast_to_bf16() || bf16_matmul() != Bf16Matmul::kFp32)
    return false;
  for (const torch::Tensor* operand : operands) {
    if (!operand->defined())
      continue;
    const torch::ScalarType dtype = operand->scalar_type();
    if (!operand->device().is_cpu() || (dtype != torch::kFloat && dtype != torch::kBFloat16))
      return false;
  }
  return true;
}

/// Runs its scope without CPU autocast, so the fp32 products below stay fp32.
struct NoCpuAutocast {
  c10::impl::ExcludeDispatchKeyGuard guard{c10::DispatchKey::AutocastCPU};
};

/// The fp32 values a bf16 kernel reads: `t` rounded to bf16, in fp32 (exact).
torch::Tensor bf16_values(const torch::Tensor& t) {
  return t.to(torch::kBFloat16).to(torch::kFloat);
}

/// An fp32 result rounded to bf16 (as a bf16 kernel writes it), then in `dtype`.
torch::Tensor rounded_to(const torch::Tensor& t, torch::ScalarType dtype) {
  return t.to(torch::kBFloat16).to(dtype);
}

torch::ScalarType saved_dtype(AutogradContext* ctx, const char* name) {
  return static_cast<torch::ScalarType>(ctx->saved_data[name].toInt());
}

/// Forward of a Linear under bf16 autocast on fp32 kernels (bias may be undefined). Saves the
/// bf16 input and weight, as autocast's addmm does, and nothing in fp32.
torch::Tensor fp32_kernel_linear_forward(AutogradContext* ctx, const torch::Tensor& input,
                                         const torch::Tensor& weight, const torch::Tensor& bias) {
  const NoCpuAutocast no_autocast;
  const torch::Tensor input_bf16 = input.to(torch::kBFloat16);    // (..., in)
  const torch::Tensor weight_bf16 = weight.to(torch::kBFloat16);  // (out, in)
  ctx->save_for_backward({input_bf16, weight_bf16});
  ctx->saved_data["input_dtype"] = static_cast<int64_t>(input.scalar_type());
  ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
  ctx->saved_data["bias_dtype"] =
      static_cast<int64_t>(bias.defined() ? bias.scalar_type() : torch::kFloat);
  const torch::Tensor output =
      torch::linear(input_bf16.to(torch::kFloat), weight_bf16.to(torch::kFloat),
                    bias.defined() ? bf16_values(bias) : torch::Tensor());
  return output.to(torch::kBFloat16);  // (..., out)
}

/// Gradients of fp32_kernel_linear_forward: {input, weight, bias}, each rounded to bf16 and
/// returned in its operand's dtype; undefined where not needed (the bias's when `with_bias` is
/// false).
variable_list fp32_kernel_linear_backward(AutogradContext* ctx, const variable_list& grads,
                                          bool with_bias) {
  const NoCpuAutocast no_autocast;
  const variable_list saved = ctx->get_saved_variables();
  const torch::Tensor& input_bf16 = saved[0];                         // (..., in)
  const torch::Tensor& weight_bf16 = saved[1];                        // (out, in)
  const torch::Tensor grad = bf16_values(grads[0]);                   // (..., out)
  const torch::Tensor grad_rows = grad.reshape({-1, grad.size(-1)});  // (N, out)
  variable_list result(3);
  if (ctx->needs_input_grad(0)) {
    result[0] = rounded_to(torch::matmul(grad, weight_bf16.to(torch::kFloat)),
                           saved_dtype(ctx, "input_dtype"));  // (..., in)
  }
  if (ctx->needs_input_grad(1)) {
    const torch::Tensor input_rows =
        input_bf16.reshape({-1, input_bf16.size(-1)}).to(torch::kFloat);  // (N, in)
    result[1] =
        rounded_to(grad_rows.t().mm(input_rows), saved_dtype(ctx, "weight_dtype"));  // (out, in)
  }
  if (with_bias && ctx->needs_input_grad(2))
    result[2] = rounded_to(grad_rows.sum(0), saved_dtype(ctx, "bias_dtype"));  // (out)
  return result;
}

/// bias + alpha * (a @ b) under bf16 autocast on fp32 kernels, for matmul() (no bias, alpha 1)
/// and baddbmm(); saves the bf16 operands. The bias gets no gradient.
torch::Tensor product_forward(AutogradContext* ctx, const torch::Tensor& bias,
                              const torch::Tensor& a, const torch::Tensor& b, double alpha) {
  const NoCpuAutocast no_autocast;
  const torch::Tensor a_bf16 = a.to(torch::kBFloat16);  // (..., n, k)
  const torch::Tensor b_bf16 = b.to(torch::kBFloat16);  // (..., k, m)
  ctx->save_for_backward({a_bf16, b_bf16});
  ctx->saved_data["a_dtype"] = static_cast<int64_t>(a.scalar_type());
  ctx->saved_data["b_dtype"] = static_cast<int64_t>(b.scalar_type());
  ctx->saved_data["alpha"] = alpha;
  const torch::Tensor a_values = a_bf16.to(torch::kFloat);
  const torch::Tensor b_values = b_bf16.to(torch::kFloat);
  const torch::Tensor product =
      bias.defined() ? torch::baddbmm(bf16_values(bias), a_values, b_values, /*beta=*/1.0, alpha)
                     : torch::matmul(a_values, b_values);
  return product.to(torch::kBFloat16);  // (..., n, m)
}

/// Gradients of product_forward: {a, b}, rounded to bf16, in the operands' dtypes.
variable_list product_backward(AutogradContext* ctx, const variable_list& grads) {
  const NoCpuAutocast no_autocast;
  const variable_list saved = ctx->get_saved_variables();
  const double alpha = ctx->saved_data["alpha"].toDouble();
  // The fp32 product times the exact alpha, rounded once. (LibTorch 1.13's own bf16 backward
  // rounds the product, then multiplies it by alpha rounded to bf16: 0.3 becomes 0.30078.)
  const auto scaled = [alpha](const torch::Tensor& t) { return alpha == 1.0 ? t : t * alpha; };
  const torch::Tensor grad = bf16_values(grads[0]);  // (..., n, m)
  variable_list result(2);
  if (ctx->needs_input_grad(0)) {
    const torch::Tensor b = saved[1].to(torch::kFloat);  // (..., k, m)
    result[0] = rounded_to(scaled(torch::matmul(grad, b.transpose(-2, -1))),
                           saved_dtype(ctx, "a_dtype"));  // (..., n, k)
  }
  if (ctx->needs_input_grad(1)) {
    const torch::Tensor a = saved[0].to(torch::kFloat);  // (..., n, k)
    result[1] = rounded_to(scaled(torch::matmul(a.transpose(-2, -1), grad)),
                           saved_dtype(ctx, "b_dtype"));  // (..., k, m)
  }
  return result;
}

/// a @ b under bf16 autocast on fp32 kernels.
struct Fp32KernelMatmul : torch::autograd::Function<Fp32KernelMatmul> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a,
                               const torch::Tensor& b) {
    return product_forward(ctx, torch::Tensor(), a, b, 1.0);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return product_backward(ctx, grads);
  }
};

/// bias + alpha * (a @ b) under bf16 autocast on fp32 kernels; the bias is a constant (a mask).
struct Fp32KernelBaddbmm : torch::autograd::Function<Fp32KernelBaddbmm> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b,
                               const torch::Tensor& bias, double alpha) {
    return product_forward(ctx, bias, a, b, alpha);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    variable_list result = product_backward(ctx, grads);
    result.resize(4);  // the bias (a constant) and alpha get none
    return result;
  }
};

}  // namespace

Bf16Matmul parse_bf16_matmul(const std::string& text, const std::string& field) {
  if (text == "auto")
    return Bf16Matmul::kAuto;
  if (text == "native")
    return Bf16Matmul::kNative;
  if (text == "fp32")
    return Bf16Matmul::kFp32;
  throw InputError(cat(field, " must be \"auto\", \"native\" or \"fp32\", got \"", text, "\""));
}

std::string to_string(Bf16Matmul mode) {
  switch (mode) {
    case Bf16Matmul::kAuto:
      return "auto";
    case Bf16Matmul::kNative:
      return "native";
    case Bf16Matmul::kFp32:
      return "fp32";
  }
  return "?";
}

Bf16Matmul resolve_bf16_matmul(Bf16Matmul mode, const std::set<std::string>& cpu_flags) {
  if (mode != Bf16Matmul::kAuto)
    return mode;
  const bool native = cpu_flags.count("avx512_bf16") > 0 || cpu_flags.count("amx_bf16") > 0;
  return native ? Bf16Matmul::kNative : Bf16Matmul::kFp32;
}

void set_bf16_matmul(Bf16Matmul mode) {
  process_choice.store(mode);
}

Bf16Matmul bf16_matmul() {
  const Bf16Matmul mode = process_choice.load();
  return mode == Bf16Matmul::kAuto ? automatic_choice() : mode;
}

torch::Tensor linear(const torch::Tensor& input, const torch::Tensor& weight,
                     const torch::Tensor& bias) {
  if (use_fp32_kernels({&input, &weight, &bias})) {
    return apply_linear<fp32_kernel_linear_forward, fp32_kernel_linear_backward>(input, weight,
                                                                                 bias);
  }
  if (native_bf16_linear_applies(input, weight, bias))
    return native_bf16_linear(input, weight, bias);
  if (weight.dim() == 2 && fp32_products_on_onednn({&input, &weight, &bias}))
    return onednn_linear(input, weight, bias);
  return torch::linear(input, weight, bias);
}

torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& input) {
  return linear(input, layer->weight, layer->bias);
}

torch::Tensor matmul(const torch::Tensor& a, const torch::Tensor& b) {
  const bool same_batch = a.dim() >= 2 && a.dim() == b.dim() &&
                          a.sizes().slice(0, a.dim() - 2) == b.sizes().slice(0, b.dim() - 2);
  if (same_batch && use_fp32_kernels({&a, &b}))
    return Fp32KernelMatmul::apply(a, b);
  return torch::matmul(a, b);
}

torch::Tensor baddbmm(const torch::Tensor& bias, const torch::Tensor& a, const torch::Tensor& b,
                      double alpha) {
  if (a.dim() == 3 && b.dim() == 3 && !bias.requires_grad() && use_fp32_kernels({&bias, &a, &b}))
    return Fp32KernelBaddbmm::apply(a, b, bias, alpha);
  return torch::baddbmm(bias, a, b, /*beta=*/1.0, alpha);
}

}  // namespace bigbatch::nn
