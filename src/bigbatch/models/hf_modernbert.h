// ModernBERT as Hugging Face's transformers defines it (ModernBertForSequenceClassification over
// ModernBertModel), with the checkpoint's own names: a pre-LN encoder without biases, rotary
// positions, local attention over a window on most layers and global attention on every third,
// and a gated GELU feed-forward network. A pretrained answerdotai/ModernBERT-base (a
// ModernBertForMaskedLM) loads as it is and gets a classification head.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bigbatch/io/hf_config.h"
#include "bigbatch/nn/attention.h"
#include "bigbatch/nn/lora.h"
#include "bigbatch/nn/packed_tokens.h"
#include "bigbatch/nn/recompute.h"

namespace bigbatch::models {

/// How the classifier pools the last hidden state (config.json's classifier_pooling).
enum class ModernBertPooling {
  kCls,   ///< "cls": the first token's row
  kMean,  ///< "mean": the mean over the real tokens (attention_mask 1)
};

/// The fields of a ModernBERT config.json that bigbatch implements (docs/PRETRAINED.md).
struct HfModernBertConfig {
  TORCH_ARG(int64_t, vocab_size) = 50368;
  TORCH_ARG(int64_t, hidden_size) = 768;
  TORCH_ARG(int64_t, intermediate_size) = 1152;  ///< the gated width: Wi has twice as many outputs
  TORCH_ARG(int64_t, num_hidden_layers) = 22;
  TORCH_ARG(int64_t, num_attention_heads) = 12;
  TORCH_ARG(int64_t, max_position_embeddings) = 8192;
  TORCH_ARG(double, norm_eps) = 1e-5;
  TORCH_ARG(bool, norm_bias) = false;        ///< biases on the LayerNorms
  TORCH_ARG(bool, attention_bias) = false;   ///< biases on Wqkv and the attention's Wo
  TORCH_ARG(bool, mlp_bias) = false;         ///< biases on Wi and the MLP's Wo
  TORCH_ARG(bool, classifier_bias) = false;  ///< a bias on head.dense (the classifier has one)
  /// The keys a local layer's query attends to: those at most local_attention / 2 away.
  TORCH_ARG(int64_t, local_attention) = 128;
  /// Per layer, whether its attention is local (layer_types "sliding_attention"; by default every
  /// layer but each global_attn_every_n_layers-th from the first).
  TORCH_ARG(std::vector<bool>, sliding_layers);
  TORCH_ARG(double, global_rope_theta) = 160000.0;  ///< RoPE's base on the global layers
  TORCH_ARG(double, local_rope_theta) = 10000.0;    ///< and on the local ones
  TORCH_ARG(ModernBertPooling, classifier_pooling) = ModernBertPooling::kCls;
  TORCH_ARG(double, embedding_dropout) = 0.0;
  /// On the attention probabilities and on the attention's output.
  TORCH_ARG(double, attention_dropout) = 0.0;
  TORCH_ARG(double, mlp_dropout) = 0.0;
  TORCH_ARG(double, classifier_dropout) = 0.0;
  TORCH_ARG(double, initializer_range) = 0.02;  ///< of a freshly initialised head
  TORCH_ARG(int64_t, num_labels) = 2;           ///< the classifier's outputs

 public:  // TORCH_ARG leaves the section private
  /// Whether layer `layer`'s attention is local.
  bool is_sliding(int64_t layer) const;
  /// The window of layer `layer` as nn::AttentionMask takes it: local_attention / 2 + 1 (keys
  /// less than that far away) on a local layer, 0 (every key) on a global one.
  int64_t attention_window(int64_t layer) const;
  /// head_dim: hidden_size / num_attention_heads.
  int64_t head_dim() const { return hidden_size_ / num_attention_heads_; }
};

/// Reads a config of model_type "modernbert", in transformers 5's form (layer_types,
/// rope_parameters per layer type) or the older one the Hub's checkpoints carry
/// (global_attn_every_n_layers, global_rope_theta, local_rope_theta); num_labels is the length of
/// id2label when the config has one, else 2. Refuses, naming them, settings bigbatch does not
/// implement (an activation other than exact gelu, scaled RoPE, a problem_type other than
/// single-label classification) and any unknown field.
HfModernBertConfig read_hf_modernbert_config(io::HfConfig& config);

/// LayerNorm with or without a bias (ModernBERT's norm_bias), as torch.nn.LayerNorm(bias=...).
class BiasOptionalLayerNormImpl : public torch::nn::Module {
 public:
  BiasOptionalLayerNormImpl(int64_t width, double eps, bool with_bias);
  /// x (..., width) -> (..., width)
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;  ///< bias undefined without one

