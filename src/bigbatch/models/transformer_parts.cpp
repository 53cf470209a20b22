#include "bigbatch/models/transformer_parts.h"

#include <cmath>
#include <limits>

#include "bigbatch/nn/bf16_matmul.h"

namespace bigbatch::models {

torch::nn::LayerNorm layer_norm(int64_t width) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}));
}

torch::Tensor maybe_dropout(const torch::Tensor& x, double p, bool training) {
  return p > 0.0 ? torch::dropout(x, p, training) : x;
}

torch::Tensor multi_head_attention(const torch::Tensor& qkv, int64_t heads,
                                   const torch::Tensor& blocked, double dropout, bool training) {
  const int64_t batch = qkv.size(0);
  const int64_t time = qkv.size(1);
  const int64_t embed = qkv.size(2) / 3;
  const int64_t head_dim = embed / heads;
  // (B, T, C) -> (B * heads, T, head_dim): the copy a batched product needs (torch::matmul of the
  // 4-D views makes the same one).
  const auto split_heads = [&](const torch::Tensor& t) {
    return t.view({batch, time, heads, head_dim})
        .transpose(1, 2)
        .reshape({batch * heads, time, head_dim});
  };
  const auto parts = qkv.chunk(3, /*dim=*/-1);    // 3 x (B, T, C)
  const torch::Tensor q = split_heads(parts[0]);  // (B * heads, T, head_dim)
  const torch::Tensor k = split_heads(parts[1]);  // (B * heads, T, head_dim)
  const torch::Tensor v = split_heads(parts[2]);  // (B * heads, T, head_dim)
  // 0 where attending is allowed, -inf where blocked: added inside the product's kernel, with the
  // 1/sqrt(head_dim) scale, instead of a multiplication and a masked_fill over the scores (and
  // their two passes in backward). Broadcasting a (T, T) mask stays a view.
  const torch::Tensor mask = torch::zeros(blocked.sizes(), q.options())
                                 .masked_fill_(blocked, -std::numeric_limits<double>::infinity())
                                 .expand({batch, heads, time, time})
                                 .reshape({batch * heads, time, time});  // (B * heads, T, T)
  const torch::Tensor scores = nn::baddbmm(mask, q, k.transpose(1, 2),
                                           1.0 / std::sqrt(double(head_dim)));  // (B*h, T, T)
  torch::Tensor probs = torch::softmax(scores, /*dim=*/-1);                     // (B*h, T, T)
  probs = maybe_dropout(probs, dropout, training);
  const torch::Tensor y = nn::matmul(probs, v);  // (B * heads, T, head_dim)
  return y.view({batch, heads, time, head_dim})
      .transpose(1, 2)
      .reshape({batch, time, embed});  // (B, T, C)
}

SelfAttentionImpl::SelfAttentionImpl(const BlockOptions& options)
    : heads_(options.heads()), dropout_(options.dropout()) {
  const int64_t embed = options.embed();
  qkv = register_module("qkv", torch::nn::Linear(embed, 3 * embed));
  proj = register_module("proj", torch::nn::Linear(embed, embed));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& blocked) {
  const torch::Tensor y = multi_head_attention(nn::linear(qkv, x), heads_, blocked, dropout_,
                                               is_training());         // (B, T, C)
  return maybe_dropout(nn::linear(proj, y), dropout_, is_training());  // (B, T, C)
}

FeedForwardImpl::FeedForwardImpl(const BlockOptions& options) : dropout_(options.dropout()) {
  const int64_t embed = options.embed();
  fc = register_module("fc", torch::nn::Linear(embed, 4 * embed));
  proj = register_module("proj", torch::nn::Linear(4 * embed, embed));
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  const torch::Tensor h = torch::gelu(nn::linear(fc, x));              // (B, T, 4C), exact erf GELU
  return maybe_dropout(nn::linear(proj, h), dropout_, is_training());  // (B, T, C)
}

PreLnBlockImpl::PreLnBlockImpl(const BlockOptions& options) {
  ln1 = register_module("ln1", layer_norm(options.embed()));
  attn = register_module("attn", SelfAttention(options));
  ln2 = register_module("ln2", layer_norm(options.embed()));
  mlp = register_module("mlp", FeedForward(options));
}

torch::Tensor PreLnBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& blocked) {
  torch::Tensor h = x + attn->forward(ln1->forward(x), blocked);  // (B, T, C)
  return h + mlp->forward(ln2->forward(h));                       // (B, T, C)
}

}  // namespace bigbatch::models
