#include "bigbatch/nn/fused_block_parts.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/core/system_info.h"
#include "bigbatch/core/torch_compat.h"
#include "bigbatch/nn/bf16_add_kernels.h"
#include "bigbatch/nn/bf16_attention.h"
#include "bigbatch/nn/direct_weight_grads.h"
#include "bigbatch/nn/fp32_matmul.h"
#include "bigbatch/nn/fused_block.h"
#include "bigbatch/nn/gelu_kernels.h"
#include "bigbatch/nn/layer_norm_kernels.h"
#include "bigbatch/nn/transpose_kernels.h"
#include "bigbatch/nn/weight_copies.h"

namespace bigbatch::nn::block_parts {
namespace {

using torch::Tensor;

/// Part `part` (0 q, 1 k, 2 v) of a (N, 3C) qkv tensor, or the whole of a (N, C) one
/// (`parts` 1), as (B, H, T, D) views.
Tensor head_columns(const Tensor& t, int64_t batch, int64_t heads, int64_t parts, int64_t part) {
  const int64_t time = t.size(0) / batch, head_dim = t.size(1) / (parts * heads);
  return t.view({batch, time, parts, heads, head_dim}).select(2, part).permute({0, 2, 1, 3});
}

/// The padding the kernels read from a block's mask argument: undefined where it is empty.
Tensor padding_of(const Tensor& mask) {
  return mask.numel() == 0 ? Tensor() : mask;
}

/// The bf16 attention kernels' inputs for a (N, 3C) qkv tensor.
Bf16AttentionInputs kernel_inputs(const BlockAttention& attention, const Tensor& qkv) {
  const int64_t head_dim = qkv.size(1) / (3 * attention.heads);
  const auto part = [&](int64_t i) {
    return head_columns(qkv, attention.batch, attention.heads, 3, i);
  };
  return {part(0), part(1), part(2),
          Bf16AttentionMask{attention.causal, padding_of(attention.mask)},
          1.0 / std::sqrt(double(head_dim))};
}

/// Whether `t` is a contiguous CPU tensor of `dtype`, what the row kernels read and write.
bool plain(const Tensor& t, torch::ScalarType dtype) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == dtype && t.is_contiguous();
}

}  // namespace

Tensor transposed_copy(const Tensor& t) {
  const int64_t rows = t.size(0), cols = t.size(1);
  Tensor transposed = at::empty({cols, rows}, t.options());  // (C, R)
  kernels::transpose_bf16({t.data_ptr<at::BFloat16>(), rows, cols, cols},
                          transposed.data_ptr<at::BFloat16>(), rows);
  return transposed;
}

namespace {

/// Weight-gradient products of fewer multiply-adds than this gained nothing measurable from a
/// transposed copy (the default GPT's, at most 2^25); MiniLM's output projection (about 2^28) and
/// the width-512 GPT's products (2^30 and more) did (docs/BENCHMARKS.md).
constexpr int64_t kCopyWorthMultiplyAdds = int64_t(1) << 27;

/// Whether a bf16 weight-gradient product of these sizes is large enough for a transposed copy of
/// an operand to pay on this CPU.
bool transposed_copy_worth(int64_t rows, int64_t outputs, int64_t inputs) {
  static const bool amx = this_cpu_flags().count("amx_bf16") == 1;
  return amx && rows * outputs * inputs >= kCopyWorthMultiplyAdds;
}

}  // namespace

