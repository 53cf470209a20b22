// A post-LN transformer block (BERT's), a = LN1(x + attn(x)) then LN2(a + mlp(a)), as one autograd
// node whose forward and backward are written out as ATen kernel calls, as nn/fused_block does
// for the pre-LN block: one product for the separate query, key and value weights, bias adds
// inside the products, no autograd bookkeeping per operation. Its rows may be the real tokens of
// a padded batch only (nn/packed_tokens), moved into their sequences for attention alone.
#pragma once

#include <torch/torch.h>

#include "bigbatch/nn/attention.h"

namespace bigbatch::nn {

/// The parameters of one post-LN block, as Hugging Face's BertLayer holds them.
struct PostLnBlockParameters {
  torch::Tensor query_weight, key_weight, value_weight;  ///< (C, C) each
  torch::Tensor query_bias, key_bias, value_bias;        ///< (C) each
  torch::Tensor proj_weight;                             ///< (C, C): attention output dense
  torch::Tensor proj_bias;                               ///< (C)
  torch::Tensor ln1_weight, ln1_bias;                    ///< (C): the LayerNorm after attention
  torch::Tensor fc_weight;                               ///< (I, C): intermediate dense
  torch::Tensor fc_bias;                                 ///< (I)
  torch::Tensor out_weight;                              ///< (C, I): output dense
  torch::Tensor out_bias;                                ///< (C)
  torch::Tensor ln2_weight, ln2_bias;                    ///< (C): the LayerNorm at the end
};

/// The shape settings of one post-LN block.
struct PostLnBlockShape {
  int64_t heads = 1;   ///< attention heads; must divide C
  double eps = 1e-12;  ///< both LayerNorms' epsilon
};

/// Where the block's N rows sit in the sequences its attention runs over.
struct BlockRows {
  int64_t batch = 0;  ///< B sequences
  int64_t time = 0;   ///< T positions each
  /// (N) int64: each row's flat index into (B*T), all distinct; undefined when the rows are all
  /// B*T positions in order
  torch::Tensor slots;
  /// Over the (B, T) positions; every query must keep a key. Positions no row fills must be
  /// masked out as padding.
  AttentionMask mask;
  /// Rows after the slots' rows that sit nowhere (nn::PackedTokens' fillers): no attention sees
  /// them and theirs is zeros; nothing may read their outputs. Only with slots.
  int64_t fillers = 0;
};

/// The post-LN block a = LN1(x + proj(attention(x W_qkv^T + b))), LN2(a + out(gelu(a W_fc^T +
/// b))) as one autograd node, with the composite's attention (softmax(q k^T / sqrt(D) + mask) v).
/// Under CPU bf16 autocast it rounds where autocast does (products and what follows them in
/// bf16, LayerNorms and the residual sums in float32), except that x's gradient through the
/// query, key and value products is rounded once, not once per product. Gradients flow to `x`
/// and to every parameter that requires one; no second derivative, no second backward through
/// the same graph (as fused_pre_ln_block).
/// x (N, C) rows placed by `rows` -> (N, C)
torch::Tensor fused_post_ln_block(const torch::Tensor& x, const PostLnBlockParameters& parameters,
                                  const PostLnBlockShape& shape, const BlockRows& rows);

}  // namespace bigbatch::nn
