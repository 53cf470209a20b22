#include "bigbatch/nn/attention.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/core/torch_compat.h"
#include "bigbatch/nn/bf16_attention.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/precision.h"

namespace bigbatch::nn {
namespace {

std::atomic<AttentionKernel> process_choice{AttentionKernel::kAuto};

/// True where query t may not attend to key s: (T, S) for a causal mask or a window alone,
/// (B, 1, 1, S) for padding alone, (B, 1, T, S) for both; undefined when every key is attended.
torch::Tensor blocked_positions(const AttentionMask& mask, int64_t queries, int64_t keys,
                                torch::Device device) {
  torch::Tensor blocked;
  if (mask.causal || window_cuts(mask, queries)) {
    const torch::Tensor ones =
        torch::ones({queries, keys}, torch::TensorOptions().dtype(torch::kBool).device(device));
    // (T, S): the keys after t, or with a two-sided window those from t + window on
    blocked = ones.triu(/*diagonal=*/mask.causal ? 1 : mask.window);
    if (window_cuts(mask, queries))
      blocked.logical_or_(ones.tril(/*diagonal=*/-mask.window));  // and those from t - window back
  }
  if (mask.padding.defined()) {
    const torch::Tensor padding = mask.padding.view({mask.padding.size(0), 1, 1, keys});
    blocked = blocked.defined() ? blocked.logical_or(padding) : padding;  // (B, 1, T or 1, S)
    // A padded query whose window holds only padding would have no key left (NaN, which its
    // value would carry into every query's product): it attends to itself.
    if (window_cuts(mask, queries))
      blocked = blocked.logical_and(
          torch::eye(queries, keys, torch::TensorOptions().dtype(torch::kBool).device(device))
              .logical_not());
  }
  return blocked;
}

/// `t` in bf16 with its last dimension contiguous, as the bf16 attention kernels read it.
torch::Tensor kernel_operand(const torch::Tensor& t) {
  const torch::Tensor rounded = t.to(torch::kBFloat16);
  return rounded.stride(-1) == 1 ? rounded : rounded.contiguous();
}

/// The bf16 attention kernels as one autograd node: q, k and v rounded to bf16 as autocast's
/// products would round them, y in bf16, each gradient in its operand's dtype.
struct Bf16KernelAttention : torch::autograd::Function<Bf16KernelAttention> {
  // q (B, H, T, D), k and v (B, KV, S, D); padding (B, S) bool, or empty for none -> (B, H, T, D)
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& padding, bool causal) {
    const c10::impl::ExcludeDispatchKeyGuard no_autocast{c10::DispatchKey::AutocastCPU};
    const Bf16AttentionInputs in =
        inputs(kernel_operand(q), kernel_operand(k), kernel_operand(v), padding, causal);
    const torch::Tensor y = torch::empty(q.sizes(), q.options().dtype(torch::kBFloat16));
    const torch::Tensor probs = bf16_attention_forward(in, y);  // (B, H, T, S)
    ctx->save_for_backward({in.q, in.k, in.v, probs, padding});
    ctx->saved_data["causal"] = causal;
    ctx->saved_data["dtypes"] = std::vector<int64_t>{
        int64_t(q.scalar_type()), int64_t(k.scalar_type()), int64_t(v.scalar_type())};
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    BB_CHECK(!torch::GradMode::is_enabled(),
             "the bf16 attention kernels have no second derivative (backward with create_graph); "
             "set model.attention = \"fused\" or run outside bf16 autocast");
    const c10::impl::ExcludeDispatchKeyGuard no_autocast{c10::DispatchKey::AutocastCPU};
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const Bf16AttentionInputs in =
        inputs(saved[0], saved[1], saved[2], saved[4], ctx->saved_data["causal"].toBool());
    const Bf16AttentionGradients gradients{torch::empty_like(in.q), torch::empty_like(in.k),
                                           torch::empty_like(in.v)};
    bf16_attention_backward(in, saved[3], kernel_operand(grads[0]), gradients);
    const std::vector<int64_t> dtypes = ctx->saved_data["dtypes"].toIntVector();
    return {gradients.dq.to(torch::ScalarType(dtypes[0])),
            gradients.dk.to(torch::ScalarType(dtypes[1])),
            gradients.dv.to(torch::ScalarType(dtypes[2])), torch::Tensor(), torch::Tensor()};
  }