/// On a CPU with AMX, oneDNN runs grad^T input about twice as fast when its left operand is a
/// row-major copy instead of a transposed view. In a training step a copy costs about what it
/// saves unless the other operand is at least twice as wide, so for contiguous bf16 operands and
/// large enough products: grad^T is copied where I >= 2 O (a feed-forward network's output
/// projection), input^T where O >= 2 I (its first projection, the qkv product), the result
/// (I, O) then transposed back (docs/BENCHMARKS.md). On one thread the view is slower still
/// (1.6x for a square product), so where the product may run on one (ProductThreads::kMaybeOne)
/// grad^T is copied already where I >= O. The transposed view everywhere else.
/// Where input^T already lies row-major (input a transposed view of a contiguous (I, N) tensor,
/// as NormedRows::for_weight_grad() gives it), that is taken instead of a copy.
WeightProduct weight_product_operands(const Tensor& grad, const Tensor& input,
                                      ProductThreads threads) {
  const bool input_transposed = input.dim() == 2 && plain(input.t(), torch::kBFloat16);
  if (grad.dim() == 2 && input.dim() == 2 && plain(grad, torch::kBFloat16) &&
      (plain(input, torch::kBFloat16) || input_transposed)) {
    const int64_t rows = grad.size(0), outputs = grad.size(1), inputs = input.size(1);
    if (transposed_input_pays(rows, outputs, inputs))
      return {input_transposed ? input.t() : transposed_copy(input), grad, true};
    if (!input_transposed && transposed_grad_pays(rows, outputs, inputs, threads))
      return {transposed_copy(grad), input, false};
  }
  return {grad.t(), input, false};
}

namespace {

/// operands.a @ operands.b laid out as the weight's gradient (O, I).
Tensor oriented_weight_grad(const WeightProduct& operands, const Tensor& product) {
  return operands.transposed ? transposed_copy(product) : product;
}

/// A weight's gradient (O, I) from its product, in `dtype`; undefined where add_to_weight_grad
/// has taken it.
Tensor weight_grad_in_dtype(const Tensor& grad, torch::ScalarType dtype, const Tensor& weight) {
  if (grad.scalar_type() != dtype && add_to_weight_grad(weight, grad))
    return Tensor();  // already in .grad, or kept for it
  return in_dtype(grad, dtype);
}

}  // namespace

Tensor weight_grad_from_product(const WeightProduct& operands, const Tensor& product,
                                torch::ScalarType dtype, const Tensor& weight) {
  return weight_grad_in_dtype(oriented_weight_grad(operands, product), dtype, weight);
}

std::vector<Tensor> stacked_weight_grads(const std::vector<bool>& wanted, const Tensor& grad,
                                         const Tensor& input, torch::ScalarType dtype,
                                         const std::vector<Tensor>& weights) {
  BB_CHECK(wanted.size() == weights.size(), "stacked_weight_grads: ", wanted.size(), " flags for ",
           weights.size(), " weights");
  std::vector<Tensor> grads(weights.size());
  if (std::none_of(wanted.begin(), wanted.end(), [](bool w) { return w; }))
    return grads;
  const WeightProduct operands = weight_product_operands(grad, input);
  const Tensor stacked = oriented_weight_grad(operands, gemm(operands.a, operands.b));  // (O, I)
  int64_t row = 0;
  for (size_t k = 0; k < weights.size(); ++k) {
    const int64_t rows = weights[k].size(0);
    if (wanted[k])  // rows of a contiguous (O, I): contiguous
      grads[k] = weight_grad_in_dtype(stacked.narrow(0, row, rows), dtype, weights[k]);
    row += rows;
  }
  BB_CHECK(row == stacked.size(0), "stacked_weight_grads: weights of ", row,
           " rows for a gradient of ", stacked.size(0));
  return grads;
}

