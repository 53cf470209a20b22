#include "bigbatch/nn/fused_block.h"

#include <array>
#include <atomic>
#include <cmath>
#include <tuple>

#include "bigbatch/core/check.h"
#include "bigbatch/core/torch_compat.h"
#include "bigbatch/nn/bf16_attention.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/fp32_matmul.h"

namespace bigbatch::nn {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<BlockKernel> process_choice{BlockKernel::kAuto};

/// The forward's tensor inputs in the order FusedPreLnBlock::apply takes them.
enum Input : int64_t {
  kX,
  kLn1Weight,
  kLn1Bias,
  kQkvWeight,
  kQkvBias,
  kProjWeight,
  kProjBias,
  kLn2Weight,
  kLn2Bias,
  kFcWeight,
  kFcBias,
  kOutWeight,
  kOutBias,
  kMask,
  kInputs  // then the arguments that are not tensors
};
/// heads, eps, the compute dtype, the attention path and causal: they get no gradient.
constexpr int64_t kNonTensorInputs = 5;

/// The scope of the block's own kernels: autocast's casts are made explicitly (so CPU autocast
/// must not cast again), and no autograd graph is recorded (the block is one node).
struct BlockKernelScope {
  c10::impl::ExcludeDispatchKeyGuard no_autocast{c10::DispatchKey::AutocastCPU};
  at::AutoDispatchBelowADInplaceOrView below_autograd;
};

/// `t` in `dtype` (itself when it already is).
Tensor in_dtype(const Tensor& t, torch::ScalarType dtype) {
  return t.scalar_type() == dtype ? t : t.to(dtype);
}

/// How the block computes attention. kBf16Kernels reads q, k and v from the columns of the qkv
/// product and writes their gradients there (nn/bf16_attention.h); kComposite copies them
/// head-major for batched products and a softmax.
enum class AttentionPath : int64_t { kComposite, kBf16Kernels };

/// Part `part` (0 q, 1 k, 2 v) of a (N, 3C) qkv tensor, or the whole of a (N, C) one
/// (`parts` 1), as (B, H, T, D) views.
Tensor head_columns(const Tensor& t, int64_t batch, int64_t heads, int64_t parts, int64_t part) {
  const int64_t time = t.size(0) / batch, head_dim = t.size(1) / (parts * heads);
  return t.view({batch, time, parts, heads, head_dim}).select(2, part).permute({0, 2, 1, 3});
}

/// The bf16 attention kernels' inputs for a (N, 3C) qkv tensor.
Bf16AttentionInputs kernel_inputs(const Tensor& qkv, int64_t batch, int64_t heads, bool causal,
                                  const Tensor& padding) {
  const int64_t head_dim = qkv.size(1) / (3 * heads);
  return {head_columns(qkv, batch, heads, 3, 0), head_columns(qkv, batch, heads, 3, 1),
          head_columns(qkv, batch, heads, 3, 2), Bf16AttentionMask{causal, padding},
          1.0 / std::sqrt(double(head_dim))};
}

/// A product's gradients for its parameters, in the parameters' dtype, or undefined for a
/// parameter that takes none: grad^T input for the weight, the column sums of grad for the bias.
Tensor weight_grad(bool wanted, const Tensor& grad, const Tensor& input, torch::ScalarType dtype) {
  return wanted ? in_dtype(gemm(grad.t(), input), dtype) : Tensor();
}
Tensor bias_grad(bool wanted, const Tensor& grad, torch::ScalarType dtype) {
  return wanted ? in_dtype(grad.sum(0), dtype) : Tensor();
}

struct FusedPreLnBlock : torch::autograd::Function<FusedPreLnBlock> {
  // x (B, T, C) -> (B, T, C). The mask: on kComposite broadcastable to (B*H, T, T), additive, in
  // the compute dtype; on kBf16Kernels the (B, T) bool padding, or empty for none, and `causal`.
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& ln1_weight,
                        const Tensor& ln1_bias, const Tensor& qkv_weight, const Tensor& qkv_bias,
                        const Tensor& proj_weight, const Tensor& proj_bias,
                        const Tensor& ln2_weight, const Tensor& ln2_bias, const Tensor& fc_weight,
                        const Tensor& fc_bias, const Tensor& out_weight, const Tensor& out_bias,
                        const Tensor& mask, int64_t heads, double eps, int64_t compute_dtype,
                        int64_t attention_path, bool causal) {
    const auto compute = torch::ScalarType(compute_dtype);  // bf16 under CPU bf16 autocast
    const auto path = AttentionPath(attention_path);
    const BlockKernelScope scope;
    const int64_t batch = x.size(0), time = x.size(1), embed = x.size(2);
    const int64_t rows = batch * time, head_dim = embed / heads;
    const double scale = 1.0 / std::sqrt(double(head_dim));
    const auto cast = [compute](const Tensor& t) { return in_dtype(t, compute); };

    const Tensor x2 = x.reshape({rows, embed});  // (N, C), N = B*T
    Tensor normed1, mean1, rstd1;                // (N, C), (N, 1), (N, 1)
    std::tie(normed1, mean1, rstd1) = at::native_layer_norm(x2, {embed}, ln1_weight, ln1_bias, eps);
    const Tensor a = cast(normed1);  // (N, C)
    const Tensor qkv_w = cast(qkv_weight), proj_w = cast(proj_weight);
    const Tensor fc_w = cast(fc_weight), out_w = cast(out_weight);
    const Tensor qkv = gemm_bias(cast(qkv_bias), a, qkv_w.t());  // (N, 3C)
    Tensor attended_input, probs, y;  // what backward reads of q, k, v; (B*H or B, H, T, T); (N, C)
    if (path == AttentionPath::kBf16Kernels) {
      y = at::empty({rows, embed}, qkv.options());
      probs = bf16_attention_forward(kernel_inputs(qkv, batch, heads, causal, padding_of(mask)),
                                     head_columns(y, batch, heads, 1, 0));  // (B, H, T, T)
      attended_input = qkv;                                                 // (N, 3C)
    } else {
      // One copy into head-major order; q, k and v are then contiguous views.
      const Tensor split = qkv.view({batch, time, 3, heads, head_dim})
                               .permute({2, 0, 3, 1, 4})
                               .contiguous()
                               .view({3, batch * heads, time, head_dim});  // (3, B*H, T, D)
      const Tensor q = split[0], k = split[1], v = split[2];               // (B*H, T, D) each
      const Tensor scores =
          at::baddbmm(mask, q, k.transpose(1, 2), /*beta=*/1, /*alpha=*/scale);  // (B*H, T, T)
      probs = at::_softmax(scores, -1, /*half_to_float=*/false);                 // (B*H, T, T)
      y = at::bmm(probs, v)
              .view({batch, heads, time, head_dim})
              .permute({0, 2, 1, 3})
              .reshape({rows, embed});  // (N, C)
      attended_input = split;           // (3, B*H, T, D)
    }
    const Tensor h = at::add(x2, gemm_bias(cast(proj_bias), y, proj_w.t()));  // (N, C), float32
    Tensor normed2, mean2, rstd2;
    std::tie(normed2, mean2, rstd2) = at::native_layer_norm(h, {embed}, ln2_weight, ln2_bias, eps);
    const Tensor b = cast(normed2);                                          // (N, C)
    const Tensor pre = gemm_bias(cast(fc_bias), b, fc_w.t());                // (N, 4C)
    const Tensor f = at::gelu(pre);                                          // (N, 4C)
    const Tensor out = at::add(h, gemm_bias(cast(out_bias), f, out_w.t()));  // (N, C), float32

    // Kept in saved_data rather than save_for_backward, so that backward lets go of each
    // activation once it is used, as autograd does between the composite block's nodes (saved
    // variables live until the whole node has run: one block's activations more at the peak).
    // SavedVariable's check against in-place changes is made on the inputs' versions instead.
    const std::pair<const char*, Tensor> saved[] = {{"x", x2},
                                                    {"mean1", mean1},
                                                    {"rstd1", rstd1},
                                                    {"a", a},
                                                    {"qkv", attended_input},
                                                    {"probs", probs},
                                                    {"y", y},
                                                    {"h", h},
                                                    {"mean2", mean2},
                                                    {"rstd2", rstd2},
                                                    {"b", b},
                                                    {"pre", pre},
                                                    {"f", f},
                                                    {"qkv_w", qkv_w},
                                                    {"proj_w", proj_w},
                                                    {"fc_w", fc_w},
                                                    {"out_w", out_w}};
    for (const auto& [name, tensor] : saved)
      ctx->saved_data[name] = tensor;
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["batch"] = batch;
    ctx->saved_data["compute"] = int64_t(compute);
    ctx->saved_data["path"] = attention_path;
    if (path == AttentionPath::kBf16Kernels) {  // the composite's backward needs no mask
      ctx->saved_data["causal"] = causal;
      ctx->saved_data["mask"] = mask;
    }
    const std::array<const Tensor*, kMask> inputs{
        &x,          &ln1_weight, &ln1_bias,  &qkv_weight, &qkv_bias,   &proj_weight, &proj_bias,
        &ln2_weight, &ln2_bias,   &fc_weight, &fc_bias,    &out_weight, &out_bias};
    c10::List<Tensor> kept;  // for the LayerNorms, the gradients wanted and the version check
    c10::List<int64_t> versions;
    for (const Tensor* input : inputs) {
      kept.push_back(*input);
      versions.push_back(int64_t(input->_version()));
    }
    ctx->saved_data["inputs"] = kept;
    ctx->saved_data["versions"] = versions;
    return out.view({batch, time, embed});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    BB_CHECK(!torch::GradMode::is_enabled(),
             "fused_pre_ln_block has no second derivative (backward with create_graph); run the "
             "block with model.block_kernel = \"composite\" (nn::BlockKernel::kComposite)");
    BB_CHECK(ctx->saved_data.count("f") == 1,
             "fused_pre_ln_block: backward ran twice through the same block (retain_graph); the "
             "block lets go of its activations in its first backward. Run it with "
             "model.block_kernel = \"composite\" (nn::BlockKernel::kComposite) to do that");
    const BlockKernelScope scope;
    check_unchanged(ctx);
    const auto take = [ctx](const char* name) {  // a saved tensor, no longer held by ctx
      Tensor tensor = ctx->saved_data.at(name).toTensor();
      ctx->saved_data.erase(name);
      return tensor;
    };
    const int64_t heads = ctx->saved_data.at("heads").toInt();
    const auto compute = static_cast<torch::ScalarType>(ctx->saved_data.at("compute").toInt());
    const auto path = AttentionPath(ctx->saved_data.at("path").toInt());
    const c10::List<Tensor> inputs = ctx->saved_data.at("inputs").toTensorList();
    // A frozen parameter gets no gradient computed.
    const auto wanted = [&inputs](Input input) { return inputs.get(input).requires_grad(); };
    const auto cast = [compute](const Tensor& t) { return in_dtype(t, compute); };
    const Tensor ln1_weight = inputs.get(kLn1Weight), ln1_bias = inputs.get(kLn1Bias);
    const Tensor ln2_weight = inputs.get(kLn2Weight), ln2_bias = inputs.get(kLn2Bias);
    const torch::ScalarType param = ln1_weight.scalar_type();
    variable_list result(kInputs + kNonTensorInputs);

    const Tensor g = grads[0].reshape({-1, grads[0].size(-1)});  // (N, C), float32
    const int64_t embed = g.size(1);
    // Feed-forward network: out = h + gelu(b W_fc^T + b_fc) W_out^T + b_out.
    Tensor d_normed2;  // (N, C), float32
    {
      const Tensor g_c = cast(g);
      result[kOutWeight] = weight_grad(wanted(kOutWeight), g_c, take("f"), param);
      result[kOutBias] = bias_grad(wanted(kOutBias), g_c, param);
      const Tensor d_pre = at::gelu_backward(gemm(g_c, take("out_w")), take("pre"));  // (N, 4C)
      result[kFcWeight] = weight_grad(wanted(kFcWeight), d_pre, take("b"), param);
      result[kFcBias] = bias_grad(wanted(kFcBias), d_pre, param);
      d_normed2 = in_dtype(gemm(d_pre, take("fc_w")), g.scalar_type());
    }
    Tensor dh, d_ln2_weight, d_ln2_bias;  // (N, C): through ln2, then the residual added
    std::tie(dh, d_ln2_weight, d_ln2_bias) = at::native_layer_norm_backward(
        d_normed2, take("h"), {embed}, take("mean2"), take("rstd2"), ln2_weight, ln2_bias,
        {true, wanted(kLn2Weight), wanted(kLn2Bias)});
    d_normed2.reset();
    dh.add_(g);
    result[kLn2Weight] = d_ln2_weight;
    result[kLn2Bias] = d_ln2_bias;

    // Attention: h = x + softmax(q k^T / sqrt(D) + mask) v W_proj^T + b_proj.
    Tensor d_normed1;  // (N, C), float32
    {
      const Tensor dh_c = cast(dh);
      result[kProjWeight] = weight_grad(wanted(kProjWeight), dh_c, take("y"), param);
      result[kProjBias] = bias_grad(wanted(kProjBias), dh_c, param);
      const Tensor d_qkv = path == AttentionPath::kBf16Kernels
                               ? kernel_attention_backward(ctx, gemm(dh_c, take("proj_w")), heads)
                               : composite_attention_backward(ctx, gemm(dh_c, take("proj_w")),
                                                              heads, compute);  // (N, 3C)
      result[kQkvWeight] = weight_grad(wanted(kQkvWeight), d_qkv, take("a"), param);
      result[kQkvBias] = bias_grad(wanted(kQkvBias), d_qkv, param);
      d_normed1 = in_dtype(gemm(d_qkv, take("qkv_w")), g.scalar_type());
    }
    Tensor dx, d_ln1_weight, d_ln1_bias;
    std::tie(dx, d_ln1_weight, d_ln1_bias) = at::native_layer_norm_backward(
        d_normed1, take("x"), {embed}, take("mean1"), take("rstd1"), ln1_weight, ln1_bias,
        {wanted(kX), wanted(kLn1Weight), wanted(kLn1Bias)});
    if (dx.defined())
      result[kX] = dx.add_(dh).view(grads[0].sizes());
    result[kLn1Weight] = d_ln1_weight;
    result[kLn1Bias] = d_ln1_bias;
    return result;
  }

