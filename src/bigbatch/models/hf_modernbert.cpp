#include "bigbatch/models/hf_modernbert.h"

#include <cmath>
#include <utility>

#include "bigbatch/core/check.h"
#include "bigbatch/core/strings.h"
#include "bigbatch/io/hf_weights.h"
#include "bigbatch/models/hf_architectures.h"
#include "bigbatch/models/hf_llama.h"
#include "bigbatch/models/hf_load.h"
#include "bigbatch/models/hf_parts.h"
#include "bigbatch/models/transformer_parts.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/embedding.h"
#include "bigbatch/nn/llama_ops.h"
#include "bigbatch/nn/precision.h"

namespace bigbatch::models {
namespace {

constexpr const char* kName = "ModernBERT";

/// Reads which layers are local: layer_types where the config has them (transformers 5), else
/// every layer but each global_attn_every_n_layers-th from the first, as transformers derives it.
void read_layer_types(io::HfConfig& c, HfModernBertConfig& config) {
  const int64_t layers = config.num_hidden_layers();
  const int64_t every = c.get_int("global_attn_every_n_layers", 3);
  const nlohmann::json types = c.get_json("layer_types");
  if (!types.is_null()) {
    config.sliding_layers(
        sliding_layer_types(types, layers, /*sliding_allowed=*/true, "", c.origin()));
    return;
  }
  BB_CHECK_INPUT(every >= 1, c.origin(), ": global_attn_every_n_layers = ", every, " must be >= 1");
  std::vector<bool> sliding;
  for (int64_t i = 0; i < layers; ++i)
    sliding.push_back(i % every != 0);
  config.sliding_layers(sliding);
}

/// The RoPE base of one layer type from rope_parameters[type], which must be default RoPE.
double rope_theta_of(const nlohmann::json& parameters, const std::string& where, double fallback) {
  if (parameters.is_null())
    return fallback;
  BB_CHECK_INPUT(parameters.is_object(), where, " must be an object, got ", parameters.dump());
  double theta = fallback;
  for (const auto& [key, value] : parameters.items()) {
    if (key == "rope_type" || key == "type") {
      BB_CHECK_INPUT(value == "default", where, ".", key, " = ", value.dump(),
                     " is not supported; ModernBERT runs default RoPE");
    } else if (key == "rope_theta") {
      BB_CHECK_INPUT(value.is_number() && value.get<double>() > 0, where,
                     ".rope_theta must be a positive number, got ", value.dump());
      theta = value.get<double>();
    } else {
      throw InputError(cat(where, ": unsupported field \"", key, "\" (", value.dump(),
                           "); ModernBERT runs default RoPE (rope_type, rope_theta)"));
    }
  }
  return theta;
}

/// RoPE's bases: rope_parameters per layer type (transformers 5), or global_rope_theta and
/// local_rope_theta.
void read_rope(io::HfConfig& c, HfModernBertConfig& config) {
  config.global_rope_theta(c.get_double("global_rope_theta", config.global_rope_theta()))
      .local_rope_theta(c.get_double("local_rope_theta", config.local_rope_theta()));
  c.require("rope_scaling", nullptr);
  const nlohmann::json rope = c.get_json("rope_parameters");
  if (rope.is_null())
    return;
  const std::string where = c.origin() + ": rope_parameters";
  BB_CHECK_INPUT(rope.is_object(), where, " must be an object, got ", rope.dump());
  for (const auto& [type, parameters] : rope.items()) {
    BB_CHECK_INPUT(type == "full_attention" || type == "sliding_attention", where,
                   " holds a layer type \"", type,
                   "\"; ModernBERT's are \"full_attention\" and \"sliding_attention\"");
  }
  config
      .global_rope_theta(rope_theta_of(rope.value("full_attention", nlohmann::json()),
                                       where + ".full_attention", config.global_rope_theta()))
      .local_rope_theta(rope_theta_of(rope.value("sliding_attention", nlohmann::json()),
                                      where + ".sliding_attention", config.local_rope_theta()));
}

BiasOptionalLayerNorm layer_norm(const HfModernBertConfig& config) {
  return BiasOptionalLayerNorm(config.hidden_size(), config.norm_eps(), config.norm_bias());
}

/// Fills `t` from a normal distribution of `std` truncated to +-cutoff * std, as
/// torch.nn.init.trunc_normal_ draws it (ModernBERT's initialisation of a fresh head).
void truncated_normal_(const torch::Tensor& t, double std, double cutoff) {
  const torch::NoGradGuard no_grad;
  const double low = 0.5 * (1.0 + std::erf(-cutoff / std::sqrt(2.0)));
  const double high = 0.5 * (1.0 + std::erf(cutoff / std::sqrt(2.0)));
  t.uniform_(2.0 * low - 1.0, 2.0 * high - 1.0).erfinv_().mul_(std * std::sqrt(2.0));
}

}  // namespace

bool HfModernBertConfig::is_sliding(int64_t layer) const {
  return layer >= 0 && size_t(layer) < sliding_layers().size() && sliding_layers()[size_t(layer)];
}

int64_t HfModernBertConfig::attention_window(int64_t layer) const {
  return is_sliding(layer) ? local_attention() / 2 + 1 : 0;
}

HfModernBertConfig read_hf_modernbert_config(io::HfConfig& c) {
  HfModernBertConfig config;
  c.model_type({"modernbert"});
  config.vocab_size(c.get_int("vocab_size"))
      .hidden_size(c.get_int("hidden_size"))
      .intermediate_size(c.get_int("intermediate_size"))
      .num_hidden_layers(c.get_int("num_hidden_layers"))
      .num_attention_heads(c.get_int("num_attention_heads"))
      .max_position_embeddings(c.get_int("max_position_embeddings", 8192))
      .norm_eps(c.get_double("norm_eps", config.norm_eps()))
      .norm_bias(c.get_bool("norm_bias", false))
      .attention_bias(c.get_bool("attention_bias", false))
      .mlp_bias(c.get_bool("mlp_bias", false))
      .classifier_bias(c.get_bool("classifier_bias", false))
      .local_attention(c.get_int("local_attention", config.local_attention()))
      .embedding_dropout(c.get_double("embedding_dropout", 0.0))
      .attention_dropout(c.get_double("attention_dropout", 0.0))
      .mlp_dropout(c.get_double("mlp_dropout", 0.0))
      .classifier_dropout(c.get_double("classifier_dropout", 0.0))
      .initializer_range(c.get_double("initializer_range", config.initializer_range()));
  BB_CHECK_INPUT(config.num_hidden_layers() >= 1, c.origin(),
                 ": num_hidden_layers = ", config.num_hidden_layers(), " must be >= 1");
  read_layer_types(c, config);
  read_rope(c, config);
  const std::string pooling = c.get_string("classifier_pooling", "cls");
  BB_CHECK_INPUT(pooling == "cls" || pooling == "mean", c.origin(), ": classifier_pooling = \"",
                 pooling, "\" is not supported; ModernBERT pools by \"cls\" or \"mean\"");
  config.classifier_pooling(pooling == "cls" ? ModernBertPooling::kCls : ModernBertPooling::kMean);
  c.require("hidden_activation", "gelu");
  c.require("classifier_activation", "gelu");
  const nlohmann::json id2label = c.get_json("id2label");
  if (id2label.is_object() && !id2label.empty())
    config.num_labels(static_cast<int64_t>(id2label.size()));
  c.require("problem_type", "single_label_classification");
  c.ignore_metadata();
  // Token ids, the masked-LM head's settings, flash-attention and compile switches, and the
  // initialisation's cutoff: none changes what the classifier computes. transformers reads
  // neither layer_norm_eps (its norms take norm_eps) nor position_embedding_type, which some
  // checkpoints carry.
  c.ignore({"cls_token_id", "sep_token_id", "label2id", "tie_word_embeddings", "decoder_bias",
            "sparse_prediction", "sparse_pred_ignore_index", "deterministic_flash_attn",
            "reference_compile", "repad_logits_with_grad", "gradient_checkpointing",
            "initializer_cutoff_factor", "layer_norm_eps", "position_embedding_type"});
  c.finish(cat(kName, " (", hf_architecture("modernbert").class_name, ")"));
  BB_CHECK_INPUT(
      config.num_attention_heads() > 0 && config.hidden_size() % config.num_attention_heads() == 0,
      c.origin(), ": hidden_size = ", config.hidden_size(),
      " is not divisible by num_attention_heads = ", config.num_attention_heads());
  BB_CHECK_INPUT(config.head_dim() % 2 == 0, c.origin(), ": the head size hidden_size / ",
                 "num_attention_heads = ", config.head_dim(), " must be even (RoPE)");
  BB_CHECK_INPUT(config.local_attention() >= 0, c.origin(),
                 ": local_attention = ", config.local_attention(), " must be >= 0");
  return config;
}

BiasOptionalLayerNormImpl::BiasOptionalLayerNormImpl(int64_t width, double eps, bool with_bias)
    : width_(width), eps_(eps) {
  weight = register_parameter("weight", torch::ones({width}));
  if (with_bias)
    bias = register_parameter("bias", torch::zeros({width}));
}

torch::Tensor BiasOptionalLayerNormImpl::forward(const torch::Tensor& x) {
  return torch::layer_norm(x, {width_}, weight, bias, eps_);
}

HfModernBertLayerImpl::HfModernBertLayerImpl(const HfModernBertConfig& config, int64_t layer)
    : config_(config), window_(config.attention_window(layer)) {
  const int64_t hidden = config.hidden_size();
  const int64_t inner = config.intermediate_size();
  if (layer > 0)
    attn_norm = register_module("attn_norm", layer_norm(config));
  auto attn = register_level(*this, "attn");
  qkv_projection =
      attn->register_module("Wqkv", nn::AdaptedLinear(hidden, 3 * hidden, config.attention_bias()));
  attention_output =
      attn->register_module("Wo", nn::AdaptedLinear(hidden, hidden, config.attention_bias()));
  mlp_norm = register_module("mlp_norm", layer_norm(config));
  auto mlp = register_level(*this, "mlp");
  mlp_input = mlp->register_module("Wi", nn::AdaptedLinear(hidden, 2 * inner, config.mlp_bias()));
  mlp_output = mlp->register_module("Wo", nn::AdaptedLinear(inner, hidden, config.mlp_bias()));
}

torch::Tensor HfModernBertLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                             const torch::Tensor& sin,
                                             const nn::AttentionMask& mask) {
  const torch::Tensor normed = attn_norm ? attn_norm->forward(x) : x;
  return after_attention(
      x, attend(qkv_projection->forward(normed), cos, sin, mask.padding));  // (B, T, C)
}

