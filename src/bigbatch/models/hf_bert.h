// BERT as Hugging Face's transformers defines it (BertForSequenceClassification over BertModel),
// RoBERTa (RobertaForSequenceClassification, XLMRobertaForSequenceClassification: other positions
// and head), DistilBERT (DistilBertForSequenceClassification: other names, no token types,
// another head) and ELECTRA (ElectraForSequenceClassification: narrower embeddings projected to
// the width, another head), with the checkpoint's own names: a pretrained encoder
// (all-MiniLM-L6-v2, bert-base-uncased, roberta-base, distilbert-base-uncased,
// electra-base-discriminator) loads as it is and gets a classification head.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bigbatch/io/hf_config.h"
#include "bigbatch/nn/attention.h"
#include "bigbatch/nn/fused_post_ln_block.h"
#include "bigbatch/nn/lora.h"
#include "bigbatch/nn/packed_tokens.h"
#include "bigbatch/nn/recompute.h"

namespace bigbatch::models {

/// The fields of a BERT, RoBERTa or DistilBERT config.json that bigbatch implements
/// (docs/PRETRAINED.md), under BERT's names.
struct HfBertConfig {
  /// "bert"; "roberta" and "xlm-roberta": positions counted from pad_token_id + 1 over the
  /// tokens that are not padding, and RoBERTa's head (classifier.dense, classifier.out_proj);
  /// "distilbert": DistilBERT's names, no token types, no dropout on the attention output, and
  /// its head (pre_classifier, ReLU, classifier); "electra": embeddings of embedding_size
  /// projected to the width, RoBERTa's head with GELU for tanh.
  TORCH_ARG(std::string, model_type) = "bert";
  /// The embeddings' width; 0: hidden_size (ELECTRA's may be narrower, then projected).
  TORCH_ARG(int64_t, embedding_size) = 0;
  /// The padding token, which RoBERTa's positions skip (read for RoBERTa only).
  TORCH_ARG(int64_t, pad_token_id) = 0;
  TORCH_ARG(int64_t, vocab_size) = 30522;
  TORCH_ARG(int64_t, hidden_size) = 768;
  TORCH_ARG(int64_t, num_hidden_layers) = 12;
  TORCH_ARG(int64_t, num_attention_heads) = 12;
  TORCH_ARG(int64_t, intermediate_size) = 3072;
  TORCH_ARG(int64_t, max_position_embeddings) = 512;
  TORCH_ARG(int64_t, type_vocab_size) = 2;  ///< 0: no token types (DistilBERT)
  TORCH_ARG(double, layer_norm_eps) = 1e-12;
  TORCH_ARG(double, hidden_dropout_prob) = 0.1;
  TORCH_ARG(double, attention_probs_dropout_prob) = 0.1;
  TORCH_ARG(double, classifier_dropout) = 0.1;  ///< the config's, or hidden_dropout_prob
  TORCH_ARG(double, initializer_range) = 0.02;  ///< of a freshly initialised head
  TORCH_ARG(int64_t, num_labels) = 2;           ///< the classifier's outputs