  /// The padding the kernels read from the block's mask argument: undefined where it is empty.
  static Tensor padding_of(const Tensor& mask) { return mask.numel() == 0 ? Tensor() : mask; }

  /// dq, dk and dv by the bf16 attention kernels, as the columns of one (N, 3C) tensor, for the
  /// gradient of the attended values d_attended (N, C).
  static Tensor kernel_attention_backward(AutogradContext* ctx, const Tensor& d_attended,
                                          int64_t heads) {
    const Tensor qkv = ctx->saved_data.at("qkv").toTensor();  // (N, 3C)
    ctx->saved_data.erase("qkv");
    const Tensor probs = ctx->saved_data.at("probs").toTensor();  // (B, H, T, T)
    ctx->saved_data.erase("probs");
    const int64_t batch = ctx->saved_data.at("batch").toInt();
    const Bf16AttentionInputs in =
        kernel_inputs(qkv, batch, heads, ctx->saved_data.at("causal").toBool(),
                      padding_of(ctx->saved_data.at("mask").toTensor()));
    const Tensor d_qkv = at::empty_like(qkv);  // (N, 3C)
    bf16_attention_backward(
        in, probs, head_columns(d_attended, batch, heads, 1, 0),
        {head_columns(d_qkv, batch, heads, 3, 0), head_columns(d_qkv, batch, heads, 3, 1),
         head_columns(d_qkv, batch, heads, 3, 2)});
    return d_qkv;
  }