  static Bf16AttentionInputs inputs(const torch::Tensor& q, const torch::Tensor& k,
                                    const torch::Tensor& v, const torch::Tensor& padding,
                                    bool causal) {
    return {q,
            k,
            v,
            {causal, padding.numel() == 0 ? torch::Tensor() : padding},
            1.0 / std::sqrt(double(q.size(3)))};
  }
};

/// Whether the composite attention of these operands runs on the bf16 attention kernels: CPU
/// bf16 autocast on a CPU that has them, an even head dimension, float32 or bf16 operands, no
/// dropout, and no sliding window that blocks keys (the kernels mask causally and padding only).
bool on_bf16_kernels(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const AttentionMask& mask, double dropout, bool training) {
  if (!q.device().is_cpu() || !cpu_autocast_to_bf16() || !bf16_attention_available() ||
      window_cuts(mask, q.size(2)))
    return false;
  for (const torch::Tensor* t : {&q, &k, &v})
    if (t->scalar_type() != torch::kFloat && t->scalar_type() != torch::kBFloat16)
      return false;
  return q.size(3) % 2 == 0 && (dropout == 0.0 || !training);
}

torch::Tensor composite_attention(const torch::Tensor& q, const torch::Tensor& k,
                                  const torch::Tensor& v, const AttentionMask& attention_mask,
                                  double dropout, bool training, double softcap) {
  if (softcap == 0.0 && on_bf16_kernels(q, k, v, attention_mask, dropout, training)) {
    const torch::Tensor padding =
        attention_mask.padding.defined()
            ? attention_mask.padding.to(torch::kBool)
            : torch::empty({0}, q.options().dtype(torch::kBool));  // 1.13 takes no undefined
    return Bf16KernelAttention::apply(q, k, v, padding, attention_mask.causal);
  }
  const int64_t batch = q.size(0);
  const int64_t heads = q.size(1);
  const int64_t kv_heads = k.size(1);
  const int64_t groups = heads / kv_heads;  // query heads per key head
  const int64_t queries = q.size(2);
  const int64_t keys = k.size(2);
  const int64_t head_dim = q.size(3);
  // The copies a batched product needs (torch::matmul of the 4-D tensors makes the same ones).
  // The queries of the heads that share a key head are stacked (G*T rows of one product), so
  // grouped keys and values are not repeated per query head, nor their gradients summed back.
  const torch::Tensor q3 =
      q.reshape({batch * kv_heads, groups * queries, head_dim});           // (B*KV, G*T, D)
  const torch::Tensor k3 = k.reshape({batch * kv_heads, keys, head_dim});  // (B*KV, S, D)
  const torch::Tensor v3 = v.reshape({batch * kv_heads, keys, head_dim});  // (B*KV, S, D)
  const torch::Tensor mask =
      additive_attention_mask(attention_mask, batch, kv_heads, queries, keys, q.options(), groups);
  const double scale = 1.0 / std::sqrt(double(head_dim));
  torch::Tensor scores;  // (B*KV, G*T, S)
  if (softcap > 0.0) {   // capped before the mask: transformers' eager Gemma 2 attention
    const torch::Tensor raw = nn::baddbmm(torch::zeros({1, 1, 1}, q.options()).expand(mask.sizes()),
                                          q3, k3.transpose(1, 2), scale);
    scores = torch::tanh(raw / softcap) * softcap + mask;
  } else {
    scores = nn::baddbmm(mask, q3, k3.transpose(1, 2), scale);
  }
  torch::Tensor probs = torch::softmax(scores, /*dim=*/-1);  // (B*KV, G*T, S)
  if (dropout > 0.0)
    probs = torch::dropout(probs, dropout, training);
  return nn::matmul(probs, v3).view({batch, heads, queries, head_dim});  // (B, H, T, D)
}

torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const AttentionMask& mask, double dropout,
                              bool training) {
  const double p = training ? dropout : 0.0;
  const int64_t groups = q.size(1) / k.size(1);
  const torch::Tensor keys = groups > 1 ? k.repeat_interleave(groups, /*dim=*/1) : k;
  const torch::Tensor values = groups > 1 ? v.repeat_interleave(groups, /*dim=*/1) : v;
  if (!mask.padding.defined() && !window_cuts(mask, q.size(2)))
    return compat::fused_attention(q, keys, values, torch::Tensor(), p, mask.causal);
  const torch::Tensor allowed =
      blocked_positions(mask, q.size(2), k.size(2), q.device()).logical_not();
  return compat::fused_attention(q, keys, values, allowed, p, /*causal=*/false);
}

}  // namespace

