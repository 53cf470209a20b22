// The real tokens of a padded batch, packed: a model computes its per-token layers (embeddings,
// projections, norms, feed-forward) on the N real tokens only and moves them into compact rows
// for attention, so padding costs no work. Exact: a real token never sees a padded one. A few
// padding positions may follow them so that the row count takes fewer values: oneDNN builds a
// product for every new shape (docs/BENCHMARKS.md, "Packed rows in multiples of 8").
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace bigbatch::nn {

/// Where the real tokens of a (B, T) batch lie, packed as (N + F, ...) and as compact rows
/// (B, L, ...) with each row's real tokens first, in their order; L is the longest row. The F
/// fillers after the N real tokens are padding positions, packed so that the row count is a
/// multiple of pack_tokens' `row_multiple`. They go to no compact row (no attention sees them,
/// and theirs is zeros), and nothing may read their outputs, so their gradients are zero.
struct PackedTokens {
  int64_t batch = 0;    ///< B
  int64_t time = 0;     ///< T, the padded length
  int64_t longest = 0;  ///< L, the most real tokens of a row
  int64_t fillers = 0;  ///< F
  /// (N + F) int64: each packed row's flat index into (B*T), the real tokens row by row, then
  /// the fillers
  torch::Tensor real;
  /// (N + F) int64: each packed row's position in its row, 0..T-1 (as the padded batch has it)
  torch::Tensor positions;
  torch::Tensor slots;    ///< (N) int64: each real token's flat index into the compact (B*L)
  torch::Tensor padding;  ///< (B, L) bool: true at compact slots no token fills
  torch::Tensor first;    ///< (B) int64: index into N of each row's first real token

  /// Packed rows of a (B, T, ...) tensor -> (N + F, ...)
  torch::Tensor pack(const torch::Tensor& x) const;
  /// (N + F, C) -> compact rows (B, L, C), zeros in the empty slots; the fillers dropped
  torch::Tensor to_rows(const torch::Tensor& x) const;
  /// Compact rows (B, L, C) -> (N + F, C), the empty slots dropped, zeros in the fillers' rows
  torch::Tensor from_rows(const torch::Tensor& rows) const;
};

/// The first slots.size(0) rows of `rows` (>= that many, W) at the rows `slots` (int64, distinct,
/// each in [0, positions)) names of a new (positions, W) tensor, zeros in its other rows: what
/// zeros({positions, W}).index_copy_(0, slots, rows.narrow(0, 0, slots.size(0))) gives, bitwise,
/// in one pass of row copies (ATen's index_copy moves element by element). Not differentiable:
/// for the insides of autograd functions. Throws std::logic_error on a slot out of range.
torch::Tensor scatter_rows(const torch::Tensor& rows, const torch::Tensor& slots,
                           int64_t positions);

/// The row multiple the models pack with: oneDNN builds a product for every new row count (about
/// 0.5 ms each), and the real tokens of a micro-batch are a new count nearly every time
/// (docs/BENCHMARKS.md).
constexpr int64_t kPackedRowMultiple = 8;

/// Packs the tokens of `attention_mask` (B, T), nonzero at real tokens, any pattern of padding,
/// with padding positions after them up to a multiple of `row_multiple` rows where the batch has
/// that many. Throws InputError when the mask is not 2-D, a row has no real token or
/// `row_multiple` is under 1.
PackedTokens pack_tokens(const torch::Tensor& attention_mask, int64_t row_multiple = 1);

}  // namespace bigbatch::nn