namespace {

/// GELU of a feed-forward network's pre-activation (N, I): the bf16 kernels for contiguous bf16
/// CPU values, at::gelu elsewhere.
Tensor gelu_of(const Tensor& pre) {
  if (!plain(pre, torch::kBFloat16))
    return at::gelu(pre);
  const Tensor out = at::empty_like(pre, at::MemoryFormat::Contiguous);  // (N, I)
  kernels::bf16_gelu(pre.data_ptr<at::BFloat16>(), out.data_ptr<at::BFloat16>(), pre.numel());
  return out;
}

/// GELU's backward: d_pre (N, I) from the gradient of its output and the pre-activation.
Tensor gelu_backward_of(const Tensor& grad, const Tensor& pre) {
  if (!plain(grad, torch::kBFloat16) || !plain(pre, torch::kBFloat16) ||
      grad.sizes() != pre.sizes())
    return at::gelu_backward(grad, pre);
  const Tensor d_pre = at::empty_like(pre, at::MemoryFormat::Contiguous);  // (N, I)
  kernels::bf16_gelu_backward(grad.data_ptr<at::BFloat16>(), pre.data_ptr<at::BFloat16>(),
                              d_pre.data_ptr<at::BFloat16>(), pre.numel());
  return d_pre;
}

/// GELU's backward with the fc bias's gradient (undefined unless wanted), in `dtype`: one pass of
/// the bf16 kernels for (N, I) contiguous bf16 CPU values and a float32 bias, gelu_backward_of
/// and bias_grad elsewhere.
std::pair<Tensor, Tensor> gelu_backward_with_bias_grad(const Tensor& grad, const Tensor& pre,
                                                       bool wanted, torch::ScalarType dtype) {
  if (!wanted || dtype != torch::kFloat || pre.dim() != 2 || !plain(grad, torch::kBFloat16) ||
      !plain(pre, torch::kBFloat16) || grad.sizes() != pre.sizes()) {
    Tensor d_pre = gelu_backward_of(grad, pre);
    Tensor sums = bias_grad(wanted, d_pre, dtype);
    return {std::move(d_pre), std::move(sums)};
  }
  const Tensor d_pre = at::empty_like(pre, at::MemoryFormat::Contiguous);    // (N, I)
  const Tensor sums = at::empty({pre.size(1)}, pre.options().dtype(dtype));  // (I)
  kernels::bf16_gelu_backward_with_column_sums(
      grad.data_ptr<at::BFloat16>(), pre.data_ptr<at::BFloat16>(), d_pre.data_ptr<at::BFloat16>(),
      {pre.size(0), pre.size(1)}, sums.data_ptr<float>());
  return {d_pre, sums};
}

/// Whether a LayerNorm of x with weight and bias in `compute` runs on the row kernels.
bool layer_norm_on_kernels(const Tensor& x, const Tensor& weight, const Tensor& bias,
                           torch::ScalarType compute) {
  return compute == torch::kBFloat16 && x.dim() == 2 && plain(x, torch::kFloat) &&
         plain(weight, torch::kFloat) && plain(bias, torch::kFloat);
}

/// The composite path's backward: batched products and softmax's backward on the head-major
/// copy, copied back into one (N, 3C) tensor.
Tensor composite_attention_backward(const BlockAttention& attention, AttentionSaved saved,
                                    const Tensor& d_y_rows) {
  const Tensor split = std::move(saved.input);  // (3, B*H, T, D)
  const int64_t batch_heads = split.size(1), time = split.size(2), head_dim = split.size(3);
  const int64_t heads = attention.heads, rows = batch_heads / heads * time;
  const Tensor d_y = d_y_rows.view({batch_heads / heads, time, heads, head_dim})
                         .permute({0, 2, 1, 3})
                         .reshape({batch_heads, time, head_dim});  // (B*H, T, D)
  const Tensor q = split[0], k = split[1], v = split[2];
  const Tensor d_split = at::empty_like(split);              // (3, B*H, T, D)
  Tensor dq = d_split[0], dk = d_split[1], dv = d_split[2];  // views, written in place
  Tensor d_scores;                                           // (B*H, T, T)
  {
    const Tensor probs = std::move(saved.probs);
    at::bmm_out(dv, probs.transpose(1, 2), d_y);
    d_scores =
        at::_softmax_backward_data(at::bmm(d_y, v.transpose(1, 2)), probs, -1, attention.compute);
  }
  d_scores.mul_(1.0 / std::sqrt(double(head_dim)));
  at::bmm_out(dq, d_scores, k);
  at::bmm_out(dk, d_scores.transpose(1, 2), q);
  return d_split.view({3, batch_heads / heads, heads, time, head_dim})
      .permute({1, 3, 0, 2, 4})
      .reshape({rows, 3 * heads * head_dim});  // (N, 3C)
}

}  // namespace

Tensor in_dtype(const Tensor& t, torch::ScalarType dtype) {
  return t.scalar_type() == dtype ? t : t.to(dtype);
}