bool window_cuts(const AttentionMask& mask, int64_t queries) {
  return mask.window > 0 && queries > mask.window;
}

torch::Tensor additive_attention_mask(const AttentionMask& mask, int64_t batch, int64_t heads,
                                      int64_t queries, int64_t keys,
                                      const torch::TensorOptions& options, int64_t groups) {
  // Added inside the scores' product kernel, with the 1/sqrt(D) scale, instead of a
  // multiplication and a masked_fill over the scores (and their two passes in backward).
  // Broadcasting a (T, S) mask, or a (G*T, S) one for grouped queries, stays a view.
  const int64_t rows = groups * queries;
  const torch::Tensor blocked = blocked_positions(mask, queries, keys, options.device());
  if (!blocked.defined())
    return torch::zeros({1, 1, 1}, options).expand({batch * heads, rows, keys});
  torch::Tensor additive = torch::zeros(blocked.sizes(), options)
                               .masked_fill_(blocked, -std::numeric_limits<double>::infinity());
  if (groups > 1 && additive.size(-2) > 1) {  // (T, S) -> (G*T, S); (B, 1, T, S) -> (B, 1, G*T, S)
    std::vector<int64_t> repeats(size_t(additive.dim()), 1);
    repeats[repeats.size() - 2] = groups;
    additive = additive.repeat(repeats);
  }
  return additive.expand({batch, heads, rows, keys}).reshape({batch * heads, rows, keys});
}

AttentionKernel parse_attention_kernel(const std::string& text, const std::string& field) {
  if (text == "auto")
    return AttentionKernel::kAuto;
  if (text == "fused")
    return AttentionKernel::kFused;
  if (text == "composite")
    return AttentionKernel::kComposite;
  throw InputError(cat(field, " must be \"auto\", \"fused\" or \"composite\", got \"", text, "\""));
}

std::string to_string(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kAuto:
      return "auto";
    case AttentionKernel::kFused:
      return "fused";
    case AttentionKernel::kComposite:
      return "composite";
  }
  return "?";
}

bool fused_attention_available() {
  return compat::kHasFusedAttention;
}

void set_attention_kernel(AttentionKernel kernel, const std::string& field) {
  BB_CHECK_INPUT(kernel != AttentionKernel::kFused || fused_attention_available(), field,
                 " = \"fused\" needs LibTorch 2.0 or later; this is ", TORCH_VERSION,
                 ", which has only the composite attention");
  process_choice.store(kernel);
}

AttentionKernel attention_kernel() {
  return process_choice.load();
}

AttentionKernel resolve_attention_kernel(AttentionKernel kernel, const AttentionSite& site) {
  if (kernel != AttentionKernel::kAuto)
    return kernel;
  const int64_t min_keys =
      !site.cpu ? 0 : (site.bf16_autocast ? kFusedCpuBf16MinKeys : kFusedCpuMinKeys);
  return fused_attention_available() && site.keys >= min_keys ? AttentionKernel::kFused
                                                              : AttentionKernel::kComposite;
}

torch::Tensor scaled_dot_product_attention(const torch::Tensor& q, const torch::Tensor& k,
                                           const torch::Tensor& v, const AttentionMask& mask,
                                           double dropout, bool training, double softcap) {
  BB_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
           "scaled_dot_product_attention expects (B, H, T, D) queries, keys and values, got ",
           q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  BB_CHECK(k.size(1) == v.size(1) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
           "scaled_dot_product_attention expects as many key as value heads, dividing the ",
           q.size(1), " query heads, got ", k.size(1), " and ", v.size(1));
  BB_CHECK(!mask.causal || q.size(2) == k.size(2),
           "a causal mask needs as many queries as keys, got ", q.size(2), " and ", k.size(2));
  BB_CHECK(softcap >= 0.0, "the attention's softcap must be >= 0 (0: none), got ", softcap);
  const AttentionSite site{q.device().is_cpu(), cpu_autocast_to_bf16(), k.size(2)};
  if (softcap == 0.0 &&
      resolve_attention_kernel(attention_kernel(), site) == AttentionKernel::kFused)
    return fused_attention(q, k, v, mask, dropout, training);
  return composite_attention(q, k, v, mask, dropout, training, softcap);
}

}  // namespace bigbatch::nn
