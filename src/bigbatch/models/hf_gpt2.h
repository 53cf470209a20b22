// GPT-2 as Hugging Face's transformers defines it (GPT2LMHeadModel), with the checkpoint's own
// module and parameter names, so a model directory's safetensors load without renaming.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "bigbatch/io/hf_config.h"
#include "bigbatch/models/kv_cache.h"
#include "bigbatch/nn/attention.h"
#include "bigbatch/nn/lora.h"
#include "bigbatch/nn/recompute.h"

namespace bigbatch::models {

/// The fields of a GPT-2 config.json that bigbatch implements (docs/PRETRAINED.md).
struct HfGpt2Config {
  TORCH_ARG(int64_t, vocab_size) = 50257;
  TORCH_ARG(int64_t, n_positions) = 1024;  ///< the longest input
  TORCH_ARG(int64_t, n_embd) = 768;
  TORCH_ARG(int64_t, n_layer) = 12;
  TORCH_ARG(int64_t, n_head) = 12;
  TORCH_ARG(int64_t, n_inner) = 0;  ///< feed-forward width; 0 = 4 x n_embd
  TORCH_ARG(double, layer_norm_epsilon) = 1e-5;
  TORCH_ARG(double, embd_pdrop) = 0.1;
  TORCH_ARG(double, attn_pdrop) = 0.1;
  TORCH_ARG(double, resid_pdrop) = 0.1;
  TORCH_ARG(bool, tie_word_embeddings) = true;  ///< lm_head shares transformer.wte's weight
};

/// Reads a GPT-2 config (model_type "gpt2"). Refuses, naming them, settings bigbatch does not
/// implement (an activation other than gelu_new, scale_attn_weights false,
/// scale_attn_by_inverse_layer_idx, reorder_and_upcast_attn, cross-attention) and any field it
/// does not know.
HfGpt2Config read_hf_gpt2_config(io::HfConfig& config);

/// GPT2Attention: `c_attn` (C -> 3C) -> heads -> causal attention -> `c_proj` (C -> C). Both are
/// Hugging Face's Conv1D: linear layers whose weight is stored (in, out), the transpose of
/// torch::nn::Linear's (nn::AdaptedLinear with WeightLayout::kInOut).
class HfGpt2AttentionImpl : public torch::nn::Module {
 public:
  explicit HfGpt2AttentionImpl(const HfGpt2Config& config);
  /// x (B, T, C), the mask over the keys -> (B, T, C). With a `cache` slot the T tokens' keys
  /// and values join those it holds, and the queries attend to all of them.
  torch::Tensor forward(const torch::Tensor& x, const nn::AttentionMask& mask,
                        KvCacheSlot cache = {});
  nn::AdaptedLinear c_attn{nullptr}, c_proj{nullptr};

 private:
  int64_t heads_;
  double attn_pdrop_, resid_pdrop_;
};
/// Module holder for HfGpt2AttentionImpl.
TORCH_MODULE(HfGpt2Attention);

/// GPT2MLP: `c_fc` (C -> inner, Conv1D) -> gelu_new (tanh approximation) -> `c_proj` -> dropout.
class HfGpt2MlpImpl : public torch::nn::Module {
 public:
  explicit HfGpt2MlpImpl(const HfGpt2Config& config);
  /// x (B, T, C) -> (B, T, C)
  torch::Tensor forward(const torch::Tensor& x);
  nn::AdaptedLinear c_fc{nullptr}, c_proj{nullptr};

 private:
  double resid_pdrop_;
};
/// Module holder for HfGpt2MlpImpl.
TORCH_MODULE(HfGpt2Mlp);

/// GPT2Block: x + attn(ln_1(x)), then + mlp(ln_2(.)). Submodules `ln_1`, `attn`, `ln_2`, `mlp`.
class HfGpt2BlockImpl : public torch::nn::Module {
 public:
  explicit HfGpt2BlockImpl(const HfGpt2Config& config);
  /// x (B, T, C), the mask over the keys, the layer's place in a KV cache -> (B, T, C)
  torch::Tensor forward(const torch::Tensor& x, const nn::AttentionMask& mask,
                        KvCacheSlot cache = {});

  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  HfGpt2Attention attn{nullptr};
  HfGpt2Mlp mlp{nullptr};
};
/// Module holder for HfGpt2BlockImpl.
TORCH_MODULE(HfGpt2Block);

/// GPT2LMHeadModel: `transformer` (`wte`, `wpe`, `h.N`, `ln_f`) and, unless the embeddings are
/// tied, `lm_head`. Parameter names are the checkpoint's (transformer.h.0.attn.c_attn.weight).
class HfGpt2Impl : public torch::nn::Module {
 public:
  explicit HfGpt2Impl(const HfGpt2Config& config);
  /// input_ids (B, T) int64 in [0, vocab_size), T <= n_positions; attention_mask (B, T), 1 at
  /// real tokens and 0 at padding, or undefined for none -> logits (B, T, vocab_size)
  torch::Tensor forward(const torch::Tensor& input_ids,
                        const torch::Tensor& attention_mask = torch::Tensor());
  /// input_ids (B, T) following the tokens `cache` holds (at positions from cache.length() on)
  /// -> logits (B, T, vocab_size), the same as forward() of all of them gives at those positions;
  /// their keys and values join the cache. T == 1 once the cache holds any (KvCache::check_next).
  /// Layers are not checkpointed.
  torch::Tensor forward(const torch::Tensor& input_ids, KvCache& cache);

  const HfGpt2Config& config() const { return config_; }
  /// Chooses which layers forward() checkpoints in training (nn::checkpoint, one layer at a
  /// time); throws InputError for an invalid policy.
  void set_checkpointing(nn::CheckpointPolicy policy);
  /// The checkpointing policy; CheckpointMode::kNone unless set_checkpointing was called.
  const nn::CheckpointPolicy& checkpointing() const { return checkpointing_; }

  /// The GPT2Model inside: wte, wpe, h, ln_f.
  std::shared_ptr<torch::nn::Module> transformer;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  /// Undefined when the embeddings are tied (wte's weight is the head's).
  torch::Tensor lm_head_weight;

 private:
  /// The forward of both overloads: positions from the cache's length, layers checkpointed only
  /// without a cache.
  torch::Tensor logits(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                       KvCache* cache);
  HfGpt2Config config_;
  nn::CheckpointPolicy checkpointing_;
};
/// Module holder for HfGpt2Impl.
TORCH_MODULE(HfGpt2);

/// The GPT-2 of the model directory `directory`: built from its config.json
/// (read_hf_gpt2_config), in float32, with its weights (io::read_hf_weights, load_hf_weights).
/// A checkpoint saved as GPT2Model (no "transformer." prefix) loads too; the attention-mask
/// buffers of older checkpoints are skipped. Throws InputError naming the directory and what is
/// wrong with it.
HfGpt2 load_hf_gpt2(const std::string& directory);

}  // namespace bigbatch::models