 public:  // TORCH_ARG leaves the section private
  /// Whether positions and head are RoBERTa's (model_type "roberta" or "xlm-roberta").
  bool is_roberta() const { return model_type_ == "roberta" || model_type_ == "xlm-roberta"; }
  /// Whether names, layers and head are DistilBERT's (model_type "distilbert").
  bool is_distilbert() const { return model_type_ == "distilbert"; }
  /// Whether embeddings and head are ELECTRA's (model_type "electra").
  bool is_electra() const { return model_type_ == "electra"; }
  /// The embeddings' width: embedding_size, or hidden_size when that is 0.
  int64_t embedding_width() const { return embedding_size_ > 0 ? embedding_size_ : hidden_size_; }
  /// The longest input: max_position_embeddings, less RoBERTa's pad_token_id + 1 positions that
  /// no token takes (roberta-base: 514 - 2 = 512).
  int64_t max_length() const;
};

/// Reads a BERT, RoBERTa, DistilBERT or ELECTRA config (model_type "bert", "roberta",
/// "xlm-roberta", "distilbert" or "electra"; DistilBERT's dim, n_layers, ... under BERT's names);
/// num_labels is the length of id2label when the config has one, else 2 (the caller sets it from
/// the data). Refuses, naming them, settings bigbatch does not implement (an activation other than
/// exact gelu, relative position embeddings, sinusoidal ones, a decoder, cross-attention, a
/// problem_type other than single-label classification) and any unknown field.
HfBertConfig read_hf_bert_config(io::HfConfig& config);

/// BertLayer (post-LN): a = LayerNorm(x + dense(self-attention(x))), then
/// LayerNorm(a + output.dense(gelu(intermediate.dense(a)))). Submodules as transformers names
/// them: attention.self.{query,key,value}, attention.output.{dense,LayerNorm},
/// intermediate.dense, output.{dense,LayerNorm}; DistilBERT's TransformerBlock:
/// attention.{q_lin,k_lin,v_lin,out_lin}, sa_layer_norm, ffn.{lin1,lin2}, output_layer_norm.
/// Without adapters, and where nn::use_fused_block() says so, it runs as one autograd node
/// (nn::fused_post_ln_block) with the same parameters.
class HfBertLayerImpl : public torch::nn::Module {
 public:
  explicit HfBertLayerImpl(const HfBertConfig& config);
  /// x (B, T, C), the padding mask over the T keys -> (B, T, C)
  torch::Tensor forward(const torch::Tensor& x, const nn::AttentionMask& mask);
  /// The same layer on the real tokens only: x (N, C) of `tokens` -> (N, C). With `first_only`,
  /// only each row's first token is computed, attending to every real token -> (B, C).
  torch::Tensor forward(const torch::Tensor& x, const nn::PackedTokens& tokens,
                        bool first_only = false);
  /// Its parameters as nn::fused_post_ln_block takes them.
  nn::PostLnBlockParameters fused_parameters() const;
  /// Whether any of its products carries an adapter (LoRA), which keeps it composite.
  bool has_adapters() const;
  /// The dropout it draws in training: the larger of the config's hidden and attention dropout.
  double dropout() const;

  nn::AdaptedLinear query{nullptr}, key{nullptr}, value{nullptr}, attention_dense{nullptr};
  torch::nn::LayerNorm attention_norm{nullptr};
  nn::AdaptedLinear intermediate_dense{nullptr}, output_dense{nullptr};
  torch::nn::LayerNorm output_norm{nullptr};

 private:
  /// What follows attention: x and the projected attention output, both (..., C) -> (..., C)
  torch::Tensor after_attention(const torch::Tensor& x, const torch::Tensor& attended);
  /// Whether the layer runs as nn::fused_post_ln_block on `x` with `keys` keys a query: no
  /// adapters, every parameter in x's dtype, and nn::use_fused_block().
  bool runs_fused(const torch::Tensor& x, int64_t keys) const;
  /// x (N, C) placed by `rows` -> (N, C), by nn::fused_post_ln_block
  torch::Tensor fused_forward(const torch::Tensor& x, const nn::BlockRows& rows);

  HfBertConfig config_;
};
/// Module holder for HfBertLayerImpl.
TORCH_MODULE(HfBertLayer);

/// BertForSequenceClassification: `bert` (`embeddings`, `encoder.layer.N`, `pooler`) and
/// `classifier` Linear(hidden, num_labels), on the pooled [CLS] (dense + tanh). For RoBERTa,
/// RobertaForSequenceClassification: `roberta` (`embeddings`, `encoder.layer.N`) and
/// `classifier` (`dense` + tanh, `out_proj`) on <s>. For DistilBERT,
/// DistilBertForSequenceClassification: `distilbert` (`embeddings` without token types,
/// `transformer.layer.N`), `pre_classifier` + ReLU and `classifier` on [CLS]. For ELECTRA,
/// ElectraForSequenceClassification: `electra` (`embeddings`, `embeddings_project` where the
/// embeddings are narrower, `encoder.layer.N`) and `classifier` (`dense` + GELU, `out_proj`).
class HfBertImpl : public torch::nn::Module {
 public:
  explicit HfBertImpl(const HfBertConfig& config);
  /// input_ids (B, T) int64; attention_mask (B, T), 1 at real tokens and 0 at padding, or
  /// undefined; token_type_ids (B, T) or undefined (all 0) -> last hidden state (B, T, hidden)
  torch::Tensor encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                       const torch::Tensor& token_type_ids = {});
  /// The same inputs -> logits (B, num_labels). With skip_padding() and a mask whose rows all
  /// start with a real token, the encoder runs on the real tokens only (nn::PackedTokens) and its
  /// last layer on the first tokens only: the same logits up to float rounding, less work.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                        const torch::Tensor& token_type_ids = {});
  const HfBertConfig& config() const { return config_; }
  /// Chooses which layers forward() checkpoints in training (nn::checkpoint, one layer at a
  /// time); throws InputError for an invalid policy.
  void set_checkpointing(nn::CheckpointPolicy policy);
  /// The checkpointing policy; CheckpointMode::kNone unless set_checkpointing was called.
  const nn::CheckpointPolicy& checkpointing() const { return checkpointing_; }
  /// Whether forward() skips the padding (default true).
  void set_skip_padding(bool skip) { skip_padding_ = skip; }
  bool skip_padding() const { return skip_padding_; }

