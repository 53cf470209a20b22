// Pieces the GPT and the BERT share: layer norm, dropout that draws nothing at p = 0,
// multi-head scaled dot-product attention over a mask, and the pre-LN transformer block.
#pragma once

#include <torch/torch.h>

#include <cstdint>

#include "bigbatch/nn/attention.h"

namespace bigbatch::models {

/// LayerNorm over the last dimension of `width` features (affine, eps 1e-5).
torch::nn::LayerNorm layer_norm(int64_t width);

/// Dropout that is a no-op (and draws no random numbers) when p == 0.
torch::Tensor maybe_dropout(const torch::Tensor& x, double p, bool training);

/// Splits qkv (B, T, 3C) into heads, attends over `mask` (nn::scaled_dot_product_attention),
/// with dropout on the probabilities, and merges the heads: returns (B, T, C) before the output
/// projection.
torch::Tensor multi_head_attention(const torch::Tensor& qkv, int64_t heads,
                                   const nn::AttentionMask& mask, double dropout, bool training);

/// Sizes of a pre-LN transformer block.
struct BlockOptions {
  /// Width of the residual stream.
  TORCH_ARG(int64_t, embed) = 128;
  /// Attention heads; must divide `embed`.
  TORCH_ARG(int64_t, heads) = 4;
  /// Dropout probability on attention probabilities and residual outputs.
  TORCH_ARG(double, dropout) = 0.0;
};

/// Multi-head self-attention over a mask. Submodules: `qkv` Linear(embed, 3*embed), `proj`
/// Linear(embed, embed).
class SelfAttentionImpl : public torch::nn::Module {
 public:
  explicit SelfAttentionImpl(const BlockOptions& options = {});
  /// x (B, T, embed), mask over the T keys -> (B, T, embed). Every query needs at least one key
  /// it may attend to.
  torch::Tensor forward(const torch::Tensor& x, const nn::AttentionMask& mask);

  /// Joint query/key/value projection, Linear(embed, 3*embed).
  torch::nn::Linear qkv{nullptr};
  /// Output (residual) projection, Linear(embed, embed).
  torch::nn::Linear proj{nullptr};

 private:
  int64_t heads_;
  double dropout_;
};
/// Module holder for SelfAttentionImpl.
TORCH_MODULE(SelfAttention);

/// The position-wise feed-forward network: fc -> GELU (exact, erf) -> proj -> dropout.
class FeedForwardImpl : public torch::nn::Module {
 public:
  explicit FeedForwardImpl(const BlockOptions& options = {});
  /// x (B, T, embed) -> (B, T, embed).
  torch::Tensor forward(const torch::Tensor& x);

  /// Linear(embed, 4*embed).
  torch::nn::Linear fc{nullptr};
  /// Output (residual) projection, Linear(4*embed, embed).
  torch::nn::Linear proj{nullptr};

 private:
  double dropout_;
};
/// Module holder for FeedForwardImpl.
TORCH_MODULE(FeedForward);

/// One pre-LN transformer block: x = x + attn(ln1(x), blocked); x = x + mlp(ln2(x)). The GPT's
/// (a causal mask) and the BERT's (a padding mask). A module of its own so that activation
/// checkpointing can wrap a single block. Where nn::use_fused_block() says so it runs as one
/// autograd node (nn::fused_pre_ln_block), with the same parameters and math.
/// Submodules: `ln1`, `attn` (`qkv`, `proj`), `ln2`, `mlp` (`fc`, `proj`).
class PreLnBlockImpl : public torch::nn::Module {
 public:
  explicit PreLnBlockImpl(const BlockOptions& options = {});
  /// x (B, T, embed), mask as for SelfAttention -> (B, T, embed).
  torch::Tensor forward(const torch::Tensor& x, const nn::AttentionMask& mask);

  /// LayerNorm(embed) before attention.
  torch::nn::LayerNorm ln1{nullptr};
  /// Self-attention.
  SelfAttention attn{nullptr};
  /// LayerNorm(embed) before the feed-forward network.
  torch::nn::LayerNorm ln2{nullptr};
  /// Feed-forward network.
  FeedForward mlp{nullptr};

 private:
  int64_t heads_;
  double dropout_;
};
/// Module holder for PreLnBlockImpl.
TORCH_MODULE(PreLnBlock);

}  // namespace bigbatch::models
