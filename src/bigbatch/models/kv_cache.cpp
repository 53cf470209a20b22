#include "bigbatch/models/kv_cache.h"

#include "bigbatch/core/check.h"

namespace bigbatch::models {

std::pair<torch::Tensor, torch::Tensor> KvCache::extend(size_t layer, const torch::Tensor& keys,
                                                        const torch::Tensor& values) {
  if (layer >= keys_.size()) {
    keys_.resize(layer + 1);
    values_.resize(layer + 1);
  }
  torch::Tensor& held_keys = keys_[layer];
  torch::Tensor& held_values = values_[layer];
  BB_CHECK(!held_keys.defined() || held_keys.size(2) == length_, "KvCache layer ", layer, " holds ",
           held_keys.size(2), " tokens, expected ", length_);
  held_keys = held_keys.defined() ? torch::cat({held_keys, keys}, /*dim=*/2) : keys.contiguous();
  held_values =
      held_values.defined() ? torch::cat({held_values, values}, /*dim=*/2) : values.contiguous();
  return {held_keys, held_values};  // (B, KV, length + T, D) each
}

void KvCache::advance(int64_t tokens) {
  length_ += tokens;
}

void KvCache::clear() {
  keys_.clear();
  values_.clear();
  length_ = 0;
}

void KvCache::check_next(const torch::Tensor& input_ids, const std::string& model,
                         const std::string& limit_field, int64_t limit) const {
  BB_CHECK_INPUT(input_ids.dim() == 2 && input_ids.size(1) >= 1, model,
                 ": a cached forward expects input_ids (B, T) with T >= 1, got ",
                 input_ids.sizes());
  const int64_t tokens = input_ids.size(1);
  BB_CHECK_INPUT(length_ == 0 || tokens == 1, model, ": the KV cache holds ", length_,
                 " tokens, so a forward may add only one more, got ", tokens,
                 " (feed a prompt whole into an empty cache, then one token at a time)");
  BB_CHECK_INPUT(length_ + tokens <= limit, model, ": ", length_, " cached + ", tokens,
                 " new tokens exceed ", limit_field, " = ", limit);
}

}  // namespace bigbatch::models
