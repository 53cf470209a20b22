#include "bigbatch/models/hf_llama.h"

#include <cmath>
#include <tuple>
#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/io/hf_weights.h"
#include "bigbatch/models/hf_load.h"
#include "bigbatch/models/hf_parts.h"
#include "bigbatch/models/transformer_parts.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/embedding.h"
#include "bigbatch/nn/llama_ops.h"
#include "bigbatch/nn/precision.h"

namespace bigbatch::models {
namespace {

constexpr double kPi = 3.14159265358979323846;

/// Reads RoPE's settings from `rope` (rope_parameters, or the older rope_scaling with rope_theta
/// beside it), refusing keys and types bigbatch does not implement.
void read_rope(const nlohmann::json& rope, const std::string& where, HfLlamaConfig& config) {
  if (rope.is_null())
    return;
  BB_CHECK_INPUT(rope.is_object(), where, " must be an object, got ", rope.dump());
  std::string type = "default";
  for (const auto& [key, value] : rope.items()) {
    const auto number = [&] {
      BB_CHECK_INPUT(value.is_number(), where, ".", key, " must be a number, got ", value.dump());
      return value.get<double>();
    };
    if (key == "rope_type" || key == "type") {
      BB_CHECK_INPUT(value.is_string(), where, ".", key, " must be a string, got ", value.dump());
      type = value.get<std::string>();
    } else if (key == "rope_theta") {
      config.rope_theta(number());
    } else if (key == "factor") {
      config.rope_factor(number());
    } else if (key == "low_freq_factor") {
      config.rope_low_freq_factor(number());
    } else if (key == "high_freq_factor") {
      config.rope_high_freq_factor(number());
    } else if (key == "original_max_position_embeddings") {
      config.rope_original_max_positions(static_cast<int64_t>(number()));
    } else if (key == "partial_rotary_factor") {
      BB_CHECK_INPUT(number() == 1.0, where, ": unsupported partial_rotary_factor ", value.dump(),
                     " (bigbatch supports only 1.0)");
    } else {
      throw InputError(cat(where, ": unsupported RoPE field \"", key, "\" = ", value.dump()));
    }
  }
  if (type == "linear")
    config.rope_scaling(RopeScaling::kLinear);
  else if (type == "llama3")
    config.rope_scaling(RopeScaling::kLlama3);
  else
    BB_CHECK_INPUT(type == "default", where, ": unsupported RoPE type \"", type,
                   "\" (bigbatch supports \"default\", \"linear\" and \"llama3\")");
}

/// A positive sliding window from `value` (sliding_window's), naming `where` otherwise.
int64_t positive_window(const nlohmann::json& value, const std::string& where) {
  BB_CHECK_INPUT(value.is_number_integer() && value.get<int64_t>() > 0, where,
                 ": sliding_window must be a positive integer, got ", value.dump());
  return value.get<int64_t>();
}

/// Mistral: every layer slides when sliding_window is not null.
void read_mistral_window(io::HfConfig& c, HfLlamaConfig& config) {
  const nlohmann::json window = c.get_json("sliding_window");
  if (window.is_null())
    return;
  config.sliding_window(positive_window(window, c.origin()))
      .sliding_layers(std::vector<bool>(size_t(config.num_hidden_layers()), true));
}

/// Qwen2 and Qwen3: with use_sliding_window, the layers layer_types names "sliding_attention"
/// (without it, those from max_window_layers on) slide over sliding_window keys; without
/// use_sliding_window, sliding_window and max_window_layers are unused, as in transformers.
void read_qwen_windows(io::HfConfig& c, HfLlamaConfig& config) {
  const bool used = c.get_bool("use_sliding_window", false);
  const nlohmann::json window = c.get_json("sliding_window");
  const int64_t layers = config.num_hidden_layers();
  const int64_t first_sliding = c.get_int("max_window_layers", layers);
  const nlohmann::json layer_types = c.get_json("layer_types");
  std::vector<bool> sliding(size_t(layers), false);
  if (layer_types.is_null()) {
    for (int64_t i = first_sliding; used && i < layers; ++i)
      sliding[size_t(i)] = true;
  } else {
    sliding =
        sliding_layer_types(layer_types, layers, used, "without use_sliding_window", c.origin());
  }
  if (used)
    config.sliding_window(positive_window(window, c.origin())).sliding_layers(sliding);
}

/// RoPE of every layer: rope_parameters (transformers 5), or rope_theta with rope_scaling.
void read_shared_rope(io::HfConfig& c, HfLlamaConfig& config) {
  config.rope_theta(c.get_double("rope_theta", config.rope_theta()));
  read_rope(c.get_json("rope_scaling"), c.origin() + ": rope_scaling", config);
  read_rope(c.get_json("rope_parameters"), c.origin() + ": rope_parameters", config);
}

/// Gemma 3's RoPE: rope_parameters per layer type (transformers 5), or rope_theta with
/// rope_scaling for the full layers and rope_local_base_freq for the sliding ones.
void read_gemma3_rope(io::HfConfig& c, HfLlamaConfig& config) {
  config.rope_theta(c.get_double("rope_theta", 1000000.0));
  HfLlamaConfig local;
  local.rope_theta(c.get_double("rope_local_base_freq", 10000.0));
  read_rope(c.get_json("rope_scaling"), c.origin() + ": rope_scaling", config);
  const nlohmann::json rope = c.get_json("rope_parameters");
  if (!rope.is_null()) {
    const std::string where = c.origin() + ": rope_parameters";
    BB_CHECK_INPUT(rope.is_object(), where, " must be an object, got ", rope.dump());
    for (const auto& [type, parameters] : rope.items()) {
      BB_CHECK_INPUT(type == "full_attention" || type == "sliding_attention", where,
                     ": unsupported layer type \"", type,
                     "\" (bigbatch supports \"full_attention\" and \"sliding_attention\")");
      read_rope(parameters, cat(where, ".", type), type == "full_attention" ? config : local);
    }
  }
  BB_CHECK_INPUT(local.rope_scaling() == RopeScaling::kNone, c.origin(),
                 ": the sliding layers' RoPE must be of type \"default\" (bigbatch scales only "
                 "the full layers')");
  config.sliding_rope_theta(local.rope_theta());
}

/// Gemma 2 and 3 (`gemma3`): their layer, and their layer types: layer_types, or in configs
/// without it every sliding_window_pattern-th layer full and the others sliding (Gemma 2: every
/// second).
void read_gemma(io::HfConfig& c, HfLlamaConfig& config, bool gemma3) {
  config.norm_plus_one(true)
      .scale_embeddings(true)
      .gelu_gate(true)
      .sandwich_norms(true)
      .qk_norm(gemma3)
      .query_pre_attn_scalar(c.get_double("query_pre_attn_scalar", 256.0))
      .final_logit_softcapping(c.get_double("final_logit_softcapping", 0.0))
      .tie_word_embeddings(c.get_bool("tie_word_embeddings", true));
  // transformers' Gemma 3 attention does not apply attn_logit_softcapping; its configs say null.
  if (gemma3)
    c.require("attn_logit_softcapping", nullptr);
  else
    config.attn_logit_softcapping(c.get_double("attn_logit_softcapping", 0.0));
  BB_CHECK_INPUT(config.query_pre_attn_scalar() > 0 && config.final_logit_softcapping() >= 0 &&
                     config.attn_logit_softcapping() >= 0,
                 c.origin(),
                 ": query_pre_attn_scalar must be positive, final_logit_softcapping and "
                 "attn_logit_softcapping positive or null, got ",
                 config.query_pre_attn_scalar(), ", ", config.final_logit_softcapping(), " and ",
                 config.attn_logit_softcapping());
  c.require("hidden_activation", "gelu_pytorch_tanh");
  c.require("hidden_act", "gelu_pytorch_tanh");  // Gemma 2's configs carry both
  c.require("use_bidirectional_attention", false);
  c.ignore({"cache_implementation", "_sliding_window_pattern"});
  const int64_t layers = config.num_hidden_layers();
  const int64_t pattern = gemma3 ? c.get_int("sliding_window_pattern", 6) : 2;
  const nlohmann::json layer_types = c.get_json("layer_types");
  std::vector<bool> sliding(size_t(layers), false);
  if (layer_types.is_null()) {
    BB_CHECK_INPUT(pattern > 0, c.origin(), ": sliding_window_pattern must be positive, got ",
                   pattern);
    for (int64_t i = 0; i < layers; ++i)
      sliding[size_t(i)] = (i + 1) % pattern != 0;
  } else {
    sliding = sliding_layer_types(layer_types, layers, /*sliding_allowed=*/true, "", c.origin());
  }
  config.sliding_window(positive_window(c.get_json("sliding_window"), c.origin()))
      .sliding_layers(sliding);
  if (gemma3)
    read_gemma3_rope(c, config);
  else
    read_shared_rope(c, config);
}

nn::AdaptedLinear linear(int64_t in, int64_t out, bool bias) {
  return nn::AdaptedLinear(in, out, bias);
}

/// An RMSNorm over `width` values of the config's kind.
RmsNorm rms_norm_of(const HfLlamaConfig& config, int64_t width) {
  return RmsNorm(width, config.rms_norm_eps(), config.norm_plus_one());
}

}  // namespace

std::vector<bool> sliding_layer_types(const nlohmann::json& layer_types, int64_t layers,
                                      bool sliding_allowed, const std::string& why_not,
                                      const std::string& origin) {
  BB_CHECK_INPUT(layer_types.is_array() && int64_t(layer_types.size()) == layers, origin,
                 ": layer_types must list num_hidden_layers = ", layers, " layer types, got ",
                 layer_types.dump());
  std::vector<bool> sliding(size_t(layers), false);
  for (size_t i = 0; i < layer_types.size(); ++i) {
    const nlohmann::json& type = layer_types[i];
    BB_CHECK_INPUT(type == "full_attention" || (sliding_allowed && type == "sliding_attention"),
                   origin, ": unsupported layer_types[", i, "] ", type.dump(),
                   sliding_allowed
                       ? " (bigbatch supports \"full_attention\" and \"sliding_attention\")"
                       : cat(" (", why_not, " bigbatch supports only \"full_attention\")"));
    sliding[i] = type == "sliding_attention";
  }
  return sliding;
}

bool HfLlamaConfig::is_sliding(int64_t layer) const {
  return layer >= 0 && size_t(layer) < sliding_layers().size() && sliding_layers()[size_t(layer)];
}

int64_t HfLlamaConfig::attention_window(int64_t layer) const {
  return is_sliding(layer) ? sliding_window() : 0;
}

HfLlamaConfig read_hf_llama_config(io::HfConfig& c) {
  HfLlamaConfig config;
  config.model_type(c.model_type({"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text"}));
  const std::string& type = config.model_type();
  config.vocab_size(c.get_int("vocab_size"))
      .hidden_size(c.get_int("hidden_size"))
      .intermediate_size(c.get_int("intermediate_size"))
      .num_hidden_layers(c.get_int("num_hidden_layers"))
      .num_attention_heads(c.get_int("num_attention_heads"))
      .max_position_embeddings(c.get_int("max_position_embeddings"))
      .rms_norm_eps(c.get_double("rms_norm_eps", config.rms_norm_eps()))
      .attention_dropout(c.get_double("attention_dropout", 0.0))
      .mlp_bias(c.get_bool("mlp_bias", false))
      .tie_word_embeddings(c.get_bool("tie_word_embeddings", false));
  BB_CHECK_INPUT(config.num_attention_heads() > 0 && config.hidden_size() > 0, c.origin(),
                 ": hidden_size and num_attention_heads must be positive");
  config.num_key_value_heads(c.get_int("num_key_value_heads", config.num_attention_heads()))
      .head_dim(c.get_int("head_dim", config.hidden_size() / config.num_attention_heads()));
  if (type == "qwen2") {
    config.qkv_bias(true);
  } else {
    const bool bias = c.get_bool("attention_bias", false);
    config.qkv_bias(bias).o_bias(bias).qk_norm(type == "qwen3");
  }
  if (type == "gemma2" || type == "gemma3_text") {
    read_gemma(c, config, /*gemma3=*/type == "gemma3_text");
  } else {
    if (type == "qwen2" || type == "qwen3")
      read_qwen_windows(c, config);
    else if (type == "mistral")
      read_mistral_window(c, config);
    else
      c.require("sliding_window", nullptr);
    c.require("hidden_act", "silu");
    c.require("pretraining_tp", 1);
    read_shared_rope(c, config);
  }
  c.ignore_metadata();
  c.ignore({"initializer_range"});
  c.finish(cat("the Llama family (", type, ")"));
  BB_CHECK_INPUT(config.num_key_value_heads() > 0 &&
                     config.num_attention_heads() % config.num_key_value_heads() == 0,
                 c.origin(), ": num_key_value_heads = ", config.num_key_value_heads(),
                 " must divide num_attention_heads = ", config.num_attention_heads());
  BB_CHECK_INPUT(config.head_dim() > 0 && config.head_dim() % 2 == 0, c.origin(),
                 ": head_dim = ", config.head_dim(), " must be positive and even (RoPE)");
  return config;
}

RmsNormImpl::RmsNormImpl(int64_t width, double eps, bool plus_one)
    : eps_(eps), plus_one_(plus_one) {
  weight = register_parameter("weight", plus_one ? torch::zeros({width}) : torch::ones({width}));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
  // Gemma3RMSNorm's 1 + weight, in the weight's dtype (float32 unless the model is float64).
  return nn::rms_norm(x, plus_one_ ? weight + 1.0 : weight, eps_);
}

torch::Tensor rope_inverse_frequencies(const HfLlamaConfig& config) {
  torch::Tensor inv_freq = default_rope_inverse_frequencies(config.rope_theta(), config.head_dim());
  if (config.rope_scaling() == RopeScaling::kLinear)
    return inv_freq / config.rope_factor();
  if (config.rope_scaling() != RopeScaling::kLlama3)
    return inv_freq;
  // transformers' _compute_llama3_parameters, step by step in float32.
  const double factor = config.rope_factor();
  const double low = config.rope_low_freq_factor();
  const double high = config.rope_high_freq_factor();
  const double old_context = double(config.rope_original_max_positions());
  const double low_freq_wavelen = old_context / low;
  const double high_freq_wavelen = old_context / high;
  const torch::Tensor wavelen = 2 * kPi / inv_freq;
  torch::Tensor scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq);
  const torch::Tensor smooth = (old_context / wavelen - low) / (high - low);
  const torch::Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
  const torch::Tensor medium = (wavelen < high_freq_wavelen)
                                   .logical_not()
                                   .logical_and((wavelen > low_freq_wavelen).logical_not());
  return torch::where(medium, smoothed, scaled);
}

