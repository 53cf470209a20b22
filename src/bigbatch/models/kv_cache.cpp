#include "bigbatch/models/kv_cache.h"

#include <algorithm>

#include "bigbatch/core/check.h"

namespace bigbatch::models {

std::pair<torch::Tensor, torch::Tensor> KvCache::extend(size_t layer, const torch::Tensor& keys,
                                                        const torch::Tensor& values, int64_t keep) {
  if (layer >= keys_.size()) {
    keys_.resize(layer + 1);
    values_.resize(layer + 1);
  }
  torch::Tensor& held_keys = keys_[layer];
  torch::Tensor& held_values = values_[layer];
  const int64_t expected = keep >= 0 ? std::min(length_, keep) : length_;
  BB_CHECK(held(layer) == expected, "KvCache layer ", layer, " holds ", held(layer),
           " tokens, expected ", expected);
  const torch::Tensor all_keys =
      held_keys.defined() ? torch::cat({held_keys, keys}, /*dim=*/2) : keys.contiguous();
  const torch::Tensor all_values =
      held_values.defined() ? torch::cat({held_values, values}, /*dim=*/2) : values.contiguous();
  const int64_t total = all_keys.size(2);
  if (keep >= 0 && total > keep) {  // a copy, so that the dropped ones are freed
    held_keys = all_keys.narrow(2, total - keep, keep).contiguous();
    held_values = all_values.narrow(2, total - keep, keep).contiguous();
  } else {
    held_keys = all_keys;
    held_values = all_values;
  }
  return {all_keys, all_values};  // (B, KV, held + T, D) each
}

int64_t KvCache::held(size_t layer) const {
  return layer < keys_.size() && keys_[layer].defined() ? keys_[layer].size(2) : 0;
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
