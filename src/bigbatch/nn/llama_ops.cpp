#include "bigbatch/nn/llama_ops.h"

#include <type_traits>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/bf16_add_kernels.h"
#include "bigbatch/nn/fused_block.h"
#include "bigbatch/nn/llama_kernels.h"

namespace bigbatch::nn {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// Throws in a fused node's backward when it is asked for a second derivative.
void check_first_order(const char* node) {
  BB_CHECK(!torch::GradMode::is_enabled(), "nn::", node,
           " runs fused on the CPU and has no second derivative (backward with create_graph); "
           "run it with model.block_kernel = \"composite\" (nn::BlockKernel::kComposite)");
}

/// The data of `t`, or nullptr for an undefined tensor.
float* data_or_null(Tensor& t) {
  return t.defined() ? t.data_ptr<float>() : nullptr;
}

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  // x (..., C), weight (C) -> (..., C)
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& weight, double eps) {
    const int64_t channels = x.size(-1);
    const Tensor rows = x.contiguous().view({-1, channels});     // (M, C)
    Tensor output = torch::empty_like(rows);                     // (M, C)
    Tensor rstd = torch::empty({rows.size(0)}, rows.options());  // (M)
    kernels::RmsNormRows args;
    args.input = rows.data_ptr<float>();
    args.weight = weight.data_ptr<float>();
    args.output = output.data_ptr<float>();
    args.rstd = rstd.data_ptr<float>();
    args.shape = {rows.size(0), channels};
    args.eps = float(eps);
    kernels::rms_norm_rows(args);
    ctx->save_for_backward({rows, weight, rstd});
    return output.view(x.sizes());
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    check_first_order("rms_norm");
    const variable_list saved = ctx->get_saved_variables();
    const Tensor& rows = saved[0];  // (M, C)
    const int64_t channels = rows.size(1);
    const Tensor grad = grads[0].contiguous().view({-1, channels});  // (M, C)
    Tensor grad_input = ctx->needs_input_grad(0) ? torch::empty_like(rows) : Tensor();
    Tensor grad_weight = ctx->needs_input_grad(1) ? torch::empty_like(saved[1]) : Tensor();
    kernels::RmsNormBackwardRows args;
    args.grad_output = grad.data_ptr<float>();
    args.input = rows.data_ptr<float>();
    args.weight = saved[1].data_ptr<float>();
    args.rstd = saved[2].data_ptr<float>();
    args.grad_input = data_or_null(grad_input);
    args.grad_weight = data_or_null(grad_weight);
    args.shape = {rows.size(0), channels};
    kernels::rms_norm_backward_rows(args);
    if (grad_input.defined())
      grad_input = grad_input.view(grads[0].sizes());
    return {grad_input, grad_weight, Tensor()};
  }
};

/// The rotary map of `input` into `output` (both contiguous), forward or backward, on the
/// kernel for their dtypes: float32 to float32; bfloat16 to float32 forward and float32 to
/// bfloat16 backward; or bfloat16 to bfloat16 both ways.
void run_rotary(bool backward, const Tensor& input, const Tensor& cos, const Tensor& sin,
                Tensor& output, int64_t batch, int64_t time, int64_t heads, int64_t head_dim) {
  const auto run = [&](auto args, auto map) {
    using In = std::remove_const_t<std::remove_pointer_t<decltype(args.input)>>;
    using Out = std::remove_pointer_t<decltype(args.output)>;
    args.input = input.data_ptr<In>();
    args.output = output.data_ptr<Out>();
    args.cos = cos.data_ptr<float>();
    args.sin = sin.data_ptr<float>();
    args.batch = batch;
    args.time = time;
    args.heads = heads;
    args.head_dim = head_dim;
    map(args);
  };
  const auto forward = [](const auto& args) { kernels::rotary_forward(args); };
  const auto backward_map = [](const auto& args) { kernels::rotary_backward(args); };
  using Bf16 = c10::BFloat16;
  const bool bf16_in = input.scalar_type() == torch::kBFloat16;
  const bool bf16_out = output.scalar_type() == torch::kBFloat16;
  BB_CHECK(bf16_in == bf16_out || bf16_in != backward, "rotary kernels: no ",
           backward ? "backward" : "forward", " map from ", input.scalar_type(), " to ",
           output.scalar_type());
  if (bf16_in && bf16_out) {
    if (backward)
      run(kernels::RotaryMap<Bf16, Bf16>(), backward_map);
    else
      run(kernels::RotaryMap<Bf16, Bf16>(), forward);
  } else if (bf16_in) {
    run(kernels::RotaryMap<Bf16, float>(), forward);
  } else if (bf16_out) {
    run(kernels::RotaryMap<float, Bf16>(), backward_map);
  } else if (backward) {
    run(kernels::RotaryRows(), backward_map);
  } else {
    run(kernels::RotaryRows(), forward);
  }
}

