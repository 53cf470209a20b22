#include "bigbatch/nn/fused_block.h"

#include <atomic>
#include <tuple>

#include "bigbatch/core/check.h"
#include "bigbatch/core/torch_compat.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/fp32_matmul.h"
#include "bigbatch/nn/fused_block_parts.h"
#include "bigbatch/nn/precision.h"
#include "bigbatch/nn/weight_copies.h"

namespace bigbatch::nn {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using namespace block_parts;  // what the fused blocks share

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

struct FusedPreLnBlock : torch::autograd::Function<FusedPreLnBlock> {
  // x (B, T, C) -> (B, T, C). The mask and `causal` as BlockAttention holds them for
  // `attention_path`.
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& ln1_weight,
                        const Tensor& ln1_bias, const Tensor& qkv_weight, const Tensor& qkv_bias,
                        const Tensor& proj_weight, const Tensor& proj_bias,
                        const Tensor& ln2_weight, const Tensor& ln2_bias, const Tensor& fc_weight,
                        const Tensor& fc_bias, const Tensor& out_weight, const Tensor& out_bias,
                        const Tensor& mask, int64_t heads, double eps, int64_t compute_dtype,
                        int64_t attention_path, bool causal) {
    const auto compute = torch::ScalarType(compute_dtype);  // bf16 under CPU bf16 autocast
    const KernelScope scope;
    const int64_t batch = x.size(0), time = x.size(1), embed = x.size(2);

    const Tensor x2 = x.reshape({batch * time, embed});  // (N, C), N = B*T
    // The LayerNorms also write their result transposed where the weight gradients of the qkv
    // and fc products read it so (transposed_input_pays): no copy in backward.
    const int64_t rows = batch * time;
    const NormedRows ln1 = layer_norm_in(x2, ln1_weight, ln1_bias, eps, compute,
                                         transposed_input_pays(rows, 3 * embed, embed));
    const Tensor& a = ln1.normed;  // (N, C), in compute
    const Tensor qkv_w = weight_in_dtype(qkv_weight, compute),
                 proj_w = weight_in_dtype(proj_weight, compute);
    const Tensor qkv = gemm_bias(weight_in_dtype(qkv_bias, compute), a, qkv_w.t());  // (N, 3C)
    const BlockAttention attention{
        AttentionPath(attention_path), batch, heads, causal, mask, compute};
    AttentionSaved attended;
    const Tensor y = attention_forward(attention, qkv, attended);  // (N, C)
    const Tensor h = add_residual(
        x2, gemm_bias(weight_in_dtype(proj_bias, compute), y, proj_w.t()));  // (N, C), fp32
    const NormedRows ln2 = layer_norm_in(h, ln2_weight, ln2_bias, eps, compute,
                                         transposed_input_pays(rows, fc_weight.size(0), embed));
    const Tensor out = feed_forward(ctx, ln2.normed, h, fc_weight, fc_bias, out_weight, out_bias,
                                    compute, ln2.for_weight_grad());  // (N, C), float32

    // Kept in saved_data rather than save_for_backward, so that backward lets go of each
    // activation once it is used, as autograd does between the composite block's nodes (saved
    // variables live until the whole node has run: one block's activations more at the peak).
    // SavedVariable's check against in-place changes is made on the inputs' versions instead.
    const std::pair<const char*, Tensor> saved[] = {{"x", x2},
                                                    {"mean1", ln1.mean},
                                                    {"rstd1", ln1.rstd},
                                                    {"a", ln1.for_weight_grad()},
                                                    {"qkv", attended.input},
                                                    {"probs", attended.probs},
                                                    {"y", y},
                                                    {"h", h},
                                                    {"mean2", ln2.mean},
                                                    {"rstd2", ln2.rstd},
                                                    {"qkv_w", qkv_w},
                                                    {"proj_w", proj_w}};
    for (const auto& [name, tensor] : saved)
      ctx->saved_data[name] = tensor;
    save_attention(ctx, attention);
    keep_inputs(ctx, {&x, &ln1_weight, &ln1_bias, &qkv_weight, &qkv_bias, &proj_weight, &proj_bias,
                      &ln2_weight, &ln2_bias, &fc_weight, &fc_bias, &out_weight, &out_bias});
    return out.view({batch, time, embed});
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    check_first_backward(ctx, "fused_pre_ln_block", kFeedForwardKept);
    const KernelScope scope;
    check_unchanged(ctx, "fused_pre_ln_block",
                    "0 = x, then the parameters in PreLnBlockParameters' order");
    const BlockAttention attention = saved_attention(ctx);
    const c10::List<Tensor> inputs = kept_inputs(ctx);
    // A frozen parameter gets no gradient computed.
    const auto wanted = [&inputs](Input input) { return inputs.get(input).requires_grad(); };
    const auto saved = [ctx](const char* name) { return take(ctx, name); };
    const Tensor ln1_weight = inputs.get(kLn1Weight), ln1_bias = inputs.get(kLn1Bias);
    const Tensor ln2_weight = inputs.get(kLn2Weight), ln2_bias = inputs.get(kLn2Bias);
    const torch::ScalarType param = ln1_weight.scalar_type();
    variable_list result(kInputs + kNonTensorInputs);

    const Tensor g = grads[0].reshape({-1, grads[0].size(-1)});  // (N, C), float32
    // Feed-forward network: out = h + gelu(b W_fc^T + b_fc) W_out^T + b_out. The gradients
    // flowing into the LayerNorms stay in the compute dtype (layer_norm_backward_in widens them).
    Tensor d_normed2 = feed_forward_backward(ctx, g, {kFcWeight, kFcBias, kOutWeight, kOutBias},
                                             result, attention.compute, param,
                                             attention.compute);  // (N, C)
    // Through ln2, then the residual added: (N, C), float32.
    const auto [dh, d_ln2_weight, d_ln2_bias] = layer_norm_backward_in(
        d_normed2, saved("h"), {Tensor(), saved("mean2"), saved("rstd2"), Tensor()}, ln2_weight,
        ln2_bias, {true, wanted(kLn2Weight), wanted(kLn2Bias)}, g);
    d_normed2.reset();
    result[kLn2Weight] = d_ln2_weight;
    result[kLn2Bias] = d_ln2_bias;

    // Attention: h = x + softmax(q k^T / sqrt(D) + mask) v W_proj^T + b_proj.
    Tensor d_normed1;  // (N, C), in compute
    {
      const auto [dh_c, d_proj_bias] =
          in_dtype_with_bias_grad(dh, attention.compute, wanted(kProjBias), param);  // (N, C)
      result[kProjWeight] =
          weight_grad(wanted(kProjWeight), dh_c, saved("y"), param, inputs.get(kProjWeight));
      result[kProjBias] = d_proj_bias;
      const Tensor d_qkv = attention_backward(attention, {saved("qkv"), saved("probs")},
                                              gemm(dh_c, saved("proj_w")));  // (N, 3C)
      result[kQkvWeight] =
          weight_grad(wanted(kQkvWeight), d_qkv, saved("a"), param, inputs.get(kQkvWeight));
      result[kQkvBias] = bias_grad(wanted(kQkvBias), d_qkv, param);
      d_normed1 = gemm(d_qkv, saved("qkv_w"));
    }
    // Through ln1, then the residual added.
    const auto [dx, d_ln1_weight, d_ln1_bias] = layer_norm_backward_in(
        d_normed1, saved("x"), {Tensor(), saved("mean1"), saved("rstd1"), Tensor()}, ln1_weight,
        ln1_bias, {wanted(kX), wanted(kLn1Weight), wanted(kLn1Bias)}, dh);
    if (dx.defined())
      result[kX] = dx.view(grads[0].sizes());
    result[kLn1Weight] = d_ln1_weight;
    result[kLn1Bias] = d_ln1_bias;
    return result;
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
  if (x.dim() != 2 && x.dim() != 3)
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
  const AttentionSite attention{cpu, cpu_autocast_to_bf16(), keys};
  const BlockSite site{fused_block_supported(x, dropout, training), cpu,
                       resolve_attention_kernel(attention_kernel(), attention)};
  return resolve_block_kernel(block_kernel(), site) == BlockKernel::kFused;
}

torch::Tensor fused_pre_ln_block(const torch::Tensor& x, const PreLnBlockParameters& parameters,
                                 const PreLnBlockShape& shape, const AttentionMask& mask) {
  BB_CHECK(x.dim() == 3, "fused_pre_ln_block expects x of shape (B, T, C), got ", x.sizes());
  const torch::ScalarType compute = checked_compute_dtype(x, shape.heads, "fused_pre_ln_block");
  const BlockAttention attention = choose_block_attention(mask, x.size(0), x.size(1), shape.heads,
                                                          x.size(2), compute, x.device());
  const PreLnBlockParameters& p = parameters;
  return FusedPreLnBlock::apply(x, p.ln1_weight, p.ln1_bias, p.qkv_weight, p.qkv_bias,
                                p.proj_weight, p.proj_bias, p.ln2_weight, p.ln2_bias, p.fc_weight,
                                p.fc_bias, p.out_weight, p.out_bias, attention.mask, shape.heads,
                                shape.eps, int64_t(compute), int64_t(attention.path), mask.causal);
}

}  // namespace bigbatch::nn
