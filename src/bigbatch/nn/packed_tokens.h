// The real tokens of a padded batch, packed: a model computes its per-token layers (embeddings,
// projections, norms, feed-forward) on the N real tokens only and moves them into compact rows
// for attention, so padding costs no work. Exact: a real token never sees a padded one.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace bigbatch::nn {

/// Where the real tokens of a (B, T) batch lie, packed as (N, ...) and as compact rows (B, L, ...)
/// with each row's real tokens first, in their order; L is the longest row.
struct PackedTokens {
  int64_t batch = 0;    ///< B
  int64_t time = 0;     ///< T, the padded length
  int64_t longest = 0;  ///< L, the most real tokens of a row
  torch::Tensor real;   ///< (N) int64: each real token's flat index into (B*T), row by row
  /// (N) int64: each real token's position in its row, 0..T-1 (as the padded batch has it)
  torch::Tensor positions;
  torch::Tensor slots;    ///< (N) int64: each real token's flat index into the compact (B*L)
  torch::Tensor padding;  ///< (B, L) bool: true at compact slots no token fills
  torch::Tensor first;    ///< (B) int64: index into N of each row's first real token

  /// Real tokens of a (B, T, ...) tensor -> (N, ...)
  torch::Tensor pack(const torch::Tensor& x) const;
  /// (N, C) -> compact rows (B, L, C), zeros in the empty slots
  torch::Tensor to_rows(const torch::Tensor& x) const;
  /// Compact rows (B, L, C) -> (N, C), the empty slots dropped
  torch::Tensor from_rows(const torch::Tensor& rows) const;
};

/// Packs the tokens of `attention_mask` (B, T), nonzero at real tokens, any pattern of padding.
/// Throws InputError when the mask is not 2-D or a row has no real token.
PackedTokens pack_tokens(const torch::Tensor& attention_mask);

}  // namespace bigbatch::nn
