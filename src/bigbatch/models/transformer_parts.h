// Pieces the GPT and the BERT share: layer norm, dropout that draws nothing at p = 0, and
// multi-head scaled dot-product attention over a mask.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace bigbatch::models {

/// LayerNorm over the last dimension of `width` features (affine, eps 1e-5).
torch::nn::LayerNorm layer_norm(int64_t width);

/// Dropout that is a no-op (and draws no random numbers) when p == 0.
torch::Tensor maybe_dropout(const torch::Tensor& x, double p, bool training);

/// Splits qkv (B, T, 3C) into heads, attends with scores at `blocked` positions (bool,
/// broadcastable to (B, heads, T, T); true = not attended) set to -inf, applies dropout to the
/// probabilities and merges the heads: returns (B, T, C) before the output projection.
torch::Tensor multi_head_attention(const torch::Tensor& qkv, int64_t heads,
                                   const torch::Tensor& blocked, double dropout, bool training);

}  // namespace bigbatch::models
