#include "bigbatch/nn/fp32_matmul.h"

#include <ATen/Config.h>
#include <ATen/Context.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/version.h>

#include <atomic>
#include <optional>

#include "bigbatch/core/check.h"
#include "bigbatch/core/system_info.h"
#include "bigbatch/core/torch_compat.h"
#include "bigbatch/nn/linear_function.h"
#include "bigbatch/nn/row_split_products.h"

#if TORCH_VERSION_MAJOR >= 2 && AT_MKLDNN_ENABLED() && defined(__x86_64__)
#define BIGBATCH_ONEDNN_FP32 1
namespace at::native {
// result = beta * result + alpha * (mat1 @ mat2) on oneDNN (ATen/native/mkldnn/Matmul.h, which
// the wheel does not ship). From 2.0 it takes float32 (LibTorch 1.13's takes bf16 only), strict
// float32 unless torch.backends.mkldnn.matmul.fp32_precision asks for bf16 or tf32.
TORCH_API void mkldnn_matmul(const at::Tensor& mat1, const at::Tensor& mat2,
                             const at::Tensor& result, float beta, float alpha);
}  // namespace at::native
#else
#define BIGBATCH_ONEDNN_FP32 0
#endif

namespace bigbatch::nn {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<Fp32Matmul> process_choice{Fp32Matmul::kAuto};

/// What kAuto means in this process, decided once.
Fp32Matmul automatic_choice() {
  static const Fp32Matmul resolved =
      resolve_fp32_matmul(Fp32Matmul::kAuto, this_fp32_matmul_facts());
  return resolved;
}

/// Forward of onednn_linear's node: x W^T + b (bias may be undefined). Saves the weight, and the
/// input's rows only for the weight's gradient: a frozen weight (LoRA) keeps no activation, as
/// with LibTorch's linear.
/// input (..., in), weight (out, in), bias (out) or undefined -> (..., out)
Tensor onednn_linear_forward(AutogradContext* ctx, const Tensor& input, const Tensor& weight,
                             const Tensor& bias) {
  // Reshaped above ADInplaceOrView, so that the saved rows share the input's version counter and
  // autograd refuses a backward after the input was changed in place.
  const Tensor rows = input.reshape({-1, weight.size(1)});  // (N, in)
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  const Tensor output = gemm_bias(bias, rows, weight.t());  // (N, out)
  ctx->save_for_backward({weight.requires_grad() ? rows : Tensor(), weight});
  std::vector<int64_t> sizes = input.sizes().vec();
  sizes.back() = weight.size(0);
  return output.view(sizes);
}

/// Gradients of onednn_linear_forward, each only where wanted: {input, weight, bias}, the bias's
/// undefined when `with_bias` is false.
variable_list onednn_linear_backward(AutogradContext* ctx, const variable_list& grads,
                                     bool with_bias) {
  BB_CHECK(!torch::GradMode::is_enabled(),
           "nn::onednn_linear has no second derivative (backward with create_graph); set "
           "model.fp32_matmul = \"blas\" (nn::set_fp32_matmul(nn::Fp32Matmul::kBlas)) to take "
           "LibTorch's linear");
  const at::AutoDispatchBelowADInplaceOrView below_autograd;
  const variable_list saved = ctx->get_saved_variables();
  const Tensor& rows = saved[0];    // (N, in); undefined for a frozen weight
  const Tensor& weight = saved[1];  // (out, in)
  const Tensor grad = grads[0].reshape({-1, weight.size(0)}).contiguous();  // (N, out)
  variable_list result(3);
  if (ctx->needs_input_grad(0)) {
    std::vector<int64_t> sizes = grads[0].sizes().vec();
    sizes.back() = weight.size(1);
    result[0] = gemm(grad, weight).view(sizes);  // (..., in)
  }
  if (ctx->needs_input_grad(1))
    result[1] = gemm(grad.t(), rows);  // (out, in)
  if (with_bias && ctx->needs_input_grad(2))
    result[2] = grad.sum(0);  // (out)
  return result;
}

}  // namespace

Fp32Matmul parse_fp32_matmul(const std::string& text, const std::string& field) {
  if (text == "auto")
    return Fp32Matmul::kAuto;
  if (text == "blas")
    return Fp32Matmul::kBlas;
  if (text == "onednn")
    return Fp32Matmul::kOneDnn;
  throw InputError(cat(field, " must be \"auto\", \"blas\" or \"onednn\", got \"", text, "\""));
}