torch::Tensor sliding_rope_inverse_frequencies(const HfLlamaConfig& config) {
  if (config.sliding_rope_theta() <= 0)
    return rope_inverse_frequencies(config);
  HfLlamaConfig local = config;
  local.rope_theta(config.sliding_rope_theta()).rope_scaling(RopeScaling::kNone);
  return rope_inverse_frequencies(local);
}

HfLlamaAttentionImpl::HfLlamaAttentionImpl(const HfLlamaConfig& config, int64_t layer)
    : config_(config), window_(config.attention_window(layer)) {
  const int64_t hidden = config.hidden_size();
  const int64_t d = config.head_dim();
  q_proj = register_module("q_proj",
                           linear(hidden, config.num_attention_heads() * d, config.qkv_bias()));
  k_proj = register_module("k_proj",
                           linear(hidden, config.num_key_value_heads() * d, config.qkv_bias()));
  v_proj = register_module("v_proj",
                           linear(hidden, config.num_key_value_heads() * d, config.qkv_bias()));
  o_proj =
      register_module("o_proj", linear(config.num_attention_heads() * d, hidden, config.o_bias()));
  if (config.qk_norm()) {
    q_norm = register_module("q_norm", rms_norm_of(config, d));
    k_norm = register_module("k_norm", rms_norm_of(config, d));
  }
}

