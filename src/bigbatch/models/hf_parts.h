// Pieces the Hugging Face architectures (hf_gpt2, hf_llama, hf_bert, hf_modernbert) share: the
// empty modules that only name a level of a parameter path, the untied output head, the checks
// and mask of their inputs, and RoPE's tables.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "bigbatch/models/kv_cache.h"
#include "bigbatch/nn/attention.h"
#include "bigbatch/nn/recompute.h"

namespace bigbatch::models {

/// Registers an empty module `name` under `parent` that only names a level of the parameter
/// paths ("transformer", "attention", "output"), as transformers nests its modules.
std::shared_ptr<torch::nn::Module> register_level(torch::nn::Module& parent,
                                                  const std::string& name);

/// Registers `lm_head.weight` (vocab, hidden) under `root`, initialised normal(0, 0.02), for a
/// model whose output head is not tied to its input embeddings; returns it.
torch::Tensor register_untied_head(torch::nn::Module& root, int64_t vocab, int64_t hidden);

/// Checks that input_ids are int64 of shape (B, T) with 1 <= T <= `limit`; InputError names
/// `model` and `limit_field` (the config field of the limit) otherwise.
void check_input_ids(const torch::Tensor& input_ids, const std::string& model,
                     const std::string& limit_field, int64_t limit);

/// The attention mask of a model's forward: `causal`, with padding where `attention_mask` (B, T)
/// is 0 when it is defined. After `past` > 0 tokens held in a KV cache, none: the one new token
/// attends to every key (KvCache::check_next allows no more). InputError names `model` when the
/// mask's shape is not input_ids'.
nn::AttentionMask attention_mask_of(const torch::Tensor& attention_mask,
                                    const torch::Tensor& input_ids, bool causal,
                                    const std::string& model, int64_t past = 0);

/// RoPE's inverse frequencies theta^(-2i / dim) for i < dim / 2, in float32 as transformers'
/// default RoPE computes them. -> (dim / 2) float32
torch::Tensor default_rope_inverse_frequencies(double theta, int64_t dim);

/// RoPE's cos and sin at positions past .. past + time - 1 for `inverse_frequencies` (D / 2), in
/// float32 as transformers computes them, then in `like`'s dtype, on its device.
/// -> {cos, sin}, (T, D) each
std::pair<torch::Tensor, torch::Tensor> rotary_tables(const torch::Tensor& inverse_frequencies,
                                                      int64_t past, int64_t time,
                                                      const torch::Tensor& like);

/// One transformer layer of a model: layer `index` applied to x (B, T, C) -> (B, T, C). It is
/// called again during backward when the layer is checkpointed, so it must capture what it uses
/// (masks, rotary tables) by value.
using LayerCall = std::function<torch::Tensor(size_t index, const torch::Tensor& x)>;

/// Runs the `layers` in order on x (B, T, C) as `call(i, x)`; layer i runs under nn::checkpoint
/// with its own parameters when `training`, grad mode is on and `policy` applies to i. With a
/// `cache`, whose slots the calls extend, no layer is checkpointed (a recomputed layer would
/// extend it twice) and the cache counts the T tokens after the last layer.
torch::Tensor run_layers(const torch::nn::ModuleList& layers, const nn::CheckpointPolicy& policy,
                         bool training, torch::Tensor x, const LayerCall& call,
                         KvCache* cache = nullptr);

}  // namespace bigbatch::models
