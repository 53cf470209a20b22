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

}  // namespace bigbatch::models
