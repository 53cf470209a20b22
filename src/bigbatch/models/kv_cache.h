// The keys and values a causal LM has computed for the tokens it has seen, kept layer by layer,
// so that each token generate_ids draws costs a forward of that token alone.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace bigbatch::models {

/// Keys and values per layer of the tokens a model has been fed, for HfGpt2 and HfLlama's
/// cached forward. Fill it from empty with a whole prompt, then one token per forward.
class KvCache {
 public:
  /// Tokens held: the position of the next token fed.
  int64_t length() const { return length_; }
  /// Layer `layer`'s held keys and values followed by the new ones, keys and values
  /// (B, KV, T, D) -> (B, KV, held + T, D) each; keeps them for the next forward, or with
  /// `keep` >= 0 only their last `keep` (a sliding layer keeps those the next token sees: window
  /// - 1). held is length() for a layer that keeps all, else min(length(), keep).
  std::pair<torch::Tensor, torch::Tensor> extend(size_t layer, const torch::Tensor& keys,
                                                 const torch::Tensor& values, int64_t keep = -1);
  /// The keys layer `layer` holds (0 before its first extend).
  int64_t held(size_t layer) const;
  /// Counts the `tokens` new tokens, once every layer has extended by them.
  void advance(int64_t tokens);
  /// Drops every key and value (frees their memory); length() is 0 again.
  void clear();
  /// Throws InputError, naming `model` and `limit_field`, unless the T new tokens of input_ids
  /// (B, T) may follow what is held: T == 1 once anything is held (a prompt is fed whole, then
  /// one token at a time) and length() + T <= `limit` positions.
  void check_next(const torch::Tensor& input_ids, const std::string& model,
                  const std::string& limit_field, int64_t limit) const;

 private:
  std::vector<torch::Tensor> keys_, values_;  // per layer, (B, KV, held, D)
  int64_t length_ = 0;
};

/// Where a layer's forward keeps its keys and values: `layer` of `cache`, or nowhere (null).
struct KvCacheSlot {
  KvCache* cache = nullptr;
  size_t layer = 0;
};

}  // namespace bigbatch::models
