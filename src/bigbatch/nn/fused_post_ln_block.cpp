#include "bigbatch/nn/fused_post_ln_block.h"

#include <tuple>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/nn/fp32_matmul.h"
#include "bigbatch/nn/fused_block_parts.h"
#include "bigbatch/nn/packed_tokens.h"
#include "bigbatch/nn/weight_copies.h"

namespace bigbatch::nn {
namespace {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using namespace block_parts;  // what the fused blocks share

constexpr const char* kName = "fused_post_ln_block";

/// The forward's tensor inputs in the order FusedPostLnBlock::apply takes them.
enum Input : int64_t {
  kX,
  kQueryWeight,
  kKeyWeight,
  kValueWeight,
  kQueryBias,
  kKeyBias,
  kValueBias,
  kProjWeight,
  kProjBias,
  kLn1Weight,
  kLn1Bias,
  kFcWeight,
  kFcBias,
  kOutWeight,
  kOutBias,
  kLn2Weight,
  kLn2Bias,
  kMask,
  kSlots,
  kInputs  // then the arguments that are not tensors
};
/// heads, eps, the compute dtype, the attention path, causal, batch, time and the fillers: no
/// gradient.
constexpr int64_t kNonTensorInputs = 8;

/// The query, key and value weights (or biases) stacked along their rows in `dtype`: one
/// product's operand. (3C, ...)
Tensor stacked(const Tensor& q, const Tensor& k, const Tensor& v, torch::ScalarType dtype) {
  std::vector<int64_t> sizes = q.sizes().vec();
  sizes[0] *= 3;
  Tensor out = at::empty(sizes, q.options().dtype(dtype));
  int64_t row = 0;
  for (const Tensor* part : {&q, &k, &v}) {
    out.narrow(0, row, part->size(0)).copy_(*part);
    row += part->size(0);
  }
  return out;
}

/// Rows (N + F, W) into their `positions` sequence slots (B*T, W), zeros where no row is, the F
/// fillers after the N placed rows dropped; the rows themselves when there are no slots (an
/// empty tensor).
Tensor to_positions(const Tensor& rows, const Tensor& slots, int64_t positions) {
  if (slots.numel() == 0)
    return rows;
  return scatter_rows(rows, slots, positions);
}

/// The inverse: the rows of (B*T, W) that `slots` names, then zeros for `fillers` rows ->
/// (N + F, W).
Tensor from_positions(const Tensor& sequences, const Tensor& slots, int64_t fillers) {
  if (slots.numel() == 0)
    return sequences;
  if (fillers == 0)
    return sequences.index_select(0, slots);
  const int64_t placed = slots.size(0);
  Tensor rows = at::empty({placed + fillers, sequences.size(1)}, sequences.options());
  Tensor placed_rows = rows.narrow(0, 0, placed);
  at::index_select_out(placed_rows, sequences, 0, slots);
  rows.narrow(0, placed, fillers).zero_();
  return rows;
}

/// The query, key and value parts of a (3C, ...) gradient, each where its parameter wants one.
void split_qkv(const Tensor& grad, variable_list& result, const c10::List<Tensor>& inputs,
               Input first) {
  if (!grad.defined())
    return;
  const int64_t part = grad.size(0) / 3;
  for (int64_t i = 0; i < 3; ++i)
    if (inputs.get(first + i).requires_grad())
      result[first + i] = grad.narrow(0, i * part, part);
}

struct FusedPostLnBlock : torch::autograd::Function<FusedPostLnBlock> {
  // x (N, C) -> (N, C). The mask and `causal` as BlockAttention holds them for
  // `attention_path`; slots (N - fillers) int64 or empty.
  static Tensor forward(AutogradContext* ctx, const Tensor& x, const Tensor& query_weight,
                        const Tensor& key_weight, const Tensor& value_weight,
                        const Tensor& query_bias, const Tensor& key_bias, const Tensor& value_bias,
                        const Tensor& proj_weight, const Tensor& proj_bias,
                        const Tensor& ln1_weight, const Tensor& ln1_bias, const Tensor& fc_weight,
                        const Tensor& fc_bias, const Tensor& out_weight, const Tensor& out_bias,
                        const Tensor& ln2_weight, const Tensor& ln2_bias, const Tensor& mask,
                        const Tensor& slots, int64_t heads, double eps, int64_t compute_dtype,
                        int64_t attention_path, bool causal, int64_t batch, int64_t time,
                        int64_t fillers) {
    const auto compute = torch::ScalarType(compute_dtype);  // bf16 under CPU bf16 autocast
    const KernelScope scope;
    const int64_t embed = x.size(1);
    const auto cast = [compute](const Tensor& t) { return in_dtype(t, compute); };

    const Tensor xc = cast(x);  // (N, C)
    const Tensor qkv_w = weight_copy({&query_weight, &key_weight, &value_weight}, compute, [&] {
      return stacked(query_weight, key_weight, value_weight, compute);
    });  // (3C, C)
    const Tensor qkv_b = weight_copy({&query_bias, &key_bias, &value_bias}, compute, [&] {
      return stacked(query_bias, key_bias, value_bias, compute);
    });                                                  // (3C)
    const Tensor qkv = gemm_bias(qkv_b, xc, qkv_w.t());  // (N, 3C)
    const BlockAttention attention{
        AttentionPath(attention_path), batch, heads, causal, mask, compute};
    AttentionSaved attended;
    const Tensor y = from_positions(
        attention_forward(attention, to_positions(qkv, slots, batch * time), attended), slots,
        fillers);  // (N, C)
    const Tensor proj_w = weight_in_dtype(proj_weight, compute);
    const Tensor s1 = add_residual(
        x, gemm_bias(weight_in_dtype(proj_bias, compute), y, proj_w.t()));  // (N, C), fp32
    Tensor a, mean1, rstd1;  // (N, C), (N, 1), (N, 1)
    std::tie(a, mean1, rstd1) = at::native_layer_norm(s1, {embed}, ln1_weight, ln1_bias, eps);
    const Tensor s2 = feed_forward(ctx, cast(a), a, fc_weight, fc_bias, out_weight, out_bias,
                                   compute);  // (N, C), float32
    Tensor out, mean2, rstd2;
    std::tie(out, mean2, rstd2) = at::native_layer_norm(s2, {embed}, ln2_weight, ln2_bias, eps);

    // Kept in saved_data, as fused_pre_ln_block keeps its own, so that backward lets go of each
    // activation once it is used.
    const std::pair<const char*, Tensor> saved[] = {{"xc", xc},
                                                    {"qkv_w", qkv_w},
                                                    {"qkv", attended.input},
                                                    {"probs", attended.probs},
                                                    {"y", y},
                                                    {"proj_w", proj_w},
                                                    {"s1", s1},
                                                    {"mean1", mean1},
                                                    {"rstd1", rstd1},
                                                    {"s2", s2},
                                                    {"mean2", mean2},
                                                    {"rstd2", rstd2},
                                                    {"slots", slots}};
    for (const auto& [name, tensor] : saved)
      ctx->saved_data[name] = tensor;
    ctx->saved_data["positions"] = batch * time;
    ctx->saved_data["fillers"] = fillers;
    save_attention(ctx, attention);
    keep_inputs(ctx, {&x, &query_weight, &key_weight, &value_weight, &query_bias, &key_bias,
                      &value_bias, &proj_weight, &proj_bias, &ln1_weight, &ln1_bias, &fc_weight,
                      &fc_bias, &out_weight, &out_bias, &ln2_weight, &ln2_bias});
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    check_first_backward(ctx, kName, kFeedForwardKept);
    const KernelScope scope;
    check_unchanged(ctx, kName, "0 = x, then the parameters in PostLnBlockParameters' order");
    const BlockAttention attention = saved_attention(ctx);
    const c10::List<Tensor> inputs = kept_inputs(ctx);
    // A frozen parameter gets no gradient computed.
    const auto wanted = [&inputs](Input input) { return inputs.get(input).requires_grad(); };
    const auto saved = [ctx](const char* name) { return take(ctx, name); };
    const torch::ScalarType param = inputs.get(kLn1Weight).scalar_type();
    variable_list result(kInputs + kNonTensorInputs);

    const Tensor& g = grads[0];  // (N, C), float32
    const int64_t embed = g.size(1);
    Tensor d_s2, d_ln2_weight, d_ln2_bias;  // (N, C): through LN2
    std::tie(d_s2, d_ln2_weight, d_ln2_bias) = at::native_layer_norm_backward(
        g, saved("s2"), {embed}, saved("mean2"), saved("rstd2"), inputs.get(kLn2Weight),
        inputs.get(kLn2Bias), {true, wanted(kLn2Weight), wanted(kLn2Bias)});
    result[kLn2Weight] = d_ln2_weight;
    result[kLn2Bias] = d_ln2_bias;

    // Feed-forward network: s2 = a + gelu(a W_fc^T + b_fc) W_out^T + b_out.
    Tensor d_a = feed_forward_backward(ctx, d_s2, {kFcWeight, kFcBias, kOutWeight, kOutBias},
                                       result, attention.compute, param, d_s2.scalar_type())
                     .add_(d_s2);  // (N, C), float32
    d_s2.reset();
    Tensor d_s1, d_ln1_weight, d_ln1_bias;  // (N, C): through LN1
    std::tie(d_s1, d_ln1_weight, d_ln1_bias) = at::native_layer_norm_backward(
        d_a, saved("s1"), {embed}, saved("mean1"), saved("rstd1"), inputs.get(kLn1Weight),
        inputs.get(kLn1Bias), {true, wanted(kLn1Weight), wanted(kLn1Bias)});
    d_a.reset();
    result[kLn1Weight] = d_ln1_weight;
    result[kLn1Bias] = d_ln1_bias;

    // Attention: s1 = x + softmax(q k^T / sqrt(D) + mask) v W_proj^T + b_proj.
    const auto [d_s1_c, d_proj_bias] =
        in_dtype_with_bias_grad(d_s1, attention.compute, wanted(kProjBias), param);  // (N, C)
    result[kProjWeight] =
        weight_grad(wanted(kProjWeight), d_s1_c, saved("y"), param, inputs.get(kProjWeight));
    result[kProjBias] = d_proj_bias;
    const Tensor slots = saved("slots");
    const Tensor d_qkv =
        from_positions(attention_backward(attention, {saved("qkv"), saved("probs")},
                                          to_positions(gemm(d_s1_c, saved("proj_w")), slots,
                                                       ctx->saved_data.at("positions").toInt())),
                       slots, ctx->saved_data.at("fillers").toInt());  // (N, 3C)
    const bool biases = wanted(kQueryBias) || wanted(kKeyBias) || wanted(kValueBias);
    const std::vector<Tensor> qkv_grads = stacked_weight_grads(
        {wanted(kQueryWeight), wanted(kKeyWeight), wanted(kValueWeight)}, d_qkv, saved("xc"), param,
        {inputs.get(kQueryWeight), inputs.get(kKeyWeight), inputs.get(kValueWeight)});
    for (size_t k = 0; k < qkv_grads.size(); ++k)
      result[kQueryWeight + k] = qkv_grads[k];
    split_qkv(bias_grad(biases, d_qkv, param), result, inputs, kQueryBias);
    const Tensor qkv_w = saved("qkv_w");
    if (wanted(kX))
      result[kX] = in_dtype(gemm(d_qkv, qkv_w), g.scalar_type()).add_(d_s1);
    return result;
  }
};

}  // namespace

torch::Tensor fused_post_ln_block(const torch::Tensor& x, const PostLnBlockParameters& parameters,
                                  const PostLnBlockShape& shape, const BlockRows& rows) {
  BB_CHECK(x.dim() == 2, "fused_post_ln_block expects x of shape (N, C), got ", x.sizes());
  BB_CHECK(rows.slots.defined() ? rows.slots.dim() == 1 && rows.fillers >= 0 &&
                                      rows.slots.size(0) + rows.fillers == x.size(0) &&
                                      rows.slots.size(0) <= rows.batch * rows.time
                                : x.size(0) == rows.batch * rows.time && rows.fillers == 0,
           "fused_post_ln_block: ", x.size(0), " rows do not fit ", rows.batch, " sequences of ",
           rows.time, rows.slots.defined() ? cat(" through ", rows.slots.sizes(), " slots") : "",
           rows.fillers != 0 ? cat(" and ", rows.fillers, " fillers") : "");
  const torch::ScalarType compute = checked_compute_dtype(x, shape.heads, kName);
  const BlockAttention attention = choose_block_attention(
      rows.mask, rows.batch, rows.time, shape.heads, x.size(1), compute, x.device());
  const torch::Tensor slots = rows.slots.defined()
                                  ? rows.slots.to(torch::kLong)
                                  : torch::empty({0}, x.options().dtype(torch::kLong));
  const PostLnBlockParameters& p = parameters;
  return FusedPostLnBlock::apply(x, p.query_weight, p.key_weight, p.value_weight, p.query_bias,
                                 p.key_bias, p.value_bias, p.proj_weight, p.proj_bias, p.ln1_weight,
                                 p.ln1_bias, p.fc_weight, p.fc_bias, p.out_weight, p.out_bias,
                                 p.ln2_weight, p.ln2_bias, attention.mask, slots, shape.heads,
                                 shape.eps, int64_t(compute), int64_t(attention.path),
                                 rows.mask.causal, rows.batch, rows.time, rows.fillers);
}

}  // namespace bigbatch::nn
