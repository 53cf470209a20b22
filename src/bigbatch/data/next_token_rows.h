// The one cut of next-token samples from a stream of tokens, shared by the byte-level
// SequenceDataset and the tokenized PackedTokenDataset.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "bigbatch/core/check.h"
#include "bigbatch/data/dataset.h"

namespace bigbatch::data {

/// Samples of `context` tokens over a stream of n >= 2 tokens: (n - 2) / context + 1.
inline int64_t next_token_samples(int64_t n, int64_t context) {
  return (n - 2) / context + 1;
}

/// Sample i covers tokens [i*T, i*T + T] of `stream` (n tokens): inputs tokens[i*T ..
/// i*T + T - 1], targets tokens[i*T + 1 .. i*T + T]. Positions past the stream's end have input
/// `pad_input` and target `ignore_index`. Returns inputs (B, T) and targets (B, T), int64.
template <typename Token>
Batch next_token_batch(const Token* stream, int64_t n, const std::vector<int64_t>& indices,
                       int64_t context, int64_t pad_input, int64_t ignore_index) {
  const auto batch = static_cast<int64_t>(indices.size());
  const int64_t samples = next_token_samples(n, context);
  torch::Tensor inputs = torch::full({batch, context}, pad_input, torch::kLong);      // (B, T)
  torch::Tensor targets = torch::full({batch, context}, ignore_index, torch::kLong);  // (B, T)
  int64_t* input_rows = inputs.data_ptr<int64_t>();
  int64_t* target_rows = targets.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t i = indices[static_cast<size_t>(b)];
    BB_CHECK(i >= 0 && i < samples, "sequence index ", i, " is outside [0, ", samples, ")");
    const int64_t start = i * context;
    // Positions t with start + t + 1 < n have a target; the rest stay padding.
    const int64_t valid = std::min(context, n - 1 - start);
    for (int64_t t = 0; t < valid; ++t) {
      input_rows[b * context + t] = stream[start + t];
      target_rows[b * context + t] = stream[start + t + 1];
    }
  }
  return {inputs, targets};
}

}  // namespace bigbatch::data