std::string to_string(Fp32Matmul mode) {
  switch (mode) {
    case Fp32Matmul::kAuto:
      return "auto";
    case Fp32Matmul::kBlas:
      return "blas";
    case Fp32Matmul::kOneDnn:
      return "onednn";
  }
  return "?";
}

Fp32Matmul resolve_fp32_matmul(Fp32Matmul mode, const Fp32MatmulFacts& facts) {
  if (mode != Fp32Matmul::kAuto)
    return mode;
  const bool onednn =
      facts.onednn_available && facts.blas_is_mkl && facts.cpu_vendor == "AuthenticAMD";
  return onednn ? Fp32Matmul::kOneDnn : Fp32Matmul::kBlas;
}

Fp32MatmulFacts this_fp32_matmul_facts() {
  Fp32MatmulFacts facts;
  facts.onednn_available = onednn_fp32_available();
  facts.blas_is_mkl = at::hasMKL();
  facts.cpu_vendor = this_cpu_vendor();
  return facts;
}

bool onednn_fp32_available() {
  if (!BIGBATCH_ONEDNN_FP32 || !at::hasMKLDNN() || !at::globalContext().userEnabledMkldnn())
    return false;
  const std::set<std::string>& flags = this_cpu_flags();
  const bool avx512 =
      flags.count("avx512bw") > 0 && flags.count("avx512vl") > 0 && flags.count("avx512dq") > 0;
  return avx512 || flags.count("avx_ne_convert") > 0;
}

std::string onednn_fp32_requirement() {
  return cat(
      "LibTorch 2.x with oneDNN on an x86-64 CPU with avx512bw, avx512vl and avx512dq (or "
      "avx_ne_convert); this process has LibTorch ",
      TORCH_VERSION, ", oneDNN ", at::hasMKLDNN() ? "yes" : "no");
}

void check_fp32_matmul_usable(Fp32Matmul mode, const std::string& field) {
  BB_CHECK_INPUT(mode != Fp32Matmul::kOneDnn || onednn_fp32_available(), field,
                 " = \"onednn\" needs ", onednn_fp32_requirement(),
                 " (bigbatch doctor: \"matmul fp32 onednn\"); use \"blas\" or \"auto\"");
}

void set_fp32_matmul(Fp32Matmul mode, const std::string& field) {
  check_fp32_matmul_usable(mode, field);
  process_choice.store(mode);
}

Fp32Matmul fp32_matmul() {
  const Fp32Matmul mode = process_choice.load();
  return mode == Fp32Matmul::kAuto ? automatic_choice() : mode;
}

bool fp32_products_on_onednn(std::initializer_list<const Tensor*> operands) {
  if (fp32_matmul() != Fp32Matmul::kOneDnn || compat::autocast_enabled(torch::kCPU))
    return false;
  for (const Tensor* operand : operands) {
    if (!operand->defined())
      continue;
    if (!operand->device().is_cpu() || operand->scalar_type() != torch::kFloat ||
        operand->numel() == 0)
      return false;
  }
  return true;
}

/// Whether a 2-D product of these operands runs on oneDNN here.
bool onednn_product(const Tensor& a, const Tensor& b, const Tensor& other) {
  return BIGBATCH_ONEDNN_FP32 && a.dim() == 2 && b.dim() == 2 &&
         fp32_products_on_onednn({&a, &b, &other});
}

/// result = a @ b (+ result when `accumulate`) on oneDNN; the caller has checked the operands.
void onednn_into(const Tensor& result, const Tensor& a, const Tensor& b, bool accumulate) {
#if BIGBATCH_ONEDNN_FP32
  at::native::mkldnn_matmul(a, b, result, accumulate ? 1.0f : 0.0f, 1.0f);
#else
  BB_CHECK(false, "nn::fp32_matmul: oneDNN's float32 products are not built in (", a.sizes(), " x ",
           b.sizes(), ", accumulate ", accumulate, ", into ", result.sizes(), ")");
#endif
}

Tensor onednn_mm(const Tensor& a, const Tensor& b) {
  BB_CHECK_INPUT(onednn_fp32_available(), "nn::onednn_mm: oneDNN's float32 kernels need ",
                 onednn_fp32_requirement());
  const auto fits = [](const Tensor& t) {
    return t.defined() && t.dim() == 2 && t.device().is_cpu() && t.scalar_type() == torch::kFloat;
  };
  BB_CHECK_INPUT(fits(a) && fits(b) && a.size(1) == b.size(0),
                 "nn::onednn_mm needs 2-D float32 CPU matrices (n, k) and (k, m), got ",
                 a.defined() ? cat(a.sizes(), " ", a.dtype(), " on ", a.device()) : "undefined",
                 " and ",
                 b.defined() ? cat(b.sizes(), " ", b.dtype(), " on ", b.device()) : "undefined");
  const Tensor result = at::empty({a.size(0), b.size(1)}, a.options());  // (n, m)
  onednn_into(result, a, b, /*accumulate=*/false);
  return result;
}