Tensor add_residual(const Tensor& residual, const Tensor& product) {
  if (!plain(residual, torch::kFloat) || !plain(product, torch::kBFloat16) ||
      residual.sizes() != product.sizes())
    return at::add(residual, product);
  const Tensor sum = at::empty_like(residual, at::MemoryFormat::Contiguous);  // (N, C)
  kernels::add_bf16_to_float(product.data_ptr<at::BFloat16>(), residual.data_ptr<float>(),
                             sum.data_ptr<float>(), residual.numel());
  return sum;
}

Tensor weight_grad(bool wanted, const Tensor& grad, const Tensor& input, torch::ScalarType dtype,
                   const Tensor& weight) {
  if (!wanted)
    return Tensor();
  const WeightProduct operands = weight_product_operands(grad, input);
  return weight_grad_from_product(operands, gemm(operands.a, operands.b), dtype, weight);
}

Tensor bias_grad(bool wanted, const Tensor& grad, torch::ScalarType dtype) {
  if (!wanted)
    return Tensor();
  if (dtype == torch::kFloat && grad.dim() == 2 && plain(grad, torch::kBFloat16)) {
    Tensor sums = at::empty({grad.size(1)}, grad.options().dtype(torch::kFloat));  // (M)
    kernels::bf16_column_sums(grad.data_ptr<at::BFloat16>(), {grad.size(0), grad.size(1)},
                              sums.data_ptr<float>());
    return sums;
  }
  return in_dtype(grad.sum(0), dtype);
}

std::pair<Tensor, Tensor> in_dtype_with_bias_grad(const Tensor& grad, torch::ScalarType compute,
                                                  bool wanted, torch::ScalarType dtype) {
  if (compute != torch::kBFloat16 || !plain(grad, torch::kFloat) || grad.dim() != 2 ||
      (wanted && dtype != torch::kFloat)) {
    const Tensor in_compute = in_dtype(grad, compute);
    return {in_compute, bias_grad(wanted, in_compute, dtype)};
  }
  const Tensor rounded = at::empty(grad.sizes(), grad.options().dtype(compute));      // (N, C)
  const Tensor sums = wanted ? at::empty({grad.size(1)}, grad.options()) : Tensor();  // (C)
  kernels::bf16_rows_and_column_sums(grad.data_ptr<float>(), {grad.size(0), grad.size(1)},
                                     rounded.data_ptr<at::BFloat16>(),
                                     wanted ? sums.data_ptr<float>() : nullptr);
  return {rounded, sums};
}

bool transposed_input_pays(int64_t rows, int64_t outputs, int64_t inputs) {
  return outputs >= 2 * inputs && transposed_copy_worth(rows, outputs, inputs);
}

bool transposed_grad_pays(int64_t rows, int64_t outputs, int64_t inputs, ProductThreads threads) {
  const int64_t least_inputs = threads == ProductThreads::kMaybeOne ? outputs : 2 * outputs;
  return inputs >= least_inputs && transposed_copy_worth(rows, outputs, inputs);
}

NormedRows layer_norm_in(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                         torch::ScalarType compute, bool transposed) {
  const int64_t rows = x.size(0), embed = x.size(1);
  if (!layer_norm_on_kernels(x, weight, bias, compute)) {
    NormedRows out;
    std::tie(out.normed, out.mean, out.rstd) = at::native_layer_norm(x, {embed}, weight, bias, eps);
    out.normed = in_dtype(out.normed, compute);
    return out;
  }
  const auto options = x.options();
  NormedRows out{at::empty({rows, embed}, options.dtype(compute)), at::empty({rows, 1}, options),
                 at::empty({rows, 1}, options), Tensor()};
  kernels::LayerNormToBf16Rows args;
  args.input = x.data_ptr<float>();
  args.weight = weight.data_ptr<float>();
  args.bias = bias.data_ptr<float>();
  args.output = out.normed.data_ptr<at::BFloat16>();
  if (transposed) {
    out.transposed = at::empty({embed, rows}, options.dtype(compute));  // (C, N)
    args.output_transposed = out.transposed.data_ptr<at::BFloat16>();
  }
  args.mean = out.mean.data_ptr<float>();
  args.rstd = out.rstd.data_ptr<float>();
  args.shape = {rows, embed};
  args.eps = float(eps);
  kernels::layer_norm_to_bf16_rows(args);
  return out;
}

