#include "bigbatch/nn/fused_batch_norm.h"

#include <cmath>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/batch_norm_kernels.h"

namespace bigbatch::nn {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// The memory format whose contiguous tensors are rows of channels: channels-last for 4-D.
torch::MemoryFormat rows_format(const Tensor& input) {
  return input.dim() == 4 ? torch::MemoryFormat::ChannelsLast : torch::MemoryFormat::Contiguous;
}

kernels::RowShape rows_of(const Tensor& input) {
  return {input.numel() / input.size(1), input.size(1)};
}

/// Calls work(T{}) with T the C++ type of a float32 or bfloat16 input.
template <typename Work>
auto with_value_type(const Tensor& input, const Work& work) {
  return input.scalar_type() == torch::kBFloat16 ? work(c10::BFloat16{}) : work(float{});
}

bool is_row_dtype(torch::ScalarType dtype) {
  return dtype == torch::kFloat || dtype == torch::kBFloat16;
}

bool is_channel_vector(const Tensor& t, int64_t channels) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.dim() == 1 &&
         t.size(0) == channels && t.is_contiguous();
}

/// y = norm(x) (+ residual), then ReLU, on values of type T: the output (B, C[, H, W]).
template <typename T>
Tensor normalize(const Tensor& input, const Tensor& weight, const Tensor& bias,
                 const Tensor& residual, const Tensor& mean, const Tensor& invstd, bool relu) {
  const kernels::RowShape shape = rows_of(input);
  const int64_t channels = shape.channels;
  std::vector<float> scale(channels), shift(channels);
  const float* w = weight.data_ptr<float>();
  const float* b = bias.data_ptr<float>();
  const float* mu = mean.data_ptr<float>();
  const float* inv = invstd.data_ptr<float>();
  for (int64_t c = 0; c < channels; ++c) {
    scale[c] = w[c] * inv[c];
    shift[c] = b[c] - mu[c] * scale[c];
  }
  Tensor output = torch::empty_like(input, rows_format(input));  // (B, C[, H, W])
  kernels::NormalizeRows<T> args;
  args.input = input.data_ptr<T>();
  args.residual = residual.numel() > 0 ? residual.data_ptr<T>() : nullptr;
  args.scale = scale.data();
  args.shift = shift.data();
  args.output = output.data_ptr<T>();
  args.shape = shape;
  args.relu = relu;
  kernels::normalize_rows(args);
  return output;
}

/// Which of the node's inputs want a gradient.
struct Wanted {
  bool input, weight, bias, residual;
};

/// The gradients of normalize<T>() for the inputs `wanted` names, in the order (input, weight,
/// bias, residual); the others are undefined. grad_output is like input.
template <typename T>
variable_list normalize_backward(const Tensor& grad_output, const Tensor& input,
                                 const Tensor& weight, const Tensor& mean, const Tensor& invstd,
                                 const Tensor& output, Wanted wanted) {
  const kernels::RowShape shape = rows_of(input);
  const int64_t channels = shape.channels;
  kernels::BackwardRows<T> rows;
  rows.grad_output = grad_output.data_ptr<T>();
  rows.output = output.defined() ? output.data_ptr<T>() : nullptr;
  rows.input = input.data_ptr<T>();
  rows.mean = mean.data_ptr<float>();
  rows.shape = shape;
  Tensor grad_residual;  // g, when the residual wants its gradient
  if (wanted.residual)
    grad_residual = torch::empty_like(input, rows_format(input));
  std::vector<double> sum_g(channels), sum_gx(channels);
  kernels::backward_sums(rows, sum_g.data(), sum_gx.data(),
                         grad_residual.defined() ? grad_residual.data_ptr<T>() : nullptr);

  const float* w = weight.data_ptr<float>();
  const float* inv = invstd.data_ptr<float>();
  const float* mu = mean.data_ptr<float>();
  Tensor grad_weight, grad_bias;
  if (wanted.weight) {
    grad_weight = torch::empty({channels});
    float* dw = grad_weight.data_ptr<float>();
    for (int64_t c = 0; c < channels; ++c)
      dw[c] = float(sum_gx[c] * inv[c]);
  }
  if (wanted.bias) {
    grad_bias = torch::empty({channels});
    float* db = grad_bias.data_ptr<float>();
    for (int64_t c = 0; c < channels; ++c)
      db[c] = float(sum_g[c]);
  }
  Tensor grad_input;
  if (wanted.input) {
    // dx = w invstd (g - mean(g) - x_hat mean(g x_hat)) = p g - q x + r per channel.
    std::vector<float> p(channels), q(channels), r(channels);
    const double count = double(shape.rows);
    for (int64_t c = 0; c < channels; ++c) {
      const double a = double(w[c]) * double(inv[c]);
      const double qc = a * double(inv[c]) * double(inv[c]) * sum_gx[c] / count;
      p[c] = float(a);
      q[c] = float(qc);
      r[c] = float(qc * double(mu[c]) - a * sum_g[c] / count);
    }
    grad_input = torch::empty_like(input, rows_format(input));
    kernels::InputGradient<T> gradient;
    gradient.p = p.data();
    gradient.q = q.data();
    gradient.r = r.data();
    gradient.g = grad_residual.defined() ? grad_residual.data_ptr<T>() : nullptr;
    gradient.grad_input = grad_input.data_ptr<T>();
    kernels::input_gradient(rows, gradient);
  }
  return {grad_input, grad_weight, grad_bias, grad_residual};
}