  /// token_type_embeddings is empty for DistilBERT.
  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr},
      token_type_embeddings{nullptr};
  torch::nn::LayerNorm embeddings_norm{nullptr};
  /// ELECTRA's projection of narrower embeddings to the width; empty otherwise.
  torch::nn::Linear embeddings_project{nullptr};
  torch::nn::ModuleList layer{nullptr};
  /// The head on the first token: BERT's pooler (bert.pooler.dense), tanh, and classifier;
  /// RoBERTa's classifier.dense, tanh, and classifier.out_proj; DistilBERT's pre_classifier,
  /// ReLU, and classifier; ELECTRA's classifier.dense, GELU, and classifier.out_proj.
  torch::nn::Linear head_dense{nullptr}, head_output{nullptr};

 private:
  /// The position of each token of input_ids (B, T): 0..T-1 -> (T), or RoBERTa's -> (B, T)
  torch::Tensor position_ids(const torch::Tensor& input_ids) const;
  /// Embeddings of ids, types and positions, all (...) int64 -> (..., C), normed
  torch::Tensor embed(const torch::Tensor& ids, const torch::Tensor& types,
                      const torch::Tensor& positions);
  /// Checks input_ids (B, T) and token_type_ids -> token_type_ids, zeros where undefined
  torch::Tensor checked_token_types(const torch::Tensor& input_ids,
                                    const torch::Tensor& token_type_ids) const;
  /// Whether forward() runs the encoder on the real tokens only (see forward()).
  bool packs(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) const;
  /// The first token's row of the last hidden state, computed on the real tokens only, and in the
  /// last layer on the first tokens only -> (B, C)
  torch::Tensor encode_first_tokens(const torch::Tensor& input_ids,
                                    const torch::Tensor& attention_mask,
                                    const torch::Tensor& token_type_ids);

  HfBertConfig config_;
  nn::CheckpointPolicy checkpointing_;
  bool skip_padding_ = true;
};
/// Module holder for HfBertImpl.
TORCH_MODULE(HfBert);

/// A BERT, RoBERTa, DistilBERT or ELECTRA classifier loaded from a model directory, and what the
/// checkpoint did not hold or the classifier does not use.
struct LoadedHfBert {
  HfBert model{nullptr};
  /// Tensors freshly initialised because the checkpoint lacks them (a sentence-transformers
  /// encoder has no classifier, and some no pooler), by name.
  std::vector<std::string> fresh;
  /// The checkpoint's tensors of heads the classifier has no use for, skipped: BERT's
  /// pre-training heads (cls.*, as bert-base-uncased has), RoBERTa's masked-LM head (lm_head.*)
  /// and pooler (roberta-base has both), DistilBERT's masked-LM head (vocab_transform,
  /// vocab_layer_norm, vocab_projector), ELECTRA's discriminator and generator heads.
  std::vector<std::string> unused;
};

/// The BERT, RoBERTa, DistilBERT or ELECTRA of the model directory `directory` as a classifier
/// of `num_labels` classes (0: the config's id2label, else 2), in float32. A checkpoint of the
/// bare encoder (no "bert.", "roberta.", "distilbert." or "electra." prefix) loads; a missing
/// classifier or pooler is initialised afresh and listed in `fresh`, and so is a classifier for
/// another number of classes than `num_labels`. Throws InputError naming the directory and what is
/// wrong with it.
LoadedHfBert load_hf_bert(const std::string& directory, int64_t num_labels = 0);

}  // namespace bigbatch::models