struct RotaryFunction : torch::autograd::Function<RotaryFunction> {
  // x (B, T, H*D) float32 or bfloat16, cos and sin (T, D) float32 -> (B, H, T, D) float32, or
  // bfloat16 for a bfloat16 x where `rounded`
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& cos, const Tensor& sin,
                        int64_t heads, bool rounded) {
    const Tensor input = x.contiguous();
    const int64_t batch = x.size(0), time = x.size(1), head_dim = x.size(2) / heads;
    Tensor output = torch::empty({batch, heads, time, head_dim},
                                 cos.options().dtype(rounded ? x.scalar_type() : torch::kFloat));
    run_rotary(false, input, cos, sin, output, batch, time, heads, head_dim);
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["input_dtype"] = int64_t(x.scalar_type());
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    check_first_order("rotary_embedding");
    const variable_list saved = ctx->get_saved_variables();
    // float32, or bfloat16 where the forward rounded to it
    const Tensor grad = grads[0].contiguous();  // (B, H, T, D)
    const int64_t heads = ctx->saved_data["heads"].toInt();
    const auto input_dtype = static_cast<torch::ScalarType>(ctx->saved_data["input_dtype"].toInt());
    const int64_t batch = grad.size(0), time = grad.size(2), head_dim = grad.size(3);
    Tensor grad_input =
        torch::empty({batch, time, heads * head_dim}, grad.options().dtype(input_dtype));
    run_rotary(true, grad, saved[0], saved[1], grad_input, batch, time, heads, head_dim);
    return {grad_input, Tensor(), Tensor(), Tensor(), Tensor()};
  }
};

struct ResidualAddFunction : torch::autograd::Function<ResidualAddFunction> {
  // residual (...) float32, branch (the same sizes) bfloat16, both contiguous -> (...) float32
  static Tensor forward(AutogradContext*, const Tensor& residual, const Tensor& branch) {
    Tensor sum = torch::empty_like(residual);
    kernels::add_bf16_to_float(branch.data_ptr<c10::BFloat16>(), residual.data_ptr<float>(),
                               sum.data_ptr<float>(), residual.numel());
    return sum;
  }

  static variable_list backward(AutogradContext*, variable_list grads) {
    check_first_order("residual_add");
    return {grads[0], grads[0].to(torch::kBFloat16)};
  }
};

struct SwigluFunction : torch::autograd::Function<SwigluFunction> {
  // gate, up (...), both float32 or both bfloat16 -> (...) in their dtype
  static Tensor forward(AutogradContext* ctx, const Tensor& gate, const Tensor& up) {
    const Tensor g = gate.contiguous(), u = up.contiguous();
    Tensor output = torch::empty_like(g);
    if (g.scalar_type() == torch::kBFloat16) {
      kernels::swiglu_forward(g.data_ptr<c10::BFloat16>(), u.data_ptr<c10::BFloat16>(),
                              output.data_ptr<c10::BFloat16>(), g.numel());
    } else {
      kernels::swiglu_forward(g.data_ptr<float>(), u.data_ptr<float>(), output.data_ptr<float>(),
                              g.numel());
    }
    ctx->save_for_backward({g, u});
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    check_first_order("swiglu");
    const variable_list saved = ctx->get_saved_variables();
    const Tensor& g = saved[0];
    const Tensor grad = grads[0].to(g.scalar_type()).contiguous();
    Tensor grad_gate = torch::empty_like(g), grad_up = torch::empty_like(saved[1]);
    if (g.scalar_type() == torch::kBFloat16) {
      kernels::swiglu_backward(grad.data_ptr<c10::BFloat16>(), g.data_ptr<c10::BFloat16>(),
                               saved[1].data_ptr<c10::BFloat16>(),
                               grad_gate.data_ptr<c10::BFloat16>(),
                               grad_up.data_ptr<c10::BFloat16>(), grad.numel());
    } else {
      kernels::swiglu_backward(grad.data_ptr<float>(), g.data_ptr<float>(),
                               saved[1].data_ptr<float>(), grad_gate.data_ptr<float>(),
                               grad_up.data_ptr<float>(), grad.numel());
    }
    return {grad_gate, grad_up};
  }
};