torch::Tensor HfModernBertLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                             const torch::Tensor& sin,
                                             const nn::PackedTokens& tokens) {
  const torch::Tensor normed = attn_norm ? attn_norm->forward(x) : x;
  const torch::Tensor rows = tokens.to_rows(qkv_projection->forward(normed));  // (B, L, 3C)
  // Each row's real tokens sit at their own positions: the compact rows are the padded rows cut
  // at the longest, so RoPE's positions and the window's distances are transformers'.
  return after_attention(x, tokens.from_rows(attend(rows, cos, sin, tokens.padding)));  // (N+F, C)
}

torch::Tensor HfModernBertLayerImpl::attend(const torch::Tensor& qkv, const torch::Tensor& cos,
                                            const torch::Tensor& sin,
                                            const torch::Tensor& padding) {
  const int64_t batch = qkv.size(0);
  const int64_t time = qkv.size(1);
  const int64_t hidden = config_.hidden_size();
  const int64_t heads = config_.num_attention_heads();
  // Under CPU bf16 autocast every attention path rounds queries and keys to bf16 before its
  // first product, so the rotary embeddings round them themselves (the same values).
  const bool rounded = qkv.device().is_cpu() && nn::cpu_autocast_to_bf16();
  // One split, not three narrows: its backward joins the three gradients in one pass, where each
  // narrow's would fill a zero tensor of the whole qkv and add them.
  const std::vector<torch::Tensor> parts = qkv.split(hidden, 2);  // (B, T, C) each
  const torch::Tensor q = nn::rotary_embedding(parts[0], cos, sin, heads, rounded);  // (B, H, T, D)
  const torch::Tensor k = nn::rotary_embedding(parts[1], cos, sin, heads, rounded);
  const torch::Tensor v =
      parts[2].view({batch, time, heads, config_.head_dim()}).transpose(1, 2);  // (B, H, T, D)
  const nn::AttentionMask mask{false, padding, window_};
  const torch::Tensor y =
      nn::scaled_dot_product_attention(q, k, v, mask, config_.attention_dropout(),
                                       is_training());      // (B, H, T, D)
  return y.transpose(1, 2).reshape({batch, time, hidden});  // (B, T, C)
}