torch::Tensor HfLlamaAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                            const torch::Tensor& sin, const nn::AttentionMask& mask,
                                            KvCacheSlot cache) {
  const int64_t batch = x.size(0);
  const int64_t time = x.size(1);
  const int64_t heads = config_.num_attention_heads();
  const int64_t kv_heads = config_.num_key_value_heads();
  const int64_t d = config_.head_dim();
  // Keys and values stay at kv_heads: the attention serves each to heads / kv_heads queries.
  // Under CPU bf16 autocast every attention path rounds queries and keys to bf16 before its
  // first product, so the rotary embeddings round them themselves (the same values).
  const bool rounded = x.device().is_cpu() && nn::cpu_autocast_to_bf16();
  std::vector<torch::Tensor> projected =
      nn::adapted_linears(x, {q_proj.get(), k_proj.get(), v_proj.get()});  // (B, T, out) each
  if (config_.qk_norm()) {  // over each head's D values
    projected[0] = q_norm->forward(projected[0].view({batch, time, heads, d})).flatten(2);
    projected[1] = k_norm->forward(projected[1].view({batch, time, kv_heads, d})).flatten(2);
  }
  torch::Tensor q = nn::rotary_embedding(projected[0], cos, sin, heads, rounded);  // (B, H, T, D)
  // The attention scales scores by D^-1/2; Gemma's by query_pre_attn_scalar^-1/2.
  const double scalar = config_.query_pre_attn_scalar();
  if (scalar > 0 && scalar != double(d))
    q = q * std::sqrt(double(d) / scalar);
  torch::Tensor k =
      nn::rotary_embedding(projected[1], cos, sin, kv_heads, rounded);              // (B, KV, T, D)
  torch::Tensor v = projected[2].view({batch, time, kv_heads, d}).transpose(1, 2);  // (B, KV, T, D)
  if (cache.cache != nullptr) {
    // A sliding layer holds only the window - 1 keys the next token sees besides its own, so
    // after cached tokens the one query (KvCache::check_next) gets the window's keys and no more.
    std::tie(k, v) = cache.cache->extend(cache.layer, k, v,
                                         window_ > 0 ? window_ - 1 : -1);  // (B, KV, S, D) each
  }
  nn::AttentionMask windowed = mask;
  windowed.window = window_;
  const torch::Tensor y = nn::scaled_dot_product_attention(
      q, k, v, windowed, config_.attention_dropout(), is_training(),
      config_.attn_logit_softcapping());  // (B, H, T, D)
  return o_proj->forward(y.transpose(1, 2).reshape({batch, time, heads * d}));
}