std::tuple<Tensor, Tensor, Tensor> layer_norm_backward_in(const Tensor& d_normed, const Tensor& x,
                                                          const NormedRows& saved,
                                                          const Tensor& weight, const Tensor& bias,
                                                          std::array<bool, 3> wanted,
                                                          const Tensor& residual) {
  const int64_t rows = x.size(0), embed = x.size(1);
  if (!layer_norm_on_kernels(x, weight, bias, d_normed.scalar_type()) ||
      !plain(d_normed, torch::kBFloat16) ||
      (residual.defined() && !plain(residual, torch::kFloat))) {
    Tensor dx, d_weight, d_bias;
    std::tie(dx, d_weight, d_bias) =
        at::native_layer_norm_backward(in_dtype(d_normed, x.scalar_type()), x, {embed}, saved.mean,
                                       saved.rstd, weight, bias, wanted);
    if (dx.defined() && residual.defined())
      dx.add_(residual);
    return {dx, d_weight, d_bias};
  }
  const auto wanted_or_none = [&](bool want, const Tensor& like) {
    return want ? at::empty_like(like, at::MemoryFormat::Contiguous) : Tensor();
  };
  const Tensor dx = wanted_or_none(wanted[0], x);  // (N, C)
  const Tensor d_weight = wanted_or_none(wanted[1], weight),
               d_bias = wanted_or_none(wanted[2], bias);
  const auto pointer = [](const Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; };
  kernels::LayerNormBackwardFromBf16Rows args;
  args.grad_output = d_normed.data_ptr<at::BFloat16>();
  args.input = x.data_ptr<float>();
  args.weight = weight.data_ptr<float>();
  args.mean = saved.mean.data_ptr<float>();
  args.rstd = saved.rstd.data_ptr<float>();
  args.residual = dx.defined() ? pointer(residual) : nullptr;
  args.grad_input = pointer(dx);
  args.grad_weight = pointer(d_weight);
  args.grad_bias = pointer(d_bias);
  args.shape = {rows, embed};
  kernels::layer_norm_backward_from_bf16_rows(args);
  return {dx, d_weight, d_bias};
}

torch::ScalarType checked_compute_dtype(const Tensor& x, int64_t heads, const char* block) {
  const int64_t width = x.size(-1);
  BB_CHECK(heads > 0 && width % heads == 0, block, ": ", heads, " heads do not divide the width ",
           width);
  BB_CHECK(fused_block_supported(x, /*dropout=*/0.0, /*training=*/false), block,
           " needs float32 or float64 inputs without autocast, or float32 under CPU bf16 autocast "
           "on native bf16 products, got ",
           x.scalar_type(), " on ", x.device());
  return compat::autocast_enabled(x.device().type()) ? torch::kBFloat16 : x.scalar_type();
}

BlockAttention choose_block_attention(const AttentionMask& mask, int64_t batch, int64_t time,
                                      int64_t heads, int64_t embed, torch::ScalarType compute,
                                      const torch::Device& device) {
  BB_CHECK(!window_cuts(mask, time), "the fused blocks have no sliding window (window ",
           mask.window, " over ", time, " tokens)");
  BlockAttention attention;
  attention.batch = batch;
  attention.heads = heads;
  attention.causal = mask.causal;
  attention.compute = compute;
  const bool kernels = compute == torch::kBFloat16 && device.is_cpu() && (embed / heads) % 2 == 0 &&
                       bf16_attention_available();
  const auto options = torch::TensorOptions().device(device);
  if (kernels) {
    attention.path = AttentionPath::kBf16Kernels;
    attention.mask = mask.padding.defined() ? mask.padding.to(torch::kBool)
                                            : torch::empty({0}, options.dtype(torch::kBool));
  } else {
    attention.path = AttentionPath::kComposite;
    attention.mask =
        additive_attention_mask(mask, batch, heads, time, time, options.dtype(compute));
  }
  return attention;
}