/// The two halves of the last dimension swapped, the first negated: (-x2, x1).
Tensor rotate_half(const Tensor& x) {
  const auto halves = x.chunk(2, /*dim=*/-1);
  return torch::cat({-halves[1], halves[0]}, /*dim=*/-1);
}

/// Whether block_kernel() allows the fused nodes and every one of `tensors` is a CPU tensor of
/// `dtype`.
bool fused_with(std::initializer_list<const torch::Tensor*> tensors, torch::ScalarType dtype) {
  if (block_kernel() == BlockKernel::kComposite)
    return false;
  for (const Tensor* t : tensors) {
    if (!t->defined() || !t->device().is_cpu() || t->scalar_type() != dtype)
      return false;
  }
  return true;
}

/// Whether `t` is float32 or bfloat16, the dtypes the rotary and SwiGLU kernels take.
bool float_or_bf16(const torch::Tensor& t) {
  return t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kBFloat16;
}

}  // namespace

bool use_fused_llama_ops(std::initializer_list<const torch::Tensor*> tensors) {
  return fused_with(tensors, torch::kFloat);
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  BB_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1), "rms_norm: weight ",
           weight.sizes(), " does not match the last dimension of x ", x.sizes());
  if (x.numel() > 0 && use_fused_llama_ops({&x, &weight}))
    return RmsNormFunction::apply(x, weight.contiguous(), eps);
  const Tensor x32 = x.to(torch::kFloat);  // (..., C)
  const Tensor normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

torch::Tensor rotary_embedding(const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, int64_t heads, bool rounded) {
  BB_CHECK(x.dim() == 3 && heads > 0 && x.size(2) % heads == 0 && (x.size(2) / heads) % 2 == 0,
           "rotary_embedding expects x (B, T, H*D) with ", heads, " heads of an even size, got ",
           x.sizes());
  const int64_t dim = x.size(2) / heads;
  BB_CHECK(cos.sizes() == sin.sizes() && cos.dim() == 2 && cos.size(0) == x.size(1) &&
               cos.size(1) == dim,
           "rotary_embedding expects cos and sin of (T, D) = (", x.size(1), ", ", dim, "), got ",
           cos.sizes(), " and ", sin.sizes());
  BB_CHECK(!cos.requires_grad() && !sin.requires_grad(),
           "rotary_embedding gives cos and sin no gradient, but they require one");
  // float32 cos and sin with a bfloat16 x (CPU autocast's projection): the formula promotes to
  // float32, and so does the fused node.
  if (x.numel() > 0 && float_or_bf16(x) && fused_with({&x}, x.scalar_type()) &&
      fused_with({&cos, &sin}, torch::kFloat))
    return RotaryFunction::apply(x, cos.contiguous(), sin.contiguous(), heads,
                                 rounded && x.scalar_type() == torch::kBFloat16);
  const Tensor split = x.view({x.size(0), x.size(1), heads, dim}).transpose(1, 2);  // (B,H,T,D)
  const Tensor y = split * cos + rotate_half(split) * sin;
  return rounded && x.scalar_type() == torch::kBFloat16 ? y.to(torch::kBFloat16) : y;
}

torch::Tensor residual_add(const torch::Tensor& residual, const torch::Tensor& branch) {
  if (residual.numel() > 0 && residual.sizes() == branch.sizes() && residual.is_contiguous() &&
      branch.is_contiguous() && fused_with({&residual}, torch::kFloat) &&
      fused_with({&branch}, torch::kBFloat16))
    return ResidualAddFunction::apply(residual, branch);
  return residual + branch;
}

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  BB_CHECK(gate.sizes() == up.sizes(), "swiglu expects gate and up of the same sizes, got ",
           gate.sizes(), " and ", up.sizes());
  if (gate.numel() > 0 && float_or_bf16(gate) && fused_with({&gate, &up}, gate.scalar_type()))
    return SwigluFunction::apply(gate, up);
  return torch::silu(gate) * up;
}

}  // namespace bigbatch::nn