HfLlamaMlpImpl::HfLlamaMlpImpl(const HfLlamaConfig& config) : gelu_gate_(config.gelu_gate()) {
  const int64_t hidden = config.hidden_size();
  const int64_t inner = config.intermediate_size();
  gate_proj = register_module("gate_proj", linear(hidden, inner, config.mlp_bias()));
  up_proj = register_module("up_proj", linear(hidden, inner, config.mlp_bias()));
  down_proj = register_module("down_proj", linear(inner, hidden, config.mlp_bias()));
}

torch::Tensor HfLlamaMlpImpl::forward(const torch::Tensor& x) {
  const std::vector<torch::Tensor> projected =
      nn::adapted_linears(x, {gate_proj.get(), up_proj.get()});  // (B, T, inner) each
  const torch::Tensor gated = gelu_gate_ ? torch::gelu(projected[0], "tanh") * projected[1]
                                         : nn::swiglu(projected[0], projected[1]);  // (B, T, inner)
  return down_proj->forward(gated);                                                 // (B, T, C)
}

HfLlamaLayerImpl::HfLlamaLayerImpl(const HfLlamaConfig& config, int64_t layer) {
  self_attn = register_module("self_attn", HfLlamaAttention(config, layer));
  mlp = register_module("mlp", HfLlamaMlp(config));
  const int64_t hidden = config.hidden_size();
  input_layernorm = register_module("input_layernorm", rms_norm_of(config, hidden));
  post_attention_layernorm =
      register_module("post_attention_layernorm", rms_norm_of(config, hidden));
  if (config.sandwich_norms()) {
    pre_feedforward_layernorm =
        register_module("pre_feedforward_layernorm", rms_norm_of(config, hidden));
    post_feedforward_layernorm =
        register_module("post_feedforward_layernorm", rms_norm_of(config, hidden));
  }
}