  /// dq, dk and dv by batched products and softmax's backward, for the gradient of the attended
  /// values d_attended_rows (N, C): copied back from head-major order into one (N, 3C) tensor.
  static Tensor composite_attention_backward(AutogradContext* ctx, const Tensor& d_attended_rows,
                                             int64_t heads, torch::ScalarType compute) {
    const Tensor split = ctx->saved_data.at("qkv").toTensor();  // (3, B*H, T, D)
    ctx->saved_data.erase("qkv");
    const int64_t batch_heads = split.size(1), time = split.size(2), head_dim = split.size(3);
    const int64_t rows = batch_heads / heads * time;
    const Tensor d_attended = d_attended_rows.view({batch_heads / heads, time, heads, head_dim})
                                  .permute({0, 2, 1, 3})
                                  .reshape({batch_heads, time, head_dim});  // (B*H, T, D)
    const Tensor q = split[0], k = split[1], v = split[2];
    const Tensor d_split = at::empty_like(split);              // (3, B*H, T, D)
    Tensor dq = d_split[0], dk = d_split[1], dv = d_split[2];  // views, written in place
    Tensor d_scores;                                           // (B*H, T, T)
    {
      const Tensor probs = ctx->saved_data.at("probs").toTensor();
      ctx->saved_data.erase("probs");
      at::bmm_out(dv, probs.transpose(1, 2), d_attended);
      d_scores =
          at::_softmax_backward_data(at::bmm(d_attended, v.transpose(1, 2)), probs, -1, compute);
    }
    d_scores.mul_(1.0 / std::sqrt(double(head_dim)));
    at::bmm_out(dq, d_scores, k);
    at::bmm_out(dk, d_scores.transpose(1, 2), q);
    return d_split.view({3, batch_heads / heads, heads, time, head_dim})
        .permute({1, 3, 0, 2, 4})
        .reshape({rows, 3 * heads * head_dim});  // (N, 3C)
  }