torch::Tensor HfModernBertLayerImpl::after_attention(const torch::Tensor& x,
                                                     const torch::Tensor& attended) {
  const double attention_dropout = config_.attention_dropout();
  const torch::Tensor h = nn::residual_add(
      x, maybe_dropout(attention_output->forward(attended), attention_dropout, is_training()));
  // GeGLU: transformers chunks Wi's output into the input (first half) and the gate.
  const std::vector<torch::Tensor> halves =
      mlp_input->forward(mlp_norm->forward(h)).chunk(2, -1);       // (..., inner) each
  const torch::Tensor gated = torch::gelu(halves[0]) * halves[1];  // (..., inner)
  return nn::residual_add(
      h, mlp_output->forward(maybe_dropout(gated, config_.mlp_dropout(), is_training())));
}

HfModernBertImpl::HfModernBertImpl(const HfModernBertConfig& config)
    : config_(config),
      global_frequencies_(
          default_rope_inverse_frequencies(config.global_rope_theta(), config.head_dim())),
      local_frequencies_(
          default_rope_inverse_frequencies(config.local_rope_theta(), config.head_dim())) {
  const int64_t hidden = config.hidden_size();
  auto model = register_level(*this, "model");
  auto embeddings = register_level(*model, "embeddings");
  tok_embeddings = embeddings->register_module("tok_embeddings",
                                               torch::nn::Embedding(config.vocab_size(), hidden));
  embeddings_norm = embeddings->register_module("norm", layer_norm(config));
  layers = model->register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers(); ++i)
    layers->push_back(HfModernBertLayer(config, i));
  final_norm = model->register_module("final_norm", layer_norm(config));
  auto head = register_level(*this, "head");
  head_dense = head->register_module(
      "dense",
      torch::nn::Linear(torch::nn::LinearOptions(hidden, hidden).bias(config.classifier_bias())));
  head_norm = head->register_module("norm", layer_norm(config));
  classifier = register_module("classifier", torch::nn::Linear(hidden, config.num_labels()));
  // A fresh head as transformers initialises it: truncated normals at 2 standard deviations,
  // head.dense's scaled down with the depth, the classifier's by the width; zero biases.
  const double cutoff = 2.0;
  truncated_normal_(head_dense->weight,
                    config.initializer_range() / std::sqrt(2.0 * config.num_hidden_layers()),
                    cutoff);
  truncated_normal_(classifier->weight, 1.0 / std::sqrt(double(hidden)), cutoff);
  const torch::NoGradGuard no_grad;
  classifier->bias.zero_();
  if (head_dense->bias.defined())
    head_dense->bias.zero_();
}