torch::Tensor HfLlamaLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                        const torch::Tensor& sin, const nn::AttentionMask& mask,
                                        KvCacheSlot cache) {
  const torch::Tensor attention =
      self_attn->forward(input_layernorm->forward(x), cos, sin, mask, cache);  // (B, T, C)
  if (!pre_feedforward_layernorm) {
    const torch::Tensor h = nn::residual_add(x, attention);
    return nn::residual_add(h, mlp->forward(post_attention_layernorm->forward(h)));  // (B, T, C)
  }
  const torch::Tensor h = nn::residual_add(x, post_attention_layernorm->forward(attention));
  return nn::residual_add(
      h, post_feedforward_layernorm->forward(mlp->forward(pre_feedforward_layernorm->forward(h))));
}

HfLlamaImpl::HfLlamaImpl(const HfLlamaConfig& config) : config_(config) {
  model = register_level(*this, "model");
  embed_tokens = model->register_module(
      "embed_tokens", torch::nn::Embedding(config.vocab_size(), config.hidden_size()));
  layers = model->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers(); ++i)
    layers->push_back(HfLlamaLayer(config, i));
  norm = model->register_module("norm", rms_norm_of(config, config.hidden_size()));
  if (!config.tie_word_embeddings())
    lm_head_weight = register_untied_head(*this, config.vocab_size(), config.hidden_size());
}