  /// Throws, as autograd does for a saved variable, when an input was changed in place between
  /// forward and backward (an optimizer step inside the window, say).
  static void check_unchanged(AutogradContext* ctx) {
    const c10::List<Tensor> inputs = ctx->saved_data.at("inputs").toTensorList();
    const c10::List<int64_t> versions = ctx->saved_data.at("versions").toIntList();
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor input = inputs.get(i);
      BB_CHECK(int64_t(input._version()) == versions.get(i), "fused_pre_ln_block: input ", i,
               " of the block (0 = x, then the parameters in PreLnBlockParameters' order) was "
               "changed in place between forward (version ",
               versions.get(i), ") and backward (version ", input._version(), ")");
    }
  }
};

}  // namespace

BlockKernel parse_block_kernel(const std::string& text, const std::string& field) {
  if (text == "auto")
    return BlockKernel::kAuto;
  if (text == "fused")
    return BlockKernel::kFused;
  if (text == "composite")
    return BlockKernel::kComposite;
  throw InputError(cat(field, " must be \"auto\", \"fused\" or \"composite\", got \"", text, "\""));
}

std::string to_string(BlockKernel kernel) {
  switch (kernel) {
    case BlockKernel::kAuto:
      return "auto";
    case BlockKernel::kFused:
      return "fused";
    case BlockKernel::kComposite:
      return "composite";
  }
  return "?";
}

