// The Llama family as Hugging Face's transformers defines it (LlamaForCausalLM; Mistral, Qwen2
// with its q/k/v biases, Qwen3 with its query and key norms, each with or without a sliding
// window; Gemma 2 and Gemma 3's text model with their variations on the layer), with the
// checkpoint's own names.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bigbatch/io/hf_config.h"
#include "bigbatch/models/kv_cache.h"
#include "bigbatch/nn/attention.h"
#include "bigbatch/nn/lora.h"
#include "bigbatch/nn/recompute.h"

namespace bigbatch::models {

/// How RoPE's frequencies are scaled (config.json's rope_parameters or rope_scaling).
enum class RopeScaling {
  kNone,    ///< rope_type "default"
  kLinear,  ///< "linear": every frequency divided by factor
  kLlama3,  ///< "llama3": low frequencies divided by factor, a smooth band between
};

/// The fields of a Llama-family config.json that bigbatch implements (docs/PRETRAINED.md).
struct HfLlamaConfig {
  /// llama, mistral, qwen2, qwen3, gemma2 or gemma3_text
  TORCH_ARG(std::string, model_type) = "llama";
  TORCH_ARG(int64_t, vocab_size) = 32000;
  TORCH_ARG(int64_t, hidden_size) = 4096;
  TORCH_ARG(int64_t, intermediate_size) = 11008;
  TORCH_ARG(int64_t, num_hidden_layers) = 32;
  TORCH_ARG(int64_t, num_attention_heads) = 32;
  TORCH_ARG(int64_t, num_key_value_heads) = 32;  ///< grouped-query attention when fewer
  TORCH_ARG(int64_t, head_dim) = 128;
  TORCH_ARG(int64_t, max_position_embeddings) = 4096;
  TORCH_ARG(double, rms_norm_eps) = 1e-6;
  TORCH_ARG(double, rope_theta) = 10000.0;
  TORCH_ARG(RopeScaling, rope_scaling) = RopeScaling::kNone;
  TORCH_ARG(double, rope_factor) = 1.0;
  TORCH_ARG(double, rope_low_freq_factor) = 1.0;           ///< llama3
  TORCH_ARG(double, rope_high_freq_factor) = 4.0;          ///< llama3
  TORCH_ARG(int64_t, rope_original_max_positions) = 8192;  ///< llama3
  TORCH_ARG(bool, qkv_bias) = false;  ///< biases on q_proj, k_proj, v_proj (Qwen2: always)
  TORCH_ARG(bool, o_bias) = false;    ///< a bias on o_proj (Llama's attention_bias)
  TORCH_ARG(bool, mlp_bias) = false;
  /// RMSNorm over each head's queries and keys before RoPE (Qwen3's q_norm and k_norm)
  TORCH_ARG(bool, qk_norm) = false;
  TORCH_ARG(double, attention_dropout) = 0.0;
  TORCH_ARG(bool, tie_word_embeddings) = false;
  /// The keys a query of a sliding layer attends to: itself and the sliding_window - 1 before it.
  TORCH_ARG(int64_t, sliding_window) = 0;
  /// Per layer, whether its attention slides (transformers' layer_types "sliding_attention");
  /// empty: none does.
  TORCH_ARG(std::vector<bool>, sliding_layers);
  /// The RoPE theta of the sliding layers, unscaled (Gemma 3's local base frequency); 0: they
  /// take the RoPE of the others.
  TORCH_ARG(double, sliding_rope_theta) = 0.0;