Tensor attention_forward(const BlockAttention& attention, const Tensor& qkv,
                         AttentionSaved& saved) {
  const int64_t rows = qkv.size(0), embed = qkv.size(1) / 3;
  const int64_t batch = attention.batch, heads = attention.heads;
  const int64_t time = rows / batch, head_dim = embed / heads;
  if (attention.path == AttentionPath::kBf16Kernels) {
    const Tensor y = at::empty({rows, embed}, qkv.options());  // (N, C)
    saved.probs = bf16_attention_forward(kernel_inputs(attention, qkv),
                                         head_columns(y, batch, heads, 1, 0));  // (B, H, T, T)
    saved.input = qkv;
    return y;
  }
  // One copy into head-major order; q, k and v are then contiguous views.
  const Tensor split = qkv.view({batch, time, 3, heads, head_dim})
                           .permute({2, 0, 3, 1, 4})
                           .contiguous()
                           .view({3, batch * heads, time, head_dim});  // (3, B*H, T, D)
  const Tensor q = split[0], k = split[1], v = split[2];               // (B*H, T, D) each
  const Tensor scores = at::baddbmm(attention.mask, q, k.transpose(1, 2), /*beta=*/1,
                                    /*alpha=*/1.0 / std::sqrt(double(head_dim)));  // (B*H, T, T)
  saved.probs = at::_softmax(scores, -1, /*half_to_float=*/false);                 // (B*H, T, T)
  saved.input = split;
  return at::bmm(saved.probs, v)
      .view({batch, heads, time, head_dim})
      .permute({0, 2, 1, 3})
      .reshape({rows, embed});  // (N, C)
}

Tensor attention_backward(const BlockAttention& attention, AttentionSaved saved,
                          const Tensor& d_y) {
  if (attention.path == AttentionPath::kComposite)
    return composite_attention_backward(attention, std::move(saved), d_y);
  const Tensor qkv = std::move(saved.input);  // (N, 3C)
  const Bf16AttentionInputs in = kernel_inputs(attention, qkv);
  const Tensor d_qkv = at::empty_like(qkv);  // (N, 3C)
  const int64_t batch = attention.batch, heads = attention.heads;
  bf16_attention_backward(
      in, saved.probs, head_columns(d_y, batch, heads, 1, 0),
      {head_columns(d_qkv, batch, heads, 3, 0), head_columns(d_qkv, batch, heads, 3, 1),
       head_columns(d_qkv, batch, heads, 3, 2)});
  return d_qkv;
}

Tensor feed_forward(torch::autograd::AutogradContext* ctx, const Tensor& input,
                    const Tensor& residual, const Tensor& fc_weight, const Tensor& fc_bias,
                    const Tensor& out_weight, const Tensor& out_bias, torch::ScalarType compute,
                    const Tensor& kept_input) {
  const Tensor fc_w = weight_in_dtype(fc_weight, compute),
               out_w = weight_in_dtype(out_weight, compute);
  const Tensor pre = gemm_bias(weight_in_dtype(fc_bias, compute), input, fc_w.t());  // (N, I)
  const Tensor f = gelu_of(pre);                                                     // (N, I)
  const std::pair<const char*, Tensor> kept[] = {
      {"ff_input", kept_input.defined() ? kept_input : input},
      {"ff_pre", pre},
      {"ff_fc_w", fc_w},
      {"ff_out_w", out_w},
      {kFeedForwardKept, f}};
  for (const auto& [name, tensor] : kept)
    ctx->saved_data[name] = tensor;
  return add_residual(residual,
                      gemm_bias(weight_in_dtype(out_bias, compute), f, out_w.t()));  // (N, C)
}

