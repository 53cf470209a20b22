#include "bigbatch/models/hf_bert.h"

#include <algorithm>

#include "bigbatch/core/check.h"
#include "bigbatch/core/strings.h"
#include "bigbatch/io/hf_weights.h"
#include "bigbatch/models/hf_architectures.h"
#include "bigbatch/models/hf_load.h"
#include "bigbatch/models/hf_parts.h"
#include "bigbatch/models/transformer_parts.h"
#include "bigbatch/nn/bf16_matmul.h"
#include "bigbatch/nn/embedding.h"
#include "bigbatch/nn/fused_block.h"

namespace bigbatch::models {
namespace {

torch::nn::LayerNorm layer_norm(const HfBertConfig& config) {
  return torch::nn::LayerNorm(
      torch::nn::LayerNormOptions({config.hidden_size()}).eps(config.layer_norm_eps()));
}

/// The name of the model in messages: "BERT", "RoBERTa", "XLM-RoBERTa", "DistilBERT" or
/// "ELECTRA".
std::string display_name(const HfBertConfig& config) {
  return config.model_type() == "bert"         ? "BERT"
         : config.model_type() == "roberta"    ? "RoBERTa"
         : config.model_type() == "distilbert" ? "DistilBERT"
         : config.model_type() == "electra"    ? "ELECTRA"
                                               : "XLM-RoBERTa";
}

/// The module every encoder name starts with in the classifier's checkpoint: "bert", "roberta"
/// (XLM-RoBERTa's too), "distilbert" or "electra".
std::string root_name(const HfBertConfig& config) {
  return config.is_roberta()      ? "roberta"
         : config.is_distilbert() ? "distilbert"
         : config.is_electra()    ? "electra"
                                  : "bert";
}

/// Whether the head is a `classifier` module of `dense` and `out_proj` (RoBERTa's, ELECTRA's).
bool has_head_module(const HfBertConfig& config) {
  return config.is_roberta() || config.is_electra();
}

/// The fields of BERT's and RoBERTa's config.json.
void read_bert_fields(io::HfConfig& c, HfBertConfig& config) {
  config.vocab_size(c.get_int("vocab_size"))
      .hidden_size(c.get_int("hidden_size"))
      .num_hidden_layers(c.get_int("num_hidden_layers"))
      .num_attention_heads(c.get_int("num_attention_heads"))
      .intermediate_size(c.get_int("intermediate_size"))
      .max_position_embeddings(c.get_int("max_position_embeddings"))
      .type_vocab_size(c.get_int("type_vocab_size", 2))
      .layer_norm_eps(c.get_double("layer_norm_eps", config.layer_norm_eps()))
      .hidden_dropout_prob(c.get_double("hidden_dropout_prob", config.hidden_dropout_prob()))
      .attention_probs_dropout_prob(
          c.get_double("attention_probs_dropout_prob", config.attention_probs_dropout_prob()))
      .initializer_range(c.get_double("initializer_range", config.initializer_range()));
  config.classifier_dropout(c.get_double("classifier_dropout", config.hidden_dropout_prob()));
  c.require("hidden_act", "gelu");
  c.require("position_embedding_type", "absolute");
  c.require("is_decoder", false);
  c.require("add_cross_attention", false);
  c.ignore({"gradient_checkpointing", "classifier_activation"});
  if (config.is_electra()) {
    config.embedding_size(c.get_int("embedding_size", config.hidden_size()));
    // The sequence summary of ELECTRA's multiple-choice head, which a classifier has not.
    c.ignore({"summary_type", "summary_use_proj", "summary_activation", "summary_last_dropout"});
  }
}

/// The fields of DistilBERT's config.json, under BERT's names (defaults: DistilBertConfig's).
void read_distilbert_fields(io::HfConfig& c, HfBertConfig& config) {
  config.vocab_size(c.get_int("vocab_size"))
      .hidden_size(c.get_int("dim"))
      .num_hidden_layers(c.get_int("n_layers"))
      .num_attention_heads(c.get_int("n_heads"))
      .intermediate_size(c.get_int("hidden_dim"))
      .max_position_embeddings(c.get_int("max_position_embeddings"))
      .type_vocab_size(0)
      .layer_norm_eps(1e-12)  // fixed in DistilBERT's code
      .hidden_dropout_prob(c.get_double("dropout", 0.1))
      .attention_probs_dropout_prob(c.get_double("attention_dropout", 0.1))
      .classifier_dropout(c.get_double("seq_classif_dropout", 0.2))
      .initializer_range(c.get_double("initializer_range", config.initializer_range()));
  c.require("activation", "gelu");
  c.require("sinusoidal_pos_embds", false);
  // The question-answering head's dropout; the masked-LM head's tying.
  c.ignore({"qa_dropout", "tie_weights_"});
}

}  // namespace

int64_t HfBertConfig::max_length() const {
  return is_roberta() ? max_position_embeddings() - pad_token_id() - 1 : max_position_embeddings();
}

HfBertConfig read_hf_bert_config(io::HfConfig& c) {
  HfBertConfig config;
  config.model_type(c.model_type({"bert", "roberta", "xlm-roberta", "distilbert", "electra"}));
  if (config.is_roberta())
    config.pad_token_id(c.get_int("pad_token_id"));
  if (config.is_distilbert())
    read_distilbert_fields(c, config);
  else
    read_bert_fields(c, config);
  const nlohmann::json id2label = c.get_json("id2label");
  if (id2label.is_object() && !id2label.empty())
    config.num_labels(static_cast<int64_t>(id2label.size()));
  c.require("problem_type", "single_label_classification");
  c.require("pruned_heads", nlohmann::json::object());
  // Names, token ids, label names and switches of what a forward returns, which older
  // fine-tuned checkpoints carry: none changes what is computed.
  c.ignore_metadata();
  c.ignore({"label2id", "tie_word_embeddings", "finetuning_task", "output_past",
            "output_attentions", "output_hidden_states", "return_dict", "torchscript",
            "use_bfloat16"});
  c.finish(cat(display_name(config), " (", hf_architecture(config.model_type()).class_name, ")"));
  BB_CHECK_INPUT(
      config.num_attention_heads() > 0 && config.hidden_size() % config.num_attention_heads() == 0,
      c.origin(), ": hidden_size = ", config.hidden_size(),
      " is not divisible by num_attention_heads = ", config.num_attention_heads());
  BB_CHECK_INPUT(!config.is_electra() || config.embedding_size() >= 1, c.origin(),
                 ": embedding_size = ", config.embedding_size(), " must be >= 1");
  BB_CHECK_INPUT(!config.is_roberta() ||
                     (config.pad_token_id() >= 0 && config.pad_token_id() < config.vocab_size() &&
                      config.max_length() >= 1),
                 c.origin(), ": pad_token_id = ", config.pad_token_id(),
                 " must be a token id (vocab_size ", config.vocab_size(),
                 ") below max_position_embeddings - 1 = ", config.max_position_embeddings() - 1,
                 ": RoBERTa's positions start after it");
  return config;
}

HfBertLayerImpl::HfBertLayerImpl(const HfBertConfig& config) : config_(config) {
  const int64_t hidden = config.hidden_size();
  if (config.is_distilbert()) {
    auto attention = register_level(*this, "attention");
    query = attention->register_module("q_lin", nn::AdaptedLinear(hidden, hidden, true));
    key = attention->register_module("k_lin", nn::AdaptedLinear(hidden, hidden, true));
    value = attention->register_module("v_lin", nn::AdaptedLinear(hidden, hidden, true));
    attention_dense =
        attention->register_module("out_lin", nn::AdaptedLinear(hidden, hidden, true));
    attention_norm = register_module("sa_layer_norm", layer_norm(config));
    auto ffn = register_level(*this, "ffn");
    intermediate_dense =
        ffn->register_module("lin1", nn::AdaptedLinear(hidden, config.intermediate_size(), true));
    output_dense =
        ffn->register_module("lin2", nn::AdaptedLinear(config.intermediate_size(), hidden, true));
    output_norm = register_module("output_layer_norm", layer_norm(config));
    return;
  }
  auto attention = register_level(*this, "attention");
  auto self = register_level(*attention, "self");
  query = self->register_module("query", nn::AdaptedLinear(hidden, hidden, true));
  key = self->register_module("key", nn::AdaptedLinear(hidden, hidden, true));
  value = self->register_module("value", nn::AdaptedLinear(hidden, hidden, true));
  auto attention_output = register_level(*attention, "output");
  attention_dense =
      attention_output->register_module("dense", nn::AdaptedLinear(hidden, hidden, true));
  attention_norm = attention_output->register_module("LayerNorm", layer_norm(config));
  intermediate_dense =
      register_level(*this, "intermediate")
          ->register_module("dense", nn::AdaptedLinear(hidden, config.intermediate_size(), true));
  auto output = register_level(*this, "output");
  output_dense =
      output->register_module("dense", nn::AdaptedLinear(config.intermediate_size(), hidden, true));
  output_norm = output->register_module("LayerNorm", layer_norm(config));
}

torch::Tensor HfBertLayerImpl::forward(const torch::Tensor& x, const nn::AttentionMask& mask) {
  const int64_t batch = x.size(0);
  const int64_t time = x.size(1);
  const int64_t hidden = x.size(2);
  if (runs_fused(x, time))
    return fused_forward(x.reshape({batch * time, hidden}), {batch, time, {}, mask})
        .view(x.sizes());  // (B, T, C)
  const int64_t heads = config_.num_attention_heads();
  const auto split = [&](const torch::Tensor& t) {  // (B, T, C) -> (B, H, T, D)
    return t.view({batch, time, heads, hidden / heads}).transpose(1, 2);
  };
  const torch::Tensor y = nn::scaled_dot_product_attention(
      split(query->forward(x)), split(key->forward(x)), split(value->forward(x)), mask,
      config_.attention_probs_dropout_prob(), is_training());  // (B, H, T, D)
  return after_attention(x, attention_dense->forward(y.transpose(1, 2).reshape(x.sizes())));
}

torch::Tensor HfBertLayerImpl::forward(const torch::Tensor& x, const nn::PackedTokens& tokens,
                                       bool first_only) {
  if (!first_only && runs_fused(x, tokens.longest))
    return fused_forward(x, {tokens.batch,
                             tokens.longest,
                             tokens.slots,
                             {false, tokens.padding},
                             tokens.fillers});  // (N + F, C)
  const int64_t hidden = x.size(1);
  const int64_t heads = config_.num_attention_heads();
  const auto heads_of = [&](const torch::Tensor& rows) {  // (B, length, C) -> (B, H, length, D)
    return rows.view({tokens.batch, rows.size(1), heads, hidden / heads}).transpose(1, 2);
  };
  const torch::Tensor queried = first_only ? x.index_select(0, tokens.first) : x;  // (B or N, C)
  const torch::Tensor q = first_only ? query->forward(queried).unsqueeze(1)        // (B, 1, C)
                                     : tokens.to_rows(query->forward(x));          // (B, L, C)
  const int64_t queries = q.size(1);
  const torch::Tensor y = nn::scaled_dot_product_attention(
      heads_of(q), heads_of(tokens.to_rows(key->forward(x))),
      heads_of(tokens.to_rows(value->forward(x))), nn::AttentionMask{false, tokens.padding},
      config_.attention_probs_dropout_prob(), is_training());  // (B, H, queries, D)
  const torch::Tensor merged =
      y.transpose(1, 2).reshape({tokens.batch, queries, hidden});  // (B, queries, C)
  const torch::Tensor attended =
      first_only ? merged.squeeze(1) : tokens.from_rows(merged);  // (B or N, C)
  return after_attention(queried, attention_dense->forward(attended));
}

torch::Tensor HfBertLayerImpl::after_attention(const torch::Tensor& x,
                                               const torch::Tensor& attended) {
  // DistilBERT drops out of the feed-forward output only.
  const double attended_dropout = config_.is_distilbert() ? 0.0 : config_.hidden_dropout_prob();
  const torch::Tensor a = attention_norm->forward(
      maybe_dropout(attended, attended_dropout, is_training()) + x);    // (..., C)
  const torch::Tensor h = torch::gelu(intermediate_dense->forward(a));  // (..., I)
  return output_norm->forward(
      maybe_dropout(output_dense->forward(h), config_.hidden_dropout_prob(), is_training()) +
      a);  // (..., C)
}

bool HfBertLayerImpl::has_adapters() const {
  for (const nn::AdaptedLinear* linear :
       {&query, &key, &value, &attention_dense, &intermediate_dense, &output_dense})
    if ((*linear)->has_lora())
      return true;
  return false;
}

double HfBertLayerImpl::dropout() const {
  return std::max(config_.hidden_dropout_prob(), config_.attention_probs_dropout_prob());
}

bool HfBertLayerImpl::runs_fused(const torch::Tensor& x, int64_t keys) const {
  if (has_adapters())
    return false;
  for (const torch::Tensor& parameter : parameters())
    if (parameter.scalar_type() != x.scalar_type())
      return false;  // frozen weights stored narrower
  return nn::use_fused_block(x, dropout(), is_training(), keys);
}

nn::PostLnBlockParameters HfBertLayerImpl::fused_parameters() const {
  return {query->weight,
          key->weight,
          value->weight,
          query->bias,
          key->bias,
          value->bias,
          attention_dense->weight,
          attention_dense->bias,
          attention_norm->weight,
          attention_norm->bias,
          intermediate_dense->weight,
          intermediate_dense->bias,
          output_dense->weight,
          output_dense->bias,
          output_norm->weight,
          output_norm->bias};
}

torch::Tensor HfBertLayerImpl::fused_forward(const torch::Tensor& x, const nn::BlockRows& rows) {
  return nn::fused_post_ln_block(x, fused_parameters(),
                                 {config_.num_attention_heads(), config_.layer_norm_eps()},
                                 rows);  // (N, C)
}

HfBertImpl::HfBertImpl(const HfBertConfig& config) : config_(config) {
  auto bert = register_level(*this, root_name(config));
  auto embeddings = register_level(*bert, "embeddings");
  const int64_t hidden = config.hidden_size();
  const int64_t width = config.embedding_width();
  word_embeddings = embeddings->register_module("word_embeddings",
                                                torch::nn::Embedding(config.vocab_size(), width));
  position_embeddings = embeddings->register_module(
      "position_embeddings", torch::nn::Embedding(config.max_position_embeddings(), width));
  if (config.type_vocab_size() > 0) {
    token_type_embeddings = embeddings->register_module(
        "token_type_embeddings", torch::nn::Embedding(config.type_vocab_size(), width));
  }
  embeddings_norm = embeddings->register_module(
      "LayerNorm",
      torch::nn::LayerNorm(torch::nn::LayerNormOptions({width}).eps(config.layer_norm_eps())));
  if (width != hidden) {
    embeddings_project =
        bert->register_module("embeddings_project", torch::nn::Linear(width, hidden));
  }
  layer = register_level(*bert, config.is_distilbert() ? "transformer" : "encoder")
              ->register_module("layer", torch::nn::ModuleList());
  for (int64_t i = 0; i < config.num_hidden_layers(); ++i)
    layer->push_back(HfBertLayer(config));
  if (config.is_distilbert()) {
    head_dense = register_module("pre_classifier", torch::nn::Linear(hidden, hidden));
    head_output = register_module("classifier", torch::nn::Linear(hidden, config.num_labels()));
  } else if (has_head_module(config)) {
    auto head = register_level(*this, "classifier");
    head_dense = head->register_module("dense", torch::nn::Linear(hidden, hidden));
    head_output = head->register_module("out_proj", torch::nn::Linear(hidden, config.num_labels()));
  } else {
    head_dense = register_level(*bert, "pooler")
                     ->register_module("dense", torch::nn::Linear(hidden, hidden));
    head_output = register_module("classifier", torch::nn::Linear(hidden, config.num_labels()));
  }
  // transformers' _init_weights for the parts a pretrained encoder may lack.
  torch::NoGradGuard no_grad;
  for (torch::nn::Linear* linear : {&head_dense, &head_output}) {
    torch::nn::init::normal_((*linear)->weight, 0.0, config.initializer_range());
    torch::nn::init::zeros_((*linear)->bias);
  }
}

void HfBertImpl::set_checkpointing(nn::CheckpointPolicy policy) {
  nn::validate(policy);
  checkpointing_ = policy;
}

torch::Tensor HfBertImpl::position_ids(const torch::Tensor& input_ids) const {
  if (!config_.is_roberta())
    return torch::arange(
        input_ids.size(1),
        torch::TensorOptions().dtype(torch::kLong).device(input_ids.device()));  // (T)
  // transformers' create_position_ids_from_input_ids: real tokens count from pad + 1, padding
  // (any token of the pad id) stays at pad.
  const torch::Tensor real = input_ids.ne(config_.pad_token_id()).to(torch::kLong);  // (B, T)
  return real.cumsum(1) * real + config_.pad_token_id();                             // (B, T)
}

torch::Tensor HfBertImpl::embed(const torch::Tensor& ids, const torch::Tensor& types,
                                const torch::Tensor& positions) {
  // The word embeddings' gradient: the rows used (nn/embedding.h), 30,522 of them in BERT.
  torch::Tensor x = nn::embedding(word_embeddings->weight, ids) +
                    position_embeddings->forward(positions);  // (..., C)
  if (token_type_embeddings)
    x = x + token_type_embeddings->forward(types);
  x = maybe_dropout(embeddings_norm->forward(x), config_.hidden_dropout_prob(), is_training());
  return embeddings_project ? nn::linear(embeddings_project, x) : x;  // (..., C)
}

torch::Tensor HfBertImpl::encode(const torch::Tensor& input_ids,
                                 const torch::Tensor& attention_mask,
                                 const torch::Tensor& token_type_ids) {
  const torch::Tensor types = checked_token_types(input_ids, token_type_ids);  // (B, T)
  const nn::AttentionMask mask =
      attention_mask_of(attention_mask, input_ids, /*causal=*/false, display_name(config_));
  return run_layers(layer, checkpointing_, is_training(),
                    embed(input_ids, types, position_ids(input_ids)),
                    [layers = layer, mask](size_t i, const torch::Tensor& in) {
                      return layers->ptr(i)->as<HfBertLayer>()->forward(in, mask);  // (B, T, C)
                    });
}

torch::Tensor HfBertImpl::encode_first_tokens(const torch::Tensor& input_ids,
                                              const torch::Tensor& attention_mask,
                                              const torch::Tensor& token_type_ids) {
  const torch::Tensor types = checked_token_types(input_ids, token_type_ids);  // (B, T)
  const nn::PackedTokens tokens = nn::pack_tokens(attention_mask, nn::kPackedRowMultiple);
  const torch::Tensor positions =
      config_.is_roberta() ? tokens.pack(position_ids(input_ids)) : tokens.positions;  // (N + F)
  const torch::Tensor x = embed(tokens.pack(input_ids), tokens.pack(types), positions);
  // The last layer computes the first tokens only: nothing reads the others' outputs.
  return run_layers(layer, checkpointing_, is_training(), x,
                    [layers = layer, tokens](size_t i, const torch::Tensor& in) {
                      const bool last = i + 1 == layers->size();
                      return layers->ptr(i)->as<HfBertLayer>()->forward(in, tokens, last);
                    });  // (B, C)
}

torch::Tensor HfBertImpl::checked_token_types(const torch::Tensor& input_ids,
                                              const torch::Tensor& token_type_ids) const {
  check_input_ids(input_ids, display_name(config_),
                  config_.is_roberta() ? "max_position_embeddings - pad_token_id - 1"
                                       : "max_position_embeddings",
                  config_.max_length());
  BB_CHECK_INPUT(!token_type_ids.defined() || token_type_ids.sizes() == input_ids.sizes(),
                 display_name(config_), "'s token_type_ids must have the shape of input_ids ",
                 input_ids.sizes(), ", got ", token_type_ids.sizes());
  BB_CHECK_INPUT(!token_type_ids.defined() || token_type_embeddings, display_name(config_),
                 " has no token types; pass no token_type_ids");
  return token_type_ids.defined() ? token_type_ids : torch::zeros_like(input_ids);  // (B, T)
}

bool HfBertImpl::packs(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) const {
  if (!skip_padding_ || !attention_mask.defined() || attention_mask.sizes() != input_ids.sizes() ||
      input_ids.dim() != 2 || input_ids.size(1) == 0)
    return false;
  // transformers pools position 0 even where it is padding; only a real [CLS] is packed. Without
  // padding it still pays: the last layer computes the [CLS] rows only (docs/PRETRAINED.md).
  return attention_mask.select(1, 0).ne(0).all().item<bool>();
}

torch::Tensor HfBertImpl::forward(const torch::Tensor& input_ids,
                                  const torch::Tensor& attention_mask,
                                  const torch::Tensor& token_type_ids) {
  const torch::Tensor first =
      packs(input_ids, attention_mask)
          ? encode_first_tokens(input_ids, attention_mask, token_type_ids)
          : encode(input_ids, attention_mask, token_type_ids).select(1, 0);  // (B, C)
  // BERT: classifier(dropout(tanh(pooler(first)))); RoBERTa drops out before its dense too, and
  // ELECTRA, with GELU for tanh; DistilBERT: classifier(dropout(relu(pre_classifier(first)))).
  const double dropout = config_.classifier_dropout();
  const torch::Tensor into =
      has_head_module(config_) ? maybe_dropout(first, dropout, is_training()) : first;  // (B, C)
  const torch::Tensor dense = nn::linear(head_dense, into);                             // (B, C)
  const torch::Tensor pooled = config_.is_distilbert() ? torch::relu(dense)
                               : config_.is_electra()  ? torch::gelu(dense)
                                                       : torch::tanh(dense);
  return nn::linear(head_output, maybe_dropout(pooled, dropout, is_training()));  // (B, labels)
}

LoadedHfBert load_hf_bert(const std::string& directory, int64_t num_labels) {
  io::HfConfig reader = io::HfConfig::read(directory);
  HfBertConfig config = read_hf_bert_config(reader);
  BB_CHECK_INPUT(num_labels >= 0, "load_hf_bert: num_labels = ", num_labels, " must be >= 0");
  // A head for another number of classes is replaced by a fresh one, as transformers'
  // ignore_mismatched_sizes does.
  std::vector<std::string> ignored = {"embeddings.position_ids"};
  const bool roberta = config.is_roberta();
  if (num_labels > 0 && num_labels != config.num_labels()) {
    config.num_labels(num_labels);
    if (has_head_module(config))
      ignored.insert(ignored.end(), {"classifier.out_proj.weight", "classifier.out_proj.bias"});
    else
      ignored.insert(ignored.end(), {"classifier.weight", "classifier.bias"});
  }
  // The heads of pre-training checkpoints that a classifier drops, as transformers does.
  const std::vector<std::string> unused =
      roberta ? std::vector<std::string>{"lm_head.", "roberta.pooler.", "pooler."}
      : config.is_distilbert()
          ? std::vector<std::string>{"vocab_transform.", "vocab_layer_norm.", "vocab_projector."}
      : config.is_electra()
          ? std::vector<std::string>{"discriminator_predictions.", "generator_predictions.",
                                     "generator_lm_head."}
          : std::vector<std::string>{"cls."};
  LoadedHfBert loaded;
  loaded.model = HfBert(config);
  HfLoadResult result =
      load_hf_weights(*loaded.model, io::read_hf_weights(directory),
                      HfLoadOptions()
                          .optional_prefix(root_name(config) + ".")
                          .ignored_suffixes(ignored)
                          .fresh_prefixes({"classifier.", "bert.pooler.", "pre_classifier."})
                          .unused_prefixes(unused),
                      directory);
  loaded.fresh = std::move(result.fresh);
  loaded.unused = std::move(result.unused);
  return loaded;
}

}  // namespace bigbatch::models
