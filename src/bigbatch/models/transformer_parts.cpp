#include "bigbatch/models/transformer_parts.h"

#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/fused_block.h"

namespace bigbatch::models {

torch::nn::LayerNorm layer_norm(int64_t width) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}));
}

torch::Tensor maybe_dropout(const torch::Tensor& x, double p, bool training) {
  return p > 0.0 ? torch::dropout(x, p, training) : x;
}

torch::Tensor multi_head_attention(const torch::Tensor& qkv, int64_t heads,
                                   const nn::AttentionMask& mask, double dropout, bool training) {
  const int64_t batch = qkv.size(0);
  const int64_t time = qkv.size(1);
  const int64_t embed = qkv.size(2) / 3;
  const int64_t head_dim = embed / heads;
  const auto split_heads = [&](const torch::Tensor& t) {  // (B, T, C) -> (B, heads, T, D), a view
    return t.view({batch, time, heads, head_dim}).transpose(1, 2);
  };
  const auto parts = qkv.chunk(3, /*dim=*/-1);  // 3 x (B, T, C)
  const torch::Tensor y = nn::scaled_dot_product_attention(
      split_heads(parts[0]), split_heads(parts[1]), split_heads(parts[2]), mask, dropout,
      training);                                           // (B, heads, T, D)
  return y.transpose(1, 2).reshape({batch, time, embed});  // (B, T, C)
}

SelfAttentionImpl::SelfAttentionImpl(const BlockOptions& options)
    : heads_(options.heads()), dropout_(options.dropout()) {
  const int64_t embed = options.embed();
  qkv = register_module("qkv", torch::nn::Linear(embed, 3 * embed));
  proj = register_module("proj", torch::nn::Linear(embed, embed));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x, const nn::AttentionMask& mask) {
  const torch::Tensor y = multi_head_attention(nn::linear(qkv, x), heads_, mask, dropout_,
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

PreLnBlockImpl::PreLnBlockImpl(const BlockOptions& options)
    : heads_(options.heads()), dropout_(options.dropout()) {
  ln1 = register_module("ln1", layer_norm(options.embed()));
  attn = register_module("attn", SelfAttention(options));
  ln2 = register_module("ln2", layer_norm(options.embed()));
  mlp = register_module("mlp", FeedForward(options));
}

torch::Tensor PreLnBlockImpl::forward(const torch::Tensor& x, const nn::AttentionMask& mask) {
  if (nn::use_fused_block(x, dropout_, is_training(), x.size(1))) {
    const nn::PreLnBlockParameters parameters{
        ln1->weight,        ln1->bias,        attn->qkv->weight, attn->qkv->bias,
        attn->proj->weight, attn->proj->bias, ln2->weight,       ln2->bias,
        mlp->fc->weight,    mlp->fc->bias,    mlp->proj->weight, mlp->proj->bias};
    return nn::fused_pre_ln_block(x, parameters, {heads_, ln1->options.eps()},
                                  mask);  // (B, T, C)
  }
  torch::Tensor h = x + attn->forward(ln1->forward(x), mask);  // (B, T, C)
  return h + mlp->forward(ln2->forward(h));                    // (B, T, C)
}

}  // namespace bigbatch::models