 private:
  int64_t width_;
  double eps_;
};
/// Module holder for BiasOptionalLayerNormImpl.
TORCH_MODULE(BiasOptionalLayerNorm);

/// ModernBertEncoderLayer: h = x + attn.Wo(attention(rotary(attn.Wqkv(attn_norm(x))))), then
/// h + mlp.Wo(gelu(input) * gate) with input and gate the halves of mlp.Wi(mlp_norm(h)). Layer 0
/// has no attn_norm (transformers' Identity).
class HfModernBertLayerImpl : public torch::nn::Module {
 public:
  /// Layer `layer` (0-based) of the model.
  HfModernBertLayerImpl(const HfModernBertConfig& config, int64_t layer);
  /// x (B, T, C), cos and sin (T, D) of the layer's RoPE, the padding mask over the T keys ->
  /// (B, T, C)
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const nn::AttentionMask& mask);
  /// The same layer on the real tokens only: x (N + F, C) of `tokens`, whose rows are each a
  /// prefix of real tokens (right padding), cos and sin (L, D) -> (N + F, C)
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const nn::PackedTokens& tokens);

  BiasOptionalLayerNorm attn_norm{nullptr};     ///< null on layer 0
  nn::AdaptedLinear qkv_projection{nullptr};    ///< attn.Wqkv: queries, keys, values (C -> 3C)
  nn::AdaptedLinear attention_output{nullptr};  ///< attn.Wo
  BiasOptionalLayerNorm mlp_norm{nullptr};
  nn::AdaptedLinear mlp_input{nullptr};   ///< mlp.Wi: input and gate (C -> 2 * intermediate)
  nn::AdaptedLinear mlp_output{nullptr};  ///< mlp.Wo

 private:
  /// Attention on compact rows: qkv (B, T, 3C) -> (B, T, C), before Wo.
  torch::Tensor attend(const torch::Tensor& qkv, const torch::Tensor& cos, const torch::Tensor& sin,
                       const torch::Tensor& padding);
  /// What follows attention: x and the attention's output before Wo, both (..., C) -> (..., C)
  torch::Tensor after_attention(const torch::Tensor& x, const torch::Tensor& attended);

  HfModernBertConfig config_;
  int64_t window_;  ///< nn::AttentionMask::window; 0 on a global layer
};
/// Module holder for HfModernBertLayerImpl.
TORCH_MODULE(HfModernBertLayer);

/// ModernBertForSequenceClassification: `model` (`embeddings.tok_embeddings`,
/// `embeddings.norm`, `layers.N`, `final_norm`), `head` (`dense`, GELU, `norm`: the prediction
/// head a ModernBertForMaskedLM checkpoint already has) and `classifier` Linear(hidden,
/// num_labels), on the first token or the mean of the real tokens (classifier_pooling).
class HfModernBertImpl : public torch::nn::Module {
 public:
  explicit HfModernBertImpl(const HfModernBertConfig& config);
  /// input_ids (B, T) int64; attention_mask (B, T), 1 at real tokens and 0 at padding, or
  /// undefined -> last hidden state after final_norm (B, T, hidden)
  torch::Tensor encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});
  /// The same inputs -> logits (B, num_labels). With skip_padding() and a mask whose rows are
  /// each real tokens then padding (right padding), the encoder runs on the real tokens only
  /// (nn::PackedTokens): the same logits up to float rounding, less work.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});
  const HfModernBertConfig& config() const { return config_; }
  /// Chooses which layers forward() checkpoints in training (nn::checkpoint, one layer at a
  /// time); throws InputError for an invalid policy.
  void set_checkpointing(nn::CheckpointPolicy policy);
  /// The checkpointing policy; CheckpointMode::kNone unless set_checkpointing was called.
  const nn::CheckpointPolicy& checkpointing() const { return checkpointing_; }
  /// Whether forward() skips the padding (default true).
  void set_skip_padding(bool skip) { skip_padding_ = skip; }
  bool skip_padding() const { return skip_padding_; }

  torch::nn::Embedding tok_embeddings{nullptr};
  BiasOptionalLayerNorm embeddings_norm{nullptr};
  torch::nn::ModuleList layers{nullptr};
  BiasOptionalLayerNorm final_norm{nullptr};
  torch::nn::Linear head_dense{nullptr};
  BiasOptionalLayerNorm head_norm{nullptr};
  torch::nn::Linear classifier{nullptr};

 private:
  /// Embeddings of ids (...) int64 -> (..., C), normed
  torch::Tensor embed(const torch::Tensor& ids);
  /// The RoPE tables of every layer for T positions, in x's dtype: {cos, sin} (T, D) each, per
  /// layer.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> rope_tables(int64_t time,
                                                                   const torch::Tensor& x) const;
  /// Whether forward() runs the encoder on the real tokens only (see forward()).
  bool packs(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) const;
  /// The pooled last hidden state, computed on the real tokens only -> (B, C)
  torch::Tensor pooled_packed(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);

  HfModernBertConfig config_;
  torch::Tensor global_frequencies_, local_frequencies_;  ///< (D / 2) float32 each
  nn::CheckpointPolicy checkpointing_;
  bool skip_padding_ = true;
};
/// Module holder for HfModernBertImpl.
TORCH_MODULE(HfModernBert);

/// A ModernBERT classifier loaded from a model directory, and what the checkpoint did not hold
/// or the classifier does not use.
struct LoadedHfModernBert {
  HfModernBert model{nullptr};
  /// Tensors freshly initialised because the checkpoint lacks them (a masked-LM checkpoint has no
  /// classifier; a bare ModernBertModel no head either), by name.
  std::vector<std::string> fresh;
  /// The checkpoint's tensors of the masked-LM head's decoder (decoder.bias; its weight is tied
  /// to the embeddings), skipped.
  std::vector<std::string> unused;
};

/// The ModernBERT of the model directory `directory` as a classifier of `num_labels` classes (0:
/// the config's id2label, else 2), in float32. A checkpoint of the bare encoder (no "model."
/// prefix) loads; a missing head or classifier is initialised afresh and listed in `fresh`, and
/// so is a classifier for another number of classes than `num_labels`. Throws InputError naming
/// the directory and what is wrong with it.
LoadedHfModernBert load_hf_modernbert(const std::string& directory, int64_t num_labels = 0);

}  // namespace bigbatch::models