void HfLlamaImpl::set_checkpointing(nn::CheckpointPolicy policy) {
  nn::validate(policy);
  checkpointing_ = policy;
}

torch::Tensor HfLlamaImpl::forward(const torch::Tensor& input_ids,
                                   const torch::Tensor& attention_mask) {
  check_input_ids(input_ids, config_.model_type(), "max_position_embeddings",
                  config_.max_position_embeddings());
  return logits(input_ids, attention_mask, nullptr);
}

torch::Tensor HfLlamaImpl::forward(const torch::Tensor& input_ids, KvCache& cache) {
  check_input_ids(input_ids, config_.model_type(), "max_position_embeddings",
                  config_.max_position_embeddings());
  cache.check_next(input_ids, config_.model_type(), "max_position_embeddings",
                   config_.max_position_embeddings());
  return logits(input_ids, torch::Tensor(), &cache);
}

torch::Tensor HfLlamaImpl::logits(const torch::Tensor& input_ids,
                                  const torch::Tensor& attention_mask, KvCache* cache) {
  const int64_t past = cache != nullptr ? cache->length() : 0;
  const int64_t time = input_ids.size(1);
  // Untied, the embeddings' gradient is the rows used (nn/embedding.h); tied, the head's is
  // dense anyway.
  torch::Tensor x = lm_head_weight.defined() ? nn::embedding(embed_tokens->weight, input_ids)
                                             : embed_tokens->forward(input_ids);  // (B, T, C)
  if (config_.scale_embeddings()) {  // Gemma: sqrt(C) in the embeddings' dtype
    const torch::Tensor factor =
        torch::scalar_tensor(std::sqrt(double(config_.hidden_size())), torch::kFloat);
    x = x * factor.to(x.device(), embed_tokens->weight.scalar_type());
  }
  const auto [cos, sin] = rotary_tables(rope_inverse_frequencies(config_), past, time, x);
  const auto [sliding_cos, sliding_sin] =
      config_.sliding_rope_theta() > 0
          ? rotary_tables(sliding_rope_inverse_frequencies(config_), past, time, x)
          : std::make_pair(cos, sin);
  const nn::AttentionMask mask =
      attention_mask_of(attention_mask, input_ids, /*causal=*/true, config_.model_type(), past);
  x = run_layers(
      layers, checkpointing_, is_training(), x,
      [all = layers, config = config_, cos = cos, sin = sin, sliding_cos = sliding_cos,
       sliding_sin = sliding_sin, mask, cache](size_t i, const torch::Tensor& in) {
        const bool slides = config.is_sliding(int64_t(i));
        return all->ptr(i)->as<HfLlamaLayer>()->forward(in, slides ? sliding_cos : cos,
                                                        slides ? sliding_sin : sin, mask,
                                                        {cache, i});  // (B, T, C)
      },
      cache);
  x = norm->forward(x);
  torch::Tensor logits =
      nn::linear(x, lm_head_weight.defined() ? lm_head_weight : embed_tokens->weight);
  const double cap = config_.final_logit_softcapping();
  return cap > 0 ? torch::tanh(logits / cap) * cap : logits;  // (B, T, V)
}

HfLlama load_hf_llama(const std::string& directory) {
  io::HfConfig config = io::HfConfig::read(directory);
  HfLlama model(read_hf_llama_config(config));
  load_hf_weights(*model, io::read_hf_weights(directory), HfLoadOptions(), directory);
  return model;
}

}  // namespace bigbatch::models