void gemm_into(const Tensor& result, const Tensor& a, const Tensor& b, bool accumulate) {
  if (split_product_into(result, a, b, accumulate))
    return;
  if (onednn_product(a, b, result)) {
    onednn_into(result, a, b, accumulate);
    return;
  }
  Tensor out = result;
  if (accumulate)
    out.addmm_(a, b);
  else
    at::mm_out(out, a, b);
}

Tensor gemm(const Tensor& a, const Tensor& b) {
  if (row_split_operands(a, b)) {
    const Tensor result = at::empty({a.size(0), b.size(1)}, a.options());  // (n, m)
    gemm_into(result, a, b);
    return result;
  }
  if (!onednn_product(a, b, Tensor()))
    return at::mm(a, b);
  const Tensor result = at::empty({a.size(0), b.size(1)}, a.options());  // (n, m)
  gemm_into(result, a, b);
  return result;
}

namespace {

#if TORCH_VERSION_MAJOR >= 2
/// oneDNN's linear with its bias added inside the product (mkldnn::_linear_pointwise, which
/// LibTorch 2.x builds with oneDNN register for Inductor), or nullopt where this LibTorch has none.
const std::optional<c10::OperatorHandle>& linear_with_bias_op() {
  static const std::optional<c10::OperatorHandle> op = []() -> std::optional<c10::OperatorHandle> {
    auto found = c10::Dispatcher::singleton().findOp({"mkldnn::_linear_pointwise", ""});
    if (!found || !found->hasKernelForDispatchKey(c10::DispatchKey::CPU))
      return std::nullopt;
    return found;
  }();
  return op;
}

/// Whether bias + a @ b runs on linear_with_bias_op(): bf16 CPU operands without autograd, a and
/// the bias contiguous and b a contiguous weight transposed (b = W^T, as the blocks pass it).
bool bias_in_the_product(const Tensor& bias, const Tensor& a, const Tensor& b) {
  const auto bf16_cpu = [](const Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == torch::kBFloat16 && !t.requires_grad();
  };
  return linear_with_bias_op().has_value() && a.dim() == 2 && b.dim() == 2 && bias.dim() == 1 &&
         bf16_cpu(a) && bf16_cpu(b) && bf16_cpu(bias) && a.is_contiguous() &&
         b.t().is_contiguous() && bias.is_contiguous() && bias.size(0) == b.size(1) &&
         a.size(1) == b.size(0);
}

/// bias + a @ b on linear_with_bias_op() (bias_in_the_product has held).
Tensor linear_with_bias(const Tensor& bias, const Tensor& a, const Tensor& b) {
  torch::jit::Stack stack{
      a, b.t(), bias, std::string("none"), c10::List<std::optional<c10::Scalar>>(), c10::IValue()};
  linear_with_bias_op()->callBoxed(stack);
  return stack.back().toTensor();
}

#endif  // TORCH_VERSION_MAJOR >= 2 (LibTorch 1.13 has no such operator)

}  // namespace

Tensor gemm_bias(const Tensor& bias, const Tensor& a, const Tensor& b) {
  if (!bias.defined())
    return gemm(a, b);
#if TORCH_VERSION_MAJOR >= 2
  // In bf16, at::addmm copies the bias into every row of the result before the product adds to
  // it: a pass over the result that oneDNN's linear does in the product's epilogue.
  if (bias_in_the_product(bias, a, b)) {
    if (row_split_operands(a, b)) {
      const Tensor result = at::empty({a.size(0), b.size(1)}, a.options());  // (n, m)
      if (split_product_with_bias_into(result, bias, a, b,
                                       [&] { return linear_with_bias(bias, a, b); }))
        return result;
    }
    return linear_with_bias(bias, a, b);
  }
#endif
  if (!onednn_product(a, b, bias))
    return at::addmm(bias, a, b);
  const Tensor result = at::empty({a.size(0), b.size(1)}, a.options());  // (n, m)
  result.copy_(bias.expand_as(result));
  gemm_into(result, a, b, /*accumulate=*/true);
  return result;
}

Tensor onednn_linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  return apply_linear<onednn_linear_forward, onednn_linear_backward>(input, weight, bias);
}

}  // namespace bigbatch::nn