/// The autograd node. mean and invstd (C) come in computed and without gradient: backward's
/// formula differentiates through them. No residual is an empty tensor, since LibTorch's
/// custom functions do not take undefined inputs.
struct FusedBatchNormFunction : torch::autograd::Function<FusedBatchNormFunction> {
  static Tensor forward(AutogradContext* ctx, const Tensor& input, const Tensor& weight,
                        const Tensor& bias, const Tensor& residual, const Tensor& mean,
                        const Tensor& invstd, bool relu) {
    Tensor output = with_value_type(input, [&](auto value) {
      return normalize<decltype(value)>(input, weight, bias, residual, mean, invstd, relu);
    });
    ctx->save_for_backward({input, weight, mean, invstd, relu ? output : Tensor()});
    return output;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    BB_CHECK(!torch::GradMode::is_enabled(),
             "nn::fused_batch_norm_train has no second derivative (backward with create_graph); "
             "use nn::BatchNorm's forward() (BatchNormOptions.fused(false) for forward_with())");
    const variable_list saved = ctx->get_saved_variables();
    const Tensor& input = saved[0];
    const Tensor& weight = saved[1];
    const Tensor& mean = saved[2];
    const Tensor& invstd = saved[3];
    const Tensor& output = saved[4];  // undefined without a ReLU
    // The gradient in the input's dtype and layout (autocast can hand back float32).
    const Tensor grad_output =
        grads[0].to(input.scalar_type()).contiguous(rows_format(input));  // like input
    const Wanted wanted{ctx->needs_input_grad(0), ctx->needs_input_grad(1),
                        ctx->needs_input_grad(2), ctx->needs_input_grad(3)};
    variable_list result = with_value_type(input, [&](auto value) {
      return normalize_backward<decltype(value)>(grad_output, input, weight, mean, invstd, output,
                                                 wanted);
    });
    result.resize(7);  // the statistics and the flag take no gradient
    return result;
  }
};

}  // namespace

bool fused_batch_norm_supported(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                const BatchNormEpilogue& epilogue) {
  if (!input.defined() || !input.device().is_cpu() || !is_row_dtype(input.scalar_type()) ||
      (input.dim() != 2 && input.dim() != 4))
    return false;
  if (!input.is_contiguous(rows_format(input)) || input.numel() <= input.size(1))
    return false;
  const int64_t channels = input.size(1);
  if (!is_channel_vector(weight, channels) || !is_channel_vector(bias, channels))
    return false;
  const Tensor& residual = epilogue.residual;
  return !residual.defined() ||
         (residual.device().is_cpu() && residual.scalar_type() == input.scalar_type() &&
          residual.sizes() == input.sizes() && residual.strides() == input.strides());
}

bool fused_batch_norm_covers(Precision precision, c10::DeviceType device) {
  return device == c10::kCPU && is_row_dtype(compute_dtype(precision));
}

FusedBatchNorm fused_batch_norm_train(const Tensor& input, const Tensor& weight, const Tensor& bias,
                                      double eps, const BatchNormEpilogue& epilogue) {
  BB_CHECK(fused_batch_norm_supported(input, weight, bias, epilogue),
           "fused_batch_norm_train: unsupported tensors (input ", input.sizes(), ", residual ",
           epilogue.residual.defined() ? "defined" : "none",
           "); check fused_batch_norm_supported() first");
  const kernels::RowShape shape = rows_of(input);
  const int64_t channels = shape.channels;
  FusedBatchNorm result;
  result.count = shape.rows;
  result.mean = torch::empty({channels}, torch::kFloat64);
  result.m2 = torch::empty({channels}, torch::kFloat64);
  with_value_type(input, [&](auto value) {
    kernels::channel_moments(input.data_ptr<decltype(value)>(), shape,
                             result.mean.data_ptr<double>(), result.m2.data_ptr<double>());
  });
  Tensor mean = torch::empty({channels});    // (C) float32, what the output is normalised with
  Tensor invstd = torch::empty({channels});  // (C) float32
  const double* mean64 = result.mean.data_ptr<double>();
  const double* m2 = result.m2.data_ptr<double>();
  float* mean32 = mean.data_ptr<float>();
  float* invstd32 = invstd.data_ptr<float>();
  for (int64_t c = 0; c < channels; ++c) {
    mean32[c] = float(mean64[c]);
    invstd32[c] = float(1.0 / std::sqrt(m2[c] / double(shape.rows) + eps));
  }
  const Tensor residual = epilogue.residual.defined()
                              ? epilogue.residual
                              : torch::empty({0}, input.options());  // like input, or (0)
  result.output =
      FusedBatchNormFunction::apply(input, weight, bias, residual, mean, invstd, epilogue.relu);
  return result;
}

}  // namespace bigbatch::nn