  // Gemma 2's and 3's variations on the layer.
  /// Every RMSNorm scales by 1 + weight, in float32 (its weights start at 0).
  TORCH_ARG(bool, norm_plus_one) = false;
  /// The embeddings times sqrt(hidden_size), the factor rounded to the embeddings' dtype.
  TORCH_ARG(bool, scale_embeddings) = false;
  /// GELU (tanh approximation) gates the MLP instead of SiLU.
  TORCH_ARG(bool, gelu_gate) = false;
  /// post_attention_layernorm norms the attention's output, and pre_feedforward_layernorm and
  /// post_feedforward_layernorm the MLP's input and output, before each joins the residual.
  TORCH_ARG(bool, sandwich_norms) = false;
  /// Attention scores scaled by query_pre_attn_scalar^-1/2; 0: by head_dim^-1/2.
  TORCH_ARG(double, query_pre_attn_scalar) = 0.0;
  /// logits = cap * tanh(logits / cap); 0: none.
  TORCH_ARG(double, final_logit_softcapping) = 0.0;
  /// Attention scores soft-capped alike before the mask (Gemma 2); 0: none.
  TORCH_ARG(double, attn_logit_softcapping) = 0.0;

 public:  // TORCH_ARG leaves the section private
  /// Whether layer `layer`'s attention slides.
  bool is_sliding(int64_t layer) const;
  /// The window of layer `layer`'s attention: sliding_window on a sliding layer, else 0 (none).
  int64_t attention_window(int64_t layer) const;
};

/// Per layer, whether `layer_types` (transformers' list, not null) names it "sliding_attention";
/// refuses, naming `origin`, a list of another length than `layers` and any other type. With
/// `sliding_allowed` false only "full_attention" is accepted, `why_not` saying why. (The Llama
/// family's and ModernBERT's layer_types.)
std::vector<bool> sliding_layer_types(const nlohmann::json& layer_types, int64_t layers,
                                      bool sliding_allowed, const std::string& why_not,
                                      const std::string& origin);

/// Reads a config of model_type llama, mistral, qwen2, qwen3, gemma2 or gemma3_text. Refuses,
/// naming them, what bigbatch does not implement (an activation other than silu, or
/// gelu_pytorch_tanh for Gemma; RoPE types other than default, linear and llama3; partial rotary
/// embeddings; pretraining_tp > 1; bidirectional attention) and unknown fields.
HfLlamaConfig read_hf_llama_config(io::HfConfig& config);

/// RMSNorm as LlamaRMSNorm computes it: in float32, x * rsqrt(mean(x^2) + eps), cast back to the
/// input's dtype, then times `weight`; with `plus_one` (Gemma3RMSNorm) times 1 + `weight`, the
/// weight starting at 0.
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t width, double eps, bool plus_one = false);
  /// x (..., width) -> (..., width)
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
  bool plus_one_;
};
/// Module holder for RmsNormImpl.
TORCH_MODULE(RmsNorm);

/// RoPE's inverse frequencies (head_dim / 2, float32), computed as transformers computes them.
torch::Tensor rope_inverse_frequencies(const HfLlamaConfig& config);
/// Those of the sliding layers: the same unless config.sliding_rope_theta() is set.
torch::Tensor sliding_rope_inverse_frequencies(const HfLlamaConfig& config);

/// LlamaAttention: q_proj, k_proj, v_proj -> (Qwen3: q_norm and k_norm per head) -> RoPE on q and
/// k -> keys and values repeated per group -> attention (over a sliding window on a sliding
/// layer) -> o_proj.
class HfLlamaAttentionImpl : public torch::nn::Module {
 public:
  /// The attention of layer `layer` (which decides its sliding window).
  HfLlamaAttentionImpl(const HfLlamaConfig& config, int64_t layer);
  /// x (B, T, hidden), cos and sin (T, head_dim), the mask over the keys (its window is the
  /// layer's) -> (B, T, hidden). With a `cache` slot the T tokens' keys and values join those it
  /// holds, and the queries attend to all of them; a sliding layer's slot holds only the last
  /// sliding_window - 1.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const nn::AttentionMask& mask, KvCacheSlot cache = {});
  nn::AdaptedLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RmsNorm q_norm{nullptr}, k_norm{nullptr};  ///< null unless config.qk_norm()

 private:
  HfLlamaConfig config_;
  int64_t window_;  ///< 0: none
};
/// Module holder for HfLlamaAttentionImpl.
TORCH_MODULE(HfLlamaAttention);