void set_block_kernel(BlockKernel kernel) {
  process_choice.store(kernel);
}

BlockKernel block_kernel() {
  return process_choice.load();
}

bool fused_block_supports(const BlockInputs& inputs) {
  if (inputs.dropout_draws || (inputs.device != torch::kCPU && inputs.device != torch::kCUDA))
    return false;
  if (inputs.autocast == inputs.dtype)  // no autocast
    return inputs.dtype == torch::kFloat || inputs.dtype == torch::kDouble;
  return inputs.device == torch::kCPU && inputs.dtype == torch::kFloat &&
         inputs.autocast == torch::kBFloat16 && bf16_matmul() == Bf16Matmul::kNative;
}

bool fused_block_supported(const torch::Tensor& x, double dropout, bool training) {
  if (x.dim() != 3)
    return false;
  const c10::DeviceType device = x.device().type();
  const bool autocast = compat::autocast_enabled(device);
  return fused_block_supports({training && dropout > 0.0, device, x.scalar_type(),
                               autocast ? compat::autocast_dtype(device) : x.scalar_type()});
}

BlockKernel resolve_block_kernel(BlockKernel kernel, const BlockSite& site) {
  if (kernel == BlockKernel::kComposite || !site.supported)
    return BlockKernel::kComposite;
  if (kernel == BlockKernel::kFused)
    return BlockKernel::kFused;
  return site.cpu && site.attention == AttentionKernel::kComposite ? BlockKernel::kFused
                                                                   : BlockKernel::kComposite;
}