void HfModernBertImpl::set_checkpointing(nn::CheckpointPolicy policy) {
  nn::validate(policy);
  checkpointing_ = policy;
}

torch::Tensor HfModernBertImpl::embed(const torch::Tensor& ids) {
  const torch::Tensor x = nn::embedding(tok_embeddings->weight, ids);  // (..., C)
  return maybe_dropout(embeddings_norm->forward(x), config_.embedding_dropout(), is_training());
}

std::vector<std::pair<torch::Tensor, torch::Tensor>> HfModernBertImpl::rope_tables(
    int64_t time, const torch::Tensor& x) const {
  const auto global = rotary_tables(global_frequencies_, 0, time, x);
  const auto local = rotary_tables(local_frequencies_, 0, time, x);
  std::vector<std::pair<torch::Tensor, torch::Tensor>> tables;
  for (int64_t i = 0; i < config_.num_hidden_layers(); ++i)
    tables.push_back(config_.is_sliding(i) ? local : global);
  return tables;
}

torch::Tensor HfModernBertImpl::encode(const torch::Tensor& input_ids,
                                       const torch::Tensor& attention_mask) {
  check_input_ids(input_ids, kName, "max_position_embeddings", config_.max_position_embeddings());
  const nn::AttentionMask mask = attention_mask_of(attention_mask, input_ids, false, kName);
  const torch::Tensor x = embed(input_ids);  // (B, T, C)
  const auto tables = rope_tables(input_ids.size(1), x);
  return final_norm->forward(
      run_layers(layers, checkpointing_, is_training(), x,
                 [layers = layers, tables, mask](size_t i, const torch::Tensor& in) {
                   return layers->ptr(i)->as<HfModernBertLayer>()->forward(
                       in, tables[i].first, tables[i].second, mask);  // (B, T, C)
                 }));
}