Tensor feed_forward_backward(torch::autograd::AutogradContext* ctx, const Tensor& grad,
                             const FeedForwardInputs& at, torch::autograd::variable_list& result,
                             torch::ScalarType compute, torch::ScalarType param,
                             torch::ScalarType input_grad) {
  const c10::List<Tensor> inputs = kept_inputs(ctx);
  const auto wanted = [&inputs](int64_t input) { return inputs.get(input).requires_grad(); };
  const auto [g, d_out_bias] =
      in_dtype_with_bias_grad(grad, compute, wanted(at.out_bias), param);  // (N, C), (C)
  result[at.out_weight] = weight_grad(wanted(at.out_weight), g, take(ctx, kFeedForwardKept), param,
                                      inputs.get(at.out_weight));
  result[at.out_bias] = d_out_bias;
  const auto [d_pre, d_fc_bias] = gelu_backward_with_bias_grad(
      gemm(g, take(ctx, "ff_out_w")), take(ctx, "ff_pre"), wanted(at.fc_bias), param);  // (N, I)
  result[at.fc_weight] = weight_grad(wanted(at.fc_weight), d_pre, take(ctx, "ff_input"), param,
                                     inputs.get(at.fc_weight));
  result[at.fc_bias] = d_fc_bias;
  return in_dtype(gemm(d_pre, take(ctx, "ff_fc_w")), input_grad);
}

void save_attention(torch::autograd::AutogradContext* ctx, const BlockAttention& attention) {
  ctx->saved_data["attention_path"] = int64_t(attention.path);
  ctx->saved_data["attention_batch"] = attention.batch;
  ctx->saved_data["attention_heads"] = attention.heads;
  ctx->saved_data["attention_compute"] = int64_t(attention.compute);
  if (attention.path == AttentionPath::kBf16Kernels) {  // the composite's backward needs no mask
    ctx->saved_data["attention_causal"] = attention.causal;
    ctx->saved_data["attention_mask"] = attention.mask;
  }
}

BlockAttention saved_attention(torch::autograd::AutogradContext* ctx) {
  BlockAttention attention;
  attention.path = AttentionPath(ctx->saved_data.at("attention_path").toInt());
  attention.batch = ctx->saved_data.at("attention_batch").toInt();
  attention.heads = ctx->saved_data.at("attention_heads").toInt();
  attention.compute = torch::ScalarType(ctx->saved_data.at("attention_compute").toInt());
  if (attention.path == AttentionPath::kBf16Kernels) {
    attention.causal = ctx->saved_data.at("attention_causal").toBool();
    attention.mask = ctx->saved_data.at("attention_mask").toTensor();
  }
  return attention;
}

void keep_inputs(torch::autograd::AutogradContext* ctx,
                 std::initializer_list<const torch::Tensor*> inputs) {
  c10::List<Tensor> kept;  // for the LayerNorms, the gradients wanted and the version check
  c10::List<int64_t> versions;
  for (const Tensor* input : inputs) {
    kept.push_back(*input);
    versions.push_back(int64_t(input->_version()));
  }
  ctx->saved_data["inputs"] = kept;
  ctx->saved_data["versions"] = versions;
}

c10::List<Tensor> kept_inputs(torch::autograd::AutogradContext* ctx) {
  return ctx->saved_data.at("inputs").toTensorList();
}

void check_unchanged(torch::autograd::AutogradContext* ctx, const char* block, const char* order) {
  const c10::List<Tensor> inputs = kept_inputs(ctx);
  const c10::List<int64_t> versions = ctx->saved_data.at("versions").toIntList();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor input = inputs.get(i);
    BB_CHECK(int64_t(input._version()) == versions.get(i), block, ": input ", i, " of the block (",
             order, ") was changed in place between forward (version ", versions.get(i),
             ") and backward (version ", input._version(), ")");
  }
}

Tensor take(torch::autograd::AutogradContext* ctx, const char* name) {
  Tensor tensor = ctx->saved_data.at(name).toTensor();
  ctx->saved_data.erase(name);
  return tensor;
}

void check_first_backward(torch::autograd::AutogradContext* ctx, const char* block,
                          const char* kept) {
  BB_CHECK(!torch::GradMode::is_enabled(), block,
           " has no second derivative (backward with create_graph); run the block with "
           "model.block_kernel = \"composite\" (nn::BlockKernel::kComposite)");
  BB_CHECK(ctx->saved_data.count(kept) == 1, block,
           ": backward ran twice through the same block (retain_graph); the block lets go of its "
           "activations in its first backward. Run it with model.block_kernel = \"composite\" "
           "(nn::BlockKernel::kComposite) to do that");
}

}  // namespace bigbatch::nn::block_parts
