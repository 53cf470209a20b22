#include "bigbatch/models/hf_gpt2.h"

#include <cmath>
#include <tuple>

#include "bigbatch/core/check.h"
#include "bigbatch/io/hf_weights.h"
#include "bigbatch/models/hf_load.h"
#include "bigbatch/models/hf_parts.h"
#include "bigbatch/models/transformer_parts.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/embedding.h"

namespace bigbatch::models {
namespace {

torch::nn::LayerNorm layer_norm(const HfGpt2Config& config) {
  return torch::nn::LayerNorm(
      torch::nn::LayerNormOptions({config.n_embd()}).eps(config.layer_norm_epsilon()));
}

/// Hugging Face's Conv1D of `in` to `out` features: a linear layer with its weight (in, out).
nn::AdaptedLinear conv1d(int64_t in, int64_t out) {
  return nn::AdaptedLinear(in, out, /*bias=*/true, nn::WeightLayout::kInOut);
}

}  // namespace

HfGpt2Config read_hf_gpt2_config(io::HfConfig& c) {
  c.model_type({"gpt2"});
  HfGpt2Config config;
  config.vocab_size(c.get_int("vocab_size"))
      .n_positions(c.get_int("n_positions"))
      .n_embd(c.get_int("n_embd"))
      .n_layer(c.get_int("n_layer"))
      .n_head(c.get_int("n_head"))
      .n_inner(c.get_int("n_inner", 0))
      .layer_norm_epsilon(c.get_double("layer_norm_epsilon", config.layer_norm_epsilon()))
      .embd_pdrop(c.get_double("embd_pdrop", config.embd_pdrop()))
      .attn_pdrop(c.get_double("attn_pdrop", config.attn_pdrop()))
      .resid_pdrop(c.get_double("resid_pdrop", config.resid_pdrop()))
      .tie_word_embeddings(c.get_bool("tie_word_embeddings", true));
  c.require("activation_function", "gelu_new");
  c.require("scale_attn_weights", true);
  c.require("scale_attn_by_inverse_layer_idx", false);
  c.require("reorder_and_upcast_attn", false);
  c.require("add_cross_attention", false);
  // Names, token ids, generation and sequence-summary settings (GPT2DoubleHeadsModel's head):
  // none changes what GPT2LMHeadModel computes.
  c.ignore_metadata();
  c.ignore({"initializer_range", "n_ctx", "summary_activation", "summary_first_dropout",
            "summary_proj_to_labels", "summary_type", "summary_use_proj", "task_specific_params",
            "loss_type"});
  c.finish("GPT-2 (GPT2LMHeadModel)");
  BB_CHECK_INPUT(config.vocab_size() > 0 && config.n_positions() > 0 && config.n_embd() > 0 &&
                     config.n_layer() > 0 && config.n_head() > 0 && config.n_inner() >= 0,
                 c.origin(),
                 ": vocab_size, n_positions, n_embd, n_layer and n_head must be "
                 "positive and n_inner >= 0");
  BB_CHECK_INPUT(config.n_embd() % config.n_head() == 0, c.origin(), ": n_embd = ", config.n_embd(),
                 " is not divisible by n_head = ", config.n_head());
  return config;
}

HfGpt2AttentionImpl::HfGpt2AttentionImpl(const HfGpt2Config& config)
    : heads_(config.n_head()),
      attn_pdrop_(config.attn_pdrop()),
      resid_pdrop_(config.resid_pdrop()) {
  c_attn = register_module("c_attn", conv1d(config.n_embd(), 3 * config.n_embd()));
  c_proj = register_module("c_proj", conv1d(config.n_embd(), config.n_embd()));
}

torch::Tensor HfGpt2AttentionImpl::forward(const torch::Tensor& x, const nn::AttentionMask& mask,
                                           KvCacheSlot cache) {
  const int64_t batch = x.size(0);
  const int64_t time = x.size(1);
  const int64_t embed = x.size(2);
  const auto parts = c_attn->forward(x).chunk(3, /*dim=*/-1);  // 3 x (B, T, C)
  const auto heads = [&](const torch::Tensor& t) {             // (B, H, T, D), a view
    return t.view({batch, time, heads_, embed / heads_}).transpose(1, 2);
  };
  torch::Tensor k = heads(parts[1]);  // (B, H, T, D)
  torch::Tensor v = heads(parts[2]);  // (B, H, T, D)
  if (cache.cache != nullptr)
    std::tie(k, v) = cache.cache->extend(cache.layer, k, v);  // (B, H, S, D) each
  const torch::Tensor y =
      nn::scaled_dot_product_attention(heads(parts[0]), k, v, mask, attn_pdrop_, is_training());
  return maybe_dropout(c_proj->forward(y.transpose(1, 2).reshape({batch, time, embed})),
                       resid_pdrop_,
                       is_training());  // (B, T, C)
}

HfGpt2MlpImpl::HfGpt2MlpImpl(const HfGpt2Config& config) : resid_pdrop_(config.resid_pdrop()) {
  const int64_t inner = config.n_inner() > 0 ? config.n_inner() : 4 * config.n_embd();
  c_fc = register_module("c_fc", conv1d(config.n_embd(), inner));
  c_proj = register_module("c_proj", conv1d(inner, config.n_embd()));
}

torch::Tensor HfGpt2MlpImpl::forward(const torch::Tensor& x) {
  const torch::Tensor h = torch::gelu(c_fc->forward(x), "tanh");  // gelu_new, (B, T, inner)
  return maybe_dropout(c_proj->forward(h), resid_pdrop_, is_training());
}

HfGpt2BlockImpl::HfGpt2BlockImpl(const HfGpt2Config& config) {
  ln_1 = register_module("ln_1", layer_norm(config));
  attn = register_module("attn", HfGpt2Attention(config));
  ln_2 = register_module("ln_2", layer_norm(config));
  mlp = register_module("mlp", HfGpt2Mlp(config));
}

torch::Tensor HfGpt2BlockImpl::forward(const torch::Tensor& x, const nn::AttentionMask& mask,
                                       KvCacheSlot cache) {
  const torch::Tensor h = x + attn->forward(ln_1->forward(x), mask, cache);  // (B, T, C)
  return h + mlp->forward(ln_2->forward(h));                                 // (B, T, C)
}

HfGpt2Impl::HfGpt2Impl(const HfGpt2Config& config) : config_(config) {
  transformer = register_level(*this, "transformer");
  wte = transformer->register_module("wte",
                                     torch::nn::Embedding(config.vocab_size(), config.n_embd()));
  wpe = transformer->register_module("wpe",
                                     torch::nn::Embedding(config.n_positions(), config.n_embd()));
  h = transformer->register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.n_layer(); ++i)
    h->push_back(HfGpt2Block(config));
  ln_f = transformer->register_module("ln_f", layer_norm(config));
  if (!config.tie_word_embeddings())
    lm_head_weight = register_untied_head(*this, config.vocab_size(), config.n_embd());
}