bool HfModernBertImpl::packs(const torch::Tensor& input_ids,
                             const torch::Tensor& attention_mask) const {
  if (!skip_padding_ || !attention_mask.defined() || attention_mask.sizes() != input_ids.sizes() ||
      input_ids.dim() != 2 || input_ids.size(1) < 2)
    return false;
  // Only right padding packs (each row real tokens, then padding): transformers' positions count
  // the padding before a token, which compact rows would not.
  const torch::Tensor real = attention_mask.ne(0);  // (B, T)
  const int64_t time = real.size(1);
  const bool padded = !real.all().item<bool>();
  const bool right_padded = real.select(1, 0).all().item<bool>() &&
                            !real.narrow(1, 1, time - 1)
                                 .logical_and(real.narrow(1, 0, time - 1).logical_not())
                                 .any()
                                 .item<bool>();
  return padded && right_padded;
}

torch::Tensor HfModernBertImpl::pooled_packed(const torch::Tensor& input_ids,
                                              const torch::Tensor& attention_mask) {
  check_input_ids(input_ids, kName, "max_position_embeddings", config_.max_position_embeddings());
  const nn::PackedTokens tokens = nn::pack_tokens(attention_mask, nn::kPackedRowMultiple);
  const torch::Tensor x = embed(tokens.pack(input_ids));  // (N + F, C)
  const auto tables = rope_tables(tokens.longest, x);
  const torch::Tensor h =
      run_layers(layers, checkpointing_, is_training(), x,
                 [layers = layers, tables, tokens](size_t i, const torch::Tensor& in) {
                   return layers->ptr(i)->as<HfModernBertLayer>()->forward(
                       in, tables[i].first, tables[i].second, tokens);  // (N + F, C)
                 });
  if (config_.classifier_pooling() == ModernBertPooling::kCls)
    return final_norm->forward(h.index_select(0, tokens.first));      // (B, C)
  const torch::Tensor rows = tokens.to_rows(final_norm->forward(h));  // (B, L, C), zeros at padding
  return rows.sum(1) / attention_mask.ne(0).sum(1, /*keepdim=*/true).to(rows.scalar_type());
}

torch::Tensor HfModernBertImpl::forward(const torch::Tensor& input_ids,
                                        const torch::Tensor& attention_mask) {
  torch::Tensor pooled;  // (B, C)
  if (packs(input_ids, attention_mask)) {
    pooled = pooled_packed(input_ids, attention_mask);
  } else {
    const torch::Tensor h = encode(input_ids, attention_mask);  // (B, T, C)
    if (config_.classifier_pooling() == ModernBertPooling::kCls) {
      pooled = h.select(1, 0);
    } else if (!attention_mask.defined()) {
      pooled = h.mean(1);
    } else {  // as transformers: the masked sum over the count of real tokens
      const torch::Tensor real = attention_mask.ne(0);
      pooled = (h * real.unsqueeze(-1).to(h.scalar_type())).sum(1) /
               real.sum(1, /*keepdim=*/true).to(h.scalar_type());
    }
  }
  const torch::Tensor head = head_norm->forward(torch::gelu(nn::linear(head_dense, pooled)));
  return nn::linear(classifier, maybe_dropout(head, config_.classifier_dropout(), is_training()));
}

LoadedHfModernBert load_hf_modernbert(const std::string& directory, int64_t num_labels) {
  io::HfConfig reader = io::HfConfig::read(directory);
  HfModernBertConfig config = read_hf_modernbert_config(reader);
  BB_CHECK_INPUT(num_labels >= 0, "load_hf_modernbert: num_labels = ", num_labels, " must be >= 0");
  // A classifier for another number of classes is replaced by a fresh one, as transformers'
  // ignore_mismatched_sizes does.
  std::vector<std::string> ignored;
  if (num_labels > 0 && num_labels != config.num_labels()) {
    config.num_labels(num_labels);
    ignored = {"classifier.weight", "classifier.bias"};
  }
  LoadedHfModernBert loaded;
  loaded.model = HfModernBert(config);
  // A ModernBertForMaskedLM's decoder (its weight tied to the embeddings, its bias saved) is the
  // one head a classifier drops; its prediction head `head` is the classifier's.
  HfLoadResult result = load_hf_weights(*loaded.model, io::read_hf_weights(directory),
                                        HfLoadOptions()
                                            .optional_prefix("model.")
                                            .ignored_suffixes(ignored)
                                            .fresh_prefixes({"head.", "classifier."})
                                            .unused_prefixes({"decoder."}),
                                        directory);
  loaded.fresh = std::move(result.fresh);
  loaded.unused = std::move(result.unused);
  return loaded;
}

}  // namespace bigbatch::models