bool use_fused_block(const torch::Tensor& x, double dropout, bool training, int64_t keys) {
  const bool cpu = x.device().is_cpu();
  const AttentionSite attention{cpu,
                                compat::autocast_enabled(torch::kCPU) &&
                                    compat::autocast_dtype(torch::kCPU) == torch::kBFloat16,
                                keys};
  const BlockSite site{fused_block_supported(x, dropout, training), cpu,
                       resolve_attention_kernel(attention_kernel(), attention)};
  return resolve_block_kernel(block_kernel(), site) == BlockKernel::kFused;
}

torch::Tensor fused_pre_ln_block(const torch::Tensor& x, const PreLnBlockParameters& parameters,
                                 const PreLnBlockShape& shape, const AttentionMask& mask) {
  BB_CHECK(x.dim() == 3, "fused_pre_ln_block expects x of shape (B, T, C), got ", x.sizes());
  BB_CHECK(shape.heads > 0 && x.size(2) % shape.heads == 0, "fused_pre_ln_block: ", shape.heads,
           " heads do not divide the width ", x.size(2));
  BB_CHECK(fused_block_supported(x, /*dropout=*/0.0, /*training=*/false),
           "fused_pre_ln_block needs float32 or float64 inputs without autocast, or float32 "
           "under CPU bf16 autocast on native bf16 products, got ",
           x.scalar_type(), " on ", x.device());
  const torch::ScalarType compute =
      compat::autocast_enabled(x.device().type()) ? torch::kBFloat16 : x.scalar_type();
  const int64_t time = x.size(1);
  const bool kernels = compute == torch::kBFloat16 && x.device().is_cpu() &&
                       (x.size(2) / shape.heads) % 2 == 0 && bf16_attention_available();
  // The kernels take the padding itself (an empty tensor for none: LibTorch 1.13's
  // Function::apply takes no undefined tensor), the composite an additive mask.
  const torch::Tensor mask_argument =
      kernels ? (mask.padding.defined() ? mask.padding.to(torch::kBool)
                                        : torch::empty({0}, x.options().dtype(torch::kBool)))
              : additive_attention_mask(mask, x.size(0), shape.heads, time, time,
                                        x.options().dtype(compute));
  const AttentionPath path = kernels ? AttentionPath::kBf16Kernels : AttentionPath::kComposite;
  const PreLnBlockParameters& p = parameters;
  return FusedPreLnBlock::apply(x, p.ln1_weight, p.ln1_bias, p.qkv_weight, p.qkv_bias,
                                p.proj_weight, p.proj_bias, p.ln2_weight, p.ln2_bias, p.fc_weight,
                                p.fc_bias, p.out_weight, p.out_bias, mask_argument, shape.heads,
                                shape.eps, int64_t(compute), int64_t(path), mask.causal);
}

}  // namespace bigbatch::nn