/// LlamaMLP: down_proj(silu(gate_proj(x)) * up_proj(x)); Gemma's GELU-tanh instead of silu.
class HfLlamaMlpImpl : public torch::nn::Module {
 public:
  explicit HfLlamaMlpImpl(const HfLlamaConfig& config);
  /// x (B, T, hidden) -> (B, T, hidden)
  torch::Tensor forward(const torch::Tensor& x);
  nn::AdaptedLinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  bool gelu_gate_;
};
/// Module holder for HfLlamaMlpImpl.
TORCH_MODULE(HfLlamaMlp);

/// LlamaDecoderLayer: x + self_attn(input_layernorm(x)), then + mlp(post_attention_layernorm(.)).
/// With sandwich norms (Gemma3DecoderLayer): x + post_attention_layernorm(self_attn(
/// input_layernorm(x))), then + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(.))).
class HfLlamaLayerImpl : public torch::nn::Module {
 public:
  /// Layer `layer` (0-based) of the model.
  HfLlamaLayerImpl(const HfLlamaConfig& config, int64_t layer);
  /// x (B, T, hidden), cos and sin (T, head_dim), the mask, the layer's place in a KV cache ->
  /// (B, T, hidden)
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const nn::AttentionMask& mask, KvCacheSlot cache = {});
  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  /// null unless config.sandwich_norms()
  RmsNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};
  HfLlamaAttention self_attn{nullptr};
  HfLlamaMlp mlp{nullptr};
};
/// Module holder for HfLlamaLayerImpl.
TORCH_MODULE(HfLlamaLayer);

/// LlamaForCausalLM: `model` (`embed_tokens`, `layers.N`, `norm`) and, unless the embeddings are
/// tied, `lm_head`. Parameter names are the checkpoint's (model.layers.0.self_attn.q_proj.weight).
/// Gemma2ForCausalLM and Gemma3ForCausalLM too: scaled embeddings, and the logits soft-capped
/// where the config says.
class HfLlamaImpl : public torch::nn::Module {
 public:
  explicit HfLlamaImpl(const HfLlamaConfig& config);
  /// input_ids (B, T) int64, T <= max_position_embeddings; attention_mask (B, T), 1 at real
  /// tokens and 0 at right padding, or undefined -> logits (B, T, vocab_size)
  torch::Tensor forward(const torch::Tensor& input_ids,
                        const torch::Tensor& attention_mask = torch::Tensor());
  /// input_ids (B, T) following the tokens `cache` holds (at positions from cache.length() on)
  /// -> logits (B, T, vocab_size), the same as forward() of all of them gives at those positions;
  /// their keys and values join the cache. T == 1 once the cache holds any (KvCache::check_next).
  /// Layers are not checkpointed.
  torch::Tensor forward(const torch::Tensor& input_ids, KvCache& cache);
  const HfLlamaConfig& config() const { return config_; }
  /// Chooses which layers forward() checkpoints in training (nn::checkpoint, one layer at a
  /// time); throws InputError for an invalid policy.
  void set_checkpointing(nn::CheckpointPolicy policy);
  /// The checkpointing policy; CheckpointMode::kNone unless set_checkpointing was called.
  const nn::CheckpointPolicy& checkpointing() const { return checkpointing_; }

  std::shared_ptr<torch::nn::Module> model;  ///< LlamaModel: embed_tokens, layers, norm
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RmsNorm norm{nullptr};
  torch::Tensor lm_head_weight;  ///< undefined when tied to embed_tokens

 private:
  /// The forward of both overloads: positions from the cache's length, layers checkpointed only
  /// without a cache.
  torch::Tensor logits(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                       KvCache* cache);
  HfLlamaConfig config_;
  nn::CheckpointPolicy checkpointing_;
};
/// Module holder for HfLlamaImpl.
TORCH_MODULE(HfLlama);

/// The Llama-family model of the model directory `directory`, in float32, with its weights.
/// Throws InputError naming the directory and what is wrong with it.
HfLlama load_hf_llama(const std::string& directory);

}  // namespace bigbatch::models
