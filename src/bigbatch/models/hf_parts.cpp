#include "bigbatch/models/hf_parts.h"

#include "bigbatch/core/check.h"

namespace bigbatch::models {

std::shared_ptr<torch::nn::Module> register_level(torch::nn::Module& parent,
                                                  const std::string& name) {
  return parent.register_module(name, std::make_shared<torch::nn::Module>());
}

torch::Tensor register_untied_head(torch::nn::Module& root, int64_t vocab, int64_t hidden) {
  torch::Tensor weight =
      register_level(root, "lm_head")->register_parameter("weight", torch::empty({vocab, hidden}));
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(weight, 0.0, 0.02);
  return weight;
}

void check_input_ids(const torch::Tensor& input_ids, const std::string& model,
                     const std::string& limit_field, int64_t limit) {
  BB_CHECK_INPUT(input_ids.dim() == 2 && input_ids.scalar_type() == torch::kLong, model,
                 " expects int64 input_ids of shape (B, T), got ", input_ids.scalar_type(), " ",
                 input_ids.sizes());
  const int64_t time = input_ids.size(1);
  BB_CHECK_INPUT(time >= 1 && time <= limit, model, " input length T = ", time, " is outside [1, ",
                 limit_field, " = ", limit, "]");
}

nn::AttentionMask attention_mask_of(const torch::Tensor& attention_mask,
                                    const torch::Tensor& input_ids, bool causal,
                                    const std::string& model, int64_t past) {
  if (past > 0)
    return {};
  nn::AttentionMask mask{causal, {}};
  if (attention_mask.defined()) {
    BB_CHECK_INPUT(attention_mask.sizes() == input_ids.sizes(), model,
                   "'s attention_mask must have the shape of input_ids ", input_ids.sizes(),
                   ", got ", attention_mask.sizes());
    mask.padding = attention_mask.eq(0);  // (B, T), true at padding
  }
  return mask;
}

torch::Tensor default_rope_inverse_frequencies(double theta, int64_t dim) {
  const torch::Tensor exponents = torch::arange(0, dim, 2, torch::kFloat) / double(dim);
  return 1.0 / torch::pow(theta, exponents);  // (dim / 2)
}

std::pair<torch::Tensor, torch::Tensor> rotary_tables(const torch::Tensor& inverse_frequencies,
                                                      int64_t past, int64_t time,
                                                      const torch::Tensor& like) {
  const torch::Tensor positions = torch::arange(
      past, past + time, torch::TensorOptions().dtype(torch::kFloat).device(like.device()));
  const torch::Tensor freqs =
      positions.unsqueeze(1) * inverse_frequencies.to(like.device()).unsqueeze(0);  // (T, D/2)
  const torch::Tensor angles = torch::cat({freqs, freqs}, /*dim=*/-1);              // (T, D)
  return {angles.cos().to(like.scalar_type()), angles.sin().to(like.scalar_type())};
}

torch::Tensor run_layers(const torch::nn::ModuleList& layers, const nn::CheckpointPolicy& policy,
                         bool training, torch::Tensor x, const LayerCall& call, KvCache* cache) {
  const int64_t time = x.size(1);
  const bool may_checkpoint = training && torch::GradMode::is_enabled() && cache == nullptr;
  for (size_t i = 0; i < layers->size(); ++i) {
    if (may_checkpoint && policy.applies_to(static_cast<int64_t>(i))) {
      const std::vector<torch::Tensor> parameters = layers->ptr(i)->parameters();
      x = nn::checkpoint([call, i](const torch::Tensor& in) { return call(i, in); }, x,
                         parameters);  // (B, T, C)
    } else {
      x = call(i, x);  // (B, T, C)
    }
  }
  if (cache != nullptr)
    cache->advance(time);
  return x;
}

}  // namespace bigbatch::models
