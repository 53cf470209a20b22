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
  const auto split_heads = [&](const torch::Tensor& t) {  // (B, T, C) -> (B, heads, T, head_dim)
    return t.view({batch, time, heads, head_dim}).transpose(1, 2);
  };
  const auto parts = qkv.chunk(3, /*dim=*/-1);    // 3 x (B, T, C)
  const torch::Tensor q = split_heads(parts[0]);  // (B, heads, T, head_dim)
  const torch::Tensor k = split_heads(parts[1]);  // (B, heads, T, head_dim)
  const torch::Tensor v = split_heads(parts[2]);  // (B, heads, T, head_dim)
  torch::Tensor scores =
      nn::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(head_dim)));  // (B, h, T, T)
  scores = scores.masked_fill(blocked, -std::numeric_limits<double>::infinity());
  torch::Tensor probs = torch::softmax(scores, /*dim=*/-1);  // (B, heads, T, T)
  probs = maybe_dropout(probs, dropout, training);
  const torch::Tensor y = nn::matmul(probs, v);                      // (B, heads, T, head_dim)
  return y.transpose(1, 2).contiguous().view({batch, time, embed});  // (B, T, C)
}

}  // namespace bigbatch::models