void HfGpt2Impl::set_checkpointing(nn::CheckpointPolicy policy) {
  nn::validate(policy);
  checkpointing_ = policy;
}

torch::Tensor HfGpt2Impl::forward(const torch::Tensor& input_ids,
                                  const torch::Tensor& attention_mask) {
  check_input_ids(input_ids, "GPT-2", "n_positions", config_.n_positions());
  return logits(input_ids, attention_mask, nullptr);
}

torch::Tensor HfGpt2Impl::forward(const torch::Tensor& input_ids, KvCache& cache) {
  check_input_ids(input_ids, "GPT-2", "n_positions", config_.n_positions());
  cache.check_next(input_ids, "GPT-2", "n_positions", config_.n_positions());
  return logits(input_ids, torch::Tensor(), &cache);
}

torch::Tensor HfGpt2Impl::logits(const torch::Tensor& input_ids,
                                 const torch::Tensor& attention_mask, KvCache* cache) {
  const int64_t past = cache != nullptr ? cache->length() : 0;
  const int64_t time = input_ids.size(1);
  const torch::Tensor positions =
      torch::arange(past, past + time,
                    torch::TensorOptions().dtype(torch::kLong).device(input_ids.device()));  // (T)
  // Untied, the token embeddings' gradient is the rows used (nn/embedding.h).
  torch::Tensor x =
      (lm_head_weight.defined() ? nn::embedding(wte->weight, input_ids) : wte->forward(input_ids)) +
      wpe->forward(positions);  // (B, T, C)
  x = maybe_dropout(x, config_.embd_pdrop(), is_training());
  const nn::AttentionMask mask =
      attention_mask_of(attention_mask, input_ids, /*causal=*/true, "GPT-2", past);
  x = run_layers(
      h, checkpointing_, is_training(), x,
      [blocks = h, mask, cache](size_t i, const torch::Tensor& in) {
        return blocks->ptr(i)->as<HfGpt2Block>()->forward(in, mask, {cache, i});  // (B, T, C)
      },
      cache);
  x = ln_f->forward(x);
  return nn::linear(x, lm_head_weight.defined() ? lm_head_weight : wte->weight);  // (B, T, V)
}

HfGpt2 load_hf_gpt2(const std::string& directory) {
  io::HfConfig config = io::HfConfig::read(directory);
  HfGpt2 model(read_hf_gpt2_config(config));
  load_hf_weights(*model, io::read_hf_weights(directory),
                  HfLoadOptions()
                      .optional_prefix("transformer.")
                      .ignored_suffixes({"attn.bias", "attn.masked_bias"}),
                  directory);
  return model;
}

}  // namespace bigbatch::models
